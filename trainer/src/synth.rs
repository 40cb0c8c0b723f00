//! A family of synthetic, verifiable tasks (arithmetic, string and list problems) and
//! Chain-of-Agents trajectories that solve them with REAL sandbox observations.
//!
//! Every task comes with its answer computed here in Rust and a Python program that computes
//! it again; the program runs through the runtime's own `<code>` tool, so the observation in the
//! trajectory is byte for byte what `catena run` would show the model. A task whose observed
//! output disagrees with the expected answer is reported and dropped, so every trajectory
//! written is correct. Anyone can reproduce a learning run from a seed, with no teacher model.

use catena_agent::tools::Tool;
use catena_eval::normalise_answer;
use catena_protocol::{Profile, printed_output, render_observation};
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One task: the question, its checked answer, and the program that computes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    pub family: String,
    pub question: String,
    /// The exact answer (an integer or a string), compared after
    /// [`catena_eval::normalise_answer`].
    pub answer: String,
    /// What the plan says the program does.
    #[serde(skip)]
    pub step: String,
    #[serde(skip)]
    pub program: String,
}

const WORDS: &[&str] = &[
    "river", "stone", "garden", "window", "silver", "orange", "planet", "market", "candle",
    "forest", "yellow", "bridge", "winter", "rocket", "pencil", "castle", "meadow", "copper",
    "island", "thunder", "harbor", "lantern", "valley", "marble",
];

/// How a family draws one problem.
type Draw = fn(&mut ChaCha8Rng) -> Problem;

/// The task families by name, each drawing its numbers or words from the task's generator.
const FAMILIES: &[(&str, Draw)] = &[
    ("arithmetic", arithmetic),
    ("sum_of_squares", sum_of_squares),
    ("modular_power", modular_power),
    ("digit_sum", digit_sum),
    ("count_letter", count_letter),
    ("reverse_upper", reverse_upper),
    ("count_vowels", count_vowels),
    ("sum_even", sum_even),
    ("second_largest", second_largest),
    ("kth_sorted", kth_sorted),
];

fn random_word(rng: &mut ChaCha8Rng) -> &'static str {
    WORDS.choose(rng).copied().unwrap_or("river")
}

/// A list of 8 to 15 numbers in `lo..=hi`.
fn random_list(rng: &mut ChaCha8Rng, lo: i64, hi: i64) -> Vec<i64> {
    let len = rng.random_range(8..16);
    (0..len).map(|_| rng.random_range(lo..=hi)).collect()
}

fn list_text(v: &[i64]) -> String {
    format!(
        "[{}]",
        v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
    )
}

/// Task number `index` of the family stream seeded by `seed`.
pub fn task(seed: u64, index: usize) -> Task {
    let mut rng =
        ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(index as u64));
    let (family, make) = FAMILIES[rng.random_range(0..FAMILIES.len())];
    let Problem {
        question,
        answer,
        step,
        program,
    } = make(&mut rng);
    Task {
        id: format!("synth-{seed}-{index}"),
        family: family.to_string(),
        question,
        answer,
        step,
        program,
    }
}

/// A family's draw: the question, its answer computed here, what the plan says the program
/// does, and the program.
struct Problem {
    question: String,
    answer: String,
    step: String,
    program: String,
}

impl Problem {
    fn new(question: String, answer: String, step: String, program: String) -> Problem {
        Problem {
            question,
            answer,
            step,
            program,
        }
    }
}

fn arithmetic(rng: &mut ChaCha8Rng) -> Problem {
    let (a, b, c, d, e) = (
        rng.random_range(12..999i64),
        rng.random_range(12..999i64),
        rng.random_range(2..99i64),
        rng.random_range(2..99i64),
        rng.random_range(1..9999i64),
    );
    Problem::new(
        format!("What is {a} * {b} - {c} * {d} + {e}?"),
        (a * b - c * d + e).to_string(),
        "evaluates the expression".to_string(),
        format!("result = {a} * {b} - {c} * {d} + {e}\nprint(result)"),
    )
}

fn sum_of_squares(rng: &mut ChaCha8Rng) -> Problem {
    let a = rng.random_range(1..60i64);
    let b = a + rng.random_range(5..80i64);
    let sum: i64 = (a..=b).map(|i| i * i).sum();
    Problem::new(
        format!("What is the sum of the squares of all integers from {a} to {b} inclusive?"),
        sum.to_string(),
        "adds up the squares over the range".to_string(),
        format!("total = sum(i * i for i in range({a}, {b} + 1))\nprint(total)"),
    )
}

fn modular_power(rng: &mut ChaCha8Rng) -> Problem {
    let (a, b, m) = (
        rng.random_range(2..500u64),
        rng.random_range(10..5000u64),
        rng.random_range(7..10_000u64),
    );
    let mut r = 1u64;
    let mut base = a % m;
    let mut e = b;
    while e > 0 {
        if e & 1 == 1 {
            r = r * base % m;
        }
        base = base * base % m;
        e >>= 1;
    }
    Problem::new(
        format!("What is the remainder when {a} raised to the power {b} is divided by {m}?"),
        r.to_string(),
        "computes the modular power with pow".to_string(),
        format!("print(pow({a}, {b}, {m}))"),
    )
}

fn digit_sum(rng: &mut ChaCha8Rng) -> Problem {
    let (a, b) = (
        rng.random_range(1000..99_999i64),
        rng.random_range(100..9_999i64),
    );
    let sum: u32 = (a * b)
        .to_string()
        .chars()
        .filter_map(|c| c.to_digit(10))
        .sum();
    Problem::new(
        format!("What is the sum of the digits of {a} * {b}?"),
        sum.to_string(),
        "multiplies the numbers and adds the digits of the product".to_string(),
        format!("product = {a} * {b}\nprint(sum(int(d) for d in str(product)))"),
    )
}

fn count_letter(rng: &mut ChaCha8Rng) -> Problem {
    let text: Vec<&str> = (0..rng.random_range(3..6))
        .map(|_| random_word(rng))
        .collect();
    let text = text.join("");
    let letters: Vec<char> = text.chars().collect();
    let letter = letters[rng.random_range(0..letters.len())];
    let count = text.chars().filter(|&c| c == letter).count();
    Problem::new(
        format!("How many times does the letter '{letter}' appear in the string '{text}'?"),
        count.to_string(),
        "counts the letter in the string".to_string(),
        format!("text = '{text}'\nprint(text.count('{letter}'))"),
    )
}

fn reverse_upper(rng: &mut ChaCha8Rng) -> Problem {
    let word = format!("{}{}", random_word(rng), random_word(rng));
    Problem::new(
        format!("Reverse the string '{word}' and write it in upper case."),
        word.chars().rev().collect::<String>().to_uppercase(),
        "reverses the string and upper-cases it".to_string(),
        format!("word = '{word}'\nprint(word[::-1].upper())"),
    )
}

fn count_vowels(rng: &mut ChaCha8Rng) -> Problem {
    let words: Vec<&str> = (0..rng.random_range(4..8))
        .map(|_| random_word(rng))
        .collect();
    let sentence = words.join(" ");
    let count = sentence.chars().filter(|c| "aeiou".contains(*c)).count();
    Problem::new(
        format!("How many vowels (a, e, i, o, u) are in the sentence '{sentence}'?"),
        count.to_string(),
        "counts the vowels character by character".to_string(),
        format!("sentence = '{sentence}'\nprint(sum(1 for ch in sentence if ch in 'aeiou'))"),
    )
}

fn sum_even(rng: &mut ChaCha8Rng) -> Problem {
    let v = random_list(rng, -50, 200);
    let sum: i64 = v.iter().filter(|x| *x % 2 == 0).sum();
    let list = list_text(&v);
    Problem::new(
        format!("What is the sum of the even numbers in the list {list}?"),
        sum.to_string(),
        "filters the even numbers and adds them".to_string(),
        format!("numbers = {list}\nprint(sum(x for x in numbers if x % 2 == 0))"),
    )
}

fn second_largest(rng: &mut ChaCha8Rng) -> Problem {
    let mut v = random_list(rng, 1, 500);
    v.push(v[0] + 1);
    let mut distinct = v.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let answer = distinct[distinct.len() - 2];
    let list = list_text(&v);
    Problem::new(
        format!("What is the second largest distinct value in the list {list}?"),
        answer.to_string(),
        "sorts the distinct values and takes the second largest".to_string(),
        format!("numbers = {list}\nprint(sorted(set(numbers))[-2])"),
    )
}

fn kth_sorted(rng: &mut ChaCha8Rng) -> Problem {
    let v = random_list(rng, -100, 100);
    let k = rng.random_range(1..=v.len());
    let mut sorted = v.clone();
    sorted.sort_unstable();
    let list = list_text(&v);
    Problem::new(
        format!(
            "If the list {list} is sorted in ascending order, which number is at position {k} (counting from 1)?"
        ),
        sorted[k - 1].to_string(),
        "sorts the list and picks the requested position".to_string(),
        format!("numbers = {list}\nprint(sorted(numbers)[{k} - 1])"),
    )
}

/// A written trajectory, or why the task was dropped.
pub fn trajectory(task: &Task, code: &dyn Tool) -> Result<String, String> {
    let code_block = format!("\n```py\n{}\n```\n", task.program);
    let output = code.call(
        &code_block,
        &mut catena_agent::tools::CallContext::default(),
    );
    if !output.success {
        return Err(format!("the program failed: {}", output.observation));
    }
    let observed = printed_output(&output.observation)
        .ok_or_else(|| format!("no output in the observation: {}", output.observation))?
        .to_string();
    if normalise_answer(&observed) != normalise_answer(&task.answer) {
        return Err(format!(
            "the program printed {observed:?}, the expected answer is {:?}",
            task.answer
        ));
    }
    let mut t = String::new();
    t.push_str(&format!(
        "<plan>\n1. Write a Python program that {}.\n2. Run it and read the printed result.\n3. Check the result and give it as the answer.\n</plan>\n",
        task.step
    ));
    t.push_str(&format!(
        "<think>\nDoing this by hand is error-prone, so I will let Python do it: the program {} and prints the result.\n</think>\n",
        task.step
    ));
    t.push_str(&format!("<code>{code_block}</code>"));
    t.push_str(&render_observation(&output.observation));
    t.push_str(&format!(
        "<reflection>\nThe program ran without errors and printed {observed}. It computes exactly what the task asks, so the plan holds and no further step is needed.\n</reflection>\n"
    ));
    t.push_str(&format!(
        "<think>\nThe computation gives {observed}, so that is the answer.\n</think>\n"
    ));
    t.push_str(&format!("<answer>\\boxed{{{observed}}}</answer>"));
    Ok(t)
}

/// One line of the SFT file: our JSONL (`catena sessions export --format sft`).
pub fn sft_line(task: &Task, profile: &Profile, trajectory: &str) -> serde_json::Value {
    serde_json::json!({
        "id": task.id,
        "messages": [
            {"role": "system", "content": profile.system},
            {"role": "user", "content": profile.user_message(&task.question)},
            {"role": "assistant", "content": trajectory},
        ],
        "profile": profile.name,
        "answer": format!("\\boxed{{{}}}", task.answer),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_seeded_and_cover_every_family() {
        assert_eq!(task(3, 17), task(3, 17));
        assert_ne!(task(3, 17).question, task(4, 17).question);
        let families: std::collections::BTreeSet<String> =
            (0..300).map(|i| task(1, i).family).collect();
        assert_eq!(families.len(), FAMILIES.len());
    }
}

//! The code reward through the real sandbox (CPython in wasmtime): programs that pass, fail,
//! crash or hang, in both test forms, and `score_run` with its format gate. Like the other
//! sandbox tests, these fetch the Python runtime when it is missing and fail loudly when it
//! cannot be had.

mod common;

use catena_eval::reward::code_passes;
use catena_eval::{CodeTests, EvalTask, TaskKind, score_run};
use catena_sandbox::Limits;
use std::time::Duration;

fn io_tests() -> CodeTests {
    CodeTests::Io {
        inputs: vec!["1 2\n".into(), "10 -3\n".into()],
        outputs: vec!["3\n".into(), "7".into()],
    }
}

fn add_asserts() -> CodeTests {
    CodeTests::Assert {
        snippet: "assert add(1, 2) == 3\nassert add(-1, 1) == 0".into(),
    }
}

#[test]
fn programs_pass_or_fail_their_tests_in_the_sandbox() {
    let sandbox = common::python_sandbox(Limits {
        wall: Duration::from_secs(3),
        ..Limits::default()
    });
    let io = io_tests();
    let sum = "a, b = map(int, input().split())\nprint(a + b)\n";
    assert!(code_passes(sum, &io, &sandbox).unwrap());
    let trailing = "a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\n";
    assert!(
        code_passes(trailing, &io, &sandbox).unwrap(),
        "trailing spaces and blank lines are ignored"
    );
    let wrong = "a, b = map(int, input().split())\nprint(a - b)\n";
    assert!(!code_passes(wrong, &io, &sandbox).unwrap());
    let first_only = "print(3)\n";
    assert!(!code_passes(first_only, &io, &sandbox).unwrap());
    let crash = "a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(2)\n";
    assert!(
        !code_passes(crash, &io, &sandbox).unwrap(),
        "a non-zero exit fails"
    );
    let exception = "print(3)\n1/0\n";
    assert!(!code_passes(exception, &io, &sandbox).unwrap());
    let hang = "while True:\n    pass\n";
    assert!(
        !code_passes(hang, &io, &sandbox).unwrap(),
        "a timeout fails"
    );
    let syntax = "def (:\n";
    assert!(!code_passes(syntax, &io, &sandbox).unwrap());

    let asserts = add_asserts();
    assert!(code_passes("def add(a, b):\n    return a + b\n", &asserts, &sandbox).unwrap());
    assert!(!code_passes("def add(a, b):\n    return a * b\n", &asserts, &sandbox).unwrap());
    assert!(!code_passes("", &asserts, &sandbox).unwrap());

    let broken = CodeTests::Io {
        inputs: vec!["1\n".into()],
        outputs: Vec::new(),
    };
    assert!(!code_passes("print(1)", &broken, &sandbox).unwrap());
}

#[test]
fn score_run_runs_the_answer_program_and_gates_the_format() {
    let sandbox = common::python_sandbox(Limits {
        wall: Duration::from_secs(3),
        ..Limits::default()
    });
    let task = EvalTask {
        id: "sum".into(),
        question: "Read two integers and print their sum.".into(),
        answer: "2 stdin/stdout tests".into(),
        family: Some("livecodebench".into()),
        kind: Some(TaskKind::Code),
        tests: Some(io_tests()),
    };
    let answer = "```python\na, b = map(int, input().split())\nprint(a + b)\n```";
    let good = format!(
        "<plan>1. read 2. add</plan>\n<code>\n```py\nprint(1 + 2)\n```\n</code>\n<observation>\n3\n</observation>\n\n<answer>\n{answer}\n</answer>"
    );
    let score = score_run(&task, Some(answer), &good, Some(&sandbox));
    assert_eq!((score.reward, score.solved, score.f1), (1.0, true, None));

    let sloppy = format!("<code>print(1 + 2)</code>\n<answer>\n{answer}\n</answer>");
    let score = score_run(&task, Some(answer), &sloppy, Some(&sandbox));
    assert_eq!(
        (score.reward, score.solved),
        (0.0, true),
        "the format gate zeroes the reward, not the verdict"
    );

    let unfenced = "a, b = map(int, input().split())\nprint(a + b)";
    let score = score_run(&task, Some(unfenced), &good, Some(&sandbox));
    assert_eq!(
        (score.reward, score.solved),
        (0.0, false),
        "no fence, no program"
    );
    let score = score_run(&task, Some(answer), &good, None);
    assert_eq!((score.reward, score.solved), (0.0, false), "no sandbox");
    let score = score_run(&task, None, &good, Some(&sandbox));
    assert_eq!(score.reward, 0.0);
}

/// Functions print nothing: compared on standard input alone, every program looks the same and
/// the likeliest chain wins. The values of the task's example calls tell them apart.
#[test]
fn a_vote_over_functions_compares_the_values_of_the_examples() {
    use catena_eval::vote::{ChainAnswer, vote_on_chains};
    use catena_protocol::AnswerFormat;
    let sandbox = common::python_sandbox(Limits {
        wall: Duration::from_secs(5),
        ..Limits::default()
    });
    let question =
        "Complete `def largest(xs):`, the largest of the list.\n    >>> largest([3, 9, 2])\n    9";
    let fenced = |body: &str| format!("```python\n{body}\n```");
    let right = fenced("def largest(xs):\n    return max(xs)");
    let right_too = fenced(
        "def largest(xs):\n    best = xs[0]\n    for x in xs:\n        best = x if x > best else best\n    return best\nprint('tried')",
    );
    let wrong = fenced("def largest(xs):\n    return xs[0]");
    fn chain(answer: &str, mean_logprob: f64) -> ChainAnswer<'_> {
        ChainAnswer {
            answer: Some(answer),
            mean_logprob: Some(mean_logprob),
            trajectory: "",
            stop: None,
            printed: &[],
        }
    }
    let (right, right_too, wrong) = (right.as_str(), right_too.as_str(), wrong.as_str());
    let chains = [
        chain(wrong, -0.1),
        chain(right, -0.5),
        chain(right_too, -0.6),
    ];
    let vote = |chains: &[ChainAnswer<'_>], question: &str| {
        vote_on_chains(chains, AnswerFormat::Program, question, Some(&sandbox)).unwrap()
    };
    let tally = vote(&chains, question);
    assert_eq!(tally.winner().unwrap().members, [1, 2], "{tally:?}");
    assert_eq!(tally.groups[1].members, [0]);
    // Without an example in the question, the chains' own test calls are the examples; a
    // chain that ran only its function's definition adds none.
    let tested = "<code>\n```py\nprint(largest([1, 5, 2]))\n```\n</code>";
    let chains = [
        ChainAnswer {
            trajectory: tested,
            ..chain(wrong, -0.1)
        },
        chain(right, -0.5),
        chain(right_too, -0.6),
    ];
    let tally = vote(&chains, "The largest.");
    assert_eq!(tally.winner().unwrap().members, [1, 2], "{tally:?}");
    // With no call anywhere, they all print nothing on no input: one group, the likeliest speaks.
    let chains = [chain(wrong, -0.1), chain(right, -0.5)];
    let tally = vote(&chains, "The largest.");
    assert_eq!(tally.winner().unwrap().members, [0, 1]);
    assert_eq!(tally.winner().unwrap().best, 0);
}

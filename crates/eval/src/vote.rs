//! Test-time scaling by vote: many chains of one task, their answers grouped by the task's own
//! verifier, the largest group wins (docs/ARCHITECTURE.md, "Samples and votes"). Two answers are
//! the same when the verifier could not tell them apart: math answers that are equal as values
//! (the math reward's equivalence), QA answers equal after its normalisation, programs that
//! print the same on the same inputs and return the same from the same example calls. A tie goes
//! to the group whose chains the model found more likely (the higher mean log-probability per
//! sampled token). An answer a chain gave only when it was cut short and asked for it
//! (PROTOCOL.md §2, item 5) counts only when no chain reached an answer by itself: such answers
//! are mostly guesses, and in the README's first example, counted like the others, their single
//! votes tied with the right answer and won the tie in three seeds of ten. The same holds for a
//! last suggested answer standing in for a chain cut short: it was not reached either.
//!
//! A math vote also reads what each chain's own programs printed. An answer one of them printed
//! was computed, not guessed; a number the chain answered although none of its programs printed
//! it gives way to the one number on the last line its last program printed, when there is such
//! a number: the model often writes a guess from before its program ran after an observation
//! that says otherwise (on the README's first example, a chain printed 1229 and answered 7854).
//! A chain cut short votes when its programs printed its value, and among groups of one size the
//! one a program printed wins, then one with a chain that ended by itself: a chain cut short by
//! a loop or a budget is likelier per token than one that answered (its repeated text; on 40
//! held-out tasks the median of its mean log-probability was -0.16 to -0.31 against -0.36 and
//! -0.42), so the log-probability alone would hand it the tie. Over 54 recorded votes of five
//! chains, on which it was chosen, this took maj@5 from 26 to 38, and on two sets of 20 held-out
//! tasks drawn afterwards from 7 to 9 and from 7 to 10 (docs/BENCHMARKS.md, "A vote that reads
//! what the chains' programs printed" and "A third draw, and the tie a loop won").

use crate::reward::CodeTests;
use crate::reward::{answer_program, math_equivalent, output_lines, qa_normalise};
use crate::reward::{is_number, last_printed_number, printed_number};
use crate::{EvalTask, TaskKind, TaskResult};
use catena_protocol::fence::fenced_blocks;
use catena_protocol::{AnswerFormat, Block, Tag, parse_all};
use catena_run_events::StopReason;
use catena_sandbox::{Exit, Sandbox};
use serde::Serialize;

mod calls;
pub use calls::example_calls;

/// One chain's say.
#[derive(Debug, Clone, PartialEq)]
pub struct Ballot {
    /// The chain's answer (the content of its last `<answer>`); a chain without one abstains.
    pub answer: Option<String>,
    /// Mean log-probability of the chain's sampled tokens.
    pub mean_logprob: f64,
    /// A budget or a loop cut the chain short: its answer was asked for then, or is its last
    /// suggested answer, not one it reached by itself.
    pub cut_short: bool,
    /// What the chain's own programs printed (those that exited with status 0, in order, as the
    /// runtime recorded them: `RunSummary::printed`): a math vote checks the answer against it.
    pub printed: Vec<String>,
}

/// Answers that count as one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VoteGroup {
    /// The answer of the group's most likely chain, as it wrote it, or as `\boxed{N}` when that
    /// chain counted for the number its program printed.
    pub answer: String,
    /// That chain (its ballot's index): where the verifier could tell members apart (programs
    /// that print the same on every input tried), it speaks for the group.
    pub best: usize,
    /// The ballots (their indices) in this group.
    pub members: Vec<usize>,
    /// Mean of the members' mean log-probabilities.
    pub mean_logprob: f64,
    /// A member's own program printed the group's value (math votes only).
    pub printed: bool,
    /// A member ended by itself, not cut short by a budget or a loop.
    pub reached: bool,
    /// Members that counted for the number their last program printed rather than for their
    /// answer, which none of their programs printed.
    pub from_output: Vec<usize>,
}

/// The count of one vote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tally {
    /// Largest first; among equals, the more likely first. The first one is the winner.
    pub groups: Vec<VoteGroup>,
    /// Ballots without an answer (or, for code, without a program that could run).
    pub abstained: Vec<usize>,
}

impl Tally {
    pub fn winner(&self) -> Option<&VoteGroup> {
        self.groups.first()
    }
}

/// How two answers are compared.
pub enum Equivalence<'s> {
    /// Equal as mathematical values.
    Math,
    /// Equal after QA normalisation (case, punctuation, articles).
    Qa,
    /// Programs that print the same on each input (a failed run counts as its own output); with
    /// example calls ([`example_calls`]), what those return on each input is compared instead.
    Outputs {
        inputs: Vec<String>,
        calls: Vec<String>,
        sandbox: &'s Sandbox,
    },
}

/// Groups `ballots` by `equivalence` and orders the groups; see the module's doc.
pub fn tally(ballots: &[Ballot], equivalence: &Equivalence<'_>) -> Tally {
    let mut abstained = Vec::new();
    let mut counted: Vec<Counted> = Vec::new();
    for (index, ballot) in ballots.iter().enumerate() {
        let read = read_ballot(ballot, equivalence)
            .and_then(|(answer, source)| Some((key(&answer, equivalence)?, answer, source)));
        match read {
            Some((key, answer, source)) => counted.push(Counted {
                key,
                index,
                answer,
                source,
            }),
            None => abstained.push(index),
        }
    }
    let reached = |c: &Counted| !ballots[c.index].cut_short || c.source != Source::Answer;
    if counted.iter().any(reached) {
        let (reached, asked): (Vec<_>, Vec<_>) = counted.into_iter().partition(reached);
        abstained.extend(asked.into_iter().map(|c| c.index));
        abstained.sort_unstable();
        counted = reached;
    }
    let mut groups: Vec<Vec<Counted>> = Vec::new();
    for ballot in counted {
        match groups.iter_mut().find(|g| g[0].key.same(&ballot.key)) {
            Some(group) => group.push(ballot),
            None => groups.push(vec![ballot]),
        }
    }
    let mut groups: Vec<VoteGroup> = groups
        .into_iter()
        .map(|members| group(ballots, members))
        .collect();
    groups.sort_by(|a, b| {
        b.members
            .len()
            .cmp(&a.members.len())
            .then(b.printed.cmp(&a.printed))
            .then(b.reached.cmp(&a.reached))
            .then(b.mean_logprob.total_cmp(&a.mean_logprob))
    });
    Tally { groups, abstained }
}

/// Where a ballot's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The chain's answer, not checked against its programs (or not a math vote).
    Answer,
    /// The chain's answer, which one of its programs printed.
    PrintedAnswer,
    /// The one number on the last line its last program printed, in place of an answer that no
    /// program of the chain printed (or of no answer).
    LastOutput,
}

/// A ballot as the vote reads it.
struct Counted {
    key: Key,
    index: usize,
    answer: String,
    source: Source,
}

/// What `ballot` counts for, and why; `None` when it abstains.
fn read_ballot(ballot: &Ballot, equivalence: &Equivalence<'_>) -> Option<(String, Source)> {
    let answer = ballot.answer.as_deref().filter(|a| !a.trim().is_empty());
    if !matches!(equivalence, Equivalence::Math) {
        return Some((answer?.to_string(), Source::Answer));
    }
    if let Some(answer) = answer
        && ballot.printed.iter().any(|p| printed_number(answer, p))
    {
        return Some((answer.to_string(), Source::PrintedAnswer));
    }
    if let Some(number) = output_over_answer(answer, &ballot.printed) {
        return Some((format!("\\boxed{{{number}}}"), Source::LastOutput));
    }
    Some((answer?.to_string(), Source::Answer))
}

/// The number a chain's last program printed, when the chain's answer is a number that none of
/// its programs printed (`printed`, as [`Ballot::printed`] holds them), or it has none: what a
/// math vote counts the chain for, and what a single run points out. Only a number gives way: a
/// symbolic answer (`\frac{\pi}{2}`) is not what a program printing `1.5707963267948966` can
/// check.
pub fn output_over_answer<'p>(answer: Option<&str>, printed: &'p [String]) -> Option<&'p str> {
    let answer = answer.filter(|a| !a.trim().is_empty());
    if answer.is_some_and(|a| !is_number(a) || printed.iter().any(|p| printed_number(a, p))) {
        return None;
    }
    last_printed_number(printed.last()?)
}

/// The group of `members` (in ballot order): the most likely speaks for it.
fn group(ballots: &[Ballot], members: Vec<Counted>) -> VoteGroup {
    let logprob = |c: &Counted| ballots[c.index].mean_logprob;
    let sum: f64 = members.iter().map(logprob).sum();
    let best = members
        .iter()
        .enumerate()
        // The earlier ballot among equals.
        .max_by(|(i, a), (j, b)| logprob(a).total_cmp(&logprob(b)).then(j.cmp(i)))
        .map_or(0, |(i, _)| i);
    VoteGroup {
        answer: members[best].answer.clone(),
        best: members[best].index,
        mean_logprob: sum / members.len() as f64,
        printed: members.iter().any(|c| c.source != Source::Answer),
        reached: members.iter().any(|c| !ballots[c.index].cut_short),
        from_output: members
            .iter()
            .filter(|c| c.source == Source::LastOutput)
            .map(|c| c.index)
            .collect(),
        members: members.iter().map(|c| c.index).collect(),
    }
}

/// What an answer is compared by.
enum Key {
    /// Compared pairwise with the math equivalence (it is not a normal form).
    Math(String),
    Exact(String),
    /// Each input's output, or how the run ended when it did not exit with status 0.
    Outputs(Vec<String>),
}

impl Key {
    fn same(&self, other: &Key) -> bool {
        match (self, other) {
            (Key::Math(a), Key::Math(b)) => math_equivalent(a, b) || math_equivalent(b, a),
            (Key::Exact(a), Key::Exact(b)) => a == b,
            (Key::Outputs(a), Key::Outputs(b)) => a == b,
            _ => false,
        }
    }
}

fn key(answer: &str, equivalence: &Equivalence<'_>) -> Option<Key> {
    match equivalence {
        Equivalence::Math => Some(Key::Math(answer.to_string())),
        Equivalence::Qa => Some(Key::Exact(qa_normalise(answer))),
        Equivalence::Outputs {
            inputs,
            calls,
            sandbox,
        } => {
            let program = answer_program(answer)?;
            let probed;
            let program = if calls.is_empty() {
                program
            } else {
                probed = calls::with_calls(program, calls);
                &probed
            };
            let outputs = inputs
                .iter()
                .map(|input| match sandbox.run(program, input.as_bytes()) {
                    Ok(run) if run.exit == Exit::Status(0) => {
                        let stdout = run.stdout.to_text();
                        let compared = if calls.is_empty() {
                            Some(stdout.as_ref())
                        } else {
                            calls::calls_output(&stdout)
                        };
                        compared.map_or_else(
                            || "(the calls did not run)".to_string(),
                            |text| output_lines(text).join("\n"),
                        )
                    }
                    Ok(run) => format!("(ended: {:?})", run.exit),
                    Err(e) => format!("(not run: {e})"),
                })
                .collect();
            Some(Key::Outputs(outputs))
        }
    }
}

/// One ended chain of a task, as a vote over a task's chains reads it.
#[derive(Debug, Clone, Copy)]
pub struct ChainAnswer<'t> {
    /// The content of its last `<answer>`, if it wrote one.
    pub answer: Option<&'t str>,
    /// Mean log-probability of its sampled tokens, when they were recorded.
    pub mean_logprob: Option<f64>,
    /// The whole assistant turn: where the inputs its tests used are.
    pub trajectory: &'t str,
    /// Why it ended, when known: a chain cut short whose answer was asked for votes only when
    /// no chain answered by itself.
    pub stop: Option<StopReason>,
    /// What its `<code>` calls printed, as the runtime recorded them (`RunSummary::printed`).
    pub printed: &'t [String],
}

/// A vote over programs was asked for without a sandbox to run them in.
#[derive(Debug, thiserror::Error)]
#[error("comparing programs needs the sandbox")]
pub struct NeedsSandbox;

/// The vote over the chains of `question` answering in `format`, by the verifier of that format:
/// math values, QA strings, or programs' outputs (in `sandbox`) on the inputs the chains tested
/// them with and on no input, and the values of the example calls that the question and the
/// chains' tests make of the functions the programs define. A chain without a recorded
/// log-probability loses every tie.
pub fn vote_on_chains(
    chains: &[ChainAnswer<'_>],
    format: AnswerFormat,
    question: &str,
    sandbox: Option<&Sandbox>,
) -> Result<Tally, NeedsSandbox> {
    let ballots: Vec<Ballot> = chains
        .iter()
        .map(|c| Ballot {
            answer: c.answer.map(str::to_string),
            mean_logprob: c.mean_logprob.unwrap_or(f64::NEG_INFINITY),
            cut_short: c.stop.is_some_and(StopReason::cut_short),
            printed: match format {
                AnswerFormat::Boxed => c.printed.to_vec(),
                _ => Vec::new(),
            },
        })
        .collect();
    let equivalence = match format {
        AnswerFormat::Boxed => Equivalence::Math,
        AnswerFormat::Short | AnswerFormat::Multi => Equivalence::Qa,
        AnswerFormat::Program => {
            let sandbox = sandbox.ok_or(NeedsSandbox)?;
            let tested = code_blocks(chains.iter().map(|c| c.trajectory));
            let programs: Vec<&str> = chains
                .iter()
                .filter_map(|c| answer_program(c.answer?))
                .collect();
            let texts = std::iter::once(question).chain(tested.iter().map(|b| b.content.as_str()));
            Equivalence::Outputs {
                inputs: stdin_fences(&tested),
                calls: example_calls(texts, &programs),
                sandbox,
            }
        }
    };
    Ok(tally(&ballots, &equivalence))
}

/// The `<code>` blocks of `trajectories`, in order.
fn code_blocks<'t>(trajectories: impl IntoIterator<Item = &'t str>) -> Vec<Block> {
    trajectories
        .into_iter()
        .flat_map(|t| parse_all(t).0)
        .filter(|b| b.tag == Tag::Code)
        .collect()
}

/// The standard inputs the chains gave their test programs (the ```` ```sh ```` fences of their
/// `<code>` calls), each once, after the empty input: what programs are compared on when a task
/// has no inputs of its own.
pub fn tested_inputs<'t>(trajectories: impl IntoIterator<Item = &'t str>) -> Vec<String> {
    stdin_fences(&code_blocks(trajectories))
}

/// The empty input, then each distinct closed ```` ```sh ```` fence of `code` blocks.
fn stdin_fences(code: &[Block]) -> Vec<String> {
    let mut inputs = vec![String::new()];
    for block in code {
        for fence in fenced_blocks(&block.content) {
            if fence.closed && fence.lang == "sh" && !inputs.iter().any(|i| i == fence.body) {
                inputs.push(fence.body.to_string());
            }
        }
    }
    inputs
}

/// maj@K of an evaluation: the share of tasks whose vote, over their K runs in `results`, picks
/// a solved run (the winning group's most likely chain). Code tasks compare programs on their
/// tests' inputs; a task with assert tests has none (its asserts hold the expected values, which
/// a vote must not see), so its programs are compared by the values of the example calls in the
/// task's text, on no input (without such calls they all print the same, and the vote falls to
/// the most likely chain). The report keeps no trajectories, so the chains' own calls are not
/// used here; what math runs' programs printed it keeps ([`TaskResult::printed`]).
pub fn majority_rate(tasks: &[EvalTask], results: &[TaskResult], sandbox: Option<&Sandbox>) -> f64 {
    let mut solved = 0usize;
    for task in tasks {
        let runs: Vec<&TaskResult> = results.iter().filter(|r| r.id == task.id).collect();
        let ballots: Vec<Ballot> = runs
            .iter()
            .map(|r| Ballot {
                answer: r.answer.clone(),
                mean_logprob: r.mean_logprob.unwrap_or(f64::NEG_INFINITY),
                cut_short: StopReason::from_name(&r.stop).is_some_and(StopReason::cut_short),
                printed: r.printed.clone(),
            })
            .collect();
        let kind = task.kind.unwrap_or_default();
        let equivalence = match (kind, sandbox) {
            (TaskKind::Code, Some(sandbox)) => {
                let (inputs, calls) = match &task.tests {
                    Some(CodeTests::Io { inputs, .. }) => (inputs.clone(), Vec::new()),
                    _ => {
                        let programs: Vec<&str> = runs
                            .iter()
                            .filter_map(|r| answer_program(r.answer.as_deref()?))
                            .collect();
                        let calls = example_calls([task.question.as_str()], &programs);
                        (vec![String::new()], calls)
                    }
                };
                Equivalence::Outputs {
                    inputs,
                    calls,
                    sandbox,
                }
            }
            // Without the sandbox no program ran, and none was solved either.
            (TaskKind::Code, None) => continue,
            (TaskKind::Math, _) => Equivalence::Math,
            (TaskKind::Qa, _) => Equivalence::Qa,
        };
        let counted = tally(&ballots, &equivalence);
        // A math group may speak with the number a program printed, not its chain's answer.
        let right = |g: &VoteGroup| match kind {
            TaskKind::Math => math_equivalent(&g.answer, &task.answer),
            _ => runs[g.best].solved,
        };
        if counted.winner().is_some_and(right) {
            solved += 1;
        }
    }
    solved as f64 / tasks.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ballot(answer: Option<&str>, mean_logprob: f64) -> Ballot {
        Ballot {
            answer: answer.map(str::to_string),
            mean_logprob,
            cut_short: false,
            printed: Vec::new(),
        }
    }

    #[test]
    fn answers_asked_of_chains_cut_short_count_only_when_no_chain_answered_by_itself() {
        let asked = |answer: &str, mean_logprob: f64| Ballot {
            cut_short: true,
            ..ballot(Some(answer), mean_logprob)
        };
        // A guess that the model found likelier would have won the tie of single votes.
        let ballots = [
            asked("\\boxed{4}", -0.1),
            ballot(Some("\\boxed{1229}"), -0.5),
            ballot(None, -0.2),
        ];
        let counted = tally(&ballots, &Equivalence::Math);
        assert_eq!(counted.winner().unwrap().answer, "\\boxed{1229}");
        assert_eq!(counted.groups.len(), 1);
        assert_eq!(counted.abstained, [0, 2]);
        // With no answer reached, the answers asked for are the vote.
        let ballots = [asked("\\boxed{4}", -0.3), asked("\\boxed{4.0}", -0.4)];
        let counted = tally(&ballots, &Equivalence::Math);
        assert_eq!(counted.winner().unwrap().members, [0, 1]);
    }

    #[test]
    fn equal_values_vote_together_and_the_largest_group_wins() {
        let ballots = [
            ballot(Some("\\boxed{1229}"), -0.5),
            ballot(Some("\\boxed{5000}"), -0.1),
            ballot(Some("There are \\boxed{1,229} primes."), -0.4),
            ballot(None, -0.2),
            ballot(Some("\\boxed{1229.0}"), -0.9),
        ];
        let tally = tally(&ballots, &Equivalence::Math);
        let winner = tally.winner().unwrap();
        assert_eq!(winner.members, [0, 2, 4]);
        assert_eq!(
            winner.best, 2,
            "the most likely member speaks for the group"
        );
        assert_eq!(winner.answer, "There are \\boxed{1,229} primes.");
        assert!((winner.mean_logprob + 0.6).abs() < 1e-9);
        assert_eq!(tally.groups[1].members, [1]);
        assert_eq!(tally.abstained, [3]);
    }

    #[test]
    fn a_tie_goes_to_the_more_likely_group() {
        let ballots = [
            ballot(Some("\\boxed{1/2}"), -1.0),
            ballot(Some("\\boxed{3}"), -0.2),
            ballot(Some("\\boxed{0.5}"), -1.0),
            ballot(Some("\\boxed{3}"), -0.3),
        ];
        let tally = tally(&ballots, &Equivalence::Math);
        assert_eq!(tally.winner().unwrap().members, [1, 3]);
        assert_eq!(tally.groups[1].members, [0, 2], "1/2 and 0.5 are one value");
    }

    #[test]
    fn qa_answers_vote_after_normalisation() {
        let ballots = [
            ballot(Some("The Eiffel Tower"), -1.0),
            ballot(Some("eiffel tower."), -1.0),
            ballot(Some("Louvre"), -0.1),
        ];
        let tally = tally(&ballots, &Equivalence::Qa);
        assert_eq!(tally.winner().unwrap().members, [0, 1]);
    }

    #[test]
    fn programs_are_compared_on_the_inputs_the_chains_tried() {
        let chain = "<code>\n```py\nprint(input())\n```\n```sh\n3 4\n```\n</code>";
        let again = "<code>\n```py\nprint(1)\n```\n```sh\n3 4\n```\n</code><code>\n```py\nx\n```\n```sh\n5\n```\n</code>";
        assert_eq!(tested_inputs([chain, again]), ["", "3 4\n", "5\n"]);
    }

    fn printed(answer: Option<&str>, mean_logprob: f64, outputs: &[&str]) -> Ballot {
        Ballot {
            printed: outputs.iter().map(|o| o.to_string()).collect(),
            ..ballot(answer, mean_logprob)
        }
    }

    #[test]
    fn a_number_no_program_printed_gives_way_to_what_the_last_one_printed() {
        let ballots = [
            // Answered its guess from before its program ran.
            printed(Some("\\boxed{7854}"), -0.1, &["2\n3", "primes: 1229"]),
            ballot(Some("\\boxed{7854}"), -0.2),
            printed(Some("\\boxed{1229}"), -0.5, &["1229 primes below 10000"]),
        ];
        let counted = tally(&ballots, &Equivalence::Math);
        let winner = counted.winner().unwrap();
        assert_eq!(winner.members, [0, 2]);
        assert_eq!(winner.from_output, [0]);
        assert!(winner.printed);
        assert_eq!(
            winner.answer, "\\boxed{1229}",
            "the likelier chain speaks with its output"
        );
        assert!(!counted.groups[1].printed);
        // Not a number, so not something a printed float can check.
        let symbolic = [printed(
            Some("\\boxed{\\frac{\\pi}{2}}"),
            -0.1,
            &["1.5707963267948966"],
        )];
        let counted = tally(&symbolic, &Equivalence::Math);
        assert_eq!(counted.winner().unwrap().answer, "\\boxed{\\frac{\\pi}{2}}");
        assert!(counted.winner().unwrap().from_output.is_empty());
        // Other verifiers do not read the outputs.
        let qa = [printed(Some("Paris"), -0.1, &["42"])];
        assert_eq!(
            tally(&qa, &Equivalence::Qa).winner().unwrap().answer,
            "Paris"
        );
    }

    #[test]
    fn among_equal_groups_the_printed_one_wins_and_counts_even_when_cut_short() {
        let ballots = [
            ballot(Some("\\boxed{4}"), -0.1),
            printed(Some("\\boxed{3}"), -1.0, &["x = 3"]),
        ];
        let counted = tally(&ballots, &Equivalence::Math);
        assert_eq!(counted.winner().unwrap().members, [1]);
        let cut = Ballot {
            cut_short: true,
            ..printed(None, -1.0, &["3.0"])
        };
        let ballots = [ballot(Some("\\boxed{4}"), -0.1), cut];
        let counted = tally(&ballots, &Equivalence::Math);
        assert_eq!(counted.winner().unwrap().members, [1]);
        assert_eq!(counted.winner().unwrap().answer, "\\boxed{3.0}");
        assert!(counted.abstained.is_empty());
    }

    #[test]
    fn between_printed_groups_of_one_size_a_chain_that_ended_by_itself_beats_one_cut_short() {
        // A chain stopped in a loop, printing 4 again and again: its repeated text makes it the
        // likelier, and it still loses the tie to the chain that printed 31 and answered.
        let looped = Ballot {
            cut_short: true,
            ..printed(Some("\\boxed{4}"), -0.2, &["4", "4"])
        };
        let answered = printed(Some("\\boxed{31}"), -0.5, &["31"]);
        let counted = tally(&[looped.clone(), answered.clone()], &Equivalence::Math);
        assert_eq!(counted.winner().unwrap().answer, "\\boxed{31}");
        assert!(counted.groups.iter().all(|g| g.printed));
        assert_eq!(
            counted.groups.iter().map(|g| g.reached).collect::<Vec<_>>(),
            [true, false]
        );
        // Where the looped chain agrees with another, its vote still counts.
        let agreeing = printed(Some("\\boxed{4}"), -0.9, &["4"]);
        let counted = tally(&[looped, answered, agreeing], &Equivalence::Math);
        assert_eq!(counted.winner().unwrap().members, [0, 2]);
    }

    #[test]
    fn a_single_chain_learns_what_its_last_program_printed() {
        let printed = ["2\n3".to_string(), "count: 1229".to_string()];
        assert_eq!(
            output_over_answer(Some("\\boxed{7854}"), &printed),
            Some("1229")
        );
        assert_eq!(output_over_answer(None, &printed), Some("1229"));
        // An answer some program printed, a symbolic one, a last line of two numbers: nothing.
        assert_eq!(output_over_answer(Some("\\boxed{3}"), &printed), None);
        assert_eq!(output_over_answer(Some("x + 1"), &printed), None);
        assert_eq!(
            output_over_answer(Some("7"), &["1229 below 10000".into()]),
            None
        );
        assert_eq!(output_over_answer(Some("7"), &[]), None);
    }

    #[test]
    fn nobody_answered() {
        let tally = tally(
            &[ballot(None, 0.0), ballot(Some("  "), 0.0)],
            &Equivalence::Math,
        );
        assert!(tally.winner().is_none());
        assert_eq!(tally.abstained, [0, 1]);
    }
}

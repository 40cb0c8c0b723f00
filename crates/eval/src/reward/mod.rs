//! Rewards: whether a run's answer is right, one verifier per task kind, shared by RL training
//! and `catena eval` so that both count the same thing as solved (PROTOCOL.md §6: binary,
//! outcome-only rewards; optional overlong shaping and a code format gate).

mod code;
mod math;
mod qa;
mod shaping;

pub use code::code_passes;
pub use code::{CodeTests, answer_program, output_lines, same_output};
pub use math::{is_number, last_printed_number, math_equivalent, printed_number};
pub use qa::{gold_answers, qa_exact_match, qa_f1, qa_normalise};
pub use shaping::{code_format_ok, overlong_penalty};

pub use score::{Score, score_run};

mod score {
    use super::*;
    use crate::{EvalTask, TaskKind};
    use catena_sandbox::Sandbox;

    /// How one run did on its task.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Score {
        /// What RL trains on: 1.0 or 0.0; for code, 0.0 as well when the format gate fails.
        pub reward: f64,
        /// The verifier's verdict on the answer alone (what pass rates count).
        pub solved: bool,
        /// Token-overlap F1 against the best gold answer, for QA tasks.
        pub f1: Option<f64>,
    }

    impl Score {
        fn outcome(solved: bool, f1: Option<f64>) -> Score {
            Score {
                reward: if solved { 1.0 } else { 0.0 },
                solved,
                f1,
            }
        }
    }

    /// Scores a finished run. `answer` is the content of its last `<answer>` (none: reward 0),
    /// `trajectory` the whole assistant turn (for the code format gate), and `sandbox` what
    /// runs a code task's tests (none: a code task scores 0, with the reason logged). The
    /// verifier is the task's [`TaskKind`], math when it has none.
    ///
    /// A code task's tests block the thread while they run: call this from a plain thread,
    /// not from inside an async task.
    pub fn score_run(
        task: &EvalTask,
        answer: Option<&str>,
        trajectory: &str,
        sandbox: Option<&Sandbox>,
    ) -> Score {
        let kind = task.kind.unwrap_or_default();
        let Some(answer) = answer else {
            return Score::outcome(false, (kind == TaskKind::Qa).then_some(0.0));
        };
        match kind {
            TaskKind::Math => Score::outcome(math_equivalent(answer, &task.answer), None),
            TaskKind::Qa => Score::outcome(
                qa_exact_match(answer, &task.answer),
                Some(qa_f1(answer, &task.answer)),
            ),
            TaskKind::Code => {
                let solved = code_solved(task, answer, sandbox);
                let mut score = Score::outcome(solved, None);
                if !code_format_ok(trajectory) {
                    score.reward = 0.0;
                }
                score
            }
        }
    }

    fn code_solved(task: &EvalTask, answer: &str, sandbox: Option<&Sandbox>) -> bool {
        let Some(tests) = &task.tests else {
            tracing::warn!(task = %task.id, "a code task without tests scores 0");
            return false;
        };
        let Some(sandbox) = sandbox else {
            tracing::warn!(task = %task.id, "no sandbox to run the code task's tests: it scores 0");
            return false;
        };
        let Some(program) = answer_program(answer) else {
            return false;
        };
        code_passes(program, tests, sandbox).unwrap_or_else(|e| {
            tracing::warn!(task = %task.id, "the sandbox could not run the tests: {e}");
            false
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn task(kind: Option<TaskKind>, answer: &str) -> EvalTask {
            EvalTask {
                id: "t".into(),
                question: "q".into(),
                answer: answer.into(),
                family: None,
                kind,
                tests: None,
            }
        }

        #[test]
        fn math_is_the_default_and_scores_like_exact_match_did() {
            let t = task(None, "REDNUHTLICNEP");
            let s = score_run(&t, Some("\\boxed{REDNUHTLICNEP}"), "", None);
            assert_eq!(
                s,
                Score {
                    reward: 1.0,
                    solved: true,
                    f1: None
                }
            );
            assert!(!score_run(&t, Some("\\boxed{rednuhtlicnep}"), "", None).solved);
            let t = task(None, "1234");
            assert!(score_run(&t, Some("\\boxed{1,234}"), "", None).solved);
            let t = task(Some(TaskKind::Math), "0.5");
            assert!(score_run(&t, Some("\\boxed{\\frac{1}{2}}"), "", None).solved);
            assert_eq!(score_run(&t, None, "", None).reward, 0.0);
        }

        #[test]
        fn qa_reports_f1() {
            let t = task(Some(TaskKind::Qa), "Barack Hussein Obama|Obama");
            let s = score_run(&t, Some("the Obama"), "", None);
            assert_eq!((s.reward, s.solved), (1.0, true));
            assert_eq!(s.f1, Some(1.0));
            let s = score_run(&t, Some("Barack Obama"), "", None);
            assert!(!s.solved);
            assert!((s.f1.unwrap() - 0.8).abs() < 1e-12);
            assert_eq!(score_run(&t, None, "", None).f1, Some(0.0));
        }

        #[test]
        fn code_without_tests_or_sandbox_scores_zero() {
            let mut t = task(Some(TaskKind::Code), "1 test");
            let answer = "```python\nprint(input())\n```";
            assert!(!score_run(&t, Some(answer), "", None).solved);
            t.tests = Some(CodeTests::Io {
                inputs: vec!["1\n".into()],
                outputs: vec!["1\n".into()],
            });
            let s = score_run(&t, Some(answer), "", None);
            assert_eq!((s.reward, s.solved, s.f1), (0.0, false, None));
        }
    }
}

#[cfg(test)]
mod proptests;

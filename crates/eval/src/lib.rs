//! Evaluation: task sets, scoring a finished run against a task's answer, and the report.
//!
//! The runner lives with its caller (`catena eval` runs tasks through the same engine, sandbox
//! and chain runner as `catena run`; RL rollouts run them through the trainer); this module is
//! the part that needs no model: what a task file holds, whether an answer is right
//! ([`reward`], shared with RL so that training and evaluation agree on what "solved" means),
//! whether a chain is well formed, and the numbers.

mod parquet;
pub mod plot;
mod report;
pub mod reward;
mod source;
mod tasks;
pub mod vote;

pub use report::{FamilyStats, Report, TaskResult};
pub use reward::CodeTests;
pub use reward::{Score, score_run};
pub use source::kind_of_source;
pub use tasks::read_tasks;

use catena_protocol::{Block, Tag, boxed, parse_all};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One task: a question and the answer a checker accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalTask {
    pub id: String,
    pub question: String,
    /// The expected answer: a number or string (math), the acceptable answers separated by `|`
    /// or as a JSON list (QA); for code tasks only a description, since [`EvalTask::tests`]
    /// decides.
    pub answer: String,
    /// The task family (for per-family numbers), when the file says.
    #[serde(default)]
    pub family: Option<String>,
    /// Which verifier scores the task; none means math equivalence, which falls back to string
    /// equality, so a task file written before kinds existed scores as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<TaskKind>,
    /// The tests of a code task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<CodeTests>,
}

/// The verifier of a task (PROTOCOL.md §6: rewards are outcome only, one verifier a domain).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    /// Symbolic equivalence of the `\boxed{}` answer ([`reward::math_equivalent`]).
    #[default]
    Math,
    /// Exact match after normalisation, with token F1 reported ([`reward::qa_exact_match`]).
    Qa,
    /// The fenced program in the answer passes the task's tests in the sandbox.
    Code,
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a task ({reason}); a line is {{\"id\", \"question\", \"answer\"}}")]
    BadTask {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("{path}: no tasks")]
    Empty { path: PathBuf },
    #[error("{path}: not a readable parquet file ({reason})")]
    Parquet { path: PathBuf, reason: String },
    #[error(
        "{path}: row {row}: not a task ({reason}); a row has `prompt` (chat messages), `data_source`, `reward_model.ground_truth` and `extra_info`"
    )]
    BadRow {
        path: PathBuf,
        row: usize,
        reason: String,
    },
    #[error("drawing {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
}

/// An answer as compared: the `\boxed{}` content when there is one, trimmed, `\text{}` and
/// quotes unwrapped, thousands separators and a trailing `.0` dropped from numbers. Case is
/// kept (a string task's case matters).
pub fn normalise_answer(text: &str) -> String {
    let mut t = boxed(text).unwrap_or(text).trim();
    if let Some(inner) = t.strip_prefix("\\text{").and_then(|r| r.strip_suffix('}')) {
        t = inner.trim();
    }
    let t = t.trim_matches(|c| c == '\'' || c == '"' || c == '`').trim();
    let numeric = !t.is_empty()
        && t.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '-' | ',' | ' ' | '.'));
    if numeric {
        let compact: String = t.chars().filter(|c| !matches!(c, ',' | ' ')).collect();
        return compact
            .strip_suffix(".0")
            .map(str::to_string)
            .unwrap_or(compact);
    }
    t.to_string()
}

/// Whether `given` (the content of the run's last `<answer>`) answers `expected`.
pub fn exact_match(given: &str, expected: &str) -> bool {
    !given.trim().is_empty() && normalise_answer(given) == normalise_answer(expected)
}

/// A valid chain: every tag well nested and closed, and the last block an `<answer>` (with a
/// `\boxed{}` when the profile answers that way).
pub fn well_formed(trajectory: &str, boxed_answer: bool) -> bool {
    let (blocks, issues) = parse_all(trajectory);
    if !issues.is_empty() {
        return false;
    }
    match blocks.iter().rfind(|b: &&Block| b.tag != Tag::Observation) {
        Some(last) if last.tag == Tag::Answer && last.closed => {
            !boxed_answer || boxed(&last.content).is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_compare_after_normalising() {
        assert!(exact_match("\\boxed{1,234}", "1234"));
        assert!(exact_match(" \\boxed{\\text{NAEM}} ", "NAEM"));
        assert!(exact_match("\\boxed{42.0}", "42"));
        assert!(exact_match("'abc'", "abc"));
        assert!(!exact_match("\\boxed{abc}", "ABC"));
        assert!(!exact_match("", ""));
        assert!(
            !exact_match("\\boxed{12", "12"),
            "an unclosed box is not an answer"
        );
    }

    #[test]
    fn a_chain_is_well_formed_only_when_it_ends_in_a_boxed_answer() {
        let good = "<plan>1.</plan>\n<code>\n```py\nprint(1)\n```\n</code>\n<observation>\n1\n</observation>\n\n<answer>\\boxed{1}</answer>";
        assert!(well_formed(good, true));
        assert!(!well_formed("<plan>1.</plan> The answer is 1.", true));
        assert!(!well_formed("<answer>1</answer>", true));
        assert!(well_formed("<answer>1</answer>", false));
        assert!(!well_formed(
            "<think><answer>\\boxed{1}</answer></think>",
            true
        ));
        assert!(!well_formed("<answer>\\boxed{1}", true));
    }

    #[test]
    fn task_kinds_read_in_lower_case_and_default_to_none() {
        let task: EvalTask = serde_json::from_str(
            r#"{"id":"c","question":"q","answer":"tests","kind":"code","tests":{"inputs":["1\n"],"outputs":["2\n"]}}"#,
        )
        .unwrap();
        assert_eq!(task.kind, Some(TaskKind::Code));
        assert_eq!(
            task.tests,
            Some(CodeTests::Io {
                inputs: vec!["1\n".into()],
                outputs: vec!["2\n".into()]
            })
        );
        let old: EvalTask =
            serde_json::from_str(r#"{"id":"a","question":"q","answer":"1"}"#).unwrap();
        assert_eq!((old.kind, &old.tests), (None, &None));
        assert!(
            !serde_json::to_string(&old).unwrap().contains("kind"),
            "a task without a kind is written as before"
        );
        assert!(
            serde_json::from_str::<EvalTask>(
                r#"{"id":"a","question":"q","answer":"1","kind":"Math"}"#
            )
            .is_err()
        );
    }
}

//! Evaluation: task sets, scoring a finished run against a task's answer, and the report.
//!
//! The runner lives with its caller (`catena eval` runs tasks through the same engine, sandbox
//! and chain runner as `catena run`); this module is the part that needs no model: what a task
//! file holds, whether an answer is right, whether a chain is well formed, and the numbers.

use crate::protocol::{Block, Tag, boxed, parse_all};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One task: a question and the answer a checker accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalTask {
    pub id: String,
    pub question: String,
    pub answer: String,
    /// The task family (for per-family numbers), when the file says.
    #[serde(default)]
    pub family: Option<String>,
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
}

/// Reads a JSONL task file (one `{"id", "question", "answer"}` per line).
pub fn read_tasks(path: &Path) -> Result<Vec<EvalTask>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut tasks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let task: EvalTask = serde_json::from_str(line).map_err(|e| EvalError::BadTask {
            path: path.to_path_buf(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err(EvalError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(tasks)
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

/// One task's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub id: String,
    pub family: Option<String>,
    pub expected: String,
    pub answer: Option<String>,
    pub solved: bool,
    pub well_formed: bool,
    pub tool_calls: usize,
    pub generated_tokens: usize,
    pub seconds: f64,
    /// Why the run ended (`answer`, `max_tokens`, ...).
    pub stop: String,
}

/// The numbers of an evaluation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub model: String,
    pub adapter: Option<String>,
    pub profile: String,
    pub tasks: usize,
    /// Share of tasks solved (one greedy or sampled run each).
    pub pass_at_1: f64,
    /// Share of runs that are a valid chain ending in `<answer>`.
    pub format_rate: f64,
    pub mean_generated_tokens: f64,
    pub mean_tool_calls: f64,
    /// Generated tokens per solved task (all runs' tokens over the solved count).
    pub tokens_per_solved: Option<f64>,
    pub wall_seconds: f64,
    pub results: Vec<TaskResult>,
}

impl Report {
    pub fn new(
        model: String,
        adapter: Option<String>,
        profile: String,
        results: Vec<TaskResult>,
        wall_seconds: f64,
    ) -> Report {
        let n = results.len().max(1) as f64;
        let solved = results.iter().filter(|r| r.solved).count();
        let tokens: usize = results.iter().map(|r| r.generated_tokens).sum();
        Report {
            model,
            adapter,
            profile,
            tasks: results.len(),
            pass_at_1: solved as f64 / n,
            format_rate: results.iter().filter(|r| r.well_formed).count() as f64 / n,
            mean_generated_tokens: tokens as f64 / n,
            mean_tool_calls: results.iter().map(|r| r.tool_calls).sum::<usize>() as f64 / n,
            tokens_per_solved: (solved > 0).then(|| tokens as f64 / solved as f64),
            wall_seconds,
            results,
        }
    }

    /// The report as markdown: the headline numbers and one row per task.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "# Evaluation: {} on {} tasks\n\n",
            self.profile, self.tasks
        ));
        out.push_str(&format!(
            "- model: {}\n- adapter: {}\n- pass@1: {:.1}%\n- valid chains ending in <answer>: {:.1}%\n- generated tokens per task: {:.0}; tool calls per task: {:.2}\n- wall time: {:.0} s\n\n",
            self.model,
            self.adapter.as_deref().unwrap_or("none"),
            100.0 * self.pass_at_1,
            100.0 * self.format_rate,
            self.mean_generated_tokens,
            self.mean_tool_calls,
            self.wall_seconds
        ));
        out.push_str("| task | family | expected | answer | solved | valid chain | tokens | tool calls |\n|---|---|---|---|---|---|---|---|\n");
        for r in &self.results {
            let answer = r
                .answer
                .as_deref()
                .unwrap_or("")
                .replace('|', "\\|")
                .replace('\n', " ");
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.id,
                r.family.as_deref().unwrap_or(""),
                r.expected,
                answer.chars().take(40).collect::<String>(),
                if r.solved { "yes" } else { "no" },
                if r.well_formed { "yes" } else { "no" },
                r.generated_tokens,
                r.tool_calls
            ));
        }
        out
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
    fn task_files_are_read_and_bad_lines_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"id\":\"a\",\"question\":\"q\",\"answer\":\"1\",\"family\":\"f\"}\n\n{\"id\":\"b\"}\n").unwrap();
        let err = read_tasks(&path).unwrap_err().to_string();
        assert!(err.contains("t.jsonl:3"), "{err}");
        std::fs::write(
            &path,
            "{\"id\":\"a\",\"question\":\"q\",\"answer\":\"1\"}\n",
        )
        .unwrap();
        assert_eq!(read_tasks(&path).unwrap()[0].family, None);
        std::fs::write(&path, "\n").unwrap();
        assert!(read_tasks(&path).is_err());
    }
}

//! The numbers of an evaluation: one result per task, and what they add up to, as JSON and
//! markdown.

use serde::{Deserialize, Serialize};

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

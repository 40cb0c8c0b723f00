//! The numbers of an evaluation: one result per run (K runs a task with `--samples K`), and
//! what they add up to, as JSON and markdown. Fields only ever get added, so older readers of
//! `report.json` keep working.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One run's outcome.
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
    /// Which of the task's K runs this is (0-based).
    #[serde(default)]
    pub sample: usize,
    /// The RL reward of the run (1 or 0; the code format gate applied).
    #[serde(default)]
    pub reward: f64,
    /// Token F1 against the gold answers (QA tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f1: Option<f64>,
    /// Model calls of the run: one for a Chain-of-Agents run, one per agent activation (and page
    /// summary) for the explicit multi-agent system.
    #[serde(default)]
    pub model_calls: usize,
    /// Prompt and completion tokens of every model call, cached prompt tokens included: for a
    /// CoA run its whole context (prompt, generation, observations), each token once.
    #[serde(default)]
    pub total_tokens: usize,
    /// Mean log-probability of the run's sampled tokens, when it was recorded (`--vote`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_logprob: Option<f64>,
    /// What the run's own programs printed, for the vote over a math task's runs (`--vote`;
    /// `vote::printed_outputs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub printed: Vec<String>,
}

/// Pass rates of one task family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyStats {
    pub family: String,
    pub tasks: usize,
    pub pass_at_1: f64,
    pub pass_at_k: f64,
}

/// The numbers of an evaluation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub model: String,
    pub adapter: Option<String>,
    pub profile: String,
    pub tasks: usize,
    /// Mean over tasks of the share of its runs solved: pass@1 with one run a task, avg@K
    /// (the protocol's "avg@16" for AIME/AMC) with K.
    pub pass_at_1: f64,
    /// Share of runs that are a valid chain ending in `<answer>`.
    pub format_rate: f64,
    pub mean_generated_tokens: f64,
    pub mean_tool_calls: f64,
    /// Generated tokens per solved run (all runs' tokens over the solved runs).
    pub tokens_per_solved: Option<f64>,
    pub wall_seconds: f64,
    pub results: Vec<TaskResult>,
    /// Runs per task (K).
    #[serde(default = "one")]
    pub samples: usize,
    /// Share of tasks with at least one solved run (pass@K; pass@1 when K is 1).
    #[serde(default)]
    pub pass_at_k: f64,
    /// Mean token F1 over the runs that have one, when any task is QA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_f1: Option<f64>,
    /// Tool calls per solved run (all runs' calls over the solved runs).
    #[serde(default)]
    pub tool_calls_per_solved: Option<f64>,
    /// Pass rates by task family, in the order families first appear.
    #[serde(default)]
    pub families: Vec<FamilyStats>,
    /// `coa` (one generation a run) or `mas` (the explicit multi-agent system).
    #[serde(default = "coa")]
    pub mode: String,
    #[serde(default)]
    pub mean_model_calls: f64,
    /// Prompt and completion tokens of all runs over the solved runs: the paper's measure of
    /// what a solved task costs.
    #[serde(default)]
    pub total_tokens_per_solved: Option<f64>,
    /// maj@K (`--vote K`): the share of tasks whose K runs' vote picks a solved run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maj_at_k: Option<f64>,
}

fn coa() -> String {
    "coa".to_string()
}

fn one() -> usize {
    1
}

/// Family name of tasks that have none.
const NO_FAMILY: &str = "(none)";

impl Report {
    /// Adds up `results`: runs of the same task id are that task's samples.
    pub fn new(
        model: String,
        adapter: Option<String>,
        profile: String,
        mode: &str,
        results: Vec<TaskResult>,
        wall_seconds: f64,
    ) -> Report {
        let runs = results.len().max(1) as f64;
        let solved = results.iter().filter(|r| r.solved).count();
        let tokens: usize = results.iter().map(|r| r.generated_tokens).sum();
        let calls: usize = results.iter().map(|r| r.tool_calls).sum();
        let model_calls: usize = results.iter().map(|r| r.model_calls).sum();
        let total_tokens: usize = results.iter().map(|r| r.total_tokens).sum();
        let groups = by_task(&results);
        let f1s: Vec<f64> = results.iter().filter_map(|r| r.f1).collect();
        let (pass_at_1, pass_at_k) = pass_rates(&groups);
        Report {
            model,
            adapter,
            profile,
            tasks: groups.len(),
            pass_at_1,
            format_rate: results.iter().filter(|r| r.well_formed).count() as f64 / runs,
            mean_generated_tokens: tokens as f64 / runs,
            mean_tool_calls: calls as f64 / runs,
            tokens_per_solved: (solved > 0).then(|| tokens as f64 / solved as f64),
            wall_seconds,
            samples: groups.iter().map(Vec::len).max().unwrap_or(1),
            pass_at_k,
            mean_f1: (!f1s.is_empty()).then(|| f1s.iter().sum::<f64>() / f1s.len() as f64),
            tool_calls_per_solved: (solved > 0).then(|| calls as f64 / solved as f64),
            families: family_stats(&groups),
            mode: mode.to_string(),
            mean_model_calls: model_calls as f64 / runs,
            total_tokens_per_solved: (solved > 0).then(|| total_tokens as f64 / solved as f64),
            maj_at_k: None,
            results,
        }
    }

    /// The report as markdown: the headline numbers, the families, and one row per run.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "# Evaluation: {} on {} tasks\n\n",
            self.profile, self.tasks
        ));
        out.push_str(&format!(
            "- model: {}\n- adapter: {}\n- runs per task: {}\n- pass@1{}: {:.1}%\n- pass@{}: {:.1}%\n",
            self.model,
            self.adapter.as_deref().unwrap_or("none"),
            self.samples,
            if self.samples > 1 {
                format!(" (avg@{})", self.samples)
            } else {
                String::new()
            },
            100.0 * self.pass_at_1,
            self.samples,
            100.0 * self.pass_at_k,
        ));
        if let Some(majority) = self.maj_at_k {
            out.push_str(&format!(
                "- maj@{}: {:.1}% (the vote of each task's runs)
",
                self.samples,
                100.0 * majority
            ));
        }
        if let Some(f1) = self.mean_f1 {
            out.push_str(&format!("- mean F1: {:.1}%\n", 100.0 * f1));
        }
        out.push_str(&format!(
            "- valid chains ending in <answer>: {:.1}%\n- generated tokens per run: {:.0}; tool calls per run: {:.2}\n- per solved run: {}\n- wall time: {:.0} s\n\n",
            100.0 * self.format_rate,
            self.mean_generated_tokens,
            self.mean_tool_calls,
            match (self.tokens_per_solved, self.tool_calls_per_solved) {
                (Some(tokens), Some(calls)) =>
                    format!("{tokens:.0} generated tokens, {calls:.2} tool calls"),
                _ => "none solved".to_string(),
            },
            self.wall_seconds
        ));
        out.push_str(&format!(
            "- mode: {}; model calls per run: {:.1}; prompt and completion tokens per solved run: {}\n\n",
            self.mode,
            self.mean_model_calls,
            self.total_tokens_per_solved
                .map_or("none solved".to_string(), |t| format!("{t:.0}"))
        ));
        if !self.families.is_empty() {
            out.push_str(&format!(
                "| family | tasks | pass@1 | pass@{} |\n|---|---|---|---|\n",
                self.samples
            ));
            for f in &self.families {
                out.push_str(&format!(
                    "| {} | {} | {:.1}% | {:.1}% |\n",
                    cell(&f.family),
                    f.tasks,
                    100.0 * f.pass_at_1,
                    100.0 * f.pass_at_k
                ));
            }
            out.push('\n');
        }
        out.push_str("| task | sample | family | expected | answer | solved | valid chain | tokens | tool calls |\n|---|---|---|---|---|---|---|---|---|\n");
        for r in &self.results {
            let answer = cell(r.answer.as_deref().unwrap_or(""));
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                cell(&r.id),
                r.sample,
                cell(r.family.as_deref().unwrap_or("")),
                cell(&r.expected),
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

/// Text safe inside a markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The runs of each task, tasks in the order they first appear.
fn by_task(results: &[TaskResult]) -> Vec<Vec<&TaskResult>> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut groups: Vec<Vec<&TaskResult>> = Vec::new();
    for r in results {
        let i = *index.entry(&r.id).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[i].push(r);
    }
    groups
}

/// (mean share of each task's runs solved, share of tasks with a solved run).
fn pass_rates(groups: &[Vec<&TaskResult>]) -> (f64, f64) {
    if groups.is_empty() {
        return (0.0, 0.0);
    }
    let n = groups.len() as f64;
    let avg = groups
        .iter()
        .map(|g| g.iter().filter(|r| r.solved).count() as f64 / g.len().max(1) as f64)
        .sum::<f64>()
        / n;
    let any = groups.iter().filter(|g| g.iter().any(|r| r.solved)).count() as f64 / n;
    (avg, any)
}

fn family_stats(groups: &[Vec<&TaskResult>]) -> Vec<FamilyStats> {
    let mut order: Vec<&str> = Vec::new();
    let mut members: HashMap<&str, Vec<Vec<&TaskResult>>> = HashMap::new();
    for g in groups {
        let family = g
            .first()
            .and_then(|r| r.family.as_deref())
            .unwrap_or(NO_FAMILY);
        if !members.contains_key(family) {
            order.push(family);
        }
        members.entry(family).or_default().push(g.clone());
    }
    order
        .into_iter()
        .map(|family| {
            let tasks = &members[family];
            let (pass_at_1, pass_at_k) = pass_rates(tasks);
            FamilyStats {
                family: family.to_string(),
                tasks: tasks.len(),
                pass_at_1,
                pass_at_k,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, family: &str, sample: usize, solved: bool, tokens: usize) -> TaskResult {
        TaskResult {
            id: id.into(),
            family: Some(family.into()),
            expected: "1".into(),
            answer: Some(if solved { "1" } else { "2" }.into()),
            solved,
            well_formed: true,
            tool_calls: 1,
            generated_tokens: tokens,
            seconds: 1.0,
            stop: "answer".into(),
            sample,
            reward: if solved { 1.0 } else { 0.0 },
            f1: None,
            model_calls: 1,
            total_tokens: 3 * tokens,
            mean_logprob: None,
            printed: Vec::new(),
        }
    }

    #[test]
    fn pass_at_1_is_the_mean_share_and_pass_at_k_any_solved() {
        let results = vec![
            run("a", "x", 0, true, 10),
            run("a", "x", 1, false, 20),
            run("b", "x", 0, false, 30),
            run("b", "x", 1, false, 40),
            run("c", "y", 0, true, 50),
            run("c", "y", 1, true, 60),
        ];
        let r = Report::new("m".into(), None, "math".into(), "coa", results, 3.0);
        assert_eq!((r.tasks, r.samples), (3, 2));
        assert!((r.pass_at_1 - 0.5).abs() < 1e-12, "(1/2 + 0 + 1) / 3");
        assert!((r.pass_at_k - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(r.tokens_per_solved, Some(210.0 / 3.0));
        assert_eq!(r.tool_calls_per_solved, Some(2.0));
        assert_eq!(r.mean_generated_tokens, 35.0);
        assert_eq!(r.total_tokens_per_solved, Some(630.0 / 3.0));
        assert_eq!(r.mean_model_calls, 1.0);
        assert_eq!(r.families.len(), 2);
        assert_eq!(r.families[0].family, "x");
        assert_eq!(r.families[0].tasks, 2);
        assert!((r.families[0].pass_at_1 - 0.25).abs() < 1e-12);
        assert!((r.families[0].pass_at_k - 0.5).abs() < 1e-12);
        assert_eq!(r.families[1].pass_at_1, 1.0);
        assert_eq!(r.mean_f1, None);
        let md = r.markdown();
        assert!(md.contains("pass@1 (avg@2): 50.0%"), "{md}");
        assert!(md.contains("pass@2: 66.7%"), "{md}");
        assert!(md.contains("| y | 1 | 100.0% | 100.0% |"), "{md}");
        assert!(
            md.contains("per solved run: 70 generated tokens, 2.00 tool calls"),
            "{md}"
        );
    }

    #[test]
    fn one_run_a_task_reads_as_before() {
        let mut results = vec![run("a", "x", 0, true, 10), run("b", "x", 0, false, 30)];
        results[1].f1 = Some(0.5);
        results[1].family = None;
        let r = Report::new("m".into(), None, "math".into(), "coa", results, 1.0);
        assert_eq!((r.tasks, r.samples), (2, 1));
        assert_eq!((r.pass_at_1, r.pass_at_k), (0.5, 0.5));
        assert_eq!(r.tokens_per_solved, Some(40.0));
        assert_eq!(r.mean_f1, Some(0.5));
        assert_eq!(r.families[1].family, NO_FAMILY);
        let empty = Report::new("m".into(), None, "math".into(), "coa", Vec::new(), 0.0);
        assert_eq!(
            (empty.tasks, empty.pass_at_1, empty.tokens_per_solved),
            (0, 0.0, None)
        );
    }

    #[test]
    fn old_reports_still_read() {
        let old = r#"{"model":"m","adapter":null,"profile":"math","tasks":1,"pass_at_1":1.0,
            "format_rate":1.0,"mean_generated_tokens":5.0,"mean_tool_calls":0.0,
            "tokens_per_solved":5.0,"wall_seconds":1.0,"results":[{"id":"a","family":null,
            "expected":"1","answer":"1","solved":true,"well_formed":true,"tool_calls":0,
            "generated_tokens":5,"seconds":1.0,"stop":"answer"}]}"#;
        let r: Report = serde_json::from_str(old).unwrap();
        assert_eq!((r.samples, r.results[0].sample), (1, 0));
    }
}

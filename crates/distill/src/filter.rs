//! The progressive filters of distillation, in the paper's order: correctness, format,
//! complexity, quality. Each stage sees only what the one before kept, and the report counts
//! what each kept, so a user sees where their teacher's runs are lost.

use crate::convert::to_trajectory;
use crate::{MultiAgentRun, Role};
use serde::Serialize;
use std::collections::HashSet;

/// The filters' settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterConfig {
    /// Fewest agent activations a kept run has (the paper kept 5 to 20).
    pub min_hops: usize,
    pub max_hops: usize,
    /// Two trajectories whose word 5-gram sets overlap this much (Jaccard) are near-duplicates;
    /// the later one is dropped.
    pub near_duplicate: f64,
    /// Whether the answer must be a `\boxed{}` (the math and code profiles answer that way).
    pub boxed_answer: bool,
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig {
            min_hops: 5,
            max_hops: 20,
            near_duplicate: 0.9,
            boxed_answer: false,
        }
    }
}

/// A filter stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The run's answer earned the task's verifiable reward.
    Correctness,
    /// The run converts to a trajectory that is a valid chain ending in an answer.
    Format,
    /// Its number of agent activations is in the configured range.
    Complexity,
    /// No tool call repeated, a reflection after every failed tool call, and not a
    /// near-duplicate of a trajectory already kept.
    Quality,
}

/// How many runs a stage kept of those it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StageCount {
    pub stage: Stage,
    pub seen: usize,
    pub kept: usize,
}

/// What the filters did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilterReport {
    pub runs: usize,
    pub stages: Vec<StageCount>,
}

/// A run that passed every stage, with its trajectory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Distilled {
    pub task_id: String,
    pub question: String,
    pub profile: String,
    pub trajectory: String,
    /// Agent activations the trajectory holds.
    pub hops: usize,
    /// Tokens the explicit system spent on it (prompt and completion, every call).
    pub teacher_tokens: u64,
}

/// Runs `runs` through the four stages in order.
pub fn filter_runs(
    runs: &[MultiAgentRun],
    config: &FilterConfig,
) -> (Vec<Distilled>, FilterReport) {
    let mut stages = Vec::new();
    let mut count = |stage: Stage, seen: usize, kept: usize| {
        stages.push(StageCount { stage, seen, kept });
    };
    let correct: Vec<&MultiAgentRun> = runs.iter().filter(|r| r.reward >= 1.0).collect();
    count(Stage::Correctness, runs.len(), correct.len());

    let formatted: Vec<(&MultiAgentRun, String)> = correct
        .iter()
        .filter_map(|run| {
            let trajectory = to_trajectory(run).ok()?;
            catena_eval::well_formed(&trajectory, config.boxed_answer).then_some((*run, trajectory))
        })
        .collect();
    count(Stage::Format, correct.len(), formatted.len());

    let sized: Vec<(&MultiAgentRun, String)> = formatted
        .iter()
        .filter(|(run, _)| (config.min_hops..=config.max_hops).contains(&run.activations.len()))
        .cloned()
        .collect();
    count(Stage::Complexity, formatted.len(), sized.len());

    let mut kept: Vec<Distilled> = Vec::new();
    let mut kept_shingles: Vec<HashSet<u64>> = Vec::new();
    for (run, trajectory) in &sized {
        if repeats_a_tool_call(run) || leaves_a_failure_unreflected(run) {
            continue;
        }
        let shingles = shingles(trajectory);
        if kept_shingles
            .iter()
            .any(|other| jaccard(&shingles, other) >= config.near_duplicate)
        {
            continue;
        }
        kept_shingles.push(shingles);
        kept.push(Distilled {
            task_id: run.task_id.clone(),
            question: run.question.clone(),
            profile: run.profile.clone(),
            trajectory: trajectory.clone(),
            hops: run.activations.len(),
            teacher_tokens: run
                .activations
                .iter()
                .map(|a| a.prompt_tokens + a.completion_tokens)
                .sum(),
        });
    }
    count(Stage::Quality, sized.len(), kept.len());
    (
        kept,
        FilterReport {
            runs: runs.len(),
            stages,
        },
    )
}

/// The same tool called twice with the same input (after trimming).
fn repeats_a_tool_call(run: &MultiAgentRun) -> bool {
    let mut seen = HashSet::new();
    run.activations
        .iter()
        .filter(|a| a.role == Role::ToolAgent)
        .any(|a| !seen.insert((a.tool, a.output.trim())))
}

/// A failed tool call not followed by a reflection before the next tool call or the answer.
fn leaves_a_failure_unreflected(run: &MultiAgentRun) -> bool {
    let activations = &run.activations;
    activations.iter().enumerate().any(|(i, a)| {
        a.tool_ok == Some(false)
            && !activations[i + 1..]
                .iter()
                .take_while(|next| !matches!(next.role, Role::ToolAgent | Role::Answerer))
                .any(|next| next.role == Role::Reflector)
    })
}

/// Hashes of the trajectory's word 5-grams.
fn shingles(text: &str) -> HashSet<u64> {
    use std::hash::{Hash, Hasher};
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(5.min(words.len().max(1)))
        .map(|gram| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            gram.hash(&mut hasher);
            hasher.finish()
        })
        .collect()
}

fn jaccard(a: &HashSet<u64>, b: &HashSet<u64>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::tests::{act, tool};
    use catena_protocol::Tag;

    /// A solved run of `hops` activations: plan, thoughts and tool calls, answer.
    fn solved(id: &str, topic: &str, middle: Vec<crate::Activation>) -> MultiAgentRun {
        let mut activations = vec![act(
            Role::Planner,
            &format!("1. look up {topic}\n2. answer"),
        )];
        activations.extend(middle);
        activations.push(act(Role::Answerer, topic));
        MultiAgentRun {
            task_id: id.into(),
            question: format!("What about {topic}?"),
            profile: "mhqa".into(),
            activations,
            reward: 1.0,
        }
    }

    fn searches(topic: &str) -> Vec<crate::Activation> {
        vec![
            act(
                Role::Thinker,
                &format!("I should search for {topic} in the wiki first"),
            ),
            tool(
                Tag::WikiSearch,
                topic,
                &format!("Doc 1 (Title: {topic})\n{topic} is a town"),
                true,
            ),
            act(
                Role::Thinker,
                &format!("now the landmark of {topic} and who built it"),
            ),
            tool(
                Tag::WikiSearch,
                &format!("{topic} landmark"),
                "Doc 1 (Title: x)\ny",
                true,
            ),
        ]
    }

    #[test]
    fn each_stage_drops_what_it_should_and_counts_it() {
        let good = solved("good", "Kellmoor", searches("Kellmoor"));
        let mut wrong = solved("wrong", "Brinstead", searches("Brinstead"));
        wrong.reward = 0.0;
        let mut unparsable = solved("tags", "Oxwater", searches("Oxwater"));
        unparsable.activations[1].output = "see </think> here".into();
        let short = solved("short", "Tarnholm", vec![act(Role::Thinker, "easy")]);
        let mut repeated = solved("repeat", "Dunmere", searches("Dunmere"));
        repeated.activations[4].output = "Dunmere".into();
        let mut unreflected = solved("unreflected", "Eldmouth", searches("Eldmouth"));
        unreflected.activations[2].tool_ok = Some(false);
        let mut reflected = solved("reflected", "Saltcliff", searches("Saltcliff"));
        reflected.activations[2].tool_ok = Some(false);
        reflected.activations.insert(
            3,
            act(
                Role::Reflector,
                "the search failed; try the town's name alone",
            ),
        );
        let near_copy = solved("copy", "Kellmoor", searches("Kellmoor"));
        let runs = [
            good,
            wrong,
            unparsable,
            short,
            repeated,
            unreflected,
            reflected,
            near_copy,
        ];
        let (kept, report) = filter_runs(&runs, &FilterConfig::default());
        let ids: Vec<&str> = kept.iter().map(|d| d.task_id.as_str()).collect();
        assert_eq!(ids, ["good", "reflected"]);
        let counts: Vec<(Stage, usize, usize)> = report
            .stages
            .iter()
            .map(|s| (s.stage, s.seen, s.kept))
            .collect();
        assert_eq!(
            counts,
            [
                (Stage::Correctness, 8, 7),
                (Stage::Format, 7, 6),
                (Stage::Complexity, 6, 5),
                (Stage::Quality, 5, 2),
            ]
        );
        assert_eq!(kept[0].hops, 6);
        assert!(kept[0].trajectory.starts_with("<plan>1. look up Kellmoor"));
    }
}

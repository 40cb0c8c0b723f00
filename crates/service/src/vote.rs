//! The vote over chains of one task a request started together (`samples`): their stored
//! answers grouped by the profile's verifier, the largest group first (`catena_eval::vote`, one
//! implementation for the CLI's `--samples`, `catena eval --vote` and this).

use crate::{MAX_SAMPLES, Service, ServiceError};
use catena_eval::vote::{ChainAnswer, vote_on_chains};
use catena_protocol::{AnswerFormat, Profile};
use catena_run_events::StopReason;
use catena_store::{RunKind, RunRecord, RunStatus};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// Runs to put to a vote: ended agent runs of one task with one profile.
#[derive(Debug, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct VoteRequest {
    pub runs: Vec<String>,
}

/// What the vote read of one run.
#[derive(Debug, Clone, Serialize, TS)]
pub struct VoteChain {
    pub run_id: String,
    pub seed: Option<u32>,
    /// Every block closed in order and an `<answer>` the verifier reads last.
    pub valid: bool,
    pub answer: Option<String>,
    /// Mean log-probability of the run's sampled tokens; `None` when they were not recorded.
    pub mean_logprob: Option<f64>,
}

/// Answers the verifier could not tell apart.
#[derive(Debug, Clone, Serialize, TS)]
pub struct VoteGroup {
    /// The answer of the group's most likely run, as it wrote it, or as `\boxed{N}` when that
    /// run counted for the number its program printed.
    pub answer: String,
    /// The group's runs, in the order they were asked about.
    pub runs: Vec<String>,
    /// The most likely of them: it speaks for the group.
    pub best: String,
    pub mean_logprob: Option<f64>,
    /// One of the runs' own programs printed the group's value (math answers).
    pub printed: bool,
    /// Runs that counted for the number their last program printed rather than for their
    /// answer, which none of their programs printed.
    pub from_output: Vec<String>,
}

/// The count: groups largest first (ties to the more likely), the first one wins.
#[derive(Debug, Clone, Serialize, TS)]
pub struct Vote {
    pub chains: Vec<VoteChain>,
    pub groups: Vec<VoteGroup>,
    /// Runs without an answer (or, for programs, without one that could run).
    pub abstained: Vec<String>,
    /// The winning group's answer; `None` when every run abstained.
    pub answer: Option<String>,
}

impl Service {
    /// The vote over `request.runs`: 2 to [`MAX_SAMPLES`] ended agent runs of the same task and
    /// profile. Programs are compared by running them in the sandbox, on a blocking thread.
    pub async fn vote(&self, request: VoteRequest) -> Result<Vote, ServiceError> {
        let count = request.runs.len();
        if !(2..=MAX_SAMPLES as usize).contains(&count) {
            return Err(ServiceError::invalid(format!(
                "a vote needs 2 to {MAX_SAMPLES} runs; {count} were given."
            ))
            .param("runs"));
        }
        let ids = request.runs;
        if let Some(twice) = ids
            .iter()
            .enumerate()
            .find_map(|(i, id)| ids[..i].contains(id).then_some(id))
        {
            return Err(ServiceError::invalid(format!(
                "Run `{twice}` is listed twice: each chain has one vote."
            ))
            .param("runs"));
        }
        let runs = self
            .with_store(move |store, live| {
                let mut runs = Vec::with_capacity(ids.len());
                for id in &ids {
                    let run = store.run(id)?;
                    if live.is_live(id) || run.status == RunStatus::Running {
                        return Err(ServiceError::conflict(format!(
                            "Run `{id}` is still running: vote once every run has ended."
                        )));
                    }
                    runs.push(run);
                }
                Ok(runs)
            })
            .await?;
        let format = shared_answer_format(&runs)?;
        let shared = self.inference.sandbox.clone();
        // Preparing the sandbox and running programs block.
        tokio::task::spawn_blocking(move || {
            let sandbox = match format {
                AnswerFormat::Program => Some(shared.get().map_err(ServiceError::internal)?),
                _ => None,
            };
            count_votes(&runs, format, sandbox.as_deref())
        })
        .await
        .map_err(|e| ServiceError::internal(format!("the vote failed: {e}")))?
    }
}

/// The answer format of the runs' one profile: they must be agent runs of one task with one
/// built-in profile, or their answers are not comparable.
fn shared_answer_format(runs: &[RunRecord]) -> Result<AnswerFormat, ServiceError> {
    let first = runs
        .first()
        .ok_or_else(|| ServiceError::invalid("a vote needs runs").param("runs"))?;
    for run in runs {
        if run.kind != RunKind::Agent {
            return Err(ServiceError::invalid(format!(
                "Run `{}` is a chat completion, not an agent run: it has no answer to vote with.",
                run.id
            ))
            .param("runs"));
        }
        if run.task != first.task || run.profile != first.profile {
            return Err(ServiceError::invalid(format!(
                "Runs `{}` and `{}` answer different tasks (or with different profiles): their \
                 answers cannot be compared.",
                first.id, run.id
            ))
            .param("runs"));
        }
    }
    let name = first.profile.as_deref().unwrap_or("math");
    let profile = Profile::builtin(name).map_err(|e| {
        ServiceError::invalid(format!("Run `{}`'s profile: {e}", first.id)).param("runs")
    })?;
    Ok(profile.answer)
}

fn count_votes(
    runs: &[RunRecord],
    format: AnswerFormat,
    sandbox: Option<&catena_sandbox::Sandbox>,
) -> Result<Vote, ServiceError> {
    let mean_logprob = |run: &RunRecord| {
        run.summary
            .as_ref()
            .and_then(|s| s["mean_logprob"].as_f64())
    };
    // What each run's programs printed, as its runner recorded it (`RunSummary::printed`); a
    // run stored before that was recorded has none, and votes by its answer alone.
    let printed: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            let recorded = run.summary.as_ref().and_then(|s| s["printed"].as_array());
            recorded
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()
        })
        .collect();
    let answers: Vec<ChainAnswer<'_>> = runs
        .iter()
        .zip(&printed)
        .map(|(run, printed)| ChainAnswer {
            answer: run.answer.as_deref(),
            mean_logprob: mean_logprob(run),
            trajectory: run.trajectory.as_deref().unwrap_or(""),
            stop: run
                .summary
                .as_ref()
                .and_then(|s| s["stop_reason"].as_str())
                .and_then(StopReason::from_name),
            printed,
        })
        .collect();
    let tally = vote_on_chains(
        &answers,
        format,
        runs.first().map_or("", |r| r.task.as_str()),
        sandbox,
    )
    .map_err(|e| ServiceError::internal(e.to_string()))?;
    let id = |index: usize| runs[index].id.clone();
    let chains = runs
        .iter()
        .map(|run| VoteChain {
            run_id: run.id.clone(),
            seed: run.options["seed"]
                .as_u64()
                .and_then(|s| u32::try_from(s).ok()),
            valid: catena_eval::well_formed(
                run.trajectory.as_deref().unwrap_or(""),
                format == AnswerFormat::Boxed,
            ),
            answer: run.answer.clone(),
            mean_logprob: mean_logprob(run),
        })
        .collect();
    let groups: Vec<VoteGroup> = tally
        .groups
        .iter()
        .map(|g| VoteGroup {
            answer: g.answer.clone(),
            runs: g.members.iter().map(|&i| id(i)).collect(),
            best: id(g.best),
            mean_logprob: g.mean_logprob.is_finite().then_some(g.mean_logprob),
            printed: g.printed,
            from_output: g.from_output.iter().map(|&i| id(i)).collect(),
        })
        .collect();
    Ok(Vote {
        answer: groups.first().map(|g| g.answer.clone()),
        chains,
        groups,
        abstained: tally.abstained.iter().map(|&i| id(i)).collect(),
    })
}

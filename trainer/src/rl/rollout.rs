//! Rollouts: groups of trajectories sampled through the real runtime (llama.cpp with the
//! current adapter, the chain runner, the WASI sandbox), kept as the exact token ids the engine
//! evaluated and the log-probability each sampled token had when it was drawn.

use crate::{Result, TrainError};
use catena_agent::tools::ToolBox;
use catena_agent::{Budgets, CutShort, Decoding};
use catena_engine::llama::BatchedSession;
use catena_engine_api::{SamplingParams, Session, TokenRecord};
use catena_eval::EvalTask;
use catena_protocol::Profile;
use catena_runner::{Engine, RunPlan, TaskRun, run_queue, run_task};
use std::time::{Duration, Instant};

/// One sampled trajectory, ready to score and to train on.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// The whole context: prompt, generated tokens, observations.
    pub tokens: Vec<u32>,
    /// `trained[i]`: token `i` was sampled by the model (prompt, observation and re-tokenised
    /// stop-string tokens are masked).
    pub trained: Vec<bool>,
    /// The sampling log-probability of each trained token, in order.
    pub rollout_logprobs: Vec<f32>,
    pub answer: Option<String>,
    pub trajectory: String,
    pub tool_calls: usize,
    /// Why the chain ended (`answer`, `max_tokens`, ...).
    pub stop: String,
}

impl Rollout {
    /// Tokens the model generated (the response length the curves and shaping use).
    pub fn response_tokens(&self) -> usize {
        self.rollout_logprobs.len()
    }
}

/// The training view of a finished context: ids as the trainer takes them, the mask of
/// sampled tokens, and their sampling log-probabilities.
pub(crate) fn training_view(records: &[TokenRecord]) -> Result<(Vec<u32>, Vec<bool>, Vec<f32>)> {
    let mut tokens = Vec::with_capacity(records.len());
    let mut trained = Vec::with_capacity(records.len());
    let mut logprobs = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let id = u32::try_from(r.id).map_err(|_| {
            TrainError::Stopped(format!(
                "token {i} of a rollout has the invalid id {}",
                r.id
            ))
        })?;
        tokens.push(id);
        // The first token is never predicted; a sampled one always is.
        match r.logprob {
            Some(lp) if i > 0 && lp.is_finite() => {
                trained.push(true);
                logprobs.push(lp);
            }
            _ => trained.push(false),
        }
    }
    Ok((tokens, trained, logprobs))
}

/// What every rollout of a run shares.
pub struct RolloutSetup<'a> {
    pub profile: &'a Profile,
    pub tools: &'a ToolBox,
    pub temperature: f32,
    pub decoding: Decoding,
    pub max_tokens: usize,
    pub model_name: String,
}

impl RolloutSetup<'_> {
    /// How every rollout runs: the profile's tools and tool-call budget, `max_tokens`, no
    /// deadline.
    fn plan(&self) -> RunPlan<'_> {
        RunPlan {
            profile: self.profile,
            tools: self.tools,
            model: self.model_name.clone(),
            budgets: Budgets {
                max_tool_calls: self.profile.max_tool_calls,
                max_tokens: self.max_tokens,
                max_time: None,
            },
            cancel: None,
            decoding: self.decoding,
            // A rollout is scored on what the model wrote by itself.
            cut_short: CutShort::End,
        }
    }
}

/// Samples one trajectory for `task` on each of `sessions`, all decoded together (one batch a
/// step over one KV cache: the prompt is evaluated once and copied to the other sequences, and
/// a rollout waiting for its sandbox leaves the batch meanwhile). Rollout `g` is seeded with
/// `seed + g`.
pub fn sample_group(
    setup: &RolloutSetup<'_>,
    sessions: &mut [BatchedSession<'_>],
    task: &EvalTask,
    seed: u32,
) -> Result<(Vec<Rollout>, Duration)> {
    let started = Instant::now();
    let group = sessions.len();
    let mut rollouts: Vec<Option<Rollout>> = vec![None; group];
    run_queue(
        sessions.iter_mut().collect(),
        group,
        |session, g| rollout(setup, session, task, seed, g).map(Some),
        |g, rollout| {
            rollouts[g] = Some(rollout);
            Ok(())
        },
    )?;
    let rollouts = rollouts.into_iter().flatten().collect();
    Ok((rollouts, started.elapsed()))
}

/// Rollout `g` of a group seeded with `seed`, in `session`.
pub(crate) fn rollout(
    setup: &RolloutSetup<'_>,
    session: &mut BatchedSession<'_>,
    task: &EvalTask,
    seed: u32,
    g: usize,
) -> Result<Rollout> {
    let plan = setup.plan();
    let run = TaskRun {
        id: &task.id,
        question: &task.question,
        sampling: SamplingParams {
            temperature: setup.temperature,
            // No truncation: the sampled distribution is the model's own, the one the trainer
            // computes log-probabilities under.
            top_p: 1.0,
            top_k: 0,
            seed: seed.wrapping_add(g as u32),
            // Nor penalties, for the same reason.
            ..SamplingParams::default()
        },
        prefill: None,
    };
    let outcome = run_task(Engine::Chain(session), &plan, &run, None, &mut |_| {})
        .map_err(|e| TrainError::Stopped(format!("task {}: sampling a rollout: {e}", task.id)))?;
    let prompt_tokens = outcome.summary.prompt_tokens;
    if prompt_tokens < 2 {
        return Err(TrainError::Config(format!(
            "task {}: the prompt is empty",
            task.id
        )));
    }
    let (tokens, trained, rollout_logprobs) = training_view(session.tokens())?;
    // Tokens past the prompt begin with sampled ones; without their log-probabilities nothing
    // would be trained.
    if rollout_logprobs.is_empty() && tokens.len() > prompt_tokens {
        return Err(TrainError::Config(
            "the rollout's sequence records no log-probabilities (SessionOptions::logprobs)".into(),
        ));
    }
    let summary = outcome.summary;
    Ok(Rollout {
        tokens,
        trained,
        rollout_logprobs,
        answer: summary.answer,
        trajectory: summary.trajectory,
        tool_calls: summary.tool_calls,
        stop: summary.stop_reason.as_str().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sampled_tokens_are_trained() {
        let records = [
            TokenRecord {
                id: 5,
                logprob: None,
            },
            TokenRecord {
                id: 6,
                logprob: None,
            },
            TokenRecord {
                id: 7,
                logprob: Some(-0.5),
            },
            // An observation token appended by the runner.
            TokenRecord {
                id: 8,
                logprob: None,
            },
            TokenRecord {
                id: 9,
                logprob: Some(-1.25),
            },
            // A log-probability that is not a number is not trained on.
            TokenRecord {
                id: 10,
                logprob: Some(f32::NAN),
            },
        ];
        let (tokens, trained, lps) = training_view(&records).unwrap();
        assert_eq!(tokens, vec![5, 6, 7, 8, 9, 10]);
        assert_eq!(trained, vec![false, false, true, false, true, false]);
        assert_eq!(lps, vec![-0.5, -1.25]);
    }

    #[test]
    fn a_negative_id_is_an_error() {
        let records = [TokenRecord {
            id: -1,
            logprob: None,
        }];
        assert!(training_view(&records).is_err());
    }
}

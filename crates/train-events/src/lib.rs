//! The contract between `catena train sft --json` or `catena train rl --json` (a child process)
//! and whoever started it (the service behind the server and the desktop app, or a script): the
//! progress events, one JSON object per line on stdout, and the exit code that means "stopped on
//! request, resumable". Both sides use these types, so a change to one is a change to both; the
//! UI's `SftEvent` is generated from this one (feature `ts`, written to `ui/src/lib/generated` by
//! catena-service's drift test).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The exit code of a training run that stopped at a step boundary because it was asked to
/// (Ctrl-C, or `stop` on stdin): its checkpoint resumes it. 130 is what shells report for SIGINT.
pub const STOPPED_EXIT_CODE: u8 = 130;

/// What the SFT loop reports as it goes: the CLI draws a bar from these or prints them as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SftEvent {
    Prepared {
        train_samples: usize,
        eval_samples: usize,
        rejected: Vec<Rejected>,
        total_steps: usize,
        trainable_parameters: usize,
        weight_types: Vec<String>,
    },
    Resumed {
        step: usize,
        checkpoint: PathBuf,
    },
    Step {
        step: usize,
        total_steps: usize,
        epoch: usize,
        loss: f64,
        lr: f64,
        grad_norm: f64,
        tokens: usize,
        tokens_per_second: f64,
        elapsed_seconds: f64,
        eta_seconds: f64,
    },
    Eval {
        step: usize,
        loss: f64,
    },
    Checkpoint {
        step: usize,
        path: PathBuf,
    },
    Finished {
        steps: usize,
        adapter: PathBuf,
        peft: PathBuf,
        loss_curve: PathBuf,
        final_eval_loss: Option<f64>,
    },
    Stopped {
        step: usize,
        checkpoint: PathBuf,
    },
}

/// What the RL loop reports as it goes (`catena train rl --json`): the same lines around
/// checkpoints and stops as [`SftEvent`], a `group` line per sampled group and a `step` line
/// carrying the step's whole record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RlEvent {
    Prepared {
        tasks: usize,
        steps: usize,
        group: usize,
        batch_prompts: usize,
        trainable_parameters: usize,
        init_adapter: Option<PathBuf>,
    },
    Resumed {
        step: usize,
        checkpoint: PathBuf,
    },
    /// A group was sampled and scored.
    Group {
        step: usize,
        task: String,
        rewards: Vec<f64>,
        kept: bool,
    },
    Step {
        #[serde(flatten)]
        record: RlStepRecord,
        total_steps: usize,
        elapsed_seconds: f64,
        eta_seconds: f64,
    },
    Checkpoint {
        step: usize,
        path: PathBuf,
    },
    Finished {
        steps: usize,
        adapter: PathBuf,
        peft: PathBuf,
        curves: PathBuf,
    },
    Stopped {
        step: usize,
        checkpoint: PathBuf,
    },
}

/// One RL step, as the curves, a resumed run and a reader of `--json` lines see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlStepRecord {
    pub step: usize,
    /// Mean reward of every rollout sampled in the step (kept and dropped groups).
    pub reward_mean: f64,
    /// Share of the rollouts sampled that solved their task.
    pub solved_share: f64,
    /// Mean generated tokens per rollout.
    pub response_length: f64,
    /// Share of trained tokens whose clipped term stopped the gradient.
    pub clip_fraction: f64,
    /// Share of trained tokens whose importance weight hit its cap.
    pub capped_fraction: f64,
    /// Mean entropy (nats) of the policy at the trained tokens.
    pub entropy: f64,
    /// Mean |log p_trainer - log p_rollout| at the trained tokens before the update.
    pub logprob_gap: f64,
    pub groups_sampled: usize,
    pub groups_dropped: usize,
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    pub rollouts: usize,
    pub trained_tokens: usize,
    pub generated_tokens: usize,
    pub reload_seconds: f64,
    pub rollout_seconds: f64,
    /// Tokens of prompts and observations the engine evaluated during the rollouts (what a
    /// prompt shared within a group saved is not counted): the work beside generating.
    #[serde(default)]
    pub prefill_tokens: usize,
    /// Sequences a rollout decode step carried on average (steps that read a prompt or an
    /// observation left out): how full the batch was kept.
    #[serde(default)]
    pub mean_batch_width: f64,
    pub scoring_seconds: f64,
    pub update_seconds: f64,
}

impl RlStepRecord {
    pub fn dropped_share(&self) -> f64 {
        self.groups_dropped as f64 / self.groups_sampled.max(1) as f64
    }

    /// Whether the step updated the adapter: not when every group drawn had equal rewards,
    /// and then its clip fraction, entropy, log-probability gap and loss measure nothing.
    pub fn updated(&self) -> bool {
        self.trained_tokens > 0
    }
}

/// The lines both loops write around checkpoints and stops, so the trainer has one
/// implementation of resuming, checkpointing and stopping for SFT and RL.
pub trait CheckpointEvent {
    fn resumed(step: usize, checkpoint: PathBuf) -> Self;
    fn checkpoint(step: usize, path: PathBuf) -> Self;
    fn stopped(step: usize, checkpoint: PathBuf) -> Self;
}

impl CheckpointEvent for SftEvent {
    fn resumed(step: usize, checkpoint: PathBuf) -> Self {
        SftEvent::Resumed { step, checkpoint }
    }
    fn checkpoint(step: usize, path: PathBuf) -> Self {
        SftEvent::Checkpoint { step, path }
    }
    fn stopped(step: usize, checkpoint: PathBuf) -> Self {
        SftEvent::Stopped { step, checkpoint }
    }
}

impl CheckpointEvent for RlEvent {
    fn resumed(step: usize, checkpoint: PathBuf) -> Self {
        RlEvent::Resumed { step, checkpoint }
    }
    fn checkpoint(step: usize, path: PathBuf) -> Self {
        RlEvent::Checkpoint { step, path }
    }
    fn stopped(step: usize, checkpoint: PathBuf) -> Self {
        RlEvent::Stopped { step, checkpoint }
    }
}

/// A sample left out of training, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct Rejected {
    pub origin: String,
    pub reason: String,
}

/// Where a training run started from a UI stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum TrainingState {
    Running,
    Finished,
    /// Stopped on request; the same command resumes it from its checkpoint.
    Stopped,
    Failed,
}

impl TrainingState {
    /// The state a finished child's exit code means: 0 finished, [`STOPPED_EXIT_CODE`]
    /// stopped, anything else (or a signal, `None`) failed.
    pub fn from_exit_code(code: Option<i32>) -> TrainingState {
        match code {
            Some(0) => TrainingState::Finished,
            Some(code) if code == i32::from(STOPPED_EXIT_CODE) => TrainingState::Stopped,
            _ => TrainingState::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_survive_the_json_line_between_processes() {
        let events = [
            SftEvent::Prepared {
                train_samples: 3,
                eval_samples: 1,
                rejected: vec![Rejected {
                    origin: "a.jsonl:2".into(),
                    reason: "no trained tokens".into(),
                }],
                total_steps: 9,
                trainable_parameters: 1024,
                weight_types: vec!["Q4_K".into()],
            },
            SftEvent::Step {
                step: 1,
                total_steps: 9,
                epoch: 0,
                loss: 1.5,
                lr: 1e-4,
                grad_norm: 0.5,
                tokens: 100,
                tokens_per_second: 50.0,
                elapsed_seconds: 2.0,
                eta_seconds: 16.0,
            },
            SftEvent::Stopped {
                step: 1,
                checkpoint: "/tmp/ck".into(),
            },
        ];
        for event in events {
            let line = serde_json::to_string(&event).unwrap();
            assert!(!line.contains('\n'));
            let back: SftEvent = serde_json::from_str(&line).unwrap();
            assert_eq!(back, event);
        }
        let line = serde_json::to_string(&SftEvent::Eval { step: 2, loss: 0.5 }).unwrap();
        assert_eq!(line, r#"{"event":"eval","step":2,"loss":0.5}"#);
    }

    #[test]
    fn rl_steps_keep_their_record_flat_in_the_line() {
        let record = RlStepRecord {
            step: 3,
            reward_mean: 0.5,
            solved_share: 0.25,
            response_length: 120.0,
            clip_fraction: 0.1,
            capped_fraction: 0.0,
            entropy: 0.7,
            logprob_gap: 0.01,
            groups_sampled: 4,
            groups_dropped: 1,
            loss: -0.02,
            grad_norm: 0.3,
            lr: 2e-5,
            rollouts: 32,
            trained_tokens: 900,
            generated_tokens: 3840,
            reload_seconds: 0.2,
            rollout_seconds: 30.0,
            prefill_tokens: 700,
            mean_batch_width: 6.5,
            scoring_seconds: 0.1,
            update_seconds: 12.0,
        };
        let event = RlEvent::Step {
            record,
            total_steps: 20,
            elapsed_seconds: 90.0,
            eta_seconds: 510.0,
        };
        let line = serde_json::to_string(&event).unwrap();
        assert!(
            line.starts_with(r#"{"event":"step","step":3,"reward_mean":0.5,"#),
            "{line}"
        );
        assert!(!line.contains("record"), "{line}");
        assert_eq!(serde_json::from_str::<RlEvent>(&line).unwrap(), event);
        let group = RlEvent::Group {
            step: 1,
            task: "t1".into(),
            rewards: vec![1.0, 0.0],
            kept: true,
        };
        assert_eq!(
            serde_json::to_string(&group).unwrap(),
            r#"{"event":"group","step":1,"task":"t1","rewards":[1.0,0.0],"kept":true}"#
        );
    }

    #[test]
    fn exit_codes_name_the_state() {
        assert_eq!(
            TrainingState::from_exit_code(Some(0)),
            TrainingState::Finished
        );
        assert_eq!(
            TrainingState::from_exit_code(Some(130)),
            TrainingState::Stopped
        );
        assert_eq!(
            TrainingState::from_exit_code(Some(1)),
            TrainingState::Failed
        );
        assert_eq!(TrainingState::from_exit_code(None), TrainingState::Failed);
        assert_eq!(
            serde_json::to_string(&TrainingState::Stopped).unwrap(),
            "\"stopped\""
        );
    }
}

//! The contract between `catena train sft --json` (a child process) and whoever started it (the
//! service behind the server and the desktop app): the progress events, one JSON object per line
//! on stdout, and the exit code that means "stopped on request, resumable". Both sides use these
//! types, so a change to one is a change to both; the UI's `SftEvent` is generated from this one
//! (feature `ts`, written to `ui/src/lib/generated` by catena-service's drift test).

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

//! Checkpoints a killed run resumes from.
//!
//! `OUT/checkpoints/step-N/` holds the factors and the optimizer's moments
//! (`state.safetensors`) and the run's progress (`progress.json`). A checkpoint is written into
//! a temporary folder and renamed into place, and `OUT/checkpoints/latest` (the name of the
//! newest one) is replaced by a rename as well, so a SIGKILL at any moment leaves either the
//! previous checkpoint or the new one, never half of one.

use crate::lora::LoraParams;
use crate::optim::AdamW;
use crate::{Result, TrainError};
use candle_core::{Device, Tensor};
use catena_train_events::CheckpointEvent;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// One optimizer step, as the loss curve and the resumed run see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: usize,
    pub epoch: usize,
    /// Mean loss per trained token of the step.
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
    pub tokens: usize,
    pub trained_tokens: usize,
}

/// An evaluation on the held-out split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    pub step: usize,
    pub loss: f64,
}

/// Everything but the tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Optimizer steps done.
    pub step: usize,
    /// A fingerprint of the settings and data the run started with; resuming with others is
    /// refused.
    pub fingerprint: String,
    pub history: Vec<StepRecord>,
    pub evals: Vec<EvalRecord>,
}

/// What a run's progress record must say for checkpoints: the step it reached and the
/// fingerprint of the settings and data it belongs to.
pub trait StepCount {
    fn step(&self) -> usize;
    fn fingerprint(&self) -> &str;
}

impl StepCount for Progress {
    fn step(&self) -> usize {
        self.step
    }
    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// Checkpoints a run's training state: the factors, the optimizer's moments and `progress`
/// (what [`resume`] reads back).
pub fn save_state<P: Serialize + StepCount>(
    out: &Path,
    progress: &P,
    lora: &LoraParams,
    adam: &AdamW,
    keep: usize,
) -> Result<PathBuf> {
    let mut tensors: Vec<(String, Tensor)> = lora
        .named()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect();
    tensors.extend(adam.state());
    save(out, progress, &tensors, keep)
}

/// When a loop saves its state: every `every` steps (0: never on a schedule), after the last
/// step, and after the step during which a stop was requested. SFT and RL both resume, save and
/// stop through it, with the same events and the same message.
pub(crate) struct Policy<'a> {
    pub(crate) out: &'a Path,
    pub(crate) every: usize,
    pub(crate) keep: usize,
    pub(crate) stop: &'a AtomicBool,
}

impl Policy<'_> {
    /// The progress to start from: the latest checkpoint under `out` when there is one (its
    /// factors and optimizer moments loaded, a `resumed` event sent), `fresh` otherwise. A
    /// checkpoint of another run (its fingerprint is not `fresh`'s; `what` names what may
    /// differ) is refused.
    pub(crate) fn resume<P, E>(
        &self,
        fresh: P,
        what: &str,
        device: &Device,
        training: (&LoraParams, &mut AdamW),
        on_event: &mut dyn FnMut(&E),
    ) -> Result<P>
    where
        P: DeserializeOwned + StepCount,
        E: CheckpointEvent,
    {
        let (lora, adam) = training;
        let Some(Restored {
            progress,
            tensors,
            path,
        }) = load_latest::<P>(self.out, device)?
        else {
            return Ok(fresh);
        };
        if progress.fingerprint() != fresh.fingerprint() {
            return Err(TrainError::BadCheckpoint {
                path,
                reason: format!(
                    "it belongs to a run with other {what}; use another --out, or delete {} to start over",
                    self.out.display()
                ),
            });
        }
        lora.load(&tensors)
            .map_err(|reason| TrainError::BadCheckpoint {
                path: path.clone(),
                reason,
            })?;
        adam.restore(progress.step(), &tensors);
        on_event(&E::resumed(progress.step(), path));
        Ok(progress)
    }

    /// Saves the state after the step `progress` just finished when one is due, and sends a
    /// `checkpoint` event. When a stop was requested before the last of `total_steps`, sends
    /// `stopped` and returns [`TrainError::Stopped`]: the loop ends there, resumable.
    pub(crate) fn after_step<P, E>(
        &self,
        progress: &P,
        total_steps: usize,
        training: (&LoraParams, &AdamW),
        on_event: &mut dyn FnMut(&E),
    ) -> Result<()>
    where
        P: Serialize + StepCount,
        E: CheckpointEvent,
    {
        let step = progress.step();
        let last = step == total_steps;
        let stopping = self.stop.load(Ordering::SeqCst);
        let scheduled = self.every > 0 && step.is_multiple_of(self.every);
        if !(scheduled || last || stopping) {
            return Ok(());
        }
        let (lora, adam) = training;
        let path = save_state(self.out, progress, lora, adam, self.keep)?;
        on_event(&E::checkpoint(step, path.clone()));
        if stopping && !last {
            on_event(&E::stopped(step, path));
            return Err(TrainError::Stopped(format!(
                "stopped at step {step} of {total_steps}; run the same command again to resume"
            )));
        }
        Ok(())
    }
}

/// The fingerprint a run's checkpoints carry: the first 12 bytes of a SHA-256 over what
/// `feed` writes (the settings that change the numbers, and the data).
pub(crate) fn fingerprint(feed: impl FnOnce(&mut Sha256)) -> String {
    let mut hasher = Sha256::new();
    feed(&mut hasher);
    hex::encode(&hasher.finalize()[..12])
}

/// The seconds a run has taken and has left, from the steps it has done since it (re)started.
pub(crate) struct StepClock {
    started: Instant,
    done_at_start: usize,
}

impl StepClock {
    pub(crate) fn start(done_at_start: usize) -> StepClock {
        StepClock {
            started: Instant::now(),
            done_at_start,
        }
    }

    /// Seconds since the start, and the estimate for the steps after `done` of `total`.
    pub(crate) fn elapsed_and_eta(&self, done: usize, total: usize) -> (f64, f64) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let per_step = elapsed / done.saturating_sub(self.done_at_start).max(1) as f64;
        (elapsed, per_step * total.saturating_sub(done) as f64)
    }
}

pub fn checkpoints_dir(out: &Path) -> PathBuf {
    out.join("checkpoints")
}

/// Writes a checkpoint and makes it the latest; older ones beyond the newest `keep` are removed.
pub fn save<P: Serialize + StepCount>(
    out: &Path,
    progress: &P,
    tensors: &[(String, Tensor)],
    keep: usize,
) -> Result<PathBuf> {
    let dir = checkpoints_dir(out);
    std::fs::create_dir_all(&dir).map_err(TrainError::io(&dir))?;
    let name = format!("step-{:06}", progress.step());
    let tmp = dir.join(format!(".{name}.tmp"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(TrainError::io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(TrainError::io(&tmp))?;
    let map: HashMap<String, Tensor> = tensors.iter().cloned().collect();
    let state = tmp.join("state.safetensors");
    candle_core::safetensors::save(&map, &state)?;
    let json =
        serde_json::to_vec_pretty(progress).map_err(|e| TrainError::Stopped(e.to_string()))?;
    write_synced(&tmp.join("progress.json"), &json)?;
    let final_dir = dir.join(&name);
    if final_dir.exists() {
        std::fs::remove_dir_all(&final_dir).map_err(TrainError::io(&final_dir))?;
    }
    std::fs::rename(&tmp, &final_dir).map_err(TrainError::io(&final_dir))?;
    let latest_tmp = dir.join(".latest.tmp");
    write_synced(&latest_tmp, name.as_bytes())?;
    std::fs::rename(&latest_tmp, dir.join("latest")).map_err(TrainError::io(dir.join("latest")))?;
    prune(&dir, keep)?;
    Ok(final_dir)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(TrainError::io(path))?;
    f.write_all(bytes).map_err(TrainError::io(path))?;
    f.sync_all().map_err(TrainError::io(path))
}

fn prune(dir: &Path, keep: usize) -> Result<()> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(TrainError::io(dir))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    names.sort();
    let excess = names.len().saturating_sub(keep.max(1));
    for name in &names[..excess] {
        let path = dir.join(name);
        std::fs::remove_dir_all(&path).map_err(TrainError::io(&path))?;
    }
    Ok(())
}

/// A checkpoint read back.
#[derive(Debug)]
pub struct Restored<P = Progress> {
    pub progress: P,
    /// The factors and the optimizer's moments, by name.
    pub tensors: HashMap<String, Tensor>,
    pub path: PathBuf,
}

/// The latest checkpoint under `out`, if there is one.
pub fn load_latest<P: DeserializeOwned>(
    out: &Path,
    device: &Device,
) -> Result<Option<Restored<P>>> {
    let dir = checkpoints_dir(out);
    let latest = dir.join("latest");
    let name = match std::fs::read_to_string(&latest) {
        Ok(name) => name,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TrainError::io(&latest)(e)),
    };
    let path = dir.join(name.trim());
    let bad = |reason: String| TrainError::BadCheckpoint {
        path: path.clone(),
        reason,
    };
    let json = std::fs::read(path.join("progress.json")).map_err(|e| bad(e.to_string()))?;
    let progress: P =
        serde_json::from_slice(&json).map_err(|e| bad(format!("progress.json: {e}")))?;
    let tensors = candle_core::safetensors::load(path.join("state.safetensors"), device)
        .map_err(|e| bad(format!("state.safetensors: {e}")))?;
    Ok(Some(Restored {
        progress,
        tensors,
        path,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_checkpoint_round_trips_and_old_ones_are_pruned() -> Result<()> {
        let out = tempfile::tempdir().unwrap();
        let dev = Device::Cpu;
        assert!(load_latest::<Progress>(out.path(), &dev)?.is_none());
        let t = Tensor::new(&[1.5f32, -2.0], &dev)?;
        for step in 1..=4 {
            let progress = Progress {
                step,
                fingerprint: "f".into(),
                history: vec![],
                evals: vec![EvalRecord { step, loss: 1.0 }],
            };
            save(
                out.path(),
                &progress,
                &[("w".into(), (&t * step as f64)?)],
                2,
            )?;
        }
        let Restored {
            progress,
            tensors,
            path,
        } = load_latest::<Progress>(out.path(), &dev)?.expect("a checkpoint");
        assert_eq!(progress.step, 4);
        assert!(path.ends_with("step-000004"));
        assert_eq!(tensors["w"].to_vec1::<f32>()?, vec![6.0, -8.0]);
        let left: Vec<_> = std::fs::read_dir(checkpoints_dir(out.path()))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("step-"))
            .collect();
        assert_eq!(left.len(), 2);
        // A damaged checkpoint is an error that names it, not a panic or a silent restart.
        std::fs::write(path.join("progress.json"), b"{").unwrap();
        let err = load_latest::<Progress>(out.path(), &dev)
            .unwrap_err()
            .to_string();
        assert!(err.contains("progress.json"), "{err}");
        Ok(())
    }
}

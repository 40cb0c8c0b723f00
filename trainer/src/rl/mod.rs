//! Agentic RL (DAPO, PROTOCOL.md §6): sample groups of trajectories through the real
//! runtime with the adapter being trained, score them with verifiable rewards, and update the
//! adapter on the tokens the model sampled.
//!
//! One step:
//! 1. the current factors are written as a llama.cpp adapter and the rollout engine is loaded
//!    with it (see [`reload_engine`] for why a load and not a swap);
//! 2. prompts are drawn in a seeded order and `group` trajectories sampled for each; groups
//!    whose rewards are all equal carry no signal and are dropped, and more prompts are drawn
//!    until `batch_prompts` groups are kept (dynamic sampling), or a cap on draws is reached
//!    ([`draw`] says when: a group that looks uniform half-way gives its place early);
//! 3. the kept trajectories' sampled tokens get the DAPO loss ([`loss`]); one optimizer step
//!    per mini-batch (one by default, as the protocol says).
//!
//! Checkpoints and resume work as in SFT: the factors, the optimizer's moments and the record
//! of every step, written atomically; a resumed run continues with the same task order.

mod curves;
mod draw;
mod loss;
mod rollout;

use crate::base::BaseModel;
use crate::checkpoint::{self, StepClock, StepCount};
use crate::lora::LoraConfig;
use crate::model::{ObjectivePass, Qwen2Lora};
use crate::optim::{AdamW, AdamWConfig, accumulate, clip_grad_norm};
use crate::pack::{self, Pack};
use crate::{Result, TrainError, export, gguf_adapter};
use candle_core::{Device, Tensor};
use catena_agent::Decoding;
use catena_agent::tools::ToolBox;
use catena_engine::llama::{AdapterOptions, BatchReport, LlamaEngine, LoadOptions};
use catena_engine_api::SessionOptions;
use catena_eval::EvalTask;
use catena_protocol::Profile;
use catena_sandbox::Sandbox;
pub use catena_train_events::{RlEvent, RlStepRecord};
use draw::{Drawn, draw_groups};
pub use loss::DapoConfig;
use loss::{BatchObjective, group_advantages};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
pub use rollout::{Rollout, RolloutSetup, sample_group};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// Everything `catena train rl` takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RlOptions {
    pub base: PathBuf,
    pub tasks: PathBuf,
    pub out: PathBuf,
    /// The adapter to start from: a PEFT folder (an SFT run's `peft/`) or a GGUF adapter file
    /// (the shipped one); a fresh adapter otherwise.
    pub init_adapter: Option<PathBuf>,
    /// The fresh adapter's shape when there is no `init_adapter`.
    pub lora: LoraConfig,
    pub profile: String,
    pub adam: AdamWConfig,
    pub dapo: DapoConfig,
    /// Rollouts per prompt.
    pub group: usize,
    /// Groups with a learning signal per step.
    pub batch_prompts: usize,
    /// At most this many times `batch_prompts` prompts are drawn in one step.
    pub max_draw_factor: usize,
    /// Groups whose rollouts are decoded at once (`group` × this sequences in one context),
    /// never more than could still be needed, so none is drawn only to be thrown away (a
    /// doubtful group, [`draw`], gives its place early, and is kept if it has signal). More
    /// groups keep the batch full while some rollouts run their code or finish a group's tail
    /// (docs/TRAINING.md, "Agentic RL", step 2). A speed setting: not part of the run's record.
    #[serde(skip, default = "four_groups")]
    pub parallel_groups: usize,
    pub steps: usize,
    /// Optimizer steps per batch (the batch split into this many mini-batches).
    pub updates_per_batch: usize,
    pub temperature: f32,
    /// Whether rollouts are held to the profile's chain grammar (the default, as for `catena
    /// run`) or written freely. Held to it, a rollout is sampled from the policy with the
    /// grammar's mask over it; its recorded log-probabilities (and so the importance weights)
    /// are the unmasked policy's (docs/TRAINING.md, "Rollouts held to the grammar").
    /// Left out of the settings' record when free (and read back as free when missing), so a
    /// run begun before rollouts were held to the grammar resumes with `--free`.
    #[serde(default = "free", skip_serializing_if = "is_free")]
    pub decoding: Decoding,
    /// Generated tokens per rollout.
    pub max_tokens: usize,
    /// Add the overlong penalty of PROTOCOL.md §6 to the reward.
    pub overlong_shaping: bool,
    pub grad_clip: f64,
    pub gpu_layers: Option<u32>,
    pub checkpoint_every: usize,
    pub keep_checkpoints: usize,
    pub seed: u64,
}

/// As many as a step keeps by default (`batch_prompts`): a step's groups all start at once, and
/// their tails overlap (docs/BENCHMARKS.md, "Every group of a step at once").
fn four_groups() -> usize {
    4
}

fn is_free(decoding: &Decoding) -> bool {
    *decoding == Decoding::Free
}

fn free() -> Decoding {
    Decoding::Free
}

impl RlOptions {
    pub fn new(base: PathBuf, tasks: PathBuf, out: PathBuf) -> RlOptions {
        RlOptions {
            base,
            tasks,
            out,
            init_adapter: None,
            lora: LoraConfig::default(),
            profile: "math".into(),
            adam: AdamWConfig {
                lr: 2e-5,
                ..AdamWConfig::default()
            },
            dapo: DapoConfig::default(),
            group: 8,
            batch_prompts: 4,
            max_draw_factor: 3,
            parallel_groups: four_groups(),
            steps: 20,
            updates_per_batch: 1,
            temperature: 1.0,
            decoding: Decoding::Protocol,
            max_tokens: 512,
            overlong_shaping: false,
            grad_clip: 1.0,
            gpu_layers: None,
            checkpoint_every: 1,
            keep_checkpoints: 2,
            seed: 42,
        }
    }
}

/// Everything but the tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlProgress {
    pub step: usize,
    pub fingerprint: String,
    /// Prompts drawn so far (the position in the seeded task order).
    pub drawn: usize,
    pub history: Vec<RlStepRecord>,
}

impl StepCount for RlProgress {
    fn step(&self) -> usize {
        self.step
    }
    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// The architecture the adapters are written for (the only one [`BaseModel`] reads).
const ARCHITECTURE: &str = "qwen2";

/// A scored rollout of a kept group.
#[derive(Debug, Clone)]
pub struct Scored {
    pub rollout: Rollout,
    pub advantage: f64,
}

/// The task order: a fresh seeded shuffle for every pass over the tasks.
fn task_at(drawn: usize, tasks: usize, seed: u64) -> usize {
    let pass = drawn / tasks;
    let mut order: Vec<usize> = (0..tasks).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(
        seed ^ (pass as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    ));
    order[drawn % tasks]
}

fn fingerprint(options: &RlOptions, tasks: &[EvalTask]) -> Result<String> {
    let mut settings = options.clone();
    settings.out = PathBuf::new();
    settings.steps = 0;
    settings.checkpoint_every = 0;
    settings.keep_checkpoints = 0;
    settings.gpu_layers = None;
    let adapter = match &options.init_adapter {
        Some(file) if file.is_file() => Some(std::fs::read(file).map_err(TrainError::io(file))?),
        Some(dir) => {
            let path = dir.join("adapter_model.safetensors");
            Some(std::fs::read(&path).map_err(TrainError::io(&path))?)
        }
        None => None,
    };
    Ok(checkpoint::fingerprint(|h| {
        h.update(serde_json::to_vec(&settings).unwrap_or_default());
        h.update(serde_json::to_vec(tasks).unwrap_or_default());
        if let Some(bytes) = &adapter {
            h.update(bytes);
        }
    }))
}

/// Loads the rollout engine with the current factors.
///
/// The adapter is loaded with the model rather than swapped into a long-lived one: llama.cpp
/// frees an adapter together with its model, while the `llama-cpp-2` wrapper never frees one
/// and keeps the raw model and context pointers the free and set calls need private. A load per
/// step (the weights are memory-mapped, so it is a fraction of a second on the CPU) keeps one
/// adapter alive at a time with no `unsafe`; its time is recorded as `reload_seconds`.
fn reload_engine(
    options: &RlOptions,
    model: &Qwen2Lora,
    architecture: &str,
) -> Result<LlamaEngine> {
    let path = options.out.join("rollout-adapter.gguf");
    export::write_gguf(
        &model.lora,
        architecture,
        &path,
        export::FactorPrecision::F32,
    )?;
    Ok(LlamaEngine::load(
        &options.base,
        &LoadOptions {
            gpu_layers: options.gpu_layers,
            adapter: Some(AdapterOptions { path, scale: 1.0 }),
            // The adapter is new at every step: a cached prefix would never be read again.
            prompt_cache: None,
        },
    )?)
}

/// Runs (or resumes) an RL run to the end and exports the adapter. `tasks` are the prompts (as
/// read from `options.tasks`); `tools` are the profile's tools (the code tool's sandbox);
/// `scoring` is the sandbox code tasks' tests run in.
pub fn train(
    options: &RlOptions,
    tasks: &[EvalTask],
    tools: &ToolBox,
    scoring: Option<&Sandbox>,
    device: &Device,
    on_event: &mut dyn FnMut(&RlEvent),
    stop: &AtomicBool,
) -> Result<RlProgress> {
    let profile = check(options, tasks)?;
    let (model, base_name) = {
        let base = BaseModel::load(&options.base, device)?;
        // The base's hold on the quantised weights ends here: the model keeps what it uses.
        (starting_model(options, &base, device)?, base.name.clone())
    };
    on_event(&RlEvent::Prepared {
        tasks: tasks.len(),
        steps: options.steps,
        group: options.group,
        batch_prompts: options.batch_prompts,
        trainable_parameters: model.lora.parameter_count(),
        init_adapter: options.init_adapter.clone(),
    });
    std::fs::create_dir_all(&options.out).map_err(TrainError::io(&options.out))?;
    let fresh = RlProgress {
        step: 0,
        fingerprint: fingerprint(options, tasks)?,
        drawn: 0,
        history: Vec::new(),
    };
    let mut adam = AdamW::new(options.adam);
    let policy = checkpoint::Policy {
        out: &options.out,
        every: options.checkpoint_every,
        keep: options.keep_checkpoints,
        stop,
    };
    let mut progress = policy.resume(
        fresh,
        "settings, tasks or starting adapter",
        device,
        (&model.lora, &mut adam),
        on_event,
    )?;
    let run = StepInputs {
        options,
        profile: &profile,
        tools,
        scoring,
        tasks,
        model: &model,
    };
    let clock = StepClock::start(progress.step);
    while progress.step < options.steps {
        let record = run_step(&run, &mut adam, &mut progress, on_event)?;
        progress.step += 1;
        progress.history.push(record.clone());
        let (elapsed_seconds, eta_seconds) = clock.elapsed_and_eta(progress.step, options.steps);
        on_event(&RlEvent::Step {
            record,
            total_steps: options.steps,
            elapsed_seconds,
            eta_seconds,
        });
        curves::rl_curves(&progress.history, &options.out.join("curves.svg"))?;
        policy.after_step(&progress, options.steps, (&model.lora, &adam), on_event)?;
    }
    finish(
        &model,
        base_name.as_deref(),
        &options.out,
        progress,
        on_event,
    )
}

/// The settings a run cannot start with, and the profile its rollouts use.
fn check(options: &RlOptions, tasks: &[EvalTask]) -> Result<Profile> {
    if options.group < 2 || options.batch_prompts == 0 || options.steps == 0 {
        return Err(TrainError::Config(
            "a group needs at least 2 rollouts, a batch at least 1 prompt, a run at least 1 step"
                .into(),
        ));
    }
    let profile = Profile::builtin(&options.profile)
        .map_err(|e| TrainError::Config(format!("profile {}: {e}", options.profile)))?;
    if tasks.is_empty() {
        return Err(TrainError::BadData {
            path: options.tasks.clone(),
            reason: "no tasks".into(),
        });
    }
    Ok(profile)
}

/// The model with the adapter the run starts from: `init_adapter` (checked against `base`),
/// or a fresh one of `options.lora`'s shape.
fn starting_model(options: &RlOptions, base: &BaseModel, device: &Device) -> Result<Qwen2Lora> {
    let Some(dir) = &options.init_adapter else {
        return Qwen2Lora::new(base, &options.lora, options.seed);
    };
    let (config, tensors) = if dir.is_file() {
        gguf_adapter::read_gguf_adapter_for(base, dir, device)?
    } else {
        export::read_peft_for(base, dir, device)?
    };
    let model = Qwen2Lora::new(base, &config, options.seed)?;
    model
        .lora
        .load(&tensors)
        .map_err(|reason| TrainError::BadCheckpoint {
            path: dir.clone(),
            reason: format!("{reason} (is it an adapter for this base model?)"),
        })?;
    Ok(model)
}

/// The adapter in both formats and the curves, after the last step; the rollouts' adapter
/// file is no longer needed.
fn finish(
    model: &Qwen2Lora,
    base_name: Option<&str>,
    out: &Path,
    progress: RlProgress,
    on_event: &mut dyn FnMut(&RlEvent),
) -> Result<RlProgress> {
    let exported = export::export(&model.lora, ARCHITECTURE, base_name, out)?;
    let curves = out.join("curves.svg");
    curves::rl_curves(&progress.history, &curves)?;
    let _ = std::fs::remove_file(out.join("rollout-adapter.gguf"));
    on_event(&RlEvent::Finished {
        steps: progress.step,
        adapter: exported.gguf,
        peft: exported.peft_dir,
        curves,
    });
    Ok(progress)
}

/// What every step of a run reads.
struct StepInputs<'a> {
    options: &'a RlOptions,
    profile: &'a Profile,
    tools: &'a ToolBox,
    scoring: Option<&'a Sandbox>,
    tasks: &'a [EvalTask],
    model: &'a Qwen2Lora,
}

/// Sampling, scoring and the update of one step.
fn run_step(
    run: &StepInputs<'_>,
    adam: &mut AdamW,
    progress: &mut RlProgress,
    on_event: &mut dyn FnMut(&RlEvent),
) -> Result<RlStepRecord> {
    let options = run.options;
    let step = progress.step;
    let t_reload = Instant::now();
    let engine = reload_engine(options, run.model, ARCHITECTURE)?;
    let reload_seconds = t_reload.elapsed().as_secs_f64();
    let setup = RolloutSetup {
        profile: run.profile,
        tools: run.tools,
        temperature: options.temperature,
        decoding: options.decoding,
        max_tokens: options.max_tokens,
        model_name: engine.info().name.clone().unwrap_or_default(),
    };
    // One sequence per rollout of a group, decoded together.
    // The update's importance weights read every sampled token's log-probability.
    let session_options = SessionOptions {
        context_size: Some(u32::try_from(options.max_tokens + 3072).unwrap_or(u32::MAX)),
        logprobs: true,
        ..SessionOptions::default()
    };
    let lanes = options.group
        * options
            .parallel_groups
            .clamp(1, options.batch_prompts.max(1));
    let (drawn, batches) = engine.with_sequences_reported(&session_options, lanes, |sessions| {
        draw_groups(run, &setup, sessions, progress, on_event)
    })?;
    let drawn = drawn?;
    drop(engine);
    let t_update = Instant::now();
    let update = if drawn.kept.is_empty() {
        // Every group drawn was uniform: no signal this step, and no update.
        UpdateStats::default()
    } else {
        update(options, run.model, adam, &drawn.kept, step)?
    };
    let seconds = StepSeconds {
        reload: reload_seconds,
        update: t_update.elapsed().as_secs_f64(),
    };
    Ok(step_record(
        options, step, &drawn, &batches, &update, seconds,
    ))
}

/// The seconds a step spent outside sampling and scoring.
struct StepSeconds {
    reload: f64,
    update: f64,
}

/// The record of step `step` (0-based) from what it drew, how full the rollouts kept the batch
/// and what its update measured.
fn step_record(
    options: &RlOptions,
    step: usize,
    drawn: &Drawn,
    batches: &BatchReport,
    update: &UpdateStats,
    seconds: StepSeconds,
) -> RlStepRecord {
    let n = drawn.rewards.len().max(1) as f64;
    RlStepRecord {
        step: step + 1,
        reward_mean: drawn.rewards.iter().sum::<f64>() / n,
        solved_share: drawn.solved as f64 / n,
        response_length: drawn.lengths.iter().sum::<usize>() as f64 / n,
        clip_fraction: update.clip_fraction,
        capped_fraction: update.capped_fraction,
        entropy: update.entropy,
        logprob_gap: update.logprob_gap,
        groups_sampled: drawn.sampled,
        groups_dropped: drawn.dropped,
        loss: update.loss,
        grad_norm: update.grad_norm,
        lr: if drawn.kept.is_empty() {
            0.0
        } else {
            options.adam.lr
        },
        rollouts: drawn.rewards.len(),
        trained_tokens: drawn.kept.iter().map(|s| s.rollout.response_tokens()).sum(),
        generated_tokens: drawn.lengths.iter().sum(),
        reload_seconds: seconds.reload,
        rollout_seconds: drawn.rollout_seconds,
        prefill_tokens: batches.prefill_tokens,
        mean_batch_width: batches.mean_width(),
        scoring_seconds: drawn.scoring_seconds,
        update_seconds: seconds.update,
    }
}

/// What an update measured.
#[derive(Debug, Default, Clone)]
pub struct UpdateStats {
    pub loss: f64,
    /// The last mini-batch's gradient norm, before clipping.
    pub grad_norm: f64,
    pub clip_fraction: f64,
    pub capped_fraction: f64,
    /// Mean policy entropy at the trained tokens (before the first update).
    pub entropy: f64,
    /// Mean |log p_trainer - log p_rollout| (before the first update).
    pub logprob_gap: f64,
}

/// The DAPO update of one batch, in `updates_per_batch` mini-batches. The rollouts of a group
/// share their prompt, so each run of them that begins alike is evaluated as one pack, the
/// prompt once (pack.rs); the gradient is the same as evaluating each alone.
pub fn update(
    options: &RlOptions,
    model: &Qwen2Lora,
    adam: &mut AdamW,
    kept: &[Scored],
    step: usize,
) -> Result<UpdateStats> {
    let updates = options.updates_per_batch.clamp(1, kept.len());
    // With one update per batch the pre-update model is the current one, so its log-probs come
    // from the same pass; with several, they are computed once before the first.
    let old: Option<Vec<Vec<f32>>> = if updates > 1 {
        let sequences = training_sequences(kept);
        let mut all = Vec::with_capacity(kept.len());
        for rows in pack::runs(&sequences) {
            all.extend(model.pack_logprobs(&sequences[rows])?);
        }
        Some(all)
    } else {
        None
    };
    let per_batch = kept.len().div_ceil(updates);
    let mut result = UpdateStats::default();
    let mut first_pass = FirstPass::default();
    let (mut clipped_sum, mut capped_sum, mut seen) = (0.0, 0.0, 0usize);
    for (mb, members) in kept.chunks(per_batch).enumerate() {
        let first = mb == 0;
        let offset = mb * per_batch;
        let total: usize = members.iter().map(|s| s.rollout.response_tokens()).sum();
        let mut objective = BatchObjective::new(options.dapo, total);
        let mut grads: HashMap<String, Tensor> = HashMap::new();
        let sequences = training_sequences(members);
        for rows in pack::runs(&sequences) {
            let old = old
                .as_ref()
                .map(|o| &o[offset + rows.start..offset + rows.end]);
            let pass = PackPass {
                rollouts: &members[rows.clone()],
                sequences: &sequences[rows],
                old,
                first,
                step,
            };
            let pack_grads = pass.run(model, &mut objective, &mut first_pass)?;
            accumulate(&mut grads, pack_grads)?;
        }
        result.grad_norm = clip_grad_norm(&mut grads, options.grad_clip)?;
        let named: Vec<(String, &candle_core::Var)> = model.lora.named();
        adam.step(&named, &grads, options.adam.lr)?;
        if !objective.loss().is_finite() {
            return Err(TrainError::Stopped(format!(
                "the loss became {} at step {}; lower --lr",
                objective.loss(),
                step + 1
            )));
        }
        result.loss += objective.loss() / updates as f64;
        clipped_sum += objective.clip_fraction() * total as f64;
        capped_sum += objective.capped_fraction() * total as f64;
        seen += total;
    }
    result.clip_fraction = clipped_sum / seen.max(1) as f64;
    result.capped_fraction = capped_sum / seen.max(1) as f64;
    result.entropy = first_pass.entropy_sum / first_pass.tokens.max(1) as f64;
    result.logprob_gap = first_pass.gap_sum / first_pass.tokens.max(1) as f64;
    Ok(result)
}

/// Each rollout's tokens and the mask of those it trains, as a pack takes them.
fn training_sequences(rollouts: &[Scored]) -> Vec<(&[u32], &[bool])> {
    rollouts
        .iter()
        .map(|s| (s.rollout.tokens.as_slice(), s.rollout.trained.as_slice()))
        .collect()
}

/// What the first mini-batch's passes measure, before the first optimizer step.
#[derive(Default)]
struct FirstPass {
    entropy_sum: f64,
    /// Sum of |log p_trainer - log p_rollout|.
    gap_sum: f64,
    tokens: usize,
}

/// One packed pass of the update over consecutive rollouts that begin alike.
struct PackPass<'a> {
    rollouts: &'a [Scored],
    /// Their tokens and training masks.
    sequences: &'a [(&'a [u32], &'a [bool])],
    /// Their pre-update log-probabilities, where computed before the first mini-batch.
    old: Option<&'a [Vec<f32>]>,
    /// Whether this is the first mini-batch (its passes measure [`FirstPass`]).
    first: bool,
    step: usize,
}

impl PackPass<'_> {
    /// The pass: each trained token's weight from `objective`, and the gradients of the
    /// objective summed over the rollouts.
    fn run(
        &self,
        model: &Qwen2Lora,
        objective: &mut BatchObjective,
        first_pass: &mut FirstPass,
    ) -> Result<HashMap<String, Tensor>> {
        // How many of each rollout's log-probabilities the objective has seen.
        let mut at = vec![0usize; self.rollouts.len()];
        let r = model.pack_objective(
            &Pack::new(self.sequences)?,
            ObjectivePass {
                dropout_key: None,
                with_grads: true,
                entropy: self.first,
            },
            &mut |m, lp| {
                let s = &self.rollouts[m];
                let rollout_lp = &s.rollout.rollout_logprobs;
                let start = at[m];
                let end = (start + lp.len()).min(rollout_lp.len());
                let roll = &rollout_lp[start.min(end)..end];
                let old_chunk = self
                    .old
                    .map_or(lp, |o| &o[m][start.min(o[m].len())..end.min(o[m].len())]);
                at[m] += lp.len();
                if roll.len() != lp.len() || old_chunk.len() != lp.len() {
                    // Caught after the pass by the length check below.
                    return vec![0.0; lp.len()];
                }
                objective.weights(s.advantage, lp, old_chunk, roll)
            },
        )?;
        for (s, member) in self.rollouts.iter().zip(&r.members) {
            let rollout_lp = &s.rollout.rollout_logprobs;
            if member.logprobs.len() != rollout_lp.len() {
                return Err(TrainError::Stopped(format!(
                    "step {}: a rollout has {} sampled tokens but the trainer saw {} (internal error)",
                    self.step + 1,
                    rollout_lp.len(),
                    member.logprobs.len()
                )));
            }
            if self.first {
                first_pass.entropy_sum +=
                    member.entropies.iter().map(|&h| f64::from(h)).sum::<f64>();
                first_pass.gap_sum += member
                    .logprobs
                    .iter()
                    .zip(rollout_lp)
                    .map(|(a, b)| f64::from((a - b).abs()))
                    .sum::<f64>();
                first_pass.tokens += member.logprobs.len();
            }
        }
        Ok(r.grads.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pass_over_the_tasks_visits_each_once_in_a_seeded_order() {
        for pass in 0..3 {
            let mut seen: Vec<usize> = (0..7).map(|i| task_at(pass * 7 + i, 7, 5)).collect();
            seen.sort();
            assert_eq!(seen, (0..7).collect::<Vec<_>>());
        }
        let a: Vec<usize> = (0..14).map(|i| task_at(i, 7, 5)).collect();
        let b: Vec<usize> = (0..14).map(|i| task_at(i, 7, 5)).collect();
        let c: Vec<usize> = (0..14).map(|i| task_at(i, 7, 6)).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}

//! Supervised fine-tuning: the loop from a data file to an exported adapter.
//!
//! The whole schedule (which samples form which optimizer step, in which epoch) is fixed up
//! front from the seed, and dropout masks are keyed by step, so step `k` does the same work
//! whether the run got there in one go or was killed and resumed from a checkpoint.

use crate::base::BaseModel;
use crate::checkpoint::{self, EvalRecord, Progress, StepClock, StepRecord};
use crate::data::{self, Encoded, Rejected};
use crate::lora::LoraConfig;
use crate::model::{Qwen2Lora, SequenceLoss};
use crate::optim::{AdamW, AdamWConfig, Schedule, accumulate, clip_grad_norm};
use crate::pack;
use crate::{Result, TrainError, export, plot};
use candle_core::{Device, Tensor};
use catena_engine::llama::{LlamaEngine, LoadOptions};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// Everything `catena train sft` takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SftOptions {
    pub base: PathBuf,
    pub data: PathBuf,
    pub out: PathBuf,
    pub lora: LoraConfig,
    pub adam: AdamWConfig,
    pub epochs: usize,
    /// Longer samples are reported and left out, not cut.
    pub max_seq_len: usize,
    /// Tokens per optimizer step: samples are accumulated until they reach it.
    pub batch_tokens: usize,
    pub warmup_ratio: f64,
    pub min_lr_ratio: f64,
    /// Global gradient-norm limit (0: no clipping).
    pub grad_clip: f64,
    /// Share of the samples held out for the evaluation loss.
    pub eval_fraction: f64,
    /// Evaluate every this many steps (and at the end); 0: only at the end.
    pub eval_every: usize,
    /// Checkpoint every this many steps (and at the end); 0: only at the end.
    pub checkpoint_every: usize,
    pub keep_checkpoints: usize,
    pub seed: u64,
    /// Stop after this many optimizer steps in total (benchmarks, smoke tests).
    pub max_steps: Option<usize>,
}

impl SftOptions {
    pub fn new(base: PathBuf, data: PathBuf, out: PathBuf) -> SftOptions {
        SftOptions {
            base,
            data,
            out,
            lora: LoraConfig::default(),
            adam: AdamWConfig::default(),
            epochs: 2,
            max_seq_len: 2048,
            batch_tokens: 4096,
            warmup_ratio: 0.05,
            min_lr_ratio: 0.1,
            grad_clip: 1.0,
            eval_fraction: 0.05,
            eval_every: 0,
            checkpoint_every: 10,
            keep_checkpoints: 2,
            seed: 42,
            max_steps: None,
        }
    }
}

/// What the loop reports as it goes: the type the service reads back from `--json` lines.
pub use catena_train_events::SftEvent as Event;

/// The samples of a run, tokenised and split.
pub(crate) struct Prepared {
    pub train: Vec<Encoded>,
    pub eval: Vec<Encoded>,
    pub rejected: Vec<Rejected>,
}

/// Reads, checks, tokenises and splits the data.
pub(crate) fn prepare(engine: &LlamaEngine, options: &SftOptions) -> Result<Prepared> {
    let dataset = data::read_dataset(&options.data)?;
    let mut rejected = dataset.rejected;
    let mut encoded = Vec::with_capacity(dataset.samples.len());
    for sample in &dataset.samples {
        let e = data::encode(engine, sample)?;
        if e.tokens.len() > options.max_seq_len {
            rejected.push(Rejected {
                origin: sample.origin.clone(),
                reason: format!(
                    "{} tokens, over --max-seq-len {}",
                    e.tokens.len(),
                    options.max_seq_len
                ),
            });
        } else if e.trained_tokens() == 0 {
            rejected.push(Rejected {
                origin: sample.origin.clone(),
                reason: "no trained tokens".into(),
            });
        } else {
            encoded.push(e);
        }
    }
    if encoded.is_empty() {
        return Err(TrainError::BadData {
            path: options.data.clone(),
            reason: format!("no usable samples ({} rejected)", rejected.len()),
        });
    }
    let mut order: Vec<usize> = (0..encoded.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(options.seed));
    let eval_count = if encoded.len() < 4 {
        0
    } else {
        ((encoded.len() as f64 * options.eval_fraction).round() as usize).min(encoded.len() - 1)
    };
    // `order` is a permutation: every slot is taken exactly once, in the shuffled order.
    let mut slots: Vec<Option<Encoded>> = encoded.into_iter().map(Some).collect();
    let mut eval: Vec<Encoded> = order.iter().filter_map(|&i| slots[i].take()).collect();
    let train = eval.split_off(eval_count);
    Ok(Prepared {
        train,
        eval,
        rejected,
    })
}

/// The samples of each optimizer step, epoch by epoch, from the seed.
pub(crate) fn plan_steps(
    lengths: &[usize],
    epochs: usize,
    batch_tokens: usize,
    seed: u64,
) -> Vec<(usize, Vec<usize>)> {
    let mut steps = Vec::new();
    for epoch in 0..epochs {
        let mut order: Vec<usize> = (0..lengths.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(
            seed ^ (epoch as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        ));
        let mut current = Vec::new();
        let mut tokens = 0;
        for i in order {
            current.push(i);
            tokens += lengths[i];
            if tokens >= batch_tokens {
                steps.push((epoch, std::mem::take(&mut current)));
                tokens = 0;
            }
        }
        if !current.is_empty() {
            steps.push((epoch, current));
        }
    }
    steps
}

fn fingerprint(options: &SftOptions, prepared: &Prepared) -> String {
    let mut settings = options.clone();
    settings.out = PathBuf::new();
    settings.max_steps = None;
    settings.eval_every = 0;
    settings.checkpoint_every = 0;
    settings.keep_checkpoints = 0;
    checkpoint::fingerprint(|h| {
        h.update(serde_json::to_vec(&settings).unwrap_or_default());
        for e in prepared.train.iter().chain(&prepared.eval) {
            for t in &e.tokens {
                h.update(t.to_le_bytes());
            }
            h.update(e.trained.iter().map(|&b| u8::from(b)).collect::<Vec<_>>());
        }
    })
}

/// Loads the tokenizer (llama.cpp, CPU only) for `base`.
pub(crate) fn tokenizer(base: &Path) -> Result<LlamaEngine> {
    Ok(LlamaEngine::load(
        base,
        &LoadOptions {
            gpu_layers: Some(0),
            ..LoadOptions::default()
        },
    )?)
}

/// Mean loss per trained token over `samples`.
pub(crate) fn eval_loss(model: &Qwen2Lora, samples: &[Encoded]) -> Result<Option<f64>> {
    let (mut nll, mut n) = (0.0, 0usize);
    let samples: Vec<&Encoded> = samples.iter().collect();
    each_pack(model, samples, false, &mut |r| {
        (nll, n) = (nll + r.nll_sum, n + r.tokens);
        Ok(())
    })?;
    Ok((n > 0).then(|| nll / n as f64))
}

/// Hands `on_pack` the loss (and, `with_grads`, the gradients) of each pack of `samples`
/// without dropout: sorted, so that samples that begin alike are neighbours (those of one
/// profile share its instructions), then in [`pack::runs`], each run one pass with its shared
/// beginning evaluated once. The sums over the packs are those over the samples alone.
fn each_pack(
    model: &Qwen2Lora,
    mut samples: Vec<&Encoded>,
    with_grads: bool,
    on_pack: &mut dyn FnMut(SequenceLoss) -> Result<()>,
) -> Result<()> {
    samples.sort_by(|a, b| a.tokens.cmp(&b.tokens));
    let sequences: Vec<(&[u32], &[bool])> = samples
        .iter()
        .map(|s| (s.tokens.as_slice(), s.trained.as_slice()))
        .collect();
    for run in pack::runs(&sequences) {
        on_pack(model.pack_loss(&sequences[run], with_grads)?)?;
    }
    Ok(())
}

/// Runs (or resumes) a fine-tuning run to the end and exports the adapter.
pub fn train(
    options: &SftOptions,
    device: &Device,
    on_event: &mut dyn FnMut(&Event),
    stop: &AtomicBool,
) -> Result<Progress> {
    let prepared = prepare(&tokenizer(&options.base)?, options)?;
    let plan = Plan::new(options, &prepared.train);
    let (model, base_name) = {
        let base = BaseModel::load(&options.base, device)?;
        let model = Qwen2Lora::new(&base, &options.lora, options.seed)?;
        on_event(&prepared_event(&prepared, &plan, &model, &base));
        // The base's hold on the quantised weights ends here: the model keeps what it uses.
        (model, base.name.clone())
    };
    let mut adam = AdamW::new(options.adam);
    let policy = checkpoint::Policy {
        out: &options.out,
        every: options.checkpoint_every,
        keep: options.keep_checkpoints,
        stop,
    };
    let fresh = Progress {
        step: 0,
        fingerprint: fingerprint(options, &prepared),
        history: Vec::new(),
        evals: Vec::new(),
    };
    let mut progress = policy.resume(
        fresh,
        "settings or data",
        device,
        (&model.lora, &mut adam),
        on_event,
    )?;
    let clock = StepClock::start(progress.step);
    let total_steps = plan.total_steps;
    while progress.step < total_steps {
        let step_start = Instant::now();
        let record = optimizer_step(
            options,
            &plan,
            &prepared.train,
            &model,
            &mut adam,
            &progress,
        )?;
        progress.step += 1;
        progress.history.push(record.clone());
        let (elapsed_seconds, eta_seconds) = clock.elapsed_and_eta(progress.step, total_steps);
        on_event(&Event::Step {
            step: record.step,
            total_steps,
            epoch: record.epoch,
            loss: record.loss,
            lr: record.lr,
            grad_norm: record.grad_norm,
            tokens: record.tokens,
            tokens_per_second: record.tokens as f64 / step_start.elapsed().as_secs_f64().max(1e-9),
            elapsed_seconds,
            eta_seconds,
        });
        evaluate_when_due(
            options,
            &model,
            &prepared.eval,
            total_steps,
            &mut progress,
            on_event,
        )?;
        policy.after_step(&progress, total_steps, (&model.lora, &adam), on_event)?;
    }
    finish(
        &model,
        base_name.as_deref(),
        &options.out,
        progress,
        on_event,
    )
}

/// Which samples make which optimizer step, how many steps this invocation runs to, and the
/// learning rate at each (over the whole plan, so `--max-steps` does not change the schedule).
struct Plan {
    steps: Vec<(usize, Vec<usize>)>,
    total_steps: usize,
    schedule: Schedule,
}

impl Plan {
    fn new(options: &SftOptions, train: &[Encoded]) -> Plan {
        let lengths: Vec<usize> = train.iter().map(|e| e.tokens.len()).collect();
        let steps = plan_steps(
            &lengths,
            options.epochs.max(1),
            options.batch_tokens,
            options.seed,
        );
        let total_steps = options
            .max_steps
            .map_or(steps.len(), |m| m.min(steps.len()));
        let schedule = Schedule {
            peak: options.adam.lr,
            warmup_steps: (steps.len() as f64 * options.warmup_ratio).round() as usize,
            total_steps: steps.len(),
            min_ratio: options.min_lr_ratio,
        };
        Plan {
            steps,
            total_steps,
            schedule,
        }
    }
}

/// The first event of a run: what it trains on and with.
fn prepared_event(prepared: &Prepared, plan: &Plan, model: &Qwen2Lora, base: &BaseModel) -> Event {
    Event::Prepared {
        train_samples: prepared.train.len(),
        eval_samples: prepared.eval.len(),
        rejected: prepared.rejected.clone(),
        total_steps: plan.total_steps,
        trainable_parameters: model.lora.parameter_count(),
        weight_types: base
            .weight_types()
            .iter()
            .map(|(t, n)| format!("{t:?}×{n}"))
            .collect(),
    }
}

/// The optimizer step after `progress`: the gradients of the step's samples summed and
/// divided by its trained tokens, clipped, and applied. A loss that is no longer a number ends
/// the run (a learning rate too high), before anything is saved.
fn optimizer_step(
    options: &SftOptions,
    plan: &Plan,
    train: &[Encoded],
    model: &Qwen2Lora,
    adam: &mut AdamW,
    progress: &Progress,
) -> Result<StepRecord> {
    let step = progress.step;
    let (epoch, members) = &plan.steps[step];
    let mut grads: HashMap<String, Tensor> = HashMap::new();
    let (mut nll, mut trained) = (0.0, 0usize);
    let tokens = members.iter().map(|&i| train[i].tokens.len()).sum();
    if options.lora.dropout > 0.0 {
        // Each sample with its own dropout masks, the shared beginning included.
        for (j, &i) in members.iter().enumerate() {
            let sample = &train[i];
            let key = options.seed ^ ((step as u64) << 20) ^ j as u64;
            let r = model.sequence_loss(&sample.tokens, &sample.trained, Some(key), true)?;
            (nll, trained) = (nll + r.nll_sum, trained + r.tokens);
            accumulate(&mut grads, r.grads.unwrap_or_default())?;
        }
    } else {
        // Without dropout a pack gives each sample's gradient (pack.rs).
        let samples = members.iter().map(|&i| &train[i]).collect();
        each_pack(model, samples, true, &mut |r| {
            (nll, trained) = (nll + r.nll_sum, trained + r.tokens);
            accumulate(&mut grads, r.grads.unwrap_or_default())?;
            Ok(())
        })?;
    }
    let denominator = trained.max(1) as f64;
    for g in grads.values_mut() {
        *g = (&*g / denominator)?;
    }
    let grad_norm = clip_grad_norm(&mut grads, options.grad_clip)?;
    let lr = plan.schedule.lr(step);
    adam.step(&model.lora.named(), &grads, lr)?;
    let loss = nll / denominator;
    if !loss.is_finite() {
        return Err(TrainError::Stopped(format!(
            "the loss became {loss} at step {}; lower --lr",
            step + 1
        )));
    }
    Ok(StepRecord {
        step: step + 1,
        epoch: *epoch,
        loss,
        lr,
        grad_norm,
        tokens,
        trained_tokens: trained,
    })
}

/// The held-out loss every `eval_every` steps and after the last, recorded and reported.
fn evaluate_when_due(
    options: &SftOptions,
    model: &Qwen2Lora,
    eval: &[Encoded],
    total_steps: usize,
    progress: &mut Progress,
    on_event: &mut dyn FnMut(&Event),
) -> Result<()> {
    let step = progress.step;
    let due =
        (options.eval_every > 0 && step.is_multiple_of(options.eval_every)) || step == total_steps;
    if due && let Some(loss) = eval_loss(model, eval)? {
        progress.evals.push(EvalRecord { step, loss });
        on_event(&Event::Eval { step, loss });
    }
    Ok(())
}

/// The adapter in both formats and the loss curve, after the last step.
fn finish(
    model: &Qwen2Lora,
    base_name: Option<&str>,
    out: &Path,
    progress: Progress,
    on_event: &mut dyn FnMut(&Event),
) -> Result<Progress> {
    let exported = export::export(&model.lora, "qwen2", base_name, out)?;
    let curve = out.join("loss.svg");
    plot::loss_curve(&progress.history, &progress.evals, &curve)?;
    on_event(&Event::Finished {
        steps: progress.step,
        adapter: exported.gguf,
        peft: exported.peft_dir,
        loss_curve: curve,
        final_eval_loss: progress.evals.last().map(|e| e.loss),
    });
    Ok(progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_fills_steps_to_the_token_budget_and_is_seeded() {
        let lengths = [100, 300, 250, 50, 400, 120];
        let a = plan_steps(&lengths, 2, 400, 7);
        assert_eq!(a, plan_steps(&lengths, 2, 400, 7));
        assert_ne!(a, plan_steps(&lengths, 2, 400, 8));
        for epoch in 0..2 {
            let mut seen: Vec<usize> = a
                .iter()
                .filter(|(e, _)| *e == epoch)
                .flat_map(|(_, s)| s.clone())
                .collect();
            seen.sort();
            assert_eq!(seen, (0..6).collect::<Vec<_>>());
        }
        for (_, members) in &a[..a.len() - 1] {
            let without_last: usize = members[..members.len() - 1]
                .iter()
                .map(|&i| lengths[i])
                .sum();
            assert!(without_last < 400, "a step went on past its budget");
        }
    }
}

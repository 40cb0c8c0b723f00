//! Supervised fine-tuning: the loop from a data file to an exported adapter.
//!
//! The whole schedule (which samples form which optimizer step, in which epoch) is fixed up
//! front from the seed, and dropout masks are keyed by step, so step `k` does the same work
//! whether the run got there in one go or was killed and resumed from a checkpoint.

use crate::base::BaseModel;
use crate::checkpoint::{self, EvalRecord, Progress, StepRecord};
use crate::data::{self, Encoded, Rejected};
use crate::lora::LoraConfig;
use crate::model::Qwen2Lora;
use crate::optim::{AdamW, AdamWConfig, Schedule, clip_grad_norm};
use crate::{Result, TrainError, export, plot};
use candle_core::{Device, Tensor};
use catena_engine::llama::{LlamaEngine, LoadOptions};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
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
pub struct Prepared {
    pub train: Vec<Encoded>,
    pub eval: Vec<Encoded>,
    pub rejected: Vec<Rejected>,
}

/// Reads, checks, tokenises and splits the data.
pub fn prepare(engine: &LlamaEngine, options: &SftOptions) -> Result<Prepared> {
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
pub fn plan_steps(
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
    let mut h = Sha256::new();
    let mut settings = options.clone();
    settings.out = PathBuf::new();
    settings.max_steps = None;
    settings.eval_every = 0;
    settings.checkpoint_every = 0;
    settings.keep_checkpoints = 0;
    h.update(serde_json::to_vec(&settings).unwrap_or_default());
    for e in prepared.train.iter().chain(&prepared.eval) {
        for t in &e.tokens {
            h.update(t.to_le_bytes());
        }
        h.update(e.trained.iter().map(|&b| u8::from(b)).collect::<Vec<_>>());
    }
    hex::encode(&h.finalize()[..12])
}

/// Loads the tokenizer (llama.cpp, CPU only) for `base`.
pub fn tokenizer(base: &Path) -> Result<LlamaEngine> {
    Ok(LlamaEngine::load(
        base,
        &LoadOptions {
            gpu_layers: Some(0),
            ..LoadOptions::default()
        },
    )?)
}

/// Mean loss per trained token over `samples`.
pub fn eval_loss(model: &Qwen2Lora, samples: &[Encoded]) -> Result<Option<f64>> {
    let (mut nll, mut n) = (0.0, 0usize);
    for s in samples {
        let r = model.sequence_loss(&s.tokens, &s.trained, None, false)?;
        nll += r.nll_sum;
        n += r.tokens;
    }
    Ok((n > 0).then(|| nll / n as f64))
}

/// Runs (or resumes) a fine-tuning run to the end and exports the adapter.
pub fn train(
    options: &SftOptions,
    device: &Device,
    on_event: &mut dyn FnMut(&Event),
    stop: &AtomicBool,
) -> Result<Progress> {
    let engine = tokenizer(&options.base)?;
    let prepared = prepare(&engine, options)?;
    drop(engine);
    let base = BaseModel::load(&options.base, device)?;
    let model = Qwen2Lora::new(&base, &options.lora, options.seed)?;
    let lengths: Vec<usize> = prepared.train.iter().map(|e| e.tokens.len()).collect();
    let plan = plan_steps(
        &lengths,
        options.epochs.max(1),
        options.batch_tokens,
        options.seed,
    );
    let total_steps = options.max_steps.map_or(plan.len(), |m| m.min(plan.len()));
    let schedule = Schedule {
        peak: options.adam.lr,
        warmup_steps: (plan.len() as f64 * options.warmup_ratio).round() as usize,
        total_steps: plan.len(),
        min_ratio: options.min_lr_ratio,
    };
    on_event(&Event::Prepared {
        train_samples: prepared.train.len(),
        eval_samples: prepared.eval.len(),
        rejected: prepared.rejected.clone(),
        total_steps,
        trainable_parameters: model.lora.parameter_count(),
        weight_types: base
            .weight_types()
            .iter()
            .map(|(t, n)| format!("{t:?}×{n}"))
            .collect(),
    });
    let fingerprint = fingerprint(options, &prepared);
    let mut adam = AdamW::new(options.adam);
    let mut progress = Progress {
        step: 0,
        fingerprint: fingerprint.clone(),
        history: Vec::new(),
        evals: Vec::new(),
    };
    if let Some((saved, path)) = checkpoint::resume::<Progress>(
        &options.out,
        device,
        &fingerprint,
        "settings or data",
        &model.lora,
        &mut adam,
    )? {
        progress = saved;
        on_event(&Event::Resumed {
            step: progress.step,
            checkpoint: path,
        });
    }
    let started = Instant::now();
    let done_at_start = progress.step;
    let policy = checkpoint::Policy {
        out: &options.out,
        every: options.checkpoint_every,
        keep: options.keep_checkpoints,
        stop,
    };
    while progress.step < total_steps {
        let step = progress.step;
        let (epoch, members) = &plan[step];
        let step_start = Instant::now();
        let mut grads: HashMap<String, Tensor> = HashMap::new();
        let (mut nll, mut trained, mut tokens) = (0.0, 0usize, 0usize);
        for (j, &i) in members.iter().enumerate() {
            let sample = &prepared.train[i];
            let key = options.seed ^ ((step as u64) << 20) ^ j as u64;
            let r = model.sequence_loss(&sample.tokens, &sample.trained, Some(key), true)?;
            nll += r.nll_sum;
            trained += r.tokens;
            tokens += sample.tokens.len();
            for (name, g) in r.grads.unwrap_or_default() {
                let sum = match grads.remove(&name) {
                    Some(acc) => (acc + g)?,
                    None => g,
                };
                grads.insert(name, sum);
            }
        }
        let denominator = trained.max(1) as f64;
        for g in grads.values_mut() {
            *g = (&*g / denominator)?;
        }
        let grad_norm = clip_grad_norm(&mut grads, options.grad_clip)?;
        let lr = schedule.lr(step);
        let named: Vec<(String, &candle_core::Var)> = model.lora.named();
        adam.step(&named, &grads, lr)?;
        let loss = nll / denominator;
        if !loss.is_finite() {
            return Err(TrainError::Stopped(format!(
                "the loss became {loss} at step {}; lower --lr",
                step + 1
            )));
        }
        progress.step += 1;
        progress.history.push(StepRecord {
            step: progress.step,
            epoch: *epoch,
            loss,
            lr,
            grad_norm,
            tokens,
            trained_tokens: trained,
        });
        let elapsed = started.elapsed().as_secs_f64();
        let per_step = elapsed / (progress.step - done_at_start) as f64;
        on_event(&Event::Step {
            step: progress.step,
            total_steps,
            epoch: *epoch,
            loss,
            lr,
            grad_norm,
            tokens,
            tokens_per_second: tokens as f64 / step_start.elapsed().as_secs_f64().max(1e-9),
            elapsed_seconds: elapsed,
            eta_seconds: per_step * (total_steps - progress.step) as f64,
        });
        let last = progress.step == total_steps;
        if ((options.eval_every > 0 && progress.step.is_multiple_of(options.eval_every)) || last)
            && let Some(loss) = eval_loss(&model, &prepared.eval)?
        {
            progress.evals.push(EvalRecord {
                step: progress.step,
                loss,
            });
            on_event(&Event::Eval {
                step: progress.step,
                loss,
            });
        }
        if let Some(saved) = policy.after_step(&progress, last, &model.lora, &adam)? {
            on_event(&Event::Checkpoint {
                step: progress.step,
                path: saved.path.clone(),
            });
            if saved.stopping {
                on_event(&Event::Stopped {
                    step: progress.step,
                    checkpoint: saved.path,
                });
                return Err(TrainError::Stopped(format!(
                    "stopped at step {} of {total_steps}; run the same command again to resume",
                    progress.step
                )));
            }
        }
    }
    let exported = export::export(&model.lora, "qwen2", base.name.as_deref(), &options.out)?;
    let curve = options.out.join("loss.svg");
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

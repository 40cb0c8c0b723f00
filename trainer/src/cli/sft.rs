//! The `train sft` command line, shared by `catena train sft` and the desktop app's
//! `catena-desktop train sft` (which the app's training page starts as a child process): the
//! flags, the progress bar or JSON lines, Ctrl-C, and `stop` on stdin.

use super::progress::{Reporter, ShowProgress, StepBar};
use super::{device, exit_code, lora_targets, stop_flag};
use crate::lora::LoraConfig;
use crate::sft::{self, Event, SftOptions};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct SftArgs {
    /// The base model (GGUF, qwen2 architecture); default: the default model.
    #[arg(long, value_name = "MODEL")]
    pub base: Option<PathBuf>,

    /// Trajectories: our JSONL (`catena sessions export --format sft`) or the AFM alpaca JSON.
    #[arg(long, value_name = "FILE")]
    data: PathBuf,

    /// Where the adapter, checkpoints and loss curve go; a run there resumes from its last
    /// checkpoint.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,

    /// LoRA rank.
    #[arg(long, default_value_t = 16)]
    rank: usize,

    /// LoRA alpha (scale alpha/rank, or alpha/sqrt(rank) with --rslora).
    #[arg(long, default_value_t = 32.0)]
    alpha: f32,

    /// Dropout on the LoRA input while training.
    #[arg(long, default_value_t = 0.0)]
    dropout: f32,

    /// Rank-stabilised LoRA scaling.
    #[arg(long)]
    rslora: bool,

    /// Layers that get LoRA factors: any of q,k,v,o,gate,up,down.
    #[arg(long, value_delimiter = ',', default_value = "q,k,v,o,gate,up,down")]
    targets: Vec<String>,

    /// Peak learning rate.
    #[arg(long, default_value_t = 2e-4)]
    lr: f64,

    /// AdamW weight decay.
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f64,

    #[arg(long, default_value_t = 2)]
    epochs: usize,

    /// Longer samples are reported and left out.
    #[arg(long, default_value_t = 2048)]
    max_seq_len: usize,

    /// Tokens per optimizer step (samples are accumulated up to it).
    #[arg(long, default_value_t = 4096)]
    batch_tokens: usize,

    /// Share of the steps spent warming the learning rate up.
    #[arg(long, default_value_t = 0.05)]
    warmup_ratio: f64,

    /// Gradient-norm limit (0: none).
    #[arg(long, default_value_t = 1.0)]
    grad_clip: f64,

    /// Share of the samples held out for the evaluation loss.
    #[arg(long, default_value_t = 0.05)]
    eval_fraction: f64,

    /// Evaluate every N steps (0: only at the end).
    #[arg(long, value_name = "N", default_value_t = 0)]
    eval_every: usize,

    /// Checkpoint every N steps.
    #[arg(long, value_name = "N", default_value_t = 10)]
    checkpoint_every: usize,

    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Stop after N optimizer steps.
    #[arg(long, value_name = "N")]
    max_steps: Option<usize>,

    /// Where to train: cpu or cuda (default: cuda when this build has it and a GPU is there).
    #[arg(long)]
    device: Option<String>,

    /// Print one JSON object per line for each event instead of a progress bar.
    #[arg(long)]
    json: bool,
}

/// Runs `train sft`. `resolve_base` turns `--base` (or its absence) into a model file: the
/// default model, a catalog id, a path.
pub fn run_sft(
    args: SftArgs,
    resolve_base: &dyn Fn(Option<&Path>) -> Result<PathBuf>,
) -> Result<ExitCode> {
    let targets = lora_targets(&args.targets)?;
    if args.epochs == 0 || args.batch_tokens == 0 || args.max_seq_len < 2 {
        bail!("--epochs and --batch-tokens must be at least 1, --max-seq-len at least 2");
    }
    if !(args.lr > 0.0 && args.lr.is_finite()) {
        bail!("--lr must be a positive number");
    }
    if !(0.0..1.0).contains(&args.eval_fraction) {
        bail!("--eval-fraction must be in [0, 1)");
    }
    let base = resolve_base(args.base.as_deref())?;
    let mut options = SftOptions::new(base, args.data, args.out);
    options.lora = LoraConfig {
        rank: args.rank,
        alpha: args.alpha,
        dropout: args.dropout,
        rslora: args.rslora,
        targets,
    };
    options.adam.lr = args.lr;
    options.adam.weight_decay = args.weight_decay;
    options.epochs = args.epochs;
    options.max_seq_len = args.max_seq_len;
    options.batch_tokens = args.batch_tokens;
    options.warmup_ratio = args.warmup_ratio;
    options.grad_clip = args.grad_clip;
    options.eval_fraction = args.eval_fraction;
    options.eval_every = args.eval_every;
    options.checkpoint_every = args.checkpoint_every;
    options.seed = args.seed;
    options.max_steps = args.max_steps;
    let device = device(args.device.as_deref())?;
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;

    let stop = stop_flag(args.json);
    let mut reporter = Reporter::new(args.json);
    let result = sft::train(&options, &device, &mut |e| reporter.event(e), &stop);
    reporter.abandon();
    exit_code(result.map(drop), &stop)
}

impl ShowProgress for Event {
    fn show(&self, bar: &mut StepBar) {
        match self {
            Event::Prepared {
                train_samples,
                eval_samples,
                rejected,
                total_steps,
                trainable_parameters,
                weight_types,
            } => {
                for r in rejected {
                    eprintln!("skipped {}: {}", r.origin, r.reason);
                }
                eprintln!(
                    "{train_samples} training samples, {eval_samples} held out, {} skipped; {total_steps} steps; {trainable_parameters} LoRA parameters; base weights {}",
                    rejected.len(),
                    weight_types.join(" ")
                );
                bar.start(*total_steps);
            }
            Event::Resumed { step, checkpoint } => {
                bar.set(*step, None);
                bar.line(format!(
                    "resumed at step {step} from {}",
                    checkpoint.display()
                ));
            }
            Event::Step {
                step,
                loss,
                tokens_per_second,
                ..
            } => {
                bar.set(
                    *step,
                    Some(format!("loss {loss:.4}  {tokens_per_second:.0} tok/s")),
                );
            }
            Event::Eval { step, loss } => bar.line(format!("step {step}: held-out loss {loss:.4}")),
            Event::Checkpoint { .. } => {}
            Event::Stopped { step, checkpoint } => bar.line(format!(
                "stopped after step {step}; checkpoint {}",
                checkpoint.display()
            )),
            Event::Finished {
                adapter,
                peft,
                loss_curve,
                final_eval_loss,
                ..
            } => {
                bar.clear();
                if let Some(loss) = final_eval_loss {
                    eprintln!("held-out loss {loss:.4}");
                }
                eprintln!("adapter (llama.cpp): {}", adapter.display());
                eprintln!("adapter (PEFT):      {}", peft.display());
                eprintln!("loss curve:          {}", loss_curve.display());
                eprintln!("use it: catena run --adapter {} \"...\"", adapter.display());
            }
        }
    }
}

//! The `train rl` command line: the flags, a progress bar or JSON lines, Ctrl-C and `stop` on
//! stdin, as `train sft` has them.

use super::progress::{Reporter, ShowProgress, StepBar};
use super::{device, exit_code, lora_targets, stop_flag};
use crate::lora::LoraConfig;
use crate::rl::{DapoConfig, RlEvent, RlOptions};
use anyhow::{Context, Result, bail};
use catena_agent::Decoding;
use catena_agent::tools::ToolBox;
use catena_sandbox::Sandbox;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct RlArgs {
    /// The base model (GGUF, qwen2 architecture); default: the default model.
    #[arg(long, value_name = "MODEL")]
    pub base: Option<PathBuf>,

    /// Start from this adapter: a PEFT folder, the output folder of `catena train sft` (its
    /// `peft/` is used), a GGUF adapter file, or `catena-coa-0.5b` (the adapter shipped for the
    /// default model). Without it a fresh adapter starts equal to the base model.
    #[arg(long, value_name = "DIR|FILE|NAME")]
    pub adapter: Option<PathBuf>,

    /// Rollouts write freely instead of being held to the profile's chain grammar.
    #[arg(long)]
    pub free: bool,

    /// Tasks with verifiable answers: JSONL (`{"id", "question", "answer"}` per line, as
    /// `catena train synth` writes) or the AFM/verl parquet layout.
    #[arg(long, value_name = "FILE")]
    pub tasks: PathBuf,

    /// Output folder: checkpoints, curves.svg, adapter.gguf and peft/.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Prompt profile the rollouts use.
    #[arg(long, default_value = "math")]
    pub profile: String,

    /// Rollouts per prompt.
    #[arg(long, default_value_t = 8)]
    pub group: usize,

    /// Groups decoded at once (never more than --batch-prompts): more keep the batch full while
    /// some rollouts run code or a group finishes its longest rollout, for --group × this
    /// sequences' memory (a KV cache of --max-tokens + 3072 tokens each).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub parallel_groups: usize,

    /// Prompts with a learning signal (unequal rewards) per step; more when a group that looked
    /// uniform half-way, and had its place given to another prompt, keeps its signal.
    #[arg(long, default_value_t = 4)]
    pub batch_prompts: usize,

    /// RL steps (each: sample, score, update).
    #[arg(long, default_value_t = 20)]
    pub steps: usize,

    /// Learning rate (constant).
    #[arg(long, default_value_t = 2e-5)]
    pub lr: f64,

    /// Optimizer steps per batch (the batch in this many mini-batches; the protocol uses 1).
    #[arg(long, default_value_t = 1)]
    pub updates_per_batch: usize,

    /// Lower clip range: the ratio may fall to 1 - this.
    #[arg(long, default_value_t = 0.2)]
    pub clip_low: f64,

    /// Upper clip range: the ratio may rise to 1 + this.
    #[arg(long, default_value_t = 0.28)]
    pub clip_high: f64,

    /// Cap C of the importance weight min(p_train / p_rollout, C).
    #[arg(long, default_value_t = 2.0)]
    pub is_cap: f64,

    /// Sampling temperature of the rollouts.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f32,

    /// Tokens a rollout may generate.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,

    /// Penalise responses in the last eighth of --max-tokens (docs/PROTOCOL.md §6).
    #[arg(long)]
    pub overlong_shaping: bool,

    /// Draw at most this many times --batch-prompts prompts per step looking for signal.
    #[arg(long, default_value_t = 3)]
    pub max_draw_factor: usize,

    /// A fresh adapter's rank (ignored with --adapter, which has its own).
    #[arg(long, default_value_t = 16)]
    pub rank: usize,

    /// A fresh adapter's alpha.
    #[arg(long, default_value_t = 32.0)]
    pub alpha: f32,

    /// A fresh adapter's targets.
    #[arg(long, value_delimiter = ',', default_value = "q,k,v,o,gate,up,down")]
    pub targets: Vec<String>,

    /// Global gradient-norm limit (0: none).
    #[arg(long, default_value_t = 1.0)]
    pub grad_clip: f64,

    /// Checkpoint every N steps (and at the end).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub checkpoint_every: usize,

    /// Layers of the rollout engine to offload to the GPU.
    #[arg(long, value_name = "N")]
    pub gpu_layers: Option<u32>,

    #[arg(long, default_value_t = 42)]
    pub seed: u64,

    /// Where to train: cpu or cuda (default: cuda when this build has it and a GPU is there).
    #[arg(long)]
    pub device: Option<String>,

    /// Print one JSON object per line for each event instead of a progress bar.
    #[arg(long)]
    pub json: bool,
}

/// What the caller (which knows where models and the sandbox runtime live) provides.
pub struct RlEnvironment<'a> {
    /// `--base` (or its absence) to a model file.
    pub resolve_base: &'a dyn Fn(Option<&Path>) -> Result<PathBuf>,
    /// The profile's tools for the rollouts.
    pub tools: &'a dyn Fn(&str) -> Result<ToolBox>,
    /// A sandbox to run code tasks' tests in.
    pub sandbox: &'a dyn Fn() -> Result<std::sync::Arc<Sandbox>>,
}

fn options(args: &RlArgs, base: PathBuf) -> Result<RlOptions> {
    if args.group < 2 {
        bail!("--group must be at least 2 (advantages compare rollouts of the same prompt)");
    }
    if args.batch_prompts == 0
        || args.steps == 0
        || args.max_tokens == 0
        || args.parallel_groups == 0
    {
        bail!("--batch-prompts, --parallel-groups, --steps and --max-tokens must be at least 1");
    }
    if !(args.lr > 0.0 && args.lr.is_finite()) {
        bail!("--lr must be a positive number");
    }
    let in_range = (0.0..1.0).contains(&args.clip_low)
        && (0.0..=f64::MAX).contains(&args.clip_high)
        && (1.0..=f64::MAX).contains(&args.is_cap);
    if !in_range {
        bail!("--clip-low must be in [0, 1), --clip-high at least 0, --is-cap at least 1");
    }
    if !(args.temperature > 0.0 && args.temperature.is_finite()) {
        bail!("--temperature must be positive: RL learns from sampled rollouts");
    }
    let targets = lora_targets(&args.targets)?;
    let init_adapter = match &args.adapter {
        Some(dir) if dir.join("adapter_config.json").is_file() => Some(dir.clone()),
        Some(dir) if dir.join("peft/adapter_config.json").is_file() => Some(dir.join("peft")),
        Some(file) if file.is_file() => Some(file.clone()),
        Some(path) => bail!(
            "{}: not a PEFT adapter folder (adapter_config.json + adapter_model.safetensors), a `catena train sft` output folder or a GGUF adapter file",
            path.display()
        ),
        None => None,
    };
    let mut o = RlOptions::new(base, args.tasks.clone(), args.out.clone());
    o.init_adapter = init_adapter;
    o.lora = LoraConfig {
        rank: args.rank,
        alpha: args.alpha,
        targets,
        ..LoraConfig::default()
    };
    o.profile = args.profile.clone();
    o.adam.lr = args.lr;
    o.dapo = DapoConfig {
        eps_low: args.clip_low,
        eps_high: args.clip_high,
        is_cap: args.is_cap,
    };
    o.group = args.group;
    o.batch_prompts = args.batch_prompts;
    o.parallel_groups = args.parallel_groups;
    o.max_draw_factor = args.max_draw_factor.max(1);
    o.steps = args.steps;
    o.updates_per_batch = args.updates_per_batch.max(1);
    o.temperature = args.temperature;
    o.decoding = if args.free {
        Decoding::Free
    } else {
        Decoding::Protocol
    };
    o.max_tokens = args.max_tokens;
    o.overlong_shaping = args.overlong_shaping;
    o.grad_clip = args.grad_clip;
    o.gpu_layers = args.gpu_layers;
    o.checkpoint_every = args.checkpoint_every;
    o.seed = args.seed;
    Ok(o)
}

/// Runs `train rl`.
pub fn run_rl(args: RlArgs, env: &RlEnvironment<'_>) -> Result<ExitCode> {
    let base = (env.resolve_base)(args.base.as_deref())?;
    let options = options(&args, base)?;
    let tasks = catena_eval::read_tasks(&options.tasks)?;
    let tools = (env.tools)(&options.profile)?;
    // Code tasks are scored by running their tests; nothing else needs a sandbox.
    let sandbox = if tasks
        .iter()
        .any(|t| t.kind == Some(catena_eval::TaskKind::Code))
    {
        Some((env.sandbox)()?)
    } else {
        None
    };
    let device = device(args.device.as_deref())?;
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    let stop = stop_flag(args.json);
    let mut reporter = Reporter::new(args.json);
    let result = crate::rl::train(
        &options,
        &tasks,
        &tools,
        sandbox.as_deref(),
        &device,
        &mut |e| reporter.event(e),
        &stop,
    );
    reporter.abandon();
    exit_code(result.map(drop), &stop)
}

impl ShowProgress for RlEvent {
    fn show(&self, bar: &mut StepBar) {
        match self {
            RlEvent::Prepared {
                tasks,
                steps,
                group,
                batch_prompts,
                trainable_parameters,
                init_adapter,
            } => {
                eprintln!(
                    "{tasks} tasks; {steps} steps of {batch_prompts} prompts × {group} rollouts; {trainable_parameters} LoRA parameters, starting from {}",
                    init_adapter
                        .as_ref()
                        .map_or("a fresh adapter".to_string(), |p| p.display().to_string())
                );
                bar.start(*steps);
            }
            RlEvent::Resumed { step, checkpoint } => {
                bar.set(*step, None);
                bar.line(format!(
                    "resumed at step {step} from {}",
                    checkpoint.display()
                ));
            }
            RlEvent::Group { .. } => {}
            RlEvent::Step { record: r, .. } => {
                // A step whose groups all had equal rewards makes no update: its update
                // statistics are not zeros but absent, and the line says so.
                let update = if r.updated() {
                    format!(
                        "clip {:.3}  entropy {:.3}  loss {:+.4}",
                        r.clip_fraction, r.entropy, r.loss
                    )
                } else {
                    "no update (every group's rewards were equal)".to_string()
                };
                bar.line(format!(
                    "step {}: reward {:.3}  solved {:.0}%  length {:.0}  dropped {}/{}  {update}  ({:.0} s rollout at {:.1} sequences a step, {:.1} s scoring, {:.0} s update)",
                    r.step,
                    r.reward_mean,
                    100.0 * r.solved_share,
                    r.response_length,
                    r.groups_dropped,
                    r.groups_sampled,
                    r.rollout_seconds,
                    r.mean_batch_width,
                    r.scoring_seconds,
                    r.update_seconds
                ));
                bar.set(r.step, Some(format!("reward {:.3}", r.reward_mean)));
            }
            RlEvent::Checkpoint { .. } => {}
            RlEvent::Stopped { step, checkpoint } => bar.line(format!(
                "stopped after step {step}; checkpoint {}",
                checkpoint.display()
            )),
            RlEvent::Finished {
                adapter,
                peft,
                curves,
                ..
            } => {
                bar.clear();
                eprintln!("adapter (llama.cpp): {}", adapter.display());
                eprintln!("adapter (PEFT):      {}", peft.display());
                eprintln!("curves:              {}", curves.display());
                eprintln!(
                    "measure it: catena eval --tasks FILE --adapter {}",
                    adapter.display()
                );
            }
        }
    }
}

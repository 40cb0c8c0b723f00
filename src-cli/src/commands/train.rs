//! `catena train sft` (LoRA fine-tuning) and `catena train rl` (agentic RL), whose command lines
//! `catena_trainer::cli` holds for this binary and the desktop app's, and `catena train synth`
//! (the synthetic verifiable tasks anyone can reproduce a learning run with).

use crate::setup;
use anyhow::{Result, bail};
use catena_agent::tools::profile_tools;
use catena_hub::assets;
use catena_hub::config::Paths;
use catena_protocol::Profile;
use catena_sandbox::{Limits, Sandbox};
use catena_trainer::cli::RlEnvironment;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args)]
pub struct TrainArgs {
    #[command(subcommand)]
    command: TrainCommand,
}

#[derive(Subcommand)]
enum TrainCommand {
    /// Supervised fine-tuning of a LoRA adapter on Chain-of-Agents trajectories.
    Sft(catena_trainer::cli::SftArgs),
    /// Agentic RL (DAPO) of a LoRA adapter: rollouts through the runtime and sandbox, verifiable
    /// rewards.
    Rl(catena_trainer::cli::RlArgs),
    /// Write synthetic, verifiable tasks and trajectories with real sandbox observations.
    Synth(crate::commands::synth::SynthArgs),
}

pub fn run(args: TrainArgs, paths: &Paths) -> Result<ExitCode> {
    if matches!(args.command, TrainCommand::Sft(_) | TrainCommand::Rl(_)) {
        crate::allocator::keep_freed_memory();
    }
    match args.command {
        TrainCommand::Sft(args) => {
            catena_trainer::cli::run_sft(args, &|base| setup::model_path(base, paths))
        }
        TrainCommand::Rl(mut args) => {
            args.adapter = shipped_adapter_by_name(args.adapter, args.base.as_deref(), paths)?;
            // One sandbox for the code tool and for scoring code tasks: each instance holds the
            // compiled CPython module.
            let shared = std::cell::OnceCell::new();
            let sandbox = || -> Result<Arc<Sandbox>> {
                if let Some(sandbox) = shared.get() {
                    return Ok(Arc::clone(sandbox));
                }
                let sandbox = Arc::new(setup::sandbox(paths, Limits::default())?);
                Ok(Arc::clone(shared.get_or_init(|| sandbox)))
            };
            catena_trainer::cli::run_rl(
                args,
                &RlEnvironment {
                    resolve_base: &|base| setup::model_path(base, paths),
                    tools: &|name| {
                        let profile = Profile::builtin(name)?;
                        profile_tools(&profile, sandbox)
                    },
                    sandbox: &sandbox,
                },
            )
        }
        TrainCommand::Synth(args) => crate::commands::synth::run(args, paths),
    }
}

/// `--adapter NAME` of an adapter Catena ships (`catena-coa-0.5b`), as the file it is written
/// to; a path stays as it is. The name is only taken for the model it was trained on.
fn shipped_adapter_by_name(
    adapter: Option<PathBuf>,
    base: Option<&Path>,
    paths: &Paths,
) -> Result<Option<PathBuf>> {
    let Some(given) = adapter else {
        return Ok(None);
    };
    if given.exists() || given.components().count() != 1 {
        return Ok(Some(given));
    }
    let model = setup::model_path(base, paths)?;
    match assets::adapter_for_model(&model, paths) {
        Some(shipped) if given.as_os_str() == shipped.name => Ok(Some(shipped.ensure(paths)?)),
        Some(shipped) => bail!(
            "--adapter {}: no such file or folder, nor the name of a shipped adapter (this model's is {})",
            given.display(),
            shipped.name
        ),
        None => bail!(
            "--adapter {}: no such file or folder, and {} has no adapter shipped with Catena",
            given.display(),
            model.display()
        ),
    }
}

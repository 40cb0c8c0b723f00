//! `catena train sft` (LoRA fine-tuning) and `catena train rl` (agentic RL), whose command lines
//! `catena_trainer::cli` holds for this binary and the desktop app's, and `catena train synth`
//! (the synthetic verifiable tasks anyone can reproduce a learning run with).

use crate::setup;
use anyhow::Result;
use catena_agent::tools::profile_tools;
use catena_hub::config::Paths;
use catena_protocol::Profile;
use catena_sandbox::{Limits, Sandbox};
use catena_trainer::cli::RlEnvironment;
use clap::{Args, Subcommand};
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
    match args.command {
        TrainCommand::Sft(args) => {
            catena_trainer::cli::run_sft(args, &|base| setup::model_path(base, paths))
        }
        TrainCommand::Rl(args) => {
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

//! `catena train sft` (LoRA fine-tuning, see `catena_trainer::cli`) and `catena train synth`
//! (the synthetic verifiable tasks anyone can reproduce a learning run with).

use crate::setup;
use anyhow::Result;
use catena_core::config::Paths;
use clap::{Args, Subcommand};
use std::process::ExitCode;

#[derive(Args)]
pub struct TrainArgs {
    #[command(subcommand)]
    command: TrainCommand,
}

#[derive(Subcommand)]
enum TrainCommand {
    /// Supervised fine-tuning of a LoRA adapter on Chain-of-Agents trajectories.
    Sft(catena_trainer::cli::SftArgs),
    /// Write synthetic, verifiable tasks and trajectories with real sandbox observations.
    Synth(crate::commands::synth::SynthArgs),
}

pub fn run(args: TrainArgs, paths: &Paths) -> Result<ExitCode> {
    match args.command {
        TrainCommand::Sft(args) => {
            catena_trainer::cli::run_sft(args, &|base| setup::model_path(base, paths))
        }
        TrainCommand::Synth(args) => crate::commands::synth::run(args, paths),
    }
}

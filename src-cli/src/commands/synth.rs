//! `catena train synth`: synthetic verifiable tasks with trajectories whose observations come
//! from the real sandbox (see `catena_trainer::synth`).

use crate::setup;
use anyhow::{Context, Result, bail};
use catena_agent::tools::CodeTool;
use catena_hub::config::Paths;
use catena_protocol::Profile;
use catena_sandbox::Limits;
use catena_trainer::synth;
use clap::Args;
use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args)]
pub struct SynthArgs {
    /// Folder for `train.jsonl` (trajectories) and `held-out.jsonl` (tasks with answers).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,

    /// Training trajectories to write.
    #[arg(long, default_value_t = 200)]
    train: usize,

    /// Held-out tasks (never in the training file) for `catena eval`.
    #[arg(long, default_value_t = 50)]
    held_out: usize,

    #[arg(long, default_value_t = 7)]
    seed: u64,
}

pub fn run(args: SynthArgs, paths: &Paths) -> Result<ExitCode> {
    if args.train == 0 && args.held_out == 0 {
        bail!("nothing to write: --train and --held-out are both 0");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let profile = Profile::builtin("math")?;
    let sandbox = setup::sandbox(paths, Limits::default())?;
    let code = CodeTool::new(Arc::new(sandbox));
    let mut seen = HashSet::new();

    let train_path = args.out.join("train.jsonl");
    let mut train = std::io::BufWriter::new(
        std::fs::File::create(&train_path)
            .with_context(|| format!("creating {}", train_path.display()))?,
    );
    let (mut written, mut dropped, mut index) = (0, 0, 0);
    while written < args.train {
        let task = synth::task(args.seed, index);
        index += 1;
        if !seen.insert(task.question.clone()) {
            continue;
        }
        match synth::trajectory(&task, &code) {
            Ok(trajectory) => {
                serde_json::to_writer(&mut train, &synth::sft_line(&task, &profile, &trajectory))?;
                train.write_all(b"\n")?;
                written += 1;
                if written % 25 == 0 {
                    eprintln!("{written}/{} trajectories", args.train);
                }
            }
            Err(reason) => {
                dropped += 1;
                eprintln!("dropped {}: {reason}", task.id);
            }
        }
    }
    train.flush()?;

    let held_path = args.out.join("held-out.jsonl");
    let mut held = std::io::BufWriter::new(
        std::fs::File::create(&held_path)
            .with_context(|| format!("creating {}", held_path.display()))?,
    );
    let (mut tasks, mut index) = (0, 0);
    // Another stream of the same families; a question already used for training is skipped.
    let held_seed = args.seed.wrapping_add(0x5EED);
    while tasks < args.held_out {
        let task = synth::task(held_seed, index);
        index += 1;
        if !seen.insert(task.question.clone()) {
            continue;
        }
        serde_json::to_writer(&mut held, &task)?;
        held.write_all(b"\n")?;
        tasks += 1;
    }
    held.flush()?;
    eprintln!(
        "{written} trajectories in {} ({dropped} dropped), {tasks} held-out tasks in {}",
        train_path.display(),
        held_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

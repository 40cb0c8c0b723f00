//! The `train sft` and `train rl` command lines (the `cli` feature): clap's flags turned into
//! [`SftOptions`](crate::sft::SftOptions) and [`RlOptions`](crate::rl::RlOptions), a progress
//! bar or JSON lines, Ctrl-C and `stop` on stdin. The library itself takes the option structs;
//! this layer exists once because two binaries mount it: `catena train` and `catena-desktop
//! train sft` (the child process the desktop app's training page starts).
//!
//! What both commands share is here: the device they train on, the flag that stops them at a
//! step boundary, and how they end.

mod progress;
mod rl;
mod sft;

pub use rl::{RlArgs, RlEnvironment, run_rl};
pub use sft::{SftArgs, run_sft};

use anyhow::{Context, Result, bail};
use catena_train_events::STOPPED_EXIT_CODE;
use std::io::BufRead;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The flag a run polls between steps: set by the first Ctrl-C (finish the step, checkpoint,
/// exit; a second one exits at once and the last checkpoint still resumes) and, with `--json`,
/// by `stop` on stdin (how the app's training page stops a run it started).
fn stop_flag(json: bool) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(i32::from(STOPPED_EXIT_CODE));
        }
    });
    if json {
        let flag = stop.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                match line {
                    Ok(line) if line.trim() == "stop" => flag.store(true, Ordering::SeqCst),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
    }
    stop
}

/// The device to train on: `--device cpu|cuda`, or CUDA when this build and machine have it.
fn device(choice: Option<&str>) -> Result<crate::Device> {
    match choice {
        None => Ok(crate::Device::cuda_if_available(0).unwrap_or(crate::Device::Cpu)),
        Some("cpu") => Ok(crate::Device::Cpu),
        Some("cuda") => crate::Device::new_cuda(0).context(
            "no CUDA device for training (this build needs the `cuda` feature and an NVIDIA GPU)",
        ),
        Some(other) => bail!("--device must be cpu or cuda, not `{other}`"),
    }
}

/// How a run ends: success; [`STOPPED_EXIT_CODE`] after a requested stop (the checkpoint
/// resumes it); or the error.
fn exit_code(result: crate::Result<()>, stop: &AtomicBool) -> Result<ExitCode> {
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(crate::TrainError::Stopped(why)) if stop.load(Ordering::SeqCst) => {
            eprintln!("{why}");
            Ok(ExitCode::from(STOPPED_EXIT_CODE))
        }
        Err(e) => Err(e.into()),
    }
}

/// `--targets`: the layers that get LoRA factors, by their short names.
fn lora_targets(names: &[String]) -> Result<Vec<crate::lora::Target>> {
    names
        .iter()
        .map(|t| {
            crate::lora::Target::parse(t)
                .with_context(|| format!("unknown LoRA target `{t}` (use q,k,v,o,gate,up,down)"))
        })
        .collect()
}

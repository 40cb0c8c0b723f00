//! `catena sandbox`: run Python the way a `<code>` call does and print the observation.

use crate::setup;
use anyhow::{Context, Result, bail};
use catena_agent::tools::code_observation;
use catena_hub::config::Paths;
use catena_sandbox::{Exit, Limits};
use clap::Args;
use std::io::Read;
use std::process::ExitCode;

#[derive(Args)]
pub struct SandboxArgs {
    /// The Python program; `-` reads it from stdin.
    pub code: String,

    /// Text given to the program as its standard input.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub stdin: String,

    /// Wall-time limit in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 7.0)]
    pub timeout: f64,

    /// Memory limit in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    pub memory: u64,

    /// Run the program this many times (each in a fresh interpreter) and report the timings.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: u32,

    /// Print a JSON object (exit, outputs, observation, timings) instead of the observation.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SandboxArgs, paths: &Paths) -> Result<ExitCode> {
    let code = if args.code == "-" {
        let mut code = String::new();
        std::io::stdin()
            .read_to_string(&mut code)
            .context("cannot read the program from stdin")?;
        code
    } else {
        args.code.clone()
    };
    let Some(wall) = catena_protocol::units::positive_seconds(args.timeout) else {
        bail!("--timeout must be a positive number of seconds");
    };
    let limits = Limits {
        wall,
        memory_bytes: args.memory << 20,
        ..Limits::default()
    };
    let sandbox = setup::sandbox(paths, limits)?;
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..args.repeat.max(1) {
        let execution = sandbox.run(&code, args.stdin.as_bytes())?;
        times.push(execution.elapsed.as_secs_f64() * 1e3);
        last = Some(execution);
    }
    let Some(execution) = last else {
        bail!("nothing ran");
    };
    let observation = code_observation(&execution);
    if args.json {
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let value = serde_json::json!({
            "exit": match &execution.exit {
                Exit::Status(s) => serde_json::json!({"status": s}),
                Exit::Timeout => serde_json::json!("timeout"),
                Exit::Killed(reason) => serde_json::json!({"killed": reason}),
            },
            "stdout": execution.stdout.to_text(),
            "stderr": execution.stderr.to_text(),
            "observation": observation,
            "runs": times.len(),
            "elapsed_ms": times,
            "min_ms": sorted.first(),
            "median_ms": sorted.get(sorted.len() / 2),
        });
        println!("{value}");
    } else {
        println!("{observation}");
    }
    Ok(ExitCode::SUCCESS)
}

//! `catena`: run Chain-of-Agents models on your own machine.

// The one FFI call into mimalloc's option table, with its SAFETY comment.
#[allow(unsafe_code)]
mod allocator;
mod commands;
mod mcp_servers;
mod render;
mod setup;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "catena",
    version,
    about = "Run Chain-of-Agents models locally: one model plans, thinks, runs Python in a sandbox, reflects and answers.",
    propagate_version = true
)]
struct Cli {
    /// More logging on stderr (-v: info, -vv: debug, including llama.cpp's own log).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    /// Data directory (models, the Python runtime); default: the platform's data directory.
    #[arg(long, global = true, env = "CATENA_DATA_DIR", value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,

    /// Cache directory (the compiled sandbox); default: the platform's cache directory.
    #[arg(long, global = true, env = "CATENA_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<std::path::PathBuf>,

    /// Folder of the session store (catena.db); default: the data directory.
    #[arg(long, global = true, env = "CATENA_STORE_DIR", value_name = "DIR")]
    store_dir: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one task as a Chain-of-Agents trajectory, streamed to the terminal.
    Run(commands::run::RunArgs),
    /// Run Python in the sandbox and print the observation the model would see.
    Sandbox(commands::sandbox::SandboxArgs),
    /// Fetch or list the default model and the Python runtime.
    Assets(commands::assets::AssetsArgs),
    /// Measure prompt processing and generation speed (llama-bench's pp/tg tests).
    Bench(commands::bench::BenchArgs),
    /// Serve the model locally: an OpenAI-compatible API and agent runs.
    Serve(commands::serve::ServeArgs),
    /// Serve Catena's tools to an MCP host (an editor, a coding agent) on stdin and stdout:
    /// run_python in the sandbox, the search tools that are set up, and agent_run.
    Mcp(commands::mcp::McpArgs),
    /// List, show and export stored sessions and runs.
    Sessions(commands::sessions::SessionsArgs),
    /// Download, list, inspect and choose models.
    Models(commands::models::ModelsArgs),
    /// Build, list, search and remove the local passage indexes `<wiki_search>` reads.
    Index(commands::index::IndexArgs),
    /// Check this machine: CPU, memory, GPUs, the model, and the plan for running it here.
    Doctor(commands::doctor::DoctorArgs),
    /// Measure a model (and adapter) on a task set: pass@1, valid chains, tokens, time.
    Eval(commands::eval::EvalArgs),
    /// Fine-tune LoRA adapters (sft) and write synthetic training tasks (synth).
    Train(commands::train::TrainArgs),
    /// Run the explicit multi-agent system on tasks and turn its solved runs into
    /// Chain-of-Agents training data (resumable; a report of every filter stage).
    Distill(commands::distill::DistillArgs),
    /// The model worker process that `catena serve` starts (speaks frames on stdin/stdout).
    #[command(hide = true)]
    Worker,
}

// Before anything runs code compiled for the CPU that built this binary: on Linux, before the
// static initialisers; elsewhere, first thing in `main`.
catena_engine_api::check_cpu_before_start!();

fn main() -> ExitCode {
    #[cfg(not(target_os = "linux"))]
    catena_engine_api::build_cpu::exit_unless_runnable();
    let cli = Cli::parse();
    setup::init_logging(cli.verbose);
    let paths = match setup::paths(
        cli.data_dir.as_deref(),
        cli.cache_dir.as_deref(),
        cli.store_dir.as_deref(),
    ) {
        Ok(paths) => paths,
        Err(e) => return setup::report(&e),
    };
    let result = match cli.command {
        Command::Run(args) => commands::run::run(args, &paths),
        Command::Sandbox(args) => commands::sandbox::run(args, &paths),
        Command::Assets(args) => commands::assets::run(args, &paths),
        Command::Bench(args) => commands::bench::run(args, &paths),
        Command::Serve(args) => commands::serve::run(args, &paths, cli.verbose),
        Command::Mcp(args) => commands::mcp::run(args, &paths, cli.verbose),
        Command::Sessions(args) => commands::sessions::run(args, &paths),
        Command::Models(args) => commands::models::run(args, &paths),
        Command::Index(args) => commands::index::run(args, &paths),
        Command::Doctor(args) => commands::doctor::run(args, &paths),
        Command::Eval(args) => commands::eval::run(args, &paths),
        Command::Train(args) => commands::train::run(args, &paths),
        Command::Distill(args) => commands::distill::run(args, &paths),
        Command::Worker => commands::worker::run(),
    };
    match result {
        Ok(code) => code,
        Err(e) => setup::report(&e),
    }
}

//! `catena-desktop`: the web UI in a native window, over the service (catena-service). The model
//! runs in a supervised worker process (this same binary, `catena-desktop worker`), so a llama.cpp
//! abort or an out-of-memory kill costs one run, never the window or the session store.

// No console window next to the app in Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod backend;
mod commands;
mod instance;

use backend::Backend;
use catena_hub::config::Paths;
use std::process::ExitCode;

// Before anything runs code compiled for the CPU that built this binary: on Linux, before the
// static initialisers; elsewhere, first thing in `main`.
catena_engine_api::check_cpu_before_start!();

fn main() -> ExitCode {
    #[cfg(not(target_os = "linux"))]
    catena_engine_api::build_cpu::exit_unless_runnable();
    commands::started();
    let first = std::env::args().nth(1);
    match first.as_deref() {
        Some("worker") => {
            init_logging();
            return worker();
        }
        Some("train") => {
            // The training page runs `catena-desktop train sft --json ...` as a child process.
            init_logging();
            return train();
        }
        Some("--version" | "-V") => {
            println!("catena-desktop {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some("--help" | "-h") => {
            println!(
                "catena-desktop {}: Catena's desktop app.\n\n\
                 Starts the window; the model loads in the background (the default model is fetched \
                 once when none is installed).\n\
                 Environment: CATENA_DATA_DIR, CATENA_CACHE_DIR, CATENA_STORE_DIR (where things \
                 live), CATENA_LOG (log filter, e.g. debug).",
                env!("CARGO_PKG_VERSION")
            );
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    init_logging();
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let paths = Paths::from_env()?;
    let _instance = match instance::acquire(&paths.data_dir)? {
        Some(lock) => lock,
        None => {
            eprintln!(
                "Catena is already open (another catena-desktop holds {}); use that window.",
                instance::lock_path(&paths.data_dir).display()
            );
            return Ok(ExitCode::from(3));
        }
    };
    let backend = Backend::new(paths);
    let loader = backend.clone();
    tauri::Builder::default()
        .manage(backend)
        .manage(commands::Follows::default())
        .setup(move |_app| {
            // The window shows at once; the model loads behind it.
            loader.start_loading();
            Ok(())
        })
        .invoke_handler(tauri::generate_handler![
            commands::window_ready,
            commands::health,
            commands::profiles,
            commands::tools,
            commands::web_settings,
            commands::update_web_settings,
            commands::library_models,
            commands::pull_model,
            commands::import_folder,
            commands::downloads,
            commands::serve_model,
            commands::start_training,
            commands::training_data,
            commands::training_runs,
            commands::training_run,
            commands::stop_training,
            commands::start_run,
            commands::vote,
            commands::follow_run,
            commands::unfollow_run,
            commands::cancel_run,
            commands::answer_approval,
            commands::rate_run,
            commands::sessions,
            commands::session,
            commands::delete_session,
            commands::export_data,
        ])
        .run(tauri::generate_context!())
        .map_err(|e| anyhow::anyhow!("the window could not be shown: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// The model worker: frames on stdin/stdout until the app closes the pipe.
fn worker() -> ExitCode {
    match catena_worker_process::run_stdio() {
        Ok(()) => ExitCode::SUCCESS,
        Err(catena_worker::WorkerExit::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "the model worker stopped");
            ExitCode::from(2)
        }
    }
}

/// Logs go to stderr (the worker's stdout carries frames); `CATENA_LOG` filters them.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CATENA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        // As in `catena`: a log line stderr cannot take is dropped, not reported with a panic.
        .log_internal_errors(false)
        .try_init();
}

/// `catena-desktop train sft ...`: the trainer's own command line (the same as `catena train
/// sft`), so the app needs no second binary to train.
fn train() -> ExitCode {
    use clap::Parser;
    #[derive(Parser)]
    #[command(name = "catena-desktop train")]
    enum Train {
        /// Supervised fine-tuning of a LoRA adapter on Chain-of-Agents trajectories.
        Sft(catena_trainer::cli::SftArgs),
    }
    let Train::Sft(args) = Train::parse_from(std::env::args_os().skip(1));
    let resolve = |base: Option<&std::path::Path>| -> anyhow::Result<std::path::PathBuf> {
        if let Some(base) = base {
            return Ok(base.to_path_buf());
        }
        let paths = Paths::from_env()?;
        if let Some(path) = catena_hub::installed::chosen_default(&paths)? {
            return Ok(path);
        }
        Ok(catena_hub::assets::default_model(&paths, &mut |_| {})?)
    };
    match catena_trainer::cli::run_sft(args, &resolve) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

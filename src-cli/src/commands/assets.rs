//! `catena assets`: fetch the default model and the Python runtime ahead of time, or list them.

use crate::setup;
use anyhow::Result;
use catena_hub::assets::{
    self, Asset, DEFAULT_MODEL, GEMMA_TEST_MODEL, MICROPYTHON, PYTHON, installed_path, is_installed,
};
use catena_hub::config::Paths;
use clap::{Args, Subcommand, ValueEnum};
use std::process::ExitCode;

#[derive(Args)]
pub struct AssetsArgs {
    #[command(subcommand)]
    pub command: AssetsCommand,
}

#[derive(Subcommand)]
pub enum AssetsCommand {
    /// Download and verify assets (default: the model and the Python runtime).
    Fetch {
        #[arg(value_enum)]
        which: Vec<Which>,
    },
    /// Show what is installed.
    List,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Which {
    /// The default model.
    Model,
    /// The CPython sandbox runtime.
    Python,
    /// MicroPython (for the sandbox's own tests).
    Micropython,
    /// Gemma 3 270M (a second architecture, for tests).
    Gemma,
    /// All of the above.
    All,
}

const ALL: [&Asset; 4] = [&DEFAULT_MODEL, &PYTHON, &MICROPYTHON, &GEMMA_TEST_MODEL];

pub fn run(args: AssetsArgs, paths: &Paths) -> Result<ExitCode> {
    match args.command {
        AssetsCommand::Fetch { which } => {
            let which = if which.is_empty() {
                vec![Which::Model, Which::Python]
            } else {
                which
            };
            let mut wanted: Vec<&Asset> = Vec::new();
            for w in which {
                let add: &[&Asset] = match w {
                    Which::Model => &[&DEFAULT_MODEL],
                    Which::Python => &[&PYTHON],
                    Which::Micropython => &[&MICROPYTHON],
                    Which::Gemma => &[&GEMMA_TEST_MODEL],
                    Which::All => &ALL,
                };
                for a in add {
                    if !wanted.iter().any(|w| w.id == a.id) {
                        wanted.push(a);
                    }
                }
            }
            for asset in wanted {
                let path = assets::ensure(asset, paths, &mut setup::asset_progress)?;
                println!("{}: {}", asset.id, path.display());
            }
        }
        AssetsCommand::List => {
            for asset in ALL {
                let state = if is_installed(asset, paths) {
                    "installed"
                } else {
                    "not installed"
                };
                println!(
                    "{:<40} {:>5} MB  {:<13} {}",
                    asset.id,
                    asset.size() >> 20,
                    state,
                    installed_path(asset, &asset.files[0], paths).display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! `catena index add|list|rm|search`: the local passage indexes `<wiki_search>` reads.

use anyhow::{Context, Result};
use catena_hub::config::Paths;
use catena_search::{BuildProgress, PassageIndex};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct IndexArgs {
    #[command(subcommand)]
    pub command: IndexCommand,
}

#[derive(Subcommand)]
pub enum IndexCommand {
    /// Build a BM25 index of a passage file (JSON lines: the wiki-18 layout `id`, `contents` with
    /// the title on its first line; or `id`, `title`, `text`).
    Add {
        file: PathBuf,
        /// The index's name (default: the file's name without its extension).
        #[arg(long)]
        name: Option<String>,
    },
    /// The indexes on this machine.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove an index.
    Rm { name: String },
    /// Search an index as `<wiki_search>` does.
    Search {
        name: String,
        query: String,
        /// How many passages.
        #[arg(short, default_value_t = 3)]
        k: usize,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: IndexArgs, paths: &Paths) -> Result<ExitCode> {
    let dir = paths.indexes_dir();
    match args.command {
        IndexCommand::Add { file, name } => add(&dir, &file, name),
        IndexCommand::List { json } => {
            let indexes = catena_search::list(&dir);
            if json {
                println!("{}", serde_json::to_string_pretty(&indexes)?);
            } else if indexes.is_empty() {
                eprintln!("No indexes yet: `catena index add FILE` builds one.");
            } else {
                println!("{:<24} {:>12}  SOURCE", "NAME", "PASSAGES");
                for index in indexes {
                    println!(
                        "{:<24} {:>12}  {}",
                        index.name,
                        index.passages,
                        index.source.display()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        IndexCommand::Rm { name } => {
            catena_search::remove(&dir, &name)?;
            eprintln!("Removed the index {name}.");
            Ok(ExitCode::SUCCESS)
        }
        IndexCommand::Search {
            name,
            query,
            k,
            json,
        } => {
            let index = PassageIndex::open(&dir, &name)?;
            let hits = index.search(&query, k)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&hits)?);
            } else {
                println!("{}", catena_agent::tools::wiki_observation(&query, &hits));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn add(dir: &Path, file: &Path, name: Option<String>) -> Result<ExitCode> {
    let name = match name {
        Some(name) => name,
        None => file
            .file_stem()
            .map(|s| {
                s.to_string_lossy().replace(
                    |c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_',
                    "-",
                )
            })
            .unwrap_or_else(|| "passages".into()),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("indexing [{bar:30}] {bytes}/{total_bytes} ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let built = catena_search::build_passages(dir, &name, file, &mut |p: BuildProgress| {
        bar.set_length(p.total_bytes);
        bar.set_position(p.read_bytes);
        bar.set_message(format!("{} passages", p.passages));
    });
    bar.finish_and_clear();
    let info = built.with_context(|| format!("{} was not indexed", file.display()))?;
    eprintln!(
        "Indexed {} passages of {} as `{}` in {:.1} s{}.",
        info.passages,
        file.display(),
        info.name,
        started.elapsed().as_secs_f64(),
        if info.skipped_lines > 0 {
            format!(
                " ({} lines that were not passages skipped)",
                info.skipped_lines
            )
        } else {
            String::new()
        }
    );
    eprintln!(
        "Use it: catena run --profile mhqa --wiki-index {} \"...\"",
        info.name
    );
    Ok(ExitCode::SUCCESS)
}

//! `catena sessions list|show|export`: what was run, from the session store.

use anyhow::{Context, Result, bail};
use catena_hub::config::Paths;
use catena_store::{ExportFormat, FeedbackFilter, Store};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    pub command: SessionsCommand,
}

#[derive(Subcommand)]
pub enum SessionsCommand {
    /// Sessions, most recent first.
    List {
        /// Only sessions whose title, tasks or answers contain this text.
        #[arg(long)]
        search: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The runs of a session (or one run), with their events.
    Show {
        /// A session id or a run id.
        id: String,
        /// Print the stored events too.
        #[arg(long)]
        events: bool,
        #[arg(long)]
        json: bool,
    },
    /// Export finished runs as training data.
    Export {
        #[arg(long, value_enum, default_value = "sft")]
        format: Format,
        /// Which runs, by feedback.
        #[arg(long, value_enum, default_value = "any")]
        feedback: Filter,
        /// Output file (default: stdout).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Mark a run good or bad (for export).
    Feedback {
        run: String,
        #[arg(value_enum)]
        rating: Rating,
        #[arg(long)]
        note: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// Catena's JSONL of chat messages (what `catena train sft` reads).
    Sft,
    /// The AFM release's alpaca JSON (instruction, input, output).
    Alpaca,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Filter {
    Any,
    Good,
    Bad,
    Rated,
    Unrated,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Rating {
    Good,
    Bad,
    /// Clear the rating.
    None,
}

pub fn run(args: SessionsArgs, paths: &Paths) -> Result<ExitCode> {
    let store = Store::open_in(&paths.store_dir).context("cannot open the session store")?;
    match args.command {
        SessionsCommand::List {
            search,
            limit,
            json,
        } => list(&store, search.as_deref(), limit, json)?,
        SessionsCommand::Show { id, events, json } => show(&store, &id, events, json)?,
        SessionsCommand::Export {
            format,
            feedback,
            out,
        } => export(&store, format, feedback, out.as_deref())?,
        SessionsCommand::Feedback { run, rating, note } => {
            let rating = match rating {
                Rating::Good => Some(catena_store::Feedback::Good),
                Rating::Bad => Some(catena_store::Feedback::Bad),
                Rating::None => None,
            };
            if let Err(e) = store.set_feedback(&run, rating, note.as_deref()) {
                bail!("{e}");
            }
            println!("Saved.");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `catena sessions list`: the sessions, newest first.
fn list(store: &Store, search: Option<&str>, limit: usize, json: bool) -> Result<()> {
    let sessions = store.list_sessions(search, limit)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&sessions)?);
    } else if sessions.is_empty() {
        println!("No sessions yet.");
    } else {
        for s in sessions {
            println!(
                "{}  {:>3} run(s)  {}  {}",
                s.id,
                s.runs,
                format_time(s.updated_ms),
                s.title
            );
        }
    }
    Ok(())
}

/// `catena sessions show ID`: a session's runs (or one run), with their events if asked.
fn show(store: &Store, id: &str, events: bool, json: bool) -> Result<()> {
    let runs = match store.session_runs(id) {
        Ok(runs) => runs,
        Err(_) => vec![
            store
                .run(id)
                .with_context(|| format!("no session or run `{id}`"))?,
        ],
    };
    for run in runs {
        let stored = if events {
            store.events(&run.id, 0)?
        } else {
            Vec::new()
        };
        if json {
            let mut value = serde_json::to_value(&run)?;
            if events {
                value["events"] = serde_json::to_value(&stored)?;
            }
            println!("{}", serde_json::to_string_pretty(&value)?);
            continue;
        }
        println!(
            "run {}  {}  {}  {}{}",
            run.id,
            run.status.as_str(),
            format_time(run.started_ms),
            run.profile.as_deref().unwrap_or(run.kind.as_str()),
            run.feedback
                .map(|f| format!("  [{}]", f.as_str()))
                .unwrap_or_default()
        );
        println!("  task:   {}", run.task.lines().next().unwrap_or(""));
        println!("  answer: {}", run.answer.as_deref().unwrap_or("(none)"));
        if let Some(error) = &run.error {
            println!("  error:  {error}");
        }
        println!(
            "  tokens: {} prompt ({} cached), {} generated; {} tool calls",
            run.usage.prompt_tokens,
            run.usage.cached_tokens,
            run.usage.generated_tokens,
            run.usage.tool_calls
        );
        for e in stored {
            println!("  #{:<4} {}", e.seq, e.data);
        }
    }
    Ok(())
}

/// `catena sessions export`: the runs as training data, to a file (written whole) or stdout.
fn export(
    store: &Store,
    format: Format,
    feedback: Filter,
    out: Option<&std::path::Path>,
) -> Result<()> {
    let format = match format {
        Format::Sft => ExportFormat::Sft,
        Format::Alpaca => ExportFormat::Alpaca,
    };
    let filter = match feedback {
        Filter::Any => FeedbackFilter::Any,
        Filter::Good => FeedbackFilter::Good,
        Filter::Bad => FeedbackFilter::Bad,
        Filter::Rated => FeedbackFilter::Rated,
        Filter::Unrated => FeedbackFilter::Unrated,
    };
    let stats = match out {
        Some(path) => {
            // Write beside the target and rename, so a failure leaves no half file.
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            let mut tmp = tempfile::NamedTempFile::new_in(dir)
                .with_context(|| format!("cannot write in {}", dir.display()))?;
            let cannot_write = || format!("cannot write {}", path.display());
            // Buffered: a record is written in many small pieces.
            let mut buffered = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
            let stats = store
                .export(format, filter, &mut buffered)
                .with_context(cannot_write)?;
            // On disk before it takes the name: a crash then leaves the old file, not an empty one.
            buffered.flush().with_context(cannot_write)?;
            drop(buffered);
            tmp.as_file().sync_all().with_context(cannot_write)?;
            tmp.persist(path).with_context(cannot_write)?;
            stats
        }
        None => {
            let mut stdout = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
            let stats = store.export(format, filter, &mut stdout)?;
            stdout.flush()?;
            stats
        }
    };
    eprintln!(
        "Exported {} run(s){}.",
        stats.written,
        if stats.skipped > 0 {
            format!(" ({} skipped: they do not fit this format)", stats.skipped)
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM` (UTC).
fn format_time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_utc_times() {
        assert_eq!(super::format_time(0), "1970-01-01 00:00");
        assert_eq!(super::format_time(951_782_400_000), "2000-02-29 00:00");
    }
}

//! `catena index add|list|rm|search`: the local indexes the search tools read: passage files
//! for `<wiki_search>`, the user's documents for `<web_search>` and `<crawl_page>`.

use anyhow::{Context, Result, bail};
use catena_hub::config::Paths;
use catena_search::{BuildProgress, DocumentIndex, IndexKind, PassageIndex};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args)]
pub struct IndexArgs {
    #[command(subcommand)]
    pub command: IndexCommand,
}

#[derive(Subcommand)]
pub enum IndexCommand {
    /// Build a BM25 index: of a passage file (`.jsonl`: the wiki-18 layout `id`, `contents`
    /// with the title on its first line; or `id`, `title`, `text`) for `<wiki_search>`, or of
    /// documents (Markdown, text, HTML and PDF files, ZIM archives, and folders of them) for
    /// `<web_search>` and `<crawl_page>`. `--kind passages` cuts a ZIM archive's articles into
    /// 100-word passages for `<wiki_search>`.
    Add {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The index's name (default: the first path's name without its extension).
        #[arg(long)]
        name: Option<String>,
        /// What to build (default: passages for one `.jsonl` file, documents otherwise).
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
    },
    /// The indexes on this machine.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove an index.
    Rm { name: String },
    /// Search an index as `<wiki_search>` (passages) or `<web_search>` (documents) does.
    Search {
        name: String,
        #[arg(required_unless_present = "queries")]
        query: Option<String>,
        /// Run every line of FILE as a query instead; with --json, one line per query with its
        /// hits and the seconds the search took (the index opened once, before the clock).
        #[arg(long, value_name = "FILE", conflicts_with = "query")]
        queries: Option<PathBuf>,
        /// How many results (default: 3 passages, 10 documents).
        #[arg(short)]
        k: Option<usize>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    Passages,
    Documents,
}

pub fn run(args: IndexArgs, paths: &Paths) -> Result<ExitCode> {
    let dir = paths.indexes_dir();
    match args.command {
        IndexCommand::Add { paths, name, kind } => add(&dir, &paths, name, kind),
        IndexCommand::List { json } => {
            let indexes = catena_search::list(&dir);
            if json {
                println!("{}", serde_json::to_string_pretty(&indexes)?);
            } else if indexes.is_empty() {
                eprintln!("No indexes yet: `catena index add FILE` builds one.");
            } else {
                println!("{:<24} {:<10} {:>10}  SOURCES", "NAME", "KIND", "ENTRIES");
                for index in indexes {
                    let sources: Vec<String> = index
                        .sources
                        .iter()
                        .map(|s| s.display().to_string())
                        .collect();
                    println!(
                        "{:<24} {:<10} {:>10}  {}",
                        index.name,
                        index.kind.entries_noun(),
                        index.entries,
                        sources.join(", ")
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
            queries,
            k,
            json,
        } => {
            let queries = match (query, queries) {
                (Some(query), _) => vec![query],
                (None, Some(file)) => std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect(),
                (None, None) => bail!("give a query or --queries FILE"),
            };
            search(&dir, &name, &queries, k, json)
        }
    }
}

/// One query's hits as JSON and the observation the tool would show.
type QueryRunner = dyn Fn(&str) -> Result<(serde_json::Value, String)>;

/// Runs `queries` against index `name`, printing what the tool would show or, with `json`, the
/// hits (one JSON line per query with its time when there are several).
fn search(
    dir: &Path,
    name: &str,
    queries: &[String],
    k: Option<usize>,
    json: bool,
) -> Result<ExitCode> {
    let kind = catena_search::list(dir)
        .into_iter()
        .find(|i| i.name == name)
        .map_or(IndexKind::Passages, |i| i.kind);
    let run: Box<QueryRunner> = match kind {
        IndexKind::Passages => {
            let index = PassageIndex::open(dir, name)?;
            let k = k.unwrap_or(catena_agent::tools::WIKI_TOP_K);
            Box::new(move |query| {
                let hits = index.search(query, k)?;
                let shown = catena_agent::tools::wiki_observation(query, &hits) + "\n";
                Ok((serde_json::to_value(&hits)?, shown))
            })
        }
        IndexKind::Documents => {
            let backend = catena_web::LocalSearch::new(Arc::new(DocumentIndex::open(dir, name)?));
            let k = k.unwrap_or(catena_agent::tools::WEB_RESULTS);
            Box::new(move |query| {
                let hits = catena_web::SearchBackend::search(&backend, query, k)?;
                let shown = catena_agent::tools::web_observation(query, &hits);
                Ok((serde_json::to_value(&hits)?, shown))
            })
        }
    };
    for query in queries {
        let started = std::time::Instant::now();
        let (hits, shown) = run(query)?;
        let seconds = started.elapsed().as_secs_f64();
        match (json, queries.len()) {
            (true, 1) => println!("{}", serde_json::to_string_pretty(&hits)?),
            (true, _) => println!(
                "{}",
                serde_json::json!({"query": query, "hits": hits, "seconds": seconds})
            ),
            (false, _) => print!("{shown}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn add(
    dir: &Path,
    sources: &[PathBuf],
    name: Option<String>,
    kind: Option<KindArg>,
) -> Result<ExitCode> {
    let first = &sources[0];
    let kind = match kind {
        Some(KindArg::Passages) => IndexKind::Passages,
        Some(KindArg::Documents) => IndexKind::Documents,
        None if sources.len() == 1
            && first.is_file()
            && first.extension().is_some_and(|e| e == "jsonl") =>
        {
            IndexKind::Passages
        }
        None => IndexKind::Documents,
    };
    if kind == IndexKind::Passages && sources.len() != 1 {
        bail!(
            "a passage index is built from one file (a `.jsonl` passage file or a `.zim` archive)"
        );
    }
    let name = match name {
        Some(name) => name,
        None => first
            .canonicalize()
            .unwrap_or_else(|_| first.clone())
            .file_stem()
            .and_then(|s| catena_protocol::names::plain_name_from(&s.to_string_lossy()))
            .unwrap_or_else(|| kind.entries_noun().into()),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("indexing [{bar:30}] {bytes}/{total_bytes} ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut progress = |p: BuildProgress| {
        bar.set_length(p.total_bytes);
        bar.set_position(p.read_bytes);
        bar.set_message(kind.count(p.entries));
    };
    let started = std::time::Instant::now();
    let built = match kind {
        IndexKind::Passages => catena_search::build_passages(dir, &name, first, &mut progress),
        IndexKind::Documents => catena_search::build_documents(dir, &name, sources, &mut progress),
    };
    bar.finish_and_clear();
    let shown: Vec<String> = sources.iter().map(|s| s.display().to_string()).collect();
    let info = built.with_context(|| format!("{} was not indexed", shown.join(", ")))?;
    let seconds = started.elapsed().as_secs_f64();
    let skipped = match (kind, info.skipped) {
        (_, 0) => String::new(),
        (IndexKind::Passages, n) => format!(" ({n} lines that were not passages skipped)"),
        (IndexKind::Documents, n) => format!(" ({n} files that could not be read skipped)"),
    };
    eprintln!(
        "Indexed {} of {} as `{}` in {seconds:.1} s{skipped}.",
        kind.count(info.entries),
        shown.join(", "),
        info.name,
    );
    match kind {
        IndexKind::Passages => eprintln!(
            "Use it: catena run --profile mhqa --wiki-index {} \"...\"",
            info.name
        ),
        IndexKind::Documents => eprintln!(
            "Use it: catena run --profile web --doc-index {} \"...\"",
            info.name
        ),
    }
    Ok(ExitCode::SUCCESS)
}

//! `catena models list|pull|import|rm|default|mirror|inspect|random-weights`: the model catalog,
//! downloads, checkpoints converted here, and the user's default model.

use crate::setup;
use anyhow::{Context, Result, bail};
use catena_engine::llama::{AdapterOptions, LlamaEngine, LoadOptions};
use catena_engine_api::QuantType;
use catena_gguf::inspect::human_bytes;
use catena_hub::assets;
use catena_hub::catalog::{self, Catalog};
use catena_hub::config::Paths;
use catena_hub::download::{self, DownloadEvent, DownloadOptions, DownloadRequest, EventSink};
use catena_hub::installed::{self, DigestSource};
use catena_hub::listing;
use catena_hub::pull::{self, CheckpointPlan, PullPlan};
use catena_hub::settings::{self, ModelSettings};
use catena_import::{
    CheckpointPull, FolderImport, ImportError, ImportEvent, ImportSink, PullOptions, Stage,
};
use catena_worker::WorkerCommand;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,
}

#[derive(Subcommand)]
pub enum ModelsCommand {
    /// The catalog's models with their state, and other downloaded models.
    List {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Download and verify a model of the catalog, or any GGUF file by URL.
    Pull(PullArgs),
    /// Convert a Hugging Face checkpoint folder (safetensors) to GGUF, quantise and install it.
    Import(ImportArgs),
    /// Convert a PEFT LoRA adapter trained elsewhere into the GGUF adapter `--adapter` loads.
    ImportAdapter(ImportAdapterArgs),
    /// Remove a downloaded model (and any partial download of it).
    Rm {
        /// A catalog id (`ID` or `ID:QUANT`) or a downloaded file's name.
        model: String,
    },
    /// Show or choose the model `catena run` and `catena serve` use without --model.
    Default {
        /// A catalog id (`ID` or `ID:QUANT`), a downloaded file's name or a GGUF path.
        model: Option<String>,
        /// Go back to the built-in default model.
        #[arg(long, conflicts_with = "model")]
        clear: bool,
    },
    /// Show or set the hub mirror used for catalog downloads.
    Mirror {
        /// Base URL of a mirror serving the hub's paths.
        url: Option<String>,
        #[arg(long, conflicts_with = "url")]
        clear: bool,
    },
    /// What a GGUF file holds: architecture, size, quantisation, context, chat template.
    Inspect {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// A model of another's exact shape with random weights, for speed measurements where the
    /// real weights cannot go: the same kernels run over the same bytes (compare engines on it,
    /// not it with the real model: on a CPU it generates about 10% faster); it answers noise.
    RandomWeights(RandomWeightsArgs),
}

#[derive(Args)]
pub struct RandomWeightsArgs {
    /// The model whose shape is copied: a GGUF file, or the header alone (see --header-only).
    #[arg(long)]
    pub like: PathBuf,
    /// Where the new file goes.
    #[arg(long)]
    pub out: PathBuf,
    /// Chooses the weights: the same seed makes the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write only the header of --like (a few megabytes: metadata, tokenizer, tensor table),
    /// which is all a random-weights model needs.
    #[arg(long)]
    pub header_only: bool,
}

#[derive(Args)]
pub struct PullArgs {
    /// A catalog id, optionally with its quantisation (`afm-code-7b-rl:Q8_0`).
    #[arg(required_unless_present = "url", conflicts_with = "url")]
    pub id: Option<String>,
    /// The quantisation (default: the catalog's first, Q4_K_M for the AFM models).
    #[arg(long, value_name = "QUANT")]
    pub quant: Option<String>,
    /// Download this URL instead of a catalog model.
    #[arg(long)]
    pub url: Option<String>,
    /// The installed file name (with --url; default: the URL's last path segment).
    #[arg(long, requires = "url")]
    pub name: Option<String>,
    /// The expected sha256 (needed when neither the catalog nor the server gives one).
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Parallel connections.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub connections: usize,
    /// Hub base URL (a mirror); default: CATENA_MODEL_BASE_URL, the `mirror` setting, the hub.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Seconds without data before a connection is dropped and retried.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub stall_timeout: f64,
    /// Failed attempts per connection before giving up.
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub retries: u32,
    /// Threads for quantising a checkpoint (default: all cores).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Progress as JSON lines on stdout instead of a bar.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ImportArgs {
    /// A Hugging Face checkpoint folder: config.json, tokenizer.json, tokenizer_config.json and
    /// model.safetensors (or shards with model.safetensors.index.json). Qwen2, Qwen3 and Llama.
    pub dir: PathBuf,
    /// Q4_K_M, Q5_K_M, Q8_0, or F16 for no quantisation.
    #[arg(long, value_name = "QUANT", default_value = "Q4_K_M")]
    pub quant: String,
    /// The installed model's name (default: the folder's name); the file is NAME-QUANT.gguf.
    #[arg(long)]
    pub name: Option<String>,
    /// The prompt profile `catena run` uses for it without --profile (code, math, web, mhqa,
    /// all-tools).
    #[arg(long)]
    pub profile: Option<String>,
    /// Threads for quantising (default: all cores).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Progress as JSON lines on stdout instead of bars.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ImportAdapterArgs {
    /// A PEFT LoRA adapter folder (TRL, verl, PEFT): adapter_config.json and
    /// adapter_model.safetensors.
    pub dir: PathBuf,
    /// The Qwen2 base model it was trained on: an installed model's name, a catalog id or a GGUF
    /// path.
    #[arg(long)]
    pub base: String,
    /// The adapter's name; it goes to `<data dir>/adapters/NAME/adapter.gguf` (default: the
    /// folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Store the factors as 16-bit floats (half the size) instead of 32-bit.
    #[arg(long)]
    pub f16: bool,
}

pub fn run(args: ModelsArgs, paths: &Paths) -> Result<ExitCode> {
    match args.command {
        ModelsCommand::List { json } => list(paths, json),
        ModelsCommand::Pull(args) => pull(args, paths),
        ModelsCommand::Import(args) => import(args, paths),
        ModelsCommand::ImportAdapter(args) => import_adapter(args, paths),
        ModelsCommand::Rm { model } => remove(&model, paths),
        ModelsCommand::Default { model, clear } => default(model, clear, paths),
        ModelsCommand::Mirror { url, clear } => mirror(url, clear, paths),
        ModelsCommand::Inspect { file, json } => inspect(&file, json),
        ModelsCommand::RandomWeights(args) => random_weights(&args),
    }
}

/// A size for the list: `?` when unknown, `~` before an estimate.
fn human_size(bytes: Option<u64>, estimate: bool) -> String {
    match bytes {
        None => "?".into(),
        Some(b) if estimate => format!("~{}", human_bytes(b)),
        Some(b) => human_bytes(b),
    }
}

fn list(paths: &Paths, json: bool) -> Result<ExitCode> {
    let catalog = Catalog::load(paths)?;
    let rows = listing::rows(&catalog, paths);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "  {:<40} {:>10}  {:<8} {:<10} LICENCE",
        "MODEL", "SIZE", "PROFILE", "STATE"
    );
    for row in &rows {
        let state = if row.installed { "installed" } else { "-" };
        println!(
            "{} {:<40} {:>10}  {:<8} {:<10} {}",
            if row.default { "*" } else { " " },
            row.id,
            human_size(row.size, row.size_is_estimate),
            row.profile.as_deref().unwrap_or("-"),
            state,
            row.license.as_deref().unwrap_or("-"),
        );
    }
    println!(
        "\n* the default model; ~ a size estimated from the parameter count. \
         `catena models pull ID[:QUANT]` downloads one."
    );
    Ok(ExitCode::SUCCESS)
}

/// The name an import installs under: `--name`, or the folder's name made a plain file name.
fn import_name(given: Option<&str>, dir: &Path, fallback: &str) -> Result<String> {
    use catena_protocol::names::{is_plain_name, plain_name_from};
    let name = match given {
        Some(name) => name.to_string(),
        None => dir
            .canonicalize()
            .ok()
            .and_then(|d| {
                d.file_name()
                    .and_then(|n| plain_name_from(&n.to_string_lossy()))
            })
            .unwrap_or_else(|| fallback.into()),
    };
    if !is_plain_name(&name) {
        bail!("the name `{name}` must be letters, digits, `-`, `_` and `.`");
    }
    Ok(name)
}

/// `catena models import-adapter DIR --base MODEL`: the PEFT factors, checked against the base
/// model's shapes, written as the GGUF adapter llama.cpp loads, then loaded once with the base to
/// prove it applies.
fn import_adapter(args: ImportAdapterArgs, paths: &Paths) -> Result<ExitCode> {
    let base = installed::resolve(&args.base, paths)?;
    let name = import_name(args.name.as_deref(), &args.dir, "adapter")?;
    let folder = paths.adapters_dir().join(&name);
    let out = folder.join("adapter.gguf");
    // A folder of that name (a training run's, another import's) is never written into, so a
    // failed import can remove what it made without touching anything else.
    if folder.exists() {
        bail!(
            "the name `{name}` is taken: {} exists (choose another with --name)",
            folder.display()
        );
    }
    std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    let precision = if args.f16 {
        catena_trainer::export::FactorPrecision::F16
    } else {
        catena_trainer::export::FactorPrecision::F32
    };
    let written = catena_trainer::export::peft_to_gguf(&args.dir, &base, &out, precision);
    let checked = written.map_err(anyhow::Error::new).and_then(|factors| {
        let options = LoadOptions {
            gpu_layers: Some(0),
            adapter: Some(AdapterOptions {
                path: out.clone(),
                scale: 1.0,
            }),
            prompt_cache: None,
        };
        LlamaEngine::load(&base, &options)
            .map(|_| factors)
            .map_err(|e| anyhow::Error::new(e).context("llama.cpp does not accept the adapter"))
    });
    match checked {
        Ok(factors) => {
            eprintln!(
                "Imported {factors} LoRA factors. Use it: catena run --model {} --adapter {} \"...\"",
                args.base,
                out.display()
            );
            println!("{}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            // Nothing half-made is left where runs look for adapters.
            if let Err(remove) = std::fs::remove_dir_all(&folder) {
                eprintln!("warning: could not remove {}: {remove}", folder.display());
            }
            Err(e.context(format!("{} cannot be imported", args.dir.display())))
        }
    }
}

/// `catena models import DIR`: checks the checkpoint, converts it to F16 (one tensor at a time),
/// quantises it with llama.cpp's quantiser, installs the result (catena-import does the work).
fn import(args: ImportArgs, paths: &Paths) -> Result<ExitCode> {
    let Some(quant) = QuantType::parse(&args.quant) else {
        return Err(ImportError::BadQuant(args.quant).into());
    };
    if let Some(profile) = &args.profile {
        catena_protocol::Profile::builtin(profile)?;
    }
    let request = FolderImport {
        name: import_name(args.name.as_deref(), &args.dir, "model")?,
        dir: args.dir.clone(),
        quant,
        profile: args.profile.clone(),
        threads: args.threads.unwrap_or(0),
    };
    eprintln!(
        "Importing {} as {}-{}.gguf",
        args.dir.display(),
        request.name,
        quant.name()
    );
    let quantizer = quantizer()?;
    let (events, bars) = stage_events(args.json);
    let result = catena_import::import_folder(paths, &request, &quantizer, &events);
    bars.finish();
    let installed = result.with_context(|| format!("{} cannot be imported", args.dir.display()))?;
    finished(&installed, args.json);
    Ok(ExitCode::SUCCESS)
}

/// The child llama.cpp's quantiser runs in: this binary's `worker`. An abort there (a checkpoint
/// with numbers llama.cpp asserts on) becomes an error here, and the import removes its files.
fn quantizer() -> Result<WorkerCommand> {
    WorkerCommand::current_exe(0).context("cannot find this program to run the quantiser")
}

/// The last words of an import or a pull: how to use the model, and its path on stdout.
fn finished(installed: &Path, json: bool) {
    let file = installed
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    eprintln!("Installed {file}. Use it: catena run --model {file} \"...\"");
    if !json {
        // With --json the `done` event carries the path.
        println!("{}", installed.display());
    }
}

/// The bar of the stage running: the bar, the stage's name, when it began.
type StageBar = (ProgressBar, &'static str, std::time::Instant);

/// One bar per stage of an import, on stderr: a finished stage's bar stays with its time.
#[derive(Clone, Default)]
struct StageBars {
    current: Arc<parking_lot::Mutex<Option<StageBar>>>,
}

impl StageBars {
    fn start(&self, stage: Stage, total: Option<u64>, done: u64, detail: &str) {
        self.finish();
        let bar = match total {
            Some(total) => ProgressBar::new(total),
            None => ProgressBar::new_spinner(),
        };
        let name = match stage {
            Stage::Download => "download",
            Stage::Convert => "convert",
            Stage::Quantize => "quantise",
        };
        let template = format!(
            "{name:<9} [{{bar:30}}] {{bytes}}/{{total_bytes}} {{bytes_per_sec}} ETA {{eta}}  {{msg}}"
        );
        bar.set_style(
            ProgressStyle::with_template(&template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_position(done);
        bar.reset_eta();
        if bar.is_hidden() {
            eprintln!("{detail}");
        } else {
            bar.println(detail);
        }
        *self.current.lock() = Some((bar, name, std::time::Instant::now()));
    }

    fn progress(&self, done: u64, total: Option<u64>) {
        if let Some((bar, _, _)) = &*self.current.lock() {
            if let Some(total) = total {
                bar.set_length(total);
            }
            bar.set_position(done);
        }
    }

    fn note(&self, text: &str) {
        match &*self.current.lock() {
            Some((bar, _, _)) if !bar.is_hidden() => bar.println(text),
            _ => eprintln!("{text}"),
        }
    }

    fn finish(&self) {
        if let Some((bar, name, started)) = self.current.lock().take() {
            let took = format!("done in {:.0} s", started.elapsed().as_secs_f64());
            if bar.is_hidden() {
                eprintln!("{name}: {took}");
            }
            bar.finish_with_message(took);
        }
    }
}

/// Where an import's events go: JSON lines on stdout, or [`StageBars`].
fn stage_events(json: bool) -> (ImportSink, StageBars) {
    let bars = StageBars::default();
    if json {
        let sink: ImportSink = Arc::new(|event: ImportEvent| {
            if let Ok(line) = serde_json::to_string(&event) {
                println!("{line}");
            }
        });
        return (sink, bars);
    }
    let shown = bars.clone();
    let sink: ImportSink = Arc::new(move |event: ImportEvent| match event {
        ImportEvent::Stage {
            stage,
            total,
            done,
            detail,
        } => shown.start(stage, total, done, &detail),
        ImportEvent::Progress { done, total, .. } => shown.progress(done, total),
        ImportEvent::Note { text } => shown.note(&text),
        ImportEvent::Done { .. } => shown.finish(),
    });
    (sink, bars)
}

/// `catena models pull` of a checkpoint: fetch, convert, quantise, install.
fn pull_checkpoint(
    args: &PullArgs,
    paths: &Paths,
    plan: CheckpointPlan,
    note: Option<String>,
) -> Result<ExitCode> {
    eprintln!(
        "{} is published as a Hugging Face checkpoint: fetching {} ({}) from {}, then \
         converting and quantising it to {} here. Licence: {}.",
        plan.id, plan.repo, plan.revision, plan.base_url, plan.quant, plan.license
    );
    if let Some(note) = note {
        eprintln!("Note: {note}");
    }
    let request = CheckpointPull::from_plan(plan)?;
    let options = PullOptions {
        download: download_options(args)?,
        threads: args.threads.unwrap_or(0),
        quantizer: quantizer()?,
    };
    let (events, bars) = stage_events(args.json);
    let result = catena_import::pull_checkpoint(paths, &request, &options, &events);
    bars.finish();
    let installed = result.with_context(|| {
        format!(
            "{} was not installed; run the same command again to go on from what is kept in {}",
            request.id,
            catena_import::staging_dir(paths, &request.id).display()
        )
    })?;
    finished(&installed, args.json);
    Ok(ExitCode::SUCCESS)
}

fn download_options(args: &PullArgs) -> Result<DownloadOptions> {
    let Some(stall_timeout) = catena_protocol::units::positive_seconds(args.stall_timeout) else {
        bail!("--stall-timeout must be a positive number of seconds");
    };
    Ok(DownloadOptions {
        connections: args.connections.clamp(1, 32),
        stall_timeout,
        retries: args.retries,
        ..DownloadOptions::default()
    })
}

fn pull(args: PullArgs, paths: &Paths) -> Result<ExitCode> {
    let request = match (&args.id, &args.url) {
        (Some(reference), _) => {
            let (plan, note) = pull::plan(
                paths,
                reference,
                args.quant.as_deref(),
                args.sha256.as_deref(),
                args.base_url.as_deref(),
            )?;
            match plan {
                PullPlan::Registry(asset) => {
                    let path = assets::ensure(asset, paths, &mut setup::asset_progress)
                        .with_context(|| format!("{reference} is not available"))?;
                    println!("{}", path.display());
                    return Ok(ExitCode::SUCCESS);
                }
                PullPlan::Installed(path) => {
                    eprintln!("Already installed and verified.");
                    println!("{}", path.display());
                    return Ok(ExitCode::SUCCESS);
                }
                PullPlan::Download(request) => {
                    if let Some(note) = note {
                        eprintln!("Note: {note}");
                    }
                    request
                }
                PullPlan::Checkpoint(plan) => return pull_checkpoint(&args, paths, plan, note),
            }
        }
        (None, Some(url)) => {
            let file_name = match &args.name {
                Some(name) => name.clone(),
                None => download::file_name_from_url(url)
                    .with_context(|| format!("cannot name a file after {url}; pass --name NAME"))?,
            };
            let target = paths.models_dir().join(&file_name);
            if let Some(record) = installed::record_of(&target) {
                let same = args
                    .sha256
                    .as_deref()
                    .is_none_or(|sha| sha.eq_ignore_ascii_case(&record.sha256));
                if same {
                    eprintln!("Already installed and verified.");
                    println!("{}", target.display());
                    return Ok(ExitCode::SUCCESS);
                }
            }
            DownloadRequest {
                url: url.clone(),
                file_name,
                sha256: args.sha256.clone(),
                digest_source: DigestSource::User,
                catalog_id: None,
                quant: None,
            }
        }
        (None, None) => bail!("name a catalog model or pass --url"),
    };

    let options = download_options(&args)?;
    let (events, bar) = if args.json {
        (json_events(), None)
    } else {
        let (sink, bar) = bar_events();
        (sink, Some(bar))
    };
    let result = download::download_blocking(paths, &request, &options, events);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let model = result?;
    eprintln!(
        "Verified {} (sha256 {}, checked against {}).",
        model.record.file, model.record.sha256, model.record.digest_source
    );
    // The bytes are the ones published; say now if they are not a model this build can run.
    match catena_gguf::inspect::inspect_file(&model.path) {
        Ok(report) if report.usable() => {}
        Ok(report) => eprintln!(
            "warning: {} downloaded intact, but the bundled llama.cpp cannot run it: {}",
            model.record.file,
            report.problems.join("; ")
        ),
        Err(e) => eprintln!(
            "warning: {} downloaded intact, but it is not a readable GGUF model: {e}",
            model.record.file
        ),
    }
    if !args.json {
        // With --json the `done` event carries the path.
        println!("{}", model.path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn json_events() -> EventSink {
    Arc::new(|event: DownloadEvent| {
        if let Ok(line) = serde_json::to_string(&event) {
            println!("{line}");
        }
    })
}

/// An indicatif bar on stderr (bytes, speed, ETA); messages about retries above it.
fn bar_events() -> (EventSink, ProgressBar) {
    let bar = ProgressBar::hidden();
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    let sink_bar = bar.clone();
    // A hidden bar (stderr is not a terminal) prints nothing: say things plainly then.
    let say = {
        let bar = bar.clone();
        move |line: String| {
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
        }
    };
    let sink: EventSink = Arc::new(move |event: DownloadEvent| match event {
        DownloadEvent::Started {
            url,
            file,
            total,
            resumed_from,
            connections,
        } => {
            sink_bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            if let Some(total) = total {
                sink_bar.set_length(total);
            }
            sink_bar.set_position(resumed_from);
            sink_bar.reset_eta();
            sink_bar.set_message(file.clone());
            let resumed = if resumed_from > 0 {
                format!(", resuming at {} MiB", resumed_from >> 20)
            } else {
                String::new()
            };
            say(format!(
                "Downloading {file} from {url} ({connections} connection{}{resumed})",
                if connections == 1 { "" } else { "s" }
            ));
        }
        DownloadEvent::Bytes { done, .. } => sink_bar.set_position(done),
        DownloadEvent::Retrying {
            attempt,
            max,
            cause,
            wait_ms,
        } => say(format!(
            "Retrying ({attempt}/{max}) in {:.1} s: {cause}",
            wait_ms as f64 / 1000.0
        )),
        DownloadEvent::Restarting { reason } => say(format!("Starting over: {reason}")),
        DownloadEvent::Verifying { .. } => sink_bar.set_message("verifying sha256"),
        DownloadEvent::Done { .. } => {}
    });
    (sink, bar)
}

/// Removes the partial download of `file`, if any (not while another process downloads it).
fn remove_partial(paths: &Paths, file: &str) -> Result<bool> {
    let (part, state, lock) = download::partial_paths(&paths.models_dir(), file);
    if let Ok(handle) = std::fs::File::open(&lock)
        && handle.try_lock().is_err()
    {
        bail!("{file} is being downloaded right now; stop that first");
    }
    let mut removed = false;
    for path in [part, state, lock] {
        match std::fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
    }
    Ok(removed)
}

fn remove(reference: &str, paths: &Paths) -> Result<ExitCode> {
    let catalog = Catalog::load(paths)?;
    let (id, quant) = installed::split_reference(reference);
    let files: Vec<String> = match catalog.get(id) {
        Some(entry) => match quant {
            Some(q) => vec![entry.file(Some(q))?.file.clone()],
            None => entry.files.iter().map(|f| f.file.clone()).collect(),
        },
        None if catena_protocol::names::is_file_name(reference) => vec![reference.to_string()],
        None => bail!("`{reference}` is neither a catalog id nor a model file name"),
    };
    let mut removed = 0;
    // The work folder of an unfinished checkpoint pull (downloaded shards, an F16 file).
    if catalog.get(id).is_some() {
        let staging = catena_import::staging_dir(paths, id);
        if staging.is_dir() {
            if staging.join(".lock").is_file()
                && std::fs::File::open(staging.join(".lock"))
                    .is_ok_and(|lock| lock.try_lock().is_err())
            {
                bail!("{id} is being pulled right now; stop that first");
            }
            std::fs::remove_dir_all(&staging)
                .with_context(|| format!("removing {}", staging.display()))?;
            eprintln!(
                "Removed the unfinished pull of {id} ({})",
                staging.display()
            );
            removed += 1;
        }
    }
    for file in &files {
        let partial = remove_partial(paths, file)?;
        let gone = installed::remove_file(paths, file)?;
        for path in &gone {
            eprintln!("Removed {}", path.display());
        }
        if partial {
            eprintln!("Removed the partial download of {file}");
        }
        removed += gone.len() + usize::from(partial);
    }
    if removed == 0 {
        bail!("`{reference}` is not installed (see `catena models list`)");
    }
    Ok(ExitCode::SUCCESS)
}

fn default(model: Option<String>, clear: bool, paths: &Paths) -> Result<ExitCode> {
    let mut settings = settings::settings(paths)?;
    if clear {
        settings.default = None;
        settings::save_settings(paths, &settings)?;
        eprintln!("The default model is the built-in one again.");
        return Ok(ExitCode::SUCCESS);
    }
    let Some(reference) = model else {
        match installed::chosen_default(paths) {
            Ok(Some(path)) => println!("{}", path.display()),
            Ok(None) => println!(
                "{} (built-in)",
                assets::installed_path(
                    &assets::DEFAULT_MODEL,
                    &assets::DEFAULT_MODEL.files[0],
                    paths
                )
                .display()
            ),
            Err(e) => bail!("the chosen default model is unusable: {e}"),
        }
        return Ok(ExitCode::SUCCESS);
    };
    let path = installed::resolve(&reference, paths).with_context(|| {
        format!("cannot make `{reference}` the default; `catena models pull` it first")
    })?;
    // Catalog ids and downloaded names stay names (so re-downloads keep working); other files
    // are stored by absolute path.
    let stored =
        if Path::new(&reference).is_file() && !paths.models_dir().join(&reference).is_file() {
            path.display().to_string()
        } else {
            reference
        };
    settings.default = Some(stored);
    settings::save_settings(paths, &settings)?;
    eprintln!("Default model: {}", path.display());
    Ok(ExitCode::SUCCESS)
}

fn mirror(url: Option<String>, clear: bool, paths: &Paths) -> Result<ExitCode> {
    let mut settings: ModelSettings = settings::settings(paths)?;
    if clear {
        settings.mirror = None;
    } else if let Some(url) = url {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            bail!("{url} is not an http(s) URL");
        }
        settings.mirror = Some(url);
    } else {
        let catalog = Catalog::load(paths)?;
        println!(
            "{}",
            catalog::effective_base_url(None, settings.mirror.as_deref(), &catalog)
        );
        return Ok(ExitCode::SUCCESS);
    }
    settings::save_settings(paths, &settings)?;
    Ok(ExitCode::SUCCESS)
}

fn inspect(file: &Path, json: bool) -> Result<ExitCode> {
    let inspection = catena_gguf::inspect::inspect_file(file)
        .with_context(|| format!("cannot inspect {}", file.display()))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&inspection)?);
    } else {
        println!("{inspection}");
    }
    // Problems are printed above; the status lets scripts refuse the file.
    Ok(if inspection.usable() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn random_weights(args: &RandomWeightsArgs) -> Result<ExitCode> {
    use catena_convert::random_weights::{write_header, write_random_weights};
    let (what, bytes) = if args.header_only {
        ("the header of", write_header(&args.like, &args.out)?)
    } else {
        (
            "random weights shaped like",
            write_random_weights(&args.like, &args.out, args.seed)?,
        )
    };
    eprintln!(
        "Wrote {} ({}): {what} {}.",
        args.out.display(),
        human_bytes(bytes),
        args.like.display()
    );
    Ok(ExitCode::SUCCESS)
}

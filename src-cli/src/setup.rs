//! What every command needs: logging, paths, the model and the sandbox, and error reporting.

use anyhow::{Context, Result};
use catena_engine::llama::{AdapterOptions, LlamaEngine, LoadOptions};
use catena_engine_api::SamplingParams;
use catena_engine_api::plan::Plan;
use catena_hub::assets::{self, AssetProgress};
use catena_hub::config::Paths;
use catena_sandbox::{Limits, RuntimeSpec, Sandbox};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

/// Logs go to stderr; `RUST_LOG` overrides the level chosen with `-v`.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn,llama.cpp=error",
        1 => "info,llama.cpp=warn",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only for a terminal, as the error report decides them: a log read from a pipe or a
    // file gets plain text, `NO_COLOR` turns them off, and `CLICOLOR_FORCE` on (a model worker's
    // log, relayed by its parent to a terminal).
    let colours = anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(std::io::stderr)
        .with_target(true)
        // A log line that cannot be written (stderr on a full disk, a closed pipe or terminal)
        // is dropped. By default the subscriber reports that with `eprintln!`, which panics when
        // stderr cannot be written: the thread that logged died, and with it a served run,
        // whose followers then waited for ever.
        .log_internal_errors(false)
        .try_init();
}

pub fn paths(
    data_dir: Option<&Path>,
    cache_dir: Option<&Path>,
    store_dir: Option<&Path>,
) -> Result<Paths> {
    let mut paths = Paths::from_env()?;
    if let Some(dir) = data_dir {
        paths.data_dir = dir.to_path_buf();
        paths.store_dir = dir.to_path_buf();
    }
    if let Some(dir) = cache_dir {
        paths.cache_dir = dir.to_path_buf();
    }
    if let Some(dir) = store_dir {
        paths.store_dir = dir.to_path_buf();
    }
    Ok(paths)
}

/// `sampling` as given on the command line, or the error naming the flag out of range (the same
/// bounds as the server's, `SamplingParams::out_of_range`).
pub fn checked_sampling(sampling: SamplingParams) -> Result<SamplingParams> {
    match sampling.out_of_range() {
        Some((field, why)) => anyhow::bail!("--{}: {why}", field.replace('_', "-")),
        None => Ok(sampling),
    }
}

/// Prints an error and its causes on stderr; exit status 1.
pub fn report(error: &anyhow::Error) -> ExitCode {
    let mut err = anstream::stderr();
    let red = anstyle::Style::new()
        .bold()
        .fg_color(Some(anstyle::AnsiColor::Red.into()));
    let _ = write!(err, "{red}error{red:#}: {error}");
    for cause in causes_to_show(error) {
        let _ = write!(err, "\n  caused by: {cause}");
    }
    let _ = writeln!(err);
    ExitCode::FAILURE
}

/// An error's causes that say something its message has not: many errors of the libraries
/// carry their cause's text in their own ("the session store: disk I/O error"), and a line
/// repeating it is noise.
fn causes_to_show(error: &anyhow::Error) -> Vec<String> {
    let mut said = error.to_string();
    let mut causes = Vec::new();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !said.contains(&text) {
            causes.push(text.clone());
            said = text;
        }
    }
    causes
}

/// Progress of asset fetching, on stderr.
pub fn asset_progress(event: AssetProgress) {
    match event {
        AssetProgress::Fetching { asset, megabytes } => {
            eprintln!("Fetching {asset} ({megabytes} MB, once; afterwards Catena works offline)...")
        }
        AssetProgress::Installed { path } => eprintln!("Installed {}", path.display()),
    }
}

/// The model to run: the given file (or installed model, `catena models list`), else the one
/// chosen with `catena models default`, else the built-in default model (fetched on first use).
pub fn model_path(model: Option<&Path>, paths: &Paths) -> Result<std::path::PathBuf> {
    use catena_hub::installed;
    match model {
        Some(path) if !path.exists() => match path.to_str() {
            // Not a file: perhaps a catalog id or a downloaded model's name.
            Some(reference) => installed::resolve(reference, paths).or(Ok(path.to_path_buf())),
            None => Ok(path.to_path_buf()),
        },
        Some(path) => Ok(path.to_path_buf()),
        None => match installed::chosen_default(paths) {
            Ok(Some(path)) => Ok(path),
            Ok(None) => assets::default_model(paths, &mut asset_progress)
                .context("the default model is not available"),
            Err(e) => Err(anyhow::Error::new(e).context(
                "the model chosen with `catena models default` is unusable \
                 (choose another, or `catena models default --clear`)",
            )),
        },
    }
}

/// Whether `model` (the `--model` flag) leaves the choice to the built-in default: no flag and
/// no model chosen with `catena models default`.
pub fn uses_builtin_default(model: Option<&Path>, paths: &Paths) -> bool {
    model.is_none() && matches!(catena_hub::installed::chosen_default(paths), Ok(None))
}

/// What a user on the built-in default should know: it is a small stand-in (with or without the
/// adapter Catena ships for it), which AFM this machine could run instead, and where getting
/// that AFM stands.
pub fn stand_in_note(paths: &Paths, adapted: bool) -> String {
    use catena_gguf::inspect::human_bytes;
    use catena_hub::catalog::Catalog;
    let mut note = String::from(if adapted {
        "The default model, Qwen2.5-Coder-0.5B-Instruct with Catena's adapter, is a small \
         stand-in: the adapter trains it toward the Chain-of-Agents protocol, but a model of \
         0.5B parameters still often answers wrong."
    } else {
        "The default model, Qwen2.5-Coder-0.5B-Instruct, is a small stand-in: it was never \
         trained on the Chain-of-Agents protocol and often answers wrong."
    });
    // What fits the GPU's free memory runs at the GPU's speed, whatever its size; otherwise, on
    // the CPU (or split with a small GPU), nothing above 8B parameters, which fit in memory long
    // before they run at a usable speed.
    let machine = catena_engine::hardware::probe().ok();
    let memory = machine
        .as_ref()
        .map(|h| h.gpu_free().unwrap_or(0).max(h.ram_available));
    let fits = match (Catalog::load(paths), machine.as_ref()) {
        (Ok(catalog), Some(machine)) => machine
            .gpu_free()
            .and_then(|gpu| catalog.agent_that_fits("code", gpu, u64::MAX))
            .or_else(|| catalog.agent_that_fits("code", machine.ram_available, 8_000_000_000))
            .map(|(entry, file)| {
                (
                    entry.name.clone(),
                    entry.id.clone(),
                    file.quant.clone(),
                    file.size(),
                )
            }),
        _ => None,
    };
    match fits {
        Some((name, id, quant, size)) => note.push_str(&format!(
            " The agent model that fits this machine is {name} ({quant}, about {}). Its \
             publishers release it as safetensors only: `catena models pull {id}` fetches the \
             checkpoint from the model hub and converts and quantises it here (tried against a \
             hub on loopback, not the public one), and `catena models import FOLDER --quant \
             {quant}` does the same from a checkpoint folder you have.",
            size.map(human_bytes)
                .unwrap_or_else(|| "size unknown".into()),
        )),
        None => match memory {
            Some(memory) => note.push_str(&format!(
                " No agent model (AFM) of the catalog fits this machine's free memory ({}).",
                human_bytes(memory)
            )),
            None => note.push_str(" (Which agent model fits this machine could not be told.)"),
        },
    }
    note
}

/// The placement plan for a model on this machine (the user's choices kept); `None`, with a
/// warning, when the file cannot be sized (loading then explains what is wrong with it).
pub fn plan(path: &Path, overrides: catena_engine_api::plan::Overrides) -> Option<Plan> {
    match catena_engine::hardware::plan_for_model(path, overrides) {
        Ok(plan) => {
            for reason in &plan.reasons {
                tracing::info!("plan: {reason}");
            }
            for problem in &plan.problems {
                tracing::warn!("{problem}");
            }
            Some(plan)
        }
        Err(e) => {
            tracing::debug!(error = %e, "no placement plan");
            None
        }
    }
}

/// Loads a model with no prompt cache (`catena bench` measures every prompt it evaluates).
pub fn load_model(
    path: &Path,
    gpu_layers: Option<u32>,
    adapter: Option<AdapterOptions>,
) -> Result<LlamaEngine> {
    Ok(LlamaEngine::load(
        path,
        &LoadOptions {
            gpu_layers,
            adapter,
            prompt_cache: None,
        },
    )?)
}

/// Plans the placement of a model on this machine (keeping the user's choices) and loads it
/// that way, with an adapter if one is given and the prompt cache of `paths`.
pub fn load_planned(
    path: &Path,
    overrides: catena_engine_api::plan::Overrides,
    adapter: Option<AdapterOptions>,
    paths: &Paths,
) -> Result<(LlamaEngine, Option<Plan>)> {
    let asked_layers = overrides.gpu_layers;
    let plan = plan(path, overrides);
    let gpu_layers = plan.as_ref().map(|p| p.gpu_layers).or(asked_layers);
    let engine = LlamaEngine::load(
        path,
        &LoadOptions {
            gpu_layers,
            adapter,
            prompt_cache: paths.prompt_cache_dir(),
        },
    )?;
    Ok((engine, plan))
}

/// The settings of a session on a model loaded with [`load_planned`]: the plan's context and KV
/// cache type where there is a plan, else `context` and the default cache.
pub fn planned_session(
    plan: Option<&Plan>,
    context: Option<u32>,
    sampling: catena_engine_api::SamplingParams,
) -> catena_engine_api::SessionOptions {
    catena_engine_api::SessionOptions {
        context_size: plan.map(|p| p.context).or(context),
        sampling,
        kv_cache: plan.map_or(catena_engine_api::KvCacheType::default(), |p| p.kv_cache),
        ..catena_engine_api::SessionOptions::default()
    }
}

/// The name a loaded model gives itself, else its file's path.
pub fn model_name(engine: &LlamaEngine, path: &Path) -> String {
    engine
        .info()
        .name
        .clone()
        .unwrap_or_else(|| path.display().to_string())
}

/// A LoRA adapter on the command line: `--adapter PATH [--adapter-scale S]`.
#[derive(clap::Args, Debug, Clone)]
pub struct AdapterArgs {
    /// A LoRA adapter (GGUF, e.g. the `adapter.gguf` that `catena train sft` writes) to apply
    /// on top of the model.
    #[arg(long, value_name = "PATH")]
    pub adapter: Option<std::path::PathBuf>,

    /// How strongly to apply the adapter (1: as trained; 0: not at all).
    #[arg(long, value_name = "S", default_value_t = 1.0, requires = "adapter")]
    pub adapter_scale: f32,
}

impl AdapterArgs {
    pub fn options(&self) -> Option<AdapterOptions> {
        self.adapter.as_ref().map(|path| AdapterOptions {
            path: path.clone(),
            scale: self.adapter_scale,
        })
    }
}

/// The adapter of a run or an evaluation: the one named with `--adapter`, else the one Catena
/// ships for the model (the default model's), unless `--no-adapter`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunAdapterArgs {
    #[command(flatten)]
    pub chosen: AdapterArgs,

    /// Run the default model as published, without the adapter Catena ships for it.
    #[arg(long, conflicts_with = "adapter")]
    pub no_adapter: bool,
}

/// An adapter a run applies, with the name it is recorded under.
pub struct AppliedAdapter {
    pub options: AdapterOptions,
    pub name: String,
    /// Whether it is the adapter Catena ships (rather than one named with `--adapter`).
    pub shipped: bool,
}

impl RunAdapterArgs {
    /// The adapter to apply on the model at `model`, writing the shipped one out on first use.
    pub fn resolve(&self, model: &Path, paths: &Paths) -> Result<Option<AppliedAdapter>> {
        if let Some(options) = self.chosen.options() {
            let name = options.path.display().to_string();
            return Ok(Some(AppliedAdapter {
                options,
                name,
                shipped: false,
            }));
        }
        if self.no_adapter {
            return Ok(None);
        }
        let Some(shipped) = catena_hub::assets::adapter_for_model(model, paths) else {
            return Ok(None);
        };
        let path = shipped
            .ensure(paths)
            .with_context(|| format!("cannot write out the adapter {}", shipped.name))?;
        eprintln!(
            "adapter: {} (Catena's, for the default model; --no-adapter runs the model without it)",
            shipped.name
        );
        Ok(Some(AppliedAdapter {
            options: AdapterOptions { path, scale: 1.0 },
            name: shipped.name.to_string(),
            shipped: true,
        }))
    }
}

/// The search tools on the command line: the wiki index, the web search backend, the document
/// index and what the page reader may open. Keys are never options (argv is visible to every
/// user of the machine): they come from the environment or the settings file.
#[derive(clap::Args, Debug, Clone)]
pub struct SearchArgs {
    /// The passage index `<wiki_search>` reads (`catena index list`; default: the only one).
    #[arg(long, value_name = "NAME")]
    pub wiki_index: Option<String>,

    /// The `<web_search>` backend: `local` (the default: a document index built with `catena
    /// index add FOLDER`), `searxng` (CATENA_SEARXNG_URL), `serper` (SERPER_API_KEY), `brave`
    /// (BRAVE_API_KEY) or `tavily` (TAVILY_API_KEY); keys may also be set in the [web] table of
    /// the settings file. The online clients follow each service's published API and were
    /// tested against local stand-ins, not the live services.
    #[arg(long, value_name = "BACKEND")]
    pub search: Option<String>,

    /// The document index local web search and `<crawl_page>` read (default: the only one).
    #[arg(long, value_name = "NAME")]
    pub doc_index: Option<String>,

    /// Let `<crawl_page>` read web pages over the network (always on with an online backend).
    #[arg(long)]
    pub online: bool,

    /// A loopback or private address `<crawl_page>` may open (repeatable; such addresses are
    /// refused otherwise, so a model cannot reach this machine's services).
    #[arg(long = "allow-address", value_name = "IP")]
    pub allow_addresses: Vec<std::net::IpAddr>,
}

impl SearchArgs {
    /// Gives `tools` the search tools `profile` uses and this machine has: `<wiki_search>` over
    /// the passage index, `<web_search>` over the chosen backend, and `<crawl_page>`.
    pub fn add_to(
        &self,
        tools: &mut catena_agent::tools::ToolBox,
        profile: &catena_protocol::Profile,
        paths: &Paths,
    ) -> anyhow::Result<()> {
        catena_agent::tools::add_wiki_search(
            tools,
            profile,
            &paths.indexes_dir(),
            self.wiki_index.as_deref(),
        )?;
        let adjust = |settings: &mut catena_web::WebSettings| {
            if self.doc_index.is_some() {
                settings.index = self.doc_index.clone();
            }
            settings.online |= self.online;
            settings.allowed_addresses.extend(&self.allow_addresses);
        };
        catena_service::add_web_tools(tools, profile, paths, adjust, self.search.as_deref())?;
        Ok(())
    }
}

/// The CPython sandbox, fetched and compiled on first use (saying so, since it takes minutes).
pub fn sandbox(paths: &Paths, limits: Limits) -> Result<Sandbox> {
    let files = assets::python_runtime(paths, &mut asset_progress)
        .context("the Python sandbox runtime is not available")?;
    let spec = RuntimeSpec::cpython(files.wasm, files.sha256, files.stdlib_dir);
    let sandbox = Sandbox::new(spec, limits, &paths.sandbox_cache_dir(), || {
        eprintln!(
            "Preparing the Python sandbox: compiling CPython to machine code (first use only, a few minutes)..."
        )
    })?;
    Ok(sandbox)
}

/// The tools of runs over `tasks` with `profile`, and the sandbox their code tasks are scored
/// in: one sandbox serves the `<code>` tool and the scoring (`catena eval`, `catena distill`).
pub fn task_tools(
    paths: &Paths,
    profile: &catena_protocol::Profile,
    tasks: &[catena_eval::EvalTask],
    search: &SearchArgs,
) -> Result<(
    catena_agent::tools::ToolBox,
    Option<std::sync::Arc<Sandbox>>,
)> {
    use std::sync::Arc;
    let scoring = if tasks
        .iter()
        .any(|t| t.kind == Some(catena_eval::TaskKind::Code))
    {
        Some(Arc::new(sandbox(paths, Limits::default())?))
    } else {
        None
    };
    let mut tools = catena_agent::tools::profile_tools(profile, || match &scoring {
        Some(shared) => Ok(shared.clone()),
        None => sandbox(paths, Limits::default()).map(Arc::new),
    })?;
    search.add_to(&mut tools, profile, paths)?;
    Ok((tools, scoring))
}

/// A chat model at an OpenAI-compatible server (`--engine URL`, `--teacher URL`): the key from
/// `CATENA_ENGINE_KEY`, the model the one named or else the first the server lists. Returns the
/// model's name beside it.
pub fn remote_chat(
    url: &str,
    model: Option<&str>,
    sampling: catena_engine_api::SamplingParams,
) -> Result<(catena_agent::remote::RemoteChat, String)> {
    use catena_agent::remote::RemoteChat;
    use catena_web::ChatEndpoint;
    let key = engine_key();
    let endpoint = |model: &str| {
        ChatEndpoint::new(url, model, key.clone())
            .with_context(|| format!("the model server at {url}"))
    };
    let model = match model {
        Some(model) => model.to_string(),
        None => endpoint("")?
            .models()
            .with_context(|| format!("asking the model server at {url} which models it serves"))?
            .into_iter()
            .next()
            .with_context(|| format!("the model server at {url} lists no models"))?,
    };
    Ok((RemoteChat::new(endpoint(&model)?, sampling), model))
}

/// A Chain-of-Agents session at llama.cpp's server (`--engine URL` with `--mode coa`), the key
/// from `CATENA_ENGINE_KEY`; a run puts its prompt in. `model` names the server's model in the
/// summariser's chat requests ([`served_model`]).
pub fn remote_session(
    url: &str,
    model: &str,
    sampling: catena_engine_api::SamplingParams,
) -> Result<catena_agent::remote::RemoteSession> {
    use catena_agent::remote::RemoteSession;
    use catena_web::ChatEndpoint;
    let context = || format!("the llama.cpp server at {url}");
    let key = engine_key();
    let endpoint = catena_web::CompletionEndpoint::new(url, key.clone()).with_context(context)?;
    let v1 = format!("{}/v1", url.trim_end_matches('/').trim_end_matches("/v1"));
    let chat = ChatEndpoint::new(&v1, model, key).with_context(context)?;
    RemoteSession::connect(endpoint, chat, sampling).with_context(context)
}

/// The name of the model at the llama.cpp server `url`: `model` where the user gave one, else
/// the one the server reports.
pub fn served_model(url: &str, model: Option<&str>) -> Result<String> {
    if let Some(model) = model {
        return Ok(model.to_string());
    }
    let context = || format!("the llama.cpp server at {url}");
    let endpoint = catena_web::CompletionEndpoint::new(url, engine_key()).with_context(context)?;
    Ok(endpoint.props().with_context(context)?.model)
}

/// The remote engine's key, from the environment only.
fn engine_key() -> Option<catena_web::ApiKey> {
    std::env::var(catena_agent::remote::ENGINE_KEY_ENV)
        .ok()
        .and_then(catena_web::ApiKey::new)
}

#[cfg(test)]
mod tests {
    use super::causes_to_show;
    use anyhow::Context;

    /// As the libraries' errors are: the cause's text in the message, and the cause as source.
    #[derive(Debug)]
    struct Lock {
        source: std::io::Error,
    }

    impl std::fmt::Display for Lock {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "the lock folder /x: {}", self.source)
        }
    }

    impl std::error::Error for Lock {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn sampling_out_of_range_names_its_flag() {
        use catena_engine_api::SamplingParams;
        let given = |temperature, top_p| SamplingParams {
            temperature,
            top_p,
            ..SamplingParams::default()
        };
        assert!(super::checked_sampling(given(0.0, 1.0)).is_ok());
        let wrong = super::checked_sampling(given(0.6, 2.0)).unwrap_err();
        assert_eq!(wrong.to_string(), "--top-p: `top_p` must be in (0, 1].");
        let cold = super::checked_sampling(given(-1.0, 0.9)).unwrap_err();
        assert!(cold.to_string().starts_with("--temperature: "), "{cold}");
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = || std::io::Error::other("disk full");
        // The library's message carries its cause's text: one line each, not two.
        let said: anyhow::Result<()> = Err(Lock { source: io() }).context("cannot open the store");
        assert_eq!(
            causes_to_show(&said.unwrap_err()),
            ["the lock folder /x: disk full"]
        );
        // A context over a bare cause keeps it.
        let bare: anyhow::Result<()> = Err(io()).context("cannot open the store");
        assert_eq!(causes_to_show(&bare.unwrap_err()), ["disk full"]);
        // A message that already says everything has no causes to add.
        let whole = anyhow::Error::new(Lock { source: io() });
        assert!(causes_to_show(&whole).is_empty());
    }
}

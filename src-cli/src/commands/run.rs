//! `catena run`: one task, one Chain-of-Agents trajectory.

use super::samples;
use crate::render::{EventSink, HumanPrinter, JsonPrinter};
use crate::setup::{self, AppliedAdapter};
use anyhow::{Context, Result, bail};
use catena_agent::remote::{RemoteChat, RemoteSession};
use catena_agent::tools::profile_tools;
use catena_agent::{Budgets, CutShort, Decoding};
use catena_engine::llama::{LlamaEngine, LlamaSession, LocalChat};
use catena_engine_api::plan::{Overrides, Plan, batched_kv_caches};
use catena_engine_api::{ChatEngine, KvCacheType, SamplingParams, SessionOptions};
use catena_hub::config::Paths;
use catena_protocol::Profile;
use catena_protocol::units::positive_seconds;
use catena_runner::{Engine, RunPlan, TaskRun, Update, run_task};
use catena_sandbox::Limits;
use catena_store::{NewRun, Recorder, RunKind, Store};
use clap::Args;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// How a task is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// One model writes the whole Chain-of-Agents trajectory in one generation.
    #[default]
    Coa,
    /// The explicit multi-agent system: planner, thinker, one agent per tool, reflector,
    /// verifier and answerer, each a separate model call (the distillation teacher's way).
    Mas,
    /// The plain chat: the task's question in one chat turn, no profile, no protocol, no
    /// tools (math questions ask for a boxed answer). The anchor every agent feature must beat.
    Chat,
}

impl Mode {
    /// The name reports and the store use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Coa => "coa",
            Mode::Mas => "mas",
            Mode::Chat => "chat",
        }
    }

    /// How a chat model runs a task in this mode: the explicit agents' calls, or one plain
    /// turn (`--mode chat`).
    pub fn over_chat(self, chat: &mut dyn ChatEngine) -> Engine<'_> {
        match self {
            Mode::Chat => Engine::Plain(chat),
            Mode::Coa | Mode::Mas => Engine::Agents(chat),
        }
    }
}

#[derive(Args)]
pub struct RunArgs {
    /// The task; `-` reads it from stdin.
    pub task: String,

    /// coa: one Chain-of-Agents generation; mas: the explicit multi-agent system, every agent a
    /// separate call with its tokens counted; chat: the model in a plain chat, one turn (the
    /// anchor to compare with).
    #[arg(long, value_enum, default_value_t = Mode::Coa)]
    pub mode: Mode,

    /// Prompt profile: code, math, web, mhqa or all-tools (default: the one the model was made
    /// for, as its catalog entry or import says; math for other models).
    #[arg(long, conflicts_with = "profile_file")]
    pub profile: Option<String>,

    /// A profile file of your own (TOML, like the shipped ones).
    #[arg(long, value_name = "FILE")]
    pub profile_file: Option<PathBuf>,

    /// A GGUF model; default: the default model (fetched on first use).
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,

    /// Print one JSON object per event, one per line, ending with a summary object.
    #[arg(long)]
    pub json: bool,

    /// Text the assistant turn starts with; if it ends with a complete tool call, the tool runs
    /// before the model continues.
    #[arg(long, value_name = "TEXT")]
    pub prefill: Option<String>,

    /// Let the model write freely: do not hold its chain to the protocol's grammar (blocks in
    /// order, one fenced program per <code>, an answer the profile's verifier can read).
    #[arg(long)]
    pub free: bool,

    /// Decode N chains of the task together, each with its own seed (the given one, +1, ...),
    /// and answer with the largest group of equivalent answers (ties: the more likely chains).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub samples: u16,

    /// Most tool calls in the run (default: the profile's budget).
    #[arg(long, value_name = "N")]
    pub max_tool_calls: Option<u32>,

    /// Most tokens the model may generate in the run.
    #[arg(long, value_name = "N", default_value_t = 8192)]
    pub max_tokens: usize,

    /// Most seconds the whole run may take.
    #[arg(long, value_name = "SECONDS")]
    pub max_time: Option<f64>,

    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.6)]
    pub temperature: f32,

    /// Nucleus sampling threshold.
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,

    /// Keep only the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: i32,

    /// Random seed (default: a new one each run, shown in the output).
    #[arg(long)]
    pub seed: Option<u32>,

    #[command(flatten)]
    pub adapter: setup::RunAdapterArgs,

    /// Layers to offload to the GPU (default: as many as fit, see `catena doctor`).
    #[arg(long, value_name = "N")]
    pub gpu_layers: Option<u32>,

    /// Context window in tokens (default: the model's, at most 32768, shortened if memory is short).
    #[arg(long, value_name = "TOKENS")]
    pub ctx_size: Option<u32>,

    /// KV cache type, f16 or q8_0 (default: f16 unless memory is short).
    #[arg(long, value_name = "TYPE")]
    pub kv_cache: Option<KvCacheType>,

    /// CPU threads (default: the physical cores).
    #[arg(long)]
    pub threads: Option<i32>,

    /// Wall-time limit of one sandboxed program, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 7.0)]
    pub code_timeout: f64,

    /// Memory limit of one sandboxed program, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    pub code_memory: u64,

    /// Do not record the run in the session store.
    #[arg(long)]
    pub no_store: bool,

    #[command(flatten)]
    pub search: setup::SearchArgs,

    #[command(flatten)]
    pub mcp: crate::mcp_servers::McpArgs,

    /// Run the model at an OpenAI-compatible server instead of in this process
    /// (`http://HOST:PORT/v1`: llama.cpp's llama-server, vLLM, another `catena serve`, a hosted
    /// API), its key from CATENA_ENGINE_KEY. A Chain-of-Agents run (--mode coa) needs llama.cpp's
    /// llama-server (raw completion over token ids with its prompt cache).
    #[arg(long, value_name = "URL", conflicts_with_all = ["model", "adapter", "no_adapter"])]
    pub engine: Option<String>,

    /// The model at --engine (default: the first the server lists).
    #[arg(long, value_name = "NAME", requires = "engine")]
    pub engine_model: Option<String>,
}

pub fn run(args: RunArgs, paths: &Paths) -> Result<ExitCode> {
    let task = read_task(&args.task)?;
    let checked = Checked::from_args(&args)?;
    let backend = Backend::open(&args, paths, checked.sampling)?;
    let profile = match checked.profile {
        Some(profile) => profile,
        None => backend.profile(paths)?,
    };
    let limits = Limits {
        wall: checked.code_timeout,
        memory_bytes: args.code_memory << 20,
        ..Limits::default()
    };
    let mut tools = profile_tools(&profile, || setup::sandbox(paths, limits).map(Arc::new))?;
    args.search.add_to(&mut tools, &profile, paths)?;
    let profile = add_external_tools(&args, paths, profile, &mut tools)?;
    let cancel = cancel_on_ctrl_c();
    let plan = RunPlan {
        profile: &profile,
        tools: &tools,
        model: backend.model_name(),
        budgets: Budgets {
            max_tool_calls: args.max_tool_calls.unwrap_or(profile.max_tool_calls),
            max_tokens: args.max_tokens,
            max_time: checked.max_time,
        },
        cancel: Some(cancel),
        decoding: backend.decoding(args.free),
        cut_short: CutShort::Answer,
    };
    let run = TaskRun {
        id: "task",
        question: &task,
        sampling: checked.sampling,
        prefill: args.prefill.as_deref(),
    };
    let mut printer: Box<dyn EventSink> = if args.json {
        Box::new(JsonPrinter::new())
    } else {
        Box::new(HumanPrinter::new())
    };
    let store = open_store(&args, paths);
    if args.samples > 1 {
        let chains = Chains {
            args: &args,
            backend: &backend,
            plan: &plan,
            store: store.as_ref(),
        };
        return chains.run_and_vote(&run, checked.sampling, paths, limits);
    }
    let mut recorder = store
        .as_ref()
        .and_then(|store| open_record(store, &args, backend.adapter_name(), &plan, &run));
    let mut backend = backend;
    let mut show = |update: Update<'_>| {
        if let Update::Event(event, _) = update {
            printer.event(event);
        }
    };
    let outcome = {
        let mut local;
        let engine = match (&mut backend, args.mode) {
            (Backend::Local { engine, plan, .. }, mode) => {
                let options = SessionOptions {
                    threads: args.threads,
                    ..setup::planned_session(plan.as_ref(), args.ctx_size, checked.sampling)
                };
                local = match mode {
                    Mode::Coa => LocalModel::Chain(engine.session(&options)?),
                    Mode::Mas | Mode::Chat => LocalModel::Chat(LocalChat::new(engine, &options)?),
                };
                local.engine(mode)
            }
            (Backend::LlamaServer { session, .. }, _) => Engine::Chain(session),
            (Backend::Chat { chat, .. }, mode) => mode.over_chat(chat),
        };
        run_task(engine, &plan, &run, recorder.as_mut(), &mut show).context("the run failed")?
    };
    if let Some(problem) = recorder.as_ref().and_then(|r| r.failure()) {
        eprintln!("warning: the run was not saved completely: {problem}");
    }
    match &outcome.agents {
        None => printer.summary(&outcome.summary),
        Some(mas) => printer.multi_agent_summary(
            &outcome.summary,
            &mas.usage,
            &catena_distill::tokens_by_role(&mas.run.activations),
        ),
    }
    if !args.json {
        print_notes(&backend, recorder.as_ref(), paths);
    }
    Ok(ExitCode::SUCCESS)
}

/// A flag the first Ctrl-C sets, so the run stops cleanly (the summary is still printed); a
/// second Ctrl-C exits.
fn cancel_on_ctrl_c() -> Arc<AtomicBool> {
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
    });
    cancel
}

/// `--samples N`: what the chains of one task share.
struct Chains<'a> {
    args: &'a RunArgs,
    backend: &'a Backend,
    plan: &'a RunPlan<'a>,
    store: Option<&'a Store>,
}

impl Chains<'_> {
    /// Runs the chains together, each saved as a run of its own, and prints them and the vote.
    fn run_and_vote(
        &self,
        run: &TaskRun<'_>,
        sampling: SamplingParams,
        paths: &Paths,
        limits: Limits,
    ) -> Result<ExitCode> {
        let Backend::Local {
            engine,
            plan: memory,
            ..
        } = self.backend
        else {
            bail!("--samples decodes its chains together in this process: it cannot use --engine");
        };
        let args = self.args;
        let options = SessionOptions {
            threads: args.threads,
            ..setup::planned_session(memory.as_ref(), args.ctx_size, sampling)
        };
        let adapter = self.backend.adapter_name();
        let record = |run: &TaskRun<'_>| open_record(self.store?, args, adapter, self.plan, run);
        let samples = usize::from(args.samples);
        let chains = samples::run_samples(
            engine,
            &options,
            self.plan,
            run,
            samples,
            &record,
            &mut |sample| {
                if !args.json {
                    samples::print_sample(sample, samples);
                }
            },
        )
        .context("the runs failed")?;
        let answer = self.plan.profile.answer;
        let sandbox = match answer {
            catena_protocol::AnswerFormat::Program => Some(setup::sandbox(paths, limits)?),
            _ => None,
        };
        let tally = samples::vote(&chains, answer, run.question, sandbox.as_ref())?;
        if args.json {
            samples::print_json(&chains, &tally);
        } else {
            samples::print_vote(&chains, &tally);
            print_notes(self.backend, None, paths);
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Starts the MCP servers the run may use and offers their tools (`<tool_call>`): the profile
/// describes them after the system message. The multi-agent system has one agent per protocol
/// tool and none for these, so it runs without them.
fn add_external_tools(
    args: &RunArgs,
    paths: &Paths,
    profile: Profile,
    tools: &mut catena_agent::tools::ToolBox,
) -> Result<Profile> {
    if args.mode != Mode::Coa {
        if args.mcp.mcp_config.is_some() {
            eprintln!(
                "warning: --mode {} runs without MCP servers; --mcp-config is ignored",
                args.mode.name()
            );
        }
        return Ok(profile);
    }
    let Some((external, specs)) = args.mcp.start(paths)? else {
        return Ok(profile);
    };
    let profile = profile.with_external_tools(&specs);
    tools.add(Box::new(external));
    Ok(profile)
}

/// The session store, unless `--no-store`; a store that does not open costs the record, not
/// the run.
fn open_store(args: &RunArgs, paths: &Paths) -> Option<Store> {
    if args.no_store {
        return None;
    }
    Store::open_in(&paths.store_dir)
        .inspect_err(|e| eprintln!("warning: this run will not be saved: {e}"))
        .ok()
}

/// What a person reading the run's output should know after it: the server's cache use, where
/// the run is saved, that the default model is a stand-in.
fn print_notes(backend: &Backend, recorder: Option<&Recorder<'_>>, paths: &Paths) {
    if let Backend::LlamaServer { session, .. } = backend {
        let usage = session.usage();
        eprintln!(
            "Server: {} requests, {} prompt tokens sent, {} taken from its cache, {} evaluated.",
            usage.requests, usage.sent_tokens, usage.cached_tokens, usage.evaluated_tokens
        );
    }
    if let Some(recorder) = recorder {
        let id = recorder.run_id();
        match recorder.failure() {
            None => eprintln!("Saved as run {id} (catena sessions show {id})."),
            // The store's error was told right after the run.
            Some(_) => eprintln!(
                "Saved in part as run {id}, up to where the store failed (catena sessions show \
                 {id}); the rest is only in this output."
            ),
        }
    }
    if let Backend::Local {
        builtin_default: true,
        adapter,
        ..
    } = backend
    {
        eprintln!(
            "\nNote: {}",
            setup::stand_in_note(paths, adapter.as_ref().is_some_and(|a| a.shipped))
        );
    }
}

/// The arguments checked before any model is fetched.
struct Checked {
    /// A profile named on the command line.
    profile: Option<Profile>,
    code_timeout: std::time::Duration,
    max_time: Option<std::time::Duration>,
    sampling: SamplingParams,
}

impl Checked {
    fn from_args(args: &RunArgs) -> Result<Checked> {
        if args.mode != Mode::Coa && args.prefill.is_some() {
            bail!(
                "--prefill starts a Chain-of-Agents generation; --mode {} has none",
                args.mode.name()
            );
        }
        if args.samples > 1 && (args.temperature.is_nan() || args.temperature <= 0.0) {
            bail!(
                "--samples {} needs sampling, but --temperature {} is greedy: every chain would be \
                 the same. Give a temperature above 0 (the default is 0.6).",
                args.samples,
                args.temperature
            );
        }
        if args.samples > 1 && (args.mode != Mode::Coa || args.engine.is_some()) {
            bail!(
                "--samples decodes Chain-of-Agents chains together in this process: it cannot be \
                 used with --mode {} or --engine",
                args.mode.name()
            );
        }
        let profile = match (&args.profile_file, &args.profile) {
            (Some(file), _) => Some(Profile::from_file(file)?),
            (None, Some(name)) => Some(Profile::builtin(name)?),
            (None, None) => None,
        };
        let Some(code_timeout) = positive_seconds(args.code_timeout) else {
            bail!("--code-timeout must be a positive number of seconds");
        };
        let max_time = match args.max_time.map(positive_seconds) {
            Some(None) => bail!("--max-time must be a positive number of seconds"),
            Some(Some(limit)) => Some(limit),
            None => None,
        };
        let sampling = setup::checked_sampling(SamplingParams {
            temperature: args.temperature,
            top_p: args.top_p,
            top_k: args.top_k,
            seed: args.seed.unwrap_or_else(random_seed),
            ..SamplingParams::default()
        })?;
        Ok(Checked {
            profile,
            code_timeout,
            max_time,
            sampling,
        })
    }
}

/// Where the run's model is.
enum Backend {
    /// Loaded in this process.
    Local {
        engine: LlamaEngine,
        plan: Option<Plan>,
        path: PathBuf,
        adapter: Option<AppliedAdapter>,
        /// The built-in default model, not one the user chose.
        builtin_default: bool,
    },
    /// llama.cpp's server, for a Chain-of-Agents run.
    LlamaServer {
        session: RemoteSession,
        served: String,
    },
    /// An OpenAI-compatible server, for the explicit agents' calls.
    Chat { chat: RemoteChat, served: String },
}

impl Backend {
    fn open(args: &RunArgs, paths: &Paths, sampling: SamplingParams) -> Result<Backend> {
        match (&args.engine, args.mode) {
            (Some(url), Mode::Mas | Mode::Chat) => {
                let (chat, served) =
                    setup::remote_chat(url, args.engine_model.as_deref(), sampling)?;
                Ok(Backend::Chat { chat, served })
            }
            (Some(url), Mode::Coa) => {
                let served = setup::served_model(url, args.engine_model.as_deref())?;
                let session = setup::remote_session(url, &served, sampling)?;
                Ok(Backend::LlamaServer { session, served })
            }
            (None, _) => {
                let builtin_default = setup::uses_builtin_default(args.model.as_deref(), paths);
                let path = setup::model_path(args.model.as_deref(), paths)?;
                let adapter = args.adapter.resolve(&path, paths)?;
                let (engine, plan) = setup::load_planned(
                    &path,
                    Overrides {
                        context: args.ctx_size,
                        gpu_layers: args.gpu_layers,
                        kv_cache: args.kv_cache,
                        kv_caches: batched_kv_caches(u32::from(args.samples)),
                    },
                    adapter.as_ref().map(|a| a.options.clone()),
                    paths,
                )?;
                Ok(Backend::Local {
                    engine,
                    plan,
                    path,
                    adapter,
                    builtin_default,
                })
            }
        }
    }

    /// The profile the model was made for, as its catalog entry or import says; math for others.
    fn profile(&self, paths: &Paths) -> Result<Profile> {
        let Backend::Local { path, .. } = self else {
            return Ok(Profile::builtin("math")?);
        };
        let catalog = catena_hub::catalog::Catalog::load(paths)?;
        Ok(match catena_hub::installed::profile_of(path, &catalog) {
            Some(name) => {
                eprintln!("profile: {name} (the model's; --profile chooses another)");
                Profile::builtin(&name)?
            }
            None => Profile::builtin("math")?,
        })
    }

    /// The adapter applied to a local model, by name.
    fn adapter_name(&self) -> Option<&str> {
        match self {
            Backend::Local { adapter, .. } => adapter.as_ref().map(|a| a.name.as_str()),
            _ => None,
        }
    }

    /// How the chain is decoded: held to the protocol's grammar unless `--free`, or unless the
    /// model is at a server, which cannot follow one (said once, here).
    fn decoding(&self, free: bool) -> Decoding {
        match self {
            _ if free => Decoding::Free,
            Backend::Local { .. } => Decoding::Protocol,
            Backend::LlamaServer { .. } => {
                eprintln!(
                    "note: a model at --engine writes its chain freely (a server cannot follow \
                     Catena's protocol grammar); the parser reads what it writes"
                );
                Decoding::Free
            }
            Backend::Chat { .. } => Decoding::Free,
        }
    }

    fn model_name(&self) -> String {
        match self {
            Backend::Local { engine, path, .. } => setup::model_name(engine, path),
            Backend::LlamaServer { served, .. } | Backend::Chat { served, .. } => served.clone(),
        }
    }
}

/// A local model's session, for a chain or for the agents' calls.
enum LocalModel<'m> {
    Chain(LlamaSession<'m>),
    Chat(LocalChat<'m>),
}

impl LocalModel<'_> {
    fn engine(&mut self, mode: Mode) -> Engine<'_> {
        match self {
            LocalModel::Chain(session) => Engine::Chain(session),
            LocalModel::Chat(chat) => mode.over_chat(chat),
        }
    }
}

/// The run's record in the store; `None` (with a warning) when it cannot be started.
fn open_record<'s>(
    store: &'s Store,
    args: &RunArgs,
    adapter: Option<&str>,
    plan: &RunPlan<'_>,
    run: &TaskRun<'_>,
) -> Option<Recorder<'s>> {
    let options = serde_json::json!({
        "temperature": run.sampling.temperature,
        "top_p": run.sampling.top_p,
        "top_k": run.sampling.top_k,
        "seed": run.sampling.seed,
        "max_tool_calls": plan.budgets.max_tool_calls,
        "max_tokens": plan.budgets.max_tokens,
        "max_time": args.max_time,
        "prefill": args.prefill,
        "mode": args.mode.name(),
        "free": plan.decoding == Decoding::Free,
    });
    let started = store.start_run(&NewRun {
        session: None,
        kind: RunKind::Agent,
        task: run.question,
        profile: Some(&plan.profile.name),
        model: &plan.model,
        adapter,
        options,
        system_prompt: &plan.profile.system,
        user_prompt: &plan.profile.user_message(run.question),
    });
    match started {
        Ok(id) => Some(Recorder::new(store, id)),
        Err(e) => {
            eprintln!("warning: this run will not be saved: {e}");
            None
        }
    }
}

fn read_task(task: &str) -> Result<String> {
    let text = if task == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the task from stdin")?;
        text
    } else {
        task.to_string()
    };
    if text.trim().is_empty() {
        bail!("the task is empty");
    }
    Ok(text.trim().to_string())
}

fn random_seed() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

//! `catena run`: one task, one Chain-of-Agents trajectory.

use crate::render::{EventSink, HumanPrinter, JsonPrinter};
use crate::setup;
use anyhow::{Context, Result, bail};
use catena_agent::tools::profile_tools;
use catena_agent::{AgentEvent, Budgets, RunRequest, run_chain, start_task};
use catena_distill::mas::{MasRequest, run_multi_agent};
use catena_engine::llama::LocalChat;
use catena_engine_api::plan::Overrides;
use catena_engine_api::{ChatEngine, KvCacheType, SamplingParams, SessionOptions};
use catena_hub::config::Paths;
use catena_protocol::Profile;
use catena_protocol::units::positive_seconds;
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
}

impl Mode {
    /// The name reports and the store use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Coa => "coa",
            Mode::Mas => "mas",
        }
    }
}

#[derive(Args)]
pub struct RunArgs {
    /// The task; `-` reads it from stdin.
    pub task: String,

    /// coa: one Chain-of-Agents generation; mas: the explicit multi-agent system, every agent a
    /// separate call with its tokens counted.
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
    if args.mode == Mode::Mas && args.prefill.is_some() {
        bail!("--prefill starts a Chain-of-Agents generation; the multi-agent mode has none");
    }
    // A profile named on the command line is checked before any model is fetched.
    let chosen_profile = match (&args.profile_file, &args.profile) {
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
    let seed = args.seed.unwrap_or_else(random_seed);
    let sampling = SamplingParams {
        temperature: args.temperature.max(0.0),
        top_p: args.top_p,
        top_k: args.top_k,
        seed,
    };
    let mut remote = match (&args.engine, args.mode) {
        (Some(url), Mode::Mas) => Some(setup::remote_chat(
            url,
            args.engine_model.as_deref(),
            sampling,
        )?),
        _ => None,
    };
    let on_builtin_default =
        args.engine.is_none() && setup::uses_builtin_default(args.model.as_deref(), paths);
    let model_path = match args.engine {
        Some(_) => None,
        None => Some(setup::model_path(args.model.as_deref(), paths)?),
    };
    let profile = match (chosen_profile, &model_path) {
        (Some(profile), _) => profile,
        (None, Some(model_path)) => {
            let catalog = catena_hub::catalog::Catalog::load(paths)?;
            match catena_hub::installed::profile_of(model_path, &catalog) {
                Some(name) => {
                    eprintln!("profile: {name} (the model's; --profile chooses another)");
                    Profile::builtin(&name)?
                }
                None => Profile::builtin("math")?,
            }
        }
        (None, None) => Profile::builtin("math")?,
    };
    let limits = Limits {
        wall: code_timeout,
        memory_bytes: args.code_memory << 20,
        ..Limits::default()
    };
    let mut tools = profile_tools(&profile, || setup::sandbox(paths, limits).map(Arc::new))?;
    args.search.add_to(&mut tools, &profile, paths)?;
    let adapter = match &model_path {
        Some(model_path) => args.adapter.resolve(model_path, paths)?,
        None => None,
    };
    let loaded = match &model_path {
        Some(model_path) => Some(setup::load_planned(
            model_path,
            Overrides {
                context: args.ctx_size,
                gpu_layers: args.gpu_layers,
                kv_cache: args.kv_cache,
                kv_caches: 1,
            },
            adapter.as_ref().map(|a| a.options.clone()),
        )?),
        None => None,
    };
    let plan = loaded.as_ref().and_then(|(_, plan)| plan.as_ref());
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    // First Ctrl-C stops the run cleanly (the summary is still printed); a second one exits.
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
    });
    let options = SessionOptions {
        threads: args.threads,
        ..setup::planned_session(plan, args.ctx_size, sampling)
    };
    let user_prompt = profile.user_message(&task);
    let mut remote_chain = match (&args.engine, args.mode) {
        (Some(url), Mode::Coa) => {
            let served = setup::served_model(url, args.engine_model.as_deref())?;
            let (session, prompt) =
                setup::remote_session(url, &served, sampling, &profile.system, &user_prompt)?;
            Some((session, prompt, served))
        }
        _ => None,
    };
    let budgets = Budgets {
        max_tool_calls: args.max_tool_calls.unwrap_or(profile.max_tool_calls),
        max_tokens: args.max_tokens,
        max_time,
    };
    let model_name = match (&remote, &remote_chain, &loaded, &model_path) {
        (Some((_, served)), _, _, _) | (_, Some((_, _, served)), _, _) => served.clone(),
        (None, None, Some((engine, _)), Some(path)) => setup::model_name(engine, path),
        _ => bail!("no model to run"),
    };
    let mut printer: Box<dyn EventSink> = if args.json {
        Box::new(JsonPrinter::new())
    } else {
        Box::new(HumanPrinter::new())
    };
    let store = if args.no_store {
        None
    } else {
        match Store::open_in(&paths.store_dir) {
            Ok(store) => Some(store),
            Err(e) => {
                eprintln!("warning: this run will not be saved: {e}");
                None
            }
        }
    };
    let options_json = serde_json::json!({
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "seed": seed,
        "max_tool_calls": budgets.max_tool_calls,
        "max_tokens": budgets.max_tokens,
        "max_time": args.max_time,
        "prefill": args.prefill,
        "mode": args.mode.name(),
    });
    let mut recorder = match &store {
        Some(store) => {
            let run = store.start_run(&NewRun {
                session: None,
                kind: RunKind::Agent,
                task: &task,
                profile: Some(&profile.name),
                model: &model_name,
                adapter: adapter.as_ref().map(|a| a.name.as_str()),
                options: options_json,
                system_prompt: &profile.system,
                user_prompt: &user_prompt,
            });
            match run {
                Ok(id) => Some(Recorder::new(store, id)),
                Err(e) => {
                    eprintln!("warning: this run will not be saved: {e}");
                    None
                }
            }
        }
        None => None,
    };
    // Each event is saved before it is shown.
    let mut on_event = |e: AgentEvent| {
        if let Some(recorder) = recorder.as_mut() {
            recorder.event(&e);
        }
        printer.event(&e)
    };
    let result = match (args.mode, &loaded) {
        (Mode::Coa, Some((engine, _))) => {
            let mut session = engine.session(&options)?;
            let prompt = start_task(&mut session, &profile, &task)?;
            let request = RunRequest {
                profile: &profile,
                model: model_name.clone(),
                sampling,
                prompt,
                prefill: args.prefill.as_deref(),
                budgets,
                cancel: Some(cancel),
            };
            run_chain(&mut session, request, &tools, &mut on_event)
                .map(|summary| (summary, None))
                .map_err(anyhow::Error::new)
        }
        (Mode::Coa, None) => {
            let Some((session, prompt, _)) = remote_chain.as_mut() else {
                bail!("a Chain-of-Agents run needs a model: a local one or --engine URL")
            };
            let request = RunRequest {
                profile: &profile,
                model: model_name.clone(),
                sampling,
                prompt: *prompt,
                prefill: args.prefill.as_deref(),
                budgets,
                cancel: Some(cancel),
            };
            run_chain(session, request, &tools, &mut on_event)
                .map(|summary| (summary, None))
                .map_err(anyhow::Error::new)
        }
        (Mode::Mas, loaded) => {
            let mut local;
            let chat: &mut dyn ChatEngine = match (&mut remote, loaded) {
                (Some((remote, _)), _) => remote,
                (None, Some((engine, _))) => {
                    local = LocalChat::new(engine, &options)?;
                    &mut local
                }
                (None, None) => bail!("no model to run"),
            };
            let request = MasRequest {
                task_id: "task",
                question: &task,
                profile: &profile,
                model: model_name.clone(),
                sampling,
                budgets,
                cancel: Some(cancel),
            };
            run_multi_agent(chat, request, &tools, &mut on_event)
                .map(|mas| {
                    let by_role = catena_distill::tokens_by_role(&mas.run.activations);
                    (mas.run_summary(), Some((mas.usage, by_role)))
                })
                .map_err(anyhow::Error::new)
        }
    };
    let (summary, usage) = match result {
        Ok(done) => done,
        Err(e) => {
            if let Some(recorder) = recorder.as_mut() {
                recorder.fail(&e.to_string());
            }
            return Err(e.context("the run failed"));
        }
    };
    if let Some(recorder) = recorder.as_mut() {
        recorder.finish(&summary, usage.as_ref().map_or(0, |(u, _)| u.cached_tokens));
        if let Some(problem) = recorder.failure() {
            eprintln!("warning: the run was not saved completely: {problem}");
        }
    }
    match usage {
        None => printer.summary(&summary),
        Some((usage, by_role)) => printer.multi_agent_summary(&summary, &usage, &by_role),
    }
    if let Some((session, _, _)) = remote_chain.as_ref().filter(|_| !args.json) {
        let usage = session.usage();
        eprintln!(
            "Server: {} requests, {} prompt tokens sent, {} taken from its cache, {} evaluated.",
            usage.requests, usage.sent_tokens, usage.cached_tokens, usage.evaluated_tokens
        );
    }
    if let Some(recorder) = recorder.as_ref().filter(|_| !args.json) {
        let id = recorder.run_id();
        eprintln!("Saved as run {id} (catena sessions show {id}).");
    }
    if on_builtin_default && !args.json {
        eprintln!(
            "\nNote: {}",
            setup::stand_in_note(paths, adapter.as_ref().is_some_and(|a| a.shipped))
        );
    }
    Ok(ExitCode::SUCCESS)
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

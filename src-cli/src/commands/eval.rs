//! `catena eval`: a model (and adapter) on a task set, through the same engine, sandbox and
//! chain runner as `catena run`; a markdown and a JSON report.

use crate::setup;
use anyhow::{Context, Result, bail};
use catena_core::agent::{Budgets, RunRequest, run_chain};
use catena_core::config::Paths;
use catena_core::engine::{KvCacheType, SamplingParams, Session, SessionOptions};
use catena_core::eval::{self, Report, TaskResult};
use catena_core::models::plan::Overrides;
use catena_core::protocol::{AnswerFormat, Profile};
use catena_core::sandbox::Limits;
use catena_core::tools::profile_tools;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct EvalArgs {
    /// Tasks: JSONL, one `{"id", "question", "answer"}` per line (`catena train synth` writes
    /// `held-out.jsonl` in this form).
    #[arg(long, value_name = "FILE")]
    tasks: PathBuf,

    /// Prompt profile.
    #[arg(long, default_value = "math")]
    profile: String,

    /// A GGUF model; default: the default model.
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,

    #[command(flatten)]
    adapter: setup::AdapterArgs,

    /// Only the first N tasks.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,

    /// Folder for report.md and report.json.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// Sampling temperature (0: greedy, the default, so a report can be reproduced).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,

    /// Most tokens generated per task.
    #[arg(long, default_value_t = 1024)]
    max_tokens: usize,

    /// Layers to offload to the GPU.
    #[arg(long, value_name = "N")]
    gpu_layers: Option<u32>,

    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: EvalArgs, paths: &Paths) -> Result<ExitCode> {
    let mut tasks = eval::read_tasks(&args.tasks)?;
    if let Some(limit) = args.limit {
        tasks.truncate(limit);
    }
    if tasks.is_empty() {
        bail!("no tasks to run");
    }
    let profile = Profile::builtin(&args.profile)?;
    let model_path = setup::model_path(args.model.as_deref(), paths)?;
    let tools = profile_tools(&profile, || {
        setup::sandbox(paths, Limits::default()).map(Arc::new)
    })?;
    let (engine, plan) = setup::load_planned(
        &model_path,
        Overrides {
            context: Some(4096),
            gpu_layers: args.gpu_layers,
            kv_cache: None,
            kv_caches: 1,
        },
        args.adapter.options(),
    )?;
    let sampling = SamplingParams {
        temperature: args.temperature.max(0.0),
        top_p: 0.95,
        top_k: 40,
        seed: 1,
    };
    let options = SessionOptions {
        context_size: plan.as_ref().map(|p| p.context).or(Some(4096)),
        sampling,
        kv_cache: plan.as_ref().map_or(KvCacheType::default(), |p| p.kv_cache),
        ..SessionOptions::default()
    };
    let model_name = engine
        .info()
        .name
        .clone()
        .unwrap_or_else(|| model_path.display().to_string());
    let boxed = matches!(profile.answer, AnswerFormat::Boxed);
    // One session for all tasks: the prompt's shared beginning (system message and
    // instructions) stays in the KV cache and only each question is evaluated anew.
    let mut session = engine.session(&options)?;
    let started = Instant::now();
    let mut results = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.iter().enumerate() {
        let t0 = Instant::now();
        let prompt = engine.chat_prompt(&profile.system, &profile.user_message(&task.question))?;
        let ids = engine.tokenize_parts(&prompt);
        let shared = session
            .tokens()
            .iter()
            .zip(&ids)
            .take_while(|(a, b)| a.id == **b)
            .count()
            .min(ids.len().saturating_sub(1));
        session.truncate(shared)?;
        session.append_tokens(&ids[shared..])?;
        // The session's counters run across tasks: this task's share is the difference.
        let generated_before = session.stats().generated_tokens;
        let request = RunRequest {
            profile: &profile,
            model: model_name.clone(),
            sampling,
            prompt_tokens: ids.len(),
            cached_tokens: shared,
            prefill: None,
            budgets: Budgets {
                max_tool_calls: profile.max_tool_calls,
                max_tokens: args.max_tokens,
                max_time: None,
            },
            cancel: None,
        };
        let summary = run_chain(&mut session, request, &tools, &mut |_| {})
            .with_context(|| format!("task {}", task.id))?;
        let result = TaskResult {
            id: task.id.clone(),
            family: task.family.clone(),
            expected: task.answer.clone(),
            solved: summary
                .answer
                .as_deref()
                .is_some_and(|a| eval::exact_match(a, &task.answer)),
            well_formed: eval::well_formed(&summary.trajectory, boxed),
            answer: summary.answer.clone(),
            tool_calls: summary.tool_calls,
            generated_tokens: summary.generated_tokens.saturating_sub(generated_before),
            seconds: t0.elapsed().as_secs_f64(),
            stop: serde_json::to_value(summary.stop_reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        };
        if !args.json {
            eprintln!(
                "[{}/{}] {} {} ({} tokens, {:.1} s)",
                i + 1,
                tasks.len(),
                task.id,
                match (result.solved, result.well_formed) {
                    (true, true) => "solved",
                    (true, false) => "solved, chain malformed",
                    (false, true) => "wrong",
                    (false, false) => "wrong, chain malformed",
                },
                result.generated_tokens,
                result.seconds
            );
        }
        results.push(result);
    }
    let report = Report::new(
        model_name,
        args.adapter
            .adapter
            .as_ref()
            .map(|p| p.display().to_string()),
        profile.name.clone(),
        results,
        started.elapsed().as_secs_f64(),
    );
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        std::fs::write(out.join("report.md"), report.markdown())?;
        std::fs::write(out.join("report.json"), serde_json::to_vec_pretty(&report)?)?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        eprintln!(
            "pass@1 {:.1}%  valid chains {:.1}%  {:.0} tokens and {:.2} tool calls per task  {:.0} s",
            100.0 * report.pass_at_1,
            100.0 * report.format_rate,
            report.mean_generated_tokens,
            report.mean_tool_calls,
            report.wall_seconds
        );
    }
    Ok(ExitCode::SUCCESS)
}

//! `catena eval`: a model (and adapter) on a task set, through the same engine, sandbox and
//! chain runner as `catena run`, each run scored by the rewards RL trains on; a markdown and a
//! JSON report with SVG plots.

use super::run::Mode;
use crate::setup;
use anyhow::{Context, Result, bail};
use catena_agent::{Budgets, RunRequest, RunSummary, run_chain, start_task};
use catena_distill::mas::{MasRequest, run_multi_agent};
use catena_engine::ChatEngine;
use catena_engine::llama::{LlamaEngine, LlamaSession, LocalChat};
use catena_engine::plan::Overrides;
use catena_engine::{SamplingParams, Session};
use catena_eval::{EvalTask, Report, TaskResult, plot};
use catena_hub::config::Paths;
use catena_protocol::{AnswerFormat, Profile};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// The temperature of K > 1 runs a task when none is given (what the AFM evaluations sample
/// AIME/AMC's avg@16 with).
const SAMPLED_TEMPERATURE: f32 = 0.6;

#[derive(Args)]
pub struct EvalArgs {
    /// Tasks: JSONL, one `{"id", "question", "answer"}` per line (`catena train synth` writes
    /// `held-out.jsonl` in this form; `kind` and `tests` pick another verifier), or a verl
    /// parquet file (`.parquet`: prompt, data_source, reward_model, extra_info).
    #[arg(long, value_name = "FILE")]
    tasks: PathBuf,

    /// Prompt profile.
    #[arg(long, default_value = "math")]
    profile: String,

    /// coa: one Chain-of-Agents generation a run; mas: the explicit multi-agent system (every
    /// agent a separate call), to compare tokens per solved task.
    #[arg(long, value_enum, default_value_t = Mode::Coa)]
    mode: Mode,

    /// Run the model at an OpenAI-compatible server (`http://HOST:PORT/v1`), its key from
    /// CATENA_ENGINE_KEY. A Chain-of-Agents run (--mode coa) needs llama.cpp's llama-server.
    #[arg(long, value_name = "URL", conflicts_with_all = ["model", "adapter"])]
    engine: Option<String>,

    /// The model at --engine (default: the first the server lists).
    #[arg(long, value_name = "NAME", requires = "engine")]
    engine_model: Option<String>,

    #[command(flatten)]
    search: setup::SearchArgs,

    /// A GGUF model; default: the default model.
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,

    #[command(flatten)]
    adapter: setup::AdapterArgs,

    /// Only the first N tasks.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,

    /// Folder for report.md, report.json and the plots.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// Runs per task (K): the report gives pass@1 as avg@K (the mean share of a task's runs
    /// solved) and pass@K (tasks solved at least once).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    samples: u32,

    /// Sampling temperature. Default: 0 (greedy, so a report can be reproduced) with one run a
    /// task, 0.6 with --samples above 1 (which needs one above 0).
    #[arg(long)]
    temperature: Option<f32>,

    /// Sampling seed of each task's first run; run k uses this seed + k.
    #[arg(long, default_value_t = 1)]
    seed: u32,

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

/// The temperature of the runs: K identical greedy runs would measure nothing, so K > 1 is
/// refused at temperature 0.
fn temperature(samples: u32, given: Option<f32>) -> Result<f32> {
    match given {
        None if samples > 1 => Ok(SAMPLED_TEMPERATURE),
        None => Ok(0.0),
        Some(t) if samples > 1 && (t.is_nan() || t <= 0.0) => bail!(
            "--samples {samples} needs sampling, but --temperature {t} is greedy: every run of a task would be the same. Leave --temperature out (it is then {SAMPLED_TEMPERATURE}) or give one above 0."
        ),
        Some(t) => Ok(t.max(0.0)),
    }
}

pub fn run(args: EvalArgs, paths: &Paths) -> Result<ExitCode> {
    let temperature = temperature(args.samples, args.temperature)?;
    let samples = args.samples as usize;
    let mut tasks = catena_eval::read_tasks(&args.tasks)?;
    if let Some(limit) = args.limit {
        tasks.truncate(limit);
    }
    if tasks.is_empty() {
        bail!("no tasks to run");
    }
    let profile = Profile::builtin(&args.profile)?;
    // Code tasks' tests run in the sandbox too: one sandbox serves the tool and the scoring.
    let (tools, scoring_sandbox) = setup::task_tools(paths, &profile, &tasks, &args.search)?;
    let base_sampling = SamplingParams {
        temperature,
        top_p: 0.95,
        top_k: 40,
        seed: args.seed,
    };
    let remote = match (&args.engine, args.mode) {
        (Some(url), Mode::Mas) => {
            let (chat, served) =
                setup::remote_chat(url, args.engine_model.as_deref(), base_sampling)?;
            Some((served, Runner::Mas(Box::new(chat))))
        }
        (Some(url), Mode::Coa) => Some((
            setup::served_model(url, args.engine_model.as_deref())?,
            Runner::RemoteCoa(url.clone()),
        )),
        (None, _) => None,
    };
    let local = match remote {
        Some(_) => None,
        None => {
            let model_path = setup::model_path(args.model.as_deref(), paths)?;
            let loaded = setup::load_planned(
                &model_path,
                Overrides {
                    context: Some(4096),
                    gpu_layers: args.gpu_layers,
                    kv_cache: None,
                    kv_caches: 1,
                },
                args.adapter.options(),
            )?;
            Some((model_path, loaded))
        }
    };
    let boxed = matches!(profile.answer, AnswerFormat::Boxed);
    // One session for all runs: the prompt's shared beginning (system message and
    // instructions) stays in the KV cache and only each question is evaluated anew; a task's
    // later samples reuse its whole prompt.
    let (model_name, mut runner) = match (remote, &local) {
        (Some(remote), _) => remote,
        (None, Some((model_path, (engine, plan)))) => {
            let options = setup::planned_session(plan.as_ref(), Some(4096), base_sampling);
            let name = setup::model_name(engine, model_path);
            let runner = match args.mode {
                Mode::Coa => Runner::Coa(engine, Box::new(engine.session(&options)?)),
                Mode::Mas => Runner::Mas(Box::new(LocalChat::new(engine, &options)?)),
            };
            (name, runner)
        }
        (None, None) => bail!("no model to evaluate"),
    };
    let budgets = Budgets {
        max_tool_calls: profile.max_tool_calls,
        max_tokens: args.max_tokens,
        max_time: None,
    };
    let started = Instant::now();
    let mut results = Vec::with_capacity(tasks.len() * samples);
    for (i, task) in tasks.iter().enumerate() {
        for sample in 0..samples {
            let sampling = SamplingParams {
                seed: args.seed.wrapping_add(sample as u32),
                ..base_sampling
            };
            let t0 = Instant::now();
            // One CoA run in `session`, which holds the prompt; its generated tokens are counted
            // from `generated_before` (a kept session's counters run across runs).
            let coa = |session: &mut dyn Session, prompt, generated_before: usize| {
                let request = RunRequest {
                    profile: &profile,
                    model: model_name.clone(),
                    sampling,
                    prompt,
                    prefill: None,
                    budgets,
                    cancel: None,
                };
                let summary = run_chain(session, request, &tools, &mut |_| {})
                    .with_context(|| format!("task {}", task.id))?;
                anyhow::Ok(Outcome {
                    model_calls: 1,
                    total_tokens: summary.context_tokens,
                    generated_tokens: summary.generated_tokens.saturating_sub(generated_before),
                    summary,
                })
            };
            let run = match &mut runner {
                Runner::Coa(engine, session) => {
                    let prompt = start_task(engine, session, &profile, &task.question)?;
                    let generated_before = session.stats().generated_tokens;
                    coa(session.as_mut(), prompt, generated_before)?
                }
                Runner::RemoteCoa(url) => {
                    // A session per task; the server keeps the prompts' shared beginning.
                    let user = profile.user_message(&task.question);
                    let (mut session, prompt) =
                        setup::remote_session(url, &model_name, sampling, &profile.system, &user)?;
                    coa(&mut session, prompt, 0)?
                }
                Runner::Mas(chat) => {
                    chat.set_sampling(sampling);
                    let request = MasRequest {
                        task_id: &task.id,
                        question: &task.question,
                        profile: &profile,
                        model: model_name.clone(),
                        sampling,
                        budgets,
                        cancel: None,
                    };
                    let mas = run_multi_agent(chat.as_mut(), request, &tools, &mut |_| {})
                        .with_context(|| format!("task {}", task.id))?;
                    Outcome {
                        model_calls: mas.usage.calls,
                        total_tokens: mas.usage.total(),
                        generated_tokens: mas.usage.completion_tokens,
                        summary: mas.run_summary(),
                    }
                }
            };
            let summary = &run.summary;
            let score = catena_eval::score_run(
                task,
                summary.answer.as_deref(),
                &summary.trajectory,
                scoring_sandbox.as_deref(),
            );
            let result = TaskResult {
                id: task.id.clone(),
                family: task.family.clone(),
                expected: task.answer.clone(),
                solved: score.solved,
                well_formed: catena_eval::well_formed(&summary.trajectory, boxed),
                answer: summary.answer.clone(),
                tool_calls: summary.tool_calls,
                generated_tokens: run.generated_tokens,
                seconds: t0.elapsed().as_secs_f64(),
                stop: summary.stop_reason.as_str().to_string(),
                sample,
                reward: score.reward,
                f1: score.f1,
                model_calls: run.model_calls,
                total_tokens: run.total_tokens,
            };
            if !args.json {
                progress(i, tasks.len(), task, sample, samples, &result);
            }
            results.push(result);
        }
    }
    let report = Report::new(
        model_name,
        args.adapter
            .adapter
            .as_ref()
            .map(|p| p.display().to_string()),
        profile.name.clone(),
        args.mode.name(),
        results,
        started.elapsed().as_secs_f64(),
    );
    if let Some(out) = &args.out {
        write_report(&report, out)?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        eprintln!("{}", summary_line(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// What runs the tasks: one session for CoA runs here, or llama.cpp's server at a URL; for the
/// agents' calls, one chat session here or a server.
enum Runner<'e> {
    Coa(&'e LlamaEngine, Box<LlamaSession<'e>>),
    RemoteCoa(String),
    Mas(Box<dyn ChatEngine + 'e>),
}

/// One run, either way.
struct Outcome {
    summary: RunSummary,
    model_calls: usize,
    total_tokens: usize,
    generated_tokens: usize,
}

/// One line on stderr per run.
fn progress(
    index: usize,
    tasks: usize,
    task: &EvalTask,
    sample: usize,
    samples: usize,
    result: &TaskResult,
) {
    let run = if samples > 1 {
        format!(" sample {}/{samples}", sample + 1)
    } else {
        String::new()
    };
    eprintln!(
        "[{}/{}] {}{run} {} ({} tokens, {:.1} s)",
        index + 1,
        tasks,
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

/// The headline numbers in one line.
fn summary_line(report: &Report) -> String {
    let pass = if report.samples > 1 {
        format!(
            "pass@1 (avg@{k}) {:.1}%  pass@{k} {:.1}%",
            100.0 * report.pass_at_1,
            100.0 * report.pass_at_k,
            k = report.samples
        )
    } else {
        format!("pass@1 {:.1}%", 100.0 * report.pass_at_1)
    };
    let f1 = report
        .mean_f1
        .map(|f1| format!("  mean F1 {:.1}%", 100.0 * f1))
        .unwrap_or_default();
    let per = if report.samples > 1 { "run" } else { "task" };
    format!(
        "{pass}{f1}  valid chains {:.1}%  {:.0} tokens and {:.2} tool calls per {per}  {:.0} s",
        100.0 * report.format_rate,
        report.mean_generated_tokens,
        report.mean_tool_calls,
        report.wall_seconds
    )
}

/// report.md (with the plots linked), report.json and the plots in `out`. A plot that cannot
/// be drawn is a warning: the numbers are written already.
fn write_report(report: &Report, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut markdown = report.markdown();
    markdown.push_str(&format!(
        "\n## Plots\n\n![Pass rate by task family]({})\n\n![Generated tokens per run, solved and unsolved]({})\n",
        plot::FAMILY_PLOT,
        plot::TOKENS_PLOT
    ));
    std::fs::write(out.join("report.md"), markdown)?;
    std::fs::write(out.join("report.json"), serde_json::to_vec_pretty(report)?)?;
    if let Err(e) = plot::write_plots(report, out) {
        eprintln!("warning: {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperature_follows_the_sample_count() {
        assert_eq!(temperature(1, None).unwrap(), 0.0);
        assert_eq!(temperature(1, Some(0.8)).unwrap(), 0.8);
        assert_eq!(temperature(1, Some(-1.0)).unwrap(), 0.0);
        assert_eq!(temperature(4, None).unwrap(), SAMPLED_TEMPERATURE);
        assert_eq!(temperature(4, Some(1.0)).unwrap(), 1.0);
        let refused = temperature(4, Some(0.0)).unwrap_err().to_string();
        assert!(refused.contains("--samples 4"), "{refused}");
        assert!(temperature(2, Some(f32::NAN)).is_err());
    }
}

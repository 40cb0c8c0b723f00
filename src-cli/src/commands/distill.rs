//! `catena distill`: multi-agent distillation. The explicit multi-agent system (the teacher)
//! runs every task, each run is scored by the task's verifiable reward and stored as it ends
//! (`runs.jsonl`: a stopped distillation goes on where it was), and the stored runs become
//! Chain-of-Agents trajectories through the progressive filters: `sft.jsonl` for `catena train
//! sft`, `alpaca.json` in the AFM release's form, and a report of what each stage kept.

use crate::setup;
use anyhow::{Context, Result, bail};
use catena_agent::tools::ToolBox;
use catena_agent::{Budgets, CutShort, Decoding};
use catena_distill::{
    FilterConfig, FilterReport, RunLog, TeacherRun, alpaca_item, filter_runs, sft_line,
};
use catena_engine::llama::LocalChat;
use catena_engine_api::plan::{Overrides, batched_kv_caches};
use catena_engine_api::{ChatEngine, SamplingParams};
use catena_hub::config::Paths;
use catena_protocol::{AnswerFormat, Profile};
use catena_runner::{Engine, RunPlan, TaskRun, run_queue, run_task};
use catena_sandbox::Sandbox;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

#[derive(Args)]
pub struct DistillArgs {
    /// Tasks with verifiable answers: JSONL (`{"id", "question", "answer"}`, as `catena eval`
    /// reads) or a verl parquet file.
    #[arg(long, value_name = "FILE")]
    tasks: PathBuf,

    /// Folder for runs.jsonl (every teacher run), sft.jsonl, alpaca.json and the report.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,

    /// Where the teacher runs: `local` (this machine), or the address of an OpenAI-compatible
    /// server (`http://HOST:PORT/v1`: llama-server, vLLM, another `catena serve`, a hosted
    /// API), its key from CATENA_ENGINE_KEY.
    #[arg(long, default_value = "local")]
    teacher: String,

    /// The teacher model: locally a GGUF file or an installed model's name (default: the
    /// default model); at a server the name it serves (default: the first it lists).
    #[arg(long, value_name = "MODEL")]
    teacher_model: Option<PathBuf>,

    /// The CoA profile the trajectories are written for.
    #[arg(long, default_value = "math")]
    profile: String,

    #[command(flatten)]
    search: setup::SearchArgs,

    /// Only the first N tasks.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,

    /// Teacher runs per task; each has its own seed.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    samples: u32,

    /// The teacher's sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.6)]
    temperature: f32,

    /// Seed of each task's first run; run k uses this seed + k.
    #[arg(long, default_value_t = 1)]
    seed: u32,

    /// Completion tokens of all the agents' calls in one run.
    #[arg(long, default_value_t = 6144)]
    max_tokens: usize,

    /// Fewest agent activations a kept trajectory has.
    #[arg(long, default_value_t = 5)]
    min_hops: usize,

    /// Most agent activations a kept trajectory has.
    #[arg(long, default_value_t = 20)]
    max_hops: usize,

    /// Teacher runs at a time. Here they decode together in one context (each run's
    /// sequence with its own 8,192-token context); at a server each is a client of its own.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    parallel: u32,

    /// Layers to offload to the GPU.
    #[arg(long, value_name = "N")]
    gpu_layers: Option<u32>,
}

pub fn run(args: DistillArgs, paths: &Paths) -> Result<ExitCode> {
    if args.min_hops > args.max_hops {
        bail!(
            "--min-hops {} is above --max-hops {}",
            args.min_hops,
            args.max_hops
        );
    }
    let profile = Profile::builtin(&args.profile)?;
    let mut tasks = catena_eval::read_tasks(&args.tasks)?;
    if let Some(limit) = args.limit {
        tasks.truncate(limit);
    }
    if tasks.is_empty() {
        bail!("no tasks in {}", args.tasks.display());
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let opened = RunLog::open(&args.out.join("runs.jsonl"))?;
    let mut log = opened.log;
    let mut runs = opened.runs;
    if opened.cut_bytes > 0 {
        eprintln!(
            "The last teacher run in runs.jsonl was cut off when the earlier distillation stopped ({} bytes); that task runs again.",
            opened.cut_bytes
        );
    }
    let done: HashSet<(String, usize)> = runs
        .iter()
        .map(|r| (r.run.task_id.clone(), r.sample))
        .collect();
    let samples = args.samples as usize;
    let todo: Vec<(usize, usize)> = (0..tasks.len())
        .flat_map(|t| (0..samples).map(move |s| (t, s)))
        .filter(|&(t, s)| !done.contains(&(tasks[t].id.clone(), s)))
        .collect();
    let total = tasks.len() * samples;
    if !done.is_empty() {
        eprintln!(
            "Resuming: {} of {total} teacher runs are stored in {}.",
            total - todo.len(),
            args.out.join("runs.jsonl").display()
        );
    }

    let started = Instant::now();
    let fresh = if todo.is_empty() {
        0
    } else {
        teach(&args, paths, &profile, &tasks, &todo, &mut log, &mut runs)?
    };
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    // Runs decoded together end in any order: the filters and outputs see them in the tasks'
    // order (runs of tasks no longer in the file last, as stored).
    let position: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, task)| (task.id.as_str(), i))
        .collect();
    runs.sort_by_key(|r| {
        (
            position
                .get(r.run.task_id.as_str())
                .copied()
                .unwrap_or(usize::MAX),
            r.sample,
        )
    });

    let config = FilterConfig {
        min_hops: args.min_hops,
        max_hops: args.max_hops,
        boxed_answer: matches!(profile.answer, AnswerFormat::Boxed),
        ..FilterConfig::default()
    };
    let stored: Vec<_> = runs.iter().map(|r| r.run.clone()).collect();
    let (kept, report) = filter_runs(&stored, &config);
    write_outputs(&args.out, &kept)?;
    let throughput = (fresh > 0 && minutes > 0.0).then(|| fresh as f64 / minutes);
    let summary = report_json(&runs, &report, kept.len(), throughput);
    std::fs::write(
        args.out.join("report.json"),
        serde_json::to_vec_pretty(&summary)?,
    )?;
    let markdown = report_markdown(&runs, &report, throughput);
    std::fs::write(args.out.join("report.md"), &markdown)?;
    eprint!("{markdown}");
    eprintln!(
        "\nWrote {} trajectories to {} and {}.",
        kept.len(),
        args.out.join("sft.jsonl").display(),
        args.out.join("alpaca.json").display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs the teacher on every task still to do, storing each run as it ends. Returns how many
/// runs it stored. Ctrl-C stops after the current agent calls; unfinished runs are not stored.
fn teach(
    args: &DistillArgs,
    paths: &Paths,
    profile: &Profile,
    tasks: &[catena_eval::EvalTask],
    todo: &[(usize, usize)],
    log: &mut RunLog,
    runs: &mut Vec<TeacherRun>,
) -> Result<usize> {
    let base_sampling = setup::checked_sampling(SamplingParams {
        temperature: args.temperature,
        top_p: 0.95,
        top_k: 40,
        seed: args.seed,
        ..SamplingParams::default()
    })?;
    let (tools, scoring_sandbox) = setup::task_tools(paths, profile, tasks, &args.search)?;
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
    });
    let bar = ProgressBar::new(todo.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("teacher runs [{bar:30}] {pos}/{len} ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let (mut stored, mut solved) = (0, 0);
    let mut keep = |run: TeacherRun| -> Result<()> {
        log.append(&run)?;
        stored += 1;
        solved += usize::from(run.run.reward >= 1.0);
        runs.push(run);
        bar.inc(1);
        bar.set_message(format!("{solved} solved of {stored}"));
        Ok(())
    };
    let mut teacher = Teacher {
        model: String::new(),
        profile,
        tasks,
        tools: &tools,
        scoring: scoring_sandbox.as_deref(),
        base_sampling,
        max_tokens: args.max_tokens,
        cancel: &cancel,
    };
    let outcome = on_the_teacher(args, paths, &mut teacher, todo, &mut keep);
    if cancel.load(Ordering::SeqCst) {
        bar.abandon_with_message("stopped; the finished runs are stored");
    } else {
        bar.finish_and_clear();
    }
    outcome.map(|()| stored)
}

/// Opens the teacher the arguments name, here or at a server, and runs `todo` on it.
fn on_the_teacher(
    args: &DistillArgs,
    paths: &Paths,
    teacher: &mut Teacher<'_>,
    todo: &[(usize, usize)],
    keep: &mut dyn FnMut(TeacherRun) -> Result<()>,
) -> Result<()> {
    let parallel = args.parallel as usize;
    let announce = |model: &str| {
        eprintln!(
            "Teacher: {model} (the explicit multi-agent system, profile {}{}).",
            teacher.profile.name,
            if parallel > 1 {
                format!(", {parallel} runs at a time")
            } else {
                String::new()
            }
        );
    };
    match args.teacher.as_str() {
        "local" => {
            let model_path = setup::model_path(args.teacher_model.as_deref(), paths)?;
            let (engine, plan) = setup::load_planned(
                &model_path,
                Overrides {
                    context: Some(TEACHER_CONTEXT),
                    gpu_layers: args.gpu_layers,
                    kv_cache: None,
                    kv_caches: batched_kv_caches(args.parallel),
                },
                None,
                paths,
            )?;
            let options =
                setup::planned_session(plan.as_ref(), Some(TEACHER_CONTEXT), teacher.base_sampling);
            teacher.model = setup::model_name(&engine, &model_path);
            announce(&teacher.model);
            if parallel > 1 {
                // The runs' sequences decode together in one context.
                engine.with_sequences(&options, parallel, |sessions| {
                    let chats = sessions
                        .into_iter()
                        .map(|session| LocalChat::over(&engine, session))
                        .collect();
                    teacher.concurrently(chats, todo, keep)
                })?
            } else {
                teacher.concurrently(vec![LocalChat::new(&engine, &options)?], todo, keep)
            }
        }
        url => {
            let model = args
                .teacher_model
                .as_ref()
                .map(|m| m.to_string_lossy().into_owned());
            // A chat client per run in flight: the server decides how many it decodes at once.
            let mut chats = Vec::with_capacity(parallel);
            let mut name = String::new();
            for _ in 0..parallel {
                let (chat, served) =
                    setup::remote_chat(url, model.as_deref(), teacher.base_sampling)?;
                chats.push(chat);
                name = served;
            }
            teacher.model = format!("{name} at {url}");
            announce(&teacher.model);
            teacher.concurrently(chats, todo, keep)
        }
    }
}

/// The context each teacher run has (with `--parallel`, each sequence).
const TEACHER_CONTEXT: u32 = 8192;

/// What every teacher run shares.
struct Teacher<'a> {
    /// The teacher's name in the stored runs.
    model: String,
    profile: &'a Profile,
    tasks: &'a [catena_eval::EvalTask],
    tools: &'a ToolBox,
    /// The sandbox code tasks' tests run in.
    scoring: Option<&'a Sandbox>,
    base_sampling: SamplingParams,
    max_tokens: usize,
    cancel: &'a Arc<AtomicBool>,
}

impl Teacher<'_> {
    /// Run `sample` of task `t`, scored; `None` when Ctrl-C stopped it (it is not stored).
    fn run(
        &self,
        chat: &mut dyn ChatEngine,
        t: usize,
        sample: usize,
    ) -> Result<Option<TeacherRun>> {
        let task = &self.tasks[t];
        let plan = RunPlan {
            profile: self.profile,
            tools: self.tools,
            model: self.model.clone(),
            budgets: Budgets {
                max_tool_calls: self.profile.max_tool_calls,
                max_tokens: self.max_tokens,
                max_time: None,
            },
            cancel: Some(self.cancel.clone()),
            // The teacher's agents answer plain chat turns: there is no chain to hold.
            decoding: Decoding::Free,
            cut_short: CutShort::End,
        };
        let run = TaskRun {
            id: &task.id,
            question: &task.question,
            sampling: SamplingParams {
                seed: self.base_sampling.seed.wrapping_add(sample as u32),
                ..self.base_sampling
            },
            prefill: None,
        };
        let t0 = Instant::now();
        let outcome = run_task(Engine::Agents(chat), &plan, &run, None, &mut |_| {})
            .with_context(|| format!("task {}", task.id))?;
        let Some(mut mas) = outcome.agents else {
            bail!(
                "task {}: the teacher's run kept no record of its agents",
                task.id
            );
        };
        if self.cancel.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let trajectory = catena_distill::to_trajectory(&mas.run).unwrap_or_default();
        let score = catena_eval::score_run(task, mas.answer.as_deref(), &trajectory, self.scoring);
        mas.run.reward = score.reward;
        Ok(Some(TeacherRun {
            run: mas.run,
            sample,
            answer: mas.answer,
            stop: mas.stop_reason.as_str().to_string(),
            usage: mas.usage,
            seconds: t0.elapsed().as_secs_f64(),
        }))
    }

    /// The runs of `todo` on one thread per chat, each taking the next run as it finishes one.
    /// Runs are kept as they end (in the order they end); after an error no new run starts, the
    /// runs under way are still kept, and the first error is returned.
    fn concurrently<C: ChatEngine + Send>(
        &self,
        chats: Vec<C>,
        todo: &[(usize, usize)],
        keep: &mut dyn FnMut(TeacherRun) -> Result<()>,
    ) -> Result<()> {
        run_queue(
            chats,
            todo.len(),
            |chat, job| {
                let (t, sample) = todo[job];
                self.run(chat, t, sample)
            },
            |_, run| keep(run),
        )
    }
}

/// sft.jsonl and alpaca.json, each written under a temporary name and renamed when complete.
fn write_outputs(out: &Path, kept: &[catena_distill::Distilled]) -> Result<()> {
    let mut sft = Vec::new();
    let mut alpaca = Vec::new();
    for distilled in kept {
        writeln!(sft, "{}", sft_line(distilled)?)?;
        alpaca.push(alpaca_item(distilled)?);
    }
    write_whole(&out.join("sft.jsonl"), &sft)?;
    write_whole(
        &out.join("alpaca.json"),
        &serde_json::to_vec_pretty(&alpaca)?,
    )
}

fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, bytes).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

/// Teacher totals over the stored runs.
struct Totals {
    runs: usize,
    solved: usize,
    calls: usize,
    tokens: usize,
    seconds: f64,
}

fn totals(runs: &[TeacherRun]) -> Totals {
    Totals {
        runs: runs.len(),
        solved: runs.iter().filter(|r| r.run.reward >= 1.0).count(),
        calls: runs.iter().map(|r| r.usage.calls).sum(),
        tokens: runs.iter().map(|r| r.usage.total()).sum(),
        seconds: runs.iter().map(|r| r.seconds).sum(),
    }
}

fn report_json(
    runs: &[TeacherRun],
    report: &FilterReport,
    kept: usize,
    runs_per_minute: Option<f64>,
) -> serde_json::Value {
    let t = totals(runs);
    json!({
        "teacher_runs": t.runs,
        "teacher_solved": t.solved,
        "teacher_pass_at_1": t.solved as f64 / t.runs.max(1) as f64,
        "model_calls": t.calls,
        "tokens": t.tokens,
        "tokens_per_solved": (t.solved > 0).then(|| t.tokens as f64 / t.solved as f64),
        "teacher_seconds": t.seconds,
        "runs_per_minute_this_time": runs_per_minute,
        "filters": report,
        "kept": kept,
        "by_role": catena_distill::tokens_by_role(runs.iter().flat_map(|r| &r.run.activations)),
    })
}

fn report_markdown(
    runs: &[TeacherRun],
    report: &FilterReport,
    runs_per_minute: Option<f64>,
) -> String {
    let t = totals(runs);
    let mut out = format!(
        "# Distillation\n\n- teacher runs: {} ({} solved, pass@1 {:.1}%)\n- model calls: {} ({:.1} per run); prompt and completion tokens: {} ({} per solved run)\n- teacher time: {:.0} s{}\n\n| stage | seen | kept |\n|---|---|---|\n",
        t.runs,
        t.solved,
        100.0 * t.solved as f64 / t.runs.max(1) as f64,
        t.calls,
        t.calls as f64 / t.runs.max(1) as f64,
        t.tokens,
        if t.solved > 0 {
            format!("{:.0}", t.tokens as f64 / t.solved as f64)
        } else {
            "none solved".into()
        },
        t.seconds,
        runs_per_minute
            .map(|r| format!("; {r:.2} teacher runs per minute in this invocation"))
            .unwrap_or_default(),
    );
    for stage in &report.stages {
        out.push_str(&format!(
            "| {:?} | {} | {} |\n",
            stage.stage, stage.seen, stage.kept
        ));
    }
    out.push_str("\n| agent | calls | prompt tokens | completion tokens |\n|---|---|---|---|\n");
    for role in catena_distill::tokens_by_role(runs.iter().flat_map(|r| &r.run.activations)) {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            role.role.name(),
            role.calls,
            role.prompt_tokens,
            role.completion_tokens
        ));
    }
    out
}

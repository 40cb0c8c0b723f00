//! `catena eval`: a model (and adapter) on a task set, through the same engine, sandbox and
//! chain runner as `catena run`, each run scored by the rewards RL trains on; a markdown and a
//! JSON report with SVG plots.

use super::run::Mode;
use crate::setup;
use anyhow::{Context, Result, bail};
use catena_agent::remote::{RemoteChat, RemoteSession};
use catena_agent::tools::ToolBox;
use catena_agent::{Budgets, CutShort, Decoding};
use catena_engine::llama::{BatchedSession, LlamaEngine, LocalChat};
use catena_engine_api::plan::{Overrides, batched_kv_caches};
use catena_engine_api::{SamplingParams, SessionOptions};
use catena_eval::{EvalTask, Report, TaskKind, TaskResult, plot};
use catena_hub::config::Paths;
use catena_protocol::{AnswerFormat, Profile};
use catena_runner::{Engine, Outcome, RunPlan, TaskRun, run_queue, run_task};
use catena_sandbox::Sandbox;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

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
    #[arg(long, default_value = "math", conflicts_with = "profile_file")]
    profile: String,

    /// A profile file of your own (TOML, like the shipped ones), to measure it on the same tasks
    /// as a shipped one; the report names it by its `name`.
    #[arg(long, value_name = "FILE")]
    profile_file: Option<PathBuf>,

    /// coa: one Chain-of-Agents generation a run; mas: the explicit multi-agent system (every
    /// agent a separate call), to compare tokens per solved task; chat: the model in a plain
    /// chat, one turn with no profile or tools, scored by the same verifier (the anchor).
    #[arg(long, value_enum, default_value_t = Mode::Coa)]
    mode: Mode,

    /// Run the model at an OpenAI-compatible server (`http://HOST:PORT/v1`), its key from
    /// CATENA_ENGINE_KEY. A Chain-of-Agents run (--mode coa) needs llama.cpp's llama-server.
    #[arg(long, value_name = "URL", conflicts_with_all = ["model", "adapter", "no_adapter"])]
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
    adapter: setup::RunAdapterArgs,

    /// Only the first N tasks.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,

    /// Folder for report.md, report.json and the plots, and runs.jsonl: every run's whole
    /// trajectory, written as the run ends (so a stopped evaluation keeps the runs it finished).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// Runs per task (K): the report gives pass@1 as avg@K (the mean share of a task's runs
    /// solved) and pass@K (tasks solved at least once).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    samples: u32,

    /// Runs per task (K), and the vote of each task's runs: the report adds maj@K (the share of
    /// tasks whose largest group of equivalent answers is right) beside pass@1 and pass@K.
    #[arg(long, value_name = "K", conflicts_with = "samples", value_parser = clap::value_parser!(u32).range(2..=64))]
    vote: Option<u32>,

    /// Let the model write freely: do not hold its chains to the protocol's grammar.
    #[arg(long)]
    free: bool,

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

    /// Runs decoded together (one batch a step over one KV cache; a run waiting for a tool
    /// leaves the batch until its observation is in). Each keeps its own 4,096-token context;
    /// a multi-agent run makes its agents' calls one after another in its own.
    /// Greedy results are the same as one at a time, up to llama.cpp's rounding (ARCHITECTURE.md).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    parallel: u32,

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
    let samples = args.vote.unwrap_or(args.samples);
    let temperature = temperature(samples, args.temperature)?;
    let samples = samples as usize;
    let mut tasks = catena_eval::read_tasks(&args.tasks)?;
    if let Some(limit) = args.limit {
        tasks.truncate(limit);
    }
    if tasks.is_empty() {
        bail!("no tasks to run");
    }
    let profile = match &args.profile_file {
        Some(file) => Profile::from_file(file)?,
        None => Profile::builtin(&args.profile)?,
    };
    // Code tasks' tests run in the sandbox too: one sandbox serves the tool and the scoring.
    let (tools, scoring_sandbox) = setup::task_tools(paths, &profile, &tasks, &args.search)?;
    let base_sampling = SamplingParams {
        temperature,
        top_p: 0.95,
        top_k: 40,
        seed: args.seed,
        ..SamplingParams::default()
    };
    if args.parallel > 1 && args.engine.is_some() {
        bail!(
            "--parallel decodes the runs of a model in this process together; with --engine the runs go one at a time"
        );
    }
    let eval = Evaluation {
        profile: &profile,
        tools: &tools,
        scoring: scoring_sandbox.as_deref(),
        boxed: matches!(profile.answer, AnswerFormat::Boxed),
        budgets: Budgets {
            max_tool_calls: profile.max_tool_calls,
            max_tokens: args.max_tokens,
            max_time: None,
        },
        base_sampling,
        tasks: &tasks,
        samples,
        print: !args.json,
        chains: args.mode != Mode::Chat,
        // A server cannot follow the protocol's grammar; the explicit agents have no chain.
        decoding: if args.free || args.engine.is_some() {
            Decoding::Free
        } else {
            Decoding::Protocol
        },
    };
    let started = Instant::now();
    let mut log = RunLog::create(args.out.as_deref())?;
    let (model_name, adapter, results) = evaluate(&args, paths, &eval, &mut log)?;
    let mut report = Report::new(
        model_name,
        adapter,
        profile.name.clone(),
        args.mode.name(),
        results,
        started.elapsed().as_secs_f64(),
    );
    if args.vote.is_some() {
        report.maj_at_k = Some(catena_eval::vote::majority_rate(
            &tasks,
            &report.results,
            scoring_sandbox.as_deref(),
        ));
    }
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

/// Runs every task on the model the arguments name, here or at a server: the model's name, the
/// adapter's, and the results in the report's order.
fn evaluate(
    args: &EvalArgs,
    paths: &Paths,
    eval: &Evaluation<'_>,
    log: &mut RunLog,
) -> Result<(String, Option<String>, Vec<TaskResult>)> {
    let base_sampling = eval.base_sampling;
    let remote = match (&args.engine, args.mode) {
        (Some(url), Mode::Mas | Mode::Chat) => {
            let (chat, served) =
                setup::remote_chat(url, args.engine_model.as_deref(), base_sampling)?;
            Some((served, RemoteModel::Chat(chat)))
        }
        (Some(url), Mode::Coa) => {
            let served = setup::served_model(url, args.engine_model.as_deref())?;
            let session = setup::remote_session(url, &served, base_sampling)?;
            Some((served, RemoteModel::LlamaServer(Box::new(session))))
        }
        (None, _) => None,
    };
    if let Some((name, mut remote)) = remote {
        let results = eval.one_at_a_time(remote.engine(args.mode), &name, log)?;
        return Ok((name, None, results));
    }
    let model_path = setup::model_path(args.model.as_deref(), paths)?;
    let adapter = args.adapter.resolve(&model_path, paths)?;
    let (engine, plan) = setup::load_planned(
        &model_path,
        Overrides {
            context: Some(RUN_CONTEXT),
            gpu_layers: args.gpu_layers,
            kv_cache: None,
            kv_caches: batched_kv_caches(args.parallel),
        },
        adapter.as_ref().map(|a| a.options.clone()),
        paths,
    )?;
    let options = SessionOptions {
        // The vote's tie-break reads each sampled token's log-probability.
        logprobs: args.vote.is_some(),
        ..setup::planned_session(plan.as_ref(), Some(RUN_CONTEXT), base_sampling)
    };
    let name = setup::model_name(&engine, &model_path);
    let results = match args.mode {
        mode if args.parallel > 1 => eval.batched(
            &engine,
            &options,
            (args.parallel as usize, mode),
            &name,
            log,
        )?,
        // One session for all runs: the prompt's shared beginning (system message and
        // instructions) stays in the KV cache and only each question is evaluated anew; a
        // task's later samples reuse its whole prompt.
        Mode::Coa => {
            eval.one_at_a_time(Engine::Chain(&mut engine.session(&options)?), &name, log)?
        }
        mode @ (Mode::Mas | Mode::Chat) => eval.one_at_a_time(
            mode.over_chat(&mut LocalChat::new(&engine, &options)?),
            &name,
            log,
        )?,
    };
    Ok((name, adapter.map(|a| a.name), results))
}

/// The context of each run (and of each sequence with --parallel).
const RUN_CONTEXT: u32 = 4096;

/// What every run of an evaluation shares.
struct Evaluation<'a> {
    profile: &'a Profile,
    tools: &'a ToolBox,
    /// The sandbox code tasks' tests run in.
    scoring: Option<&'a Sandbox>,
    boxed: bool,
    budgets: Budgets,
    base_sampling: SamplingParams,
    tasks: &'a [EvalTask],
    samples: usize,
    /// A progress line per run on stderr.
    print: bool,
    decoding: Decoding,
    /// Whether the runs write chains (not `--mode chat`): whether "malformed" means anything.
    chains: bool,
}

impl Evaluation<'_> {
    /// Run `sample` of a task is seeded with the base seed + `sample`.
    fn sampling(&self, sample: usize) -> SamplingParams {
        SamplingParams {
            seed: self.base_sampling.seed.wrapping_add(sample as u32),
            ..self.base_sampling
        }
    }

    /// Every (task, sample) pair in the order the report lists them.
    fn runs(&self) -> Vec<(usize, usize)> {
        (0..self.tasks.len())
            .flat_map(|task| (0..self.samples).map(move |sample| (task, sample)))
            .collect()
    }

    /// What every run shares, with `model` as the runs' model name.
    fn plan(&self, model: &str) -> RunPlan<'_> {
        RunPlan {
            profile: self.profile,
            tools: self.tools,
            model: model.to_string(),
            budgets: self.budgets,
            cancel: None,
            decoding: self.decoding,
            cut_short: CutShort::Answer,
        }
    }

    /// Run `sample` of task `index` on `engine`, scored, with its trajectory.
    fn run_one(
        &self,
        mut engine: Engine<'_>,
        plan: &RunPlan<'_>,
        (index, sample): (usize, usize),
    ) -> Result<(TaskResult, String)> {
        let task = &self.tasks[index];
        let run = TaskRun {
            id: &task.id,
            question: &task.question,
            sampling: self.sampling(sample),
            prefill: None,
        };
        let t0 = Instant::now();
        let outcome = run_task(engine.reborrow(), plan, &run, None, &mut |_| {})
            .with_context(|| format!("task {}", task.id))?;
        let result = self.scored(index, sample, &outcome, t0.elapsed());
        Ok((result, outcome.summary.trajectory))
    }

    /// Every run in order on one engine, each logged as it ends.
    fn one_at_a_time(
        &self,
        mut engine: Engine<'_>,
        model: &str,
        log: &mut RunLog,
    ) -> Result<Vec<TaskResult>> {
        let plan = self.plan(model);
        self.runs()
            .into_iter()
            .map(|run| {
                let (result, trajectory) = self.run_one(engine.reborrow(), &plan, run)?;
                log.keep(&result, &trajectory)?;
                Ok(result)
            })
            .collect()
    }

    /// Every run on `parallel` sequences decoded together, each taking the next run as it
    /// finishes one and logged as it ends; the results in the order one at a time gives. A
    /// multi-agent run makes its agents' calls one after another in its sequence.
    fn batched(
        &self,
        engine: &LlamaEngine,
        options: &SessionOptions,
        (parallel, mode): (usize, Mode),
        model: &str,
        log: &mut RunLog,
    ) -> Result<Vec<TaskResult>> {
        let runs = self.runs();
        let plan = self.plan(model);
        let mut results = Vec::with_capacity(runs.len());
        engine.with_sequences(options, parallel, |sessions| {
            let lanes = sessions
                .into_iter()
                .map(|session| match mode {
                    Mode::Coa => Lane::Chain(session),
                    Mode::Mas | Mode::Chat => Lane::Chat(LocalChat::over(engine, session)),
                })
                .collect();
            run_queue(
                lanes,
                runs.len(),
                |lane, job| self.run_one(lane.engine(mode), &plan, runs[job]).map(Some),
                |job, (result, trajectory)| {
                    log.keep(&result, &trajectory)?;
                    results.push((job, result));
                    Ok(())
                },
            )
        })??;
        results.sort_by_key(|(job, _)| *job);
        Ok(results.into_iter().map(|(_, result)| result).collect())
    }

    /// The run scored by the task's reward, with a progress line.
    fn scored(&self, index: usize, sample: usize, run: &Outcome, took: Duration) -> TaskResult {
        let task = &self.tasks[index];
        let summary = &run.summary;
        let score = catena_eval::score_run(
            task,
            summary.answer.as_deref(),
            &summary.trajectory,
            self.scoring,
        );
        let result = TaskResult {
            id: task.id.clone(),
            family: task.family.clone(),
            expected: task.answer.clone(),
            solved: score.solved,
            well_formed: catena_eval::well_formed(&summary.trajectory, self.boxed),
            answer: summary.answer.clone(),
            tool_calls: summary.tool_calls,
            generated_tokens: run.generated_tokens,
            seconds: took.as_secs_f64(),
            stop: summary.stop_reason.as_str().to_string(),
            sample,
            reward: score.reward,
            f1: score.f1,
            model_calls: run.model_calls,
            total_tokens: run.total_tokens,
            mean_logprob: summary.mean_logprob,
            // Log-probabilities are recorded for a vote (`--vote`), and so is this.
            printed: if summary.mean_logprob.is_some()
                && task.kind.unwrap_or_default() == TaskKind::Math
            {
                summary.printed.clone()
            } else {
                Vec::new()
            },
        };
        if self.print {
            let chain_ok = result.well_formed || !self.chains;
            progress(
                index,
                self.tasks.len(),
                task,
                (sample, self.samples),
                &result,
                chain_ok,
            );
        }
        result
    }
}

/// `runs.jsonl` of an evaluation's `--out` folder: a line for each run as it ends (in the order
/// runs end, which `--parallel` makes differ from the report's), so where a task was lost (the
/// budget, a loop, a wrong program, a wrong answer after a right observation) can be read back,
/// and a stopped evaluation keeps the runs it finished.
struct RunLog {
    file: Option<(PathBuf, std::fs::File)>,
}

impl RunLog {
    const FILE: &'static str = "runs.jsonl";

    /// A log in `out` (created, and emptied of an earlier evaluation's runs), or none.
    fn create(out: Option<&Path>) -> Result<Self> {
        let Some(out) = out else {
            return Ok(Self { file: None });
        };
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let path = out.join(Self::FILE);
        let file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self {
            file: Some((path, file)),
        })
    }

    /// Appends the run as one line, in one write.
    fn keep(&mut self, result: &TaskResult, trajectory: &str) -> Result<()> {
        use std::io::Write;
        let Some((path, file)) = &mut self.file else {
            return Ok(());
        };
        // The trajectory is the whole assistant turn: prefill, generated text and observations.
        let mut line = serde_json::to_vec(&serde_json::json!({
            "id": result.id,
            "sample": result.sample,
            "solved": result.solved,
            "stop": result.stop,
            "answer": result.answer,
            "trajectory": trajectory,
        }))?;
        line.push(b'\n');
        file.write_all(&line)
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// A model at a server: llama.cpp's for Chain-of-Agents runs, any OpenAI-compatible one for the
/// agents' calls.
enum RemoteModel {
    LlamaServer(Box<RemoteSession>),
    Chat(RemoteChat),
}

impl RemoteModel {
    fn engine(&mut self, mode: Mode) -> Engine<'_> {
        match self {
            RemoteModel::LlamaServer(session) => Engine::Chain(session.as_mut()),
            RemoteModel::Chat(chat) => mode.over_chat(chat),
        }
    }
}

/// One sequence of a batched context, for a chain or for the agents' calls.
enum Lane<'s> {
    Chain(BatchedSession<'s>),
    Chat(LocalChat<'s, BatchedSession<'s>>),
}

impl Lane<'_> {
    fn engine(&mut self, mode: Mode) -> Engine<'_> {
        match self {
            Lane::Chain(session) => Engine::Chain(session),
            Lane::Chat(chat) => mode.over_chat(chat),
        }
    }
}

/// One line on stderr per run.
fn progress(
    index: usize,
    tasks: usize,
    task: &EvalTask,
    (sample, samples): (usize, usize),
    result: &TaskResult,
    chain_ok: bool,
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
        match (result.solved, chain_ok) {
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
    let pass = match report.maj_at_k {
        Some(majority) => format!("{pass}  maj@{} {:.1}%", report.samples, 100.0 * majority),
        None => pass,
    };
    let f1 = report
        .mean_f1
        .map(|f1| format!("  mean F1 {:.1}%", 100.0 * f1))
        .unwrap_or_default();
    let per = if report.samples > 1 { "run" } else { "task" };
    // A plain chat (`--mode chat`) writes no chain to be valid.
    let chains = if report.mode == Mode::Chat.name() {
        String::new()
    } else {
        format!("  valid chains {:.1}%", 100.0 * report.format_rate)
    };
    format!(
        "{pass}{f1}{chains}  {:.0} tokens and {:.2} tool calls per {per}  {:.0} s",
        report.mean_generated_tokens, report.mean_tool_calls, report.wall_seconds
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

//! `catena bench`: prompt processing (pp) and generation (tg) speed through Catena's own engine
//! path, measured the way llama.cpp's `llama-bench` measures them, so the two can be compared
//! token for token (scripts/bench/engine.sh runs both).
//!
//! pp: the context, emptied, evaluates `n_prompt` random tokens in one batch.
//! tg: the context, emptied, takes one token, then generates `n_gen` tokens greedily through
//! `Session::generate` (the pick, detokenising and stop checks included), continuing past
//! end-of-turn tokens so every repetition generates exactly `n_gen`. Where the output layer is
//! on a GPU the picks are made inside llama.cpp's decode (`SessionOptions::greedy_on_device`)
//! unless `--host-picks` asks for the CPU's, from each token's logits, as a generation under a
//! grammar makes them.
//!
//! Each test keeps one context for its warm-up and all its repetitions and empties its KV cache
//! before each, as `llama-bench` does, so neither side times a new context's first decode (on
//! Vulkan a new context's first large batch appeared to cost more, docs/BENCHMARKS.md, "The whole
//! table on an H200").
//!
//! `--sequences 1,4,8,16`: aggregate generation over many sequences decoded together
//! (`LlamaEngine::with_sequences`), measured as llama.cpp's `llama-batched-bench` measures it
//! (scripts/bench/batched.sh runs both): each sequence evaluates `n_prompt` random tokens of its
//! own, then every sequence generates `n_gen` tokens; the rate is all sequences' generated
//! tokens over the wall time of that generation.

use crate::setup;
use anyhow::{Result, bail};
use catena_engine::llama::{LlamaEngine, LlamaSession};
use catena_engine_api::{
    GenerateLimits, SamplingParams, Session, SessionOptions, StartPrompt, StopMatcher,
};
use catena_hub::config::Paths;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct BenchArgs {
    /// A GGUF model; default: the default model.
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Prompt tokens of the pp test (0 skips it).
    #[arg(short = 'p', long, default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens of the tg test (0 skips it).
    #[arg(short = 'n', long, default_value_t = 128)]
    pub n_gen: usize,
    /// Repetitions (after a short warm-up, as llama-bench does).
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repetitions: usize,
    /// CPU threads (default: the physical cores).
    #[arg(short = 't', long)]
    pub threads: Option<i32>,
    /// Layers to offload to the GPU (default: all, in a GPU build).
    #[arg(long)]
    pub gpu_layers: Option<u32>,

    #[command(flatten)]
    pub adapter: setup::AdapterArgs,
    /// Batch size of prompt processing.
    #[arg(short = 'b', long, default_value_t = 512)]
    pub batch_size: u32,
    /// Measure aggregate generation over this many sequences decoded together, for each count
    /// given (e.g. 1,4,8,16), instead of pp and tg.
    #[arg(short = 's', long, value_delimiter = ',', value_name = "N,...")]
    pub sequences: Vec<usize>,
    /// Make the greedy picks on the CPU from each token's logits, as every generation under a
    /// grammar, with log-probabilities or at a temperature does (default, where the model's
    /// output layer is on a GPU: inside llama.cpp's decode, so only the token comes back).
    #[arg(long)]
    pub host_picks: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BenchArgs, paths: &Paths) -> Result<ExitCode> {
    if args.repetitions == 0 {
        bail!("--repetitions must be at least 1");
    }
    let model_path = setup::model_path(args.model.as_deref(), paths)?;
    let engine = setup::load_model(&model_path, args.gpu_layers, args.adapter.options())?;
    let options = SessionOptions {
        context_size: Some((args.n_prompt.max(args.n_gen) + 16) as u32),
        sampling: SamplingParams::greedy(),
        threads: args.threads,
        batch_size: args.batch_size,
        greedy_on_device: device_picks(&engine, &args),
        ..SessionOptions::default()
    };
    let mut rng = XorShift::default();
    if !args.sequences.is_empty() {
        return batched(&engine, &args, &mut rng);
    }
    let mut results = Vec::new();
    // Warm up as the vendored llama-bench does, in the context the test then measures in: the
    // whole prompt, one generated token. On a GPU the prompt's pipelines are compiled on first
    // use (docs/BENCHMARKS.md, "The GPU check").
    if args.n_prompt > 0 {
        let mut session = engine.session(&options)?;
        prompt_rate(&engine, &mut session, args.n_prompt, &mut rng)?;
        let rates = (0..args.repetitions)
            .map(|_| prompt_rate(&engine, &mut session, args.n_prompt, &mut rng))
            .collect::<Result<Vec<_>>>()?;
        results.push(("pp", args.n_prompt, rates));
    }
    if args.n_gen > 0 {
        let mut session = engine.session(&options)?;
        gen_rate(&engine, &mut session, 1, &mut rng)?;
        let rates = (0..args.repetitions)
            .map(|_| gen_rate(&engine, &mut session, args.n_gen, &mut rng))
            .collect::<Result<Vec<_>>>()?;
        results.push(("tg", args.n_gen, rates));
    }
    let info = engine.info();
    if args.json {
        let tests: Vec<_> = results
            .iter()
            .map(|(name, n, rates)| {
                let (mean, sd) = mean_sd(rates);
                serde_json::json!({
                    "test": format!("{name}{n}"),
                    "tokens_per_s": mean,
                    "stddev": sd,
                    "samples": rates,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "model": model_path,
                "architecture": info.architecture,
                "gpu_layers": info.gpu_layers,
                "threads": args.threads,
                "picks": picks_name(device_picks(&engine, &args)),
                "tests": tests,
            })
        );
    } else {
        for (name, n, rates) in &results {
            let (mean, sd) = mean_sd(rates);
            println!("{name}{n}: {mean:.2} ± {sd:.2} tokens/s");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Empties `session`'s context, then times its evaluation of `n` random tokens in one batch.
pub(crate) fn prompt_rate(
    engine: &LlamaEngine,
    session: &mut LlamaSession<'_>,
    n: usize,
    rng: &mut XorShift,
) -> Result<f64> {
    let vocab = engine.vocab_size() as u64;
    let tokens: Vec<i32> = (0..n).map(|_| (rng.next() % vocab) as i32).collect();
    session.truncate(0)?;
    let start = Instant::now();
    session.append_tokens(&tokens)?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Empties `session`'s context, then times one token evaluated and `n` generated greedily.
pub(crate) fn gen_rate(
    engine: &LlamaEngine,
    session: &mut LlamaSession<'_>,
    n: usize,
    rng: &mut XorShift,
) -> Result<f64> {
    let first = engine
        .bos_token()
        .unwrap_or_else(|| (rng.next() % engine.vocab_size() as u64) as i32);
    session.truncate(0)?;
    let no_stops = StopMatcher::default();
    let start = Instant::now();
    session.append_tokens(&[first])?;
    let mut generated = 0;
    while generated < n {
        let g = session.generate(
            &no_stops,
            GenerateLimits::tokens(n - generated),
            &mut |_| {},
        )?;
        generated += g.tokens;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// `--sequences`: the aggregate generation rate at each sequence count.
fn batched(engine: &LlamaEngine, args: &BenchArgs, rng: &mut XorShift) -> Result<ExitCode> {
    if args.n_gen == 0 || args.sequences.contains(&0) {
        bail!("--sequences needs -n above 0 and counts above 0");
    }
    let options = SessionOptions {
        context_size: Some((args.n_prompt + args.n_gen + 16) as u32),
        sampling: SamplingParams::greedy(),
        threads: args.threads,
        batch_size: args.batch_size,
        greedy_on_device: device_picks(engine, args),
        ..SessionOptions::default()
    };
    // Warm up: one sequence, a short prompt, one generated token. On a GPU also one unmeasured
    // round of each count: the sequences start generating a step or two apart, so a round meets
    // batches of every width up to its count, and a Vulkan driver compiles each new width's
    // pipelines on first use (about a second each on an H200, docs/BENCHMARKS.md, "The GPU
    // check"); llama-batched-bench decodes every sequence in each step and meets one width.
    batched_gen_rate(engine, &options, 1, args.n_prompt.min(32), 1, rng)?;
    if engine.info().gpu_layers > 0 {
        for &n in &args.sequences {
            batched_gen_rate(engine, &options, n, args.n_prompt, args.n_gen.min(16), rng)?;
        }
    }
    let mut tests = Vec::new();
    for &n in &args.sequences {
        let rates = (0..args.repetitions)
            .map(|_| batched_gen_rate(engine, &options, n, args.n_prompt, args.n_gen, rng))
            .collect::<Result<Vec<_>>>()?;
        let (mean, sd) = mean_sd(&rates);
        if args.json {
            tests.push(serde_json::json!({
                "sequences": n,
                "n_prompt": args.n_prompt,
                "n_gen": args.n_gen,
                "tokens_per_s": mean,
                "stddev": sd,
                "samples": rates,
            }));
        } else {
            println!(
                "{n} sequences, pp{} tg{}: {mean:.2} ± {sd:.2} generated tokens/s",
                args.n_prompt, args.n_gen
            );
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "threads": args.threads,
                "picks": picks_name(device_picks(engine, args)),
                "tests": tests,
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `sequences` sequences each evaluate `n_prompt` random tokens and sample one, then all
/// generate `n_gen` tokens more (past end-of-turn tokens too); returns the generated tokens of
/// all of them over the wall time of the second part.
fn batched_gen_rate(
    engine: &LlamaEngine,
    options: &SessionOptions,
    sequences: usize,
    n_prompt: usize,
    n_gen: usize,
    rng: &mut XorShift,
) -> Result<f64> {
    let vocab = engine.vocab_size() as u64;
    let prompts: Vec<Vec<i32>> = (0..sequences)
        .map(|_| {
            (0..n_prompt.max(1))
                .map(|_| (rng.next() % vocab) as i32)
                .collect()
        })
        .collect();
    let prompted = std::sync::Barrier::new(sequences + 1);
    let no_stops = StopMatcher::default();
    let took = engine.with_sequences(options, sequences, |sessions| {
        std::thread::scope(|scope| {
            let runs: Vec<_> = sessions
                .into_iter()
                .zip(&prompts)
                .map(|(mut session, prompt)| {
                    let (prompted, no_stops) = (&prompted, &no_stops);
                    scope.spawn(move || -> Result<()> {
                        let first = session.start_prompt(prompt).map(|_| {
                            session.generate(no_stops, GenerateLimits::tokens(1), &mut |_| {})
                        });
                        prompted.wait();
                        first??;
                        let mut generated = 0;
                        while generated < n_gen {
                            let limits = GenerateLimits::tokens(n_gen - generated);
                            generated += session.generate(no_stops, limits, &mut |_| {})?.tokens;
                        }
                        Ok(())
                    })
                })
                .collect();
            prompted.wait();
            let start = Instant::now();
            for run in runs {
                run.join()
                    .unwrap_or_else(|_| bail!("a benchmark sequence panicked"))?;
            }
            anyhow::Ok(start.elapsed())
        })
    })??;
    Ok((sequences * n_gen) as f64 / took.as_secs_f64())
}

/// Whether the greedy picks are made in llama.cpp's decode: where the logits are on a GPU,
/// unless `--host-picks` (on the CPU backend the picks from the logits are the faster ones:
/// `SessionOptions::greedy_on_device`).
fn device_picks(engine: &LlamaEngine, args: &BenchArgs) -> bool {
    !args.host_picks && engine.info().output_on_gpu()
}

/// Where the greedy picks were made, for the JSON report.
fn picks_name(on_device: bool) -> &'static str {
    if on_device { "device" } else { "host" }
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// A tiny deterministic generator for benchmark tokens (no need for a crate).
pub(crate) struct XorShift(u64);

impl Default for XorShift {
    fn default() -> Self {
        XorShift(0x2545_F491_4F6C_DD1D)
    }
}

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

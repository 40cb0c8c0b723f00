//! `catena doctor`: the machine, the model, the plan for running it here (GPU layers, context,
//! KV cache, with reasons), anything that will go wrong, and a short speed check with that plan.

use crate::commands::bench::{XorShift, gen_rate, prompt_rate};
use crate::setup;
use anyhow::{Context, Result};
use catena_engine::hardware::{self, Hardware};
use catena_engine::llama::{LlamaEngine, LoadOptions};
use catena_engine_api::plan::{Capacity, ModelSize, Overrides, Plan, plan};
use catena_engine_api::{KvCacheType, SamplingParams, SessionOptions};
use catena_gguf::inspect::{Inspection, human_bytes, inspect_file};
use catena_hub::config::Paths;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct DoctorArgs {
    /// A GGUF file or an installed model; default: the default model.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// Plan for this context length instead of choosing one.
    #[arg(long, value_name = "TOKENS")]
    pub ctx_size: Option<u32>,
    /// Plan with this many GPU layers instead of choosing.
    #[arg(long, value_name = "N")]
    pub gpu_layers: Option<u32>,
    /// Plan with this KV cache type (f16 or q8_0) instead of choosing.
    #[arg(long, value_name = "TYPE")]
    pub kv_cache: Option<KvCacheType>,
    /// Skip the speed check (which loads the model).
    #[arg(long)]
    pub quick: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Measured speed with the plan.
struct Speed {
    prompt: f64,
    generation: f64,
    gpu_layers: u32,
}

pub fn run(args: DoctorArgs, paths: &Paths) -> Result<ExitCode> {
    let hardware = hardware::probe().context("cannot ask llama.cpp for its devices")?;
    let stand_in = setup::uses_builtin_default(args.model.as_deref(), paths)
        .then(|| setup::stand_in_note(paths, true));
    let model_path = setup::model_path(args.model.as_deref(), paths)?;
    let inspection = inspect_file(&model_path)
        .with_context(|| format!("cannot read {}", model_path.display()))?;
    let overrides = Overrides {
        context: args.ctx_size,
        gpu_layers: args.gpu_layers,
        kv_cache: args.kv_cache,
        kv_caches: 1,
    };
    let planned = ModelSize::from_inspection(&inspection).map(|size| {
        plan(
            &size,
            Capacity {
                ram_available: hardware.ram_available,
                gpu_free: hardware.gpu_free(),
            },
            overrides,
        )
    });
    let problems = problems(&hardware, &inspection, planned.as_ref());
    let speed = match (&planned, args.quick || !inspection.usable()) {
        (Some(p), false) => Some(measure(&model_path, p)?),
        _ => None,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "machine": hardware,
                "model": inspection,
                "plan": planned,
                "speed": speed.as_ref().map(|s| json!({
                    "prompt_tokens_per_s": s.prompt,
                    "generation_tokens_per_s": s.generation,
                    "gpu_layers": s.gpu_layers,
                })),
                "problems": problems,
                "stand_in": stand_in,
            }))?
        );
    } else {
        print_machine(&hardware);
        println!("\nModel\n{inspection}");
        match &planned {
            Some(p) => print_plan(p, &inspection),
            None => println!("\nPlan\n  the header lacks the sizes a plan needs"),
        }
        if let Some(s) = &speed {
            println!(
                "\nSpeed (with the plan, {} GPU layers)\n  prompt      {:.1} tokens/s (128 tokens)\n  generation  {:.1} tokens/s (32 tokens)",
                s.gpu_layers, s.prompt, s.generation
            );
        }
        if let Some(note) = &stand_in {
            println!("\nAgent model\n  {note}");
        }
        if problems.is_empty() {
            println!("\nNo problems found.");
        } else {
            println!("\nProblems");
            for p in &problems {
                println!("  - {p}");
            }
        }
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_machine(h: &Hardware) {
    println!("Machine");
    println!("  system      {}", h.os);
    println!(
        "  CPU         {} ({} cores, {} threads); {}",
        h.cpu.model,
        h.cpu.physical_cores,
        h.cpu.logical_cores,
        h.cpu.features.join(" ")
    );
    println!(
        "  memory      {} available of {}",
        human_bytes(h.ram_available),
        human_bytes(h.ram_total)
    );
    println!(
        "  build       {}",
        match (h.gpu_backends_built.is_empty(), h.gpu_free().is_some()) {
            (true, _) => "CPU only".to_string(),
            (false, true) => format!("GPU backends: {}", h.gpu_backends_built.join(", ")),
            (false, false) => format!(
                "GPU backends: {}; no GPU found, so everything runs on the CPU",
                h.gpu_backends_built.join(", ")
            ),
        }
    );
    println!(
        "  CPU code    built for {}",
        catena_engine_api::build_cpu::build_features().join(" ")
    );
    for d in &h.devices {
        println!(
            "  device      {} ({}, {}): {} free of {}{}",
            d.name,
            d.description,
            d.backend,
            human_bytes(d.memory_free),
            human_bytes(d.memory_total),
            d.same_gpu_as
                .as_ref()
                .map(|first| format!(" (the same GPU as {first}, which llama.cpp uses)"))
                .unwrap_or_default()
        );
    }
}

fn print_plan(p: &Plan, model: &Inspection) {
    let layers = model.shape.layers.unwrap_or(0);
    println!("\nPlan");
    if u64::from(p.gpu_layers) > layers {
        println!("  GPU layers  all {layers} and the output head");
    } else {
        println!("  GPU layers  {} of {layers}", p.gpu_layers);
    }
    println!("  context     {} tokens", p.context);
    println!("  KV cache    {}", p.kv_cache.name());
    println!(
        "  memory      about {} on the GPU, {} in RAM",
        human_bytes(p.gpu_bytes),
        human_bytes(p.ram_bytes)
    );
    for reason in &p.reasons {
        println!("  because     {reason}");
    }
    println!(
        "  override    --gpu-layers N, --ctx-size TOKENS, --kv-cache f16|q8_0 (catena run, serve, doctor)"
    );
}

/// Everything that will make the model fail or run badly here.
fn problems(h: &Hardware, model: &Inspection, planned: Option<&Plan>) -> Vec<String> {
    let mut out: Vec<String> = model.problems.clone();
    if let Some(p) = planned {
        out.extend(p.problems.iter().cloned());
    }
    if !h.cpu.missing.is_empty() {
        out.push(format!(
            "this CPU lacks {}: llama.cpp's CPU kernels will be slow",
            h.cpu.missing.join(", ")
        ));
    }
    for gpu in &h.unused_gpus {
        out.push(if h.gpu_backends_built.is_empty() {
            format!(
                "{gpu} is present but this catena was built for the CPU only: build with `cargo build --release --features cuda` to use it"
            )
        } else {
            format!(
                "{gpu} is present but llama.cpp's {} backend cannot reach it: install its Vulkan driver (Debian and Ubuntu: mesa-vulkan-drivers for AMD and Intel; NVIDIA's own driver), or build with `--features cuda` for an NVIDIA GPU",
                h.gpu_backends_built.join(" and ")
            )
        });
    }
    out
}

/// A short pp/tg check with the plan's settings.
fn measure(path: &std::path::Path, p: &Plan) -> Result<Speed> {
    let engine = LlamaEngine::load(
        path,
        &LoadOptions {
            gpu_layers: Some(p.gpu_layers),
            ..LoadOptions::default()
        },
    )?;
    let options = SessionOptions {
        context_size: Some(p.context.min(1024)),
        sampling: SamplingParams::greedy(),
        kv_cache: p.kv_cache,
        ..SessionOptions::default()
    };
    let mut rng = XorShift::default();
    // Warm-up, as llama-bench does, with the measured shapes and in the contexts then measured
    // in: a Vulkan driver compiles each pipeline the first time it runs, which took seconds on an
    // H200 (docs/BENCHMARKS.md, "The GPU check") and would otherwise be read as the device's speed.
    let mut prompt_session = engine.session(&options)?;
    prompt_rate(&engine, &mut prompt_session, 128, &mut rng)?;
    let mut gen_session = engine.session(&options)?;
    gen_rate(&engine, &mut gen_session, 4, &mut rng)?;
    Ok(Speed {
        prompt: prompt_rate(&engine, &mut prompt_session, 128, &mut rng)?,
        generation: gen_rate(&engine, &mut gen_session, 32, &mut rng)?,
        gpu_layers: engine.info().gpu_layers,
    })
}

//! llama.cpp's Vulkan backend, which every Linux build carries, on Mesa's lavapipe: a Vulkan
//! driver that runs on the CPU, so GPU offload is tested on machines with no GPU. The suite
//! installs lavapipe (`scripts/setup/packages.sh --tests`); without it these tests fail and say so.
//!
//! llama.cpp leaves CPU-type Vulkan devices out unless `GGML_VK_VISIBLE_DEVICES` names them, and
//! reads that once, when its backends start. So every test here runs the engine in a child
//! process whose environment shows llama.cpp lavapipe alone: `catena` itself, or this test binary
//! again (the in-process half of a test runs only in that child).
#![cfg(target_os = "linux")]

mod common;

use catena_engine::llama::{LlamaEngine, LoadOptions, backend_devices};
use catena_engine_api::{GenerateLimits, SamplingParams, Session, SessionOptions, StopMatcher};
use std::path::PathBuf;
use std::process::{Command, Output};

/// Set in the child that runs a test's in-process half.
const CHILD: &str = "CATENA_TEST_ON_LAVAPIPE";

/// Mesa's lavapipe driver manifest for this machine's architecture.
fn lavapipe_icd() -> PathBuf {
    let dir = std::path::Path::new("/usr/share/vulkan/icd.d");
    let wanted = format!("lvp_icd.{}.json", std::env::consts::ARCH);
    let icd = dir.join(&wanted);
    assert!(
        icd.is_file(),
        "Mesa's lavapipe is not installed ({} is missing): `scripts/setup/packages.sh --tests` \
         installs it (Debian's mesa-vulkan-drivers)",
        icd.display()
    );
    icd
}

/// The environment in which llama.cpp sees lavapipe alone, as its Vulkan device 0.
fn on_lavapipe(command: &mut Command) -> &mut Command {
    let icd = lavapipe_icd();
    command
        .env("VK_DRIVER_FILES", &icd)
        .env("VK_ICD_FILENAMES", &icd)
        .env("GGML_VK_VISIBLE_DEVICES", "0")
        .env("CATENA_STORE_DIR", common::test_store_dir())
}

/// `catena ARGS` with lavapipe as the GPU.
fn catena_on_lavapipe(args: &[&str]) -> Output {
    on_lavapipe(&mut Command::new(common::catena_bin()))
        .args(args)
        .output()
        .expect("running catena")
}

/// Runs the test `name` of this binary again in a child on lavapipe; true in that child, where
/// the caller goes on with the test's in-process half.
fn in_child_on_lavapipe(name: &str) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = on_lavapipe(&mut Command::new(exe))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("running the test binary again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test: {stdout}"
    );
    false
}

/// The default model's greedy continuation of `prompt`: token ids and their log-probabilities
/// (NaN where the picks are made in llama.cpp's decode, `on_device`, which keeps no logits).
fn greedy(
    engine: &LlamaEngine,
    prompt: &str,
    tokens: usize,
    on_device: bool,
) -> (Vec<i32>, Vec<f32>) {
    let options = SessionOptions {
        context_size: Some(1024),
        sampling: SamplingParams::greedy(),
        logprobs: !on_device,
        greedy_on_device: on_device,
        ..SessionOptions::default()
    };
    let mut session = engine.session(&options).expect("a session");
    let parts = engine
        .chat_prompt("You are a helpful assistant.", prompt)
        .expect("the chat prompt");
    let prompt_tokens = session.append(&parts).expect("the prompt");
    session
        .generate(
            &StopMatcher::default(),
            GenerateLimits::tokens(tokens),
            &mut |_| {},
        )
        .expect("generation");
    let generated = &session.tokens()[prompt_tokens..];
    (
        generated.iter().map(|t| t.id).collect(),
        generated
            .iter()
            .map(|t| t.logprob.unwrap_or(f32::NAN))
            .collect(),
    )
}

#[test]
fn greedy_tokens_on_lavapipe_agree_with_the_cpu_backend() {
    if !in_child_on_lavapipe("greedy_tokens_on_lavapipe_agree_with_the_cpu_backend") {
        return;
    }
    let devices = backend_devices().expect("llama.cpp's devices");
    let vulkan = devices
        .iter()
        .find(|d| d.backend == "Vulkan")
        .unwrap_or_else(|| panic!("no Vulkan device: {devices:?}"));
    assert!(vulkan.gpu, "{vulkan:?}");
    assert!(
        vulkan.description.contains("llvmpipe"),
        "not lavapipe: {vulkan:?}"
    );

    let model = common::default_model();
    let on_cpu = LlamaEngine::load(
        &model,
        &LoadOptions {
            gpu_layers: Some(0),
            ..LoadOptions::default()
        },
    )
    .expect("the model on the CPU");
    let on_vulkan =
        LlamaEngine::load(&model, &LoadOptions::default()).expect("the model on Vulkan");
    assert_eq!(on_cpu.info().gpu_layers, 0);
    // Every block and the output head.
    assert_eq!(on_vulkan.info().gpu_layers, on_vulkan.info().layers + 1);

    // Why not bit-exact: lavapipe runs the Vulkan backend's shaders, which quantise activations
    // and sum in another order (and partly in f16) than the CPU backend's kernels, so the logits
    // differ in their last digits. Greedy decoding picks the same token unless two were within
    // that difference. Measured on the 2-core VM: all 32 tokens the same, log-probabilities
    // apart by 0.007 nats on average and 0.036 at most (and 64 of 64 on a longer answer). The
    // test allows a parting only at a near tie, after at least 16 tokens, and gaps up to 0.02
    // (mean) and 0.1 nats (max) on the shared tokens.
    const PROMPT: &str = "Write a Python function that returns the n-th Fibonacci number.";
    const TOKENS: usize = 32;
    let (cpu_ids, cpu_logprobs) = greedy(&on_cpu, PROMPT, TOKENS, false);
    let (vk_ids, vk_logprobs) = greedy(&on_vulkan, PROMPT, TOKENS, false);
    assert_eq!(cpu_ids.len(), TOKENS);
    let same = cpu_ids
        .iter()
        .zip(&vk_ids)
        .take_while(|(a, b)| a == b)
        .count();
    let gaps: Vec<f32> = cpu_logprobs[..same]
        .iter()
        .zip(&vk_logprobs[..same])
        .map(|(a, b)| (a - b).abs())
        .collect();
    let mean_gap = gaps.iter().sum::<f32>() / gaps.len().max(1) as f32;
    let max_gap = gaps.iter().copied().fold(0.0f32, f32::max);
    println!(
        "lavapipe against the CPU: {same} of {TOKENS} greedy tokens the same; log-probability \
         gap over them: mean {mean_gap:.4}, max {max_gap:.4} nats"
    );
    if same < TOKENS {
        // A near tie: both engines gave their own pick less than 0.55 probability.
        let near_tie = |lp: f32| lp < 0.55f32.ln();
        assert!(
            same >= 16 && near_tie(cpu_logprobs[same]) && near_tie(vk_logprobs[same]),
            "the backends parted at token {same} without a near tie:\ncpu {cpu_ids:?} \
             {cpu_logprobs:?}\nvk  {vk_ids:?} {vk_logprobs:?}"
        );
    }
    assert!(mean_gap <= 0.02 && max_gap <= 0.1, "{gaps:?}");

    // The picks made in the decode (`greedy_on_device`: llama.cpp's samplers in the graph, only
    // the token read back) are the picks from the same engine's logits. On lavapipe llama.cpp
    // keeps the output matrix in CPU memory (its product with 512 tokens, 297 MiB, is over the
    // driver's 128 MiB storage-buffer limit), so the head and the picks' pad and argmax run on
    // the CPU backend (`GGML_SCHED_DEBUG=2`); what this checks is the path through a build and a
    // context whose layers are on a Vulkan device.
    const ON_DEVICE: usize = 12;
    let (device_ids, _) = greedy(&on_vulkan, PROMPT, ON_DEVICE, true);
    assert_eq!(
        device_ids,
        vk_ids[..ON_DEVICE],
        "picks in the decode on lavapipe"
    );
}

/// A profile with a short prompt. Lavapipe is slow: on the 2-core VM it evaluates about one
/// token a second and generates one in 2.4 s (`catena bench -p 32 -n 4` there), so every token
/// of this test (the prompt, the prefill, the observation, the reply) costs seconds, and the
/// shipped profiles' 400-token instructions would take minutes.
const SHORT_PROFILE: &str = r#"
name = "short"
description = "One program, then a boxed answer"
tools = ["code"]
answer = "boxed"
max_tool_calls = 1
user_template = """
Run Python in <code>, then answer in <answer>.

{question}"""
"#;

/// A chain with its program run in the sandbox, with every layer on lavapipe.
#[test]
fn a_chain_with_a_tool_call_runs_with_every_layer_on_lavapipe() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("short.toml");
    std::fs::write(&profile, SHORT_PROFILE).unwrap();
    let prefill = "<code>\n```py\nprint(6*7)\n```\n</code>";
    let run = catena_on_lavapipe(&[
        "run",
        "-v",
        "--json",
        "--profile-file",
        profile.to_str().unwrap(),
        "--max-tokens",
        "4",
        "--prefill",
        prefill,
        "What is 6 times 7?",
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        common::first_observation(&run).contains("[STDOUT:BEGIN]\n42\n"),
        "{stderr}"
    );
    // The model's own tokens came after the observation, decoded on the Vulkan device.
    let events = common::json_lines(&run);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "block_delta" && e["source"] == "model"),
        "{events:?}"
    );
    assert!(stderr.contains("gpu_layers=25"), "{stderr}");
    assert!(!stderr.contains("no GPU found"), "{stderr}");
}

#[test]
fn the_doctor_names_the_vulkan_device_and_plans_every_layer_on_it() {
    let model = common::default_model();
    let model = model.to_str().unwrap();
    let output = catena_on_lavapipe(&["doctor", "--model", model, "--quick"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(text.contains("GPU backends: vulkan\n"), "{text}");
    assert!(text.contains("device      Vulkan0 (llvmpipe"), "{text}");
    assert!(
        text.contains("GPU layers  all 24 and the output head"),
        "{text}"
    );
    assert!(text.contains("No problems found."), "{text}");

    let output = catena_on_lavapipe(&["doctor", "--model", model, "--quick", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let devices = report["machine"]["devices"].as_array().unwrap();
    let vulkan = devices
        .iter()
        .find(|d| d["backend"] == "Vulkan")
        .unwrap_or_else(|| panic!("{devices:?}"));
    assert_eq!(vulkan["gpu"], true);
    assert_eq!(report["plan"]["gpu_layers"], 25);
}

/// With no Vulkan device the same binary runs on the CPU and says so in one line: no driver at
/// all, or only lavapipe, which llama.cpp leaves out unless it is named.
#[test]
fn without_a_vulkan_device_the_same_binary_runs_on_the_cpu_and_says_so_once() {
    let prefill = "<plan>compute it</plan>\n<code>\n```py\nprint(6*7)\n```\n</code>";
    let args = [
        "run",
        "-v",
        "--json",
        "--profile",
        "math",
        "--max-tokens",
        "8",
        "--prefill",
        prefill,
        "What is 6 times 7?",
    ];
    let no_driver = Command::new(common::catena_bin())
        .args(args)
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .env("CATENA_STORE_DIR", common::test_store_dir())
        .output()
        .expect("running catena");
    let lavapipe_not_named = Command::new(common::catena_bin())
        .args(args)
        .env("VK_DRIVER_FILES", lavapipe_icd())
        .env_remove("GGML_VK_VISIBLE_DEVICES")
        .env("CATENA_STORE_DIR", common::test_store_dir())
        .output()
        .expect("running catena");
    for run in [no_driver, lavapipe_not_named] {
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(common::first_observation(&run).contains("42"), "{stderr}");
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("no GPU found"))
            .collect();
        assert_eq!(said.len(), 1, "{stderr}");
        assert!(
            said[0].contains("running on the CPU (`catena doctor` says why)"),
            "{stderr}"
        );
        assert!(stderr.contains("gpu_layers=0"), "{stderr}");
    }
}

//! Agentic RL against the real default model, llama.cpp and the sandbox: rollouts are exactly
//! the tokens the engine evaluated, with sampling log-probabilities the trainer reproduces; a
//! DAPO update moves the rewarded rollout up and the other down, with rollouts held to the
//! protocol's grammar as by default; `catena train rl` runs from the shipped adapter,
//! checkpoints, resumes and refuses what it cannot use, and draws the next prompt in place of a
//! group whose rollouts score alike before that group ends.

mod common;

use catena_agent::Decoding;
use catena_agent::tools::profile_tools;
use catena_engine::llama::{AdapterOptions, LlamaEngine, LoadOptions};
use catena_engine_api::SessionOptions;
use catena_eval::EvalTask;
use catena_protocol::Profile;
use catena_sandbox::Limits;
use catena_trainer::rl::{RlOptions, RolloutSetup, Scored, sample_group, update};
use catena_trainer::{
    AdamW, AdamWConfig, BaseModel, Device, LoraConfig, Qwen2Lora, Target, export,
};
use serde_json::Value;
use std::process::Command;
use std::sync::Arc;

/// The trainer's log-probabilities of a rollout's sampled tokens.
fn trainer_logprobs(model: &Qwen2Lora, s: &Scored) -> Vec<f32> {
    model
        .token_logprobs(&s.rollout.tokens, &s.rollout.trained)
        .expect("log-probs")
}

fn logprob_sum(model: &Qwen2Lora, s: &Scored) -> f64 {
    trainer_logprobs(model, s)
        .iter()
        .map(|&l| f64::from(l))
        .sum()
}

#[test]
fn rollouts_match_the_trainer_and_an_update_follows_the_rewards() {
    let model_path = common::default_model();
    let base = BaseModel::load(&model_path, &Device::Cpu).expect("the base model");
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: vec![Target::Q, Target::V, Target::Down],
        ..LoraConfig::default()
    };
    let model = Qwen2Lora::new(&base, &lora, 5).expect("the training module");
    let dir = tempfile::tempdir().unwrap();
    let adapter = dir.path().join("adapter.gguf");
    export::write_gguf(&model.lora, "qwen2", &adapter, export::FactorPrecision::F32).unwrap();
    let engine = LlamaEngine::load(
        &model_path,
        &LoadOptions {
            gpu_layers: Some(0),
            adapter: Some(AdapterOptions {
                path: adapter,
                scale: 1.0,
            }),
            prompt_cache: None,
        },
    )
    .expect("the engine with the adapter");
    let profile = Profile::builtin("math").unwrap();
    let tools = profile_tools(&profile, || {
        Ok::<_, std::convert::Infallible>(Arc::new(common::python_sandbox(Limits::default())))
    })
    .unwrap();
    let setup = RolloutSetup {
        profile: &profile,
        tools: &tools,
        temperature: 1.0,
        decoding: Decoding::Protocol,
        max_tokens: 40,
        model_name: "test".into(),
    };
    let task: EvalTask = serde_json::from_value(
        serde_json::json!({"id": "t", "question": "What is 17 * 23?", "answer": "391"}),
    )
    .unwrap();
    // A group of four, decoded together.
    let options = SessionOptions {
        context_size: Some(2048u32),
        logprobs: true,
        ..SessionOptions::default()
    };
    let (group, _) = engine
        .with_sequences(&options, 4, |mut sessions| {
            sample_group(&setup, &mut sessions, &task, 11)
        })
        .unwrap()
        .expect("rollouts");
    assert_eq!(group.len(), 4);
    let prompt = engine.tokenize_parts(
        &engine
            .chat_prompt(&profile.system, &profile.user_message(&task.question))
            .unwrap(),
    );
    for r in &group {
        // The context starts with the prompt, untrained; every trained token was sampled.
        assert!(r.tokens.len() > prompt.len());
        assert!(
            r.tokens[..prompt.len()]
                .iter()
                .zip(&prompt)
                .all(|(a, &b)| *a == b as u32)
        );
        assert!(r.trained[..prompt.len()].iter().all(|t| !t));
        assert_eq!(
            r.trained.iter().filter(|&&t| t).count(),
            r.rollout_logprobs.len()
        );
        assert!(r.response_tokens() > 0 && r.response_tokens() <= 40);
        // Held to the math profile's grammar, every chain opens with its plan.
        let ids: Vec<i32> = r.tokens[prompt.len()..].iter().map(|&t| t as i32).collect();
        let text = engine.detokenize(&ids);
        assert!(text.starts_with("<plan>"), "{text:?}");
    }
    // Two different rollouts get opposite rewards.
    let a = group[0].clone();
    let b = group[1..]
        .iter()
        .find(|r| r.tokens != a.tokens)
        .expect("four samples at temperature 1 are not all the same")
        .clone();
    let kept = vec![
        Scored {
            rollout: a,
            advantage: 1.0,
        },
        Scored {
            rollout: b,
            advantage: -1.0,
        },
    ];
    // The trainer computes the rollout engine's log-probabilities: the grammar's mask chose
    // which tokens could be sampled, but the recorded probabilities are the policy's own.
    for s in &kept {
        let lps = trainer_logprobs(&model, s);
        let gap: f32 = lps
            .iter()
            .zip(&s.rollout.rollout_logprobs)
            .map(|(x, y)| (x - y).abs())
            .sum::<f32>()
            / lps.len() as f32;
        assert!(
            gap < 0.1,
            "mean |log p| gap {gap} between trainer and llama.cpp"
        );
    }
    let before: Vec<f64> = kept.iter().map(|s| logprob_sum(&model, s)).collect();
    let mut options = RlOptions::new(model_path.clone(), "unused".into(), dir.path().into());
    options.adam = AdamWConfig {
        lr: 2e-3,
        ..AdamWConfig::default()
    };
    let mut adam = AdamW::new(options.adam);
    let stats = update(&options, &model, &mut adam, &kept, 0).expect("the update");
    // On policy, one update: every ratio is 1, nothing is clipped, the weights are ~1.
    assert_eq!(stats.clip_fraction, 0.0);
    assert!(stats.entropy > 0.0 && stats.grad_norm > 0.0);
    let after: Vec<f64> = kept.iter().map(|s| logprob_sum(&model, s)).collect();
    assert!(
        after[0] > before[0],
        "rewarded rollout: {} -> {}",
        before[0],
        after[0]
    );
    assert!(
        after[1] < before[1],
        "penalised rollout: {} -> {}",
        before[1],
        after[1]
    );
}

fn tasks_file(dir: &std::path::Path) -> std::path::PathBuf {
    let lines: Vec<String> = [
        ("a", "What is 6 * 7?", "42"),
        ("b", "What is 9 + 10?", "19"),
    ]
    .iter()
    .map(|(id, q, a)| serde_json::json!({"id": id, "question": q, "answer": a}).to_string())
    .collect();
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// A small run: `settings` are `[steps, group, seed]`. Each step draws both tasks, their groups
/// under way at once.
fn rl_command(tasks: &std::path::Path, out: &std::path::Path, settings: [&str; 3]) -> Command {
    let [steps, group, seed] = settings;
    let mut cmd = Command::new(common::catena_bin());
    cmd.args(["train", "rl", "--json", "--device", "cpu"])
        .args(["--group", group, "--batch-prompts", "2"])
        .args(["--max-draw-factor", "1", "--parallel-groups", "2"])
        .args(["--max-tokens", "24", "--rank", "4", "--targets", "q,v"])
        .args(["--steps", steps, "--seed", seed])
        .arg("--base")
        .arg(common::default_model())
        .arg("--tasks")
        .arg(tasks)
        .arg("--out")
        .arg(out);
    cmd
}

/// Every rollout of these tasks scores 0 (their answers are no number), so each group turns
/// doubtful once half its rollouts have ended alike: the next prompt is drawn in its place while
/// it still runs, not after its slowest rollout, and the step ends at the cap on draws with both
/// groups dropped and no update.
#[test]
fn a_group_whose_rollouts_score_alike_gives_its_place_before_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    let lines = [("a", "What is 6 * 7?"), ("b", "What is 9 + 10?")].map(|(id, q)| {
        serde_json::json!({"id": id, "question": q, "answer": "no such answer"}).to_string()
    });
    std::fs::write(&tasks, lines.join("\n") + "\n").unwrap();
    let run = Command::new(common::catena_bin())
        .args(["train", "rl", "--json", "--device", "cpu"])
        .args(["--group", "4", "--batch-prompts", "1"])
        .args(["--max-draw-factor", "2", "--parallel-groups", "1"])
        .args(["--max-tokens", "24", "--rank", "4", "--targets", "q,v"])
        .args(["--steps", "1", "--seed", "4"])
        .arg("--base")
        .arg(common::default_model())
        .arg("--tasks")
        .arg(&tasks)
        .arg("--out")
        .arg(dir.path().join("rl"))
        .env("RUST_LOG", "catena_trainer=debug")
        .output()
        .expect("catena runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    // One group at a time was asked for: the second could only start beside the first as the
    // doubtful one's replacement.
    assert!(
        stderr.contains("drawn in place of doubtful groups"),
        "{stderr}"
    );
    let events = common::json_lines(&run);
    let groups: Vec<&Value> = events.iter().filter(|e| e["event"] == "group").collect();
    assert_eq!(groups.len(), 2, "{events:?}");
    assert!(groups.iter().all(|g| g["kept"] == false), "{groups:?}");
    let step = events
        .iter()
        .find(|e| e["event"] == "step")
        .expect("a step");
    assert_eq!(step["groups_sampled"], 2, "{step}");
    assert_eq!(step["groups_dropped"], 2, "{step}");
    assert_eq!(step["trained_tokens"], 0, "{step}");
}

/// [`rl_command`] starting from the adapter Catena ships for the default model, by its name.
fn rl_from_shipped(tasks: &std::path::Path, out: &std::path::Path, settings: [&str; 3]) -> Command {
    let mut cmd = rl_command(tasks, out, settings);
    cmd.args(["--adapter", "catena-coa-0.5b"]);
    cmd
}

#[test]
fn train_rl_runs_checkpoints_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = tasks_file(dir.path());
    let out = dir.path().join("rl");
    let first = rl_from_shipped(&tasks, &out, ["2", "2", "4"])
        .output()
        .expect("catena runs");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let events = common::json_lines(&first);
    let groups: Vec<&Value> = events.iter().filter(|e| e["event"] == "group").collect();
    assert_eq!(groups.len(), 4);
    let steps: Vec<&Value> = events.iter().filter(|e| e["event"] == "step").collect();
    assert_eq!(steps.len(), 2);
    for (s, drawn) in steps.iter().zip(groups.chunks(2)) {
        // Both tasks each step (the groups of one step under way together, a group scored as
        // it ends), every rollout counted, the kept ones trained.
        let mut tasks: Vec<&str> = drawn.iter().filter_map(|g| g["task"].as_str()).collect();
        tasks.sort_unstable();
        assert_eq!(tasks, ["a", "b"], "{drawn:?}");
        assert_eq!(s["rollouts"], 4);
        assert_eq!(s["groups_sampled"], 2);
        let kept = drawn.iter().filter(|g| g["kept"] == true).count();
        assert_eq!(s["groups_dropped"], 2 - kept);
        assert!(s["generated_tokens"].as_u64().unwrap() > 0);
        assert!(s["rollout_seconds"].as_f64().unwrap() > 0.0);
        // The scheduler's report: the prompts at least were evaluated, and a decode step
        // carried between one sequence and all four of the step's two groups of two.
        assert!(s["prefill_tokens"].as_u64().unwrap() > 0, "{s}");
        let width = s["mean_batch_width"].as_f64().unwrap();
        assert!((1.0..=4.0).contains(&width), "{s}");
    }
    for file in [
        "adapter.gguf",
        "peft/adapter_model.safetensors",
        "curves.svg",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    assert_eq!(latest.trim(), "step-000002");
    // It went on from the shipped adapter (rank 8 on all seven projections), not from a fresh
    // one of the command line's rank 4 on q and v.
    assert!(
        events[0]["init_adapter"]
            .as_str()
            .is_some_and(|p| p.ends_with("catena-coa-0.5b.gguf")),
        "{:?}",
        events[0]
    );
    let config: Value =
        serde_json::from_slice(&std::fs::read(out.join("peft/adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(config["r"], 8, "{config}");
    assert_eq!(config["target_modules"].as_array().unwrap().len(), 7);

    // Asked for one more step, the run resumes at step 2 and draws the next prompt.
    let second = rl_from_shipped(&tasks, &out, ["3", "2", "4"])
        .output()
        .expect("catena runs");
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let events = common::json_lines(&second);
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "resumed" && e["step"] == 2),
        "{events:?}"
    );
    let steps: Vec<&Value> = events.iter().filter(|e| e["event"] == "step").collect();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["step"], 3);

    // Another seed is another run: refused, nothing overwritten.
    let refused = rl_from_shipped(&tasks, &out, ["4", "2", "5"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("other settings"), "{err}");
}

#[test]
fn train_rl_refuses_what_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = tasks_file(dir.path());
    let out = dir.path().join("rl");
    // Not an adapter folder.
    let mut cmd = rl_command(&tasks, &out, ["1", "2", "4"]);
    cmd.arg("--adapter").arg(dir.path());
    let o = cmd.output().unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a PEFT adapter folder"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // GGUF files that are not an adapter for this model, and a name Catena ships nothing as.
    let model = common::default_model();
    let cut = dir.path().join("cut.gguf");
    let shipped =
        std::fs::read(common::package_dir().join("../models/adapters/catena-coa-0.5b.gguf"))
            .unwrap();
    std::fs::write(&cut, &shipped[..shipped.len() - 1000]).unwrap();
    // A header whose alignment is 0: candle's reader divided by it, and the run panicked.
    let key = b"general.alignment";
    let mut zero = b"GGUF".to_vec();
    for number in [
        &3u32.to_le_bytes()[..],
        &0u64.to_le_bytes(),
        &1u64.to_le_bytes(),
    ] {
        zero.extend_from_slice(number);
    }
    zero.extend_from_slice(&(key.len() as u64).to_le_bytes());
    zero.extend_from_slice(key);
    zero.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0]);
    let zero_path = dir.path().join("zero.gguf");
    std::fs::write(&zero_path, zero).unwrap();
    for (adapter, expected) in [
        (model.as_os_str(), "not a LoRA adapter"),
        (cut.as_os_str(), "truncated"),
        (zero_path.as_os_str(), "general.alignment is U32(0)"),
        (
            "no-such-adapter".as_ref(),
            "nor the name of a shipped adapter",
        ),
    ] {
        let mut cmd = rl_command(&tasks, &out, ["1", "2", "4"]);
        cmd.arg("--adapter").arg(adapter);
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        // An error, not a panic (101) or an abort.
        assert!(
            o.status.code() == Some(1) && err.contains(expected),
            "{err}"
        );
    }
    assert!(!out.join("adapter.gguf").exists());
    // A group of one has no advantage to compute.
    let o = rl_command(&tasks, &out, ["1", "1", "4"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--group"));
    // A task file that is not one.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"question\": 3}\n").unwrap();
    let o = rl_command(&bad, &out, ["1", "2", "4"]).output().unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.jsonl"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

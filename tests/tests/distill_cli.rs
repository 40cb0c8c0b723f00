//! The explicit multi-agent system end to end, on the real binary, default model and sandbox:
//! `catena run --mode mas`, `catena eval --mode mas` beside CoA, and `catena distill` storing
//! every teacher run and going on where it stopped.

mod common;

use serde_json::Value;
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

const TASKS: &str = "{\"id\": \"mul\", \"question\": \"What is 17 * 23?\", \"answer\": \"391\"}\n\
{\"id\": \"primes\", \"question\": \"How many primes are there below 100?\", \"answer\": \"25\"}\n\
{\"id\": \"sum\", \"question\": \"What is the sum of the integers from 1 to 50?\", \"answer\": \"1275\"}\n";

/// Completion tokens of all the agents' calls in one multi-agent run: enough for the planner,
/// the thinker and a tool agent (the tests' checks), few enough that a run's dozen prompts do
/// not make the suite slow.
const MAS_TOKENS: &str = "250";

fn tasks_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, TASKS).unwrap();
    path
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn run_mode_mas_streams_every_agent_and_counts_every_call() {
    let model = common::default_model();
    let output = common::catena(&[
        "run",
        "--mode",
        "mas",
        "--model",
        model.to_str().unwrap(),
        "--profile",
        "math",
        "--temperature",
        "0",
        "--max-tokens",
        MAS_TOKENS,
        "--json",
        "What is 17 * 23?",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let events = common::json_lines(&output);
    let started: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "block_started")
        .map(|e| e["tag"].as_str().unwrap())
        .collect();
    assert_eq!(started.first(), Some(&"plan"), "{started:?}");
    assert_eq!(started.get(1), Some(&"think"), "{started:?}");
    let allowed: HashSet<&str> = [
        "plan",
        "think",
        "code",
        "reflection",
        "double_check",
        "answer",
    ]
    .into_iter()
    .collect();
    assert!(started.iter().all(|t| allowed.contains(t)), "{started:?}");
    // Every whole code block is a tool call with an observation from the real sandbox; a block
    // the token budget cut off ends unclosed, last, and is not run.
    let ended: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "block_ended")
        .collect();
    assert_eq!(ended.len(), started.len());
    let cut: Vec<usize> = (0..ended.len())
        .filter(|&i| ended[i]["closed"] != true)
        .collect();
    let summary = events.last().unwrap();
    if !cut.is_empty() {
        assert_eq!(cut, [ended.len() - 1], "{ended:?}");
        assert_eq!(summary["stop_reason"], "token_budget", "{summary}");
    }
    let codes = ended
        .iter()
        .filter(|e| e["tag"] == "code" && e["closed"] == true)
        .count();
    let observations: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "observation")
        .collect();
    assert_eq!(observations.len(), codes);
    for o in &observations {
        let text = o["text"].as_str().unwrap();
        assert!(
            text.starts_with("[EXECUTED]") || text.starts_with("[FAILED]"),
            "{text}"
        );
    }
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["mode"], "mas");
    // One model call per agent block (the math profile reads no pages).
    let usage = &summary["usage"];
    assert_eq!(
        usage["calls"].as_u64(),
        Some(started.len() as u64),
        "{summary}"
    );
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    let completion = usage["completion_tokens"].as_u64().unwrap();
    assert!(prompt > 100 * started.len() as u64, "{summary}");
    assert!(completion > 0 && usage["cached_tokens"].as_u64().unwrap() < prompt);
    assert_eq!(summary["generated_tokens"].as_u64(), Some(completion));
    assert_eq!(summary["tool_calls"].as_u64(), Some(codes as u64));
    if summary["stop_reason"] == "answer" {
        assert_eq!(started.last(), Some(&"answer"));
        assert!(summary["answer"].is_string());
    }
}

#[test]
fn eval_mode_mas_reports_model_calls_and_tokens_beside_coa() {
    let model = common::default_model();
    let dir = tempfile::tempdir().unwrap();
    let tasks = tasks_file(dir.path());
    let eval = |mode: &str, parallel: &str| {
        let output = common::catena(&[
            "eval",
            "--mode",
            mode,
            "--parallel",
            parallel,
            "--model",
            model.to_str().unwrap(),
            "--tasks",
            tasks.to_str().unwrap(),
            "--limit",
            "1",
            "--max-tokens",
            MAS_TOKENS,
            "--json",
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    // The multi-agent run through the batched engine (its agents' calls in one sequence).
    let mas = eval("mas", "2");
    let coa = eval("coa", "1");
    assert_eq!(
        (mas["mode"].as_str(), coa["mode"].as_str()),
        (Some("mas"), Some("coa"))
    );
    let (mas_run, coa_run) = (&mas["results"][0], &coa["results"][0]);
    assert_eq!(coa_run["model_calls"], 1);
    // Planner, thinker and answerer at the least, each its own call.
    assert!(mas_run["model_calls"].as_u64().unwrap() >= 3, "{mas_run}");
    for run in [mas_run, coa_run] {
        let total = run["total_tokens"].as_u64().unwrap();
        let generated = run["generated_tokens"].as_u64().unwrap();
        assert!(total > generated && generated > 0, "{run}");
    }
}

/// One test, because a teacher run is the costly part (a dozen model calls): the first run is
/// the reference the server's run must equal, and the run the resumed distillation keeps.
#[test]
fn distill_stores_every_run_goes_on_where_it_stopped_and_a_teacher_at_a_server_runs_the_same() {
    let model = common::default_model();
    let dir = tempfile::tempdir().unwrap();
    let tasks = tasks_file(dir.path());
    let distill = |teacher: &str, out: &str, limit: &str, parallel: &str, key: &str| {
        let mut command = Command::new(common::catena_bin());
        command
            .args(["distill", "--teacher", teacher, "--tasks"])
            .arg(&tasks)
            .arg("--out")
            .arg(dir.path().join(out))
            .args(["--limit", limit, "--parallel", parallel])
            .args(["--temperature", "0", "--max-tokens", MAS_TOKENS])
            .env("CATENA_STORE_DIR", common::test_store_dir())
            .env("CATENA_ENGINE_KEY", key);
        if teacher == "local" {
            command.arg("--teacher-model").arg(&model);
        }
        command.output().unwrap()
    };
    let first = distill("local", "here", "1", "1", "");
    assert!(first.status.success(), "{}", stderr(&first));
    let log = dir.path().join("here").join("runs.jsonl");
    let first_line = std::fs::read_to_string(&log).unwrap();
    assert_eq!(first_line.lines().count(), 1);
    let stored: Value = serde_json::from_str(first_line.trim()).unwrap();

    // The same teacher at a server (a real `catena serve` on loopback, with a key of its own):
    // every agent wrote the same text, every tool answered the same, every call cost the same.
    let server_data = tempfile::tempdir().unwrap();
    let server = common::serve(Command::new(common::catena_bin()), |c| {
        c.env("CATENA_DATA_DIR", server_data.path())
            .env("CATENA_STORE_DIR", server_data.path().join("sessions"))
            .env("CATENA_API_KEY", "sk-teacher");
    });
    let remote_url = format!("{}/v1", server.base);
    let there = distill(&remote_url, "there", "1", "1", "sk-teacher");
    assert!(there.status.success(), "{}", stderr(&there));
    let text = std::fs::read_to_string(dir.path().join("there").join("runs.jsonl")).unwrap();
    let there: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(stored["run"]["activations"], there["run"]["activations"]);
    assert_eq!(stored["answer"], there["answer"]);
    for count in ["calls", "prompt_tokens", "completion_tokens"] {
        assert_eq!(stored["usage"][count], there["usage"][count], "{count}");
    }
    assert!(stored["usage"]["calls"].as_u64().unwrap() >= 3);
    // A key the server refuses is said in the server's words, and never printed.
    let refused = distill(&remote_url, "refused", "1", "1", "sk-wrong");
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert!(said.contains("refused the key (HTTP 401)"), "{said}");
    assert!(!said.contains("sk-wrong"), "{said}");
    drop(server);

    // A run being written when the process died: half a line at the end. The two runs left
    // then decode together in one context; each is stored as it ends.
    let half = &first_line[..first_line.len() / 2];
    std::fs::write(&log, format!("{first_line}{half}")).unwrap();
    let second = distill("local", "here", "3", "2", "");
    let said = stderr(&second);
    assert!(second.status.success(), "{said}");
    assert!(said.contains("was cut off"), "{said}");
    assert!(said.contains("Resuming: 1 of 3"), "{said}");
    assert!(said.contains("2 runs at a time"), "{said}");
    let text = std::fs::read_to_string(&log).unwrap();
    let runs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0], stored, "the stored run is kept as it was");
    let mut ids: Vec<&str> = runs
        .iter()
        .map(|r| r["run"]["task_id"].as_str().unwrap())
        .collect();
    ids[1..].sort_unstable();
    assert_eq!(ids, ["mul", "primes", "sum"]);
    for run in &runs {
        let activations = run["run"]["activations"].as_array().unwrap();
        assert_eq!(activations[0]["role"], "planner");
        assert!(run["usage"]["calls"].as_u64().unwrap() >= activations.len() as u64);
        let reward = run["run"]["reward"].as_f64().unwrap();
        assert!(reward == 0.0 || reward == 1.0);
    }

    let out = dir.path().join("here");
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["teacher_runs"], 3);
    let stages: Vec<&str> = report["filters"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["correctness", "format", "complexity", "quality"]);
    let solved = runs.iter().filter(|r| r["run"]["reward"] == 1.0).count() as u64;
    assert_eq!(
        report["filters"]["stages"][0]["kept"].as_u64(),
        Some(solved)
    );
    // The outputs hold exactly what the last stage kept.
    let kept = report["kept"].as_u64().unwrap() as usize;
    let sft = std::fs::read_to_string(out.join("sft.jsonl")).unwrap();
    assert_eq!(sft.lines().count(), kept);
    let alpaca: Value =
        serde_json::from_slice(&std::fs::read(out.join("alpaca.json")).unwrap()).unwrap();
    assert_eq!(alpaca.as_array().unwrap().len(), kept);
}

#[test]
fn a_server_engine_that_cannot_be_reached_is_named() {
    // Nothing listens on the discard port: the error names the server and what failed.
    let unreachable = common::catena(&[
        "run",
        "--mode",
        "mas",
        "--engine",
        "http://127.0.0.1:9/v1",
        "What is 1 + 1?",
    ]);
    assert!(!unreachable.status.success());
    let said = stderr(&unreachable);
    assert!(said.contains("http://127.0.0.1:9/v1"), "{said}");
    assert!(said.contains("could not be reached"), "{said}");
}

//! `catena eval` end to end: the real binary and default model on the verl parquet fixture
//! (a math task and a code task), K runs a task, the report's numbers and files.

mod common;

use serde_json::Value;
use std::path::PathBuf;

fn fixture() -> PathBuf {
    common::package_dir().join("../crates/eval/tests/fixtures/verl_tasks.parquet")
}

/// `runs.jsonl` in `out` holds each of the report's `results` once (in the order runs ended), with
/// the same outcome, and the run's trajectory: its observations when it called a tool.
fn assert_runs_logged(out: &std::path::Path, results: &[Value]) {
    let log = std::fs::read_to_string(out.join("runs.jsonl")).expect("runs.jsonl in --out");
    let mut lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), results.len(), "{log}");
    let key = |r: &Value| (r["id"].as_str().unwrap().to_string(), r["sample"].as_u64());
    lines.sort_by_key(key);
    let mut results = results.to_vec();
    results.sort_by_key(key);
    for (line, result) in lines.iter().zip(&results) {
        assert_eq!(key(line), key(result));
        for field in ["solved", "stop", "answer"] {
            assert_eq!(
                line[field], result[field],
                "{field}: {line} against {result}"
            );
        }
        let trajectory = line["trajectory"].as_str().unwrap();
        assert!(!trajectory.is_empty(), "{line}");
        let calls = result["tool_calls"].as_u64().unwrap() as usize;
        assert!(
            trajectory.matches("<observation>").count() >= calls,
            "{calls} calls: {trajectory}"
        );
    }
}

/// `catena eval` on the fixture with `args`.
fn eval(args: &[&str]) -> std::process::Output {
    let tasks = fixture();
    let mut all = vec!["eval", "--tasks", tasks.to_str().unwrap()];
    all.extend_from_slice(args);
    common::catena(&all)
}

#[test]
fn two_samples_a_task_make_one_result_each_and_pass_at_k() {
    common::default_model();
    let out = tempfile::tempdir().unwrap();
    let output = eval(&[
        "--samples",
        "2",
        "--limit",
        "2",
        "--max-tokens",
        "64",
        "--out",
        out.path().to_str().unwrap(),
        "--json",
    ]);
    assert!(
        output.status.success(),
        "catena eval failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report as JSON");
    assert_eq!(report["samples"], 2);
    assert_eq!(report["tasks"], 2);
    let results = report["results"].as_array().unwrap();
    let runs: Vec<(&str, u64)> = results
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["sample"].as_u64().unwrap()))
        .collect();
    assert_eq!(runs, [("0", 0), ("0", 1), ("1", 0), ("1", 1)]);
    assert_eq!(results[2]["expected"], "2 stdin/stdout tests");
    for r in results {
        let reward = r["reward"].as_f64().unwrap();
        assert!(reward == 0.0 || reward == 1.0, "{r}");
        // A chain cut by the budget writes its answer within at most the budget again
        // (PROTOCOL.md §2, item 5); the slack is the last step's tokens past a stop.
        assert!(r["generated_tokens"].as_u64().unwrap() <= 2 * 64 + 8, "{r}");
    }
    let (pass_1, pass_k) = (
        report["pass_at_1"].as_f64().unwrap(),
        report["pass_at_k"].as_f64().unwrap(),
    );
    assert!((0.0..=1.0).contains(&pass_1) && pass_1 <= pass_k && pass_k <= 1.0);
    let families: Vec<&str> = report["families"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["family"].as_str().unwrap())
        .collect();
    assert_eq!(families, ["lighteval/MATH", "livecodebench"]);
    assert!(report.get("mean_f1").is_none(), "no QA task ran");

    let markdown = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(markdown.contains("pass@1 (avg@2)"), "{markdown}");
    assert!(markdown.contains("![Pass rate by task family](pass_by_family.svg)"));
    let written: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(written["results"], report["results"]);
    assert_runs_logged(out.path(), results);
    for plot in ["pass_by_family.svg", "tokens.svg"] {
        let svg = std::fs::read_to_string(out.path().join(plot)).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}

/// A profile of one's own is measured on the same tasks, and named in the report; a broken one
/// is refused before anything runs, naming the file.
#[test]
fn a_profile_file_of_ones_own_is_evaluated_by_its_name() {
    common::default_model();
    let dir = tempfile::tempdir().unwrap();
    let shipped = common::package_dir().join("../crates/protocol/src/profiles/math.toml");
    let text = std::fs::read_to_string(shipped).unwrap();
    let own = dir.path().join("my-math.toml");
    std::fs::write(&own, text.replace("name = \"math\"", "name = \"my-math\"")).unwrap();
    let output = eval(&[
        "--profile-file",
        own.to_str().unwrap(),
        "--limit",
        "1",
        "--max-tokens",
        "48",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report as JSON");
    assert_eq!(report["profile"], "my-math", "{report}");
    assert_eq!(report["tasks"], 1);

    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "name = \"x\"\ntools = [\"plan\"]\n").unwrap();
    let output = eval(&["--profile-file", broken.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("broken.toml"), "{stderr}");
    let both = eval(&["--profile", "code", "--profile-file", own.to_str().unwrap()]);
    assert!(!both.status.success(), "one profile or the other");
}

#[test]
fn several_greedy_samples_are_refused() {
    let output = eval(&["--samples", "3", "--temperature", "0"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--samples 3 needs sampling"), "{stderr}");
    let output = eval(&["--samples", "0"]);
    assert!(!output.status.success(), "K is at least 1");
}

#[test]
fn runs_decoded_together_give_the_report_of_runs_one_at_a_time() {
    common::default_model();
    let results = |args: &[&str]| {
        let output = eval(args);
        assert!(
            output.status.success(),
            "catena eval {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_string(),
                    r["sample"].as_u64().unwrap(),
                    r["answer"].clone(),
                    r["generated_tokens"].as_u64().unwrap(),
                    r["total_tokens"].as_u64().unwrap(),
                    r["tool_calls"].as_u64().unwrap(),
                    r["stop"].as_str().unwrap().to_string(),
                    r["reward"].as_f64().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    // A greedy run through the batched engine (a chain with a tool call, its observation and
    // stop strings) is the run one session gives. With one run in flight its cells are laid
    // out as a single session's, so this holds to the bit; runs in flight together may differ
    // in llama.cpp's rounding (docs/ARCHITECTURE.md), which tests/tests/batched.rs bounds.
    let greedy = ["--limit", "1", "--max-tokens", "96", "--json"];
    let batched = results(&[&greedy[..], &["--parallel", "2"]].concat());
    assert_eq!(batched.len(), 1);
    assert_eq!(batched[0].5, 1, "the run calls its tool: {batched:?}");
    assert_eq!(batched, results(&greedy));

    // Sampled runs, two a task, on three sequences: every run, in the order one at a time
    // gives. (Their text may differ from one at a time: docs/ARCHITECTURE.md says why.)
    let sampled = results(&[
        "--samples",
        "2",
        "--limit",
        "2",
        "--max-tokens",
        "48",
        "--parallel",
        "3",
        "--json",
    ]);
    let runs: Vec<(&str, u64)> = sampled.iter().map(|r| (r.0.as_str(), r.1)).collect();
    assert_eq!(runs, [("0", 0), ("0", 1), ("1", 0), ("1", 1)]);

    // Runs together are for a model in this process only (the server is not asked).
    let refused = eval(&[
        "--parallel",
        "2",
        "--engine",
        "http://127.0.0.1:9/v1",
        "--limit",
        "1",
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--parallel decodes"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn a_vote_of_three_runs_a_task_adds_maj_at_k() {
    common::default_model();
    let out = tempfile::tempdir().unwrap();
    let output = eval(&[
        "--vote",
        "3",
        "--limit",
        "2",
        "--max-tokens",
        "64",
        "--parallel",
        "3",
        "--out",
        out.path().to_str().unwrap(),
        "--json",
    ]);
    assert!(
        output.status.success(),
        "catena eval failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report as JSON");
    assert_eq!(report["samples"], 3);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 6);
    // The tie-break's log-probabilities were recorded for every run.
    for r in results {
        let logprob = r["mean_logprob"].as_f64().unwrap_or_else(|| panic!("{r}"));
        assert!(logprob <= 0.0, "{r}");
    }
    // A vote picks one of a task's runs: never more tasks than pass@K, never fewer than the
    // tasks whose every run is solved.
    let majority = report["maj_at_k"].as_f64().unwrap();
    let all_solved = ["0", "1"]
        .iter()
        .filter(|id| {
            results
                .iter()
                .filter(|r| r["id"] == **id)
                .all(|r| r["solved"] == true)
        })
        .count() as f64
        / 2.0;
    assert!(all_solved <= majority, "{report}");
    assert!(
        majority <= report["pass_at_k"].as_f64().unwrap(),
        "{report}"
    );
    let markdown = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(markdown.contains("- maj@3: "), "{markdown}");
    // Decoded together, the runs end out of order; each is logged once all the same.
    assert_runs_logged(out.path(), results);
    // --vote sets the runs a task: with --samples too it is refused.
    let refused = eval(&["--vote", "3", "--samples", "2"]);
    assert!(!refused.status.success());
}

#[test]
fn the_plain_chat_anchor_is_scored_by_the_same_verifier() {
    common::default_model();
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("sums.jsonl");
    std::fs::write(
        &tasks,
        "{\"id\": \"a\", \"question\": \"What is 2 plus 3?\", \"answer\": \"5\"}\n\
         {\"id\": \"b\", \"question\": \"What is 10 minus 4?\", \"answer\": \"6\"}\n",
    )
    .unwrap();
    let output = common::catena(&[
        "eval",
        "--tasks",
        tasks.to_str().unwrap(),
        "--mode",
        "chat",
        "--no-adapter",
        "--max-tokens",
        "200",
        "--json",
    ]);
    assert!(
        output.status.success(),
        "catena eval failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report as JSON");
    assert_eq!(report["mode"], "chat");
    for result in report["results"].as_array().unwrap() {
        // One turn, no tools; the math verifier reads the reply's last boxed value.
        assert_eq!(result["tool_calls"], 0, "{result}");
        assert_eq!(result["model_calls"], 1, "{result}");
        assert_eq!(result["solved"], true, "{result}");
        assert_eq!(
            result["answer"],
            format!("\\boxed{{{}}}", result["expected"].as_str().unwrap()),
            "{result}"
        );
    }
    // A prefill starts a chain, which a plain chat has not.
    let refused = common::catena(&["run", "--mode", "chat", "--prefill", "<plan>x</plan>", "hi"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--mode chat has none"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

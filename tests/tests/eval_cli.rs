//! `catena eval` end to end: the real binary and default model on the verl parquet fixture
//! (a math task and a code task), K runs a task, the report's numbers and files.

mod common;

use serde_json::Value;
use std::path::PathBuf;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/eval/tests/fixtures/verl_tasks.parquet")
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
        assert!(r["generated_tokens"].as_u64().unwrap() <= 64 + 8, "{r}");
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
    for plot in ["pass_by_family.svg", "tokens.svg"] {
        let svg = std::fs::read_to_string(out.path().join(plot)).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
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

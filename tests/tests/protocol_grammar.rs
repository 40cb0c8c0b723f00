//! The protocol enforced while decoding (PROTOCOL.md §8), end to end: the real binary, the real
//! default model with its shipped adapter, the real sandbox.

mod common;

use serde_json::Value;

const TASK: &str = "How many primes are there below 10000?";

fn run(args: &[&str]) -> (std::process::Output, Vec<Value>) {
    common::default_model();
    let mut all = vec!["run", "--json", "--no-store"];
    all.extend_from_slice(args);
    let output = common::catena(&all);
    let lines = common::json_lines(&output);
    (output, lines)
}

/// One chain through the single session; `samples_are_decoded_together_and_put_to_a_vote` holds
/// three more, decoded together, to the same grammar.
#[test]
fn a_constrained_chain_never_leaves_the_protocol() {
    let seed = "1";
    let (output, events) = run(&["--seed", seed, "--max-tokens", "600", TASK]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = events.last().unwrap();
    assert_eq!(summary["type"], "summary");
    // Whatever the model wrote, nothing broke the protocol; a budget or the loop stop may
    // only cut the last block (and the fence in it) short.
    let issues: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "parse_issue")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    let cut = ["token_budget", "time_budget", "repetition"]
        .contains(&summary["stop_reason"].as_str().unwrap());
    assert!(
        issues.is_empty() || (cut && issues.iter().all(|i| i.ends_with("was never closed"))),
        "seed {seed}: {issues:?} {summary}"
    );
    let trajectory = summary["trajectory"].as_str().unwrap();
    assert!(
        trajectory.trim_start().starts_with("<plan>"),
        "seed {seed}: {trajectory}"
    );
    if summary["stop_reason"] == "answer" {
        assert!(
            catena_eval::well_formed(trajectory, true),
            "seed {seed}: {trajectory}"
        );
        let answer = summary["answer"].as_str().unwrap().trim();
        assert!(
            answer.starts_with("\\boxed{") && answer.ends_with('}'),
            "{answer}"
        );
    }
    // Every program the model wrote ran: each <code> has its observation.
    let calls = events.iter().filter(|e| e["type"] == "tool_call").count();
    let observations = events.iter().filter(|e| e["type"] == "observation").count();
    assert_eq!(calls, observations, "seed {seed}");
    assert_eq!(summary["tool_calls"].as_u64().unwrap() as usize, calls);
}

#[test]
fn a_prefill_that_breaks_the_protocol_is_refused_before_decoding() {
    let (output, events) = run(&["--seed", "1", "--prefill", "Sure! Let me count.", TASK]);
    // (No --max-tokens: the run must stop before its first token whatever its budget.)
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("does not fit the grammar") && stderr.contains("Let me count"),
        "{stderr}"
    );
    assert!(
        !events.iter().any(|e| e["source"] == "model"),
        "the model wrote something: {events:#?}"
    );
    // The same prefill runs with --free: the parser takes what it is given.
    let (output, events) = run(&[
        "--free",
        "--seed",
        "1",
        "--max-tokens",
        "16",
        "--prefill",
        "Sure! Let me count.",
        TASK,
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(events.last().unwrap()["type"], "summary");
}

/// A chain held to the grammar once wrote its fences on the tags' lines (`<code>```py`,
/// ```` ```</code> ````): the grammar allowed it, the parser read no call, and the chain ended its
/// turn without running its program. The grammar and the parser now agree.
#[test]
fn a_call_with_its_fences_on_the_tags_lines_is_run() {
    let (output, events) = run(&[
        "--profile",
        "math",
        "--temperature",
        "0",
        "--max-tokens",
        "40",
        "--prefill",
        "<plan>p</plan>\n<code>```py\nprint(6*7)\n```</code>",
        "What is 6*7?",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let issues: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "parse_issue")
        .collect();
    assert!(issues.is_empty(), "{issues:#?}");
    let observation = events
        .iter()
        .find(|e| e["type"] == "observation")
        .unwrap_or_else(|| panic!("the call did not run: {events:#?}"));
    assert!(observation.to_string().contains("42"), "{observation}");
    // The prefill's call, and whatever the model called after it.
    assert!(events.last().unwrap()["tool_calls"].as_u64() >= Some(1));
}

#[test]
fn samples_are_decoded_together_and_put_to_a_vote() {
    let store = tempfile::tempdir().unwrap();
    let store_dir = store.path().to_str().unwrap();
    common::default_model();
    let output = common::catena(&[
        "--store-dir",
        store_dir,
        "run",
        "--json",
        "--samples",
        "3",
        "--seed",
        "7",
        "--max-tokens",
        "400",
        TASK,
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines = common::json_lines(&output);
    let samples: Vec<&Value> = lines.iter().filter(|l| l["type"] == "sample").collect();
    assert_eq!(samples.len(), 3, "{lines:#?}");
    let seeds: Vec<u64> = samples
        .iter()
        .map(|s| s["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds, [7, 8, 9]);
    let vote = lines.last().unwrap();
    assert_eq!(vote["type"], "vote");
    // Every chain is in one group or abstained, once.
    let mut counted: Vec<u64> = vote["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| {
            g["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_u64().unwrap())
        })
        .chain(
            vote["abstained"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_u64().unwrap()),
        )
        .collect();
    counted.sort_unstable();
    assert_eq!(counted, [1, 2, 3]);
    // The winner is the largest group, and its answer is a chain's answer.
    let groups = vote["groups"].as_array().unwrap();
    if let Some(first) = groups.first() {
        let size = |g: &Value| g["samples"].as_array().unwrap().len();
        assert!(groups.iter().all(|g| size(g) <= size(first)));
        assert_eq!(vote["answer"], first["answer"]);
        let member = first["samples"][0].as_u64().unwrap() as usize;
        assert_eq!(samples[member - 1]["summary"]["answer"], first["answer"]);
    } else {
        assert!(vote["answer"].is_null());
    }
    for sample in &samples {
        // Held to the grammar as one chain is (`a_constrained_chain_never_leaves_the_protocol`):
        // at most the last block and its fence cut short, by the token budget or the loop stop.
        let summary = &sample["summary"];
        let issues = summary["parse_issues"].as_u64().unwrap();
        let cut =
            ["token_budget", "repetition"].contains(&summary["stop_reason"].as_str().unwrap());
        assert!(issues == 0 || (cut && issues <= 2), "{sample}");
        let trajectory = summary["trajectory"].as_str().unwrap();
        assert!(
            trajectory.trim_start().starts_with("<plan>"),
            "{trajectory}"
        );
        if summary["stop_reason"] == "answer" {
            assert!(catena_eval::well_formed(trajectory, true), "{trajectory}");
            let answer = summary["answer"].as_str().unwrap().trim();
            assert!(
                answer.starts_with("\\boxed{") && answer.ends_with('}'),
                "{answer}"
            );
        }
        assert!(
            sample["mean_logprob"].as_f64().is_some_and(|l| l <= 0.0),
            "{sample}"
        );
    }
    // Each chain is saved as a run of its own.
    let listed = common::catena(&["--store-dir", store_dir, "sessions", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(
        listed.lines().filter(|l| l.contains(TASK)).count(),
        3,
        "{listed}"
    );
    for sample in &samples {
        let id = sample["run_id"].as_str().unwrap();
        let shown = common::catena(&["--store-dir", store_dir, "sessions", "show", id]);
        assert!(shown.status.success(), "{id}");
    }
}

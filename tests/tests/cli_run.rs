//! `catena run` end to end: the real binary, the real default model, the real sandbox.

mod common;

use serde_json::Value;

const PREFILL: &str =
    "<plan>compute it</plan>\n<think>use code</think>\n<code>\n```py\nprint(2**100)\n```\n</code>";

/// The events `catena sessions show --events --json` gave for a run, as they were printed.
fn stored_events(run: &Value) -> Vec<&Value> {
    run["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["data"])
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn prefilled_tool_call_runs_then_the_model_continues() {
    common::default_model();
    let output = common::catena(&[
        "run",
        "--profile",
        "math",
        "--json",
        "--seed",
        "11",
        "--max-tokens",
        "64",
        "--prefill",
        PREFILL,
        "What is 2 to the power 100?",
    ]);
    assert!(
        output.status.success(),
        "catena failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let events = common::json_lines(&output);
    assert_eq!(events[0]["type"], "run_started");

    let observations = of_type(&events, "observation");
    assert_eq!(observations.len(), 1, "{events:#?}");
    let text = observations[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("[EXECUTED] Code exited with status 0."),
        "{text}"
    );
    assert!(text.contains("1267650600228229401496703205376"), "{text}");

    // The model continued after the observation.
    let at = events
        .iter()
        .position(|e| e["type"] == "observation")
        .unwrap();
    assert!(
        events[at + 1..]
            .iter()
            .any(|e| e["source"] == "model" && (e["type"] == "text" || e["type"] == "block_delta")),
        "the model wrote nothing after the observation"
    );

    let summary = events.last().unwrap();
    assert_eq!(summary["type"], "summary");
    for field in [
        "answer",
        "stop_reason",
        "tool_calls",
        "context_tokens",
        "evaluated_tokens",
        "generated_tokens",
        "timings",
    ] {
        assert!(
            summary.get(field).is_some(),
            "summary lacks {field}: {summary}"
        );
    }
    assert_eq!(summary["tool_calls"], 1);
    assert!(summary["generated_tokens"].as_u64().unwrap() > 0);
    // Every token of the context evaluated once: by this run, or earlier into the prompt cache.
    let cached = events[0]["cached_tokens"].as_u64().unwrap();
    assert_eq!(
        summary["evaluated_tokens"].as_u64().unwrap() + cached,
        summary["context_tokens"].as_u64().unwrap()
    );
    let trajectory = summary["trajectory"].as_str().unwrap();
    assert!(trajectory.starts_with(PREFILL));
    assert!(trajectory.contains(
        "</code>\n<observation>\n[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n1267650600228229401496703205376\n[STDOUT:END]\n</observation>\n\n"
    ));
}

#[test]
fn every_line_is_one_json_object_and_human_output_streams_blocks() {
    common::default_model();
    let output = common::catena(&[
        "run",
        "--profile",
        "math",
        "--temperature",
        "0",
        "--max-tokens",
        "24",
        "--prefill",
        "<plan>1. add</plan>\n<code>\n```py\nprint(40 + 2)\n```\n</code>",
        "What is 40 + 2?",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Not a terminal: no colour codes, but each block under its own heading.
    assert!(!stdout.contains('\u{1b}'), "{stdout}");
    assert!(stdout.contains("▍plan (prefill)"), "{stdout}");
    assert!(stdout.contains("▍observation · code"), "{stdout}");
    assert!(stdout.contains("42"), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("stop: "), "{stderr}");
}

/// A run whose answer is not what its last program printed says so under the answer: here the
/// chain is cut by its one-token budget after the program, and `--free` asks for no answer.
/// The run's summary keeps what the program printed, as the sandbox returned it.
#[test]
fn a_run_that_did_not_answer_its_programs_output_says_what_it_printed() {
    common::default_model();
    let run = |json: bool| {
        let mut args = vec![
            "run",
            "--profile",
            "math",
            "--free",
            "--no-store",
            "--temperature",
            "0",
            "--max-tokens",
            "1",
            "--prefill",
            "<plan>1. count</plan>\n<code>\n```py\nprint(\"primes:\", 1229)\n```\n</code>",
        ];
        if json {
            args.push("--json");
        }
        args.push("How many primes are there below 10000?");
        common::catena(&args)
    };
    let output = run(true);
    assert!(output.status.success());
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let summary = of_type(&events, "summary");
    assert_eq!(summary.len(), 1, "{events:?}");
    assert_eq!(summary[0]["printed"], serde_json::json!(["primes: 1229"]));
    let output = run(false);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("(no answer)"), "{stdout}");
    assert!(
        stderr.contains("note: the chain gave no answer; its last program printed 1229"),
        "{stderr}"
    );
}

#[test]
fn bad_arguments_are_explained() {
    let output = common::catena(&["run", "--profile", "nope", "task"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown profile `nope`"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.toml");
    std::fs::write(&profile, "name = \"x\"\n").unwrap();
    let output = common::catena(&["run", "--profile-file", profile.to_str().unwrap(), "task"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("p.toml"));

    let output = common::catena(&["run", "  "]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("the task is empty"));
}

#[test]
fn runs_are_stored_and_can_be_listed_rated_and_exported() {
    common::default_model();
    let store = tempfile::tempdir().unwrap();
    let catena = |args: &[&str]| {
        std::process::Command::new(common::catena_bin())
            .args(args)
            .env("CATENA_STORE_DIR", store.path())
            .output()
            .unwrap()
    };
    let output = catena(&[
        "run",
        "--profile",
        "math",
        "--json",
        "--temperature",
        "0",
        "--max-tokens",
        "16",
        "--prefill",
        PREFILL,
        "What is 2 to the power 100?",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown = common::json_lines(&output);

    let list = catena(&["sessions", "list", "--json"]);
    let sessions: Value = serde_json::from_slice(&list.stdout).unwrap();
    let session = sessions[0]["id"].as_str().unwrap().to_string();
    assert_eq!(sessions[0]["title"], "What is 2 to the power 100?");

    let show = catena(&["sessions", "show", &session, "--events", "--json"]);
    assert!(show.status.success());
    let run: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(run["status"], "finished");
    // Every event that was printed was stored, in the same order.
    let stored = stored_events(&run);
    assert_eq!(stored.len(), shown.len());
    for (printed, saved) in shown.iter().zip(stored) {
        assert_eq!(printed, saved);
    }

    let run_id = run["id"].as_str().unwrap();
    assert!(
        catena(&["sessions", "feedback", run_id, "good"])
            .status
            .success()
    );
    let out = store.path().join("good.jsonl");
    let export = catena(&[
        "sessions",
        "export",
        "--feedback",
        "good",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let line: Value = serde_json::from_str(std::fs::read_to_string(&out).unwrap().trim()).unwrap();
    assert_eq!(line["id"], run_id);
    let assistant = line["messages"][2]["content"].as_str().unwrap();
    assert!(assistant.starts_with(PREFILL));
    assert!(assistant.contains("<observation>\n[EXECUTED]"));
}

/// A store that fills up during a run (here a file-size limit on the process, as a full disk
/// would): the run still answers, warns that it was not saved completely, and what was saved is
/// the printed run's beginning, readable afterwards.
#[cfg(unix)]
#[test]
fn a_run_whose_store_fills_up_says_so_and_keeps_what_it_saved() {
    common::default_model();
    let store = tempfile::tempdir().unwrap();
    let catena = |limit: Option<u32>, args: &[&str]| {
        let mut command = std::process::Command::new("/bin/sh");
        // A write past the limit fails with EFBIG (SIGXFSZ ignored), as one on a full disk fails.
        let limit = limit.map_or(String::new(), |blocks| format!("ulimit -f {blocks}; "));
        command
            .arg("-c")
            .arg(format!("trap '' XFSZ; {limit}exec \"$0\" \"$@\""))
            .arg(common::catena_bin())
            .args(args)
            .env("CATENA_STORE_DIR", store.path());
        command.output().unwrap()
    };
    // The store is made first, so only the run's own writes meet the limit.
    assert!(catena(None, &["sessions", "list"]).status.success());
    let output = catena(
        Some(100),
        &[
            "run",
            "--profile",
            "math",
            "--json",
            "--temperature",
            "0",
            "--max-tokens",
            "200",
            "Explain step by step how to multiply 123 by 456 by hand.",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: the run was not saved completely"),
        "{stderr}"
    );
    assert!(!stderr.contains("Saved as run"), "{stderr}");
    let shown = common::json_lines(&output);

    let list = catena(None, &["sessions", "list", "--json"]);
    let sessions: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    let session = sessions[0]["id"].as_str().unwrap();
    let show = catena(None, &["sessions", "show", session, "--events", "--json"]);
    assert!(
        show.status.success(),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    let run: Value = serde_json::from_slice(&show.stdout).unwrap();
    // Its process ended before its end was written: the next store opened marks it.
    assert_eq!(run["status"], "interrupted", "{run}");
    let stored = stored_events(&run);
    assert!(
        !stored.is_empty() && stored.len() < shown.len(),
        "{} of {}",
        stored.len(),
        shown.len()
    );
    for (printed, saved) in shown.iter().zip(stored) {
        assert_eq!(printed, saved);
    }
}

/// The default model runs with the adapter Catena ships for it: the run says so, the store
/// records it, and the greedy chain is not the bare model's; `--no-adapter` runs the model as
/// published, and cannot be combined with an adapter of one's own.
#[test]
fn the_default_model_runs_with_its_shipped_adapter_unless_told_not_to() {
    common::default_model();
    let store = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--profile",
            "math",
            "--json",
            "--temperature",
            "0",
            "--max-tokens",
            "48",
        ];
        args.extend_from_slice(extra);
        args.push("What is 17 * 23?");
        let output = std::process::Command::new(common::catena_bin())
            .args(&args)
            .env("CATENA_STORE_DIR", store.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let events = common::json_lines(&output);
        let trajectory = events.last().unwrap()["trajectory"]
            .as_str()
            .unwrap()
            .to_string();
        (stderr, trajectory)
    };
    let (adapted_stderr, adapted) = run(&[]);
    assert!(
        adapted_stderr.contains("adapter: catena-coa-0.5b"),
        "{adapted_stderr}"
    );
    let (bare_stderr, bare) = run(&["--no-adapter"]);
    assert!(!bare_stderr.contains("adapter:"), "{bare_stderr}");
    assert_ne!(adapted, bare, "the adapter changed nothing");

    let list = std::process::Command::new(common::catena_bin())
        .args(["sessions", "list", "--json"])
        .env("CATENA_STORE_DIR", store.path())
        .output()
        .unwrap();
    let sessions: Value = serde_json::from_slice(&list.stdout).unwrap();
    let mut adapters: Vec<Value> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let id = s["id"].as_str().unwrap();
            let show = std::process::Command::new(common::catena_bin())
                .args(["sessions", "show", id, "--json"])
                .env("CATENA_STORE_DIR", store.path())
                .output()
                .unwrap();
            serde_json::from_slice::<Value>(&show.stdout).unwrap()["adapter"].clone()
        })
        .collect();
    adapters.sort_by_key(|a| a.to_string());
    assert_eq!(adapters, [Value::from("catena-coa-0.5b"), Value::Null]);

    let both = common::catena(&["run", "--adapter", "x.gguf", "--no-adapter", "task"]);
    assert_eq!(both.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
}

/// A loop across tool calls (PROTOCOL.md §2, item 4): the prefill holds three identical rounds
/// of thought, call and observation, then the same thought and call once more, still to run;
/// greedy decoding writes the round again word for word, and the third identical round in a row
/// that the agent sees (the prefill's last and two of the model's) ends the chain.
#[test]
fn a_chain_that_loops_through_its_tool_calls_is_stopped() {
    common::default_model();
    let round = "<think>Count them.</think>\n<code>\n```py\nprint(0)\n```\n</code>";
    let observation = "\n<observation>\n[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n0\n\
                       [STDOUT:END]\n</observation>\n\n";
    let prefill = format!(
        "<plan>\n1. Count the primes below 100 with a program.\n</plan>\n{}{round}",
        format!("{round}{observation}").repeat(3)
    );
    let output = common::catena(&[
        "run",
        "--profile",
        "math",
        "--json",
        "--no-store",
        "--temperature",
        "0",
        "--max-tokens",
        "1500",
        "--prefill",
        &prefill,
        "How many primes are there below 100?",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let events = common::json_lines(&output);
    let summary = of_type(&events, "summary")[0];
    assert_eq!(summary["stop_reason"], "repetition", "{summary:#}");
    // The prefill's call and two written by the model; without the stop, the tool budget (12
    // calls) would have ended it.
    assert_eq!(summary["tool_calls"], 3, "{summary:#}");
    let trajectory = summary["trajectory"].as_str().unwrap();
    assert_eq!(trajectory.matches("print(0)").count(), 6, "{trajectory}");
    // Then it was asked for its answer (PROTOCOL.md §2, item 5).
    let asked = of_type(&events, "answer_asked");
    assert_eq!(asked.len(), 1, "{events:#?}");
    assert_eq!(asked[0]["reason"], "repetition");
}

/// A chain cut short by a budget before it answered closes its block and gives its answer
/// (PROTOCOL.md §2, item 5): held to the grammar, a boxed value; the stop reason stays the
/// budget. A free chain ends as it was cut.
#[test]
fn a_chain_cut_short_is_asked_for_its_answer() {
    common::default_model();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--profile",
            "math",
            "--json",
            "--no-store",
            "--temperature",
            "0",
            "--max-tokens",
            "12",
        ];
        args.extend_from_slice(extra);
        args.push("How many primes are there below 100?");
        let output = common::catena(&args);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        common::json_lines(&output)
    };

    let events = run(&[]);
    let summary = of_type(&events, "summary")[0];
    assert_eq!(summary["stop_reason"], "token_budget", "{summary:#}");
    let answer = summary["answer"].as_str().unwrap_or_default();
    assert!(
        answer.trim().starts_with("\\boxed{") && answer.trim().ends_with('}'),
        "{summary:#}"
    );
    // Twelve tokens end the opening plan: Catena closes it, then asks.
    let closed_by_catena: Vec<_> = of_type(&events, "block_ended")
        .into_iter()
        .filter(|e| e["source"] == "runtime")
        .collect();
    assert_eq!(closed_by_catena.len(), 1, "{events:#?}");
    assert_eq!(closed_by_catena[0]["tag"], "plan");
    assert_eq!(
        of_type(&events, "answer_asked")[0]["reason"],
        "token_budget"
    );
    let trajectory = summary["trajectory"].as_str().unwrap();
    assert!(catena_eval::well_formed(trajectory, true), "{trajectory}");

    let events = run(&["--free"]);
    let summary = of_type(&events, "summary")[0];
    assert_eq!(summary["stop_reason"], "token_budget", "{summary:#}");
    assert!(summary["answer"].is_null(), "{summary:#}");
    assert!(of_type(&events, "answer_asked").is_empty());
}

/// A chain that has fallen into a loop is stopped once its latest 384 tokens repeat, not left to
/// spend its budgets: the prefill starts a plan that repeats a line (one a sampled chain of the
/// README's first example wrote until its time ran out), and the model goes on repeating it. One
/// chain (the single session) and two sampled together (the batch scheduler) are both stopped.
#[test]
fn a_chain_that_repeats_itself_is_stopped() {
    common::default_model();
    let prefill = format!("<plan>\n{}", "<===>\n".repeat(20));
    let budget = 2000.to_string();
    let catena = |extra: &[&str]| {
        let mut args = vec!["run", "--profile", "math", "--no-store"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "--max-tokens",
            &budget,
            "--prefill",
            &prefill,
            "How many primes are there below 100?",
        ]);
        let output = common::catena(&args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    };
    let stopped_by_the_loop = |stop_reason: &str, generated: u64| {
        assert_eq!(stop_reason, "repetition");
        // The window (384 tokens, all but 24 repeating) had to fill, and the budget is far off.
        assert!((360..1000).contains(&generated), "{generated} tokens");
    };

    // One chain (the single session) as a person sees it: told why the run ended, and the stop
    // line's counts (the notice is printed for this stop reason only).
    let human = catena(&["--temperature", "0"]);
    let stderr = String::from_utf8_lossy(&human.stderr);
    assert!(
        stderr.contains("writing the same text over and over"),
        "{stderr}"
    );
    // "stop: REASON · … (E evaluated, G generated) · …"
    let stop_line = stderr
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("stop: "))
        .unwrap_or_else(|| panic!("no stop line: {stderr}"));
    let reason = stop_line.split(" · ").next().unwrap_or_default();
    let generated = stop_line
        .split(" generated)")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of generated tokens: {stop_line}"));
    stopped_by_the_loop(reason, generated);

    // Two chains sampled together (the batch scheduler), in JSON.
    let sampled = catena(&[
        "--json",
        "--temperature",
        "0.3",
        "--samples",
        "2",
        "--seed",
        "4",
    ]);
    let events = common::json_lines(&sampled);
    let chains = of_type(&events, "sample");
    assert_eq!(chains.len(), 2, "{events:#?}");
    for chain in chains {
        let summary = &chain["summary"];
        stopped_by_the_loop(
            summary["stop_reason"].as_str().unwrap_or_default(),
            summary["generated_tokens"].as_u64().unwrap_or_default(),
        );
    }
}

/// A loop of a longer unit, a whole thought written again and again (one chain of the README's
/// first example wrote one for 95 seconds), is stopped once three more copies of it have been
/// generated: greedy decoding after a prefill of three copies goes on copying. This thought (693
/// characters) is longer than the 128 tokens the loop watch once looked for: the build before
/// ran to the 2,000-token budget on it.
#[test]
fn a_chain_that_repeats_a_long_thought_is_stopped() {
    common::default_model();
    let thought = "<think>Step 1: Understand the problem\nThe task is to find the number of \
        prime numbers below 10000. This means we need to write a program that checks each \
        number from 2 to 9999 to see if it is prime.\n\nStep 2: Identify prime numbers\nA \
        prime number is a natural number greater than 1 that has no positive divisors other than \
        1 and itself. We can check this by iterating through all numbers from 2 to 9999 and \
        checking if they are divisible by any number other than 1 and themselves.\n\nStep 3: \
        Count the prime numbers\nWe can count the prime numbers by iterating through the list of \
        prime numbers and counting them.\n\nStep 4: Print the result\nFinally, we can print the \
        number of prime numbers below 10000.\n\n</think>\n";
    let prefill = format!(
        "<plan>Count the primes below 10000.</plan>\n{}<think>",
        thought.repeat(3)
    );
    let output = common::catena(&[
        "run",
        "--profile",
        "math",
        "--no-store",
        "--json",
        "--temperature",
        "0",
        "--max-tokens",
        "2000",
        "--prefill",
        &prefill,
        "How many primes are there below 10000?",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let events = common::json_lines(&output);
    let summary = events.last().expect("a summary");
    assert_eq!(summary["stop_reason"], "repetition", "{summary:#}");
    // Three copies of the unit (less the tolerated sixteenth) and the one before them, about
    // 720 tokens: not the budget.
    let generated = summary["generated_tokens"].as_u64().unwrap_or_default();
    assert!((500..1500).contains(&generated), "{generated} tokens");
}

/// Runs of one profile share its instructions through the prompt cache (docs/ARCHITECTURE.md,
/// "The prompt cache"): a later run reads their KV cells instead of evaluating them and writes the
/// same chain; a damaged entry is evaluated again and replaced; `CATENA_PROMPT_CACHE=off` reads
/// none. (The cache is the user's own, which earlier tests may have filled: so the first run here
/// is not held to be a miss.)
#[test]
fn runs_of_one_profile_share_its_instructions_through_the_prompt_cache() {
    common::default_model();
    let prompts = common::paths()
        .prompt_cache_dir()
        .expect("the prompt cache is on");
    let run = |env: &[(&str, &str)]| {
        let output = std::process::Command::new(common::catena_bin())
            .args(["run", "--json", "--no-store", "--profile", "math"])
            .args([
                "--temperature",
                "0",
                "--max-tokens",
                "24",
                "What is 17 * 23?",
            ])
            .env("CATENA_STORE_DIR", common::test_store_dir())
            .envs(env.iter().copied())
            .output()
            .expect("running catena");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let events = common::json_lines(&output);
        let cached = events[0]["cached_tokens"].as_u64().unwrap();
        let summary = events.last().unwrap();
        let chain = (
            summary["trajectory"].clone(),
            summary["answer"].clone(),
            summary["generated_tokens"].clone(),
        );
        (cached, events[0]["prompt_tokens"].as_u64().unwrap(), chain)
    };
    let (_, prompt_tokens, first) = run(&[]);
    let (cached, _, second) = run(&[]);
    // Everything up to the question.
    assert!(
        cached >= 300 && cached + 5 < prompt_tokens,
        "{cached} of {prompt_tokens}"
    );
    assert_eq!(first, second);

    // The entry just read is the one used last: damage it.
    let newest = std::fs::read_dir(&prompts)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "kv"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .expect("an entry");
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&newest, &bytes).unwrap();
    let (cached, _, third) = run(&[]);
    assert_eq!(cached, 0, "a damaged entry was used");
    assert_eq!(first, third);
    let rewritten = std::fs::read(&newest).expect("the entry written again");
    assert_eq!(rewritten.len(), bytes.len());
    assert_ne!(rewritten, bytes);

    let (cached, _, off) = run(&[("CATENA_PROMPT_CACHE", "off")]);
    assert_eq!(cached, 0, "the cache was read although it is off");
    assert_eq!(first, off);
}

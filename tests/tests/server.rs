//! `catena serve` end to end: the real binary on loopback with the default model, the official
//! OpenAI and Anthropic Python clients, the agent API, a SIGKILL in the middle of a run, a bounded
//! load test, and parallel slots (`--parallel N`) serving requests side by side.

mod common;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A `catena serve` process; killed when dropped.
struct Served {
    child: common::Reaped,
    base: String,
    model: String,
    /// Kept open: the server may print more.
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Served {
    fn start(store: &Path, extra: &[&str], api_key: Option<&str>) -> Served {
        Served::start_env(
            store,
            extra,
            api_key.map(|k| ("CATENA_API_KEY", k)).as_slice(),
        )
    }

    /// [`Served::start`] with `env` set for the server (`CATENA_API_KEY` only from there).
    fn start_env(store: &Path, extra: &[&str], env: &[(&str, &str)]) -> Served {
        Served::launch(Command::new(common::catena_bin()), store, extra, env)
    }

    /// A server whose files may not grow past `blocks` (`ulimit -f`): a write past it fails with
    /// EFBIG (SIGXFSZ ignored), as one on a full disk fails.
    #[cfg(unix)]
    /// Its log goes to a file already past the limit, as a log on a full disk does: no line of
    /// it can be written.
    fn start_with_file_limit(store: &Path, blocks: u32) -> Served {
        let log = store.join("serve.log");
        std::fs::write(&log, vec![b'\n'; blocks as usize * 512 + 1]).unwrap();
        let mut sh = Command::new("/bin/sh");
        sh.arg("-c")
            .arg(format!(
                "trap '' XFSZ; ulimit -f {blocks}; exec \"$0\" \"$@\" 2>>'{}'",
                log.display()
            ))
            .arg(common::catena_bin());
        Served::launch(sh, store, &[], &[])
    }

    /// Starts `program` (the binary, or a wrapper that execs it) as the server.
    fn launch(program: Command, store: &Path, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let served = common::serve(program, |cmd| {
            cmd.args(["--ctx-size", "4096", "--store-dir"])
                .arg(store)
                .args(extra)
                .env_remove("CATENA_API_KEY")
                .envs(env.iter().copied());
            // With parallel slots, the slots are the kept caches.
            if !extra.contains(&"--parallel") {
                cmd.args(["--sessions", "2"]);
            }
        });
        let common::Serving {
            process,
            base,
            stdout,
        } = served;
        let model = common::default_model();
        Served {
            child: process,
            base,
            model: model.file_stem().unwrap().to_string_lossy().into_owned(),
            _stdout: stdout,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn kill9(&mut self) {
        // SIGKILL: no chance to clean up.
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The run as the server reads it (`/v1/agent/runs/{id}`).
fn stored_run(client: &reqwest::blocking::Client, server: &Served, run: &str) -> Value {
    client
        .get(server.url(&format!("/v1/agent/runs/{run}")))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// Every stored session's id with its runs, as the server lists them (`/v1/sessions`, then
/// `/v1/sessions/{id}`).
fn stored_sessions(
    client: &reqwest::blocking::Client,
    server: &Served,
) -> Vec<(String, Vec<Value>)> {
    let get =
        |path: &str| -> Value { client.get(server.url(path)).send().unwrap().json().unwrap() };
    let sessions = get("/v1/sessions");
    sessions["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| {
            let id = session["id"].as_str().unwrap();
            let runs = get(&format!("/v1/sessions/{id}"));
            (id.to_string(), runs["runs"].as_array().unwrap().clone())
        })
        .collect()
}

fn http() -> reqwest::blocking::Client {
    common::http_client(Duration::from_secs(600))
}

/// Runs one of the client scripts (`tests/python/<script>`) against `base_url`: every check it
/// makes must pass, and `checks` of them must have run.
fn client_checks(server: &Served, script: &str, base_url: &str, checks: usize) {
    let script = common::package_dir().join("python").join(script);
    let output = Command::new(common::test_python())
        .arg(&script)
        .arg(base_url)
        .arg(&server.model)
        .arg("test-key")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    eprintln!("{out}");
    assert!(
        output.status.success(),
        "checks failed: {out}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["failed"], json!({}));
    assert_eq!(out["passed"].as_object().unwrap().len(), checks, "{out}");
}

#[test]
fn function_calling_and_the_responses_api_hold_for_the_official_client() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &[], Some("test-key"));
    client_checks(&server, "openai_tools.py", &server.url("/v1"), 12);
}

/// Anthropic's Messages API through Anthropic's official SDK (which sends the key as
/// `x-api-key`): plain and streamed messages, tool calls and results, `tool_choice`, structured
/// output, and its typed errors for bad requests, a too-long prompt and a wrong key.
#[test]
fn the_messages_api_holds_for_the_official_anthropic_client() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &[], Some("test-key"));
    // The SDK adds `/v1/messages` to the server's root.
    client_checks(&server, "anthropic_client.py", &server.url(""), 15);
}

#[test]
fn the_official_openai_client_works_unchanged() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &["--max-body-kib", "1024"], Some("test-key"));
    let script = common::package_dir().join("python/openai_client.py");
    let output = Command::new(common::test_python())
        .arg(&script)
        .arg(server.url("/v1"))
        .arg(&server.model)
        .arg("test-key")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&out).unwrap());

    assert_eq!(out["models"], json!([server.model]));
    let plain = &out["plain"];
    assert_eq!(plain["object"], "chat.completion");
    assert_eq!(plain["role"], "assistant");
    assert!(!plain["content"].as_str().unwrap().is_empty());
    assert!(["stop", "length"].contains(&plain["finish_reason"].as_str().unwrap()));
    let usage = &plain["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );

    let stream = &out["stream"];
    assert!(stream["pieces"].as_u64().unwrap() >= 2, "{stream}");
    assert!(
        stream["content"].as_str().unwrap().contains('3'),
        "{stream}"
    );
    assert!(stream["finish_reason"].is_string());
    assert!(stream["usage"]["completion_tokens"].as_u64().unwrap() > 0);

    let stop = &out["stop"];
    assert!(!stop["content"].as_str().unwrap().contains('d'), "{stop}");
    assert_eq!(stop["finish_reason"], "stop", "{stop}");

    // The second turn found the first turn's tokens in the kept KV cache.
    let turns = out["turns"].as_array().unwrap();
    let first_prompt = turns[0]["prompt_tokens"].as_u64().unwrap();
    let second_prompt = turns[1]["prompt_tokens"].as_u64().unwrap();
    let cached = turns[1]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= first_prompt,
        "cached {cached} of {second_prompt}; first turn {first_prompt}"
    );
    assert!(
        second_prompt - cached < 30,
        "re-evaluated {} tokens",
        second_prompt - cached
    );

    let unknown = &out["unknown_model"];
    assert_eq!(unknown["status"], 404, "{unknown}");
    assert_eq!(unknown["class"], "NotFoundError");
    assert_eq!(error_field(unknown, "code"), "model_not_found");
    let bad_key = &out["bad_key"];
    assert_eq!(bad_key["status"], 401, "{bad_key}");
    assert_eq!(bad_key["class"], "AuthenticationError");
    assert_eq!(error_field(bad_key, "code"), "invalid_api_key");
    assert_eq!(out["empty_messages"]["status"], 400);
    for (refused, param) in [
        ("logprobs", "logprobs"),
        ("logit_bias", "logit_bias"),
        ("penalty_range", "presence_penalty"),
        ("response_logprobs", "include"),
        ("response_image", "input"),
    ] {
        let error = &out[refused];
        assert_eq!(error["status"], 400, "{refused}: {error}");
        assert_eq!(error["class"], "BadRequestError", "{refused}: {error}");
        assert_eq!(error_field(error, "param"), param, "{refused}: {error}");
    }
    // Greedy both times, so only the penalty tells the replies apart.
    let cats = |reply: &str| reply.matches("cat").count();
    let penalties = &out["penalties"];
    let (none, frequency) = (
        penalties["none"].as_str().unwrap(),
        penalties["frequency"].as_str().unwrap(),
    );
    assert!(
        cats(frequency) < cats(none) && cats(none) >= 10,
        "{penalties}"
    );
    let malformed = &out["malformed_json"];
    assert_eq!(malformed["status"], 400, "{malformed}");
    assert_eq!(malformed["body"]["error"]["type"], "invalid_request_error");
    let oversized = &out["oversized"];
    assert_eq!(oversized["status"], 413, "{oversized}");
    assert_eq!(oversized["body"]["error"]["code"], "request_too_large");

    // Chat completions are stored: the two turns of one conversation share a session.
    let sessions: Value = http()
        .get(server.url("/v1/sessions"))
        .bearer_auth("test-key")
        .send()
        .unwrap()
        .json()
        .unwrap();
    let ada = sessions["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["title"].as_str().unwrap().contains("My name is Ada"))
        .expect("the conversation is stored");
    assert_eq!(ada["runs"], 2, "{ada}");
}

/// The openai client keeps either the whole body or its `error` object.
fn error_field<'a>(error: &'a Value, field: &str) -> &'a str {
    let body = &error["body"];
    body["error"][field]
        .as_str()
        .or_else(|| body[field].as_str())
        .unwrap_or_default()
}

/// Starts an agent run; returns its id.
fn start_run(client: &reqwest::blocking::Client, server: &Served, body: &Value) -> String {
    let response = client
        .post(server.url("/v1/agent/runs"))
        .json(body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 202);
    response.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Reads SSE events from a response until `enough` says stop; returns them as JSON.
fn read_events(
    response: reqwest::blocking::Response,
    mut enough: impl FnMut(&[Value]) -> bool,
) -> Vec<Value> {
    let mut reader = BufReader::new(response);
    let mut events = Vec::new();
    let mut data = String::new();
    let mut id = None;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if let Some(v) = l.strip_prefix("data:") {
            data.push_str(v.trim_start());
        } else if let Some(v) = l.strip_prefix("id:") {
            id = v.trim().parse::<u64>().ok();
        } else if l.is_empty() && !data.is_empty() {
            let mut event: Value = serde_json::from_str(&data).unwrap();
            event["_seq"] = json!(id);
            events.push(event);
            data.clear();
            if enough(&events) {
                break;
            }
        }
    }
    events
}

#[test]
fn an_agent_run_survives_a_sigkill_of_the_server() {
    let store = tempfile::tempdir().unwrap();
    let mut server = Served::start(store.path(), &[], None);
    let client = http();
    let started: Value = client
        .post(server.url("/v1/agent/runs"))
        .json(&json!({
            "task": "What is 2 to the power 100? Explain each step in detail.",
            "profile": "math",
            "prefill": "<plan>compute it</plan>\n<code>\n```py\nprint(2**100)\n```\n</code>",
            "max_tokens": 400,
            "temperature": 0.7,
            "seed": 3,
        }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = started["id"].as_str().expect("a run id").to_string();
    let response = client
        .get(server.url(&format!("/v1/agent/runs/{run}/events")))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    // Follow until the observation and a few model tokens after it were shown.
    let seen = read_events(response, |events| {
        let at = events.iter().position(|e| e["type"] == "observation");
        at.is_some_and(|at| {
            events[at..]
                .iter()
                .filter(|e| e["source"] == "model")
                .count()
                >= 5
        })
    });
    let observation = seen.iter().find(|e| e["type"] == "observation").unwrap();
    assert!(
        observation["text"]
            .as_str()
            .unwrap()
            .contains("1267650600228229401496703205376")
    );
    server.kill9();

    let server = Served::start(store.path(), &[], None);
    let record: Value = stored_run(&client, &server, &run);
    assert_eq!(record["status"], "interrupted", "{record}");
    assert_eq!(record["live"], false);
    // Every event that was shown before the kill is there, in order, with the same ids.
    let replay = all_events(&client, &server, &run);
    assert!(
        replay.len() >= seen.len(),
        "{} < {}",
        replay.len(),
        seen.len()
    );
    for (shown, stored) in seen.iter().zip(&replay) {
        assert_eq!(shown, stored);
    }
    // Resuming after an event id gives only what follows it.
    let resumed = read_events(
        client
            .get(server.url(&format!("/v1/agent/runs/{run}/events")))
            .header("Last-Event-ID", "3")
            .send()
            .unwrap(),
        |_| false,
    );
    assert_eq!(resumed.first().unwrap()["_seq"], 4);
}

/// The store fills up under a server (a file-size limit on it, as a full disk would be). An agent
/// run's follower sees every event, and last a `not_saved` event saying so, which is not stored;
/// the store keeps the beginning of what was shown. A Responses API conversation goes on by
/// `previous_response_id` all the same: what the store could not keep, the server holds.
#[cfg(unix)]
#[test]
fn when_the_store_fills_up_a_follower_is_told_and_responses_go_on() {
    let store = tempfile::tempdir().unwrap();
    // The store is made first (and closed, its log folded in), so only the run's own writes
    // meet the limit.
    let made = Command::new(common::catena_bin())
        .args(["sessions", "list"])
        .env("CATENA_STORE_DIR", store.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let server = Served::start_with_file_limit(store.path(), 100);
    let client = http();
    let run = start_run(
        &client,
        &server,
        &json!({
            "task": "Explain step by step how to multiply 123 by 456 by hand.",
            "profile": "math",
            "max_tokens": 200,
            "temperature": 0,
        }),
    );
    let shown = all_events(&client, &server, &run);
    let last = shown.last().expect("events");
    assert_eq!(last["type"], "not_saved", "{last}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("not saved completely"),
        "{last}"
    );
    let seqs: Vec<u64> = shown.iter().map(|e| e["_seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(shown.iter().any(|e| e["type"] == "summary"));
    // Read back: what was saved is the beginning of what was shown, without the notice.
    let stored = all_events(&client, &server, &run);
    assert!(
        !stored.is_empty() && stored.len() < shown.len() - 1,
        "{} of {}",
        stored.len(),
        shown.len()
    );
    for (seen, saved) in shown.iter().zip(&stored) {
        assert_eq!(seen, saved);
    }
    // The run's end could not be written either; the server reads it as ended all the same
    // (it read `running` until the server stopped), so the run can be voted on and is not shown
    // as going on.
    let record: Value = stored_run(&client, &server, &run);
    assert_eq!(record["status"], "finished", "{record}");
    assert!(record["stop_reason"].is_string(), "{record}");

    let mut previous = Value::Null;
    for (turn, input) in ["My name is Ada. Say hello.", "What is my name?"]
        .iter()
        .enumerate()
    {
        let answer: Value = client
            .post(server.url("/v1/responses"))
            .json(&json!({
                "model": server.model,
                "input": input,
                "previous_response_id": previous,
                "max_output_tokens": 30,
                "temperature": 0,
            }))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(answer["status"], "completed", "turn {turn}: {answer}");
        previous = answer["id"].clone();
    }
    let unknown = client
        .post(server.url("/v1/responses"))
        .json(&json!({"model": server.model, "input": "Hi", "previous_response_id": "resp_0"}))
        .send()
        .unwrap();
    assert_eq!(unknown.status(), 400);
}

/// The loop stop reaches the model worker: a chain served by `catena serve` that repeats one line
/// is stopped with `repetition`, well before its token budget.
#[test]
fn a_served_chain_in_a_loop_is_stopped() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &[], None);
    let client = http();
    let run = start_run(
        &client,
        &server,
        &json!({
            "task": "How many primes are there below 100?",
            "profile": "math",
            "prefill": format!("<plan>\n{}", "<===>\n".repeat(20)),
            "max_tokens": 2000,
            "temperature": 0,
        }),
    );
    let events = all_events(&client, &server, &run);
    let summary = events.last().unwrap();
    assert_eq!(summary["type"], "summary", "{summary}");
    assert_eq!(summary["stop_reason"], "repetition", "{summary}");
    let generated = summary["generated_tokens"].as_u64().unwrap();
    assert!((360..1000).contains(&generated), "{generated} tokens");
}

#[test]
fn runs_can_be_cancelled_rated_listed_and_exported() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &[], None);
    let client = http();
    let start = |body: Value| start_run(&client, &server, &body);
    // A short run that finishes.
    let short =
        start(json!({"task": "Say OK.", "profile": "web", "max_tokens": 12, "temperature": 0}));
    let events = all_events(&client, &server, &short);
    let summary = events.last().unwrap();
    assert_eq!(summary["type"], "summary", "{summary}");
    assert!(
        ["answer", "end_of_turn", "token_budget"]
            .contains(&summary["stop_reason"].as_str().unwrap()),
        "{summary}"
    );
    // A long one, cancelled as soon as it streams.
    let long = start(
        json!({"task": "Write a long essay about rivers.", "profile": "web", "max_tokens": 4000}),
    );
    let response = client
        .get(server.url(&format!("/v1/agent/runs/{long}/events")))
        .send()
        .unwrap();
    let mut cancelled = false;
    let events = read_events(response, |events| {
        if !cancelled && events.len() >= 3 {
            let r = client
                .post(server.url(&format!("/v1/agent/runs/{long}/cancel")))
                .send()
                .unwrap();
            assert_eq!(r.status(), 200);
            cancelled = true;
        }
        false
    });
    assert_eq!(events.last().unwrap()["stop_reason"], "cancelled");
    let record: Value = client
        .get(server.url(&format!("/v1/agent/runs/{long}")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(record["status"], "cancelled");
    // Cancelling a finished run is a conflict.
    let again = client
        .post(server.url(&format!("/v1/agent/runs/{long}/cancel")))
        .send()
        .unwrap();
    assert_eq!(again.status(), 409);

    let rated: Value = client
        .post(server.url(&format!("/v1/agent/runs/{short}/feedback")))
        .json(&json!({"rating": "good", "note": "fine"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(rated["feedback"], "good");
    let bad = client
        .post(server.url(&format!("/v1/agent/runs/{short}/feedback")))
        .json(&json!({"rating": "excellent"}))
        .send()
        .unwrap();
    assert_eq!(bad.status(), 400);

    let sessions: Value = client
        .get(server.url("/v1/sessions?search=rivers"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(sessions["data"].as_array().unwrap().len(), 1);
    let mut export = String::new();
    client
        .get(server.url("/v1/export?format=sft&feedback=good"))
        .send()
        .unwrap()
        .read_to_string(&mut export)
        .unwrap();
    let lines: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["id"], short);
    assert_eq!(lines[0]["messages"][2]["role"], "assistant");

    let missing = client
        .get(server.url("/v1/agent/runs/nope"))
        .send()
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().unwrap();
    assert_eq!(body["error"]["code"], "not_found");
}

#[test]
fn sixteen_concurrent_clients_of_four_slots_get_answers_or_a_clear_queue_full() {
    let store = tempfile::tempdir().unwrap();
    // Four requests decoded at a time and a queue of 8 for 16 clients: some requests must be
    // refused, and only that way.
    let server = Served::start(store.path(), &["--parallel", "4", "--queue", "8"], None);
    let script = common::package_dir().join("../scripts/bench/loadtest.py");
    let records = tempfile::NamedTempFile::new().unwrap();
    let started = Instant::now();
    let output = Command::new(common::test_python())
        .arg(&script)
        .args(["--base-url", &server.url("/v1"), "--model", &server.model])
        .args(["--clients", "16", "--requests", "2", "--max-tokens", "8"])
        .arg("--out")
        .arg(records.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    eprintln!("load test in {:?}: {summary}", started.elapsed());
    assert_eq!(summary["requests"], 32);
    assert_eq!(summary["errors"], 0, "{summary}");
    assert!(summary["ok"].as_u64().unwrap() >= 8, "{summary}");
    assert_eq!(
        summary["ok"].as_u64().unwrap() + summary["queue_full"].as_u64().unwrap(),
        32
    );
    // Every request's latency was recorded.
    let lines = std::fs::read_to_string(records.path()).unwrap();
    assert_eq!(lines.lines().count(), 32);
    let mut cached = 0;
    for line in lines.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert!(r["latency_s"].as_f64().unwrap() > 0.0);
        cached += r["cached_tokens"].as_u64().unwrap_or(0);
    }
    // The slots keep what they evaluated: later requests start from the chat template's shared
    // opening instead of evaluating it again.
    assert!(cached > 0, "no request reused a slot's cache");
    // The server is still healthy afterwards.
    let health: Value = http()
        .get(server.url("/health"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["status"], "ok");
}

/// A client's instructions and tools, the same in every request, are kept in the prompt cache
/// (docs/ARCHITECTURE.md, "The prompt cache"): a server started later reads their KV cells
/// instead of evaluating them and gives the same answer; `CATENA_PROMPT_CACHE=off` reads none.
/// (The cache is the user's own, which earlier runs may have filled: the first server here is
/// not held to a miss.)
#[test]
fn a_clients_instructions_and_tools_come_from_the_prompt_cache_after_a_restart() {
    let store = tempfile::tempdir().unwrap();
    let client = http();
    // A coding client's request: its instructions, four tools, a question.
    let request: Value = serde_json::from_str(include_str!("../data/coding-request.json")).unwrap();
    let ask = |env: &[(&str, &str)]| {
        // A new server each time: its worker holds no cache of its own.
        let server = Served::start_env(store.path(), &[], env);
        let mut request = request.clone();
        request["model"] = json!(server.model);
        let reply: Value = client
            .post(server.url("/v1/chat/completions"))
            .json(&request)
            .send()
            .unwrap()
            .json()
            .unwrap();
        let usage = &reply["usage"];
        let message = &reply["choices"][0]["message"];
        // Call ids are new for every answer; what the model wrote is not.
        let calls: Vec<Value> = message["tool_calls"]
            .as_array()
            .map(|calls| calls.iter().map(|c| c["function"].clone()).collect())
            .unwrap_or_default();
        (
            usage["prompt_tokens"].as_u64().expect("usage"),
            usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .expect("cached tokens"),
            (message["content"].clone(), calls),
        )
    };
    let (prompt_tokens, _, first) = ask(&[]);
    // The answers compared below hold what the model wrote.
    assert!(
        first.0.as_str().is_some_and(|text| !text.is_empty()) || !first.1.is_empty(),
        "{first:?}"
    );
    let (_, cached, second) = ask(&[]);
    // The instructions and the tools, not the question.
    assert!(
        cached >= 300 && cached + 8 < prompt_tokens,
        "{cached} of {prompt_tokens}"
    );
    assert_eq!(first, second);
    let (_, cached, off) = ask(&[("CATENA_PROMPT_CACHE", "off")]);
    assert_eq!(cached, 0, "the cache was read although it is off");
    assert_eq!(first, off);
}

/// A short greedy chat completion ("Say hi."), answered whole.
fn say_hi(client: &reqwest::blocking::Client, server: &Served, max_tokens: u32) -> Value {
    client
        .post(server.url("/v1/chat/completions"))
        .json(&json!({
            "model": server.model,
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// Every event of a run, to its end.
fn all_events(client: &reqwest::blocking::Client, server: &Served, run: &str) -> Vec<Value> {
    read_events(
        client
            .get(server.url(&format!("/v1/agent/runs/{run}/events")))
            .send()
            .unwrap(),
        |_| false,
    )
}

/// What a streamed chat completion sent: each content chunk with the moment it arrived, and the
/// error the stream ended with, if any.
struct Streamed {
    chunks: Vec<(Instant, String)>,
    failure: Option<Value>,
}

/// A streamed chat completion read on a thread of its own; returns once the first chunk is in.
fn stream_chat(
    server: &Served,
    content: &str,
    max_tokens: u32,
) -> std::thread::JoinHandle<Streamed> {
    let (started, first_chunk) = std::sync::mpsc::channel();
    let response = http()
        .post(server.url("/v1/chat/completions"))
        .json(&json!({
            "model": server.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": true,
        }))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let reader = std::thread::spawn(move || {
        let mut chunks = Vec::new();
        let mut failure = None;
        for line in BufReader::new(response).lines() {
            let Ok(line) = line else { break };
            let Some(data) = line.strip_prefix("data:").map(str::trim) else {
                continue;
            };
            if data == "[DONE]" {
                break;
            }
            let event: Value = serde_json::from_str(data).unwrap();
            if event.get("error").is_some() {
                failure = Some(event);
            } else if let Some(text) = event["choices"][0]["delta"]["content"].as_str() {
                chunks.push((Instant::now(), text.to_string()));
                let _ = started.send(());
            }
        }
        Streamed { chunks, failure }
    });
    // The stream's end (a failure before any text) also ends the wait.
    let _ = first_chunk.recv();
    reader
}

/// Waits until a run has streamed `tokens` model tokens (or ended).
fn until_model_tokens(
    client: &reqwest::blocking::Client,
    server: &Served,
    run: &str,
    tokens: usize,
) {
    read_events(
        client
            .get(server.url(&format!("/v1/agent/runs/{run}/events")))
            .send()
            .unwrap(),
        |events| {
            events.iter().filter(|e| e["source"] == "model").count() >= tokens
                || events.last().is_some_and(|e| e["type"] == "summary")
        },
    );
}

#[test]
fn parallel_slots_serve_side_by_side_and_share_one_worker_restart() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &["--parallel", "3"], None);
    let client = http();
    let (pid, ..) = worker_state(&client, &server);

    // A long reply streams on one slot ...
    let long = stream_chat(&server, "Count from 1 to 300, one number per line.", 300);
    // ... and once it is under way, a short request on another slot is answered before it ends
    // (one request at a time, the short one would wait for all 300 tokens).
    let short_sent = Instant::now();
    let short = say_hi(&client, &server, 4);
    let short_done = Instant::now();
    assert!(
        short["usage"]["completion_tokens"].as_u64().unwrap() >= 1,
        "{short}"
    );
    // An agent run on the third slot: its code runs in the sandbox while the others decode,
    // and its observation is appended to its own sequence.
    let run = start_run(
        &client,
        &server,
        &json!({
            "task": "What is 17 times 23?",
            "profile": "math",
            "prefill": "<plan>compute it</plan>\n<code>\n```py\nprint(17*23)\n```\n</code>",
            "max_tokens": 60,
            "temperature": 0,
        }),
    );
    let events = all_events(&client, &server, &run);
    let observation = events.iter().find(|e| e["type"] == "observation").unwrap();
    assert!(
        observation["text"].as_str().unwrap().contains("391"),
        "{observation}"
    );
    assert_eq!(events.last().unwrap()["type"], "summary", "{events:?}");

    let Streamed { chunks, failure } = long.join().unwrap();
    assert!(failure.is_none(), "{failure:?}");
    let text: String = chunks.iter().map(|(_, t)| t.as_str()).collect();
    assert!(text.starts_with("1\n2\n3"), "{text}");
    let during = |at: &Instant| *at < short_sent;
    let after = |at: &Instant| *at > short_done;
    assert!(
        chunks.iter().any(|(at, _)| during(at)),
        "the long reply had not started"
    );
    assert!(
        chunks.iter().any(|(at, _)| after(at)),
        "the long reply had ended before the short one was answered"
    );

    // The worker dies while two slots are generating: both requests fail with the reason, the
    // worker is started again once, and the next request is served.
    let doomed: Vec<String> = (0..2)
        .map(|n| {
            start_run(
                &client,
                &server,
                &json!({
                    "task": format!("Write a long story about river number {n}."),
                    "profile": "web",
                    "max_tokens": 2000,
                    "temperature": 0.7,
                    "seed": n,
                }),
            )
        })
        .collect();
    for run in &doomed {
        until_model_tokens(&client, &server, run, 3);
    }
    let status = Command::new("kill")
        .args(["-ABRT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    for run in &doomed {
        let events = all_events(&client, &server, run);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "error", "{last}");
        assert!(
            last["message"].as_str().unwrap().contains("SIGABRT"),
            "{last}"
        );
    }
    let reply = say_hi(&client, &server, 4);
    assert!(
        reply["choices"][0]["message"]["content"].is_string(),
        "{reply}"
    );
    let (new_pid, alive, restarts) = worker_state(&client, &server);
    assert!(alive);
    assert_ne!(new_pid, pid);
    assert_eq!(
        restarts, 1,
        "one restart for the two lanes that saw the worker die"
    );
}

/// The health endpoint's view of the worker: (pid, alive, restarts).
fn worker_state(client: &reqwest::blocking::Client, server: &Served) -> (u64, bool, u64) {
    let health: Value = client
        .get(server.url("/health"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["status"], "ok");
    let worker = &health["worker"];
    (
        worker["pid"].as_u64().unwrap(),
        worker["alive"].as_bool().unwrap(),
        worker["restarts"].as_u64().unwrap(),
    )
}

#[test]
fn a_worker_that_aborts_costs_only_its_run() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &[], None);
    let client = http();
    let (pid, alive, restarts) = worker_state(&client, &server);
    assert!(alive && pid > 0 && pid != server.child.0.id() as u64);
    assert_eq!(restarts, 0);

    let start = |task: &str, max_tokens: u32| {
        let body = json!({
            "task": task,
            "profile": "math",
            "prefill": "<plan>compute it</plan>\n<code>\n```py\nprint(2**100)\n```\n</code>",
            "max_tokens": max_tokens,
            "temperature": 0.7,
            "seed": 5,
        });
        start_run(&client, &server, &body)
    };
    let doomed = start(
        "What is 2 to the power 100? Explain every step at length.",
        2000,
    );
    let mut aborted = false;
    let events = read_events(
        client
            .get(server.url(&format!("/v1/agent/runs/{doomed}/events")))
            .send()
            .unwrap(),
        |events| {
            let model_tokens = events.iter().filter(|e| e["source"] == "model").count();
            if !aborted && model_tokens >= 3 {
                // What a failed GGML assertion does: abort() in the worker process.
                let status = Command::new("kill")
                    .args(["-ABRT", &pid.to_string()])
                    .status()
                    .unwrap();
                assert!(status.success());
                aborted = true;
            }
            false
        },
    );
    assert!(
        aborted,
        "the run ended before the model streamed: {events:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{last}");
    let message = last["message"].as_str().unwrap();
    assert!(
        message.contains("model worker") && message.contains("SIGABRT"),
        "{message}"
    );
    let record: Value = client
        .get(server.url(&format!("/v1/agent/runs/{doomed}")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(record["status"], "failed", "{record}");

    // The server kept serving; a new worker takes the next run, which succeeds.
    let next = start("What is 2 to the power 100?", 60);
    let events = all_events(&client, &server, &next);
    let observation = events.iter().find(|e| e["type"] == "observation").unwrap();
    assert!(
        observation["text"]
            .as_str()
            .unwrap()
            .contains("1267650600228229401496703205376")
    );
    assert_eq!(events.last().unwrap()["type"], "summary", "{events:?}");
    let (new_pid, alive, restarts) = worker_state(&client, &server);
    assert!(alive);
    assert_eq!(restarts, 1);
    assert_ne!(new_pid, pid);

    // A worker killed while idle (as the out-of-memory killer would) does not cost the next
    // request: it is noticed and replaced before the request is sent.
    let status = Command::new("kill")
        .args(["-KILL", &new_pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Dead means reaped, or a zombie whose threads have all exited (only then can the server
    // collect it; the leader shows state Z while the other threads are still being torn down).
    let proc_dir = std::path::PathBuf::from(format!("/proc/{new_pid}"));
    let dead = || {
        let state = std::fs::read_to_string(proc_dir.join("stat"));
        let threads = std::fs::read_dir(proc_dir.join("task")).map(Iterator::count);
        match (state, threads) {
            (Ok(stat), Ok(threads)) => stat.contains(") Z ") && threads <= 1,
            _ => true,
        }
    };
    let until = Instant::now() + Duration::from_secs(30);
    while !dead() {
        assert!(Instant::now() < until, "the killed worker is still running");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Chat completions are served by the new worker too.
    let reply = say_hi(&client, &server, 8);
    assert!(
        reply["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|text| !text.is_empty()),
        "{reply}"
    );
    let (_, alive, restarts) = worker_state(&client, &server);
    assert!(alive);
    assert_eq!(restarts, 2);
}

/// The default model is served with the adapter Catena ships for it (its worker loads it, and
/// `/health` names it), or as published with `--no-adapter`; either way it answers.
#[test]
fn the_default_model_is_served_with_its_adapter_unless_told_not_to() {
    let client = http();
    for (extra, expected) in [
        (&[][..], Value::from("catena-coa-0.5b")),
        (&["--no-adapter"][..], Value::Null),
    ] {
        let store = tempfile::tempdir().unwrap();
        let server = Served::start(store.path(), extra, None);
        let health: Value = client
            .get(server.url("/health"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(health["adapter"], expected, "{extra:?}: {health}");
        let reply = say_hi(&client, &server, 8);
        assert!(
            reply["choices"][0]["message"]["content"]
                .as_str()
                .is_some_and(|text| !text.is_empty()),
            "{extra:?}: {reply}"
        );
        // Each stored run says which adapter it ran with: the chat and an agent run.
        let run = start_run(
            &client,
            &server,
            &json!({"task": "What is 2+2?", "max_tokens": 8, "temperature": 0}),
        );
        all_events(&client, &server, &run);
        let mut recorded: Vec<(Value, Value)> = stored_sessions(&client, &server)
            .iter()
            .flat_map(|(_, runs)| runs.iter())
            .map(|run| (run["kind"].clone(), run["adapter"].clone()))
            .collect();
        recorded.sort_by_key(|(kind, _)| kind.to_string());
        assert_eq!(
            recorded,
            [
                (Value::from("agent"), expected.clone()),
                (Value::from("chat"), expected.clone())
            ],
            "{extra:?}"
        );
    }
}

/// Posts `body` and returns the status and the JSON answer.
fn post(
    client: &reqwest::blocking::Client,
    server: &Served,
    path: &str,
    body: &Value,
) -> (u16, Value) {
    let response = client.post(server.url(path)).json(body).send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap())
}

#[test]
fn samples_of_one_task_run_side_by_side_and_are_put_to_a_vote() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &["--parallel", "3"], None);
    let client = http();
    let task = json!({
        "task": "What is 17 times 23?",
        "profile": "math",
        "prefill": "<plan>compute it</plan>\n<code>\n```py\nprint(17*23)\n```\n</code>",
        "max_tokens": 120,
        "temperature": 0.8,
        "seed": 11,
        "samples": 3,
    });
    let (status, started) = post(&client, &server, "/v1/agent/runs", &task);
    assert_eq!(status, 202, "{started}");
    let runs: Vec<String> = started["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    assert_eq!(runs.len(), 3, "{started}");
    assert_eq!(started["id"], runs[0]);
    for run in &runs {
        let events = all_events(&client, &server, run);
        let summary = events.last().unwrap();
        assert_eq!(summary["type"], "summary", "{events:?}");
        // The sandbox ran the prefilled program in every chain.
        assert!(
            events.iter().any(|e| e["type"] == "observation"),
            "{events:?}"
        );
        // What the vote breaks ties with: the sampled tokens' mean log-probability.
        let logprob = summary["mean_logprob"].as_f64().unwrap();
        assert!(logprob < 0.0 && logprob.is_finite(), "{summary}");
        // And what it checks answers against: what the chain's programs printed, the
        // prefilled one first.
        assert_eq!(summary["printed"][0], "391", "{summary}");
    }
    // The three runs are one session's.
    let view: Value = client
        .get(server.url(&format!("/v1/agent/runs/{}", runs[2])))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(view["session_id"], started["session_id"], "{view}");

    let (status, vote) = post(
        &client,
        &server,
        "/v1/agent/votes",
        &json!({ "runs": runs }),
    );
    assert_eq!(status, 200, "{vote}");
    let seeds: Vec<u64> = vote["chains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds, [11, 12, 13], "{vote}");
    // Every run is counted once: in one group or among those without an answer.
    let mut counted: Vec<String> = vote["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["runs"].as_array().unwrap().clone())
        .chain(vote["abstained"].as_array().unwrap().clone())
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    counted.sort();
    let mut expected = runs.clone();
    expected.sort();
    assert_eq!(counted, expected, "{vote}");
    let sizes: Vec<usize> = vote["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["runs"].as_array().unwrap().len())
        .collect();
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{vote}");
    // Each group holds answers the math verifier finds equal, under its most likely one.
    for group in vote["groups"].as_array().unwrap() {
        let best = &group["best"];
        assert!(group["runs"].as_array().unwrap().contains(best), "{group}");
        let chain = vote["chains"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| &c["run_id"] == best)
            .unwrap();
        // It speaks for the group with its answer, or with the number its program printed
        // where it counted for that.
        if group["from_output"].as_array().unwrap().contains(best) {
            assert_eq!(group["answer"], "\\boxed{391}", "{vote}");
        } else {
            assert_eq!(chain["answer"], group["answer"], "{vote}");
        }
    }
    // Every chain's program printed 391: the winner is an answer a program printed (another
    // number, which none of a chain's programs printed, gives way to 391).
    let winner = &vote["groups"][0];
    assert_eq!(vote["answer"], winner["answer"], "{vote}");
    assert_eq!(winner["printed"], true, "{vote}");

    // What cannot be voted on, or started, says why.
    let refused = |path: &str, body: Value, code: u16, needle: &str| {
        let (status, answer) = post(&client, &server, path, &body);
        assert_eq!(status, code, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{answer}");
    };
    let greedy = json!({ "task": "What is 2+2?", "samples": 3, "temperature": 0 });
    refused("/v1/agent/runs", greedy, 400, "temperature");
    let too_many = json!({ "task": "What is 2+2?", "samples": 17 });
    refused("/v1/agent/runs", too_many, 400, "between 1 and 16");
    refused(
        "/v1/agent/votes",
        json!({ "runs": [runs[0]] }),
        400,
        "2 to 16 runs",
    );
    let twice = json!({ "runs": [runs[0], runs[1], runs[0]] });
    refused("/v1/agent/votes", twice, 400, "listed twice");
    let other = start_run(
        &client,
        &server,
        &json!({"task": "What is 2+2?", "max_tokens": 4, "temperature": 0, "free": true}),
    );
    // Its lane's session served a chain before: the summary counts this run's own work (a free
    // chain, so no last word adds its answer's tokens to the 4).
    let summary = all_events(&client, &server, &other).pop().unwrap();
    assert_eq!(summary["type"], "summary", "{summary}");
    assert!(
        summary["generated_tokens"].as_u64().unwrap() <= 4,
        "{summary}"
    );
    refused(
        "/v1/agent/votes",
        json!({ "runs": [runs[0], other] }),
        400,
        "different tasks",
    );
    // Runs still decoding (each may write 2,000 tokens) are not counted yet.
    let long = json!({
        "task": "Write a long story about a river.",
        "profile": "web",
        "max_tokens": 2000,
        "temperature": 0.7,
        "samples": 2,
    });
    let (status, started) = post(&client, &server, "/v1/agent/runs", &long);
    assert_eq!(status, 202, "{started}");
    refused(
        "/v1/agent/votes",
        json!({ "runs": started["samples"] }),
        409,
        "still running",
    );
    for run in started["samples"].as_array().unwrap() {
        let run = run.as_str().unwrap();
        client
            .post(server.url(&format!("/v1/agent/runs/{run}/cancel")))
            .send()
            .unwrap();
        all_events(&client, &server, run);
    }
}

#[test]
fn samples_a_full_queue_refuses_start_none_of_them() {
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &["--queue", "2"], None);
    let client = http();
    let task = json!({
        "task": "Write a long story about a river.",
        "profile": "web",
        "max_tokens": 300,
        "temperature": 0.7,
        "samples": 6,
    });
    // One lane and two places in the queue: six chains cannot all be queued.
    let (status, refused) = post(&client, &server, "/v1/agent/runs", &task);
    assert_eq!(status, 429, "{refused}");
    let sessions: Value = client
        .get(server.url("/v1/sessions"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let session = sessions["data"][0]["id"].as_str().unwrap();
    let runs: Value = client
        .get(server.url(&format!("/v1/sessions/{session}")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(ids.len() >= 2, "{runs}");
    // The refused chain is recorded as failed; the ones queued before it were stopped.
    let mut ends = Vec::new();
    for id in &ids {
        // To the run's end (the refused one has none to wait for).
        all_events(&client, &server, id);
        let view: Value = client
            .get(server.url(&format!("/v1/agent/runs/{id}")))
            .send()
            .unwrap()
            .json()
            .unwrap();
        ends.push(view["status"].as_str().unwrap().to_string());
    }
    let failed = ends.iter().filter(|s| *s == "failed").count();
    let cancelled = ends.iter().filter(|s| *s == "cancelled").count();
    assert_eq!((failed, cancelled), (1, ids.len() - 1), "{ends:?}");
}

/// A coding agent sends its whole conversation with each request: the server stores each
/// message once, every chat run reads back with the conversation it was asked with, a chained
/// Responses API conversation is kept the same way, and deleting the sessions takes their
/// messages along.
#[test]
fn a_conversation_sent_whole_each_turn_is_stored_once_and_reads_back_as_sent() {
    let client = http();
    let store = tempfile::tempdir().unwrap();
    let server = Served::start(store.path(), &[], None);
    let mut messages = vec![json!({"role": "system", "content": "You are a terse assistant."})];
    let mut sent = Vec::new();
    for question in ["Say hi.", "Say bye.", "Say thanks."] {
        messages.push(json!({"role": "user", "content": question}));
        let reply: Value = client
            .post(server.url("/v1/chat/completions"))
            .json(&json!({"model": server.model, "messages": messages, "max_tokens": 4, "temperature": 0}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        sent.push(Value::from(messages.clone()));
        let answer = reply["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("{reply}"));
        messages.push(json!({"role": "assistant", "content": answer}));
    }
    let sessions = stored_sessions(&client, &server);
    let stored: Vec<Value> = sessions
        .iter()
        .flat_map(|(_, runs)| runs.iter())
        .map(|run| run["options"]["messages"].clone())
        .collect();
    assert_eq!(stored.len(), 3, "{stored:?}");
    for conversation in &sent {
        assert!(
            stored.contains(conversation),
            "{conversation} not among {stored:?}"
        );
    }
    // In the store: twelve messages asked with, at most six texts (a system prompt, three
    // questions, two answers).
    let db = rusqlite::Connection::open(store.path().join("catena.db")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        count("SELECT COUNT(*) FROM run_messages, json_each(run_messages.texts)"),
        12
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM message_texts"),
        count("SELECT COUNT(DISTINCT value) FROM run_messages, json_each(run_messages.texts)")
    );
    assert!(count("SELECT COUNT(*) FROM message_texts") <= 6);

    // A chained Responses API conversation, kept as lists too.
    let first: Value = client
        .post(server.url("/v1/responses"))
        .json(&json!({"model": server.model, "input": "Say hi.", "max_output_tokens": 4, "temperature": 0}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let second = client
        .post(server.url("/v1/responses"))
        .json(&json!({"model": server.model, "input": "Say bye.", "previous_response_id": first["id"], "max_output_tokens": 4, "temperature": 0}))
        .send()
        .unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(count("SELECT COUNT(*) FROM response_messages"), 2);

    // Deleting the chat's sessions deletes the texts only they used: what is left is what the
    // remaining lists refer to, and no text of the chat's own is kept.
    for (id, _) in &sessions {
        let deleted = client
            .delete(server.url(&format!("/v1/sessions/{id}")))
            .send()
            .unwrap();
        assert!(deleted.status().is_success(), "{:?}", deleted.status());
    }
    let referred = "SELECT COUNT(*) FROM (
        SELECT value FROM run_messages, json_each(run_messages.texts)
        UNION SELECT value FROM response_messages, json_each(response_messages.texts))";
    assert_eq!(count("SELECT COUNT(*) FROM message_texts"), count(referred));
    assert_eq!(
        count("SELECT COUNT(*) FROM message_texts WHERE text LIKE '%Say thanks.%'"),
        0
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM message_texts WHERE text LIKE '%terse assistant%'"),
        0
    );
}

/// A `/proc/PID/status` figure in KiB (`VmRSS:`, `VmHWM:`).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no {field} for {pid}"))
}

/// `/v1/export` sends the runs as the store is read: 192 MiB of runs arrive whole while the
/// server's peak memory grows by under a quarter of that. (It held the whole export once, so its
/// peak grew by more than the export's size.)
#[test]
fn a_large_export_arrives_whole_without_the_server_holding_it() {
    use catena_store::{NewRun, RunEnd, RunKind, RunStatus, Store, Usage};
    const RUNS: usize = 96;
    let store = tempfile::tempdir().unwrap();
    let trajectory = format!("<think>{}</think>", "x".repeat(2 << 20));
    {
        let db = Store::open_in(store.path()).unwrap();
        for i in 0..RUNS {
            let task = format!("task {i}");
            let run = NewRun {
                session: None,
                kind: RunKind::Agent,
                task: &task,
                profile: None,
                model: "m",
                adapter: None,
                options: json!({}),
                system_prompt: "instructions",
                user_prompt: &task,
            };
            let id = db.start_run(&run).unwrap();
            let end = RunEnd {
                status: RunStatus::Finished,
                answer: Some("42"),
                stop_reason: Some("answer"),
                trajectory: Some(&trajectory),
                summary: None,
                error: None,
                usage: Usage::default(),
            };
            db.finish_run(&id, &end).unwrap();
        }
    }
    let server = Served::start(store.path(), &[], None);
    let pid = server.child.0.id();
    // The peak so far (the model's load) is forgotten: from here on, VmHWM is the export's.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = status_kib(pid, "VmRSS:");
    let client = common::http_client(Duration::from_secs(600));
    let response = client.get(server.url("/v1/export")).send().unwrap();
    assert_eq!(response.status(), 200);
    let (mut lines, mut bytes) = (0, 0);
    for line in BufReader::new(response).lines() {
        let line = line.unwrap();
        bytes += line.len() + 1;
        let record: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(record["messages"][2]["content"], trajectory.as_str());
        lines += 1;
    }
    assert_eq!(lines, RUNS);
    let grown_kib = status_kib(pid, "VmHWM:").saturating_sub(before);
    eprintln!("export of {bytes} bytes; the server's peak grew by {grown_kib} KiB");
    assert!(
        grown_kib * 1024 < bytes as u64 / 4,
        "the server's peak grew by {grown_kib} KiB for an export of {bytes} bytes"
    );
}

//! A run's limits hold whatever its tools and its engine do, on the real binary, all on
//! loopback (issue 32): a page that sends one byte every two seconds no longer holds a run past
//! `--max-time`, nor a cancelled run of `catena serve` (and its only lane) past the cancel; an
//! engine at a server that claims to generate no tokens no longer runs past `--max-tokens`.

mod common;

use axum::Json;
use axum::Router;
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn catena_in(data: &Path) -> Command {
    let mut cmd = Command::new(common::catena_bin());
    cmd.env("CATENA_DATA_DIR", data)
        .env("CATENA_CACHE_DIR", common::paths().cache_dir)
        .env("CATENA_STORE_DIR", data.join("sessions"))
        .env_remove("CATENA_ENGINE_KEY")
        .env_remove("SERPER_API_KEY")
        .env_remove("CATENA_SEARXNG_URL");
    cmd
}

/// Web settings that read pages on loopback (the slow site) and give each page ten minutes, so
/// only the run's own limits can end the read.
fn settings(data: &Path) {
    std::fs::write(
        data.join("settings.toml"),
        "[web]\nonline = true\nallowed_addresses = [\"127.0.0.1\"]\npage_timeout = 600\n",
    )
    .unwrap();
}

/// A website whose every page sends its headers, then one byte every two seconds for as long as
/// the reader stays (five minutes at most). Returns its address and how many readers came.
fn slow_site() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let readers = Arc::new(AtomicUsize::new(0));
    let counted = readers.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: \
                            100000\r\n\r\n<html><body><p>";
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                for _ in 0..150 {
                    std::thread::sleep(Duration::from_secs(2));
                    if stream
                        .write_all(b"a")
                        .and_then(|()| stream.flush())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (base, readers)
}

/// Runs `command` until it exits or `limit` passes (then it is killed): its output, and whether
/// it ended by itself.
fn run_for(mut command: Command, limit: Duration) -> (Output, bool) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let ended = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let status = child.wait().unwrap();
    let output = Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    (output, ended)
}

fn events_of(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    common::json_lines(output)
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn max_time_ends_a_run_whose_page_never_finishes() {
    let (site, readers) = slow_site();
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    settings(data);
    let mut catena = catena_in(data);
    catena
        .args(["run", "--model"])
        .arg(common::default_model())
        .args([
            "--profile",
            "web",
            "--json",
            "--temperature",
            "0",
            "--max-tokens",
            "8",
            "--max-time",
            "10",
            "--prefill",
            &format!(
                "<think>The tide page should give the time.</think>\n\
                 <crawl_page>{site}/tides.html</crawl_page>"
            ),
            "What time is high water at the north pier?",
        ]);
    let started = Instant::now();
    // The page alone would take five minutes; before the run's deadline held it was killed at
    // a minute.
    let (output, ended) = run_for(catena, Duration::from_secs(60));
    let took = started.elapsed();
    assert!(ended, "the run was still going after {took:?}");
    assert!(took < Duration::from_secs(40), "the run took {took:?}");
    assert_eq!(readers.load(Ordering::SeqCst), 1);
    let events = events_of(&output);
    let observations = of_type(&events, "observation");
    assert_eq!(observations.len(), 1, "{events:?}");
    assert_eq!(
        observations[0]["text"],
        "The crawl_page call was stopped before it finished: the run's time ran out."
    );
    let summary = events.last().unwrap();
    assert_eq!(summary["type"], "summary", "{summary}");
    assert_eq!(summary["stop_reason"], "time_budget", "{summary}");
}

#[test]
fn a_cancelled_server_run_stops_reading_its_page_and_frees_the_lane() {
    let (site, readers) = slow_site();
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    settings(data);
    let server = common::serve(catena_in(data), |c| {
        c.args(["--sessions", "1"]);
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let started: Value = client
        .post(format!("{}/v1/agent/runs", server.base))
        .json(&json!({
            "task": "What time is high water at the north pier?",
            "profile": "web",
            "prefill": format!("<crawl_page>{site}/tides.html</crawl_page>"),
            "max_tokens": 4,
            "temperature": 0,
        }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = started["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_string();
    // Cancel once the page is being read: the run is inside the tool call.
    let waited = Instant::now();
    while readers.load(Ordering::SeqCst) == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(120),
            "the run never opened the page"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let cancel = client
        .post(format!("{}/v1/agent/runs/{run}/cancel", server.base))
        .send()
        .unwrap();
    assert!(cancel.status().is_success(), "{:?}", cancel.text());
    let cancelled = Instant::now();
    let record = loop {
        let record: Value = client
            .get(format!("{}/v1/agent/runs/{run}", server.base))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if record["live"] == false {
            break record;
        }
        assert!(
            cancelled.elapsed() < Duration::from_secs(30),
            "the run was still {} 30 s after its cancel",
            record["status"]
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(record["status"], "cancelled", "{record}");
    assert_eq!(record["stop_reason"], "cancelled", "{record}");
    let events = client
        .get(format!("{}/v1/agent/runs/{run}/events", server.base))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let observations = common::observations_in_events(&events);
    assert_eq!(
        observations,
        ["The crawl_page call was stopped before it finished: the run was cancelled."],
        "{events}"
    );
    // The one lane is free again: a chat completion is answered while the page still trickles.
    let models: Value = client
        .get(format!("{}/v1/models", server.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let chat = client
        .post(format!("{}/v1/chat/completions", server.base))
        .json(&json!({
            "model": models["data"][0]["id"],
            "messages": [{"role": "user", "content": "Say yes."}],
            "max_tokens": 2,
            "temperature": 0,
        }))
        .send()
        .unwrap();
    assert!(chat.status().is_success(), "{:?}", chat.text());
    let chat: Value = chat.json().unwrap();
    assert!(
        chat["choices"][0]["message"]["content"].is_string(),
        "{chat}"
    );
}

/// llama.cpp's server API as a liar plays it: each token is one character, and every
/// completion is text that stops at a stop string with no tokens sampled. Counts completions.
fn llama_server_that_claims_no_tokens() -> (String, Arc<AtomicUsize>, tokio::runtime::Runtime) {
    let completions = Arc::new(AtomicUsize::new(0));
    let counted = completions.clone();
    let app = Router::new()
        .route(
            "/props",
            get(|| async {
                Json(json!({
                    "default_generation_settings": {"n_ctx": 8192},
                    "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
                    "model_alias": "liar",
                }))
            }),
        )
        .route(
            "/tokenize",
            post(|Json(body): Json<Value>| async move {
                let text = body["content"].as_str().unwrap_or_default();
                let tokens: Vec<u32> = text.chars().map(u32::from).collect();
                Json(json!({ "tokens": tokens }))
            }),
        )
        .route(
            "/detokenize",
            post(|Json(body): Json<Value>| async move {
                let content: String = body["tokens"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_u64().and_then(|t| char::from_u32(t as u32)))
                    .collect();
                Json(json!({ "content": content }))
            }),
        )
        .route(
            "/completion",
            post(move |Json(body): Json<Value>| async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let stops: Vec<&str> = body["stop"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                // A stop that closes nothing opened: the run goes on to the next generation.
                let word = stops
                    .iter()
                    .find(|s| **s == "</answer>")
                    .or(stops.first())
                    .copied()
                    .unwrap_or("</answer>");
                Json(json!({
                    "content": "I keep thinking about the tides. ",
                    "tokens": [],
                    "stop_type": "word",
                    "stopping_word": word,
                    "timings": {"prompt_n": 0, "cache_n": 0},
                }))
            }),
        );
    let (base, runtime) = common::serve_on_loopback(app);
    (base, completions, runtime)
}

#[test]
fn a_chain_at_a_server_that_claims_no_tokens_ends_at_its_token_budget() {
    let (base, completions, _runtime) = llama_server_that_claims_no_tokens();
    let data = tempfile::tempdir().unwrap();
    let mut catena = catena_in(data.path());
    catena.args([
        "run",
        "--engine",
        &format!("{base}/v1"),
        "--profile",
        "web",
        "--json",
        "--no-store",
        "--max-tokens",
        "16",
        "How high is the tide?",
    ]);
    let (output, ended) = run_for(catena, Duration::from_secs(30));
    assert!(
        ended,
        "the run was still going after {} completions",
        completions.load(Ordering::SeqCst)
    );
    let events = events_of(&output);
    let summary = events.last().unwrap();
    assert_eq!(summary["stop_reason"], "token_budget", "{summary}");
    // The text's 33 characters are 33 of this server's tokens: one completion spent the budget.
    assert_eq!(completions.load(Ordering::SeqCst), 1);
    assert!(
        summary["generated_tokens"].as_u64() >= Some(16),
        "{summary}"
    );
}

/// An OpenAI-compatible server that answers every chat turn with the same sentence and says it
/// cost no tokens. Counts the turns.
fn chat_server_that_claims_no_tokens() -> (String, Arc<AtomicUsize>, tokio::runtime::Runtime) {
    let turns = Arc::new(AtomicUsize::new(0));
    let counted = turns.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move || async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Json(json!({
                "choices": [{
                    "message": {
                        "role": "assistant",
                        "content": "Let me think about the tides a little longer before I answer.",
                    },
                    "finish_reason": "stop",
                }],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }))
        }),
    );
    let (base, runtime) = common::serve_on_loopback(app);
    (base, turns, runtime)
}

#[test]
fn explicit_agents_at_a_server_that_claims_no_tokens_end_at_their_token_budget() {
    let (base, turns, _runtime) = chat_server_that_claims_no_tokens();
    let data = tempfile::tempdir().unwrap();
    let mut catena = catena_in(data.path());
    catena.args([
        "run",
        "--engine",
        &format!("{base}/v1"),
        "--engine-model",
        "liar",
        "--mode",
        "mas",
        "--profile",
        "web",
        "--json",
        "--no-store",
        "--max-tokens",
        "16",
        "How high is the tide?",
    ]);
    let (output, ended) = run_for(catena, Duration::from_secs(30));
    assert!(
        ended,
        "the run was still going after {} turns",
        turns.load(Ordering::SeqCst)
    );
    let events = events_of(&output);
    let summary = events.last().unwrap();
    assert_eq!(summary["stop_reason"], "token_budget", "{summary}");
    // Each 61-character reply counts at least 4 tokens: 16 tokens are spent in 4 turns.
    assert_eq!(turns.load(Ordering::SeqCst), 4, "{summary}");
}

#[test]
fn the_sandbox_stops_a_program_at_the_runs_deadline_not_its_own() {
    use catena_agent::tools::{CallContext, CallLimits, CodeTool, Tool};
    use catena_sandbox::Limits;
    // The sandbox would give the program a minute; the run has two seconds left.
    let sandbox = common::python_sandbox(Limits {
        wall: Duration::from_secs(60),
        ..Limits::default()
    });
    let tool = CodeTool::new(Arc::new(sandbox));
    let started = Instant::now();
    let mut context = CallContext {
        limits: CallLimits {
            deadline: Some(started + Duration::from_secs(2)),
            cancel: None,
        },
        ..CallContext::default()
    };
    let output = tool.call("```py\nwhile True:\n    pass\n```", &mut context);
    let took = started.elapsed();
    assert_eq!(
        output.observation,
        "The code call was stopped before it finished: the run's time ran out."
    );
    assert!(!output.success);
    assert!(took < Duration::from_secs(30), "the program ran {took:?}");
}

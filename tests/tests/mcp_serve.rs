//! Catena as an MCP host in `catena serve`: the official filesystem MCP server
//! (`@modelcontextprotocol/server-filesystem`, pinned in tests/npm) is started once from
//! `--mcp-config`, and an agent run started through the HTTP API asks its followers before each
//! write: the question is a run event, the answer a POST, and both stay in the stored run.
//!
//! The calls come in through the run's `prefill` (the tool calls at its end run before the model
//! goes on), so the test does not depend on what a 0.5B model chooses to write; the model, the
//! server, the MCP client and the MCP server are real.

mod common;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Every read of the event stream ends within this (the client's deadline) ...
const READ_DEADLINE: Duration = Duration::from_secs(300);
/// ... and after this many bytes.
const MAX_STREAM_BYTES: u64 = 4 << 20;

fn http() -> reqwest::blocking::Client {
    common::http_client(READ_DEADLINE)
}

/// A `<tool_call>` block for the prefill.
fn call(name: &str, arguments: Value) -> String {
    let call = json!({"name": name, "arguments": arguments});
    format!("<tool_call>\n{call}\n</tool_call>\n")
}

fn write_file(path: &Path, content: &str) -> String {
    call("write_file", json!({"path": path, "content": content}))
}

/// A run's SSE stream, read event by event.
struct Events {
    reader: BufReader<std::io::Take<reqwest::blocking::Response>>,
    seen: Vec<Value>,
}

impl Events {
    fn follow(client: &reqwest::blocking::Client, base: &str, run: &str) -> Events {
        let response = client
            .get(format!("{base}/v1/agent/runs/{run}/events"))
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        Events {
            reader: BufReader::new(response.take(MAX_STREAM_BYTES)),
            seen: Vec::new(),
        }
    }

    /// The next event's JSON; `None` at the end of the stream.
    fn next(&mut self) -> Option<Value> {
        let mut data = String::new();
        let mut line = String::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
                return None;
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if let Some(v) = l.strip_prefix("data:") {
                data.push_str(v.trim_start());
            } else if l.is_empty() && !data.is_empty() {
                let event: Value = serde_json::from_str(&data).unwrap();
                self.seen.push(event.clone());
                return Some(event);
            }
        }
    }

    /// Reads on to the first event of `kind`.
    fn until(&mut self, kind: &str) -> Value {
        while let Some(event) = self.next() {
            if event["type"] == kind {
                return event;
            }
        }
        panic!("the stream ended before a `{kind}` event: {:#?}", self.seen);
    }

    /// Reads to the end.
    fn rest(&mut self) {
        while self.next().is_some() {}
    }
}

fn answer(
    client: &reqwest::blocking::Client,
    base: &str,
    run: &str,
    ask: &Value,
    body: &str,
) -> u16 {
    client
        .post(format!("{base}/v1/agent/runs/{run}/approvals/{ask}"))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn a_served_run_writes_through_the_filesystem_server_after_the_user_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = dir.path().join("allowed");
    std::fs::create_dir(&allowed).unwrap();
    let allowed = allowed.canonicalize().unwrap();
    let server_js =
        common::test_npm_modules().join("@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(server_js.is_file(), "{} is missing", server_js.display());
    let config = dir.path().join("mcp.json");
    let list =
        json!({"mcpServers": {"filesystem": {"command": "node", "args": [server_js, allowed]}}});
    std::fs::write(&config, list.to_string()).unwrap();
    let store = tempfile::tempdir().unwrap();

    let mut served = common::serve(Command::new(common::catena_bin()), |cmd| {
        cmd.args(["--ctx-size", "4096", "--sessions", "1", "--store-dir"])
            .arg(store.path())
            .arg("--mcp-config")
            .arg(&config)
            .env_remove("CATENA_API_KEY")
            .stderr(Stdio::piped());
    });
    // The servers start before the server listens, so what it said of them is written already.
    let mut stderr = BufReader::new(
        served
            .process
            .0
            .stderr
            .take()
            .unwrap()
            .take(MAX_STREAM_BYTES),
    );
    let mut said = String::new();
    while !said.contains("MCP server `filesystem`") {
        if stderr.read_line(&mut said).unwrap_or(0) == 0 {
            break;
        }
    }
    assert!(
        said.contains("MCP server `filesystem`: 14 tools offered to the model."),
        "{said}"
    );
    // The rest is drained, so the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));

    let base = served.base.clone();
    let client = http();
    let note = allowed.join("note.txt");
    let refused = allowed.join("refused.txt");
    let outside = dir.path().join("outside.txt");
    let stopped = allowed.join("stopped.txt");
    let prefill = [
        "<think>Write the note, then check the folder.</think>\n".to_string(),
        write_file(&note, "written by catena serve"),
        call("list_directory", json!({"path": allowed})),
        write_file(&refused, "no"),
        write_file(&outside, "escaped"),
        write_file(&stopped, "cancelled"),
    ]
    .concat();
    let started = client
        .post(format!("{base}/v1/agent/runs"))
        .json(&json!({
            "task": "Write a note", "profile": "code", "prefill": prefill,
            "temperature": 0, "max_tokens": 1,
        }))
        .send()
        .unwrap();
    assert_eq!(started.status(), 202);
    let run = started.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut events = Events::follow(&client, &base, &run);

    // 1: allowed, and written.
    let asked = events.until("approval_requested");
    assert_eq!(asked["server"], "filesystem");
    assert_eq!(asked["tool"], "write_file");
    let arguments: Value = serde_json::from_str(asked["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments["path"], note.to_str().unwrap());
    assert!(!note.exists(), "written before the answer");
    assert_eq!(
        answer(&client, &base, &run, &asked["ask"], r#"{"allow": true}"#),
        200
    );
    assert_eq!(events.until("approval_answered")["allowed"], true);
    let wrote = events.until("observation");
    assert!(
        wrote["text"]
            .as_str()
            .unwrap()
            .contains("Successfully wrote"),
        "{wrote}"
    );
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        "written by catena serve"
    );
    // An answered question is not pending any more.
    assert_eq!(
        answer(&client, &base, &run, &asked["ask"], r#"{"allow": true}"#),
        404
    );

    // The read-only listing runs without a question.
    events.until("tool_call");
    let listing = events.next().unwrap();
    assert_eq!(
        listing["type"], "observation",
        "asked for a read-only tool: {listing}"
    );
    assert!(
        listing["text"].as_str().unwrap().contains("note.txt"),
        "{listing}"
    );

    // 2: a bad answer changes nothing; then denied, and nothing is written.
    let asked = events.until("approval_requested");
    assert_eq!(
        answer(&client, &base, &run, &asked["ask"], r#"{"allow": "yes"}"#),
        400
    );
    assert_eq!(
        answer(&client, &base, &run, &json!("nine"), r#"{"allow": true}"#),
        404
    );
    assert_eq!(
        answer(&client, &base, &run, &asked["ask"], r#"{"allow": false}"#),
        200
    );
    let answered = events.until("approval_answered");
    assert_eq!(answered["allowed"], false);
    assert_eq!(answered["decided_by"], "user");
    let denied = events.until("observation");
    assert_eq!(denied["success"], false);
    assert!(
        denied["text"].as_str().unwrap().contains("did not allow"),
        "{denied}"
    );
    assert!(!refused.exists(), "a denied call wrote its file");

    // 3: allowed, but outside the server's folder: the server refuses it.
    let asked = events.until("approval_requested");
    assert_eq!(
        answer(&client, &base, &run, &asked["ask"], r#"{"allow": true}"#),
        200
    );
    let escaped = events.until("observation");
    assert_eq!(escaped["success"], false);
    assert!(
        escaped["text"].as_str().unwrap().contains("Access denied"),
        "{escaped}"
    );
    assert!(!outside.exists(), "the server wrote outside its folder");

    // 4: the run is cancelled while it asks: the question is declined, before the run ends.
    let asked = events.until("approval_requested");
    let cancelled = client
        .post(format!("{base}/v1/agent/runs/{run}/cancel"))
        .send()
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    let answered = events.until("approval_answered");
    assert_eq!(answered["ask"], asked["ask"]);
    assert_eq!(answered["decided_by"], "cancelled");
    let observation = events.until("observation");
    assert!(
        observation["text"].as_str().unwrap().contains("stopped"),
        "{observation}"
    );
    events.rest();
    assert!(!stopped.exists(), "a declined call wrote its file");
    assert_eq!(
        answer(&client, &base, &run, &asked["ask"], r#"{"allow": true}"#),
        404
    );

    // The stored run replays every question and answer, in order.
    let live: Vec<Value> = events.seen.clone();
    let mut replay = Events::follow(&client, &base, &run);
    replay.rest();
    let kinds = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["type"].as_str().unwrap().starts_with("approval_"))
            .map(|e| format!("{}:{}", e["type"], e["ask"]))
            .collect()
    };
    assert_eq!(kinds(&replay.seen), kinds(&live));
    assert_eq!(kinds(&replay.seen).len(), 8, "{:?}", kinds(&replay.seen));
    let system = client
        .get(format!("{base}/v1/agent/runs/{run}"))
        .send()
        .unwrap()
        .json::<Value>()
        .unwrap();
    assert!(
        system["system_prompt"]
            .as_str()
            .unwrap_or_default()
            .contains("write_file"),
        "the stored prompt describes the tools: {system}"
    );
}

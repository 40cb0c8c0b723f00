//! Catena as an MCP server, driven by the official MCP Python SDK as an MCP host would drive it:
//! `catena mcp` over stdio and `/mcp` on `catena serve` over Streamable HTTP, each on both
//! protocol revisions (2025-11-25 with its `initialize` handshake, 2026-07-28 without). The
//! tools are listed with their input schemas; `run_python` answers a plain program and contains
//! hostile ones with the very observation an agent run's `<code>` call gets for the same program
//! in the same sandbox; the workspace folder is read-only unless the user made it writable;
//! `agent_run` is a real run of the default model, stored in the history.

mod common;

use catena_agent::tools::{CallLimits, run_program};
use catena_sandbox::Limits;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The sandbox's wall time in these tests (`--code-timeout`), short so the endless loop ends
/// soon.
const CODE_TIMEOUT_S: u64 = 2;

/// The two protocol revisions, as the Python SDK names the way to reach each.
const REVISIONS: [(&str, &str); 2] = [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")];

/// Programs an agent run's sandbox must contain, with what each tries.
const HOSTILE: [(&str, &str); 4] = [
    ("endless loop", "while True:\n    pass"),
    (
        "huge allocation",
        "block = bytearray(8 * 1024 ** 3)\nprint(len(block))",
    ),
    ("host file", "print(open('/etc/passwd').read())"),
    (
        "network",
        "import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)\nprint('connected')",
    ),
];

/// A data folder of its own (no search index, so the search tools are not set up) that shares
/// the machine's Python runtime; the compiled sandbox stays in the shared cache.
struct Folders {
    data: tempfile::TempDir,
    workspace: tempfile::TempDir,
}

impl Folders {
    fn new() -> Folders {
        let data = tempfile::tempdir().unwrap();
        let runtimes = common::paths().data_dir.join("runtimes");
        // The runtime is fetched into the real data folder once (the sandbox helper does it).
        drop(common::python_sandbox(Limits::default()));
        std::os::unix::fs::symlink(&runtimes, data.path().join("runtimes")).unwrap();
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(
            workspace.path().join("notes.txt"),
            "hello from the workspace",
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", workspace.path().join("passwd-link")).unwrap();
        std::os::unix::fs::symlink("/etc", workspace.path().join("etc-link")).unwrap();
        Folders { data, workspace }
    }

    fn store(&self) -> PathBuf {
        self.data.path().join("store")
    }

    /// `catena`'s environment for these folders.
    fn env(&self) -> Value {
        json!({
            "CATENA_DATA_DIR": self.data.path(),
            "CATENA_CACHE_DIR": common::paths().cache_dir,
            "CATENA_STORE_DIR": self.store(),
            "HOME": std::env::var("HOME").unwrap_or_default(),
            "PATH": std::env::var("PATH").unwrap_or_default(),
        })
    }
}

/// What each of [`HOSTILE`] gets as an agent run's `<code>` observation, in a sandbox with the
/// agent runs' limits under `--code-timeout 2`, and whether it succeeded.
fn agent_observations() -> &'static [(String, bool)] {
    static OBSERVATIONS: std::sync::OnceLock<Vec<(String, bool)>> = std::sync::OnceLock::new();
    OBSERVATIONS.get_or_init(|| {
        let sandbox = common::python_sandbox(Limits {
            wall: Duration::from_secs(CODE_TIMEOUT_S),
            ..Limits::default()
        });
        HOSTILE
            .iter()
            .map(|(_, code)| {
                let output = run_program(&sandbox, code, b"", &CallLimits::default());
                (output.observation, output.success)
            })
            .collect()
    })
}

fn run_python(code: &str) -> Value {
    json!({"name": "run_python", "arguments": {"code": code}})
}

/// Runs the Python client with `plan` for at most `limit`; `what` names it if it overruns.
fn run_client(plan: &Value, limit: Duration, what: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plan.json");
    std::fs::write(&file, plan.to_string()).unwrap();
    let script = common::package_dir().join("python/mcp_client.py");
    let mut command = Command::new(common::test_python());
    command.arg(&script).arg(&file);
    common::output_within(&mut command, dir.path(), limit, what)
}

/// Runs the Python client with `plan`; returns what it printed.
fn client(plan: &Value) -> Value {
    let output = run_client(plan, Duration::from_secs(900), "the MCP client");
    assert!(
        output.status.success(),
        "the MCP client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)))
}

fn tool<'a>(out: &'a Value, name: &str) -> &'a Value {
    out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {}", out["tools"]))
}

/// The listing: the tools something answers here, each with an input schema.
fn check_listing(out: &Value, writable: bool) {
    let mut names: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    // No index and no online backend in this data folder: the search tools are not listed.
    assert_eq!(names, ["agent_run", "run_python"], "{}", out["tools"]);
    let python = tool(out, "run_python");
    assert_eq!(python["inputSchema"]["type"], "object");
    assert_eq!(python["inputSchema"]["required"], json!(["code"]));
    assert!(python["inputSchema"]["properties"]["stdin"].is_object());
    assert_eq!(python["annotations"]["readOnlyHint"], !writable);
    let agent = tool(out, "agent_run");
    assert_eq!(agent["inputSchema"]["required"], json!(["task"]));
    for field in [
        "profile",
        "max_tool_calls",
        "max_tokens",
        "max_time",
        "seed",
    ] {
        assert!(
            agent["inputSchema"]["properties"][field].is_object(),
            "{field}"
        );
    }
}

/// The calls every transport and revision makes: `print(2+2)`, the hostile programs, a read of
/// the workspace; their expected results follow in the same order ([`check_sandbox_results`]).
fn sandbox_calls() -> Vec<Value> {
    let mut calls = vec![run_python("print(2+2)")];
    calls.extend(HOSTILE.iter().map(|(_, code)| run_python(code)));
    calls.push(run_python("print(open('/workspace/notes.txt').read())"));
    calls
}

fn check_sandbox_results(results: &[Value]) {
    assert_eq!(results[0]["is_error"], false, "{}", results[0]);
    assert_eq!(
        results[0]["text"],
        "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n4\n[STDOUT:END]"
    );
    for (i, ((what, _), (expected, success))) in
        HOSTILE.iter().zip(agent_observations()).enumerate()
    {
        let got = &results[i + 1];
        assert!(!success, "{what} succeeded in the sandbox: {expected}");
        assert_eq!(got["is_error"], true, "{what}: {got}");
        assert_eq!(got["text"], *expected, "{what}: not an agent run's words");
    }
    let notes = &results[HOSTILE.len() + 1];
    assert!(
        notes["text"]
            .as_str()
            .unwrap()
            .contains("hello from the workspace"),
        "{notes}"
    );
}

/// A stored run's record, as `catena sessions show --json` prints it.
fn stored_run(folders: &Folders, run_id: &str) -> String {
    let output = Command::new(common::catena_bin())
        .arg("--store-dir")
        .arg(folders.store())
        .args(["sessions", "show", run_id, "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// An `agent_run` call's result: a real run, stored, with its answer and tool calls.
fn check_agent_run(folders: &Folders, result: &Value) {
    let run = &result["structured"];
    let run_id = run["run_id"].as_str().unwrap_or_else(|| panic!("{result}"));
    assert!(
        ["finished", "failed"].contains(&run["status"].as_str().unwrap()),
        "{result}"
    );
    assert_eq!(result["is_error"], run["status"] != "finished", "{result}");
    for call in run["tool_calls"].as_array().unwrap() {
        assert!(
            call["tool"].is_string() && call["input"].is_string(),
            "{call}"
        );
    }
    let stored = stored_run(folders, run_id);
    assert!(stored.contains(run_id), "{stored}");
}

fn agent_call() -> Value {
    json!({"name": "agent_run", "arguments": {
        "task": "Use Python to compute 17 * 23.",
        "profile": "code",
        "max_tokens": 384,
        "temperature": 0,
        "seed": 7,
    }})
}

#[test]
fn the_official_mcp_client_uses_catena_mcp_over_stdio_on_both_revisions() {
    let folders = Folders::new();
    for (mode, revision) in REVISIONS {
        let mut calls = sandbox_calls();
        // The workspace is read-only: a write is refused and nothing appears on the host.
        calls.push(run_python("open('/workspace/new.txt', 'w').write('x')"));
        calls.push(agent_call());
        let args = json!([
            "mcp",
            "--model",
            common::default_model(),
            "--ctx-size",
            "2048",
            "--sessions",
            "1",
            "--code-timeout",
            CODE_TIMEOUT_S.to_string(),
            "--workspace",
            folders.workspace.path(),
        ]);
        let out = client(&json!({
            "transport": "stdio",
            "command": common::catena_bin(),
            "args": args,
            "env": folders.env(),
            "mode": mode,
            "calls": calls,
        }));
        eprintln!("{mode}: {out}");
        assert_eq!(out["protocol_version"], revision);
        // 2026-07-28 has no handshake to carry the server's name (the SDK adopts the revision
        // without asking); the handshake of 2025-11-25 names it.
        if mode == "legacy" {
            assert_eq!(out["server_name"], "catena");
        }
        check_listing(&out, false);
        let results = out["results"].as_array().unwrap();
        check_sandbox_results(results);
        let write = &results[HOSTILE.len() + 2];
        assert_eq!(write["is_error"], true, "{write}");
        assert!(!folders.workspace.path().join("new.txt").exists());
        check_agent_run(&folders, &results[HOSTILE.len() + 3]);
    }
}

#[test]
fn the_official_mcp_client_uses_slash_mcp_with_the_key_on_both_revisions() {
    let folders = Folders::new();
    let served = common::serve(Command::new(common::catena_bin()), |cmd| {
        cmd.args(["--ctx-size", "2048", "--sessions", "1", "--code-timeout"])
            .arg(CODE_TIMEOUT_S.to_string())
            .arg("--workspace")
            .arg(folders.workspace.path())
            .arg("--workspace-writable")
            .env("CATENA_DATA_DIR", folders.data.path())
            .env("CATENA_CACHE_DIR", common::paths().cache_dir)
            .env("CATENA_STORE_DIR", folders.store())
            .env("CATENA_API_KEY", "mcp-key");
    });
    let url = format!("{}/mcp", served.base);
    for (mode, revision) in REVISIONS {
        let written = format!("written-{revision}.txt");
        let mut calls = sandbox_calls();
        calls.push(run_python(&format!(
            "open('/workspace/{written}', 'w').write('from the sandbox')"
        )));
        // Writable is the folder, not what its links point at or what lies above it.
        for escape in [
            "print(open('/workspace/passwd-link').read())",
            "import os\nprint(os.listdir('/workspace/etc-link'))",
            "open('/workspace/../escape.txt', 'w').write('x')",
        ] {
            calls.push(run_python(escape));
        }
        if mode != "legacy" {
            calls.push(agent_call());
        }
        let out = client(&json!({
            "transport": "http", "url": url, "key": "mcp-key", "mode": mode, "calls": calls,
        }));
        eprintln!("{mode}: {out}");
        assert_eq!(out["protocol_version"], revision);
        check_listing(&out, true);
        let results = out["results"].as_array().unwrap();
        check_sandbox_results(results);
        assert_eq!(results[HOSTILE.len() + 2]["is_error"], false);
        assert_eq!(
            std::fs::read_to_string(folders.workspace.path().join(&written)).unwrap(),
            "from the sandbox"
        );
        for escape in &results[HOSTILE.len() + 3..HOSTILE.len() + 6] {
            assert_eq!(escape["is_error"], true, "{escape}");
            assert!(
                escape["text"].as_str().unwrap().contains("PermissionError"),
                "{escape}"
            );
        }
        if mode != "legacy" {
            check_agent_run(&folders, &results[HOSTILE.len() + 6]);
        }
    }
    assert!(
        !folders
            .workspace
            .path()
            .parent()
            .unwrap()
            .join("escape.txt")
            .exists()
    );
    // Without the key the client gets nothing.
    let plan = json!({"transport": "http", "url": url, "key": null, "mode": "legacy", "calls": []});
    let output = run_client(
        &plan,
        Duration::from_secs(120),
        "the MCP client without a key",
    );
    // (The 401 itself, and the foreign Host and Origin, are in the hostile-server suite.)
    assert!(!output.status.success(), "connected without the key");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("Server returned an error response"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The search tools are listed where something answers them: once a passage index is in the data
/// folder, `wiki_search` is there and answers from it, as an agent run's `<wiki_search>` would.
#[test]
fn wiki_search_is_listed_once_a_passage_index_is_there() {
    let folders = Folders::new();
    let passages = folders.data.path().join("passages.jsonl");
    let rows = [
        (
            "Ada Lovelace",
            "Ada Lovelace published the first algorithm for the Analytical Engine.",
        ),
        (
            "Steam engine",
            "A steam engine performs mechanical work using steam.",
        ),
    ];
    let lines: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, (title, text))| {
            json!({"id": (i + 1).to_string(), "contents": format!("\"{title}\"\n{text}")})
                .to_string()
        })
        .collect();
    std::fs::write(&passages, lines.join("\n") + "\n").unwrap();
    let added = Command::new(common::catena_bin())
        .args(["index", "add"])
        .arg(&passages)
        .env("CATENA_DATA_DIR", folders.data.path())
        .env("CATENA_CACHE_DIR", common::paths().cache_dir)
        .output()
        .unwrap();
    assert!(added.status.success(), "{added:?}");
    let out = client(&json!({
        "transport": "stdio",
        "command": common::catena_bin(),
        "args": ["mcp", "--model", common::default_model(), "--ctx-size", "2048", "--sessions", "1"],
        "env": folders.env(),
        "mode": "legacy",
        "calls": [{"name": "wiki_search", "arguments": {"query": "first algorithm Analytical Engine"}}],
    }));
    let search = tool(&out, "wiki_search");
    assert_eq!(search["inputSchema"]["required"], json!(["query"]));
    // Only the passage index is set up: no web search, no page reader.
    assert!(
        out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"] != "web_search" && t["name"] != "crawl_page"),
        "{}",
        out["tools"]
    );
    let result = &out["results"][0];
    assert_eq!(result["is_error"], false, "{result}");
    assert!(
        result["text"].as_str().unwrap().contains("Ada Lovelace"),
        "{result}"
    );
}

/// Reads `catena mcp`'s stdout a line at a time on a thread of its own, so that the test can
/// wait for each reply with a deadline.
fn reply_lines(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// A line that is not JSON is ignored, as the official SDKs do (a reply to a peer that echoes
/// what it cannot read would never end); JSON that is not a JSON-RPC message is answered with
/// Invalid Request; neither ends the session, and the handshake after them is answered.
#[test]
fn lines_that_are_not_messages_do_not_end_the_stdio_session() {
    use std::io::Write;
    let folders = Folders::new();
    let mut child = Command::new(common::catena_bin())
        .args(["mcp", "--ctx-size", "2048", "--sessions", "1", "--model"])
        .arg(common::default_model())
        .env("CATENA_DATA_DIR", folders.data.path())
        .env("CATENA_CACHE_DIR", common::paths().cache_dir)
        .env("CATENA_STORE_DIR", folders.store())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let replies = reply_lines(child.stdout.take().unwrap());
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0"},
        },
    });
    let mut stdin = child.stdin.take().unwrap();
    let input = format!("this is not JSON\n{{\"hello\": 1}}\n\n{initialize}\n");
    stdin.write_all(input.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let next = || {
        let line = replies
            .recv_timeout(Duration::from_secs(120))
            .expect("a reply from catena mcp within 120 s");
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let refused = next();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert_eq!(refused["id"], Value::Null, "{refused}");
    let answered = next();
    assert_eq!(answered["id"], 1, "{answered}");
    assert_eq!(
        answered["result"]["serverInfo"]["name"], "catena",
        "{answered}"
    );
    assert_eq!(
        answered["result"]["protocolVersion"], "2025-11-25",
        "{answered}"
    );
    // The handshake's last word, then closing stdin ends the session; the process exits cleanly.
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    stdin
        .write_all(format!("{initialized}\n").as_bytes())
        .unwrap();
    drop(stdin);
    let status = common::wait_within(&mut child, Duration::from_secs(60))
        .expect("catena mcp exits within 60 s of its stdin closing");
    assert!(status.success(), "catena mcp exited with {status}");
    let after = replies.recv_timeout(Duration::from_secs(10));
    assert_eq!(
        after,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected),
        "nothing more was said"
    );
}

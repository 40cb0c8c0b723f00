//! Catena as an MCP host: `catena run` starts the official filesystem MCP server
//! (`@modelcontextprotocol/server-filesystem`, pinned in tests/npm) from an mcp.json, offers its
//! tools to the default model, and runs the calls a chain makes with `<tool_call>`. A tool that
//! writes runs only after the user says yes on the terminal; the server itself refuses a path
//! outside the folder it was given; a read-only tool does not ask.
//!
//! The calls come in through `--prefill`, the run's own way to start a chain with a given text
//! (the tool calls at its end run before the model goes on), so the test does not depend on what
//! a 0.5B model chooses to write; the model, the run, the MCP client and the server are real.

mod common;

use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The official filesystem server, allowed `allowed` only, as an mcp.json in `dir`.
fn mcp_json(dir: &Path, allowed: &Path) -> std::path::PathBuf {
    let server =
        common::test_npm_modules().join("@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(server.is_file(), "{} is missing", server.display());
    let config = serde_json::json!({"mcpServers": {"filesystem": {
        "command": "node",
        "args": [server, allowed],
    }}});
    let path = dir.join("mcp.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// A `<tool_call>` block for the prefill.
fn call(name: &str, arguments: Value) -> String {
    let call = serde_json::json!({"name": name, "arguments": arguments});
    format!("<tool_call>\n{call}\n</tool_call>\n")
}

fn write_file(path: &Path, content: &str) -> String {
    call(
        "write_file",
        serde_json::json!({"path": path, "content": content}),
    )
}

/// `catena run --json` with `args`, given `answers` on stdin (then end of input).
fn run(args: &[&str], answers: &str) -> Output {
    let mut child = Command::new(common::catena_bin())
        .args(["run", "--json", "--profile", "code", "--temperature", "0"])
        .args(["--max-tokens", "1", "--no-store"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("catena run");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answers.as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// The (tool, observation, success) of each observation event.
fn observed(output: &Output) -> Vec<(String, String, bool)> {
    assert!(
        output.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    common::json_lines(output)
        .iter()
        .filter(|e| e["type"] == "observation")
        .map(|e| {
            (
                e["tool"].as_str().unwrap_or_default().to_string(),
                e["text"].as_str().unwrap_or_default().to_string(),
                e["success"] == true,
            )
        })
        .collect()
}

#[test]
fn a_run_writes_through_the_filesystem_server_only_where_allowed_and_after_approval() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = dir.path().join("allowed");
    std::fs::create_dir(&allowed).unwrap();
    let allowed = allowed.canonicalize().unwrap();
    let config = mcp_json(dir.path(), &allowed);
    let outside = dir.path().join("outside.txt");
    let prefill = [
        "<think>Write the note, then check the folder.</think>\n".to_string(),
        write_file(&allowed.join("note.txt"), "written by catena"),
        write_file(&outside, "escaped"),
        call("list_directory", serde_json::json!({"path": allowed})),
        write_file(&allowed.join("refused.txt"), "no"),
        write_file(&allowed.join("unanswered.txt"), "no one asked"),
    ]
    .concat();
    // Yes, yes (the server must still refuse the path), no, then stdin ends.
    let output = run(
        &[
            "--mcp-config",
            config.to_str().unwrap(),
            "--prefill",
            &prefill,
            "Write a note",
        ],
        "y\nyes\nn\n",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let calls = observed(&output);
    assert_eq!(calls.len(), 5, "{calls:?}\n{stderr}");
    assert!(calls.iter().all(|(tool, _, _)| tool == "tool_call"));

    let (_, wrote, ok) = &calls[0];
    assert!(*ok && wrote.contains("Successfully wrote"), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(allowed.join("note.txt")).unwrap(),
        "written by catena"
    );
    let (_, denied, ok) = &calls[1];
    assert!(!ok && denied.contains("Access denied"), "{denied}");
    assert!(!outside.exists(), "the server wrote outside its folder");
    let (_, listing, ok) = &calls[2];
    assert!(*ok && listing.contains("note.txt"), "{listing}");
    for (i, file) in [(3, "refused.txt"), (4, "unanswered.txt")] {
        let (_, text, ok) = &calls[i];
        assert!(!ok && text.contains("did not allow"), "{text}");
        assert!(!allowed.join(file).exists(), "{file} was written");
    }
    // Four writes asked; the read-only listing did not.
    assert_eq!(stderr.matches("Allow it? [y/N]").count(), 4, "{stderr}");
    assert!(stderr.contains("no one answered"), "{stderr}");
    assert!(
        stderr.contains("MCP server `filesystem`: 14 tools"),
        "{stderr}"
    );
}

#[test]
fn allowed_tools_run_without_asking_and_unknown_tools_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = dir.path().join("allowed");
    std::fs::create_dir(&allowed).unwrap();
    let allowed = allowed.canonicalize().unwrap();
    let config = mcp_json(dir.path(), &allowed);
    let prefill = [
        write_file(&allowed.join("a.txt"), "a"),
        call("delete_everything", serde_json::json!({})),
        "<tool_call>\nwrite a.txt please\n</tool_call>\n".to_string(),
    ]
    .concat();
    let gemma = common::gemma_model();
    let output = run(
        &[
            "--model",
            gemma.to_str().unwrap(),
            "--mcp-config",
            config.to_str().unwrap(),
            "--allow-tool",
            "write_file",
            "--prefill",
            &prefill,
            "Write a",
        ],
        "",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let calls = observed(&output);
    assert_eq!(calls.len(), 3, "{calls:?}\n{stderr}");
    assert!(calls[0].2, "{calls:?}");
    assert_eq!(std::fs::read_to_string(allowed.join("a.txt")).unwrap(), "a");
    assert!(!stderr.contains("Allow it?"), "{stderr}");
    assert!(
        calls[1]
            .1
            .contains("There is no tool named `delete_everything`")
    );
    assert!(calls[1].1.contains("write_file"), "the tools are listed");
    assert!(calls[2].1.contains("could not be read"), "{}", calls[2].1);
}

#[test]
fn a_server_list_that_cannot_be_used_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {"remote": {"url": "http://127.0.0.1:9/mcp"}}}"#,
    )
    .unwrap();
    let gemma = common::gemma_model();
    let run_with_list = || {
        let args = ["--model", gemma.to_str().unwrap(), "--mcp-config"];
        run(&[&args[..], &[config.to_str().unwrap(), "x"]].concat(), "")
    };
    let output = run_with_list();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("only servers started with a `command` (stdio) are supported"),
        "{stderr}"
    );

    // A server that cannot start costs its tools, not the run.
    std::fs::write(
        &config,
        r#"{"mcpServers": {"ghost": {"command": "/nonexistent/mcp-server"}}}"#,
    )
    .unwrap();
    let output = run_with_list();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("MCP server `ghost`: cannot start `/nonexistent/mcp-server`"),
        "{stderr}"
    );
}

//! A Chain-of-Agents run at llama.cpp's own `llama-server`, built from the very llama.cpp tree
//! Catena compiles in (scripts/setup/llama-tool.sh, as `llama-bench` is for the benchmarks),
//! serving the default model on loopback: the same greedy chain as the engine in this process, and
//! the server's prompt cache reported.

mod common;

use serde_json::Value;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The llama-server binary: scripts/setup/llama-tool.sh builds it once (scripts/test.sh does so
/// before the tests run) and prints its path afterwards.
fn llama_server_bin() -> PathBuf {
    let root = common::package_dir().join("..");
    let output = Command::new(root.join("scripts/setup/llama-tool.sh"))
        .args(["server", "llama-server"])
        .current_dir(&root)
        .stderr(Stdio::inherit())
        .output()
        .expect("scripts/setup/llama-tool.sh runs");
    assert!(output.status.success(), "building llama-server failed");
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// A free loopback port (llama-server takes a port number, not 0).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port")
        .port()
}

/// Starts llama-server with the default model and waits until it has loaded it.
fn start_llama_server() -> (common::Reaped, String) {
    let port = free_port();
    let child = Command::new(llama_server_bin())
        .arg("-m")
        .arg(common::default_model())
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-c", "8192", "-np", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llama-server starts");
    let server = common::Reaped(child);
    let base = format!("http://127.0.0.1:{port}");
    // reqwest is built without a TLS provider of its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let started = Instant::now();
    loop {
        let healthy =
            reqwest::blocking::get(format!("{base}/health")).is_ok_and(|r| r.status().is_success());
        if healthy {
            return (server, base);
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "llama-server did not become healthy"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What a reader sees of a run: every block with its tag and content, free text, and every
/// observation, in order; then the answer and how the run stopped.
fn chain(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e["type"].as_str() {
            Some("block_ended") => Some(format!("<{}>{}", e["tag"], e["content"])),
            Some("text") => Some(format!("text {}", e["text"])),
            Some("observation") => Some(format!("observation {}", e["text"])),
            Some("summary") => Some(format!("answer {} stop {}", e["answer"], e["stop_reason"])),
            _ => None,
        })
        .collect()
}

#[test]
fn a_chain_at_llama_server_is_the_chain_run_here() {
    let (_server, base) = start_llama_server();
    let run = |engine: &[&str]| {
        let mut args = vec![
            "run",
            "--profile",
            "math",
            "--temperature",
            "0",
            "--max-tokens",
            "1200",
            "--no-store",
        ];
        args.extend_from_slice(engine);
        // The prefill opens a program, so the model writes code until the `</code>` stop
        // string, the sandbox runs it, and the model reads the observation and goes on: at
        // least two generations, whatever the small model would have done on its own.
        args.extend_from_slice(&[
            "--prefill",
            "<plan>count them with a program</plan>\n<code>\n```py\n",
        ]);
        args.push("How many primes are there below 100?");
        common::catena(&args)
    };
    let model = common::default_model();
    // llama-server serves the model as published, so the run here goes without the adapter
    // Catena ships for it; and a run at another engine decodes freely (no grammar crosses
    // the wire), so the run here does too.
    let here = run(&[
        "--json",
        "--model",
        model.to_str().unwrap(),
        "--no-adapter",
        "--free",
    ]);
    assert!(
        here.status.success(),
        "{}",
        String::from_utf8_lossy(&here.stderr)
    );
    let url = format!("{base}/v1");
    let there = run(&["--json", "--engine", &url]);
    assert!(
        there.status.success(),
        "{}",
        String::from_utf8_lossy(&there.stderr)
    );
    let (here, there) = (common::json_lines(&here), common::json_lines(&there));
    let here_chain = chain(&here);
    assert!(
        here_chain.iter().any(|l| l.starts_with("observation")),
        "the sandbox ran the program: {here_chain:#?}"
    );
    assert_eq!(here_chain, chain(&there));
    let summary = |events: &[Value]| events.last().cloned().unwrap();
    let (here, there) = (summary(&here), summary(&there));
    // The context holds the same tokens: the sampled ones, the stop strings' ends and the
    // observations, tokenised alike.
    // (What the server evaluated differs: it kept the earlier run's prompt in its cache.)
    for count in [
        "trajectory",
        "context_tokens",
        "generated_tokens",
        "tool_calls",
    ] {
        assert_eq!(here[count], there[count], "{count}: {here} {there}");
    }

    // In words, the server's prompt cache: every request after the first reuses the context.
    let human = run(&["--engine", &url]);
    let said = String::from_utf8_lossy(&human.stderr);
    assert!(human.status.success(), "{said}");
    let line = said
        .lines()
        .find(|l| l.starts_with("Server: "))
        .unwrap_or_else(|| panic!("no server line in {said}"));
    let numbers: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let [requests, sent, cached, evaluated] = numbers[..] else {
        panic!("{line}")
    };
    assert!(requests >= 2, "{line}");
    assert_eq!(sent, cached + evaluated, "{line}");
    // The server still holds the previous run's context, the same prompt and prefill, and each
    // later request of the run evaluates only what was appended since (the observation): most
    // of what is sent comes from the cache.
    assert!(cached > evaluated, "{line}");
}

#[test]
fn a_chain_needs_llama_cpps_own_api() {
    // A server without llama.cpp's completion API (here nothing at all) is named with what
    // failed.
    let output = common::catena(&["run", "--engine", "http://127.0.0.1:9/v1", "What is 1 + 1?"]);
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("the llama.cpp server at http://127.0.0.1:9/v1"),
        "{said}"
    );
    assert!(said.contains("could not be reached"), "{said}");
}

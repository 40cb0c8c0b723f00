//! Hostile servers on the web tools' side, against the real binary: a page that sends one byte
//! every two seconds, a summariser whose answer never ends, and the settings API moving the
//! summariser to another address. Every server is a loopback listener written here; the runs
//! are greedy and a few tokens long.

mod common;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest a run may take here before it counts as held: the runs take seconds, and the slow
/// page and the endless answer used to hold them for minutes.
const PATIENCE: Duration = Duration::from_secs(120);

fn catena_in(data: &Path) -> Command {
    let mut cmd = Command::new(common::catena_bin());
    cmd.env("CATENA_DATA_DIR", data)
        .env("CATENA_CACHE_DIR", common::paths().cache_dir)
        .env("CATENA_STORE_DIR", data.join("sessions"))
        .env_remove("CATENA_SUMMARIZER_KEY")
        .env_remove("CATENA_API_KEY")
        .env_remove("CATENA_SEARXNG_URL");
    cmd
}

/// A web-profile run of the default model with `prefill`, greedy and short, killed if it
/// outlasts [`PATIENCE`] (then the test fails, saying so).
fn run_web(data: &Path, prefill: &str, extra: &[&str]) -> Output {
    let mut run = catena_in(data);
    run.args(["run", "--model"])
        .arg(common::default_model())
        .args(["--profile", "web", "--json", "--temperature", "0"])
        .args(["--max-tokens", "4"])
        .args(extra)
        .args([
            "--prefill",
            prefill,
            "When is high water at the north pier?",
        ]);
    common::output_within(&mut run, data, PATIENCE, "the run")
}

/// A document indexed with `catena index add`, for a `<crawl_page>` that reads it offline: its
/// `file://` address.
fn indexed_tide_table(data: &Path) -> String {
    let docs = data.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("tides.md"),
        "# Tide tables\n\nHigh water at the north pier is at 06:52 on Tuesday.\n",
    )
    .unwrap();
    let add = catena_in(data)
        .args(["index", "add"])
        .arg(&docs)
        .output()
        .unwrap();
    assert!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );
    format!(
        "file://{}",
        docs.canonicalize().unwrap().join("tides.md").display()
    )
}

/// A loopback server that answers every request with `head` and then `piece` after `piece`,
/// `pause` apart, until `limit` bytes are sent or the client hangs up. Its base URL.
fn misbehaving(head: &'static str, piece: Vec<u8>, pause: Duration, limit: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let piece = piece.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                let mut stream = stream;
                let mut sent = 0;
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                while sent < limit && stream.write_all(&piece).is_ok() {
                    sent += piece.len();
                    std::thread::sleep(pause);
                }
            });
        }
    });
    format!("http://{address}")
}

#[test]
fn a_page_sending_a_byte_every_two_seconds_is_cut_at_the_page_deadline() {
    // A 100 kB page at one byte every 2 s: 55 hours, and each byte well within any read timeout.
    let site = misbehaving(
        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 100000\r\n\r\n<html>",
        b"x".to_vec(),
        Duration::from_secs(2),
        100_000,
    );
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    std::fs::write(data.join("settings.toml"), "[web]\npage_timeout = 3\n").unwrap();
    let page = format!("{site}/tides.html");
    let prefill = format!(
        "<think>The tide page should give the time.</think>\n<crawl_page>{page}</crawl_page>"
    );
    let started = Instant::now();
    let run = run_web(
        data,
        &prefill,
        &["--online", "--allow-address", "127.0.0.1"],
    );
    let seen = common::observations(&run);
    assert_eq!(
        seen[0],
        format!(
            "Page 1 [{page}]: [Page content not accessible: the page did not arrive within 3 \
             seconds]"
        )
    );
    println!(
        "the run with the slow page ended after {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn a_summariser_answer_that_never_ends_is_cut_at_the_cap() {
    // An answer that opens its JSON and then sends spaces: 256 MiB unless the reader stops.
    let summariser = misbehaving(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"choices\": [",
        vec![b' '; 1 << 16],
        Duration::ZERO,
        256 << 20,
    );
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let tides = indexed_tide_table(data);
    std::fs::write(
        data.join("settings.toml"),
        format!("[web]\nsummarizer_url = \"{summariser}/v1\"\nsummarizer_model = \"big\"\n"),
    )
    .unwrap();
    let prefill = format!(
        "<think>The tide table should say when high water comes.</think>\n\
         <crawl_page>{tides}</crawl_page>"
    );
    let seen = common::observations(&run_web(data, &prefill, &[]));
    assert_eq!(
        seen[0],
        format!(
            "Page 1 [{tides}]: [Page content not accessible: the summariser failed: the \
             endpoint's answer is larger than 32 MiB; it was cut off there]"
        )
    );
}

/// The `Authorization` header of each chat request a stand-in summariser received.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

/// A stand-in OpenAI-compatible summariser that records what it is sent and always answers
/// `summary`.
fn summariser(seen: Seen, summary: &'static str) -> String {
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                seen.lock().unwrap().push(auth);
                axum::Json(json!({
                    "choices": [{"message": {"role": "assistant", "content": summary},
                                 "finish_reason": "stop"}],
                }))
            }
        }),
    );
    let (base, runtime) = common::serve_on_loopback(app);
    // The server lives as long as the test process.
    std::mem::forget(runtime);
    base
}

/// Starts an agent run on `server` reading `page`, waits for it, and returns its observations.
fn served_run(client: &reqwest::blocking::Client, base: &str, page: &str) -> Vec<String> {
    let started: Value = client
        .post(format!("{base}/v1/agent/runs"))
        .json(&json!({
            "task": "When is high water at the north pier?",
            "profile": "web",
            "prefill": format!(
                "<think>The tide table should say when high water comes.</think>\n\
                 <crawl_page>{page}</crawl_page>"
            ),
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
    let waited = Instant::now();
    let record = loop {
        let record: Value = client
            .get(format!("{base}/v1/agent/runs/{run}"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if record["live"] == false {
            break record;
        }
        assert!(
            waited.elapsed() < PATIENCE,
            "the run is still going: {record}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(record["status"], "finished", "{record}");
    let events = client
        .get(format!("{base}/v1/agent/runs/{run}/events"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    common::observations_in_events(&events)
}

#[test]
fn the_settings_api_cannot_send_the_summariser_key_to_another_address() {
    let first_seen = Seen::default();
    let first = summariser(first_seen.clone(), "The first summariser says 06:52.");
    let second_seen = Seen::default();
    let second = summariser(second_seen.clone(), "The second summariser says 06:52.");
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let tides = indexed_tide_table(data);
    std::fs::write(
        data.join("settings.toml"),
        format!(
            "[web]\nsummarizer_url = \"{first}/v1\"\nsummarizer_model = \"big\"\n\
             summarizer_key = \"sk-bound-to-first\"\n"
        ),
    )
    .unwrap();
    let server = common::serve(catena_in(data), |c| {
        c.args(["--ctx-size", "2048", "--sessions", "1"]);
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        .timeout(PATIENCE)
        .build()
        .unwrap();
    let put = |body: Value| {
        client
            .put(format!("{}/v1/settings/web", server.base))
            .json(&body)
            .send()
            .unwrap()
    };

    // Another program moves the summariser: the key stays behind.
    let moved = put(json!({"summarizer_url": format!("{second}/v1")}));
    assert!(moved.status().is_success(), "{:?}", moved.text());
    let view: Value = moved.json().unwrap();
    assert_eq!(view["keys"]["summarizer"]["in_settings"], false, "{view}");
    let seen = served_run(&client, &server.base, &tides);
    assert_eq!(
        seen[0],
        format!("Page 1 [{tides}] Summary:\nThe second summariser says 06:52.")
    );
    let second_auth = second_seen.lock().unwrap().clone();
    assert!(!second_auth.is_empty());
    assert!(
        second_auth.iter().all(Option::is_none),
        "the key went to the new address: {second_auth:?}"
    );
    assert!(first_seen.lock().unwrap().is_empty());

    // A key given with the address goes there (what the stand-ins record is what was sent).
    let given = put(json!({
        "summarizer_url": format!("{first}/v1"),
        "keys": {"summarizer": "sk-given-with-it"},
    }));
    assert!(given.status().is_success(), "{:?}", given.text());
    let seen = served_run(&client, &server.base, &tides);
    assert_eq!(
        seen[0],
        format!("Page 1 [{tides}] Summary:\nThe first summariser says 06:52.")
    );
    let first_auth = first_seen.lock().unwrap().clone();
    assert!(!first_auth.is_empty());
    assert!(
        first_auth
            .iter()
            .all(|a| a.as_deref() == Some("Bearer sk-given-with-it")),
        "{first_auth:?}"
    );

    // Credentials inside an address, and a SearXNG on this machine, are refused, and the
    // settings shown never carry a password.
    let with_password = put(json!({"summarizer_url": "http://me:hunter2@127.0.0.1:9/v1"}));
    assert_eq!(with_password.status().as_u16(), 400);
    let said = with_password.text().unwrap();
    assert!(
        said.contains("user name or password") && !said.contains("hunter2"),
        "{said}"
    );
    let searxng = put(json!({"searxng_url": "http://127.0.0.1:8888"}));
    assert_eq!(searxng.status().as_u16(), 400);
    let said = searxng.text().unwrap();
    assert!(said.contains("allowed_addresses"), "{said}");
    let shown = client
        .get(format!("{}/v1/settings/web", server.base))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(!shown.contains("sk-given-with-it"), "{shown}");
}

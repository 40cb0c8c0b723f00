//! Hostile requests against the real `catena serve` on loopback: what a web page the user visits,
//! or another program on the machine, can send. DNS rebinding (a foreign `Host`), cross-site
//! shapes (foreign `Origin`, form posts, `Sec-Fetch-Site`), paths where names belong, numeric
//! extremes, and connections that hold descriptors without sending anything. Requests are written
//! by hand on raw sockets, so every header is exactly what the test says.

mod common;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

/// Longest the tests wait for an answer: far above the server's 10-second header deadline, so a
/// server that never answers fails and one that answers late does not.
const PATIENCE: Duration = Duration::from_secs(60);

/// A `catena serve` on a free port with its own data folder; killed when dropped.
struct Served {
    _child: common::Reaped,
    addr: SocketAddr,
    data_dir: tempfile::TempDir,
    /// The rest of what the server prints (the web UI's address comes next).
    stdout: BufReader<std::process::ChildStdout>,
}

impl Served {
    fn start(api_key: Option<&str>) -> Served {
        Served::start_with(api_key, None)
    }

    /// With `max_files`, the server runs under that descriptor limit (`ulimit -n`).
    fn start_with(api_key: Option<&str>, max_files: Option<u32>) -> Served {
        let data_dir = tempfile::tempdir().unwrap();
        let program = match max_files {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(common::catena_bin());
                sh
            }
            None => Command::new(common::catena_bin()),
        };
        let served = common::serve(program, |cmd| {
            cmd.args(["--ctx-size", "2048", "--sessions", "1", "--store-dir"])
                .arg(data_dir.path().join("store"))
                // Exports and adapters go under this test's own data folder; the compiled
                // sandbox stays in the shared cache.
                .env("CATENA_DATA_DIR", data_dir.path())
                .env("CATENA_CACHE_DIR", common::paths().cache_dir)
                .env_remove("CATENA_API_KEY");
            if let Some(key) = api_key {
                cmd.env("CATENA_API_KEY", key);
            }
        });
        let addr = served
            .base
            .trim_start_matches("http://")
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", served.base));
        Served {
            _child: served.process,
            addr,
            data_dir,
            stdout: served.stdout,
        }
    }

    /// The second line the server prints: the address to open the web UI at.
    fn ui_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("the web UI line");
        line
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Sends one request (`Connection: close` is added) and returns the status and the body.
    fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(self.addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut request = format!("{method} {path} HTTP/1.1\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        let has_length = headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-length"));
        if !has_length && (!body.is_empty() || method == "POST") {
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        request.push_str("Connection: close\r\n\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .unwrap_or_else(|e| panic!("no answer to {method} {path}: {e}"));
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    /// Saves a training-data file in this server's exports folder; returns the folder.
    fn put_export(&self, name: &str, text: &str) -> std::path::PathBuf {
        let exports = self.data_dir.path().join("exports");
        std::fs::create_dir_all(&exports).unwrap();
        std::fs::write(exports.join(name), text).unwrap();
        exports
    }

    /// A request addressed the way a page on this server would address it.
    fn ours(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    fn get(&self, path: &str) -> (u16, String) {
        let host = self.ours();
        self.raw("GET", path, &[("Host", &host)], "")
    }

    fn post_json(&self, path: &str, body: &Value, extra: &[(&str, &str)]) -> (u16, String) {
        let host = self.ours();
        let mut headers = vec![
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
        ];
        headers.extend_from_slice(extra);
        self.raw("POST", path, &headers, &body.to_string())
    }
}

fn message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no error message in {body:?}"))
}

#[test]
fn a_foreign_host_is_refused_everywhere_even_with_the_key() {
    let server = Served::start(None);
    let port = server.port();
    let evil = format!("evil.example:{port}");
    // DNS rebinding: the page's own name in Host, on our address.
    for path in ["/v1/export", "/v1/sessions", "/health", "/", "/v1/models"] {
        let (status, body) = server.raw("GET", path, &[("Host", &evil)], "");
        assert_eq!(status, 403, "{path}: {body}");
        assert!(message(&body).contains("DNS rebinding"), "{body}");
    }
    let (status, _) = server.raw("DELETE", "/v1/sessions/anything", &[("Host", &evil)], "");
    assert_eq!(status, 403);
    // Our own names on our port are fine; another port or a look-alike name is not.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(
            server.raw("GET", "/health", &[("Host", &host)], "").0,
            200,
            "{host}"
        );
    }
    for host in [
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        format!("127.0.0.1.evil.example:{port}"),
        "127.0.0.1".to_string(),
    ] {
        assert_eq!(
            server.raw("GET", "/health", &[("Host", &host)], "").0,
            403,
            "{host}"
        );
    }

    // A correct key does not make a foreign Host acceptable.
    let keyed = Served::start(Some("s3cret"));
    let evil = format!("evil.example:{}", keyed.port());
    let (status, _) = keyed.raw(
        "GET",
        "/v1/export",
        &[("Host", &evil), ("Authorization", "Bearer s3cret")],
        "",
    );
    assert_eq!(status, 403);
    let host = keyed.ours();
    let (status, _) = keyed.raw(
        "GET",
        "/v1/export",
        &[("Host", &host), ("Authorization", "Bearer s3cret")],
        "",
    );
    assert_eq!(status, 200);
}

#[test]
fn cross_site_shapes_change_nothing() {
    let server = Served::start(None);
    let task = json!({"task": "print 1", "max_tokens": 1});
    let port = server.port();
    let refused: [&[(&str, &str)]; 4] = [
        &[("Origin", "http://evil.example")],
        &[("Origin", "null")],
        &[("Sec-Fetch-Site", "cross-site")],
        &[("Sec-Fetch-Site", "same-site")],
    ];
    for extra in refused {
        let (status, body) = server.post_json("/v1/agent/runs", &task, extra);
        assert_eq!(status, 403, "{extra:?}: {body}");
    }
    let other_port = format!("http://127.0.0.1:{}", port.wrapping_add(1));
    let (status, _) = server.post_json("/v1/agent/runs", &task, &[("Origin", &other_port)]);
    assert_eq!(status, 403);
    // A form post (no Origin, as old browsers send it) on the body-less routes.
    let host = server.ours();
    for path in ["/v1/agent/runs/x/cancel", "/v1/train/runs/x/stop"] {
        for kind in [
            "application/x-www-form-urlencoded",
            "text/plain",
            "multipart/form-data; boundary=b",
        ] {
            let (status, body) =
                server.raw("POST", path, &[("Host", &host), ("Content-Type", kind)], "");
            assert_eq!(status, 403, "{path} {kind}: {body}");
        }
    }
    // Nothing was started.
    let (status, body) = server.get("/v1/sessions");
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["data"],
        json!([]),
        "{body}"
    );
    // The server's own page (same origin) and programs (no Origin) get through the boundary:
    // here to a 404 for a run that does not exist.
    let own = format!("http://127.0.0.1:{port}");
    let (status, _) = server.post_json(
        "/v1/agent/runs/nope/cancel",
        &json!({}),
        &[("Origin", &own)],
    );
    assert_eq!(status, 404);
    let (status, _) = server.raw("POST", "/v1/agent/runs/nope/cancel", &[("Host", &host)], "");
    assert_eq!(status, 404);
}

/// A page the user visits must not answer a run's question for them: an approval lets a model's
/// call change something on this machine.
#[test]
fn another_site_cannot_answer_an_approval() {
    let server = Served::start(None);
    let path = "/v1/agent/runs/some-run/approvals/1";
    let allow = json!({"allow": true});
    for extra in [
        ("Origin", "http://evil.example"),
        ("Origin", "null"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let (status, body) = server.post_json(path, &allow, &[extra]);
        assert_eq!(status, 403, "{extra:?}: {body}");
    }
    let evil = format!("evil.example:{}", server.port());
    let (status, _) = server.raw("POST", path, &[("Host", &evil)], &allow.to_string());
    assert_eq!(status, 403);
    // A form post that smuggles the JSON as text.
    let host = server.ours();
    let (status, body) = server.raw(
        "POST",
        path,
        &[("Host", &host), ("Content-Type", "text/plain")],
        &allow.to_string(),
    );
    assert_eq!(status, 403, "{body}");
    // The server's own page gets through the boundary, to the route's own 404: no such question.
    let own = format!("http://127.0.0.1:{}", server.port());
    let (status, body) = server.post_json(path, &allow, &[("Origin", &own)]);
    assert_eq!(status, 404);
    assert!(message(&body).contains("no question 1 waiting"), "{body}");
}

#[test]
fn training_takes_names_not_paths() {
    let server = Served::start(None);
    let adapters = server.data_dir.path().join("adapters");
    let outside = tempfile::tempdir().unwrap();
    let escape = outside.path().join("written");
    let cases = [
        json!({"data": "/etc/passwd"}),
        json!({"data": "../../../../etc/passwd"}),
        json!({"data": "/etc/no-such-file"}),
        json!({"data": "train.jsonl", "out": escape.display().to_string()}),
        json!({"data": "train.jsonl", "out": "../../escape"}),
    ];
    for case in &cases {
        let (status, body) = server.post_json("/v1/train/runs", case, &[]);
        assert_eq!(status, 400, "{case}: {body}");
        let said = message(&body);
        assert!(said.contains("must be a plain name"), "{case}: {said}");
        // Whether a path exists, and what is in it, stays unsaid.
        assert!(!said.contains("root:"), "{said}");
        assert!(!said.contains("lines"), "{said}");
    }
    assert!(!escape.exists());
    assert!(
        !adapters.exists(),
        "a refused request created {}",
        adapters.display()
    );

    // A name that is not in the exports folder, and a base model that is a path.
    let (status, body) = server.post_json("/v1/train/runs", &json!({"data": "train.jsonl"}), &[]);
    assert_eq!(status, 400, "{body}");
    assert!(
        message(&body).contains("no training data named `train.jsonl`"),
        "{body}"
    );
    let exports = server.put_export("train.jsonl", "{}\n");
    let (status, body) = server.post_json(
        "/v1/train/runs",
        &json!({"data": "train.jsonl", "base": "/etc/passwd"}),
        &[],
    );
    assert_eq!(status, 400, "{body}");
    assert!(message(&body).contains("not an installed model"), "{body}");
    assert!(!adapters.exists());

    // The listing shows the exports folder and its files, by name.
    let (status, body) = server.get("/v1/train/data");
    assert_eq!(status, 200);
    let listing: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listing["folder"], json!(exports));
    assert_eq!(
        listing["data"],
        json!([{"name": "train.jsonl", "bytes": 3}])
    );
}

#[test]
fn a_started_training_run_uses_the_servers_folders_and_model() {
    let server = Served::start(None);
    // Not valid training data: the trainer starts (in this server's data folder, on the served
    // model) and fails on the file, which is all this test needs to see.
    server.put_export("broken.jsonl", "not json\n");
    let (status, body) = server.post_json(
        "/v1/train/runs",
        &json!({"data": "broken.jsonl", "out": "mine"}),
        &[],
    );
    assert_eq!(status, 201, "{body}");
    let run: Value = serde_json::from_str(&body).unwrap();
    let expected_out = server.data_dir.path().join("adapters").join("mine");
    assert_eq!(run["out"], json!(expected_out.display().to_string()));
    let id = run["id"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let finished = loop {
        let (_, body) = server.get(&format!("/v1/train/runs/{id}"));
        let run: Value = serde_json::from_str(&body).unwrap();
        if run["status"] != "running" {
            break run;
        }
        assert!(std::time::Instant::now() < deadline, "{run}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(finished["status"], "failed", "{finished}");
    let error = finished["error"].as_str().unwrap_or_default();
    assert!(error.contains("broken.jsonl"), "{error}");
}

#[test]
fn model_switching_reads_no_file_and_keeps_the_worker() {
    let server = Served::start(None);
    let health = |s: &Served| -> Value { serde_json::from_str(&s.get("/health").1).unwrap() };
    let before = health(&server);
    for id in ["/etc/passwd", "/etc/no-such-file", "../../../etc/hostname"] {
        let (status, body) = server.post_json("/v1/library/models/serve", &json!({"id": id}), &[]);
        assert_eq!(status, 400, "{id}: {body}");
        let said = message(&body);
        assert!(said.contains("not an installed model"), "{said}");
        assert!(!said.contains("root:"), "{said}");
    }
    let after = health(&server);
    assert_eq!(
        after["worker"]["restarts"], before["worker"]["restarts"],
        "{after}"
    );
    assert_eq!(after["worker"]["pid"], before["worker"]["pid"], "{after}");
}

#[test]
fn numeric_extremes_and_malformed_bodies_are_refused_cleanly() {
    let server = Served::start(None);
    for body in [
        json!({"task": "a", "max_time": 1e308}),
        json!({"task": "a", "max_time": -1}),
        json!({"task": "a", "max_time": 0}),
        json!({"task": "a", "temperature": 1e308}),
        json!({"task": "a", "max_tokens": -5}),
        json!({"task": "a", "top_k": 1e30}),
        json!({"task": "", "max_time": 5}),
        json!({"task": 5}),
    ] {
        let (status, answer) = server.post_json("/v1/agent/runs", &body, &[]);
        assert_eq!(status, 400, "{body}: {answer}");
    }
    let host = server.ours();
    for text in [
        "{",
        "[]",
        "null",
        "\u{0}",
        "{\"task\": \"a\", \"max_time\": 1e999}",
    ] {
        let (status, answer) = server.raw(
            "POST",
            "/v1/agent/runs",
            &[("Host", &host), ("Content-Type", "application/json")],
            text,
        );
        assert_eq!(status, 400, "{text:?}: {answer}");
    }
    // A body declared and never sent fails at the body deadline instead of holding the
    // connection.
    let (status, _) = server.raw(
        "POST",
        "/v1/agent/runs",
        &[
            ("Host", &host),
            ("Content-Type", "application/json"),
            ("Content-Length", "1000"),
        ],
        "",
    );
    assert_eq!(status, 400);
    // No handler panicked: the server still answers, and nothing was recorded.
    assert_eq!(server.get("/health").0, 200);
    let (_, sessions) = server.get("/v1/sessions");
    assert_eq!(
        serde_json::from_str::<Value>(&sessions).unwrap()["data"],
        json!([])
    );
}

#[test]
fn silent_connections_are_closed_and_cannot_starve_the_server() {
    // Under a 256-descriptor limit, 300 connections that send nothing: more than the process can
    // hold. The server serves at most half its limit at once and closes each silent connection
    // at the header deadline, so /health (queued behind them) is still answered.
    let server = Served::start_with(None, Some(256));
    let mut idle = Vec::new();
    for _ in 0..300 {
        match TcpStream::connect(server.addr) {
            Ok(stream) => idle.push(stream),
            Err(e) => panic!("connect {}: {e}", idle.len()),
        }
    }
    // Health is answered while they are all still open.
    let (status, _) = server.get("/health");
    assert_eq!(status, 200);
    // A connection that sends nothing, or half a request, is closed by the server.
    for partial in ["", "GET /health HTTP/1.1\r\nHost: 127.0.0.1"] {
        let mut stream = TcpStream::connect(server.addr).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.write_all(partial.as_bytes()).unwrap();
        let mut rest = Vec::new();
        let closed = stream.read_to_end(&mut rest);
        assert!(
            closed.is_ok(),
            "the server kept a silent connection open: {closed:?}"
        );
    }
    drop(idle);
}

#[test]
fn with_a_key_the_ui_gets_a_launch_token_and_nothing_works_without_one() {
    let mut server = Served::start(Some("s3cret"));
    let ui_line = server.ui_line();
    let token = ui_line
        .trim()
        .rsplit_once("#token=")
        .map(|(_, t)| t.to_string())
        .unwrap_or_else(|| panic!("no token in {ui_line:?}"));
    assert_eq!(token.len(), 64);
    let host = server.ours();
    let with = |auth: &str| {
        server
            .raw(
                "GET",
                "/v1/sessions",
                &[("Host", &host), ("Authorization", auth)],
                "",
            )
            .0
    };
    assert_eq!(with(&format!("Bearer {token}")), 200);
    assert_eq!(with("Bearer s3cret"), 200);
    assert_eq!(with("Bearer wrong"), 401);
    assert_eq!(
        server.raw("GET", "/v1/sessions", &[("Host", &host)], "").0,
        401
    );
    // The page itself (no data in it) loads without a credential.
    assert_eq!(server.get("/").0, 200);
    // Without a key there is no token in the address.
    let mut open = Served::start(None);
    let ui_line = open.ui_line();
    assert!(
        ui_line.starts_with("Web UI: http://127.0.0.1:"),
        "{ui_line}"
    );
    assert!(!ui_line.contains("#token="), "{ui_line}");
}

/// `/mcp` (the MCP server, Streamable HTTP) stands behind the same boundary as every `/v1`
/// route: a foreign `Host` or `Origin` is refused even with the key, and without the key nothing
/// is answered.
#[test]
fn slash_mcp_is_behind_the_same_boundary() {
    let server = Served::start(Some("s3cret"));
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "hostile-test", "version": "1"},
        },
    })
    .to_string();
    let ours = server.ours();
    let evil = format!("evil.example:{}", server.port());
    let mcp = |headers: &[(&str, &str)]| {
        let mut all = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        all.extend_from_slice(headers);
        server.raw("POST", "/mcp", &all, &initialize)
    };
    let key = ("Authorization", "Bearer s3cret");
    let (status, body) = mcp(&[("Host", &evil), key]);
    assert_eq!(status, 403, "{body}");
    assert!(message(&body).contains("DNS rebinding"), "{body}");
    let (status, body) = server.raw("GET", "/mcp", &[("Host", &evil), key], "");
    assert_eq!(status, 403, "{body}");
    for origin in ["http://evil.example", "null", "http://localhost:3000"] {
        let (status, body) = mcp(&[("Host", &ours), ("Origin", origin), key]);
        assert_eq!(status, 403, "{origin}: {body}");
    }
    let (status, body) = mcp(&[("Host", &ours), ("Sec-Fetch-Site", "cross-site"), key]);
    assert_eq!(status, 403, "{body}");
    for refused in [
        vec![("Host", ours.as_str())],
        vec![("Host", ours.as_str()), ("Authorization", "Bearer wrong")],
    ] {
        let (status, body) = mcp(&refused);
        assert_eq!(status, 401, "{refused:?}: {body}");
    }
    // The key, addressed as this server: the handshake is answered.
    let (status, body) = mcp(&[("Host", &ours), key]);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"protocolVersion\":\"2025-11-25\""),
        "{body}"
    );
    assert!(body.contains("\"name\":\"catena\""), "{body}");
}

#[test]
fn the_responses_api_is_behind_the_same_boundary() {
    let server = Served::start(Some("s3cret"));
    let request = json!({"model": "x", "input": "hi", "max_output_tokens": 1}).to_string();
    let ours = server.ours();
    let evil = format!("evil.example:{}", server.port());
    let key = ("Authorization", "Bearer s3cret");
    let post = |headers: &[(&str, &str)]| {
        let mut all = vec![("Content-Type", "application/json")];
        all.extend_from_slice(headers);
        server.raw("POST", "/v1/responses", &all, &request)
    };
    let (status, body) = post(&[("Host", &evil), key]);
    assert_eq!(status, 403, "{body}");
    for origin in ["http://evil.example", "null"] {
        let (status, body) = post(&[("Host", &ours), ("Origin", origin), key]);
        assert_eq!(status, 403, "{origin}: {body}");
    }
    let (status, body) = post(&[("Host", &ours)]);
    assert_eq!(status, 401, "{body}");
    // Past the boundary, a request is checked as usual (an unknown model).
    let (status, body) = post(&[("Host", &ours), key]);
    assert_eq!(status, 404, "{body}");
}

#[test]
fn the_messages_api_is_behind_the_same_boundary() {
    let server = Served::start(Some("s3cret"));
    let request = json!({
        "model": "x",
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "hi"}],
    })
    .to_string();
    let ours = server.ours();
    let evil = format!("evil.example:{}", server.port());
    // Anthropic's clients send the key as `x-api-key`, and say which API they speak.
    let key = ("x-api-key", "s3cret");
    let version = ("anthropic-version", "2023-06-01");
    let post = |headers: &[(&str, &str)]| {
        let mut all = vec![("Content-Type", "application/json")];
        all.extend_from_slice(headers);
        let (status, body) = server.raw("POST", "/v1/messages", &all, &request);
        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        (status, body)
    };
    // Refused in Anthropic's shape, which the client's SDK raises as its typed errors.
    let refused_as = |(status, body): (u16, Value), expected: u16, kind: &str| {
        assert_eq!(status, expected, "{body}");
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], kind, "{body}");
    };
    refused_as(
        post(&[("Host", &evil), key, version]),
        403,
        "permission_error",
    );
    for origin in ["http://evil.example", "null"] {
        refused_as(
            post(&[("Host", &ours), ("Origin", origin), key, version]),
            403,
            "permission_error",
        );
    }
    refused_as(
        post(&[("Host", &ours), version]),
        401,
        "authentication_error",
    );
    for wrong in [
        ("x-api-key", "wrong"),
        ("x-api-key", "Bearer s3cret"),
        ("Authorization", "Bearer wrong"),
    ] {
        refused_as(
            post(&[("Host", &ours), wrong, version]),
            401,
            "authentication_error",
        );
    }
    // A client that does not say it speaks Anthropic's API is refused in OpenAI's shape.
    let (status, body) = post(&[("Host", &ours)]);
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
    // Past the boundary (the key as `x-api-key` or as a bearer token), a request is checked as
    // usual: an unknown model, in Anthropic's shape whatever the headers.
    refused_as(post(&[("Host", &ours), key]), 404, "not_found_error");
    refused_as(
        post(&[("Host", &ours), ("Authorization", "Bearer s3cret")]),
        404,
        "not_found_error",
    );
    // A path that names no route, asked by an Anthropic client: its shape too.
    let (status, body) = server.raw(
        "POST",
        "/v1/messages/nowhere",
        &[
            ("Host", &ours),
            ("Content-Type", "application/json"),
            key,
            version,
        ],
        &request,
    );
    refused_as(
        (status, serde_json::from_str(&body).unwrap_or(Value::Null)),
        404,
        "not_found_error",
    );
}

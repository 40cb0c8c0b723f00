//! `<web_search>` and `<crawl_page>` end to end, on the real binary and default model, all on
//! loopback: the user's documents indexed with `catena index add` and searched offline, pages
//! read and summarised by the model, a small website with its traps (a redirect chain, a slow
//! page, a 50 MB page, a binary file, links to this machine and to a private network), and an
//! online backend's client against a stand-in that speaks the service's documented shape. The
//! observations are checked against the protocol's texts (docs/PROTOCOL.md §3).

mod common;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn catena_in(data: &Path) -> Command {
    let mut cmd = Command::new(common::catena_bin());
    cmd.env("CATENA_DATA_DIR", data)
        .env("CATENA_CACHE_DIR", common::paths().cache_dir)
        .env("CATENA_STORE_DIR", data.join("sessions"))
        .env_remove("SERPER_API_KEY")
        .env_remove("CATENA_SEARXNG_URL");
    cmd
}

/// A web-profile run of the default model with `prefill`, greedy and short.
fn run_web(data: &Path, prefill: &str, extra: &[&str]) -> Output {
    run_web_with(catena_in(data), prefill, extra)
}

fn run_web_with(mut catena: Command, prefill: &str, extra: &[&str]) -> Output {
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
        ])
        .args(extra)
        .args([
            "--prefill",
            prefill,
            "What time is high water at the north pier?",
        ])
        .output()
        .unwrap()
}

const TIDES: &str = "---\ntitle: Tide tables\ndate: 2024-03-09\n---\n# Tide tables\n\nThe harbour \
    master publishes tide tables every Monday. High water at the north pier comes forty minutes \
    after high water at the south pier; on Tuesday it is at 06:52.\n";

/// A folder of the user's documents: Markdown with a date, HTML, text, and a file that is not one.
fn documents(dir: &Path) -> PathBuf {
    let docs = dir.join("docs");
    std::fs::create_dir_all(docs.join("boats")).unwrap();
    std::fs::write(docs.join("tides.md"), TIDES).unwrap();
    std::fs::write(
        docs.join("boats/fleet.html"),
        "<html><head><title>The fishing fleet</title></head><body><p>Twelve boats leave the \
         harbour before sunrise and come back with the high water.</p></body></html>",
    )
    .unwrap();
    std::fs::write(
        docs.join("lighthouse.txt"),
        "Lighthouse\nThe keeper climbs 112 steps.\n",
    )
    .unwrap();
    std::fs::write(docs.join("chart.png"), [137u8, 80, 78, 71, 0, 0]).unwrap();
    docs.canonicalize().unwrap()
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

#[test]
fn local_documents_are_searched_and_read_offline() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let docs = documents(data);

    let add = catena_in(data)
        .args(["index", "add"])
        .arg(&docs)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&add.stderr);
    assert!(add.status.success(), "{stderr}");
    assert!(stderr.contains("Indexed 3 documents"), "{stderr}");
    assert!(stderr.contains("--doc-index docs"), "{stderr}");

    let list = catena_in(data)
        .args(["index", "list", "--json"])
        .output()
        .unwrap();
    let indexes: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(
        (indexes[0]["kind"].as_str(), indexes[0]["entries"].as_u64()),
        (Some("documents"), Some(3))
    );

    let query = "high water north pier";
    let search = catena_in(data)
        .args(["index", "search", "docs", query])
        .output()
        .unwrap();
    assert!(
        search.status.success(),
        "{}",
        String::from_utf8_lossy(&search.stderr)
    );
    let shown = String::from_utf8_lossy(&search.stdout).to_string();
    let tides = file_url(&docs.join("tides.md"));
    let expected_start = format!(
        "Found 2 results:\n\n## Web Results\n1. [Tide tables]({tides})\nDate published: 2024-03-09\n{tides}\n"
    );
    assert!(shown.starts_with(&expected_start), "{shown}");
    assert!(
        shown.contains("\n2. [The fishing fleet](file://"),
        "{shown}"
    );
    assert!(shown.ends_with("\n\n"), "{shown:?}");
    assert!(!shown.contains("Lighthouse"), "{shown}");
    // Many queries at once, as the search benchmark runs them: one JSON line each, timed.
    let queries = data.join("queries.txt");
    std::fs::write(&queries, format!("{query}\n\nlighthouse steps\n")).unwrap();
    let batch = catena_in(data)
        .args(["index", "search", "docs", "--json", "-k", "1", "--queries"])
        .arg(&queries)
        .output()
        .unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&batch.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["hits"][0]["title"], "Tide tables");
    assert_eq!(lines[1]["hits"][0]["title"], "Lighthouse");
    assert!(lines[1]["seconds"].as_f64().unwrap() >= 0.0);

    // A web-profile run with no network: the search is the local index, the repeat is answered
    // by the duplicate guard.
    let prefill = format!(
        "<plan>Search the local documents, then read the tide table.</plan>\n\
         <think>I need the time of high water at the north pier.</think>\n\
         <web_search>{query}</web_search>\n<web_search>{query}</web_search>"
    );
    let seen = common::observations(&run_web(data, &prefill, &[]));
    assert_eq!(seen[0], shown);
    assert!(seen[1].contains("already searched"), "{:?}", seen[1]);

    // Reading pages: the indexed file is summarised by the model; a file nobody indexed and a
    // web page (this run is offline) are refused, each with its reason.
    let prefill = format!(
        "<think>The tide table should say when high water comes at the north pier.</think>\n\
         <crawl_page>{tides} | file:///etc/passwd | https://example.org/tides</crawl_page>\n\
         <crawl_page>{tides} | file:///etc/passwd | https://example.org/tides</crawl_page>"
    );
    let run = run_web(data, &prefill, &[]);
    let seen = common::observations(&run);
    let pages: Vec<&str> = seen[0].split("\n\nPage ").collect();
    assert_eq!(pages.len(), 3, "{}", seen[0]);
    let summary = pages[0]
        .strip_prefix(&format!("Page 1 [{tides}] Summary:\n"))
        .unwrap_or_else(|| panic!("{}", seen[0]));
    assert!(
        !summary.trim().is_empty() && !TIDES.contains(summary.trim()),
        "{summary}"
    );
    assert_eq!(
        pages[1],
        "2 [file:///etc/passwd]: [Page content not accessible: this file is not in the local index \
         `docs`; only indexed documents are read]"
    );
    assert_eq!(
        pages[2],
        "3 [https://example.org/tides]: [Page content not accessible: this run reads no web pages \
         (offline)]"
    );
    assert!(seen[1].contains("already read"), "{:?}", seen[1]);
    println!("summary by the model:\n{summary}");
}

/// A folder of HTML packed into a ZIM archive by Debian's `zim-tools`, as Kiwix's archives are:
/// a guide page linking to an article in a folder.
fn harbour_archive(dir: &Path) -> PathBuf {
    let site = dir.join("harbour-site");
    std::fs::create_dir_all(site.join("wiki")).unwrap();
    std::fs::write(
        site.join("index.html"),
        "<html><head><title>Harbour guide</title></head><body><p>Everything about the harbour: boats, high water \
         and the lighthouse. See <a href=\"wiki/Tides.html\">the tides</a>.</p></body></html>",
    )
    .unwrap();
    std::fs::write(
        site.join("wiki/Tides.html"),
        "<html><head><title>Tides at the piers</title></head><body><p>High water at the north \
         pier comes forty minutes after high water at the south pier; on Tuesday it is at \
         06:52.</p><p>Back to <a href=\"../index.html\">the guide</a>.</p></body></html>",
    )
    .unwrap();
    std::fs::write(site.join("icon.png"), b"\x89PNG\r\n\x1a\n").unwrap();
    let archive = dir.join("harbour.zim");
    let made = Command::new("zimwriterfs")
        .args([
            "-w",
            "index.html",
            "-I",
            "icon.png",
            "-l",
            "eng",
            "-t",
            "Harbour",
        ])
        .args([
            "-d",
            "Harbour notes",
            "-c",
            "Catena tests",
            "-p",
            "Catena tests",
        ])
        .arg(&site)
        .arg(&archive)
        .output()
        .expect("zimwriterfs (Debian's zim-tools, installed by scripts/setup/packages.sh)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    archive
}

#[test]
fn a_zim_archive_is_searched_read_and_cut_into_passages_offline() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let archive = harbour_archive(data);
    let add = catena_in(data)
        .args(["index", "add"])
        .arg(&archive)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&add.stderr);
    assert!(stderr.contains("Indexed 2 documents"), "{stderr}");

    // The article is found with an address <crawl_page> opens again, and its summary comes
    // from the model; the link back to the guide is an address of the same archive.
    let tides = "zim://harbour/wiki/Tides.html";
    let prefill = format!(
        "<think>The tide article should say when high water comes at the north pier.</think>\n\
         <web_search>high water north pier</web_search>\n\
         <crawl_page>{tides} | zim://harbour/wiki/Nothing.html</crawl_page>"
    );
    let seen = common::observations(&run_web(data, &prefill, &[]));
    assert!(
        seen[0].starts_with(&format!(
            "Found 2 results:\n\n## Web Results\n1. [Tides at the piers]({tides})\n"
        )),
        "{}",
        seen[0]
    );
    let (page, missing) = seen[1].split_once("\n\nPage 2 ").unwrap();
    let summary = page
        .strip_prefix(&format!("Page 1 [{tides}] Summary:\n"))
        .unwrap_or_else(|| panic!("{page}"));
    assert!(!summary.trim().is_empty(), "{page}");
    assert_eq!(
        missing,
        "[zim://harbour/wiki/Nothing.html]: [Page content not accessible: this article is not \
         in the local index `harbour`; only indexed documents are read]"
    );

    // The same archive as passages for <wiki_search>.
    let add = catena_in(data)
        .args([
            "index",
            "add",
            "--kind",
            "passages",
            "--name",
            "harbour-wiki",
        ])
        .arg(&archive)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&add.stderr);
    assert!(stderr.contains("Indexed 2 passages"), "{stderr}");
    let search = catena_in(data)
        .args(["index", "search", "harbour-wiki", "north pier"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&search.stdout);
    assert!(
        shown.starts_with("Doc 1 (Title: Tides at the piers)\nHigh water at the north pier"),
        "{shown}"
    );
}

#[test]
fn a_pdf_printed_by_chromium_is_indexed_by_its_text() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let page = data.join("lighthouse.html");
    std::fs::write(
        &page,
        "<html><head><title>Lighthouse log</title></head><body><h1>Lighthouse log</h1>\
         <p>The keeper lights the lamp at dusk and climbs 112 steps to the lantern room.</p>\
         </body></html>",
    )
    .unwrap();
    let pdf = data.join("lighthouse.pdf");
    // Debian's Chromium, which the UI tests drive too (scripts/setup/packages.sh installs it).
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let printed = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .args([
            "--disable-background-networking",
            "--disable-component-update",
        ])
        .args(["--disable-sync", "--no-pdf-header-footer"])
        .arg(format!(
            "--user-data-dir={}",
            data.join("chromium").display()
        ))
        .arg(format!("--print-to-pdf={}", pdf.display()))
        .arg(file_url(&page))
        .output()
        .unwrap_or_else(|e| panic!("{chromium}: {e}"));
    assert!(
        pdf.is_file(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    std::fs::remove_file(&page).unwrap();

    let add = catena_in(data)
        .args(["index", "add", "--name", "log"])
        .arg(&pdf)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&add.stderr);
    assert!(stderr.contains("Indexed 1 document"), "{stderr}");
    let search = catena_in(data)
        .args([
            "index",
            "search",
            "log",
            "how many steps does the keeper climb",
        ])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&search.stdout);
    let url = file_url(&pdf.canonicalize().unwrap());
    assert!(
        shown.starts_with(&format!(
            "Found 1 results:\n\n## Web Results\n1. [Lighthouse log]({url})\n"
        )),
        "{shown}"
    );
    assert!(shown.contains("climbs 112 steps"), "{shown}");
}

/// A small website with its traps.
fn website() -> Router {
    Router::new()
        .route(
            "/tides.html",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    "<html><head><title>North pier tides</title></head><body><h1>Tides</h1>\
                     <p>High water at the north pier on Tuesday: 06:52.</p>\
                     <p>See the <a href=\"/fleet.html\">fleet</a>, the \
                     <a href=\"http://127.0.0.2:9/admin\">harbour office</a> and the \
                     <a href=\"http://192.168.77.1/router\">router</a>.</p></body></html>",
                )
            }),
        )
        .route(
            "/old-tides",
            get(|| async { Redirect::permanent("/older-tides") }),
        )
        .route(
            "/older-tides",
            get(|| async { Redirect::temporary("/tides.html") }),
        )
        .route(
            "/slow.html",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "too late"
            }),
        )
        .route(
            "/huge.txt",
            get(|| async {
                let chunk = "tide ".repeat(1 << 18);
                let body: String = (0..40).map(|_| chunk.as_str()).collect();
                ([(header::CONTENT_TYPE, "text/plain")], body)
            }),
        )
        .route(
            "/chart.bin",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/octet-stream")],
                    vec![0u8; 64],
                )
            }),
        )
}

#[test]
fn pages_on_a_website_are_read_with_limits_and_the_machine_is_refused() {
    let (site, _runtime) = common::serve_on_loopback(website());
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    // The settings file: a short page timeout, so the slow page fails in seconds.
    std::fs::write(data.join("settings.toml"), "[web]\npage_timeout = 3\n").unwrap();
    let prefill = format!(
        "<think>The tide page should give the time.</think>\n\
         <crawl_page>{site}/old-tides | {site}/slow.html | {site}/huge.txt | {site}/chart.bin</crawl_page>\n\
         <crawl_page>http://127.0.0.2:9/admin | http://192.168.77.1/router | [fleet](http://localhost:1/x)</crawl_page>"
    );
    // The test site is on 127.0.0.1: the user allows that address, and only that one.
    let run = run_web(
        data,
        &prefill,
        &["--online", "--allow-address", "127.0.0.1"],
    );
    let seen = common::observations(&run);
    let pages: Vec<&str> = seen[0].split("\n\nPage ").collect();
    assert_eq!(pages.len(), 4, "{}", seen[0]);
    assert!(
        pages[0].starts_with(&format!("Page 1 [{site}/old-tides] Summary:\n")),
        "{}",
        pages[0]
    );
    assert_eq!(
        pages[1],
        format!(
            "2 [{site}/slow.html]: [Page content not accessible: the page did not arrive within 3 seconds]"
        )
    );
    assert_eq!(
        pages[2],
        format!(
            "3 [{site}/huge.txt]: [Page content not accessible: the page is larger than 5 MiB]"
        )
    );
    assert_eq!(
        pages[3],
        format!(
            "4 [{site}/chart.bin]: [Page content not accessible: not a text page (content type application/octet-stream)]"
        )
    );
    let refused: Vec<&str> = seen[1].split("\n\n").collect();
    assert_eq!(
        refused[0],
        "Page 1 [http://127.0.0.2:9/admin]: [Page content not accessible: 127.0.0.2 is a loopback \
         address (this machine) (127.0.0.2); pages on this machine or its private networks are not read]"
    );
    assert!(
        refused[1].contains("192.168.77.1 is a private network address"),
        "{}",
        refused[1]
    );
    // A name is refused where it resolves (localhost is 127.0.0.1 here, but allowed is allowed:
    // port 1 has nothing listening).
    assert!(
        refused[2].starts_with("Page 3 [http://localhost:1/x]: [Page content not accessible:"),
        "{}",
        refused[2]
    );
}

/// A stand-in for Serper: the documented request (POST /search, `X-API-KEY`, `{"q", "num"}`)
/// and response (`organic` with `title`, `link`, `snippet`, `date`).
fn serper() -> Router {
    Router::new().route(
        "/search",
        post(|headers: HeaderMap, axum::Json(body): axum::Json<Value>| async move {
            if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some("sk-test-1234") {
                return (StatusCode::FORBIDDEN, r#"{"message": "Unauthorized."}"#).into_response();
            }
            if body["q"] == "too many" {
                return (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
            }
            axum::Json(json!({"organic": [
                {"title": "Tide times", "link": "https://tides.example/north", "snippet": "High water 06:52", "date": "Mar 9, 2024"},
                {"title": "Harbour", "link": "https://harbour.example/", "snippet": "The harbour office"}
            ]}))
            .into_response()
        }),
    )
}

#[test]
fn an_online_backend_is_used_with_a_key_from_the_environment_and_never_stores_it() {
    let (base, _runtime) = common::serve_on_loopback(serper());
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    std::fs::write(
        data.join("settings.toml"),
        format!("[web]\nsearch = \"serper\"\n[web.base_urls]\nserper = \"{base}\"\n"),
    )
    .unwrap();
    let prefill = "<plan>Search.</plan>\n<web_search>north pier tide</web_search>\n\
                   <web_search>too many</web_search>";
    // No key: the run does not start, and says where a key goes.
    let run = run_web(data, prefill, &[]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("SERPER_API_KEY") && stderr.contains("serper_key"),
        "{stderr}"
    );

    let mut with_key = catena_in(data);
    with_key.env("SERPER_API_KEY", "sk-test-1234");
    let run = run_web_with(with_key, prefill, &[]);
    let seen = common::observations(&run);
    assert_eq!(
        seen[0],
        "Found 2 results:\n\n## Web Results\n\
         1. [Tide times](https://tides.example/north)\nDate published: Mar 9, 2024\nhttps://tides.example/north\nHigh water 06:52\n\n\
         2. [Harbour](https://harbour.example/)\nhttps://harbour.example/\nThe harbour office\n\n"
    );
    assert_eq!(
        seen[1],
        "The web search failed: Serper is rate limiting these searches (HTTP 429); wait before \
         searching again"
    );
    // The key is nowhere in what the run printed or saved.
    let printed = [run.stdout.as_slice(), run.stderr.as_slice()].concat();
    assert!(!String::from_utf8_lossy(&printed).contains("sk-test-1234"));
    let saved = walk(&data.join("sessions"));
    assert!(!saved.is_empty(), "the run was saved");
    for entry in saved {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(12).any(|w| w == b"sk-test-1234"),
            "{} holds the key",
            entry.display()
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// The same page reader behind `catena serve` (and so the desktop app, which runs the same
/// service): the model is in the worker process, and the summary is its answer beside the run.
#[test]
fn the_server_reads_and_summarises_a_local_document() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let docs = documents(data);
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
    let server = common::serve(catena_in(data), |_| {});
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let tides = file_url(&docs.join("tides.md"));
    let started: Value = client
        .post(format!("{}/v1/agent/runs", server.base))
        .json(&json!({
            "task": "What time is high water at the north pier on Tuesday?",
            "profile": "web",
            "prefill": format!(
                "<think>The tide table should say when high water comes.</think>\n\
                 <web_search>north pier high water</web_search>\n<crawl_page>{tides}</crawl_page>"
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
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(record["status"], "finished", "{record}");
    let events = client
        .get(format!("{}/v1/agent/runs/{run}/events", server.base))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let observations = common::observations_in_events(&events);
    assert_eq!(observations.len(), 2, "{events}");
    assert!(
        observations[0].starts_with("Found 2 results:\n\n## Web Results\n1. [Tide tables]"),
        "{}",
        observations[0]
    );
    let summary = observations[1]
        .strip_prefix(&format!("Page 1 [{tides}] Summary:\n"))
        .unwrap_or_else(|| panic!("{}", observations[1]));
    assert!(
        !summary.trim().is_empty() && !TIDES.contains(summary.trim()),
        "{summary}"
    );
}

#[test]
fn pages_are_summarised_by_an_openai_compatible_endpoint_when_the_settings_name_one() {
    // The endpoint is a real `catena serve` on loopback with a key of its own.
    let endpoint_data = tempfile::tempdir().unwrap();
    let server = common::serve(catena_in(endpoint_data.path()), |c| {
        c.env("CATENA_API_KEY", "sk-summariser");
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let models: Value = reqwest::blocking::Client::new()
        .get(format!("{}/v1/models", server.base))
        .bearer_auth("sk-summariser")
        .send()
        .unwrap()
        .json()
        .unwrap();
    let model = models["data"][0]["id"].as_str().unwrap().to_string();

    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let docs = documents(data);
    let add = catena_in(data)
        .args(["index", "add"])
        .arg(&docs)
        .output()
        .unwrap();
    assert!(add.status.success());
    let tides = file_url(&docs.join("tides.md"));
    let prefill = format!(
        "<think>The tide table should say when high water comes at the north pier.</think>\n\
         <crawl_page>{tides}</crawl_page>"
    );
    let read_with = |model: &str, key: &str| {
        std::fs::write(
            data.join("settings.toml"),
            format!(
                "[web]\nsummarizer_url = \"{}/v1\"\nsummarizer_model = \"{model}\"\n",
                server.base
            ),
        )
        .unwrap();
        let mut catena = catena_in(data);
        catena.env("CATENA_SUMMARIZER_KEY", key);
        common::observations(&run_web_with(catena, &prefill, &[])).remove(0)
    };
    let page = read_with(&model, "sk-summariser");
    let summary = page
        .strip_prefix(&format!("Page 1 [{tides}] Summary:\n"))
        .unwrap_or_else(|| panic!("{page}"));
    assert!(!summary.trim().is_empty(), "{page}");
    // The page went to the endpoint: a model it does not serve and a wrong key are its answers.
    let page = read_with("no-such-model", "sk-summariser");
    assert!(
        page.starts_with(&format!(
            "Page 1 [{tides}]: [Page content not accessible: the summariser failed: the endpoint \
             answered HTTP 404"
        )),
        "{page}"
    );
    let page = read_with(&model, "sk-wrong");
    assert!(
        page.contains("the endpoint refused the key (HTTP 401)"),
        "{page}"
    );
    assert!(!page.contains("sk-wrong"), "{page}");
}

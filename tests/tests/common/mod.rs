//! Shared set-up of the end-to-end tests: the real assets (fetched once into the user's data
//! directory, or the directories `CATENA_DATA_DIR` / `CATENA_CACHE_DIR` name), the real binary.
#![allow(dead_code)]

use catena_hub::assets::{self, AssetProgress};
use catena_hub::config::Paths;
use catena_sandbox::{Limits, RuntimeSpec, Sandbox};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Output, Stdio};

pub fn paths() -> Paths {
    Paths::from_env().expect("Catena's data and cache directories")
}

fn progress(event: AssetProgress) {
    eprintln!("{event:?}");
}

/// The default model, fetched if this machine does not have it yet.
pub fn default_model() -> PathBuf {
    assets::default_model(&paths(), &mut progress).expect("the default model")
}

/// Gemma 3 270M: a second architecture, with no chat template.
pub fn gemma_model() -> PathBuf {
    assets::ensure(&assets::GEMMA_TEST_MODEL, &paths(), &mut progress)
        .expect("the Gemma test model")
}

/// The real CPython sandbox with the given limits.
pub fn python_sandbox(limits: Limits) -> Sandbox {
    let paths = paths();
    let files = assets::python_runtime(&paths, &mut progress).expect("the Python runtime");
    let spec = RuntimeSpec::cpython(files.wasm, files.sha256, files.stdlib_dir);
    Sandbox::new(spec, limits, &paths.sandbox_cache_dir(), || {
        eprintln!("compiling the Python sandbox (first use)")
    })
    .expect("the sandbox")
}

/// This package's folder (`tests/`), as `cargo test` gives it to the test process. The path
/// compiled in (`env!`) is only the fallback, for a test binary run by hand: Cargo's fingerprints
/// leave out the checkout's path, so a checkout elsewhere that shares the build folder reuses the
/// binary unbuilt, and the path compiled into it may be gone (it was: a CI clone's).
pub fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The `catena` binary of this build (tests run from target/<profile>/deps/).
pub fn catena_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("CATENA_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let bin = dir.join(format!("catena{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: build it first (cargo build --release -p catena-cli)",
        bin.display()
    );
    bin
}

/// A session store for this test process, so tests never write into the user's own history. One
/// fixed folder per test binary in cargo's test folder, emptied on first use: a temporary folder
/// held in a static is never dropped, and each run left one behind.
pub fn test_store_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let binary = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "tests".into());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("stores")
            .join(binary);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the test store folder");
        dir
    })
}

/// Runs `catena` with `args` (recording into this process's test store).
pub fn catena(args: &[&str]) -> Output {
    Command::new(catena_bin())
        .args(args)
        .env("CATENA_STORE_DIR", test_store_dir())
        .output()
        .expect("running catena")
}

/// The JSON lines a `--json` run printed.
pub fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON line {line:?}: {e}"))
        })
        .collect()
}

/// A child process killed (and reaped) when dropped, however the test ends.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A blocking HTTP client whose every request ends within `timeout`. reqwest is built with no
/// TLS provider of its own (catena-hub uses ring); a client needs one installed even for plain
/// HTTP.
pub fn http_client(timeout: std::time::Duration) -> reqwest::blocking::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::blocking::Client::builder()
        .timeout(timeout)
        .build()
        .expect("an HTTP client")
}

/// The address in `catena serve`'s first line ("Catena is serving M on http://ADDR (...)").
pub fn served_address(line: &str) -> String {
    line.split(" on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string()
}

/// A running `catena serve`: the process (killed when dropped), its address
/// (`http://127.0.0.1:PORT`), and the rest of what it prints.
pub struct Serving {
    pub process: Reaped,
    pub base: String,
    pub stdout: BufReader<ChildStdout>,
}

/// Starts `catena serve` on a free port with the default model. `command` is the program to run
/// (`catena_bin()`, or a wrapper that execs it); `configure` adds the test's own flags and
/// environment. Returns once the server has printed its address.
pub fn serve(mut command: Command, configure: impl FnOnce(&mut Command)) -> Serving {
    command
        .args(["serve", "--port", "0", "--model"])
        .arg(default_model())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    configure(&mut command);
    let mut child = command.spawn().expect("catena serve starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("its output"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("the server prints its address");
    Serving {
        process: Reaped(child),
        base: served_address(&line),
        stdout,
    }
}

/// Serves `app` on a free loopback port, on a runtime of its own: the base URL, and the runtime
/// (dropping it stops the server).
pub fn serve_on_loopback(app: axum::Router) -> (String, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let addr = listener.local_addr().expect("the port's address");
    runtime.spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), runtime)
}

/// The text of the first observation of a successful `catena run --json`.
pub fn first_observation(run: &Output) -> String {
    assert!(
        run.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let events = json_lines(run);
    let observation = events
        .iter()
        .find(|e| e["type"] == "observation")
        .unwrap_or_else(|| panic!("no observation in {events:?}"));
    observation["text"].as_str().unwrap_or_default().to_string()
}

/// The texts of the observations of a successful `catena run --json`, in order.
pub fn observations(run: &Output) -> Vec<String> {
    assert!(
        run.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    json_lines(run)
        .iter()
        .filter(|e| e["type"] == "observation")
        .map(|e| e["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The texts of the observations in a server run's event stream (`GET
/// /v1/agent/runs/{id}/events`, server-sent events), in order.
pub fn observations_in_events(events: &str) -> Vec<String> {
    events
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .filter(|e| e["type"] == "observation")
        .map(|e| e["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits at most `patience` for `child` to exit: its status, or `None` once it has been killed
/// for running longer.
pub fn wait_within(
    child: &mut std::process::Child,
    patience: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("the child's status") {
            return Some(status);
        }
        if started.elapsed() > patience {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Runs `command` with its output in files under `dir` and waits at most `patience` for it: a
/// command still going then is killed and the test fails, naming `what` and what it printed on
/// stderr (a hostile input that holds a command is the failure these tests look for).
pub fn output_within(
    command: &mut Command,
    dir: &Path,
    patience: std::time::Duration,
    what: &str,
) -> Output {
    let stdout = dir.join("command.out");
    let stderr = dir.join("command.err");
    let mut child = command
        .stdout(Stdio::from(
            std::fs::File::create(&stdout).expect("stdout file"),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(&stderr).expect("stderr file"),
        ))
        .spawn()
        .expect("the command starts");
    let Some(status) = wait_within(&mut child, patience) else {
        panic!(
            "{what} was still going after {} s: {}",
            patience.as_secs(),
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
    };
    Output {
        status,
        stdout: std::fs::read(&stdout).expect("stdout"),
        stderr: std::fs::read(&stderr).expect("stderr"),
    }
}

/// The files `catena models list --json` shows as installed, run with `catena`'s environment.
pub fn installed_files(mut catena: Command) -> Vec<String> {
    let output = catena
        .args(["models", "list", "--json"])
        .output()
        .expect("running catena models list");
    assert!(output.status.success(), "{output:?}");
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON rows");
    rows.as_array()
        .expect("a list")
        .iter()
        .filter(|r| r["installed"] == true)
        .filter_map(|r| r["file"].as_str().map(str::to_string))
        .collect()
}

/// A Python with the official clients the tests drive Catena with (`tests/python/requirements.txt`:
/// the OpenAI SDK, the Anthropic SDK, the MCP SDK), in a virtual environment in the cache
/// directory.
///
/// Prepared once: the tests of a binary run on parallel threads, and other test processes may
/// want the same environment, so the first caller builds it under an exclusive file lock and the
/// others wait for it (`python3 -m venv --clear` on one path from two callers breaks both).
pub fn test_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(prepare_test_python).clone()
}

fn prepare_test_python() -> PathBuf {
    let requirements = package_dir().join("python/requirements.txt");
    let pinned = std::fs::read_to_string(&requirements).unwrap();
    let cache = paths().cache_dir;
    std::fs::create_dir_all(&cache).unwrap();
    let lock = std::fs::File::create(cache.join("test-venv.lock")).unwrap();
    lock.lock().expect("lock the test virtual environment");
    let venv = cache.join("test-venv");
    let python = venv.join("bin/python");
    let marker = venv.join("catena-requirements.txt");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(pinned.as_str()) {
        let status = Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv)
            .status()
            .expect("python3 -m venv");
        assert!(status.success(), "cannot create a virtual environment");
        let status = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements)
            .status()
            .expect("pip install");
        assert!(status.success(), "cannot install the test clients");
        std::fs::write(&marker, &pinned).unwrap();
    }
    // Dropping the file releases the lock.
    drop(lock);
    python
}

/// The MCP servers the tests start as external tools (`tests/npm`, pinned), installed with
/// `npm ci` into the cache directory once, under the same kind of lock as [`test_python`];
/// returns the `node_modules` folder.
pub fn test_npm_modules() -> PathBuf {
    static MODULES: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    MODULES.get_or_init(prepare_test_npm).clone()
}

fn prepare_test_npm() -> PathBuf {
    let source = package_dir().join("npm");
    let lock_text = std::fs::read_to_string(source.join("package-lock.json")).unwrap();
    let cache = paths().cache_dir;
    std::fs::create_dir_all(&cache).unwrap();
    let lock = std::fs::File::create(cache.join("test-npm.lock")).unwrap();
    lock.lock().expect("lock the test npm folder");
    let folder = cache.join("test-npm");
    let marker = folder.join("catena-package-lock.json");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(lock_text.as_str()) {
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).unwrap();
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(source.join(file), folder.join(file)).unwrap();
        }
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(&folder)
            .status()
            .expect("npm ci (Node.js is installed by scripts/setup/packages.sh)");
        assert!(status.success(), "cannot install the test MCP servers");
        std::fs::write(&marker, &lock_text).unwrap();
    }
    drop(lock);
    folder.join("node_modules")
}

/// Greedy generation of at most `n` tokens after `prompt` (as the user turn of the model's chat
/// template): each token's id and log-probability (NaN where none came back).
pub fn greedy(
    engine: &catena_engine::llama::LlamaEngine,
    prompt: &str,
    n: usize,
) -> Vec<(i32, f32)> {
    use catena_engine_api::{GenerateLimits, SamplingParams, Session, SessionOptions, StopMatcher};
    let mut session = engine
        .session(&SessionOptions {
            context_size: Some(512),
            sampling: SamplingParams::greedy(),
            logprobs: true,
            ..SessionOptions::default()
        })
        .unwrap();
    let parts = engine
        .chat_prompt("You are a helpful assistant.", prompt)
        .unwrap();
    let prompt_len = session.append(&parts).unwrap();
    let stops = StopMatcher::new(Vec::<String>::new());
    session
        .generate(&stops, GenerateLimits::tokens(n), &mut |_| {})
        .unwrap();
    session.tokens()[prompt_len..]
        .iter()
        .map(|t| (t.id, t.logprob.unwrap_or(f32::NAN)))
        .collect()
}

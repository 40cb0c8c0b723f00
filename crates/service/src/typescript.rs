//! The UI's TypeScript types for the service's contract are generated from the Rust types
//! (ts-rs) and committed in `ui/src/lib/generated`; this test fails when the committed files
//! differ from what the types generate, so a change to a type the server or the desktop app sends
//! cannot reach the UI unnoticed. `scripts/test.sh` runs it (`cargo test --workspace`).
//!
//! After changing such a type, regenerate the files and commit them:
//!
//! ```text
//! scripts/setup/ui.sh types
//! ```
//!
//! which runs `CATENA_WRITE_TS=1 cargo test --release -p catena-service typescript`.

use crate::{DownloadStatus, KeyStates};
use crate::{
    Health, KeyName, LibraryModels, List, ProfileInfo, RunFeedback, RunView, ServedModel,
    SessionRuns, StartRun, StartTraining, StartedRun, ToolStatus, TrainingData, TrainingStatus,
    WebSettingsUpdate, WebSettingsView,
};
use catena_agent::{AgentEvent, RunSummary};
use catena_store::SessionInfo;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use ts_rs::{Config, ExportError, TS};

/// Set to write the files instead of checking them.
const WRITE_VAR: &str = "CATENA_WRITE_TS";

/// What regenerates the files.
const REGENERATE: &str = "scripts/setup/ui.sh types";

/// The committed files.
fn generated_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ui/src/lib/generated")
}

/// Writes every type the UI reads or sends, with the types they use, into `dir`.
fn export(dir: &Path) -> Result<(), ExportError> {
    // JSON numbers are JavaScript numbers: counts and milliseconds fit in 2^53.
    let config = Config::new().with_large_int("number").with_out_dir(dir);
    Health::export_all(&config)?;
    List::<ProfileInfo>::export_all(&config)?;
    ToolStatus::export_all(&config)?;
    WebSettingsView::export_all(&config)?;
    WebSettingsUpdate::export_all(&config)?;
    KeyName::export_all(&config)?;
    KeyStates::export_all(&config)?;
    LibraryModels::export_all(&config)?;
    DownloadStatus::export_all(&config)?;
    ServedModel::export_all(&config)?;
    StartRun::export_all(&config)?;
    StartedRun::export_all(&config)?;
    RunView::export_all(&config)?;
    RunFeedback::export_all(&config)?;
    SessionInfo::export_all(&config)?;
    SessionRuns::export_all(&config)?;
    TrainingData::export_all(&config)?;
    StartTraining::export_all(&config)?;
    TrainingStatus::export_all(&config)?;
    // The run events, stored and streamed as JSON (the recorder adds `summary` and `error`).
    AgentEvent::export_all(&config)?;
    RunSummary::export_all(&config)?;
    Ok(())
}

/// The `.ts` files under `dir` (its README is not generated), by path relative to `dir`.
fn ts_files(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, files: &mut BTreeMap<PathBuf, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, files);
            } else if path.extension().is_some_and(|e| e == "ts") {
                let text = std::fs::read_to_string(&path).unwrap();
                files.insert(path.strip_prefix(root).unwrap().to_path_buf(), text);
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(dir, dir, &mut files);
    files
}

#[test]
fn typescript_types_match_the_rust_types() {
    let committed = generated_dir();
    if std::env::var_os(WRITE_VAR).is_some() {
        // Types that were removed must not linger.
        for old in ts_files(&committed).keys() {
            std::fs::remove_file(committed.join(old)).unwrap();
        }
        export(&committed).unwrap();
        eprintln!("wrote {}", committed.display());
        return;
    }
    let fresh = tempfile::tempdir().unwrap();
    export(fresh.path()).unwrap();
    let want = ts_files(fresh.path());
    let have = ts_files(&committed);
    let mut drift = Vec::new();
    for (path, text) in &want {
        match have.get(path) {
            None => drift.push(format!("missing: {}", path.display())),
            Some(committed) if committed != text => {
                drift.push(format!(
                    "differs: {}\n--- committed\n{committed}\n--- generated\n{text}",
                    path.display()
                ));
            }
            Some(_) => {}
        }
    }
    for path in have.keys().filter(|path| !want.contains_key(*path)) {
        drift.push(format!("not generated any more: {}", path.display()));
    }
    assert!(
        drift.is_empty(),
        "the TypeScript types in {} are not what the Rust types generate; regenerate them with \
         `{REGENERATE}` and commit them:\n{}",
        committed.display(),
        drift.join("\n")
    );
    assert!(want.len() > 20, "only {} files were generated", want.len());
}

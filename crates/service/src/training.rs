//! Training runs started from a user interface: `<program> train sft --json ...` as a child
//! process (the same binary, `catena` or `catena-desktop`), its JSON-lines progress kept in
//! memory for the UI to poll and plot, and `stop` written to its stdin to end it at the next
//! step with a checkpoint (the same command started again resumes it).

use crate::ServiceError;
use crate::contract::{DataFile, TrainingData};
use catena_hub::config::Paths;
use catena_train_events::{SftEvent, TrainingState};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use ts_rs::TS;

/// Lines of the trainer's stderr kept to explain a failure.
const STDERR_TAIL: usize = 20;

/// A training run to start (the flags of `catena train sft`).
///
/// A request names files, never paths: whoever can reach the server (a UI, a script, a page
/// that got past the boundary) must not be able to make it read or write anywhere else.
#[derive(Debug, Clone, Default, Deserialize, Serialize, TS)]
#[serde(deny_unknown_fields)]
#[ts(rename = "TrainingRequest", optional_fields)]
pub struct StartTraining {
    /// The trajectories (our JSONL or the AFM alpaca JSON): a file name in the exports folder,
    /// `<data dir>/exports`.
    pub data: String,
    /// The adapter's name; it goes to `<data dir>/adapters/<name>`. Default: the run's id.
    #[serde(default)]
    pub out: Option<String>,
    /// The base model: an installed model (a catalog id or a downloaded file's name). Default:
    /// the model being served.
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default)]
    pub rank: Option<usize>,
    #[serde(default)]
    pub alpha: Option<f32>,
    #[serde(default)]
    pub lr: Option<f64>,
    #[serde(default)]
    pub epochs: Option<usize>,
    #[serde(default)]
    pub batch_tokens: Option<usize>,
    #[serde(default)]
    pub max_steps: Option<usize>,
}

/// A training run as the UI sees it.
#[derive(Debug, Clone, Serialize, TS)]
pub struct TrainingStatus {
    pub id: String,
    pub status: TrainingState,
    pub data: String,
    pub out: String,
    /// The trainer's events from index `from` on (`prepared`, `step`, `eval`, `finished`...).
    pub events: Vec<SftEvent>,
    /// Index of the first event of `events`; ask for `from + events.len()` next.
    pub from: usize,
    pub error: Option<String>,
}

struct Run {
    id: String,
    data: String,
    out: String,
    state: Mutex<State>,
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
}

struct State {
    status: TrainingState,
    events: Vec<SftEvent>,
    /// The last lines the trainer wrote on stderr (and what could not be read), for a failure.
    stderr: Vec<String>,
    error: Option<String>,
}

impl State {
    /// Keeps `line` among the last [`STDERR_TAIL`] messages.
    fn note(&mut self, line: String) {
        self.stderr.push(line);
        let excess = self.stderr.len().saturating_sub(STDERR_TAIL);
        self.stderr.drain(..excess);
    }
}

/// The training runs of this process.
pub struct Training {
    program: PathBuf,
    paths: Paths,
    runs: Mutex<Vec<Arc<Run>>>,
}

/// Checks that `name` is one plain file or folder name: no separator, no `..`, not hidden,
/// nothing a shell or a file system treats specially.
fn plain_name(name: &str, field: &'static str) -> Result<(), ServiceError> {
    if catena_protocol::names::is_plain_name(name) {
        Ok(())
    } else {
        Err(ServiceError::invalid(format!(
            "`{field}` must be a plain name (letters, digits, `.`, `-`, `_`; not a path)"
        ))
        .param(field))
    }
}

/// A training request whose names were checked.
struct CheckedRequest {
    /// The data file's name in the exports folder.
    name: String,
    data: PathBuf,
    /// The adapter's folder name, when the request gave one.
    out_name: Option<String>,
    base: PathBuf,
}

/// Follows a trainer child to its end: its progress events and messages into the run's state,
/// then its exit as the run's status.
async fn watch(run: Arc<Run>, mut child: tokio::process::Child) {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    tokio::join!(read_progress(&run, stdout), read_messages(&run, stderr));
    let exit = child.wait().await;
    let mut state = run.state.lock();
    match exit {
        Ok(status) => {
            state.status = TrainingState::from_exit_code(status.code());
            if state.status == TrainingState::Failed {
                let said = state.stderr.join("\n");
                state.error = Some(if said.is_empty() {
                    format!("the trainer exited with {status}")
                } else {
                    said
                });
            }
        }
        Err(e) => {
            state.status = TrainingState::Failed;
            state.error = Some(format!("lost the trainer: {e}"));
        }
    }
}

/// The trainer's progress lines. Read as bytes, so that no line (whatever its encoding) can end
/// the reading early; what cannot be read is kept with the trainer's messages, which a failure
/// shows.
async fn read_progress(run: &Run, stdout: Option<tokio::process::ChildStdout>) {
    let Some(stdout) = stdout else { return };
    let mut lines = BufReader::new(stdout).split(b'\n');
    loop {
        match lines.next_segment().await {
            Ok(Some(line)) => match serde_json::from_slice::<SftEvent>(&line) {
                Ok(event) => run.state.lock().events.push(event),
                Err(e) => run.state.lock().note(format!(
                    "an unreadable progress line ({e}): {}",
                    String::from_utf8_lossy(&line)
                )),
            },
            Ok(None) => break,
            Err(e) => {
                run.state
                    .lock()
                    .note(format!("reading the trainer's progress failed: {e}"));
                break;
            }
        }
    }
}

/// The trainer's messages (its standard error), kept for a failure to show.
async fn read_messages(run: &Run, stderr: Option<tokio::process::ChildStderr>) {
    let Some(stderr) = stderr else { return };
    let mut lines = BufReader::new(stderr).split(b'\n');
    loop {
        match lines.next_segment().await {
            Ok(Some(line)) => run
                .state
                .lock()
                .note(String::from_utf8_lossy(&line).into_owned()),
            Ok(None) => break,
            Err(e) => {
                run.state
                    .lock()
                    .note(format!("reading the trainer's messages failed: {e}"));
                break;
            }
        }
    }
}

impl Training {
    /// Runs `program train sft ...` with Catena's folders under `paths`.
    pub fn new(program: PathBuf, paths: Paths) -> Training {
        Training {
            program,
            paths,
            runs: Mutex::new(Vec::new()),
        }
    }

    /// Starts a run on `served_model` unless the request names an installed base model. One at
    /// a time: training takes every core this machine has.
    pub fn start(
        &self,
        request: StartTraining,
        served_model: &Path,
    ) -> Result<TrainingStatus, ServiceError> {
        let checked = self.check(&request, served_model)?;
        let mut runs = self.runs.lock();
        if let Some(running) = runs
            .iter()
            .find(|r| r.state.lock().status == TrainingState::Running)
        {
            return Err(ServiceError::conflict(format!(
                "training run {} is still running; stop it first",
                running.id
            )));
        }
        let id = format!("train-{}", uuid::Uuid::now_v7().simple());
        let out = self
            .paths
            .adapters_dir()
            .join(checked.out_name.as_deref().unwrap_or(&id));
        let mut child = self
            .command(&request, &checked, &out)
            .spawn()
            .map_err(|e| {
                ServiceError::internal(format!(
                    "could not start the trainer ({}): {e}",
                    self.program.display()
                ))
            })?;
        let run = Arc::new(Run {
            id: id.clone(),
            data: checked.name,
            out: out.display().to_string(),
            state: Mutex::new(State {
                status: TrainingState::Running,
                events: Vec::new(),
                stderr: Vec::new(),
                error: None,
            }),
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
        });
        tokio::spawn(watch(run.clone(), child));
        let status = status_of(&run, 0);
        runs.push(run);
        Ok(status)
    }

    /// The request's names checked (plain names, data that exists, an installed base model).
    fn check(
        &self,
        request: &StartTraining,
        served_model: &Path,
    ) -> Result<CheckedRequest, ServiceError> {
        let name = request.data.trim();
        if name.is_empty() {
            return Err(ServiceError::invalid("`data` names no file").param("data"));
        }
        plain_name(name, "data")?;
        let out_name = request
            .out
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty());
        if let Some(out) = out_name {
            plain_name(out, "out")?;
        }
        let data = self.paths.exports_dir().join(name);
        if !data.is_file() {
            return Err(ServiceError::invalid(format!(
                "no training data named `{name}` in the exports folder ({})",
                self.paths.exports_dir().display()
            ))
            .param("data"));
        }
        let base = match request.base.as_deref().map(str::trim) {
            Some(reference) if !reference.is_empty() => {
                catena_hub::installed::resolve_installed(reference, &self.paths)
                    .map_err(|e| ServiceError::invalid(e.to_string()).param("base"))?
            }
            _ => served_model.to_path_buf(),
        };
        Ok(CheckedRequest {
            name: name.to_string(),
            data,
            out_name: out_name.map(str::to_string),
            base,
        })
    }

    /// `catena train sft --json` for the request, with this server's folders.
    fn command(
        &self,
        request: &StartTraining,
        checked: &CheckedRequest,
        out: &Path,
    ) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(["train", "sft", "--json", "--data"])
            .arg(&checked.data)
            .arg("--out")
            .arg(out)
            .arg("--base")
            .arg(&checked.base)
            // The folders this server uses, whatever the child's defaults would be.
            .env(catena_hub::config::DATA_DIR_ENV, &self.paths.data_dir)
            .env(catena_hub::config::CACHE_DIR_ENV, &self.paths.cache_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let numbers = [
            ("--rank", request.rank.map(|v| v.to_string())),
            ("--alpha", request.alpha.map(|v| v.to_string())),
            ("--lr", request.lr.map(|v| v.to_string())),
            ("--epochs", request.epochs.map(|v| v.to_string())),
            (
                "--batch-tokens",
                request.batch_tokens.map(|v| v.to_string()),
            ),
            ("--max-steps", request.max_steps.map(|v| v.to_string())),
        ];
        for (flag, value) in numbers {
            if let Some(value) = value {
                command.args([flag, &value]);
            }
        }
        command
    }

    /// The training data a run may use: the files of the exports folder (created when missing,
    /// so the user can find it), by name.
    pub fn data_files(&self) -> Result<TrainingData, ServiceError> {
        let folder = self.paths.exports_dir();
        let cannot = |e: std::io::Error| {
            ServiceError::internal(format!(
                "cannot read the exports folder {}: {e}",
                folder.display()
            ))
        };
        std::fs::create_dir_all(&folder).map_err(cannot)?;
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&folder).map_err(cannot)? {
            let entry = entry.map_err(cannot)?;
            let Ok(meta) = entry.metadata() else { continue };
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if meta.is_file() && plain_name(&name, "data").is_ok() {
                files.push(DataFile {
                    name,
                    bytes: meta.len(),
                });
            }
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(TrainingData {
            folder,
            data: files,
        })
    }

    /// One run, with its events from index `from` on.
    pub fn get(&self, id: &str, from: usize) -> Result<TrainingStatus, ServiceError> {
        let runs = self.runs.lock();
        let run = runs
            .iter()
            .find(|r| r.id == id)
            .ok_or_else(|| ServiceError::not_found(format!("no training run {id}")))?;
        Ok(status_of(run, from))
    }

    /// Every run of this process, newest first, without their events.
    pub fn list(&self) -> Vec<TrainingStatus> {
        let runs = self.runs.lock();
        runs.iter()
            .rev()
            .map(|r| {
                let mut s = status_of(r, usize::MAX);
                s.from = r.state.lock().events.len();
                s
            })
            .collect()
    }

    /// Asks a running run to stop after its current step (it checkpoints first).
    pub async fn stop(&self, id: &str) -> Result<TrainingStatus, ServiceError> {
        let run = {
            let runs = self.runs.lock();
            runs.iter()
                .find(|r| r.id == id)
                .cloned()
                .ok_or_else(|| ServiceError::not_found(format!("no training run {id}")))?
        };
        if run.state.lock().status != TrainingState::Running {
            return Err(ServiceError::conflict(format!(
                "training run {id} is not running"
            )));
        }
        let mut stdin = run.stdin.lock().await;
        if let Some(pipe) = stdin.as_mut() {
            pipe.write_all(b"stop\n")
                .await
                .map_err(|e| ServiceError::internal(format!("could not reach the trainer: {e}")))?;
            pipe.flush().await.ok();
        }
        Ok(status_of(&run, usize::MAX))
    }
}

fn status_of(run: &Run, from: usize) -> TrainingStatus {
    let state = run.state.lock();
    let from = from.min(state.events.len());
    TrainingStatus {
        id: run.id.clone(),
        status: state.status,
        data: run.data.clone(),
        out: run.out.clone(),
        events: state.events[from..].to_vec(),
        from,
        error: state.error.clone(),
    }
}

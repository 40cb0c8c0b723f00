//! Where runs outlive the terminal: SQLite (WAL) in the data directory holds sessions, runs,
//! every event of every run, results, usage and the user's feedback.
//!
//! Each event is committed on its own as it streams, before anyone is shown it, so a crash or a
//! `kill -9` loses nothing that was already shown. A run still marked `running` whose process is
//! gone is marked `interrupted` by the next process that opens the store: every process holds an
//! exclusive lock on a file named after it for as long as its store is open, so "is the owner
//! alive?" is "is its lock still held?", with no process ids to be reused.

mod export;
mod held_ends;
mod messages;
mod recorder;
mod schema;

pub use export::{ExportFormat, ExportStats, FeedbackFilter, Message, SftRecord};
pub use recorder::Recorder;

use held_ends::{EndRow, HeldEnds};
use messages::List;

use parking_lot::{Mutex, MutexGuard};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The database file inside the data directory.
pub const DB_FILE: &str = "catena.db";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the session store {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("the session store: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("no run {0}")]
    NoRun(String),
    #[error("no session {0}")]
    NoSession(String),
    #[error(
        "the session store cannot be written (no lock can be taken in {0}): it is open for reading only"
    )]
    ReadOnly(PathBuf),
    #[error("writing the export: {0}")]
    Write(#[from] std::io::Error),
    #[error(
        "the session store was made by a newer Catena (schema {found}, this one knows {known})"
    )]
    TooNew { found: i64, known: i64 },
}

/// What kind of run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// A Chain-of-Agents run (`catena run`, the agent API).
    Agent,
    /// A chat completion (the OpenAI-compatible API).
    Chat,
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Finished,
    Failed,
    Cancelled,
    /// Its process ended while it ran (a crash, a kill).
    Interrupted,
}

/// The user's verdict on a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Feedback {
    Good,
    Bad,
}

macro_rules! text_enum {
    ($ty:ty { $($variant:ident = $text:literal),* $(,)? }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),* }
            }
            fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some(Self::$variant),)* _ => None }
            }
        }
    };
}
text_enum!(RunKind { Agent = "agent", Chat = "chat" });
text_enum!(RunStatus {
    Running = "running",
    Finished = "finished",
    Failed = "failed",
    Cancelled = "cancelled",
    Interrupted = "interrupted",
});
text_enum!(Feedback { Good = "good", Bad = "bad" });

/// A run about to start.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    /// The session it belongs to; `None` starts a new session named after the task.
    pub session: Option<&'a str>,
    pub kind: RunKind,
    pub task: &'a str,
    pub profile: Option<&'a str>,
    pub model: &'a str,
    pub adapter: Option<&'a str>,
    /// The settings it ran with (sampling, budgets, limits), as given.
    pub options: Value,
    pub system_prompt: &'a str,
    pub user_prompt: &'a str,
}

/// Token counts of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct Usage {
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub context_tokens: u64,
    /// Prompt tokens found already evaluated in a kept KV cache.
    pub cached_tokens: u64,
    pub tool_calls: u64,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunEnd<'a> {
    pub status: RunStatus,
    pub answer: Option<&'a str>,
    pub stop_reason: Option<&'a str>,
    pub trajectory: Option<&'a str>,
    pub summary: Option<Value>,
    pub error: Option<&'a str>,
    pub usage: Usage,
}

impl<'a> RunEnd<'a> {
    /// The end of a run that failed (or was refused) with `error`, before it produced anything.
    pub fn failed(error: &'a str) -> RunEnd<'a> {
        RunEnd {
            status: RunStatus::Failed,
            answer: None,
            stop_reason: None,
            trajectory: None,
            summary: None,
            error: Some(error),
            usage: Usage::default(),
        }
    }
}

/// A stored run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct RunRecord {
    pub id: String,
    pub session_id: String,
    pub kind: RunKind,
    pub status: RunStatus,
    pub task: String,
    pub profile: Option<String>,
    pub model: String,
    pub adapter: Option<String>,
    pub options: Value,
    pub system_prompt: String,
    pub user_prompt: String,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub answer: Option<String>,
    pub stop_reason: Option<String>,
    pub trajectory: Option<String>,
    pub summary: Option<Value>,
    pub error: Option<String>,
    pub usage: Usage,
    pub feedback: Option<Feedback>,
    pub feedback_note: Option<String>,
}

/// A session in a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct SessionInfo {
    pub id: String,
    pub title: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub runs: u64,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    /// 1, 2, 3... within the run: the SSE event id.
    pub seq: u64,
    pub at_ms: i64,
    pub data: Value,
}

/// This process's claim on its runs, held while the store is open: a file in the lock folder,
/// locked while the process lives (the lock ends with the process, however it ends).
struct Owner {
    id: String,
    path: PathBuf,
    _lock: File,
}

impl Owner {
    /// Creates and locks the owner's file under a name no one reads, then gives it its name, so
    /// a lock file another process finds is always locked while its owner lives (one found
    /// unlocked is a dead owner's, and may be removed).
    fn claim(lock_dir: &Path) -> std::io::Result<Owner> {
        let id = new_id();
        let path = lock_dir.join(format!("{id}.lock"));
        let pending = lock_dir.join(format!("{id}.lock-pending"));
        let lock = File::create(&pending)?;
        lock.lock()?;
        std::fs::rename(&pending, &path)?;
        Ok(Owner {
            id,
            path,
            _lock: lock,
        })
    }
}

impl Drop for Owner {
    /// The file goes while it is still locked; a process that is killed leaves it unlocked, for
    /// the next store opened to remove.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The session store.
pub struct Store {
    conn: Mutex<Connection>,
    /// `None` when the store was opened for reading only: its folder cannot be written.
    owner: Option<Owner>,
    lock_dir: PathBuf,
    /// Ends of this process's runs that could not be written (a full disk), written later.
    held_ends: HeldEnds,
    /// Whether messages are kept once (`messages.rs`); not in a store of an older schema that
    /// could not be brought up to date (a read-only or full disk), which is used as it is.
    lists: bool,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn new_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

impl Store {
    /// Opens (creating or migrating) the store in `data_dir`, and marks runs whose process is gone
    /// as interrupted.
    pub fn open_in(data_dir: &Path) -> Result<Store, StoreError> {
        Store::open(&data_dir.join(DB_FILE))
    }

    /// A store whose folder cannot be written (a read-only disk, another user's folder) is
    /// opened for reading, with a warning: its history can be listed, shown and exported, and
    /// what would write to it fails with [`StoreError::ReadOnly`] or SQLite's read-only error.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let lock_dir = dir.join("catena-owners");
        let claimed = std::fs::create_dir_all(&lock_dir).and_then(|()| Owner::claim(&lock_dir));
        let open_err = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let (conn, owner) = match claimed {
            Ok(owner) => (Connection::open(path).map_err(open_err)?, Some(owner)),
            Err(e) => {
                tracing::warn!(
                    folder = %lock_dir.display(),
                    error = %e,
                    "the session store cannot be written here: it is opened for reading only"
                );
                (open_for_reading(path).map_err(open_err)?, None)
            }
        };
        if owner.is_some() {
            conn.pragma_update(None, "journal_mode", "WAL")
                .map_err(open_err)?;
        }
        // NORMAL in WAL mode: a committed event survives the process dying at any moment.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(open_err)?;
        let schema = migrate(&conn)?;
        let store = Store {
            conn: Mutex::new(conn),
            owner,
            lock_dir,
            held_ends: HeldEnds::default(),
            lists: schema >= schema::MESSAGE_LISTS,
        };
        if store.owner.is_none() {
            return Ok(store);
        }
        // A store that cannot be written (a full disk) can still be read: the dead processes'
        // runs are marked the next time it can be.
        if let Err(e) = store.mark_orphans_interrupted() {
            tracing::warn!(error = %e, "the runs of processes that ended could not be marked interrupted");
        }
        store.remove_dead_owners();
        Ok(store)
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    /// This process's owner id, for a run it starts; an error when the store is only read.
    fn owner_id(&self) -> Result<&str, StoreError> {
        match &self.owner {
            Some(owner) => Ok(&owner.id),
            None => Err(StoreError::ReadOnly(self.lock_dir.clone())),
        }
    }

    /// Marks `running` runs of processes that no longer hold their lock as `interrupted`; returns
    /// how many.
    pub fn mark_orphans_interrupted(&self) -> Result<usize, StoreError> {
        let owners: Vec<String> = {
            let conn = self.conn();
            let mut stmt =
                conn.prepare("SELECT DISTINCT owner FROM runs WHERE status = 'running'")?;
            stmt.query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        };
        let mut marked = 0;
        for owner in owners {
            if self.owner_id().is_ok_and(|id| id == owner) || self.owner_alive(&owner) {
                continue;
            }
            let conn = self.conn();
            marked += conn.execute(
                "UPDATE runs SET status = 'interrupted', finished_ms = ?1,
                     error = COALESCE(error, 'the process running it ended before it finished')
                 WHERE owner = ?2 AND status = 'running'",
                params![now_ms(), owner],
            )?;
            let _ = std::fs::remove_file(self.lock_dir.join(format!("{owner}.lock")));
        }
        Ok(marked)
    }

    /// Removes the lock files of processes that ended without removing their own (killed, or
    /// from before owners removed theirs); without this the folder grows by a file a process.
    /// A dead owner's runs still running are marked by [`Self::mark_orphans_interrupted`],
    /// which finds a missing file as dead as an unlocked one.
    fn remove_dead_owners(&self) {
        let Ok(entries) = std::fs::read_dir(&self.lock_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(owner) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                continue;
            };
            if !self.owner_id().is_ok_and(|id| id == owner) && !self.owner_alive(owner) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Whether the process that owns runs as `owner` still holds its lock.
    fn owner_alive(&self, owner: &str) -> bool {
        let path = self.lock_dir.join(format!("{owner}.lock"));
        let Ok(file) = File::open(&path) else {
            return false;
        };
        match file.try_lock() {
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(_)) => false,
        }
    }

    /// Keeps a Responses API answer's whole conversation (JSON), for `previous_response_id`.
    /// A conversation that is a list keeps each of its messages once (`messages.rs`), and its
    /// row holds an empty text; any other is kept as it is.
    pub fn put_response(&self, id: &str, conversation: &str) -> Result<(), StoreError> {
        let messages = match serde_json::from_str::<Value>(conversation) {
            Ok(Value::Array(messages)) if self.lists => Some(messages),
            _ => None,
        };
        let mut conn = self.conn();
        let tx = write_transaction(&mut conn)?;
        let inline = if messages.is_some() { "" } else { conversation };
        tx.execute(
            "INSERT OR REPLACE INTO responses (id, created_ms, conversation) VALUES (?1, ?2, ?3)",
            params![id, now_ms(), inline],
        )?;
        if self.lists {
            messages::write(
                &tx,
                List::Response,
                id,
                messages.as_deref().unwrap_or_default(),
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The conversation kept for response `id`, if there is one.
    pub fn response(&self, id: &str) -> Result<Option<String>, StoreError> {
        let conn = self.conn();
        let Some(inline) = conn
            .query_row(
                "SELECT conversation FROM responses WHERE id = ?1",
                params![id],
                |row| row.get::<_, String>(0),
            )
            .optional()?
        else {
            return Ok(None);
        };
        if !inline.is_empty() || !self.lists {
            return Ok(Some(inline));
        }
        let messages = messages::read(&conn, List::Response, id)?.unwrap_or_default();
        Ok(Some(Value::Array(messages).to_string()))
    }

    /// Records a run as started (in a new session unless one is given); returns its id. The
    /// session and the run are written together: a store that fails half way (a full disk)
    /// keeps no session without its run.
    pub fn start_run(&self, run: &NewRun<'_>) -> Result<String, StoreError> {
        let owner = self.owner_id()?;
        let mut conn = self.conn();
        self.held_ends.write_all(&conn);
        let tx = write_transaction(&mut conn)?;
        let now = now_ms();
        let session = match run.session {
            Some(id) => {
                let exists = tx
                    .query_row("SELECT 1 FROM sessions WHERE id = ?1", [id], |_| Ok(()))
                    .optional()?
                    .is_some();
                if !exists {
                    return Err(StoreError::NoSession(id.to_string()));
                }
                tx.execute(
                    "UPDATE sessions SET updated_ms = ?1 WHERE id = ?2",
                    params![now, id],
                )?;
                id.to_string()
            }
            None => {
                let id = new_id();
                tx.execute(
                    "INSERT INTO sessions (id, title, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?3)",
                    params![id, title_of(run.task), now],
                )?;
                id
            }
        };
        let id = new_id();
        let mut options = run.options.clone();
        let messages = if self.lists {
            messages::take(&mut options)
        } else {
            None
        };
        tx.execute(
            "INSERT INTO runs (id, session_id, kind, status, task, profile, model, adapter,
                 options_json, system_prompt, user_prompt, owner, started_ms)
             VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                id,
                session,
                run.kind.as_str(),
                run.task,
                run.profile,
                run.model,
                run.adapter,
                options.to_string(),
                run.system_prompt,
                run.user_prompt,
                owner,
                now
            ],
        )?;
        if let Some(messages) = messages {
            messages::write(&tx, List::Run, &id, &messages)?;
        }
        tx.commit()?;
        Ok(id)
    }

    fn session_exists(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT 1 FROM sessions WHERE id = ?1", [id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Appends an event to a run and commits it; returns its sequence number: the one after the
    /// run's last stored event, or `at_least` when that is higher (the number a recorder already
    /// showed, past events the store could not take, so that a follower resuming from the store
    /// reads the numbers it was shown).
    ///
    /// The commit is its own step, whose error is returned: an `INSERT ... RETURNING` read with
    /// `query_row` hands back its row before the statement ends, and a commit that then fails (a
    /// full disk) was dropped unseen, so events were reported saved that were not.
    pub fn append_event(
        &self,
        run: &str,
        kind: &str,
        data: &Value,
        at_least: u64,
    ) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let tx = write_transaction(&mut conn)?;
        let seq: i64 = tx.query_row(
            "SELECT MAX(COALESCE(MAX(seq), 0) + 1, ?2) FROM events WHERE run_id = ?1",
            params![run, at_least.min(i64::MAX as u64) as i64],
            |r| r.get(0),
        )?;
        tx.execute(
            "INSERT INTO events (run_id, seq, at_ms, type, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![run, seq, now_ms(), kind, data.to_string()],
        )?;
        tx.commit()?;
        Ok(seq as u64)
    }

    /// Events of a run after `after` (0 for all), in order.
    pub fn events(&self, run: &str, after: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT seq, at_ms, data FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq",
        )?;
        let rows = stmt.query_map(params![run, after as i64], |r| {
            let data: String = r.get(2)?;
            Ok(StoredEvent {
                seq: r.get::<_, i64>(0)? as u64,
                at_ms: r.get(1)?,
                data: serde_json::from_str(&data).unwrap_or(Value::String(data)),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records how a run ended. An end the store cannot take (a full disk) is an error, and is
    /// held: the run reads as ended from this store, and the end is written with the next run
    /// started or ended here.
    pub fn finish_run(&self, run: &str, end: &RunEnd<'_>) -> Result<(), StoreError> {
        let end = EndRow::new(end);
        let conn = self.conn();
        self.held_ends.write_all(&conn);
        match end.write(&conn, run) {
            Err(StoreError::Sql(e)) => {
                self.held_ends.hold(run, end);
                Err(StoreError::Sql(e))
            }
            written => written,
        }
    }

    /// Records the user's verdict on a run (or clears it with `None`).
    pub fn set_feedback(
        &self,
        run: &str,
        feedback: Option<Feedback>,
        note: Option<&str>,
    ) -> Result<(), StoreError> {
        let changed = self.conn().execute(
            "UPDATE runs SET feedback = ?2, feedback_note = ?3 WHERE id = ?1",
            params![run, feedback.map(Feedback::as_str), note],
        )?;
        if changed == 0 {
            return Err(StoreError::NoRun(run.to_string()));
        }
        Ok(())
    }

    pub fn run(&self, id: &str) -> Result<RunRecord, StoreError> {
        let conn = self.conn();
        let mut run = conn
            .query_row(&format!("{RUN_COLUMNS} WHERE id = ?1"), [id], run_from_row)
            .optional()?
            .ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        if self.lists {
            messages::restore(&conn, &run.id, &mut run.options)?;
        }
        self.held_ends.apply(&mut run);
        Ok(run)
    }

    /// The session a run belongs to: one column, where [`Store::run`] reads the whole run back
    /// (a chat run's conversation among it, one text per message).
    pub fn session_of(&self, run: &str) -> Result<String, StoreError> {
        self.conn()
            .query_row("SELECT session_id FROM runs WHERE id = ?1", [run], |row| {
                row.get(0)
            })
            .optional()?
            .ok_or_else(|| StoreError::NoRun(run.to_string()))
    }

    /// The runs of a session, oldest first.
    pub fn session_runs(&self, session: &str) -> Result<Vec<RunRecord>, StoreError> {
        if !self.session_exists(session)? {
            return Err(StoreError::NoSession(session.to_string()));
        }
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "{RUN_COLUMNS} WHERE session_id = ?1 ORDER BY started_ms, id"
        ))?;
        let mut runs: Vec<RunRecord> = stmt
            .query_map([session], run_from_row)?
            .collect::<Result<_, _>>()?;
        for run in &mut runs {
            if self.lists {
                messages::restore(&conn, &run.id, &mut run.options)?;
            }
            self.held_ends.apply(run);
        }
        Ok(runs)
    }

    /// Sessions, most recently used first; `search` matches titles, tasks and answers.
    pub fn list_sessions(
        &self,
        search: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        let pattern = search.map(|s| format!("%{}%", s.replace('%', "\\%").replace('_', "\\_")));
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT s.id, s.title, s.created_ms, s.updated_ms,
                    (SELECT COUNT(*) FROM runs r WHERE r.session_id = s.id)
             FROM sessions s
             WHERE ?1 IS NULL OR s.title LIKE ?1 ESCAPE '\\' OR EXISTS (
                 SELECT 1 FROM runs r WHERE r.session_id = s.id
                   AND (r.task LIKE ?1 ESCAPE '\\' OR r.answer LIKE ?1 ESCAPE '\\'))
             ORDER BY s.updated_ms DESC, s.id DESC
             LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![pattern, limit as i64], |r| {
            Ok(SessionInfo {
                id: r.get(0)?,
                title: r.get(1)?,
                created_ms: r.get(2)?,
                updated_ms: r.get(3)?,
                runs: r.get::<_, i64>(4)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes a session with its runs, their events and the messages no other run was asked
    /// with.
    pub fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = write_transaction(&mut conn)?;
        if self.lists {
            messages::release_session(&tx, id)?;
        }
        let changed = tx.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
        if changed == 0 {
            return Err(StoreError::NoSession(id.to_string()));
        }
        tx.commit()?;
        Ok(())
    }

    /// The ids of the finished runs matching `filter`, oldest first (for export, which reads
    /// the runs one at a time).
    pub(crate) fn finished_run_ids(
        &self,
        filter: FeedbackFilter,
    ) -> Result<Vec<String>, StoreError> {
        let clause = match filter {
            FeedbackFilter::Any => "",
            FeedbackFilter::Good => " AND feedback = 'good'",
            FeedbackFilter::Bad => " AND feedback = 'bad'",
            FeedbackFilter::Rated => " AND feedback IS NOT NULL",
            FeedbackFilter::Unrated => " AND feedback IS NULL",
        };
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT id FROM runs WHERE status = 'finished' AND trajectory IS NOT NULL{clause}
             ORDER BY started_ms, id"
        ))?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// A session's title: the first line of its first task, shortened.
fn title_of(task: &str) -> String {
    let line = task
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut title: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        title.push('…');
    }
    if title.is_empty() {
        "untitled".into()
    } else {
        title
    }
}

const RUN_COLUMNS: &str = "SELECT id, session_id, kind, status, task, profile, model, adapter,
    options_json, system_prompt, user_prompt, started_ms, finished_ms, answer, stop_reason,
    trajectory, summary_json, error, prompt_tokens, generated_tokens, context_tokens,
    cached_tokens, tool_calls, feedback, feedback_note FROM runs";

fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let text = |i: usize| -> rusqlite::Result<String> { r.get(i) };
    let json = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
    let count = |i: usize| -> rusqlite::Result<u64> {
        Ok(r.get::<_, Option<i64>>(i)?.unwrap_or(0).max(0) as u64)
    };
    let bad = |i: usize, what: &str| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            format!("unknown {what}").into(),
        )
    };
    Ok(RunRecord {
        id: text(0)?,
        session_id: text(1)?,
        kind: RunKind::parse(&text(2)?).ok_or_else(|| bad(2, "kind"))?,
        status: RunStatus::parse(&text(3)?).ok_or_else(|| bad(3, "status"))?,
        task: text(4)?,
        profile: r.get(5)?,
        model: text(6)?,
        adapter: r.get(7)?,
        options: json(r.get(8)?).unwrap_or(Value::Null),
        system_prompt: text(9)?,
        user_prompt: text(10)?,
        started_ms: r.get(11)?,
        finished_ms: r.get(12)?,
        answer: r.get(13)?,
        stop_reason: r.get(14)?,
        trajectory: r.get(15)?,
        summary: json(r.get(16)?),
        error: r.get(17)?,
        usage: Usage {
            prompt_tokens: count(18)?,
            generated_tokens: count(19)?,
            context_tokens: count(20)?,
            cached_tokens: count(21)?,
            tool_calls: count(22)?,
        },
        feedback: r
            .get::<_, Option<String>>(23)?
            .and_then(|f| Feedback::parse(&f)),
        feedback_note: r.get(24)?,
    })
}

/// A transaction that takes the write lock at its start, waiting for it as `busy_timeout` says:
/// one that reads first and writes after would fail at once (SQLITE_BUSY, no wait) when another
/// process wrote in between, as `catena serve` and `catena run` may on one store.
fn write_transaction(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, StoreError> {
    Ok(conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?)
}

/// Opens the database read-only. In WAL mode SQLite must be able to create the shared-memory
/// file beside it, which a read-only folder refuses; without a write-ahead log left over, the
/// database file then holds everything, and is read as immutable.
fn open_for_reading(path: &Path) -> Result<Connection, rusqlite::Error> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    let readable = conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()));
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    match readable {
        Err(_) if !Path::new(&wal).exists() => {
            let mut uri = String::from("file:");
            for c in path.to_string_lossy().chars() {
                match c {
                    '?' | '#' | '%' => uri.push_str(&format!("%{:02X}", c as u32)),
                    c => uri.push(c),
                }
            }
            uri.push_str("?immutable=1");
            Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
        }
        Err(e) => Err(e),
        Ok(()) => Ok(conn),
    }
}

/// Brings the schema to this build's version; returns the schema in effect. A store already
/// there is only read (it may not be writable). Otherwise the version is read again inside a
/// transaction that holds the write lock, so two processes opening a new store at once migrate
/// it once (the second found `table sessions already exists`).
fn migrate(conn: &Connection) -> Result<i64, StoreError> {
    let known = schema::MIGRATIONS.len() as i64;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version == known {
        return Ok(known);
    }
    match migrate_from(conn, known) {
        // A store this build can still use as it is (its runs and responses tables) is read and
        // written in its own schema when it cannot be brought up to date: on a read-only disk,
        // or a full one.
        Err(StoreError::Sql(e)) if version >= schema::USABLE_FROM => {
            tracing::warn!(
                error = %e,
                "the session store could not be brought from schema {version} to {known}: it is used as it is"
            );
            Ok(version)
        }
        migrated => migrated.map(|()| known),
    }
}

fn migrate_from(conn: &Connection, known: i64) -> Result<(), StoreError> {
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > known {
        return Err(StoreError::TooNew {
            found: version,
            known,
        });
    }
    for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests;

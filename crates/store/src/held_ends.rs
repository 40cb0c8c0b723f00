//! Run ends the store could not write when their runs ended (a full disk), held in memory and
//! written at the next chance. Without them a run whose end failed stayed `running` for as long
//! as its process lived (the next process marks it interrupted), so a vote refused it as still
//! running and the sessions view showed it running after its answer had been given.

use super::{RunEnd, RunRecord, RunStatus, StoreError, Usage, now_ms};
use parking_lot::Mutex;
use rusqlite::{Connection, params};
use serde_json::Value;

/// How many unwritten ends are held; past this the oldest is let go (its run is marked
/// interrupted when its process ends, as a crash's would be).
const MAX_HELD: usize = 64;

/// A run's end as it is written: owned, so that it can wait.
#[derive(Debug, Clone)]
pub(crate) struct EndRow {
    status: RunStatus,
    finished_ms: i64,
    answer: Option<String>,
    stop_reason: Option<String>,
    trajectory: Option<String>,
    summary: Option<Value>,
    error: Option<String>,
    usage: Usage,
}

impl EndRow {
    /// The end, stamped now.
    pub(crate) fn new(end: &RunEnd<'_>) -> EndRow {
        EndRow {
            status: end.status,
            finished_ms: now_ms(),
            answer: end.answer.map(str::to_owned),
            stop_reason: end.stop_reason.map(str::to_owned),
            trajectory: end.trajectory.map(str::to_owned),
            summary: end.summary.clone(),
            error: end.error.map(str::to_owned),
            usage: end.usage,
        }
    }

    /// Writes the end of `run`; `Err(NoRun)` when there is no such run.
    pub(crate) fn write(&self, conn: &Connection, run: &str) -> Result<(), StoreError> {
        let changed = conn.execute(
            "UPDATE runs SET status = ?2, finished_ms = ?3, answer = ?4, stop_reason = ?5,
                 trajectory = ?6, summary_json = ?7, error = ?8, prompt_tokens = ?9,
                 generated_tokens = ?10, context_tokens = ?11, cached_tokens = ?12,
                 tool_calls = ?13
             WHERE id = ?1",
            params![
                run,
                self.status.as_str(),
                self.finished_ms,
                self.answer,
                self.stop_reason,
                self.trajectory,
                self.summary.as_ref().map(Value::to_string),
                self.error,
                self.usage.prompt_tokens as i64,
                self.usage.generated_tokens as i64,
                self.usage.context_tokens as i64,
                self.usage.cached_tokens as i64,
                self.usage.tool_calls as i64,
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NoRun(run.to_string()));
        }
        Ok(())
    }

    /// The run as it reads once this end is written.
    fn apply(&self, run: &mut RunRecord) {
        run.status = self.status;
        run.finished_ms = Some(self.finished_ms);
        run.answer.clone_from(&self.answer);
        run.stop_reason.clone_from(&self.stop_reason);
        run.trajectory.clone_from(&self.trajectory);
        run.summary.clone_from(&self.summary);
        run.error.clone_from(&self.error);
        run.usage = self.usage;
    }
}

/// The ends waiting to be written, oldest first.
#[derive(Default)]
pub(crate) struct HeldEnds(Mutex<Vec<(String, EndRow)>>);

impl HeldEnds {
    /// Holds `end` of `run` until [`Self::write_all`] gets it in.
    pub(crate) fn hold(&self, run: &str, end: EndRow) {
        let mut held = self.0.lock();
        held.retain(|(id, _)| id != run);
        if held.len() == MAX_HELD {
            let (oldest, _) = held.remove(0);
            tracing::warn!(run = %oldest, "too many run ends wait to be saved: this one is let go");
        }
        held.push((run.to_string(), end));
    }

    /// Writes the held ends, oldest first, and keeps those that still fail.
    pub(crate) fn write_all(&self, conn: &Connection) {
        let mut held = self.0.lock();
        held.retain(|(run, end)| match end.write(conn, run) {
            Ok(()) => {
                tracing::info!(run = %run, "a run's end that could not be saved before is saved");
                false
            }
            // The run was deleted meanwhile: nothing is left to end.
            Err(StoreError::NoRun(_)) => false,
            Err(_) => true,
        });
    }

    /// `run` as it will read once its held end, if any, is written.
    pub(crate) fn apply(&self, run: &mut RunRecord) {
        if let Some((_, end)) = self.0.lock().iter().find(|(id, _)| *id == run.id) {
            end.apply(run);
        }
    }
}

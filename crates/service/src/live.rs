//! Runs in progress: their cancel flags, a broadcast of each event as it is stored, for the
//! clients following them, and the questions they wait on the user for (approvals).

use catena_engine_api::CancelFlag;
use catena_store::StoredEvent;
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use tokio::sync::broadcast;

/// Events a slow follower may fall behind by before it re-reads from the store.
const FOLLOW_BUFFER: usize = 1024;

struct LiveRun {
    cancel: CancelFlag,
    events: broadcast::Sender<Arc<StoredEvent>>,
    /// The number of the last event published: followers take only larger ones.
    last_seq: u64,
    /// Questions waiting for the user, by number, each with where its answer goes. They go
    /// with the run: once it has ended, its waiting asker hears that no answer will come.
    questions: HashMap<u64, mpsc::Sender<Answer>>,
}

/// What a waiting question hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The user allowed the call (`true`) or not.
    User(bool),
    /// The run is being stopped; the answer event is recorded already.
    Declined,
}

/// The registry of live runs.
#[derive(Default)]
pub struct LiveRuns {
    runs: Mutex<HashMap<String, LiveRun>>,
}

impl LiveRuns {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, LiveRun>> {
        self.runs.lock()
    }

    /// Registers a run about to be queued; returns its cancel flag.
    pub fn register(&self, run: &str) -> CancelFlag {
        let cancel = Arc::new(AtomicBool::new(false));
        let (events, _) = broadcast::channel(FOLLOW_BUFFER);
        self.lock().insert(
            run.to_string(),
            LiveRun {
                cancel: cancel.clone(),
                events,
                last_seq: 0,
                questions: HashMap::new(),
            },
        );
        cancel
    }

    /// Follows a live run's events; `None` once it has ended.
    pub fn subscribe(&self, run: &str) -> Option<broadcast::Receiver<Arc<StoredEvent>>> {
        self.lock().get(run).map(|r| r.events.subscribe())
    }

    /// Publishes an event that was just stored. One the store could not take carries a number
    /// its writer guessed (the run's recorder counts on, a question's recorder starts at 1); it
    /// is shown after the last one published rather than dropped by the followers as seen.
    pub fn publish(&self, run: &str, mut event: StoredEvent) {
        if let Some(r) = self.lock().get_mut(run) {
            event.seq = event.seq.max(r.last_seq + 1);
            r.last_seq = event.seq;
            // No follower is not an error.
            let _ = r.events.send(Arc::new(event));
        }
    }

    /// Asks a live run to stop; false if it is not live.
    pub fn cancel(&self, run: &str) -> bool {
        match self.lock().get(run) {
            Some(r) => {
                r.cancel.store(true, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// Asks every live run to stop (shutdown).
    pub fn cancel_all(&self) {
        for r in self.lock().values() {
            r.cancel.store(true, Ordering::SeqCst);
        }
    }

    /// Opens question `ask` of a live run; the user's answer (allow or not) arrives on the
    /// receiver, which disconnects when the run ends. `None` when the run is not live.
    pub fn ask(&self, run: &str, ask: u64) -> Option<mpsc::Receiver<Answer>> {
        let (answer, answers) = mpsc::channel();
        let mut runs = self.lock();
        runs.get_mut(run)?.questions.insert(ask, answer);
        Some(answers)
    }

    /// Answers a pending question; false when the run has no such question waiting.
    pub fn answer(&self, run: &str, ask: u64, allow: bool) -> bool {
        let question = self
            .lock()
            .get_mut(run)
            .and_then(|r| r.questions.remove(&ask));
        // The asker may have stopped waiting since: the question was pending, so it was answered.
        question.is_some_and(|answer| {
            let _ = answer.send(Answer::User(allow));
            true
        })
    }

    /// Takes every question a run has waiting, for whoever stops the run to decline them.
    pub fn take_questions(&self, run: &str) -> Vec<(u64, mpsc::Sender<Answer>)> {
        let mut questions: Vec<_> = self
            .lock()
            .get_mut(run)
            .map(|r| r.questions.drain().collect())
            .unwrap_or_default();
        questions.sort_by_key(|(ask, _)| *ask);
        questions
    }

    /// Closes a question its asker no longer waits for (no answer in time).
    pub fn withdraw(&self, run: &str, ask: u64) {
        if let Some(r) = self.lock().get_mut(run) {
            r.questions.remove(&ask);
        }
    }

    pub fn is_live(&self, run: &str) -> bool {
        self.lock().contains_key(run)
    }

    /// The run has ended: followers see their stream close after the last event.
    pub fn finish(&self, run: &str) {
        self.lock().remove(run);
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64) -> StoredEvent {
        StoredEvent {
            seq,
            at_ms: 0,
            data: serde_json::json!({"type": "text", "text": "x"}),
        }
    }

    #[test]
    fn an_event_numbered_behind_the_last_one_published_is_shown_after_it() {
        let live = LiveRuns::default();
        live.register("r");
        let mut follower = live.subscribe("r").unwrap();
        // Stored 1 to 3; then a question the store could not take, numbered 1 by its writer.
        for seq in [1, 2, 3, 1, 4] {
            live.publish("r", event(seq));
        }
        let seen: Vec<u64> = std::iter::from_fn(|| follower.try_recv().ok())
            .map(|e| e.seq)
            .collect();
        assert_eq!(seen, [1, 2, 3, 4, 5]);
    }
}

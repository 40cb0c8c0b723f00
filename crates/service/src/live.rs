//! Runs in progress: their cancel flags, and a broadcast of each event as it is stored, for the
//! clients following them.

use catena_engine_api::CancelFlag;
use catena_store::StoredEvent;
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::broadcast;

/// Events a slow follower may fall behind by before it re-reads from the store.
const FOLLOW_BUFFER: usize = 1024;

struct LiveRun {
    cancel: CancelFlag,
    events: broadcast::Sender<Arc<StoredEvent>>,
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
            },
        );
        cancel
    }

    /// Follows a live run's events; `None` once it has ended.
    pub fn subscribe(&self, run: &str) -> Option<broadcast::Receiver<Arc<StoredEvent>>> {
        self.lock().get(run).map(|r| r.events.subscribe())
    }

    /// Publishes an event that was just stored.
    pub fn publish(&self, run: &str, event: StoredEvent) {
        if let Some(r) = self.lock().get(run) {
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

//! Recording a run as it happens: every event is committed before it is shown, and the end of the
//! run is written once.

use super::{RunEnd, RunStatus, Store, StoreError, StoredEvent, Usage, now_ms};
use catena_run_events::{AgentEvent, RunSummary, StopReason};
use serde_json::Value;

/// Writes one run's events and result to the store.
pub struct Recorder<'s> {
    store: &'s Store,
    run: String,
    /// The next sequence number, for events the store could not take.
    next_seq: u64,
    /// The first store failure, reported once.
    failure: Option<String>,
}

impl<'s> Recorder<'s> {
    pub fn new(store: &'s Store, run: String) -> Self {
        Recorder {
            store,
            run,
            next_seq: 1,
            failure: None,
        }
    }

    pub fn run_id(&self) -> &str {
        &self.run
    }

    /// The first error the store gave, if any (the run went on; what follows was not saved).
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Commits an event and returns it as stored (with its sequence number).
    pub fn event(&mut self, event: &AgentEvent) -> StoredEvent {
        let data = serde_json::to_value(event).unwrap_or(Value::Null);
        self.raw(&data)
    }

    /// Commits any JSON event (`summary`, `error`); it must carry a `type` field.
    pub fn raw(&mut self, data: &Value) -> StoredEvent {
        let kind = data.get("type").and_then(Value::as_str).unwrap_or("event");
        let seq = match self
            .store
            .append_event(&self.run, kind, data, self.next_seq)
        {
            Ok(seq) => seq,
            Err(e) => {
                self.failed(&e, "could not save an event");
                self.next_seq
            }
        };
        self.next_seq = seq + 1;
        StoredEvent {
            seq,
            at_ms: now_ms(),
            data: data.clone(),
        }
    }

    /// Records the run's result; returns the `summary` event that was stored.
    pub fn finish(&mut self, summary: &RunSummary, cached_tokens: usize) -> StoredEvent {
        let mut data = serde_json::to_value(summary).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut data {
            fields.insert("type".into(), "summary".into());
        }
        let stored = self.raw(&data);
        let status = if summary.stop_reason == StopReason::Cancelled {
            RunStatus::Cancelled
        } else {
            RunStatus::Finished
        };
        let stop = summary.stop_reason.to_string();
        let end = RunEnd {
            status,
            answer: summary.answer.as_deref(),
            stop_reason: Some(&stop),
            trajectory: Some(&summary.trajectory),
            summary: Some(data),
            error: None,
            usage: Usage {
                prompt_tokens: summary.prompt_tokens as u64,
                generated_tokens: summary.generated_tokens as u64,
                context_tokens: summary.context_tokens as u64,
                cached_tokens: cached_tokens as u64,
                tool_calls: summary.tool_calls as u64,
            },
        };
        if let Err(e) = self.store.finish_run(&self.run, &end) {
            self.failed(&e, "could not save the run's result");
        }
        stored
    }

    /// Keeps the first store error for [`Self::failure`] and logs it.
    fn failed(&mut self, error: &StoreError, what: &str) {
        if self.failure.is_none() {
            tracing::error!(run = %self.run, error = %error, "{what}");
            self.failure = Some(error.to_string());
        }
    }

    /// For a run the store failed during ([`Self::failure`]): a `not_saved` event for those
    /// following it live, which says so. It is not stored (the store is what failed); it is
    /// numbered after the last event shown, so a follower takes it as the next one.
    pub fn not_saved_notice(&self) -> Option<StoredEvent> {
        let failure = self.failure.as_deref()?;
        let message = format!(
            "This run was not saved completely ({failure}): what is shown here is not all in \
             the session store, and is lost when it is closed. Copy what you need."
        );
        Some(StoredEvent {
            seq: self.next_seq,
            at_ms: now_ms(),
            data: serde_json::json!({"type": "not_saved", "message": message}),
        })
    }

    /// Records that the run failed; returns the `error` event that was stored.
    pub fn fail(&mut self, message: &str) -> StoredEvent {
        let stored = self.raw(&serde_json::json!({"type": "error", "message": message}));
        if let Err(e) = self.store.finish_run(&self.run, &RunEnd::failed(message)) {
            self.failed(&e, "could not save the run's failure");
        }
        stored
    }
}

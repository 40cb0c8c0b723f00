//! What an agent run reports: its events in order, why it stopped, and its summary. Below the
//! agent, so that what records, sends or shows runs (the store, the server, the UIs) reads these
//! types without linking the runner's tools (docs/ARCHITECTURE.md, code map:
//! `crates/run-events`).

mod events;
mod summary;

pub use events::{AgentEvent, DecidedBy, Source};
pub use summary::{RunSummary, StopReason, Timings};

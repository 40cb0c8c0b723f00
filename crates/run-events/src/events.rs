//! What a run reports as it goes: typed events for the CLI now, the server and UI later.

use crate::StopReason;
use catena_protocol::{ParseIssue, Tag};
use serde::Serialize;

/// Who wrote a block: the model, the caller's `--prefill`, or Catena itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Model,
    Prefill,
    /// The runtime: the closing tag of a block that a budget or the loop watch cut short, so
    /// the model can still give its answer ([`AgentEvent::AnswerAsked`]).
    Runtime,
}

/// Who settled a question about an external tool's call ([`AgentEvent::ApprovalAnswered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// The user answered.
    User,
    /// No one answered in time; the call was declined.
    Timeout,
    /// The run was stopped while it waited; the call was declined.
    Cancelled,
}

/// One event of a run, in order. Serialised with a `type` field (`block_started`, ...).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    RunStarted {
        profile: String,
        model: String,
        /// Tokens of the rendered prompt.
        prompt_tokens: usize,
        /// Of those, tokens found already evaluated in a kept KV cache.
        cached_tokens: usize,
        context_size: usize,
        seed: u32,
        temperature: f64,
    },
    BlockStarted {
        tag: Tag,
        source: Source,
    },
    BlockDelta {
        tag: Tag,
        text: String,
        source: Source,
    },
    BlockEnded {
        tag: Tag,
        content: String,
        /// Whether the block ended with its own closing tag.
        closed: bool,
        source: Source,
    },
    /// Text outside any block (mostly the whitespace between blocks).
    Text {
        text: String,
        source: Source,
    },
    /// The model broke the protocol; the parser recovered.
    ParseIssue {
        issue: ParseIssue,
        message: String,
    },
    ToolCall {
        /// 1-based number of the call in this run.
        index: usize,
        tool: Tag,
        input: String,
    },
    Observation {
        index: usize,
        tool: Tag,
        /// The observation text as the model reads it (inside the `<observation>` tags).
        text: String,
        success: bool,
        /// The call repeated an earlier one and was answered by the duplicate guard.
        duplicate: bool,
        elapsed_ms: f64,
    },
    /// An external tool that may change something waits for the user's yes (catena serve: the
    /// UI answers through `/v1/agent/runs/{id}/approvals/{ask}`).
    ApprovalRequested {
        /// Names the question within the run, for the answer.
        ask: u64,
        /// The MCP server, as named in mcp.json.
        server: String,
        /// The tool, as the model called it.
        tool: String,
        /// The call's arguments, as JSON text.
        arguments: String,
    },
    ApprovalAnswered {
        ask: u64,
        allowed: bool,
        decided_by: DecidedBy,
    },
    /// A budget or the loop watch cut the chain short before it answered (`reason`). The
    /// runtime has closed the block the chain was in (its `BlockEnded` comes first, from
    /// [`Source::Runtime`]); the model now writes its answer, held to the answer's grammar,
    /// within an allowance of its own (PROTOCOL.md §2, item 5). The run's stop reason stays
    /// `reason`.
    AnswerAsked {
        reason: StopReason,
    },
}

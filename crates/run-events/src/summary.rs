//! The last word of a run.

use catena_engine_api::SessionStats;
use serde::Serialize;
use std::time::Duration;

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `</answer>` was written.
    Answer,
    /// The model ended its turn without an answer block.
    EndOfTurn,
    /// The tool-call budget ran out.
    ToolBudget,
    /// The generated-token budget ran out.
    TokenBudget,
    /// The wall-time budget ran out.
    TimeBudget,
    /// The context window is full.
    ContextFull,
    Cancelled,
    /// The model fell into a loop, the same text over and over, and was stopped: within one
    /// generation (the engine's `RepetitionWatch`), or across tool calls (the agent's third
    /// identical round of a call and its observation).
    Repetition,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl StopReason {
    /// The name events, the store and reports use (the serialised form).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Answer => "answer",
            StopReason::EndOfTurn => "end_of_turn",
            StopReason::ToolBudget => "tool_budget",
            StopReason::TokenBudget => "token_budget",
            StopReason::TimeBudget => "time_budget",
            StopReason::ContextFull => "context_full",
            StopReason::Cancelled => "cancelled",
            StopReason::Repetition => "repetition",
        }
    }

    /// The reason named `name` (its [`StopReason::as_str`]), as the store and reports keep it.
    pub fn from_name(name: &str) -> Option<StopReason> {
        [
            StopReason::Answer,
            StopReason::EndOfTurn,
            StopReason::ToolBudget,
            StopReason::TokenBudget,
            StopReason::TimeBudget,
            StopReason::ContextFull,
            StopReason::Cancelled,
            StopReason::Repetition,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }

    /// Whether the run was cut before it could answer, by a budget or a loop (then the last
    /// suggested answer stands in for the answer).
    pub fn cut_short(self) -> bool {
        matches!(
            self,
            StopReason::ToolBudget
                | StopReason::TokenBudget
                | StopReason::TimeBudget
                | StopReason::ContextFull
                | StopReason::Repetition
        )
    }
}

/// Where the time went.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct Timings {
    pub total_ms: f64,
    /// Evaluating appended text (prompt, prefill, observations).
    pub prefill_ms: f64,
    /// Generating, one token at a time.
    pub decode_ms: f64,
    /// Running tools.
    pub tools_ms: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
}

impl Timings {
    pub fn new(stats: &SessionStats, tools: Duration, total: Duration) -> Timings {
        let rate = |tokens: usize, time: Duration| {
            if time.is_zero() {
                0.0
            } else {
                tokens as f64 / time.as_secs_f64()
            }
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Timings {
            total_ms: ms(total),
            prefill_ms: ms(stats.prefill_time),
            decode_ms: ms(stats.decode_time),
            tools_ms: ms(tools),
            prefill_tokens_per_s: rate(stats.prefill_tokens, stats.prefill_time),
            decode_tokens_per_s: rate(stats.decode_tokens, stats.decode_time),
        }
    }
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct RunSummary {
    /// The content of the last `<answer>` (or, when a budget ended the run, of the last
    /// `<suggested_answer>`).
    pub answer: Option<String>,
    pub stop_reason: StopReason,
    pub tool_calls: usize,
    pub prompt_tokens: usize,
    /// Tokens in the KV cache at the end.
    pub context_tokens: usize,
    /// Tokens run through the model; equal to `context_tokens` because nothing is re-read.
    pub evaluated_tokens: usize,
    pub generated_tokens: usize,
    pub parse_issues: usize,
    pub timings: Timings,
    /// The whole assistant turn: prefill, generated text and observations.
    pub trajectory: String,
    /// Mean log-probability of the tokens the model sampled, when the session recorded them
    /// (`SessionOptions::logprobs`): how sure the model was of its chain, which breaks a tie
    /// between equally large groups of a vote.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub mean_logprob: Option<f64>,
    /// What the run's own `<code>` calls printed, in order, for those that exited with status 0
    /// and printed something: read from the runtime's observations as it appended them, never
    /// from the trajectory's text, where a model generating without the grammar can write an
    /// `<observation>` of its own (PROTOCOL.md §8). A math vote checks answers against it.
    /// Left out when empty, as in runs recorded before it was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "ts", ts(as = "Option<Vec<String>>", optional))]
    pub printed: Vec<String>,
}

//! Multi-agent distillation (the paper's first training stage): an explicit multi-agent system's
//! recorded run, one activation per agent call, becomes ONE Chain-of-Agents trajectory
//! ([`to_trajectory`]), and the progressive filters keep the trajectories worth training on
//! ([`filter_runs`]: correctness, format, complexity, quality, each stage counted).
//!
//! Each activation becomes the block its role writes in a CoA model's own generation
//! (PROTOCOL.md §1): the planner's output a `<plan>`, the thinker's a `<think>`, a tool agent's
//! its tool call followed by the real observation exactly as the runtime appends it (§2), the
//! reflector's a `<reflection>`, the verifier's a `<double_check>`, the answerer's the
//! `<answer>`. The trainer then masks the observations as it does for any trajectory (§6).

mod convert;
mod filter;
mod log;
pub mod mas;
mod output;

pub use convert::{ConvertError, to_trajectory};
pub use filter::{Distilled, FilterConfig, FilterReport, Stage, StageCount, filter_runs};
pub use log::{LogError, Opened, RunLog, TeacherRun};
pub use output::{alpaca_item, sft_line};

use catena_protocol::Tag;
use serde::{Deserialize, Serialize};

/// The agents of the explicit system (PROTOCOL.md §1's roles, one model call each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Planner,
    /// Reasons about the state and picks the next agent.
    Thinker,
    /// Writes the input of one tool call; the runtime runs it.
    ToolAgent,
    Reflector,
    Verifier,
    Answerer,
}

/// One agent call of a recorded run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activation {
    pub role: Role,
    /// What the agent wrote: the plan, the thought, the tool call's input, the reflection, the
    /// check, the answer (without tags).
    pub output: String,
    /// The tool a tool agent called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<Tag>,
    /// What the tool answered, verbatim, as the runtime rendered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<String>,
    /// Whether the tool call worked (a program that ran, a page that was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_ok: Option<bool>,
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

/// A recorded run of the explicit multi-agent system on one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiAgentRun {
    pub task_id: String,
    pub question: String,
    /// The CoA profile the trajectory is written for (`code`, `math`, `mhqa`, `web`).
    pub profile: String,
    pub activations: Vec<Activation>,
    /// The task's verifiable reward for the run's answer (1 solved, 0 not).
    pub reward: f64,
}

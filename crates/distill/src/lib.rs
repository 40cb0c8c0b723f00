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

impl Role {
    /// The role's name as it is stored and shown (`tool_agent`).
    pub fn name(self) -> &'static str {
        match self {
            Role::Planner => "planner",
            Role::Thinker => "thinker",
            Role::ToolAgent => "tool_agent",
            Role::Reflector => "reflector",
            Role::Verifier => "verifier",
            Role::Answerer => "answerer",
        }
    }
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

/// What one role's calls cost, over one run or many: where an explicit system's tokens go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleTokens {
    pub role: Role,
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The calls and tokens of each role among `activations`, in the order of [`Role`]'s variants;
/// roles that never ran are left out. (The page summariser's calls are not activations: they are
/// in a run's [`mas::Usage`] only.)
pub fn tokens_by_role<'a>(
    activations: impl IntoIterator<Item = &'a Activation>,
) -> Vec<RoleTokens> {
    const ROLES: [Role; 6] = [
        Role::Planner,
        Role::Thinker,
        Role::ToolAgent,
        Role::Reflector,
        Role::Verifier,
        Role::Answerer,
    ];
    let mut totals = ROLES.map(|role| RoleTokens {
        role,
        calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
    });
    for activation in activations {
        if let Some(total) = totals.iter_mut().find(|t| t.role == activation.role) {
            total.calls += 1;
            total.prompt_tokens += activation.prompt_tokens;
            total.completion_tokens += activation.completion_tokens;
        }
    }
    totals.into_iter().filter(|t| t.calls > 0).collect()
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

#[cfg(test)]
mod role_tests {
    use super::*;

    fn call(role: Role, prompt_tokens: u64, completion_tokens: u64) -> Activation {
        Activation {
            role,
            output: String::new(),
            tool: None,
            observation: None,
            tool_ok: None,
            prompt_tokens,
            completion_tokens,
        }
    }

    #[test]
    fn tokens_are_summed_per_role_in_the_roles_order() {
        let run = [
            call(Role::Planner, 100, 20),
            call(Role::Thinker, 150, 30),
            call(Role::ToolAgent, 200, 40),
            call(Role::Thinker, 300, 10),
            call(Role::Answerer, 250, 5),
        ];
        let totals = tokens_by_role(&run);
        let rows: Vec<(&str, u64, u64, u64)> = totals
            .iter()
            .map(|t| (t.role.name(), t.calls, t.prompt_tokens, t.completion_tokens))
            .collect();
        assert_eq!(
            rows,
            [
                ("planner", 1, 100, 20),
                ("thinker", 2, 450, 40),
                ("tool_agent", 1, 200, 40),
                ("answerer", 1, 250, 5),
            ]
        );
        for role in [Role::ToolAgent, Role::Verifier] {
            assert_eq!(
                serde_json::to_value(role).unwrap(),
                serde_json::Value::from(role.name())
            );
        }
    }
}

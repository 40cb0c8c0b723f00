//! The one place that runs a task. `catena run`, `catena eval`, `catena distill`, the service
//! behind `catena serve` and the desktop app, and RL's rollouts all start their agent runs through
//! [`run_task`]: the task's prompt put into the session (or the explicit agents' first call),
//! the chain or the multi-agent system run to its end, every event recorded in the store before
//! anyone is shown it, the record finished or failed. [`run_queue`] spreads many runs over many
//! sequences. What differs between the callers (which model, which tools, how a result is shown
//! or scored) stays with them; how a run goes does not (docs/ARCHITECTURE.md, code map:
//! `crates/runner`).

mod plain;
mod queue;

pub use queue::{run_fed, run_queue};

use catena_agent::tools::ToolBox;
use catena_agent::{AgentError, Budgets, CutShort, Decoding, RunRequest, run_chain, start_task};
use catena_distill::mas::{MasError, MasRequest, MasSummary, run_multi_agent};
use catena_engine_api::{CancelFlag, ChatEngine, EngineError, SamplingParams, StartChat};
use catena_protocol::Profile;
use catena_run_events::{AgentEvent, RunSummary};
use catena_store::{Recorder, StoredEvent};

/// What every run of a batch shares.
pub struct RunPlan<'a> {
    pub profile: &'a Profile,
    pub tools: &'a ToolBox,
    /// The model's name, for the `run_started` event and the record.
    pub model: String,
    pub budgets: Budgets,
    /// Set it to stop the runs between two tokens, or during a tool call.
    pub cancel: Option<CancelFlag>,
    /// Whether a chain's generations are held to the protocol's grammar (the explicit agents'
    /// calls are plain chat turns either way).
    pub decoding: Decoding,
    /// Whether a chain cut short by a budget or a loop still gives its answer.
    pub cut_short: CutShort,
}

/// One run: the task and how it is sampled.
#[derive(Debug, Clone, Copy)]
pub struct TaskRun<'a> {
    /// The task's id in a task set (the multi-agent record names it).
    pub id: &'a str,
    pub question: &'a str,
    pub sampling: SamplingParams,
    /// Text a Chain-of-Agents turn starts with; a complete tool call at its end runs first.
    pub prefill: Option<&'a str>,
}

/// What answers a run's model calls.
pub enum Engine<'e> {
    /// One Chain-of-Agents generation in a session that starts the task's prompt itself,
    /// keeping the prefix it shares with what it held.
    Chain(&'e mut dyn StartChat),
    /// The explicit multi-agent system, every agent a chat turn of its own.
    Agents(&'e mut dyn ChatEngine),
    /// The plain chat: the task's question in one turn, no profile and no tools (the anchor).
    Plain(&'e mut dyn ChatEngine),
}

impl Engine<'_> {
    /// The same engine for one more run (a caller that runs many tasks on one session).
    pub fn reborrow(&mut self) -> Engine<'_> {
        match self {
            Engine::Chain(session) => Engine::Chain(&mut **session),
            Engine::Agents(chat) => Engine::Agents(&mut **chat),
            Engine::Plain(chat) => Engine::Plain(&mut **chat),
        }
    }
}

/// What a caller is told as a run goes.
pub enum Update<'u> {
    /// An event of the run, with its stored form when the run is recorded (saved before this
    /// call: whoever shows it shows what the store holds).
    Event(&'u AgentEvent, Option<StoredEvent>),
    /// The record's last entry: the run's end or its failure.
    Recorded(StoredEvent),
}

/// What one run produced.
pub struct Outcome {
    pub summary: RunSummary,
    /// Model calls: 1 for a chain, one per agent call for the explicit system.
    pub model_calls: usize,
    /// Tokens the run's context(s) held: prompt, generated text, observations.
    pub total_tokens: usize,
    /// Tokens this run generated.
    pub generated_tokens: usize,
    /// Prompt tokens taken from a kept KV cache or a server's cache instead of evaluated.
    pub cached_tokens: usize,
    /// The explicit system's record (its activations, per-call usage), for distillation.
    pub agents: Option<MasSummary>,
}

/// A run that could not go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The task's prompt could not be put in (a full context, a dead worker).
    #[error(transparent)]
    Prompt(#[from] EngineError),
    #[error(transparent)]
    Chain(#[from] AgentError),
    #[error(transparent)]
    Agents(#[from] MasError),
    #[error(
        "a prefill starts a Chain-of-Agents generation; the explicit agents and the plain chat have none"
    )]
    PrefillWithoutChain,
}

/// Runs `task` to its end on `engine`. Every agent run in Catena starts here. With `record`,
/// each event is saved before `emit` sees it, and the record is finished (or failed, with the
/// error's words) before this returns.
pub fn run_task(
    engine: Engine<'_>,
    plan: &RunPlan<'_>,
    task: &TaskRun<'_>,
    mut record: Option<&mut Recorder<'_>>,
    emit: &mut dyn FnMut(Update<'_>),
) -> Result<Outcome, RunError> {
    let mut on_event = |event: AgentEvent| {
        let stored = record.as_mut().map(|recorder| recorder.event(&event));
        emit(Update::Event(&event, stored));
    };
    let ran = match engine {
        Engine::Chain(session) => chain(session, plan, task, &mut on_event),
        Engine::Agents(chat) => agents(chat, plan, task, &mut on_event),
        Engine::Plain(chat) => plain::plain_chat(chat, plan, task, &mut on_event),
    };
    if let Some(recorder) = record {
        let last = match &ran {
            Ok(outcome) => recorder.finish(&outcome.summary, outcome.cached_tokens),
            Err(e) => recorder.fail(&e.to_string()),
        };
        emit(Update::Recorded(last));
    }
    ran
}

fn chain(
    session: &mut dyn StartChat,
    plan: &RunPlan<'_>,
    task: &TaskRun<'_>,
    on_event: &mut dyn FnMut(AgentEvent),
) -> Result<Outcome, RunError> {
    let prompt = start_task(session, plan.profile, task.question)?;
    let request = RunRequest {
        profile: plan.profile,
        model: plan.model.clone(),
        sampling: task.sampling,
        prompt,
        prefill: task.prefill,
        budgets: plan.budgets,
        cancel: plan.cancel.clone(),
        decoding: plan.decoding,
        cut_short: plan.cut_short,
    };
    let summary = run_chain(session, request, plan.tools, on_event)?;
    Ok(Outcome {
        model_calls: 1,
        total_tokens: summary.context_tokens,
        // The session's counters started again with the task's prompt.
        generated_tokens: summary.generated_tokens,
        cached_tokens: prompt.cached_tokens,
        summary,
        agents: None,
    })
}

fn agents(
    chat: &mut dyn ChatEngine,
    plan: &RunPlan<'_>,
    task: &TaskRun<'_>,
    on_event: &mut dyn FnMut(AgentEvent),
) -> Result<Outcome, RunError> {
    if task.prefill.is_some() {
        return Err(RunError::PrefillWithoutChain);
    }
    chat.set_sampling(task.sampling);
    let request = MasRequest {
        task_id: task.id,
        question: task.question,
        profile: plan.profile,
        model: plan.model.clone(),
        sampling: task.sampling,
        budgets: plan.budgets,
        cancel: plan.cancel.clone(),
    };
    let mas = run_multi_agent(chat, request, plan.tools, on_event)?;
    Ok(Outcome {
        summary: mas.run_summary(),
        model_calls: mas.usage.calls,
        total_tokens: mas.usage.total(),
        generated_tokens: mas.usage.completion_tokens,
        cached_tokens: mas.usage.cached_tokens,
        agents: Some(mas),
    })
}

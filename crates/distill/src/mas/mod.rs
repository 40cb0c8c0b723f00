//! The explicit multi-agent system: the roles of a Chain-of-Agents trajectory (PROTOCOL.md §1)
//! as separate chat calls, each with its own instructions and only the state it needs,
//! orchestrated by code. It is the teacher of distillation ([`crate::to_trajectory`] turns its
//! recorded run into one CoA trajectory) and the baseline of the paper's efficiency claim: every
//! call's prompt and completion tokens are counted.
//!
//! The order: the planner writes the plan; then, until the thinker chooses to answer or the
//! tool budget is spent, the thinker reasons and picks a tool, that tool's agent writes the
//! call, the runtime runs it (the same tools and sandbox as a CoA run), and the reflector
//! reviews the result. When the thinker chooses to answer, the verifier scores the work (1 to 4,
//! as the web profile's `<double_check>` does); 2 or less sends the thinker back to work, at most
//! [`MAX_REJECTIONS`] times. The answerer writes the answer last.

mod prompts;

use crate::{Activation, MultiAgentRun, Role};
use catena_agent::summarize::{ChatError, ChatModel};
use catena_agent::tools::{CallContext, CallLimits, ToolBox, call_watched};
use catena_agent::{AgentEvent, Budgets, RunSummary, Source, StopReason, Timings};
use catena_engine_api::{
    CancelFlag, ChatEngine, ChatReply, ChatTurn, EngineError, GenerateLimits, GenerationStop,
    SamplingParams,
};
use catena_protocol::fence::program_and_stdin;
use catena_protocol::profile::QWEN_SYSTEM;
use catena_protocol::{Profile, Tag, printed_output};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How often the verifier may send the thinker back before the answerer writes anyway.
pub const MAX_REJECTIONS: usize = 2;

/// Tool calls the system makes before it may answer with none of them having worked.
pub const EARLY_ATTEMPTS: usize = 3;

/// Tokens each agent may write in one call.
fn role_budget(role: Role, tool: Option<Tag>, profile: &Profile) -> usize {
    match (role, tool) {
        (Role::Planner, _) => 320,
        (Role::Thinker, _) => 200,
        (Role::ToolAgent, Some(Tag::Code)) => 768,
        (Role::ToolAgent, _) => 96,
        (Role::Reflector, _) => 200,
        (Role::Verifier, _) => 160,
        (Role::Answerer, _) if profile.answer == catena_protocol::AnswerFormat::Program => 1024,
        (Role::Answerer, _) => 160,
    }
}

/// What to run.
pub struct MasRequest<'a> {
    pub task_id: &'a str,
    pub question: &'a str,
    pub profile: &'a Profile,
    /// The model's name and sampling settings, for the `run_started` event.
    pub model: String,
    pub sampling: SamplingParams,
    /// Tool calls, completion tokens of all calls together, and wall time.
    pub budgets: Budgets,
    pub cancel: Option<CancelFlag>,
}

/// Tokens the model calls of a run cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub calls: usize,
    pub prompt_tokens: usize,
    /// Prompt tokens that were not evaluated again (a kept prefix, a server's cache).
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

impl Usage {
    fn add(&mut self, reply: &ChatReply) {
        self.calls += 1;
        self.prompt_tokens += reply.prompt_tokens;
        self.cached_tokens += reply.cached_tokens;
        self.completion_tokens += reply.completion_tokens;
    }

    /// Prompt and completion tokens of every call: what the system processed.
    pub fn total(&self) -> usize {
        self.prompt_tokens + self.completion_tokens
    }
}

/// How a run of the explicit system ended.
#[derive(Debug, Clone)]
pub struct MasSummary {
    /// Every agent activation; `reward` is 0 until the caller scores the answer.
    pub run: MultiAgentRun,
    pub answer: Option<String>,
    pub stop_reason: StopReason,
    /// Every model call: the agents' and the page summariser's.
    pub usage: Usage,
    pub tool_calls: usize,
    pub tool_time: Duration,
    pub elapsed: Duration,
}

impl MasSummary {
    /// The run in the form every front end shows and stores a CoA run: the trajectory the
    /// agents' blocks make (empty when they do not make a valid chain: the events hold every
    /// block), prompt and completion tokens of all calls, the time the tools took.
    pub fn run_summary(&self) -> RunSummary {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        RunSummary {
            answer: self.answer.clone(),
            stop_reason: self.stop_reason,
            tool_calls: self.tool_calls,
            prompt_tokens: self.usage.prompt_tokens,
            context_tokens: self.usage.total(),
            evaluated_tokens: self.usage.total().saturating_sub(self.usage.cached_tokens),
            generated_tokens: self.usage.completion_tokens,
            parse_issues: 0,
            timings: Timings {
                total_ms: ms(self.elapsed),
                prefill_ms: 0.0,
                decode_ms: 0.0,
                tools_ms: ms(self.tool_time),
                prefill_tokens_per_s: 0.0,
                decode_tokens_per_s: 0.0,
            },
            trajectory: crate::to_trajectory(&self.run).unwrap_or_default(),
            // Several models' calls over HTTP: no one chain's probabilities to average.
            mean_logprob: None,
            printed: self
                .run
                .activations
                .iter()
                .filter(|a| a.tool == Some(Tag::Code))
                .filter_map(|a| printed_output(a.observation.as_deref()?))
                .map(str::to_string)
                .collect(),
        }
    }
}

/// A run that could not go on.
#[derive(Debug, thiserror::Error)]
pub enum MasError {
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What the thinker chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Tool(Tag),
    Answer,
}

/// One tool step, as later agents are shown it.
#[derive(Debug, Clone)]
struct Step {
    tool: Tag,
    input: String,
    observation: String,
    /// Whether the call worked (a program that ran, a page that was read).
    worked: bool,
    reflection: String,
}

/// Why the loop ended early.
enum Halt {
    Stop(StopReason),
    Failed(EngineError),
}

impl From<EngineError> for Halt {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::ContextOverflow { .. } | EngineError::PromptTooLong(_) => {
                Halt::Stop(StopReason::ContextFull)
            }
            e => Halt::Failed(e),
        }
    }
}

/// Runs the explicit system on one task to its end.
pub fn run_multi_agent(
    model: &mut dyn ChatEngine,
    request: MasRequest<'_>,
    tools: &ToolBox,
    emit: &mut dyn FnMut(AgentEvent),
) -> Result<MasSummary, MasError> {
    let started = Instant::now();
    emit(AgentEvent::RunStarted {
        profile: request.profile.name.clone(),
        model: request.model.clone(),
        prompt_tokens: 0,
        cached_tokens: 0,
        context_size: model.context_size(),
        seed: request.sampling.seed,
        temperature: (f64::from(request.sampling.temperature) * 1e6).round() / 1e6,
    });
    let mut system = System {
        model,
        request: &request,
        tools,
        deadline: request.budgets.max_time.map(|t| started + t),
        activations: Vec::new(),
        steps: Vec::new(),
        usage: Usage::default(),
        seen: HashSet::new(),
        tool_time: Duration::ZERO,
    };
    let (answer, stop_reason) = match system.orchestrate(emit) {
        Ok(answer) => (Some(answer), StopReason::Answer),
        Err(Halt::Stop(reason)) => (None, reason),
        Err(Halt::Failed(e)) => return Err(e.into()),
    };
    Ok(MasSummary {
        run: MultiAgentRun {
            task_id: request.task_id.to_string(),
            question: request.question.to_string(),
            profile: request.profile.name.clone(),
            activations: system.activations,
            reward: 0.0,
        },
        answer,
        stop_reason,
        usage: system.usage,
        tool_calls: system.steps.len(),
        tool_time: system.tool_time,
        elapsed: started.elapsed(),
    })
}

/// The state of one run.
struct System<'a, 'r> {
    model: &'a mut dyn ChatEngine,
    request: &'a MasRequest<'r>,
    tools: &'a ToolBox,
    deadline: Option<Instant>,
    activations: Vec<Activation>,
    steps: Vec<Step>,
    usage: Usage,
    /// (tool, input) pairs already answered, for the duplicate guard (PROTOCOL.md §2, step 6).
    seen: HashSet<(Tag, String)>,
    tool_time: Duration,
}

impl System<'_, '_> {
    fn orchestrate(&mut self, emit: &mut dyn FnMut(AgentEvent)) -> Result<String, Halt> {
        let profile = self.request.profile;
        let question = self.request.question;
        let plan = self.call(
            Role::Planner,
            None,
            prompts::PLANNER.into(),
            prompts::planner_input(question, profile),
            emit,
        )?;
        let mut rejections = 0;
        loop {
            let budget_left = self.steps.len() < self.request.budgets.max_tool_calls as usize;
            let thought = self.call(
                Role::Thinker,
                None,
                prompts::thinker(profile),
                prompts::progress_input(question, &plan, &self.steps),
                emit,
            )?;
            // Work before answering: while no call has worked yet (and fewer than
            // EARLY_ATTEMPTS were made), an answer or an unreadable choice runs the profile's
            // first tool instead. A small thinker otherwise answers from its own guess, and a
            // guess is what the answerer then writes down.
            let unproven =
                !self.steps.iter().any(|s| s.worked) && self.steps.len() < EARLY_ATTEMPTS;
            let action = match (next_action(&thought, profile), profile.tools.first()) {
                (Some(Action::Tool(tool)), _) => Action::Tool(tool),
                (_, Some(&tool)) if unproven => Action::Tool(tool),
                _ => Action::Answer,
            };
            match action {
                Action::Tool(tool) if budget_left => self.tool_step(tool, &plan, &thought, emit)?,
                _ => {
                    if budget_left && rejections < MAX_REJECTIONS {
                        let check = self.call(
                            Role::Verifier,
                            None,
                            prompts::VERIFIER.into(),
                            prompts::progress_input(question, &plan, &self.steps),
                            emit,
                        )?;
                        if verifier_score(&check).is_some_and(|score| score <= 2) {
                            rejections += 1;
                            continue;
                        }
                    }
                    let answer = self.call(
                        Role::Answerer,
                        None,
                        prompts::answerer(profile),
                        prompts::answer_input(question, &plan, &self.steps, profile.answer),
                        emit,
                    )?;
                    let answer = answer_block(profile, &answer);
                    if let Some(call) = self.activations.last_mut() {
                        call.output = answer.clone();
                    }
                    return Ok(answer);
                }
            }
        }
    }

    /// A tool agent writes the call, the runtime runs it, the reflector reviews the result.
    fn tool_step(
        &mut self,
        tool: Tag,
        plan: &str,
        thought: &str,
        emit: &mut dyn FnMut(AgentEvent),
    ) -> Result<(), Halt> {
        let question = self.request.question;
        let written = self.call(
            Role::ToolAgent,
            Some(tool),
            prompts::tool_agent(tool),
            prompts::tool_input(question, plan, thought, tool, &self.steps),
            emit,
        )?;
        let input = tool_call_input(tool, &written);
        let index = self.steps.len() + 1;
        emit(AgentEvent::ToolCall {
            index,
            tool,
            input: input.clone(),
        });
        let (observation, success, duplicate, elapsed) = self.run_tool(tool, &input, thought);
        self.tool_time += elapsed;
        emit(AgentEvent::Observation {
            index,
            tool,
            text: observation.clone(),
            success,
            duplicate,
            elapsed_ms: elapsed.as_secs_f64() * 1e3,
        });
        if let Some(call) = self.activations.last_mut() {
            call.output = input.clone();
            call.observation = Some(observation.clone());
            call.tool_ok = Some(success);
        }
        let step = Step {
            tool,
            input,
            observation,
            worked: success,
            reflection: String::new(),
        };
        let review = prompts::reflector_input(question, &step);
        // The call ran: it counts (toward the budget and the run's tool calls) even when the
        // run's budget stops the reflector that follows.
        self.steps.push(step);
        let reflection = self.call(
            Role::Reflector,
            None,
            prompts::REFLECTOR.into(),
            review,
            emit,
        )?;
        if let Some(step) = self.steps.last_mut() {
            step.reflection = reflection;
        }
        Ok(())
    }

    /// (observation, success, answered by the duplicate guard, time).
    fn run_tool(
        &mut self,
        tool: Tag,
        input: &str,
        thought: &str,
    ) -> (String, bool, bool, Duration) {
        let Some(runner) = self.tools.shared(tool) else {
            let text = format!("The {tool} tool is not available in this runtime.");
            return (text, false, false, Duration::ZERO);
        };
        if let Some(notice) = runner.duplicate_notice()
            && !self.seen.insert((tool, input.trim().to_string()))
        {
            return (notice, false, true, Duration::ZERO);
        }
        let last_search = self
            .steps
            .iter()
            .rev()
            .find(|s| s.tool == Tag::WebSearch)
            .map(|s| s.input.trim().to_string());
        let mut summariser = Summariser {
            model: &mut *self.model,
            usage: &mut self.usage,
        };
        // The run's deadline and cancel flag end the call; the next agent call then ends the
        // run with the reason.
        let context = CallContext {
            last_think: Some(thought.trim()),
            last_search: last_search.as_deref(),
            model: Some(&mut summariser),
            limits: CallLimits {
                deadline: self.deadline,
                cancel: self.request.cancel.clone(),
            },
        };
        let output = call_watched(runner, input, context).output;
        (output.observation, output.success, false, output.elapsed)
    }

    /// One agent call, streamed as the block its role writes, counted and recorded.
    fn call(
        &mut self,
        role: Role,
        tool: Option<Tag>,
        system: String,
        user: String,
        emit: &mut dyn FnMut(AgentEvent),
    ) -> Result<String, Halt> {
        let budgets = &self.request.budgets;
        if self
            .request
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        {
            return Err(Halt::Stop(StopReason::Cancelled));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Halt::Stop(StopReason::TimeBudget));
        }
        let left = budgets
            .max_tokens
            .saturating_sub(self.usage.completion_tokens);
        if left == 0 {
            return Err(Halt::Stop(StopReason::TokenBudget));
        }
        let tag = block_tag(role, tool);
        emit(AgentEvent::BlockStarted {
            tag,
            source: Source::Model,
        });
        let turn = ChatTurn {
            system,
            user,
            max_tokens: role_budget(role, tool, self.request.profile),
        };
        let limits = GenerateLimits {
            max_tokens: left,
            deadline: self.deadline,
            cancel: self.request.cancel.clone(),
            // Each role's reply ends at its own token budget, as the baseline was measured.
            stop_on_repetition: false,
        };
        // The answerer transcribes what the team found, greedily: sampled, a small model
        // miscopies digits (seen: a printed 914 answered as 194 and 1808 at temperature 0.6,
        // and as 914 greedily). The other roles keep the run's sampling.
        let sampling = self.request.sampling;
        let greedy = role == Role::Answerer && sampling.temperature > 0.0;
        if greedy {
            self.model.set_sampling(SamplingParams {
                temperature: 0.0,
                ..sampling
            });
        }
        let reply = self.model.chat(&turn, limits, &mut |text| {
            emit(AgentEvent::BlockDelta {
                tag,
                text: text.to_string(),
                source: Source::Model,
            })
        });
        if greedy {
            self.model.set_sampling(sampling);
        }
        let reply = reply?;
        self.usage.add(&reply);
        let output = reply.text.trim().to_string();
        // A call the run's budget, deadline or cancel cut off wrote a block that is not whole
        // (a program cut mid-line is not run): it ends unclosed, as a cut block does in a
        // Chain-of-Agents run.
        let halt = match reply.stop {
            GenerationStop::Cancelled => Some(StopReason::Cancelled),
            GenerationStop::Deadline => Some(StopReason::TimeBudget),
            GenerationStop::MaxTokens if reply.completion_tokens >= left => {
                Some(StopReason::TokenBudget)
            }
            _ => None,
        };
        emit(AgentEvent::BlockEnded {
            tag,
            content: output.clone(),
            closed: halt.is_none(),
            source: Source::Model,
        });
        self.activations.push(Activation {
            role,
            output: output.clone(),
            tool,
            observation: None,
            tool_ok: None,
            prompt_tokens: reply.prompt_tokens as u64,
            completion_tokens: reply.completion_tokens as u64,
        });
        match halt {
            Some(reason) => Err(Halt::Stop(reason)),
            None => Ok(output),
        }
    }
}

/// The page summariser's calls go to the same model and count as the system's calls.
struct Summariser<'a> {
    model: &'a mut dyn ChatEngine,
    usage: &'a mut Usage,
}

impl ChatModel for Summariser<'_> {
    fn chat(&mut self, instruction: &str, max_tokens: usize) -> Result<String, ChatError> {
        let turn = ChatTurn {
            system: QWEN_SYSTEM.to_string(),
            user: instruction.to_string(),
            max_tokens,
        };
        match self
            .model
            .chat(&turn, GenerateLimits::tokens(max_tokens), &mut |_| {})
        {
            Ok(reply) => {
                self.usage.add(&reply);
                Ok(reply.text)
            }
            Err(EngineError::ContextOverflow { .. } | EngineError::PromptTooLong(_)) => {
                Err(ChatError::TooLong)
            }
            Err(e) => Err(ChatError::Failed(e.to_string())),
        }
    }
}

/// The block a role's output becomes in the trajectory (and in the event stream).
fn block_tag(role: Role, tool: Option<Tag>) -> Tag {
    match role {
        Role::Planner => Tag::Plan,
        Role::Thinker => Tag::Think,
        Role::ToolAgent => tool.unwrap_or(Tag::Code),
        Role::Reflector => Tag::Reflection,
        Role::Verifier => Tag::DoubleCheck,
        Role::Answerer => Tag::Answer,
    }
}

/// The thinker's `Next: X`, the last one it wrote, among the profile's tools and `answer`.
fn next_action(thought: &str, profile: &Profile) -> Option<Action> {
    let lower = thought.to_ascii_lowercase();
    let at = lower.rfind("next:")?;
    let word: String = lower[at + "next:".len()..]
        .trim_start()
        .trim_start_matches(['`', '*', '"', '\'', '<'])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if word == "answer" {
        return Some(Action::Answer);
    }
    let tool = Tag::from_name(&word)?;
    profile.enables(tool).then_some(Action::Tool(tool))
}

/// The verifier's score, from `The score this time is:N` (or the last digit 1 to 4 it wrote).
fn verifier_score(check: &str) -> Option<u8> {
    let lower = check.to_ascii_lowercase();
    let tail = match lower.rfind("score this time is") {
        Some(at) => &lower[at..],
        None => lower.as_str(),
    };
    let mut digits = tail.chars().filter(|c| ('1'..='4').contains(c));
    let picked = if lower.contains("score this time is") {
        digits.next()
    } else {
        digits.next_back()
    };
    picked.and_then(|c| c.to_digit(10)).map(|d| d as u8)
}

/// The content of the tool call block a tool agent's reply becomes: a fenced program for
/// `<code>`, one line for a search, addresses joined by ` | ` for `<crawl_page>`.
fn tool_call_input(tool: Tag, written: &str) -> String {
    match tool {
        Tag::Code => {
            let program = match program_and_stdin(written) {
                Some((body, _)) => body.to_string(),
                None => written
                    .lines()
                    .filter(|line| !line.trim_start().starts_with("```"))
                    .map(|line| format!("{line}\n"))
                    .collect(),
            };
            let program = program.trim_end();
            format!("\n```py\n{program}\n```\n")
        }
        Tag::CrawlPage => {
            let urls: Vec<&str> = written
                .split(|c: char| c.is_whitespace() || c == '|' || c == '(' || c == '<')
                .filter(|w| w.starts_with("http://") || w.starts_with("https://"))
                .map(|w| w.trim_end_matches([')', '.', ',', ']', '>', '"', '\'']))
                .collect();
            if urls.is_empty() {
                first_line(written)
            } else {
                urls.join(" | ")
            }
        }
        _ => first_line(written),
    }
}

/// The answer as the profile's `<answer>` holds it: a math profile's bare value (one line) is put
/// in the `\boxed{}` its answers are written in, as a tool agent's program is put in its fence
/// (the value is the agent's; the protocol's form is the system's). Anything longer is left as
/// written, for the format filter to judge.
fn answer_block(profile: &Profile, written: &str) -> String {
    if profile.answer == catena_protocol::AnswerFormat::Boxed
        && catena_protocol::boxed(written).is_none()
        && !written.is_empty()
        && !written.contains('\n')
    {
        format!("\\boxed{{{written}}}")
    } else {
        written.to_string()
    }
}

/// The first non-empty line, without a `Query:` label, quotes or backticks.
fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line = line
        .strip_prefix("Query:")
        .or_else(|| line.strip_prefix("query:"))
        .unwrap_or(line);
    line.trim()
        .trim_matches(['"', '\'', '`'])
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests;

//! The chain runner: one model writes the whole Chain-of-Agents trajectory in one assistant turn;
//! the runner parses it as it streams, runs the tool calls, appends their observations to the same
//! context and lets the model go on, within budgets (PROTOCOL.md §2).

pub mod remote;
pub mod summarize;
pub mod tools;

pub use catena_run_events::{AgentEvent, RunSummary, Source, StopReason, Timings};

use crate::summarize::SideModel;
use crate::tools::{CallContext, CallLimits, Interruption, ToolBox, call_watched};
use catena_engine_api::{
    CancelFlag, Constraint, EngineError, GenerateLimits, GenerationStop, PromptPart, PromptStart,
    SamplingParams, Session, StartChat, StopMatcher, TaskChat,
};
use catena_protocol::{
    AnswerFormat, Block, ChainGrammar, ParseEvent, Parser, Profile, Segment, Tag, final_answer,
    last_suggested_answer, printed_output, render_observation,
};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    pub max_tool_calls: u32,
    /// Tokens the model may generate in the whole run.
    pub max_tokens: usize,
    /// Wall time of the whole run.
    pub max_time: Option<Duration>,
}

/// How the model's text is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decoding {
    /// Every generation held to the profile's chain grammar (PROTOCOL.md §8): the chain cannot
    /// leave the protocol. Observations and prefills are never constrained.
    #[default]
    Protocol,
    /// The model writes freely; the parser takes whatever it wrote (`--free`, and engines that
    /// cannot constrain, such as a remote server).
    Free,
}

/// What a chain does when a budget or the loop watch cuts it short before it has answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutShort {
    /// It ends as it is. RL rollouts and distillation: their trajectories must be the model's
    /// own, and a reward for an answer the runtime asked for would teach nothing.
    End,
    /// Held to the grammar ([`Decoding::Protocol`]), it gives its answer: the runtime closes the
    /// block it was in, and the model writes the `<answer>` alone, within an allowance of its
    /// own (PROTOCOL.md §2, item 5). A free chain, which no grammar can make answer, ends as it
    /// is.
    Answer,
}

/// What to run.
pub struct RunRequest<'a> {
    pub profile: &'a Profile,
    /// The model's name, for the `run_started` event.
    pub model: String,
    /// The session's sampling settings, for the `run_started` event.
    pub sampling: SamplingParams,
    /// The prompt the session already holds.
    pub prompt: PromptStart,
    /// Text the assistant turn starts with; a complete tool call at its end runs first.
    pub prefill: Option<&'a str>,
    pub budgets: Budgets,
    /// Set it to stop the run between two tokens, or during a tool call.
    pub cancel: Option<CancelFlag>,
    pub decoding: Decoding,
    pub cut_short: CutShort,
}

/// Puts `task`'s prompt (`profile`'s system and user messages in the model's chat template) into
/// `session`, reusing the longest prefix the session already evaluated.
pub fn start_task(
    session: &mut (impl StartChat + ?Sized),
    profile: &Profile,
    task: &str,
) -> Result<PromptStart, EngineError> {
    let user = profile.user_message(task);
    session.start_chat(&TaskChat {
        system: &profile.system,
        user: &user,
        user_shared: profile.user_preamble().len(),
    })
}

/// A run that could not go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Runs a chain to its end with the request's sampling and returns the summary. The session must
/// already hold the prompt ([`start_task`] for a local one); `emit` receives every event as it
/// happens.
pub fn run_chain(
    session: &mut dyn Session,
    request: RunRequest<'_>,
    tools: &ToolBox,
    emit: &mut dyn FnMut(AgentEvent),
) -> Result<RunSummary, AgentError> {
    let started = Instant::now();
    let deadline = request.budgets.max_time.map(|t| started + t);
    session.set_sampling(request.sampling);
    let prompt_tokens = request.prompt.prompt_tokens;
    emit(AgentEvent::RunStarted {
        profile: request.profile.name.clone(),
        model: request.model.clone(),
        prompt_tokens,
        cached_tokens: request.prompt.cached_tokens,
        context_size: session.context_size(),
        seed: request.sampling.seed,
        // f32 → f64 without the binary noise (0.6, not 0.6000000238418579).
        temperature: (f64::from(request.sampling.temperature) * 1e6).round() / 1e6,
    });
    let limits = CallLimits {
        deadline,
        cancel: request.cancel,
    };
    let mut chain = Chain::new(request.profile, tools, request.budgets, limits);
    if request.decoding == Decoding::Protocol {
        chain.grammar = Some(ChainGrammar::for_profile(request.profile));
    }
    let prefill_done = match request.prefill {
        Some(prefill) if !prefill.is_empty() => chain.prefill(session, prefill, emit)?,
        _ => None,
    };
    let stop_reason = match prefill_done {
        Some(reason) => reason,
        None => chain.generate_until_done(session, emit)?,
    };
    if request.cut_short == CutShort::Answer && chain.may_still_answer(stop_reason) {
        chain.last_word(session, stop_reason, emit)?;
    }
    for event in chain.parser.finish() {
        chain.on_parse_event(event, Source::Model, emit);
    }
    Ok(chain.summary(session, prompt_tokens, stop_reason, started.elapsed()))
}

/// The state of one run.
struct Chain<'a> {
    profile: &'a Profile,
    tools: &'a ToolBox,
    budgets: Budgets,
    stops: StopMatcher,
    parser: Parser,
    blocks: Vec<Block>,
    /// The whole assistant turn so far: prefill, generated text and observations.
    trajectory: String,
    /// Tool blocks closed since the last observation.
    pending_calls: Vec<Block>,
    tool_calls: usize,
    /// What the `<code>` calls the runtime ran printed (`RunSummary::printed`).
    printed: Vec<String>,
    tool_time: Duration,
    issues: usize,
    /// (tool, input) pairs already answered, for the duplicate guard.
    seen: HashSet<(Tag, String)>,
    generated: usize,
    /// The run's deadline and cancel flag, which generation and tool calls both watch.
    limits: CallLimits,
    /// The protocol's grammars, when every generation is held to them.
    grammar: Option<ChainGrammar>,
    /// Where in `trajectory` the current segment began: the turn's start, or the end of the
    /// last observation (PROTOCOL.md §8).
    segment_start: usize,
    /// Whether the chain's opening is behind it: an observation was appended, or the user
    /// wrote the opening (a prefill).
    opened: bool,
    /// The last segment that ended in tool calls, with its observations, and how many segments
    /// in a row have repeated it word for word: the loop across tool calls that the engine's
    /// `RepetitionWatch`, which sees one generation at a time, cannot see.
    last_cycle: String,
    cycle_repeats: usize,
}

/// The tokens a chain cut short may spend on its answer (PROTOCOL.md §2, item 5): enough for the
/// profile's answer format (a boxed value or a short string, a whole program), never a second
/// chain, so never more than the chain's own token budget, unless that is less than a boxed
/// value needs: a user who gave 12 tokens still gets an answer. Its time is a tenth of the
/// run's, at least 10 s.
fn answer_allowance(format: AnswerFormat, budget: usize) -> usize {
    const BOXED: usize = 64;
    let most = match format {
        AnswerFormat::Boxed => BOXED,
        AnswerFormat::Short | AnswerFormat::Multi => 128,
        AnswerFormat::Program => 1024,
    };
    most.min(budget.max(BOXED))
}

/// Stop a chain at the third segment in a row that is the same as the one before, calls and
/// observations included: the same text after the same observation again is a loop, not a
/// check (PROTOCOL.md §2, item 4). Two in a row are allowed: a model may rerun a program to
/// check it, and one chain of the README's first example did so and then answered right.
const LOOP_CYCLES: usize = 3;

impl<'a> Chain<'a> {
    fn new(profile: &'a Profile, tools: &'a ToolBox, budgets: Budgets, limits: CallLimits) -> Self {
        Chain {
            profile,
            tools,
            budgets,
            stops: StopMatcher::new(profile.stop_strings()),
            parser: Parser::new(),
            blocks: Vec::new(),
            trajectory: String::new(),
            pending_calls: Vec::new(),
            tool_calls: 0,
            printed: Vec::new(),
            tool_time: Duration::ZERO,
            issues: 0,
            seen: HashSet::new(),
            generated: 0,
            limits,
            grammar: None,
            segment_start: 0,
            opened: false,
            last_cycle: String::new(),
            cycle_repeats: 0,
        }
    }

    /// Holds the next generation to the grammar of the segment it continues, the text already
    /// written in that segment given (a prefill is checked here, before anything runs).
    fn constrain(&self, session: &mut dyn Session, given: &str) -> Result<(), EngineError> {
        let Some(grammar) = &self.grammar else {
            return Ok(());
        };
        let segment = if !self.opened {
            Segment::Opening
        } else if self.tool_calls >= self.budgets.max_tool_calls as usize {
            Segment::AnswerOnly
        } else {
            Segment::Resuming
        };
        session.constrain(&Constraint::strict(grammar.segment(segment)).continuing(given))
    }

    /// The next segment starts after what the runtime just appended (an observation).
    fn start_segment(&mut self) {
        self.segment_start = self.trajectory.len();
        self.opened = true;
    }

    /// Appends the prefill; if it ends with complete tool calls, runs them. Returns a stop
    /// reason when the run is already over.
    fn prefill(
        &mut self,
        session: &mut dyn Session,
        prefill: &str,
        emit: &mut dyn FnMut(AgentEvent),
    ) -> Result<Option<StopReason>, AgentError> {
        // The user wrote the chain's opening. Only the part after the prefill's last
        // observation is the segment the model continues: the rest, answered calls included,
        // is taken as the user wrote it.
        self.opened = true;
        let close = Tag::Observation.close();
        if let Some(at) = prefill.rfind(&close) {
            let after = at + close.len();
            let rest = &prefill[after..];
            self.segment_start = after + (rest.len() - rest.trim_start().len());
        }
        // The prefill precedes the trajectory, so its offsets are the trajectory's.
        self.constrain(session, &prefill[self.segment_start..])?;
        match session.append(&[PromptPart::plain(prefill)]) {
            Ok(_) => {}
            Err(EngineError::ContextOverflow { .. }) => return Ok(Some(StopReason::ContextFull)),
            Err(e) => return Err(e.into()),
        }
        self.feed(prefill, Source::Prefill, emit);
        let ends_with_call = self.parser.open_block().is_none()
            && self
                .pending_calls
                .last()
                .is_some_and(|call| prefill.trim_end().ends_with(&call.tag.close()));
        if !ends_with_call {
            self.pending_calls.clear();
            return Ok(None);
        }
        self.run_pending_calls(session, emit)
    }

    fn generate_until_done(
        &mut self,
        session: &mut dyn Session,
        emit: &mut dyn FnMut(AgentEvent),
    ) -> Result<StopReason, AgentError> {
        loop {
            let remaining = self.budgets.max_tokens.saturating_sub(self.generated);
            if remaining == 0 {
                return Ok(StopReason::TokenBudget);
            }
            let limits = GenerateLimits {
                max_tokens: remaining,
                deadline: self.limits.deadline,
                cancel: self.limits.cancel.clone(),
                // A chain that repeats itself never reaches an answer (the engine's
                // `RepetitionWatch`): stop it rather than spend the budgets on the loop.
                stop_on_repetition: true,
            };
            self.constrain(session, &self.trajectory[self.segment_start..])?;
            let stops = self.stops.clone();
            let generation = session.generate(&stops, limits, &mut |text| {
                self.feed(text, Source::Model, emit)
            })?;
            // A generation that stopped at a stop string sampled at least one token, whatever
            // a remote server reports: counting it so, a server that claims none cannot keep the
            // run going past its budget.
            let sampled_nothing = generation.tokens == 0;
            self.generated += generation.tokens.max(1);
            match generation.stop {
                GenerationStop::EndOfTurn => return Ok(StopReason::EndOfTurn),
                GenerationStop::MaxTokens => return Ok(StopReason::TokenBudget),
                GenerationStop::Deadline => return Ok(StopReason::TimeBudget),
                GenerationStop::ContextFull => return Ok(StopReason::ContextFull),
                GenerationStop::Cancelled => return Ok(StopReason::Cancelled),
                GenerationStop::Repetition { .. } => return Ok(StopReason::Repetition),
                // Nothing was sampled, so nothing is new in the context: asking again would get
                // the same answer, for ever.
                GenerationStop::StopString { .. } if sampled_nothing => {
                    return Ok(StopReason::EndOfTurn);
                }
                GenerationStop::StopString { .. } => {
                    // A stop string inside an open block (a fence in code or an answer) is text:
                    // go on generating.
                    if self.parser.open_block().is_some() {
                        continue;
                    }
                    if !self.pending_calls.is_empty() {
                        if let Some(reason) = self.run_pending_calls(session, emit)? {
                            return Ok(reason);
                        }
                        continue;
                    }
                    if self
                        .blocks
                        .last()
                        .is_some_and(|b| b.tag == Tag::Answer && b.closed)
                    {
                        return Ok(StopReason::Answer);
                    }
                }
            }
        }
    }

    /// Runs every pending tool call in order and appends one observation for each.
    fn run_pending_calls(
        &mut self,
        session: &mut dyn Session,
        emit: &mut dyn FnMut(AgentEvent),
    ) -> Result<Option<StopReason>, AgentError> {
        let calls = std::mem::take(&mut self.pending_calls);
        let cycle_start = self.segment_start;
        for call in calls {
            if !self.profile.enables(call.tag) {
                continue;
            }
            if let Some(why) = self.limits.interruption() {
                return Ok(Some(why.stop_reason()));
            }
            if self.tool_calls >= self.budgets.max_tool_calls as usize {
                return Ok(Some(StopReason::ToolBudget));
            }
            self.tool_calls += 1;
            let index = self.tool_calls;
            let input = call.content.trim().to_string();
            emit(AgentEvent::ToolCall {
                index,
                tool: call.tag,
                input: call.content.clone(),
            });
            let (text, success, duplicate, elapsed, interrupted) =
                self.call_tool(session, call.tag, &call.content, &input);
            self.tool_time += elapsed;
            if call.tag == Tag::Code
                && let Some(printed) = printed_output(&text)
            {
                self.printed.push(printed.to_string());
            }
            emit(AgentEvent::Observation {
                index,
                tool: call.tag,
                text: text.clone(),
                success,
                duplicate,
                elapsed_ms: elapsed.as_secs_f64() * 1e3,
            });
            let appended = render_observation(&text);
            match session.append(&[PromptPart::plain(appended.as_str())]) {
                Ok(_) => {}
                Err(EngineError::ContextOverflow { .. }) => {
                    return Ok(Some(StopReason::ContextFull));
                }
                Err(e) => return Err(e.into()),
            }
            self.parser.skip_external(&appended);
            self.trajectory.push_str(&appended);
            self.start_segment();
            self.blocks.push(Block {
                tag: Tag::Observation,
                content: format!("\n{text}\n"),
                closed: true,
            });
            // The observation says the call was stopped; the run ends with it.
            if let Some(why) = interrupted {
                return Ok(Some(why.stop_reason()));
            }
        }
        Ok(self
            .note_cycle(cycle_start)
            .then_some(StopReason::Repetition))
    }

    /// Whether a chain that stopped for `reason` was cut short with no answer, and can still be
    /// made to give one: it is held to the grammar, no user stopped it, and it wrote no
    /// `<suggested_answer>` (which stands in for the answer, §2 item 5).
    fn may_still_answer(&self, reason: StopReason) -> bool {
        // A full context leaves no room for an answer.
        let cut = reason.cut_short() && reason != StopReason::ContextFull;
        cut && self.grammar.is_some()
            && final_answer(&self.blocks).is_none()
            && last_suggested_answer(&self.blocks).is_none()
            && self.limits.interruption() != Some(Interruption::Cancelled)
    }

    /// The answer of a chain cut short (PROTOCOL.md §2, item 5): the runtime closes the block
    /// the cut left open (its code fence first; completing a closing tag the model had begun),
    /// then the model writes
    /// the `<answer>` alone, held to the answer's grammar, within [`answer_allowance`]. A call
    /// the cut left open is closed but not run. Where the cut fell inside a tag the answer
    /// cannot follow (`<pla` between blocks), the chain ends as it is.
    fn last_word(
        &mut self,
        session: &mut dyn Session,
        reason: StopReason,
        emit: &mut dyn FnMut(AgentEvent),
    ) -> Result<(), AgentError> {
        let Some(grammar) = &self.grammar else {
            return Ok(());
        };
        let answer = grammar.segment(Segment::Answer).to_string();
        let closing = match self.parser.open_block() {
            Some(tag) => {
                let mut closing = String::new();
                // Inside a fence a tag is code: the fence closes first, on a line of its own.
                if self.parser.in_fence() {
                    if !self.trajectory.ends_with('\n') {
                        closing.push('\n');
                    }
                    closing.push_str("```\n");
                }
                let close = tag.close();
                let begun = if closing.is_empty() {
                    (1..close.len())
                        .rev()
                        .find(|&n| self.trajectory.ends_with(&close[..n]))
                        .unwrap_or(0)
                } else {
                    0
                };
                closing.push_str(&close[begun..]);
                closing.push('\n');
                closing
            }
            None => {
                // Between blocks, the segment goes on from the last tag: what follows it must
                // be white space and the start of `<answer>`.
                let after_tag = self.trajectory.rfind('>').map_or(0, |at| at + 1);
                let tail = self.trajectory[after_tag..].trim_start();
                if !Tag::Answer.open().starts_with(tail) {
                    return Ok(());
                }
                self.segment_start = self.segment_start.max(after_tag);
                String::new()
            }
        };
        if !closing.is_empty() {
            match session.append(&[PromptPart::plain(closing.as_str())]) {
                Ok(_) => {}
                Err(EngineError::ContextOverflow { .. }) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            self.feed(&closing, Source::Runtime, emit);
            self.pending_calls.clear();
            self.segment_start = self.trajectory.len();
        }
        emit(AgentEvent::AnswerAsked { reason });
        let mut left = answer_allowance(self.profile.answer, self.budgets.max_tokens);
        let deadline = self
            .budgets
            .max_time
            .map(|t| Instant::now() + (t / 10).max(Duration::from_secs(10)));
        while left > 0 {
            let given = &self.trajectory[self.segment_start..];
            session.constrain(&Constraint::strict(&answer).continuing(given))?;
            let limits = GenerateLimits {
                max_tokens: left,
                deadline,
                cancel: self.limits.cancel.clone(),
                stop_on_repetition: true,
            };
            let stops = self.stops.clone();
            let generation = session.generate(&stops, limits, &mut |text| {
                self.feed(text, Source::Model, emit)
            })?;
            let spent = generation.tokens.max(1);
            self.generated += spent;
            left = left.saturating_sub(spent);
            // A fence inside the answer is a stop string too: go on until it closes.
            let inside = self.parser.open_block() == Some(Tag::Answer);
            if !(inside && matches!(generation.stop, GenerationStop::StopString { .. })) {
                break;
            }
        }
        Ok(())
    }

    /// Records the segment from `from` to here (its calls and their observations) and says
    /// whether it closes a loop of [`LOOP_CYCLES`] identical segments.
    fn note_cycle(&mut self, from: usize) -> bool {
        let cycle = self.trajectory[from..].trim_start();
        if cycle == self.last_cycle {
            self.cycle_repeats += 1;
        } else {
            self.last_cycle = cycle.to_string();
            self.cycle_repeats = 0;
        }
        self.cycle_repeats + 1 >= LOOP_CYCLES
    }

    /// (observation, success, answered by the duplicate guard, time, why the run stopped it).
    fn call_tool(
        &mut self,
        session: &mut dyn Session,
        tag: Tag,
        raw: &str,
        key: &str,
    ) -> (String, bool, bool, Duration, Option<Interruption>) {
        let Some(tool) = self.tools.shared(tag) else {
            return (
                format!("The {tag} tool is not available in this runtime."),
                false,
                false,
                Duration::ZERO,
                None,
            );
        };
        if let Some(notice) = tool.duplicate_notice()
            && !self.seen.insert((tag, key.to_string()))
        {
            return (notice, false, true, Duration::ZERO, None);
        }
        let last_content = |tag: Tag| {
            self.blocks
                .iter()
                .rev()
                .find(|b| b.tag == tag)
                .map(|b| b.content.trim())
        };
        let mut model = SideModel(session);
        let context = CallContext {
            last_think: last_content(Tag::Think),
            last_search: last_content(Tag::WebSearch),
            model: Some(&mut model),
            limits: self.limits.clone(),
        };
        let call = call_watched(tool, raw, context);
        let output = call.output;
        (
            output.observation,
            output.success,
            false,
            output.elapsed,
            call.interrupted,
        )
    }

    fn feed(&mut self, text: &str, source: Source, emit: &mut dyn FnMut(AgentEvent)) {
        self.trajectory.push_str(text);
        for event in self.parser.push(text) {
            self.on_parse_event(event, source, emit);
        }
    }

    fn on_parse_event(
        &mut self,
        event: ParseEvent,
        source: Source,
        emit: &mut dyn FnMut(AgentEvent),
    ) {
        match event {
            ParseEvent::Text(text) => emit(AgentEvent::Text { text, source }),
            ParseEvent::BlockStart(tag) => emit(AgentEvent::BlockStarted { tag, source }),
            ParseEvent::BlockDelta { tag, text } => {
                emit(AgentEvent::BlockDelta { tag, text, source })
            }
            ParseEvent::BlockEnd(block) => {
                if block.tag == Tag::Observation {
                    // Calls answered inside the prefill are not run again.
                    self.pending_calls.clear();
                } else if block.tag.is_tool() && block.closed {
                    self.pending_calls.push(block.clone());
                }
                emit(AgentEvent::BlockEnded {
                    tag: block.tag,
                    content: block.content.clone(),
                    closed: block.closed,
                    source,
                });
                self.blocks.push(block);
            }
            ParseEvent::Issue(issue) => {
                self.issues += 1;
                emit(AgentEvent::ParseIssue {
                    message: issue.to_string(),
                    issue,
                })
            }
        }
    }

    fn summary(
        &self,
        session: &dyn Session,
        prompt_tokens: usize,
        stop_reason: StopReason,
        elapsed: Duration,
    ) -> RunSummary {
        let answer = final_answer(&self.blocks).or_else(|| {
            stop_reason
                .cut_short()
                .then(|| last_suggested_answer(&self.blocks))
                .flatten()
        });
        let stats = session.stats();
        RunSummary {
            answer: answer.map(str::to_string),
            stop_reason,
            tool_calls: self.tool_calls,
            prompt_tokens,
            context_tokens: stats.context_tokens,
            evaluated_tokens: stats.evaluated_tokens,
            generated_tokens: stats.generated_tokens,
            parse_issues: self.issues,
            timings: Timings::new(&stats, self.tool_time, elapsed),
            trajectory: self.trajectory.clone(),
            mean_logprob: catena_engine_api::mean_logprob(session.tokens()),
            printed: self.printed.clone(),
        }
    }
}

#[cfg(test)]
mod tests;

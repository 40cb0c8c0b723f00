//! The runner against a scripted session (a stand-in for the model inside this module's unit
//! tests only; the end-to-end tests run the real model and sandbox).

use super::*;
use crate::tools::{Tool, ToolOutput};
use catena_engine_api::{Generation, SessionState};
use std::sync::{Arc, Mutex};

/// Plays back a fixed model output, one character per token, honouring stop strings and limits.
struct Scripted {
    script: Vec<char>,
    cursor: usize,
    appended: Vec<String>,
    /// The constraints the run set, in order (recorded, not enforced).
    constraints: Vec<Constraint>,
    /// Its tokens stay empty: the script counts characters, not token ids.
    state: SessionState,
}

impl Scripted {
    fn new(script: &str) -> Self {
        Scripted {
            script: script.chars().collect(),
            cursor: 0,
            appended: Vec::new(),
            constraints: Vec::new(),
            state: SessionState {
                context_size: 1 << 20,
                ..SessionState::default()
            },
        }
    }
}

impl Session for Scripted {
    fn constrain(&mut self, constraint: &Constraint) -> Result<(), EngineError> {
        self.constraints.push(constraint.clone());
        Ok(())
    }

    fn side_chat(&mut self, _chat: &catena_engine_api::SideChat) -> Result<String, EngineError> {
        Err(EngineError::Backend(
            "the scripted session has no model beside it".into(),
        ))
    }

    fn append(&mut self, parts: &[PromptPart]) -> Result<usize, EngineError> {
        let n: usize = parts.iter().map(|p| p.text.chars().count()).sum();
        if self.state.stats.context_tokens + n > self.state.context_size {
            return Err(EngineError::ContextOverflow {
                context_size: self.state.context_size,
                needed: n,
            });
        }
        self.appended
            .push(parts.iter().map(|p| p.text.as_str()).collect());
        self.state.stats.context_tokens += n;
        self.state.stats.evaluated_tokens += n;
        Ok(n)
    }

    fn generate(
        &mut self,
        stops: &StopMatcher,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, EngineError> {
        let mut text = String::new();
        let mut tokens = 0;
        // One character is one token here.
        let mut watch = limits
            .stop_on_repetition
            .then(catena_engine_api::RepetitionWatch::default);
        loop {
            if limits.is_cancelled() {
                return Ok(Generation {
                    text,
                    stop: GenerationStop::Cancelled,
                    tokens,
                });
            }
            if tokens >= limits.max_tokens {
                return Ok(Generation {
                    text,
                    stop: GenerationStop::MaxTokens,
                    tokens,
                });
            }
            let Some(c) = self.script.get(self.cursor).copied() else {
                return Ok(Generation {
                    text,
                    stop: GenerationStop::EndOfTurn,
                    tokens,
                });
            };
            self.cursor += 1;
            tokens += 1;
            self.state.stats.generated_tokens += 1;
            self.state.stats.context_tokens += 1;
            self.state.stats.evaluated_tokens += 1;
            let checked = text.len();
            text.push(c);
            on_text(&c.to_string());
            if let Some(hit) = stops.find(&text, checked) {
                return Ok(Generation {
                    text,
                    stop: GenerationStop::StopString { index: hit.index },
                    tokens,
                });
            }
            if let Some(period) = watch.as_mut().and_then(|w| w.push(c as i32)) {
                return Ok(Generation {
                    text,
                    stop: GenerationStop::Repetition { period },
                    tokens,
                });
            }
        }
    }

    fn state(&self) -> &SessionState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut SessionState {
        &mut self.state
    }
}

/// Answers every call with what it was given; counts calls.
struct Echo {
    tag: Tag,
    calls: Arc<Mutex<Vec<String>>>,
    dedupe: bool,
}

impl Tool for Echo {
    fn tag(&self) -> Tag {
        self.tag
    }

    fn call(&self, input: &str, _context: &mut crate::tools::CallContext<'_>) -> ToolOutput {
        self.calls.lock().unwrap().push(input.to_string());
        ToolOutput {
            observation: format!("ran: {}", input.trim()),
            success: true,
            elapsed: Duration::from_millis(1),
        }
    }

    fn duplicate_notice(&self) -> Option<String> {
        self.dedupe.then(|| "already searched".to_string())
    }
}

struct Harness {
    calls: Arc<Mutex<Vec<String>>>,
    tools: ToolBox,
}

fn harness(tag: Tag, dedupe: bool) -> Harness {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut tools = ToolBox::new();
    tools.add(Box::new(Echo {
        tag,
        calls: calls.clone(),
        dedupe,
    }));
    Harness { calls, tools }
}

fn budgets() -> Budgets {
    Budgets {
        max_tool_calls: 12,
        max_tokens: 10_000,
        max_time: None,
    }
}

fn run(
    session: &mut Scripted,
    profile: &str,
    prefill: Option<&str>,
    budgets: Budgets,
    tools: &ToolBox,
) -> (RunSummary, Vec<AgentEvent>) {
    run_decoded(session, profile, prefill, budgets, tools, Decoding::Free)
}

fn run_decoded(
    session: &mut Scripted,
    profile: &str,
    prefill: Option<&str>,
    budgets: Budgets,
    tools: &ToolBox,
    decoding: Decoding,
) -> (RunSummary, Vec<AgentEvent>) {
    run_cut(
        session,
        profile,
        prefill,
        budgets,
        tools,
        decoding,
        CutShort::Answer,
    )
}

fn run_cut(
    session: &mut Scripted,
    profile: &str,
    prefill: Option<&str>,
    budgets: Budgets,
    tools: &ToolBox,
    decoding: Decoding,
    cut_short: CutShort,
) -> (RunSummary, Vec<AgentEvent>) {
    let profile = Profile::builtin(profile).unwrap();
    let prompt_tokens = session.append(&[PromptPart::plain("PROMPT")]).unwrap();
    let mut events = Vec::new();
    let summary = run_chain(
        session,
        RunRequest {
            profile: &profile,
            model: "scripted".into(),
            sampling: SamplingParams::greedy(),
            prompt: PromptStart {
                prompt_tokens,
                cached_tokens: 0,
            },
            cancel: None,
            prefill,
            budgets,
            decoding,
            cut_short,
        },
        tools,
        &mut |e| events.push(e),
    )
    .unwrap();
    (summary, events)
}

#[test]
fn tool_call_observation_then_answer() {
    let h = harness(Tag::Code, false);
    let mut s = Scripted::new(
        "<plan>p</plan><code>\n```py\nprint(1)\n```\n</code><reflection>ok</reflection><answer>\\boxed{1}</answer>IGNORED",
    );
    let (summary, events) = run(&mut s, "math", None, budgets(), &h.tools);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{1}"));
    assert_eq!(summary.stop_reason, StopReason::Answer);
    assert_eq!(summary.tool_calls, 1);
    assert_eq!(h.calls.lock().unwrap().len(), 1);
    // The observation went into the context, framed exactly.
    assert_eq!(
        s.appended[1],
        "\n<observation>\nran: ```py\nprint(1)\n```\n</observation>\n\n"
    );
    assert!(summary.trajectory.contains("</code>\n<observation>\nran:"));
    assert!(!summary.trajectory.contains("IGNORED"));
    assert_eq!(summary.context_tokens, summary.evaluated_tokens);
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCall { .. } => Some("call"),
            AgentEvent::Observation { .. } => Some("obs"),
            AgentEvent::BlockEnded { tag, .. } => Some(tag.name()),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        ["plan", "code", "call", "obs", "reflection", "answer"]
    );
}

#[test]
fn prefill_ending_with_a_call_runs_it_first() {
    let h = harness(Tag::Code, false);
    let mut s = Scripted::new("<answer>\\boxed{2}</answer>");
    let prefill = "<plan>x</plan>\n<code>\n```py\nprint(2)\n```\n</code>\n";
    let (summary, events) = run(&mut s, "math", Some(prefill), budgets(), &h.tools);
    assert_eq!(h.calls.lock().unwrap().len(), 1);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{2}"));
    assert_eq!(s.appended[1], prefill);
    assert!(s.appended[2].starts_with("\n<observation>\nran:"));
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::BlockStarted {
            tag: Tag::Plan,
            source: Source::Prefill
        }
    )));
}

#[test]
fn prefill_calls_already_answered_are_not_run_again() {
    let h = harness(Tag::Code, false);
    let mut s = Scripted::new("<answer>\\boxed{3}</answer>");
    let prefill =
        "<code>\n```py\nprint(3)\n```\n</code>\n<observation>\nold\n</observation>\n\n<think>";
    let (summary, _) = run(&mut s, "math", Some(prefill), budgets(), &h.tools);
    assert!(h.calls.lock().unwrap().is_empty());
    assert_eq!(summary.tool_calls, 0);
    // The model continues inside the open <think>: the nested <answer> ends it.
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{3}"));
    assert_eq!(summary.parse_issues, 1);
}

#[test]
fn a_stop_string_inside_a_fence_does_not_end_the_call() {
    let h = harness(Tag::Code, false);
    let mut s =
        Scripted::new("<code>\n```py\nprint(\"</code>\")\n```\n</code><answer>\\boxed{0}</answer>");
    let (summary, _) = run(&mut s, "math", None, budgets(), &h.tools);
    let calls = h.calls.lock().unwrap();
    assert_eq!(calls.len(), 1);
    assert!(calls[0].contains("print(\"</code>\")"));
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{0}"));
}

#[test]
fn tool_budget_ends_the_run_with_the_suggested_answer() {
    let h = harness(Tag::WebSearch, false);
    let mut s = Scripted::new(
        "<suggested_answer>Oslo</suggested_answer><web_search>a</web_search><web_search>b</web_search><answer>never</answer>",
    );
    let mut b = budgets();
    b.max_tool_calls = 1;
    let (summary, _) = run(&mut s, "web", None, b, &h.tools);
    assert_eq!(summary.stop_reason, StopReason::ToolBudget);
    assert_eq!(summary.tool_calls, 1);
    assert_eq!(summary.answer.as_deref(), Some("Oslo"));
}

#[test]
fn a_chain_in_a_loop_ends_with_its_suggested_answer() {
    let h = harness(Tag::WebSearch, false);
    let script = format!(
        "<suggested_answer>Oslo</suggested_answer><think>{}</think><answer>never</answer>",
        "it is Oslo. ".repeat(100)
    );
    let mut s = Scripted::new(&script);
    let (summary, _) = run(&mut s, "web", None, budgets(), &h.tools);
    assert_eq!(summary.stop_reason, StopReason::Repetition);
    assert_eq!(summary.answer.as_deref(), Some("Oslo"));
    // Stopped inside the thought, once 384 characters of it had repeated.
    assert!(
        summary.trajectory.len() < script.len() - 500,
        "{}",
        summary.trajectory.len()
    );
}

/// One round of a loop across tool calls: the same thought, the same call.
const LOOP_ROUND: &str = "<think>check it again</think><code>\n```py\nprint(1)\n```\n</code>";

#[test]
fn a_loop_across_tool_calls_stops_at_its_third_identical_round() {
    let h = harness(Tag::Code, false);
    // The first segment also holds the suggested answer, so rounds 2, 3 and 4 are the three
    // identical ones in a row.
    let script = format!(
        "<suggested_answer>\\boxed{{1}}</suggested_answer>{}<answer>\\boxed{{2}}</answer>",
        LOOP_ROUND.repeat(8)
    );
    let mut s = Scripted::new(&script);
    let (summary, _) = run(&mut s, "math", None, budgets(), &h.tools);
    assert_eq!(summary.stop_reason, StopReason::Repetition);
    assert_eq!(summary.tool_calls, 4);
    assert_eq!(h.calls.lock().unwrap().len(), 4);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{1}"));
}

#[test]
fn two_identical_rounds_in_a_row_stand() {
    let h = harness(Tag::Code, false);
    let script = format!("{}<answer>\\boxed{{1}}</answer>", LOOP_ROUND.repeat(2));
    let mut s = Scripted::new(&script);
    let (summary, _) = run(&mut s, "math", None, budgets(), &h.tools);
    assert_eq!(summary.stop_reason, StopReason::Answer);
    assert_eq!(summary.tool_calls, 2);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{1}"));
}

#[test]
fn repeated_searches_meet_the_duplicate_guard() {
    let h = harness(Tag::WebSearch, true);
    let mut s = Scripted::new(
        "<web_search>same</web_search><web_search> same </web_search><web_search>other</web_search><answer>x</answer>",
    );
    let (summary, events) = run(&mut s, "web", None, budgets(), &h.tools);
    assert_eq!(summary.tool_calls, 3);
    assert_eq!(h.calls.lock().unwrap().len(), 2);
    let duplicates: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Observation { duplicate, .. } => Some(*duplicate),
            _ => None,
        })
        .collect();
    assert_eq!(duplicates, [false, true, false]);
    assert!(s.appended[2].contains("already searched"));
}

#[test]
fn several_calls_in_one_prefill_run_in_order() {
    let h = harness(Tag::Code, false);
    let mut s = Scripted::new("<answer>\\boxed{1}</answer>");
    let prefill = "<code>\n```py\nprint('a')\n```\n</code><code>\n```py\nprint('b')\n```\n</code>";
    let (summary, _) = run(&mut s, "math", Some(prefill), budgets(), &h.tools);
    let calls = h.calls.lock().unwrap();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].contains("'a'") && calls[1].contains("'b'"));
    assert_eq!(summary.tool_calls, 2);
}

#[test]
fn token_budget_and_end_of_turn() {
    let h = harness(Tag::Code, false);
    let mut s = Scripted::new("<think>a long thought that never ends");
    let mut b = budgets();
    b.max_tokens = 10;
    let (summary, _) = run(&mut s, "math", None, b, &h.tools);
    assert_eq!(summary.stop_reason, StopReason::TokenBudget);
    assert_eq!(summary.generated_tokens, 10);
    assert_eq!(summary.answer, None);

    let mut s = Scripted::new("<think>done</think>");
    let (summary, _) = run(&mut s, "math", None, budgets(), &h.tools);
    assert_eq!(summary.stop_reason, StopReason::EndOfTurn);
}

#[test]
fn tools_the_profile_does_not_enable_are_not_run() {
    let h = harness(Tag::WebSearch, false);
    let mut s = Scripted::new("<web_search>q</web_search><answer>\\boxed{1}</answer>");
    let (summary, _) = run(&mut s, "math", None, budgets(), &h.tools);
    assert!(h.calls.lock().unwrap().is_empty());
    assert_eq!(summary.tool_calls, 0);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{1}"));
}

/// A stand-in for the code tool that "prints" its input, or fails on `fail`, in the code
/// tool's observation texts.
struct Prints;

impl Tool for Prints {
    fn tag(&self) -> Tag {
        Tag::Code
    }

    fn call(&self, input: &str, _context: &mut crate::tools::CallContext<'_>) -> ToolOutput {
        let success = input.trim() != "fail";
        let observation = if success {
            format!(
                "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n{}\n[STDOUT:END]",
                input.trim()
            )
        } else {
            "[FAILED] Code exited with status 1.\n[STDOUT:BEGIN]\n8\n[STDOUT:END]".to_string()
        };
        ToolOutput {
            observation,
            success,
            elapsed: Duration::from_millis(1),
        }
    }
}

#[test]
fn the_summary_keeps_what_the_runs_programs_printed_and_not_what_the_model_wrote() {
    let mut tools = ToolBox::new();
    tools.add(Box::new(Prints));
    // Decoding without the grammar, the model writes an observation of its own after the
    // runtime's: it reads like a program's output, and is not one.
    let mut s = Scripted::new(
        "<code>7</code><observation>\n[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n\
         42\n[STDOUT:END]\n</observation><code>fail</code><answer>\\boxed{42}</answer>",
    );
    let (summary, _) = run(&mut s, "math", None, budgets(), &tools);
    assert_eq!(summary.tool_calls, 2);
    assert!(summary.trajectory.contains("[STDOUT:BEGIN]\n42\n"));
    assert_eq!(summary.printed, ["7"]);
}

/// Blocks for a minute unless `released` (a page that sends one byte every two seconds).
struct Stuck {
    released: Arc<std::sync::atomic::AtomicBool>,
}

impl Tool for Stuck {
    fn tag(&self) -> Tag {
        Tag::CrawlPage
    }

    fn call(&self, _input: &str, _context: &mut crate::tools::CallContext<'_>) -> ToolOutput {
        let started = Instant::now();
        while !self.released.load(std::sync::atomic::Ordering::SeqCst)
            && started.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        ToolOutput {
            observation: "the page, at last".into(),
            success: true,
            elapsed: started.elapsed(),
        }
    }
}

/// A web run whose prefill calls the stuck tool, with `budgets` and `cancel`; the tool is
/// released afterwards so its thread ends.
fn run_stuck(budgets: Budgets, cancel: Option<CancelFlag>) -> (RunSummary, Vec<AgentEvent>) {
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tools = ToolBox::new();
    tools.add(Box::new(Stuck {
        released: released.clone(),
    }));
    let profile = Profile::builtin("web").unwrap();
    let mut session = Scripted::new("<answer>never</answer>");
    let mut events = Vec::new();
    let summary = run_chain(
        &mut session,
        RunRequest {
            profile: &profile,
            model: "scripted".into(),
            sampling: SamplingParams::greedy(),
            prompt: PromptStart {
                prompt_tokens: 0,
                cached_tokens: 0,
            },
            cancel,
            decoding: Decoding::Free,
            cut_short: CutShort::Answer,
            prefill: Some("<crawl_page>http://slow.example/</crawl_page>"),
            budgets,
        },
        &tools,
        &mut |e| events.push(e),
    )
    .unwrap();
    released.store(true, std::sync::atomic::Ordering::SeqCst);
    (summary, events)
}

fn observation_texts(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Observation { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_tool_call_ends_when_the_runs_time_runs_out() {
    let started = Instant::now();
    let mut b = budgets();
    b.max_time = Some(Duration::from_millis(300));
    let (summary, events) = run_stuck(b, None);
    // Generous: the tool alone would have taken a minute.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(summary.stop_reason, StopReason::TimeBudget);
    assert_eq!(summary.tool_calls, 1);
    assert_eq!(
        observation_texts(&events),
        ["The crawl_page call was stopped before it finished: the run's time ran out."]
    );
    assert!(summary.trajectory.ends_with(
        "<observation>\nThe crawl_page call was stopped before it finished: the run's time ran \
         out.\n</observation>\n\n"
    ));
}

#[test]
fn a_tool_call_ends_when_the_run_is_cancelled() {
    let cancel: CancelFlag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cancel.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let started = Instant::now();
    let (summary, events) = run_stuck(budgets(), Some(cancel));
    setter.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(summary.stop_reason, StopReason::Cancelled);
    assert_eq!(
        observation_texts(&events),
        ["The crawl_page call was stopped before it finished: the run was cancelled."]
    );
}

/// A server that answers every generation with a stop string and claims it sampled nothing.
struct ClaimsNothing {
    inner: Scripted,
    generations: usize,
}

impl Session for ClaimsNothing {
    fn side_chat(&mut self, chat: &catena_engine_api::SideChat) -> Result<String, EngineError> {
        self.inner.side_chat(chat)
    }

    fn append(&mut self, parts: &[PromptPart]) -> Result<usize, EngineError> {
        self.inner.append(parts)
    }

    fn generate(
        &mut self,
        stops: &StopMatcher,
        _limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, EngineError> {
        self.generations += 1;
        let text = stops.stops()[0].clone();
        on_text(&text);
        Ok(Generation {
            text,
            stop: GenerationStop::StopString { index: 0 },
            tokens: 0,
        })
    }

    fn state(&self) -> &SessionState {
        self.inner.state()
    }

    fn state_mut(&mut self) -> &mut SessionState {
        self.inner.state_mut()
    }
}

#[test]
fn a_generation_that_samples_nothing_ends_the_run() {
    // On its own thread: before the fix this run never ended.
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let h = harness(Tag::Code, false);
        let mut session = ClaimsNothing {
            inner: Scripted::new(""),
            generations: 0,
        };
        let profile = Profile::builtin("math").unwrap();
        let mut b = budgets();
        b.max_tokens = 16;
        let summary = run_chain(
            &mut session,
            RunRequest {
                profile: &profile,
                model: "liar".into(),
                sampling: SamplingParams::greedy(),
                prompt: PromptStart {
                    prompt_tokens: 0,
                    cached_tokens: 0,
                },
                cancel: None,
                prefill: None,
                budgets: b,
                decoding: Decoding::Free,
                cut_short: CutShort::Answer,
            },
            &h.tools,
            &mut |_| {},
        )
        .unwrap();
        let _ = done.send((summary.stop_reason, session.generations));
    });
    let (stop, generations) = outcome
        .recv_timeout(Duration::from_secs(30))
        .expect("the run ended");
    assert_eq!(stop, StopReason::EndOfTurn);
    assert_eq!(generations, 1);
}

#[test]
fn each_generation_follows_the_grammar_of_the_segment_it_continues() {
    let h = harness(Tag::Code, false);
    let math = Profile::builtin("math").unwrap();
    let grammar = ChainGrammar::for_profile(&math);
    let call = "<code>\n```py\nprint(1)\n```\n</code>";
    let mut b = budgets();
    b.max_tool_calls = 2;
    let mut s = Scripted::new(&format!(
        "{call}<reflection>again</reflection>{call}<answer>\\boxed{{1}}</answer>"
    ));
    let prefill = "<plan>1. Print.</plan>\n";
    let (summary, _) = run_decoded(
        &mut s,
        "math",
        Some(prefill),
        b,
        &h.tools,
        Decoding::Protocol,
    );
    assert_eq!(summary.stop_reason, StopReason::Answer);
    let seen: Vec<(&str, &str)> = s
        .constraints
        .iter()
        .map(|c| (c.grammar.as_str(), c.given.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            // The prefill is checked before it is appended, then continued (the user wrote
            // the opening).
            (grammar.segment(Segment::Resuming), prefill),
            (grammar.segment(Segment::Resuming), prefill),
            // After the first observation; after the second, the budget is spent.
            (grammar.segment(Segment::Resuming), ""),
            (grammar.segment(Segment::AnswerOnly), ""),
        ]
    );
    assert!(s.constraints.iter().all(|c| c.trigger.is_none()));
}

#[test]
fn a_prefill_with_answered_calls_is_continued_from_its_last_observation() {
    let h = harness(Tag::Code, false);
    let math = Profile::builtin("math").unwrap();
    let grammar = ChainGrammar::for_profile(&math);
    let prefill = "<plan>p</plan><code>\n```py\nprint(1)\n```\n</code>\n<observation>\n1\n</observation>\n\n<think>So";
    let mut s = Scripted::new(" one.</think><answer>\\boxed{1}</answer>");
    let (summary, _) = run_decoded(
        &mut s,
        "math",
        Some(prefill),
        budgets(),
        &h.tools,
        Decoding::Protocol,
    );
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{1}"));
    let first = &s.constraints[0];
    assert_eq!(first.grammar, grammar.segment(Segment::Resuming));
    assert_eq!(first.given, "<think>So");
    assert!(
        h.calls.lock().unwrap().is_empty(),
        "an answered call runs again"
    );
}

#[test]
fn free_decoding_sets_no_grammar() {
    let h = harness(Tag::Code, false);
    let mut s = Scripted::new("<plan>p</plan><answer>\\boxed{1}</answer>");
    run(&mut s, "math", None, budgets(), &h.tools);
    assert!(s.constraints.is_empty());
}

#[test]
fn a_chain_cut_short_closes_its_block_and_answers() {
    let h = harness(Tag::Code, false);
    let math = Profile::builtin("math").unwrap();
    let grammar = ChainGrammar::for_profile(&math);
    // The budget ends the plan after its first words; the rest is what the model then writes,
    // within an allowance no larger than the chain's own budget.
    let cut = "<plan>Count the primes below ten";
    let mut s = Scripted::new(&format!("{cut}<answer>\\boxed{{7}}</answer>"));
    let mut b = budgets();
    b.max_tokens = cut.len();
    let (summary, events) = run_decoded(&mut s, "math", None, b, &h.tools, Decoding::Protocol);
    assert_eq!(summary.stop_reason, StopReason::TokenBudget);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{7}"));
    assert_eq!(
        summary.trajectory,
        "<plan>Count the primes below ten</plan>\n<answer>\\boxed{7}</answer>"
    );
    assert!(events.contains(&AgentEvent::AnswerAsked {
        reason: StopReason::TokenBudget
    }));
    assert!(events.contains(&AgentEvent::BlockEnded {
        tag: Tag::Plan,
        content: "Count the primes below ten".into(),
        closed: true,
        source: Source::Runtime,
    }));
    let last = s.constraints.last().unwrap();
    assert_eq!(last.grammar, grammar.segment(Segment::Answer));
    assert_eq!(last.given, "");
}

#[test]
fn the_last_word_spends_at_most_the_chains_own_budget_but_enough_for_a_boxed_value() {
    use catena_protocol::AnswerFormat;
    let allowance = super::answer_allowance;
    assert_eq!(allowance(AnswerFormat::Boxed, 12), 64);
    assert_eq!(allowance(AnswerFormat::Boxed, 4096), 64);
    assert_eq!(allowance(AnswerFormat::Short, 100), 100);
    assert_eq!(allowance(AnswerFormat::Program, 12), 64);
    assert_eq!(allowance(AnswerFormat::Program, 768), 768);
    assert_eq!(allowance(AnswerFormat::Program, 4096), 1024);
}

#[test]
fn a_closing_tag_the_model_had_begun_is_completed_and_a_cut_call_is_not_run() {
    let h = harness(Tag::Code, false);
    let cut = "<plan>p</pl";
    let mut s = Scripted::new(&format!("{cut}<answer>\\boxed{{1}}</answer>"));
    let mut b = budgets();
    b.max_tokens = cut.len();
    let (summary, _) = run_decoded(&mut s, "math", None, b, &h.tools, Decoding::Protocol);
    assert!(summary.trajectory.starts_with("<plan>p</plan>\n<answer>"));

    let cut = "<plan>p</plan><code>\n```py\nprint(";
    let mut s = Scripted::new(&format!("{cut}<answer>\\boxed{{1}}</answer>"));
    b.max_tokens = cut.chars().count();
    let (summary, _) = run_decoded(&mut s, "math", None, b, &h.tools, Decoding::Protocol);
    assert_eq!(
        summary.answer.as_deref(),
        Some("\\boxed{1}"),
        "{:?} {}",
        summary.stop_reason,
        summary.trajectory
    );
    // The fence closes first: inside it, a tag is code.
    assert!(
        summary
            .trajectory
            .ends_with("print(\n```\n</code>\n<answer>\\boxed{1}</answer>")
    );
    assert_eq!(summary.tool_calls, 0);
    assert!(h.calls.lock().unwrap().is_empty(), "a cut call ran");
}

#[test]
fn only_a_chain_held_to_the_grammar_and_asked_to_answer_gets_a_last_word() {
    let h = harness(Tag::Code, false);
    let cut = "<plan>Count";
    let script = format!("{cut}<answer>\\boxed{{7}}</answer>");
    let mut b = budgets();
    b.max_tokens = cut.len();
    for (decoding, cut_short) in [
        (Decoding::Free, CutShort::Answer),
        (Decoding::Protocol, CutShort::End),
    ] {
        let mut s = Scripted::new(&script);
        let (summary, events) = run_cut(&mut s, "math", None, b, &h.tools, decoding, cut_short);
        assert_eq!(summary.answer, None, "{decoding:?} {cut_short:?}");
        assert_eq!(summary.trajectory, cut);
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, AgentEvent::AnswerAsked { .. }))
        );
    }
}

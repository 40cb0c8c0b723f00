//! The orchestration on a scripted model (a stand-in for the chat engine, inside this module's
//! unit tests only) and a tool of the test's own; the real model and sandbox run in the e2e tests.

use super::*;
use crate::to_trajectory;
use catena_agent::tools::{Tool, ToolOutput};
use std::collections::VecDeque;

/// Replies in order, and every turn it was given.
struct Scripted {
    replies: VecDeque<Result<String, EngineError>>,
    turns: Vec<ChatTurn>,
    /// The temperature each turn was sampled at.
    temperatures: Vec<f32>,
    temperature: f32,
}

impl Scripted {
    fn new(replies: &[&str]) -> Self {
        Scripted {
            replies: replies.iter().map(|r| Ok(r.to_string())).collect(),
            turns: Vec::new(),
            temperatures: Vec::new(),
            temperature: SamplingParams::default().temperature,
        }
    }
}

impl ChatEngine for Scripted {
    fn chat(
        &mut self,
        turn: &ChatTurn,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatReply, EngineError> {
        self.turns.push(turn.clone());
        self.temperatures.push(self.temperature);
        let mut text = self
            .replies
            .pop_front()
            .unwrap_or_else(|| panic!("no reply scripted for turn {}", self.turns.len()))?;
        // One token a byte, cut where the run's budget ends, as the engine cuts a reply.
        let stop = if text.len() >= limits.max_tokens {
            text.truncate(limits.max_tokens);
            GenerationStop::MaxTokens
        } else {
            GenerationStop::EndOfTurn
        };
        on_text(&text);
        Ok(ChatReply {
            prompt_tokens: turn.system.len() + turn.user.len(),
            cached_tokens: 1,
            completion_tokens: text.len(),
            text,
            stop,
        })
    }

    fn context_size(&self) -> usize {
        8192
    }

    fn set_sampling(&mut self, sampling: SamplingParams) {
        self.temperature = sampling.temperature;
    }
}

/// Answers every program with what it was given, and counts its calls.
struct Echo {
    tag: Tag,
    calls: std::sync::atomic::AtomicUsize,
}

impl Tool for Echo {
    fn tag(&self) -> Tag {
        self.tag
    }

    fn call(&self, input: &str, _context: &mut CallContext<'_>) -> ToolOutput {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ToolOutput {
            observation: format!("ran {}", input.trim()),
            success: !input.contains("fail"),
            elapsed: Duration::from_millis(3),
        }
    }

    fn duplicate_notice(&self) -> Option<String> {
        (self.tag == Tag::WebSearch).then(|| "already searched".to_string())
    }
}

fn toolbox(tag: Tag) -> ToolBox {
    let mut tools = ToolBox::new();
    tools.add(Box::new(Echo {
        tag,
        calls: Default::default(),
    }));
    tools
}

fn run(
    profile: &str,
    model: &mut Scripted,
    tools: &ToolBox,
    max_tool_calls: u32,
) -> (MasSummary, Vec<AgentEvent>) {
    let budgets = Budgets {
        max_tool_calls,
        max_tokens: 100_000,
        max_time: None,
    };
    run_within(profile, model, tools, budgets)
}

fn run_within(
    profile: &str,
    model: &mut Scripted,
    tools: &ToolBox,
    budgets: Budgets,
) -> (MasSummary, Vec<AgentEvent>) {
    let profile = Profile::builtin(profile).unwrap();
    let request = MasRequest {
        task_id: "t1",
        question: "What is 2 + 4?",
        profile: &profile,
        model: "scripted".into(),
        sampling: SamplingParams::default(),
        budgets,
        cancel: None,
    };
    let mut events = Vec::new();
    let summary = run_multi_agent(model, request, tools, &mut |e| events.push(e)).unwrap();
    (summary, events)
}

fn roles(summary: &MasSummary) -> Vec<Role> {
    summary.run.activations.iter().map(|a| a.role).collect()
}

#[test]
fn agents_run_in_order_and_the_run_becomes_a_trajectory() {
    let mut model = Scripted::new(&[
        "1. Add the numbers.",
        "I should compute it.\nNext: code",
        "```py\nprint(2 + 4)\n```",
        "The program printed 6, which is the sum.",
        "The result is known.\nNext: answer",
        "The program computed 6.\nThe score this time is:4",
        "\\boxed{6}",
    ]);
    let tools = toolbox(Tag::Code);
    let (summary, events) = run("math", &mut model, &tools, 12);
    use Role::*;
    assert_eq!(
        roles(&summary),
        [
            Planner, Thinker, ToolAgent, Reflector, Thinker, Verifier, Answerer
        ]
    );
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{6}"));
    assert_eq!(summary.stop_reason, StopReason::Answer);
    assert_eq!(summary.tool_calls, 1);
    let call = &summary.run.activations[2];
    assert_eq!(call.output, "\n```py\nprint(2 + 4)\n```\n");
    assert_eq!(
        call.observation.as_deref(),
        Some("ran ```py\nprint(2 + 4)\n```")
    );
    assert_eq!(call.tool_ok, Some(true));
    // The run summary keeps what the code tool's programs printed, read from its observations
    // (this stand-in's text is not the code tool's, so it printed nothing).
    assert!(summary.run_summary().printed.is_empty());
    let mut printed = summary.clone();
    printed.run.activations[2].observation =
        Some("[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n6\n[STDOUT:END]".into());
    assert_eq!(printed.run_summary().printed, ["6"]);
    // Every call counted, the prompts as the engine reported them.
    assert_eq!(summary.usage.calls, 7);
    let prompts: usize = model
        .turns
        .iter()
        .map(|t| t.system.len() + t.user.len())
        .sum();
    assert_eq!(summary.usage.prompt_tokens, prompts);
    assert_eq!(summary.usage.cached_tokens, 7);
    let completions: u64 = summary
        .run
        .activations
        .iter()
        .map(|a| a.completion_tokens)
        .sum();
    assert_eq!(summary.usage.completion_tokens as u64, completions);
    // The recorded run is a valid chain in the order the agents ran.
    let trajectory = to_trajectory(&summary.run).unwrap();
    assert!(trajectory.starts_with("<plan>1. Add the numbers.</plan>\n<think>"));
    assert!(trajectory.ends_with("<answer>\\boxed{6}</answer>"));
    // The stream: one block per activation, the tool call and its observation.
    let started: Vec<Tag> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::BlockStarted { tag, .. } => Some(*tag),
            _ => None,
        })
        .collect();
    use Tag::*;
    assert_eq!(
        started,
        [Plan, Think, Code, Reflection, Think, DoubleCheck, Answer]
    );
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::Observation {
            index: 1,
            success: true,
            ..
        }
    )));
}

#[test]
fn each_agent_sees_only_the_state_it_needs() {
    let mut model = Scripted::new(&[
        "1. Add the numbers.",
        "Next: code",
        "```py\nprint(2 + 4)\n```",
        "It printed the sum.",
        "Next: answer",
        "The score this time is:4",
        "\\boxed{6}",
    ]);
    let tools = toolbox(Tag::Code);
    run("math", &mut model, &tools, 12);
    let turns = &model.turns;
    // The planner: the task and the tools, nothing else.
    assert!(turns[0].user.contains("What is 2 + 4?"));
    assert!(!turns[0].user.contains("Plan:"));
    // The tool agent: the plan and the thought that chose it.
    assert!(turns[2].user.contains("1. Add the numbers."));
    assert!(turns[2].user.contains("What to do now:\nNext: code"));
    // The reflector: the call and its result, not the plan.
    assert!(turns[3].user.contains("ran ```py"));
    assert!(!turns[3].user.contains("1. Add the numbers."));
    // The thinker after the step: the step, its result and its review.
    assert!(turns[4].user.contains("Step 1 (code)"));
    assert!(turns[4].user.contains("It printed the sum."));
    // Each role has its own instructions.
    let systems: HashSet<&str> = turns.iter().map(|t| t.system.as_str()).collect();
    assert_eq!(
        systems.len(),
        6,
        "planner, thinker, tool agent, reflector, verifier, answerer"
    );
}

/// The plan and one code call that works (`print(5)`), reviewed.
const ONE_STEP: [&str; 4] = [
    "1. Add.",
    "Next: code",
    "```py\nprint(5)\n```",
    "It printed 5.",
];

#[test]
fn a_low_verifier_score_sends_the_thinker_back_to_work() {
    let mut replies = ONE_STEP.to_vec();
    replies.extend([
        "Next: answer",
        "Five is not the sum. The score this time is:1",
        "Next: code",
        "```py\nprint(6)\n```",
        "It printed 6.",
        "Next: answer",
        "The score this time is:3",
        "\\boxed{6}",
    ]);
    let mut model = Scripted::new(&replies);
    let tools = toolbox(Tag::Code);
    let (summary, _) = run("math", &mut model, &tools, 12);
    use Role::*;
    assert_eq!(
        roles(&summary),
        [
            Planner, Thinker, ToolAgent, Reflector, Thinker, Verifier, Thinker, ToolAgent,
            Reflector, Thinker, Verifier, Answerer
        ]
    );
}

#[test]
fn an_answer_before_any_call_worked_runs_the_tool_first() {
    // The thinker wants to answer at once; the code tool runs instead, and fails twice.
    let mut model = Scripted::new(&[
        "1. Add.",
        "It is 6.\nNext: answer",
        "```py\nfail(1)\n```",
        "It failed.",
        "Next: answer",
        "```py\nfail(2)\n```",
        "It failed again.",
        "Next: answer",
        "```py\nprint(6)\n```",
        "It printed 6.",
        "Next: answer",
        "The score this time is:4",
        "\\boxed{6}",
    ]);
    let tools = toolbox(Tag::Code);
    let (summary, _) = run("math", &mut model, &tools, 12);
    assert_eq!(summary.tool_calls, 3);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{6}"));
    // Every agent samples as the run does but the answerer, which transcribes greedily.
    let sampled = SamplingParams::default().temperature;
    assert!(sampled > 0.0);
    let (answerer, others) = model.temperatures.split_last().unwrap();
    assert_eq!(*answerer, 0.0);
    assert!(others.iter().all(|t| *t == sampled), "{others:?}");
    // The answerer is shown the task and the call that worked, not the failures before it.
    let answerer = &model.turns.last().unwrap().user;
    assert!(answerer.contains("What is 2 + 4?") && answerer.contains("ran ```py\nprint(6)"));
    assert!(!answerer.contains("fail("), "{answerer}");

    // After EARLY_ATTEMPTS calls that all failed, the answer is taken.
    let mut replies = vec!["1. Add."];
    for _ in 0..EARLY_ATTEMPTS {
        replies.extend(["Next: answer", "```py\nfail()\n```", "It failed."]);
    }
    replies.extend(["Next: answer", "The score this time is:3", "\\boxed{6}"]);
    let mut model = Scripted::new(&replies);
    let (summary, _) = run("math", &mut model, &tools, 12);
    assert_eq!(summary.tool_calls, EARLY_ATTEMPTS);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{6}"));
    // With no call that worked, the answerer sees every step.
    assert!(model.turns.last().unwrap().user.contains("Step 3 (code)"));
}

#[test]
fn the_answerer_writes_after_the_verifiers_last_rejection() {
    let mut replies = ONE_STEP.to_vec();
    for _ in 0..MAX_REJECTIONS {
        replies.extend(["Next: answer", "The score this time is:2"]);
    }
    replies.extend(["Next: answer", "\\boxed{6}"]);
    let mut model = Scripted::new(&replies);
    let tools = toolbox(Tag::Code);
    let (summary, _) = run("math", &mut model, &tools, 12);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{6}"));
    let verifiers = roles(&summary)
        .iter()
        .filter(|r| **r == Role::Verifier)
        .count();
    assert_eq!(verifiers, MAX_REJECTIONS);
}

#[test]
fn the_tool_budget_ends_the_work_and_the_answerer_still_answers() {
    let mut model = Scripted::new(&[
        "1. Compute.",
        "Next: code",
        "```py\nprint(1)\n```",
        "Printed 1.",
        "Next: code",
        "```py\nprint(2)\n```",
        "Printed 2.",
        "Next: code",
        "\\boxed{2}",
    ]);
    let tools = toolbox(Tag::Code);
    let (summary, _) = run("math", &mut model, &tools, 2);
    assert_eq!(summary.tool_calls, 2);
    assert_eq!(
        summary.run.activations.last().map(|a| a.role),
        Some(Role::Answerer)
    );
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{2}"));
}

#[test]
fn a_repeated_search_is_answered_by_the_duplicate_guard() {
    let mut model = Scripted::new(&[
        "1. Search.",
        "Next: web_search",
        "capital of France",
        "Found it.",
        "Next: web_search",
        "\"capital of France\"",
        "Same query.",
        "Next: answer",
        "The score this time is:4",
        "Paris",
    ]);
    let tools = toolbox(Tag::WebSearch);
    let (summary, events) = run("web", &mut model, &tools, 12);
    let observations: Vec<(&str, bool)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Observation {
                text, duplicate, ..
            } => Some((text.as_str(), *duplicate)),
            _ => None,
        })
        .collect();
    assert_eq!(
        observations,
        [("ran capital of France", false), ("already searched", true)]
    );
    assert_eq!(summary.answer.as_deref(), Some("Paris"));
}

#[test]
fn a_prompt_too_long_for_the_context_ends_the_run_as_context_full() {
    let mut model = Scripted::new(&["1. Add.", "Next: code"]);
    model.replies.push_back(Err(EngineError::ContextOverflow {
        context_size: 8192,
        needed: 9000,
    }));
    let tools = toolbox(Tag::Code);
    let (summary, _) = run("math", &mut model, &tools, 12);
    assert_eq!(summary.stop_reason, StopReason::ContextFull);
    assert_eq!(summary.answer, None);
    assert_eq!(summary.run.activations.len(), 2);
}

#[test]
fn a_program_the_token_budget_cuts_ends_unclosed_and_is_not_run() {
    let plan = "1. Add the numbers.";
    let think = "I should compute it.\nNext: code";
    let program = "```py\nprint(2 + 4)\n```";
    let mut model = Scripted::new(&[plan, think, program]);
    let tools = toolbox(Tag::Code);
    let budgets = Budgets {
        max_tool_calls: 12,
        max_tokens: plan.len() + think.len() + 10,
        max_time: None,
    };
    let (summary, events) = run_within("math", &mut model, &tools, budgets);
    assert_eq!(summary.stop_reason, StopReason::TokenBudget);
    let ended: Vec<(Tag, bool)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::BlockEnded { tag, closed, .. } => Some((*tag, *closed)),
            _ => None,
        })
        .collect();
    assert_eq!(
        ended,
        [(Tag::Plan, true), (Tag::Think, true), (Tag::Code, false)]
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::Observation { .. }))
    );
}

#[test]
fn a_program_that_ran_counts_when_the_budget_cuts_its_reflection() {
    let plan = "1. Add the numbers.";
    let think = "I should compute it.\nNext: code";
    let program = "```py\nprint(2 + 4)\n```";
    let reflection = "The program printed 6, which is the sum asked for.";
    let mut model = Scripted::new(&[plan, think, program, reflection]);
    let tools = toolbox(Tag::Code);
    let budgets = Budgets {
        max_tool_calls: 12,
        max_tokens: plan.len() + think.len() + program.len() + 10,
        max_time: None,
    };
    let (summary, events) = run_within("math", &mut model, &tools, budgets);
    assert_eq!(summary.stop_reason, StopReason::TokenBudget);
    let observations = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Observation { .. }))
        .count();
    assert_eq!(observations, 1);
    assert_eq!(summary.tool_calls, 1);
}

#[test]
fn an_engine_failure_is_an_error() {
    let mut model = Scripted::new(&["1. Add."]);
    model
        .replies
        .push_back(Err(EngineError::Decode("broken".into())));
    let profile = Profile::builtin("math").unwrap();
    let request = MasRequest {
        task_id: "t",
        question: "q",
        profile: &profile,
        model: "m".into(),
        sampling: SamplingParams::default(),
        budgets: Budgets {
            max_tool_calls: 4,
            max_tokens: 1000,
            max_time: None,
        },
        cancel: None,
    };
    let failed = run_multi_agent(&mut model, request, &toolbox(Tag::Code), &mut |_| {});
    assert!(matches!(
        failed,
        Err(MasError::Engine(EngineError::Decode(_)))
    ));
}

#[test]
fn the_thinkers_choice_is_read_from_its_last_next_line() {
    let math = Profile::builtin("math").unwrap();
    let web = Profile::builtin("web").unwrap();
    assert_eq!(
        next_action("Next: code", &math),
        Some(Action::Tool(Tag::Code))
    );
    assert_eq!(next_action("next: `answer`", &math), Some(Action::Answer));
    assert_eq!(
        next_action("First Next: code, then\nNext: **web_search**", &web),
        Some(Action::Tool(Tag::WebSearch))
    );
    // A tool the profile does not enable, or no choice at all.
    assert_eq!(next_action("Next: web_search", &math), None);
    assert_eq!(next_action("I will compute it.", &math), None);
}

#[test]
fn the_verifier_score_is_read_from_its_sentence() {
    assert_eq!(
        verifier_score("Looks right.\nThe score this time is:4"),
        Some(4)
    );
    assert_eq!(verifier_score("The score this time is: 2 of 4"), Some(2));
    assert_eq!(verifier_score("I give it 3."), Some(3));
    assert_eq!(verifier_score("No idea."), None);
}

#[test]
fn tool_agent_replies_become_tool_calls() {
    assert_eq!(
        tool_call_input(Tag::Code, "Here:\n```python\nprint(1)\n```\nDone."),
        "\n```py\nprint(1)\n```\n"
    );
    assert_eq!(
        tool_call_input(Tag::Code, "print(1)"),
        "\n```py\nprint(1)\n```\n"
    );
    assert_eq!(
        tool_call_input(Tag::WebSearch, "\nQuery: \"tallest building 2020\"\nmore"),
        "tallest building 2020"
    );
    assert_eq!(
        tool_call_input(
            Tag::CrawlPage,
            "Read [a](https://a.example/x) and https://b.example/y."
        ),
        "https://a.example/x | https://b.example/y"
    );
}

#[test]
fn later_agents_see_older_results_cut_and_recent_ones_whole() {
    let step = |n: usize| Step {
        tool: Tag::Code,
        input: format!("print({n})"),
        observation: format!("result {n} {}", "x".repeat(1000)),
        worked: true,
        reflection: format!("review {n}"),
    };
    let steps: Vec<Step> = (1..=5).map(step).collect();
    let text = prompts::progress_input("q", "plan", &steps);
    // Steps 1 and 2 are older than the last three: their results are cut, their reviews kept.
    assert!(text.contains("result 1 xxx") && text.contains("review 1"));
    assert_eq!(text.matches(" [...]").count(), 2);
    assert!(text.contains(&step(5).observation));
    assert!(text.contains(&step(3).observation));
    assert!(!text.contains(&step(2).observation));
}

#[test]
fn a_bare_math_answer_is_written_in_the_boxed_form() {
    let mut replies = ONE_STEP.to_vec();
    replies.extend(["Next: answer", "The score this time is:4", " 6 "]);
    let mut model = Scripted::new(&replies);
    let tools = toolbox(Tag::Code);
    let (summary, _) = run("math", &mut model, &tools, 12);
    assert_eq!(summary.answer.as_deref(), Some("\\boxed{6}"));
    let last = summary.run.activations.last().unwrap();
    assert_eq!(
        (last.role, last.output.as_str()),
        (Role::Answerer, "\\boxed{6}")
    );
    // An answer of several lines is not a value: it stays as written.
    let mut replies = ONE_STEP.to_vec();
    replies.extend(["Next: answer", "The score this time is:4", "It is\n6"]);
    let mut model = Scripted::new(&replies);
    let (summary, _) = run("math", &mut model, &toolbox(Tag::Code), 12);
    assert_eq!(summary.answer.as_deref(), Some("It is\n6"));
    // Other profiles keep the answer as written.
    let mut model = Scripted::new(&[
        "1. Look.",
        "Next: web_search",
        "capital of France",
        "Found it.",
        "Next: answer",
        "The score this time is:4",
        "Paris",
    ]);
    let (summary, _) = run("web", &mut model, &toolbox(Tag::WebSearch), 12);
    assert_eq!(summary.answer.as_deref(), Some("Paris"));
}

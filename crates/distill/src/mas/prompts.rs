//! What each agent of the explicit system is told, and the state it is shown. Every agent gets
//! only what its job needs (the paper's multi-agent systems pass state between separate agents;
//! none sees another's instructions): the planner the task; the thinker the task, the plan and
//! the steps so far; a tool agent the task, the plan, the thought that chose it and its own
//! tool's earlier calls; the reflector one call and its result; the verifier and the answerer
//! the task and the steps.

use super::Step;
use catena_protocol::{AnswerFormat, Profile, Tag};

/// Steps whose whole result later agents see; older ones show [`OLDER_RESULT_CHARS`] of it.
const RECENT_STEPS: usize = 3;
const OLDER_RESULT_CHARS: usize = 300;

pub(super) const PLANNER: &str = "You are the planner of a team of agents that solves a task. \
Break the task into two to five short numbered steps that a programmer with a Python interpreter \
and the listed tools can follow. Write only the numbered steps, one per line, no code.";

pub(super) const REFLECTOR: &str = "You review one step of a team of agents. You are given the \
task, what the step tried and what the tool answered. In two or three sentences say whether the \
step worked, what its result means for the task, and what should happen next. If the tool \
failed, say what went wrong and how to fix it. Do not write code.";

pub(super) const VERIFIER: &str = "You are the verifier of a team of agents. Read the task and \
the steps taken so far, and judge whether the results already answer the task correctly. Give \
one or two sentences of reasons, then end with one line `The score this time is:N`, where N is \
4 (certainly answered), 3 (probably answered), 2 (doubtful) or 1 (not answered).";

/// The thinker picks the next agent: one of the profile's tools, or the answer.
pub(super) fn thinker(profile: &Profile) -> String {
    let tools: Vec<&str> = profile.tools.iter().map(|t| t.name()).collect();
    format!(
        "You direct a team of agents that solves a task. Read the task, the plan and the steps \
         done so far, and decide the single next action. Give one or two sentences of reasoning, \
         then end with one line `Next: X`, where X is one of: {}, answer. Choose a tool while \
         the task still needs computing or looking up; choose answer only when the results \
         already give the answer.",
        tools.join(", ")
    )
}

/// A tool agent writes the input of one call of its tool.
pub(super) fn tool_agent(tool: Tag) -> String {
    match tool {
        Tag::Code => "You write one Python program for a team of agents. It runs in a fresh \
            interpreter with the standard library, numpy, sympy, scipy and pandas and no \
            network; only what it prints is seen, so print every value that is needed. Reply \
            with the program alone, inside one ```py fence."
            .into(),
        Tag::WebSearch | Tag::WikiSearch => "You write one search query for a team of agents: \
            a few precise words that find the fact the current step needs. Reply with the query \
            alone, on one line."
            .into(),
        Tag::CrawlPage => "You choose which web pages a team of agents reads next. Reply with \
            the addresses of one to three pages from the search results, separated by ` | `, \
            and nothing else."
            .into(),
        other => format!(
            "You write the input of one call of the {other} tool. Reply with the input alone."
        ),
    }
}

/// The answerer writes the final answer in the form the profile's tasks are scored in.
pub(super) fn answerer(profile: &Profile) -> String {
    let form = match profile.answer {
        AnswerFormat::Boxed => "Reply with only the final result written as \\boxed{...}.",
        AnswerFormat::Program => {
            "Reply with only the final, complete Python program inside one ```py fence."
        }
        AnswerFormat::Short => "Reply with only the answer: a few words or a number.",
        AnswerFormat::Multi => {
            "Reply with only the answer: a few words; several answers are separated by |."
        }
    };
    format!(
        "You write the final answer of a team of agents from the task and the steps they took. \
         {form}"
    )
}

pub(super) fn planner_input(question: &str, profile: &Profile) -> String {
    let tools: Vec<&str> = profile.tools.iter().map(|t| t.name()).collect();
    format!("Task:\n{question}\n\nTools: {}", tools.join(", "))
}

/// The task, the plan and every step so far, for the thinker and the verifier.
pub(super) fn progress_input(question: &str, plan: &str, steps: &[Step]) -> String {
    let mut text = format!("Task:\n{question}\n\nPlan:\n{plan}\n");
    if steps.is_empty() {
        text.push_str("\nNo steps taken yet.\n");
    }
    // Older steps keep the start of their result: the prompt stays within a small context
    // however long the run, and the reviews carry what those results meant.
    let recent = steps.len().saturating_sub(RECENT_STEPS);
    for (i, step) in steps.iter().enumerate() {
        text.push_str(&format!("\nStep {} ({}):\n", i + 1, step.tool));
        text.push_str(step.input.trim());
        text.push_str("\nResult:\n");
        let result = step.observation.trim();
        if i < recent && result.chars().count() > OLDER_RESULT_CHARS {
            let start: String = result.chars().take(OLDER_RESULT_CHARS).collect();
            text.push_str(&format!("{start} [...]"));
        } else {
            text.push_str(result);
        }
        if !step.reflection.is_empty() {
            text.push_str("\nReview:\n");
            text.push_str(step.reflection.trim());
        }
        text.push('\n');
    }
    text
}

/// What a tool agent sees: the task, the plan, the thought that chose the tool and its own
/// tool's earlier calls with their results (so a failed program can be fixed).
pub(super) fn tool_input(
    question: &str,
    plan: &str,
    thought: &str,
    tool: Tag,
    steps: &[Step],
) -> String {
    let mut text = format!("Task:\n{question}\n\nPlan:\n{plan}\n");
    // Its own tool's calls; the page reader also the searches, whose results hold the addresses.
    let earlier: Vec<&Step> = steps
        .iter()
        .filter(|s| s.tool == tool || (tool == Tag::CrawlPage && s.tool == Tag::WebSearch))
        .collect();
    for step in &earlier[earlier.len().saturating_sub(3)..] {
        text.push_str(&format!(
            "\nEarlier {} call:\n{}\nResult:\n{}\n",
            step.tool,
            step.input.trim(),
            step.observation.trim()
        ));
    }
    text.push_str(&format!("\nWhat to do now:\n{}\n", thought.trim()));
    text
}

pub(super) fn reflector_input(question: &str, step: &Step) -> String {
    format!(
        "Task:\n{question}\n\nThe step ({}):\n{}\n\nWhat the tool answered:\n{}\n",
        step.tool,
        step.input.trim(),
        step.observation.trim()
    )
}

/// What the answerer sees. For a program, the task, the plan and the steps (the programs it
/// builds on are in them). For a short or boxed answer, the task and the last call that worked
/// with its result: given the whole history, a small model copies a number from the wrong place
/// (seen: a result of -30 written down as 9). Never the verifier's score: a small model given
/// `The score this time is:4` answers 4.
pub(super) fn answer_input(
    question: &str,
    plan: &str,
    steps: &[Step],
    answer: AnswerFormat,
) -> String {
    let last_worked = steps.iter().rev().find(|s| s.worked);
    match (answer, last_worked) {
        (AnswerFormat::Program, _) | (_, None) => progress_input(question, plan, steps),
        (_, Some(step)) => format!(
            "Task:\n{question}\n\nThe last step that worked ({}):\n{}\n\nIts result:\n{}\n",
            step.tool,
            step.input.trim(),
            step.observation.trim()
        ),
    }
}

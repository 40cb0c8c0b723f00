//! The plain chat: the same model asked the task's question in one chat turn, with no profile,
//! no protocol and no tools. It is the anchor every agent feature must beat (docs/ARCHITECTURE.md,
//! "The plain-chat anchor"): `catena eval --mode chat` measures it with the verifiers and reports
//! the agent runs get.

use crate::{Outcome, RunError, RunPlan, TaskRun};
use catena_engine_api::{ChatEngine, ChatTurn, GenerateLimits, GenerationStop};
use catena_protocol::AnswerFormat;
use catena_protocol::boxed;
use catena_run_events::{AgentEvent, RunSummary, Source, StopReason, Timings};
use std::time::Instant;

/// What a math question asks of the reply, so the verifier can find the answer in prose.
const BOXED_REQUEST: &str = "Put the final answer in \\boxed{}.";

/// One chat turn for `task`, its reply read as the profile's verifier reads an answer: the last
/// `\boxed{...}` for math (or, when the model did not box one, the reply's last number: the
/// anchor is not to lose a right answer for its format), the whole reply for a program (the
/// verifier takes its first Python fence) or a short answer.
pub(crate) fn plain_chat(
    chat: &mut dyn ChatEngine,
    plan: &RunPlan<'_>,
    task: &TaskRun<'_>,
    on_event: &mut dyn FnMut(AgentEvent),
) -> Result<Outcome, RunError> {
    if task.prefill.is_some() {
        return Err(RunError::PrefillWithoutChain);
    }
    let started = Instant::now();
    chat.set_sampling(task.sampling);
    let user = match plan.profile.answer {
        AnswerFormat::Boxed => format!("{}\n\n{BOXED_REQUEST}", task.question),
        _ => task.question.to_string(),
    };
    let turn = ChatTurn {
        // None: the model's own default, as a chat client gets.
        system: String::new(),
        user,
        max_tokens: plan.budgets.max_tokens,
    };
    let limits = GenerateLimits {
        max_tokens: plan.budgets.max_tokens,
        deadline: plan.budgets.max_time.map(|t| started + t),
        cancel: plan.cancel.clone(),
        // The anchor is the model as a chat client would run it, loops and all.
        stop_on_repetition: false,
    };
    let reply = chat.chat(&turn, limits, &mut |_| {})?;
    on_event(AgentEvent::RunStarted {
        profile: "plain chat".into(),
        model: plan.model.clone(),
        prompt_tokens: reply.prompt_tokens,
        cached_tokens: reply.cached_tokens,
        context_size: chat.context_size(),
        seed: task.sampling.seed,
        temperature: (f64::from(task.sampling.temperature) * 1e6).round() / 1e6,
    });
    on_event(AgentEvent::Text {
        text: reply.text.clone(),
        source: Source::Model,
    });
    let answer = match plan.profile.answer {
        AnswerFormat::Boxed => boxed(&reply.text)
            .or_else(|| last_number(&reply.text))
            .map(|value| format!("\\boxed{{{value}}}")),
        _ => Some(reply.text.trim().to_string()).filter(|text| !text.is_empty()),
    };
    let stop_reason = match reply.stop {
        GenerationStop::MaxTokens => StopReason::TokenBudget,
        GenerationStop::Deadline => StopReason::TimeBudget,
        GenerationStop::ContextFull => StopReason::ContextFull,
        GenerationStop::Cancelled => StopReason::Cancelled,
        GenerationStop::Repetition { .. } => StopReason::Repetition,
        GenerationStop::EndOfTurn | GenerationStop::StopString { .. } if answer.is_some() => {
            StopReason::Answer
        }
        GenerationStop::EndOfTurn | GenerationStop::StopString { .. } => StopReason::EndOfTurn,
    };
    let context = reply.prompt_tokens + reply.completion_tokens;
    let summary = RunSummary {
        answer,
        stop_reason,
        tool_calls: 0,
        prompt_tokens: reply.prompt_tokens,
        context_tokens: context,
        evaluated_tokens: context.saturating_sub(reply.cached_tokens),
        generated_tokens: reply.completion_tokens,
        parse_issues: 0,
        timings: Timings {
            total_ms: started.elapsed().as_secs_f64() * 1e3,
            tools_ms: 0.0,
            // A chat turn reports no split between reading the prompt and decoding.
            prefill_ms: 0.0,
            decode_ms: 0.0,
            prefill_tokens_per_s: 0.0,
            decode_tokens_per_s: 0.0,
        },
        trajectory: reply.text,
        mean_logprob: None,
        printed: Vec::new(),
    };
    Ok(Outcome {
        model_calls: 1,
        total_tokens: context,
        generated_tokens: summary.generated_tokens,
        cached_tokens: reply.cached_tokens,
        summary,
        agents: None,
    })
}

/// The last number written in `text`: digits with the signs, separators and fraction bars
/// around them (`-1,229.5`, `3/4`), without a sentence's closing stop.
fn last_number(text: &str) -> Option<&str> {
    let end = text.rfind(|c: char| c.is_ascii_digit())? + 1;
    let part_of_number = |c: char| c.is_ascii_digit() || matches!(c, '.' | ',' | '/');
    let start = text[..end]
        .rfind(|c: char| !part_of_number(c))
        .map_or(0, |i| i + 1);
    // A minus sign, not a hyphen or a subtraction (`x-7`, `2-7`).
    let start = match text[..start].strip_suffix('-') {
        Some(before) if !before.ends_with(|c: char| c.is_alphanumeric()) => before.len(),
        _ => start,
    };
    Some(text[start..end].trim_start_matches([',', '.', '/']))
}

#[cfg(test)]
mod tests {
    use super::last_number;

    #[test]
    fn the_last_number_of_a_reply_is_found_whole() {
        assert_eq!(last_number("So 2 + 3 = 5."), Some("5"));
        assert_eq!(last_number("There are 1,229 primes."), Some("1,229"));
        assert_eq!(last_number("It is -3/4, or -0.75"), Some("-0.75"));
        assert_eq!(last_number("x-7"), Some("7"));
        assert_eq!(last_number("The result is -5"), Some("-5"));
        assert_eq!(last_number("no digits here"), None);
        assert_eq!(last_number("ends with ,5"), Some("5"));
    }
}

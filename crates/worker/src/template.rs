//! A model's chat template compiled and rendered in a short-lived child process.
//!
//! The template came with the model file, from wherever the user found it, and it is code:
//! minijinja runs it when rendering and already in part when compiling (constant expressions are
//! folded). Its loops are bounded by fuel (`catena_chat_format::RENDER_FUEL`), but its memory
//! cannot be bounded from inside a process: `"x" * 10**11` is one allocation, and a failed
//! allocation aborts the process. In `catena serve` and the desktop app that would be the
//! server. So the parent sends one [`Request::Template`] frame to a child of its own
//! ([`crate::one_shot`]); the child caps its own memory at [`RENDER_MEMORY`] above what it holds
//! at start, compiles, renders and answers, and the parent kills it after [`RENDER_DEADLINE`].
//! A template that passes a bound costs its request an error that says which, and nothing else.

use super::client::WorkerCommand;
use super::one_shot::{OneShotError, one_shot};
use super::protocol::{Reply, Request, TemplateJob};
use catena_chat_format::FormatError;
use catena_engine_api::PromptPart;
use std::time::Duration;

/// The memory a render may take on top of what its process holds when the job arrives. Real
/// templates render a conversation's markup and tool descriptions (message text travels apart):
/// kilobytes to a few megabytes.
pub const RENDER_MEMORY: u64 = 256 << 20;

/// How long a render's process may live, its start included. Fuel stops a template's loops in
/// about 0.3 s; this is for what fuel does not count (one filter over hundreds of megabytes).
pub const RENDER_DEADLINE: Duration = Duration::from_secs(10);

/// A conversation rendered by the template: the prompt a request with tools starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedPrompt {
    pub parts: Vec<PromptPart>,
    /// The same template's prompt of the system messages and tools with an empty user message
    /// (`ChatTemplate::render_instructions`): what every request of a client with the same
    /// instructions begins with, which the worker keeps in the prompt cache (docs/ARCHITECTURE.md,
    /// "The prompt cache"). Empty where the template cannot render them alone: that costs the
    /// cache, not the request.
    pub instructions: Vec<PromptPart>,
}

/// Why a template could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template failed: its own error, a bound it ran past, or its process dying as it ran.
    #[error(transparent)]
    Format(FormatError),
    /// The child process could not be run at all, which is not the template's doing.
    #[error("could not run the chat template in a process of its own: {0}")]
    Child(String),
}

/// Compiles `job`'s template in a child started by `command` and renders its conversation (an
/// empty prompt when it has none).
pub fn render_in_child(
    command: &WorkerCommand,
    job: TemplateJob,
) -> Result<RenderedPrompt, TemplateError> {
    let failed = |reason: String| TemplateError::Format(FormatError::Template(reason));
    match one_shot(command, &Request::Template(job), Some(RENDER_DEADLINE)) {
        Ok(Reply::Rendered {
            parts,
            instructions,
        }) => Ok(RenderedPrompt {
            parts,
            instructions,
        }),
        Ok(Reply::TemplateFailed { error }) => Err(TemplateError::Format(error)),
        Ok(other) => Err(TemplateError::Child(format!(
            "it answered a template with {other:?}"
        ))),
        Err(e @ OneShotError::Start { .. }) => Err(TemplateError::Child(e.to_string())),
        Err(e @ OneShotError::TimedOut { .. }) => Err(failed(e.to_string())),
        Err(OneShotError::Died { status, said }) => Err(failed(match said {
            Some(said) if said.contains("memory allocation of") => format!(
                "it needed more than the {} MiB of memory a render may take, and its process \
                 was stopped ({said})",
                RENDER_MEMORY >> 20
            ),
            Some(said) => format!("its process stopped: {status}; it said: {said}"),
            None => format!("its process stopped: {status}"),
        })),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::client::shell;

    fn job() -> TemplateJob {
        TemplateJob {
            template: "{{ messages }}".into(),
            render: None,
        }
    }

    #[test]
    fn a_render_that_runs_out_of_memory_is_the_templates_error() {
        let err = render_in_child(
            &shell("echo 'memory allocation of 536870912 bytes failed' >&2; kill -ABRT $$"),
            job(),
        )
        .unwrap_err();
        let TemplateError::Format(FormatError::Template(reason)) = err else {
            panic!("{err}");
        };
        assert!(
            reason.contains("more than the 256 MiB of memory a render may take"),
            "{reason}"
        );
    }

    #[test]
    fn a_child_that_cannot_start_is_not_the_templates_error() {
        let command = WorkerCommand {
            program: "/nonexistent/catena".into(),
            args: vec!["worker".into()],
        };
        let err = render_in_child(&command, job()).unwrap_err();
        assert!(matches!(err, TemplateError::Child(_)), "{err}");
    }
}

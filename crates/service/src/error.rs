//! The service's errors: what went wrong, in words for the user, and which kind of failure it is.
//! The kind is what a front end acts on; the server maps it to an HTTP status (and the OpenAI
//! error shape), the desktop app hands the same status to the UI, so both transports agree.

use catena_engine_api::EngineError;
use catena_store::StoreError;

/// The context the message of [`ErrorKind::ContextLength`] suggests: the protocol's budget,
/// which holds the prompts coding agents send (10,000 tokens and more) with room to answer.
const SUGGESTED_CONTEXT: u32 = catena_engine_api::plan::PROTOCOL_CONTEXT;

/// The kinds of failure a front end tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or asks for something impossible.
    Invalid,
    /// A run, session or training run that does not exist.
    NotFound,
    /// The request does not fit the thing's state (cancelling a finished run).
    Conflict,
    /// The prompt is longer than the context a conversation gets: it is refused, never cut.
    ContextLength,
    /// The queue of waiting requests is full; retry shortly.
    QueueFull,
    /// A failure on this side.
    Internal,
}

impl ErrorKind {
    /// The HTTP status both transports report for this kind (the UI reads statuses from either).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::Invalid | ErrorKind::ContextLength => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::QueueFull => 429,
            ErrorKind::Internal => 500,
        }
    }
}

/// A failed service call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    pub kind: ErrorKind,
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<&'static str>,
}

impl ServiceError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ServiceError {
            kind,
            message: message.into(),
            param: None,
        }
    }

    /// Names the request field at fault.
    pub fn param(mut self, param: &'static str) -> Self {
        self.param = Some(param);
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ServiceError::new(ErrorKind::Invalid, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ServiceError::new(ErrorKind::NotFound, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        ServiceError::new(ErrorKind::Conflict, message)
    }

    /// `limit` requests are already waiting for the model.
    pub fn queue_full(limit: usize) -> Self {
        ServiceError::new(
            ErrorKind::QueueFull,
            format!(
                "The server is busy: {limit} requests are already waiting for the model (the queue limit). Retry shortly."
            ),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ServiceError::new(ErrorKind::Internal, message)
    }

    /// A prompt of `prompt_tokens` that does not fit a context of `context_size`: the numbers,
    /// and the two ways out (a larger context, a shorter prompt), since the user who meets it is
    /// usually running an editor's agent and never chose the context.
    pub fn context_length(context_size: usize, prompt_tokens: usize) -> Self {
        ServiceError::new(
            ErrorKind::ContextLength,
            format!(
                "This model's context is {context_size} tokens, but the prompt is \
                 {prompt_tokens} tokens, so it cannot be answered (Catena does not cut prompts \
                 short). Start the server with a larger context, for example \
                 `catena serve --ctx-size {SUGGESTED_CONTEXT}`, or send a shorter prompt."
            ),
        )
        .param("messages")
    }
}

impl From<EngineError> for ServiceError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::ContextOverflow {
                context_size,
                needed,
            } => ServiceError::context_length(context_size, context_size + needed),
            // A schema the grammar compiler refuses: the request's fault; nothing was generated.
            EngineError::BadGrammar(message) => {
                ServiceError::invalid(format!("The schema cannot be enforced: {message}"))
            }
            // A prefill the run's protocol grammar refuses: the request's fault, before decoding.
            EngineError::OutsideGrammar(message) => ServiceError::invalid(format!(
                "The prefill breaks the protocol: {message} (send `\"free\": true` to run unconstrained)"
            )),
            // What this server's engine cannot do as set up (it says how to set it up).
            EngineError::Unsupported(message) => ServiceError::invalid(message),
            other => ServiceError::internal(other.to_string()),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NoRun(id) => ServiceError::not_found(format!("No run `{id}`.")),
            StoreError::NoSession(id) => ServiceError::not_found(format!("No session `{id}`.")),
            other => ServiceError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_past_the_context_says_both_sizes_and_how_to_raise_it() {
        let e = ServiceError::from(EngineError::ContextOverflow {
            context_size: 4096,
            needed: 16_000,
        });
        assert_eq!(e.kind, ErrorKind::ContextLength);
        assert_eq!(e.kind.http_status(), 400);
        assert_eq!(e.param, Some("messages"));
        for part in [
            "context is 4096 tokens",
            "prompt is 20096 tokens",
            "--ctx-size 32768",
        ] {
            assert!(e.message.contains(part), "{part}: {}", e.message);
        }
        let other = ServiceError::from(EngineError::Decode("bad batch".into()));
        assert_eq!(other.kind, ErrorKind::Internal);
    }
}

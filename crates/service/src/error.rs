//! The service's errors: what went wrong, in words for the user, and which kind of failure it is.
//! The kind is what a front end acts on; the server maps it to an HTTP status (and the OpenAI
//! error shape), the desktop app hands the same status to the UI, so both transports agree.

use catena_store::StoreError;

/// The kinds of failure a front end tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or asks for something impossible.
    Invalid,
    /// A run, session or training run that does not exist.
    NotFound,
    /// The request does not fit the thing's state (cancelling a finished run).
    Conflict,
    /// The queue of waiting requests is full; retry shortly.
    QueueFull,
    /// A failure on this side.
    Internal,
}

impl ErrorKind {
    /// The HTTP status both transports report for this kind (the UI reads statuses from either).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::Invalid => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::QueueFull => 429,
            ErrorKind::Internal => 500,
        }
    }
}

/// A failed service call.
#[derive(Debug, Clone, thiserror::Error)]
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

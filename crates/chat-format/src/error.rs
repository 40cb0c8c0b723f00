/// What is wrong with a request's tools, a template or a model's tool call.
/// Serialisable: a template is rendered in a child process, which sends its failure back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum FormatError {
    /// A tool definition the request gave is unusable (`param` names where).
    #[error("{message}")]
    BadTool { param: String, message: String },
    /// The model's chat template failed to render (its own error, e.g. `raise_exception`).
    #[error("the model's chat template failed: {0}")]
    Template(String),
    /// The model wrote a tool call that does not parse or names no offered tool.
    #[error("the model wrote a tool call that cannot be used ({reason}): {text}")]
    BadCall { reason: String, text: String },
}

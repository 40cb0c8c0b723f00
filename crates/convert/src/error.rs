//! What can stop a conversion. Every message names the file and says what is wrong with it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file of the checkpoint is malformed or inconsistent.
    #[error("{path}: {reason}")]
    Bad { path: PathBuf, reason: String },
    /// A well-formed checkpoint this converter cannot turn into a GGUF llama.cpp runs as intended
    /// (architecture, weight type, tokenizer, RoPE scaling): refused before anything is written.
    #[error("{0}")]
    Unsupported(String),
    /// A number of the checkpoint (a count, a width, a rate) outside what llama.cpp and this
    /// converter accept: refused before anything is allocated from it or written.
    #[error("{path}: `{field}` is {value}, out of range: it must be {accepted}")]
    OutOfRange {
        path: PathBuf,
        field: String,
        value: String,
        accepted: String,
    },
}

impl ConvertError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ConvertError {
        let path = path.into();
        move |source| ConvertError::Io { path, source }
    }

    pub(crate) fn bad(path: impl Into<PathBuf>, reason: impl Into<String>) -> ConvertError {
        ConvertError::Bad {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

//! Model files: the catalog, downloads, what is installed, GGUF inspection before llama.cpp sees
//! a file, and sizing a model to the machine.

pub mod gguf;
#[cfg(feature = "runtime")]
pub mod hardware;
pub mod inspect;
pub mod plan;

pub use gguf::{GgufError, GgufHeader};

// The catalog, the downloader and what is installed.
pub mod catalog;
#[cfg(feature = "runtime")]
pub mod download;
pub mod installed;
pub mod listing;
#[cfg(feature = "runtime")]
pub mod pull;

pub use installed::default_model_path;

//! Model files: GGUF inspection before llama.cpp sees a file.

pub mod gguf;

pub use gguf::{GgufError, GgufHeader};

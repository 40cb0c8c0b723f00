//! GGUF files read in Rust, before llama.cpp sees them: the header ([`header`]) and what it says
//! about the model ([`inspect`]): architecture, quantisation, size, whether llama.cpp can run it.
//!
//! Everything here parses untrusted bytes and nothing else (the fuzz targets build this crate
//! alone): no llama.cpp, no I/O beyond reading the file.

pub mod header;
pub mod hyperparameters;
pub mod inspect;

pub use header::{GgufError, GgufHeader, MetaValue, TensorInfo};
pub use inspect::{Inspection, inspect, inspect_file};

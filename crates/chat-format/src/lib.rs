//! A model's chat format, as the OpenAI-style APIs need it (docs/ARCHITECTURE.md, code map:
//! `crates/chat-format`):
//!
//! - [`ChatTemplate`] renders a conversation with its tools through the model's own Jinja chat
//!   template (the GGUF's `tokenizer.chat_template`), with minijinja, into prompt parts whose
//!   message text can never forge a control token; [`TemplateSource`] is what is known of a
//!   template without running its code;
//! - [`CallFormat`] is how a model family writes tool calls (Hermes/Qwen `<tool_call>` JSON,
//!   Llama 3.x JSON, Mistral `[TOOL_CALLS]`, or plain JSON for templates that know no tools): it
//!   parses them back and writes the grammar that holds them to their schemas while decoding;
//! - [`CallStream`] turns the text as it is generated into content and tool-call deltas, in the
//!   order OpenAI's streaming shape needs them.
//!
//! Nothing here runs a model or does I/O.

mod error;
mod format;
mod json;
mod stream;
mod template;
mod tools;

pub use error::FormatError;
pub use format::{CallFormat, Parsed, ParsedCall};
pub use stream::{CallDelta, CallStream, Finished};
pub use template::{ChatTemplate, MAX_RENDERED_BYTES, RENDER_FUEL, Role, TemplateSource, Turn};
pub use tools::{ToolCall, ToolChoice, ToolSpec, check_tools, response_grammar};

//! The worker's wire format: frames of a 4-byte little-endian length and a JSON body.
//!
//! JSON keeps the protocol readable in a debugger and costs nothing next to a decoding step (the
//! largest frame is a prompt's token list). Lengths are checked before anything is allocated, so a
//! corrupted stream is an error, never an out-of-memory.

use catena_chat_format::{FormatError, ToolSpec, Turn};
use catena_engine_api::plan::Plan;
use catena_engine_api::{ChatMessage, QuantType};
use catena_engine_api::{
    Constraint, EngineError, Generation, KvCacheType, ModelInfo, PromptPart, SamplingParams,
    SessionOptions, SessionStats, SideChat, TokenRecord,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::path::PathBuf;

/// No honest frame comes close: a 128k-token prompt is about 1.5 MB of JSON.
pub const MAX_FRAME: usize = 64 << 20;

/// What the worker needs to start; sent as the first frame, so nothing travels in argv.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub model_path: PathBuf,
    /// A LoRA adapter applied on the model as trained (the one Catena ships for the default
    /// model, unless the server was told not to).
    #[serde(default)]
    pub adapter: Option<PathBuf>,
    pub gpu_layers: Option<u32>,
    /// Settings of every session (context size, threads, batch).
    pub session: SessionOptions,
    /// KV caches kept between requests (one sequence at a time, `parallel` = 1).
    pub sessions: usize,
    /// Lanes: requests served at once. Above 1, the worker decodes that many sequences together
    /// in one context (`catena serve --parallel N`), and those slots are the kept KV caches.
    pub parallel: usize,
    /// The KV cache type, when the user chose one (otherwise the plan chooses).
    pub kv_cache: Option<KvCacheType>,
    /// Where shared prompt prefixes are kept between processes (none: evaluated every time).
    #[serde(default)]
    pub prompt_cache: Option<PathBuf>,
}

/// A quantisation for a child process to run: llama.cpp's quantiser reads `input` and writes
/// `output`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantizeJob {
    pub input: PathBuf,
    pub output: PathBuf,
    pub quant: QuantType,
    /// Quantiser threads (0: all cores).
    pub threads: usize,
}

/// A model's chat template for a child process to compile, and a conversation for it to render
/// ([`crate::render_in_child`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateJob {
    /// The template's text (`catena_chat_format::TemplateSource::text`).
    pub template: String,
    /// What to render; none: only compile it.
    pub render: Option<TemplateRender>,
}

/// A conversation and the tools it offers, to render with a template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateRender {
    pub turns: Vec<Turn>,
    pub tools: Vec<ToolSpec>,
}

/// The prompt a session starts from; the worker applies the model's chat template.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Prompt {
    /// A whole conversation, ending with the opening of the assistant's turn.
    Conversation { messages: Vec<ChatMessage> },
    /// One system and one user message (an agent run), the first `user_shared` bytes of the
    /// user message the same for every task of its profile.
    Task {
        system: String,
        user: String,
        #[serde(default)]
        user_shared: usize,
    },
    /// A prompt the caller rendered itself (the model's own Jinja template with tools, by
    /// `catena-chat-format`), markers special and message text plain. `instructions` is the same
    /// template's prompt of the request's system messages and tools with an empty user message
    /// (`ChatTemplate::render_instructions`): the tokens the two agree on are what every request
    /// of that client begins with, kept in the prompt cache (none: nothing is).
    Parts {
        parts: Vec<PromptPart>,
        #[serde(default)]
        instructions: Vec<PromptPart>,
    },
}

/// From the server to the worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Start(WorkerConfig),
    /// Instead of `Start`, as the first and only frame: quantise a file and exit
    /// ([`crate::quantize`]). Answered with `Quantized` or `Error`.
    Quantize(QuantizeJob),
    /// Instead of `Start`, as the first and only frame: compile a chat template and render a
    /// conversation with it, then exit ([`crate::render_in_child`]). Answered with `Rendered` or
    /// `TemplateFailed`.
    Template(TemplateJob),
    /// Opens a session for `prompt` (reusing the kept KV cache with the longest shared prefix) and
    /// evaluates the prompt's new tokens (with lanes, at the first generation). One session is
    /// open at a time on a lane.
    Open {
        prompt: Prompt,
    },
    /// Evaluates more text at the end of the lane's open session.
    Append {
        parts: Vec<PromptPart>,
    },
    /// Samples; answered by `Text` frames and then `Generated`.
    Generate {
        stops: Vec<String>,
        max_tokens: usize,
        /// Milliseconds left before the caller's deadline.
        deadline_ms: Option<u64>,
        sampling: SamplingParams,
        /// The grammar this generation follows (constrained decoding), if any.
        #[serde(default)]
        constraint: Option<Constraint>,
        /// `GenerateLimits::stop_on_repetition`.
        #[serde(default)]
        stop_on_repetition: bool,
    },
    /// Stops the generation in progress between two tokens (ignored when none runs).
    Cancel,
    /// A one-off answer in a context of its own, beside the lane's open session (which it leaves
    /// as it is): the page summariser's calls. Answered by `SideAnswer`.
    SideChat {
        chat: SideChat,
    },
    /// Ends the open session: kept for reuse (tagged with the stored conversation it belongs to)
    /// or dropped.
    Close {
        keep: bool,
        conversation: Option<String>,
    },
}

/// A request on one lane. Lanes are independent conversations with the worker: each has at most
/// one open session, and its replies come back tagged with it, in order. `Start` goes on lane 0.
/// The server frames a borrowed request (`R = &Request`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToWorker<R = Request> {
    pub lane: usize,
    pub request: R,
}

/// A reply on the lane its request came on (`Ready` and a failed start on lane 0). The worker
/// frames a borrowed reply (`R = &Reply`: a prompt's token list is not copied to be sent).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FromWorker<R = Reply> {
    pub lane: usize,
    pub reply: R,
}

/// The worker's view of the open session's tokens, sent after every change: the client keeps its
/// first `keep` tokens and appends `append`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TokensDelta {
    pub keep: usize,
    pub append: Vec<TokenRecord>,
}

/// From the worker to the server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// The model is loaded, placed as the plan says (when one could be made).
    Ready {
        info: ModelInfo,
        plan: Option<Plan>,
    },
    Opened {
        prompt_tokens: usize,
        /// Leading prompt tokens that were already in a kept KV cache.
        cached: usize,
        /// The stored conversation the prompt continues, when it extends a kept one.
        conversation: Option<String>,
        context_size: usize,
        tokens: TokensDelta,
        stats: SessionStats,
    },
    Appended {
        added: usize,
        tokens: TokensDelta,
        stats: SessionStats,
    },
    /// Generated text, as it is decided.
    Text {
        text: String,
    },
    Generated {
        generation: Generation,
        tokens: TokensDelta,
        stats: SessionStats,
    },
    Closed,
    /// The quantisation asked for is written.
    Quantized,
    /// A template job's prompt (empty when it only compiled): `instructions` is
    /// `ChatTemplate::render_instructions`, empty where the template cannot render them alone.
    Rendered {
        parts: Vec<PromptPart>,
        instructions: Vec<PromptPart>,
    },
    /// The template did not compile or render, and said why.
    TemplateFailed {
        error: FormatError,
    },
    SideAnswer {
        text: String,
    },
    /// The request failed; the worker is still usable (the open session, if any, is dropped).
    Error {
        error: WireError,
    },
}

/// An engine error as it crosses the pipe: the variants callers act on keep their shape, the rest
/// keep their message.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireError {
    ContextOverflow { context_size: usize, needed: usize },
    BadGrammar { message: String },
    OutsideGrammar { message: String },
    Unsupported { message: String },
    Other { message: String },
}

impl From<&EngineError> for WireError {
    fn from(e: &EngineError) -> Self {
        match *e {
            EngineError::ContextOverflow {
                context_size,
                needed,
            } => WireError::ContextOverflow {
                context_size,
                needed,
            },
            EngineError::BadGrammar(ref message) => WireError::BadGrammar {
                message: message.clone(),
            },
            EngineError::OutsideGrammar(ref message) => WireError::OutsideGrammar {
                message: message.clone(),
            },
            EngineError::Unsupported(ref message) => WireError::Unsupported {
                message: message.clone(),
            },
            ref other => WireError::Other {
                message: other.to_string(),
            },
        }
    }
}

impl From<WireError> for EngineError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::ContextOverflow {
                context_size,
                needed,
            } => EngineError::ContextOverflow {
                context_size,
                needed,
            },
            WireError::BadGrammar { message } => EngineError::BadGrammar(message),
            WireError::OutsideGrammar { message } => EngineError::OutsideGrammar(message),
            WireError::Unsupported { message } => EngineError::Unsupported(message),
            WireError::Other { message } => EngineError::Worker(message),
        }
    }
}

/// Writes the one reply of a one-shot child (a quantisation, a template), on lane 0.
pub fn write_reply(out: &mut impl Write, reply: &Reply) -> io::Result<()> {
    write_frame(out, &FromWorker { lane: 0, reply })
}

/// Writes one frame.
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T) -> io::Result<()> {
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a {}-byte frame is over the {MAX_FRAME}-byte limit",
                body.len()
            ),
        ));
    }
    let len = u32::try_from(body.len()).map_err(io::Error::other)?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&body)?;
    out.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of stream (between frames).
pub fn read_frame<T: DeserializeOwned>(input: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len[..1]) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    input.read_exact(&mut len[1..])?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame claims {len} bytes, over the {MAX_FRAME}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    input.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("a bad frame: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_their_lanes() {
        let mut wire = Vec::new();
        let cancel = Request::Cancel;
        write_frame(
            &mut wire,
            &ToWorker {
                lane: 3,
                request: &cancel,
            },
        )
        .unwrap();
        let append = Request::Append {
            parts: vec![PromptPart::plain("<observation>\n2\n</observation>")],
        };
        write_frame(
            &mut wire,
            &ToWorker {
                lane: 0,
                request: &append,
            },
        )
        .unwrap();
        let mut input = wire.as_slice();
        assert!(matches!(
            read_frame::<ToWorker>(&mut input).unwrap(),
            Some(ToWorker {
                lane: 3,
                request: Request::Cancel
            })
        ));
        match read_frame::<ToWorker>(&mut input).unwrap() {
            Some(ToWorker {
                lane: 0,
                request: Request::Append { parts },
            }) => {
                assert_eq!(
                    parts,
                    vec![PromptPart::plain("<observation>\n2\n</observation>")]
                )
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(read_frame::<ToWorker>(&mut input).unwrap().is_none());
        // A reply framed from a borrow reads back as an owned one.
        let closed = Reply::Closed;
        let mut back = Vec::new();
        write_frame(
            &mut back,
            &FromWorker {
                lane: 2,
                reply: &closed,
            },
        )
        .unwrap();
        assert!(matches!(
            read_frame::<FromWorker>(&mut back.as_slice()).unwrap(),
            Some(FromWorker {
                lane: 2,
                reply: Reply::Closed
            })
        ));
    }

    #[test]
    fn a_rendered_prompt_without_instructions_shares_nothing() {
        let open: Request = serde_json::from_str(
            r#"{"op": "open", "prompt": {"kind": "parts", "parts": [{"text": "hi", "special": false}]}}"#,
        )
        .unwrap();
        match open {
            Request::Open {
                prompt:
                    Prompt::Parts {
                        parts,
                        instructions,
                    },
            } => {
                assert_eq!(parts, vec![PromptPart::plain("hi")]);
                assert!(instructions.is_empty());
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_huge_length_is_refused_before_allocating() {
        let mut wire = (u32::MAX).to_le_bytes().to_vec();
        wire.extend_from_slice(b"{}");
        let err = read_frame::<Request>(&mut wire.as_slice()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_cut_frame_is_an_error_not_an_end() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &Request::Cancel).unwrap();
        wire.truncate(wire.len() - 2);
        assert!(read_frame::<Request>(&mut wire.as_slice()).is_err());
        // Cut inside the length prefix.
        assert!(read_frame::<Request>(&mut [7u8, 0].as_slice()).is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        let mut wire = 3u32.to_le_bytes().to_vec();
        wire.extend_from_slice(b"{x}");
        assert!(read_frame::<Request>(&mut wire.as_slice()).is_err());
    }
}

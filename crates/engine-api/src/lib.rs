//! The engine's contract: what a caller needs to drive a model, without knowing which engine
//! runs it. A [`Session`] is one conversation's context whose KV cache only ever grows;
//! [`ChatEngine`] answers one chat turn at a time. llama.cpp implements both in `catena-engine`,
//! the model worker's client in `catena-worker`, and OpenAI-compatible or llama.cpp servers in
//! `catena-agent::remote`; everything that only drives a model (the agent, distillation, the
//! service, the store's events) depends on this crate and never links llama.cpp
//! (docs/ARCHITECTURE.md, code map: `crates/engine-api`).
//!
//! [`Session::append`] evaluates new text (the prompt, an observation), [`Session::generate`]
//! samples until a stop condition. Nothing is ever evaluated twice: the last sampled token waits as
//! "pending" and is evaluated together with whatever comes next, so `evaluated_tokens ==
//! context_tokens` holds at every step.

pub mod build_cpu;
mod chat;
mod constraint;
mod pick;
pub mod plan;
mod quant;
mod repetition;
mod sampling;
mod stops;

pub use chat::{ChatMessage, chatml_prompt};
pub use constraint::Constraint;
pub use pick::{AllowedTokens, TokenSampler};
pub use quant::QuantType;
pub use repetition::RepetitionWatch;
pub use sampling::{SamplingParams, argmax, greedy_pick, token_logprob};
pub use stops::{StopHit, StopMatcher};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// How the engine's process begins the line it writes to standard error when llama.cpp stops it
/// on a failed check (`GGML_ASSERT`, `GGML_ABORT`), the check following; a supervisor that relays
/// a child's standard error finds the line by it.
pub const LLAMA_ABORT_LINE: &str = "llama.cpp stopped the process on a failed check";

/// One piece of prompt text. Chat-template markers (`<|im_start|>`) are special; everything a
/// user, a file, a tool or a model wrote is plain, so text such as `<|im_end|>` printed by a program
/// can never become a control token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptPart {
    pub text: String,
    pub special: bool,
}

impl PromptPart {
    pub fn plain(text: impl Into<String>) -> Self {
        PromptPart {
            text: text.into(),
            special: false,
        }
    }

    pub fn special(text: impl Into<String>) -> Self {
        PromptPart {
            text: text.into(),
            special: true,
        }
    }
}

/// Why a generation stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GenerationStop {
    /// The model produced an end-of-generation token (`<|im_end|>` for Qwen).
    EndOfTurn,
    /// A stop string was produced; it is kept at the end of the text.
    StopString { index: usize },
    /// The token budget of this call ran out.
    MaxTokens,
    /// The wall-clock deadline passed.
    Deadline,
    /// The context window is full.
    ContextFull,
    /// The caller asked to stop.
    Cancelled,
    /// The latest tokens repeat a unit of `period` tokens (asked for with
    /// [`GenerateLimits::stop_on_repetition`]).
    Repetition { period: usize },
}

/// What one [`Session::generate`] call produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Generation {
    pub text: String,
    pub stop: GenerationStop,
    /// Tokens sampled in this call.
    pub tokens: usize,
}

/// One token of the context as the model saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: i32,
    /// Log-probability of the token under the sampling distribution (logits divided by the
    /// temperature, 1 when greedy, before top-k/top-p truncation); `None` for tokens the model did
    /// not sample (prompt, observations, the re-tokenised end of a stop string).
    pub logprob: Option<f32>,
}

/// Mean log-probability of the sampled tokens among `tokens` (those that carry one); `None`
/// when none does (log-probabilities were not recorded, or nothing was sampled).
pub fn mean_logprob(tokens: &[TokenRecord]) -> Option<f64> {
    let (sum, count) = tokens
        .iter()
        .filter_map(|t| t.logprob)
        .fold((0.0, 0usize), |(sum, n), l| (sum + f64::from(l), n + 1));
    (count > 0).then(|| sum / count as f64)
}

/// The counters of a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionStats {
    /// Tokens in the KV cache.
    pub context_tokens: usize,
    /// Tokens run through the model. Equal to `context_tokens` unless something was re-read.
    pub evaluated_tokens: usize,
    /// Tokens sampled.
    pub generated_tokens: usize,
    /// Tokens appended as text (prompt, observations, prefill).
    pub appended_tokens: usize,
    /// Wall time spent evaluating appended text (batched prefill).
    #[serde(with = "catena_protocol::units::duration_ms")]
    pub prefill_time: Duration,
    /// Wall time spent in single-token decoding steps, sampling included.
    #[serde(with = "catena_protocol::units::duration_ms")]
    pub decode_time: Duration,
    /// Tokens evaluated in batched prefill (the appended ones, plus pending tokens folded in).
    pub prefill_tokens: usize,
    /// Tokens evaluated one at a time while generating.
    pub decode_tokens: usize,
    /// Tokens of new prompts taken from KV cells instead of evaluated: the prefix a session
    /// kept from its previous prompt, or (batched) cells another sequence had evaluated.
    #[serde(default)]
    pub cached_tokens: usize,
}

/// A flag a caller sets to stop a generation between two tokens.
pub type CancelFlag = std::sync::Arc<std::sync::atomic::AtomicBool>;

/// A one-off chat answer beside a session, in a context of its own: the page summariser's calls
/// (its instructions and a page must not enter the agent's context). Greedy, so a page reads the
/// same every time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideChat {
    pub system: String,
    pub user: String,
    pub max_tokens: usize,
}

impl SideChat {
    /// Context of a side chat: its prompt and its answer.
    pub const CONTEXT: u32 = 8_192;
}

/// A session in this process that starts a new prompt in place of its context, keeping the KV
/// cells of the prefix the two share (the system message between tasks, the whole prompt
/// between samples of one task).
pub trait StartPrompt: Session {
    /// Replaces the context with the prompt `ids` and returns how many of them were already
    /// evaluated. The prompt's last token is always evaluated again, for its logits. The
    /// session's counters ([`SessionStats`]) start again: from here they count this prompt.
    fn start_prompt(&mut self, ids: &[i32]) -> Result<usize, EngineError>;

    /// [`Self::start_prompt`], where `ids[..shared]` is what every task of the same profile
    /// begins with ([`TaskChat::user_shared`]): a session may evaluate that part on its own and
    /// keep it for the next process (the llama.cpp engine's prompt cache).
    fn start_task_prompt(&mut self, ids: &[i32], shared: usize) -> Result<usize, EngineError> {
        let _ = shared;
        self.start_prompt(ids)
    }
}

/// The prompt of an agent task: one system and one user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskChat<'a> {
    pub system: &'a str,
    pub user: &'a str,
    /// How many leading bytes of `user` every task of the same profile has too (its
    /// instructions, up to the question); 0 when there are none.
    pub user_shared: usize,
}

impl TaskChat<'_> {
    /// The shared part of the user message (none where `user_shared` is not a place in it).
    pub fn shared_user(&self) -> &str {
        self.user.get(..self.user_shared).unwrap_or_default()
    }
}

/// Where a run's prompt stands in its session when the run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptStart {
    /// Tokens of the prompt (rendered up to the opening of the assistant turn).
    pub prompt_tokens: usize,
    /// How many of them were already evaluated in a kept KV cache.
    pub cached_tokens: usize,
}

/// A session that knows its model's chat template: it starts a conversation of one system and
/// one user message in place of its context, keeping the KV cells of the prefix the two share
/// (the system message between tasks, the whole prompt between samples of one task). Every agent
/// run's prompt is put in through this trait, whichever engine holds the session.
pub trait StartChat: Session {
    fn start_chat(&mut self, chat: &TaskChat<'_>) -> Result<PromptStart, EngineError>;
}

/// What every session keeps beside its engine's own state, whichever engine it is: the context's
/// tokens, the counters, the context window and how the next tokens are sampled. Each [`Session`]
/// holds one and lends it to the trait's accessors.
#[derive(Debug, Clone, Default)]
pub struct SessionState {
    /// Every token in the context, in order, pending ones included.
    pub tokens: Vec<TokenRecord>,
    pub stats: SessionStats,
    /// The context window in tokens.
    pub context_size: usize,
    pub sampling: SamplingParams,
}

/// One conversation's context.
pub trait Session {
    /// Evaluates new text at the end of the context; returns how many tokens it added.
    fn append(&mut self, parts: &[PromptPart]) -> Result<usize, EngineError>;

    /// Samples until an end-of-generation token, a stop string (kept in the text), a limit, a
    /// full context or a cancel. `on_text` receives the text as it is decided (never text past a
    /// stop string).
    fn generate(
        &mut self,
        stops: &StopMatcher,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, EngineError>;

    /// Answers `chat` with the same model in a context of its own ([`SideChat::CONTEXT`]
    /// tokens), leaving this session as it is. A prompt that does not fit with room for the
    /// answer is a [`EngineError::ContextOverflow`].
    fn side_chat(&mut self, chat: &SideChat) -> Result<String, EngineError>;

    /// The tokens, counters, window and sampling settings this session keeps.
    fn state(&self) -> &SessionState;

    fn state_mut(&mut self) -> &mut SessionState;

    fn stats(&self) -> SessionStats {
        self.state().stats.clone()
    }

    /// Holds the next [`Session::generate`] call (only that one) to `constraint`'s grammar. The
    /// grammar is built here, so a bad one fails before anything is generated.
    fn constrain(&mut self, constraint: &Constraint) -> Result<(), EngineError> {
        let _ = constraint;
        Err(EngineError::Unsupported(
            "this engine cannot constrain its output to a grammar".into(),
        ))
    }

    /// Changes how the next tokens are sampled.
    fn set_sampling(&mut self, sampling: SamplingParams) {
        self.state_mut().sampling = sampling;
    }

    /// The context window in tokens.
    fn context_size(&self) -> usize {
        self.state().context_size
    }

    /// Every token in the context, in order, pending ones included.
    fn tokens(&self) -> &[TokenRecord] {
        &self.state().tokens
    }
}

/// One agent call of an explicit multi-agent system: a system message that says what the agent
/// does, a user message with only the state it needs, and a token budget. Each call is a
/// conversation of its own; nothing of one call is in the next one's prompt unless the caller
/// puts it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTurn {
    /// Empty: no system message (the model's template then uses its default, if it has one).
    pub system: String,
    pub user: String,
    pub max_tokens: usize,
}

/// What a [`ChatTurn`] produced and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatReply {
    pub text: String,
    pub stop: GenerationStop,
    /// Tokens of the rendered prompt (chat template included).
    pub prompt_tokens: usize,
    /// Of those, tokens that were not evaluated again: a prefix kept from the previous call in
    /// a local session, or what a server says it took from its cache.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

/// A model answering one chat turn at a time, with the tokens each turn cost: in this process
/// (`llama::LocalChat`) or at an OpenAI-compatible server (`catena_agent::remote::RemoteChat`).
pub trait ChatEngine {
    /// Answers `turn` with the engine's sampling settings. `on_text` receives the answer as it
    /// is decided.
    fn chat(
        &mut self,
        turn: &ChatTurn,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatReply, EngineError>;

    /// The context window of one turn, prompt and answer together; 0 where a server does not
    /// say.
    fn context_size(&self) -> usize;

    /// Changes how the next turns are sampled (a task's later samples take their own seeds).
    fn set_sampling(&mut self, sampling: SamplingParams);
}

/// Bounds of one [`Session::generate`] call.
#[derive(Debug, Clone)]
pub struct GenerateLimits {
    pub max_tokens: usize,
    pub deadline: Option<std::time::Instant>,
    /// Checked between tokens: set it to stop the generation.
    pub cancel: Option<CancelFlag>,
    /// Stop once the generation has fallen into a loop ([`RepetitionWatch`]). Chains ask for
    /// it; a plain completion does not, since a user may ask for repeated text.
    pub stop_on_repetition: bool,
}

impl GenerateLimits {
    pub fn tokens(max_tokens: usize) -> Self {
        GenerateLimits {
            max_tokens,
            deadline: None,
            cancel: None,
            stop_on_repetition: false,
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|flag| flag.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// Settings of one session.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionOptions {
    /// Context window; `None` uses the model's training context, capped at 32,768 (the protocol's
    /// budget).
    pub context_size: Option<u32>,
    pub sampling: SamplingParams,
    /// CPU threads; `None` uses the physical cores.
    pub threads: Option<i32>,
    pub batch_size: u32,
    /// How keys and values are stored in the KV cache.
    #[serde(default)]
    pub kv_cache: KvCacheType,
    /// Record each sampled token's log-probability ([`TokenRecord::logprob`]). It costs a pass
    /// over the whole vocabulary a token, and only RL reads it, so it is off unless asked for.
    #[serde(default)]
    pub logprobs: bool,
    /// Make each greedy pick inside llama.cpp's decode (its backend sampler: an argmax where the
    /// logits are), so that only the token id comes back from a GPU, not the whole row of logits
    /// (608 KB a token for the default model) for the CPU to scan. Only for sessions whose
    /// generations are all greedy and free: no grammar, log-probabilities or penalties, which
    /// need the logits on the CPU; such a generation is refused with an error. Only worth it where
    /// [`ModelInfo::output_on_gpu`]: on the CPU backend it is slower (llama.cpp copies the row
    /// into a padded tensor first, then scans it on one thread). `catena bench` sets it there
    /// (docs/ARCHITECTURE.md, "Greedy picks on the device").
    #[serde(default)]
    pub greedy_on_device: bool,
}

/// The KV cache's element type: F16 is exact, Q8_0 halves the cache's memory for a small loss.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvCacheType {
    #[default]
    F16,
    Q8_0,
}

impl KvCacheType {
    /// Bytes per element, in 64ths (Q8_0 stores 32 values in 34 bytes).
    pub fn bytes_per_element_x64(self) -> u64 {
        match self {
            KvCacheType::F16 => 128,
            KvCacheType::Q8_0 => 68,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvCacheType::F16 => "f16",
            KvCacheType::Q8_0 => "q8_0",
        }
    }
}

impl std::str::FromStr for KvCacheType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(KvCacheType::F16),
            "q8_0" | "q8" => Ok(KvCacheType::Q8_0),
            other => Err(format!("unknown KV cache type {other:?} (f16 or q8_0)")),
        }
    }
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            context_size: None,
            sampling: SamplingParams::default(),
            threads: None,
            batch_size: 512,
            kv_cache: KvCacheType::default(),
            logprobs: false,
            greedy_on_device: false,
        }
    }
}

/// Facts about a loaded model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelInfo {
    pub path: PathBuf,
    pub architecture: String,
    pub name: Option<String>,
    pub parameters: u64,
    pub size_bytes: u64,
    pub context_train: u32,
    pub layers: u32,
    pub gpu_layers: u32,
    pub chat_template: ChatFormat,
    /// The LoRA adapter applied on top, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<PathBuf>,
}

impl ModelInfo {
    /// Whether the output layer (the logits) was given to a GPU: llama.cpp offloads it with the
    /// layer past the last block. llama.cpp may keep the matrix in CPU memory all the same, where
    /// the device refuses its product with 512 tokens: lavapipe's 128 MiB storage-buffer limit
    /// does so for any vocabulary over 65,536 tokens (docs/ARCHITECTURE.md, "Greedy picks on the
    /// device").
    pub fn output_on_gpu(&self) -> bool {
        self.gpu_layers > self.layers
    }
}

/// How prompts are framed for this model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatFormat {
    /// `<|im_start|>role\n...<|im_end|>\n` (Qwen2.5, the AFM checkpoints).
    ChatMl,
    /// The model's own template, rendered by llama.cpp as one special-parsed string.
    Native,
    /// No template: system and user text are written as plain paragraphs.
    Plain,
}

/// Errors from loading models and running sessions.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("model file {path} not found")]
    ModelNotFound { path: PathBuf },
    #[error("{path} is not a usable model: {reason}")]
    BadModel { path: PathBuf, reason: String },
    #[error("{path} is not a usable LoRA adapter for this model: {reason}")]
    BadAdapter { path: PathBuf, reason: String },
    #[error("llama.cpp could not load {path}: {reason}")]
    LoadFailed { path: PathBuf, reason: String },
    #[error("could not create a context of {context_size} tokens: {reason}")]
    ContextFailed { context_size: u32, reason: String },
    #[error("the context is full ({context_size} tokens); {needed} more were needed")]
    ContextOverflow { context_size: usize, needed: usize },
    #[error("tokenizing failed: {0}")]
    Tokenize(String),
    #[error("evaluating the batch failed: {0}")]
    Decode(String),
    #[error("llama.cpp backend: {0}")]
    Backend(String),
    /// An error the model worker process reported (its message, as the worker wrote it).
    #[error("{0}")]
    Worker(String),
    /// The model worker process died or broke the protocol; it is restarted for the next request.
    #[error("the model worker stopped: {0}")]
    WorkerDied(String),
    /// A model server refused a prompt too long for its model's context (its own words).
    #[error("the prompt does not fit the model server's context: {0}")]
    PromptTooLong(String),
    /// A model server gave no answer (unreachable, a refused key, an error status).
    #[error("the model server: {0}")]
    Remote(String),
    /// A [`Constraint`]'s grammar cannot be built (an unsupported schema feature, a syntax
    /// error); nothing was generated.
    #[error("the output's grammar cannot be used: {0}")]
    BadGrammar(String),
    /// The text a constrained generation continues ([`Constraint::given`]: a prefill, a chain
    /// so far) does not fit the grammar; nothing was generated.
    #[error("the text written so far does not fit the grammar it must follow: {0}")]
    OutsideGrammar(String),
    /// This engine cannot do what was asked (e.g. constrained decoding on a remote server).
    #[error("{0}")]
    Unsupported(String),
}

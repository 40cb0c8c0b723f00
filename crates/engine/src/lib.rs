//! llama.cpp behind the engine's contract (`catena-engine-api`): a loaded model that opens
//! sessions whose KV cache only ever grows, many sequences decoded together, chat turns, LoRA
//! adapters, the quantiser, the hardware probe. Only what runs the model in this process links
//! this crate (the CLI, the model worker's process, the trainer); everything else drives a model
//! through the contract's traits.

mod generated;
pub mod hardware;
pub mod llama;
mod utf8;

// The contract's types, under the paths this crate's modules name them by.
use catena_engine_api::{
    ChatEngine, ChatFormat, ChatReply, ChatTurn, Constraint, EngineError, GenerateLimits,
    Generation, GenerationStop, KvCacheType, ModelInfo, PromptPart, SamplingParams, Session,
    SessionOptions, SideChat, StartPrompt, StopMatcher, TokenRecord,
};

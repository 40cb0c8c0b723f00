//! catena-trainer: LoRA fine-tuning of Chain-of-Agents models on candle.
//!
//! The base model is read straight from the GGUF file llama.cpp serves, and its weights stay
//! quantised: every linear layer runs through `qlinear`, whose backward pass is
//! `grad x dequant(W)`, and only the LoRA factors (f32) train. The adapter that comes out is
//! therefore an adapter for exactly the weights `catena run --adapter` loads.
//!
//! Modules, in the order data flows:
//! - `base`: the GGUF's architecture and tensors (Qwen2).
//! - [`data`]: trajectories (our JSONL, the AFM alpaca JSON) to tokens and a loss mask.
//! - `model`: the Qwen2 training module with LoRA, checkpointed per layer.
//! - `optim`: AdamW with warm-up + cosine and gradient clipping.
//! - [`sft`]: the training loop and evaluation; `checkpoint`: checkpoints that survive a
//!   SIGKILL; `plot`: the loss curve.
//! - [`export`]: the GGUF adapter llama.cpp loads, and PEFT safetensors.
//! - [`rl`]: agentic RL (DAPO): rollouts through the runtime and sandbox, rewards, the
//!   clipped, importance-weighted update.
//! - [`synth`]: a verifiable task family whose trajectories carry real sandbox observations.
//! - [`cli`] (feature `cli`): the `train sft` and `train rl` command lines `catena` and
//!   `catena-desktop` mount.
//!
//! The public surface is what the binaries and the end-to-end tests use: the two loops with
//! their options, the synthetic tasks, the exports, the dataset reader, and the training module
//! the gradient and rollout checks in `tests/` drive directly (`BaseModel`, `Qwen2Lora`,
//! `AdamW`, the rollout group and the RL update). The candle types in it are `Device` (where a
//! base model is loaded and a run trains) and `Tensor` (the gradients those checks compare with
//! PyTorch's); everything else is the crate's own.

mod base;
mod checkpoint;
#[cfg(feature = "cli")]
pub mod cli;
pub mod data;
pub mod export;
mod fused;
mod fused_block;
mod gguf_adapter;
mod lora;
mod model;
mod ops;
mod optim;
mod pack;
mod plot;
mod qlinear;
pub mod rl;
pub mod sft;
pub mod synth;

pub use base::BaseModel;
pub use candle_core::{Device, Tensor};
pub use lora::{LoraConfig, Target};
pub use model::Qwen2Lora;
pub use optim::{AdamW, AdamWConfig};
use std::path::PathBuf;

/// What can go wrong while training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{path}: {reason}")]
    BadBase { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    BadData { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    BadCheckpoint { path: PathBuf, reason: String },
    #[error("{0}")]
    Config(String),
    #[error("the model runtime: {0}")]
    Engine(#[from] catena_engine_api::EngineError),
    #[error("tensor maths: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("training stopped: {0}")]
    Stopped(String),
}

impl TrainError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
        let path = path.into();
        move |source| TrainError::Io { path, source }
    }
}

pub type Result<T, E = TrainError> = std::result::Result<T, E>;

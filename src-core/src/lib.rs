//! Catena core: everything the runtime does, with no UI and no training maths.
//!
//! Data flows top to bottom: [`protocol`] (tags, the streaming parser, profiles) →
//! [`engine`] (llama.cpp sessions whose KV cache only grows) → [`sandbox`] (WebAssembly CPython)
//! → [`tools`] → [`agent`] (the chain runner and its events). [`assets`] fetches the default
//! model and the Python runtime once; [`config`] says where things live.

pub mod agent;
pub mod assets;
pub mod config;
pub mod engine;
pub mod eval;
pub mod models;
pub mod protocol;
#[cfg(feature = "runtime")]
pub mod sandbox;
#[cfg(feature = "runtime")]
pub mod server;
#[cfg(feature = "runtime")]
pub mod service;
#[cfg(feature = "runtime")]
pub mod store;
pub mod tools;
pub mod util;
#[cfg(feature = "runtime")]
pub mod worker;

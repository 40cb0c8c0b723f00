//! The web for the agent's tools, offline first (docs/PROTOCOL.md §3): search backends for
//! `<web_search>` ([`SearchBackend`]: the local document index, SearXNG, Serper, Brave,
//! Tavily) and the page fetcher `<crawl_page>` reads the web with ([`Fetcher`]), which refuses
//! the machine's own and its private networks' addresses, an OpenAI-compatible chat client
//! ([`ChatEndpoint`]) for a page summariser or a multi-agent teacher other than the run's own
//! model, and llama.cpp's completion API ([`CompletionEndpoint`]) for Chain-of-Agents runs at a
//! server.

pub mod address;
mod body;
mod chat;
mod completion;
mod fetch;
mod search;
mod settings;

pub use chat::{ChatAnswer, ChatEndpoint, ChatRequest, EndpointError};
pub use completion::{
    Completion, CompletionEndpoint, CompletionRequest, CompletionStop, ServerProps,
};
pub use fetch::{FetchError, FetchOptions, FetchedPage, Fetcher};
pub use search::{
    ApiKey, LocalSearch, OnlineSearch, SearchBackend, SearchFailure, SearchService, WebHit,
};
pub use settings::{
    SUMMARIZER_KEY_ENV, UrlRefused, WebSettings, WebSetup, WebSetupError, check_settable_url,
    without_credentials,
};

/// Installs rustls's `ring` crypto provider as the process default (once; later calls do
/// nothing): reqwest is built without a provider of its own.
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

//! Catena as an MCP server: what an agent run can use, lent to any MCP host (an editor, a coding
//! agent). `run_python` runs a program in the agent runs' WebAssembly sandbox with their limits,
//! and their words for the outcome; `web_search`, `crawl_page` and `wiki_search` are the agent
//! runs' own tools, listed only where something answers them here; `agent_run` is a whole
//! Chain-of-Agents run of the served model, stored like any other.
//!
//! Two front doors share this tool set: `catena mcp` over stdio ([`serve_stdio`]) and `/mcp` on
//! `catena serve` over Streamable HTTP ([`http_service`]), behind the server's boundary like every
//! `/v1` route. rmcp (pinned) speaks the protocol: the 2025-11-25 revision (an `initialize`
//! handshake first) and the 2026-07-28 one (no handshake: each request carries its own protocol
//! version), whichever the client asks for.

mod agent_run;
mod blocking;
mod tools;

pub use tools::CatenaTools;

use catena_service::{Service, Workspace};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
pub use rmcp::transport::streamable_http_server::StreamableHttpService;
pub use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::sync::Arc;

/// What the user chose for the MCP server when starting it.
#[derive(Debug, Clone, Default)]
pub struct McpOptions {
    /// A folder of the user's that `run_python` programs see at `/workspace` (read-only unless
    /// the user made it writable); none by default.
    pub workspace: Option<Workspace>,
}

/// Why the stdio server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("the MCP client did not start a session: {0}")]
    Start(String),
    #[error("the MCP session ended with an error: {0}")]
    Session(String),
}

/// Serves the tools on this process's stdin and stdout until the client closes them.
pub async fn serve_stdio(service: Arc<Service>, options: McpOptions) -> Result<(), McpError> {
    let tools = CatenaTools::new(service, options);
    let running = tools
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| McpError::Start(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| McpError::Session(e.to_string()))?;
    Ok(())
}

/// `/mcp`: the tools over Streamable HTTP, for the server to mount behind its boundary.
///
/// Stateless: every POST is answered on its own (2026-07-28 has no sessions, and for 2025-11-25
/// none is kept either), so no client can make the server hold state for it. The boundary in
/// front of this service decides which `Host`, `Origin` and key get through, the same for `/mcp`
/// as for `/v1`; rmcp's own host check is off so that it cannot disagree (it would refuse the
/// names a server bound off loopback is reached by, which the boundary accepts with the key).
pub fn http_service(
    service: Arc<Service>,
    options: McpOptions,
    max_body_bytes: usize,
) -> StreamableHttpService<CatenaTools, LocalSessionManager> {
    let tools = CatenaTools::new(service, options);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .disable_allowed_hosts()
        .with_max_request_body_bytes(max_body_bytes);
    StreamableHttpService::new(move || Ok(tools.clone()), Arc::default(), config)
}

//! Catena as an MCP host: the servers a user lists in a Cursor-style `mcp.json` lend their tools
//! to agent runs. Each server is started as a child process and spoken to over stdio with rmcp
//! (pinned with the server side in catena-mcp); its tools are described to the model after the
//! system message and called with a `<tool_call>` block (PROTOCOL.md §1, Catena's extension).
//!
//! A listed server is a program the user chose to run, with the user's rights, like in every MCP
//! host: it is not sandboxed. What Catena guards is the model's use of it: a tool that does not
//! declare itself read-only runs only after the user allows the call ([`Approver`]), and every
//! call and its result appear in the run's timeline like any tool's.

mod config;
mod servers;
mod tool;

pub use config::{ConfigError, MAX_SERVERS, ServerEntry, load};
pub use servers::{CallError, MAX_TOOLS, StartProblem};
pub use tool::{Approval, Approver, CALL_TIMEOUT, ExternalTools, McpServers, PendingCall};

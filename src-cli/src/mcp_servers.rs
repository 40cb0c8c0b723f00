//! The MCP servers a run may use (`--mcp-config`, or `mcp.json` in the data folder), for
//! `catena run` and `catena serve` alike, and the terminal's way of asking the user before a tool
//! that may change something runs (`catena serve` asks in the web UI: catena-service's approvals).

use anyhow::{Context, Result};
use catena_hub::config::Paths;
use catena_mcp_client::{Approval, Approver, ExternalTools, McpServers, PendingCall, ServerEntry};
use catena_protocol::ExternalTool;
use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a server has to start and list its tools (`npx` may fetch its package first).
const START_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug, Clone)]
pub struct McpArgs {
    /// The MCP servers whose tools the run may call (a Cursor-style mcp.json of stdio servers;
    /// default: mcp.json in Catena's data folder, when there is one).
    #[arg(long, value_name = "FILE", conflicts_with = "no_mcp")]
    pub mcp_config: Option<PathBuf>,

    /// Start no MCP servers, not even those of the default mcp.json.
    #[arg(long)]
    pub no_mcp: bool,

    /// An MCP tool that may run without asking, though it may change something (repeatable).
    /// Without it such a call asks the user first (on the terminal in `catena run`, in the web UI
    /// in `catena serve`), and is refused when no one answers.
    #[arg(long = "allow-tool", value_name = "NAME")]
    pub allow_tools: Vec<String>,
}

impl McpArgs {
    /// The servers to start, if any.
    fn entries(&self, paths: &Paths) -> Result<Vec<ServerEntry>> {
        if self.no_mcp {
            return Ok(Vec::new());
        }
        let path = match &self.mcp_config {
            Some(path) => path.clone(),
            None => {
                let default = paths.mcp_servers_file();
                if !default.exists() {
                    return Ok(Vec::new());
                }
                default
            }
        };
        Ok(catena_mcp_client::load(&path)?)
    }

    /// Starts the listed servers once, saying on stderr what each offers and what could not
    /// start. `None` when no server is listed.
    pub fn start_servers(&self, paths: &Paths) -> Result<Option<Arc<McpServers>>> {
        let entries = self.entries(paths)?;
        if entries.is_empty() {
            return Ok(None);
        }
        let (servers, problems) =
            McpServers::start(&entries, START_TIMEOUT).context("cannot start the MCP client")?;
        for problem in problems {
            eprintln!("warning: {problem}");
        }
        for (server, count) in servers.started() {
            eprintln!("MCP server `{server}`: {count} tools offered to the model.");
        }
        Ok(Some(Arc::new(servers)))
    }

    /// The tools allowed up front (`--allow-tool`).
    pub fn allowed(&self) -> HashSet<String> {
        self.allow_tools.iter().cloned().collect()
    }

    /// Starts the listed servers with the terminal approving their calls (`catena run`).
    pub fn start(&self, paths: &Paths) -> Result<Option<(ExternalTools, Vec<ExternalTool>)>> {
        let Some(servers) = self.start_servers(paths)? else {
            return Ok(None);
        };
        let approver = TerminalApprover {
            allowed: self.allowed(),
            asking: Mutex::new(()),
        };
        let specs = servers.specs();
        let tools = ExternalTools::new(servers, Arc::new(approver));
        Ok(Some((tools, specs)))
    }
}

/// Asks on the terminal: the question on stderr, the answer a line on stdin.
struct TerminalApprover {
    /// Tools the user allowed up front (`--allow-tool`).
    allowed: HashSet<String>,
    /// One question at a time.
    asking: Mutex<()>,
}

impl Approver for TerminalApprover {
    fn approve(&self, call: &PendingCall<'_>) -> Approval {
        if self.allowed.contains(call.tool) {
            return Approval::Allowed;
        }
        let _one_at_a_time = self.asking.lock();
        let arguments = serde_json::Value::Object(call.arguments.clone());
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "\nThe model asks to call `{}` of the MCP server `{}`, which may change something, \
             with:\n{arguments:#}\nAllow it? [y/N] ",
            call.tool, call.server
        );
        let _ = stderr.flush();
        let mut answer = String::new();
        let read = std::io::stdin().lock().read_line(&mut answer);
        let allowed = matches!(read, Ok(n) if n > 0)
            && matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes");
        let _ = writeln!(
            stderr,
            "{}",
            match (
                allowed,
                std::io::stdin().is_terminal() || !answer.is_empty()
            ) {
                (true, _) => "Allowed.",
                (false, true) => "Not allowed.",
                (false, false) =>
                    "Not allowed: no one answered (stdin is closed). Use \
                                   --allow-tool NAME to allow a tool without asking.",
            }
        );
        if allowed {
            Approval::Allowed
        } else {
            Approval::Denied
        }
    }
}

//! The started servers: each entry of the list becomes a child process spoken to over stdio with
//! rmcp, its tools listed once at start. The client side is asynchronous and a run's tools are
//! not, so the servers live on a small runtime of their own, which every call blocks on.

use crate::config::ServerEntry;
use catena_protocol::ExternalTool;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use std::collections::HashMap;
use std::future::Future;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// At most this many tools are offered to one run: each costs prompt tokens.
pub const MAX_TOOLS: usize = 64;
/// A description longer than this (characters) is cut.
const MAX_DESCRIPTION_CHARS: usize = 1024;
/// A tool whose argument schema is longer than this (bytes of JSON) is left out.
const MAX_SCHEMA_BYTES: usize = 8 * 1024;
/// A line a server writes to stderr is logged up to this many bytes.
const MAX_LOG_LINE: usize = 2048;

type Client = RunningService<RoleClient, ()>;

/// One tool as the model sees it, and where its calls go.
#[derive(Debug, Clone)]
pub struct Offered {
    pub spec: ExternalTool,
    /// The server's index in [`Servers`].
    server: usize,
    /// The tool's own name at its server (the offered name may be qualified).
    remote_name: String,
    /// Whether the server says the tool only reads (`readOnlyHint`); the others ask first.
    pub read_only: bool,
}

/// A server that could not be used, or a tool of one that was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartProblem {
    pub server: String,
    pub message: String,
}

impl std::fmt::Display for StartProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MCP server `{}`: {}", self.server, self.message)
    }
}

/// Why a call got no result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the `{server}` server did not answer within {} s", timeout.as_secs())]
    Timeout { server: String, timeout: Duration },
    #[error("the `{server}` server failed the call: {message}")]
    Server { server: String, message: String },
}

/// The running servers and their tools.
pub struct Servers {
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    clients: Vec<(String, Client)>,
    offered: Vec<Offered>,
}

impl Servers {
    /// Starts every server in `entries`, each given `timeout` to start and list its tools. A
    /// server that fails is left out and reported, so one broken entry does not cost the others.
    pub fn start(
        entries: &[ServerEntry],
        timeout: Duration,
    ) -> std::io::Result<(Servers, Vec<StartProblem>)> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mcp-client")
            .enable_all()
            .build()?;
        let mut clients = Vec::new();
        let mut problems = Vec::new();
        let mut listed = Vec::new();
        for entry in entries {
            match block_on(&runtime, connect(entry, timeout)) {
                Ok((client, tools)) => {
                    listed.push((clients.len(), tools));
                    clients.push((entry.name.clone(), client));
                }
                Err(message) => problems.push(StartProblem {
                    server: entry.name.clone(),
                    message,
                }),
            }
        }
        let offered = offer(&clients, listed, &mut problems);
        let servers = Servers {
            runtime: Some(runtime),
            clients,
            offered,
        };
        Ok((servers, problems))
    }

    pub fn offered(&self) -> &[Offered] {
        &self.offered
    }

    /// The names of the servers that started, with how many tools each offers.
    pub fn started(&self) -> Vec<(&str, usize)> {
        self.clients
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let count = self.offered.iter().filter(|o| o.server == i).count();
                (name.as_str(), count)
            })
            .collect()
    }

    pub fn server_name(&self, tool: &Offered) -> &str {
        self.clients
            .get(tool.server)
            .map_or("?", |(name, _)| name.as_str())
    }

    /// Calls `tool` with `arguments`, waiting at most `timeout`.
    pub fn call(
        &self,
        tool: &Offered,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
    ) -> Result<CallToolResult, CallError> {
        let server = self.server_name(tool).to_string();
        let (Some((_, client)), Some(runtime)) = (self.clients.get(tool.server), &self.runtime)
        else {
            return Err(CallError::Server {
                server,
                message: "it is not running".into(),
            });
        };
        let request =
            CallToolRequestParams::new(tool.remote_name.clone()).with_arguments(arguments);
        let answer = block_on(runtime, async {
            tokio::time::timeout(timeout, client.call_tool(request)).await
        });
        match answer {
            Err(_) => Err(CallError::Timeout { server, timeout }),
            Ok(Err(e)) => Err(CallError::Server {
                server,
                message: e.to_string(),
            }),
            Ok(Ok(result)) => Ok(result),
        }
    }
}

/// Runs `future` on the servers' runtime. From a thread inside another runtime (a handler of
/// `catena serve`), where blocking on a runtime is not allowed, it blocks a scoped thread of its
/// own instead.
fn block_on<F: Future + Send>(runtime: &tokio::runtime::Runtime, future: F) -> F::Output
where
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_err() {
        return runtime.block_on(future);
    }
    std::thread::scope(
        |scope| match scope.spawn(|| runtime.block_on(future)).join() {
            Ok(output) => output,
            // The future panicked: pass the panic on, as a direct call would.
            Err(panic) => std::panic::resume_unwind(panic),
        },
    )
}

impl Drop for Servers {
    /// Closes every session (the servers exit when their stdin closes, and are killed after a
    /// few seconds if they do not), then stops the runtime.
    fn drop(&mut self) {
        let mut clients = std::mem::take(&mut self.clients);
        if let Some(runtime) = self.runtime.take() {
            block_on(&runtime, async {
                for (_, client) in &mut clients {
                    let _ = client.close_with_timeout(Duration::from_secs(3)).await;
                }
            });
            // A child's cleanup spawns on the current runtime: drop them inside this one.
            let entered = runtime.enter();
            drop(clients);
            drop(entered);
            // Dropping a runtime blocks, which a thread of another runtime must not do.
            runtime.shutdown_background();
        }
    }
}

/// Starts one server and lists its tools.
async fn connect(
    entry: &ServerEntry,
    timeout: Duration,
) -> Result<(Client, Vec<rmcp::model::Tool>), String> {
    let mut command = tokio::process::Command::new(&entry.command);
    command
        .args(&entry.args)
        .envs(&entry.env)
        .kill_on_drop(true);
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", entry.command))?;
    if let Some(stderr) = stderr {
        tokio::spawn(log_stderr(entry.name.clone(), stderr));
    }
    let session = async {
        let client = ().serve(transport).await.map_err(|e| e.to_string())?;
        let tools = client.list_all_tools().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((client, tools))
    };
    match tokio::time::timeout(timeout, session).await {
        Err(_) => Err(format!(
            "it did not start and list its tools within {} s",
            timeout.as_secs()
        )),
        Ok(Err(e)) => Err(format!("it did not start a session: {e}")),
        Ok(Ok(started)) => Ok(started),
    }
}

/// What a server writes to stderr goes to Catena's log, not to the user's terminal.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(mut line)) = lines.next_line().await {
        if line.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
        tracing::info!(server = %server, "{line}");
    }
}

/// The tools to offer, named so the model can tell them apart: a tool's own name, or
/// `server.tool` where two servers have a tool of that name.
fn offer(
    clients: &[(String, Client)],
    listed: Vec<(usize, Vec<rmcp::model::Tool>)>,
    problems: &mut Vec<StartProblem>,
) -> Vec<Offered> {
    let mut uses: HashMap<String, usize> = HashMap::new();
    for (_, tools) in &listed {
        for tool in tools {
            *uses.entry(tool.name.to_string()).or_default() += 1;
        }
    }
    let mut offered = Vec::new();
    for (server, tools) in listed {
        let server_name = clients.get(server).map_or("?", |(n, _)| n.as_str());
        for tool in tools {
            let problem = |message: String| StartProblem {
                server: server_name.to_string(),
                message,
            };
            let name = tool.name.to_string();
            if !valid_tool_name(&name) {
                problems.push(problem(format!(
                    "its tool {name:?} has a name MCP does not allow; it is left out"
                )));
                continue;
            }
            let parameters = tool.schema_as_json_value();
            if parameters.to_string().len() > MAX_SCHEMA_BYTES {
                problems.push(problem(format!(
                    "its tool `{name}` has an argument schema over {MAX_SCHEMA_BYTES} bytes; \
                     it is left out"
                )));
                continue;
            }
            if offered.len() == MAX_TOOLS {
                problems.push(problem(format!(
                    "only {MAX_TOOLS} tools are offered to a run; `{name}` and the rest are \
                     left out"
                )));
                return offered;
            }
            let exposed = match uses.get(&name) {
                Some(&n) if n > 1 => format!("{server_name}.{name}"),
                _ => name.clone(),
            };
            let description: String = tool
                .description
                .as_deref()
                .unwrap_or("")
                .chars()
                .take(MAX_DESCRIPTION_CHARS)
                .collect();
            offered.push(Offered {
                spec: ExternalTool {
                    name: exposed,
                    description,
                    parameters,
                },
                server,
                remote_name: name,
                read_only: tool
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
            });
        }
    }
    offered
}

/// MCP's rule for tool names: 1 to 128 of `A-Z a-z 0-9 _ - .`.
fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_mcp() {
        assert!(valid_tool_name("write_file"));
        assert!(valid_tool_name("git.status-2"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name("a b"));
        assert!(!valid_tool_name("</tool_call>"));
        assert!(!valid_tool_name(&"x".repeat(129)));
    }

    #[test]
    fn a_command_that_does_not_exist_is_reported_not_fatal() {
        let entry = ServerEntry {
            name: "ghost".into(),
            command: "/nonexistent/catena-test-mcp-server".into(),
            args: vec![],
            env: Default::default(),
        };
        let (servers, problems) = Servers::start(&[entry], Duration::from_secs(5)).unwrap();
        assert!(servers.offered().is_empty());
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message.contains("cannot start"), "{problems:?}");
    }

    #[test]
    fn a_program_that_is_not_a_server_is_reported_within_its_time() {
        // `cat` echoes the client's own requests back: never a valid answer.
        let entry = ServerEntry {
            name: "echo".into(),
            command: "cat".into(),
            args: vec![],
            env: Default::default(),
        };
        let (servers, problems) = Servers::start(&[entry], Duration::from_secs(3)).unwrap();
        assert!(servers.offered().is_empty());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].server, "echo");
    }
}

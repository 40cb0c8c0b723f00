//! `<tool_call>` in a run: the model's JSON call read, the user asked where the tool may change
//! something, the call sent to its server, and the result turned into an observation.

use crate::config::ServerEntry;
use crate::servers::{Offered, Servers, StartProblem};
use catena_agent::tools::{CallContext, Tool, ToolOutput, cut_observation};
use catena_protocol::fence::fenced_blocks;
use catena_protocol::{ExternalTool, Tag};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest one call may take when the run itself has no deadline.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// A call that waits for the user's yes.
#[derive(Debug, Clone, Copy)]
pub struct PendingCall<'a> {
    pub server: &'a str,
    /// The name the model called it by.
    pub tool: &'a str,
    pub arguments: &'a Map<String, Value>,
}

/// What became of a call that waited for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    Allowed,
    /// The user said no.
    Denied,
    /// No one decided (no answer in time, the run was stopped); says why, for the model.
    Unanswered(String),
}

/// Who decides whether a tool that may change something runs. Asked for every call of a tool
/// that does not declare itself read-only (`readOnlyHint`), since MCP's default is that a tool may
/// write.
pub trait Approver: Send + Sync {
    fn approve(&self, call: &PendingCall<'_>) -> Approval;
}

/// The started servers, shared by every run of a process (`catena serve` starts them once).
pub struct McpServers {
    servers: Servers,
}

impl McpServers {
    /// Starts the servers of `entries`; those that fail are returned as problems, not errors.
    pub fn start(
        entries: &[ServerEntry],
        start_timeout: Duration,
    ) -> std::io::Result<(McpServers, Vec<StartProblem>)> {
        let (servers, problems) = Servers::start(entries, start_timeout)?;
        Ok((McpServers { servers }, problems))
    }

    /// The tools, for [`catena_protocol::Profile::with_external_tools`].
    pub fn specs(&self) -> Vec<ExternalTool> {
        self.servers
            .offered()
            .iter()
            .map(|o| o.spec.clone())
            .collect()
    }

    /// The servers that started, with how many tools each offers.
    pub fn started(&self) -> Vec<(&str, usize)> {
        self.servers.started()
    }
}

/// The external tools as one run has them: the shared servers, answering its `<tool_call>`
/// blocks, and whoever approves its calls.
pub struct ExternalTools {
    shared: Arc<McpServers>,
    approver: Arc<dyn Approver>,
}

impl ExternalTools {
    pub fn new(servers: Arc<McpServers>, approver: Arc<dyn Approver>) -> ExternalTools {
        ExternalTools {
            shared: servers,
            approver,
        }
    }

    fn servers(&self) -> &Servers {
        &self.shared.servers
    }

    fn find(&self, name: &str) -> Option<&Offered> {
        self.servers()
            .offered()
            .iter()
            .find(|o| o.spec.name == name)
    }

    /// The observation for a call, and whether the tool did what was asked.
    fn answer(&self, input: &str, context: &CallContext<'_>) -> (String, bool) {
        let (name, arguments) = match read_call(input) {
            Ok(call) => call,
            Err(problem) => return (problem, false),
        };
        let Some(tool) = self.find(&name) else {
            let names: Vec<&str> = self
                .servers()
                .offered()
                .iter()
                .map(|o| o.spec.name.as_str())
                .collect();
            return (
                format!(
                    "There is no tool named `{name}`. The tools: {}.",
                    names.join(", ")
                ),
                false,
            );
        };
        let server = self.servers().server_name(tool);
        if !tool.read_only {
            let pending = PendingCall {
                server,
                tool: &name,
                arguments: &arguments,
            };
            match self.approver.approve(&pending) {
                Approval::Allowed => {}
                Approval::Denied => {
                    return (
                        format!("The user did not allow this call of `{name}`; it did not run."),
                        false,
                    );
                }
                Approval::Unanswered(why) => {
                    return (format!("This call of `{name}` did not run: {why}."), false);
                }
            }
        }
        let timeout = context
            .limits
            .deadline
            .map_or(CALL_TIMEOUT, |d| {
                d.saturating_duration_since(Instant::now())
            })
            .min(CALL_TIMEOUT);
        match self.servers().call(tool, arguments, timeout) {
            Ok(result) => observe(&result),
            Err(e) => (format!("The call of `{name}` failed: {e}."), false),
        }
    }
}

impl Tool for ExternalTools {
    fn tag(&self) -> Tag {
        Tag::ToolCall
    }

    fn call(&self, input: &str, context: &mut CallContext<'_>) -> ToolOutput {
        let started = Instant::now();
        let (observation, success) = self.answer(input, context);
        ToolOutput {
            observation: cut_observation(&observation),
            success,
            elapsed: started.elapsed(),
        }
    }
}

/// The tool's name and arguments from a `<tool_call>` block: one JSON object, bare or in a
/// ```` ```json ```` fence, its `arguments` an object (or, as some models write it, a string
/// holding one).
fn read_call(input: &str) -> Result<(String, Map<String, Value>), String> {
    const SHAPE: &str =
        "write one JSON object such as {\"name\": \"TOOL NAME\", \"arguments\": {...}}";
    let fences = fenced_blocks(input);
    let text = match fences.as_slice() {
        [only] => only.body,
        _ => input,
    };
    let call: Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("The tool call could not be read ({e}): {SHAPE}."))?;
    let Some(name) = call.get("name").and_then(Value::as_str) else {
        return Err(format!("The tool call names no tool: {SHAPE}."));
    };
    let arguments = match call.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(Value::String(text)) => match serde_json::from_str(text) {
            Ok(Value::Object(arguments)) => arguments,
            _ => return Err(format!("The arguments must be a JSON object: {SHAPE}.")),
        },
        Some(_) => return Err(format!("The arguments must be a JSON object: {SHAPE}.")),
    };
    Ok((name.to_string(), arguments))
}

/// A result as the model reads it: the text parts in order, other parts named.
fn observe(result: &CallToolResult) -> (String, bool) {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[an image, {}]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio, {}]", audio.mime_type),
            ContentBlock::Resource(_) => "[an embedded resource]".to_string(),
            ContentBlock::ResourceLink(link) => format!("[a link to {}]", link.uri),
            _ => "[content this version cannot show]".to_string(),
        })
        .collect();
    let mut text = parts.join("\n");
    if text.trim().is_empty() {
        text = match &result.structured_content {
            Some(value) => value.to_string(),
            None => "The tool returned nothing.".to_string(),
        };
    }
    (text, result.is_error != Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_read_bare_fenced_or_with_string_arguments() {
        let bare = read_call(r#" {"name": "write_file", "arguments": {"path": "a"}} "#).unwrap();
        assert_eq!(bare.0, "write_file");
        assert_eq!(bare.1["path"], "a");
        let fenced =
            read_call("\n```json\n{\"name\": \"list\", \"arguments\": {}}\n```\n").unwrap();
        assert_eq!(fenced.0, "list");
        let string = read_call(r#"{"name": "x", "arguments": "{\"n\": 1}"}"#).unwrap();
        assert_eq!(string.1["n"], 1);
        let none = read_call(r#"{"name": "x"}"#).unwrap();
        assert!(none.1.is_empty());
    }

    #[test]
    fn unreadable_calls_say_what_to_write() {
        for bad in [
            "write the file please",
            r#"{"arguments": {}}"#,
            r#"{"name": "x", "arguments": [1]}"#,
            r#"{"name": "x", "arguments": "not json"}"#,
        ] {
            let problem = read_call(bad).unwrap_err();
            assert!(problem.contains("\"arguments\": {...}"), "{bad}: {problem}");
        }
    }

    #[test]
    fn results_keep_their_text_and_error_flag() {
        let ok = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(observe(&ok), ("a\nb".to_string(), true));
        let failed = CallToolResult::error(vec![ContentBlock::text("Access denied")]);
        assert_eq!(observe(&failed), ("Access denied".to_string(), false));
        let empty = CallToolResult::success(vec![]);
        assert_eq!(observe(&empty).0, "The tool returned nothing.");
    }
}

//! External tools (an MCP server's, say) in a Chain-of-Agents run: Catena's extension of the
//! protocol (PROTOCOL.md §1, `<tool_call>`). The published checkpoints never learned them, so the
//! prompt describes them the way the Qwen2.5 family's own chat template describes function tools
//! (a JSON line per tool, a call as a JSON object inside `<tool_call>`), which the base models did
//! learn; the result comes back in an `<observation>` like every tool's.

use super::profile::Profile;
use super::tag::Tag;
use serde::Serialize;

/// One tool a run may call through `<tool_call>`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExternalTool {
    /// The name the model writes in its call.
    pub name: String,
    pub description: String,
    /// The JSON Schema of the call's arguments.
    pub parameters: serde_json::Value,
}

impl Profile {
    /// This profile with `tools` offered as well: `<tool_call>` enabled (so `</tool_call>` stops
    /// generation and the call runs) and the tools described after the system message. No tools,
    /// no change: a run without external tools keeps the prompt its checkpoint was trained on.
    pub fn with_external_tools(&self, tools: &[ExternalTool]) -> Profile {
        let mut profile = self.clone();
        if tools.is_empty() {
            return profile;
        }
        if !profile.enables(Tag::ToolCall) {
            profile.tools.push(Tag::ToolCall);
        }
        profile.system = format!("{}\n\n{}", profile.system, describe(tools));
        profile
    }
}

/// The system message's section on external tools.
fn describe(tools: &[ExternalTool]) -> String {
    let lines: Vec<String> = tools
        .iter()
        // Serialising three plain fields cannot fail; a tool that somehow did is left out
        // rather than described wrongly.
        .filter_map(|tool| serde_json::to_string(tool).ok())
        .collect();
    format!(
        "# External tools\n\n\
         Besides the blocks the task describes, you may call the tools listed between <tools> \
         and </tools>, one JSON object each: its name, what it does, and the JSON Schema of its \
         arguments.\n<tools>\n{}\n</tools>\n\n\
         To call one, write a block holding a single JSON object with the tool's name and \
         arguments:\n<tool_call>\n{{\"name\": \"TOOL NAME\", \"arguments\": {{...}}}}\n</tool_call>\n\
         Its result is shown to you inside <observation>...</observation>. A tool that changes \
         something runs only if the user allows it; the observation says when they did not.",
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write_file() -> ExternalTool {
        ExternalTool {
            name: "write_file".into(),
            description: "Write \"text\" to a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }
    }

    #[test]
    fn no_tools_keep_the_trained_prompt() {
        let code = Profile::builtin("code").unwrap();
        assert_eq!(code.with_external_tools(&[]), code);
    }

    #[test]
    fn tools_enable_the_block_and_are_described_as_json() {
        let code = Profile::builtin("code").unwrap();
        let extended = code.with_external_tools(&[write_file()]);
        assert!(extended.enables(Tag::ToolCall));
        assert!(
            extended
                .stop_strings()
                .contains(&"</tool_call>".to_string())
        );
        assert!(extended.system.starts_with(&code.system));
        let line = extended
            .system
            .lines()
            .find(|l| l.contains("write_file"))
            .unwrap();
        let described: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(described["description"], "Write \"text\" to a file");
        assert_eq!(
            described["parameters"]["properties"]["path"]["type"],
            "string"
        );
        assert_eq!(extended.user_template, code.user_template);
    }
}

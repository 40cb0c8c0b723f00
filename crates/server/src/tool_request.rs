//! The function-calling part of a chat request: its tools, `tool_choice`, `response_format`, and
//! the conversation with calls and their results, checked and turned into what the chat template
//! and the grammar need (docs/ARCHITECTURE.md, "Function calling").

use super::error::ApiError;
use catena_chat_format::{
    CallFormat, FormatError, Role, TemplateSource, ToolCall, ToolChoice, ToolSpec, Turn,
    check_tools, response_grammar,
};
use catena_engine_api::Constraint;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;

/// A tool as `/v1/chat/completions` gives it.
#[derive(Debug, Deserialize)]
pub struct ToolParam {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionParam,
}

#[derive(Debug, Deserialize)]
pub struct FunctionParam {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
}

/// `tool_choice`: a mode or `{"type": "function", "function": {"name": ...}}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ToolChoiceParam {
    Mode(String),
    Named { function: NamedFunction },
}

#[derive(Debug, Deserialize)]
pub struct NamedFunction {
    pub name: String,
}

/// `response_format`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaParam },
}

#[derive(Debug, Deserialize)]
pub struct JsonSchemaParam {
    #[serde(default)]
    pub schema: Option<Value>,
}

/// A call in an assistant message of the request.
#[derive(Debug, Deserialize)]
pub struct RequestToolCall {
    pub id: String,
    pub function: RequestFunctionCall,
}

#[derive(Debug, Deserialize)]
pub struct RequestFunctionCall {
    pub name: String,
    pub arguments: String,
}

/// The tools of a request, checked.
pub struct Tooling {
    pub tools: Vec<ToolSpec>,
    pub choice: ToolChoice,
    pub parallel: bool,
    /// `Some(None)`: any JSON object; `Some(Some(schema))`: that schema.
    pub response_schema: Option<Option<Value>>,
}

impl Tooling {
    pub fn check(
        tools: Option<&[ToolParam]>,
        choice: Option<&ToolChoiceParam>,
        parallel: Option<bool>,
        response_format: Option<&ResponseFormat>,
    ) -> Result<Tooling, ApiError> {
        let mut specs = Vec::new();
        for (i, tool) in tools.unwrap_or_default().iter().enumerate() {
            if tool.kind != "function" {
                return Err(ApiError::invalid(format!(
                    "tools[{i}].type is `{}`; only `function` tools are supported.",
                    tool.kind
                ))
                .param("tools"));
            }
            specs.push(ToolSpec {
                name: tool.function.name.clone(),
                description: tool.function.description.clone(),
                parameters: tool
                    .function
                    .parameters
                    .clone()
                    .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
            });
        }
        let choice = match choice {
            None => ToolChoice::Auto,
            Some(ToolChoiceParam::Mode(mode)) => match mode.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => ToolChoice::None,
                "required" => ToolChoice::Required,
                other => {
                    return Err(ApiError::invalid(format!(
                        "`tool_choice` is `{other}`; use `auto`, `none`, `required` or a named function."
                    ))
                    .param("tool_choice"));
                }
            },
            Some(ToolChoiceParam::Named { function }) => ToolChoice::Named(function.name.clone()),
        };
        check_tools(&specs, &choice).map_err(format_error)?;
        let response_schema = match response_format {
            None | Some(ResponseFormat::Text) => None,
            Some(ResponseFormat::JsonObject) => Some(None),
            Some(ResponseFormat::JsonSchema { json_schema }) => {
                let Some(schema) = &json_schema.schema else {
                    return Err(ApiError::invalid(
                        "`response_format.json_schema.schema` is required.",
                    )
                    .param("response_format"));
                };
                Some(Some(schema.clone()))
            }
        };
        Ok(Tooling {
            tools: specs,
            choice,
            // llama-server's default, not OpenAI's: a small model allowed many calls tends to
            // repeat them; a client that wants parallel calls asks for them.
            parallel: parallel.unwrap_or(false),
            response_schema,
        })
    }

    /// Whether calls are read from the answer (tools offered, and not turned off).
    pub fn calls_offered(&self) -> bool {
        !self.tools.is_empty() && self.choice != ToolChoice::None
    }

    /// Whether the prompt needs the model's own template (tools, or a conversation with calls).
    pub fn needs_template(&self, turns: &[Turn]) -> bool {
        self.calls_offered()
            || self.response_schema.is_some()
            || turns
                .iter()
                .any(|t| t.role == Role::Tool || !t.tool_calls.is_empty())
    }

    /// The tools the prompt offers: none where calls are not read (`tool_choice: none`).
    pub fn offered(&self) -> &[ToolSpec] {
        if self.calls_offered() {
            &self.tools
        } else {
            &[]
        }
    }

    /// The grammar the answer follows with this model's template: the response schema's, or
    /// the model's call format's for the tools offered.
    pub fn constraint(&self, template: &TemplateSource) -> Result<Option<Constraint>, ApiError> {
        Ok(match &self.response_schema {
            Some(schema) if !matches!(self.choice, ToolChoice::Required | ToolChoice::Named(_)) => {
                let grammar = response_grammar(schema.as_ref()).map_err(format_error)?;
                Some(Constraint::strict(grammar))
            }
            _ => template
                .call_format()
                .constraint(self.offered(), &self.choice, self.parallel),
        })
    }

    /// How the answer's calls are read, when calls are offered.
    pub fn reader(&self, template: &TemplateSource) -> Option<(CallFormat, Vec<ToolSpec>)> {
        self.calls_offered()
            .then(|| (template.call_format(), self.tools.clone()))
    }
}

/// A request message's role.
pub fn role(i: usize, role: &str) -> Result<Role, ApiError> {
    match role {
        "system" | "developer" => Ok(Role::System),
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "tool" => Ok(Role::Tool),
        other => Err(ApiError::invalid(format!(
            "messages[{i}]: role `{other}` is not supported (system, developer, user, assistant, tool)."
        ))
        .param("messages")),
    }
}

/// An assistant message's calls, as the template takes them.
pub fn calls(i: usize, calls: &[RequestToolCall]) -> Result<Vec<ToolCall>, ApiError> {
    calls
        .iter()
        .enumerate()
        .map(|(j, call)| {
            match serde_json::from_str::<Value>(&call.function.arguments) {
                Ok(Value::Object(_)) => {}
                _ => {
                    return Err(ApiError::invalid(format!(
                        "messages[{i}].tool_calls[{j}].function.arguments is not a JSON object."
                    ))
                    .param("messages"));
                }
            }
            Ok(ToolCall {
                id: call.id.clone(),
                name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
            })
        })
        .collect()
}

/// Every tool message answers a call an earlier assistant message made.
pub fn check_answers(turns: &[Turn]) -> Result<(), ApiError> {
    check_answers_at(turns, |i| format!("messages[{i}].tool_call_id"))
}

/// [`check_answers`], with `answer_at(i)` naming the request's field that gave turn `i`'s call
/// id (the Messages API gives it as a `tool_result` block's `tool_use_id`).
pub fn check_answers_at(
    turns: &[Turn],
    answer_at: impl Fn(usize) -> String,
) -> Result<(), ApiError> {
    let mut made: HashSet<&str> = HashSet::new();
    for (i, turn) in turns.iter().enumerate() {
        made.extend(turn.tool_calls.iter().map(|c| c.id.as_str()));
        if turn.role != Role::Tool {
            continue;
        }
        match &turn.tool_call_id {
            None => {
                return Err(ApiError::invalid(format!(
                    "{} is missing: a tool's result needs the id of the call it answers.",
                    answer_at(i)
                ))
                .param("messages"));
            }
            Some(id) if !made.contains(id.as_str()) => {
                return Err(ApiError::invalid(format!(
                    "{} `{id}` answers no tool call of an earlier assistant message.",
                    answer_at(i)
                ))
                .param("messages"));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A request error from the chat format, OpenAI-style.
pub fn format_error(e: FormatError) -> ApiError {
    match e {
        FormatError::BadTool { param, message } => {
            let param = match param.as_str() {
                "tool_choice" => "tool_choice",
                "response_format" => "response_format",
                "messages" => "messages",
                _ => "tools",
            };
            ApiError::invalid(message).param(param)
        }
        FormatError::Template(message) => ApiError::invalid(format!(
            "The model's chat template cannot render this conversation: {message}"
        ))
        .param("messages"),
        FormatError::BadCall { reason, text } => ApiError::internal(format!(
            "The model wrote a tool call that cannot be used ({reason}). Its text: {text}"
        ))
        .code("invalid_tool_call"),
    }
}

/// A tool given in the flat shape (`name`, `description` and the schema beside `type`: the
/// Responses and Messages APIs) as the nested one Chat Completions uses; `schema` names the field
/// that holds its JSON Schema there (`parameters`, `input_schema`).
pub fn flat_tool(i: usize, tool: &Value, schema: &str) -> Result<ToolParam, ApiError> {
    let field = |name: &str| tool.get(name).cloned().unwrap_or(Value::Null);
    let function = serde_json::from_value(serde_json::json!({
        "name": field("name"),
        "description": field("description"),
        "parameters": field(schema),
    }))
    .map_err(|e| ApiError::invalid(format!("tools[{i}]: {e}")).param("tools"))?;
    Ok(ToolParam {
        kind: "function".into(),
        function,
    })
}

//! How a model family writes tool calls: parsing them back, and the grammar that holds them to
//! their schemas (docs/ARCHITECTURE.md, "Function calling").

use crate::FormatError;
use crate::json::{complete_value_len, field_value_so_far, lark_json, lark_str, string_field};
use crate::tools::{ToolChoice, ToolSpec, with_fixed_spacing};
use catena_engine_api::Constraint;
use serde_json::{Value, json};

/// A family's way of writing calls, read from its chat template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallFormat {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` (Hermes, Qwen2.5, the AFM
    /// checkpoints), one block per call.
    Hermes,
    /// A bare `{"name": ..., "parameters": {...}}` object as the whole answer (Llama 3.x), after
    /// an optional `<|python_tag|>`.
    Llama3,
    /// `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (Mistral v0.3). The marker is a
    /// control token that decoded text leaves out, so a bare array of calls counts too.
    Mistral,
    /// Templates that know no tools: Catena describes the tools in the system message and asks
    /// for `{"tool_calls": [{"name": ..., "arguments": {...}}]}` as the whole answer.
    Json,
}

/// A call as far as the model has written it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCall {
    /// Known once its closing quote is written.
    pub name: Option<String>,
    /// The arguments object's text so far (every later version extends it), or all of it.
    pub arguments: String,
    /// The call is whole: its arguments are a closed JSON value.
    pub complete: bool,
}

/// Generated text split into what the user reads and the calls.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The prose, trimmed; while generating, only what can no longer turn out to be a call.
    pub content: String,
    pub calls: Vec<ParsedCall>,
}

/// Most calls one answer may make when parallel calls are allowed: a small model held to a call
/// format can otherwise repeat calls until its token budget runs out.
const MAX_CALLS: usize = 8;
const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const MISTRAL_MARK: &str = "[TOOL_CALLS]";
const PYTHON_TAG: &str = "<|python_tag|>";

impl CallFormat {
    /// The family a chat template writes calls in.
    pub fn detect(template: &str) -> CallFormat {
        if template.contains(HERMES_OPEN) {
            CallFormat::Hermes
        } else if template.contains(MISTRAL_MARK) {
            CallFormat::Mistral
        } else if template.contains(PYTHON_TAG)
            || (template.contains("<|start_header_id|>") && template.contains("tools"))
        {
            CallFormat::Llama3
        } else {
            CallFormat::Json
        }
    }

    /// The text that opens a call, for a lazy grammar; `None` where a call has no opening mark
    /// that decoded text shows (such formats are only enforced when a call is required).
    pub fn trigger(self) -> Option<&'static str> {
        match self {
            CallFormat::Hermes => Some(HERMES_OPEN),
            CallFormat::Llama3 | CallFormat::Mistral | CallFormat::Json => None,
        }
    }

    /// The key the arguments go under.
    fn arguments_key(self) -> &'static str {
        match self {
            CallFormat::Llama3 => "parameters",
            _ => "arguments",
        }
    }

    /// The constraint for `choice` over `tools`: from the first token when a call is required
    /// (or named), after the trigger when the model may choose; `None` when nothing is enforced.
    pub fn constraint(
        self,
        tools: &[ToolSpec],
        choice: &ToolChoice,
        parallel: bool,
    ) -> Option<Constraint> {
        let offered: Vec<&ToolSpec> = match choice {
            ToolChoice::None => return None,
            ToolChoice::Named(name) => tools.iter().filter(|t| &t.name == name).collect(),
            ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
        };
        if offered.is_empty() {
            return None;
        }
        let forced = !matches!(choice, ToolChoice::Auto);
        let many = parallel && !matches!(choice, ToolChoice::Named(_));
        let mut rules = Vec::new();
        let names: Vec<String> = (0..offered.len()).map(|i| format!("call_{i}")).collect();
        rules.push(format!("call: {}", names.join(" | ")));
        for (rule, tool) in names.iter().zip(&offered) {
            rules.push(format!("{rule}: {}", lark_json(&self.call_schema(tool))));
        }
        let start = match self {
            CallFormat::Hermes => {
                let block = format!(
                    "{} call {}",
                    lark_str(&format!("{HERMES_OPEN}\n")),
                    lark_str(&format!("\n{HERMES_CLOSE}"))
                );
                let more = if many {
                    format!(" ({} {block}){{0,{}}}", lark_str("\n"), MAX_CALLS - 1)
                } else {
                    String::new()
                };
                // A newline may end the calls: a model that writes one after its last call can
                // still stop there instead of being held to open another.
                let tail = format!(" {}?", lark_str("\n"));
                if forced {
                    format!("start: {block}{more}{tail}")
                } else {
                    let rest = format!(
                        "{} call {}",
                        lark_str("\n"),
                        lark_str(&format!("\n{HERMES_CLOSE}"))
                    );
                    format!("start: {rest}{more}{tail}")
                }
            }
            _ if !forced => return None,
            CallFormat::Llama3 => "start: call".to_string(),
            CallFormat::Mistral => {
                let more = if many {
                    format!(" ({} call){{0,{}}}", lark_str(", "), MAX_CALLS - 1)
                } else {
                    String::new()
                };
                format!("start: {} call{more} {}", lark_str("["), lark_str("]"))
            }
            CallFormat::Json => {
                let items: Vec<Value> = offered.iter().map(|t| self.call_schema(t)).collect();
                let mut list = json!({"type": "array", "items": {"anyOf": items}, "minItems": 1});
                if !many {
                    list["maxItems"] = json!(1);
                }
                let schema = with_fixed_spacing(json!({
                    "type": "object",
                    "properties": {"tool_calls": list},
                    "required": ["tool_calls"],
                    "additionalProperties": false,
                }));
                return Some(Constraint::strict(format!(
                    "start: {}\n",
                    lark_json(&schema)
                )));
            }
        };
        let grammar = format!("{start}\n{}\n", rules.join("\n"));
        Some(match (forced, self.trigger()) {
            (false, Some(trigger)) => Constraint::after(trigger, grammar),
            _ => Constraint::strict(grammar),
        })
    }

    /// The schema of one call of `tool`: its name, then its arguments, written with the spacing
    /// the templates use (`{"name": "f", "arguments": {...}}`).
    fn call_schema(self, tool: &ToolSpec) -> Value {
        let mut properties = serde_json::Map::new();
        properties.insert("name".into(), json!({"const": tool.name}));
        properties.insert(self.arguments_key().into(), tool.parameters.clone());
        with_fixed_spacing(json!({
            "type": "object",
            "properties": properties,
            "required": ["name", self.arguments_key()],
            "additionalProperties": false,
        }))
    }

    /// Splits `text` into prose and calls. `finished`: the generation has ended, so nothing is
    /// held back; otherwise the content stops where a call might be starting.
    pub fn parse(self, text: &str, tools: &[ToolSpec], finished: bool) -> Parsed {
        let mut parsed = match self {
            CallFormat::Hermes => parse_hermes(text, finished),
            CallFormat::Llama3 => {
                let body = text.trim_start();
                let body = body.strip_prefix(PYTHON_TAG).unwrap_or(body);
                parse_bare_objects(body, self.arguments_key(), finished)
                    .unwrap_or_else(|| prose(text, finished))
            }
            CallFormat::Mistral => {
                let body = text.trim_start();
                let body = body.strip_prefix(MISTRAL_MARK).unwrap_or(body);
                parse_array(body, finished).unwrap_or_else(|| prose(text, finished))
            }
            // An envelope still being written waits whole, as Mistral's array does: its calls
            // are read when it closes, never guessed from the objects inside it.
            CallFormat::Json if !finished && open_envelope(text) => return Parsed::default(),
            CallFormat::Json => {
                parse_json_envelope(text, finished).unwrap_or_else(|| prose(text, finished))
            }
        };
        if parsed.calls.is_empty() {
            fenced_calls(&mut parsed, text, tools, finished);
        }
        parsed
    }

    /// The finished text's content and calls, every call whole and naming an offered tool.
    pub fn finish(
        self,
        text: &str,
        tools: &[ToolSpec],
    ) -> Result<(String, Vec<(String, String)>), FormatError> {
        let parsed = self.parse(text, tools, true);
        let mut calls = Vec::with_capacity(parsed.calls.len());
        for call in parsed.calls {
            let bad = |reason: &str| FormatError::BadCall {
                reason: reason.to_string(),
                text: text.to_string(),
            };
            let name = call.name.ok_or_else(|| bad("no function name"))?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(bad(&format!("`{name}` is not among the tools")));
            }
            let arguments = call.arguments.trim();
            match serde_json::from_str::<Value>(arguments) {
                Ok(Value::Object(_)) if call.complete => calls.push((name, arguments.to_string())),
                _ => return Err(bad("its arguments are not a JSON object")),
            }
        }
        Ok((parsed.content, calls))
    }
}

/// Text with no call in it; while generating, trailing whitespace and a possible start of a
/// call marker wait.
fn prose(text: &str, finished: bool) -> Parsed {
    Parsed {
        content: settled(text, finished).trim().to_string(),
        calls: Vec::new(),
    }
}

/// The part of `text` that can be shown now: all of it when finished, else up to any tail that
/// could be the start of a call (`<`, `[`, a fence, a JSON object as the whole answer).
fn settled(text: &str, finished: bool) -> &str {
    if finished {
        return text;
    }
    // A whole answer that may be calls: a JSON object or array, maybe after Llama's tag.
    let start = text.trim_start();
    if start.starts_with(['{', '[']) || start.starts_with(PYTHON_TAG) {
        return "";
    }
    let mut end = text.trim_end().len();
    if let Some(fence) = first_json_fence(&text[..end]) {
        end = fence;
    }
    for marker in [HERMES_OPEN, MISTRAL_MARK, PYTHON_TAG, "```"] {
        for cut in (1..marker.len()).rev() {
            if text[..end].ends_with(&marker[..cut]) {
                end -= cut;
                break;
            }
        }
    }
    &text[..end]
}

/// Where the first code fence that may hold a JSON call starts (its info string is `json`,
/// empty, or not written yet). Such a block is only judged when the generation ends.
fn first_json_fence(text: &str) -> Option<usize> {
    let mut at = 0;
    while let Some(found) = text[at..].find("```") {
        let start = at + found;
        at = start + 3;
        let Some(line_end) = text[at..].find('\n') else {
            return Some(start);
        };
        if matches!(text[at..at + line_end].trim(), "" | "json" | "JSON") {
            return Some(start);
        }
        // Another language's block: shown as it comes, skipped to its end.
        match text[at..].find("```") {
            Some(close) => at += close + 3,
            None => return None,
        }
    }
    None
}

fn parse_hermes(text: &str, finished: bool) -> Parsed {
    let Some(first) = text.find(HERMES_OPEN) else {
        return prose(text, finished);
    };
    let mut calls = Vec::new();
    let mut rest = &text[first..];
    while let Some(body) = rest.strip_prefix(HERMES_OPEN) {
        let (inner, after, closed) = match body.find(HERMES_CLOSE) {
            Some(end) => (&body[..end], &body[end + HERMES_CLOSE.len()..], true),
            None => (body, "", false),
        };
        calls.push(call_from_object(
            unfence(inner),
            "arguments",
            closed || finished,
        ));
        rest = after.trim_start();
        if !rest.starts_with(HERMES_OPEN) {
            break;
        }
    }
    Parsed {
        content: text[..first].trim().to_string(),
        calls,
    }
}

/// The JSON inside a block, without the Markdown fence small models put around it.
fn unfence(body: &str) -> &str {
    let body = body.trim();
    let Some(inner) = body.strip_prefix("```") else {
        return body;
    };
    let inner = inner.strip_prefix("json").unwrap_or(inner);
    inner.strip_suffix("```").unwrap_or(inner).trim()
}

/// A call from an object the model wrote (maybe still writing): `{"name": ..., key: {...}}`.
fn call_from_object(object: &str, key: &str, ended: bool) -> ParsedCall {
    let name = string_field(object, "name");
    let (arguments, complete) = match field_value_so_far(object, &[key, "arguments", "parameters"])
    {
        None => (String::new(), false),
        Some(value) if value.starts_with('"') => {
            // Arguments written as a JSON string holding the object: whole or nothing.
            let end = serde_json::Deserializer::from_str(value)
                .into_iter::<String>()
                .next()
                .and_then(Result::ok);
            match end {
                Some(inner) => (inner, true),
                None => (String::new(), false),
            }
        }
        Some(value) => match complete_value_len(value) {
            Some(len) => (value[..len].to_string(), true),
            None => (value.trim_end().to_string(), false),
        },
    };
    ParsedCall {
        name,
        arguments,
        complete: complete && (ended || complete_value_len(object).is_some()),
    }
}

/// One or more bare call objects as the whole answer (`;` or whitespace between them).
fn parse_bare_objects(body: &str, key: &str, finished: bool) -> Option<Parsed> {
    if !body.starts_with('{') {
        return None;
    }
    let mut calls = Vec::new();
    let mut rest = body;
    loop {
        match complete_value_len(rest) {
            Some(len) => {
                let object: Value = serde_json::from_str(&rest[..len]).ok()?;
                object.get("name")?;
                calls.push(call_from_object(&rest[..len], key, true));
                rest = rest[len..]
                    .trim_start()
                    .trim_start_matches(';')
                    .trim_start();
                if rest.is_empty() {
                    break;
                }
                if !rest.starts_with('{') {
                    return None;
                }
            }
            None if finished => return None,
            None => {
                calls.push(call_from_object(rest, key, false));
                break;
            }
        }
    }
    Some(Parsed {
        content: String::new(),
        calls,
    })
}

/// A JSON array of calls as the whole answer; while it is open, nothing is shown.
fn parse_array(body: &str, finished: bool) -> Option<Parsed> {
    if !body.starts_with('[') {
        return None;
    }
    whole_value(body, finished, |value| value.as_array().cloned())
}

/// `{"tool_calls": [...]}` as the whole answer (the format Catena asks templates without tools
/// for).
fn parse_json_envelope(text: &str, finished: bool) -> Option<Parsed> {
    let body = text.trim_start();
    if !body.starts_with('{') {
        return None;
    }
    whole_value(body, finished, |value| {
        value.get("tool_calls")?.as_array().cloned()
    })
}

/// Whether `text` is a `{"tool_calls": ...}` envelope that is not closed yet (its first key
/// written, or as much of it as there is).
fn open_envelope(text: &str) -> bool {
    const KEY: &str = "\"tool_calls\"";
    let Some(inside) = text.trim_start().strip_prefix('{') else {
        return false;
    };
    let inside = inside.trim_start();
    let names_the_key = inside.starts_with(KEY) || KEY.starts_with(inside);
    names_the_key && complete_value_len(text).is_none()
}

/// Calls from the JSON value `body` starts with, once it is closed (`items` finds the list of
/// calls in it); an empty answer while it is still being written.
fn whole_value(
    body: &str,
    finished: bool,
    items: impl FnOnce(&Value) -> Option<Vec<Value>>,
) -> Option<Parsed> {
    let Some(len) = complete_value_len(body) else {
        return (!finished).then(Parsed::default);
    };
    let value: Value = serde_json::from_str(&body[..len]).ok()?;
    let calls = items(&value)?
        .iter()
        .map(call_from_value)
        .collect::<Option<Vec<_>>>()?;
    Some(Parsed {
        content: String::new(),
        calls,
    })
}

fn call_from_value(item: &Value) -> Option<ParsedCall> {
    let name = item.get("name")?.as_str()?.to_string();
    let arguments = item.get("arguments").or_else(|| item.get("parameters"))?;
    let arguments = match arguments {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    Some(ParsedCall {
        name: Some(name),
        arguments,
        complete: true,
    })
}

/// Small models (Qwen2.5-Coder among them) often answer a call as a fenced ```json block, or a
/// bare object, instead of their template's markers. Such a block counts as a call when it names
/// an offered tool and carries arguments; it leaves the content.
fn fenced_calls(parsed: &mut Parsed, text: &str, tools: &[ToolSpec], finished: bool) {
    if tools.is_empty() {
        return;
    }
    // An object naming an offered tool, with arguments (maybe still being written): its raw
    // arguments text is streamed like a marked call's.
    let as_call = |object: &str, closed: bool| -> Option<ParsedCall> {
        let name = string_field(object, "name")?;
        if !tools.iter().any(|t| t.name == name) {
            return None;
        }
        field_value_so_far(object, &["arguments", "parameters"])?;
        if closed && !serde_json::from_str::<Value>(object).is_ok_and(|v| v.is_object()) {
            return None;
        }
        Some(call_from_object(object, "arguments", closed))
    };
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let block = &rest[start + 3..];
        let info_end = block.find('\n').unwrap_or(block.len());
        let inner_start = if matches!(block[..info_end].trim(), "" | "json" | "JSON") {
            info_end
        } else {
            // Another language's block: prose, skipped to its end.
            let Some(end) = block.find("```") else { break };
            content.push_str(&rest[..start + 3 + end + 3]);
            rest = &block[end + 3..];
            continue;
        };
        let (inner, after, closed) = match block[inner_start..].find("```") {
            Some(end) => (
                &block[inner_start..inner_start + end],
                &block[inner_start + end + 3..],
                true,
            ),
            None => (&block[inner_start..], "", false),
        };
        match as_call(inner.trim(), closed || finished) {
            Some(call) => {
                content.push_str(&rest[..start]);
                calls.push(call);
            }
            None => content.push_str(&rest[..rest.len() - after.len()]),
        }
        rest = after;
        if !closed {
            break;
        }
    }
    content.push_str(rest);
    let bare = text.trim();
    if calls.is_empty()
        && bare.starts_with('{')
        && let Some(call) = as_call(bare, finished)
    {
        calls.push(call);
        content.clear();
    }
    if !calls.is_empty() {
        parsed.content = if finished {
            content.trim().to_string()
        } else {
            settled(&content, false).trim().to_string()
        };
        parsed.calls = calls;
    }
}

#[cfg(test)]
mod tests;

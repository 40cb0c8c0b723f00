//! Anthropic's Messages API (`POST /v1/messages`), what Claude Code, Cline and Anthropic's SDKs
//! speak: a `system` prompt, `user` / `assistant` messages of text, `tool_use` and `tool_result`
//! blocks, tools with an `input_schema`, `tool_choice`, structured output (`output_config`), and
//! the event stream in Anthropic's order.
//! Only the shapes are Anthropic's: the conversation becomes the same turns, the tools the same
//! [`Tooling`], and the answer comes through the same path (`openai::submit`) as Chat Completions,
//! with the same template, call parsing and constrained decoding. Errors use Anthropic's shape.

use super::AppState;
use super::error::{AnthropicError, ApiError, ApiJson};
use super::holdback::StopHoldback;
use super::openai::{Answer, CancelOnDrop, Checked, MAX_STOPS, Whole, collect, sampling_of};
use super::openai::{Started, split, submit};
use super::responses::stored_message;
use super::tool_request::{
    self, JsonSchemaParam, NamedFunction, ResponseFormat, ToolChoiceParam, Tooling,
};
use axum::Json;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use catena_chat_format::{CallDelta, CallStream, Role, ToolCall, Turn};
use catena_service::{ChatEvent, ChatUsage, FinishReason};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;

/// A request. Fields this server has no use for (`metadata`, `thinking`, `cache_control` inside
/// blocks, ...) are ignored, as Anthropic ignores what it does not know.
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    /// Required, as in Anthropic's API.
    pub max_tokens: u32,
    pub messages: Vec<MessageParam>,
    /// A string or text blocks.
    #[serde(default)]
    pub system: Option<Value>,
    /// Kept as JSON: server tools (web search, ...) have other shapes and are left out.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoiceRequest>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub stream: bool,
    /// Structured output: `{"format": {"type": "json_schema", "schema": ...}}`.
    #[serde(default)]
    pub output_config: Option<OutputConfig>,
}

#[derive(Debug, Deserialize)]
pub struct OutputConfig {
    #[serde(default)]
    pub format: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct MessageParam {
    pub role: String,
    pub content: MessageContent,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    /// Read one by one, so that an error names the block.
    Blocks(Vec<Value>),
}

/// `tool_choice`: `auto`, `any` (a call, of any tool), `tool` (a call of `name`), or `none`.
#[derive(Debug, Deserialize)]
pub struct ToolChoiceRequest {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub disable_parallel_tool_use: Option<bool>,
}

/// A content block of a message.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<Value>,
        #[serde(default)]
        is_error: bool,
    },
    Image {},
    Document {},
    /// A Claude model's reasoning, sent back by clients; nothing a local model reads.
    Thinking {},
    RedactedThinking {},
    #[serde(other)]
    Other,
}

pub async fn messages(
    State(app): State<Arc<AppState>>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Response, AnthropicError> {
    let ApiJson(request) = body?;
    if request.model != app.catena.model_id() {
        return Err(ApiError::unknown_model(&request.model).into());
    }
    let checked = check(&request)?;
    let (rx, mut answer, guard) =
        submit(&app, checked, Some(request.max_tokens), request.stream).await?;
    answer.id = format!("msg_{}", uuid::Uuid::now_v7().simple());
    if !request.stream {
        let whole = collect(rx, &answer).await?;
        drop(guard);
        return Ok(Json(whole_message(&answer, &whole)?).into_response());
    }
    // The stream starts once the model does (`Started`): a prompt longer than the context is a
    // plain 400, as without streaming.
    let started = Started::wait(rx).await?;
    Ok(Sse::new(event_stream(started, answer, guard))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The request as the checked chat request every API answers through.
fn check(request: &MessagesRequest) -> Result<Checked, ApiError> {
    if request.max_tokens == 0 {
        return Err(ApiError::invalid("`max_tokens` must be at least 1.").param("max_tokens"));
    }
    if request.messages.is_empty() {
        return Err(ApiError::invalid("`messages` must not be empty.").param("messages"));
    }
    let conversation = conversation(&request.messages)?;
    tool_request::check_answers_at(&conversation.turns, |i| {
        conversation.answer_at.get(i).cloned().unwrap_or_default()
    })?;
    let mut turns = conversation.turns;
    if let Some(system) = system_text(request.system.as_ref())? {
        turns.insert(0, Turn::new(Role::System, system));
    }
    let stops = request.stop_sequences.clone().unwrap_or_default();
    if stops.len() > MAX_STOPS {
        return Err(ApiError::invalid(format!(
            "At most {MAX_STOPS} stop sequences are supported."
        ))
        .param("stop_sequences"));
    }
    Ok(Checked {
        messages: turns.iter().map(stored_message).collect(),
        turns,
        tooling: tooling(request)?,
        sampling: sampling_of(
            request.temperature,
            request.top_p,
            request.top_k,
            None,
            (None, None),
        )?,
        max_tokens: request.max_tokens as usize,
        stops,
    })
}

/// The system prompt: a string, or text blocks.
fn system_text(system: Option<&Value>) -> Result<Option<String>, ApiError> {
    let bad = || ApiError::invalid("`system` must be a string or a list of text blocks.");
    match system {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(Value::Array(blocks)) => {
            let texts = blocks
                .iter()
                .map(
                    |block| match serde_json::from_value::<Block>(block.clone()) {
                        Ok(Block::Text { text }) => Ok(text),
                        _ => Err(bad()),
                    },
                )
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(joined(texts)))
        }
        Some(_) => Err(bad()),
    }
}

/// Text blocks as one text. A paragraph break between them: clients send separate pieces as
/// separate blocks (Claude Code sends its reminders so), which would otherwise run together.
fn joined(texts: Vec<String>) -> String {
    texts.join("\n\n")
}

/// The messages as turns, with where each tool result's `tool_use_id` was given.
#[derive(Debug, Default)]
struct Conversation {
    turns: Vec<Turn>,
    /// For each turn, the request field its call id came from (empty when it has none).
    answer_at: Vec<String>,
}

impl Conversation {
    fn push(&mut self, turn: Turn, answer_at: String) {
        self.turns.push(turn);
        self.answer_at.push(answer_at);
    }
}

fn conversation(messages: &[MessageParam]) -> Result<Conversation, ApiError> {
    let mut conversation = Conversation::default();
    for (m, message) in messages.iter().enumerate() {
        let blocks = match &message.content {
            MessageContent::Text(text) => vec![Block::Text { text: text.clone() }],
            MessageContent::Blocks(values) => values
                .iter()
                .enumerate()
                .map(|(b, value)| {
                    serde_json::from_value(value.clone()).map_err(|e| {
                        ApiError::invalid(format!("messages[{m}].content[{b}]: {e}"))
                            .param("messages")
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        match message.role.as_str() {
            "user" => user_turns(m, blocks, &mut conversation)?,
            "assistant" => conversation.push(assistant_turn(m, blocks)?, String::new()),
            other => {
                return Err(ApiError::invalid(format!(
                    "messages[{m}].role is `{other}`; use `user` or `assistant` (the system \
                     prompt goes in `system`)."
                ))
                .param("messages"));
            }
        }
    }
    Ok(conversation)
}

/// Why a block cannot be in a message, when it cannot.
fn refused(m: usize, b: usize, block: &Block, role: &str) -> Option<ApiError> {
    let why = match (block, role) {
        (Block::Image {} | Block::Document {}, _) => {
            "images and documents are not supported; this server reads text only.".to_string()
        }
        (Block::ToolUse { .. }, "user") => {
            "a `tool_use` block belongs in an assistant message.".into()
        }
        (Block::ToolResult { .. }, "assistant") => {
            "a `tool_result` block belongs in a user message.".into()
        }
        (Block::Other, _) => {
            "this content block type is not supported (text, tool_use, tool_result).".into()
        }
        _ => return None,
    };
    Some(ApiError::invalid(format!("messages[{m}].content[{b}]: {why}")).param("messages"))
}

/// A user message: its text as a user turn, each tool result as a tool turn, in their order.
fn user_turns(
    m: usize,
    blocks: Vec<Block>,
    conversation: &mut Conversation,
) -> Result<(), ApiError> {
    let mut text: Vec<String> = Vec::new();
    let mut any_result = false;
    for (b, block) in blocks.into_iter().enumerate() {
        if let Some(error) = refused(m, b, &block, "user") {
            return Err(error);
        }
        match block {
            Block::Text { text: piece } => text.push(piece),
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                if !text.is_empty() {
                    let said = joined(std::mem::take(&mut text));
                    conversation.push(Turn::new(Role::User, said), String::new());
                }
                let mut output = result_text(m, b, content.as_ref())?;
                if is_error {
                    // Templates have no place for the flag; the model reads it in the text.
                    output = format!("Error: {output}");
                }
                let turn = Turn {
                    tool_call_id: Some(tool_use_id),
                    ..Turn::new(Role::Tool, output)
                };
                conversation.push(turn, format!("messages[{m}].content[{b}].tool_use_id"));
                any_result = true;
            }
            _ => {}
        }
    }
    if !text.is_empty() || !any_result {
        conversation.push(Turn::new(Role::User, joined(text)), String::new());
    }
    Ok(())
}

/// A tool result's content: a string, or text blocks.
fn result_text(m: usize, b: usize, content: Option<&Value>) -> Result<String, ApiError> {
    let at = format!("messages[{m}].content[{b}].content");
    let bad = |why: &str| ApiError::invalid(format!("{at}: {why}")).param("messages");
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for part in parts {
                match serde_json::from_value::<Block>(part.clone()) {
                    Ok(Block::Text { text }) => texts.push(text),
                    Ok(Block::Image {} | Block::Document {}) => {
                        return Err(bad(
                            "images and documents are not supported; this server reads text only.",
                        ));
                    }
                    _ => return Err(bad("a tool result's content must be text blocks.")),
                }
            }
            Ok(joined(texts))
        }
        Some(_) => Err(bad("must be a string or a list of text blocks.")),
    }
}

/// An assistant message: its text and its calls.
fn assistant_turn(m: usize, blocks: Vec<Block>) -> Result<Turn, ApiError> {
    let mut text = Vec::new();
    let mut calls = Vec::new();
    for (b, block) in blocks.into_iter().enumerate() {
        if let Some(error) = refused(m, b, &block, "assistant") {
            return Err(error);
        }
        match block {
            Block::Text { text: piece } => text.push(piece),
            Block::ToolUse { id, name, input } => {
                if !input.is_object() {
                    return Err(ApiError::invalid(format!(
                        "messages[{m}].content[{b}].input must be a JSON object."
                    ))
                    .param("messages"));
                }
                calls.push(ToolCall {
                    id,
                    name,
                    arguments: input.to_string(),
                });
            }
            _ => {}
        }
    }
    let content = if text.is_empty() && !calls.is_empty() {
        None
    } else {
        Some(joined(text))
    };
    Ok(Turn {
        role: Role::Assistant,
        content,
        tool_calls: calls,
        tool_call_id: None,
    })
}

/// The tools (`name`, `description`, `input_schema`) and `tool_choice`, checked as Chat
/// Completions' are.
fn tooling(request: &MessagesRequest) -> Result<Tooling, ApiError> {
    let mut tools = Vec::new();
    for (i, tool) in request.tools.iter().flatten().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str);
        if kind.is_some_and(|kind| kind != "custom") {
            // Anthropic's server tools (web search, code execution, ...) run on Anthropic's
            // side; clients send them beside their own tools, so they are left out, not refused.
            tracing::debug!(index = i, kind, "a server tool is left out");
            continue;
        }
        tools.push(tool_request::flat_tool(i, tool, "input_schema")?);
    }
    let choice = request.tool_choice.as_ref();
    let mode = |mode: &str| Some(ToolChoiceParam::Mode(mode.to_string()));
    let param = match choice.map(|c| (c.kind.as_str(), c.name.as_ref())) {
        None | Some(("auto", _)) => None,
        Some(("any", _)) => mode("required"),
        Some(("none", _)) => mode("none"),
        Some(("tool", Some(name))) => Some(ToolChoiceParam::Named {
            function: NamedFunction { name: name.clone() },
        }),
        Some(("tool", None)) => {
            return Err(
                ApiError::invalid("`tool_choice` of type `tool` needs the tool's `name`.")
                    .param("tool_choice"),
            );
        }
        Some((other, _)) => {
            return Err(ApiError::invalid(format!(
                "`tool_choice.type` is `{other}`; use `auto`, `any`, `tool` or `none`."
            ))
            .param("tool_choice"));
        }
    };
    let parallel = choice
        .and_then(|c| c.disable_parallel_tool_use)
        .map(|disable| !disable);
    let format = output_format(request.output_config.as_ref())?;
    Tooling::check(Some(&tools), param.as_ref(), parallel, format.as_ref())
}

/// `output_config.format` as the `response_format` it is: the answer's text held to a schema.
fn output_format(config: Option<&OutputConfig>) -> Result<Option<ResponseFormat>, ApiError> {
    let Some(format) = config
        .and_then(|c| c.format.as_ref())
        .filter(|f| !f.is_null())
    else {
        return Ok(None);
    };
    match (
        format.get("type").and_then(Value::as_str),
        format.get("schema"),
    ) {
        (Some("json_schema"), Some(schema)) => Ok(Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaParam {
                schema: Some(schema.clone()),
            },
        })),
        _ => Err(ApiError::invalid(
            "`output_config.format` must be `{\"type\": \"json_schema\", \"schema\": {...}}`.",
        )
        .param("response_format")),
    }
}

/// A call's id as Anthropic's clients know them (`toolu_...`).
fn tool_use_id(id: &str) -> String {
    format!("toolu_{}", id.strip_prefix("call_").unwrap_or(id))
}

/// Why the answer ended, in Anthropic's words.
fn stop_reason(finish: FinishReason, calls: usize, stop_sequence: Option<&str>) -> &'static str {
    match finish {
        FinishReason::Length => "max_tokens",
        FinishReason::Stop if calls > 0 => "tool_use",
        FinishReason::Stop if stop_sequence.is_some() => "stop_sequence",
        FinishReason::Stop => "end_turn",
    }
}

/// Anthropic counts the prompt tokens read from a cache apart from the others.
fn usage_json(usage: &ChatUsage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens.saturating_sub(usage.cached_tokens),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
    })
}

fn message_json(answer: &Answer, content: Vec<Value>, end: Value, usage: Value) -> Value {
    let mut message = json!({
        "id": answer.id,
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": null,
        "stop_sequence": null,
        "usage": usage,
    });
    if let (Value::Object(message), Value::Object(end)) = (&mut message, end) {
        message.extend(end);
    }
    message
}

fn tool_use_block(call: &ToolCall, input: Value) -> Value {
    json!({"type": "tool_use", "id": tool_use_id(&call.id), "name": call.name, "input": input})
}

/// A whole answer as a message.
fn whole_message(answer: &Answer, whole: &Whole) -> Result<Value, ApiError> {
    let mut content = Vec::new();
    if let Some(text) = whole.content.as_deref().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in &whole.calls {
        // The call reader gives arguments only once they parse as a JSON object.
        let input: Value = serde_json::from_str(&call.arguments)
            .map_err(|e| ApiError::internal(format!("a call's arguments: {e}")))?;
        content.push(tool_use_block(call, input));
    }
    let stop_sequence = whole.stop_sequence.as_deref();
    let end = json!({
        "stop_reason": stop_reason(whole.finish_reason, whole.calls.len(), stop_sequence),
        "stop_sequence": stop_sequence,
    });
    Ok(message_json(answer, content, end, usage_json(&whole.usage)))
}

/// An event: its type on the `event:` line and first in the data, as Anthropic sends them.
fn event(kind: &str, data: Value) -> Result<Event, Infallible> {
    let mut typed = json!({"type": kind});
    if let (Value::Object(typed), Value::Object(data)) = (&mut typed, data) {
        typed.extend(data.into_iter().filter(|(key, _)| key != "type"));
    }
    Ok(Event::default().event(kind).data(typed.to_string()))
}

fn error_event(error: &ApiError) -> Result<Event, Infallible> {
    event("error", error.anthropic_body())
}

/// The content blocks being streamed: one open at a time, text or a call.
#[derive(Default)]
struct Blocks {
    /// The open block's index, and whether it is text.
    open: Option<(usize, bool)>,
    count: usize,
    /// Each call's block index.
    calls: Vec<usize>,
}

impl Blocks {
    fn start(&mut self, block: Value, text: bool) -> Vec<(&'static str, Value)> {
        let mut events: Vec<_> = self.stop().into_iter().collect();
        let index = self.count;
        self.count += 1;
        self.open = Some((index, text));
        events.push((
            "content_block_start",
            json!({"index": index, "content_block": block}),
        ));
        events
    }

    fn stop(&mut self) -> Option<(&'static str, Value)> {
        self.open
            .take()
            .map(|(index, _)| ("content_block_stop", json!({"index": index})))
    }

    /// The events one piece of the answer makes.
    fn apply(&mut self, delta: CallDelta) -> Vec<(&'static str, Value)> {
        match delta {
            CallDelta::Content(text) => {
                let mut events = match self.open {
                    Some((_, true)) => Vec::new(),
                    _ => self.start(json!({"type": "text", "text": ""}), true),
                };
                if let Some((index, _)) = self.open {
                    events.push((
                        "content_block_delta",
                        json!({"index": index, "delta": {"type": "text_delta", "text": text}}),
                    ));
                }
                events
            }
            CallDelta::CallStart { id, name, .. } => {
                let call = ToolCall {
                    id,
                    name,
                    arguments: String::new(),
                };
                let events = self.start(tool_use_block(&call, json!({})), false);
                self.calls.push(self.count - 1);
                events
            }
            CallDelta::Arguments { index, fragment } => match self.calls.get(index) {
                Some(&at) => vec![(
                    "content_block_delta",
                    json!({"index": at, "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                )],
                None => Vec::new(),
            },
        }
    }
}

/// Anthropic's event order: `message_start`, each block's start, deltas and stop,
/// `message_delta` (why it ended, the usage), `message_stop`.
fn event_stream(
    mut rx: Started,
    answer: Answer,
    guard: CancelOnDrop,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    let mut reader = answer
        .reader
        .clone()
        .map(|(format, tools)| CallStream::new(format, tools));
    async_stream::stream! {
        let _guard = guard;
        let mut blocks = Blocks::default();
        let usage = usage_json(&ChatUsage::default());
        yield event("message_start", json!({"message": message_json(&answer, Vec::new(), json!({}), usage)}));
        yield event("ping", json!({}));
        let mut holdback = StopHoldback::new(&answer.stops);
        loop {
            let Some(received) = rx.recv().await else {
                yield error_event(&ApiError::internal("the generation ended without a result"));
                break;
            };
            let (deltas, end) = match received {
                ChatEvent::Text(text) => (split(&mut reader, &holdback.push(&text)), None),
                ChatEvent::Done { finish_reason, stopped_by_string, usage } => {
                    let mut last = split(&mut reader, &holdback.finish(stopped_by_string));
                    if let Some(stream) = reader.as_mut() {
                        match stream.finish() {
                            Ok((deltas, _)) => last.extend(deltas),
                            Err(_) if finish_reason == FinishReason::Length => {}
                            Err(e) => {
                                yield error_event(&tool_request::format_error(e));
                                break;
                            }
                        }
                    }
                    (last, Some((finish_reason, usage)))
                }
                ChatEvent::Failed(error) => {
                    yield error_event(&ApiError::from(error));
                    break;
                }
            };
            for delta in deltas {
                for (kind, data) in blocks.apply(delta) {
                    yield event(kind, data);
                }
            }
            if let Some((finish_reason, usage)) = end {
                if let Some((kind, data)) = blocks.stop() {
                    yield event(kind, data);
                }
                let stop_sequence = holdback.matched();
                let reason = stop_reason(finish_reason, blocks.calls.len(), stop_sequence);
                yield event("message_delta", json!({
                    "delta": {"stop_reason": reason, "stop_sequence": stop_sequence},
                    "usage": usage_json(&usage),
                }));
                yield event("message_stop", json!({}));
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> MessagesRequest {
        serde_json::from_value(body).unwrap()
    }

    fn base(extra: Value) -> Value {
        let mut body = json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]});
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
            body.extend(extra);
        }
        body
    }

    fn message(error: ApiError) -> String {
        assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
        error.message
    }

    #[test]
    fn a_plain_request_is_a_system_turn_and_a_user_turn() {
        let checked = check(&request(base(json!({
            "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
            "metadata": {"user_id": "u"},
            "some_future_field": true,
            "temperature": 0.5, "top_k": 40, "stop_sequences": ["END"],
        }))))
        .unwrap();
        assert_eq!(
            checked.turns,
            vec![
                Turn::new(Role::System, "Be brief.\n\nBe kind."),
                Turn::new(Role::User, "Hi")
            ]
        );
        assert_eq!(checked.messages.len(), 2);
        assert_eq!(checked.max_tokens, 64);
        assert_eq!(checked.stops, ["END"]);
        assert_eq!(checked.sampling.temperature, 0.5);
        assert_eq!(checked.sampling.top_k, 40);
        assert!(!checked.tooling.needs_template(&checked.turns));
    }

    #[test]
    fn max_tokens_is_required_and_positive() {
        let missing = serde_json::from_value::<MessagesRequest>(
            json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}),
        );
        assert!(missing.unwrap_err().to_string().contains("max_tokens"));
        let zero = check(&request(base(json!({"max_tokens": 0}))))
            .err()
            .unwrap();
        assert!(message(zero).contains("max_tokens"));
    }

    #[test]
    fn tool_use_and_tool_result_blocks_become_calls_and_tool_turns() {
        let checked = check(&request(base(json!({
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "...", "signature": "s"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22 C"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                     "content": [{"type": "text", "text": "no clock"}, {"type": "text", "text": "here"}]},
                    {"type": "text", "text": "Thanks."},
                ]},
            ],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                      {"name": "get_time", "description": "The time.", "input_schema": {"type": "object"}}],
        }))))
        .unwrap();
        let call = |id: &str, name: &str, arguments: &str| ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        let result = |id: &str, text: &str| Turn {
            tool_call_id: Some(id.into()),
            ..Turn::new(Role::Tool, text)
        };
        assert_eq!(
            checked.turns,
            vec![
                Turn::new(Role::User, "Weather in Paris?"),
                Turn {
                    tool_calls: vec![
                        call("toolu_1", "get_weather", r#"{"city":"Paris"}"#),
                        call("toolu_2", "get_time", "{}"),
                    ],
                    ..Turn::new(Role::Assistant, "Let me look.")
                },
                result("toolu_1", "22 C"),
                result("toolu_2", "Error: no clock\n\nhere"),
                Turn::new(Role::User, "Thanks."),
            ]
        );
        assert!(checked.tooling.needs_template(&checked.turns));
        assert_eq!(checked.tooling.tools.len(), 2);
        assert_eq!(
            checked.tooling.tools[1].description.as_deref(),
            Some("The time.")
        );
    }

    #[test]
    fn an_assistant_message_of_calls_only_has_no_content() {
        let turn = assistant_turn(
            1,
            vec![Block::ToolUse {
                id: "toolu_1".into(),
                name: "f".into(),
                input: json!({}),
            }],
        )
        .unwrap();
        assert_eq!(turn.content, None);
        assert_eq!(turn.tool_calls.len(), 1);
    }

    #[test]
    fn a_tool_result_answering_nothing_is_named() {
        let error = check(&request(base(json!({
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nothing", "content": "x"}]},
            ],
        }))))
        .err()
        .unwrap();
        let text = message(error);
        assert!(
            text.contains("messages[2].content[0].tool_use_id `toolu_nothing`"),
            "{text}"
        );
    }

    #[test]
    fn images_and_misplaced_or_unknown_blocks_are_refused_clearly() {
        let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}});
        for (messages, expected) in [
            (
                json!([{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]),
                "messages[0].content[1]: images and documents are not supported",
            ),
            (
                json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [image]}]}]),
                "messages[0].content[0].content: images and documents are not supported",
            ),
            (
                json!([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]),
                "belongs in an assistant message",
            ),
            (
                json!([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]),
                "belongs in a user message",
            ),
            (
                json!([{"role": "user", "content": [{"type": "hologram"}]}]),
                "not supported",
            ),
            (
                json!([{"role": "user", "content": [{"type": "text", "text": "x"}, {"text": "y"}]}]),
                "messages[0].content[1]: missing field `type`",
            ),
            (
                json!([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}]),
                "input must be a JSON object",
            ),
            (
                json!([{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]),
                "missing field `id`",
            ),
            (
                json!([{"role": "system", "content": "x"}]),
                "use `user` or `assistant`",
            ),
            (json!([]), "must not be empty"),
        ] {
            let error = check(&request(base(json!({"messages": messages})))).err();
            let text = message(error.unwrap_or_else(|| panic!("accepted: {messages}")));
            assert!(text.contains(expected), "{text:?} lacks {expected:?}");
        }
        let system = check(&request(base(json!({"system": [{"type": "image"}]}))))
            .err()
            .unwrap();
        assert!(message(system).contains("`system`"));
    }

    #[test]
    fn tool_choice_maps_onto_the_shared_choices() {
        let tools = json!([
            {"name": "get_weather", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        ]);
        let tooling_of = |choice: Value| {
            let mut body = base(json!({"tools": tools}));
            if !choice.is_null() {
                body["tool_choice"] = choice;
            }
            tooling(&request(body))
        };
        use catena_chat_format::ToolChoice;
        let auto = tooling_of(Value::Null).unwrap();
        // The server tool is left out.
        assert_eq!(auto.tools.len(), 1);
        assert_eq!(auto.choice, ToolChoice::Auto);
        assert!(!auto.parallel, "one call unless asked for more");
        assert_eq!(
            tooling_of(json!({"type": "auto"})).unwrap().choice,
            ToolChoice::Auto
        );
        assert_eq!(
            tooling_of(json!({"type": "any"})).unwrap().choice,
            ToolChoice::Required
        );
        assert_eq!(
            tooling_of(json!({"type": "none"})).unwrap().choice,
            ToolChoice::None
        );
        let named = tooling_of(json!({"type": "tool", "name": "get_weather"})).unwrap();
        assert_eq!(named.choice, ToolChoice::Named("get_weather".into()));
        assert!(
            tooling_of(json!({"type": "auto", "disable_parallel_tool_use": false}))
                .unwrap()
                .parallel
        );
        assert!(
            !tooling_of(json!({"type": "any", "disable_parallel_tool_use": true}))
                .unwrap()
                .parallel
        );
        for (choice, expected) in [
            (
                json!({"type": "tool", "name": "no_such_tool"}),
                "no_such_tool",
            ),
            (json!({"type": "tool"}), "needs the tool's `name`"),
            (json!({"type": "sometimes"}), "`sometimes`"),
        ] {
            let text = message(tooling_of(choice).err().unwrap());
            assert!(text.contains(expected), "{text:?} lacks {expected:?}");
        }
        let broken = request(base(
            json!({"tools": [{"name": "broken_tool", "input_schema": {"type": "banana"}}]}),
        ));
        let text = message(tooling(&broken).err().unwrap());
        assert!(
            text.contains("tools[0]") && text.contains("banana"),
            "{text}"
        );
        let none = request(base(json!({"tool_choice": {"type": "any"}})));
        assert!(message(tooling(&none).err().unwrap()).contains("no `tools`"));
    }

    #[test]
    fn output_config_holds_the_text_to_a_schema() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let checked = check(&request(base(json!({
            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": schema}},
        }))))
        .unwrap();
        assert_eq!(checked.tooling.response_schema, Some(Some(schema)));
        assert!(checked.tooling.needs_template(&checked.turns));
        let effort_only =
            check(&request(base(json!({"output_config": {"effort": "low"}})))).unwrap();
        assert_eq!(effort_only.tooling.response_schema, None);
        let bad = check(&request(base(
            json!({"output_config": {"format": {"type": "xml"}}}),
        )));
        assert!(message(bad.err().unwrap()).contains("output_config.format"));
    }

    #[test]
    fn answers_read_as_anthropic_messages() {
        assert_eq!(tool_use_id("call_0123abcd"), "toolu_0123abcd");
        assert_eq!(tool_use_id("a1B2c3D4e"), "toolu_a1B2c3D4e");
        assert_eq!(stop_reason(FinishReason::Length, 1, None), "max_tokens");
        assert_eq!(stop_reason(FinishReason::Stop, 1, None), "tool_use");
        assert_eq!(
            stop_reason(FinishReason::Stop, 0, Some("END")),
            "stop_sequence"
        );
        assert_eq!(stop_reason(FinishReason::Stop, 0, None), "end_turn");
        let answer = Answer {
            id: "msg_1".into(),
            model: "m".into(),
            created: 0,
            stops: Vec::new(),
            reader: None,
        };
        let whole = Whole {
            content: Some("Calling.".into()),
            calls: vec![ToolCall {
                id: "call_9".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            }],
            finish_reason: FinishReason::Stop,
            stop_sequence: None,
            usage: ChatUsage {
                prompt_tokens: 30,
                cached_tokens: 10,
                completion_tokens: 5,
            },
        };
        assert_eq!(
            whole_message(&answer, &whole).unwrap(),
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [
                    {"type": "text", "text": "Calling."},
                    {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Paris"}},
                ],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 10, "output_tokens": 5},
            })
        );
    }

    #[test]
    fn streamed_blocks_open_and_close_in_order() {
        let mut blocks = Blocks::default();
        let mut events = Vec::new();
        for delta in [
            CallDelta::Content("Let".into()),
            CallDelta::Content(" me.".into()),
            CallDelta::CallStart {
                index: 0,
                id: "call_a".into(),
                name: "f".into(),
            },
            CallDelta::Arguments {
                index: 0,
                fragment: "{\"x\":".into(),
            },
            CallDelta::Arguments {
                index: 0,
                fragment: "1}".into(),
            },
            CallDelta::CallStart {
                index: 1,
                id: "call_b".into(),
                name: "g".into(),
            },
            CallDelta::Arguments {
                index: 1,
                fragment: "{}".into(),
            },
        ] {
            events.extend(blocks.apply(delta));
        }
        events.extend(blocks.stop());
        let shape: Vec<String> = events
            .iter()
            .map(|(kind, data)| {
                let what = data["delta"]["type"]
                    .as_str()
                    .or(data["content_block"]["type"].as_str())
                    .unwrap_or("");
                format!("{kind}:{}:{what}", data["index"])
            })
            .collect();
        assert_eq!(
            shape,
            [
                "content_block_start:0:text",
                "content_block_delta:0:text_delta",
                "content_block_delta:0:text_delta",
                "content_block_stop:0:",
                "content_block_start:1:tool_use",
                "content_block_delta:1:input_json_delta",
                "content_block_delta:1:input_json_delta",
                "content_block_stop:1:",
                "content_block_start:2:tool_use",
                "content_block_delta:2:input_json_delta",
                "content_block_stop:2:",
            ]
        );
        assert_eq!(events[4].1["content_block"]["id"], "toolu_a");
        assert_eq!(events[4].1["content_block"]["input"], json!({}));
        assert_eq!(events[6].1["delta"]["partial_json"], "1}");
        assert_eq!(blocks.calls, [1, 2]);
    }
}

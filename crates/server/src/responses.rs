//! OpenAI's Responses API (`POST /v1/responses`), what Codex CLI and the Agents SDK speak: input
//! items (messages, `function_call`, `function_call_output`), function tools, `text.format`,
//! streaming events, and `previous_response_id`, answered from the conversations kept in the
//! store, so a client continues without sending the conversation again. It answers through the
//! same path as Chat Completions (`openai::submit`).
//!
//! A conversation the store cannot keep (a full disk) is held in memory instead, the last few of
//! them, so a client continuing it still can while this server runs.

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::holdback::StopHoldback;
use super::openai::{Answer, CancelOnDrop, Checked, Started, collect, sampling_of, split, submit};
use super::tool_request::{self, ResponseFormat, ToolChoiceParam, Tooling};
use axum::Json;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use catena_chat_format::{CallDelta, CallStream, Role, ToolCall, Turn};
use catena_engine_api::ChatMessage;
use catena_service::{ChatEvent, ChatUsage, FinishReason};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc;

#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    pub model: String,
    pub input: Input,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub text: Option<TextParam>,
    /// Server-side state Catena does not keep (a stored conversation or prompt, a response
    /// left to run in the background and polled for): refused when given, since leaving them
    /// out would answer a different request.
    #[serde(default)]
    pub conversation: Option<Value>,
    #[serde(default)]
    pub prompt: Option<Value>,
    #[serde(default)]
    pub background: Option<bool>,
    /// Refused when it asks for log-probabilities, which Catena does not return.
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    /// Extra output to include; refused when it asks for log-probabilities.
    #[serde(default)]
    pub include: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Deserialize)]
pub struct TextParam {
    #[serde(default)]
    pub format: Option<Value>,
}

pub async fn responses(
    State(app): State<Arc<AppState>>,
    ApiJson(request): ApiJson<ResponsesRequest>,
) -> Result<Response, ApiError> {
    if request.model != app.catena.model_id() {
        return Err(ApiError::unknown_model(&request.model));
    }
    refuse_unsupported(&request)?;
    let mut turns = match &request.previous_response_id {
        None => Vec::new(),
        Some(id) => earlier(&app, id)?,
    };
    // Instructions are this request's alone (they are not carried to the next one).
    let kept_from = turns.len();
    turns.extend(items(&request.input)?);
    tool_request::check_answers(&turns)?;
    let mut prompt_turns = turns.clone();
    if let Some(instructions) = &request.instructions {
        prompt_turns.insert(0, Turn::new(Role::System, instructions.clone()));
    }
    let tooling = tooling(&request)?;
    let max_tokens = match request.max_output_tokens {
        Some(0) => {
            return Err(ApiError::invalid("`max_output_tokens` must be at least 1.")
                .param("max_output_tokens"));
        }
        Some(n) => n as usize,
        None => usize::MAX,
    };
    let checked = Checked {
        messages: prompt_turns.iter().map(stored_message).collect(),
        turns: prompt_turns,
        tooling,
        sampling: sampling_of(request.temperature, request.top_p, None, None, (None, None))?,
        max_tokens,
        stops: Vec::new(),
    };
    let (rx, mut answer, guard) =
        submit(&app, checked, request.max_output_tokens, request.stream).await?;
    answer.id = format!("resp_{}", uuid::Uuid::now_v7().simple());
    let record = Record {
        app: app.clone(),
        store: request.store.unwrap_or(true),
        turns,
        echo: echo(&request),
        kept_from,
    };
    if request.stream {
        let started = Started::wait(rx).await?;
        Ok(Sse::new(event_stream(started, answer, record, guard))
            .keep_alive(KeepAlive::default())
            .into_response())
    } else {
        whole(rx, answer, record, guard).await
    }
}

/// The conversation kept for `id`.
fn earlier(app: &AppState, id: &str) -> Result<Vec<Turn>, ApiError> {
    let missing = || {
        ApiError::invalid(format!("Previous response with id `{id}` not found."))
            .param("previous_response_id")
            .code("previous_response_not_found")
    };
    let kept = match app.unkept.get(id) {
        Some(held) => held,
        None => app
            .catena
            .store()
            .response(id)
            .map_err(|e| ApiError::internal(e.to_string()))?
            .ok_or_else(missing)?,
    };
    serde_json::from_str(&kept).map_err(|e| ApiError::internal(format!("a kept response: {e}")))
}

/// Conversations the store failed to keep, newest last; the oldest go past [`Unkept::HELD`]
/// conversations or [`Unkept::HELD_BYTES`] bytes.
#[derive(Default)]
pub(crate) struct Unkept(Mutex<VecDeque<(String, String)>>);

impl Unkept {
    /// Enough for the clients of one desktop to go on; each is a whole conversation.
    const HELD: usize = 32;
    const HELD_BYTES: usize = 64 << 20;

    fn hold(&self, id: &str, conversation: String) {
        let mut held = self.0.lock();
        held.push_back((id.to_string(), conversation));
        let mut bytes: usize = held.iter().map(|(_, c)| c.len()).sum();
        while held.len() > Self::HELD || (bytes > Self::HELD_BYTES && held.len() > 1) {
            if let Some((_, oldest)) = held.pop_front() {
                bytes -= oldest.len();
            }
        }
    }

    fn get(&self, id: &str) -> Option<String> {
        let held = self.0.lock();
        held.iter()
            .find(|(kept, _)| kept == id)
            .map(|(_, c)| c.clone())
    }
}

/// What a request may ask for that Catena does not do, refused rather than ignored (see the
/// fields' comments); hosted tools are the exception, left out in [`tooling`].
fn refuse_unsupported(request: &ResponsesRequest) -> Result<(), ApiError> {
    const LOGPROBS: &str = "Catena's server does not return log-probabilities.";
    let wants_logprobs = |item: &String| item.ends_with("logprobs");
    let refused = if request.conversation.is_some() {
        Some((
            "conversation",
            "Catena's server keeps no conversations by id: send the earlier turns as `input`, \
             or continue with `previous_response_id`.",
        ))
    } else if request.prompt.is_some() {
        Some(("prompt", "Catena's server keeps no stored prompts."))
    } else if request.background == Some(true) {
        Some((
            "background",
            "Catena's server answers in the request (or streams); it keeps no responses to poll.",
        ))
    } else if request.top_logprobs.is_some_and(|n| n > 0) {
        Some(("top_logprobs", LOGPROBS))
    } else if request.include.iter().flatten().any(wants_logprobs) {
        Some(("include", LOGPROBS))
    } else {
        None
    };
    refused.map_or(Ok(()), |(param, why)| {
        Err(ApiError::unsupported(param, why))
    })
}

/// The request's input as turns: a text is one user message; items are messages, calls and
/// their outputs (other item types, such as reasoning summaries, carry nothing the model reads).
fn items(input: &Input) -> Result<Vec<Turn>, ApiError> {
    let items = match input {
        Input::Text(text) => return Ok(vec![Turn::new(Role::User, text.clone())]),
        Input::Items(items) => items,
    };
    let mut turns: Vec<Turn> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let bad = |what: &str| ApiError::invalid(format!("input[{i}]: {what}")).param("input");
        let field = |name: &str| item.get(name).and_then(Value::as_str);
        match field("type").unwrap_or("message") {
            "message" => {
                let role = tool_request::role(
                    i,
                    field("role").ok_or_else(|| bad("a message needs a `role`."))?,
                )?;
                if role == Role::Tool {
                    return Err(bad(
                        "use a `function_call_output` item for a tool's result.",
                    ));
                }
                turns.push(Turn::new(
                    role,
                    content_text(item.get("content"))
                        .map_err(|e| bad(&e))?
                        .ok_or_else(|| bad("a message's `content` must be text or text parts."))?,
                ));
            }
            "function_call" => {
                let call = ToolCall {
                    id: field("call_id")
                        .ok_or_else(|| bad("a `function_call` needs a `call_id`."))?
                        .to_string(),
                    name: field("name")
                        .ok_or_else(|| bad("a `function_call` needs a `name`."))?
                        .to_string(),
                    arguments: field("arguments").unwrap_or("{}").to_string(),
                };
                if !serde_json::from_str::<Value>(&call.arguments).is_ok_and(|v| v.is_object()) {
                    return Err(bad(
                        "a `function_call`'s `arguments` must be a JSON object.",
                    ));
                }
                match turns.last_mut() {
                    Some(last) if last.role == Role::Assistant => last.tool_calls.push(call),
                    _ => turns.push(Turn {
                        role: Role::Assistant,
                        content: None,
                        tool_calls: vec![call],
                        tool_call_id: None,
                    }),
                }
            }
            "function_call_output" => {
                let output = match item.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => content_text(Some(other))
                        .map_err(|e| bad(&e))?
                        .unwrap_or_else(|| other.to_string()),
                    None => return Err(bad("a `function_call_output` needs an `output`.")),
                };
                turns.push(Turn {
                    tool_call_id: Some(
                        field("call_id")
                            .ok_or_else(|| bad("a `function_call_output` needs a `call_id`."))?
                            .to_string(),
                    ),
                    ..Turn::new(Role::Tool, output)
                });
            }
            _ => {}
        }
    }
    if turns.is_empty() {
        return Err(ApiError::invalid("`input` holds no message.").param("input"));
    }
    Ok(turns)
}

/// A message's text: a string, or the text of its `input_text` / `output_text` parts. An
/// image, file or audio part is an error, not left out: the model would answer as if it had
/// seen nothing (Chat Completions and the Messages API refuse them the same way).
fn content_text(content: Option<&Value>) -> Result<Option<String>, String> {
    let parts = match content {
        None => return Ok(None),
        Some(Value::String(text)) => return Ok(Some(text.clone())),
        Some(Value::Array(parts)) => parts,
        Some(_) => return Ok(None),
    };
    let mut text = String::new();
    for part in parts {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        if matches!(kind, "input_image" | "input_file" | "input_audio") {
            return Err(format!(
                "content of type `{kind}` is not supported; this server reads text only."
            ));
        }
        if let Some(piece) = part.get("text").and_then(Value::as_str) {
            text.push_str(piece);
        }
    }
    Ok(Some(text))
}

/// The Responses API's flat function tools and choices, checked as Chat Completions' are.
fn tooling(request: &ResponsesRequest) -> Result<Tooling, ApiError> {
    let mut tools = Vec::new();
    for (i, tool) in request.tools.iter().flatten().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            // Hosted and free-form tools (web search, `custom`, `namespace`) have no local
            // counterpart here; clients such as Codex send them beside their function tools, so
            // they are left out rather than refused.
            tracing::debug!(index = i, kind, "a non-function tool is left out");
            continue;
        }
        tools.push(tool_request::flat_tool(i, tool, "parameters")?);
    }
    let choice = match &request.tool_choice {
        None => None,
        Some(Value::String(mode)) => Some(ToolChoiceParam::Mode(mode.clone())),
        Some(named) => match named.get("name").and_then(Value::as_str) {
            Some(name) => Some(ToolChoiceParam::Named {
                function: tool_request::NamedFunction {
                    name: name.to_string(),
                },
            }),
            None => {
                return Err(
                    ApiError::invalid("`tool_choice` must be a mode or name a function.")
                        .param("tool_choice"),
                );
            }
        },
    };
    let format = match request.text.as_ref().and_then(|t| t.format.as_ref()) {
        None => None,
        Some(format) => Some(match format.get("type").and_then(Value::as_str) {
            Some("text") => ResponseFormat::Text,
            Some("json_object") => ResponseFormat::JsonObject,
            Some("json_schema") => ResponseFormat::JsonSchema {
                json_schema: tool_request::JsonSchemaParam {
                    schema: format.get("schema").cloned(),
                },
            },
            _ => {
                return Err(ApiError::invalid(
                    "`text.format.type` must be `text`, `json_object` or `json_schema`.",
                )
                .param("text"));
            }
        }),
    };
    Tooling::check(
        Some(&tools),
        choice.as_ref(),
        request.parallel_tool_calls,
        format.as_ref(),
    )
}

/// A turn as the engine's plain chat message (when no template is needed).
pub(super) fn stored_message(turn: &Turn) -> ChatMessage {
    let role = match turn.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    ChatMessage::new(role, turn.content.as_deref().unwrap_or(""))
}

/// The request's settings, repeated in the response object as OpenAI does.
fn echo(request: &ResponsesRequest) -> Value {
    json!({
        "instructions": request.instructions,
        "tools": request.tools.clone().unwrap_or_default(),
        "tool_choice": request.tool_choice.clone().unwrap_or(json!("auto")),
        "parallel_tool_calls": request.parallel_tool_calls.unwrap_or(false),
        "previous_response_id": request.previous_response_id,
        "max_output_tokens": request.max_output_tokens,
        "temperature": request.temperature.unwrap_or(1.0),
        "top_p": request.top_p.unwrap_or(1.0),
        "store": request.store.unwrap_or(true),
        "text": {"format": request.text.as_ref().and_then(|t| t.format.clone()).unwrap_or(json!({"type": "text"}))},
    })
}

/// What is kept of the answer, and where.
struct Record {
    app: Arc<AppState>,
    store: bool,
    /// The conversation so far (kept turns and this input), without instructions.
    turns: Vec<Turn>,
    echo: Value,
    kept_from: usize,
}

impl Record {
    /// Keeps the conversation with the answer, for a later `previous_response_id`.
    fn keep(&self, id: &str, content: Option<&str>, calls: &[ToolCall]) {
        if !self.store {
            return;
        }
        let mut turns = self.turns.clone();
        turns.push(Turn {
            role: Role::Assistant,
            content: content.map(str::to_string),
            tool_calls: calls.to_vec(),
            tool_call_id: None,
        });
        let kept = serde_json::to_string(&turns).unwrap_or_default();
        if let Err(e) = self.app.catena.store().put_response(id, &kept) {
            tracing::error!(
                error = %e,
                "could not keep a response in the store: it is held in memory while the server runs"
            );
            self.app.unkept.hold(id, kept);
        }
        tracing::debug!(
            id,
            new_turns = turns.len() - self.kept_from,
            "kept a response"
        );
    }
}

/// The output items of an answer.
fn output_items(id: &str, content: Option<&str>, calls: &[ToolCall]) -> Vec<Value> {
    let mut items = Vec::new();
    if let Some(text) = content {
        items.push(message_item(
            &format!("msg_{}", &id[5..]),
            text,
            "completed",
        ));
    }
    for call in calls {
        items.push(call_item(call, &call.arguments, "completed"));
    }
    items
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message", "id": id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

fn call_item(call: &ToolCall, arguments: &str, status: &str) -> Value {
    json!({
        "type": "function_call", "id": format!("fc_{}", call.id.trim_start_matches("call_")),
        "call_id": call.id, "name": call.name, "arguments": arguments, "status": status,
    })
}

fn response_object(
    answer: &Answer,
    record: &Record,
    status: &str,
    output: Vec<Value>,
    usage: Option<&ChatUsage>,
) -> Value {
    let mut object = json!({
        "id": answer.id,
        "object": "response",
        "created_at": answer.created,
        "status": status,
        "model": answer.model,
        "output": output,
        "error": null,
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "metadata": {},
        "usage": usage.map(|u| json!({
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        })),
    });
    if let (Value::Object(object), Value::Object(echo)) = (&mut object, &record.echo) {
        object.extend(echo.clone());
    }
    object
}

fn status_of(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "completed",
        FinishReason::Length => "incomplete",
    }
}

async fn whole(
    rx: mpsc::UnboundedReceiver<ChatEvent>,
    answer: Answer,
    record: Record,
    _guard: CancelOnDrop,
) -> Result<Response, ApiError> {
    let whole = collect(rx, &answer).await?;
    let content = whole.content.as_deref();
    record.keep(&answer.id, content, &whole.calls);
    let output = output_items(&answer.id, content, &whole.calls);
    let status = status_of(whole.finish_reason);
    let object = response_object(&answer, &record, status, output, Some(&whole.usage));
    Ok(Json(object).into_response())
}

/// The streaming events, numbered.
struct Events {
    next: u64,
}

impl Events {
    fn event(&mut self, kind: &str, mut data: Value) -> Result<Event, Infallible> {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.next);
        self.next += 1;
        Ok(Event::default().event(kind).data(data.to_string()))
    }
}

/// The output items being streamed: at most one message, then the calls.
#[derive(Default)]
struct Output {
    /// The message item's index among the items and its text so far, while it is open.
    message: Option<(usize, String)>,
    /// Each call's item index, the call (id, name) and its arguments so far.
    calls: Vec<(usize, ToolCall)>,
    done: Vec<Value>,
    count: usize,
}

fn event_stream(
    mut rx: Started,
    answer: Answer,
    record: Record,
    guard: CancelOnDrop,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    let mut reader = answer
        .reader
        .clone()
        .map(|(format, tools)| CallStream::new(format, tools));
    async_stream::stream! {
        let _guard = guard;
        let mut events = Events { next: 0 };
        let mut out = Output::default();
        let message_id = format!("msg_{}", &answer.id[5..]);
        let started = response_object(&answer, &record, "in_progress", Vec::new(), None);
        yield events.event("response.created", json!({"response": started}));
        yield events.event("response.in_progress", json!({"response": started}));
        let mut holdback = StopHoldback::new(&answer.stops);
        while let Some(received) = rx.recv().await {
            let (deltas, end) = match received {
                ChatEvent::Text(text) => (split(&mut reader, &holdback.push(&text)), None),
                ChatEvent::Done { finish_reason, stopped_by_string, usage } => {
                    let mut last = split(&mut reader, &holdback.finish(stopped_by_string));
                    if let Some(stream) = reader.as_mut() {
                        match stream.finish() {
                            Ok((deltas, _)) => last.extend(deltas),
                            Err(_) if finish_reason == FinishReason::Length => {}
                            Err(e) => {
                                yield events.event("error", tool_request::format_error(e).body()["error"].clone());
                                break;
                            }
                        }
                    }
                    (last, Some((finish_reason, usage)))
                }
                ChatEvent::Failed(error) => {
                    yield events.event("error", ApiError::from(error).body()["error"].clone());
                    break;
                }
            };
            for delta in deltas {
                for (kind, data) in out.apply(delta, &message_id) {
                    yield events.event(kind, data);
                }
            }
            if let Some((finish_reason, usage)) = end {
                for (kind, data) in out.close(&message_id) {
                    yield events.event(kind, data);
                }
                let calls: Vec<ToolCall> = out.calls.iter().map(|(_, c)| c.clone()).collect();
                record.keep(&answer.id, out.text().as_deref(), &calls);
                let status = status_of(finish_reason);
                let done = response_object(&answer, &record, status, out.done.clone(), Some(&usage));
                let kind = if status == "completed" { "response.completed" } else { "response.incomplete" };
                yield events.event(kind, json!({"response": done}));
                break;
            }
        }
    }
}

impl Output {
    fn text(&self) -> Option<String> {
        self.done.iter().find_map(|item| {
            (item["type"] == "message").then(|| {
                item["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
        })
    }

    /// The events one piece of the answer makes.
    fn apply(&mut self, delta: CallDelta, message_id: &str) -> Vec<(&'static str, Value)> {
        let mut events = Vec::new();
        match delta {
            CallDelta::Content(text) => {
                if self.message.is_none() {
                    let index = self.count;
                    self.count += 1;
                    self.message = Some((index, String::new()));
                    events.push(("response.output_item.added", json!({"output_index": index, "item": message_item(message_id, "", "in_progress")})));
                    events.push(("response.content_part.added", json!({"item_id": message_id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
                }
                if let Some((index, so_far)) = self.message.as_mut() {
                    so_far.push_str(&text);
                    events.push(("response.output_text.delta", json!({"item_id": message_id, "output_index": *index, "content_index": 0, "delta": text})));
                }
            }
            CallDelta::CallStart { id, name, .. } => {
                events.extend(self.close_message(message_id));
                let call = ToolCall {
                    id,
                    name,
                    arguments: String::new(),
                };
                let index = self.count;
                self.count += 1;
                events.push((
                    "response.output_item.added",
                    json!({"output_index": index, "item": call_item(&call, "", "in_progress")}),
                ));
                self.calls.push((index, call));
            }
            CallDelta::Arguments { index, fragment } => {
                if let Some((at, call)) = self.calls.get_mut(index) {
                    call.arguments.push_str(&fragment);
                    let item_id = call_item(call, "", "")["id"].clone();
                    events.push((
                        "response.function_call_arguments.delta",
                        json!({"item_id": item_id, "output_index": *at, "delta": fragment}),
                    ));
                }
            }
        }
        events
    }

    fn close_message(&mut self, message_id: &str) -> Vec<(&'static str, Value)> {
        let Some((index, text)) = self.message.take() else {
            return Vec::new();
        };
        let item = message_item(message_id, &text, "completed");
        self.done.push(item.clone());
        vec![
            (
                "response.output_text.done",
                json!({"item_id": message_id, "output_index": index, "content_index": 0, "text": text}),
            ),
            (
                "response.content_part.done",
                json!({"item_id": message_id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}}),
            ),
            (
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            ),
        ]
    }

    /// Ends the open items.
    fn close(&mut self, message_id: &str) -> Vec<(&'static str, Value)> {
        let mut events = self.close_message(message_id);
        for (index, call) in &self.calls {
            let item = call_item(call, &call.arguments, "completed");
            events.push((
                "response.function_call_arguments.done",
                json!({"item_id": item["id"], "output_index": index, "arguments": call.arguments}),
            ));
            events.push((
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            ));
            self.done.push(item);
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unkept_conversations_are_held_up_to_a_bound_the_oldest_going_first() {
        let unkept = Unkept::default();
        for n in 0..=Unkept::HELD {
            unkept.hold(&format!("resp_{n}"), format!("[{n}]"));
        }
        assert_eq!(unkept.get("resp_0"), None);
        assert_eq!(unkept.get("resp_1").as_deref(), Some("[1]"));
        let last = format!("resp_{}", Unkept::HELD);
        assert_eq!(unkept.get(&last), Some(format!("[{}]", Unkept::HELD)));
        // And by size: a conversation over the bound pushes out the others, not itself.
        unkept.hold("resp_big", "x".repeat(Unkept::HELD_BYTES + 1));
        assert_eq!(unkept.get(&last), None);
        assert!(unkept.get("resp_big").is_some());
    }

    fn request(extra: Value) -> ResponsesRequest {
        let mut body = json!({"model": "m", "input": "hi"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn server_state_and_logprobs_are_refused_by_name() {
        for (extra, param) in [
            (json!({"conversation": "conv_1"}), "conversation"),
            (json!({"prompt": {"id": "pmpt_1"}}), "prompt"),
            (json!({"background": true}), "background"),
            (json!({"top_logprobs": 2}), "top_logprobs"),
            (
                json!({"include": ["message.output_text.logprobs"]}),
                "include",
            ),
        ] {
            let error = refuse_unsupported(&request(extra.clone())).unwrap_err();
            assert_eq!(error.param, Some(param), "{extra}");
        }
        // What Codex sends passes.
        let codex = json!({"include": ["reasoning.encrypted_content"], "background": false,
                           "store": false, "prompt_cache_key": "k"});
        assert!(refuse_unsupported(&request(codex)).is_ok());
    }

    #[test]
    fn an_image_or_file_part_is_refused_not_left_out() {
        let with = |part: Value| {
            items(&Input::Items(vec![json!({
                "role": "user",
                "content": [{"type": "input_text", "text": "What is this?"}, part],
            })]))
        };
        for kind in ["input_image", "input_file", "input_audio"] {
            let error = with(json!({"type": kind})).unwrap_err();
            assert!(error.message.contains(kind), "{}", error.message);
        }
        let turns = with(json!({"type": "input_text", "text": " Say."}))
            .ok()
            .unwrap();
        assert_eq!(turns[0].content.as_deref(), Some("What is this? Say."));
        // A tool's output given as parts is held to the same rule.
        let output = items(&Input::Items(vec![
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "c",
                   "output": [{"type": "input_image", "image_url": "data:,"}]}),
        ]));
        assert!(output.is_err());
    }
}

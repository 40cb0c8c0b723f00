//! The OpenAI-compatible API: `GET /v1/models` and `POST /v1/chat/completions`, streamed (SSE)
//! or not, in the shapes the official clients parse.

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::holdback::StopHoldback;
use super::tool_request::{
    self, RequestToolCall, ResponseFormat, ToolChoiceParam, ToolParam, Tooling,
};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use catena_chat_format::{CallDelta, CallFormat, CallStream, Role, TemplateSource, ToolSpec, Turn};
use catena_engine_api::ChatMessage;
use catena_engine_api::SamplingParams;
use catena_service::{ChatEvent, ChatJob, ChatUsage, FinishReason, RenderedPrompt, TemplateError};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// Most stop sequences a request may give (as OpenAI; the Messages API keeps the same bound).
pub(super) const MAX_STOPS: usize = 4;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<RequestMessage>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Not in OpenAI's API; llama.cpp servers accept it too.
    pub top_k: Option<i32>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub stop: Option<Stop>,
    pub seed: Option<i64>,
    pub n: Option<u32>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    /// Refused when asked for: see [`refuse_unsupported`].
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
    /// The deprecated form of `tools` and `tool_choice`: refused with a pointer to them.
    #[serde(default)]
    pub functions: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    pub function_call: Option<serde_json::Value>,
    /// Audio output is refused: the reply would be text whatever was asked.
    #[serde(default)]
    pub modalities: Option<Vec<String>>,
    #[serde(default)]
    pub audio: Option<serde_json::Value>,
    #[serde(default)]
    pub tools: Option<Vec<ToolParam>>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoiceParam>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct RequestMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub tool_calls: Option<Vec<RequestToolCall>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// A checked request, of either API.
pub(super) struct Checked {
    pub messages: Vec<ChatMessage>,
    pub turns: Vec<Turn>,
    pub tooling: Tooling,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub stops: Vec<String>,
}

fn check(request: &ChatRequest) -> Result<Checked, ApiError> {
    if request.messages.is_empty() {
        return Err(ApiError::invalid("`messages` must not be empty.").param("messages"));
    }
    refuse_unsupported(request)?;
    let mut messages = Vec::with_capacity(request.messages.len());
    let mut turns = Vec::with_capacity(request.messages.len());
    for (i, m) in request.messages.iter().enumerate() {
        let role = tool_request::role(i, &m.role)?;
        let content = match &m.content {
            None => None,
            Some(Content::Text(text)) => Some(text.clone()),
            Some(Content::Parts(parts)) => Some(text_of(i, parts)?),
        };
        let tool_calls = match &m.tool_calls {
            Some(calls) if role == Role::Assistant => tool_request::calls(i, calls)?,
            _ => Vec::new(),
        };
        let stored_role = match role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        messages.push(ChatMessage::new(
            stored_role,
            content.as_deref().unwrap_or(""),
        ));
        turns.push(Turn {
            role,
            content,
            tool_calls,
            tool_call_id: m.tool_call_id.clone(),
        });
    }
    tool_request::check_answers(&turns)?;
    let tooling = Tooling::check(
        request.tools.as_deref(),
        request.tool_choice.as_ref(),
        request.parallel_tool_calls,
        request.response_format.as_ref(),
    )?;
    if !tooling.needs_template(&turns) && turns.iter().any(|t| t.role == Role::Tool) {
        return Err(
            ApiError::invalid("`tool` messages need the model's chat template.").param("messages"),
        );
    }
    let sampling = sampling_of(
        request.temperature,
        request.top_p,
        request.top_k,
        request.seed,
        (request.frequency_penalty, request.presence_penalty),
    )?;
    let stops = match &request.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stops.len() > MAX_STOPS {
        return Err(ApiError::invalid(format!(
            "At most {MAX_STOPS} stop sequences are supported."
        ))
        .param("stop"));
    }
    let max_tokens = request
        .max_completion_tokens
        .or(request.max_tokens)
        .map_or(usize::MAX, |n| n as usize);
    if max_tokens == 0 {
        return Err(ApiError::invalid("`max_tokens` must be at least 1.").param("max_tokens"));
    }
    Ok(Checked {
        messages,
        turns,
        tooling,
        sampling,
        max_tokens,
        stops,
    })
}

/// What a request may ask for that Catena does not do, refused rather than ignored: a client
/// that asks for log-probabilities, a logit bias or audio would otherwise take an answer without
/// them for one with them, and one that sends the deprecated `functions` would get no call.
/// Neutral values (`n` = 1, `logprobs: false`, an empty bias, text alone) pass.
fn refuse_unsupported(request: &ChatRequest) -> Result<(), ApiError> {
    const LOGPROBS: &str = "Catena's server does not return log-probabilities.";
    const AUDIO: &str = "Catena's server answers in text only.";
    const FUNCTIONS: &str = "`functions` and `function_call` are the deprecated forms of `tools` \
                             and `tool_choice`, which Catena's server supports: send those.";
    if request.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("Only `n` = 1 is supported.").param("n"));
    }
    let refused = if request.logprobs == Some(true) {
        Some(("logprobs", LOGPROBS))
    } else if request.top_logprobs.is_some_and(|n| n > 0) {
        Some(("top_logprobs", LOGPROBS))
    } else if request.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
        Some(("logit_bias", "Catena's server does not apply `logit_bias`."))
    } else if request.functions.as_ref().is_some_and(|f| !f.is_empty()) {
        Some(("functions", FUNCTIONS))
    } else if request.function_call.as_ref().is_some_and(Value::is_object) {
        Some(("function_call", FUNCTIONS))
    } else if request.modalities.iter().flatten().any(|m| m == "audio") {
        Some(("modalities", AUDIO))
    } else if request.audio.is_some() {
        Some(("audio", AUDIO))
    } else {
        None
    };
    refused.map_or(Ok(()), |(param, why)| {
        Err(ApiError::unsupported(param, why))
    })
}

/// The text of a message given as parts (only text parts are supported).
fn text_of(i: usize, parts: &[ContentPart]) -> Result<String, ApiError> {
    let mut text = String::new();
    for part in parts {
        match (part.kind.as_str(), &part.text) {
            ("text", Some(t)) => text.push_str(t),
            (kind, _) => {
                return Err(ApiError::invalid(format!(
                    "messages[{i}]: content of type `{kind}` is not supported; only text is."
                ))
                .param("messages"));
            }
        }
    }
    Ok(text)
}

/// Sampling settings from a request's fields, checked as OpenAI checks them
/// ([`SamplingParams::out_of_range`]); the penalties are Chat Completions' alone.
pub(super) fn sampling_of(
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
    seed: Option<i64>,
    penalties: (Option<f32>, Option<f32>),
) -> Result<SamplingParams, ApiError> {
    let sampling = SamplingParams {
        temperature: temperature.unwrap_or(1.0),
        top_p: top_p.unwrap_or(1.0),
        top_k: top_k.unwrap_or(0),
        seed: seed.map_or_else(rand_seed, |s| s as u32),
        frequency_penalty: penalties.0.unwrap_or(0.0),
        presence_penalty: penalties.1.unwrap_or(0.0),
    };
    match sampling.out_of_range() {
        None => Ok(sampling),
        Some((field, why)) => Err(ApiError::invalid(why).param(field)),
    }
}

fn rand_seed() -> u32 {
    uuid::Uuid::now_v7().as_u128() as u32
}

pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "catena"})
}

pub async fn list_models(State(app): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_object(&app.catena.model_id())]}))
}

pub async fn get_model(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if id != app.catena.model_id() {
        return Err(ApiError::unknown_model(&id));
    }
    Ok(Json(model_object(&id)))
}

fn usage_json(u: &ChatUsage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

pub async fn chat_completions(
    State(app): State<Arc<AppState>>,
    ApiJson(request): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    if request.model != app.catena.model_id() {
        return Err(ApiError::unknown_model(&request.model));
    }
    let checked = check(&request)?;
    let requested = request.max_completion_tokens.or(request.max_tokens);
    let (rx, mut answer, guard) = submit(&app, checked, requested, request.stream).await?;
    answer.id = format!("chatcmpl-{}", uuid::Uuid::now_v7().simple());
    if request.stream {
        let include_usage = request.stream_options.is_some_and(|o| o.include_usage);
        let stream = chat_stream(Started::wait(rx).await?, answer, include_usage, guard);
        Ok(Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response())
    } else {
        complete(rx, answer, guard).await
    }
}

/// Queues a checked chat request (rendered by the model's template when it needs one): its
/// events, how its answer is read, and the guard that cancels it when dropped. The Chat
/// Completions, Responses and Messages APIs all answer through this.
pub(super) async fn submit(
    app: &AppState,
    checked: Checked,
    requested_max_tokens: Option<u32>,
    stream: bool,
) -> Result<(mpsc::UnboundedReceiver<ChatEvent>, Answer, CancelOnDrop), ApiError> {
    let (prompt, constraint, reader) = if checked.tooling.needs_template(&checked.turns) {
        let template = app.catena.chat_template();
        let template = template.as_ref().as_ref().map_err(|e| {
            ApiError::invalid(format!(
                "Tools need the model's chat template, which cannot be used: {e}"
            ))
            .param("tools")
        })?;
        let constraint = checked.tooling.constraint(template)?;
        let reader = checked.tooling.reader(template);
        let prompt = render(app, template.clone(), &checked).await?;
        (Some(prompt), constraint, reader)
    } else {
        (None, None, None)
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    app.catena.chat(ChatJob {
        messages: checked.messages,
        prompt,
        constraint,
        sampling: checked.sampling,
        max_tokens: checked.max_tokens,
        stops: checked.stops.clone(),
        requested_max_tokens,
        stream,
        reply: tx,
        cancel: cancel.clone(),
    })?;
    let answer = Answer {
        id: String::new(),
        model: app.catena.model_id(),
        created: unix_now(),
        stops: checked.stops,
        reader,
    };
    Ok((rx, answer, CancelOnDrop(cancel)))
}

/// The request's conversation rendered by the model's chat template, in a process of its own
/// (`catena_service::Service::render_template`) and on a blocking thread, as the process lives
/// for tens of milliseconds.
async fn render(
    app: &AppState,
    template: TemplateSource,
    checked: &Checked,
) -> Result<RenderedPrompt, ApiError> {
    let catena = app.catena.clone();
    let turns = checked.turns.clone();
    let tools = checked.tooling.offered().to_vec();
    tokio::task::spawn_blocking(move || catena.render_template(&template, turns, tools))
        .await
        .map_err(|e| ApiError::internal(format!("the chat template's render failed: {e}")))?
        .map_err(|e| match e {
            TemplateError::Format(e) => tool_request::format_error(e),
            TemplateError::Child(reason) => ApiError::internal(reason),
        })
}

/// A generation that has begun: its first event has come, and it was not a refusal.
///
/// A stream waits for it before it starts, so that a request the model cannot begin (a prompt
/// longer than the context) gets its own status and error body, as it would without streaming,
/// and a client can act on it (an agent shortens its conversation) instead of reading a failure
/// inside a stream that began with 200.
pub(super) struct Started {
    first: Option<ChatEvent>,
    rest: mpsc::UnboundedReceiver<ChatEvent>,
}

impl Started {
    pub async fn wait(mut rx: mpsc::UnboundedReceiver<ChatEvent>) -> Result<Started, ApiError> {
        match rx.recv().await {
            Some(ChatEvent::Failed(error)) => Err(error.into()),
            first => Ok(Started { first, rest: rx }),
        }
    }

    /// The next event, the first one included.
    pub async fn recv(&mut self) -> Option<ChatEvent> {
        match self.first.take() {
            Some(first) => Some(first),
            None => self.rest.recv().await,
        }
    }
}

/// Stops the generation when the client is gone (the handler or its stream is dropped).
pub(super) struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What every piece of one answer carries, and how its text is read.
pub(super) struct Answer {
    pub id: String,
    pub model: String,
    pub created: u64,
    pub stops: Vec<String>,
    /// The call format and the offered tools, when the answer may hold calls.
    pub reader: Option<(CallFormat, Vec<ToolSpec>)>,
}

/// The OpenAI shape of a finished call.
fn call_json(call: &catena_chat_format::ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

/// The finish reason OpenAI gives: `tool_calls` when the answer ends in calls.
fn finish_with_calls(finish_reason: FinishReason, calls: usize) -> Value {
    if calls > 0 && finish_reason == FinishReason::Stop {
        json!("tool_calls")
    } else {
        json!(finish_reason)
    }
}

/// A whole answer: its content, calls, why it ended and what it cost.
pub(super) struct Whole {
    pub content: Option<String>,
    pub calls: Vec<catena_chat_format::ToolCall>,
    pub finish_reason: FinishReason,
    /// The stop sequence that ended it, if one did.
    pub stop_sequence: Option<String>,
    pub usage: ChatUsage,
}

/// Waits for the whole answer.
pub(super) async fn collect(
    mut rx: mpsc::UnboundedReceiver<ChatEvent>,
    answer: &Answer,
) -> Result<Whole, ApiError> {
    let mut holdback = StopHoldback::new(&answer.stops);
    let mut text = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            ChatEvent::Text(piece) => text.push_str(&holdback.push(&piece)),
            ChatEvent::Done {
                finish_reason,
                stopped_by_string,
                usage,
            } => {
                text.push_str(&holdback.finish(stopped_by_string));
                let (content, calls) = read_answer(answer, text, finish_reason)?;
                return Ok(Whole {
                    content,
                    calls,
                    finish_reason,
                    stop_sequence: holdback.matched().map(str::to_string),
                    usage,
                });
            }
            ChatEvent::Failed(error) => return Err(error.into()),
        }
    }
    Err(ApiError::internal("the generation ended without a result"))
}

async fn complete(
    rx: mpsc::UnboundedReceiver<ChatEvent>,
    answer: Answer,
    _guard: CancelOnDrop,
) -> Result<Response, ApiError> {
    let whole = collect(rx, &answer).await?;
    let mut message = json!({"role": "assistant", "content": whole.content, "refusal": null});
    if !whole.calls.is_empty() {
        message["tool_calls"] = whole.calls.iter().map(call_json).collect();
    }
    Ok(Json(json!({
        "id": answer.id,
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "system_fingerprint": null,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_with_calls(whole.finish_reason, whole.calls.len()),
        }],
        "usage": usage_json(&whole.usage),
    }))
    .into_response())
}

/// A streamed chunk's `delta` for a piece of the answer.
fn delta_json(delta: CallDelta) -> Value {
    match delta {
        CallDelta::Content(text) => json!({"content": text}),
        CallDelta::CallStart { index, id, name } => json!({"tool_calls": [{
            "index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""},
        }]}),
        CallDelta::Arguments { index, fragment } => json!({"tool_calls": [{
            "index": index, "function": {"arguments": fragment},
        }]}),
    }
}

fn chat_stream(
    mut rx: Started,
    answer: Answer,
    include_usage: bool,
    guard: CancelOnDrop,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    let (id, model, created) = (answer.id, answer.model, answer.created);
    let chunk = move |delta: Value, finish: Option<Value>| {
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut calls = answer
        .reader
        .map(|(format, tools)| CallStream::new(format, tools));
    let event = |value: Value| Ok(Event::default().data(value.to_string()));
    async_stream::stream! {
        let _guard = guard;
        let mut holdback = StopHoldback::new(&answer.stops);
        let mut started = 0usize;
        yield event(chunk(json!({"role": "assistant", "content": ""}), None));
        while let Some(received) = rx.recv().await {
            match received {
                ChatEvent::Text(text) => {
                    let shown = holdback.push(&text);
                    for delta in split(&mut calls, &shown) {
                        started += usize::from(matches!(delta, CallDelta::CallStart { .. }));
                        yield event(chunk(delta_json(delta), None));
                    }
                }
                ChatEvent::Done { finish_reason, stopped_by_string, usage } => {
                    let rest = holdback.finish(stopped_by_string);
                    let mut last = split(&mut calls, &rest);
                    if let Some(stream) = calls.as_mut() {
                        match stream.finish() {
                            Ok((deltas, _)) => last.extend(deltas),
                            Err(_) if finish_reason == FinishReason::Length => {}
                            Err(e) => {
                                yield event(tool_request::format_error(e).body());
                                break;
                            }
                        }
                    }
                    for delta in last {
                        started += usize::from(matches!(delta, CallDelta::CallStart { .. }));
                        yield event(chunk(delta_json(delta), None));
                    }
                    yield event(chunk(json!({}), Some(finish_with_calls(finish_reason, started))));
                    if include_usage {
                        let mut last = chunk(json!({}), None);
                        last["choices"] = json!([]);
                        last["usage"] = usage_json(&usage);
                        yield event(last);
                    }
                    break;
                }
                ChatEvent::Failed(error) => {
                    yield event(ApiError::from(error).body());
                    break;
                }
            }
        }
        yield Ok(Event::default().data("[DONE]"));
    }
}

/// A finished answer's content and calls (content only when no calls were offered).
pub(super) fn read_answer(
    answer: &Answer,
    text: String,
    finish: FinishReason,
) -> Result<(Option<String>, Vec<catena_chat_format::ToolCall>), ApiError> {
    let Some((format, tools)) = &answer.reader else {
        return Ok((Some(text), Vec::new()));
    };
    match CallStream::read_whole(*format, tools.clone(), &text) {
        Ok(finished) => Ok((finished.content, finished.calls)),
        // Cut by a limit inside a call: the text as it is, with `length`.
        Err(_) if finish == FinishReason::Length => Ok((Some(text), Vec::new())),
        Err(e) => Err(tool_request::format_error(e)),
    }
}

/// The pieces `text` settles: through the call reader when calls may come, else as content.
pub(super) fn split(calls: &mut Option<CallStream>, text: &str) -> Vec<CallDelta> {
    match calls {
        Some(stream) => stream.push(text),
        None if text.is_empty() => Vec::new(),
        None => vec![CallDelta::Content(text.to_string())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checked(extra: Value) -> Result<Checked, ApiError> {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        check(&serde_json::from_value(body).unwrap())
    }

    fn refused_param(extra: Value) -> Option<&'static str> {
        checked(extra).err().map(|e| e.param.unwrap())
    }

    #[test]
    fn what_is_not_done_is_refused_by_name_and_neutral_values_pass() {
        for (extra, param) in [
            (json!({"n": 2}), "n"),
            (json!({"logprobs": true}), "logprobs"),
            (json!({"top_logprobs": 3}), "top_logprobs"),
            (json!({"logit_bias": {"15": 5}}), "logit_bias"),
            (json!({"functions": [{"name": "f"}]}), "functions"),
            (json!({"function_call": {"name": "f"}}), "function_call"),
            (json!({"modalities": ["text", "audio"]}), "modalities"),
            (json!({"audio": {"voice": "alloy"}}), "audio"),
            (json!({"frequency_penalty": 2.5}), "frequency_penalty"),
            (json!({"presence_penalty": -3}), "presence_penalty"),
        ] {
            assert_eq!(refused_param(extra.clone()), Some(param), "{extra}");
        }
        for neutral in [
            json!({"n": 1, "logprobs": false, "top_logprobs": 0, "logit_bias": {}}),
            json!({"functions": [], "function_call": "none", "modalities": ["text"]}),
            json!({"audio": null, "prediction": {"type": "content", "content": "x"}}),
        ] {
            assert!(checked(neutral.clone()).is_ok(), "{neutral}");
        }
    }

    #[test]
    fn penalties_reach_the_sampler() {
        let sampling = checked(json!({"frequency_penalty": 0.5, "presence_penalty": -1}))
            .ok()
            .unwrap()
            .sampling;
        assert_eq!(
            (sampling.frequency_penalty, sampling.presence_penalty),
            (0.5, -1.0)
        );
    }
}

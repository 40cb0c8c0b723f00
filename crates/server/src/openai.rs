//! The OpenAI-compatible API: `GET /v1/models` and `POST /v1/chat/completions`, streamed (SSE)
//! or not, in the shapes the official clients parse.

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::holdback::StopHoldback;
use axum::Json;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use catena_engine_api::ChatMessage;
use catena_engine_api::SamplingParams;
use catena_service::{ChatEvent, ChatJob, ChatUsage, FinishReason};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// Most stop sequences a request may give (as OpenAI).
const MAX_STOPS: usize = 4;

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

/// The checked request.
struct Checked {
    messages: Vec<ChatMessage>,
    sampling: SamplingParams,
    max_tokens: usize,
    stops: Vec<String>,
}

fn check(request: &ChatRequest) -> Result<Checked, ApiError> {
    if request.messages.is_empty() {
        return Err(ApiError::invalid("`messages` must not be empty.").param("messages"));
    }
    if request.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("Only `n` = 1 is supported.").param("n"));
    }
    let mut messages = Vec::with_capacity(request.messages.len());
    for (i, m) in request.messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            other => {
                return Err(ApiError::invalid(format!(
                    "messages[{i}]: role `{other}` is not supported (system, developer, user, assistant)."
                ))
                .param("messages"));
            }
        };
        let content = match &m.content {
            None => String::new(),
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => {
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
                text
            }
        };
        messages.push(ChatMessage::new(role, &content));
    }
    let temperature = request.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(
            ApiError::invalid("`temperature` must be between 0 and 2.").param("temperature")
        );
    }
    let top_p = request.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid("`top_p` must be in (0, 1].").param("top_p"));
    }
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
    let seed = match request.seed {
        Some(s) => s as u32,
        None => rand_seed(),
    };
    Ok(Checked {
        messages,
        sampling: SamplingParams {
            temperature,
            top_p,
            top_k: request.top_k.unwrap_or(0),
            seed,
        },
        max_tokens,
        stops,
    })
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
    let (tx, rx) = mpsc::unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    app.catena.chat(ChatJob {
        messages: checked.messages,
        sampling: checked.sampling,
        max_tokens: checked.max_tokens,
        stops: checked.stops.clone(),
        requested_max_tokens: request.max_completion_tokens.or(request.max_tokens),
        stream: request.stream,
        reply: tx,
        cancel: cancel.clone(),
    })?;
    let id = format!("chatcmpl-{}", uuid::Uuid::now_v7().simple());
    let model = app.catena.model_id();
    let created = unix_now();
    let guard = CancelOnDrop(cancel);
    if request.stream {
        let include_usage = request.stream_options.is_some_and(|o| o.include_usage);
        let stream = chat_stream(rx, checked.stops, id, model, created, include_usage, guard);
        Ok(Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response())
    } else {
        complete(rx, &checked.stops, id, model, created, guard).await
    }
}

/// Stops the generation when the client is gone (the handler or its stream is dropped).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

async fn complete(
    mut rx: mpsc::UnboundedReceiver<ChatEvent>,
    stops: &[String],
    id: String,
    model: String,
    created: u64,
    _guard: CancelOnDrop,
) -> Result<Response, ApiError> {
    let mut holdback = StopHoldback::new(stops);
    let mut content = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            ChatEvent::Text(text) => content.push_str(&holdback.push(&text)),
            ChatEvent::Done {
                finish_reason,
                stopped_by_string,
                usage,
            } => {
                content.push_str(&holdback.finish(stopped_by_string));
                return Ok(Json(json!({
                    "id": id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "system_fingerprint": null,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": null},
                        "logprobs": null,
                        "finish_reason": finish_reason,
                    }],
                    "usage": usage_json(&usage),
                }))
                .into_response());
            }
            ChatEvent::Failed(error) => return Err(error.into()),
        }
    }
    Err(ApiError::internal("the generation ended without a result"))
}

fn chat_stream(
    mut rx: mpsc::UnboundedReceiver<ChatEvent>,
    stops: Vec<String>,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    guard: CancelOnDrop,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    let chunk = move |delta: Value, finish: Option<FinishReason>| {
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    async_stream::stream! {
        let _guard = guard;
        let mut holdback = StopHoldback::new(&stops);
        yield Ok(Event::default().data(chunk(json!({"role": "assistant", "content": ""}), None).to_string()));
        while let Some(event) = rx.recv().await {
            match event {
                ChatEvent::Text(text) => {
                    let shown = holdback.push(&text);
                    if !shown.is_empty() {
                        yield Ok(Event::default().data(chunk(json!({"content": shown}), None).to_string()));
                    }
                }
                ChatEvent::Done { finish_reason, stopped_by_string, usage } => {
                    let rest = holdback.finish(stopped_by_string);
                    if !rest.is_empty() {
                        yield Ok(Event::default().data(chunk(json!({"content": rest}), None).to_string()));
                    }
                    yield Ok(Event::default().data(chunk(json!({}), Some(finish_reason)).to_string()));
                    if include_usage {
                        let mut last = chunk(json!({}), None);
                        last["choices"] = json!([]);
                        last["usage"] = usage_json(&usage);
                        yield Ok(Event::default().data(last.to_string()));
                    }
                    break;
                }
                ChatEvent::Failed(error) => {
                    yield Ok(Event::default().data(ApiError::from(error).body().to_string()));
                    break;
                }
            }
        }
        yield Ok(Event::default().data("[DONE]"));
    }
}

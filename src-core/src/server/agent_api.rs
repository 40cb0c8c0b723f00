//! The agent API: start a Chain-of-Agents run, follow its events (SSE, replayed from the store
//! and then live, resumable with `Last-Event-ID`), cancel it, give feedback; list, read and
//! delete sessions; export runs for training.

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::inference::{AgentJob, Job};
use crate::agent::Budgets;
use crate::engine::SamplingParams;
use crate::protocol::Profile;
use crate::store::{
    ExportFormat, Feedback, FeedbackFilter, NewRun, RunEnd, RunKind, RunStatus, StoredEvent, Usage,
};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// A run to start.
#[derive(Debug, Deserialize)]
pub struct StartRun {
    pub task: String,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub prefill: Option<String>,
    /// Continue an existing session.
    #[serde(default)]
    pub session_id: Option<String>,
    pub max_tool_calls: Option<u32>,
    pub max_tokens: Option<usize>,
    /// Seconds.
    pub max_time: Option<f64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub seed: Option<u32>,
}

const DEFAULT_MAX_TOKENS: usize = 8192;

pub async fn start_run(
    State(app): State<Arc<AppState>>,
    ApiJson(start): ApiJson<StartRun>,
) -> Result<Response, ApiError> {
    let task = start.task.trim();
    if task.is_empty() {
        return Err(ApiError::invalid("`task` must not be empty.").param("task"));
    }
    let profile_name = start.profile.as_deref().unwrap_or("math");
    let profile = Profile::builtin(profile_name)
        .map_err(|e| ApiError::invalid(e.to_string()).param("profile"))?;
    let temperature = start.temperature.unwrap_or(0.6);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(
            ApiError::invalid("`temperature` must be between 0 and 2.").param("temperature")
        );
    }
    let max_time = match start.max_time {
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(_) => {
            return Err(
                ApiError::invalid("`max_time` must be a positive number of seconds.")
                    .param("max_time"),
            );
        }
        None => None,
    };
    let sampling = SamplingParams {
        temperature,
        top_p: start.top_p.unwrap_or(0.95),
        top_k: start.top_k.unwrap_or(40),
        seed: start
            .seed
            .unwrap_or_else(|| uuid::Uuid::now_v7().as_u128() as u32),
    };
    let budgets = Budgets {
        max_tool_calls: start.max_tool_calls.unwrap_or(profile.max_tool_calls),
        max_tokens: start.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        max_time,
    };
    let user_prompt = profile.user_message(task);
    let options = json!({
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "seed": sampling.seed,
        "max_tool_calls": budgets.max_tool_calls,
        "max_tokens": budgets.max_tokens,
        "max_time": start.max_time,
        "prefill": start.prefill,
    });
    let run_id = app.store.start_run(&NewRun {
        session: start.session_id.as_deref(),
        kind: RunKind::Agent,
        task,
        profile: Some(&profile.name),
        model: &app.inference.model_id,
        adapter: None,
        options,
        system_prompt: &profile.system,
        user_prompt: &user_prompt,
    })?;
    let cancel = app.live.register(&run_id);
    let job = Job::Agent(AgentJob {
        run_id: run_id.clone(),
        profile,
        user_prompt,
        prefill: start.prefill,
        budgets,
        sampling,
        cancel,
    });
    if let Err(refused) = app.inference.submit(job) {
        app.live.finish(&run_id);
        let _ = app.store.finish_run(
            &run_id,
            &RunEnd {
                status: RunStatus::Failed,
                answer: None,
                stop_reason: None,
                trajectory: None,
                summary: None,
                error: Some(&refused.message),
                usage: Usage::default(),
            },
        );
        return Err(refused);
    }
    let run = app.store.run(&run_id)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "id": run_id,
            "session_id": run.session_id,
            "status": "queued",
            "events_url": format!("/v1/agent/runs/{run_id}/events"),
        })),
    )
        .into_response())
}

pub async fn get_run(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = app.store.run(&id)?;
    let mut value = serde_json::to_value(run).map_err(|e| ApiError::internal(e.to_string()))?;
    value["live"] = json!(app.live.is_live(&id));
    Ok(Json(value))
}

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    /// Resume after this event (as `Last-Event-ID` does).
    pub after: Option<u64>,
}

/// The run's events as SSE: first what is stored, then live ones until the run ends.
pub async fn run_events(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.store.run(&id)?;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or(query.after)
        .unwrap_or(0);
    // Subscribe before reading the store, so nothing falls between the two.
    let live = app.live.subscribe(&id);
    let store = app.store.clone();
    let stream = async_stream::stream! {
        let mut last = after;
        for event in store.events(&id, last).unwrap_or_default() {
            last = event.seq;
            yield Ok::<_, Infallible>(sse_event(&event));
        }
        if let Some(mut live) = live {
            loop {
                match live.recv().await {
                    Ok(event) if event.seq > last => {
                        last = event.seq;
                        yield Ok(sse_event(&event));
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        // Fell behind the broadcast: catch up from the store.
                        for event in store.events(&id, last).unwrap_or_default() {
                            last = event.seq;
                            yield Ok(sse_event(&event));
                        }
                    }
                    Err(RecvError::Closed) => break,
                }
            }
            // Anything stored between the last broadcast and the end.
            for event in store.events(&id, last).unwrap_or_default() {
                yield Ok(sse_event(&event));
            }
        }
    };
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn sse_event(event: &StoredEvent) -> Event {
    let kind = event
        .data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("event");
    Event::default()
        .id(event.seq.to_string())
        .event(kind)
        .data(event.data.to_string())
}

pub async fn cancel_run(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = app.store.run(&id)?;
    if !app.live.cancel(&id) {
        return Err(ApiError {
            status: StatusCode::CONFLICT,
            ..ApiError::invalid(format!(
                "Run `{id}` is not running (it is {}).",
                run.status.as_str()
            ))
        });
    }
    Ok(Json(json!({"id": id, "cancelling": true})))
}

#[derive(Debug, Deserialize)]
pub struct FeedbackBody {
    /// `good`, `bad`, or null to clear.
    pub rating: Option<Feedback>,
    #[serde(default)]
    pub note: Option<String>,
}

pub async fn feedback(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<FeedbackBody>,
) -> Result<Json<Value>, ApiError> {
    app.store
        .set_feedback(&id, body.rating, body.note.as_deref())?;
    let run = app.store.run(&id)?;
    Ok(Json(
        json!({"id": id, "feedback": run.feedback, "feedback_note": run.feedback_note}),
    ))
}

#[derive(Debug, Deserialize)]
pub struct SessionsQuery {
    pub search: Option<String>,
    pub limit: Option<usize>,
}

pub async fn list_sessions(
    State(app): State<Arc<AppState>>,
    Query(query): Query<SessionsQuery>,
) -> Result<Json<Value>, ApiError> {
    let search = query.search.as_deref().filter(|s| !s.trim().is_empty());
    let sessions = app
        .store
        .list_sessions(search, query.limit.unwrap_or(100).min(1000))?;
    Ok(Json(json!({"object": "list", "data": sessions})))
}

pub async fn get_session(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let runs = app.store.session_runs(&id)?;
    Ok(Json(json!({"id": id, "runs": runs})))
}

pub async fn delete_session(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    for run in app.store.session_runs(&id)? {
        app.live.cancel(&run.id);
    }
    app.store.delete_session(&id)?;
    Ok(Json(json!({"id": id, "deleted": true})))
}

#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    pub format: Option<String>,
    pub feedback: Option<String>,
}

pub async fn export(
    State(app): State<Arc<AppState>>,
    Query(query): Query<ExportQuery>,
) -> Result<Response, ApiError> {
    let (format, content_type, name) = match query.format.as_deref().unwrap_or("sft") {
        "sft" => (
            ExportFormat::Sft,
            "application/x-ndjson",
            "catena-sft.jsonl",
        ),
        "alpaca" => (
            ExportFormat::Alpaca,
            "application/json",
            "catena-alpaca.json",
        ),
        other => {
            return Err(ApiError::invalid(format!(
                "Unknown export format `{other}` (sft or alpaca)."
            ))
            .param("format"));
        }
    };
    let filter = match query.feedback.as_deref().unwrap_or("any") {
        "any" => FeedbackFilter::Any,
        "good" => FeedbackFilter::Good,
        "bad" => FeedbackFilter::Bad,
        "rated" => FeedbackFilter::Rated,
        "unrated" => FeedbackFilter::Unrated,
        other => {
            return Err(ApiError::invalid(format!(
                "Unknown feedback filter `{other}` (any, good, bad, rated, unrated)."
            ))
            .param("feedback"));
        }
    };
    let mut body = Vec::new();
    app.store.export(format, filter, &mut body)?;
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response())
}

pub async fn profiles() -> Json<Value> {
    let list: Vec<Value> = Profile::builtin_names()
        .filter_map(|name| Profile::builtin(name).ok())
        .map(|p| {
            json!({
                "name": p.name,
                "description": p.description,
                "tools": p.tools,
                "max_tool_calls": p.max_tool_calls,
            })
        })
        .collect();
    Json(json!({"object": "list", "data": list}))
}

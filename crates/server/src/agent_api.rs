//! The agent API over HTTP: start a Chain-of-Agents run, follow its events (SSE, replayed from
//! the store and then live, resumable with `Last-Event-ID`), answer its questions (may an external
//! tool's call run?), cancel it, give feedback; list, read
//! and delete sessions; export runs for training. The work itself is [`catena_service`]'s.

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::export_body::export_body;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use catena_service::{
    ExportRequest, List, ProfileInfo, RunFeedback, RunView, SessionRuns, StartRun, StartedRun,
    Vote, VoteRequest,
};
use catena_store::{Feedback, SessionInfo, StoredEvent};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

/// A queued run, with where its events are (for clients of the HTTP API; the UI builds the
/// address itself).
#[derive(Serialize)]
struct QueuedRun {
    #[serde(flatten)]
    run: StartedRun,
    events_url: String,
}

pub async fn start_run(
    State(app): State<Arc<AppState>>,
    ApiJson(start): ApiJson<StartRun>,
) -> Result<Response, ApiError> {
    let run = app.catena.start_run(start).await?;
    let events_url = format!("/v1/agent/runs/{}/events", run.id);
    Ok((StatusCode::ACCEPTED, Json(QueuedRun { run, events_url })).into_response())
}

/// The vote over runs of one task (those a request with `samples` started): their answers
/// grouped by the profile's verifier, the largest group first.
pub async fn vote(
    State(app): State<Arc<AppState>>,
    ApiJson(request): ApiJson<VoteRequest>,
) -> Result<Json<Vote>, ApiError> {
    Ok(Json(app.catena.vote(request).await?))
}

pub async fn get_run(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<RunView>, ApiError> {
    Ok(Json(app.catena.run(&id).await?))
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
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or(query.after)
        .unwrap_or(0);
    let events = app
        .catena
        .follow(&id, after)
        .await?
        // An error ends the stream without the end event; clients resume with Last-Event-ID.
        .map(|event| event.map(|event| sse_event(&event)).map_err(StreamBroken));
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The store failed while a stream was being sent.
#[derive(Debug, thiserror::Error)]
#[error("the event stream broke: {}", .0.message)]
struct StreamBroken(catena_service::ServiceError);

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
    app.catena.cancel(&id).await?;
    Ok(Json(json!({"id": id, "cancelling": true})))
}

/// The user's answer to a question a run asked: may the external tool's call run?
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalBody {
    pub allow: bool,
}

pub async fn answer_approval(
    State(app): State<Arc<AppState>>,
    Path((id, ask)): Path<(String, String)>,
    ApiJson(body): ApiJson<ApprovalBody>,
) -> Result<Json<Value>, ApiError> {
    // Questions are numbered; anything else names none that waits.
    let number = ask.parse().unwrap_or(0);
    app.catena.answer_approval(&id, number, body.allow)?;
    Ok(Json(json!({"id": id, "ask": number, "allow": body.allow})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
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
) -> Result<Json<RunFeedback>, ApiError> {
    Ok(Json(
        app.catena
            .feedback(&id, body.rating, body.note.as_deref())
            .await?,
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
) -> Result<Json<List<SessionInfo>>, ApiError> {
    Ok(Json(
        app.catena
            .sessions(query.search.as_deref(), query.limit)
            .await?,
    ))
}

pub async fn get_session(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<SessionRuns>, ApiError> {
    Ok(Json(app.catena.session(&id).await?))
}

pub async fn delete_session(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    app.catena.delete_session(&id).await?;
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
    let request = ExportRequest::parse(query.format.as_deref(), query.feedback.as_deref())?;
    let body = export_body(app.catena.clone(), request).await?;
    Ok((
        [
            (header::CONTENT_TYPE, request.content_type.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", request.file_name),
            ),
        ],
        body,
    )
        .into_response())
}

pub async fn profiles(State(app): State<Arc<AppState>>) -> Json<List<ProfileInfo>> {
    Json(app.catena.profiles())
}

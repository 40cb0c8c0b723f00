//! `agent_run`: a whole Chain-of-Agents run through the service's own path (recorded, queued for
//! the model like a run the web UI starts), followed to its end. The client gets the answer,
//! every tool call with its observation, and the stored run's id; a client that cancels the call
//! cancels the run.

use crate::blocking::service_error;
use catena_service::{Service, StartRun};
use catena_store::StoredEvent;
use futures_util::StreamExt;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, schemars};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// `agent_run`'s input.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AgentRun {
    /// The task, in plain words.
    pub task: String,
    /// The prompt profile: code, math, web, mhqa or all-tools (default: math).
    #[serde(default)]
    pub profile: Option<String>,
    /// Most tool calls in the run (default: the profile's budget).
    #[serde(default)]
    pub max_tool_calls: Option<u32>,
    /// Most tokens the model may generate (default: 8192).
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Most seconds the run may take.
    #[serde(default)]
    pub max_time: Option<f64>,
    /// Sampling temperature, 0 to 2 (default: 0.6); 0 is greedy.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Random seed (default: a new one each run).
    #[serde(default)]
    pub seed: Option<u32>,
}

/// One tool call of the run and what it returned.
#[derive(Debug, Serialize)]
struct ToolCall {
    /// 1-based number of the call in the run.
    index: Option<u64>,
    tool: String,
    input: String,
    observation: Option<String>,
    success: Option<bool>,
}

/// What `agent_run` answers (as structured content, and as its text).
#[derive(Debug, Serialize)]
struct RunResult {
    run_id: String,
    session_id: String,
    /// finished, failed, cancelled or interrupted.
    status: &'static str,
    answer: Option<String>,
    stop_reason: Option<String>,
    error: Option<String>,
    tool_calls: Vec<ToolCall>,
}

pub(crate) async fn run(
    service: Arc<Service>,
    input: AgentRun,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let started = service
        .start_run(StartRun {
            task: input.task,
            profile: input.profile,
            max_tool_calls: input.max_tool_calls,
            max_tokens: input.max_tokens,
            max_time: input.max_time,
            temperature: input.temperature,
            seed: input.seed,
            ..StartRun::default()
        })
        .await
        .map_err(service_error)?;
    let events = service
        .follow(&started.id, 0)
        .await
        .map_err(service_error)?;
    let mut events = std::pin::pin!(events);
    let progress = context.meta.get_progress_token();
    let mut calls: Vec<ToolCall> = Vec::new();
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = context.ct.cancelled() => {
                // The run may have ended meanwhile: then there is nothing to cancel.
                let _ = service.cancel(&started.id).await;
                return Err(ErrorData::internal_error(
                    format!("the call was cancelled, and with it run {}", started.id),
                    None,
                ));
            }
        };
        let Some(event) = event else { break };
        let event = event.map_err(service_error)?;
        if let Some(message) = take_event(&event, &mut calls)
            && let Some(token) = progress.clone()
        {
            let mut note = ProgressNotificationParam::new(token, event.seq as f64);
            note.message = Some(message);
            // Progress is a courtesy: a client that stopped listening still gets the result.
            let _ = context.peer.notify_progress(note).await;
        }
    }
    let view = service.run(&started.id).await.map_err(service_error)?;
    let run = view.run;
    let result = RunResult {
        run_id: run.id,
        session_id: run.session_id,
        status: run.status.as_str(),
        answer: run.answer,
        stop_reason: run.stop_reason,
        error: run.error,
        tool_calls: calls,
    };
    let value = serde_json::to_value(&result)
        .map_err(|e| ErrorData::internal_error(format!("writing the result: {e}"), None))?;
    Ok(if result.status == "finished" {
        CallToolResult::structured(value)
    } else {
        CallToolResult::structured_error(value)
    })
}

/// Adds a tool call or its observation to `calls`; returns a line for the client's progress.
fn take_event(event: &StoredEvent, calls: &mut Vec<ToolCall>) -> Option<String> {
    let data = &event.data;
    let text = |field: &str| data[field].as_str().unwrap_or_default().to_string();
    let index = data["index"].as_u64();
    match data["type"].as_str()? {
        "tool_call" => {
            calls.push(ToolCall {
                index,
                tool: text("tool"),
                input: text("input"),
                observation: None,
                success: None,
            });
            Some(format!("calling {}", text("tool")))
        }
        "observation" => {
            let call = calls.iter_mut().rev().find(|c| c.index == index)?;
            call.observation = Some(text("text"));
            call.success = data["success"].as_bool();
            Some(format!("{} answered", call.tool))
        }
        _ => None,
    }
}

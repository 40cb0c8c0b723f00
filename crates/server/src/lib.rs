//! `catena serve`: the local server. An OpenAI-compatible API for editors, scripts and the official
//! clients (and Anthropic's Messages API for the clients that speak it), an agent API for
//! Chain-of-Agents runs with an event stream, Catena's tools as an MCP server (`/mcp`,
//! Streamable HTTP), and health. It binds to loopback unless told otherwise, can require an API
//! key, bounds request bodies, and queues requests for the one model with a clear limit.

mod agent_api;
mod boundary;
mod error;
mod export_body;
mod holdback;
mod listen;
mod messages;
mod openai;
mod responses;
mod tool_request;
mod ui;

use boundary::Boundary;
pub use error::ApiError;
use error::ApiJson;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use catena_service::{Connection, InferenceConfig, Service, ServiceError};
use catena_store::Store;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub host: String,
    pub port: u16,
    /// When set, every `/v1` request needs `Authorization: Bearer <key>` (or `x-api-key: <key>`).
    pub api_key: Option<String>,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    pub inference: InferenceConfig,
    /// What `/mcp`'s tools may use (the workspace folder of `run_python`).
    pub mcp: catena_mcp::McpOptions,
}

type McpService =
    catena_mcp::StreamableHttpService<catena_mcp::CatenaTools, catena_mcp::LocalSessionManager>;

/// What the handlers share.
pub struct AppState {
    catena: Arc<Service>,
    /// Where editors reach this server, and its key.
    connection: Connection,
    /// Responses the store could not keep, held here instead while the server runs.
    unkept: responses::Unkept,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Engine(#[from] catena_engine_api::EngineError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error("the server stopped: {0}")]
    Io(#[from] std::io::Error),
}

/// A server that is listening.
pub struct Server {
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    boundary: Arc<Boundary>,
    max_body_bytes: usize,
    mcp: catena_mcp::McpOptions,
}

impl Server {
    /// Loads the model, opens the port; serving starts with [`Server::run`].
    pub async fn bind(config: ServeConfig, store: Arc<Store>) -> Result<Server, ServeError> {
        let catena = Arc::new(Service::start(config.inference.clone(), store)?);
        let address = format!("{}:{}", config.host, config.port);
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .map_err(|source| ServeError::Bind { address, source })?;
        let bound = listener.local_addr()?;
        let api_key = config.api_key.filter(|k| !k.is_empty());
        let connection = Connection {
            base_url: format!("http://{}/v1", reachable(bound)),
            api_key: api_key.clone(),
        };
        let boundary = Boundary::new(bound.port(), bound.ip().is_loopback(), api_key)?;
        Ok(Server {
            listener,
            state: Arc::new(AppState {
                catena,
                connection,
                unkept: responses::Unkept::default(),
            }),
            boundary: Arc::new(boundary),
            max_body_bytes: config.max_body_bytes,
            mcp: config.mcp,
        })
    }

    /// The address to open the web UI at. With an API key it carries the per-launch token in
    /// the fragment (which browsers never send to the server); the UI keeps it for its requests.
    pub fn ui_address(&self) -> std::io::Result<String> {
        let address = self.local_addr()?;
        Ok(match self.boundary.ui_token() {
            Some(token) => format!("http://{address}/#token={token}"),
            None => format!("http://{address}/"),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn model_id(&self) -> String {
        self.state.catena.model_id()
    }

    /// Serves until `shutdown` resolves; then asks live runs to stop and lets them record their
    /// end (for up to ten seconds).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let state = self.state.clone();
        let mcp = catena_mcp::http_service(state.catena.clone(), self.mcp, self.max_body_bytes);
        let app = router(
            self.state.clone(),
            self.boundary.clone(),
            self.max_body_bytes,
            mcp,
        );
        let catena = state.catena.clone();
        listen::serve(self.listener, app, shutdown, move || catena.cancel_all()).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while state.catena.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

/// The address a program on this machine reaches `bound` at: itself, or loopback when the
/// server listens on every address (0.0.0.0 is no address to connect to).
fn reachable(bound: SocketAddr) -> SocketAddr {
    let ip = match bound.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, bound.port())
}

/// The routes, behind the boundary's checks.
fn router(
    state: Arc<AppState>,
    boundary: Arc<Boundary>,
    max_body_bytes: usize,
    mcp: McpService,
) -> Router {
    let v1 = Router::new()
        .route("/models", get(openai::list_models))
        .route("/models/{id}", get(openai::get_model))
        .route("/chat/completions", post(openai::chat_completions))
        .route("/responses", post(responses::responses))
        .route("/messages", post(messages::messages))
        .route("/connection", get(connection))
        .route("/profiles", get(agent_api::profiles))
        .route("/tools", get(tools))
        .route("/settings/web", get(web_settings).put(update_web_settings))
        .route("/agent/runs", post(agent_api::start_run))
        .route("/agent/votes", post(agent_api::vote))
        .route("/agent/runs/{id}", get(agent_api::get_run))
        .route("/agent/runs/{id}/events", get(agent_api::run_events))
        .route("/agent/runs/{id}/cancel", post(agent_api::cancel_run))
        .route(
            "/agent/runs/{id}/approvals/{ask}",
            post(agent_api::answer_approval),
        )
        .route("/agent/runs/{id}/feedback", post(agent_api::feedback))
        .route("/sessions", get(agent_api::list_sessions))
        .route(
            "/sessions/{id}",
            get(agent_api::get_session).delete(agent_api::delete_session),
        )
        .route("/export", get(agent_api::export))
        .route("/library/models", get(library_models))
        .route("/library/models/serve", post(serve_model))
        .route("/library/downloads", get(downloads).post(pull_model))
        .route("/train/data", get(training_data))
        .route("/train/runs", get(training_runs).post(start_training))
        .route("/train/runs/{id}", get(training_run))
        .route("/train/runs/{id}/stop", post(stop_training))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            boundary.clone(),
            boundary::require_key,
        ));
    // The MCP server's one address, behind the same key as `/v1` (and, below, the same Host and
    // Origin checks as every route).
    let mcp = Router::new()
        .route_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(
            boundary.clone(),
            boundary::require_key,
        ));
    Router::new()
        .route("/health", get(health))
        .nest("/v1", v1)
        .merge(mcp)
        .fallback(ui::serve)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(boundary, boundary::guard))
        .with_state(state)
}

async fn health(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(app.catena.health())
}

/// Where editors reach this server and the key they need (behind the key check like every
/// `/v1` route).
async fn connection(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(app.connection.clone())
}

/// The models on this machine and in the catalog (the UI's models page); the served one marked.
async fn library_models(State(app): State<Arc<AppState>>) -> Result<impl IntoResponse, ApiError> {
    let list = on_blocking_pool(&app, "listing models", Service::library_models).await?;
    Ok(axum::Json(list))
}

/// Each action tool and whether something answers it (the models page and run form show it).
async fn tools(State(app): State<Arc<AppState>>) -> Result<impl IntoResponse, ApiError> {
    let list = on_blocking_pool(&app, "checking the tools", |s| Ok(s.tools())).await?;
    Ok(axum::Json(list))
}

/// The `[web]` settings, without their keys.
async fn web_settings(State(app): State<Arc<AppState>>) -> Result<impl IntoResponse, ApiError> {
    let view = on_blocking_pool(&app, "reading the settings", Service::web_settings).await?;
    Ok(axum::Json(view))
}

/// Changes the `[web]` settings (behind the same boundary as every `/v1` route: a web page the
/// user visits cannot reach it).
async fn update_web_settings(
    State(app): State<Arc<AppState>>,
    ApiJson(update): ApiJson<catena_service::WebSettingsUpdate>,
) -> Result<impl IntoResponse, ApiError> {
    let view = on_blocking_pool(&app, "saving the settings", move |s| {
        s.update_web_settings(update)
    })
    .await?;
    Ok(axum::Json(view))
}

/// Runs a service call that reads the disk on Tokio's blocking pool, off the async workers.
async fn on_blocking_pool<T: Send + 'static>(
    app: &AppState,
    what: &'static str,
    call: impl FnOnce(&Service) -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ApiError> {
    let catena = app.catena.clone();
    let result = tokio::task::spawn_blocking(move || call(&catena))
        .await
        .map_err(|e| ApiError::internal(format!("{what} failed: {e}")))?;
    Ok(result?)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelReference {
    id: String,
}

/// Starts downloading a catalog model; `GET /v1/library/downloads` follows it.
async fn pull_model(
    State(app): State<Arc<AppState>>,
    ApiJson(body): ApiJson<ModelReference>,
) -> Result<impl IntoResponse, ApiError> {
    let status = app.catena.pull_model(&body.id)?;
    Ok((axum::http::StatusCode::ACCEPTED, axum::Json(status)))
}

async fn downloads(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(app.catena.downloads())
}

/// Serves another installed model from now on.
async fn serve_model(
    State(app): State<Arc<AppState>>,
    ApiJson(body): ApiJson<ModelReference>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(axum::Json(app.catena.serve_model(&body.id).await?))
}

/// Starts `catena train sft` as a child process.
async fn start_training(
    State(app): State<Arc<AppState>>,
    ApiJson(body): ApiJson<catena_service::StartTraining>,
) -> Result<impl IntoResponse, ApiError> {
    let status = app.catena.start_training(body)?;
    Ok((axum::http::StatusCode::CREATED, axum::Json(status)))
}

/// The files of the exports folder, which training runs read from.
async fn training_data(State(app): State<Arc<AppState>>) -> Result<impl IntoResponse, ApiError> {
    let list = on_blocking_pool(&app, "listing training data", Service::training_data).await?;
    Ok(axum::Json(list))
}

async fn training_runs(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(app.catena.training_runs())
}

#[derive(serde::Deserialize)]
struct FromQuery {
    #[serde(default)]
    from: usize,
}

/// A training run with its progress events from `?from=N` on.
async fn training_run(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<FromQuery>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(axum::Json(app.catena.training_run(&id, query.from)?))
}

async fn stop_training(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(axum::Json(app.catena.stop_training(&id).await?))
}

/// A path under `/v1` that names no route, answered in the shape the client speaks.
async fn not_found(request: Request) -> axum::response::Response {
    ApiError::not_found(format!(
        "No route {} {}.",
        request.method(),
        request.uri().path()
    ))
    .for_client(request.headers())
}

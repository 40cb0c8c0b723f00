//! The app's [`Service`], loaded behind the window: the window is usable at once, and
//! a command that needs the model waits for it (or gets the reason it could not be loaded).

use catena_engine_api::{SamplingParams, SessionOptions};
use catena_hub::config::Paths;
use catena_hub::installed;
use catena_mcp_client::McpServers;
use catena_sandbox::Limits;
use catena_service::Service;
use catena_service::{InferenceConfig, McpHost, ServiceError};
use catena_store::Store;
use catena_worker::WorkerCommand;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

/// Where loading stands.
#[derive(Clone)]
pub enum Loading {
    /// What is happening now, for the user.
    Starting(String),
    Ready(Arc<Service>),
    Failed(String),
}

#[derive(Clone)]
pub struct Backend {
    paths: Paths,
    state: watch::Sender<Loading>,
}

/// Settings of the desktop's model: those `catena serve` uses by default.
const CONTEXT_TOKENS: u32 = 8192;
const KEPT_SESSIONS: usize = 4;
const QUEUE_LIMIT: usize = 32;
/// How long an MCP server has to start and list its tools (`npx` may fetch its package first).
const MCP_START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl Backend {
    pub fn new(paths: Paths) -> Backend {
        let (state, _) = watch::channel(Loading::Starting("Starting".into()));
        Backend { paths, state }
    }

    /// Loads the model on a thread of its own (fetching the default model first when no model
    /// is installed); commands see the result when it is there.
    pub fn start_loading(&self) {
        let backend = self.clone();
        let spawned = std::thread::Builder::new()
            .name("catena-load".into())
            .spawn(move || {
                let outcome = match backend.load() {
                    Ok(service) => {
                        tracing::info!(model = service.model_id(), "the model is loaded");
                        Loading::Ready(Arc::new(service))
                    }
                    Err(e) => {
                        tracing::error!("the model could not be loaded: {e:#}");
                        Loading::Failed(format!("{e:#}"))
                    }
                };
                backend.state.send_replace(outcome);
            });
        if let Err(e) = spawned {
            self.state.send_replace(Loading::Failed(format!(
                "cannot start the loading thread: {e}"
            )));
        }
    }

    fn load(&self) -> anyhow::Result<Service> {
        use anyhow::Context;
        let model_path = self.model_path()?;
        self.state
            .send_replace(Loading::Starting("Loading the model".into()));
        let store = Arc::new(
            Store::open_in(&self.paths.store_dir).context("cannot open the session store")?,
        );
        let config = InferenceConfig {
            model_path,
            shipped_adapter: true,
            gpu_layers: None,
            session: SessionOptions {
                context_size: Some(CONTEXT_TOKENS),
                sampling: SamplingParams::default(),
                ..SessionOptions::default()
            },
            sessions: KEPT_SESSIONS,
            parallel: 1,
            kv_cache: None,
            queue_limit: QUEUE_LIMIT,
            paths: self.paths.clone(),
            sandbox_limits: Limits::default(),
            worker: WorkerCommand::current_exe(0)
                .context("cannot find the app's executable to start the model worker")?,
            mcp_host: self.mcp_host()?,
        };
        Ok(Service::start(config, store)?)
    }

    /// The MCP servers of `mcp.json` in the data folder, as `catena serve` starts them by
    /// default: their tools are offered to every run, and a call that may change something
    /// waits for the user's answer in the window. None listed, none started.
    fn mcp_host(&self) -> anyhow::Result<Option<McpHost>> {
        use anyhow::Context;
        let file = self.paths.mcp_servers_file();
        if !file.exists() {
            return Ok(None);
        }
        let entries = catena_mcp_client::load(&file)?;
        self.state
            .send_replace(Loading::Starting("Starting the MCP servers".into()));
        let (servers, problems) = McpServers::start(&entries, MCP_START_TIMEOUT)
            .context("cannot start the MCP client")?;
        for problem in problems {
            tracing::warn!("{problem}");
        }
        for (server, tools) in servers.started() {
            tracing::info!(server, tools, "an MCP server lends its tools to runs");
        }
        Ok(Some(McpHost {
            servers: Arc::new(servers),
            allowed: Arc::default(),
        }))
    }

    /// The model the user chose with `catena models default`, else the built-in default model
    /// (fetched once, with its progress shown as the loading state).
    fn model_path(&self) -> anyhow::Result<PathBuf> {
        use anyhow::Context;
        if let Some(path) = installed::chosen_default(&self.paths)? {
            return Ok(path);
        }
        let state = self.state.clone();
        let mut progress = move |p: catena_hub::assets::AssetProgress| {
            if let catena_hub::assets::AssetProgress::Fetching { megabytes, .. } = p {
                state.send_replace(Loading::Starting(format!(
                    "Fetching the default model ({megabytes} MB, once)"
                )));
            }
        };
        catena_hub::assets::default_model(&self.paths, &mut progress)
            .context("the default model is not available")
    }

    /// Where loading stands now.
    pub fn loading(&self) -> Loading {
        self.state.borrow().clone()
    }

    /// The service, once loaded; waits while it loads.
    pub async fn service(&self) -> Result<Arc<Service>, ServiceError> {
        let mut state = self.state.subscribe();
        let outcome = state
            .wait_for(|s| !matches!(s, Loading::Starting(_)))
            .await
            .map(|s| s.clone());
        match outcome {
            Ok(Loading::Ready(service)) => Ok(service),
            Ok(Loading::Failed(reason)) => Err(ServiceError::internal(format!(
                "The model could not be loaded: {reason}"
            ))),
            Ok(Loading::Starting(_)) | Err(_) => Err(ServiceError::internal(
                "The model loader stopped unexpectedly.",
            )),
        }
    }
}

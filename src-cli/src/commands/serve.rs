//! `catena serve`: the local server (OpenAI-compatible API, agent runs).

use crate::setup;
use anyhow::{Context, Result};
use catena_engine_api::{KvCacheType, SamplingParams, SessionOptions};
use catena_hub::config::Paths;
use catena_sandbox::Limits;
use catena_server::{ServeConfig, Server};
use catena_service::InferenceConfig;
use catena_store::Store;
use catena_worker::WorkerCommand;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on; loopback by default (other machines cannot connect).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,

    /// Port (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8420)]
    pub port: u16,

    /// Require this key as `Authorization: Bearer KEY` or `x-api-key: KEY` (on `/v1` and `/mcp`).
    /// Prefer the environment variable, which other users of the machine cannot read from the
    /// process list.
    #[arg(long, env = "CATENA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Largest request body, in KiB.
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    pub max_body_kib: usize,

    #[command(flatten)]
    pub served: ModelArgs,

    #[command(flatten)]
    pub workspace: WorkspaceArgs,

    /// External MCP servers whose tools every agent run may call; a call that may change
    /// something waits for an answer in the web UI.
    #[command(flatten)]
    pub mcp_servers: crate::mcp_servers::McpArgs,
}

/// How the served model is loaded and shared: `catena serve`'s and `catena mcp`'s.
#[derive(Args)]
pub struct ModelArgs {
    /// A GGUF model; default: the default model (fetched on first use).
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,

    /// Layers to offload to the GPU (default: as many as fit, see `catena doctor`).
    #[arg(long, value_name = "N")]
    pub gpu_layers: Option<u32>,

    /// KV cache type, f16 or q8_0 (default: f16 unless memory is short).
    #[arg(long, value_name = "TYPE")]
    pub kv_cache: Option<KvCacheType>,

    /// Context window of each kept conversation, in tokens.
    #[arg(long, value_name = "TOKENS", default_value_t = 8192)]
    pub ctx_size: u32,

    /// Conversations whose KV cache is kept between requests [default: 4]. With --parallel
    /// above 1, each slot keeps its own conversation's cache instead.
    #[arg(long, value_name = "N")]
    pub sessions: Option<usize>,

    /// Requests decoded together: N slots in one context of N × --ctx-size tokens, one batch a
    /// step (continuous batching: a slot joins or leaves between two tokens).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub parallel: usize,

    /// Requests that may wait for the model; more are refused with 429.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub queue: usize,

    /// CPU threads (default: the physical cores).
    #[arg(long)]
    pub threads: Option<i32>,

    /// Wall-time limit of one sandboxed program, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 7.0)]
    pub code_timeout: f64,

    /// Serve the default model as published, without the adapter Catena ships for it.
    #[arg(long)]
    pub no_adapter: bool,
}

/// The folder of the user's that the MCP server's `run_python` lends its programs.
#[derive(Args)]
pub struct WorkspaceArgs {
    /// A folder that `run_python` programs of MCP clients see at /workspace, read-only unless
    /// --workspace-writable; nothing else of this machine's files is theirs to see.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    /// Let those programs change the workspace folder (create, write, delete files in it).
    #[arg(long, requires = "workspace")]
    pub workspace_writable: bool,
}

impl WorkspaceArgs {
    pub fn options(&self) -> Result<catena_mcp::McpOptions> {
        let workspace = match &self.workspace {
            Some(folder) => Some(
                catena_service::Workspace::new(folder, self.workspace_writable)
                    .map_err(|e| anyhow::anyhow!(e.message))?,
            ),
            None => None,
        };
        Ok(catena_mcp::McpOptions { workspace })
    }
}

impl ModelArgs {
    /// The model, its worker and the sandbox's limits, as the flags set them.
    pub fn inference(&self, paths: &Paths, verbosity: u8) -> Result<InferenceConfig> {
        let Some(code_timeout) = catena_protocol::units::positive_seconds(self.code_timeout) else {
            anyhow::bail!("--code-timeout must be a positive number of seconds");
        };
        if self.parallel > 1 && self.sessions.is_some() {
            anyhow::bail!(
                "--sessions does not apply with --parallel {}: each slot keeps its own \
                 conversation's KV cache",
                self.parallel
            );
        }
        Ok(InferenceConfig {
            model_path: setup::model_path(self.model.as_deref(), paths)?,
            shipped_adapter: !self.no_adapter,
            gpu_layers: self.gpu_layers,
            session: SessionOptions {
                context_size: Some(self.ctx_size),
                sampling: SamplingParams::default(),
                threads: self.threads,
                ..SessionOptions::default()
            },
            sessions: self.sessions.unwrap_or(4),
            parallel: self.parallel,
            kv_cache: self.kv_cache,
            queue_limit: self.queue,
            paths: paths.clone(),
            sandbox_limits: Limits {
                wall: code_timeout.max(Duration::from_millis(100)),
                ..Limits::default()
            },
            worker: WorkerCommand::current_exe(verbosity)
                .context("cannot find the catena executable to start the model worker")?,
            mcp_host: None,
        })
    }
}

pub fn run(args: ServeArgs, paths: &Paths, verbosity: u8) -> Result<ExitCode> {
    let mut inference = args.served.inference(paths, verbosity)?;
    // Started once, before the server: every run shares them.
    inference.mcp_host =
        args.mcp_servers
            .start_servers(paths)?
            .map(|servers| catena_service::McpHost {
                servers,
                allowed: Arc::new(args.mcp_servers.allowed()),
            });
    let mcp = args.workspace.options()?;
    let store =
        Arc::new(Store::open_in(&paths.store_dir).context("cannot open the session store")?);
    let config = ServeConfig {
        host: args.host.clone(),
        port: args.port,
        api_key: args.api_key.clone(),
        max_body_bytes: args.max_body_kib.max(1) << 10,
        inference,
        mcp,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let server = Server::bind(config, store).await?;
        let address = server.local_addr()?;
        // Scripts and tests read this line to find the port. A reader that stops reading (a
        // closed pipe) must not stop the server, so write errors are ignored, not panicked on.
        let mut stdout = std::io::stdout();
        let _ = writeln!(
            stdout,
            "Catena is serving {} on http://{address} (OpenAI API at /v1, MCP at /mcp)",
            server.model_id()
        );
        // With an API key, the address carries the web UI's per-launch token.
        let _ = writeln!(stdout, "Web UI: {}", server.ui_address()?);
        let _ = stdout.flush();
        if args.api_key.is_none() && !is_loopback(&args.host) {
            eprintln!(
                "warning: listening on {} without an API key: anyone who can reach this machine can use it",
                args.host
            );
        }
        server.run(shutdown_signal()).await?;
        eprintln!("Catena stopped.");
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

//! `catena mcp`: Catena's tools for an MCP host, over this process's stdin and stdout. The host
//! starts it (its configuration names the command); the model runs in a worker process as under
//! `catena serve`, and runs are stored in the same history.

use super::serve::{ModelArgs, WorkspaceArgs};
use anyhow::{Context, Result};
use catena_hub::config::Paths;
use catena_service::Service;
use catena_store::Store;
use clap::Args;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub served: ModelArgs,

    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

pub fn run(args: McpArgs, paths: &Paths, verbosity: u8) -> Result<ExitCode> {
    let inference = args.served.inference(paths, verbosity)?;
    let options = args.workspace.options()?;
    let store =
        Arc::new(Store::open_in(&paths.store_dir).context("cannot open the session store")?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        // Loading the model before reading stdin: a model that cannot load fails here, with its
        // reason on stderr, rather than as an MCP error the host may not show.
        let service = Arc::new(Service::start(inference, store)?);
        let served = catena_mcp::serve_stdio(service.clone(), options).await;
        // The client closed the connection: stop any run it left going, and let it record its
        // end (for up to ten seconds, as `catena serve` does at shutdown).
        service.cancel_all();
        let deadline = Instant::now() + Duration::from_secs(10);
        while service.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        served?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

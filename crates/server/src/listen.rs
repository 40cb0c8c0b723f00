//! Accepting connections, with the limits that keep one client from starving the others: a cap
//! on connections served at once (more wait in the kernel's backlog), a deadline for a request's
//! headers that also closes a kept-alive connection left idle, and a deadline between the pieces
//! of a request body. Without them, a local program holding a thousand silent connections used
//! every file descriptor the process had, and `/health` went unanswered.

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::timeout::RequestBodyTimeout;

/// How long a client may take to send a request's headers; also how long an idle kept-alive
/// connection is kept.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for the next piece of a request body; a body that stalls fails the request.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once, at most. A UI keeps a few (one per event stream), a script one:
/// 256 leaves room for many of both. Under a low descriptor limit the cap is half the limit, so
/// the model, the store and the sandbox keep the other half.
const MAX_CONNECTIONS: usize = 256;

/// How long a failing `accept` (out of descriptors, say) waits before trying again, so the loop
/// does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long shutdown waits for open connections (event streams end when their runs do).
const DRAIN: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` resolves, then calls `before_drain` (which ends
/// live runs, and so their event streams) and waits up to ten seconds for connections to close.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()>,
    before_drain: impl FnOnce(),
) {
    let slots = Arc::new(Semaphore::new(connection_cap()));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_closed) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = RequestBodyTimeout::new(app.clone(), BODY_TIMEOUT);
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    before_drain();
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {DRAIN:?}; stopping anyway");
    }
}

/// [`MAX_CONNECTIONS`], or half this process's descriptor limit when that is lower.
fn connection_cap() -> usize {
    #[cfg(unix)]
    {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        if let Some(limit) = limit.and_then(|l| usize::try_from(l).ok()) {
            return (limit / 2).clamp(8, MAX_CONNECTIONS);
        }
    }
    MAX_CONNECTIONS
}

//! `/v1/export`'s body, sent as the store is read: the export is written on a blocking thread
//! into a [`ChunkWriter`], whose pieces travel through a short channel to the response. The
//! server holds at most [`CHUNKS_IN_FLIGHT`] pieces of [`CHUNK_BYTES`] for any export, however
//! large, and a client that stops reading frees the thread after [`STALL`].

use axum::body::{Body, Bytes};
use catena_service::{ExportRequest, Service, ServiceError};
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::SendTimeoutError;

/// The size a piece is sent at.
const CHUNK_BYTES: usize = 64 * 1024;
/// Pieces written but not yet taken by the connection.
const CHUNKS_IN_FLIGHT: usize = 4;
/// How long the export waits for the client to take a piece before it gives up.
const STALL: Duration = Duration::from_secs(30);

/// The export as a streamed body. An export that fails before its first piece is an error
/// response; one that fails later ends the body unfinished, so that the client sees a cut-off
/// transfer, never a file that looks whole.
pub async fn export_body(
    service: Arc<Service>,
    request: ExportRequest,
) -> Result<Body, ServiceError> {
    let (sender, mut pieces) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let writer = ChunkWriter {
        sender,
        pending: Vec::with_capacity(CHUNK_BYTES),
        runtime: Handle::current(),
    };
    let mut exported =
        tokio::spawn(async move { service.export(request, writer).await.map(|_| ()) });
    let Some(first) = pieces.recv().await else {
        // Nothing was written: the export ended before its first piece, empty or failed.
        joined(&mut exported).await?;
        return Ok(Body::empty());
    };
    let stream = async_stream::stream! {
        yield Ok(first);
        while let Some(piece) = pieces.recv().await {
            yield Ok(piece);
        }
        if let Err(e) = joined(&mut exported).await {
            tracing::warn!(error = %e, "an export stopped part way");
            yield Err(io::Error::other(e.message));
        }
    };
    Ok(Body::from_stream(stream))
}

async fn joined(
    task: &mut tokio::task::JoinHandle<Result<(), ServiceError>>,
) -> Result<(), ServiceError> {
    task.await
        .map_err(|e| ServiceError::internal(format!("the export stopped: {e}")))?
}

/// A [`Write`] on a blocking thread whose bytes go to the response in pieces.
struct ChunkWriter {
    sender: mpsc::Sender<Bytes>,
    pending: Vec<u8>,
    runtime: Handle,
}

impl ChunkWriter {
    fn send_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(
            &mut self.pending,
            Vec::with_capacity(CHUNK_BYTES),
        ));
        // On the store's blocking thread, outside the runtime's workers: waiting here is allowed.
        self.runtime
            .block_on(self.sender.send_timeout(piece, STALL))
            .map_err(|e| match e {
                SendTimeoutError::Timeout(_) => io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client took nothing for {} s", STALL.as_secs()),
                ),
                SendTimeoutError::Closed(_) => {
                    io::Error::new(io::ErrorKind::BrokenPipe, "the client went away")
                }
            })
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= CHUNK_BYTES {
            self.send_pending()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_pending()
    }
}

//! Service calls from the async handlers: on Tokio's blocking pool, their errors in MCP's terms.

use catena_service::ServiceError;
use rmcp::ErrorData;

/// Runs `call` on Tokio's blocking pool (it reads files, prepares the sandbox or runs a tool).
pub(crate) async fn on_blocking_pool<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ErrorData> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| ErrorData::internal_error(format!("a tool's thread failed: {e}"), None))?
        .map_err(service_error)
}

/// A service error in MCP's terms: the caller's mistake or the server's.
pub(crate) fn service_error(error: ServiceError) -> ErrorData {
    match error.kind {
        catena_service::ErrorKind::Invalid => ErrorData::invalid_params(error.message, None),
        _ => ErrorData::internal_error(error.message, None),
    }
}

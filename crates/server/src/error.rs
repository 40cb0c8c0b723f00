//! Errors in the OpenAI shape: `{"error": {"message", "type", "param", "code"}}`, with the HTTP
//! status OpenAI uses for the same failure, so the official clients raise their usual exceptions.
//! The same errors render in Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`)
//! for `/v1/messages` and for any client that says it speaks Anthropic's API: one taxonomy, two
//! renderings, told apart by the HTTP status both APIs give the same failure.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use catena_service::{ErrorKind, ServiceError};
use serde_json::json;

/// An API error.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before retrying (queue full).
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is malformed or asks for something impossible.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// A field that asks for what this server does not do, refused by name.
    pub fn unsupported(param: &'static str, why: &str) -> Self {
        ApiError::invalid(format!("{why} Send the request without `{param}`.")).param(param)
    }

    pub fn param(mut self, param: &'static str) -> Self {
        self.param = Some(param);
        self
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 404 for a model this server does not serve.
    pub fn unknown_model(model: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{model}` does not exist or you do not have access to it."),
        )
        .param("model")
        .code("model_not_found")
    }

    /// 404 for another missing thing (a run, a session).
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message).code("not_found")
    }

    /// 409 for a request that does not fit the thing's state (cancelling a finished run).
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::CONFLICT, "invalid_request_error", message)
    }

    /// 401 for a missing or wrong API key.
    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Incorrect API key provided. Pass the key this server was started with as `Authorization: Bearer <key>` or `x-api-key: <key>`.",
        )
        .code("invalid_api_key")
    }

    /// 403 for a request this server refuses to take from where it came (another site, a
    /// foreign `Host`) or for something it will not touch (a path outside its folders).
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, "invalid_request_error", message).code("forbidden")
    }

    /// 413 for a body larger than the server takes (`--max-body-kib`).
    pub fn too_large() -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "The request body is larger than this server accepts.",
        )
        .code("request_too_large")
    }

    /// 500 for a failure on our side.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The error object, as it also appears inside a stream.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }

    /// The error object in Anthropic's shape, as it also appears inside a stream (`event: error`).
    /// Anthropic's error types follow the HTTP status, as its clients' exceptions do.
    pub fn anthropic_body(&self) -> serde_json::Value {
        let kind = match self.status.as_u16() {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            _ => "api_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": self.message}})
    }

    fn respond(self, body: serde_json::Value) -> Response {
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }

    /// The response in the shape the client speaks: Anthropic's when it sends
    /// `anthropic-version` (Anthropic's SDKs and Claude Code always do), else OpenAI's. For the
    /// refusals made before a route is known (the key, `Host`, `Origin`).
    pub fn for_client(self, headers: &HeaderMap) -> Response {
        if headers.contains_key("anthropic-version") {
            AnthropicError(self).into_response()
        } else {
            self.into_response()
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        self.respond(body)
    }
}

/// An [`ApiError`] answered in Anthropic's shape (the errors of `/v1/messages`).
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        AnthropicError(e)
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let body = self.0.anthropic_body();
        self.0.respond(body)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let detail = rejection.body_text();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::too_large();
        }
        let message = match rejection {
            JsonRejection::JsonSyntaxError(_) => {
                format!("The request body is not valid JSON: {detail}")
            }
            JsonRejection::MissingJsonContentType(_) => {
                "Send the request body as JSON with `Content-Type: application/json`.".to_string()
            }
            _ => format!("The request body does not match the API: {detail}"),
        };
        ApiError::new(
            if status.is_client_error() {
                StatusCode::BAD_REQUEST
            } else {
                status
            },
            "invalid_request_error",
            message,
        )
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let status =
            StatusCode::from_u16(e.kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut api = match e.kind {
            ErrorKind::Internal => ApiError::new(status, "server_error", e.message),
            ErrorKind::QueueFull => {
                let mut busy = ApiError::new(status, "server_busy", e.message).code("queue_full");
                busy.retry_after = Some(1);
                busy
            }
            ErrorKind::NotFound => {
                ApiError::new(status, "invalid_request_error", e.message).code("not_found")
            }
            ErrorKind::Invalid | ErrorKind::Conflict => {
                ApiError::new(status, "invalid_request_error", e.message)
            }
            // OpenAI's code for the same refusal, which clients and agents recognise.
            ErrorKind::ContextLength => ApiError::new(status, "invalid_request_error", e.message)
                .code("context_length_exceeded"),
        };
        api.param = e.param;
        api
    }
}

/// `axum::Json`, with rejections turned into OpenAI-style errors.
pub struct ApiJson<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for ApiJson<T>
where
    Json<T>: axum::extract::FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let Json(value) = Json::<T>::from_request(req, state).await?;
        Ok(ApiJson(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_errors_keep_their_openai_shape() {
        let busy = ApiError::from(ServiceError::queue_full(4));
        assert_eq!(busy.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!((busy.kind, busy.code), ("server_busy", Some("queue_full")));
        assert_eq!(busy.retry_after, Some(1));
        assert!(busy.message.contains("4 requests"), "{}", busy.message);

        let bad = ApiError::from(ServiceError::invalid("`task` must not be empty.").param("task"));
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            (bad.kind, bad.param),
            ("invalid_request_error", Some("task"))
        );
        assert_eq!(bad.body()["error"]["message"], "`task` must not be empty.");

        let missing = ApiError::from(ServiceError::not_found("No run `x`."));
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        assert_eq!(missing.code, Some("not_found"));

        let finished = ApiError::from(ServiceError::conflict("Run `x` is not running."));
        assert_eq!(finished.status, StatusCode::CONFLICT);

        let long = ApiError::from(ServiceError::context_length(4096, 20_000));
        assert_eq!(long.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            (long.kind, long.param, long.code),
            (
                "invalid_request_error",
                Some("messages"),
                Some("context_length_exceeded")
            )
        );

        let broken = ApiError::from(ServiceError::internal("disk full"));
        assert_eq!(broken.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(broken.kind, "server_error");
    }

    #[test]
    fn the_same_errors_render_in_anthropics_shape() {
        let kind = |e: ApiError| e.anthropic_body()["error"]["type"].clone();
        assert_eq!(
            ApiError::invalid("`x` is wrong.").anthropic_body(),
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "`x` is wrong."}})
        );
        assert_eq!(kind(ApiError::unauthorized()), "authentication_error");
        assert_eq!(kind(ApiError::forbidden("no")), "permission_error");
        assert_eq!(kind(ApiError::unknown_model("m")), "not_found_error");
        assert_eq!(kind(ApiError::too_large()), "request_too_large");
        assert_eq!(
            kind(ApiError::from(ServiceError::queue_full(4))),
            "rate_limit_error"
        );
        assert_eq!(kind(ApiError::internal("disk full")), "api_error");
        let long = ApiError::from(ServiceError::context_length(4096, 20_000));
        assert_eq!(kind(long.clone()), "invalid_request_error");
        assert!(
            long.anthropic_body()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--ctx-size")
        );

        // The shape follows what the client says it speaks; the status and `Retry-After` stay.
        let mut anthropic = HeaderMap::new();
        anthropic.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        let busy = ApiError::from(ServiceError::queue_full(4));
        let answered = busy.clone().for_client(&anthropic);
        assert_eq!(answered.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(answered.headers()[header::RETRY_AFTER], "1");
        let answered = AnthropicError(busy).into_response();
        assert_eq!(answered.headers()[header::RETRY_AFTER], "1");
        let plain = ApiError::unauthorized().for_client(&HeaderMap::new());
        assert_eq!(plain.status(), StatusCode::UNAUTHORIZED);
    }
}

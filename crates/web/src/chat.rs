//! A model behind an OpenAI-compatible chat endpoint (`POST {base}/chat/completions`), for the
//! page summariser when the user wants a bigger model than the run's own, as the reference
//! release summarised with a 72B model: a llama.cpp server, another `catena serve`, a vLLM
//! server, or a hosted service with the user's key. The address is the user's (settings), so it
//! may be this machine's own; the key is sent only there and never printed.

use crate::search::ApiKey;
use serde_json::{Value, json};
use std::time::Duration;

/// How long one answer may take: a page summary from a big local model is slow.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the endpoint gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The prompt does not fit the endpoint model's context.
    #[error("the prompt does not fit the model's context: {0}")]
    TooLong(String),
    #[error("the endpoint refused the key (HTTP {0}); check the summariser key")]
    Unauthorized(u16),
    #[error("the endpoint is rate limiting (HTTP 429); wait before reading more pages")]
    RateLimited,
    #[error("the endpoint answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the endpoint could not be reached: {0}")]
    Network(String),
    #[error("the endpoint answered in an unexpected shape: {0}")]
    BadResponse(String),
}

/// A chat model at an OpenAI-compatible endpoint.
pub struct ChatEndpoint {
    url: String,
    model: String,
    key: Option<ApiKey>,
    client: reqwest::blocking::Client,
}

impl std::fmt::Debug for ChatEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatEndpoint")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("key", &self.key)
            .finish()
    }
}

impl ChatEndpoint {
    /// The endpoint at `base_url` (`http://127.0.0.1:8080/v1`: the part before
    /// `/chat/completions`), answering as `model`, with `key` sent as a bearer token.
    pub fn new(
        base_url: &str,
        model: &str,
        key: Option<ApiKey>,
    ) -> Result<ChatEndpoint, EndpointError> {
        let base = url::Url::parse(base_url.trim())
            .map_err(|e| EndpointError::Network(format!("`{base_url}` is not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(EndpointError::Network(format!(
                "`{base_url}` is not an http(s) address"
            )));
        }
        crate::install_tls_provider();
        let client = reqwest::blocking::Client::builder()
            .timeout(ANSWER_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("catena/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| EndpointError::Network(e.to_string()))?;
        Ok(ChatEndpoint {
            url: format!("{}/chat/completions", base.as_str().trim_end_matches('/')),
            model: model.to_string(),
            key,
            client,
        })
    }

    /// The model's greedy answer to `user` after `system`, at most `max_tokens` long.
    pub fn chat(
        &self,
        system: &str,
        user: &str,
        max_tokens: usize,
    ) -> Result<String, EndpointError> {
        let body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": false,
        });
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().map_err(|e| {
            EndpointError::Network(if e.is_timeout() {
                format!("no answer within {} seconds", ANSWER_TIMEOUT.as_secs())
            } else {
                e.without_url().to_string()
            })
        })?;
        let status = response.status().as_u16();
        let text = response.text().unwrap_or_default();
        let json: Option<Value> = serde_json::from_str(&text).ok();
        match status {
            200..=299 => {}
            401 | 403 => return Err(EndpointError::Unauthorized(status)),
            429 => return Err(EndpointError::RateLimited),
            _ => {
                let message = json
                    .as_ref()
                    .and_then(|j| j.pointer("/error/message").or_else(|| j.get("error")))
                    .and_then(Value::as_str)
                    .map_or_else(|| text.chars().take(200).collect(), str::to_string);
                let code = json
                    .as_ref()
                    .and_then(|j| {
                        j.pointer("/error/code")
                            .or_else(|| j.pointer("/error/type"))
                    })
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                // OpenAI says `context_length_exceeded`; llama.cpp's server
                // `exceed_context_size_error`; others only say it in words.
                let lower = message.to_lowercase();
                if code.contains("context")
                    || lower.contains("context length")
                    || lower.contains("context size")
                    || lower.contains("context window")
                {
                    return Err(EndpointError::TooLong(message));
                }
                return Err(EndpointError::Status { status, message });
            }
        }
        let json = json.ok_or_else(|| EndpointError::BadResponse("not JSON".into()))?;
        json.pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| EndpointError::BadResponse("no `choices[0].message.content`".into()))
    }
}

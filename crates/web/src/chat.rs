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
    /// `{base}/chat/completions`.
    url: String,
    /// `{base}/models`.
    models_url: String,
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
        let (base, client) = endpoint_client(base_url)?;
        let base = base.trim_end_matches('/');
        Ok(ChatEndpoint {
            url: format!("{base}/chat/completions"),
            models_url: format!("{base}/models"),
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
        let request = ChatRequest {
            system,
            user,
            max_tokens,
            temperature: 0.0,
            top_p: 1.0,
            seed: None,
        };
        self.complete(&request).map(|answer| answer.text)
    }

    /// One chat turn with the request's sampling, and what the server says it cost.
    pub fn complete(&self, chat: &ChatRequest<'_>) -> Result<ChatAnswer, EndpointError> {
        let mut body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": chat.system},
                {"role": "user", "content": chat.user},
            ],
            "max_tokens": chat.max_tokens,
            "temperature": chat.temperature,
            "top_p": chat.top_p,
            "stream": false,
        });
        if let Some(seed) = chat.seed {
            body["seed"] = seed.into();
        }
        let json = self.send(self.client.post(&self.url).json(&body))?;
        let text = json
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| EndpointError::BadResponse("no `choices[0].message.content`".into()))?;
        let count = |pointer: &str| json.pointer(pointer).and_then(Value::as_u64);
        Ok(ChatAnswer {
            text,
            finish_reason: json
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
                .map(str::to_string),
            prompt_tokens: count("/usage/prompt_tokens"),
            completion_tokens: count("/usage/completion_tokens"),
            // OpenAI, vLLM and Catena say it in the usage; llama.cpp's server in its timings.
            cached_tokens: count("/usage/prompt_tokens_details/cached_tokens")
                .or_else(|| count("/timings/cache_n")),
        })
    }

    /// The names of the models the server serves (`GET {base}/models`), in its order.
    pub fn models(&self) -> Result<Vec<String>, EndpointError> {
        let json = self.send(self.client.get(&self.models_url))?;
        let listed = json
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| EndpointError::BadResponse("no `data` list of models".into()))?;
        Ok(listed
            .iter()
            .filter_map(|m| m.get("id").and_then(Value::as_str))
            .map(str::to_string)
            .collect())
    }

    fn send(&self, request: reqwest::blocking::RequestBuilder) -> Result<Value, EndpointError> {
        send_json(request, self.key.as_ref())
    }
}

/// One chat turn: a system and a user message, the answer's budget and its sampling.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    pub system: &'a str,
    pub user: &'a str,
    pub max_tokens: usize,
    pub temperature: f32,
    pub top_p: f32,
    pub seed: Option<u32>,
}

/// The answer, and the token counts the server reported (`None` where it said nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatAnswer {
    pub text: String,
    /// `stop` (the model ended its turn), `length` (the budget ran out), ...
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Prompt tokens the server took from its cache instead of evaluating them.
    pub cached_tokens: Option<u64>,
}

/// Sends `request` with `key` as a bearer token and turns an error status into its
/// [`EndpointError`]; the answer's JSON on success.
pub(crate) fn send_json(
    request: reqwest::blocking::RequestBuilder,
    key: Option<&ApiKey>,
) -> Result<Value, EndpointError> {
    let mut request = request;
    if let Some(key) = key {
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
    json.ok_or_else(|| EndpointError::BadResponse("not JSON".into()))
}

/// Checks that `base_url` is an http(s) address and builds the client that talks to it: no
/// redirects (the key goes only where the user said), [`ANSWER_TIMEOUT`] per answer.
pub(crate) fn endpoint_client(
    base_url: &str,
) -> Result<(String, reqwest::blocking::Client), EndpointError> {
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
    Ok((base.as_str().to_string(), client))
}

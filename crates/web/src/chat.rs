//! A model behind an OpenAI-compatible chat endpoint (`POST {base}/chat/completions`), for the
//! page summariser when the user wants a bigger model than the run's own, as the reference
//! release summarised with a 72B model: a llama.cpp server, another `catena serve`, a vLLM
//! server, or a hosted service with the user's key. The address is the user's (settings), so it
//! may be this machine's own; the key is sent only there and never printed.

use crate::body::{Answer, BodyError, ReadLimits, error_message, size};
use crate::search::ApiKey;
use serde_json::{Value, json};
use std::time::Duration;

/// How long one answer may take, connection to last byte (a page summary from a big local model
/// is slow), and the most it may bring: a summary or a completion is a few thousand tokens, the
/// largest answers are llama.cpp's token lists for a whole prompt (`/tokenize`), about 10 MB for
/// the biggest page the reader takes. An endpoint sending more is broken or hostile.
pub(crate) const ANSWER_LIMITS: ReadLimits = ReadLimits {
    timeout: Duration::from_secs(300),
    max_bytes: 32 << 20,
};

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
    #[error("the endpoint's answer is larger than {}; it was cut off there", size(*.0))]
    TooLarge(u64),
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
    limits: ReadLimits,
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
            limits: ANSWER_LIMITS,
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
        // An empty system message is none: the server's template then uses its default, as it
        // does for any client that sends none.
        let messages = if chat.system.is_empty() {
            json!([{"role": "user", "content": chat.user}])
        } else {
            json!([
                {"role": "system", "content": chat.system},
                {"role": "user", "content": chat.user},
            ])
        };
        let mut body = json!({
            "model": self.model,
            "messages": messages,
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
        send_json(request, self.key.as_ref(), self.limits)
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
/// [`EndpointError`]; the answer's JSON on success, read within `limits` ([`ANSWER_LIMITS`]
/// outside tests).
pub(crate) fn send_json(
    request: reqwest::blocking::RequestBuilder,
    key: Option<&ApiKey>,
    limits: ReadLimits,
) -> Result<Value, EndpointError> {
    let mut request = request;
    if let Some(key) = key {
        request = request.bearer_auth(key.expose());
    }
    let seconds = limits.timeout.as_secs();
    let answer = Answer::send(request, limits).map_err(|e| {
        EndpointError::Network(if e.is_timeout() {
            format!("no answer within {seconds} seconds")
        } else {
            e.without_url().to_string()
        })
    })?;
    let status = answer.response.status().as_u16();
    match status {
        200..=299 => {}
        401 | 403 => return Err(EndpointError::Unauthorized(status)),
        429 => return Err(EndpointError::RateLimited),
        _ => {
            let start = answer.error_start();
            let message = error_message(&start);
            let json: Option<Value> = serde_json::from_slice(&start).ok();
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
    let body = answer.body().map_err(|e| match e {
        BodyError::Timeout(_) => {
            EndpointError::Network(format!("no answer within {seconds} seconds"))
        }
        BodyError::TooLarge(cap) => EndpointError::TooLarge(cap),
        BodyError::Broken(reason) => EndpointError::Network(format!("the answer {reason}")),
    })?;
    serde_json::from_slice(&body).map_err(|_| EndpointError::BadResponse("not JSON".into()))
}

/// Checks that `base_url` is an http(s) address and builds the client that talks to it: no
/// redirects (the key goes only where the user said).
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
        .timeout(ANSWER_LIMITS.timeout)
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("catena/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| EndpointError::Network(e.to_string()))?;
    Ok((base.as_str().to_string(), client))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::testing::{dribbling, flood};

    const JSON_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json";

    #[test]
    fn an_answer_that_never_ends_is_cut_at_the_cap() {
        let endpoint = ChatEndpoint::new(&flood(JSON_HEAD), "m", None).unwrap();
        assert_eq!(
            endpoint.chat("s", "u", 10),
            Err(EndpointError::TooLarge(32 << 20))
        );
        assert!(
            EndpointError::TooLarge(32 << 20)
                .to_string()
                .contains("larger than 32 MiB")
        );
    }

    #[test]
    fn an_answer_that_dribbles_is_cut_at_the_deadline() {
        let base = dribbling(JSON_HEAD, Duration::from_millis(100));
        let mut endpoint = ChatEndpoint::new(&base, "m", None).unwrap();
        endpoint.limits.timeout = Duration::from_secs(1);
        let started = std::time::Instant::now();
        assert_eq!(
            endpoint.chat("s", "u", 10),
            Err(EndpointError::Network("no answer within 1 seconds".into()))
        );
        // 10,000 bytes a tenth of a second apart would take 17 minutes.
        assert!(started.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn an_error_answer_is_read_only_as_far_as_its_message() {
        let endpoint = ChatEndpoint::new(
            &flood("HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain"),
            "m",
            None,
        )
        .unwrap();
        assert_eq!(
            endpoint.chat("s", "u", 10),
            Err(EndpointError::Status {
                status: 500,
                message: "no message".into()
            })
        );
    }
}

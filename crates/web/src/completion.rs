//! llama.cpp's own completion API (`llama-server`'s `/tokenize`, `/detokenize`, `/completion`,
//! `/props`): raw completion over token ids with stop strings, for Chain-of-Agents runs at a
//! server. The chat API cannot carry them: a chain is one assistant turn that Catena extends
//! with observations, token by token, and the KV prefix the server keeps (`cache_prompt`) is
//! what makes each step cheap. The server reports how much of each prompt it took from that
//! cache (`timings.cache_n`) and how much it evaluated (`timings.prompt_n`).

use crate::EndpointError;
use crate::body::ReadLimits;
use crate::chat::{ANSWER_LIMITS, endpoint_client, send_json};
use crate::search::ApiKey;
use serde_json::{Value, json};
use std::time::Duration;

/// A llama.cpp server's completion API.
pub struct CompletionEndpoint {
    /// The server's root: llama.cpp's own API is beside, not under, its `/v1`.
    root: String,
    key: Option<ApiKey>,
    client: reqwest::blocking::Client,
    limits: ReadLimits,
}

impl std::fmt::Debug for CompletionEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionEndpoint")
            .field("root", &self.root)
            .field("key", &self.key)
            .finish()
    }
}

/// What the server says about itself (`GET /props`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProps {
    /// The context of one slot, in tokens.
    pub context_size: usize,
    /// The model's chat template (Jinja source), empty where the server does not say.
    pub chat_template: String,
    /// The name the server gives its model.
    pub model: String,
}

/// One raw completion: the context as token ids, and how to continue it.
#[derive(Debug, Clone, Copy)]
pub struct CompletionRequest<'a> {
    pub prompt: &'a [i32],
    pub max_tokens: usize,
    pub stops: &'a [String],
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub seed: u32,
}

/// Why the server stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompletionStop {
    /// The model produced an end-of-generation token (it is the last of the tokens).
    EndOfGeneration,
    /// A stop string appeared; the server cut the text before it.
    StopString(String),
    /// The token budget or the context ran out.
    Limit,
}

/// A completion as the server returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The text, without the stop string that ended it.
    pub text: String,
    /// Every token sampled, the end-of-generation one and the one that completed a stop string
    /// included (that one may carry text past the stop string).
    pub tokens: Vec<i32>,
    pub stop: CompletionStop,
    /// Prompt tokens the server evaluated for this request.
    pub evaluated_prompt_tokens: u64,
    /// Prompt tokens the server took from its cache.
    pub cached_tokens: u64,
    /// The server's time evaluating the prompt, and sampling the tokens.
    pub prompt_time: Duration,
    pub decode_time: Duration,
}

impl CompletionEndpoint {
    /// The server at `base_url` (`http://127.0.0.1:8080`; a trailing `/v1` is dropped), with
    /// `key` sent as a bearer token.
    pub fn new(base_url: &str, key: Option<ApiKey>) -> Result<CompletionEndpoint, EndpointError> {
        let (base, client) = endpoint_client(base_url)?;
        let base = base.trim_end_matches('/');
        let root = base.strip_suffix("/v1").unwrap_or(base).to_string();
        Ok(CompletionEndpoint {
            root,
            key,
            client,
            limits: ANSWER_LIMITS,
        })
    }

    /// The token ids of `text`; `special` lets control-token text (`<|im_start|>`) become a
    /// control token, which only the chat template's own markers may.
    pub fn tokenize(&self, text: &str, special: bool) -> Result<Vec<i32>, EndpointError> {
        let body = json!({"content": text, "add_special": false, "parse_special": special});
        let answer = self.post("tokenize", &body)?;
        token_list(answer.get("tokens"))
            .ok_or_else(|| EndpointError::BadResponse("no `tokens` list of ids".into()))
    }

    /// The text of `tokens`.
    pub fn detokenize(&self, tokens: &[i32]) -> Result<String, EndpointError> {
        let answer = self.post("detokenize", &json!({"tokens": tokens}))?;
        answer
            .get("content")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| EndpointError::BadResponse("no `content`".into()))
    }

    /// The server's context size, chat template and model name.
    pub fn props(&self) -> Result<ServerProps, EndpointError> {
        let answer = send_json(
            self.client.get(format!("{}/props", self.root)),
            self.key.as_ref(),
            self.limits,
        )?;
        let context_size = answer
            .pointer("/default_generation_settings/n_ctx")
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                EndpointError::BadResponse(
                    "no `default_generation_settings.n_ctx` (is this llama.cpp's server?)".into(),
                )
            })?;
        let text = |key: &str| {
            answer
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Ok(ServerProps {
            context_size: context_size as usize,
            chat_template: text("chat_template"),
            model: text("model_alias"),
        })
    }

    /// Continues `request.prompt`, keeping the server's cached prefix.
    pub fn complete(&self, request: &CompletionRequest<'_>) -> Result<Completion, EndpointError> {
        let body = json!({
            "prompt": request.prompt,
            "n_predict": request.max_tokens,
            "stop": request.stops,
            "temperature": request.temperature,
            "top_k": request.top_k,
            "top_p": request.top_p,
            // The samplers Catena's own engine does not apply, switched off.
            "min_p": 0.0,
            "typical_p": 1.0,
            "repeat_penalty": 1.0,
            "seed": request.seed,
            "cache_prompt": true,
            "return_tokens": true,
            "stream": false,
        });
        let answer = self.post("completion", &body)?;
        let bad = |what: &str| EndpointError::BadResponse(format!("no `{what}` in the completion"));
        let text = answer
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("content"))?
            .to_string();
        let tokens = token_list(answer.get("tokens")).ok_or_else(|| bad("tokens"))?;
        let stop = match answer.get("stop_type").and_then(Value::as_str) {
            Some("eos") => CompletionStop::EndOfGeneration,
            Some("word") => CompletionStop::StopString(
                answer
                    .get("stopping_word")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("stopping_word"))?
                    .to_string(),
            ),
            Some("limit") => CompletionStop::Limit,
            other => {
                return Err(EndpointError::BadResponse(format!(
                    "the completion stopped for an unknown reason: {other:?}"
                )));
            }
        };
        let count = |key: &str| answer.pointer(key).and_then(Value::as_u64).unwrap_or(0);
        let millis = |key: &str| {
            let ms = answer.pointer(key).and_then(Value::as_f64).unwrap_or(0.0);
            Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default()
        };
        Ok(Completion {
            text,
            tokens,
            stop,
            evaluated_prompt_tokens: count("/timings/prompt_n"),
            cached_tokens: count("/timings/cache_n"),
            prompt_time: millis("/timings/prompt_ms"),
            decode_time: millis("/timings/predicted_ms"),
        })
    }

    fn post(&self, path: &str, body: &Value) -> Result<Value, EndpointError> {
        send_json(
            self.client.post(format!("{}/{path}", self.root)).json(body),
            self.key.as_ref(),
            self.limits,
        )
    }
}

/// A JSON list of token ids, `None` if it is not one.
fn token_list(value: Option<&Value>) -> Option<Vec<i32>> {
    value?
        .as_array()?
        .iter()
        .map(|id| id.as_i64().and_then(|id| i32::try_from(id).ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_native_api_sits_at_the_servers_root() {
        for url in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080/v1",
            "http://127.0.0.1:8080/v1/",
        ] {
            let endpoint = CompletionEndpoint::new(url, None).unwrap();
            assert_eq!(endpoint.root, "http://127.0.0.1:8080", "{url}");
        }
        assert!(CompletionEndpoint::new("file:///etc/passwd", None).is_err());
    }

    #[test]
    fn a_huge_or_slow_answer_is_cut() {
        use crate::body::testing::{dribbling, flood};
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json";
        let endpoint = CompletionEndpoint::new(&flood(head), None).unwrap();
        assert_eq!(
            endpoint.tokenize("text", false),
            Err(EndpointError::TooLarge(32 << 20))
        );
        let mut endpoint =
            CompletionEndpoint::new(&dribbling(head, Duration::from_millis(100)), None).unwrap();
        endpoint.limits.timeout = Duration::from_secs(1);
        assert!(matches!(
            endpoint.props(),
            Err(EndpointError::Network(reason)) if reason.contains("within 1 seconds")
        ));
    }

    #[test]
    fn token_lists_are_read_strictly() {
        assert_eq!(
            token_list(Some(&json!([1, 2, 151645]))),
            Some(vec![1, 2, 151645])
        );
        assert_eq!(token_list(Some(&json!([1, "2"]))), None);
        assert_eq!(token_list(Some(&json!([1, 1u64 << 40]))), None);
        assert_eq!(token_list(None), None);
    }
}

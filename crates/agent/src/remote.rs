//! The agents' model at an OpenAI-compatible server (llama.cpp's `llama-server`, vLLM, SGLang,
//! another `catena serve`, a hosted API): each chat turn is one request, with the token counts
//! the server reports. This is how a distillation teacher can be bigger than the user's machine.

use catena_engine::{
    ChatEngine, ChatReply, ChatTurn, EngineError, GenerateLimits, GenerationStop, SamplingParams,
};
use catena_web::{ChatEndpoint, ChatRequest, EndpointError};

/// Where the key of a remote engine comes from: never a flag, so it is not in the shell's
/// history or the process list.
pub const ENGINE_KEY_ENV: &str = "CATENA_ENGINE_KEY";

/// A chat model at a server ([`ChatEngine`]).
pub struct RemoteChat {
    endpoint: ChatEndpoint,
    sampling: SamplingParams,
}

impl RemoteChat {
    pub fn new(endpoint: ChatEndpoint, sampling: SamplingParams) -> Self {
        RemoteChat { endpoint, sampling }
    }
}

impl ChatEngine for RemoteChat {
    fn chat(
        &mut self,
        turn: &ChatTurn,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatReply, EngineError> {
        let stopped = |stop| ChatReply {
            text: String::new(),
            stop,
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
        };
        if limits.is_cancelled() {
            return Ok(stopped(GenerationStop::Cancelled));
        }
        if limits
            .deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
        {
            return Ok(stopped(GenerationStop::Deadline));
        }
        let request = ChatRequest {
            system: &turn.system,
            user: &turn.user,
            max_tokens: turn.max_tokens.min(limits.max_tokens),
            temperature: self.sampling.temperature,
            top_p: self.sampling.top_p,
            seed: Some(self.sampling.seed),
        };
        let answer = self.endpoint.complete(&request).map_err(|e| match e {
            EndpointError::TooLong(message) => EngineError::PromptTooLong(message),
            e => EngineError::Remote(e.to_string()),
        })?;
        on_text(&answer.text);
        let count = |n: Option<u64>| n.map_or(0, |n| n as usize);
        Ok(ChatReply {
            stop: match answer.finish_reason.as_deref() {
                Some("length") => GenerationStop::MaxTokens,
                _ => GenerationStop::EndOfTurn,
            },
            prompt_tokens: count(answer.prompt_tokens),
            cached_tokens: count(answer.cached_tokens),
            completion_tokens: count(answer.completion_tokens),
            text: answer.text,
        })
    }

    fn context_size(&self) -> usize {
        0
    }

    fn set_sampling(&mut self, sampling: SamplingParams) {
        self.sampling = sampling;
    }
}

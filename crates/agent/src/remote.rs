//! The model at a server. The explicit agents' chat turns go to any OpenAI-compatible server
//! (llama.cpp's `llama-server`, vLLM, SGLang, another `catena serve`, a hosted API): each turn
//! is one request, with the token counts the server reports ([`RemoteChat`]). A Chain-of-Agents
//! run needs raw completion over token ids with the server's prefix cache, which llama.cpp's
//! own API gives ([`RemoteSession`]). This is how a distillation teacher can be bigger than the
//! user's machine.

use catena_engine_api::{
    ChatEngine, ChatReply, ChatTurn, EngineError, GenerateLimits, Generation, GenerationStop,
    PromptPart, SamplingParams, Session, SessionState, SideChat, StopMatcher, TokenRecord,
};
use catena_engine_api::{ChatMessage, PromptStart, StartChat, TaskChat, chatml_prompt};
use catena_web::{
    ChatEndpoint, ChatRequest, CompletionEndpoint, CompletionRequest, CompletionStop, EndpointError,
};
use std::time::Instant;

/// Where the key of a remote engine comes from: never a flag, so it is not in the shell's
/// history or the process list.
pub const ENGINE_KEY_ENV: &str = "CATENA_ENGINE_KEY";

/// The fewest tokens a reply of `text` can have taken, for a server that claims fewer: no
/// tokenizer of the server's model is at hand, and no vocabulary averages more than
/// [`MAX_CHARS_PER_TOKEN`] characters a token over a reply (English averages about four), so an
/// honest count is never raised. Any reply, even an empty one, ended with at least one token.
/// A budget counted this way runs out however little a server claims (issue 32: one that
/// claimed zero tokens ran a run with `--max-tokens 16` for ever).
pub fn fewest_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(MAX_CHARS_PER_TOKEN).max(1)
}

/// See [`fewest_tokens`].
pub const MAX_CHARS_PER_TOKEN: usize = 16;

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
        let answer = self.endpoint.complete(&request).map_err(remote)?;
        on_text(&answer.text);
        let count = |n: Option<u64>| n.map_or(0, |n| n as usize);
        Ok(ChatReply {
            stop: match answer.finish_reason.as_deref() {
                Some("length") => GenerationStop::MaxTokens,
                _ => GenerationStop::EndOfTurn,
            },
            prompt_tokens: count(answer.prompt_tokens),
            cached_tokens: count(answer.cached_tokens),
            completion_tokens: count(answer.completion_tokens).max(fewest_tokens(&answer.text)),
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

/// A Chain-of-Agents run's context at llama.cpp's `llama-server` ([`Session`]): Catena keeps the
/// context as token ids, tokenises each appended part at the server (only the chat template's
/// markers as control tokens, docs/PROTOCOL.md §2) and sends the whole context with every
/// generation; the server keeps the evaluated prefix in its slot, so each step evaluates only
/// what is new. What it says it took from that cache is counted in [`RemoteUsage`].
///
/// The sampled tokens' log-probabilities are not asked for ([`TokenRecord::logprob`] is `None`):
/// training reads them from the local engine only.
pub struct RemoteSession {
    endpoint: CompletionEndpoint,
    /// For [`Session::side_chat`]: the same server's chat API.
    chat: ChatEndpoint,
    state: SessionState,
    /// How many of the context's tokens the server has evaluated: all but the last sampled token
    /// and what was appended since, which the next request sends.
    evaluated: usize,
    usage: RemoteUsage,
}

/// What a [`RemoteSession`] sent and what the server reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteUsage {
    /// Completion requests.
    pub requests: usize,
    /// Prompt tokens sent, summed over the requests (each sends the whole context).
    pub sent_tokens: usize,
    /// Of those, the tokens the server took from its cache.
    pub cached_tokens: usize,
    /// Of those, the tokens the server evaluated.
    pub evaluated_tokens: usize,
}

impl RemoteSession {
    /// A session at the llama.cpp server `endpoint`, empty until [`StartChat::start_chat`] puts
    /// a task's prompt in. The model's template must be ChatML (the AFMs' and Qwen's): the only
    /// one whose markers Catena can keep apart from text it did not write, so any other is
    /// refused here.
    pub fn connect(
        endpoint: CompletionEndpoint,
        chat: ChatEndpoint,
        sampling: SamplingParams,
    ) -> Result<RemoteSession, EngineError> {
        let props = endpoint.props().map_err(remote)?;
        if !props.chat_template.contains("<|im_start|>") {
            return Err(EngineError::Remote(
                "a Chain-of-Agents run at a server needs a model with a ChatML chat template \
                 (the AFMs, Qwen); this server's model has another one"
                    .into(),
            ));
        }
        Ok(RemoteSession {
            endpoint,
            chat,
            state: SessionState {
                context_size: props.context_size,
                sampling,
                ..SessionState::default()
            },
            evaluated: 0,
            usage: RemoteUsage::default(),
        })
    }

    pub fn usage(&self) -> RemoteUsage {
        self.usage
    }

    fn push_forced(&mut self, ids: impl IntoIterator<Item = i32>) {
        self.state
            .tokens
            .extend(ids.into_iter().map(|id| TokenRecord { id, logprob: None }));
    }

    /// `text` as the server tokenises it, for a generation whose text came without its tokens
    /// (a server that claims it sampled none): the context holds what was written all the same,
    /// and the next request does not repeat this one.
    fn push_text(&mut self, text: &str) -> Result<(), EngineError> {
        let forced = self.endpoint.tokenize(text, false).map_err(remote)?;
        self.push_forced(forced);
        Ok(())
    }

    /// `sampled`, or `text`'s own tokens when the server sent none.
    fn push_sampled(&mut self, sampled: Vec<i32>, text: &str) -> Result<(), EngineError> {
        if sampled.is_empty() {
            return self.push_text(text);
        }
        self.push_forced(sampled);
        Ok(())
    }

    /// The tokens of a generation that ended in `text` (stop string included): the sampled
    /// ones, except that a last token carrying text past the stop string is replaced by the
    /// tokens of the part that is kept, as the local engine does, so the context holds exactly
    /// the returned text.
    fn settle_stop(&mut self, sampled: &[i32], text: &str) -> Result<(), EngineError> {
        let Some((_, before_last)) = sampled.split_last() else {
            return self.push_text(text);
        };
        let all = self.endpoint.detokenize(sampled).map_err(remote)?;
        if all == text {
            self.push_forced(sampled.iter().copied());
            return Ok(());
        }
        let before = self.endpoint.detokenize(before_last).map_err(remote)?;
        let kept = match text.strip_prefix(before.as_str()) {
            Some(kept) => {
                self.push_forced(before_last.iter().copied());
                kept
            }
            // The server's text does not extend its own tokens' text (an odd tokenizer):
            // the context takes the text as it reads.
            None => text,
        };
        let forced = self.endpoint.tokenize(kept, false).map_err(remote)?;
        self.push_forced(forced);
        Ok(())
    }
}

/// A server's refusal as an engine error: a prompt too long for its context stays that.
fn remote(error: EndpointError) -> EngineError {
    match error {
        EndpointError::TooLong(message) => EngineError::PromptTooLong(message),
        e => EngineError::Remote(e.to_string()),
    }
}

impl StartChat for RemoteSession {
    /// Replaces the context with the chat's prompt. The server keeps what its slot shares with
    /// it and says so with the next generation ([`RemoteUsage::cached_tokens`]), so none is
    /// counted as kept here.
    fn start_chat(&mut self, chat: &TaskChat<'_>) -> Result<PromptStart, EngineError> {
        self.state.tokens.clear();
        self.evaluated = 0;
        let prompt = chatml_prompt(&[
            ChatMessage::new("system", chat.system),
            ChatMessage::new("user", chat.user),
        ]);
        let prompt_tokens = self.append(&prompt)?;
        Ok(PromptStart {
            prompt_tokens,
            cached_tokens: 0,
        })
    }
}

impl Session for RemoteSession {
    fn append(&mut self, parts: &[PromptPart]) -> Result<usize, EngineError> {
        let mut added = Vec::new();
        for part in parts {
            added.extend(
                self.endpoint
                    .tokenize(&part.text, part.special)
                    .map_err(remote)?,
            );
        }
        let total = self.state.tokens.len() + added.len();
        if total > self.state.context_size {
            return Err(EngineError::ContextOverflow {
                context_size: self.state.context_size,
                needed: total - self.state.context_size,
            });
        }
        let count = added.len();
        self.push_forced(added);
        self.state.stats.appended_tokens += count;
        Ok(count)
    }

    fn generate(
        &mut self,
        stops: &StopMatcher,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, EngineError> {
        let stopped = |stop| Generation {
            text: String::new(),
            stop,
            tokens: 0,
        };
        if limits.is_cancelled() {
            return Ok(stopped(GenerationStop::Cancelled));
        }
        if limits.max_tokens == 0 {
            return Ok(stopped(GenerationStop::MaxTokens));
        }
        if limits.deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(stopped(GenerationStop::Deadline));
        }
        let room = self
            .state
            .context_size
            .saturating_sub(self.state.tokens.len());
        if room == 0 {
            return Ok(stopped(GenerationStop::ContextFull));
        }
        let prompt: Vec<i32> = self.state.tokens.iter().map(|t| t.id).collect();
        let request = CompletionRequest {
            prompt: &prompt,
            max_tokens: limits.max_tokens.min(room),
            stops: stops.stops(),
            temperature: self.state.sampling.temperature,
            top_k: self.state.sampling.top_k,
            top_p: self.state.sampling.top_p,
            seed: self.state.sampling.seed,
        };
        let completion = self.endpoint.complete(&request).map_err(remote)?;
        let sampled = completion.tokens.len();
        let context_before = self.state.tokens.len();
        self.usage.requests += 1;
        self.usage.sent_tokens += prompt.len();
        self.usage.cached_tokens += completion.cached_tokens as usize;
        self.usage.evaluated_tokens += completion.evaluated_prompt_tokens as usize;
        // Each sampled token but the last was evaluated to sample the next one; the last waits
        // for the next request, as in the local engine.
        let decoded = sampled.saturating_sub(1);
        self.state.stats.prefill_tokens += completion.evaluated_prompt_tokens as usize;
        self.state.stats.decode_tokens += decoded;
        self.state.stats.evaluated_tokens += completion.evaluated_prompt_tokens as usize + decoded;
        self.state.stats.prefill_time += completion.prompt_time;
        self.state.stats.decode_time += completion.decode_time;
        let (text, stop) = match completion.stop {
            CompletionStop::StopString(word) => {
                let index = stops
                    .stops()
                    .iter()
                    .position(|s| *s == word)
                    .ok_or_else(|| {
                        EngineError::Remote(format!(
                            "the server stopped at `{word}`, which is not a stop string of this run"
                        ))
                    })?;
                let text = completion.text + &word;
                self.settle_stop(&completion.tokens, &text)?;
                (text, GenerationStop::StopString { index })
            }
            CompletionStop::EndOfGeneration => {
                self.push_sampled(completion.tokens, &completion.text)?;
                (completion.text, GenerationStop::EndOfTurn)
            }
            CompletionStop::Limit => {
                self.push_sampled(completion.tokens, &completion.text)?;
                let stop = if self.state.tokens.len() >= self.state.context_size {
                    GenerationStop::ContextFull
                } else {
                    GenerationStop::MaxTokens
                };
                (completion.text, stop)
            }
        };
        // As in the local engine, the context counts what is in the KV cache.
        self.evaluated = prompt.len() + decoded;
        self.state.stats.context_tokens = self.evaluated;
        // The budget counts what was written: a server that claims no tokens for its text is
        // counted the text's tokens.
        let generated = match sampled {
            0 => self.state.tokens.len().saturating_sub(context_before),
            n => n,
        };
        self.state.stats.generated_tokens += generated;
        on_text(&text);
        Ok(Generation {
            text,
            stop,
            tokens: generated,
        })
    }

    fn state(&self) -> &SessionState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut SessionState {
        &mut self.state
    }

    fn side_chat(&mut self, chat: &SideChat) -> Result<String, EngineError> {
        self.chat
            .chat(&chat.system, &chat.user, chat.max_tokens)
            .map_err(remote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_counts_at_least_its_texts_fewest_tokens() {
        assert_eq!(fewest_tokens(""), 1);
        assert_eq!(fewest_tokens("Yes."), 1);
        assert_eq!(fewest_tokens(&"a".repeat(16)), 1);
        assert_eq!(fewest_tokens(&"a".repeat(17)), 2);
        // Characters, not bytes.
        assert_eq!(fewest_tokens(&"é".repeat(32)), 2);
    }
}

//! Chat turns on a local model: one session for every turn, so the prefix consecutive prompts
//! share (the chat template's opening, an agent's system message when the same agent runs
//! twice) is kept in the KV cache and only the rest is evaluated; an agent's system message is
//! a task prefix, which a single session takes from the prompt cache when its context does not
//! hold it. The session is a context of its own ([`LocalChat::new`]) or one sequence of a batch
//! ([`LocalChat::over`]), so several multi-agent runs can decode together.

use super::{LlamaEngine, LlamaSession};
use crate::{
    ChatEngine, ChatReply, ChatTurn, EngineError, GenerateLimits, SessionOptions, StartPrompt,
    StopMatcher,
};

/// A local model answering chat turns ([`ChatEngine`]) in one session.
pub struct LocalChat<'m, S = LlamaSession<'m>> {
    engine: &'m LlamaEngine,
    session: S,
}

impl<'m> LocalChat<'m> {
    /// Chat turns in a context of their own.
    pub fn new(engine: &'m LlamaEngine, options: &SessionOptions) -> Result<Self, EngineError> {
        Ok(LocalChat {
            engine,
            session: engine.session(options)?,
        })
    }
}

impl<'m, S: StartPrompt> LocalChat<'m, S> {
    /// Chat turns in `session` (a [`BatchedSession`](super::BatchedSession), say), which
    /// `engine` made.
    pub fn over(engine: &'m LlamaEngine, session: S) -> Self {
        LocalChat { engine, session }
    }
}

impl<S: StartPrompt> ChatEngine for LocalChat<'_, S> {
    fn chat(
        &mut self,
        turn: &ChatTurn,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatReply, EngineError> {
        let (ids, shared) = self.engine.task_prompt(&catena_engine_api::TaskChat {
            system: &turn.system,
            user: &turn.user,
            user_shared: 0,
        })?;
        let context_size = self.session.context_size();
        // The prompt and at least one answer token must fit; the answer's own budget is cut to
        // what is left (the generation then ends as `ContextFull`).
        if ids.len() + 1 > context_size {
            return Err(EngineError::ContextOverflow {
                context_size,
                needed: ids.len() + 1,
            });
        }
        let cached_tokens = self.session.start_task_prompt(&ids, shared)?;
        let limits = GenerateLimits {
            max_tokens: limits.max_tokens.min(turn.max_tokens),
            ..limits
        };
        let generation =
            self.session
                .generate(&StopMatcher::new(Vec::<String>::new()), limits, on_text)?;
        Ok(ChatReply {
            text: generation.text,
            stop: generation.stop,
            prompt_tokens: ids.len(),
            cached_tokens,
            completion_tokens: generation.tokens,
        })
    }

    fn context_size(&self) -> usize {
        self.session.context_size()
    }

    fn set_sampling(&mut self, sampling: crate::SamplingParams) {
        self.session.set_sampling(sampling);
    }
}

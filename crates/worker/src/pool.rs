//! Kept KV caches: each idle session remembers the tokens it evaluated, and a new request takes
//! the one that shares the longest prefix with its prompt, so a follow-up message in a
//! conversation (or an agent run with the same profile instructions) evaluates only the tokens
//! that are new.

use catena_engine::llama::{LlamaEngine, LlamaSession};
use catena_engine::{EngineError, Session, SessionOptions};
use std::time::Instant;

/// A session lent out for one request.
pub struct Checkout {
    pub session: LlamaSession<'static>,
    /// Leading prompt tokens already in the session's KV cache.
    pub cached: usize,
    /// The stored conversation this continues, when the prompt extends a whole earlier one.
    pub conversation: Option<String>,
}

struct Idle {
    session: LlamaSession<'static>,
    used: Instant,
    conversation: Option<String>,
}

pub struct SessionPool {
    engine: &'static LlamaEngine,
    options: SessionOptions,
    /// Most sessions alive at once (each holds a KV cache of `options.context_size`).
    capacity: usize,
    idle: Vec<Idle>,
}

impl SessionPool {
    pub fn new(engine: &'static LlamaEngine, options: SessionOptions, capacity: usize) -> Self {
        SessionPool {
            engine,
            options,
            capacity: capacity.max(1),
            idle: Vec::new(),
        }
    }

    /// The session best suited to `prompt`, truncated to what it shares with it (always leaving
    /// at least one token to evaluate, so the next generation has fresh logits).
    pub fn checkout(&mut self, prompt: &[i32]) -> Result<Checkout, EngineError> {
        let best = self
            .idle
            .iter()
            .enumerate()
            .map(|(i, idle)| {
                (
                    i,
                    common_prefix(idle.session.tokens().iter().map(|t| t.id), prompt),
                )
            })
            .max_by_key(|&(_, shared)| shared);
        let reuse = match best {
            Some((i, shared)) if shared > 0 => Some((i, shared)),
            _ if self.idle.len() + 1 > self.capacity => {
                // Full: recycle the least recently used context rather than allocate another.
                let oldest = self
                    .idle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, idle)| idle.used)
                    .map(|(i, _)| i);
                oldest.map(|i| (i, 0))
            }
            _ => None,
        };
        let Some((index, shared)) = reuse else {
            return Ok(Checkout {
                session: self.engine.session(&self.options)?,
                cached: 0,
                conversation: None,
            });
        };
        let idle = self.idle.swap_remove(index);
        let mut session = idle.session;
        let previous = session.tokens().len();
        let keep = shared.min(prompt.len().saturating_sub(1));
        session.truncate(keep)?;
        // The prompt extends the whole earlier conversation (up to its end-of-turn token): a
        // follow-up message.
        let continues = keep > 0 && shared + 1 >= previous;
        Ok(Checkout {
            session,
            cached: keep,
            conversation: if continues { idle.conversation } else { None },
        })
    }

    /// Returns a session to the pool after a request.
    pub fn checkin(&mut self, session: LlamaSession<'static>, conversation: Option<String>) {
        self.idle.push(Idle {
            session,
            used: Instant::now(),
            conversation,
        });
        while self.idle.len() > self.capacity {
            if let Some(oldest) = self
                .idle
                .iter()
                .enumerate()
                .min_by_key(|(_, idle)| idle.used)
                .map(|(i, _)| i)
            {
                self.idle.swap_remove(oldest);
            }
        }
    }
}

fn common_prefix(a: impl Iterator<Item = i32>, b: &[i32]) -> usize {
    a.zip(b).take_while(|(x, y)| x == *y).count()
}

#[cfg(test)]
mod tests {
    #[test]
    fn common_prefix_counts_equal_leading_tokens() {
        assert_eq!(super::common_prefix([1, 2, 3].into_iter(), &[1, 2, 4]), 2);
        assert_eq!(super::common_prefix([1, 2].into_iter(), &[1, 2, 3]), 2);
        assert_eq!(super::common_prefix([5].into_iter(), &[1]), 0);
        assert_eq!(super::common_prefix([].into_iter(), &[1]), 0);
    }
}

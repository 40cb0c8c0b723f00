//! Kept KV caches: each idle session remembers the tokens it evaluated, and a new request takes
//! the one that shares the longest prefix with its prompt, so a follow-up message in a
//! conversation (or an agent run with the same profile instructions) evaluates only the tokens
//! that are new.
//!
//! The sessions are contexts of their own (one request at a time) or the sequences of one batched
//! context (`catena serve --parallel N`, where the N slots are all the caches there are); the
//! pool treats both alike through [`StartPrompt`].

use catena_engine_api::{EngineError, StartPrompt};
use std::time::Instant;

/// A session lent out for one request.
pub struct Checkout<S> {
    pub session: S,
    /// Leading prompt tokens already in the session's KV cache.
    pub cached: usize,
    /// The stored conversation this continues, when the prompt extends a whole earlier one.
    pub conversation: Option<String>,
}

struct Idle<S> {
    session: S,
    used: Instant,
    conversation: Option<String>,
}

/// Makes another session while the pool has fewer than its capacity alive.
pub type MakeSession<S> = Box<dyn FnMut() -> Result<S, EngineError> + Send>;

pub struct SessionPool<S> {
    /// `None`: the pool holds every session it will ever have (the slots of a batched context).
    make: Option<MakeSession<S>>,
    /// Most sessions alive at once (each holds a KV cache).
    capacity: usize,
    idle: Vec<Idle<S>>,
    /// Sessions checked out now.
    lent: usize,
}

impl<S: StartPrompt> SessionPool<S> {
    /// A pool that makes sessions as they are needed, up to `capacity`.
    pub fn new(make: MakeSession<S>, capacity: usize) -> Self {
        SessionPool {
            make: Some(make),
            capacity: capacity.max(1),
            idle: Vec::new(),
            lent: 0,
        }
    }

    /// A pool of exactly these sessions.
    pub fn fixed(sessions: Vec<S>) -> Self {
        let now = Instant::now();
        SessionPool {
            make: None,
            capacity: sessions.len(),
            idle: sessions
                .into_iter()
                .map(|session| Idle {
                    session,
                    used: now,
                    conversation: None,
                })
                .collect(),
            lent: 0,
        }
    }

    /// The session best suited to `prompt`, started on it: the idle one sharing the longest
    /// prefix, else a new one, else the least recently used. The prompt's new tokens are
    /// evaluated now or at the first generation, as the session does it; its first `task_prefix`
    /// are a task prefix ([`StartPrompt::start_task_prompt`]).
    pub fn checkout(
        &mut self,
        prompt: &[i32],
        task_prefix: usize,
    ) -> Result<Checkout<S>, EngineError> {
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
        let can_make = self.make.is_some() && self.idle.len() + self.lent < self.capacity;
        let reuse = match best {
            Some((i, shared)) if shared > 0 => Some((i, shared)),
            _ if can_make => None,
            // Full: recycle the least recently used cache rather than allocate another.
            _ => {
                let oldest = self
                    .idle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, idle)| idle.used)
                    .map(|(i, _)| i);
                Some((oldest.ok_or_else(no_free_session)?, 0))
            }
        };
        let (mut session, shared, previous, conversation) = match reuse {
            Some((index, shared)) => {
                let idle = self.idle.swap_remove(index);
                let previous = idle.session.tokens().len();
                (idle.session, shared, previous, idle.conversation)
            }
            None => {
                let make = self.make.as_mut().ok_or_else(no_free_session)?;
                (make()?, 0, 0, None)
            }
        };
        self.lent += 1;
        let cached = match session.start_task_prompt(prompt, task_prefix) {
            Ok(cached) => cached,
            Err(e) => {
                // A prompt too long for a slot must not cost the pool the slot.
                self.checkin(session, None, true);
                return Err(e);
            }
        };
        // The prompt extends the whole earlier conversation (up to its end-of-turn token): a
        // follow-up message.
        let continues = cached > 0 && shared + 1 >= previous;
        Ok(Checkout {
            session,
            cached,
            conversation: if continues { conversation } else { None },
        })
    }

    /// Returns a session to the pool after a request. A session whose state is unknown (an
    /// error in its request) is returned with `forget`: its cache is emptied before it is kept,
    /// or, where the pool can make another, it is dropped.
    pub fn checkin(&mut self, mut session: S, conversation: Option<String>, forget: bool) {
        self.lent = self.lent.saturating_sub(1);
        if forget {
            if self.make.is_some() {
                return;
            }
            if let Err(e) = session.start_prompt(&[]) {
                tracing::warn!(error = %e, "a slot could not be emptied; it starts over later");
            }
        }
        self.idle.push(Idle {
            session,
            used: Instant::now(),
            conversation: if forget { None } else { conversation },
        });
        while self.idle.len() + self.lent > self.capacity {
            if let Some(oldest) = self
                .idle
                .iter()
                .enumerate()
                .min_by_key(|(_, idle)| idle.used)
                .map(|(i, _)| i)
            {
                self.idle.swap_remove(oldest);
            } else {
                break;
            }
        }
    }
}

fn no_free_session() -> EngineError {
    EngineError::Worker("every KV cache of the worker is in use".into())
}

fn common_prefix(a: impl Iterator<Item = i32>, b: &[i32]) -> usize {
    a.zip(b).take_while(|(x, y)| x == *y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use catena_engine_api::{
        GenerateLimits, Generation, PromptPart, Session, SessionState, SideChat, StopMatcher,
        TokenRecord,
    };

    /// A session that only keeps token ids, started as the engine's sessions are: the shared
    /// prefix kept, always leaving the last prompt token to evaluate.
    struct Tokens(SessionState);

    impl Tokens {
        fn empty() -> Tokens {
            Tokens(SessionState {
                context_size: 8,
                ..SessionState::default()
            })
        }
    }

    impl StartPrompt for Tokens {
        fn start_prompt(&mut self, ids: &[i32]) -> Result<usize, EngineError> {
            if ids.len() > 8 {
                return Err(EngineError::ContextOverflow {
                    context_size: 8,
                    needed: ids.len() - 8,
                });
            }
            let kept = common_prefix(self.0.tokens.iter().map(|t| t.id), ids)
                .min(ids.len().saturating_sub(1));
            self.0.tokens = ids
                .iter()
                .map(|&id| TokenRecord { id, logprob: None })
                .collect();
            Ok(kept)
        }
    }

    impl Session for Tokens {
        fn append(&mut self, _: &[PromptPart]) -> Result<usize, EngineError> {
            unreachable!("the pool never appends")
        }
        fn generate(
            &mut self,
            _: &StopMatcher,
            _: GenerateLimits,
            _: &mut dyn FnMut(&str),
        ) -> Result<Generation, EngineError> {
            unreachable!("the pool never generates")
        }
        fn state(&self) -> &SessionState {
            &self.0
        }
        fn state_mut(&mut self) -> &mut SessionState {
            &mut self.0
        }
        fn side_chat(&mut self, _: &SideChat) -> Result<String, EngineError> {
            unreachable!("the pool never chats")
        }
    }

    fn slots(n: usize) -> SessionPool<Tokens> {
        SessionPool::fixed((0..n).map(|_| Tokens::empty()).collect())
    }

    #[test]
    fn common_prefix_counts_equal_leading_tokens() {
        assert_eq!(common_prefix([1, 2, 3].into_iter(), &[1, 2, 4]), 2);
        assert_eq!(common_prefix([1, 2].into_iter(), &[1, 2, 3]), 2);
        assert_eq!(common_prefix([5].into_iter(), &[1]), 0);
        assert_eq!(common_prefix([].into_iter(), &[1]), 0);
    }

    #[test]
    fn a_follow_up_finds_the_slot_that_holds_its_conversation() {
        let mut pool = slots(2);
        let first = pool.checkout(&[1, 2, 3], 0).unwrap();
        let other = pool.checkout(&[7, 8, 9, 10], 0).unwrap();
        assert_eq!((first.cached, other.cached), (0, 0));
        pool.checkin(first.session, Some("chat-a".into()), false);
        pool.checkin(other.session, Some("chat-b".into()), false);
        // The conversation [1, 2, 3] goes on: its slot is found, its prefix kept.
        let follow_up = pool.checkout(&[1, 2, 3, 4, 5], 0).unwrap();
        assert_eq!(follow_up.cached, 3);
        assert_eq!(follow_up.conversation.as_deref(), Some("chat-a"));
        // A prompt that shares only part of a conversation reuses the cells, not the tag.
        let branch = pool.checkout(&[7, 8, 5], 0).unwrap();
        assert_eq!(branch.cached, 2);
        assert_eq!(branch.conversation, None);
    }

    #[test]
    fn a_fixed_pool_never_lends_more_than_it_has_and_keeps_a_slot_a_request_broke() {
        let mut pool = slots(2);
        let a = pool.checkout(&[1], 0).unwrap();
        // Too long for a slot: refused, and the slot stays in the pool.
        assert!(matches!(
            pool.checkout(&[0; 9], 0),
            Err(EngineError::ContextOverflow { .. })
        ));
        let b = pool.checkout(&[2], 0).unwrap();
        assert!(pool.checkout(&[3], 0).is_err(), "both slots are lent");
        // A slot whose request failed comes back empty and untagged.
        pool.checkin(a.session, Some("chat".into()), true);
        let again = pool.checkout(&[1, 5], 0).unwrap();
        assert_eq!((again.cached, again.conversation), (0, None));
        assert!(again.session.tokens().iter().map(|t| t.id).eq([1, 5]));
        pool.checkin(again.session, None, false);
        pool.checkin(b.session, None, false);
        assert_eq!(pool.idle.len(), 2);
    }

    #[test]
    fn a_growing_pool_makes_sessions_up_to_its_capacity_then_recycles_the_oldest() {
        let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = made.clone();
        let mut pool = SessionPool::new(
            Box::new(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(Tokens::empty())
            }),
            2,
        );
        for prompt in [[1, 1], [2, 2], [3, 3]] {
            let c = pool.checkout(&prompt, 0).unwrap();
            assert_eq!(c.cached, 0);
            pool.checkin(c.session, None, false);
        }
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(pool.idle.len(), 2);
        // [1, 1] was recycled for [3, 3]; [2, 2] is still kept.
        assert_eq!(pool.checkout(&[2, 2, 5], 0).unwrap().cached, 2);
        // A session whose request failed is dropped where the pool can make another.
        let c = pool.checkout(&[9], 0).unwrap();
        pool.checkin(c.session, None, true);
        assert_eq!(pool.idle.len(), 0);
    }
}

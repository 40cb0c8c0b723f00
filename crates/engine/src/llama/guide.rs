//! Constrained decoding: a [`Constraint`]'s grammar held over the sampler with llguidance
//! (docs/ARCHITECTURE.md, "Constrained decoding"). llguidance computes, at each step, the set of
//! tokens that keep the text inside the grammar; the [`TokenSampler`] then only picks among
//! them, and the picked token advances the grammar. The tokenizer's view it needs (every token's
//! bytes, in a trie) is built once per model.
//!
//! A lazy constraint waits: the model writes freely until its text contains the trigger (a tool
//! call's opening tag), then the grammar applies to what follows. When the token that completed
//! the trigger also carried text past it, that text is fed to the grammar first; if the grammar
//! refuses it, the rest of the generation stays free and the caller's parser judges the result.

use super::LlamaEngine;
#[cfg(doc)]
use catena_engine_api::TokenSampler;
use catena_engine_api::{Constraint, EngineError};
use llama_cpp_2::sampling::LlamaSampler;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::SimpleVob;
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;

/// The grammar compiler of one model (its tokenizer's trie inside).
pub(super) type GrammarFactory = Arc<ParserFactory>;

pub(super) fn factory(engine: &LlamaEngine) -> Result<GrammarFactory, EngineError> {
    let env = LlamaSampler::llguidance_tok_env(engine.model());
    let mut factory = ParserFactory::new_simple(&env)
        .map_err(|e| EngineError::BadGrammar(format!("the tokenizer's trie: {e}")))?;
    // Grammar errors come back as values; llguidance must not print them on the worker's stderr.
    factory.set_stderr_log_level(0);
    Ok(Arc::new(factory))
}

/// One generation's constraint, from the first token or from its trigger on.
pub(super) struct Guide {
    matcher: Matcher,
    state: GuideState,
}

enum GuideState {
    /// Not yet triggered: the text so far, searched for the trigger.
    Waiting { trigger: String, text: String },
    /// In force: each token is picked among those the grammar allows.
    Active,
    /// Triggered, but the grammar refused the text past the trigger: free from here on.
    Released,
}

impl Guide {
    /// Builds the grammar now, so a bad one fails before anything is generated, and checks the
    /// constraint's given text against it (`tokenize` turns text into the model's tokens).
    fn new(
        factory: &ParserFactory,
        constraint: &Constraint,
        tokenize: impl Fn(&str) -> Vec<u32>,
    ) -> Result<Guide, EngineError> {
        let parser = factory
            .create_parser(TopLevelGrammar::from_lark(constraint.grammar.clone()))
            .map_err(|e| EngineError::BadGrammar(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(error) = matcher.get_error() {
            return Err(EngineError::BadGrammar(error));
        }
        let mut guide = Guide {
            matcher,
            state: GuideState::Released,
        };
        match &constraint.trigger {
            Some(trigger) => {
                guide.state = GuideState::Waiting {
                    trigger: trigger.clone(),
                    text: String::new(),
                };
                guide.observe(constraint.given.as_bytes(), &tokenize);
            }
            None => {
                let given = &constraint.given;
                if !given.is_empty() && guide.matcher.consume_tokens(&tokenize(given)).is_err() {
                    return Err(EngineError::OutsideGrammar(refusal(&guide.matcher, given)));
                }
                guide.state = GuideState::Active;
            }
        }
        Ok(guide)
    }

    /// The tokens the grammar allows next while it is in force (only the end of the text once
    /// it is complete); `None` while the text is free. A matcher in error leaves the rest free,
    /// as its caller's parser judges the text anyway.
    pub(super) fn allowed(&mut self) -> Option<SimpleVob> {
        if !matches!(self.state, GuideState::Active) {
            return None;
        }
        match self.matcher.compute_mask_or_eos() {
            Ok(mask) => Some(mask),
            Err(error) => {
                tracing::debug!(%error, "the grammar gave no mask; the rest is free");
                self.state = GuideState::Released;
                None
            }
        }
    }

    /// Advances the grammar past `token`, the one picked among [`Guide::allowed`].
    pub(super) fn accept(&mut self, token: i32) {
        if !matches!(self.state, GuideState::Active) || self.matcher.is_stopped() {
            return;
        }
        if let Err(error) = self.matcher.consume_token(token.cast_unsigned()) {
            tracing::debug!(%error, token, "the grammar refused a token it allowed");
            self.state = GuideState::Released;
        }
    }

    /// Sees the text of each token the free part produced; starts the grammar once the trigger
    /// is written. `tokenize` gives the tokens of the text past the trigger, fed to the grammar.
    pub(super) fn observe(&mut self, piece: &[u8], tokenize: impl FnOnce(&str) -> Vec<u32>) {
        let GuideState::Waiting { trigger, text } = &mut self.state else {
            return;
        };
        // Only the last piece can complete the trigger: search the tail that could hold it.
        let from = text.len().saturating_sub(trigger.len());
        text.push_str(&String::from_utf8_lossy(piece));
        let from = (0..=from)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        let Some(at) = text[from..].find(trigger.as_str()) else {
            return;
        };
        let past = text[from + at + trigger.len()..].to_string();
        if !past.is_empty() && self.matcher.consume_tokens(&tokenize(&past)).is_err() {
            tracing::debug!(past, "the text past the trigger does not fit the grammar");
            self.state = GuideState::Released;
            return;
        }
        self.state = GuideState::Active;
    }
}

/// The model's tokens of `text`, as the grammar's matcher counts them.
pub(super) fn grammar_tokens(engine: &LlamaEngine, text: &str) -> Vec<u32> {
    engine
        .model()
        .vocab()
        .tokenize(text.as_bytes(), false, false)
        .into_iter()
        .map(|t| t.0.cast_unsigned())
        .collect()
}

/// Builds `constraint`'s guide for `engine`'s model (its grammar compiler is made once).
pub(super) fn build(engine: &LlamaEngine, constraint: &Constraint) -> Result<Guide, EngineError> {
    let factory = engine.grammar_factory()?;
    Guide::new(&factory, constraint, |text| grammar_tokens(engine, text))
}

/// Where `given` leaves the grammar, in words: the end of the text it could not go past.
fn refusal(matcher: &Matcher, given: &str) -> String {
    let tail: String = {
        let chars: Vec<char> = given.chars().collect();
        chars[chars.len().saturating_sub(80)..].iter().collect()
    };
    match matcher.get_error() {
        Some(error) => format!("{error}; the text ends {tail:?}"),
        None => format!("the text ends {tail:?}"),
    }
}

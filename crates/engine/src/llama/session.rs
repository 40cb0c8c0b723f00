//! One llama.cpp context whose KV cache only grows.
//!
//! The session keeps every token of the context in `tokens`; the first `evaluated` of them are in
//! the KV cache. A sampled token stays pending until more text needs logits (the next sampling
//! step, or an appended observation, in one batch with it), so no token is ever evaluated twice
//! and the last token of a run is never evaluated for nothing.

use super::LlamaEngine;
use super::guide::{self, Guide};
use super::prompt_cache::{MIN_PREFIX_TOKENS, SessionSettings};
use super::seq_state;
use crate::StopMatcher;
use crate::generated::{GeneratedText, TokenText};
use crate::{
    Constraint, EngineError, GenerateLimits, Generation, GenerationStop, PromptPart,
    SamplingParams, Session, SessionOptions, StartPrompt, TokenRecord,
};
use catena_engine_api::{AllowedTokens, RepetitionWatch, SessionState, SessionStats, TokenSampler};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use std::num::NonZeroU32;
use std::time::Instant;

/// The protocol's context budget (PROTOCOL.md §2, step 4).
const MAX_DEFAULT_CONTEXT: u32 = 32_768;

pub struct LlamaSession<'m> {
    engine: &'m LlamaEngine,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    batch_size: usize,
    sampler: TokenSampler,
    state: SessionState,
    /// `tokens[..evaluated]` are in the KV cache.
    evaluated: usize,
    /// Batch index of the logits of the last evaluated token, when they are current.
    logits_at: Option<i32>,
    /// The caller's thread count, for side chats too.
    threads: Option<i32>,
    /// Record sampled tokens' log-probabilities (`SessionOptions::logprobs`).
    logprobs: bool,
    /// llama.cpp makes the greedy picks in its decode (`SessionOptions::greedy_on_device`).
    greedy_on_device: bool,
    /// The grammar the next generation follows ([`Session::constrain`]); cleared after it.
    guide: Option<Guide>,
    /// What, beside the engine, decides this context's numbers (the prompt cache's key).
    settings: SessionSettings,
}

impl<'m> LlamaSession<'m> {
    pub(super) fn new(
        engine: &'m LlamaEngine,
        options: &SessionOptions,
    ) -> Result<LlamaSession<'m>, EngineError> {
        let context_size = context_size(engine, options);
        let batch_size = options.batch_size.clamp(1, context_size);
        let ctx = new_context(engine, options, context_size, 1, batch_size)?;
        Ok(LlamaSession {
            engine,
            state: SessionState {
                context_size: ctx.n_ctx() as usize,
                sampling: options.sampling,
                ..SessionState::default()
            },
            ctx,
            batch: LlamaBatch::new(batch_size as usize, 1),
            batch_size: batch_size as usize,
            sampler: TokenSampler::new(options.sampling),
            evaluated: 0,
            logits_at: None,
            threads: options.threads,
            logprobs: options.logprobs,
            greedy_on_device: options.greedy_on_device,
            guide: None,
            settings: SessionSettings {
                threads: thread_count(options),
                batch_size: batch_size as usize,
                kv_cache: options.kv_cache,
            },
        })
    }

    /// Keeps only the first `keep` tokens of the context (a later turn of a conversation that
    /// shares them): the KV cache past them is dropped, and the next append evaluates from there.
    pub fn truncate(&mut self, keep: usize) -> Result<(), EngineError> {
        if keep >= self.state.tokens.len() {
            return Ok(());
        }
        if keep < self.evaluated {
            let keep_u32 = u32::try_from(keep)
                .map_err(|_| EngineError::Decode(format!("position {keep} out of range")))?;
            let removed = self
                .ctx
                .clear_kv_cache_seq(Some(0), Some(keep_u32), None)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            if !removed {
                return Err(EngineError::Decode(
                    "llama.cpp could not drop the end of the KV cache".into(),
                ));
            }
            self.evaluated = keep;
            self.state.stats.context_tokens = keep;
        }
        self.state.tokens.truncate(keep);
        self.logits_at = None;
        Ok(())
    }

    /// Appends token ids directly (benchmarks, and callers that tokenised already). Ids outside
    /// the vocabulary are refused.
    pub fn append_tokens(&mut self, ids: &[i32]) -> Result<usize, EngineError> {
        check_ids(self.engine, ids)?;
        let start = Instant::now();
        self.state
            .tokens
            .extend(ids.iter().map(|&id| TokenRecord { id, logprob: None }));
        let evaluated = self.evaluate_pending()?;
        self.state.stats.appended_tokens += ids.len();
        self.state.stats.prefill_tokens += evaluated;
        self.state.stats.prefill_time += start.elapsed();
        Ok(ids.len())
    }

    /// Evaluates `ids` in an empty session and returns the logits at every position: the
    /// reference another implementation of the same model (the trainer's) is checked against.
    pub fn logits_at_every_position(&mut self, ids: &[i32]) -> Result<Vec<Vec<f32>>, EngineError> {
        if !self.state.tokens.is_empty() {
            return Err(EngineError::Decode(
                "logits_at_every_position needs an empty session".into(),
            ));
        }
        if self.greedy_on_device {
            return Err(EngineError::Decode(
                "logits_at_every_position needs a session that keeps its logits \
                 (not SessionOptions::greedy_on_device)"
                    .into(),
            ));
        }
        if ids.len() > self.state.context_size {
            return Err(EngineError::ContextOverflow {
                context_size: self.state.context_size,
                needed: ids.len() - self.state.context_size,
            });
        }
        let mut all = Vec::with_capacity(ids.len());
        for (chunk_index, chunk) in ids.chunks(self.batch_size).enumerate() {
            self.batch.clear();
            for (i, &id) in chunk.iter().enumerate() {
                let pos = chunk_index * self.batch_size + i;
                self.batch
                    .add(LlamaToken::new(id), pos as i32, &[0], true)
                    .map_err(|e| EngineError::Decode(e.to_string()))?;
            }
            self.ctx
                .decode(&mut self.batch)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            for i in 0..chunk.len() {
                all.push(self.ctx.get_logits_ith(i as i32).to_vec());
            }
        }
        self.state
            .tokens
            .extend(ids.iter().map(|&id| TokenRecord { id, logprob: None }));
        self.evaluated = ids.len();
        self.logits_at = None;
        Ok(all)
    }

    fn tokenize(&self, part: &PromptPart) -> Vec<LlamaToken> {
        self.engine
            .model()
            .vocab()
            .tokenize(part.text.as_bytes(), false, part.special)
    }

    /// Evaluates every pending token, in batches; logits are kept for the last one.
    fn evaluate_pending(&mut self) -> Result<usize, EngineError> {
        let pending = self.state.tokens.len() - self.evaluated;
        if pending == 0 {
            return Ok(0);
        }
        if self.state.tokens.len() > self.state.context_size {
            return Err(EngineError::ContextOverflow {
                context_size: self.state.context_size,
                needed: self.state.tokens.len() - self.state.context_size,
            });
        }
        self.logits_at = None;
        while self.evaluated < self.state.tokens.len() {
            let end = (self.evaluated + self.batch_size).min(self.state.tokens.len());
            self.batch.clear();
            for pos in self.evaluated..end {
                let token = LlamaToken::new(self.state.tokens[pos].id);
                self.batch
                    .add(token, pos as i32, &[0], pos + 1 == self.state.tokens.len())
                    .map_err(|e| EngineError::Decode(e.to_string()))?;
            }
            self.ctx
                .decode(&mut self.batch)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            self.state.stats.evaluated_tokens += end - self.evaluated;
            if end == self.state.tokens.len() {
                self.logits_at = Some((end - self.evaluated - 1) as i32);
            }
            self.evaluated = end;
        }
        // On a GPU, decode returns once the work is queued. Waiting for it here makes the
        // prompt's time (the run summary's, `catena bench`'s pp) the time the device took, as
        // llama-bench counts it; the next read of the logits would wait for it anyway.
        self.ctx.synchronize();
        self.state.stats.context_tokens = self.evaluated;
        Ok(pending)
    }

    /// Samples one token from the current logits and records it as pending.
    fn sample(&mut self) -> Result<LlamaToken, EngineError> {
        let Some(index) = self.logits_at else {
            return Err(EngineError::Decode(
                "no logits to sample from (nothing was evaluated)".into(),
            ));
        };
        let record = if self.greedy_on_device {
            device_pick(&self.ctx, index)?
        } else {
            pick_token(
                self.ctx.get_logits_ith(index),
                &mut self.sampler,
                self.guide.as_mut(),
                self.logprobs,
            )?
        };
        let token = LlamaToken(record.id);
        self.state.tokens.push(record);
        self.logits_at = None;
        self.state.stats.generated_tokens += 1;
        Ok(token)
    }

    /// Samples until a stop condition (see [`Session::generate`]), under the guide if one is set.
    fn generate_text(
        &mut self,
        stops: &StopMatcher,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, EngineError> {
        if self.greedy_on_device {
            check_device_picks(&self.state.sampling, self.guide.is_some(), self.logprobs)?;
        }
        let mut text = GeneratedText::default();
        let mut sampled = 0;
        let mut watch = limits.stop_on_repetition.then(RepetitionWatch::default);
        let engine = self.engine;
        let vocab = engine.model().vocab();
        let stop = loop {
            if limits.is_cancelled() {
                break GenerationStop::Cancelled;
            }
            if sampled >= limits.max_tokens {
                break GenerationStop::MaxTokens;
            }
            if limits.deadline.is_some_and(|d| Instant::now() >= d) {
                break GenerationStop::Deadline;
            }
            if self.state.tokens.len() >= self.state.context_size {
                break GenerationStop::ContextFull;
            }
            let step = Instant::now();
            let folded = self.evaluate_pending()?;
            self.state.stats.decode_tokens += folded;
            let token = self.sample()?;
            sampled += 1;
            self.state.stats.decode_time += step.elapsed();
            if vocab.is_eog(token) {
                break GenerationStop::EndOfTurn;
            }
            let piece = vocab.token_to_piece(token, false, None);
            if let Some(guide) = self.guide.as_mut() {
                guide.observe(&piece, |past| guide::grammar_tokens(engine, past));
            }
            match text.push(&piece, stops) {
                TokenText::Streamed(piece) => {
                    if !piece.is_empty() {
                        on_text(&piece);
                    }
                }
                TokenText::Stopped {
                    index,
                    streamed,
                    replace_with,
                } => {
                    if let Some(kept) = replace_with {
                        self.replace_last_token(&kept);
                    }
                    on_text(&streamed);
                    break GenerationStop::StopString { index };
                }
            }
            if let Some(period) = watch.as_mut().and_then(|w| w.push(token.0)) {
                break GenerationStop::Repetition { period };
            }
        };
        if !matches!(stop, GenerationStop::StopString { .. }) {
            let tail = text.finish();
            if !tail.is_empty() {
                on_text(&tail);
            }
        }
        Ok(Generation {
            text: text.into_text(),
            stop,
            tokens: sampled,
        })
    }

    /// The last sampled token carried text past a stop string: replace it with the tokens of
    /// the part that is kept, so the context holds exactly the returned text.
    fn replace_last_token(&mut self, kept: &str) {
        self.state.tokens.pop();
        let forced = self.tokenize(&PromptPart::plain(kept));
        self.state
            .tokens
            .extend(forced.into_iter().map(|t| TokenRecord {
                id: t.0,
                logprob: None,
            }));
    }
}

impl catena_engine_api::StartChat for LlamaSession<'_> {
    fn start_chat(
        &mut self,
        chat: &catena_engine_api::TaskChat<'_>,
    ) -> Result<catena_engine_api::PromptStart, EngineError> {
        let engine = self.engine;
        engine.start_chat(self, chat)
    }
}

impl LlamaSession<'_> {
    /// Puts the KV cells of `prefix` back from the prompt cache into the empty context; false
    /// when the cache has no sound entry for it (or there is no cache).
    fn restore_prefix(&mut self, prefix: &[i32]) -> bool {
        let Some(cache) = &self.engine.prompt_cache else {
            return false;
        };
        if prefix.len() > self.state.context_size {
            return false;
        }
        let start = Instant::now();
        let key = cache.key(self.settings, prefix);
        let Some(state) = cache.load(&key, prefix) else {
            return false;
        };
        if !seq_state::restore(&mut self.ctx, 0, &state) {
            tracing::warn!("llama.cpp refused a prompt cache entry; evaluating the prefix");
            let _ = self.ctx.clear_kv_cache_seq(Some(0), None, None);
            return false;
        }
        self.state
            .tokens
            .extend(prefix.iter().map(|&id| TokenRecord { id, logprob: None }));
        self.evaluated = prefix.len();
        self.logits_at = None;
        self.state.stats.context_tokens = self.evaluated;
        self.state.stats.prefill_time += start.elapsed();
        tracing::debug!(tokens = prefix.len(), "prompt prefix from the prompt cache");
        true
    }

    /// Keeps the KV cells of `prefix`, just evaluated alone in the context, in the prompt cache.
    /// A cache that cannot be written (a full disk, a read-only folder) costs only the saving.
    fn store_prefix(&self, prefix: &[i32]) {
        let Some(cache) = &self.engine.prompt_cache else {
            return;
        };
        let Some(state) = seq_state::save(&self.ctx, 0) else {
            return;
        };
        let key = cache.key(self.settings, prefix);
        match cache.store(&key, prefix, &state) {
            Ok(()) => tracing::debug!(
                tokens = prefix.len(),
                bytes = state.len(),
                "prompt prefix cached"
            ),
            Err(e) => tracing::warn!(error = %e, "the prompt cache could not be written"),
        }
    }
}

impl StartPrompt for LlamaSession<'_> {
    /// Keeps the KV cache of the prefix `ids` shares with the current context and evaluates
    /// only the rest now. The sampler starts again from its seed, so a run does not depend on
    /// the runs before it (nor on which sequence of a batch it lands on); the counters start
    /// again too, so a run's summary counts its own work.
    fn start_prompt(&mut self, ids: &[i32]) -> Result<usize, EngineError> {
        self.sampler = TokenSampler::new(self.state.sampling);
        let shared = kept_prefix(&self.state.tokens, ids);
        self.state.stats = SessionStats {
            context_tokens: self.state.stats.context_tokens,
            ..SessionStats::default()
        };
        self.truncate(shared)?;
        self.append_tokens(&ids[shared..])?;
        self.state.stats.cached_tokens += shared;
        Ok(shared)
    }

    /// The shared prefix is evaluated on its own, in batches from position 0, or put back from the
    /// prompt cache, which holds exactly what that evaluation wrote; the rest of the prompt is
    /// evaluated after it. So a run's numbers are the same whether its prefix was evaluated, read
    /// from the cache or kept from the task before (llama.cpp's results differ in their last bits
    /// with where a batch starts and ends: docs/ARCHITECTURE.md, "The prompt cache").
    fn start_task_prompt(&mut self, ids: &[i32], shared: usize) -> Result<usize, EngineError> {
        let kept = kept_prefix(&self.state.tokens, ids);
        if shared < MIN_PREFIX_TOKENS || shared >= ids.len() || kept >= shared {
            return self.start_prompt(ids);
        }
        check_ids(self.engine, ids)?;
        self.sampler = TokenSampler::new(self.state.sampling);
        self.state.stats = SessionStats::default();
        self.truncate(0)?;
        let prefix = &ids[..shared];
        let restored = self.restore_prefix(prefix);
        if !restored {
            self.append_tokens(prefix)?;
            self.store_prefix(prefix);
        }
        self.append_tokens(&ids[shared..])?;
        let cached = if restored { shared } else { 0 };
        self.state.stats.cached_tokens += cached;
        Ok(cached)
    }
}

impl Session for LlamaSession<'_> {
    fn append(&mut self, parts: &[PromptPart]) -> Result<usize, EngineError> {
        let start = Instant::now();
        let mut added = 0;
        for part in parts {
            let tokens = self.tokenize(part);
            added += tokens.len();
            self.state
                .tokens
                .extend(tokens.into_iter().map(|t| TokenRecord {
                    id: t.0,
                    logprob: None,
                }));
        }
        if self.state.tokens.len() > self.state.context_size {
            let needed = self.state.tokens.len() - self.state.context_size;
            self.state.tokens.truncate(self.state.tokens.len() - added);
            return Err(EngineError::ContextOverflow {
                context_size: self.state.context_size,
                needed,
            });
        }
        let evaluated = self.evaluate_pending()?;
        self.state.stats.appended_tokens += added;
        self.state.stats.prefill_tokens += evaluated;
        self.state.stats.prefill_time += start.elapsed();
        Ok(added)
    }

    fn constrain(&mut self, constraint: &Constraint) -> Result<(), EngineError> {
        self.guide = Some(guide::build(self.engine, constraint)?);
        Ok(())
    }

    fn generate(
        &mut self,
        stops: &StopMatcher,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, EngineError> {
        let generation = self.generate_text(stops, limits, on_text);
        self.guide = None;
        generation
    }

    fn state(&self) -> &SessionState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut SessionState {
        &mut self.state
    }

    fn set_sampling(&mut self, sampling: SamplingParams) {
        if sampling != self.state.sampling {
            self.sampler = TokenSampler::new(sampling);
            self.state.sampling = sampling;
        }
    }

    fn side_chat(&mut self, chat: &crate::SideChat) -> Result<String, EngineError> {
        self.engine.side_chat(chat, self.threads)
    }
}

/// Refuses token ids outside the model's vocabulary.
pub(super) fn check_ids(engine: &LlamaEngine, ids: &[i32]) -> Result<(), EngineError> {
    let vocab = engine.model().n_vocab();
    match ids.iter().find(|&&id| id < 0 || id >= vocab) {
        Some(bad) => Err(EngineError::Tokenize(format!(
            "token id {bad} is outside the vocabulary of {vocab}"
        ))),
        None => Ok(()),
    }
}

/// How many tokens of a new prompt `ids` a context holding `tokens` keeps: the prefix they
/// share, less the prompt's last token, which is evaluated again for its logits.
pub(super) fn kept_prefix(tokens: &[TokenRecord], ids: &[i32]) -> usize {
    tokens
        .iter()
        .zip(ids)
        .take_while(|(a, b)| a.id == **b)
        .count()
        .min(ids.len().saturating_sub(1))
}

/// The next token from `logits` (one row of a context's, the whole vocabulary), picked by
/// `sampler` among the tokens `guide` allows when its grammar is in force (which then advances
/// past it); with its log-probability only when `logprobs` asks (the sum it needs is a pass over
/// the whole vocabulary, which a greedy pick or a truncated draw does not take otherwise).
/// It takes the row, not the context, so that the batch scheduler can pick for many sequences
/// on many threads (a context is not shared between threads).
pub(super) fn pick_token(
    logits: &[f32],
    sampler: &mut TokenSampler,
    guide: Option<&mut Guide>,
    logprobs: bool,
) -> Result<TokenRecord, EngineError> {
    let Some(guide) = guide else {
        return sampler
            .pick(logits, None, logprobs)
            .ok_or_else(|| EngineError::Decode("the model produced no usable logits".into()));
    };
    let mask = guide.allowed();
    let allowed = mask.as_ref().map(|m| AllowedTokens(m.as_slice()));
    let record = sampler.pick(logits, allowed, logprobs).ok_or_else(|| {
        EngineError::Decode(
            "the model produced no usable logits for the tokens the grammar allows".into(),
        )
    })?;
    guide.accept(record.id);
    Ok(record)
}

/// The pick llama.cpp made in its decode for the output at batch index `index`, in a context made
/// with greedy samplers ([`new_context`] under `SessionOptions::greedy_on_device`).
pub(super) fn device_pick(ctx: &LlamaContext<'_>, index: i32) -> Result<TokenRecord, EngineError> {
    ctx.sampled_token_ith(index)
        .map(|token| TokenRecord {
            id: token.0,
            logprob: None,
        })
        .ok_or_else(|| EngineError::Decode("llama.cpp made no pick in its decode".into()))
}

/// Refuses, in a context that makes its greedy picks in the decode, a generation that needs the
/// logits on the CPU: a grammar's mask, log-probabilities, penalties or a draw at a temperature.
/// Such a context copies no logits back, so it cannot serve one (docs/ARCHITECTURE.md, "Greedy
/// picks on the device").
pub(super) fn check_device_picks(
    sampling: &SamplingParams,
    guided: bool,
    logprobs: bool,
) -> Result<(), EngineError> {
    let needs = if guided {
        "a grammar"
    } else if logprobs {
        "log-probabilities"
    } else if sampling.penalises() {
        "penalties"
    } else if !sampling.is_greedy() {
        "a temperature above 0"
    } else {
        return Ok(());
    };
    Err(EngineError::Decode(format!(
        "this session makes greedy picks on the device (SessionOptions::greedy_on_device), \
         which keeps no logits; a generation with {needs} needs them"
    )))
}

/// The context window of one sequence: the options' own, else the model's training context
/// capped at the protocol's budget.
pub(super) fn context_size(engine: &LlamaEngine, options: &SessionOptions) -> u32 {
    options
        .context_size
        .unwrap_or_else(|| engine.model().n_ctx_train().min(MAX_DEFAULT_CONTEXT))
        .max(16)
}

/// A llama.cpp context of `context_size` tokens split into `streams` KV streams, one for each
/// sequence (the batch scheduler's map of them is in `streams.rs`), with the session options'
/// threads and cache type and the engine's adapter applied.
pub(super) fn new_context<'m>(
    engine: &'m LlamaEngine,
    options: &SessionOptions,
    context_size: u32,
    streams: u32,
    batch_size: u32,
) -> Result<LlamaContext<'m>, EngineError> {
    let threads = thread_count(options);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(context_size))
        .with_n_batch(batch_size)
        .with_n_ubatch(batch_size)
        .with_n_seq_max(streams)
        .with_kv_unified(false)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_type_k(kv_cache_type(options.kv_cache))
        .with_type_v(kv_cache_type(options.kv_cache));
    let capture = super::log::install();
    let mark = capture.mark();
    let backend = super::backend()?;
    let made = if options.greedy_on_device {
        // One greedy chain for each KV stream (a sequence's id is its stream's), which
        // llama.cpp keeps and runs in every decode that outputs a row of that sequence.
        let greedy = (0..streams as i32)
            .map(|stream| (stream, LlamaSampler::chain_simple([LlamaSampler::greedy()])));
        engine
            .model()
            .new_context_with_samplers(backend, params, greedy)
    } else {
        engine.model().new_context(backend, params)
    };
    let mut ctx = made.map_err(|e| {
        let said = capture.problems_since(mark);
        EngineError::ContextFailed {
            context_size,
            reason: if said.is_empty() {
                e.to_string()
            } else {
                said.join("; ")
            },
        }
    })?;
    engine.apply_adapter(&mut ctx)?;
    Ok(ctx)
}

/// The session's CPU threads: the options' own, else the physical cores.
fn thread_count(options: &SessionOptions) -> i32 {
    options
        .threads
        .unwrap_or_else(|| num_cpus::get_physical().max(1) as i32)
}

fn kv_cache_type(kind: crate::KvCacheType) -> llama_cpp_2::context::params::KvCacheType {
    use llama_cpp_2::context::params::KvCacheType as Llama;
    match kind {
        crate::KvCacheType::F16 => Llama::F16,
        crate::KvCacheType::Q8_0 => Llama::Q8_0,
    }
}

//! Many sequences in one llama.cpp context: one `llama_decode` per step carries the next token
//! of every sequence that is generating, each sequence in a KV stream of its own (`streams.rs`
//! says why, and how a step's sequences are kept in consecutive streams).
//!
//! Each sequence is a [`BatchedSession`], a [`Session`] that a caller drives from a thread of its
//! own (a chain with its tool calls, a sample of an evaluation). Its `generate` hands the
//! generation to the scheduler, which runs on the thread that called
//! [`LlamaEngine::with_sequences`] and owns the context: each step it takes every sequence whose
//! generation is under way, with whatever that sequence appended since (a prompt, an
//! observation), decodes them together, samples each sequence's next token and checks its stop
//! strings and limits. A sequence whose chain is running a tool has no generation under way, so
//! it is simply not in the batch (continuous batching): the sandbox never stalls the others,
//! and it rejoins with its observation in the next step after it asks.
//!
//! The guarantees of a single session hold per sequence: every token is evaluated exactly once
//! (a sampled token waits, as pending, for the next step of its sequence), stop strings end the
//! text where they end, and sampled tokens carry their log-probabilities. A prompt another
//! sequence has already evaluated is not evaluated again: its KV cells are copied
//! (`llama_memory_seq_cp`, whole streams), and a sequence whose prompt starts like one being
//! evaluated in the same step waits one step to share it.

use super::LlamaEngine;
use super::guide::{self, Guide};
use super::prompt_cache::MIN_PREFIX_TOKENS;
use super::session::{
    check_device_picks, check_ids, context_size, device_pick, kept_prefix, new_context, pick_token,
};
use super::streams::{Move, Streams};
use crate::StopMatcher;
use crate::generated::{GeneratedText, TokenText};
use crate::{
    EngineError, GenerateLimits, Generation, GenerationStop, PromptPart, SamplingParams, Session,
    SessionOptions, SideChat, StartPrompt, TokenRecord,
};
use catena_engine_api::{RepetitionWatch, SessionState, SessionStats, TokenSampler};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use rayon::prelude::*;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

impl LlamaEngine {
    /// Runs `work` with `sequences` sessions that decode together in one context of
    /// `sequences` × the options' context size. `work` is expected to drive each session from a
    /// thread of its own (`std::thread::scope`); a thread beside it owns the context and decodes
    /// until every session is dropped, which `work` does before it returns (its result cannot
    /// hold one).
    pub fn with_sequences<T>(
        &self,
        options: &SessionOptions,
        sequences: usize,
        work: impl for<'s> FnOnce(Vec<BatchedSession<'s>>) -> T,
    ) -> Result<T, EngineError> {
        self.with_sequences_reported(options, sequences, work)
            .map(|(outcome, _)| outcome)
    }

    /// [`LlamaEngine::with_sequences`], also returning where the scheduler's time went.
    pub fn with_sequences_reported<T>(
        &self,
        options: &SessionOptions,
        sequences: usize,
        work: impl for<'s> FnOnce(Vec<BatchedSession<'s>>) -> T,
    ) -> Result<(T, BatchReport), EngineError> {
        let sequences = sequences.max(1);
        let per_sequence = context_size(self, options);
        let streams = Streams::new(sequences);
        let stream_count = streams.count();
        let total = u32::try_from(stream_count)
            .ok()
            .and_then(|n| n.checked_mul(per_sequence))
            .ok_or(EngineError::ContextFailed {
                context_size: u32::MAX,
                reason: format!("{sequences} sequences of {per_sequence} tokens"),
            })?;
        let batch_size = options.batch_size.clamp(1, total);
        let (requests, inbox) = channel();
        let sessions: Vec<BatchedSession<'_>> = (0..sequences)
            .map(|seq| BatchedSession {
                engine: self,
                seq,
                requests: requests.clone(),
                state: SessionState {
                    context_size: per_sequence as usize,
                    sampling: options.sampling,
                    ..SessionState::default()
                },
                evaluated: 0,
                threads: options.threads,
                reseed: false,
                task_prefix: 0,
                guide: None,
            })
            .collect();
        drop(requests);
        std::thread::scope(|scope| {
            // The context lives on the scheduler's thread; it says first whether it could be
            // made.
            let (ready, made) = channel();
            let scheduler = scope.spawn(move || {
                let ctx = match new_context(self, options, total, stream_count as u32, batch_size) {
                    Ok(ctx) => {
                        let _ = ready.send(Ok(()));
                        ctx
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return BatchReport::default();
                    }
                };
                Scheduler {
                    engine: self,
                    ctx,
                    batch: LlamaBatch::new(batch_size as usize, sequences as i32),
                    batch_size: batch_size as usize,
                    kv: vec![Vec::new(); sequences],
                    streams,
                    samplers: (0..sequences).map(|_| None).collect(),
                    logprobs: options.logprobs,
                    greedy_on_device: options.greedy_on_device,
                    active: Vec::new(),
                    report: BatchReport::default(),
                }
                .run(&inbox)
            });
            let outcome = match made.recv() {
                Ok(Ok(())) => Ok(work(sessions)),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(EngineError::Decode(
                    "the batch scheduler stopped before it started".into(),
                )),
            };
            // `work` has dropped its sessions, so the scheduler's inbox is closed and it ends.
            let report = scheduler
                .join()
                .map_err(|_| EngineError::Decode("the batch scheduler panicked".into()))?;
            outcome.map(|outcome| (outcome, report))
        })
    }
}

/// One sequence of [`LlamaEngine::with_sequences`].
pub struct BatchedSession<'m> {
    engine: &'m LlamaEngine,
    seq: usize,
    requests: Sender<Request>,
    state: SessionState,
    /// `tokens[..evaluated]` are in this sequence's KV cells (after a restart, the part of them
    /// the new prompt keeps: the scheduler drops the rest before the next step).
    evaluated: usize,
    threads: Option<i32>,
    /// The next generation starts a new sampler from the seed (set by a restart).
    reseed: bool,
    /// Where the prompt's task prefix ends ([`StartPrompt::start_task_prompt`]): no step
    /// evaluates tokens on both sides of it, as a single session does not.
    task_prefix: usize,
    /// The grammar the next generation follows, if one was set.
    guide: Option<Guide>,
}

impl catena_engine_api::StartChat for BatchedSession<'_> {
    fn start_chat(
        &mut self,
        chat: &catena_engine_api::TaskChat<'_>,
    ) -> Result<catena_engine_api::PromptStart, EngineError> {
        let engine = self.engine;
        engine.start_chat(self, chat)
    }
}

impl StartPrompt for BatchedSession<'_> {
    /// Keeps the KV cells of the prefix `ids` shares with what this sequence holds; evaluation
    /// waits for the next generation, where the scheduler may copy a longer prefix from another
    /// sequence (the same prompt in a group of samples) instead of evaluating it. The sampler
    /// and the counters start again, so a run does not depend on which runs the sequence did
    /// before and its summary counts its own work. Returns the tokens kept from this
    /// sequence's own cells.
    fn start_prompt(&mut self, ids: &[i32]) -> Result<usize, EngineError> {
        check_ids(self.engine, ids)?;
        if ids.len() > self.state.context_size {
            return Err(EngineError::ContextOverflow {
                context_size: self.state.context_size,
                needed: ids.len() - self.state.context_size,
            });
        }
        let kept = kept_prefix(&self.state.tokens[..self.evaluated], ids);
        self.state.tokens.truncate(kept);
        self.state.tokens.extend(
            ids[kept..]
                .iter()
                .map(|&id| TokenRecord { id, logprob: None }),
        );
        self.evaluated = kept;
        // The counters start again with the prompt: a run's summary counts its own work.
        self.state.stats = SessionStats {
            context_tokens: kept,
            cached_tokens: kept,
            appended_tokens: ids.len() - kept,
            ..SessionStats::default()
        };
        self.reseed = true;
        self.task_prefix = 0;
        Ok(kept)
    }

    /// Sequences decoded together take a shared prefix from each other's cells, not from the
    /// prompt cache; the prefix is still evaluated apart from the rest, so that a run alone in
    /// the batch has a single session's numbers.
    fn start_task_prompt(&mut self, ids: &[i32], shared: usize) -> Result<usize, EngineError> {
        let held = kept_prefix(&self.state.tokens[..self.evaluated], ids);
        if shared >= MIN_PREFIX_TOKENS && held < shared {
            // As in a single session, the prefix is kept whole or evaluated again whole.
            self.evaluated = 0;
        }
        let kept = self.start_prompt(ids)?;
        self.task_prefix = shared;
        Ok(kept)
    }
}

/// A generation handed to the scheduler.
struct Request {
    seq: usize,
    /// How many of the sequence's KV cells it still holds (fewer than the cells after a
    /// restart to a prompt that shares only part of them).
    keep: usize,
    /// The sequence's tokens past those, in order.
    pending: Vec<i32>,
    /// Start the sampler again from its seed.
    reseed: bool,
    /// A step ends the tokens it evaluates at this position when it would cross it.
    task_prefix: usize,
    /// The grammar this generation follows (its mask applied before the sequence's sampler).
    guide: Option<Guide>,
    stops: StopMatcher,
    limits: GenerateLimits,
    sampling: SamplingParams,
    /// The tokens the sequence may hold in all.
    context_size: usize,
    replies: Sender<Reply>,
}

enum Reply {
    /// Text decided, as it streams.
    Text(String),
    Done(Result<Finished, EngineError>),
}

/// What a generation adds to its session.
struct Finished {
    generation: Generation,
    /// The tokens sampled (and a stop string's re-tokenised end), for the session's context.
    records: Vec<TokenRecord>,
    /// How many of the session's tokens are now in the KV cache.
    evaluated: usize,
    /// Tokens of the prompt copied from another sequence's cells instead of evaluated.
    copied_tokens: usize,
    /// Tokens evaluated in steps where the sequence added more than one (its prompt or an
    /// observation) and in single-token steps, with the steps' wall time.
    prefill_tokens: usize,
    decode_tokens: usize,
    prefill_time: Duration,
    decode_time: Duration,
}

impl Session for BatchedSession<'_> {
    fn constrain(&mut self, constraint: &crate::Constraint) -> Result<(), EngineError> {
        self.guide = Some(guide::build(self.engine, constraint)?);
        Ok(())
    }

    fn append(&mut self, parts: &[PromptPart]) -> Result<usize, EngineError> {
        let vocab = self.engine.model().vocab();
        let added: Vec<TokenRecord> = parts
            .iter()
            .flat_map(|part| vocab.tokenize(part.text.as_bytes(), false, part.special))
            .map(|t| TokenRecord {
                id: t.0,
                logprob: None,
            })
            .collect();
        let total = self.state.tokens.len() + added.len();
        if total > self.state.context_size {
            return Err(EngineError::ContextOverflow {
                context_size: self.state.context_size,
                needed: total - self.state.context_size,
            });
        }
        self.state.stats.appended_tokens += added.len();
        let count = added.len();
        self.state.tokens.extend(added);
        Ok(count)
    }

    fn generate(
        &mut self,
        stops: &StopMatcher,
        limits: GenerateLimits,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, EngineError> {
        let (replies, answers) = channel();
        let request = Request {
            seq: self.seq,
            keep: self.evaluated,
            pending: self.state.tokens[self.evaluated..]
                .iter()
                .map(|t| t.id)
                .collect(),
            reseed: std::mem::take(&mut self.reseed),
            task_prefix: self.task_prefix,
            guide: self.guide.take(),
            stops: stops.clone(),
            limits,
            sampling: self.state.sampling,
            context_size: self.state.context_size,
            replies,
        };
        let gone = || EngineError::Decode("the batch scheduler stopped".into());
        self.requests.send(request).map_err(|_| gone())?;
        loop {
            match answers.recv().map_err(|_| gone())? {
                Reply::Text(text) => on_text(&text),
                Reply::Done(done) => {
                    let done = done?;
                    self.state.tokens.extend(done.records);
                    self.evaluated = done.evaluated;
                    self.state.stats.context_tokens = done.evaluated;
                    self.state.stats.cached_tokens += done.copied_tokens;
                    self.state.stats.evaluated_tokens += done.prefill_tokens + done.decode_tokens;
                    self.state.stats.prefill_tokens += done.prefill_tokens;
                    self.state.stats.decode_tokens += done.decode_tokens;
                    self.state.stats.prefill_time += done.prefill_time;
                    self.state.stats.decode_time += done.decode_time;
                    self.state.stats.generated_tokens += done.generation.tokens;
                    return Ok(done.generation);
                }
            }
        }
    }

    fn state(&self) -> &SessionState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut SessionState {
        &mut self.state
    }

    fn side_chat(&mut self, chat: &SideChat) -> Result<String, EngineError> {
        self.engine.side_chat(chat, self.threads)
    }
}

/// A generation under way.
struct Active {
    request: Request,
    /// The request's pending tokens not evaluated yet (the front ones are evaluated first).
    pending: Vec<i32>,
    text: GeneratedText,
    sampled: usize,
    records: Vec<TokenRecord>,
    prefill_tokens: usize,
    decode_tokens: usize,
    prefill_time: Duration,
    decode_time: Duration,
    /// Whether this sequence already looked for a prefix to share.
    shared: bool,
    copied_tokens: usize,
    /// Watches for a loop when the request asks to stop on one.
    repetition: Option<RepetitionWatch>,
}

/// Owns the context; decodes every active sequence together.
struct Scheduler<'m> {
    engine: &'m LlamaEngine,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    batch_size: usize,
    /// The token ids in each sequence's KV cells.
    kv: Vec<Vec<i32>>,
    /// The KV stream that holds each sequence's cells (llama.cpp's sequence id for it).
    streams: Streams,
    /// Each sequence's sampler (its random state carries over while its settings stay).
    samplers: Vec<Option<TokenSampler>>,
    /// Record sampled tokens' log-probabilities (`SessionOptions::logprobs`).
    logprobs: bool,
    /// llama.cpp makes the greedy picks in its decode (`SessionOptions::greedy_on_device`).
    greedy_on_device: bool,
    active: Vec<Active>,
    report: BatchReport,
}

/// Where the scheduler's wall time went (logged at debug level when it ends, returned by
/// [`LlamaEngine::with_sequences_reported`]): decode steps by how many sequences they carried,
/// steps that also evaluated a prompt or an observation, sampling, and waits with no generation
/// under way (every sequence running a tool, or between tasks). It separates what a batch of
/// sequences costs from what the work around it adds (docs/BENCHMARKS.md, the RL section).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BatchReport {
    /// `by_width[n]`: time and count of steps that carried one token of each of `n` sequences.
    pub by_width: Vec<(Duration, usize)>,
    /// Time and count of steps that carried more than one token of some sequence.
    pub with_prefill: (Duration, usize),
    /// Tokens of prompts and observations evaluated (not those copied from another sequence).
    pub prefill_tokens: usize,
    /// Tokens sampled.
    pub sampled_tokens: usize,
    /// Time spent picking tokens (the grammar's mask, the sampler, stop strings) between steps.
    pub sampling: Duration,
    /// Time with no generation under way.
    pub idle: Duration,
    /// Whole KV streams copied to put a step's sequences in consecutive streams (`streams.rs`).
    pub stream_copies: usize,
}

impl BatchReport {
    /// Sequences a decode step carried on average (steps that read a prompt or an observation
    /// left out); 0 without any.
    pub fn mean_width(&self) -> f64 {
        let (tokens, steps) = self
            .by_width
            .iter()
            .enumerate()
            .fold((0, 0), |(tokens, steps), (width, &(_, count))| {
                (tokens + width * count, steps + count)
            });
        if steps == 0 {
            0.0
        } else {
            tokens as f64 / steps as f64
        }
    }
}

impl Scheduler<'_> {
    /// Decodes until every session is dropped; returns where the time went.
    fn run(mut self, inbox: &Receiver<Request>) -> BatchReport {
        loop {
            if self.active.is_empty() {
                let waiting = Instant::now();
                match inbox.recv() {
                    Ok(request) => self.admit(request),
                    Err(_) => {
                        tracing::debug!(report = ?self.report, "batch scheduler ends");
                        return self.report;
                    }
                }
                self.report.idle += waiting.elapsed();
            }
            while let Ok(request) = inbox.try_recv() {
                self.admit(request);
            }
            if let Err(e) = self.step() {
                // A failed decode ends every generation under way with the error.
                for active in self.active.drain(..) {
                    let _ = active.request.replies.send(Reply::Done(Err(e.clone())));
                }
            }
        }
    }

    fn admit(&mut self, mut request: Request) {
        if let Err(error) = self.keep_cells(request.seq, request.keep) {
            let _ = request.replies.send(Reply::Done(Err(error)));
            return;
        }
        if self.greedy_on_device
            && let Err(error) =
                check_device_picks(&request.sampling, request.guide.is_some(), self.logprobs)
        {
            let _ = request.replies.send(Reply::Done(Err(error)));
            return;
        }
        if request.reseed {
            self.samplers[request.seq] = None;
        }
        let total = request.keep + request.pending.len();
        if total > request.context_size {
            let error = EngineError::ContextOverflow {
                context_size: request.context_size,
                needed: total - request.context_size,
            };
            let _ = request.replies.send(Reply::Done(Err(error)));
            return;
        }
        let active = Active {
            pending: std::mem::take(&mut request.pending),
            repetition: request
                .limits
                .stop_on_repetition
                .then(RepetitionWatch::default),
            request,
            text: GeneratedText::default(),
            sampled: 0,
            records: Vec::new(),
            prefill_tokens: 0,
            decode_tokens: 0,
            prefill_time: Duration::ZERO,
            decode_time: Duration::ZERO,
            shared: false,
            copied_tokens: 0,
        };
        if active.pending.is_empty() {
            // Nothing new since the last generation, whose last token was evaluated with logits
            // that are gone: evaluate it again would break "exactly once", so it is refused.
            let error = EngineError::Decode("a generation needs new tokens to start from".into());
            let _ = active.request.replies.send(Reply::Done(Err(error)));
            return;
        }
        if let Some(stop) = self.limit_reached(&active) {
            self.finish(active, stop);
            return;
        }
        self.active.push(active);
    }

    /// The limit that ends `active` before its next token, if any.
    fn limit_reached(&self, active: &Active) -> Option<GenerationStop> {
        let limits = &active.request.limits;
        let held = self.kv[active.request.seq].len() + active.pending.len();
        if limits.is_cancelled() {
            Some(GenerationStop::Cancelled)
        } else if active.sampled >= limits.max_tokens {
            Some(GenerationStop::MaxTokens)
        } else if limits.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(GenerationStop::Deadline)
        } else if held >= active.request.context_size {
            Some(GenerationStop::ContextFull)
        } else {
            None
        }
    }

    /// Drops the sequence's KV cells past its first `keep` (a restart to a prompt that shares
    /// only those).
    fn keep_cells(&mut self, seq: usize, keep: usize) -> Result<(), EngineError> {
        let held = self.kv[seq].len();
        if keep > held {
            return Err(EngineError::Decode(format!(
                "sequence {seq} claims {keep} evaluated tokens but holds {held}"
            )));
        }
        if keep < held {
            let stream = self.streams.of(seq) as u32;
            let dropped = self
                .ctx
                .clear_kv_cache_seq(Some(stream), Some(keep as u32), None)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            if !dropped {
                return Err(EngineError::Decode(
                    "llama.cpp could not drop the end of a sequence's KV cells".into(),
                ));
            }
            self.kv[seq].truncate(keep);
        }
        Ok(())
    }

    /// Before a sequence's first step of a generation: where another sequence holds a longer
    /// beginning of its context than it does, those cells are copied (a prompt evaluated once
    /// for a whole group). Returns false where it should wait a step, because a sequence ahead
    /// of it in this step is about to evaluate that beginning.
    fn share_prefix(&mut self, index: usize) -> Result<bool, EngineError> {
        let active = &self.active[index];
        let seq = active.request.seq;
        if active.shared || active.pending.len() < 2 {
            return Ok(true);
        }
        let own = &self.kv[seq];
        let held = own.len();
        // How far `other` (its cells, then its pending tokens) agrees with this sequence's
        // whole context; the last token is left to evaluate, for its logits.
        let full_len = held + active.pending.len();
        let agree = |cells: &[i32], then: &[i32]| {
            let mine = own.iter().chain(&active.pending);
            cells
                .iter()
                .chain(then)
                .zip(mine)
                .take_while(|(a, b)| a == b)
                .count()
                .min(full_len - 1)
        };
        let waiting_on_earlier = self.active[..index].iter().any(|other| {
            let cells = &self.kv[other.request.seq];
            agree(cells, &other.pending) > (held + 1).max(cells.len())
        });
        if waiting_on_earlier {
            return Ok(false);
        }
        let best = (0..self.kv.len())
            .filter(|&other| other != seq)
            .map(|other| (other, agree(&self.kv[other], &[])))
            .max_by_key(|&(_, n)| n);
        if let Some((source, n)) = best.filter(|&(_, n)| n > held) {
            // Between streams llama.cpp copies only a whole sequence: the source's cells
            // replace this sequence's (the first `held` are the same), then the end past the
            // shared beginning is dropped.
            let (from, to) = (self.streams.of(source), self.streams.of(seq));
            self.ctx
                .copy_kv_cache_seq(from as i32, to as i32, None, None)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            let trimmed = self
                .ctx
                .clear_kv_cache_seq(Some(to as u32), Some(n as u32), None)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            if !trimmed {
                return Err(EngineError::Decode(
                    "llama.cpp could not drop the end of a copied sequence".into(),
                ));
            }
            let active = &mut self.active[index];
            let copied: Vec<i32> = active.pending.drain(..n - held).collect();
            self.kv[seq].extend(copied);
            active.copied_tokens += n - held;
        }
        self.active[index].shared = true;
        Ok(true)
    }

    /// One decode with the next tokens of every active sequence that fit the batch.
    fn step(&mut self) -> Result<(), EngineError> {
        let started = Instant::now();
        // (index into active, tokens it adds)
        let mut planned: Vec<(usize, usize)> = Vec::new();
        let mut room = self.batch_size;
        for index in 0..self.active.len() {
            if room == 0 {
                break;
            }
            if !self.share_prefix(index)? {
                continue;
            }
            let active = &self.active[index];
            let base = self.kv[active.request.seq].len();
            let to_prefix_end = match active.request.task_prefix.checked_sub(base) {
                Some(left) if left > 0 && MIN_PREFIX_TOKENS <= active.request.task_prefix => left,
                _ => usize::MAX,
            };
            let take = active.pending.len().min(room).min(to_prefix_end);
            planned.push((index, take));
            room -= take;
        }
        if planned.is_empty() {
            return Ok(());
        }
        let seqs: Vec<usize> = planned
            .iter()
            .map(|&(index, _)| self.active[index].request.seq)
            .collect();
        let copies_before = self.report.stream_copies;
        for moved in self.streams.gather(&seqs) {
            self.move_stream(moved)?;
        }
        let stream_copies = self.report.stream_copies - copies_before;
        // One pass of llama.cpp takes streams in increasing order (`streams.rs`).
        planned.sort_by_key(|&(index, _)| self.streams.of(self.active[index].request.seq));
        self.batch.clear();
        // The batch index of each planned sequence's logits, where it samples this step.
        let mut logits_at = Vec::with_capacity(planned.len());
        for &(index, take) in &planned {
            let active = &self.active[index];
            let seq = active.request.seq;
            let stream = self.streams.of(seq) as i32;
            let base = self.kv[seq].len();
            let whole = take == active.pending.len();
            for (i, &id) in active.pending[..take].iter().enumerate() {
                let last = whole && i + 1 == take;
                self.batch
                    .add(LlamaToken::new(id), (base + i) as i32, &[stream], last)
                    .map_err(|e| EngineError::Decode(e.to_string()))?;
            }
            logits_at.push(whole.then(|| self.batch.n_tokens() - 1));
        }
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| EngineError::Decode(e.to_string()))?;
        // On a GPU, decode returns once the work is queued: wait for it, so that the step's time
        // is the device's and not counted as sampling (which reads the logits next anyway).
        self.ctx.synchronize();
        let elapsed = started.elapsed();
        self.record_step(&planned, stream_copies, elapsed);
        let sampling_started = Instant::now();
        // (index into active, batch index of its logits) of each sequence that samples now.
        let mut picks = Vec::with_capacity(planned.len());
        for ((index, take), logits) in planned.into_iter().zip(logits_at) {
            let active = &mut self.active[index];
            let seq = active.request.seq;
            self.kv[seq].extend(active.pending.drain(..take));
            if take > 1 {
                self.report.prefill_tokens += take;
                active.prefill_tokens += take;
                active.prefill_time += elapsed;
            } else {
                active.decode_tokens += take;
                active.decode_time += elapsed;
            }
            if let Some(at) = logits {
                self.report.sampled_tokens += 1;
                picks.push((index, at));
            }
        }
        let records = self.pick_tokens(&picks)?;
        let mut finished = Vec::new();
        for (&(index, _), record) in picks.iter().zip(records) {
            if let Some(stop) = self.take_token(index, record)? {
                finished.push((index, stop));
            }
        }
        self.report.sampling += sampling_started.elapsed();
        // Remove from the back so the indices stay valid.
        finished.sort_by_key(|&(index, _)| std::cmp::Reverse(index));
        for (index, stop) in finished {
            let active = self.active.remove(index);
            self.finish(active, stop);
        }
        Ok(())
    }

    /// Counts a step of `elapsed` that carried `planned` (index into active, tokens it adds) and
    /// copied `stream_copies` KV streams first, in the report and in the trace.
    fn record_step(&mut self, planned: &[(usize, usize)], stream_copies: usize, elapsed: Duration) {
        // One line a step, for lining steps up with what else ran at the time (a sandbox run
        // shares the cores): `RUST_LOG=catena_engine=trace`.
        tracing::trace!(
            sequences = planned.len(),
            tokens = self.batch.n_tokens(),
            stream_copies,
            micros = elapsed.as_micros() as u64,
            "decode step"
        );
        if planned.iter().any(|&(_, take)| take > 1) {
            self.report.with_prefill.0 += elapsed;
            self.report.with_prefill.1 += 1;
        } else {
            let width = planned.len();
            let by_width = &mut self.report.by_width;
            if by_width.len() <= width {
                by_width.resize(width + 1, (Duration::ZERO, 0));
            }
            by_width[width].0 += elapsed;
            by_width[width].1 += 1;
        }
    }

    /// Makes a move of [`Streams::gather`]: the sequence's cells are copied into the spare
    /// stream, and the stream it left is emptied to become the spare. The spare holds no cells,
    /// so a sequence that holds none moves without a copy.
    fn move_stream(&mut self, moved: Move) -> Result<(), EngineError> {
        if !self.kv[moved.seq].is_empty() {
            self.ctx
                .copy_kv_cache_seq(moved.from as i32, moved.to as i32, None, None)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            self.report.stream_copies += 1;
        }
        // Removing a whole sequence cannot fail (llama.cpp's contract for this call).
        self.ctx
            .clear_kv_cache_seq(Some(moved.from as u32), None, None)
            .map_err(|e| EngineError::Decode(e.to_string()))?;
        Ok(())
    }

    /// Picks the next token of each `(index into active, batch index of its logits)` of
    /// `picks`, in that order. Each sequence has a sampler and a grammar of its own, so the picks
    /// are independent and run on the cores at once (rayon's pool): a pick is a pass or two over
    /// the whole vocabulary, which, one sequence after another, would leave all but one core
    /// idle between two steps, and on a GPU could take longer than the step itself.
    fn pick_tokens(&mut self, picks: &[(usize, i32)]) -> Result<Vec<TokenRecord>, EngineError> {
        if self.greedy_on_device {
            // Made in the decode; `admit` let in only generations a greedy pick serves.
            return picks
                .iter()
                .map(|&(_, at)| device_pick(&self.ctx, at))
                .collect();
        }
        let seqs: Vec<usize> = picks
            .iter()
            .map(|&(index, _)| self.active[index].request.seq)
            .collect();
        for (&(index, _), &seq) in picks.iter().zip(&seqs) {
            let sampling = self.active[index].request.sampling;
            let slot = &mut self.samplers[seq];
            if !slot.as_ref().is_some_and(|s| *s.params() == sampling) {
                *slot = Some(TokenSampler::new(sampling));
            }
        }
        // One exclusive borrow of each sequence's sampler and grammar, taken out once.
        let mut samplers: Vec<Option<&mut TokenSampler>> =
            self.samplers.iter_mut().map(Option::as_mut).collect();
        let mut guides: Vec<Option<&mut Guide>> = self
            .active
            .iter_mut()
            .map(|a| a.request.guide.as_mut())
            .collect();
        let mut work = Vec::with_capacity(picks.len());
        for (&(index, at), &seq) in picks.iter().zip(&seqs) {
            let sampler = samplers[seq].take().ok_or_else(|| {
                EngineError::Decode(format!("sequence {seq} was to sample twice in one step"))
            })?;
            work.push((self.ctx.get_logits_ith(at), sampler, guides[index].take()));
        }
        let logprobs = self.logprobs;
        let pick = |(logits, sampler, guide): (&[f32], &mut TokenSampler, Option<&mut Guide>)| {
            pick_token(logits, sampler, guide, logprobs)
        };
        if work.len() < 2 {
            // Not worth a hand-over to the pool.
            return work.into_iter().map(pick).collect();
        }
        work.into_par_iter().map(pick).collect()
    }

    /// Takes `record`, the token just picked for `self.active[index]`, into its generation;
    /// returns how the generation ends if it does.
    fn take_token(
        &mut self,
        index: usize,
        record: TokenRecord,
    ) -> Result<Option<GenerationStop>, EngineError> {
        let active = &mut self.active[index];
        let token = LlamaToken(record.id);
        active.records.push(record);
        active.sampled += 1;
        active.pending.push(token.0);
        let engine = self.engine;
        let vocab = engine.model().vocab();
        if vocab.is_eog(token) {
            return Ok(Some(GenerationStop::EndOfTurn));
        }
        let piece = vocab.token_to_piece(token, false, None);
        if let Some(guide) = active.request.guide.as_mut() {
            guide.observe(&piece, |past| guide::grammar_tokens(engine, past));
        }
        match active.text.push(&piece, &active.request.stops) {
            TokenText::Streamed(piece) => {
                if !piece.is_empty() {
                    let _ = active.request.replies.send(Reply::Text(piece));
                }
            }
            TokenText::Stopped {
                index,
                streamed,
                replace_with,
            } => {
                if let Some(kept) = replace_with {
                    // The context keeps the tokens of the part that is kept instead, as a
                    // single session does.
                    active.records.pop();
                    active.pending.pop();
                    for t in vocab.tokenize(kept.as_bytes(), false, false) {
                        active.records.push(TokenRecord {
                            id: t.0,
                            logprob: None,
                        });
                        active.pending.push(t.0);
                    }
                }
                let _ = active.request.replies.send(Reply::Text(streamed));
                return Ok(Some(GenerationStop::StopString { index }));
            }
        }
        if let Some(period) = active.repetition.as_mut().and_then(|w| w.push(token.0)) {
            return Ok(Some(GenerationStop::Repetition { period }));
        }
        Ok(self.limit_reached(&self.active[index]))
    }

    fn finish(&self, mut active: Active, stop: GenerationStop) {
        if !matches!(stop, GenerationStop::StopString { .. }) {
            let tail = active.text.finish();
            if !tail.is_empty() {
                let _ = active.request.replies.send(Reply::Text(tail));
            }
        }
        let done = Finished {
            generation: Generation {
                text: active.text.into_text(),
                stop,
                tokens: active.sampled,
            },
            records: active.records,
            evaluated: self.kv[active.request.seq].len(),
            copied_tokens: active.copied_tokens,
            prefill_tokens: active.prefill_tokens,
            decode_tokens: active.decode_tokens,
            prefill_time: active.prefill_time,
            decode_time: active.decode_time,
        };
        let _ = active.request.replies.send(Reply::Done(Ok(done)));
    }
}

#[cfg(test)]
mod tests {
    use super::BatchReport;
    use std::time::Duration;

    #[test]
    fn the_mean_width_weighs_each_step_by_its_sequences() {
        let ms = Duration::from_millis;
        let report = BatchReport {
            // Three steps of one sequence, one of four; the prefill steps are not decode steps.
            by_width: vec![
                (ms(0), 0),
                (ms(90), 3),
                (ms(0), 0),
                (ms(0), 0),
                (ms(150), 1),
            ],
            with_prefill: (ms(900), 2),
            ..BatchReport::default()
        };
        assert!((report.mean_width() - 7.0 / 4.0).abs() < 1e-12);
        assert_eq!(BatchReport::default().mean_width(), 0.0);
    }
}

//! Picking one token from a 151,936-entry row of logits (Qwen2.5's vocabulary), the work done
//! between two decoding steps: Catena's [`TokenSampler`] against the anchor it replaced,
//! llama.cpp's sampler chain as Catena drove it (the row copied into a candidate array, a
//! grammar's mask applied entry by entry as llama-cpp-2's llguidance sampler does, top-k, top-p,
//! temperature and `dist`, then Catena's log-probability pass where RL reads it). Computing the
//! grammar's mask itself is llguidance's work in both and is left out.
//!
//! `cargo bench --offline --workspace --bench sampling -- "pick one token"`
//!
//! The second group is the batch scheduler's case: one token for each of 16 sequences, each with
//! its own row and sampler, picked one after another (the anchor) and on the cores at once
//! (rayon, as `Scheduler::pick_tokens` does).
//!
//! `cargo bench --offline --workspace --bench sampling -- "16 sequences"`

use catena_engine_api::{AllowedTokens, SamplingParams, TokenSampler, token_logprob};
use criterion::{Criterion, criterion_group, criterion_main};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use rayon::prelude::*;
use std::hint::black_box;

const VOCAB: usize = 151_936;

/// A peaked row like a language model's: logit falls with the log of a token's (shuffled) rank.
fn logits() -> Vec<f32> {
    logits_seeded(0x9E37_79B9)
}

/// [`logits`] with another shuffle of the ranks (`seed` not zero).
fn logits_seeded(seed: u32) -> Vec<f32> {
    let mut x = seed;
    (0..VOCAB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let rank = (x % VOCAB as u32) as f32 + 1.0;
            12.0 - 2.5 * rank.ln()
        })
        .collect()
}

/// A mask allowing every `stride`-th token.
fn mask(stride: usize) -> Vec<u32> {
    let mut words = vec![0u32; VOCAB.div_ceil(32)];
    for t in (0..VOCAB).step_by(stride) {
        words[t / 32] |= 1 << (t % 32);
    }
    words
}

/// A mask allowing every token but each `stride`-th (free text inside a chain's segment, where a
/// grammar rules out only the protocol's tags and a few special tokens).
fn mask_all_but(stride: usize) -> Vec<u32> {
    let mut words = vec![u32::MAX; VOCAB.div_ceil(32)];
    for t in (0..VOCAB).step_by(stride) {
        words[t / 32] &= !(1 << (t % 32));
    }
    words
}

fn chain(p: &SamplingParams) -> LlamaSampler {
    let mut chain = Vec::new();
    if p.top_k > 0 {
        chain.push(LlamaSampler::top_k(p.top_k));
    }
    if p.top_p > 0.0 && p.top_p < 1.0 {
        chain.push(LlamaSampler::top_p(p.top_p, 1));
    }
    chain.push(LlamaSampler::temp(p.temperature));
    chain.push(LlamaSampler::dist(p.seed));
    LlamaSampler::chain_simple(chain)
}

/// The anchor: what one token cost through llama.cpp's chain.
fn anchor_pick(
    sampler: &mut LlamaSampler,
    logits: &[f32],
    allowed: Option<&[u32]>,
    p: &SamplingParams,
    logprob: bool,
) -> (i32, Option<f32>) {
    let mut cur = LlamaTokenDataArray::from_iter(
        logits
            .iter()
            .enumerate()
            .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
        false,
    );
    if let Some(words) = allowed {
        for item in cur.data.iter_mut() {
            let t = item.id().0 as usize;
            if words[t / 32] >> (t % 32) & 1 == 0 {
                item.set_logit(f32::NEG_INFINITY);
            }
        }
    }
    cur.apply_sampler(sampler);
    let token = cur.selected_token().map_or(0, |t| t.0);
    let lp = logprob
        .then(|| token_logprob(logits, token as usize, p.logprob_temperature()))
        .flatten();
    (token, lp)
}

fn bench(c: &mut Criterion) {
    let row = logits();
    let half = mask(2);
    let few = mask(5_000);
    let most = mask_all_but(100);
    let rl = SamplingParams {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        seed: 3,
        ..SamplingParams::default()
    };
    let run = SamplingParams::default();
    // What `catena serve` draws with for an OpenAI client that sets top_p alone (its requests
    // carry no top_k, which the server then leaves off).
    let top_p_alone = SamplingParams {
        temperature: 0.7,
        top_p: 0.9,
        top_k: 0,
        seed: 5,
        ..SamplingParams::default()
    };
    let cases: [(&str, SamplingParams, Option<&[u32]>, bool); 8] = [
        ("RL, free, with log-probability", rl, None, true),
        (
            "RL, mask allows half, with log-probability",
            rl,
            Some(&half),
            true,
        ),
        (
            "RL, mask allows 31, with log-probability",
            rl,
            Some(&few),
            true,
        ),
        (
            "catena run defaults (top-k 40, top-p 0.95, t 0.6)",
            run,
            None,
            false,
        ),
        (
            "catena run defaults, mask allows 99%",
            run,
            Some(&most),
            false,
        ),
        (
            "greedy, mask allows 99%",
            SamplingParams::greedy(),
            Some(&most),
            false,
        ),
        ("top-p 0.9 alone (t 0.7)", top_p_alone, None, false),
        (
            "top-p 0.9 alone (t 0.7), mask allows 99%",
            top_p_alone,
            Some(&most),
            false,
        ),
    ];
    let mut group = c.benchmark_group("pick one token of 151936");
    for (name, p, allowed, logprob) in cases {
        let mut sampler = chain(&p);
        group.bench_function(format!("anchor: llama.cpp chain; {name}"), |b| {
            b.iter(|| anchor_pick(&mut sampler, black_box(&row), allowed, &p, logprob))
        });
        let mut ours = TokenSampler::new(p);
        group.bench_function(format!("catena: TokenSampler; {name}"), |b| {
            b.iter(|| ours.pick(black_box(&row), allowed.map(AllowedTokens), logprob))
        });
    }
    group.finish();
}

fn bench_sequences(c: &mut Criterion) {
    const SEQUENCES: u32 = 16;
    let rl = SamplingParams {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        seed: 3,
        ..SamplingParams::default()
    };
    let rows: Vec<Vec<f32>> = (1..=SEQUENCES).map(|i| logits_seeded(i * 7919)).collect();
    let mut samplers: Vec<TokenSampler> = (0..SEQUENCES)
        .map(|i| TokenSampler::new(SamplingParams { seed: i, ..rl }))
        .collect();
    let mut group = c.benchmark_group("pick for 16 sequences, RL settings, with log-probability");
    group.bench_function("anchor: one after another", |b| {
        b.iter(|| {
            samplers
                .iter_mut()
                .zip(&rows)
                .map(|(s, row)| s.pick(black_box(row), None, true))
                .collect::<Vec<_>>()
        })
    });
    group.bench_function("catena: on the cores at once (rayon)", |b| {
        b.iter(|| {
            samplers
                .par_iter_mut()
                .zip(&rows)
                .map(|(s, row)| s.pick(black_box(row), None, true))
                .collect::<Vec<_>>()
        })
    });
    group.finish();
}

criterion_group!(benches, bench, bench_sequences);
criterion_main!(benches);

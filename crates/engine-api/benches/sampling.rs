//! The per-token cost Catena adds on top of llama.cpp's decode: the log-probability of the sampled
//! token over the whole vocabulary (Qwen2.5: 151,936 entries), against the anchor of a plain
//! scalar `f64` computation, measured in the same run. At ~25 ms per decoded token on a laptop
//! CPU, this must stay far below a millisecond; on a GPU a token takes about 1 ms, so it is
//! computed only where RL reads it, and greedy decoding elsewhere is `argmax` alone.
//!
//! The greedy pick itself, on a row like a model's (its largest logit once, here halfway in, the
//! mean place of one that may be anywhere), against the way it was found before: a pass for the
//! largest value and then a search for the first equal one.
//!
//! The sampler's pick under a grammar's mask that lets most tokens through (free text inside a
//! chain's segment), greedy, at the default settings and at RL's (a draw from the whole
//! distribution, the mask RL's rollouts are held to), each against the same pick without a mask:
//! what the mask costs a token.
//!
//! Also the loop watch (`RepetitionWatch`) that every chain's token passes through, against
//! the same `argmax`, the least a decoded token costs Catena.

use catena_engine_api::{
    AllowedTokens, RepetitionWatch, SamplingParams, TokenSampler, argmax, greedy_pick,
    token_logprob,
};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn logits(n: usize) -> Vec<f32> {
    let mut x = 0x9E37_79B9u32;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2000) as f32 / 100.0 - 10.0
        })
        .collect()
}

/// The anchor of the greedy pick, the library's `argmax` before it searched in one pass: the
/// largest value in 16 independent lanes (so it vectorises), then the first position holding it.
fn two_pass_argmax(logits: &[f32]) -> Option<usize> {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut pieces = logits.chunks_exact(16);
    for piece in &mut pieces {
        for (lane, &v) in lanes.iter_mut().zip(piece) {
            *lane = if v > *lane { v } else { *lane };
        }
    }
    let max = lanes
        .iter()
        .chain(pieces.remainder())
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    logits.iter().position(|&l| l == max)
}

/// The anchor: the textbook log-softmax, one `f64::exp` per logit.
fn scalar_logprob(logits: &[f32], token: usize, temperature: f32) -> f32 {
    let t = f64::from(temperature);
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| (f64::from(l - max) / t).exp()).sum();
    (f64::from(logits[token] - max) / t - sum.ln()) as f32
}

fn bench(c: &mut Criterion) {
    let l = logits(151_936);
    let mut group = c.benchmark_group("logprob over 151936 logits");
    group.bench_function("anchor: scalar f64 log-softmax", |b| {
        b.iter(|| scalar_logprob(black_box(&l), black_box(1234), black_box(0.7)))
    });
    group.bench_function("catena: token_logprob", |b| {
        b.iter(|| token_logprob(black_box(&l), black_box(1234), black_box(0.7)))
    });
    group.bench_function("catena: greedy_pick", |b| {
        b.iter(|| greedy_pick(black_box(&l)))
    });
    group.bench_function("catena: argmax", |b| b.iter(|| argmax(black_box(&l))));
    group.finish();

    let mut row = logits(151_936);
    row[151_936 / 2] = 11.0;
    assert_eq!(two_pass_argmax(&row), argmax(&row));
    let mut group = c.benchmark_group("greedy pick, the largest logit halfway in");
    group.bench_function("anchor: max pass, then search", |b| {
        b.iter(|| two_pass_argmax(black_box(&row)))
    });
    group.bench_function("catena: argmax", |b| b.iter(|| argmax(black_box(&row))));
    group.finish();

    // Every word of the mask but one in 97 (32 tokens each): 99% of the vocabulary allowed.
    let mut mask = vec![u32::MAX; row.len().div_ceil(32)];
    mask.iter_mut().step_by(97).for_each(|word| *word = 0);
    for (name, params) in [
        ("a greedy", SamplingParams::greedy()),
        ("a default settings", SamplingParams::default()),
        (
            "an RL settings (temperature 1, no top-k or top-p)",
            SamplingParams {
                temperature: 1.0,
                top_p: 1.0,
                top_k: 0,
                ..SamplingParams::default()
            },
        ),
    ] {
        let mut group = c.benchmark_group(format!("{name} pick under a grammar's mask"));
        let mut sampler = TokenSampler::new(params);
        group.bench_function("anchor: the same pick without a mask", |b| {
            b.iter(|| sampler.pick(black_box(&row), None, false))
        });
        group.bench_function("catena: TokenSampler::pick under the mask", |b| {
            b.iter(|| sampler.pick(black_box(&row), Some(AllowedTokens(&mask)), false))
        });
        group.finish();
    }

    // Tokens with no loop in them, so every period is looked at for every token.
    let tokens: Vec<i32> = logits(4096).iter().map(|&x| (x * 100.0) as i32).collect();
    let mut group = c.benchmark_group("one token");
    group.bench_function("anchor: argmax over 151936 logits", |b| {
        b.iter(|| argmax(black_box(&l)))
    });
    group.bench_function("catena: RepetitionWatch::push (mean of 4096)", |b| {
        b.iter_custom(|iterations| {
            let streams = iterations.div_ceil(tokens.len() as u64).max(1);
            let mut spent = std::time::Duration::ZERO;
            for _ in 0..streams {
                let mut watch = RepetitionWatch::default();
                let started = std::time::Instant::now();
                for &t in &tokens {
                    black_box(watch.push(black_box(t)));
                }
                spent += started.elapsed();
            }
            spent.mul_f64(iterations as f64 / (streams * tokens.len() as u64) as f64)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The per-token cost Catena adds on top of llama.cpp's decode: the log-probability of the sampled
//! token over the whole vocabulary (Qwen2.5: 151,936 entries), against the anchor of a plain
//! scalar `f64` computation, measured in the same run. At ~25 ms per decoded token on a laptop
//! CPU, this must stay far below a millisecond; on a GPU a token takes about 1 ms, so it is
//! computed only where RL reads it, and greedy decoding elsewhere is `argmax` alone.
//!
//! Also the loop watch (`RepetitionWatch`) that every chain's token passes through, against
//! the same `argmax`, the least a decoded token costs Catena.

use catena_engine_api::{RepetitionWatch, argmax, greedy_pick, token_logprob};
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

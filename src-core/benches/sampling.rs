//! The per-token cost Catena adds on top of llama.cpp's decode: the log-probability of the sampled
//! token over the whole vocabulary (Qwen2.5: 151,936 entries). At ~25 ms per decoded token on a
//! laptop CPU, this must stay far below a millisecond.

use catena_core::engine::token_logprob;
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

fn bench(c: &mut Criterion) {
    let l = logits(151_936);
    c.bench_function("token_logprob/151936", |b| {
        b.iter(|| token_logprob(black_box(&l), black_box(1234), black_box(0.7)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The forward and backward passes of one RL group's update on a GGUF model, timed with each
//! rollout evaluated alone (the update before packing) and with the group packed, its shared
//! prompt evaluated once (docs/ARCHITECTURE.md, `trainer/`), the two alternated in one process so
//! that the machine's drift falls on both alike. The tokens are pseudo-random: a pass's
//! arithmetic depends on the lengths and the trained positions, not on which tokens they are.
//!
//!   rl_update MODEL.gguf [PROMPT [CONTINUATION [ROLLOUTS [ROUNDS [KEPT_MIB]]]]]
//!
//! (defaults 392 300 8 2, and the trainer's own budget for kept products). Each rollout is the prompt and a continuation of its own, every continuation token trained.
//! Prints one line per pass, `alone|packed seconds trained_tokens_per_second summed_nll`, then
//! the median seconds of each and their ratio.

use anyhow::{Context, bail};
use catena_trainer::{BaseModel, Device, LoraConfig, Qwen2Lora};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        bail!("usage: rl_update MODEL.gguf [PROMPT [CONTINUATION [ROLLOUTS [ROUNDS [KEPT_MIB]]]]]")
    };
    let number = |i: usize, default: usize| -> anyhow::Result<usize> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse().with_context(|| format!("not a count: {s}"))
        })
    };
    let (prompt, continuation) = (number(1, 392)?, number(2, 300)?);
    let (rollouts, rounds) = (number(3, 8)?, number(4, 2)?);
    if prompt == 0 || continuation == 0 || rollouts == 0 || rounds == 0 {
        bail!("every count must be at least 1")
    }
    let (mut model, vocab) = {
        let base = BaseModel::load(std::path::Path::new(path), &Device::Cpu)?;
        let vocab = base.config.vocab as u64;
        (Qwen2Lora::new(&base, &LoraConfig::default(), 1)?, vocab)
    };
    if args.get(5).is_some() {
        model = model.with_kept_products(number(5, 0)? << 20);
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) % vocab) as u32
    };
    let shared: Vec<u32> = (0..prompt).map(|_| next()).collect();
    let group: Vec<(Vec<u32>, Vec<bool>)> = (0..rollouts)
        .map(|_| {
            let tokens: Vec<u32> = shared
                .iter()
                .copied()
                .chain((0..continuation).map(|_| next()))
                .collect();
            let trained = (0..prompt + continuation).map(|i| i >= prompt).collect();
            (tokens, trained)
        })
        .collect();
    let sequences: Vec<(&[u32], &[bool])> = group.iter().map(|(t, m)| (&t[..], &m[..])).collect();
    let trained_tokens = (rollouts * continuation) as f64;
    // The first pass makes the dense copies of the weights; it is not counted.
    model.pack_loss(&sequences[..1], true)?;
    let mut seconds = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        let started = Instant::now();
        let mut nll = 0.0;
        for &(tokens, trained) in &sequences {
            nll += model.pack_loss(&[(tokens, trained)], true)?.nll_sum;
        }
        let s = started.elapsed().as_secs_f64();
        println!("alone {s:.3} {:.2} {nll:.4}", trained_tokens / s);
        seconds[0].push(s);
        let started = Instant::now();
        let nll = model.pack_loss(&sequences, true)?.nll_sum;
        let s = started.elapsed().as_secs_f64();
        println!("packed {s:.3} {:.2} {nll:.4}", trained_tokens / s);
        seconds[1].push(s);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut alone, mut packed] = seconds;
    let (alone, packed) = (median(&mut alone), median(&mut packed));
    println!(
        "median: alone {alone:.3} s, packed {packed:.3} s, ratio {:.3}",
        alone / packed
    );
    Ok(())
}

//! One SFT step (forward, head, recomputing backward) on a GGUF model, timed with and without
//! the kept products (docs/ARCHITECTURE.md, `trainer/`), the two alternated in one process so
//! that the machine's drift between runs falls on both alike. The tokens are a fixed
//! pseudo-random sequence: a step's arithmetic depends on its length and its trained positions,
//! not on which tokens they are.
//!
//!   sft_step MODEL.gguf [TOKENS [TRAINED [ROUNDS]]]     (defaults 610, 250, 3)
//!
//! Prints one line per step, `budget_bytes seconds tokens_per_second`, then the median of
//! each and their ratio.

use anyhow::{Context, bail};
use catena_trainer::{BaseModel, Device, LoraConfig, Qwen2Lora};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        bail!("usage: sft_step MODEL.gguf [TOKENS [TRAINED [ROUNDS]]]")
    };
    let number = |i: usize, default: usize| -> anyhow::Result<usize> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse().with_context(|| format!("not a count: {s}"))
        })
    };
    let (len, trained_count, rounds) = (number(1, 610)?, number(2, 250)?, number(3, 3)?);
    if rounds == 0 {
        bail!("at least one round")
    }
    if trained_count >= len || len < 2 {
        bail!("{trained_count} trained positions do not fit in {len} tokens")
    }
    let (mut model, vocab) = {
        let base = BaseModel::load(std::path::Path::new(path), &Device::Cpu)?;
        let vocab = base.config.vocab;
        (Qwen2Lora::new(&base, &LoraConfig::default(), 1)?, vocab)
    };
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let tokens: Vec<u32> = (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % vocab as u64) as u32
        })
        .collect();
    let trained: Vec<bool> = (0..len).map(|i| i >= len - trained_count).collect();
    // The first step makes the dense copies of the weights; it is not counted.
    model.sequence_loss(&tokens, &trained, Some(0), true)?;
    let budgets = [0usize, 1 << 30];
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); budgets.len()];
    for round in 0..rounds {
        for (i, &budget) in budgets.iter().enumerate() {
            model = model.with_kept_products(budget);
            let started = Instant::now();
            model.sequence_loss(&tokens, &trained, Some(round as u64 + 1), true)?;
            let s = started.elapsed().as_secs_f64();
            println!("{budget} {s:.3} {:.2}", len as f64 / s);
            seconds[i].push(s);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (whole, kept) = (median(&mut seconds[0]), median(&mut seconds[1]));
    println!(
        "median: recomputed whole {whole:.3} s, products kept {kept:.3} s, ratio {:.3}",
        whole / kept
    );
    Ok(())
}

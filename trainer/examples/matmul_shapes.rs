//! candle's CPU matrix product at the shapes of one SFT step on the default model (620 tokens,
//! hidden 896, feed-forward 4864), one line per shape: `name m k n milliseconds`.
//! `scripts/bench/matmul.sh` runs it beside PyTorch's product on the same shapes.

use candle_core::{Device, Tensor};
use std::time::Instant;

/// `(name, m, k, n, weight stored (n, k) and used transposed)`.
const SHAPES: [(&str, usize, usize, usize, bool); 4] = [
    ("gate_up_forward", 620, 896, 4864, true),
    ("down_backward", 620, 4864, 896, false),
    ("q_o_forward", 620, 896, 896, true),
    ("gate_up_backward", 620, 896, 4864, false),
];

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    for (name, m, k, n, transposed) in SHAPES {
        let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
        let w = if transposed {
            Tensor::randn(0f32, 1.0, (n, k), &dev)?.t()?
        } else {
            Tensor::randn(0f32, 1.0, (k, n), &dev)?
        };
        x.matmul(&w)?;
        let reps = 10;
        let started = Instant::now();
        for _ in 0..reps {
            x.matmul(&w)?;
        }
        let ms = started.elapsed().as_secs_f64() * 1e3 / f64::from(reps);
        println!("{name} {m} {k} {n} {ms:.2}");
    }
    Ok(())
}

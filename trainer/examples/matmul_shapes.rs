//! candle's CPU matrix product at the shapes of one SFT step on the default model (620 tokens,
//! hidden 896, feed-forward 4864, vocabulary 151,936), one line per shape: `name m k n
//! milliseconds`. The head's products are timed at two chunk heights: a chunk of trained rows
//! reads the whole vocabulary projection once forward and once backward.
//! `scripts/bench/matmul.sh` runs it beside PyTorch's product on the same shapes.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use std::time::Instant;

/// `(name, m, k, n, weight stored (n, k) and used transposed)`.
const SHAPES: [(&str, usize, usize, usize, bool); 8] = [
    ("gate_up_forward", 620, 896, 4864, true),
    ("down_backward", 620, 4864, 896, false),
    ("q_o_forward", 620, 896, 896, true),
    ("gate_up_backward", 620, 896, 4864, false),
    ("head_forward_32", 32, 896, 151936, true),
    ("head_backward_32", 32, 151936, 896, false),
    ("head_forward_128", 128, 896, 151936, true),
    ("head_backward_128", 128, 151936, 896, false),
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
        let ms = time_ms(|| x.matmul(&w))?;
        println!("{name} {m} {k} {n} {ms:.2}");
    }
    quantised_down_forward(&dev)
}

/// The feed-forward down projection forward (Q4_K in the default model) through candle's
/// quantised kernel against the dense product with its dequantised copy, on stderr.
fn quantised_down_forward(dev: &Device) -> candle_core::Result<()> {
    let (m, k, n) = (620, 4864, 896);
    let x = Tensor::randn(0f32, 1.0, (m, k), dev)?;
    let q = QTensor::quantize(&Tensor::randn(0f32, 1.0, (n, k), dev)?, GgmlDType::Q4K)?;
    let dense = q.dequantize(dev)?.t()?;
    let kernel = QMatMul::from_qtensor(q)?;
    let quantised = time_ms(|| kernel.forward(&x))?;
    let dense = time_ms(|| x.matmul(&dense))?;
    eprintln!("down_forward {m} {k} {n}: Q4_K kernel {quantised:.2} ms, dense f32 {dense:.2} ms");
    Ok(())
}

/// Milliseconds a product takes, the mean of ten after one warm-up.
fn time_ms(product: impl Fn() -> candle_core::Result<Tensor>) -> candle_core::Result<f64> {
    product()?;
    let reps = 10;
    let started = Instant::now();
    for _ in 0..reps {
        product()?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e3 / f64::from(reps))
}

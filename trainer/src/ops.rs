//! The differentiable building blocks of the training graph.
//!
//! candle's fused `rms_norm`, `softmax_last_dim`, `rope` and `sdpa` record no backward pass
//! (a loss behind them silently gets no gradient), so these are written from elementary ops,
//! each of which candle differentiates. Where one of those chains is hot (attention,
//! the gated unit, the head's log-probabilities), the f32 CPU path takes a fused kernel with its
//! own backward instead (fused.rs).

use crate::{fused, fused_block};
use candle_core::{D, DType, Device, Result, Tensor};

/// `x / sqrt(mean(x²) + eps) * weight` over the last dimension. One graph node on the CPU
/// (fused_block.rs), elementary ops elsewhere.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    if fused::applies(x) {
        return fused_block::rms_norm(x, weight, eps);
    }
    let mean_square = x.sqr()?.mean_keepdim(D::Minus1)?;
    let scale = (mean_square + eps)?.sqrt()?.recip()?;
    x.broadcast_mul(&scale)?.broadcast_mul(weight)
}

/// The rotary tables for the given positions: `(cos, sin)`, each `(positions, head_dim / 2)`.
pub fn rope_tables(
    positions: &[u32],
    head_dim: usize,
    theta: f32,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| 1.0 / theta.powf(2.0 * i as f32 / head_dim as f32))
        .collect();
    let inv_freq = Tensor::from_vec(inv_freq, (1, half), device)?;
    let positions = Tensor::new(positions, device)?
        .to_dtype(DType::F32)?
        .reshape((positions.len(), 1))?;
    let angles = positions.broadcast_mul(&inv_freq)?;
    Ok((angles.cos()?, angles.sin()?))
}

/// Rotary embedding in the "NEOX" layout Qwen2 uses (the two halves of each head rotate
/// together), for `x` of shape `(heads, len, head_dim)`.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let head_dim = x.dim(D::Minus1)?;
    let half = head_dim / 2;
    let first = x.narrow(D::Minus1, 0, half)?;
    let second = x.narrow(D::Minus1, half, half)?;
    let rotated_first = (first.broadcast_mul(cos)? - second.broadcast_mul(sin)?)?;
    let rotated_second = (second.broadcast_mul(cos)? + first.broadcast_mul(sin)?)?;
    Tensor::cat(&[rotated_first, rotated_second], D::Minus1)
}

/// The projection `x (len, heads · head_dim)` split into `(heads, len, head_dim)` and rotated
/// ([`rope`]). One graph node on the CPU (fused_block.rs), elementary ops elsewhere.
pub fn rope_heads(x: &Tensor, heads: usize, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    if fused::applies(x) {
        return fused_block::rope_heads(x, heads, cos, sin);
    }
    rope(&split_heads(x, heads)?, cos, sin)
}

/// `x (len, heads · head_dim)` as `(heads, len, head_dim)`.
pub fn split_heads(x: &Tensor, heads: usize) -> Result<Tensor> {
    let (len, width) = x.dims2()?;
    x.reshape((len, heads, width / heads))?
        .transpose(0, 1)?
        .contiguous()
}

/// An additive causal mask `(queries, keys)` for queries that are the last of the keys'
/// positions: query `i` sees keys `0..=keys - queries + i` (0), not the others (-inf). With as
/// many keys as queries, 0 on and below the diagonal.
pub fn causal_mask(queries: usize, keys: usize, device: &Device) -> Result<Tensor> {
    let before = keys.saturating_sub(queries);
    let mask: Vec<f32> = (0..queries)
        .flat_map(|i| {
            (0..keys).map(move |j| {
                if j > before + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(mask, (queries, keys), device)
}

/// Softmax over the last dimension, from differentiable pieces.
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let exp = x.broadcast_sub(&max)?.exp()?;
    exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)
}

/// Log-softmax over the last dimension.
pub fn log_softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let shifted = x.broadcast_sub(&max)?;
    let log_sum = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    shifted.broadcast_sub(&log_sum)
}

/// SiLU, `x * sigmoid(x)`, from differentiable pieces.
pub fn silu(x: &Tensor) -> Result<Tensor> {
    let sigmoid = (x.neg()?.exp()? + 1.0)?.recip()?;
    x * sigmoid
}

/// Causal attention, `softmax(scale · q kᵀ + mask) v`, for `q (heads, len, head_dim)` and
/// `k`, `v (kv_heads, keys, _)`, each key and value head serving `heads / kv_heads`
/// consecutive query heads; the queries are the last `len` of the keys' positions
/// (fused::causal_attention). One graph node on the CPU (fused.rs), elementary ops elsewhere,
/// with `mask` ([`causal_mask`] of these sizes) where the caller keeps one, made here if not.
pub fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Option<&Tensor>,
) -> Result<Tensor> {
    if fused::applies(q) {
        return fused::causal_attention(q, k, v, scale as f32);
    }
    let mask = match mask {
        Some(mask) => mask.clone(),
        None => causal_mask(q.dim(1)?, k.dim(1)?, q.device())?,
    }
    .to_dtype(q.dtype())?;
    let heads = q.dim(0)?;
    let kv_heads = k.dim(0)?;
    let repeat = |t: &Tensor| -> Result<Tensor> {
        let (kv, len, dim) = t.dims3()?;
        if kv == heads {
            return Ok(t.clone());
        }
        t.unsqueeze(1)?
            .broadcast_as((kv, heads / kv, len, dim))?
            .reshape((heads, len, dim))
    };
    if kv_heads == 0 || heads % kv_heads != 0 {
        candle_core::bail!("{heads} query heads do not share {kv_heads} key heads evenly")
    }
    let (k, v) = (repeat(k)?, repeat(v)?);
    let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(&mask)?;
    softmax_last(&scores)?.matmul(&v)
}

/// The gated feed-forward unit, `silu(gate) · up`.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if fused::applies(gate) {
        return fused::swiglu(gate, up);
    }
    silu(gate)? * up
}

/// The log-probability of each row's label under `softmax(logits)`, shape `(rows,)`.
pub fn label_logprobs(logits: &Tensor, labels: &[u32]) -> Result<Tensor> {
    if fused::applies(logits) {
        return fused::label_logprobs(logits, labels);
    }
    let idx = Tensor::new(labels, logits.device())?.unsqueeze(1)?;
    log_softmax_last(logits)?
        .gather(&idx, D::Minus1)?
        .squeeze(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    fn close(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    #[test]
    fn softmax_and_log_softmax_agree_with_the_fused_versions() -> Result<()> {
        let x = Tensor::randn(0f32, 3.0, (4, 9), &Device::Cpu)?;
        let want = candle_core::Tensor::exp(&x)?.broadcast_div(&x.exp()?.sum_keepdim(1)?)?;
        assert!(close(&softmax_last(&x)?, &want) < 1e-6);
        assert!(close(&log_softmax_last(&x)?.exp()?, &want) < 1e-6);
        Ok(())
    }

    #[test]
    fn every_block_passes_a_gradient() -> Result<()> {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (2, 5, 8), &dev)?)?;
        let w = Var::from_tensor(&Tensor::ones(8, DType::F32, &dev)?)?;
        let (cos, sin) = rope_tables(&[0, 1, 2, 3, 4], 8, 10_000.0, &dev)?;
        let h = rms_norm(x.as_tensor(), w.as_tensor(), 1e-6)?;
        let h = rope(&h, &cos, &sin)?;
        let h = silu(&h)?;
        let scores = h
            .matmul(&h.t()?)?
            .broadcast_add(&causal_mask(5, 5, &dev)?)?;
        let loss = log_softmax_last(&softmax_last(&scores)?)?.sum_all()?;
        let grads = loss.backward()?;
        for v in [&x, &w] {
            let g = grads.get(v.as_tensor()).expect("gradient");
            assert!(g.abs()?.sum_all()?.to_scalar::<f32>()? > 0.0);
        }
        Ok(())
    }

    #[test]
    fn the_elementary_attention_after_a_prefix_is_the_fused_one() -> Result<()> {
        // Off the CPU's f32 the elementary ops run, with the mask made for these sizes: f64
        // tensors take that path here.
        let dev = Device::Cpu;
        let (heads, kv_heads, queries, keys, dim, scale) = (4, 2, 3, 7, 8, 0.35);
        let q = Tensor::randn(0f32, 1.5, (heads, queries, dim), &dev)?;
        let k = Tensor::randn(0f32, 1.5, (kv_heads, keys, dim), &dev)?;
        let v = Tensor::randn(0f32, 1.5, (kv_heads, keys, dim), &dev)?;
        let fused = causal_attention(&q, &k, &v, scale, None)?;
        let wide = |t: &Tensor| t.to_dtype(DType::F64);
        let elementary = causal_attention(&wide(&q)?, &wide(&k)?, &wide(&v)?, scale, None)?;
        assert!(close(&fused, &elementary.to_dtype(DType::F32)?) < 1e-5);
        // The last query sees every key; the first, all but the last two.
        let mask = causal_mask(queries, keys, &dev)?.to_vec2::<f32>()?;
        assert!(mask[2].iter().all(|&m| m == 0.0));
        assert!(mask[0][..5].iter().all(|&m| m == 0.0));
        assert!(mask[0][5..].iter().all(|&m| m == f32::NEG_INFINITY));
        Ok(())
    }

    #[test]
    fn rope_at_position_zero_is_the_identity_and_keeps_norms() -> Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (3, 6, 16), &dev)?;
        let (cos, sin) = rope_tables(&[0, 1, 2, 3, 4, 5], 16, 1_000_000.0, &dev)?;
        let y = rope(&x, &cos, &sin)?;
        assert!(close(&y.narrow(1, 0, 1)?, &x.narrow(1, 0, 1)?) < 1e-6);
        let norms = |t: &Tensor| t.sqr().unwrap().sum_keepdim(D::Minus1).unwrap();
        assert!(close(&norms(&y), &norms(&x)) < 1e-4);
        Ok(())
    }
}

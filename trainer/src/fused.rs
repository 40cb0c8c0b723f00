//! CPU kernels, each with its own backward, for the chains of small ops that dominate a training
//! step once the matrix products are done: causal attention, the gated unit and the head's label
//! log-probabilities.
//!
//! Built from candle's elementary ops (ops.rs), a causal softmax over `(heads, len, len)` scores
//! is six full-size tensors forward and about twice that backward, each freshly allocated (and
//! its pages faulted in and zeroed), and candle's backward adds a zero tensor and a sum for
//! every node's gradient, the constant mask's included. Each op here is one graph node. They run
//! on f32 CPU tensors; ops.rs keeps the elementary versions for other devices, and the tests hold
//! the two to the same values and gradients. Sums run in f64 (see [`log_sum_exp`]).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Whether `t` can take the fused kernels: f32 on the CPU.
pub fn applies(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == candle_core::DType::F32
}

/// Causal attention for `q (heads, len, head_dim)` and `k`, `v (kv_heads, keys, _)`:
/// `softmax(scale · q kᵀ, causal) v`, where each key and value head serves `heads / kv_heads`
/// consecutive query heads (grouped-query attention). The queries are the last `len` of the
/// `keys` positions (`keys >= len`): query `i` sees keys `0..=keys - len + i`. With as many keys
/// as queries that is plain causal attention; with more, the queries continue a prefix whose
/// keys come first (a packed sequence's continuation after the prefix its members share,
/// docs/ARCHITECTURE.md, `trainer/`).
///
/// As one graph node the `(heads, len, keys)` scores and weights are no longer nodes of their
/// own, so the backward pass allocates the two such tensors it needs instead of about six (candle
/// adds a zero tensor and a sum for each node's gradient). The weights are kept for the backward
/// pass only when an input takes part in a graph. The query heads of a group are laid end to
/// end, `(kv_heads, group · len, head_dim)`, so the products serve the group without copying its
/// keys and values, and their backward sums the group's gradients in the same products.
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32) -> Result<Tensor> {
    check_scale(scale)?;
    let (heads, len, head_dim) = q.dims3()?;
    let (kv_heads, keys) = (k.dim(0)?, k.dim(1)?);
    if kv_heads == 0 || heads % kv_heads != 0 || v.dim(0)? != kv_heads || keys < len {
        candle_core::bail!(
            "attention of {heads} query heads over keys {:?} and values {:?}",
            k.dims(),
            v.dims()
        )
    }
    let keep = q.track_op() || k.track_op() || v.track_op();
    let op = CausalAttention {
        scale,
        queries: len,
        weights: keep.then(|| std::sync::Mutex::new(None)),
    };
    let grouped = q
        .contiguous()?
        .reshape((kv_heads, heads / kv_heads * len, head_dim))?;
    let out = grouped.apply_op3(&k.contiguous()?, &v.contiguous()?, op)?;
    out.reshape((heads, len, v.dim(2)?))
}

/// `lhs · rhs` on the CPU for `(m, k)` by `(k, n)` or batched `(b, m, k)` by `(b, k, n)`
/// operands given as storage with their layouts (strided views such as transposes included).
pub fn cpu_matmul(
    lhs: &CpuStorage,
    lhs_layout: &Layout,
    rhs: &CpuStorage,
    rhs_layout: &Layout,
) -> Result<CpuStorage> {
    let (batch, m, k, k2, n) = match (lhs_layout.dims(), rhs_layout.dims()) {
        (&[m, k], &[k2, n]) => (1, m, k, k2, n),
        (&[b, m, k], &[b2, k2, n]) if b == b2 => (b, m, k, k2, n),
        (l, r) => candle_core::bail!("no product of {l:?} by {r:?}"),
    };
    if k != k2 {
        candle_core::bail!("no product of ({m}, {k}) by ({k2}, {n})")
    }
    lhs.matmul(rhs, (batch, m, n, k), lhs_layout, rhs_layout)
}

/// `silu(gate) · up`, the gated unit of a SwiGLU feed-forward layer.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    gate.contiguous()?.apply_op2(&up.contiguous()?, SwiGlu)
}

/// `log softmax(logits)[r, labels[r]]` for each row `r` of `(rows, vocab)` logits: the
/// log-probability of each row's label, shape `(rows,)`.
pub fn label_logprobs(logits: &Tensor, labels: &[u32]) -> Result<Tensor> {
    logits.contiguous()?.apply_op1(LabelLogprobs {
        labels: labels.to_vec(),
    })
}

/// Subtracting a row's largest score before scaling is only right for a positive scale.
fn check_scale(scale: f32) -> Result<()> {
    if scale.is_nan() || scale <= 0.0 {
        candle_core::bail!("a causal softmax needs a positive scale, not {scale}")
    }
    Ok(())
}

/// The contiguous f32 values a layout points at.
pub(crate) fn values<'a>(storage: &'a CpuStorage, layout: &Layout) -> Result<&'a [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("fused kernel given a non-contiguous tensor")
    };
    Ok(&storage.as_slice::<f32>()?[start..end])
}

/// The last dimension of `shape` and the number of rows before it.
pub(crate) fn rows_of(shape: &Shape) -> Result<(usize, usize)> {
    let cols = shape.dims().last().copied().unwrap_or(0);
    if cols == 0 {
        candle_core::bail!("fused kernel given an empty last dimension")
    }
    Ok((shape.elem_count() / cols, cols))
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `e^x` to a relative error under 2.5 f32 epsilons, written so that a loop over it vectorises:
/// `f32::exp` is a call into libm per value, and the attention rows, the gated unit and the head
/// take about 400 million of them a training step of the default model (counted from the shapes).
///
/// Cody and Waite's reduction `x = n ln 2 + r` with `|r| ≤ ln 2 / 2`, the degree-6 polynomial
/// of the Cephes library's `expf` for `e^r`, and `2^n` built in the exponent bits. `n` is
/// rounded by adding and subtracting 1.5 · 2^23, which needs no rounding instruction of
/// later x86 levels. Results too small for a normal f32 (`x < -87.33`) are 0, `x > 88.72`
/// gives infinity, NaN stays NaN.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts, the first exact in a few bits, so `n · LN2_HI` is exact.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Below 88.37 `n` stays at most 127, so `2^n` is a normal f32.
    let clamped = x.clamp(-87.33, 88.37);
    let shifted = clamped * LOG2_E + ROUND;
    let n = shifted - ROUND;
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let r = (clamped - n * LN2_HI) - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let e_r = p * r * r + r + 1.0;
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    let y = e_r * two_n;
    let y = if x < -87.33 { 0.0 } else { y };
    let y = if x > 88.72 { f32::INFINITY } else { y };
    if x.is_nan() { x } else { y }
}

/// The sum of `values` in f64, in eight running sums that a loop vectorises (one running sum
/// waits on each addition before the next). The order is fixed, so the result is the same
/// every run.
fn sum_f64(values: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(v);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(v)).sum();
    lanes.iter().sum::<f64>() + tail
}

/// The largest of `values` (`-inf` for none), in eight running maxima for the same reason.
fn max_f32(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = if v > *lane { v } else { *lane };
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    lanes.iter().fold(tail, |m, &v| m.max(v))
}

/// The causal softmax of `(queries, keys)` score matrices laid end to end, the queries being the
/// last `queries` of the `keys` positions.
fn causal_softmax_rows(scores: &[f32], queries: usize, keys: usize, scale: f32) -> Vec<f32> {
    let mut out = vec![0f32; scores.len()];
    out.par_chunks_mut(keys)
        .zip(scores.par_chunks(keys))
        .enumerate()
        .for_each(|(row, (out, scores))| {
            let seen = keys - queries + row % queries + 1;
            let max = max_f32(&scores[..seen]);
            for (o, &s) in out[..seen].iter_mut().zip(&scores[..seen]) {
                *o = exp((s - max) * scale);
            }
            let inv = (1.0 / sum_f64(&out[..seen])) as f32;
            out[..seen].iter_mut().for_each(|o| *o *= inv);
        });
    out
}

struct CausalAttention {
    scale: f32,
    /// Query positions per head (the last of the keys' positions).
    queries: usize,
    /// The attention weights of the forward pass, for the backward pass (when it will come).
    weights: Option<std::sync::Mutex<Option<Tensor>>>,
}

impl CustomOp3 for CausalAttention {
    fn name(&self) -> &'static str {
        "catena-causal-attention"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        q_layout: &Layout,
        k: &CpuStorage,
        k_layout: &Layout,
        v: &CpuStorage,
        v_layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        // `rows` is a multiple of `queries` (a group of query heads), so row `r` is query
        // `r % queries` of its head.
        let (heads, rows, dim) = q_layout.shape().dims3()?;
        let (k_heads, keys, k_dim) = k_layout.shape().dims3()?;
        let (v_heads, v_len, v_dim) = v_layout.shape().dims3()?;
        let queries = self.queries;
        if (k_heads, k_dim) != (heads, dim)
            || (v_heads, v_len) != (heads, keys)
            || queries == 0
            || keys < queries
            || rows % queries != 0
        {
            candle_core::bail!(
                "attention over q {:?}, k {:?}, v {:?}",
                q_layout.dims(),
                k_layout.dims(),
                v_layout.dims()
            )
        }
        let scores = cpu_matmul(q, q_layout, k, &k_layout.transpose(1, 2)?)?;
        let weights_layout = Layout::contiguous((heads, rows, keys));
        let weights =
            causal_softmax_rows(values(&scores, &weights_layout)?, queries, keys, self.scale);
        drop(scores);
        let weights = CpuStorage::F32(weights);
        let out = cpu_matmul(&weights, &weights_layout, v, v_layout)?;
        if let Some(kept) = &self.weights {
            let CpuStorage::F32(values) = weights else {
                candle_core::bail!("attention weights that are not f32")
            };
            let tensor = Tensor::from_vec(values, (heads, rows, keys), &candle_core::Device::Cpu)?;
            *kept
                .lock()
                .map_err(|_| candle_core::Error::Msg("attention lock".into()))? = Some(tensor);
        }
        Ok((out, Shape::from((heads, rows, v_dim))))
    }

    /// With `g` the output's gradient and `p` the weights: `dv = pᵀ g`; `ds` the softmax's
    /// backward of `dp = g vᵀ`; `dq = ds k`, `dk = dsᵀ q` (the scale is inside `ds`).
    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (q, k, v) = (q.detach(), k.detach(), v.detach());
        let kept = match &self.weights {
            Some(kept) => kept
                .lock()
                .map_err(|_| candle_core::Error::Msg("attention lock".into()))?
                .take(),
            None => None,
        };
        let Some(weights) = kept else {
            candle_core::bail!(
                "attention weights were not kept for the backward pass (internal error)"
            )
        };
        let grad = grad.contiguous()?;
        let dv = weights.t()?.matmul(&grad)?;
        let dp = grad.matmul(&v.t()?)?;
        let ds = weights.apply_op2_no_bwd(&dp, &SoftmaxBackward { scale: self.scale })?;
        drop((weights, dp));
        let dq = ds.matmul(&k)?;
        let dk = ds.t()?.matmul(&q)?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

struct SoftmaxBackward {
    scale: f32,
}

impl CustomOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "catena-softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (_, cols) = rows_of(l1.shape())?;
        let (p, g) = (values(s1, l1)?, values(s2, l2)?);
        if p.len() != g.len() {
            candle_core::bail!("softmax backward: gradient of a different shape")
        }
        let mut out = vec![0f32; p.len()];
        out.par_chunks_mut(cols)
            .zip(p.par_chunks(cols).zip(g.par_chunks(cols)))
            .for_each(|(out, (p, g))| {
                let dot = p.iter().zip(g).map(|(p, g)| f64::from(p * g)).sum::<f64>() as f32;
                for ((o, &p), &g) in out.iter_mut().zip(p).zip(g) {
                    *o = self.scale * p * (g - dot);
                }
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

struct SwiGlu;

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "catena-swiglu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (gate, up) = (values(s1, l1)?, values(s2, l2)?);
        if l1.shape() != l2.shape() {
            candle_core::bail!("swiglu: gate {:?} against up {:?}", l1.shape(), l2.shape())
        }
        let mut out = vec![0f32; gate.len()];
        out.par_chunks_mut(CHUNK)
            .zip(gate.par_chunks(CHUNK).zip(up.par_chunks(CHUNK)))
            .for_each(|(out, (gate, up))| {
                for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                    *o = g * sigmoid(g) * u;
                }
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    /// `d up = g · silu(gate)`, `d gate = g · up · σ(gate) · (1 + gate · (1 − σ(gate)))`,
    /// computed in one pass into a `(2, ..)` tensor whose halves are handed back as views.
    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let both = gate.apply_op3_no_bwd(up, &grad.contiguous()?, &SwiGluBackward)?;
        let shape = gate.shape();
        Ok((
            Some(both.get(0)?.reshape(shape)?),
            Some(both.get(1)?.reshape(shape)?),
        ))
    }
}

/// Element-wise kernels split their work in chunks of this many values.
const CHUNK: usize = 1 << 14;

struct SwiGluBackward;

impl CustomOp3 for SwiGluBackward {
    fn name(&self) -> &'static str {
        "catena-swiglu-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (gate, up, grad) = (values(s1, l1)?, values(s2, l2)?, values(s3, l3)?);
        let n = gate.len();
        if up.len() != n || grad.len() != n {
            candle_core::bail!("swiglu backward: operands of different shapes")
        }
        let mut out = vec![0f32; 2 * n];
        let (d_gate, d_up) = out.split_at_mut(n);
        d_gate
            .par_chunks_mut(CHUNK)
            .zip(d_up.par_chunks_mut(CHUNK))
            .zip(gate.par_chunks(CHUNK).zip(up.par_chunks(CHUNK)))
            .zip(grad.par_chunks(CHUNK))
            .for_each(|(((d_gate, d_up), (gate, up)), grad)| {
                for i in 0..gate.len() {
                    let (g, u, dy) = (gate[i], up[i], grad[i]);
                    let s = sigmoid(g);
                    d_up[i] = dy * g * s;
                    d_gate[i] = dy * u * s * (1.0 + g * (1.0 - s));
                }
            });
        let mut dims = vec![2];
        dims.extend_from_slice(l1.shape().dims());
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}

struct LabelLogprobs {
    labels: Vec<u32>,
}

/// Each row's label as an index into its `cols` logits, checked: one label per row, each inside
/// the vocabulary.
fn checked_labels(labels: &[u32], rows: usize, cols: usize) -> Result<Vec<usize>> {
    if labels.len() != rows {
        candle_core::bail!("{} labels for {rows} rows", labels.len())
    }
    labels
        .iter()
        .map(|&l| match l as usize {
            l if l < cols => Ok(l),
            l => candle_core::bail!("label {l} outside a vocabulary of {cols}"),
        })
        .collect()
}

impl CustomOp1 for LabelLogprobs {
    fn name(&self) -> &'static str {
        "catena-label-logprobs"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (rows, cols) = rows_of(layout.shape())?;
        let labels = checked_labels(&self.labels, rows, cols)?;
        let logits = values(storage, layout)?;
        let out: Vec<f32> = logits
            .par_chunks(cols)
            .zip(labels.par_iter())
            .map(|(row, &label)| row[label] - log_sum_exp(row))
            .collect();
        Ok((CpuStorage::F32(out), Shape::from(rows)))
    }

    /// `d logits[r, j] = g[r] · (1{j = label} − softmax(logits[r])[j])`, with the row's
    /// log-sum-exp recovered from the forward result: `logits[r, label] − res[r]`.
    fn bwd(&self, logits: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad.contiguous()?;
        let backward = LabelLogprobsBackward {
            labels: self.labels.clone(),
        };
        Ok(Some(logits.apply_op3_no_bwd(res, &grad, &backward)?))
    }
}

/// `ln Σ exp(x)` over a row. The sum is kept in f64: summed in f32 one after another, the
/// vocabulary's long tail (150,000 terms each far below the f32 step of the running sum) is lost,
/// and every log-probability comes out too high.
fn log_sum_exp(row: &[f32]) -> f32 {
    let max = max_f32(row);
    let mut exps = [0f32; 1024];
    let mut sum = 0f64;
    for chunk in row.chunks(exps.len()) {
        let exps = &mut exps[..chunk.len()];
        for (e, &x) in exps.iter_mut().zip(chunk) {
            *e = exp(x - max);
        }
        sum += sum_f64(exps);
    }
    max + sum.ln() as f32
}

struct LabelLogprobsBackward {
    labels: Vec<u32>,
}

impl CustomOp3 for LabelLogprobsBackward {
    fn name(&self) -> &'static str {
        "catena-label-logprobs-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (rows, cols) = rows_of(l1.shape())?;
        let (logits, res, grad) = (values(s1, l1)?, values(s2, l2)?, values(s3, l3)?);
        let labels = checked_labels(&self.labels, rows, cols)?;
        if res.len() != rows || grad.len() != rows {
            candle_core::bail!("label log-probs backward: {rows} rows, other operands differ")
        }
        let mut out = vec![0f32; logits.len()];
        out.par_chunks_mut(cols)
            .zip(logits.par_chunks(cols))
            .enumerate()
            .for_each(|(r, (out, row))| {
                let label = labels[r];
                let lse = row[label] - res[r];
                for (o, &x) in out.iter_mut().zip(row) {
                    *o = -grad[r] * exp(x - lse);
                }
                out[label] += grad[r];
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;
    use candle_core::{D, Device, Var};

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .and_then(|d| d.abs())
            .and_then(|d| d.max_all())
            .and_then(|d| d.to_scalar::<f32>())
            .unwrap_or(f32::INFINITY)
    }

    /// The value and input gradient of `f(x) · w` summed, `w` fixed random weights.
    fn value_and_grad(
        x: &Tensor,
        w: &Tensor,
        f: impl Fn(&Tensor) -> Result<Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let x = Var::from_tensor(x)?;
        let y = f(x.as_tensor())?;
        let grads = (&y * w)?.sum_all()?.backward()?;
        let g = grads.get(x.as_tensor()).cloned();
        Ok((
            y,
            g.ok_or_else(|| candle_core::Error::Msg("no gradient".into()))?,
        ))
    }

    /// The vectorised `exp` against f64's over the range a softmax and a sigmoid use, and at
    /// the edges: a relative error under 2.5 f32 epsilons.
    #[test]
    fn exp_is_within_a_few_ulp_of_f64s() {
        let mut worst = 0f64;
        for i in 0..=400_000 {
            let x = -87.0 + 175.0 * i as f32 / 400_000.0;
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            worst = worst.max((got - want).abs() / want);
        }
        assert!(
            worst < 2.5 * f64::from(f32::EPSILON),
            "relative error {worst}"
        );
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(max_f32(&[]), f32::NEG_INFINITY);
        let values: Vec<f32> = (0..21).map(|i| (i as f32 - 7.0).powi(2)).collect();
        assert_eq!(max_f32(&values), 169.0);
        assert_eq!(
            sum_f64(&values),
            values.iter().map(|&v| f64::from(v)).sum::<f64>()
        );
    }

    #[test]
    fn causal_attention_matches_the_masked_elementary_attention() -> Result<()> {
        let dev = Device::Cpu;
        let (heads, len, dim, scale) = (3, 7, 8, 0.35);
        let [q, k, v] = [0, 1, 2].map(|_| {
            Tensor::randn(0f32, 1.5, (heads, len, dim), &dev).and_then(|t| Var::from_tensor(&t))
        });
        let (q, k, v) = (q?, k?, v?);
        let w = Tensor::randn(0f32, 1.0, (heads, len, dim), &dev)?;
        let mask = ops::causal_mask(len, len, &dev)?;
        let (qt, kt, vt) = (q.as_tensor(), k.as_tensor(), v.as_tensor());
        let scores = (qt.matmul(&kt.t()?)? * f64::from(scale))?.broadcast_add(&mask)?;
        let elementary = ops::softmax_last(&scores)?.matmul(vt)?;
        let want = (&elementary * &w)?.sum_all()?.backward()?;
        let fused = causal_attention(qt, kt, vt, scale)?;
        let got = (&fused * &w)?.sum_all()?.backward()?;
        assert!(max_diff(&fused, &elementary) < 1e-5);
        for (name, var) in [("q", &q), ("k", &k), ("v", &v)] {
            let (Some(a), Some(b)) = (got.get(var.as_tensor()), want.get(var.as_tensor())) else {
                panic!("no gradient for {name}")
            };
            let d = max_diff(a, b);
            assert!(d < 1e-4, "the gradient of {name} differs by {d}");
        }
        // The first position attends to itself only: its output is its own value row.
        let first = fused.get(1)?.get(0)?;
        assert!(max_diff(&first, &vt.get(1)?.get(0)?) < 1e-6);
        Ok(())
    }

    #[test]
    fn queries_after_a_prefix_are_the_last_rows_of_the_whole_attention() -> Result<()> {
        // The last 3 of 7 positions over all 7 keys, against the whole causal attention's last
        // 3 rows: the same values, and the same gradient for every input.
        let dev = Device::Cpu;
        let (heads, kv_heads, len, tail, dim, scale) = (4, 2, 7, 3, 8, 0.35);
        let q = Var::from_tensor(&Tensor::randn(0f32, 1.5, (heads, len, dim), &dev)?)?;
        let [k, v] = [0, 1].map(|_| {
            Tensor::randn(0f32, 1.5, (kv_heads, len, dim), &dev).and_then(|t| Var::from_tensor(&t))
        });
        let (k, v) = (k?, v?);
        let w = Tensor::randn(0f32, 1.0, (heads, tail, dim), &dev)?;
        let (qt, kt, vt) = (q.as_tensor(), k.as_tensor(), v.as_tensor());
        let whole = causal_attention(qt, kt, vt, scale)?.narrow(1, len - tail, tail)?;
        let want = (&whole * &w)?.sum_all()?.backward()?;
        let part = causal_attention(&qt.narrow(1, len - tail, tail)?, kt, vt, scale)?;
        let got = (&part * &w)?.sum_all()?.backward()?;
        assert!(max_diff(&part, &whole) < 1e-6);
        for (name, var) in [("q", &q), ("k", &k), ("v", &v)] {
            let (Some(a), Some(b)) = (got.get(var.as_tensor()), want.get(var.as_tensor())) else {
                panic!("no gradient for {name}")
            };
            let d = max_diff(a, b);
            assert!(d < 1e-5, "the gradient of {name} differs by {d}");
        }
        // More queries than keys is no causal attention.
        assert!(causal_attention(qt, &kt.narrow(1, 0, 3)?, &vt.narrow(1, 0, 3)?, scale).is_err());
        Ok(())
    }

    #[test]
    fn attention_refuses_a_scale_it_cannot_apply() -> Result<()> {
        let t = Tensor::zeros((1, 2, 4), candle_core::DType::F32, &Device::Cpu)?;
        for scale in [0.0, -1.0, f32::NAN] {
            assert!(causal_attention(&t, &t, &t, scale).is_err());
        }
        Ok(())
    }

    #[test]
    fn swiglu_matches_silu_times_up() -> Result<()> {
        let dev = Device::Cpu;
        let gate = Tensor::randn(0f32, 3.0, (5, 40_000), &dev)?;
        let up = Tensor::randn(0f32, 1.0, (5, 40_000), &dev)?;
        let w = Tensor::randn(0f32, 1.0, (5, 40_000), &dev)?;
        let (g, u) = (Var::from_tensor(&gate)?, Var::from_tensor(&up)?);
        let elementary = (ops::silu(g.as_tensor())? * u.as_tensor())?;
        let want = (&elementary * &w)?.sum_all()?.backward()?;
        let fused = swiglu(g.as_tensor(), u.as_tensor())?;
        let got = (&fused * &w)?.sum_all()?.backward()?;
        assert!(max_diff(&fused, &elementary) < 1e-5);
        for v in [&g, &u] {
            let (a, b) = (got.get(v.as_tensor()), want.get(v.as_tensor()));
            let (Some(a), Some(b)) = (a, b) else {
                panic!("a gradient is missing")
            };
            assert!(max_diff(a, b) < 1e-4);
        }
        Ok(())
    }

    #[test]
    fn label_logprobs_match_log_softmax_and_gather() -> Result<()> {
        let dev = Device::Cpu;
        let logits = Tensor::randn(0f32, 5.0, (4, 3_001), &dev)?;
        let labels = [0u32, 3_000, 17, 17];
        let w = Tensor::new(&[1.0f32, -2.0, 0.5, 3.0], &dev)?;
        let idx = Tensor::new(&labels, &dev)?.unsqueeze(1)?;
        let (want, want_grad) = value_and_grad(&logits, &w, |x| {
            ops::log_softmax_last(x)?
                .gather(&idx, D::Minus1)?
                .squeeze(1)
        })?;
        let (got, got_grad) = value_and_grad(&logits, &w, |x| label_logprobs(x, &labels))?;
        // The row sums run in another order than candle's, and the weights go up to 3: a few
        // f32 rounding steps of a value near 1 (1.7e-5 was the largest seen in 40 runs).
        let (value, grad) = (max_diff(&got, &want), max_diff(&got_grad, &want_grad));
        assert!(
            value < 1e-4 && grad < 1e-4,
            "value off by {value}, gradient by {grad}"
        );
        Ok(())
    }

    /// One likely token and a vocabulary-long tail of unlikely ones: each tail term is far below
    /// the f32 step of a running sum near 1, but together they carry 0.23% of the mass.
    #[test]
    fn the_vocabulary_tail_counts_in_a_label_log_probability() -> Result<()> {
        let vocab = 151_936;
        let mut row = vec![-18f32; vocab];
        row[0] = 0.0;
        let logits = Tensor::from_vec(row, (1, vocab), &Device::Cpu)?;
        let got = label_logprobs(&logits, &[0])?.to_vec1::<f32>()?[0];
        let want = -(1.0 + (vocab - 1) as f64 * (-18f64).exp()).ln();
        assert!((f64::from(got) - want).abs() < 1e-6, "{got} against {want}");

        // Random rows of the same width against the log-softmax taken in f64.
        let logits = Tensor::randn(0f32, 3.0, (3, vocab), &Device::Cpu)?;
        let labels = [5u32, 100_000, 151_935];
        let idx = Tensor::new(&labels, &Device::Cpu)?.unsqueeze(1)?;
        let exact = ops::log_softmax_last(&logits.to_dtype(candle_core::DType::F64)?)?
            .gather(&idx, D::Minus1)?
            .squeeze(1)?
            .to_dtype(candle_core::DType::F32)?;
        let d = max_diff(&label_logprobs(&logits, &labels)?, &exact);
        assert!(d < 1e-5, "off the f64 log-softmax by {d}");
        Ok(())
    }

    #[test]
    fn a_label_outside_the_vocabulary_is_an_error() -> Result<()> {
        let logits = Tensor::zeros((2, 10), candle_core::DType::F32, &Device::Cpu)?;
        let err = label_logprobs(&logits, &[3, 10]).err();
        assert!(err.is_some_and(|e| e.to_string().contains("outside a vocabulary of 10")));
        assert!(label_logprobs(&logits, &[3]).is_err());
        Ok(())
    }
}

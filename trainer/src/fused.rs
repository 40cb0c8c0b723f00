//! One-pass CPU kernels, with their own backward, for the element-wise chains that dominate a
//! training step once the matrix products are done.
//!
//! Built from candle's elementary ops (ops.rs), a causal softmax over `(heads, len, len)` scores
//! is six full-size tensors forward and about twice that backward, each freshly allocated (and
//! its pages faulted in and zeroed), and candle's backward adds a zero tensor of the same size
//! for every constant operand (the mask). Each op here reads its input once and writes one
//! output, forward and backward. They run on f32 CPU tensors; ops.rs keeps the elementary
//! versions for other devices, and the tests hold the two to the same values and gradients.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Whether `t` can take the fused kernels: f32 on the CPU.
pub fn applies(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == candle_core::DType::F32
}

/// `softmax(scale · scores)` over the last dimension of `(.., len, len)` scores, row `i` of each
/// `(len, len)` matrix seeing only columns `0..=i` (the causal mask; later columns come out 0).
pub fn causal_softmax(scores: &Tensor, scale: f32) -> Result<Tensor> {
    // Subtracting the row's largest score before scaling is only right for a positive scale.
    if scale.is_nan() || scale <= 0.0 {
        candle_core::bail!("causal softmax needs a positive scale, not {scale}")
    }
    let square = match scores.dims() {
        [.., rows, cols] => rows == cols,
        _ => false,
    };
    if !square {
        candle_core::bail!(
            "causal softmax needs (.., len, len) scores, not {:?}",
            scores.dims()
        )
    }
    scores.contiguous()?.apply_op1(CausalSoftmax { scale })
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

/// The contiguous f32 values a layout points at.
fn values<'a>(storage: &'a CpuStorage, layout: &Layout) -> Result<&'a [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("fused kernel given a non-contiguous tensor")
    };
    Ok(&storage.as_slice::<f32>()?[start..end])
}

/// The last dimension of `shape` and the number of rows before it.
fn rows_of(shape: &Shape) -> Result<(usize, usize)> {
    let cols = shape.dims().last().copied().unwrap_or(0);
    if cols == 0 {
        candle_core::bail!("fused kernel given an empty last dimension")
    }
    Ok((shape.elem_count() / cols, cols))
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

struct CausalSoftmax {
    scale: f32,
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "catena-causal-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (_, len) = rows_of(layout.shape())?;
        let scores = values(storage, layout)?;
        let mut out = vec![0f32; scores.len()];
        out.par_chunks_mut(len)
            .zip(scores.par_chunks(len))
            .enumerate()
            .for_each(|(row, (out, scores))| {
                let seen = row % len + 1;
                let max = scores[..seen]
                    .iter()
                    .fold(f32::NEG_INFINITY, |m, &s| m.max(s));
                let mut sum = 0f32;
                for (o, &s) in out[..seen].iter_mut().zip(&scores[..seen]) {
                    *o = ((s - max) * self.scale).exp();
                    sum += *o;
                }
                let inv = 1.0 / sum;
                out[..seen].iter_mut().for_each(|o| *o *= inv);
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    /// `d scores = scale · p ⊙ (g − Σ p ⊙ g)` per row; masked columns get 0 (their `p` is 0).
    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad.contiguous()?;
        Ok(Some(res.apply_op2_no_bwd(
            &grad,
            &SoftmaxBackward { scale: self.scale },
        )?))
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
                let dot: f32 = p.iter().zip(g).map(|(p, g)| p * g).sum();
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

impl LabelLogprobs {
    /// Row `r`'s label as an index into its `cols` logits.
    fn label(&self, row: usize, cols: usize) -> Result<usize> {
        match self.labels.get(row).map(|&l| l as usize) {
            Some(l) if l < cols => Ok(l),
            Some(l) => candle_core::bail!("label {l} outside a vocabulary of {cols}"),
            None => candle_core::bail!("no label for row {row}"),
        }
    }
}

impl CustomOp1 for LabelLogprobs {
    fn name(&self) -> &'static str {
        "catena-label-logprobs"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (rows, cols) = rows_of(layout.shape())?;
        if self.labels.len() != rows {
            candle_core::bail!("{} labels for {rows} rows", self.labels.len())
        }
        let logits = values(storage, layout)?;
        let labels = (0..rows)
            .map(|r| self.label(r, cols))
            .collect::<Result<Vec<_>>>()?;
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

fn log_sum_exp(row: &[f32]) -> f32 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let sum: f32 = row.iter().map(|&x| (x - max).exp()).sum();
    max + sum.ln()
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
        let fwd = LabelLogprobs {
            labels: self.labels.clone(),
        };
        let labels = (0..rows)
            .map(|r| fwd.label(r, cols))
            .collect::<Result<Vec<_>>>()?;
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
                    *o = -grad[r] * (x - lse).exp();
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

    #[test]
    fn causal_softmax_matches_the_masked_elementary_softmax() -> Result<()> {
        let dev = Device::Cpu;
        let (heads, len, scale) = (3, 7, 0.125);
        let scores = Tensor::randn(0f32, 4.0, (heads, len, len), &dev)?;
        let w = Tensor::randn(0f32, 1.0, (heads, len, len), &dev)?;
        let mask = ops::causal_mask(len, &dev)?;
        let (want, want_grad) = value_and_grad(&scores, &w, |s| {
            ops::softmax_last(&(s * f64::from(scale))?.broadcast_add(&mask)?)
        })?;
        let (got, got_grad) = value_and_grad(&scores, &w, |s| causal_softmax(s, scale))?;
        assert!(max_diff(&got, &want) < 1e-6);
        assert!(max_diff(&got_grad, &want_grad) < 1e-5);
        // The first row sees only itself; every row sums to one.
        let first = got.get(1)?.get(0)?.to_vec1::<f32>()?;
        assert_eq!(first[0], 1.0);
        assert!(first[1..].iter().all(|&p| p == 0.0));
        let sums = got.sum(D::Minus1)?.flatten_all()?.to_vec1::<f32>()?;
        assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-6));
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

    #[test]
    fn a_label_outside_the_vocabulary_is_an_error() -> Result<()> {
        let logits = Tensor::zeros((2, 10), candle_core::DType::F32, &Device::Cpu)?;
        let err = label_logprobs(&logits, &[3, 10]).err();
        assert!(err.is_some_and(|e| e.to_string().contains("outside a vocabulary of 10")));
        assert!(label_logprobs(&logits, &[3]).is_err());
        Ok(())
    }
}

//! CPU kernels, each one graph node with its own backward, for the two chains of elementary ops
//! a block still ran after fused.rs: RMSNorm, and the rotary embedding with the split of a
//! projection into heads.
//!
//! Built from candle's ops (ops.rs), an RMSNorm is seven nodes and a rotary embedding with its
//! split into heads twelve, each a `(len, hidden)`-sized tensor that the graph holds until the
//! backward pass, which adds a zero tensor and a sum for each node's gradient. As single nodes
//! they hold about 110 MiB less at the peak of a step of the default model, with the same
//! losses; the step's speed moved by less than this VM's noise (docs/BENCHMARKS.md, "Fewer nodes
//! in a block"). The same f32 CPU tensors only; ops.rs keeps the elementary versions for other
//! devices, and the tests hold the two to the same values and gradients.

use crate::fused::{rows_of, values};
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// `x / sqrt(mean(x²) + eps) · weight` over the last dimension of `x`.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    if !(eps.is_finite() && eps >= 0.0) {
        candle_core::bail!("an RMSNorm needs a finite epsilon of at least 0, not {eps}")
    }
    x.contiguous()?
        .apply_op2(&weight.contiguous()?, RmsNorm { eps: eps as f32 })
}

/// The projection `x (len, heads · head_dim)` split into `(heads, len, head_dim)` and rotated by
/// the tables `cos`, `sin` (each `(len, head_dim / 2)`) in the "NEOX" layout Qwen2 uses: the
/// two halves of each head rotate together. The tables are constants (no gradient).
pub fn rope_heads(x: &Tensor, heads: usize, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    x.contiguous()?
        .apply_op3(&cos.contiguous()?, &sin.contiguous()?, RopeHeads { heads })
}

/// The reciprocal root mean square of a row.
fn inverse_rms(row: &[f32], eps: f32) -> f32 {
    let sum: f32 = row.iter().map(|x| x * x).sum();
    1.0 / (sum / row.len() as f32 + eps).sqrt()
}

struct RmsNorm {
    eps: f32,
}

impl RmsNorm {
    fn operands<'a>(
        x: &'a CpuStorage,
        x_layout: &Layout,
        w: &'a CpuStorage,
        w_layout: &Layout,
    ) -> Result<(&'a [f32], &'a [f32], usize)> {
        let (_, cols) = rows_of(x_layout.shape())?;
        let (x, w) = (values(x, x_layout)?, values(w, w_layout)?);
        if w.len() != cols {
            candle_core::bail!("RMSNorm of rows of {cols} with a weight of {}", w.len())
        }
        Ok((x, w, cols))
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "catena-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w, cols) = Self::operands(s1, l1, s2, l2)?;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .for_each(|(out, row)| {
                let r = inverse_rms(row, self.eps);
                for ((o, &x), &w) in out.iter_mut().zip(row).zip(w) {
                    *o = x * r * w;
                }
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    /// With `r` a row's inverse RMS, `n` its width and `u = g · w`:
    /// `dx = r · u − x · r³ · (u · x) / n`; the weight's gradient, `Σ_rows g · x · r`, only when
    /// the weight takes part in a graph (the base model's norms are frozen).
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let dx = x.apply_op3_no_bwd(w, &grad, &RmsNormBackward { eps: self.eps })?;
        let dw = if w.track_op() {
            let ones = w.ones_like()?;
            let normed = x.apply_op2_no_bwd(&ones, self)?;
            let rows = normed.elem_count() / w.elem_count();
            let flat = (normed * grad)?.reshape((rows, w.elem_count()))?;
            Some(flat.sum(0)?.reshape(w.shape())?)
        } else {
            None
        };
        Ok((Some(dx), dw))
    }
}

struct RmsNormBackward {
    eps: f32,
}

impl CustomOp3 for RmsNormBackward {
    fn name(&self) -> &'static str {
        "catena-rms-norm-backward"
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
        let (x, w, cols) = RmsNorm::operands(s1, l1, s2, l2)?;
        let grad = values(s3, l3)?;
        if grad.len() != x.len() {
            candle_core::bail!("RMSNorm backward: a gradient of another shape")
        }
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(cols)
            .zip(x.par_chunks(cols).zip(grad.par_chunks(cols)))
            .for_each(|(out, (row, g))| {
                let r = inverse_rms(row, self.eps);
                let dot: f32 = row.iter().zip(g).zip(w).map(|((x, g), w)| x * g * w).sum();
                let k = r * r * r * dot / cols as f32;
                for (((o, &x), &g), &w) in out.iter_mut().zip(row).zip(g).zip(w) {
                    *o = r * g * w - x * k;
                }
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

struct RopeHeads {
    heads: usize,
}

/// The sizes a rotation works with: positions, the head's width and half of it.
struct RopeShape {
    len: usize,
    head_dim: usize,
    half: usize,
}

impl RopeHeads {
    /// Checks `x (len, heads · head_dim)` against the tables `(len, head_dim / 2)`.
    fn shape(&self, x: &Layout, cos: &Layout, sin: &Layout) -> Result<RopeShape> {
        let (len, width) = x.shape().dims2()?;
        let (t_len, half) = cos.shape().dims2()?;
        if self.heads == 0 || width % self.heads != 0 {
            candle_core::bail!(
                "a projection of width {width} does not split into {} heads",
                self.heads
            )
        }
        let head_dim = width / self.heads;
        if sin.dims() != cos.dims() || t_len != len || 2 * half != head_dim {
            candle_core::bail!(
                "rotary tables {:?} and {:?} for {len} positions of heads of {head_dim}",
                cos.dims(),
                sin.dims()
            )
        }
        Ok(RopeShape {
            len,
            head_dim,
            half,
        })
    }
}

impl CustomOp3 for RopeHeads {
    fn name(&self) -> &'static str {
        "catena-rope-heads"
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
        let RopeShape {
            len,
            head_dim,
            half,
        } = self.shape(l1, l2, l3)?;
        let (x, cos, sin) = (values(s1, l1)?, values(s2, l2)?, values(s3, l3)?);
        let width = self.heads * head_dim;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(len * head_dim)
            .enumerate()
            .for_each(|(h, out)| {
                for p in 0..len {
                    let src = &x[p * width + h * head_dim..][..head_dim];
                    let (a, b) = src.split_at(half);
                    let (c, s) = (&cos[p * half..][..half], &sin[p * half..][..half]);
                    let (o1, o2) = out[p * head_dim..][..head_dim].split_at_mut(half);
                    for i in 0..half {
                        o1[i] = a[i] * c[i] - b[i] * s[i];
                        o2[i] = b[i] * c[i] + a[i] * s[i];
                    }
                }
            });
        Ok((
            CpuStorage::F32(out),
            Shape::from((self.heads, len, head_dim)),
        ))
    }

    /// The transposed rotation, back into the projection's layout:
    /// `da = g1 · cos + g2 · sin`, `db = g2 · cos − g1 · sin`.
    fn bwd(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let backward = RopeHeadsBackward {
            heads: self.heads,
            width: x.dim(1)?,
        };
        let dx = grad.apply_op3_no_bwd(cos, sin, &backward)?;
        Ok((Some(dx), None, None))
    }
}

struct RopeHeadsBackward {
    heads: usize,
    width: usize,
}

impl CustomOp3 for RopeHeadsBackward {
    fn name(&self) -> &'static str {
        "catena-rope-heads-backward"
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
        let (heads, len, head_dim) = l1.shape().dims3()?;
        let half = head_dim / 2;
        if heads != self.heads
            || heads * head_dim != self.width
            || l2.dims() != [len, half]
            || l3.dims() != l2.dims()
        {
            candle_core::bail!(
                "rotary backward: a gradient {:?} of another shape",
                l1.dims()
            )
        }
        let (g, cos, sin) = (values(s1, l1)?, values(s2, l2)?, values(s3, l3)?);
        let mut out = vec![0f32; g.len()];
        out.par_chunks_mut(self.width)
            .enumerate()
            .for_each(|(p, row)| {
                let (c, s) = (&cos[p * half..][..half], &sin[p * half..][..half]);
                for (h, dst) in row.chunks_mut(head_dim).enumerate() {
                    let (g1, g2) = g[(h * len + p) * head_dim..][..head_dim].split_at(half);
                    let (da, db) = dst.split_at_mut(half);
                    for i in 0..half {
                        da[i] = g1[i] * c[i] + g2[i] * s[i];
                        db[i] = g2[i] * c[i] - g1[i] * s[i];
                    }
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((len, self.width))))
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

    /// The gradient of `sum(f(..) · w)` with respect to `var`.
    fn grad_of(y: &Tensor, w: &Tensor, var: &Var) -> Result<Tensor> {
        let grads = (y * w)?.sum_all()?.backward()?;
        grads
            .get(var.as_tensor())
            .cloned()
            .ok_or_else(|| candle_core::Error::Msg("no gradient".into()))
    }

    #[test]
    fn rms_norm_matches_the_elementary_chain() -> Result<()> {
        let dev = Device::Cpu;
        let (rows, cols, eps) = (6, 896, 1e-6);
        let x = Var::from_tensor(&Tensor::randn(0f32, 2.0, (rows, cols), &dev)?)?;
        let weight = Var::from_tensor(&Tensor::randn(1f32, 0.3, cols, &dev)?)?;
        let w = Tensor::randn(0f32, 1.0, (rows, cols), &dev)?;
        let elementary = {
            let xt = x.as_tensor();
            let scale = (xt.sqr()?.mean_keepdim(D::Minus1)? + eps)?
                .sqrt()?
                .recip()?;
            xt.broadcast_mul(&scale)?
                .broadcast_mul(weight.as_tensor())?
        };
        let fused = rms_norm(x.as_tensor(), weight.as_tensor(), eps)?;
        assert!(max_diff(&fused, &elementary) < 1e-5);
        for var in [&x, &weight] {
            let d = max_diff(&grad_of(&fused, &w, var)?, &grad_of(&elementary, &w, var)?);
            assert!(d < 1e-4, "a gradient differs by {d}");
        }
        // A frozen weight gets no gradient and costs none; the input's is the same.
        let frozen = weight.as_tensor().detach();
        let y = rms_norm(x.as_tensor(), &frozen, eps)?;
        let grads = (&y * &w)?.sum_all()?.backward()?;
        assert!(grads.get(&frozen).is_none());
        assert!(rms_norm(x.as_tensor(), &frozen, f64::NAN).is_err());
        let narrow = Tensor::ones(cols - 1, candle_core::DType::F32, &dev)?;
        assert!(rms_norm(x.as_tensor(), &narrow, eps).is_err());
        Ok(())
    }

    #[test]
    fn rope_heads_matches_a_split_then_the_elementary_rotation() -> Result<()> {
        let dev = Device::Cpu;
        let (len, heads, head_dim) = (9, 3, 8);
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (len, heads * head_dim), &dev)?)?;
        let positions: Vec<u32> = (0..len as u32).collect();
        let (cos, sin) = ops::rope_tables(&positions, head_dim, 10_000.0, &dev)?;
        let w = Tensor::randn(0f32, 1.0, (heads, len, head_dim), &dev)?;
        let elementary = ops::rope(&ops::split_heads(x.as_tensor(), heads)?, &cos, &sin)?;
        let fused = rope_heads(x.as_tensor(), heads, &cos, &sin)?;
        assert_eq!(fused.dims(), [heads, len, head_dim]);
        assert!(max_diff(&fused, &elementary) < 1e-6);
        let d = max_diff(&grad_of(&fused, &w, &x)?, &grad_of(&elementary, &w, &x)?);
        assert!(d < 1e-5, "the gradient differs by {d}");
        // Position 0 is not rotated.
        let first = ops::split_heads(x.as_tensor(), heads)?.narrow(1, 0, 1)?;
        assert!(max_diff(&fused.narrow(1, 0, 1)?, &first) < 1e-6);
        assert!(rope_heads(x.as_tensor(), 5, &cos, &sin).is_err());
        assert!(rope_heads(&x.as_tensor().narrow(0, 0, 4)?, heads, &cos, &sin).is_err());
        Ok(())
    }

    #[test]
    fn grouped_attention_matches_repeated_keys_and_values() -> Result<()> {
        let dev = Device::Cpu;
        let (heads, kv_heads, len, dim, scale) = (6, 2, 7, 8, 0.35);
        let q = Var::from_tensor(&Tensor::randn(0f32, 1.5, (heads, len, dim), &dev)?)?;
        let k = Var::from_tensor(&Tensor::randn(0f32, 1.5, (kv_heads, len, dim), &dev)?)?;
        let v = Var::from_tensor(&Tensor::randn(0f32, 1.5, (kv_heads, len, dim), &dev)?)?;
        let w = Tensor::randn(0f32, 1.0, (heads, len, dim), &dev)?;
        let repeat = |t: &Tensor| {
            t.unsqueeze(1)?
                .broadcast_as((kv_heads, heads / kv_heads, len, dim))?
                .reshape((heads, len, dim))
        };
        let (kr, vr) = (repeat(k.as_tensor())?, repeat(v.as_tensor())?);
        let mask = ops::causal_mask(len, len, &dev)?;
        let scores = (q.as_tensor().matmul(&kr.t()?)? * f64::from(scale))?.broadcast_add(&mask)?;
        let elementary = ops::softmax_last(&scores)?.matmul(&vr)?;
        let fused =
            crate::fused::causal_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), scale)?;
        assert!(max_diff(&fused, &elementary) < 1e-5);
        // One backward pass each: the fused node hands its kept weights to the first.
        let got = (&fused * &w)?.sum_all()?.backward()?;
        let want = (&elementary * &w)?.sum_all()?.backward()?;
        for (name, var) in [("q", &q), ("k", &k), ("v", &v)] {
            let (Some(a), Some(b)) = (got.get(var.as_tensor()), want.get(var.as_tensor())) else {
                panic!("no gradient for {name}")
            };
            let d = max_diff(a, b);
            assert!(d < 1e-4, "the gradient of {name} differs by {d}");
        }
        let odd = Tensor::zeros((4, len, dim), candle_core::DType::F32, &dev)?;
        assert!(crate::fused::causal_attention(q.as_tensor(), &odd, &odd, scale).is_err());
        Ok(())
    }
}

//! The quantised linear layer: `y = x Wᵀ` with `W` kept in its GGUF quantisation.
//!
//! candle's own `QMatMul::forward` records no backward pass, so a loss behind it gets no
//! gradient and says nothing. This op computes the forward product and gives the input its
//! gradient, `grad x dequant(W)`, backward; `W` itself is frozen (LoRA trains beside it).
//!
//! How the forward product is computed depends on where it runs. On a GPU it is candle's
//! quantised kernel. On the CPU it is a dense product with `dequant(W)`, the very values the
//! quantised kernel multiplies by, whenever that dense copy is kept (the backward pass needs it
//! anyway) or candle has no fast CPU kernel for the type (Q5_0, Q8_0, ... measured 20 to 40 times
//! slower than a dense product on this project's machines). Only a Q4_K or Q6_K weight whose copy
//! is not kept (a model too large for the copies) runs candle's quantised CPU kernel. At
//! training's row counts that kernel costs what the dense product does, but it rounds the
//! activations to 8 bits first, so the backward pass (always through `dequant(W)`) is then the
//! gradient of a slightly different function (docs/BENCHMARKS.md, "Training").

use crate::fused::cpu_matmul;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, CustomOp1, CustomOp3, D, Layout, Shape, Storage, Tensor};
use rayon::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};

/// A frozen linear layer over a quantised weight of shape `(out, in)`.
#[derive(Clone)]
pub struct QLinear {
    op: Arc<QLinearOp>,
    /// The same op, as candle's graph holds it.
    graph_op: Arc<Box<dyn CustomOp1 + Send + Sync>>,
}

/// The op as a graph node: a handle on the shared weight and its dense cache.
struct GraphOp(Arc<QLinearOp>);

struct QLinearOp {
    /// `(out, in)`.
    dims: (usize, usize),
    dtype: GgmlDType,
    /// The quantised weight, until a dense copy kept on the CPU stands for it in every use:
    /// then it is let go, so a small model's layers are not held twice.
    weight: Mutex<Option<Arc<QTensor>>>,
    /// Whether the CPU forward pass multiplies by the dequantised weight.
    dense_on_cpu: bool,
    /// The dequantised weight, kept after its first use when asked to (the vocabulary
    /// projection, and small models' layers); otherwise it is made again per use, so the
    /// model stays as small as its file.
    keep_dense: bool,
    dense: OnceLock<Tensor>,
}

/// Whether candle's CPU kernel for `dtype` is fast (a repacked, runtime-dispatched path).
fn fast_cpu_kernel(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::Q4K | GgmlDType::Q6K)
}

impl QLinear {
    /// A layer over `weight`; `keep_dense` keeps the dequantised copy once made.
    pub fn new(weight: Arc<QTensor>, keep_dense: bool) -> QLinear {
        let dims = weight.shape().dims();
        let op = Arc::new(QLinearOp {
            dims: (
                dims.first().copied().unwrap_or(0),
                dims.last().copied().unwrap_or(0),
            ),
            dtype: weight.dtype(),
            dense_on_cpu: keep_dense || !fast_cpu_kernel(weight.dtype()),
            weight: Mutex::new(Some(weight)),
            keep_dense,
            dense: OnceLock::new(),
        });
        QLinear {
            graph_op: Arc::new(Box::new(GraphOp(op.clone()))),
            op,
        }
    }

    /// `(out, in)`.
    pub fn dims(&self) -> (usize, usize) {
        self.op.dims
    }

    /// The rows `ids` of the dequantised weight (an embedding table's lookup), from the kept
    /// dense copy.
    pub fn dense_rows(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        self.op.dense_weight(ids.device())?.index_select(ids, 0)
    }

    /// `x Wᵀ` for `x` of shape `(.., in)`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = x.contiguous()?;
        if is_dense(self.op.dtype) {
            // F32/F16 weights: a plain matmul, whose backward candle knows.
            let w = self.op.dense_weight(x.device())?;
            return x.broadcast_matmul(&w.t()?);
        }
        x.apply_op1_arc(self.graph_op.clone())
    }
}

impl QLinear {
    /// `x Wᵀ + scale · (x Aᵀ) Bᵀ` for LoRA factors `A (r, in)`, `B (out, r)` beside the frozen
    /// weight, as one graph node on the CPU for `x (rows, in)` in f32.
    ///
    /// Built from separate ops, the sum and the scaling are two output-sized tensors forward,
    /// and candle's backward allocates about six more (a zero tensor and a sum for each
    /// operand's gradient); for the feed-forward layers those are the largest tensors of a
    /// block. Here the LoRA path is added into the product in place, and the backward pass
    /// allocates only the three gradients it returns.
    ///
    /// `known`, when given, is this node's value for the same `x` and factors, computed earlier
    /// in the same step (the forward pass before a checkpointed block is recomputed): the node
    /// then copies it instead of multiplying, and differentiates as usual.
    pub fn forward_adapted(
        &self,
        x: &Tensor,
        a: &Tensor,
        b: &Tensor,
        scale: f32,
        known: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let op = AdaptedOp {
            base: self.op.clone(),
            scale,
            known: known.cloned(),
        };
        x.contiguous()?
            .apply_op3(&a.contiguous()?, &b.contiguous()?, op)
    }

    /// `x Wᵀ` whose value is already known for this `x` (see [`QLinear::forward_adapted`]): a
    /// copy of `known` that differentiates like [`QLinear::forward`]. CPU f32 only.
    pub fn forward_known(&self, x: &Tensor, known: &Tensor) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op1(KnownProduct {
            base: self.op.clone(),
            known: known.clone(),
        })
    }
}

/// The frozen product and its LoRA path as one op: arguments `x`, `A`, `B`.
struct AdaptedOp {
    base: Arc<QLinearOp>,
    scale: f32,
    /// The op's value, when the forward pass already computed it.
    known: Option<Tensor>,
}

/// The frozen product with its value given: argument `x`.
struct KnownProduct {
    base: Arc<QLinearOp>,
    known: Tensor,
}

/// A CPU copy of `known`, refused unless it has the shape the node would have computed.
fn copy_known(known: &Tensor, shape: Shape) -> candle_core::Result<(CpuStorage, Shape)> {
    if known.dims() != shape.dims() || !known.device().is_cpu() {
        candle_core::bail!(
            "a kept product of shape {:?} stands for one of {:?} (internal error)",
            known.dims(),
            shape.dims()
        )
    }
    let values = known.flatten_all()?.to_vec1::<f32>()?;
    Ok((CpuStorage::F32(values), shape))
}

/// `lhs · rhsᵀ` on the CPU for `lhs (m, k)` given as storage and `rhs (n, k)` as a tensor.
fn cpu_matmul_t(
    lhs: &CpuStorage,
    lhs_layout: &Layout,
    rhs: &Tensor,
) -> candle_core::Result<CpuStorage> {
    let rhs_t = rhs.t()?;
    let (storage, rhs_layout) = rhs_t.storage_and_layout();
    let Storage::Cpu(rhs_storage) = &*storage else {
        candle_core::bail!("a CPU product was given a weight on another device")
    };
    cpu_matmul(lhs, lhs_layout, rhs_storage, rhs_layout)
}

impl CustomOp3 for AdaptedOp {
    fn name(&self) -> &'static str {
        "catena-adapted-linear"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        a: &CpuStorage,
        a_layout: &Layout,
        b: &CpuStorage,
        b_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, _) = x_layout.shape().dims2()?;
        let (out_dim, _) = b_layout.shape().dims2()?;
        if let Some(known) = &self.known {
            return copy_known(known, Shape::from((rows, out_dim)));
        }
        let base = if self.base.dense_on_cpu || is_dense(self.base.dtype) {
            let w = self.base.dense_weight(&candle_core::Device::Cpu)?;
            cpu_matmul_t(x, x_layout, &w)?
        } else {
            self.base.quantised()?.cpu_fwd(x, x_layout)?.0
        };
        let xa = cpu_matmul(x, x_layout, a, &a_layout.transpose(0, 1)?)?;
        let (rank, _) = a_layout.shape().dims2()?;
        let delta = cpu_matmul(
            &xa,
            &Layout::contiguous((rows, rank)),
            b,
            &b_layout.transpose(0, 1)?,
        )?;
        let (CpuStorage::F32(mut y), CpuStorage::F32(delta)) = (base, delta) else {
            candle_core::bail!("the adapted product needs f32 values")
        };
        if y.len() != rows * out_dim || delta.len() != y.len() {
            candle_core::bail!("the adapted product's parts differ in size")
        }
        y.par_chunks_mut(1 << 14)
            .zip(delta.par_chunks(1 << 14))
            .for_each(|(y, d)| y.iter_mut().zip(d).for_each(|(y, d)| *y += self.scale * d));
        Ok((CpuStorage::F32(y), Shape::from((rows, out_dim))))
    }

    /// With `g` the output's gradient: `dx = g W + s (g B) A`, `dA = s (g B)ᵀ x`,
    /// `dB = s gᵀ (x Aᵀ)`.
    fn bwd(
        &self,
        x: &Tensor,
        a: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (x, a, b) = (x.detach(), a.detach(), b.detach());
        let scale = f64::from(self.scale);
        // The scale goes on the rank-sized factors, never on a row-sized tensor.
        let gb = (grad.matmul(&b)? * scale)?;
        let dx = (grad.matmul(&self.base.dense_weight(x.device())?)? + gb.matmul(&a)?)?;
        let da = gb.t()?.matmul(&x)?;
        let db = grad.t()?.matmul(&(x.matmul(&a.t()?)? * scale)?)?;
        Ok((Some(dx), Some(da), Some(db)))
    }
}

fn is_dense(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
}

impl QLinearOp {
    /// The quantised weight, while it is kept.
    fn quantised(&self) -> candle_core::Result<Arc<QTensor>> {
        match &*self.weight.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(w) => Ok(w.clone()),
            None => candle_core::bail!(
                "a quantised weight was asked for after its dense copy replaced it (internal error)"
            ),
        }
    }

    /// `d(x Wᵀ)/dx = grad W`, for `x` of any rank.
    fn input_gradient(&self, x: &Tensor, grad: &Tensor) -> candle_core::Result<Tensor> {
        let w = self.dense_weight(x.device())?;
        let out = grad.dim(D::Minus1)?;
        let rows = grad.elem_count() / out.max(1);
        grad.reshape((rows, out))?.matmul(&w)?.reshape(x.shape())
    }

    fn dense_weight(&self, device: &candle_core::Device) -> candle_core::Result<Tensor> {
        if let Some(w) = self.dense.get() {
            return Ok(w.clone());
        }
        // Held while dequantising, so no other use finds the weight gone and the copy unmade.
        let mut weight = self.weight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = self.dense.get() {
            return Ok(w.clone());
        }
        let Some(quantised) = weight.as_ref() else {
            candle_core::bail!("a layer lost both its weight and its dense copy (internal error)")
        };
        let w = quantised.dequantize(device)?;
        if self.keep_dense || is_dense(self.dtype) {
            let _ = self.dense.set(w.clone());
            if device.is_cpu() && self.dense_on_cpu {
                *weight = None;
            }
        }
        Ok(w)
    }
}

impl CustomOp1 for GraphOp {
    fn name(&self) -> &'static str {
        "catena-qlinear"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        if !self.0.dense_on_cpu {
            return self.0.quantised()?.cpu_fwd(storage, layout);
        }
        // `x (.., in)` as the rows of one `(rows, in)` product, read in place.
        let dims = layout.dims();
        let in_dim = dims.last().copied().unwrap_or(0);
        if in_dim == 0 {
            candle_core::bail!("a linear layer's input has an empty last dimension")
        }
        if !layout.is_contiguous() {
            candle_core::bail!("a linear layer's input must be contiguous")
        }
        let rows = Layout::contiguous_with_offset(
            (layout.shape().elem_count() / in_dim, in_dim),
            layout.start_offset(),
        );
        let w = self.0.dense_weight(&candle_core::Device::Cpu)?;
        let y = cpu_matmul_t(storage, &rows, &w)?;
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = w.dim(0)?;
        }
        Ok((y, Shape::from(out_dims)))
    }

    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        self.0.quantised()?.cuda_fwd(storage, layout)
    }

    fn metal_fwd(
        &self,
        storage: &candle_core::MetalStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::MetalStorage, Shape)> {
        self.0.quantised()?.metal_fwd(storage, layout)
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        self.0.input_gradient(arg, grad).map(Some)
    }
}

impl CustomOp1 for KnownProduct {
    fn name(&self) -> &'static str {
        "catena-qlinear-known"
    }

    fn cpu_fwd(
        &self,
        _storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let mut dims = layout.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = self.base.dims.0;
        }
        copy_known(&self.known, Shape::from(dims))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        self.base.input_gradient(arg, grad).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Var};

    /// The op against a dense matmul on the dequantised weight: forward within quantisation
    /// noise, backward exactly the dense gradient.
    #[test]
    fn matches_a_dense_matmul_forward_and_backward() -> candle_core::Result<()> {
        // Q4_K runs candle's kernel on the CPU unless its dense copy is kept, Q5_0 and Q8_0 the
        // dense product, kept or not.
        for (dtype, keep) in [
            (GgmlDType::Q4K, false),
            (GgmlDType::Q4K, true),
            (GgmlDType::Q5_0, false),
            (GgmlDType::Q8_0, true),
        ] {
            check_against_dense(dtype, keep)?;
        }
        Ok(())
    }

    /// The adapted op against the frozen op plus the LoRA path built from separate ops: the
    /// same output, and the same gradients for the input and both factors.
    #[test]
    fn the_adapted_op_matches_the_product_plus_lora_forward_and_backward() -> candle_core::Result<()>
    {
        let dev = Device::Cpu;
        for (dtype, keep) in [
            (GgmlDType::Q4K, true),
            (GgmlDType::Q4K, false),
            (GgmlDType::Q5_0, true),
        ] {
            let w = Tensor::randn(0f32, 0.05, (96, 512), &dev)?;
            let lin = QLinear::new(Arc::new(QTensor::quantize(&w, dtype)?), keep);
            let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (9, 512), &dev)?)?;
            let a = Var::from_tensor(&Tensor::randn(0f32, 0.1, (4, 512), &dev)?)?;
            let b = Var::from_tensor(&Tensor::randn(0f32, 0.1, (96, 4), &dev)?)?;
            let upstream = Tensor::randn(0f32, 1.0, (9, 96), &dev)?;
            let scale = 2.5f32;
            let (xt, at, bt) = (x.as_tensor(), a.as_tensor(), b.as_tensor());

            let fused = lin.forward_adapted(xt, at, bt, scale, None)?;
            let got = (&fused * &upstream)?.sum_all()?.backward()?;
            let delta = xt.matmul(&at.t()?)?.matmul(&bt.t()?)?;
            let separate = (lin.forward(xt)? + (delta * f64::from(scale))?)?;
            let want = (&separate * &upstream)?.sum_all()?.backward()?;

            let diff = |p: &Tensor, q: &Tensor| -> candle_core::Result<f32> {
                (p - q)?.abs()?.max_all()?.to_scalar::<f32>()
            };
            assert!(diff(&fused, &separate)? < 1e-5, "{dtype:?}: outputs differ");
            for (name, v) in [("x", &x), ("A", &a), ("B", &b)] {
                let (Some(g), Some(w)) = (got.get(v.as_tensor()), want.get(v.as_tensor())) else {
                    panic!("{dtype:?}: no gradient for {name}")
                };
                let d = diff(g, w)?;
                assert!(d < 1e-4, "{dtype:?}: the gradient of {name} differs by {d}");
            }
        }
        Ok(())
    }

    fn check_against_dense(dtype: GgmlDType, keep: bool) -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 0.05, (64, 512), &dev)?;
        let q = Arc::new(QTensor::quantize(&w, dtype)?);
        let lin = QLinear::new(q.clone(), keep);
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (7, 512), &dev)?)?;
        let upstream = Tensor::randn(0f32, 1.0, (7, 64), &dev)?;

        let y = lin.forward(x.as_tensor())?;
        let grads = (&y * &upstream)?.sum_all()?.backward()?;
        let got = grads.get(x.as_tensor()).expect("x has a gradient");

        let deq = q.dequantize(&dev)?;
        let dense = x.as_tensor().matmul(&deq.t()?)?;
        let rel = ((&y - &dense)?.sqr()?.sum_all()?.sqrt()? / dense.sqr()?.sum_all()?.sqrt()?)?
            .to_scalar::<f32>()?;
        assert!(
            rel < 0.02,
            "forward differs from the dense product by {rel}"
        );
        let want = upstream.matmul(&deq)?;
        let diff = (got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-4, "{dtype:?}: backward differs by {diff}");
        assert_eq!(got.dtype(), DType::F32);
        Ok(())
    }
}

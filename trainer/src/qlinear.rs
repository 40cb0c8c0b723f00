//! The quantised linear layer: `y = x Wᵀ` with `W` kept in its GGUF quantisation.
//!
//! candle's own `QMatMul::forward` records no backward pass, so a loss behind it gets no
//! gradient and says nothing. This op computes the forward product and gives the input its
//! gradient, `grad x dequant(W)`, backward; `W` itself is frozen (LoRA trains beside it).
//!
//! How the forward product is computed depends on where it runs. On a GPU, and on the CPU for
//! the types candle has fast CPU kernels for (Q4_K, Q6_K), it is candle's quantised kernel.
//! For other types (Q5_0, Q8_0, ... measured 20 to 40 times slower than a dense product on this
//! project's machines) it is a dense product with `dequant(W)`, the very values the quantised
//! kernel multiplies by; that dense copy is kept when the caller can afford the memory.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, CustomOp1, D, Layout, Shape, Tensor};
use std::sync::{Arc, OnceLock};

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
    weight: Arc<QTensor>,
    /// Whether the CPU forward pass multiplies by the dequantised weight.
    dense_on_cpu: bool,
    /// The dequantised weight, kept after its first use when asked to (the vocabulary
    /// projection, and small models' layers); otherwise it is made again per use, so the
    /// model stays as small as its file.
    keep_dense: bool,
    dense: OnceLock<Tensor>,
}

/// Whether candle's CPU kernel for `dtype` is fast (a repacked, runtime-dispatched path).
pub fn fast_cpu_kernel(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::Q4K | GgmlDType::Q6K)
}

impl QLinear {
    /// A layer over `weight`; `keep_dense` keeps the dequantised copy once made.
    pub fn new(weight: Arc<QTensor>, keep_dense: bool) -> QLinear {
        let op = Arc::new(QLinearOp {
            dense_on_cpu: !fast_cpu_kernel(weight.dtype()),
            weight,
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
        let dims = self.op.weight.shape().dims();
        (
            dims.first().copied().unwrap_or(0),
            dims.last().copied().unwrap_or(0),
        )
    }

    /// `x Wᵀ` for `x` of shape `(.., in)`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = x.contiguous()?;
        if is_dense(self.op.weight.dtype()) {
            // F32/F16 weights: a plain matmul, whose backward candle knows.
            let w = self.op.dense_weight(x.device())?;
            return x.broadcast_matmul(&w.t()?);
        }
        x.apply_op1_arc(self.graph_op.clone())
    }
}

fn is_dense(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
}

impl QLinearOp {
    fn dense_weight(&self, device: &candle_core::Device) -> candle_core::Result<Tensor> {
        if let Some(w) = self.dense.get() {
            return Ok(w.clone());
        }
        let w = self.weight.dequantize(device)?;
        if self.keep_dense || is_dense(self.weight.dtype()) {
            let _ = self.dense.set(w.clone());
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
            return self.0.weight.cpu_fwd(storage, layout);
        }
        let shape = layout.shape();
        let start = layout.start_offset();
        let x = storage.as_slice::<f32>()?;
        let x = Tensor::from_slice(
            &x[start..start + shape.elem_count()],
            shape,
            &candle_core::Device::Cpu,
        )?;
        let w = self.0.dense_weight(&candle_core::Device::Cpu)?;
        let y = x.broadcast_matmul(&w.t()?)?;
        let out_shape = y.shape().clone();
        Ok((
            CpuStorage::F32(y.flatten_all()?.to_vec1::<f32>()?),
            out_shape,
        ))
    }

    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        self.0.weight.cuda_fwd(storage, layout)
    }

    fn metal_fwd(
        &self,
        storage: &candle_core::MetalStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::MetalStorage, Shape)> {
        self.0.weight.metal_fwd(storage, layout)
    }

    /// `d(x Wᵀ)/dx = grad W`.
    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let w = self.0.dense_weight(arg.device())?;
        let out = grad.dim(D::Minus1)?;
        let rows = grad.elem_count() / out.max(1);
        let flat = grad.reshape((rows, out))?.matmul(&w)?;
        Ok(Some(flat.reshape(arg.shape())?))
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
        // Q4_K runs candle's kernel on the CPU, Q5_0 and Q8_0 the dense product; kept or not.
        for (dtype, keep) in [
            (GgmlDType::Q4K, false),
            (GgmlDType::Q5_0, false),
            (GgmlDType::Q8_0, true),
        ] {
            check_against_dense(dtype, keep)?;
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

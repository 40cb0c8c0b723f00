//! AdamW with a warm-up + cosine learning rate and global gradient-norm clipping.
//!
//! Written here rather than taken from candle-nn because a resumed run must continue with the
//! very same moments: this optimizer's state is plain named tensors that a checkpoint saves and
//! restores, and its step count is explicit.

use candle_core::{Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            lr: 2e-4,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// Linear warm-up to the peak rate, then a cosine down to `min_ratio` of it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub peak: f64,
    pub warmup_steps: usize,
    pub total_steps: usize,
    pub min_ratio: f64,
}

impl Schedule {
    /// The rate for optimizer step `step` (0-based).
    pub fn lr(&self, step: usize) -> f64 {
        if self.warmup_steps > 0 && step < self.warmup_steps {
            return self.peak * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps).max(1);
        let progress = ((step - self.warmup_steps.min(step)) as f64 / decay_steps as f64).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.peak * (self.min_ratio + (1.0 - self.min_ratio) * cosine)
    }
}

/// AdamW's moments, by parameter name.
pub struct AdamW {
    pub config: AdamWConfig,
    /// Optimizer steps taken.
    pub steps: usize,
    first: HashMap<String, Tensor>,
    second: HashMap<String, Tensor>,
}

impl AdamW {
    pub fn new(config: AdamWConfig) -> AdamW {
        AdamW {
            config,
            steps: 0,
            first: HashMap::new(),
            second: HashMap::new(),
        }
    }

    /// One update of every parameter in `params` with its gradient from `grads` at rate `lr`.
    pub fn step(
        &mut self,
        params: &[(String, &Var)],
        grads: &HashMap<String, Tensor>,
        lr: f64,
    ) -> candle_core::Result<()> {
        self.steps += 1;
        let c = self.config;
        let t = self.steps as i32;
        let correction1 = 1.0 - c.beta1.powi(t);
        let correction2 = 1.0 - c.beta2.powi(t);
        for (name, var) in params {
            let Some(g) = grads.get(name) else { continue };
            let m = match self.first.get(name) {
                Some(m) => ((m * c.beta1)? + (g * (1.0 - c.beta1))?)?,
                None => (g * (1.0 - c.beta1))?,
            };
            let v = match self.second.get(name) {
                Some(v) => ((v * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?,
                None => (g.sqr()? * (1.0 - c.beta2))?,
            };
            let m_hat = (&m / correction1)?;
            let v_hat = (&v / correction2)?;
            let update = (m_hat / (v_hat.sqrt()? + c.eps)?)?;
            let p = var.as_tensor();
            let decayed = (p * (1.0 - lr * c.weight_decay))?;
            var.set(&(decayed - (update * lr)?)?)?;
            self.first.insert(name.clone(), m);
            self.second.insert(name.clone(), v);
        }
        Ok(())
    }

    /// The moments as named tensors, for a checkpoint.
    pub(crate) fn state(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::with_capacity(self.first.len() * 2);
        for (name, m) in &self.first {
            out.push((format!("adam.m.{name}"), m.clone()));
        }
        for (name, v) in &self.second {
            out.push((format!("adam.v.{name}"), v.clone()));
        }
        out
    }

    /// Restores moments saved by [`AdamW::state`].
    pub(crate) fn restore(&mut self, steps: usize, tensors: &HashMap<String, Tensor>) {
        self.steps = steps;
        self.first.clear();
        self.second.clear();
        for (key, t) in tensors {
            if let Some(name) = key.strip_prefix("adam.m.") {
                self.first.insert(name.to_string(), t.clone());
            } else if let Some(name) = key.strip_prefix("adam.v.") {
                self.second.insert(name.to_string(), t.clone());
            }
        }
    }
}

/// Adds one sequence's gradients to the sum of a step's (SFT's samples, RL's rollouts of a
/// mini-batch), keyed by factor name.
pub(crate) fn accumulate(
    sum: &mut HashMap<String, Tensor>,
    grads: HashMap<String, Tensor>,
) -> candle_core::Result<()> {
    for (name, g) in grads {
        let total = match sum.remove(&name) {
            Some(acc) => (acc + g)?,
            None => g,
        };
        sum.insert(name, total);
    }
    Ok(())
}

/// The global L2 norm of `grads`; when it exceeds `max_norm`, every gradient is scaled down to
/// reach it. Returns the norm before clipping.
pub fn clip_grad_norm(
    grads: &mut HashMap<String, Tensor>,
    max_norm: f64,
) -> candle_core::Result<f64> {
    let mut total = 0.0f64;
    for g in grads.values() {
        total += f64::from(g.sqr()?.sum_all()?.to_scalar::<f32>()?);
    }
    let norm = total.sqrt();
    if max_norm > 0.0 && norm > max_norm {
        let scale = max_norm / (norm + 1e-6);
        for g in grads.values_mut() {
            *g = (&*g * scale)?;
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_schedule_warms_up_then_decays_to_the_floor() {
        let s = Schedule {
            peak: 1.0,
            warmup_steps: 4,
            total_steps: 14,
            min_ratio: 0.1,
        };
        assert_eq!(s.lr(0), 0.25);
        assert_eq!(s.lr(3), 1.0);
        assert!((s.lr(4) - 1.0).abs() < 1e-12);
        assert!((s.lr(9) - 0.55).abs() < 1e-9);
        assert!((s.lr(14) - 0.1).abs() < 1e-12);
        assert!((s.lr(100) - 0.1).abs() < 1e-12);
    }

    /// One AdamW step by hand: the first step moves every weight by `lr` against its gradient's
    /// sign (m̂/√v̂ = ±1), after decoupled weight decay.
    #[test]
    fn adamw_matches_a_hand_computed_step() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let p = Var::from_tensor(&Tensor::new(&[1.0f32, -2.0, 0.5], &dev)?)?;
        let g = Tensor::new(&[0.3f32, -0.1, 0.0], &dev)?;
        let mut opt = AdamW::new(AdamWConfig {
            weight_decay: 0.1,
            ..AdamWConfig::default()
        });
        let grads = HashMap::from([("p".to_string(), g)]);
        opt.step(&[("p".to_string(), &p)], &grads, 0.01)?;
        let got = p.as_tensor().to_vec1::<f32>()?;
        let want = [1.0 * (1.0 - 0.001) - 0.01, -2.0 * (1.0 - 0.001) + 0.01];
        assert!((got[0] - want[0] as f32).abs() < 1e-6, "{got:?}");
        assert!((got[1] - want[1] as f32).abs() < 1e-6, "{got:?}");
        // A zero gradient: only the decay moves it.
        assert!((got[2] - 0.5 * 0.999).abs() < 1e-6, "{got:?}");
        assert_eq!(opt.steps, 1);
        assert_eq!(opt.state().len(), 2);
        Ok(())
    }

    #[test]
    fn clipping_scales_to_the_limit_and_reports_the_norm() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let mut grads = HashMap::from([
            ("a".to_string(), Tensor::new(&[3.0f32], &dev)?),
            ("b".to_string(), Tensor::new(&[4.0f32], &dev)?),
        ]);
        let norm = clip_grad_norm(&mut grads, 1.0)?;
        assert!((norm - 5.0).abs() < 1e-9);
        let a = grads["a"].to_vec1::<f32>()?[0];
        assert!((a - 0.6).abs() < 1e-5, "{a}");
        Ok(())
    }
}

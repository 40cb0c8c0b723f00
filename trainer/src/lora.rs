//! LoRA factors: which layers get them, their rank and scale, and their initial values.
//!
//! A factor pair adapts a frozen linear layer `W (out, in)`:
//! `y = x Wᵀ + s · (drop(x) Aᵀ) Bᵀ` with `A (r, in)`, `B (out, r)`, and `s = alpha / r`
//! (or `alpha / sqrt(r)` with rsLoRA). That is PEFT's orientation and llama.cpp's, so the same
//! numbers export to both without transposing.

use crate::{Result, TrainError};
use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A linear layer of a transformer block that can carry LoRA factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Target {
    pub const ALL: [Target; 7] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
    ];

    /// The tensor's name in a GGUF block (`blk.N.<name>.weight`).
    pub(crate) fn gguf(self) -> &'static str {
        match self {
            Target::Q => "attn_q",
            Target::K => "attn_k",
            Target::V => "attn_v",
            Target::O => "attn_output",
            Target::Gate => "ffn_gate",
            Target::Up => "ffn_up",
            Target::Down => "ffn_down",
        }
    }

    /// The module's name in a Hugging Face Qwen2 model (`model.layers.N.<name>`).
    pub(crate) fn peft(self) -> &'static str {
        match self {
            Target::Q => "self_attn.q_proj",
            Target::K => "self_attn.k_proj",
            Target::V => "self_attn.v_proj",
            Target::O => "self_attn.o_proj",
            Target::Gate => "mlp.gate_proj",
            Target::Up => "mlp.up_proj",
            Target::Down => "mlp.down_proj",
        }
    }

    /// The short names the CLI takes: `q,k,v,o,gate,up,down` (and PEFT's `q_proj`...).
    pub fn parse(name: &str) -> Option<Target> {
        let name = name.trim().trim_end_matches("_proj");
        Some(match name {
            "q" => Target::Q,
            "k" => Target::K,
            "v" => Target::V,
            "o" => Target::O,
            "gate" => Target::Gate,
            "up" => Target::Up,
            "down" => Target::Down,
            _ => return None,
        })
    }

    /// The name `parse` reads (the round trip is checked in the tests).
    #[cfg(test)]
    fn short(self) -> &'static str {
        match self {
            Target::Q => "q",
            Target::K => "k",
            Target::V => "v",
            Target::O => "o",
            Target::Gate => "gate",
            Target::Up => "up",
            Target::Down => "down",
        }
    }
}

/// The shape of an adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f32,
    /// Dropout on the factors' input while training (0 turns it off).
    pub dropout: f32,
    /// rsLoRA: scale by `alpha / sqrt(rank)` instead of `alpha / rank`.
    pub rslora: bool,
    pub targets: Vec<Target>,
}

impl Default for LoraConfig {
    fn default() -> Self {
        LoraConfig {
            rank: 16,
            alpha: 32.0,
            dropout: 0.0,
            rslora: false,
            targets: Target::ALL.to_vec(),
        }
    }
}

impl LoraConfig {
    pub(crate) fn scale(&self) -> f32 {
        if self.rslora {
            self.alpha / (self.rank as f32).sqrt()
        } else {
            self.alpha / self.rank as f32
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.rank == 0 {
            return Err(TrainError::Config(
                "the LoRA rank must be at least 1".into(),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(TrainError::Config(format!(
                "LoRA dropout must be in [0, 1), not {}",
                self.dropout
            )));
        }
        if self.targets.is_empty() {
            return Err(TrainError::Config("no LoRA target layers".into()));
        }
        if !self.alpha.is_finite() || self.alpha <= 0.0 {
            return Err(TrainError::Config(format!(
                "LoRA alpha must be positive, not {}",
                self.alpha
            )));
        }
        Ok(())
    }
}

/// The trainable factors of one adapted layer.
pub struct LoraPair {
    /// `(r, in)`.
    pub a: Var,
    /// `(out, r)`.
    pub b: Var,
}

/// All factors of a model, by `(block, target)`.
pub struct LoraParams {
    pub config: LoraConfig,
    pairs: BTreeMap<(usize, Target), LoraPair>,
}

impl LoraParams {
    /// Fresh factors as PEFT initialises them: `A` uniform in `±1/sqrt(in)` (Kaiming with
    /// `a = sqrt(5)`), `B` zero, so the adapted model starts as the base model.
    /// `shape_of(block, target)` gives the adapted layer's `(out, in)`.
    pub fn init(
        config: &LoraConfig,
        blocks: usize,
        shape_of: impl Fn(usize, Target) -> (usize, usize),
        seed: u64,
        device: &Device,
    ) -> Result<LoraParams> {
        config.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut pairs = BTreeMap::new();
        for block in 0..blocks {
            for &target in &config.targets {
                let (out, inp) = shape_of(block, target);
                let bound = 1.0 / (inp as f32).sqrt();
                let a: Vec<f32> = (0..config.rank * inp)
                    .map(|_| rng.random_range(-bound..bound))
                    .collect();
                let a = Var::from_tensor(&Tensor::from_vec(a, (config.rank, inp), device)?)?;
                let b = Var::zeros((out, config.rank), DType::F32, device)?;
                pairs.insert((block, target), LoraPair { a, b });
            }
        }
        Ok(LoraParams {
            config: config.clone(),
            pairs,
        })
    }

    pub fn get(&self, block: usize, target: Target) -> Option<&LoraPair> {
        self.pairs.get(&(block, target))
    }

    /// Every factor with its GGUF-style name (`blk.3.attn_q.lora_a`), in a stable order.
    pub fn named(&self) -> Vec<(String, &Var)> {
        let mut out = Vec::with_capacity(self.pairs.len() * 2);
        for ((block, target), pair) in &self.pairs {
            out.push((tensor_name(*block, *target, "lora_a"), &pair.a));
            out.push((tensor_name(*block, *target, "lora_b"), &pair.b));
        }
        out
    }

    pub fn pairs(&self) -> impl Iterator<Item = (&(usize, Target), &LoraPair)> {
        self.pairs.iter()
    }

    /// Number of trainable scalars.
    pub fn parameter_count(&self) -> usize {
        self.pairs
            .values()
            .map(|p| p.a.elem_count() + p.b.elem_count())
            .sum()
    }

    /// Overwrites every factor with the tensors in `values` (a checkpoint), checking names and
    /// shapes so a checkpoint of another configuration is refused, not half-loaded.
    pub fn load(&self, values: &std::collections::HashMap<String, Tensor>) -> Result<(), String> {
        for (name, var) in self.named() {
            let value = values
                .get(&name)
                .ok_or_else(|| format!("it has no tensor {name}"))?;
            if value.dims() != var.dims() {
                return Err(format!(
                    "{name} has shape {:?}, this adapter needs {:?}",
                    value.dims(),
                    var.dims()
                ));
            }
            var.set(&value.to_device(var.device()).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

pub fn tensor_name(block: usize, target: Target, factor: &str) -> String {
    format!("blk.{block}.{}.{factor}", target.gguf())
}

/// A dropout mask for a factor's input, the same every time it is asked for with the same
/// key: the checkpointed backward pass recomputes each block and must see the forward's mask.
pub fn dropout_mask(
    p: f32,
    key: [u64; 4],
    shape: (usize, usize),
    device: &Device,
) -> Result<Tensor> {
    let mut rng = ChaCha8Rng::seed_from_u64(key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, k| {
        (h ^ k).wrapping_mul(0x1000_0000_01b3)
    }));
    let keep = 1.0 / (1.0 - p);
    let mask: Vec<f32> = (0..shape.0 * shape.1)
        .map(|_| if rng.random::<f32>() < p { 0.0 } else { keep })
        .collect();
    Ok(Tensor::from_vec(mask, shape, device)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_from_short_and_peft_names() {
        assert_eq!(Target::parse("q"), Some(Target::Q));
        assert_eq!(Target::parse("down_proj"), Some(Target::Down));
        assert_eq!(Target::parse("lm_head"), None);
        for t in Target::ALL {
            assert_eq!(Target::parse(t.short()), Some(t));
        }
    }

    #[test]
    fn fresh_factors_leave_the_model_unchanged_and_are_seeded() -> Result<()> {
        let config = LoraConfig {
            rank: 4,
            ..LoraConfig::default()
        };
        let dev = Device::Cpu;
        let a = LoraParams::init(&config, 2, |_, _| (8, 16), 7, &dev)?;
        let b = LoraParams::init(&config, 2, |_, _| (8, 16), 7, &dev)?;
        assert_eq!(a.parameter_count(), 2 * 7 * (4 * 16 + 8 * 4));
        for ((_, x), (_, y)) in a.named().iter().zip(b.named()) {
            let d = (x.as_tensor() - y.as_tensor())?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert_eq!(d, 0.0);
        }
        let pair = a.get(1, Target::Down).expect("factor");
        assert_eq!(
            pair.b.as_tensor().abs()?.max_all()?.to_scalar::<f32>()?,
            0.0
        );
        assert!(pair.a.as_tensor().abs()?.max_all()?.to_scalar::<f32>()? <= 0.25);
        Ok(())
    }

    #[test]
    fn scales_follow_lora_and_rslora() {
        let mut c = LoraConfig {
            rank: 16,
            alpha: 32.0,
            ..LoraConfig::default()
        };
        assert_eq!(c.scale(), 2.0);
        c.rslora = true;
        assert_eq!(c.scale(), 8.0);
    }

    #[test]
    fn dropout_masks_repeat_for_the_same_key() -> Result<()> {
        let dev = Device::Cpu;
        let m1 = dropout_mask(0.5, [1, 2, 3, 4], (10, 10), &dev)?;
        let m2 = dropout_mask(0.5, [1, 2, 3, 4], (10, 10), &dev)?;
        let m3 = dropout_mask(0.5, [1, 2, 3, 5], (10, 10), &dev)?;
        let diff = |a: &Tensor, b: &Tensor| {
            (a - b)
                .unwrap()
                .abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        };
        assert_eq!(diff(&m1, &m2), 0.0);
        assert!(diff(&m1, &m3) > 0.0);
        Ok(())
    }
}

//! Sampling settings and the log-probability of a sampled token.

use serde::{Deserialize, Serialize};

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// 0 means greedy (always the most likely token).
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches `top_p`.
    pub top_p: f32,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: i32,
    pub seed: u32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.6,
            top_p: 0.95,
            top_k: 40,
            seed: 0,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..Default::default()
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// The temperature the log-probabilities are taken at: the sampling one, or 1 when greedy.
    pub fn logprob_temperature(&self) -> f32 {
        if self.is_greedy() {
            1.0
        } else {
            self.temperature
        }
    }
}

/// `log softmax(logits / temperature)[token]`, computed stably. Returns `None` for a token
/// outside the vocabulary.
pub fn token_logprob(logits: &[f32], token: usize, temperature: f32) -> Option<f32> {
    let target = *logits.get(token)?;
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| (((l - max) / t) as f64).exp()).sum();
    Some(((target - max) / t) - sum.ln() as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprob_matches_a_hand_computed_softmax() {
        let logits = [1.0f32, 2.0, 3.0];
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        let expected = (3.0f32.exp() / z).ln();
        assert!((token_logprob(&logits, 2, 1.0).unwrap() - expected).abs() < 1e-6);
        // Temperature 0.5 doubles the logits.
        let z2: f32 = logits.iter().map(|l| (2.0 * l).exp()).sum();
        let expected2 = ((2.0f32 * 1.0).exp() / z2).ln();
        assert!((token_logprob(&logits, 0, 0.5).unwrap() - expected2).abs() < 1e-6);
        assert_eq!(token_logprob(&logits, 3, 1.0), None);
    }

    #[test]
    fn logprob_is_stable_for_large_logits() {
        let logits = [1000.0f32, 1000.0];
        let lp = token_logprob(&logits, 0, 1.0).unwrap();
        assert!((lp - 0.5f32.ln()).abs() < 1e-6);
    }
}

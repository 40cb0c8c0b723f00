//! The DAPO objective (PROTOCOL.md §6), as plain arithmetic on log-probabilities.
//!
//! The model module computes `sum_t w_t · log p_t` and its gradient for weights it is given;
//! this module says what the weights are. For a trained token `t` of a rollout with advantage
//! `A`:
//!
//! - ratio `r = p_θ / p_old` (`p_old`: the training model's probability when the batch was
//!   sampled, i.e. before this batch's first update);
//! - truncated importance weight `w = min(p_old / p_rollout, C)`, a constant: it corrects for
//!   the rollout engine (llama.cpp) and the trainer (candle) not computing identical
//!   probabilities, and `C` caps the variance it can add;
//! - loss `ℓ = -w · min(r·A, clip(r, 1 - ε_low, 1 + ε_high)·A)`;
//! - the batch loss is the token mean: `Σ ℓ / N` over all `N` trained tokens of the batch.
//!
//! `dℓ/d log p_θ = -w·A·r` where the unclipped term is the minimum, and 0 where the clipped
//! one is (the gradient stops once the ratio has moved far enough in the advantage's
//! direction).

use serde::{Deserialize, Serialize};

/// The clip range and the importance-weight cap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DapoConfig {
    pub eps_low: f64,
    pub eps_high: f64,
    /// `C` in `min(p_old / p_rollout, C)`.
    pub is_cap: f64,
}

impl Default for DapoConfig {
    fn default() -> Self {
        DapoConfig {
            eps_low: 0.2,
            eps_high: 0.28,
            is_cap: 2.0,
        }
    }
}

/// Group-normalised advantages `(r - mean) / (std + 1e-6)`, with the sample standard deviation
/// (Bessel-corrected, as verl's GRPO estimator computes it). `None` when every reward in the
/// group is equal: such a group carries no signal and is dropped (dynamic sampling).
pub fn group_advantages(rewards: &[f64]) -> Option<Vec<f64>> {
    if rewards.len() < 2 || rewards.iter().any(|r| !r.is_finite()) {
        return None;
    }
    let first = rewards[0];
    if rewards.iter().all(|&r| r == first) {
        return None;
    }
    let n = rewards.len() as f64;
    let mean = rewards.iter().sum::<f64>() / n;
    let var = rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let std = var.sqrt();
    Some(rewards.iter().map(|r| (r - mean) / (std + 1e-6)).collect())
}

/// One trained token's part of the loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenTerm {
    /// `ℓ` before the division by the batch's token count.
    pub loss: f64,
    /// `dℓ / d log p_θ`, before the division by the batch's token count.
    pub grad: f64,
    /// The clipped term was the minimum and the ratio was outside the range: no gradient.
    pub clipped: bool,
    /// The importance weight hit its cap.
    pub capped: bool,
    pub ratio: f64,
    pub weight: f64,
}

/// The loss and gradient of one token from its three log-probabilities.
pub fn token_term(
    logp: f64,
    logp_old: f64,
    logp_rollout: f64,
    advantage: f64,
    config: &DapoConfig,
) -> TokenTerm {
    let ratio = (logp - logp_old).exp();
    let raw_weight = (logp_old - logp_rollout).exp();
    let weight = raw_weight.min(config.is_cap);
    let clipped_ratio = ratio.clamp(1.0 - config.eps_low, 1.0 + config.eps_high);
    let unclipped = ratio * advantage;
    let clipped_term = clipped_ratio * advantage;
    // The minimum picks the clipped term only when it is strictly smaller, i.e. the ratio has
    // left the range on the side the advantage pushes it to.
    let clipped = clipped_term < unclipped;
    let objective = if clipped { clipped_term } else { unclipped };
    TokenTerm {
        loss: -weight * objective,
        grad: if clipped {
            0.0
        } else {
            -weight * advantage * ratio
        },
        clipped,
        capped: raw_weight > config.is_cap,
        ratio,
        weight,
    }
}

/// The token-mean loss of one update, accumulated as the model hands over each sequence's
/// log-probabilities chunk by chunk: every trained token of the batch weighs `1 / N`, however
/// its sequence is long (DAPO's token-level mean, not a mean of per-sequence means).
#[derive(Debug, Clone)]
pub struct BatchObjective {
    config: DapoConfig,
    total_tokens: usize,
    loss_sum: f64,
    seen: usize,
    clipped: usize,
    capped: usize,
}

impl BatchObjective {
    /// `total_tokens`: the trained tokens of every sequence in the update.
    pub fn new(config: DapoConfig, total_tokens: usize) -> BatchObjective {
        BatchObjective {
            config,
            total_tokens: total_tokens.max(1),
            loss_sum: 0.0,
            seen: 0,
            clipped: 0,
            capped: 0,
        }
    }

    /// The weights `dL / d log p_θ` of a run of trained tokens of one sequence (the batch loss
    /// `L` already divided by `N`). `old` and `rollout` are the same tokens' log-probabilities
    /// under the pre-update model and the rollout engine.
    pub fn weights(
        &mut self,
        advantage: f64,
        logp: &[f32],
        old: &[f32],
        rollout: &[f32],
    ) -> Vec<f32> {
        let n = self.total_tokens as f64;
        logp.iter()
            .zip(old)
            .zip(rollout)
            .map(|((&lp, &old), &roll)| {
                let t = token_term(
                    f64::from(lp),
                    f64::from(old),
                    f64::from(roll),
                    advantage,
                    &self.config,
                );
                self.loss_sum += t.loss;
                self.seen += 1;
                self.clipped += usize::from(t.clipped);
                self.capped += usize::from(t.capped);
                (t.grad / n) as f32
            })
            .collect()
    }

    /// The batch loss so far, `Σ ℓ / N`.
    pub fn loss(&self) -> f64 {
        self.loss_sum / self.total_tokens as f64
    }

    /// Share of the tokens seen whose clipped term stopped the gradient.
    pub fn clip_fraction(&self) -> f64 {
        self.clipped as f64 / self.seen.max(1) as f64
    }

    /// Share of the tokens seen whose importance weight hit the cap.
    pub fn capped_fraction(&self) -> f64 {
        self.capped as f64 / self.seen.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPS: f64 = 1e-12;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn advantages_are_normalised_within_the_group() {
        // rewards 1,0,0,1: mean 0.5, sample std sqrt(1/3).
        let a = group_advantages(&[1.0, 0.0, 0.0, 1.0]).unwrap();
        let s = (1.0f64 / 3.0).sqrt() + 1e-6;
        assert!(close(a[0], 0.5 / s) && close(a[1], -0.5 / s));
        assert!(close(a.iter().sum::<f64>(), 0.0));
        // One success in four: the success gets 0.75 / std, each failure -0.25 / std, std = 0.5.
        let b = group_advantages(&[0.0, 1.0, 0.0, 0.0]).unwrap();
        assert!(close(b[1], 0.75 / (0.5 + 1e-6)));
        assert!(close(b[0], -0.25 / (0.5 + 1e-6)));
    }

    #[test]
    fn equal_rewards_and_broken_groups_are_dropped() {
        assert_eq!(group_advantages(&[1.0; 8]), None);
        assert_eq!(group_advantages(&[0.0; 8]), None);
        assert_eq!(group_advantages(&[1.0]), None);
        assert_eq!(group_advantages(&[]), None);
        assert_eq!(group_advantages(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn on_policy_tokens_have_ratio_one_and_the_plain_policy_gradient() {
        let c = DapoConfig::default();
        let t = token_term(-1.3, -1.3, -1.3, 0.8, &c);
        assert!(close(t.ratio, 1.0) && close(t.weight, 1.0));
        assert!(close(t.loss, -0.8) && close(t.grad, -0.8));
        assert!(!t.clipped && !t.capped);
    }

    #[test]
    fn a_positive_advantage_is_clipped_above_one_plus_eps_high_only() {
        let c = DapoConfig::default();
        // r = 1.5 > 1.28, A = 2: the clipped term 1.28·2 is the minimum; no gradient.
        let t = token_term(1.5f64.ln(), 0.0, 0.0, 2.0, &c);
        assert!(t.clipped);
        assert!(close(t.loss, -1.28 * 2.0));
        assert_eq!(t.grad, 0.0);
        // r = 1.25 is inside the (asymmetric) range: with eps 0.2 on both sides it would clip.
        let t = token_term(1.25f64.ln(), 0.0, 0.0, 2.0, &c);
        assert!(!t.clipped);
        assert!(close(t.loss, -2.5) && close(t.grad, -2.5));
        // r = 0.5 < 0.8 with A > 0: the unclipped term is smaller, the gradient flows.
        let t = token_term(0.5f64.ln(), 0.0, 0.0, 2.0, &c);
        assert!(!t.clipped);
        assert!(close(t.loss, -1.0) && close(t.grad, -1.0));
    }

    #[test]
    fn a_negative_advantage_is_clipped_below_one_minus_eps_low_only() {
        let c = DapoConfig::default();
        // r = 0.5 < 0.8, A = -1: min(-0.5, -0.8) = -0.8 is the clipped term; no gradient.
        let t = token_term(0.5f64.ln(), 0.0, 0.0, -1.0, &c);
        assert!(t.clipped);
        assert!(close(t.loss, 0.8));
        assert_eq!(t.grad, 0.0);
        // r = 1.5 with A = -1: min(-1.5, -1.28) = -1.5 unclipped; gradient -w·A·r = 1.5.
        let t = token_term(1.5f64.ln(), 0.0, 0.0, -1.0, &c);
        assert!(!t.clipped);
        assert!(close(t.loss, 1.5) && close(t.grad, 1.5));
    }

    #[test]
    fn the_importance_weight_scales_and_is_capped() {
        let c = DapoConfig::default();
        // p_old / p_rollout = e^0.4 ≈ 1.49 < 2: the loss and gradient scale by it.
        let w = 0.4f64.exp();
        let t = token_term(-2.0, -2.0, -2.4, 1.0, &c);
        assert!(close(t.weight, w) && !t.capped);
        assert!(close(t.loss, -w) && close(t.grad, -w));
        // p_old / p_rollout = e^3 ≈ 20: capped at C = 2.
        let t = token_term(-1.0, -1.0, -4.0, 1.0, &c);
        assert!(t.capped && close(t.weight, 2.0));
        assert!(close(t.loss, -2.0) && close(t.grad, -2.0));
        // The weight is a constant: it does not depend on p_θ, only the ratio does.
        let a = token_term(-0.9, -1.0, -1.2, 1.0, &c);
        assert!(close(a.weight, 0.2f64.exp()));
        assert!(close(a.ratio, 0.1f64.exp()));
        assert!(close(a.grad, -0.2f64.exp() * 0.1f64.exp()));
    }

    #[test]
    fn the_gradient_is_the_derivative_of_the_loss() {
        // Finite differences in log p_θ across both sides of both clip edges.
        let c = DapoConfig::default();
        for &adv in &[1.3, -0.7] {
            for &logp in &[-0.6, -0.3, -0.1, 0.0, 0.1, 0.2, 0.4] {
                let t = token_term(logp, 0.0, -0.1, adv, &c);
                let h = 1e-6;
                let up = token_term(logp + h, 0.0, -0.1, adv, &c).loss;
                let down = token_term(logp - h, 0.0, -0.1, adv, &c).loss;
                let numeric = (up - down) / (2.0 * h);
                assert!(
                    (numeric - t.grad).abs() < 1e-5 + EPS,
                    "A {adv} logp {logp}: {numeric} vs {}",
                    t.grad
                );
            }
        }
    }

    #[test]
    fn the_batch_loss_is_a_token_mean_over_the_whole_batch() {
        let c = DapoConfig::default();
        // Two sequences, 3 and 1 trained tokens, advantages +1 and -1, on policy: N = 4.
        let mut b = BatchObjective::new(c, 4);
        let w1 = b.weights(
            1.0,
            &[-1.0, -2.0, -0.5],
            &[-1.0, -2.0, -0.5],
            &[-1.0, -2.0, -0.5],
        );
        let w2 = b.weights(-1.0, &[-0.3], &[-0.3], &[-0.3]);
        // Each token weighs 1/4: -A/4 (not -A/3 and +A/1 as a mean of sequence means would).
        assert_eq!(w1, vec![-0.25; 3]);
        assert_eq!(w2, vec![0.25]);
        // Loss: (3·(-1) + 1·(+1)) / 4.
        assert!(close(b.loss(), -0.5));
        assert_eq!(b.clip_fraction(), 0.0);
        // Off policy: one of two tokens clipped (r = 2 with A > 0), one capped weight.
        let mut b = BatchObjective::new(c, 2);
        let w = b.weights(1.0, &[2.0f32.ln(), 0.0], &[0.0, 0.0], &[0.0, -5.0]);
        assert_eq!(w[0], 0.0);
        assert!((f64::from(w[1]) - (-2.0 / 2.0)).abs() < 1e-6);
        assert_eq!(b.clip_fraction(), 0.5);
        assert_eq!(b.capped_fraction(), 0.5);
        // Loss: (-(1.28·1·1) + -(1·1·2)) / 2.
        assert!((b.loss() - (-(1.28 + 2.0) / 2.0)).abs() < 1e-6);
    }
}

//! Picking the next token from a row of logits: the request's [`SamplingParams`], a grammar's
//! mask when one is in force, and the picked token's log-probability under the model's own
//! (unmasked, untruncated) distribution, all from a few passes over the row.
//!
//! Why not llama.cpp's sampler chain: it copies the 151,936 logits into a candidate array at
//! every token, a grammar's mask is applied by testing every entry, its `dist` sampler takes a
//! scalar `expf` of each, and the log-probability RL needs is one more pass on top. Here one
//! vectorised pass gives the weights that are drawn from and the sum the log-probability needs,
//! and a mask is read word by word (docs/BENCHMARKS.md, "Sampling in one pass").
//!
//! The semantics are the chain's (mask, then top-k, then top-p on the temperature-1
//! probabilities, then temperature, then a weighted draw); the random numbers are not: a seed
//! gives the same tokens run after run, but not the tokens llama.cpp's `dist` would give.

use crate::TokenRecord;
use crate::sampling::{
    BLOCK, LANES, SamplingParams, above_in_group, all_bits, exp_nonpositive, first_max,
    first_max_allowed, mask_bits, max_of, max_where, sum_where, token_logprob_given_max,
    weight_sum,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Ordering;
use std::collections::HashMap;

/// The tokens a grammar allows next: bit `i % 32` of word `i / 32` is set when token `i` may come
/// next (llguidance's mask layout). Tokens past the last word are not allowed.
#[derive(Debug, Clone, Copy)]
pub struct AllowedTokens<'a>(pub &'a [u32]);

impl AllowedTokens<'_> {
    /// Calls `f` with each allowed token below `n`, in increasing order, until it returns true;
    /// returns that token.
    fn find(self, n: usize, mut f: impl FnMut(usize) -> bool) -> Option<usize> {
        for (w, &word) in self.0.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let token = w * 32 + bits.trailing_zeros() as usize;
                if token >= n {
                    return None;
                }
                if f(token) {
                    return Some(token);
                }
                bits &= bits - 1;
            }
        }
        None
    }

    fn for_each(self, n: usize, mut f: impl FnMut(usize)) {
        self.find(n, |t| {
            f(t);
            false
        });
    }
}

/// Picks tokens for one sequence; its random state carries from token to token, so a seed gives
/// the same generation each time.
pub struct TokenSampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
    /// Scratch: each token's weight `exp((logit - max) / temperature)`.
    weights: Vec<f32>,
    /// Scratch: the sum of each block of [`BLOCK`] weights, so a draw finds its block first.
    block_sums: Vec<f64>,
    /// Scratch: the tokens left after a mask, top-k and top-p.
    candidates: Vec<Candidate>,
    /// How often each token was picked, when the parameters penalise repeats.
    picked: HashMap<u32, u32>,
    /// Scratch: the logits with those penalties applied.
    penalised: Vec<f32>,
}

/// A token and its logit, ordered by logit (then the lower token first, as llama.cpp's sort
/// keeps the vocabulary's order among equals).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Candidate {
    logit: f32,
    token: u32,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.logit
            .total_cmp(&other.logit)
            .then_with(|| other.token.cmp(&self.token))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl TokenSampler {
    pub fn new(params: SamplingParams) -> Self {
        TokenSampler {
            params,
            rng: ChaCha8Rng::seed_from_u64(u64::from(params.seed)),
            weights: Vec::new(),
            block_sums: Vec::new(),
            candidates: Vec::new(),
            picked: HashMap::new(),
            penalised: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The next token from `logits`, among `allowed` when a grammar is in force, with its
    /// log-probability when `logprob` is set. `None` when the row has no usable number (NaN or
    /// infinite logits) or the mask allows no token of the row (a greedy pick, and a draw whose
    /// allowed tokens all sit about 60 below the row's best, take an allowed token whose logit is
    /// minus infinity for one it does not allow).
    ///
    /// With frequency or presence penalties, the tokens this sampler picked before are lowered
    /// first (OpenAI's formula: `logit - count × frequency - presence` for a token picked `count`
    /// times), and the log-probability is the penalised distribution's, the one drawn from.
    pub fn pick(
        &mut self,
        logits: &[f32],
        allowed: Option<AllowedTokens<'_>>,
        logprob: bool,
    ) -> Option<TokenRecord> {
        if !self.params.penalises() {
            return self.pick_from(logits, allowed, logprob);
        }
        let mut penalised = std::mem::take(&mut self.penalised);
        penalised.clear();
        penalised.extend_from_slice(logits);
        let (frequency, presence) = (self.params.frequency_penalty, self.params.presence_penalty);
        for (&token, &count) in &self.picked {
            if let Some(logit) = penalised.get_mut(token as usize) {
                *logit -= count as f32 * frequency + presence;
            }
        }
        let record = self.pick_from(&penalised, allowed, logprob);
        self.penalised = penalised;
        if let Some(record) = &record {
            *self.picked.entry(record.id as u32).or_default() += 1;
        }
        record
    }

    fn pick_from(
        &mut self,
        logits: &[f32],
        allowed: Option<AllowedTokens<'_>>,
        logprob: bool,
    ) -> Option<TokenRecord> {
        // A free greedy pick finds the largest logit and where it is in one pass.
        let (first, max) = match (self.params.is_greedy(), allowed) {
            (true, None) => {
                first_max(logits).map_or((None, f32::NEG_INFINITY), |(i, m)| (Some(i), m))
            }
            _ => (None, max_of(logits)),
        };
        if !max.is_finite() {
            return None;
        }
        let temperature = self.params.logprob_temperature();
        let (token, logprob) = if self.params.is_greedy() {
            let token = match allowed {
                None => first?,
                Some(allowed) => first_max_allowed(logits, allowed.0)?.0,
            };
            let lp = logprob
                .then(|| token_logprob_given_max(logits, token, temperature, max))
                .flatten();
            (token, lp)
        } else if self.truncates() {
            let token = self.draw_truncated(logits, allowed)?;
            let lp = logprob
                .then(|| token_logprob_given_max(logits, token, temperature, max))
                .flatten();
            (token, lp)
        } else {
            let total = self.fill_weights(logits, max, 1.0 / temperature);
            if !(total.is_finite() && total > 0.0) {
                return None;
            }
            let token = match allowed {
                None => self.draw_from_weights(total)?,
                Some(allowed) => self.draw_allowed(logits, allowed)?,
            };
            let lp = (logits[token] - max) * (1.0 / temperature) - total.ln() as f32;
            (token, (logprob && lp.is_finite()).then_some(lp))
        };
        Some(TokenRecord {
            id: i32::try_from(token).ok()?,
            logprob,
        })
    }

    fn truncates(&self) -> bool {
        let top_p = self.params.top_p;
        self.params.top_k > 0 || (top_p > 0.0 && top_p < 1.0)
    }

    /// Writes every token's weight at `inv_t` relative to `max` and returns their sum, the same
    /// sum `token_logprob` takes (so the log-probability agrees with it to the last bit).
    fn fill_weights(&mut self, logits: &[f32], max: f32, inv_t: f32) -> f64 {
        self.weights.resize(logits.len(), 0.0);
        self.block_sums.clear();
        let mut total = 0.0f64;
        for (block, out) in logits.chunks(BLOCK).zip(self.weights.chunks_mut(BLOCK)) {
            let sum = weight_sum(block, max, inv_t, |at, weights| {
                out[at..at + weights.len()].copy_from_slice(weights);
            });
            self.block_sums.push(sum);
            total += sum;
        }
        total
    }

    /// A draw over all the weights [`Self::fill_weights`] wrote: the block first, then the token.
    fn draw_from_weights(&mut self, total: f64) -> Option<usize> {
        let mut target = self.rng.random::<f64>() * total;
        let mut last = None;
        for (b, &sum) in self.block_sums.iter().enumerate() {
            if sum <= 0.0 {
                continue;
            }
            let start = b * BLOCK;
            let end = (start + BLOCK).min(self.weights.len());
            if target < sum {
                return Some(
                    pick_in(&self.weights[start..end], target).map_or(end - 1, |i| start + i),
                );
            }
            target -= sum;
            last = Some(end - 1);
        }
        // Rounding left the target just past the end: the last block's last token.
        last
    }

    /// A draw among the allowed tokens, weighted as [`Self::fill_weights`] wrote them: each
    /// block's allowed weight summed in vector lanes, then the block drawn, then the token in it.
    /// When the best allowed token sits so far below the row's maximum that those weights lose
    /// precision, the allowed tokens' weights are taken again relative to their own maximum.
    /// (RL's rollouts draw here at every token: the whole distribution, held to the grammar.)
    fn draw_allowed(&mut self, logits: &[f32], allowed: AllowedTokens<'_>) -> Option<usize> {
        let mut total = self.allowed_block_sums(allowed);
        // e^-60 of the row's best: the weights keep about 26 of f32's 38 decimal orders.
        if total < 1e-26 {
            let (_, top) = first_max_allowed(logits, allowed.0)?;
            let inv_t = 1.0 / self.params.logprob_temperature();
            let weights = &mut self.weights;
            allowed.for_each(logits.len(), |t| {
                weights[t] = exp_nonpositive((logits[t] - top) * inv_t);
            });
            total = self.allowed_block_sums(allowed);
        }
        let mut target = self.rng.random::<f64>() * total;
        let mut last_block = None;
        for (b, &sum) in self.block_sums.iter().enumerate() {
            if sum <= 0.0 {
                continue;
            }
            if target < sum {
                return self.draw_in_block(b, target, allowed);
            }
            target -= sum;
            last_block = Some(b);
        }
        // Rounding left the target past the last block: its last allowed token, then.
        self.draw_in_block(last_block?, f64::INFINITY, allowed)
    }

    /// Each block's weight over the tokens `allowed` lets through, into `block_sums` (the
    /// unmasked sums [`Self::fill_weights`] left there are not needed after its total); returns
    /// their sum. A block whose words allow nothing is not read: a sparse mask costs its words.
    fn allowed_block_sums(&mut self, allowed: AllowedTokens<'_>) -> f64 {
        const GROUPS: usize = BLOCK / LANES;
        const WORDS: usize = BLOCK / 32;
        let bits = mask_bits(allowed.0);
        self.block_sums.clear();
        let mut total = 0.0f64;
        for (b, block) in self.weights.chunks(BLOCK).enumerate() {
            let words = allowed.0.get(b * WORDS..).unwrap_or_default();
            let none = words.iter().take(WORDS).all(|&word| word == 0);
            let sum = if none {
                0.0
            } else {
                sum_where(block, |group| bits(b * GROUPS + group))
            };
            self.block_sums.push(sum);
            total += sum;
        }
        total
    }

    /// The allowed token of block `b` at which `target` falls among the block's allowed weights,
    /// or the block's last allowed token where rounding leaves `target` past them all.
    fn draw_in_block(
        &self,
        b: usize,
        mut target: f64,
        allowed: AllowedTokens<'_>,
    ) -> Option<usize> {
        const _: () = assert!(BLOCK.is_multiple_of(32));
        let start = b * BLOCK;
        let end = (start + BLOCK).min(self.weights.len());
        let words = allowed.0.get(start / 32..)?;
        let words = &words[..words.len().min(BLOCK / 32)];
        let mut last = None;
        let found = AllowedTokens(words).find(end - start, |i| {
            last = Some(start + i);
            let w = f64::from(self.weights[start + i]);
            if target < w {
                return true;
            }
            target -= w;
            false
        });
        found.map(|i| start + i).or(last)
    }

    /// Mask, top-k, top-p (on the temperature-1 probabilities), then a draw at the temperature.
    fn draw_truncated(
        &mut self,
        logits: &[f32],
        allowed: Option<AllowedTokens<'_>>,
    ) -> Option<usize> {
        let mass = self.gather_candidates(logits, allowed);
        let candidates = &mut self.candidates;
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        let top = candidates.first()?.logit;
        let top_p = f64::from(self.params.top_p);
        if top_p > 0.0 && top_p < 1.0 {
            let mut cumulative = 0.0;
            let kept = candidates
                .iter()
                .position(|c| {
                    cumulative += f64::from(exp_nonpositive(c.logit - top));
                    cumulative >= top_p * mass
                })
                .map_or(candidates.len(), |i| i + 1);
            candidates.truncate(kept);
        }
        let inv_t = 1.0 / self.params.logprob_temperature();
        self.weights.clear();
        self.weights.extend(
            candidates
                .iter()
                .map(|c| exp_nonpositive((c.logit - top) * inv_t)),
        );
        let total: f64 = self.weights.iter().map(|&w| f64::from(w)).sum();
        let target = self.rng.random::<f64>() * total;
        let at = pick_in(&self.weights, target).unwrap_or(candidates.len() - 1);
        Some(candidates[at].token as usize)
    }

    /// Fills `candidates` with the tokens the mask and top-k leave, and returns the mass top-p
    /// measures against: the sum of `exp(logit - best)` over the tokens top-k keeps, or over every
    /// allowed token without top-k. With top-p alone the candidates are the allowed tokens its
    /// nucleus can reach ([`nucleus_where`]), not all of them: sorting 151,936 costs milliseconds.
    fn gather_candidates(&mut self, logits: &[f32], allowed: Option<AllowedTokens<'_>>) -> f64 {
        let candidates = &mut self.candidates;
        candidates.clear();
        let k = usize::try_from(self.params.top_k).unwrap_or(0);
        if k > 0 {
            top_k(logits, allowed, k, candidates);
            let best = candidates
                .iter()
                .map(|c| c.logit)
                .fold(f32::NEG_INFINITY, f32::max);
            return candidates
                .iter()
                .map(|c| f64::from(exp_nonpositive(c.logit - best)))
                .sum();
        }
        let top_p = self.params.top_p;
        match allowed {
            Some(allowed) => nucleus_where(logits, top_p, candidates, mask_bits(allowed.0)),
            None => nucleus_where(logits, top_p, candidates, all_bits),
        }
    }
}

/// How far below the row's best logit [`nucleus_where`] looks for the nucleus, nearest first.
const NUCLEUS_DEPTHS: [f32; 4] = [4.0, 8.0, 16.0, 32.0];

/// Top-p alone: fills `out` with the allowed tokens (`bits`, as `top_k_where` reads them) within
/// the first of [`NUCLEUS_DEPTHS`] below the best whose tokens hold `top_p` of the mass (every
/// allowed token where none does), and returns the mass over every allowed token (of
/// `exp(logit - best)`, at temperature 1, NaN left out). The nucleus, the best tokens until their
/// mass reaches `top_p` of the whole, is among them: any set of the best tokens that holds that
/// much contains it. One vectorised pass measures the whole mass; each depth tried offers only
/// the logits between it and the depth before (a few, on a model's peaked row) and adds their
/// mass, and only the tokens offered are sorted.
fn nucleus_where(
    logits: &[f32],
    top_p: f32,
    out: &mut Vec<Candidate>,
    bits: impl Fn(usize) -> u32 + Copy,
) -> f64 {
    let best = max_where(logits, bits);
    if best == f32::NEG_INFINITY {
        return 0.0;
    }
    let all = allowed_mass(logits, best, bits);
    let wanted = f64::from(top_p) * all;
    let (mut mass, mut offered_above) = (0.0f64, f32::INFINITY);
    for depth in NUCLEUS_DEPTHS {
        let bar = (best - depth).next_down();
        let from = out.len();
        offer_between(logits, bar, offered_above, out, bits);
        offered_above = bar;
        mass += out[from..]
            .iter()
            .map(|c| f64::from(exp_nonpositive(c.logit - best)))
            .sum::<f64>();
        if mass >= wanted {
            return all;
        }
    }
    offer_between(logits, f32::NEG_INFINITY, offered_above, out, bits);
    all
}

/// Appends to `out` every allowed logit above `bar` and not above `top` (NaN is never above), a
/// group of LANES compared at once.
fn offer_between(
    logits: &[f32],
    bar: f32,
    top: f32,
    out: &mut Vec<Candidate>,
    bits: impl Fn(usize) -> u32,
) {
    // Nothing is above infinity: the first depth compares once.
    let bounded = top < f32::INFINITY;
    for (g, group) in logits.chunks(LANES).enumerate() {
        let mut band = above_in_group(group, bar, bits(g));
        if bounded {
            band &= !above_in_group(group, top, u32::MAX);
        }
        while band != 0 {
            let j = band.trailing_zeros() as usize;
            band &= band - 1;
            out.push(Candidate {
                logit: group[j],
                token: (g * LANES + j) as u32,
            });
        }
    }
}

/// The sum of `exp(logit - best)` over the allowed logits (NaN left out): f32 lanes over each
/// block of BLOCK logits, added in f64, as `weight_sum` adds.
fn allowed_mass(logits: &[f32], best: f32, bits: impl Fn(usize) -> u32) -> f64 {
    const GROUPS: usize = BLOCK / LANES;
    let (groups, rest) = logits.as_chunks::<LANES>();
    let mut total = 0.0f64;
    for (b, block) in groups.chunks(GROUPS).enumerate() {
        let mut lanes = [0.0f32; LANES];
        for (g, group) in block.iter().enumerate() {
            let taken = bits(b * GROUPS + g);
            for (j, (lane, &logit)) in lanes.iter_mut().zip(group).enumerate() {
                let weight = exp_nonpositive(logit - best);
                // NaN is not at or above minus infinity.
                let counted = taken >> j & 1 != 0 && logit >= f32::NEG_INFINITY;
                *lane += if counted { weight } else { 0.0 };
            }
        }
        total += lanes.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    let taken = bits(groups.len());
    let rest = rest.iter().enumerate();
    let rest = rest.filter(|&(j, &logit)| taken >> j & 1 != 0 && !logit.is_nan());
    total
        + rest
            .map(|(_, &logit)| f64::from(exp_nonpositive(logit - best)))
            .sum::<f64>()
}

/// Fills `out` with the `k` allowed tokens of largest logit. One comparison per token against the
/// least logit kept so far, in most cases: candidates gather in a buffer of up to `2k` and are cut
/// back to the best `k` when it fills, which raises the bar.
fn top_k(logits: &[f32], allowed: Option<AllowedTokens<'_>>, k: usize, out: &mut Vec<Candidate>) {
    match allowed {
        Some(allowed) => top_k_where(logits, k, out, mask_bits(allowed.0)),
        None => top_k_where(logits, k, out, all_bits),
    }
}

/// [`top_k`] over the logits `bits` lets through (`bits(group)`: which of the LANES values of
/// that group, as `sampling::max_where` reads it). Whole blocks under the bar are passed over
/// after one vectorised max; in the others each group of LANES is compared with the bar at once
/// and only the values above it are offered.
fn top_k_where(logits: &[f32], k: usize, out: &mut Vec<Candidate>, bits: impl Fn(usize) -> u32) {
    let cut = |out: &mut Vec<Candidate>| {
        if out.len() > k {
            out.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
            out.truncate(k);
        }
        out.iter().map(|c| c.logit).fold(f32::INFINITY, f32::min)
    };
    let mut bar = f32::NEG_INFINITY;
    let limit = 2 * k.max(32);
    let offer = |t: usize, out: &mut Vec<Candidate>, bar: &mut f32| {
        let logit = logits[t];
        // Equal to the bar can only tie with the k-th; NaN never passes.
        if logit > *bar || (out.len() < k && !logit.is_nan()) {
            out.push(Candidate {
                logit,
                token: t as u32,
            });
            if out.len() >= limit {
                *bar = cut(out);
            }
        }
    };
    const GROUPS: usize = BLOCK / LANES;
    const _: () = assert!(BLOCK.is_multiple_of(LANES));
    for (b, block) in logits.chunks(BLOCK).enumerate() {
        let block_bits = |g: usize| bits(b * GROUPS + g);
        if out.len() >= k && max_where(block, block_bits) <= bar {
            continue;
        }
        for (g, group) in block.chunks(LANES).enumerate() {
            // Only the group's own values (a last group may be short).
            let taken = block_bits(g) & (u32::MAX >> (32 - group.len()));
            // Until k are kept every allowed number is offered; then those above the bar (a cut
            // within the group may raise it: `offer` compares again).
            let mut wanted = if out.len() < k {
                taken
            } else {
                above_in_group(group, bar, taken)
            };
            while wanted != 0 {
                let j = wanted.trailing_zeros() as usize;
                wanted &= wanted - 1;
                offer(b * BLOCK + g * LANES + j, out, &mut bar);
            }
        }
    }
    cut(out);
}

/// The index in `weights` where the running sum first passes `target`; `None` if it never does.
fn pick_in(weights: &[f32], target: f64) -> Option<usize> {
    let mut left = target;
    weights.iter().position(|&w| {
        let w = f64::from(w);
        if left < w {
            return true;
        }
        left -= w;
        false
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token_logprob;

    fn params(temperature: f32, top_k: i32, top_p: f32) -> SamplingParams {
        SamplingParams {
            temperature,
            top_p,
            top_k,
            seed: 7,
            ..SamplingParams::default()
        }
    }

    fn mask(n: usize, allowed: &[usize]) -> Vec<u32> {
        let mut words = vec![0u32; n.div_ceil(32)];
        for &t in allowed {
            words[t / 32] |= 1 << (t % 32);
        }
        words
    }

    /// How often each token was drawn in `draws` picks.
    fn frequencies(
        sampler: &mut TokenSampler,
        logits: &[f32],
        allowed: Option<&[u32]>,
        draws: usize,
    ) -> Vec<f64> {
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..draws {
            let record = sampler
                .pick(logits, allowed.map(AllowedTokens), false)
                .unwrap();
            counts[record.id as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    /// softmax(logits / t) over `keep` (all when empty).
    fn expected(logits: &[f32], t: f64, keep: &[usize]) -> Vec<f64> {
        let kept = |i: usize| keep.is_empty() || keep.contains(&i);
        let w: Vec<f64> = (0..logits.len())
            .map(|i| {
                if kept(i) {
                    (f64::from(logits[i]) / t).exp()
                } else {
                    0.0
                }
            })
            .collect();
        let total: f64 = w.iter().sum();
        w.iter().map(|x| x / total).collect()
    }

    fn assert_close(seen: &[f64], want: &[f64]) {
        for (i, (s, w)) in seen.iter().zip(want).enumerate() {
            assert!(
                (s - w).abs() < 0.01,
                "token {i}: drawn {s:.4}, expected {w:.4}"
            );
        }
    }

    const ROW: [f32; 6] = [1.0, 2.5, 0.0, 2.0, -1.0, 1.5];

    #[test]
    fn draws_follow_the_softmax_at_the_temperature() {
        let mut sampler = TokenSampler::new(params(0.7, 0, 1.0));
        let seen = frequencies(&mut sampler, &ROW, None, 200_000);
        assert_close(&seen, &expected(&ROW, 0.7, &[]));
    }

    #[test]
    fn a_mask_keeps_its_tokens_and_their_relative_odds() {
        let allowed = mask(ROW.len(), &[0, 2, 5]);
        let mut sampler = TokenSampler::new(params(1.0, 0, 1.0));
        let seen = frequencies(&mut sampler, &ROW, Some(&allowed), 200_000);
        assert_close(&seen, &expected(&ROW, 1.0, &[0, 2, 5]));
        // Greedy under a mask: the best allowed token, not the row's best.
        let mut greedy = TokenSampler::new(SamplingParams::greedy());
        let record = greedy
            .pick(&ROW, Some(AllowedTokens(&allowed)), true)
            .unwrap();
        assert_eq!(record.id, 5);
    }

    #[test]
    fn top_k_then_top_p_then_temperature() {
        // top-k 3 leaves tokens 1, 3, 5; at temperature 1 their probabilities are about
        // 0.51, 0.31, 0.19, so top-p 0.8 keeps 1 and 3; they are drawn at temperature 0.5.
        let mut sampler = TokenSampler::new(params(0.5, 3, 0.8));
        let seen = frequencies(&mut sampler, &ROW, None, 200_000);
        assert_close(&seen, &expected(&ROW, 0.5, &[1, 3]));
        let mut one = TokenSampler::new(params(1.0, 1, 1.0));
        let allowed = mask(ROW.len(), &[0, 4]);
        for _ in 0..100 {
            assert_eq!(
                one.pick(&ROW, Some(AllowedTokens(&allowed)), false)
                    .unwrap()
                    .id,
                0
            );
        }
    }

    #[test]
    fn top_k_finds_the_largest_logits_of_a_vocabulary() {
        let mut state = 99u32;
        let logits: Vec<f32> = (0..151_936)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state % 100_000) as f32 / 1000.0
            })
            .collect();
        let every_third: Vec<usize> = (0..logits.len()).step_by(3).collect();
        let third = mask(logits.len(), &every_third);
        for k in [1, 40, 100, 5000] {
            for allowed in [None, Some(AllowedTokens(&third))] {
                let mut want: Vec<usize> = match allowed {
                    None => (0..logits.len()).collect(),
                    Some(_) => every_third.clone(),
                };
                want.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
                let kth = logits[want[k - 1]];
                let mut got = Vec::new();
                top_k(&logits, allowed, k, &mut got);
                assert_eq!(got.len(), k);
                // The same set, up to which of several tokens tied with the k-th is kept.
                let mut got_logits: Vec<f32> = got.iter().map(|c| c.logit).collect();
                got_logits.sort_by(|a, b| b.total_cmp(a));
                let want_logits: Vec<f32> = want[..k].iter().map(|&t| logits[t]).collect();
                assert_eq!(got_logits, want_logits, "k {k}");
                assert!(
                    got.iter()
                        .all(|c| c.logit >= kth && logits[c.token as usize] == c.logit)
                );
                if allowed.is_some() {
                    assert!(
                        got.iter().all(|c| c.token % 3 == 0),
                        "k {k}: a masked token"
                    );
                }
            }
        }
    }

    #[test]
    fn top_p_alone_over_a_vocabulary_keeps_the_nucleus() {
        // A few strong tokens over a long weak tail: the nucleus at 0.9 is the strong ones,
        // found without sorting the tail.
        let mut logits = vec![-30.0f32; 151_936];
        for (t, l) in [(10usize, 5.0f32), (99_000, 4.0), (151_000, 3.0)] {
            logits[t] = l;
        }
        let mut sampler = TokenSampler::new(params(1.0, 0, 0.9));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2_000 {
            seen.insert(sampler.pick(&logits, None, false).unwrap().id);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [10, 99_000]);
        // A flat row: every token is in the nucleus, so the tail must not be cut.
        let flat = vec![0.0f32; 1000];
        let mut sampler = TokenSampler::new(params(1.0, 0, 0.99));
        let mut distinct = std::collections::BTreeSet::new();
        for _ in 0..20_000 {
            distinct.insert(sampler.pick(&flat, None, false).unwrap().id);
        }
        assert!(distinct.len() > 950, "{} distinct tokens", distinct.len());
    }

    /// The nucleus by its definition: every allowed token sorted (logit down, then token up),
    /// kept until their mass `exp(logit - best)` reaches `top_p` of all the allowed tokens'.
    fn plain_nucleus(logits: &[f32], allowed: &dyn Fn(usize) -> bool, top_p: f64) -> Vec<usize> {
        let mut tokens: Vec<usize> = (0..logits.len())
            .filter(|&t| allowed(t) && !logits[t].is_nan())
            .collect();
        tokens.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let best = logits[tokens[0]];
        let mass = |t: usize| (f64::from(logits[t]) - f64::from(best)).exp();
        let all: f64 = tokens.iter().map(|&t| mass(t)).sum();
        let mut cumulative = 0.0;
        let kept = tokens
            .iter()
            .position(|&t| {
                cumulative += mass(t);
                cumulative >= top_p * all
            })
            .map_or(tokens.len(), |i| i + 1);
        tokens.truncate(kept);
        tokens
    }

    #[test]
    fn top_p_alone_draws_from_the_nucleus_at_every_depth() {
        // Tiers of tokens 1.5, 2, 4 (a depth looked at, exactly), 6 and 12 below the best over a
        // tail 40 below, so that the nucleus ends in another tier (and at another depth) for each
        // top-p; a NaN among them, and a mask that shuts out every fifth word and a token 0.5
        // above the rest (so that unmasked, the tiers sit 0.5 deeper).
        const N: usize = 20_007;
        let mut logits = vec![-40.0f32; N];
        logits[40] = 0.0;
        let tiers = [
            (-1.5f32, 3usize),
            (-2.0, 4),
            (-4.0, 10),
            (-6.0, 50),
            (-12.0, 2_000),
        ];
        let mut t = 7;
        for (logit, count) in tiers {
            for _ in 0..count {
                logits[t] = logit;
                t = (t + 4_999) % N;
            }
        }
        logits[N - 1] = 0.5;
        logits[N - 2] = f32::NAN;
        logits[1_000] = f32::NAN;
        let mut words = vec![u32::MAX; N.div_ceil(32)];
        words.iter_mut().step_by(5).for_each(|w| *w = 0);
        words[(N - 1) / 32] &= !(1 << ((N - 1) % 32));
        for (top_p, masked) in [0.3, 0.6, 0.65, 0.9, 0.99, 0.9995]
            .into_iter()
            .flat_map(|p| [(p, false), (p, true)])
        {
            let allowed = |t: usize| !masked || words[t / 32] >> (t % 32) & 1 != 0;
            let nucleus = plain_nucleus(&logits, &allowed, top_p);
            let mut sampler = TokenSampler::new(params(1.0, 0, top_p as f32));
            let seen = frequencies(
                &mut sampler,
                &logits,
                masked.then_some(words.as_slice()),
                20_000,
            );
            let want = expected(&logits, 1.0, &nucleus);
            for t in 0..N {
                assert!(
                    seen[t] == 0.0 || nucleus.contains(&t),
                    "top-p {top_p}, masked {masked}: token {t} ({}) is outside the nucleus of {}",
                    logits[t],
                    nucleus.len()
                );
                assert!(
                    (seen[t] - want[t]).abs() < 0.015,
                    "top-p {top_p}, masked {masked}: token {t} drawn {:.4}, expected {:.4}",
                    seen[t],
                    want[t]
                );
            }
        }
    }

    #[test]
    fn the_log_probability_is_the_unmasked_policys() {
        let logits: Vec<f32> = (0..5000)
            .map(|i| ((i * 7919) % 1013) as f32 / 97.0)
            .collect();
        let allowed = mask(logits.len(), &[3, 400, 4999]);
        for (p, allowed) in [
            (params(0.8, 0, 1.0), None),
            (params(0.8, 0, 1.0), Some(&allowed)),
            (params(0.8, 40, 0.95), None),
            (SamplingParams::greedy(), Some(&allowed)),
        ] {
            let mut sampler = TokenSampler::new(p);
            for _ in 0..20 {
                let record = sampler
                    .pick(&logits, allowed.map(|a| AllowedTokens(a)), true)
                    .unwrap();
                let token = record.id as usize;
                let want = token_logprob(&logits, token, p.logprob_temperature()).unwrap();
                assert_eq!(record.logprob, Some(want), "{p:?}");
                if allowed.is_some() {
                    assert!([3, 400, 4999].contains(&token));
                }
            }
        }
    }

    #[test]
    fn allowed_tokens_far_below_the_best_keep_their_odds() {
        // The grammar allows only tokens 200 below the row's best: relative to the best their
        // weights would all round to the same floor.
        let mut logits = vec![0.0f32; 64];
        logits[0] = 300.0;
        logits[40] = 100.0;
        logits[41] = 101.0;
        let allowed = mask(64, &[40, 41]);
        let mut sampler = TokenSampler::new(params(1.0, 0, 1.0));
        let seen = frequencies(&mut sampler, &logits, Some(&allowed), 100_000);
        let p41 = 1.0 / (1.0 + (-1.0f64).exp());
        assert!((seen[41] - p41).abs() < 0.01, "{}", seen[41]);
        assert!((seen[40] - (1.0 - p41)).abs() < 0.01);
    }

    #[test]
    fn a_mask_over_many_blocks_keeps_its_tokens_and_their_odds() {
        // A row of many blocks and a short last one, a mask letting 99% through (one word in 97
        // shut, as a grammar's free text), a few heavy allowed tokens across the blocks and the
        // last, and a heavier one the mask shuts out.
        const N: usize = 20_007;
        let heavy = [
            (7usize, 3.0f32),
            (300, 2.0),
            (4_095, 4.0),
            (13_001, 3.5),
            (20_006, 2.5),
        ];
        let mut logits = vec![-3.0f32; N];
        let mut words = vec![u32::MAX; N.div_ceil(32)];
        words.iter_mut().step_by(97).for_each(|w| *w = 0);
        for &(t, l) in &heavy {
            logits[t] = l;
            words[t / 32] |= 1 << (t % 32);
        }
        logits[96] = 10.0;
        words[96 / 32] &= !(1 << (96 % 32));
        let allowed = |t: usize| words[t / 32] >> (t % 32) & 1 != 0;
        let keep: Vec<usize> = (0..N).filter(|&t| allowed(t)).collect();
        let want = expected(&logits, 1.0, &keep);

        let draws = 200_000;
        let mut sampler = TokenSampler::new(params(1.0, 0, 1.0));
        let seen = frequencies(&mut sampler, &logits, Some(&words), draws);
        for t in (0..N).filter(|&t| seen[t] > 0.0) {
            assert!(
                allowed(t),
                "token {t} was drawn though the mask shuts it out"
            );
        }
        for &(t, _) in &heavy {
            assert!(
                (seen[t] - want[t]).abs() < 0.005,
                "token {t}: drawn {:.4}, expected {:.4}",
                seen[t],
                want[t]
            );
        }
        // The light tokens' share in each eighth of the row: the blocks are drawn by their mass.
        let eighth = N.div_ceil(8);
        for part in 0..8 {
            let range = part * eighth..((part + 1) * eighth).min(N);
            let light = |p: &[f64]| -> f64 {
                range
                    .clone()
                    .filter(|t| !heavy.iter().any(|&(h, _)| h == *t))
                    .map(|t| p[t])
                    .sum()
            };
            let (s, w) = (light(&seen), light(&want));
            assert!(
                (s - w).abs() < 0.005,
                "eighth {part}: drawn {s:.4}, expected {w:.4}"
            );
        }
    }

    #[test]
    fn allowed_tokens_far_below_the_best_in_other_blocks_keep_their_odds() {
        // As below, with the allowed tokens in two blocks far apart (one in its block's last
        // word, all other blocks' words empty) and the row's best in a third.
        let mut logits = vec![0.0f32; 20_000];
        logits[5] = 300.0;
        logits[767] = 100.0;
        logits[19_000] = 101.0;
        let allowed = mask(logits.len(), &[767, 19_000]);
        let mut sampler = TokenSampler::new(params(1.0, 0, 1.0));
        let seen = frequencies(&mut sampler, &logits, Some(&allowed), 20_000);
        let p = 1.0 / (1.0 + (-1.0f64).exp());
        assert!((seen[19_000] - p).abs() < 0.015, "{}", seen[19_000]);
        assert!((seen[767] - (1.0 - p)).abs() < 0.015, "{}", seen[767]);
    }

    #[test]
    fn a_seed_repeats_its_tokens_and_another_seed_does_not() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 31) % 17) as f32 / 4.0).collect();
        let run = |seed: u32| {
            let mut sampler = TokenSampler::new(SamplingParams {
                seed,
                ..params(1.0, 0, 1.0)
            });
            (0..50)
                .map(|_| sampler.pick(&logits, None, false).unwrap().id)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn penalties_lower_the_tokens_picked_before() {
        let greedy = |frequency_penalty: f32, presence_penalty: f32, logits: &[f32]| {
            let mut sampler = TokenSampler::new(SamplingParams {
                frequency_penalty,
                presence_penalty,
                ..SamplingParams::greedy()
            });
            (0..5)
                .map(|_| sampler.pick(logits, None, false).unwrap().id)
                .collect::<Vec<_>>()
        };
        let logits = [2.0, 1.5, 1.2];
        assert_eq!(greedy(0.0, 0.0, &logits), [0, 0, 0, 0, 0]);
        // Each pick lowers the token again: 2.0, then 1.4 against 1.5, then 0.9 against 1.4, ...
        assert_eq!(greedy(0.6, 0.0, &logits), [0, 1, 0, 2, 1]);
        // Presence lowers a token once, however often it came.
        assert_eq!(greedy(0.0, 0.6, &logits), [0, 1, 0, 0, 0]);
        // A negative penalty keeps the first token whatever comes close.
        assert_eq!(greedy(-0.6, 0.0, &[1.5, 2.0]), [1, 1, 1, 1, 1]);
    }

    #[test]
    fn a_penalised_tokens_log_probability_is_the_penalised_rows() {
        let logits = [2.0f32, 1.5, 1.2];
        let mut sampler = TokenSampler::new(SamplingParams {
            frequency_penalty: 0.6,
            ..SamplingParams::greedy()
        });
        sampler.pick(&logits, None, true).unwrap();
        let second = sampler.pick(&logits, None, true).unwrap();
        let penalised = [1.4f32, 1.5, 1.2];
        assert_eq!(second.id, 1);
        assert_eq!(second.logprob, token_logprob(&penalised, 1, 1.0));
    }

    #[test]
    fn rows_without_numbers_or_allowed_tokens_give_none() {
        let mut sampler = TokenSampler::new(params(1.0, 0, 1.0));
        assert_eq!(sampler.pick(&[], None, true), None);
        assert_eq!(sampler.pick(&[f32::NAN, f32::NAN], None, true), None);
        assert_eq!(sampler.pick(&[1.0, f32::INFINITY], None, true), None);
        // Only a token past the row's end is allowed.
        let allowed = mask(64, &[50]);
        assert_eq!(
            sampler.pick(&[1.0, 2.0], Some(AllowedTokens(&allowed)), true),
            None
        );
        let nothing = mask(64, &[]);
        for p in [
            params(1.0, 0, 1.0),
            params(1.0, 40, 0.9),
            SamplingParams::greedy(),
        ] {
            let mut sampler = TokenSampler::new(p);
            assert_eq!(
                sampler.pick(&ROW, Some(AllowedTokens(&nothing)), true),
                None,
                "{p:?}"
            );
        }
    }
}

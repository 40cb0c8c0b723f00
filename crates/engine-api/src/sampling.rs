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
    /// OpenAI's `frequency_penalty` (-2 to 2, 0 is off): every time a token was sampled before in
    /// this generation lowers its logit by this much.
    #[serde(default)]
    pub frequency_penalty: f32,
    /// OpenAI's `presence_penalty` (-2 to 2, 0 is off): a token sampled before in this generation
    /// has its logit lowered by this much, once.
    #[serde(default)]
    pub presence_penalty: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.6,
            top_p: 0.95,
            top_k: 40,
            seed: 0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
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

    /// The first setting outside the range a request may give (OpenAI's bounds), as the field's
    /// name and why, for the caller's error; `None` when all are in range. `top_k` and `seed`
    /// take any value (a `top_k` of 0 or less keeps every token).
    pub fn out_of_range(&self) -> Option<(&'static str, &'static str)> {
        if !(0.0..=2.0).contains(&self.temperature) {
            Some(("temperature", "`temperature` must be between 0 and 2."))
        } else if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            Some(("top_p", "`top_p` must be in (0, 1]."))
        } else if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            Some((
                "frequency_penalty",
                "`frequency_penalty` must be between -2 and 2.",
            ))
        } else if !(-2.0..=2.0).contains(&self.presence_penalty) {
            Some((
                "presence_penalty",
                "`presence_penalty` must be between -2 and 2.",
            ))
        } else {
            None
        }
    }

    /// Whether tokens sampled before are penalised (the logits are then copied and lowered).
    pub fn penalises(&self) -> bool {
        self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
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

/// The most likely token (the first of equals): greedy sampling without building llama.cpp's
/// candidate array. `None` when no logit is a number above minus infinity.
pub fn argmax(logits: &[f32]) -> Option<usize> {
    first_max(logits).map(|(index, _)| index)
}

/// The most likely token and its log-probability (temperature 1): [`argmax`] and one more pass
/// over the logits.
pub fn greedy_pick(logits: &[f32]) -> Option<(usize, f32)> {
    let (token, max) = first_max(logits)?;
    Some((token, token_logprob_given_max(logits, token, 1.0, max)?))
}

/// `log softmax(logits / temperature)[token]`. Returns `None` for a token outside the
/// vocabulary or logits that are not finite.
///
/// This runs once per generated token over the whole vocabulary (151,936 entries for Qwen2.5),
/// so it is written to vectorise: a max pass and a sum of `exp_nonpositive`, both in
/// independent lanes, with f64 partial sums. About 0.2 ms on one laptop core, a third of a plain
/// `f64::exp` loop (benches/sampling.rs), under 1% of a decoding step of the 0.5B model; it
/// agrees with the exact value to about 1e-6.
pub fn token_logprob(logits: &[f32], token: usize, temperature: f32) -> Option<f32> {
    token_logprob_given_max(logits, token, temperature, max_of(logits))
}

pub(crate) fn token_logprob_given_max(
    logits: &[f32],
    token: usize,
    temperature: f32,
    max: f32,
) -> Option<f32> {
    let target = *logits.get(token)?;
    let inv_t = if temperature > 0.0 {
        1.0 / temperature
    } else {
        1.0
    };
    let total: f64 = logits
        .chunks(BLOCK)
        .map(|block| weight_sum(block, max, inv_t, |_, _| {}))
        .sum();
    let logprob = (target - max) * inv_t - total.ln() as f32;
    logprob.is_finite().then_some(logprob)
}

/// Independent lanes of a vectorised pass over the logits.
pub(crate) const LANES: usize = 16;
/// The logits a partial sum covers before it is added, in f64, to the row's total.
pub(crate) const BLOCK: usize = 256;

/// The sum of the weights `exp((l - max) * inv_t)` of one block of logits, in independent lanes
/// so it vectorises; `keep(at, weights)` sees each run of weights with its offset in the block (a
/// no-op where only the sum is wanted). `token_logprob` and the sampler's draw both sum through
/// here, so the log-probability the sampler records is `token_logprob`'s to the last bit.
#[inline(always)]
pub(crate) fn weight_sum(
    block: &[f32],
    max: f32,
    inv_t: f32,
    mut keep: impl FnMut(usize, &[f32]),
) -> f64 {
    let mut lanes = [0.0f32; LANES];
    let mut pieces = block.chunks_exact(LANES);
    let mut at = 0;
    for piece in &mut pieces {
        let mut weights = [0.0f32; LANES];
        for ((w, lane), &l) in weights.iter_mut().zip(lanes.iter_mut()).zip(piece) {
            *w = exp_nonpositive((l - max) * inv_t);
            *lane += *w;
        }
        keep(at, &weights);
        at += LANES;
    }
    let rest = pieces.remainder();
    let mut weights = [0.0f32; LANES];
    for (w, &l) in weights.iter_mut().zip(rest) {
        *w = exp_nonpositive((l - max) * inv_t);
        lanes[0] += *w;
    }
    keep(at, &weights[..rest.len()]);
    lanes.iter().map(|&v| f64::from(v)).sum()
}

/// The largest value, in independent lanes so the comparisons vectorise (one running maximum
/// is a chain of dependent instructions).
pub(crate) fn max_of(values: &[f32]) -> f32 {
    max_where(values, all_bits)
}

/// The largest of the values `bits` lets through (as in [`first_max_where`]), minus infinity
/// where none is a number. Inlined, so that [`all_bits`] folds away.
#[inline(always)]
pub(crate) fn max_where(values: &[f32], bits: impl Fn(usize) -> u32) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut pieces = values.chunks_exact(LANES);
    for (group, piece) in (&mut pieces).enumerate() {
        let taken = bits(group);
        for (j, (lane, &v)) in lanes.iter_mut().zip(piece).enumerate() {
            let v = if taken >> j & 1 != 0 {
                v
            } else {
                f32::NEG_INFINITY
            };
            *lane = if v > *lane { v } else { *lane };
        }
    }
    let tail = values.len() - pieces.remainder().len();
    let taken = bits(tail / LANES);
    let rest = pieces.remainder().iter().enumerate();
    let rest = rest.filter(|&(offset, _)| taken >> offset & 1 != 0);
    let mut max = f32::NEG_INFINITY;
    for &v in lanes.iter().chain(rest.map(|(_, v)| v)) {
        if v > max {
            max = v;
        }
    }
    max
}

/// The sum of the values `bits` lets through (as in [`max_where`]), in independent lanes so that
/// it vectorises: f32 partial sums added in f64, as [`weight_sum`] adds them.
#[inline(always)]
pub(crate) fn sum_where(values: &[f32], bits: impl Fn(usize) -> u32) -> f64 {
    let mut lanes = [0.0f32; LANES];
    let mut pieces = values.chunks_exact(LANES);
    for (group, piece) in (&mut pieces).enumerate() {
        let taken = bits(group);
        for (j, (lane, &v)) in lanes.iter_mut().zip(piece).enumerate() {
            *lane += if taken >> j & 1 != 0 { v } else { 0.0 };
        }
    }
    let tail = values.len() - pieces.remainder().len();
    let taken = bits(tail / LANES);
    let rest = pieces.remainder().iter().enumerate();
    let rest: f32 = rest
        .filter(|&(offset, _)| taken >> offset & 1 != 0)
        .map(|(_, &v)| v)
        .sum();
    lanes.iter().map(|&v| f64::from(v)).sum::<f64>() + f64::from(rest)
}

/// Every value of every group of LANES: the bits of a row without a mask.
pub(crate) fn all_bits(_group: usize) -> u32 {
    u32::MAX
}

/// The bits of a grammar's mask (llguidance's layout: bit `i % 32` of word `i / 32` for value
/// `i`) for each group of LANES values of the row: `bits(group)` holds in its low LANES bits which
/// values of the group at `group * LANES` are allowed; values past the last word are not.
pub(crate) fn mask_bits(words: &[u32]) -> impl Fn(usize) -> u32 + Copy + '_ {
    move |group| {
        words
            .get(group / 2)
            .map_or(0, |word| word >> (group % 2 * LANES))
    }
}

/// Which values of one group of at most LANES are above `bar` and let through by `taken`, as
/// bits (a comparison of the whole group at once, where the values are vectors).
#[inline(always)]
pub(crate) fn above_in_group(group: &[f32], bar: f32, taken: u32) -> u32 {
    let mut above = 0u32;
    for (j, &v) in group.iter().enumerate() {
        above |= u32::from(v > bar) << j;
    }
    above & taken
}

/// The first index of the largest value and that value (NaN is skipped), or `None` where no value
/// is above minus infinity. One pass in independent lanes, each keeping its largest value and the
/// block it was first seen in, so the comparisons and the index updates vectorise and the row is
/// read once. (A pass of [`max_of`] and then a search for the first equal value reads a real row,
/// whose largest logit may be anywhere, one and a half times on average, the search one element
/// at a time: benches/sampling.rs has that as its anchor.)
pub(crate) fn first_max(values: &[f32]) -> Option<(usize, f32)> {
    first_max_where(values, all_bits)
}

/// [`first_max`] over the values a grammar's mask allows (llguidance's layout: bit `i % 32` of
/// word `i / 32` for value `i`; values past the last word are not allowed). An allowed value of
/// minus infinity counts as none, as in [`first_max`].
pub(crate) fn first_max_allowed(values: &[f32], words: &[u32]) -> Option<(usize, f32)> {
    first_max_where(values, mask_bits(words))
}

// The masks hand each block of LANES values the low LANES bits of a 32-bit word.
const _: () = assert!(LANES == 16);

/// The search behind [`first_max`] and [`first_max_allowed`]: `bits(block)` holds in its low
/// LANES bits which values of the block of LANES at `block * LANES` take part. Inlined into both,
/// so that the unmasked one's constant bits fold away.
#[inline(always)]
fn first_max_where(values: &[f32], bits: impl Fn(usize) -> u32) -> Option<(usize, f32)> {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    // The block of LANES values each lane's value came from (u32, the float's width, so that
    // one vector mask selects both); a row of 2^32 blocks is beyond any vocabulary.
    let mut blocks = [0u32; LANES];
    let mut pieces = values.chunks_exact(LANES);
    for (block, piece) in (&mut pieces).enumerate() {
        let taken = bits(block);
        let block = block as u32;
        for (j, ((lane, at), &v)) in lanes
            .iter_mut()
            .zip(blocks.iter_mut())
            .zip(piece)
            .enumerate()
        {
            let v = if taken >> j & 1 != 0 {
                v
            } else {
                f32::NEG_INFINITY
            };
            let larger = v > *lane;
            *lane = if larger { v } else { *lane };
            *at = if larger { block } else { *at };
        }
    }
    let mut best: Option<(usize, f32)> = None;
    let mut consider = |index: usize, v: f32| {
        let better = match best {
            None => v > f32::NEG_INFINITY,
            Some((at, max)) => v > max || (v == max && index < at),
        };
        if better {
            best = Some((index, v));
        }
    };
    for (lane, (&v, &block)) in lanes.iter().zip(&blocks).enumerate() {
        consider(block as usize * LANES + lane, v);
    }
    let tail = values.len() - pieces.remainder().len();
    let taken = bits(tail / LANES);
    for (offset, &v) in pieces.remainder().iter().enumerate() {
        if taken >> offset & 1 != 0 {
            consider(tail + offset, v);
        }
    }
    best
}

/// `e^x` for `x <= 0` to about 2e-7 relative error, in operations SSE2 has for four lanes at
/// once (float multiply-adds, bit casts, integer adds and shifts), so a loop of it vectorises on
/// any x86-64 CPU. Below -87 it returns e^-87 (about 1.6e-38), which no sum notices; NaN stays
/// NaN. Why not a crate: the standard library's `exp` is a scalar libm call, and no maintained
/// crate offers this one function.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to an integer that lands in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    // ln 2 split in two, the high part with few mantissa bits, so n * LN2_HI is exact
    // (Cody and Waite's range reduction).
    const LN2_HI: f32 = f32::from_bits(0x3F31_7200); // 0.693145751953125
    const LN2_LO: f32 = f32::from_bits(0x35BF_BE8E); // 1.4286068e-6
    let x = if x < -87.0 { -87.0 } else { x };
    // e^x = 2^n * e^g with n = round(x / ln 2) and |g| <= ln(2) / 2.
    let r = x * std::f32::consts::LOG2_E + MAGIC;
    let n_int = (r.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let n = r - MAGIC;
    let g = (x - n * LN2_HI) - n * LN2_LO;
    // e^g for |g| <= 0.347: Taylor to degree 6 (remainder < 1.3e-7).
    let p = 1.0
        + g * (1.0
            + g * (0.5
                + g * (1.0 / 6.0 + g * (1.0 / 24.0 + g * (1.0 / 120.0 + g * (1.0 / 720.0))))));
    p * f32::from_bits((n_int.wrapping_add(127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_first_largest_and_refuses_rows_without_numbers() {
        assert_eq!(argmax(&[0.5, 2.0, f32::NAN, 2.0, -1.0]), Some(1));
        let row: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32).collect();
        assert_eq!(argmax(&row), greedy_pick(&row).map(|(i, _)| i));
        assert_eq!(argmax(&[]), None);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), None);
        assert_eq!(argmax(&[f32::NEG_INFINITY]), None);
    }

    /// A xorshift stream of test numbers from `seed`.
    fn numbers(mut x: u32) -> impl FnMut() -> u32 {
        move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        }
    }

    /// A grammar's mask for a row of `len`: one word short in some rounds, dense in odd rounds
    /// and sparse in even ones.
    fn test_mask(len: usize, round: usize, next: &mut impl FnMut() -> u32) -> Vec<u32> {
        let words = (len.div_ceil(32)).saturating_sub(round % 3 / 2);
        (0..words)
            .map(|_| {
                if round % 2 == 1 {
                    !(next() & next())
                } else {
                    next() & next() & next()
                }
            })
            .collect()
    }

    /// The one-pass search and the maximum, with and without a mask, against the plain
    /// definition, on rows with
    /// ties across lanes and blocks, NaNs, infinities, signed zeros and every length around a
    /// multiple of the lanes, under masks dense and sparse, some shorter than the row.
    #[test]
    fn first_max_is_the_first_of_the_largest() {
        let plain = |row: &[f32], allowed: &dyn Fn(usize) -> bool| {
            let mut best: Option<(usize, f32)> = None;
            for (i, &v) in row.iter().enumerate() {
                if allowed(i) && v > best.map_or(f32::NEG_INFINITY, |(_, m)| m) {
                    best = Some((i, v));
                }
            }
            best
        };
        let mut next = numbers(0x2545_F491);
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
        for len in (0..80usize).chain([1000, 151_936]) {
            for round in 0..20 {
                let row: Vec<f32> = (0..len)
                    .map(|_| match next() % 16 {
                        0 => specials[(next() % 5) as usize],
                        // Few distinct values, so the largest is often tied.
                        _ if round % 2 == 0 => (next() % 7) as f32,
                        _ => (next() % 100_000) as f32 / 7.0 - 5000.0,
                    })
                    .collect();
                let bits = |found: Option<(usize, f32)>| found.map(|(i, v)| (i, v.to_bits()));
                let (ours, theirs) = (first_max(&row), plain(&row, &|_| true));
                assert_eq!(bits(ours), bits(theirs), "length {len}, round {round}");
                let mask = test_mask(len, round, &mut next);
                let allowed = |i: usize| mask.get(i / 32).is_some_and(|w| w >> (i % 32) & 1 != 0);
                let (ours, theirs) = (first_max_allowed(&row, &mask), plain(&row, &allowed));
                assert_eq!(
                    bits(ours),
                    bits(theirs),
                    "masked: length {len}, round {round}"
                );
                // The maxima alone, as top-k's blocks and the sampler's row read them.
                let max = |found: Option<(usize, f32)>| found.map_or(f32::NEG_INFINITY, |(_, m)| m);
                assert_eq!(max_of(&row), max(plain(&row, &|_| true)), "length {len}");
                assert_eq!(
                    max_where(&row, mask_bits(&mask)),
                    max(theirs),
                    "masked: {len}"
                );
            }
        }
    }

    #[test]
    fn sum_where_adds_only_what_the_mask_lets_through() {
        let mut next = numbers(0x9E37_79B9);
        for len in (0..80usize).chain([1000, 4103]) {
            for round in 0..6 {
                let mask = test_mask(len, round, &mut next);
                let allowed = |i: usize| mask.get(i / 32).is_some_and(|w| w >> (i % 32) & 1 != 0);
                // Weights where allowed; NaN where not, which must not reach the sum.
                let row: Vec<f32> = (0..len)
                    .map(|i| {
                        if allowed(i) {
                            (next() % 1000) as f32 / 1000.0
                        } else {
                            f32::NAN
                        }
                    })
                    .collect();
                let plain: f64 = row
                    .iter()
                    .filter(|v| !v.is_nan())
                    .map(|&v| f64::from(v))
                    .sum();
                let ours = sum_where(&row, mask_bits(&mask));
                assert!(
                    (ours - plain).abs() <= 1e-5 * plain.max(1.0),
                    "length {len}, round {round}: {ours} against {plain}"
                );
            }
        }
    }

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
    fn fast_exp_is_accurate() {
        let mut x = 0.0f32;
        while x > -90.0 {
            let exact = f64::from(x).exp();
            let fast = f64::from(exp_nonpositive(x));
            if x > -87.0 {
                assert!(
                    ((fast - exact) / exact).abs() < 3e-7,
                    "x={x}: {fast} vs {exact}"
                );
            }
            x -= 0.0137;
        }
        assert!(exp_nonpositive(-1000.0) < 1e-37);
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
    }

    #[test]
    fn logprob_agrees_with_an_exact_computation_on_a_vocabulary() {
        let mut state = 12345u32;
        let logits: Vec<f32> = (0..151_936)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state % 4000) as f32 / 100.0 - 20.0
            })
            .collect();
        for (token, t) in [(0usize, 1.0f32), (77_777, 0.6), (151_935, 0.2)] {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = logits
                .iter()
                .map(|&l| ((l as f64 - max) / t as f64).exp())
                .sum();
            let exact = (logits[token] as f64 - max) / t as f64 - sum.ln();
            let fast = token_logprob(&logits, token, t).unwrap() as f64;
            assert!(
                (fast - exact).abs() < 1e-4 + exact.abs() * 1e-6,
                "{fast} vs {exact}"
            );
        }
        assert_eq!(token_logprob(&[f32::NAN, 1.0], 1, 1.0), None);
    }

    #[test]
    fn greedy_pick_takes_the_first_maximum() {
        let logits = [0.5f32, 3.0, -1.0, 3.0];
        let (token, lp) = greedy_pick(&logits).unwrap();
        assert_eq!(token, 1);
        assert!((lp - token_logprob(&logits, 1, 1.0).unwrap()).abs() < 1e-6);
        assert_eq!(greedy_pick(&[]), None);
        assert_eq!(greedy_pick(&[f32::NAN]), None);
    }

    #[test]
    fn logprob_is_stable_for_large_logits() {
        let logits = [1000.0f32, 1000.0];
        let lp = token_logprob(&logits, 0, 1.0).unwrap();
        assert!((lp - 0.5f32.ln()).abs() < 1e-6);
    }
}

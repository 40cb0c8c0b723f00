//! Sequences that begin alike, laid out to be evaluated as one.
//!
//! The rollouts of an RL group all begin with the same prompt (392 of a math rollout's 690 or so
//! tokens on the default profile): evaluated one rollout at a time, a group of eight would go
//! through its prompt eight times, forward, recomputed and backward. A pack evaluates the
//! shared beginning once and then each member's continuation, which attends to the shared
//! positions and to its own (docs/ARCHITECTURE.md, `trainer/`). SFT packs a step's samples the
//! same way: those of one profile share its instructions. The gradient of the summed
//! objective is the same: each continuation's attention reaches the shared keys and values as
//! it would in its own sequence, and their gradients add up where the members meet.
//!
//! Layout of the packed rows: the prefix's positions `0..prefix`, then each continuation in
//! turn; a continuation's rows take rotary positions from `prefix` on, as in its own sequence.

use crate::{Result, TrainError};
use std::ops::Range;

/// The fewest leading tokens sequences share to be packed together. An RL group's rollouts
/// share their whole prompt, and the sequences of one profile its instructions (374 of the math
/// profile's 392 prompt tokens), so consecutive groups, or an SFT step's samples, pack too; a
/// threshold this low only keeps out sequences that share next to nothing (not measured: no
/// profile's sequences share so little).
pub const MIN_SHARED: usize = 32;

/// The most rows of one packed pass: up to five math rollouts of the default profile (a
/// 392-token prompt and about 300 tokens each after it). Larger packs share the prompt more
/// widely but keep fewer blocks' products within the budget and hold more memory at once: on
/// the 2-core VM packs of three to eight ran at the same speed, 0.6 to 1.2 GB above one rollout
/// alone while every pass kept a whole 1 GiB of products (docs/BENCHMARKS.md, "The RL update in
/// packs"; since then a pack's budget shrinks with its rows, "What a pack keeps").
pub const MAX_ROWS: usize = 2048;

/// A pack of sequences (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pack {
    /// The packed input tokens: the shared prefix, then each continuation.
    pub inputs: Vec<u32>,
    /// How many of `inputs` every member shares.
    pub prefix: usize,
    /// Each member's continuation: its rows in `inputs` (empty where the member is all prefix).
    pub continuations: Vec<Range<usize>>,
    /// Each member's trained tokens: the packed row that predicts each, and the token.
    pub trained: Vec<Vec<(u32, u32)>>,
}

impl Pack {
    /// Packs `sequences`, each its tokens and which of them carry loss (token `i` is predicted
    /// from the tokens before it; the last token is never an input). One sequence is its own
    /// prefix. A sequence shorter than 2 tokens or with a mask of another length is refused.
    pub fn new(sequences: &[(&[u32], &[bool])]) -> Result<Pack> {
        let Some(&(first, _)) = sequences.first() else {
            return Err(TrainError::Config("a pack of no sequences".into()));
        };
        for &(tokens, trained) in sequences {
            if tokens.len() != trained.len() || tokens.len() < 2 {
                return Err(TrainError::Config(format!(
                    "a sequence needs at least 2 tokens and one mask entry each ({} tokens, {} mask)",
                    tokens.len(),
                    trained.len()
                )));
            }
        }
        let inputs_of = |tokens: &'_ [u32]| tokens.len() - 1;
        let prefix = sequences
            .iter()
            .map(|&(tokens, _)| {
                shared_len(&first[..inputs_of(first)], &tokens[..inputs_of(tokens)])
            })
            .min()
            .unwrap_or(0);
        let mut inputs = first[..prefix].to_vec();
        let mut continuations = Vec::with_capacity(sequences.len());
        let mut trained_rows = Vec::with_capacity(sequences.len());
        for &(tokens, trained) in sequences {
            let start = inputs.len();
            inputs.extend_from_slice(&tokens[prefix..inputs_of(tokens)]);
            continuations.push(start..inputs.len());
            // Input position `i` predicts token `i + 1`; past the prefix it sits at `start`.
            let row = |i: usize| if i < prefix { i } else { start + i - prefix };
            trained_rows.push(
                (1..tokens.len())
                    .filter(|&i| trained[i])
                    .map(|i| (row(i - 1) as u32, tokens[i]))
                    .collect(),
            );
        }
        Ok(Pack {
            inputs,
            prefix,
            continuations,
            trained: trained_rows,
        })
    }

    /// The rotary position of each packed row: a continuation's rows go on from the prefix.
    pub fn positions(&self) -> Vec<u32> {
        let mut positions: Vec<u32> = (0..self.prefix as u32).collect();
        for rows in &self.continuations {
            positions.extend((self.prefix..self.prefix + rows.len()).map(|p| p as u32));
        }
        positions
    }
}

/// Splits `sequences` (as [`Pack::new`] takes them) into runs of consecutive ones to pack together: a run grows while its
/// members' inputs (each sequence but its last token) share at least [`MIN_SHARED`] leading
/// tokens and its pack stays within [`MAX_ROWS`] rows (a longer sequence is a run of its own).
/// The rows bound what one pass holds at once: its activations and kept products grow with
/// them.
pub fn runs(sequences: &[(&[u32], &[bool])]) -> Vec<Range<usize>> {
    let tokens: Vec<&[u32]> = sequences.iter().map(|&(tokens, _)| tokens).collect();
    runs_within(&tokens, MIN_SHARED, MAX_ROWS)
}

/// [`runs`] with other bounds.
fn runs_within(sequences: &[&[u32]], min_shared: usize, max_rows: usize) -> Vec<Range<usize>> {
    let inputs = |s: &[u32]| s.len().saturating_sub(1);
    let mut runs = Vec::new();
    let mut start = 0;
    while start < sequences.len() {
        let first = &sequences[start][..inputs(sequences[start])];
        let (mut prefix, mut total) = (first.len(), first.len());
        let mut end = start + 1;
        while let Some(&next) = sequences.get(end) {
            let own = &next[..inputs(next)];
            let shared = shared_len(first, own).min(prefix);
            let members = end + 1 - start;
            // Every member's inputs, less the shared ones counted once.
            let rows = total + own.len() - (members - 1) * shared;
            if shared < min_shared || rows > max_rows {
                break;
            }
            (prefix, total) = (shared, total + own.len());
            end += 1;
        }
        runs.push(start..end);
        start = end;
    }
    runs
}

/// How many leading tokens `a` and `b` share.
pub fn shared_len(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sequence_is_its_own_prefix() -> Result<()> {
        let tokens = [5, 6, 7, 8];
        let pack = Pack::new(&[(&tokens, &[false, false, true, true])])?;
        assert_eq!(pack.inputs, [5, 6, 7]);
        assert_eq!(pack.prefix, 3);
        assert_eq!(pack.continuations.len(), 1);
        assert!(pack.continuations[0].is_empty());
        assert_eq!(pack.trained, [vec![(1, 7), (2, 8)]]);
        assert_eq!(pack.positions(), [0, 1, 2]);
        Ok(())
    }

    #[test]
    fn continuations_follow_the_shared_prefix_and_keep_their_positions() -> Result<()> {
        let a = [1, 2, 3, 10, 11, 12];
        let b = [1, 2, 3, 20, 21];
        let c = [1, 2, 9, 30];
        let mask = |t: &[u32]| -> Vec<bool> { t.iter().map(|&x| x >= 9).collect() };
        let (ma, mb, mc) = (mask(&a), mask(&b), mask(&c));
        let pack = Pack::new(&[(&a, &ma), (&b, &mb), (&c, &mc)])?;
        // Only `1, 2` is shared by all three.
        assert_eq!(pack.prefix, 2);
        assert_eq!(pack.inputs, [1, 2, 3, 10, 11, 3, 20, 9]);
        assert_eq!(pack.continuations, [2..5, 5..7, 7..8]);
        assert_eq!(pack.positions(), [0, 1, 2, 3, 4, 2, 3, 2]);
        // a: 10 from its row of 3 (row 2), 11 from 10 (row 3), 12 from 11 (row 4).
        assert_eq!(pack.trained[0], [(2, 10), (3, 11), (4, 12)]);
        assert_eq!(pack.trained[1], [(5, 20), (6, 21)]);
        // c: 9 is predicted from the shared row of 2, then 30 from its own row of 9.
        assert_eq!(pack.trained[2], [(1, 9), (7, 30)]);
        for (member, (tokens, _)) in [(&a[..], &ma), (&b[..], &mb), (&c[..], &mc)]
            .into_iter()
            .enumerate()
        {
            // Each member's inputs are the prefix and its continuation, in order.
            let rows = &pack.continuations[member];
            let own: Vec<u32> = pack.inputs[..pack.prefix]
                .iter()
                .chain(&pack.inputs[rows.clone()])
                .copied()
                .collect();
            assert_eq!(own, tokens[..tokens.len() - 1]);
        }
        Ok(())
    }

    #[test]
    fn a_member_that_is_all_prefix_has_no_continuation() -> Result<()> {
        let a = [1, 2, 3];
        let b = [1, 2, 3, 4];
        let pack = Pack::new(&[(&a, &[false, true, true]), (&b, &[false, true, true, true])])?;
        assert_eq!(pack.prefix, 2);
        assert_eq!(pack.continuations, [2..2, 2..3]);
        assert_eq!(pack.trained[0], [(0, 2), (1, 3)]);
        assert_eq!(pack.trained[1], [(0, 2), (1, 3), (2, 4)]);
        Ok(())
    }

    #[test]
    fn runs_hold_sequences_that_share_enough_within_the_rows() {
        let group = |lead: u32, tail: u32| -> Vec<u32> { [vec![lead; 4], vec![tail; 3]].concat() };
        let (a, b, c) = (group(1, 2), group(1, 3), group(1, 4));
        let (d, e) = (group(5, 6), group(5, 7));
        let all: Vec<&[u32]> = vec![&a, &b, &c, &d, &e];
        // Inputs of 6 tokens sharing 4 within a group: a pack of three is 4 + 3 · 2 rows.
        assert_eq!(runs_within(&all, 4, 10), [0..3, 3..5]);
        // Fewer rows: two members at most (8 rows), the third starts a run.
        assert_eq!(runs_within(&all, 4, 9), [0..2, 2..3, 3..5]);
        // Asking for more shared tokens than they have packs nothing.
        assert_eq!(runs_within(&all, 5, 100), [0..1, 1..2, 2..3, 3..4, 4..5]);
        // Checked against the pack itself.
        let pack = Pack::new(&[(&a, &[true; 7]), (&b, &[true; 7]), (&c, &[true; 7])]).unwrap();
        assert_eq!(pack.inputs.len(), 10);
        assert!(runs(&[]).is_empty());
    }

    proptest::proptest! {
        /// Whatever the sequences, each member is recovered from the pack: its inputs are the
        /// prefix and its continuation, those rows sit at its own positions, and each trained
        /// row predicts the member's own next token.
        #[test]
        fn every_member_is_recovered_from_the_pack(
            shared in proptest::collection::vec(0u32..4, 0..6),
            tails in proptest::collection::vec(
                proptest::collection::vec((0u32..4, proptest::bool::ANY), 0..6),
                1..5,
            ),
        ) {
            let members: Vec<(Vec<u32>, Vec<bool>)> = tails
                .iter()
                .map(|tail| {
                    let tokens: Vec<u32> = shared.iter().copied().chain(tail.iter().map(|t| t.0)).collect();
                    let trained = (0..shared.len()).map(|_| false).chain(tail.iter().map(|t| t.1)).collect();
                    (tokens, trained)
                })
                .filter(|(tokens, _)| tokens.len() >= 2)
                .collect();
            proptest::prop_assume!(!members.is_empty());
            let sequences: Vec<(&[u32], &[bool])> =
                members.iter().map(|(t, m)| (&t[..], &m[..])).collect();
            let pack = Pack::new(&sequences).unwrap();
            let positions = pack.positions();
            proptest::prop_assert_eq!(positions.len(), pack.inputs.len());
            for (m, (tokens, trained)) in members.iter().enumerate() {
                let rows = &pack.continuations[m];
                let own: Vec<u32> = pack.inputs[..pack.prefix]
                    .iter()
                    .chain(&pack.inputs[rows.clone()])
                    .copied()
                    .collect();
                proptest::prop_assert_eq!(&own[..], &tokens[..tokens.len() - 1]);
                let own_positions: Vec<u32> = (0..pack.prefix)
                    .chain(rows.clone())
                    .map(|r| positions[r])
                    .collect();
                let want: Vec<u32> = (0..own.len() as u32).collect();
                proptest::prop_assert_eq!(own_positions, want);
                let expected: Vec<u32> =
                    (1..tokens.len()).filter(|&i| trained[i]).map(|i| tokens[i]).collect();
                let labels: Vec<u32> = pack.trained[m].iter().map(|&(_, label)| label).collect();
                proptest::prop_assert_eq!(labels, expected);
                for &(row, label) in &pack.trained[m] {
                    let row = row as usize;
                    // The row is the member's: shared, or in its own continuation.
                    proptest::prop_assert!(row < pack.prefix || rows.contains(&row));
                    let at = positions[row] as usize;
                    proptest::prop_assert_eq!(tokens[at + 1], label);
                }
            }
        }
    }

    #[test]
    fn bad_sequences_are_refused() {
        assert!(Pack::new(&[]).is_err());
        assert!(Pack::new(&[(&[1], &[true])]).is_err());
        assert!(Pack::new(&[(&[1, 2], &[true])]).is_err());
    }
}

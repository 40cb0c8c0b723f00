//! Which KV stream holds each sequence's cells, and the moves that put a step's sequences in
//! consecutive streams.
//!
//! The batch scheduler gives every sequence a KV stream of its own (llama.cpp's non-unified
//! cache), so a token attends only to its own sequence's cells; in one shared stream it would
//! scan every sequence's cells and skip the others' one by one, a cost that grows with the
//! number of sequences (docs/BENCHMARKS.md, "A KV stream per sequence"). llama.cpp evaluates a
//! step over several streams in one pass only while their ids are consecutive (its equal split
//! takes sequence ids in increasing order, one after another), so a step over streams 0, 1 and
//! 3 is two passes over the weights. A sequence out of the batch (running a tool, or done)
//! leaves such a hole. So one stream more than the sequences is kept spare, and before a step
//! the sequences are moved until the step's own are consecutive: a move copies a stream into
//! the spare one and the stream it left becomes the spare.

use catena_engine_api::plan::batched_kv_caches;

/// The stream of each sequence, and the spare one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Streams {
    of_seq: Vec<usize>,
    spare: usize,
}

/// Sequence `seq`'s cells go from stream `from` to stream `to` (the spare one until then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Move {
    pub seq: usize,
    pub from: usize,
    pub to: usize,
}

impl Streams {
    /// Sequence `i` in stream `i`; with more than one sequence, one stream more, spare.
    pub fn new(sequences: usize) -> Self {
        Streams {
            of_seq: (0..sequences).collect(),
            spare: sequences,
        }
    }

    /// How many streams the context needs (the plan counts them as KV caches).
    pub fn count(&self) -> usize {
        let sequences = u32::try_from(self.of_seq.len()).unwrap_or(u32::MAX);
        batched_kv_caches(sequences) as usize
    }

    /// The stream that holds sequence `seq`'s cells.
    pub fn of(&self, seq: usize) -> usize {
        self.of_seq[seq]
    }

    /// Moves, in the order to make them, after which the (distinct) sequences `seqs` are in
    /// consecutive streams; the map already says where they end. Each move is into the stream
    /// spare at that moment. Of all the places the sequences could end, the one with the
    /// fewest moves is taken.
    pub fn gather(&mut self, seqs: &[usize]) -> Vec<Move> {
        let wanted = seqs.len();
        let streams = self.count();
        if wanted <= 1 || wanted >= streams {
            return Vec::new();
        }
        let mut planned = vec![false; streams];
        for &seq in seqs {
            planned[self.of_seq[seq]] = true;
        }
        // A sequence outside the window costs a move, and its place in the window is either
        // the spare stream or costs a second move (the sequence there stepping aside).
        let cost = |start: usize| {
            let window = start..start + wanted;
            let outside = wanted - planned[window.clone()].iter().filter(|&&p| p).count();
            2 * outside - usize::from(outside > 0 && window.contains(&self.spare))
        };
        let Some(start) = (0..=streams - wanted).min_by_key(|&start| cost(start)) else {
            return Vec::new();
        };
        let window = start..start + wanted;
        // The spare stream, where it is a hole, is filled first (popped last from this list).
        let mut holes: Vec<usize> = window.clone().filter(|&s| !planned[s]).collect();
        holes.sort_by_key(|&s| s == self.spare);
        let mut moves = Vec::new();
        for &seq in seqs {
            if window.contains(&self.of_seq[seq]) {
                continue;
            }
            let Some(hole) = holes.pop() else { break };
            if hole != self.spare {
                // The sequence in the hole is not in this step: it steps aside into the spare.
                if let Some(idle) = self.of_seq.iter().position(|&s| s == hole) {
                    moves.push(self.relocate(idle));
                }
            }
            moves.push(self.relocate(seq));
        }
        moves
    }

    /// Moves `seq` into the spare stream; the one it leaves becomes the spare.
    fn relocate(&mut self, seq: usize) -> Move {
        let from = self.of_seq[seq];
        let to = self.spare;
        self.of_seq[seq] = to;
        self.spare = from;
        Move { seq, from, to }
    }
}

#[cfg(test)]
mod tests {
    use super::{Move, Streams};

    /// Every arrangement of 4 sequences over 5 streams, gathering every subset of them.
    #[test]
    fn every_subset_ends_in_consecutive_streams_through_the_spare() {
        let sequences = 4;
        let mut arrangements = Vec::new();
        permutations(&mut (0..=sequences).collect(), 0, &mut arrangements);
        let mut most = 0;
        for streams in &arrangements {
            for subset in 0u32..(1 << sequences) {
                let seqs: Vec<usize> = (0..sequences).filter(|&s| subset & (1 << s) != 0).collect();
                let before = Streams {
                    of_seq: streams[..sequences].to_vec(),
                    spare: streams[sequences],
                };
                let mut after = before.clone();
                let moves = after.gather(&seqs);
                most = most.max(moves.len());
                // Replaying the moves from the arrangement before gives the map after, each
                // move going into the spare stream of its moment.
                let mut replay = before.clone();
                for &Move { seq, from, to } in &moves {
                    assert_eq!(replay.of_seq[seq], from);
                    assert_eq!(replay.spare, to);
                    replay.of_seq[seq] = to;
                    replay.spare = from;
                }
                assert_eq!(replay, after);
                // Still one stream per sequence and one spare.
                let mut used: Vec<usize> = after.of_seq.clone();
                used.push(after.spare);
                used.sort_unstable();
                assert_eq!(used, (0..=sequences).collect::<Vec<_>>());
                // The sequences asked for are consecutive.
                let mut ends: Vec<usize> = seqs.iter().map(|&s| after.of(s)).collect();
                ends.sort_unstable();
                assert!(
                    ends.windows(2).all(|w| w[1] == w[0] + 1),
                    "{before:?} {seqs:?}"
                );
                // Already consecutive: nothing moves.
                let mut starts: Vec<usize> = seqs.iter().map(|&s| before.of(s)).collect();
                starts.sort_unstable();
                if starts.windows(2).all(|w| w[1] == w[0] + 1) {
                    assert!(moves.is_empty());
                }
            }
        }
        // One hole in four streams costs one move, or two; never more than two per sequence.
        assert!(most <= 2 * sequences, "{most} moves");
    }

    #[test]
    fn a_hole_is_filled_by_the_nearest_sequence_or_the_spare() {
        // Streams 0..4 hold sequences 0..4, stream 4 is spare; sequence 1 is out of the step.
        let mut streams = Streams::new(4);
        assert_eq!(streams.count(), 5);
        let moves = streams.gather(&[0, 2, 3]);
        // The window 2..5 holds two of them and the spare: sequence 0 moves into the spare.
        assert_eq!(
            moves,
            vec![Move {
                seq: 0,
                from: 0,
                to: 4
            }]
        );
        assert_eq!((streams.of(0), streams.spare), (4, 0));
        assert_eq!(Streams::new(1).count(), 1);
        assert!(Streams::new(1).gather(&[0]).is_empty());
    }

    fn permutations(items: &mut Vec<usize>, at: usize, out: &mut Vec<Vec<usize>>) {
        if at == items.len() {
            out.push(items.clone());
            return;
        }
        for i in at..items.len() {
            items.swap(at, i);
            permutations(items, at + 1, out);
            items.swap(at, i);
        }
    }
}

//! Noticing a generation that has fallen into a loop.
//!
//! A small model sometimes writes the same line or paragraph over and over (a plan whose items
//! repeat with only their number changing, a line of `<===>` a hundred times) until a budget
//! runs out: of the 70 chains of the README's first example over ten seeds, 20 spent the rest of
//! their time so (docs/BENCHMARKS.md, "Loops"). Such text never turns into an answer, so the
//! agent asks the engine to stop it early ([`crate::GenerateLimits::stop_on_repetition`]).
//!
//! The test is near-periodicity of token ids: the latest [`WINDOW`] tokens, each compared with
//! the token one period back, for every period up to [`MAX_PERIOD`]; when all but
//! [`TOLERANCE`] of them agree for some period, the text is the same unit repeated at least
//! three times with at most a few tokens changed (a counter, a word). Prose, programs and lists
//! fall far short of that: a line that differs in one number of ten tokens agrees on 90%.

use std::collections::VecDeque;

/// The longest repeating unit looked for, in tokens (a paragraph).
pub const MAX_PERIOD: usize = 128;
/// How many of the latest tokens must repeat: three units of the longest period.
pub const WINDOW: usize = 3 * MAX_PERIOD;
/// How many tokens of the window may differ from the token one period back.
pub const TOLERANCE: usize = WINDOW / 16;

/// Watches one generation's tokens, one at a time.
#[derive(Debug, Clone)]
pub struct RepetitionWatch {
    /// The latest `WINDOW + MAX_PERIOD` tokens, oldest first.
    recent: VecDeque<i32>,
    /// For period `p` (at index `p - 1`): how many tokens of the window equal the token `p`
    /// before them.
    agreeing: Vec<usize>,
    /// Tokens seen in all.
    seen: usize,
}

impl Default for RepetitionWatch {
    fn default() -> Self {
        RepetitionWatch {
            recent: VecDeque::with_capacity(WINDOW + MAX_PERIOD + 1),
            agreeing: vec![0; MAX_PERIOD],
            seen: 0,
        }
    }
}

impl RepetitionWatch {
    /// Takes the next token; returns the shortest period the latest [`WINDOW`] tokens repeat
    /// with, once they do.
    pub fn push(&mut self, token: i32) -> Option<usize> {
        self.recent.push_back(token);
        self.seen += 1;
        let newest = self.recent.len() - 1;
        // The token leaving the window, when the window is full.
        let leaving = (self.seen > WINDOW).then(|| newest - WINDOW);
        for (slot, agreeing) in self.agreeing.iter_mut().enumerate() {
            let period = slot + 1;
            if newest >= period && self.recent[newest] == self.recent[newest - period] {
                *agreeing += 1;
            }
            if let Some(old) = leaving
                && old >= period
                && self.recent[old] == self.recent[old - period]
            {
                *agreeing -= 1;
            }
        }
        if self.recent.len() > WINDOW + MAX_PERIOD {
            self.recent.pop_front();
        }
        (1..=MAX_PERIOD).find(|&period| {
            // Every token of the window has one a period before it, within this generation.
            self.seen >= WINDOW + period && self.agreeing[period - 1] + TOLERANCE >= WINDOW
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token count at which `tokens` is first seen to repeat, and the period.
    fn first_loop(tokens: impl IntoIterator<Item = i32>) -> Option<(usize, usize)> {
        let mut watch = RepetitionWatch::default();
        tokens
            .into_iter()
            .enumerate()
            .find_map(|(i, t)| watch.push(t).map(|p| (i + 1, p)))
    }

    /// A deterministic stream with no structure (xorshift), ids below `range`.
    fn noise(seed: u64, range: i32, n: usize) -> Vec<i32> {
        let mut x = seed.max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % range as u64) as i32
            })
            .collect()
    }

    #[test]
    fn a_repeated_line_is_caught_after_the_window() {
        let line = [10, 11, 12];
        let stream = noise(1, 1000, 50)
            .into_iter()
            .chain(line.iter().copied().cycle().take(2000));
        // Caught once all but the tolerated few of the window agree: the first three tokens
        // of the line have no copy before them, then 360 more do.
        assert_eq!(first_loop(stream), Some((50 + 3 + WINDOW - TOLERANCE, 3)));
    }

    #[test]
    fn a_paragraph_with_a_counter_is_caught() {
        // 100-token paragraphs that differ only in their first token (an item's number).
        let paragraph = noise(7, 5000, 99);
        let stream: Vec<i32> = (0..10)
            .flat_map(|n| std::iter::once(60_000 + n).chain(paragraph.iter().copied()))
            .collect();
        let (at, period) = first_loop(stream).expect("caught");
        assert_eq!(period, 100);
        assert!(at <= WINDOW + 100 + TOLERANCE, "caught at {at}");
    }

    #[test]
    fn a_unit_longer_than_the_longest_period_is_not_looked_for() {
        let paragraph = noise(3, 5000, MAX_PERIOD + 1);
        let stream = paragraph.iter().copied().cycle().take(5000);
        assert_eq!(first_loop(stream), None);
    }

    #[test]
    fn text_without_a_loop_is_never_stopped() {
        assert_eq!(first_loop(noise(5, 150_000, 20_000)), None);
        // Small vocabularies agree by chance more often; 50 ids agree 2% of the time.
        assert_eq!(first_loop(noise(9, 50, 20_000)), None);
    }

    #[test]
    fn lines_that_differ_in_a_number_are_not_a_loop() {
        // `assert f(N) == M` as ten tokens, N and M changing: 80% agree at period 10.
        let stream = (0..2000).flat_map(|n| [1, 2, 3, 4, 5000 + n, 6, 7, 8, 9000 + n, 10]);
        assert_eq!(first_loop(stream), None);
    }

    #[test]
    fn the_shortest_period_is_reported() {
        let stream = std::iter::repeat_n(42, 1000);
        assert_eq!(first_loop(stream), Some((WINDOW + 1, 1)));
    }
}

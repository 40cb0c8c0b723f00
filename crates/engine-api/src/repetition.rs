//! Noticing a generation that has fallen into a loop.
//!
//! A small model sometimes writes the same line or paragraph over and over (a plan whose items
//! repeat with only their number changing, a line of `<===>` a hundred times, a whole thought of
//! five paragraphs written again word for word) until a budget runs out: of the 70 chains of the
//! README's first example over ten seeds, 20 spent the rest of their time so (docs/BENCHMARKS.md,
//! "Loops"). Such text never turns into an answer, so the agent asks the engine to stop it early
//! ([`crate::GenerateLimits::stop_on_repetition`]).
//!
//! The test is near-periodicity of token ids: for every period up to [`MAX_PERIOD`], the latest
//! [`window`]`(period)` tokens, each compared with the token one period back; when all but a
//! sixteenth of them agree for some period, the text is the same unit repeated at least three
//! times with at most a few tokens changed (a counter, a word). Prose, programs and lists fall
//! far short of that: a line that differs in one number of ten tokens agrees on 90%.

/// The longest repeating unit looked for, in tokens: a thought of several paragraphs (one such
/// loop of the README's first example repeated a unit of 1,041 characters, some 220 tokens, for
/// 95 seconds).
pub const MAX_PERIOD: usize = 512;
/// The fewest latest tokens that must repeat, whatever the period: three units of 128 tokens.
pub const MIN_WINDOW: usize = 384;

/// How many of the latest tokens must repeat with `period`: three units, and never fewer than
/// [`MIN_WINDOW`] (a short line repeated a few times is not yet a loop).
pub fn window(period: usize) -> usize {
    (3 * period).max(MIN_WINDOW)
}

/// How many tokens of a window may differ from the token one period back: a sixteenth.
pub fn tolerance(window: usize) -> usize {
    window / 16
}

/// Tokens a comparison may reach back: the longest window and a period before its oldest token.
const KEPT: usize = 3 * MAX_PERIOD + MAX_PERIOD;

/// Watches one generation's tokens, one at a time.
#[derive(Debug, Clone)]
pub struct RepetitionWatch {
    /// The latest tokens, oldest first: `recent[i]` is token `dropped + i` of the generation.
    /// Every token so far, or at least the latest `KEPT + 1`: older ones are dropped `KEPT` at
    /// a time, so the comparisons read a plain slice.
    recent: Vec<i32>,
    dropped: usize,
    /// For period `p` (at index `p - 1`): how many tokens of its window equal the token `p`
    /// before them.
    agreeing: Vec<usize>,
}

impl Default for RepetitionWatch {
    fn default() -> Self {
        RepetitionWatch {
            recent: Vec::with_capacity(2 * KEPT),
            dropped: 0,
            agreeing: vec![0; MAX_PERIOD],
        }
    }
}

impl RepetitionWatch {
    /// Takes the next token; returns the shortest period the latest tokens repeat with (over
    /// that period's `window`), once they do. O(`MAX_PERIOD`) a token.
    pub fn push(&mut self, token: i32) -> Option<usize> {
        if self.recent.len() == 2 * KEPT {
            self.recent.drain(..KEPT);
            self.dropped += KEPT;
        }
        self.recent.push(token);
        let seen = self.dropped + self.recent.len();
        let (recent, dropped) = (&self.recent, self.dropped);
        // Whether token `at` of the generation equals the one `period` before it (it has one).
        // Both are kept: `at` is the newest token or one leaving a window, at most `KEPT -
        // period` back.
        let agrees = |at: usize, period: usize| {
            at >= period && recent[at - dropped] == recent[at - period - dropped]
        };
        for (slot, agreeing) in self.agreeing.iter_mut().enumerate() {
            let period = slot + 1;
            if agrees(seen - 1, period) {
                *agreeing += 1;
            }
            // The token leaving this period's window, once it is full, uncounted exactly when
            // it was counted.
            let span = window(period);
            if seen > span && agrees(seen - 1 - span, period) {
                *agreeing -= 1;
            }
        }
        (1..=MAX_PERIOD).find(|&period| {
            let span = window(period);
            // Every token of the window has one a period before it, within this generation.
            seen >= span + period && self.agreeing[period - 1] + tolerance(span) >= span
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
        let span = window(3);
        assert_eq!(span, MIN_WINDOW);
        assert_eq!(
            first_loop(stream),
            Some((50 + 3 + span - tolerance(span), 3))
        );
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
        assert!(
            at <= MIN_WINDOW + 100 + tolerance(MIN_WINDOW),
            "caught at {at}"
        );
    }

    #[test]
    fn a_long_thought_written_again_is_caught_after_three_copies() {
        // A thought of 220 tokens written over and over, after 50 tokens of other text: one of
        // the README's first example's chains did this for 95 seconds.
        let thought = noise(11, 5000, 220);
        let stream = noise(2, 5000, 50)
            .into_iter()
            .chain(thought.iter().copied().cycle().take(5000));
        let span = window(220);
        assert_eq!(span, 660);
        // Its first copy has nothing to agree with; three copies more, less the tolerance.
        assert_eq!(
            first_loop(stream),
            Some((50 + 220 + span - tolerance(span), 220))
        );
    }

    #[test]
    fn a_long_unit_written_twice_is_not_a_loop() {
        // A program written again after its first copy (a model rewriting what it just wrote),
        // then other text: two copies of a long unit fall far short of its window.
        let program = noise(13, 5000, 300);
        let stream = noise(4, 5000, 50)
            .into_iter()
            .chain(program.iter().copied())
            .chain(program.iter().copied())
            .chain(noise(6, 5000, 3000));
        assert_eq!(first_loop(stream), None);
    }

    #[test]
    fn a_unit_longer_than_the_longest_period_is_not_looked_for() {
        let paragraph = noise(3, 5000, MAX_PERIOD + 1);
        let stream = paragraph.iter().copied().cycle().take(3000);
        assert!(3000 > window(MAX_PERIOD + 1) + MAX_PERIOD + 1);
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
        assert_eq!(first_loop(stream), Some((MIN_WINDOW + 1, 1)));
    }
}

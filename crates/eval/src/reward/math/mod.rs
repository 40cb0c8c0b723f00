//! Math answers (PROTOCOL.md §6: answers are equal as numbers, `\boxed{1/2}` equals `0.5`):
//! the `\boxed{}` contents of both sides are cleaned of LaTeX decoration, read as exact
//! rationals when they are numbers, compared item by item when they are tuples, and compared as
//! normalised strings otherwise (so string answers such as `REDNUHTLICNEP` must match exactly).
//!
//! Decisions where answers are ambiguous:
//! - A percent sign is decoration: `50\%` equals `50` (not `0.5`), since benchmarks state the
//!   unit in the question and give the bare number as the answer.
//! - Python's float notation is a number (`1e3` equals `1000`), since a model often copies a
//!   program's printed output; a lone `e` is not.
//! - `1,000` (no brackets, groups of three) is one thousand; `1,2` and `(1, 000)` are tuples.
//! - A tuple's brackets only have to agree when both sides have them: `(1, 2)` equals `1,2`
//!   but not `[1, 2]`.
//! - An answer that is number syntax but no number (`1/0`, `\frac{1}{2`) is wrong, even
//!   against the same text.

mod clean;
mod expr;

use crate::normalise_answer;
use catena_protocol::boxed;
use clean::clean;
use expr::{Numeric, evaluate, is_thousands};
use num_rational::BigRational;

/// Whether `given` (a run's answer) is mathematically the same as `expected`.
pub fn math_equivalent(given: &str, expected: &str) -> bool {
    let given = clean(boxed(given).unwrap_or(given));
    let expected = clean(boxed(expected).unwrap_or(expected));
    if given.is_empty() || expected.is_empty() {
        return false;
    }
    match (Tuple::split(&given), Tuple::split(&expected)) {
        (None, None) => same_item(&given, &expected),
        (Some(a), Some(b)) => {
            let brackets_agree = a.brackets.is_none_or(|x| b.brackets.is_none_or(|y| x == y));
            brackets_agree
                && a.items.len() == b.items.len()
                && a.items.iter().zip(&b.items).all(|(x, y)| same_item(x, y))
        }
        _ => false,
    }
}

/// Whether `answer` (a run's answer) is a number: `\boxed{1,229}`, `\frac{1}{2}`, `1e3`; not
/// `\frac{\pi}{2}`, `(1, 2)` or `1/0`.
pub fn is_number(answer: &str) -> bool {
    matches!(
        evaluate(&clean(boxed(answer).unwrap_or(answer))),
        Numeric::Value(_)
    )
}

/// Whether `answer` (a run's answer) is a number that `printed` (what a program printed) shows
/// as one of its words: `\boxed{1229}` is in `primes below 10000: 1229` and in `[1229]`, not in
/// `12290`. An answer that is not a number is never found.
pub fn printed_number(answer: &str, printed: &str) -> bool {
    let Numeric::Value(value) = evaluate(&clean(boxed(answer).unwrap_or(answer))) else {
        return false;
    };
    printed_values(printed).any(|(_, v)| v == value)
}

/// The number on the last line `printed` has (its last line that is not blank) when that line
/// shows exactly one: `1229` of `primes: 1229`, nothing of `1229 primes below 10000` (which of
/// the two is meant?) or of `True`.
pub fn last_printed_number(printed: &str) -> Option<&str> {
    let line = printed.lines().rev().find(|l| !l.trim().is_empty())?;
    let mut values = printed_values(line);
    let (word, _) = values.next()?;
    values.next().is_none().then_some(word)
}

/// The words of `printed` that are numbers, with their values. Words are split at spaces, `=`
/// and `:`; their brackets, quotes and trailing punctuation are not part of the number; only
/// words that start as numbers count (`x2` and `e` are not values).
fn printed_values(printed: &str) -> impl Iterator<Item = (&str, BigRational)> {
    printed
        .split(|c: char| c.is_whitespace() || c == '=' || c == ':')
        .map(|word| {
            word.trim_start_matches(['(', '[', '{', '<', '\'', '"'])
                .trim_end_matches([')', ']', '}', '>', '\'', '"', ',', '.', ';', '!', '?'])
        })
        .filter(|word| {
            let digits = word.strip_prefix('-').unwrap_or(word);
            digits.starts_with(|c: char| c.is_ascii_digit())
        })
        .filter_map(|word| match evaluate(word) {
            Numeric::Value(value) => Some((word, value)),
            _ => None,
        })
}

/// One value: equal numbers, or equal normalised strings when neither is a number.
fn same_item(a: &str, b: &str) -> bool {
    match (evaluate(a), evaluate(b)) {
        (Numeric::Value(x), Numeric::Value(y)) => x == y,
        (Numeric::Malformed, _) | (_, Numeric::Malformed) => false,
        _ => {
            let (a, b) = (normalise_answer(a), normalise_answer(b));
            !a.is_empty() && a == b
        }
    }
}

/// A comma-separated answer with two items or more, optionally in brackets.
struct Tuple<'a> {
    brackets: Option<(u8, u8)>,
    items: Vec<&'a str>,
}

impl<'a> Tuple<'a> {
    /// The items of `text` (cleaned: no spaces), or `None` when it is one item.
    fn split(text: &'a str) -> Option<Tuple<'a>> {
        let bytes = text.as_bytes();
        let enclosed = matches!(bytes.first(), Some(b'(' | b'['))
            && matches!(bytes.last(), Some(b')' | b']'))
            && closes_at_end(bytes);
        let (brackets, body) = if enclosed {
            (
                Some((bytes[0], bytes[bytes.len() - 1])),
                &text[1..text.len() - 1],
            )
        } else if is_thousands(text) {
            return None;
        } else {
            (None, text)
        };
        let mut items = Vec::new();
        let mut depth = 0usize;
        let mut start = 0;
        for (i, b) in body.bytes().enumerate() {
            match b {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                b',' if depth == 0 => {
                    items.push(&body[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&body[start..]);
        (items.len() >= 2).then_some(Tuple { brackets, items })
    }
}

/// Whether the bracket opening `bytes` closes at its last byte (`(1,2)`, not `(1)+(2)`).
fn closes_at_end(bytes: &[u8]) -> bool {
    let mut depth = 0usize;
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i == bytes.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests;

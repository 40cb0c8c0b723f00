//! What observations share (PROTOCOL.md §3): the length limit, and the line a search with no
//! results gets.

use super::ToolOutput;
use catena_protocol::Tag;
use std::time::Instant;

/// The observation of a search (web or wiki) that found nothing.
pub fn no_results(query: &str) -> String {
    format!("No results found for query: '{query}'. Use a less specific query.")
}

/// What the duplicate guard answers to a repeated search (PROTOCOL.md §2, step 6).
pub const SEARCH_ALREADY_DONE: &str =
    "This query was already searched; its results are above. Try a more varied query.";

/// A search tool's call: an empty query gets a note saying how to write one; any other is
/// given to `search`, which returns the observation and whether it found anything.
pub(crate) fn search_call(
    input: &str,
    tag: Tag,
    search: impl FnOnce(&str) -> (String, bool),
) -> ToolOutput {
    let started = Instant::now();
    let query = input.trim();
    let (observation, success) = if query.is_empty() {
        (
            format!(
                "The search needs a query: write the words to look for inside {}{}.",
                tag.open(),
                tag.close()
            ),
            false,
        )
    } else {
        search(query)
    };
    ToolOutput {
        observation,
        success,
        elapsed: started.elapsed(),
    }
}

/// Observations longer than this many characters are cut.
pub const OBSERVATION_LIMIT: usize = 1536;

/// Cuts `text` to [`OBSERVATION_LIMIT`] characters by keeping the first and the last half, with
/// a one-line notice between them. Characters, not bytes, as the reference (Python) counts them.
pub fn cut_observation(text: &str) -> String {
    let total = text.chars().count();
    if total <= OBSERVATION_LIMIT {
        return text.to_string();
    }
    let half = OBSERVATION_LIMIT / 2;
    let head_end = text.char_indices().nth(half).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(total - half)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n... [{} characters truncated] ...\n{}",
        &text[..head_end],
        total - 2 * half,
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        let text = "x".repeat(OBSERVATION_LIMIT);
        assert_eq!(cut_observation(&text), text);
    }

    #[test]
    fn long_text_keeps_768_each_side() {
        let text: String = (0..5000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let cut = cut_observation(&text);
        let lines: Vec<&str> = cut.split('\n').collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], &text[..768]);
        assert_eq!(lines[1], "... [3464 characters truncated] ...");
        assert_eq!(lines[2], &text[5000 - 768..]);
    }

    #[test]
    fn counts_characters_not_bytes() {
        let text = "é".repeat(2000);
        let cut = cut_observation(&text);
        assert!(cut.starts_with(&"é".repeat(768)));
        assert!(cut.ends_with(&"é".repeat(768)));
        assert!(cut.contains("[464 characters truncated]"));
    }
}

//! The text of one generation as its tokens arrive, for both the single session and the batched
//! sequences: whole characters only, and the first stop string ends it.

use crate::StopMatcher;
use crate::utf8::Utf8Stream;

/// What one sampled token's bytes did to the text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TokenText {
    /// Text to stream now (empty while a character is incomplete).
    Streamed(String),
    /// Stop string `index` completed: `streamed` is this token's text up to its end. Where the
    /// token carried text past it, `replace_with` is the part kept: the context must hold that
    /// text's tokens instead of the token, so it holds exactly the returned text.
    Stopped {
        index: usize,
        streamed: String,
        replace_with: Option<String>,
    },
}

#[derive(Debug, Default)]
pub(crate) struct GeneratedText {
    text: String,
    utf8: Utf8Stream,
    /// Bytes of `text` already searched for stop strings.
    checked: usize,
}

impl GeneratedText {
    /// Adds one token's bytes.
    pub(crate) fn push(&mut self, bytes: &[u8], stops: &StopMatcher) -> TokenText {
        let piece = self.utf8.push(bytes);
        if piece.is_empty() {
            return TokenText::Streamed(piece);
        }
        let before = self.text.len();
        self.text.push_str(&piece);
        if let Some(hit) = stops.find(&self.text, self.checked) {
            let replace_with =
                (hit.end < self.text.len()).then(|| self.text[before..hit.end].to_string());
            self.text.truncate(hit.end);
            return TokenText::Stopped {
                index: hit.index,
                streamed: self.text[before..].to_string(),
                replace_with,
            };
        }
        self.checked = self.text.len();
        TokenText::Streamed(piece)
    }

    /// Ends a generation that no stop string ended: the bytes of an unfinished character, as
    /// text to stream (U+FFFD), added to the text.
    pub(crate) fn finish(&mut self) -> String {
        let tail = self.utf8.finish();
        self.text.push_str(&tail);
        tail
    }

    pub(crate) fn into_text(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_string_across_tokens_ends_the_text_where_it_ends() {
        let stops = StopMatcher::new(["</code>"]);
        let mut text = GeneratedText::default();
        assert_eq!(
            text.push(b"print(1)</co", &stops),
            TokenText::Streamed("print(1)</co".into())
        );
        // The token carries text past the stop string: the kept part replaces it.
        assert_eq!(
            text.push(b"de>\n\nmore", &stops),
            TokenText::Stopped {
                index: 0,
                streamed: "de>".into(),
                replace_with: Some("de>".into()),
            }
        );
        assert_eq!(text.into_text(), "print(1)</code>");
    }

    #[test]
    fn a_token_that_ends_exactly_at_the_stop_string_is_kept() {
        let stops = StopMatcher::new(["```\n"]);
        let mut text = GeneratedText::default();
        assert_eq!(
            text.push(b"x```\n", &stops),
            TokenText::Stopped {
                index: 0,
                streamed: "x```\n".into(),
                replace_with: None,
            }
        );
    }

    #[test]
    fn a_character_split_across_tokens_is_streamed_whole() {
        let stops = StopMatcher::default();
        let mut text = GeneratedText::default();
        let euro = "€".as_bytes();
        assert_eq!(
            text.push(&euro[..1], &stops),
            TokenText::Streamed(String::new())
        );
        assert_eq!(
            text.push(&euro[1..], &stops),
            TokenText::Streamed("€".into())
        );
        // An unfinished character at the end becomes U+FFFD.
        assert_eq!(
            text.push(&euro[..2], &stops),
            TokenText::Streamed(String::new())
        );
        assert_eq!(text.finish(), "\u{FFFD}");
        assert_eq!(text.into_text(), "€\u{FFFD}");
    }
}

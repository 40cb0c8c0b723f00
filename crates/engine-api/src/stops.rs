//! Stop strings: found in the text as it grows, wherever the tokenizer happened to split them.

/// A set of stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    longest: usize,
}

/// A stop string found in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopHit {
    /// Which stop string.
    pub index: usize,
    /// Byte offset just past the stop string.
    pub end: usize,
}

impl StopMatcher {
    pub fn new(stops: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let stops: Vec<String> = stops
            .into_iter()
            .map(Into::into)
            .filter(|s: &String| !s.is_empty())
            .collect();
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        StopMatcher { stops, longest }
    }

    pub fn stops(&self) -> &[String] {
        &self.stops
    }

    /// The first stop string to complete in `text` after the first `checked` bytes had already
    /// been searched. Only the tail that could hold a new match is scanned.
    pub fn find(&self, text: &str, checked: usize) -> Option<StopHit> {
        if self.stops.is_empty() {
            return None;
        }
        let mut from = checked.saturating_sub(self.longest.saturating_sub(1));
        while from > 0 && !text.is_char_boundary(from) {
            from -= 1;
        }
        let tail = &text[from.min(text.len())..];
        self.stops
            .iter()
            .enumerate()
            .filter_map(|(index, stop)| {
                tail.find(stop.as_str()).map(|at| StopHit {
                    index,
                    end: from + at + stop.len(),
                })
            })
            .filter(|hit| hit.end > checked)
            .min_by_key(|hit| hit.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_stops_split_across_pieces() {
        let m = StopMatcher::new(["</code>", "</answer>"]);
        let mut text = String::new();
        let mut checked = 0;
        let mut hit = None;
        for piece in ["<code>print(1)</", "co", "de>\n\n", "more"] {
            text.push_str(piece);
            hit = m.find(&text, checked);
            if hit.is_some() {
                break;
            }
            checked = text.len();
        }
        let hit = hit.unwrap();
        assert_eq!(hit.index, 0);
        assert_eq!(&text[..hit.end], "<code>print(1)</code>");
    }

    #[test]
    fn earliest_ending_stop_wins() {
        let m = StopMatcher::new(["bc", "abcd"]);
        assert_eq!(m.find("xabcd", 0), Some(StopHit { index: 0, end: 4 }));
    }

    #[test]
    fn old_matches_are_not_found_again() {
        let m = StopMatcher::new(["</code>"]);
        let text = "<code>x</code> then";
        assert_eq!(m.find(text, text.len()), None);
        assert!(m.find(text, 10).is_some());
    }

    #[test]
    fn multibyte_text_is_safe() {
        let m = StopMatcher::new(["</answer>"]);
        let text = "é✓你好</answer>";
        for checked in 0..=text.len() {
            let _ = m.find(text, checked);
        }
        assert!(m.find(text, 3).is_some());
    }
}

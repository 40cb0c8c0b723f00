//! OpenAI's stop sequences are not part of the reply, but Catena's engine keeps a stop string in
//! the text (the protocol needs it). While streaming, text that might be the start of a stop
//! sequence is held back until it is clear that it is not.

/// Streams text, never releasing a possible start of a stop sequence.
#[derive(Debug)]
pub struct StopHoldback {
    stops: Vec<String>,
    held: String,
    /// The stop sequence that ended the text, once [`StopHoldback::finish`] found it (Anthropic's
    /// API names it in `stop_sequence`).
    matched: Option<String>,
}

impl StopHoldback {
    pub fn new(stops: &[String]) -> Self {
        StopHoldback {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            matched: None,
        }
    }

    /// Takes new text; returns what can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let keep = self.possible_stop_start();
        let release = self.held[..keep].to_string();
        self.held.drain(..keep);
        release
    }

    /// Ends the stream: what is held is shown, minus a stop sequence at its end.
    pub fn finish(&mut self, stopped_by_string: bool) -> String {
        let mut rest = std::mem::take(&mut self.held);
        if stopped_by_string
            && let Some(stop) = self.stops.iter().find(|s| rest.ends_with(s.as_str()))
        {
            rest.truncate(rest.len() - stop.len());
            self.matched = Some(stop.clone());
        }
        rest
    }

    /// The stop sequence that ended the text (after [`StopHoldback::finish`]).
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// The byte offset from which the held text may still become a stop sequence.
    fn possible_stop_start(&self) -> usize {
        let mut cut = self.held.len();
        for (i, _) in self.held.char_indices() {
            let tail = &self.held[i..];
            if self
                .stops
                .iter()
                .any(|s| s.starts_with(tail) || tail.starts_with(s.as_str()))
            {
                cut = i;
                break;
            }
        }
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(stops: &[&str], pieces: &[&str], stopped: bool) -> (Vec<String>, String) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut h = StopHoldback::new(&stops);
        let shown: Vec<String> = pieces.iter().map(|p| h.push(p)).collect();
        let end = h.finish(stopped);
        (shown, end)
    }

    #[test]
    fn a_stop_split_across_pieces_is_never_shown() {
        let (shown, end) = stream(&["\n\nUser:"], &["Hello", "\n", "\nUs", "er:"], true);
        assert_eq!(shown, ["Hello", "", "", ""]);
        assert_eq!(end, "");
    }

    #[test]
    fn the_stop_that_ended_the_text_is_named() {
        let stops = ["END".to_string(), "STOP".to_string()];
        let mut h = StopHoldback::new(&stops);
        let shown = h.push("done ST") + &h.push("OP");
        assert_eq!(shown + &h.finish(true), "done ");
        assert_eq!(h.matched(), Some("STOP"));

        // Ended for another reason: nothing is named, even if the text ends like a stop.
        let mut h = StopHoldback::new(&stops);
        let shown = h.push("the END");
        assert_eq!(shown + &h.finish(false), "the END");
        assert_eq!(h.matched(), None);
    }

    #[test]
    fn a_false_start_is_released() {
        let (shown, end) = stream(&["END"], &["a E", "N", "x b"], false);
        assert_eq!(shown.concat() + &end, "a ENx b");
        assert_eq!(shown[0], "a ");
    }

    #[test]
    fn without_stops_everything_flows() {
        let (shown, end) = stream(&[], &["a", "b"], false);
        assert_eq!(shown, ["a", "b"]);
        assert_eq!(end, "");
    }

    #[test]
    fn multibyte_text() {
        let (shown, end) = stream(&["✓✓"], &["é✓", "✓"], true);
        assert_eq!(shown.concat() + &end, "é");
    }
}

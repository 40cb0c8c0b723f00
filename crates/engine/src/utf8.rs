//! Token pieces are bytes, and one character can be split across tokens: decode incrementally.

/// Turns a stream of byte pieces into text, holding back an incomplete trailing character.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    held: Vec<u8>,
}

impl Utf8Stream {
    /// Appends `bytes` and returns the text that is now complete. Invalid sequences become U+FFFD.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.held.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.held) {
                Ok(text) => {
                    out.push_str(text);
                    self.held.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // `from_utf8` just said these bytes are valid.
                    out.push_str(std::str::from_utf8(&self.held[..valid]).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.held.drain(..valid + bad);
                        }
                        None => {
                            // An incomplete character at the end: wait for more bytes.
                            self.held.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// Whether bytes of an unfinished character are held back.
    #[cfg(test)]
    pub fn has_partial(&self) -> bool {
        !self.held.is_empty()
    }

    /// Ends the stream: held bytes become U+FFFD.
    pub fn finish(&mut self) -> String {
        if self.held.is_empty() {
            String::new()
        } else {
            self.held.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_are_joined() {
        let bytes = "a✓b".as_bytes();
        let mut s = Utf8Stream::default();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&s.push(&[*b]));
        }
        assert_eq!(out, "a✓b");
        assert!(!s.has_partial());
    }

    #[test]
    fn invalid_bytes_are_replaced() {
        let mut s = Utf8Stream::default();
        assert_eq!(s.push(&[b'a', 0xff, b'b']), "a\u{fffd}b");
        assert_eq!(s.push(&[0xe2, 0x9c]), "");
        assert!(s.has_partial());
        assert_eq!(s.finish(), "\u{fffd}");
    }
}

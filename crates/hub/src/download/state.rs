//! The state file of a partial download (`<name>.part.json` beside `<name>.part`): enough to
//! resume after the process died, and to notice that the server's file changed meanwhile.
//!
//! Each segment's `done` only ever counts bytes that were written to the `.part` file and synced
//! before the state was saved, so a resumed download never trusts bytes that are not there.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// What identifies one version of the remote file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validator {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

impl Validator {
    /// Why `self` (saved) and `now` (the server's answer) are different files, if they are.
    /// With no validator on either side, sizes decide (and the sha256 check at the end catches
    /// the rest).
    pub fn mismatch(&self, now: &Validator) -> Option<String> {
        match (&self.etag, &now.etag) {
            (Some(a), Some(b)) if a != b => return Some(format!("its ETag changed ({a} -> {b})")),
            (Some(_), Some(_)) => return None,
            _ => {}
        }
        match (&self.last_modified, &now.last_modified) {
            (Some(a), Some(b)) if a != b => Some(format!("it was modified ({a} -> {b})")),
            _ => None,
        }
    }
}

/// One byte range `[start, end)` fetched by one connection; `done` bytes from `start` are on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
    pub done: u64,
}

/// The saved progress of a download that the server lets us resume (range requests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartState {
    pub version: u32,
    pub url: String,
    pub total: u64,
    pub validator: Validator,
    pub segments: Vec<Segment>,
}

pub const VERSION: u32 = 1;

impl PartState {
    pub fn new(url: &str, total: u64, validator: Validator, segments: Vec<Segment>) -> PartState {
        PartState {
            version: VERSION,
            url: url.to_string(),
            total,
            validator,
            segments,
        }
    }

    /// Bytes already on disk.
    pub fn done(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.done.min(s.end - s.start))
            .sum()
    }

    /// Reads a state file; `None` if it is missing, unreadable or of another version (the
    /// download then starts over, which is always safe).
    pub fn load(path: &Path) -> Option<PartState> {
        let text = std::fs::read(path).ok()?;
        let state: PartState = serde_json::from_slice(&text).ok()?;
        let consistent = state.version == VERSION
            && !state.segments.is_empty()
            && state
                .segments
                .iter()
                .all(|s| s.start <= s.end && s.end <= state.total);
        consistent.then_some(state)
    }

    /// Writes the state atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        crate::files::write_atomic(path, &json)
    }

    /// Why this saved state cannot be resumed against the server's current answer, if so.
    pub fn conflict(&self, url: &str, total: u64, validator: &Validator) -> Option<String> {
        if self.url != url {
            return Some(format!("it was started from another URL ({})", self.url));
        }
        if self.total != total {
            return Some(format!(
                "the file's size changed ({} -> {total} bytes)",
                self.total
            ));
        }
        self.validator.mismatch(validator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(etag: Option<&str>, lm: Option<&str>) -> Validator {
        Validator {
            etag: etag.map(Into::into),
            last_modified: lm.map(Into::into),
        }
    }

    #[test]
    fn validators_compare_etag_first() {
        assert!(v(Some("a"), None).mismatch(&v(Some("b"), None)).is_some());
        assert!(
            v(Some("a"), Some("x"))
                .mismatch(&v(Some("a"), Some("y")))
                .is_none()
        );
        assert!(v(None, Some("x")).mismatch(&v(None, Some("y"))).is_some());
        assert!(v(None, None).mismatch(&v(Some("b"), None)).is_none());
    }

    #[test]
    fn state_round_trips_and_detects_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf.part.json");
        let seg = |start, end, done| Segment { start, end, done };
        let state = PartState::new(
            "http://h/m",
            100,
            v(Some("e1"), None),
            vec![seg(0, 50, 10), seg(50, 100, 50)],
        );
        state.save(&path).unwrap();
        let loaded = PartState::load(&path).unwrap();
        assert_eq!(loaded, state);
        assert_eq!(loaded.done(), 60);
        assert!(
            loaded
                .conflict("http://h/m", 100, &v(Some("e1"), None))
                .is_none()
        );
        assert!(
            loaded
                .conflict("http://h/m", 101, &v(Some("e1"), None))
                .is_some()
        );
        assert!(
            loaded
                .conflict("http://o/m", 100, &v(Some("e1"), None))
                .is_some()
        );
        assert!(
            loaded
                .conflict("http://h/m", 100, &v(Some("e2"), None))
                .is_some()
        );
        std::fs::write(&path, b"{ not json").unwrap();
        assert!(PartState::load(&path).is_none());
    }
}

//! Units in Catena's settings and JSON: seconds given by a user and durations written as
//! milliseconds.

use std::time::Duration;

/// A positive number of seconds as a `Duration`; `None` for zero, negatives, NaN, infinities
/// and values too large for a `Duration` (on which `Duration::from_secs_f64` panics).
pub fn positive_seconds(seconds: f64) -> Option<Duration> {
    if seconds > 0.0 {
        Duration::try_from_secs_f64(seconds).ok()
    } else {
        None
    }
}

/// Serialises a `Duration` as whole milliseconds (floating point), the unit of every timing in
/// Catena's JSON output.
pub mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64((d.as_secs_f64() * 1e6).round() / 1e3)
    }

    /// Reads what [`serialize`] wrote (negative or non-finite values become zero).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Ok(Duration::try_from_secs_f64(ms / 1e3).unwrap_or_default())
    }
}

//! Small helpers shared by modules.

/// Serialises a `Duration` as whole milliseconds (floating point), the unit of every timing in
/// Catena's JSON output.
pub mod duration_ms {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64((d.as_secs_f64() * 1e6).round() / 1e3)
    }
}

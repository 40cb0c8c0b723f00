//! Pure decisions of the downloader: how to split a file into segments, how long to wait before
//! a retry, and whether the disk has room.

use super::state::Segment;
use std::time::Duration;

/// Splits `total` bytes into at most `connections` segments of at least `min_segment` bytes
/// (a small file is fetched over fewer connections: each costs a request).
pub fn split(total: u64, connections: usize, min_segment: u64) -> Vec<Segment> {
    let by_size = (total / min_segment.max(1)).max(1);
    let n = (connections.max(1) as u64).min(by_size);
    let base = total / n;
    let mut segments = Vec::with_capacity(n as usize);
    let mut start = 0;
    for i in 0..n {
        let end = if i + 1 == n { total } else { start + base };
        segments.push(Segment {
            start,
            end,
            done: 0,
        });
        start = end;
    }
    segments
}

/// The wait before retry number `attempt` (1-based): exponential from `base`, capped at `max`,
/// with "equal jitter" (half fixed, half random) so that parallel connections that failed
/// together do not retry in lockstep.
pub fn backoff(attempt: u32, base: Duration, max: Duration, random: u64) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let capped = exp.min(max);
    let half = capped / 2;
    let jitter_ns = (half.as_nanos() as u64)
        .checked_mul(random % 1024)
        .unwrap_or(0)
        / 1024;
    half + Duration::from_nanos(jitter_ns)
}

/// A cheap source of jitter: no random-number crate for one number per retry.
pub fn jitter_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Whether `available` bytes of free disk space are enough for `remaining` more bytes plus a
/// safety `margin`.
pub fn enough_space(remaining: u64, available: u64, margin: u64) -> bool {
    remaining
        .checked_add(margin)
        .is_some_and(|need| available >= need)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_the_file_exactly() {
        for (total, conns, min) in [
            (10u64, 4, 1),
            (1000, 4, 100),
            (1000, 4, 600),
            (7, 3, 1),
            (0, 4, 1),
        ] {
            let segs = split(total, conns, min);
            assert!(!segs.is_empty());
            assert!(segs.len() <= conns);
            assert_eq!(segs[0].start, 0);
            assert_eq!(segs.last().unwrap().end, total);
            for pair in segs.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
            }
        }
        assert_eq!(split(1000, 4, 600).len(), 1);
        assert_eq!(split(1000, 4, 100).len(), 4);
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        let a1 = backoff(1, base, max, 0);
        let a3 = backoff(3, base, max, 0);
        assert_eq!(a1, Duration::from_millis(50));
        assert_eq!(a3, Duration::from_millis(200));
        assert!(backoff(30, base, max, u64::MAX) <= max);
        assert!(backoff(1, base, max, 1023) > a1);
    }

    #[test]
    fn space_check_includes_the_margin() {
        assert!(enough_space(100, 200, 50));
        assert!(!enough_space(100, 149, 50));
        assert!(!enough_space(u64::MAX, u64::MAX, 1));
    }
}

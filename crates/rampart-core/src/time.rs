//! Timestamps: nanoseconds since the Unix epoch in an `i64`, which covers the years 1678–2262
//! in 8 bytes instead of the 12–16 of a `(secs, nanos)` pair.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (negative before it).
pub type TimeNs = i64;

/// The current wall-clock time.
pub fn now_ns() -> TimeNs {
    to_ns(SystemTime::now())
}

/// Converts a `SystemTime`, saturating outside the representable range.
pub fn to_ns(t: SystemTime) -> TimeNs {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos())
            .map(|n| -n)
            .unwrap_or(i64::MIN),
    }
}

/// Converts back to a `SystemTime`.
pub fn to_system_time(ns: TimeNs) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_both_sides_of_the_epoch() {
        for ns in [0i64, 1, -1, 1_700_000_000_123_456_789, -86_400_000_000_001] {
            assert_eq!(to_ns(to_system_time(ns)), ns);
        }
    }
}

//! Timestamps: nanoseconds since the Unix epoch in an `i64`, which covers the years 1678–2262
//! in 8 bytes instead of the 12–16 of a `(secs, nanos)` pair.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (negative before it).
pub type TimeNs = i64;

/// The current wall-clock time.
pub fn now_ns() -> TimeNs {
    to_ns(SystemTime::now())
}

/// The time stamped on inodes: the kernel's coarse clock (`CLOCK_REALTIME_COARSE`, one tick
/// granular), the clock the kernel itself stamps FUSE inodes with under the writeback cache.
/// Creating a file and writing it within one tick then leaves the kernel nothing to update, so
/// it sends no SETATTR of the times at fsync or close (docs/decisions/0020).
pub fn file_time_ns() -> TimeNs {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`;
    // the result is checked.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc != 0 {
        return now_ns();
    }
    ts.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec)
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
    fn file_time_is_the_coarse_clock_at_most_a_tick_behind() {
        let before = now_ns();
        let coarse = file_time_ns();
        let after = now_ns();
        // The coarse clock lags the precise one by up to a tick (10 ms at HZ=100).
        assert!(coarse <= after, "coarse {coarse} after precise {after}");
        assert!(
            coarse > before - 20_000_000,
            "coarse {coarse} far behind {before}"
        );
    }

    #[test]
    fn round_trips_both_sides_of_the_epoch() {
        for ns in [0i64, 1, -1, 1_700_000_000_123_456_789, -86_400_000_000_001] {
            assert_eq!(to_ns(to_system_time(ns)), ns);
        }
    }
}

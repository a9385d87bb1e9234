//! Latency histograms with fixed bucket bounds, for the metrics endpoint (Prometheus
//! histograms: cumulative counts per upper bound, a sum and a count). The bounds are the same
//! everywhere, so histograms of different operations can be compared and added.

use std::time::Duration;

/// The buckets' upper bounds in nanoseconds, from 10 µs (a memory-speed request) to 10 s (a
/// large checkpoint); slower observations fall in the implicit `+Inf` bucket.
pub const BUCKET_BOUNDS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// How many buckets a histogram holds: one per bound and `+Inf`.
pub const BUCKETS: usize = BUCKET_BOUNDS_NS.len() + 1;

/// The bucket an observation of `ns` nanoseconds falls in (`BUCKETS - 1` is `+Inf`).
pub fn bucket_of(ns: u64) -> usize {
    BUCKET_BOUNDS_NS.partition_point(|&bound| bound < ns)
}

/// Nanoseconds of a duration, saturating (u64 nanoseconds last 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A histogram of durations: per-bucket (not cumulative) counts, their sum and count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Observations per bucket; `buckets[i]` counts those above bound `i - 1` and at most
    /// bound `i`.
    pub buckets: [u64; BUCKETS],
    pub sum_ns: u64,
    pub count: u64,
}

impl LatencyHistogram {
    pub fn record(&mut self, d: Duration) {
        let ns = nanos(d);
        self.buckets[bucket_of(ns)] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.count += 1;
    }

    /// Cumulative counts per bound (the Prometheus `le` series), ending with `+Inf`.
    pub fn cumulative(&self) -> [u64; BUCKETS] {
        let mut running = 0u64;
        self.buckets.map(|n| {
            running = running.saturating_add(n);
            running
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_fall_in_the_first_bucket_whose_bound_holds_them() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(10_000), 0);
        assert_eq!(bucket_of(10_001), 1);
        assert_eq!(bucket_of(10_000_000_000), BUCKETS - 2);
        assert_eq!(bucket_of(10_000_000_001), BUCKETS - 1);
        assert!(BUCKET_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn cumulative_counts_end_with_the_total() {
        let mut h = LatencyHistogram::default();
        h.record(Duration::from_micros(5));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(60));
        let c = h.cumulative();
        assert_eq!(c[0], 1);
        assert_eq!(c[bucket_of(3_000_000)], 2);
        assert_eq!(c[BUCKETS - 2], 2);
        assert_eq!(c[BUCKETS - 1], 3);
        assert_eq!(h.count, 3);
        assert_eq!(h.sum_ns, 5_000 + 3_000_000 + 60_000_000_000);
    }
}

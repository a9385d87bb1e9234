//! Counts and latencies of FUSE requests by kind: the round trips a workload costs, which is
//! what decides FUSE performance (docs/BENCHMARKS.md), and how long each took to answer. A
//! request costs two clock reads and four relaxed atomic adds; no lock.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rampart_core::latency::{self, LatencyHistogram, BUCKETS};

macro_rules! request_kinds {
    ($($name:ident),* $(,)?) => {
        /// The kinds of FUSE request the adapter serves.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum RequestKind { $($name),* }

        impl RequestKind {
            pub const ALL: &'static [RequestKind] = &[$(RequestKind::$name),*];
            pub fn name(self) -> &'static str {
                match self { $(RequestKind::$name => stringify!($name)),* }
            }
        }
    };
}

request_kinds!(
    lookup,
    forget,
    getattr,
    setattr,
    readlink,
    mknod,
    mkdir,
    unlink,
    rmdir,
    symlink,
    rename,
    link,
    open,
    read,
    write,
    flush,
    release,
    fsync,
    opendir,
    readdir,
    releasedir,
    fsyncdir,
    statfs,
    setxattr,
    getxattr,
    listxattr,
    removexattr,
    access,
    create,
    fallocate,
    copy_file_range,
    readdirplus,
    batch_forget,
);

/// Room for every kind (checked by a test).
const KINDS_MAX: usize = 40;

/// Errno values counted one by one (Linux's go up to 133); larger ones share the last slot.
const ERRNO_SLOTS: usize = 134;

/// Errors answered, by request kind and errno. One table per process: a daemon serves one
/// mount, and the answers are sent from free functions that know only the errno (`errno()` in
/// the adapter); the kind comes from the thread's request in progress (`SERVING`).
static ERRORS: [[AtomicU64; ERRNO_SLOTS]; KINDS_MAX] =
    [const { [const { AtomicU64::new(0) }; ERRNO_SLOTS] }; KINDS_MAX];

thread_local! {
    /// The kind of request this thread is serving (set by `RequestCounters::start`).
    static SERVING: Cell<Option<RequestKind>> = const { Cell::new(None) };
}

/// Counts an error answered to the request this thread is serving (nothing outside one).
pub fn count_error(errno: i32) {
    if let Some(kind) = SERVING.with(Cell::get) {
        count_error_of(kind, errno);
    }
}

/// Counts an error answered to a request of `kind` (for answers sent from another thread).
pub fn count_error_of(kind: RequestKind, errno: i32) {
    let slot = (errno.max(0) as usize).min(ERRNO_SLOTS - 1);
    ERRORS[kind as usize][slot].fetch_add(1, Ordering::Relaxed);
}

/// Errors answered so far, by request name and errno (only non-zero counts).
pub fn errors() -> Vec<(&'static str, i32, u64)> {
    let mut out = Vec::new();
    for &kind in RequestKind::ALL {
        for (errno, n) in ERRORS[kind as usize].iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                out.push((kind.name(), errno as i32, n));
            }
        }
    }
    out
}

/// The symbolic name of an errno (`ENOENT`), or `E<number>` for the rare ones.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EDQUOT => "EDQUOT",
        _ => return format!("E{errno}"),
    };
    name.to_string()
}

/// A latency histogram updated by many threads at once.
#[derive(Debug, Default)]
struct AtomicHistogram {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl AtomicHistogram {
    fn record(&self, ns: u64) {
        self.buckets[latency::bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The figures so far (each read on its own: a scrape may see a request in the count and
    /// not yet in its bucket, which the next scrape corrects).
    fn snapshot(&self) -> LatencyHistogram {
        LatencyHistogram {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// Requests served by kind, and their latencies: from the handler's start to its answer
/// (for fsync, to the answer after the disk sync that covers it).
#[derive(Debug)]
pub struct RequestCounters {
    counts: [AtomicU64; KINDS_MAX],
    latencies: [AtomicHistogram; KINDS_MAX],
    /// fsync and fsyncdir answered EIO because the store could not be written.
    sync_failures: AtomicU64,
    /// Opens answered with FUSE passthrough (the kernel then reads and writes the host file).
    passthrough_opens: AtomicU64,
}

impl Default for RequestCounters {
    // By hand: arrays of more than 32 elements have no derived Default.
    fn default() -> Self {
        RequestCounters {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            latencies: std::array::from_fn(|_| AtomicHistogram::default()),
            sync_failures: AtomicU64::new(0),
            passthrough_opens: AtomicU64::new(0),
        }
    }
}

impl RequestCounters {
    /// Counts a request whose latency is not measured.
    pub fn count(&self, kind: RequestKind) {
        self.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request and starts its clock: the latency is recorded when the timer is
    /// dropped (or when a [`PendingRequest`] made from it is finished).
    pub fn start(&self, kind: RequestKind) -> RequestTimer<'_> {
        self.count(kind);
        SERVING.with(|s| s.set(Some(kind)));
        RequestTimer {
            counters: self,
            pending: Some(PendingRequest {
                kind,
                started: Instant::now(),
            }),
        }
    }

    pub fn count_passthrough_open(&self) {
        self.passthrough_opens.fetch_add(1, Ordering::Relaxed);
    }

    /// Opens answered with FUSE passthrough so far.
    pub fn passthrough_opens(&self) -> u64 {
        self.passthrough_opens.load(Ordering::Relaxed)
    }

    pub fn count_sync_failure(&self) {
        self.sync_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// fsyncs answered EIO so far (the store could not be written).
    pub fn sync_failures(&self) -> u64 {
        self.sync_failures.load(Ordering::Relaxed)
    }

    /// Requests of one kind served so far.
    pub fn get(&self, kind: RequestKind) -> u64 {
        self.counts[kind as usize].load(Ordering::Relaxed)
    }

    /// Non-zero counts, by request name.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        RequestKind::ALL
            .iter()
            .map(|&k| (k.name(), self.get(k)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// The latencies of the kinds with at least one request answered, by request name.
    pub fn latencies(&self) -> Vec<(&'static str, LatencyHistogram)> {
        RequestKind::ALL
            .iter()
            .map(|&k| (k.name(), self.latencies[k as usize].snapshot()))
            .filter(|(_, h)| h.count > 0)
            .collect()
    }
}

/// A request being served; records its latency when dropped.
#[must_use = "the latency is measured until the timer is dropped"]
pub struct RequestTimer<'a> {
    counters: &'a RequestCounters,
    pending: Option<PendingRequest>,
}

impl RequestTimer<'_> {
    /// For a request answered later, on another thread: the clock keeps running until
    /// [`PendingRequest::finish`].
    pub fn hand_off(mut self) -> PendingRequest {
        self.pending.take().expect("a timer is handed off once")
    }
}

impl Drop for RequestTimer<'_> {
    fn drop(&mut self) {
        SERVING.with(|s| s.set(None));
        if let Some(pending) = self.pending.take() {
            pending.finish(self.counters);
        }
    }
}

/// A request whose answer is still to come (see [`RequestTimer::hand_off`]).
#[derive(Debug)]
pub struct PendingRequest {
    kind: RequestKind,
    started: Instant,
}

impl PendingRequest {
    /// The kind of request (to count an error answered from another thread).
    pub fn kind(&self) -> RequestKind {
        self.kind
    }

    /// Records the request's latency, now that it is answered.
    pub fn finish(self, counters: &RequestCounters) {
        counters.latencies[self.kind as usize].record(latency::nanos(self.started.elapsed()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fit_and_are_reported_by_name() {
        assert!(RequestKind::ALL.len() <= KINDS_MAX);
        let c = RequestCounters::default();
        c.count(RequestKind::write);
        c.count(RequestKind::write);
        c.count(RequestKind::create);
        assert_eq!(c.snapshot(), vec![("write", 2), ("create", 1)]);
        // Counted without a clock: no latency.
        assert!(c.latencies().is_empty());
    }

    /// Every request counted can appear in `rampart status --json`, whose schema names the
    /// operations: one missing there (`batch_forget`, `readdirplus`, `copy_file_range` were)
    /// makes a mount that received it fail validation against the published schema.
    #[test]
    fn the_status_schema_names_every_request_kind() {
        let schema = include_str!("../../../docs/status-schema.json");
        let at = schema
            .find("\"operation\": {")
            .expect("the schema's operation enum");
        let end = at + schema[at..].find(']').expect("the end of the enum");
        let names = &schema[at..end];
        for kind in RequestKind::ALL {
            let quoted = format!("\"{}\"", kind.name());
            assert!(
                names.contains(&quoted),
                "{quoted} is not in status-schema.json"
            );
        }
    }

    #[test]
    fn a_timer_records_one_latency_when_dropped_or_finished() {
        let c = RequestCounters::default();
        drop(c.start(RequestKind::lookup));
        let pending = c.start(RequestKind::fsync).hand_off();
        // Handed off: nothing recorded until it is finished.
        assert_eq!(c.latencies().len(), 1);
        std::thread::sleep(std::time::Duration::from_millis(2));
        pending.finish(&c);
        let latencies = c.latencies();
        let names: Vec<_> = latencies.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, vec!["lookup", "fsync"]);
        let fsync = &latencies[1].1;
        assert_eq!(fsync.count, 1);
        assert!(fsync.sum_ns >= 2_000_000, "{fsync:?}");
        assert_eq!(fsync.cumulative()[BUCKETS - 1], 1);
        assert_eq!(c.get(RequestKind::fsync), 1);
    }
}

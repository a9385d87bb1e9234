//! The clock seam: where the engine gets the time it stamps on inodes, so that tests can
//! drive time (a [`ManualClock`]) instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::time::{file_time_ns, TimeNs};

/// A source of file times.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The time stamped on inodes (the kernel's coarse clock on the real system,
    /// docs/decisions/0020).
    fn file_time_ns(&self) -> TimeNs;
}

/// The system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn file_time_ns(&self) -> TimeNs {
        file_time_ns()
    }
}

/// A clock that moves only when told: for tests of times (relatime, ctime ordering).
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ns: AtomicI64,
}

impl ManualClock {
    pub fn new(now_ns: TimeNs) -> ManualClock {
        ManualClock {
            now_ns: AtomicI64::new(now_ns),
        }
    }

    pub fn set(&self, now_ns: TimeNs) {
        self.now_ns.store(now_ns, Ordering::Release);
    }

    pub fn advance(&self, by_ns: i64) {
        self.now_ns.fetch_add(by_ns, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn file_time_ns(&self) -> TimeNs {
        self.now_ns.load(Ordering::Acquire)
    }
}

//! Counts of FUSE requests by kind: the round trips a workload costs, which is what decides
//! FUSE performance (docs/BENCHMARKS.md). One relaxed atomic add per request.

use std::sync::atomic::{AtomicU64, Ordering};

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
);

#[derive(Debug, Default)]
pub struct RequestCounters {
    counts: [AtomicU64; 32],
}

impl RequestCounters {
    pub fn count(&self, kind: RequestKind) {
        self.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests of one kind served so far.
    pub fn get(&self, kind: RequestKind) -> u64 {
        self.counts[kind as usize].load(Ordering::Relaxed)
    }

    /// Non-zero counts, by request name.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        RequestKind::ALL
            .iter()
            .map(|&k| (k.name(), self.counts[k as usize].load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fit_and_are_reported_by_name() {
        assert!(RequestKind::ALL.len() <= 32);
        let c = RequestCounters::default();
        c.count(RequestKind::write);
        c.count(RequestKind::write);
        c.count(RequestKind::create);
        assert_eq!(c.snapshot(), vec![("write", 2), ("create", 1)]);
    }
}

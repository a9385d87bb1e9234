//! The faults a [`SimDevice`](super::SimDevice) injects, given as options
//! ([`SimDevice::set_faults`](super::SimDevice::set_faults)) in the style of TigerBeetle's
//! simulated storage, so that a test states what goes wrong instead of wrapping the device.
//!
//! What a power cut does to unsynced writes (lose them, tear the last ones) is the
//! [`CrashMode`] given to `SimDevice::crash` or to [`CrashImages`]; media damage is
//! `SimDevice::flip_bit` on a crash image. Everything else is here.

use std::time::Duration;

use super::CrashMode;

/// Which files a fault applies to.
#[derive(Clone, Debug, Default)]
pub enum Files {
    /// Every file.
    #[default]
    All,
    /// The file of exactly this name.
    Named(String),
    /// The files whose names start with this.
    Prefix(String),
    /// The files for which this returns true.
    Matching(fn(&str) -> bool),
}

impl Files {
    /// Whether `name` is one of these files.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Files::All => true,
            Files::Named(n) => name == n,
            Files::Prefix(p) => name.starts_with(p.as_str()),
            Files::Matching(f) => f(name),
        }
    }
}

/// The calls that are sync points (see the device's model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncOp {
    Sync,
    Rename,
    Remove,
    Link,
}

/// Every kind of sync point.
pub const ALL_SYNC_OPS: &[SyncOp] = &[SyncOp::Sync, SyncOp::Rename, SyncOp::Remove, SyncOp::Link];

/// Sync points that fail with EIO and make nothing durable.
#[derive(Clone, Debug)]
pub struct FailSyncs {
    /// How many sync points the device passes ([`SimDevice::sync_count`], counted from its
    /// creation) before the first failure: 0 fails the next one.
    ///
    /// [`SimDevice::sync_count`]: super::SimDevice::sync_count
    pub after: u64,
    /// How many fail before syncs work again; None: every one from then on.
    pub count: Option<u64>,
    /// Which calls fail; the others pass (and count) as usual.
    pub ops: &'static [SyncOp],
    /// Which files: the file synced or removed, the source of a rename.
    pub files: Files,
}

impl FailSyncs {
    /// Every sync point of every file fails once `n` have passed.
    pub fn after(n: u64) -> FailSyncs {
        FailSyncs {
            after: n,
            count: None,
            ops: ALL_SYNC_OPS,
            files: Files::All,
        }
    }

    /// Only the sync point that comes after `n` others fails (the `n`-th, from 0).
    pub fn nth(n: u64) -> FailSyncs {
        FailSyncs {
            count: Some(1),
            ..FailSyncs::after(n)
        }
    }
}

/// Calls to some files sleep first, as on a slow disk; calls to other files (and reads of
/// these) go on meanwhile.
#[derive(Clone, Debug)]
pub struct Delay {
    pub files: Files,
    /// Before each `append`, `write`, `write_at` and `write_at_sparse`.
    pub write: Duration,
    /// Before each `sync`.
    pub sync: Duration,
}

/// Crash images taken just before sync points: what a power cut at that instant leaves.
/// Collected by [`SimDevice::take_crash_images`](super::SimDevice::take_crash_images), at most
/// [`CRASH_IMAGES_MAX`] of them.
#[derive(Clone, Debug)]
pub struct CrashImages {
    pub mode: CrashMode,
    /// Before which sync point: None, every one; Some(k), only the one that comes after `k`
    /// others (while [`SimDevice::sync_count`](super::SimDevice::sync_count) is `k`).
    pub at: Option<u64>,
    /// Before which calls (one that will fail is still a moment a power cut can hit).
    pub ops: &'static [SyncOp],
}

/// The most crash images a device keeps before `take_crash_images`; later ones are not taken.
pub const CRASH_IMAGES_MAX: usize = 4096;

/// The faults of a [`SimDevice`](super::SimDevice); the default injects none.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Sync points that fail.
    pub fail_syncs: Option<FailSyncs>,
    /// Writes to these files (`append`, `write`, `write_at`, `write_at_sparse`, and `set_len`
    /// growing a file) fail with ENOSPC and change nothing. Calls that free space (`truncate`,
    /// `punch_hole`, `set_len` shrinking) still work.
    pub fail_writes: Option<Files>,
    /// A full disk: a write that would leave the device's files holding more than this many
    /// bytes (their lengths, holes included) fails with ENOSPC and changes nothing.
    pub capacity_bytes: Option<u64>,
    /// Calls that sleep first.
    pub delay: Option<Delay>,
    /// Crash images to take.
    pub crash_images: Option<CrashImages>,
}

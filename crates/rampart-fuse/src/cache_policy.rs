//! What the kernel may cache of a mount, and for how long.

use std::time::Duration;

/// Kernel-cache settings of a mount.
#[derive(Clone, Copy, Debug)]
pub struct CachePolicy {
    /// How long the kernel may trust a name → inode answer (and a "no such name" answer).
    pub entry_ttl: Duration,
    /// How long the kernel may trust attributes.
    pub attr_ttl: Duration,
    /// Let the kernel cache writes in the page cache and send them in large batches. The
    /// kernel then owns the size of regular files it has cached, and no FUSE notification can
    /// shrink it: only enable this when no library caller changes file sizes while mounted
    /// (the `rampart` daemon has none; docs/decisions/0003-kernel-caching.md).
    pub writeback_cache: bool,
    /// Answer OPEN and OPENDIR with ENOSYS, after which the kernel sends no OPEN, OPENDIR,
    /// RELEASE or RELEASEDIR at all (two round trips saved per open file). Possible while the
    /// engine keeps no per-open state. FUSE passthrough needs OPEN (it is set up there): when
    /// it is in use, OPEN of files is answered whatever this says (decision 0058). Set at
    /// mount from `MountOptions::no_open`.
    pub no_open: bool,
    /// Answer FLUSH with ENOSYS, after which the kernel sends none (a round trip saved per
    /// close under the writeback cache, or without OPEN). Only `until_close` files need it.
    /// Answered under passthrough whatever this says (its opens catch up with the host file
    /// there). Set at mount from `MountOptions::no_flush`.
    pub no_flush: bool,
}

impl Default for CachePolicy {
    fn default() -> Self {
        // Every change reaches the engine through this kernel, or is announced to it by an
        // invalidation (see `Notifier`), so long timeouts are safe and save round trips.
        CachePolicy {
            entry_ttl: Duration::from_secs(3600),
            attr_ttl: Duration::from_secs(3600),
            writeback_cache: false,
            // OPEN is where a file's category chooses direct I/O (decision 0063).
            no_open: false,
            no_flush: false,
        }
    }
}

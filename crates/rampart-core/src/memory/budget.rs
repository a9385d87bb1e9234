//! The memory budget: every byte the engine holds for the file system (inodes, names, file
//! contents) is charged here, and a charge past the cap fails with ENOSPC, so that file data
//! can never push the daemon into the OOM killer.

use crate::error::{Errno, FsResult};

#[derive(Debug)]
pub struct Budget {
    /// The charges: inodes, names, contents, xattrs.
    used_bytes: u64,
    /// The inode table's slot array, which grows by doubling and is set, not charged.
    table_bytes: u64,
    cap_bytes: u64,
    /// Off while replaying a journal: every op passed the cap when it was first applied, and
    /// a smaller cap now must not make durable changes unreplayable.
    enforced: bool,
}

impl Budget {
    pub fn new(cap_bytes: u64) -> Budget {
        Budget {
            used_bytes: 0,
            table_bytes: 0,
            cap_bytes,
            enforced: true,
        }
    }

    /// The sum of the charges (what `State::check` recomputes).
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// The inode table's size, as last recorded.
    pub fn table_bytes(&self) -> u64 {
        self.table_bytes
    }

    /// Everything held under the cap: the charges and the inode table.
    pub fn total_bytes(&self) -> u64 {
        self.used_bytes + self.table_bytes
    }

    /// Records the inode table's current size (after it grew or shrank).
    pub fn set_table_bytes(&mut self, bytes: u64) {
        self.table_bytes = bytes;
    }

    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    pub fn free_bytes(&self) -> u64 {
        self.cap_bytes.saturating_sub(self.total_bytes())
    }

    /// Fails with ENOSPC unless `bytes` more fit under the cap.
    pub fn set_enforced(&mut self, enforced: bool) {
        self.enforced = enforced;
    }

    pub fn check(&self, bytes: u64) -> FsResult<()> {
        if self.enforced && self.total_bytes().saturating_add(bytes) > self.cap_bytes {
            Err(Errno::ENOSPC)
        } else {
            Ok(())
        }
    }

    /// Records a change that has happened (after a successful `check` for growth).
    pub fn apply(&mut self, delta: i64) {
        if delta >= 0 {
            self.used_bytes += delta as u64;
        } else {
            let freed = delta.unsigned_abs();
            debug_assert!(freed <= self.used_bytes, "budget underflow");
            self.used_bytes = self.used_bytes.saturating_sub(freed);
        }
    }
}

/// The default cap: a share of physical memory (half, like tmpfs).
pub fn default_cap_bytes() -> u64 {
    physical_memory_bytes() / 2
}

/// Physical memory of this machine, in bytes.
pub fn physical_memory_bytes() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions; it returns -1 on error.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if pages <= 0 || page_size <= 0 {
        return 1 << 30;
    }
    pages as u64 * page_size as u64
}

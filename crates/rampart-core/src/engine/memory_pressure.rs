//! Memory pressure (decision 0059): when a change would exceed the memory cap, the coldest
//! memory files move to the disk tier before ENOSPC is answered.

use super::{Ctx, Engine};
use crate::attr::Ino;
use crate::contents::Tier;
use crate::disk::may_migrate;
use crate::error::{Errno, FsResult};
use crate::time::TimeNs;

impl Engine {
    /// Memory pressure (decision 0059): moves the coldest memory files (oldest of mtime and
    /// atime) of at least `--evict-min-size` to the disk tier until `need_bytes` of memory
    /// are freed or no candidate is left. Returns whether any file moved. Called when a
    /// change would exceed the memory cap, before ENOSPC is answered.
    pub(crate) fn evict_for(&self, need_bytes: u64) -> bool {
        let Some(disk) = self.disk().filter(|d| d.config.enabled()) else {
            return false;
        };
        let min_size = disk.config.evict_min_size_bytes;
        let mut candidates: Vec<(TimeNs, Ino, u64)> = {
            let state = self.read_state();
            state
                .inodes()
                .filter_map(|(ino, i)| {
                    let f = i.file()?;
                    let heap = f.heap_bytes();
                    let fits = f.tier() == Tier::Memory
                        && i.size_bytes >= min_size
                        && heap > 0
                        && may_migrate(i.durability(), i.nlink);
                    fits.then(|| (i.mtime_ns.max(i.atime()), ino, heap))
                })
                .collect()
        };
        candidates.sort_unstable();
        candidates.truncate(crate::limits::EVICT_CANDIDATES_MAX);
        let kernel = Ctx {
            kernel: true,
            ..Ctx::library(0, 0)
        };
        let (mut freed, mut moved) = (0u64, false);
        for (_, ino, heap) in candidates {
            if freed >= need_bytes {
                break;
            }
            let _host = disk.exclusive(ino);
            if !self.host_file_free_for_reuse(disk, ino) {
                continue;
            }
            let done = self.mutate(
                &kernel,
                |m, time_ns| self.migrate_to_disk(disk, m, ino, time_ns),
                |_| Vec::new(),
            );
            if done == Ok(true) {
                tracing::debug!("memory pressure: inode {ino} ({heap} bytes) moved to disk");
                freed += heap;
                moved = true;
            }
        }
        moved
    }

    /// Runs `change` once more after memory pressure moved files to the disk tier, when it
    /// failed with ENOSPC while memory is full: a create, a link, a longer name or an xattr
    /// needs memory as a write does (decision 0141). ENOSPC for another reason (a full
    /// directory, no inode numbers left) moves nothing: memory is not full then.
    pub(crate) fn with_room<T>(&self, mut change: impl FnMut() -> FsResult<T>) -> FsResult<T> {
        loop {
            match change() {
                // Memory may be over the cap by more than this change needs (a store opened
                // with a smaller cap): what is over goes too. Each round moves a file or ends.
                Err(Errno::ENOSPC) => {
                    let over_bytes = {
                        let state = self.read_state();
                        let budget = &state.budget;
                        if budget.free_bytes() >= crate::limits::EVICT_SLACK_BYTES {
                            return Err(Errno::ENOSPC);
                        }
                        budget.total_bytes().saturating_sub(budget.cap_bytes())
                    };
                    if !self.evict_for(over_bytes + crate::limits::EVICT_SLACK_BYTES) {
                        return Err(Errno::ENOSPC);
                    }
                }
                done => return done,
            }
        }
    }
}

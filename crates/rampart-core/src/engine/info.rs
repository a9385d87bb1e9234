//! What the engine reports about itself: statfs, counts and memory, invariants.

use super::Engine;
use crate::attr::{StatFs, Stats};
use crate::limits::{BLOCK_SIZE_BYTES, ENTRY_COST_BYTES, NAME_BYTES_MAX};
use crate::namespace::inode::Inode;

impl Engine {
    pub fn statfs(&self) -> StatFs {
        let state = self.read_state();
        let bs = u64::from(BLOCK_SIZE_BYTES);
        let inode_bytes = (std::mem::size_of::<Inode>() as u64 + ENTRY_COST_BYTES + 16).max(1);
        let free = state.budget.free_bytes();
        // With a disk tier taking new files, the file system under the store adds its room
        // (decision 0060): total and free are both tiers'. Its blocks kept for root count as
        // free, not available, as `df` of the host shows them (decision 0120); what the store
        // keeps (journal, checkpoint, `reserve`) is in use. Available is what one file of any
        // size can still be given: a file past the threshold lives on the host alone, and the
        // memory tier's room, like root's blocks, is free but not promised, nor is the room
        // the journal takes next (decision 0144).
        let host = self
            .disk()
            .filter(|d| d.config.enabled())
            .and_then(|d| d.device.space().ok().flatten());
        let avail = host.map_or(free, |h| {
            h.avail_bytes
                .saturating_sub(crate::limits::JOURNAL_RESERVE_BYTES as u64)
        });
        let host = host.unwrap_or_default();
        StatFs {
            block_size: BLOCK_SIZE_BYTES,
            blocks_total: state.budget.cap_bytes().saturating_add(host.total_bytes) / bs,
            blocks_free: free.saturating_add(host.free_bytes) / bs,
            blocks_avail: avail / bs,
            files_total: state.table.live() + free / inode_bytes,
            files_free: free / inode_bytes,
            name_len_max: NAME_BYTES_MAX as u32,
        }
    }

    pub fn stats(&self) -> Stats {
        let state = self.read_state();
        Stats {
            files: state.counts.files,
            directories: state.counts.directories,
            symlinks: state.counts.symlinks,
            other: state.counts.other,
            data_bytes: state.counts.data_bytes,
            memory_used_bytes: state.budget.total_bytes(),
            memory_cap_bytes: state.budget.cap_bytes(),
            disk_files: state.counts.disk_files,
            disk_data_bytes: state.counts.disk_data_bytes,
        }
    }

    /// Which tier holds a regular file's contents.
    pub fn tier(&self, ino: crate::attr::Ino) -> crate::error::FsResult<crate::contents::Tier> {
        let state = self.read_state();
        Ok(state
            .regular_file(ino)?
            .file()
            .expect("regular file")
            .tier())
    }

    /// Checks every invariant; an empty list means the state is consistent.
    pub fn check(&self) -> Vec<String> {
        self.read_state().check()
    }
}

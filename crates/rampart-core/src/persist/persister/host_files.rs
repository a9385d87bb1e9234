//! The disk tier's host files, as the persister orders them (data=ordered): their data is
//! synced before the records that refer to it are committed, and a host file dropped by an
//! op is removed only once that op is durable.

use std::sync::atomic::Ordering;

use super::{lock, Persister};

impl Persister {
    /// Makes the data of the host files `names` durable (data=ordered: before the records
    /// that refer to it). A failure is logged and counted (`host_sync_failures`); the records
    /// still go out, as ext4's data=ordered does after a writeback error: the metadata stays
    /// consistent and the lost data reads as what the host file holds.
    pub(super) fn sync_host_files<'n>(&self, names: impl IntoIterator<Item = &'n String>) {
        for name in names {
            match self.device.sync(name) {
                Ok(()) => {}
                // Removed meanwhile (its inode freed): nothing to keep.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.host_sync_failures.fetch_add(1, Ordering::AcqRel);
                    tracing::error!(
                        "syncing the disk-tier file {name}: {e}; its latest data may be lost"
                    );
                }
            }
        }
    }

    /// Host files no longer needed, now that the ops that dropped them are durable: removed
    /// by `remove_ready`, outside the commit lock (a removal takes the file's host lock,
    /// which comes before it).
    pub(super) fn remove_host_files(&self, names: &[String]) {
        if names.is_empty() {
            return;
        }
        lock(&self.ready_removals).extend_from_slice(names);
    }

    /// Removes the host files whose removal is durable (`remove_host_files`), unless the file
    /// is on the disk tier again meanwhile (moved back to memory, then out again). Called
    /// with no lock held: by the committer after each commit, and after an explicit sync.
    pub(super) fn remove_ready(&self) {
        let names = std::mem::take(&mut *lock(&self.ready_removals));
        if names.is_empty() {
            return;
        }
        let engine = lock(&self.engine).upgrade();
        for name in names {
            let removed = match &engine {
                Some(engine) => engine.remove_host_file_if_unused(&name),
                None => self.device.remove(&name),
            };
            if let Err(e) = removed {
                // Recovery removes it (no live inode of that name): nothing is lost.
                tracing::warn!(
                    "removing the disk-tier file {name}: {e}; the next mount removes it"
                );
            }
        }
    }

    /// Host-file syncs that failed so far (their data may be lost).
    pub fn host_sync_failures(&self) -> u64 {
        self.host_sync_failures.load(Ordering::Acquire)
    }
}

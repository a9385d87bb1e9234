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
                    tracing::error!(
                        "syncing the disk-tier file {name}: {e}; its latest data may be lost"
                    );
                    self.note_host_sync_failure(name);
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

    /// A sync of the host file `name` failed: counted (the fsyncs answered with the next
    /// commit get EIO, `answer_waiters`) and kept for the file's own next fsync, which may
    /// come after those answers (a failure in the committer's timed commit has no waiter):
    /// the kernel reports a writeback error once per open file, so a later sync of the
    /// host file would succeed and the program would never hear of the loss (fsyncgate).
    pub(super) fn note_host_sync_failure(&self, name: &str) {
        self.host_sync_failures.fetch_add(1, Ordering::AcqRel);
        lock(&self.host_sync_errors).insert(name);
    }

    /// Whether a sync of the host file `name` failed since its file's last fsync was told
    /// (`on_disk`: the file is on the disk tier now).
    pub(super) fn take_host_sync_failure(&self, name: &str, on_disk: bool) -> bool {
        lock(&self.host_sync_errors).take(name, on_disk)
    }

    /// The host file `name` is no longer needed: a failure of it has no fsync left to tell.
    pub(super) fn forget_host_sync_failure(&self, name: &str) {
        lock(&self.host_sync_errors).names.remove(name);
    }

    /// Host-file syncs that failed so far (their data may be lost).
    pub fn host_sync_failures(&self) -> u64 {
        self.host_sync_failures.load(Ordering::Acquire)
    }
}

/// The host files whose sync failed and whose file's next fsync has not been told yet.
/// Bounded: past `HOST_SYNC_ERRORS_MAX` names (a disk failing everywhere) every later
/// question about a file on the disk tier is answered "failed", which errs towards EIO,
/// never towards a silent loss. A name leaves when its file is told, freed or moved back.
#[derive(Debug, Default)]
pub(crate) struct SyncErrors {
    names: std::collections::HashSet<String>,
    overflowed: bool,
}

impl SyncErrors {
    fn insert(&mut self, name: &str) {
        if self.names.len() >= crate::limits::HOST_SYNC_ERRORS_MAX {
            if !self.overflowed {
                tracing::error!(
                    "more than {} disk-tier files failed to sync: every fsync of a disk-tier \
                     file now answers EIO until the next mount",
                    crate::limits::HOST_SYNC_ERRORS_MAX
                );
            }
            self.overflowed = true;
            return;
        }
        self.names.insert(name.to_owned());
    }

    fn take(&mut self, name: &str, on_disk: bool) -> bool {
        self.names.remove(name) || (self.overflowed && on_disk)
    }
}

#[cfg(test)]
mod tests {
    use super::SyncErrors;

    #[test]
    fn a_failure_is_told_once_and_an_overflow_to_every_disk_file() {
        let mut errors = SyncErrors::default();
        errors.insert("data/5-1");
        assert!(!errors.take("data/6-1", true));
        assert!(
            errors.take("data/5-1", false),
            "told even once moved back to memory"
        );
        assert!(!errors.take("data/5-1", true));
        for i in 0..=crate::limits::HOST_SYNC_ERRORS_MAX {
            errors.insert(&format!("data/{i}-1"));
        }
        assert_eq!(errors.names.len(), crate::limits::HOST_SYNC_ERRORS_MAX);
        assert!(errors.take("data/0-1", true));
        assert!(
            errors.take("data/0-1", true),
            "after an overflow every disk file is told"
        );
        assert!(!errors.take("data/0-1", false), "but not a memory file");
    }
}

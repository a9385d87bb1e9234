//! The journal's room ahead: the zeros written and synced past its end before a batch goes
//! over them (the journal's `FLAG_ZEROS_AHEAD`), and what a nearly full disk leaves of it.

use super::journal_tail::write_zeros;
use super::Persister;
use crate::persist::device;
use crate::persist::journal;
use crate::persist::recovery::JOURNAL_FILE;

impl Persister {
    /// Makes the journal's file reach past `needed` (the batch of `batch_bytes` at `end` and
    /// the fewest zeros after it) from `file_end`, synced; returns the new file length.
    /// Usually `JOURNAL_RESERVE_BYTES` past the batch. On a nearly full disk only what the
    /// batch needs, rounded to a page (decision 0144): at once when the host is short of room,
    /// so that no commit fills the disk for a moment (each would, each extension being short
    /// again) and fails someone else's write meanwhile; else when the usual room failed.
    /// On an error the caller truncates the file back to `file_end`.
    pub(super) fn make_room_ahead(
        &self,
        end: u64,
        batch_bytes: u64,
        file_end: u64,
        needed: u64,
    ) -> std::io::Result<u64> {
        debug_assert!(needed > file_end);
        let least_end = needed.next_multiple_of(4096);
        let usual_end = end + batch_bytes + journal::JOURNAL_RESERVE_BYTES as u64;
        let short = self.device.space().ok().flatten().is_some_and(|space| {
            space.avail_bytes < 2 * journal::JOURNAL_RESERVE_BYTES as u64 + batch_bytes
        });
        if short {
            return self
                .extend_journal(file_end, least_end, batch_bytes)
                .map(|()| least_end);
        }
        match self.extend_journal(file_end, usual_end, batch_bytes) {
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
                let _ = self.device.truncate(JOURNAL_FILE, file_end);
                self.extend_journal(file_end, least_end, batch_bytes)
                    .map(|()| least_end)
            }
            other => other.map(|()| usual_end),
        }
    }

    /// Grows the journal from `file_end` to `new_end` and syncs it, before a batch of
    /// `batch_bytes` is written. After a small batch the room is written as zeros, so that
    /// the small commits that follow overwrite blocks already written and their fdatasyncs
    /// have no file-system metadata to write (decision 0021). After a large one it is
    /// allocated: zeros there would be written once and then again by the batches, so every
    /// journal byte went to the disk twice (782 MB for PostMark's 280 MB; decision 0093).
    /// Either way a full disk fails here, before any byte of the batch.
    fn extend_journal(&self, file_end: u64, new_end: u64, batch_bytes: u64) -> std::io::Result<()> {
        debug_assert!(file_end < new_end);
        let device = self.device.as_ref();
        if batch_bytes > crate::limits::JOURNAL_ZEROS_WRITTEN_BATCH_BYTES_MAX as u64 {
            device::allocate_or_write_zeros(device, JOURNAL_FILE, file_end, new_end - file_end)?;
        } else {
            write_zeros(device, JOURNAL_FILE, file_end, new_end - file_end)?;
        }
        self.device.sync(JOURNAL_FILE)
    }
}

//! The `reserve` file: room kept for the checkpoint that frees a full disk (decisions 0036,
//! 0119).

use super::{device, lock, locked, Persister, RESERVE_FILE, RESERVE_ZEROS};
use crate::limits::STORE_RESERVE_BYTES_MAX;

impl Persister {
    /// Makes the `reserve` file at least `target` bytes long (zeros, synced), as far as the
    /// disk has room: space kept for a checkpoint when the disk fills up (decision 0036).
    pub(super) fn grow_reserve(&self, target: u64) {
        let _reserve = lock(&self.reserve_file);
        let have = locked(&self.durable).reserve_bytes;
        if have >= target {
            return;
        }
        let result = (|| {
            if self.device.len(RESERVE_FILE)?.is_none() {
                self.device.write(RESERVE_FILE, &[])?;
            }
            let len = self.device.len(RESERVE_FILE)?.unwrap_or(0);
            let mut at = len;
            while at < target {
                // Allocated, not written, where the file system can (decision 0093): room is
                // what it is for, and zeros cost as many bytes of writing as the image.
                let n = (target - at).min(RESERVE_ZEROS.len() as u64);
                let grown =
                    device::allocate_or_write_zeros(self.device.as_ref(), RESERVE_FILE, at, n);
                if let Err(e) = grown {
                    // Keep what was taken: it still holds that much room.
                    let _ = self.device.sync(RESERVE_FILE);
                    locked(&self.durable).reserve_bytes = at;
                    return Err(e);
                }
                at += n;
            }
            self.device.sync(RESERVE_FILE)?;
            locked(&self.durable).reserve_bytes = at;
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!(
                "could not keep {target} bytes of room for a checkpoint in the store's \
                 {RESERVE_FILE} file: {e}; if the disk fills up, deleting files may not be \
                 enough to let the mount write a checkpoint"
            );
        }
    }

    /// Gives up the `reserve` file's room, for the checkpoint that follows.
    pub(super) fn release_reserve(&self) {
        let _reserve = lock(&self.reserve_file);
        if locked(&self.durable).reserve_bytes == 0 {
            return;
        }
        match self.device.remove(RESERVE_FILE) {
            Ok(()) => {
                locked(&self.durable).reserve_bytes = 0;
                tracing::info!("gave up the room reserved for a checkpoint, to write one");
            }
            Err(e) => tracing::warn!("could not remove the store's {RESERVE_FILE} file: {e}"),
        }
    }

    /// How much room the `reserve` file keeps: as much as the last checkpoint, within limits.
    pub(super) fn reserve_target_bytes(&self) -> u64 {
        let image_bytes = locked(&self.durable).image_bytes;
        if self.config.reserve_bytes_min == 0 {
            return 0;
        }
        image_bytes
            .max(self.config.reserve_bytes_min)
            .min(STORE_RESERVE_BYTES_MAX)
    }
}

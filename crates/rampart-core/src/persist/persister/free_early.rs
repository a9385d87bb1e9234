//! Deleting a disk-tier file on a full disk gives its room back (decision 0119). While the
//! journal is stopped on a full disk, a deletion cannot be journaled, and the host file
//! cannot be removed before its deletion is durable; the checkpoint that would make it
//! durable may itself need the room the host file holds. So the host files of deleted files
//! are named in the store's `freed` note (a few bytes, synced, taken from the `reserve` if
//! the disk has none) and removed at once; recovery drops the inodes the note names whose
//! host file is gone, and the next checkpoint removes the note.

use std::sync::atomic::Ordering;

use crate::contents::host_file::parse_host_file_name;
use crate::engine::Engine;
use crate::persist::freed_note::{self, FREED_FILE, FREED_NAMES_MAX};

use super::{lock, locked, Persister, RESERVE_FILE};

/// Room taken from the `reserve` when the note does not fit on the disk.
const NOTE_ROOM_BYTES: u64 = 1 << 20;

impl Persister {
    /// With the journal stopped on a full disk: removes the host files of deleted files that
    /// wait for their deletion to be durable, once the `freed` note names them. Returns how
    /// many were removed (0 when none waits or the note cannot be written).
    pub(super) fn free_deleted_early(&self) -> usize {
        if !self.disk_full() || locked(&self.pending).removals.is_empty() {
            return 0;
        }
        let Some(engine) = lock(&self.engine).upgrade() else {
            return 0;
        };
        // No checkpoint runs meanwhile: one that finishes removes the note, which is right
        // only for names noted before its image was taken. One running now: next round (the
        // committer must not wait for it, fsyncs wait for the committer).
        if !self.try_claim_checkpoint() {
            return 0;
        }
        let freed = self.free_deleted_claimed(&engine);
        self.end_checkpoint_claim();
        freed
    }

    fn free_deleted_claimed(&self, engine: &Engine) -> usize {
        let waiting = std::mem::take(&mut locked(&self.pending).removals);
        // Only files deleted: a host file left by a file moved back to memory holds data the
        // durable state still needs.
        let (mut deleted, kept): (Vec<String>, Vec<String>) = waiting
            .into_iter()
            .partition(|name| owner_deleted(engine, name));
        // A damaged note is not overwritten (fsck reports it): no freeing early then.
        let mut noted = match freed_note::read(self.device.as_ref()) {
            Ok(names) => names,
            Err(e) => {
                if !self.note_unreadable_logged.swap(true, Ordering::AcqRel) {
                    tracing::error!(
                        "the disk is full and the store's {FREED_FILE} note cannot be read ({e}): \
                     deleted disk-tier files give their room back only after a checkpoint"
                    );
                }
                deleted.extend(kept);
                locked(&self.pending).removals.extend(deleted);
                return 0;
            }
        };
        let room = FREED_NAMES_MAX.saturating_sub(noted.len());
        let later = deleted.split_off(deleted.len().min(room));
        let mut give_back = kept;
        give_back.extend(later);
        if deleted.is_empty() {
            locked(&self.pending).removals.extend(give_back);
            return 0;
        }
        noted.extend(deleted.iter().cloned());
        if let Err(e) = self.write_note(&noted) {
            tracing::warn!(
                "the disk is full and the store's {FREED_FILE} note could not be written \
                 ({e}): deleted disk-tier files give their room back only after a checkpoint"
            );
            give_back.extend(deleted);
            locked(&self.pending).removals.extend(give_back);
            return 0;
        }
        locked(&self.pending).removals.extend(give_back);
        for name in &deleted {
            if let Err(e) = engine.remove_host_file_if_unused(name) {
                tracing::warn!(
                    "removing the disk-tier file {name}: {e}; the next mount removes it"
                );
            }
        }
        tracing::info!(
            "the disk is full: freed the host files of {} deleted files before their deletion \
             was durable (named in the store's {FREED_FILE} note)",
            deleted.len()
        );
        deleted.len()
    }

    /// Writes the note; on a full disk, with room taken from the `reserve` once.
    fn write_note(&self, names: &[String]) -> std::io::Result<()> {
        let device = self.device.as_ref();
        match freed_note::write(device, names) {
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
                // A checkpoint starting now may release the reserve meanwhile.
                let _reserve = lock(&self.reserve_file);
                let have = locked(&self.durable).reserve_bytes;
                if have == 0 {
                    return Err(e);
                }
                let left = have.saturating_sub(NOTE_ROOM_BYTES);
                device.truncate(RESERVE_FILE, left)?;
                locked(&self.durable).reserve_bytes = left;
                device.sync(RESERVE_FILE)?;
                freed_note::write(device, names)
            }
            other => other,
        }
    }

    /// After a checkpoint whose image was taken after the note was written (the checkpoint
    /// claim keeps them apart): the image holds none of the inodes it names.
    pub(super) fn remove_note_after_checkpoint(&self) {
        freed_note::remove_if_present(self.device.as_ref());
    }

    /// As `claim_checkpoint`, without waiting: false if a checkpoint runs.
    fn try_claim_checkpoint(&self) -> bool {
        let mut running = lock(&self.checkpointing);
        !std::mem::replace(&mut *running, true)
    }

    /// Ends what `claim_checkpoint` began (a `CheckpointJob` does it when dropped).
    pub(super) fn end_checkpoint_claim(&self) {
        *lock(&self.checkpointing) = false;
        self.checkpoint_ended.notify_all();
    }
}

/// Whether the inode of the host file `name` (that number and generation) is gone by
/// unlinks alone: not one a rename replaced a name of, whose removal waits for the rename to
/// be durable (recovery drops the note's inodes with all their names).
fn owner_deleted(engine: &Engine, name: &str) -> bool {
    let Some((ino, generation)) = parse_host_file_name(name) else {
        return false;
    };
    engine.with_state(|s| {
        s.inode(ino).map_or(true, |i| i.generation != generation)
            && !s.replaced_host_files.contains(name)
    })
}

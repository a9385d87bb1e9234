//! The four steps of a checkpoint ([`CheckpointJob`]): `Persister::checkpoint_begin`, then
//! `write_image`, `copy_tail` and `finish` (the parent module's documentation says why they
//! are in this order).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{
    journal_header, lock, locked, CheckpointJob, Persister, CHECKPOINT_TMP, IMAGE_CHUNK_BYTES,
    IMAGE_PREFAULT_BYTES_MAX, JOURNAL_TMP, RESERVE_ZEROS, TAIL_CHUNK_BYTES,
    TAIL_LEFT_FOR_FINISH_BYTES, TAIL_ROUNDS_MAX,
};
use crate::engine::Engine;
use crate::error::{PersistError, PersistStep};
use crate::persist::checkpoint;
use crate::persist::journal::{self, BatchBuilder};
use crate::persist::recovery::{CHECKPOINT_FILE, CHECKPOINT_PREV, JOURNAL_FILE, JOURNAL_PREV};
use crate::time::now_ns;

/// What a checkpoint does with the backup pair, `checkpoint.prev` and `journal.prev`
/// (decision 0123, docs/FORMAT.md "Checkpoint").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backup {
    /// The usual: removed before the new image is written, and the checkpoint and journal
    /// being replaced become the new pair.
    Rotate,
    /// The checkpoint is damaged and the pair is what recovered the state: kept until the
    /// next checkpoint has replaced the damaged one, then removed (it no longer chains to
    /// the new journal).
    KeepUntilReplaced,
    /// `fsck --repair` rebuilt the state from the pair and what of a journal that cannot
    /// continue it replayed (decision 0133): the pair *and* that journal stay as they are
    /// until the first checkpoint and its new journal are renamed into place, then the pair
    /// is removed (no pair is made). A repair that fails or is cut short before leaves every
    /// file it rebuilt from. No batch may be committed before that checkpoint (the journal
    /// file is not this persister's yet): fsck commits none.
    KeepWithJournalUntilReplaced,
    /// The first checkpoint's image holds changes no journal has (files dropped at mount, a
    /// repair): the old pair plus the new journal would replay to another state (a reused
    /// inode number fails its create). It removes the pair and makes none; the next
    /// checkpoints keep one again.
    Drop,
}

impl CheckpointJob<'_> {
    /// The first op not in the image.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Step 2: writes and syncs `checkpoint.tmp`, after removing the backup pair.
    pub fn write_image(&mut self) -> Result<(), PersistError> {
        let p = self.persister;
        if !p.keep_backup.load(Ordering::Acquire) {
            // The pair goes before the new image is written (decision 0123): on a nearly
            // full disk the image has its room, and the most this checkpoint holds at once
            // is the old pair and the new one, as without a backup.
            for name in [CHECKPOINT_PREV, JOURNAL_PREV] {
                if let Err(e) = p.device.remove(name) {
                    return Err(p.checkpoint_failed(PersistStep::WriteCheckpoint, &e));
                }
            }
        }
        let image = std::mem::take(&mut self.image);
        // In chunks, each sent on to the disk as the next is written: a sync of the whole
        // image at the end would hold every commit's fdatasync behind it for seconds.
        let mut chunks = image.chunks(IMAGE_CHUNK_BYTES);
        let result = p
            .device
            .write(CHECKPOINT_TMP, chunks.next().unwrap_or_default())
            .and_then(|()| {
                for chunk in chunks {
                    if let Err(e) = p.device.start_writeback(CHECKPOINT_TMP) {
                        // Only a hint: the sync below reports real I/O errors.
                        tracing::debug!("starting a checkpoint's writeback: {e}");
                    }
                    p.device.append(CHECKPOINT_TMP, chunk)?;
                }
                p.device.sync(CHECKPOINT_TMP)
            });
        drop(image);
        result.map_err(|e| p.checkpoint_failed(PersistStep::WriteCheckpoint, &e))
    }

    /// Appends the old journal's bytes `[copied_to, end)` to `journal.tmp`.
    fn copy_old_journal(&mut self, end: u64) -> std::io::Result<()> {
        let device = &self.persister.device;
        let mut chunk = vec![0u8; TAIL_CHUNK_BYTES.min((end - self.copied_to) as usize)];
        while self.copied_to < end {
            let want = chunk.len().min((end - self.copied_to) as usize);
            let n = device.read_at(JOURNAL_FILE, self.copied_to, &mut chunk[..want])?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "the journal ends at byte {} but {end} bytes were committed",
                        self.copied_to
                    ),
                ));
            }
            device.append(JOURNAL_TMP, &chunk[..n])?;
            self.copied_to += n as u64;
        }
        Ok(())
    }

    /// Step 3: starts `journal.tmp` with what has been committed since step 1, and syncs it.
    pub fn copy_tail(&mut self) -> Result<(), PersistError> {
        let p = self.persister;
        let result = (|| {
            p.device
                .write(JOURNAL_TMP, &journal_header(p.store_id, self.base_seq))?;
            self.copied_to = self.tail_from;
            if self.restarting {
                return p.device.sync(JOURNAL_TMP);
            }
            // Commits go on meanwhile: copy and sync in rounds until what is left for
            // `finish`, which holds commits, is small.
            for _ in 0..TAIL_ROUNDS_MAX {
                // Every byte below `journal_bytes` is a whole, synced batch.
                let end = locked(&p.durable).journal_bytes;
                self.copy_old_journal(end)?;
                p.device.sync(JOURNAL_TMP)?;
                let left = locked(&p.durable)
                    .journal_bytes
                    .saturating_sub(self.copied_to);
                if left <= TAIL_LEFT_FOR_FINISH_BYTES {
                    break;
                }
            }
            Ok(())
        })();
        result.map_err(|e| p.checkpoint_failed(PersistStep::WriteCheckpointJournal, &e))
    }

    /// Step 4: copies the last batches, and puts the new checkpoint and journal in place.
    pub fn finish(mut self) -> Result<(), PersistError> {
        let p = self.persister;
        let keep_backup = p.keep_backup.load(Ordering::Acquire);
        // A restarting checkpoint's journal starts at its image's op: the old pair would not
        // chain to it (the ops between are in the image only), so it makes none.
        let make_backup =
            !keep_backup && !self.restarting && !p.drop_backup.load(Ordering::Acquire);
        let mut backup_linked = make_backup && p.link_checkpoint_backup();
        let _writing = locked(&p.writing);
        let switching = Instant::now();
        let mut restarted_seq = self.seq;
        let mut journal_bytes = journal::HEADER_BYTES as u64 + (self.copied_to - self.tail_from);
        let prepared = (|| {
            if self.restarting {
                restarted_seq = p.write_gathered(&mut journal_bytes)?;
            } else {
                let end = locked(&p.durable).journal_bytes;
                self.copy_old_journal(end)?;
                journal_bytes = journal::HEADER_BYTES as u64 + (self.copied_to - self.tail_from);
            }
            p.device.append(
                JOURNAL_TMP,
                &RESERVE_ZEROS[..journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN],
            )?;
            p.device.sync(JOURNAL_TMP)?;
            if backup_linked {
                backup_linked = p.link_journal_backup();
            }
            p.device.rename(CHECKPOINT_TMP, CHECKPOINT_FILE)
        })();
        if let Err(e) = prepared {
            // The old checkpoint (or, after its rename, the new one) and the old journal
            // hold every commit: commits go on.
            let e = p.checkpoint_failed(PersistStep::WriteCheckpoint, &e);
            if backup_linked {
                // The pair is the checkpoint and journal in force (the same files: commits
                // go on appending to it), no backup: removed, as a failed link's is.
                p.remove_backup_pair("after a failed checkpoint");
            }
            drop(_writing);
            p.device.release_replaced();
            return Err(e);
        }
        // Past this point a failure leaves unknown which journal is in place: commits stop
        // until a checkpoint restarts them.
        let switched = p.device.rename(JOURNAL_TMP, JOURNAL_FILE).and_then(|()| {
            p.device.len(JOURNAL_FILE)?.ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "the new journal vanished")
            })
        });
        let journal_file_bytes = match switched {
            Ok(bytes) => bytes,
            Err(e) => {
                let e = p.fail(PersistStep::WriteCheckpointJournal, &e);
                locked(&p.durable).checkpoint_error = Some((e.clone(), Instant::now()));
                drop(_writing);
                p.device.release_replaced();
                return Err(e);
            }
        };
        debug_assert_eq!(
            journal_file_bytes,
            journal_bytes + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN as u64
        );
        self.finished = true;
        let switch = switching.elapsed();
        self.record_switch(journal_bytes, journal_file_bytes, restarted_seq, switch);
        drop(_writing);
        // The old checkpoint and journal are freed here, with commits running again.
        p.device.release_replaced();
        p.drop_backup_if_replaced(keep_backup);
        p.drop_backup.store(false, Ordering::Release);
        p.journal_deferred.store(false, Ordering::Release);
        p.remove_note_after_checkpoint(); // under the claim: no name noted after the image
        tracing::info!(
            "checkpoint of {} bytes at op {}; writers paused {:.1} ms, commits {:.1} ms; \
             the new journal holds {} bytes",
            self.image_bytes,
            self.seq,
            self.pause.as_secs_f64() * 1e3,
            switch.as_secs_f64() * 1e3,
            journal_bytes
        );
        Ok(())
    }

    /// Step 4, under the commit lock, once the new journal is in place: the durable state
    /// counts from it.
    fn record_switch(
        &self,
        journal_bytes: u64,
        journal_file_bytes: u64,
        restarted_seq: u64,
        switch: Duration,
    ) {
        let p = self.persister;
        {
            // Still under the commit lock: the next commit counts from this length.
            let mut d = locked(&p.durable);
            // Only a restarting checkpoint's image acknowledges ops (its journal starts at
            // `seq`); others' wait for a commit to the new journal (decision 0123).
            if self.restarting {
                d.seq = d.seq.max(self.seq).max(restarted_seq);
            }
            d.journal_bytes = journal_bytes;
            d.journal_file_bytes = journal_file_bytes;
            d.checkpoints += 1;
            if let Some((e, _)) = d.checkpoint_error.take() {
                tracing::info!("a checkpoint succeeded again (the last one had failed: {e})");
            }
            // Only a restarting checkpoint resumes persistence: a commit that failed while
            // this one ran left ops that neither its image nor its journal holds.
            if self.restarting {
                if let Some(e) = d.error.take() {
                    tracing::info!("persistence resumed after a checkpoint (it had stopped: {e})");
                }
            }
            d.journal_bytes_at_checkpoint = journal_bytes;
            d.image_bytes = self.image_bytes;
            d.last_checkpoint_pause = self.pause;
            d.last_checkpoint_switch = switch;
        }
    }
}

impl Drop for CheckpointJob<'_> {
    fn drop(&mut self) {
        let p = self.persister;
        if !self.finished && self.restarting {
            // The ops gathered for the new journal cannot be written: persistence stays
            // stopped (`fail` has set it so) and the next checkpoint starts afresh.
            let mut pending = locked(&p.pending);
            let next_seq = pending.builder.next_seq();
            pending.builder = BatchBuilder::new(next_seq);
            let group_open = pending.groups_open > 0;
            pending.builder.set_group_open(group_open);
            p.pending_bytes.store(0, Ordering::Release);
            p.failed.store(true, Ordering::Release);
        }
        if !self.finished {
            // Give their space back (a full disk); the old pair is in force.
            for name in [CHECKPOINT_TMP, JOURNAL_TMP] {
                if let Err(e) = p.device.remove(name) {
                    tracing::debug!("removing {name} after a failed checkpoint: {e}");
                }
            }
        }
        p.end_checkpoint_claim();
    }
}

/// Where the image cuts the op stream, settled under the engine's shared lock.
struct ImageCut {
    /// The first op not in the image.
    seq: u64,
    /// The first op of the batches the new journal will hold.
    base_seq: u64,
    /// Persistence had stopped on an I/O error; this checkpoint restarts it.
    restarting: bool,
    /// Host files whose sizes the image holds: their data must be durable before it.
    hosts_in_image: Vec<String>,
    /// Trims the image holds: they must be done on the host files before it is written.
    trims_in_image: Vec<(String, (u64, u64))>,
}

impl Persister {
    /// Step 4, a restarting checkpoint: appends the ops gathered since its image to
    /// `journal.tmp` (counting them in `journal_bytes`); returns the next op's number.
    fn write_gathered(&self, journal_bytes: &mut u64) -> std::io::Result<u64> {
        let gathered = self.take_gathered();
        let (batch, next_seq) = (gathered.framed, gathered.next_seq);
        self.sync_host_files(&gathered.host_files);
        // Removed at the next commit, once this journal is in place.
        locked(&self.pending).removals.extend(gathered.removals);
        if let Some(framed) = batch.map(journal::Unchecked::finish) {
            // Not synced batch by batch: the file is synced before it is renamed.
            let append = |b: &[u8]| self.device.append(JOURNAL_TMP, b);
            framed.batches().try_for_each(append)?;
            *journal_bytes += framed.len() as u64;
        }
        Ok(next_seq)
    }

    /// Step 4, before the commit lock: the checkpoint being replaced becomes
    /// `checkpoint.prev` (a link: no byte copied; `checkpoint` is not written until its
    /// rename). False if there is none (the store's first checkpoint: nothing to keep) or
    /// the link failed (`no_backup_this_time`).
    fn link_checkpoint_backup(&self) -> bool {
        // Asked first: a mirror takes a failed link on its copy for a failing disk.
        let linked = self.device.len(CHECKPOINT_FILE).and_then(|len| match len {
            Some(_) => self
                .device
                .link(CHECKPOINT_FILE, CHECKPOINT_PREV)
                .map(|()| true),
            None => Ok(false),
        });
        linked.unwrap_or_else(|e| {
            self.no_backup_this_time(CHECKPOINT_FILE, &e);
            false
        })
    }

    /// Step 4, under the commit lock, before the renames: the journal becomes
    /// `journal.prev`. Nothing is appended to `journal` from here until it is replaced, so
    /// `journal.prev` is frozen holding every commit made to it, all synced. False if the
    /// link failed (`no_backup_this_time`).
    fn link_journal_backup(&self) -> bool {
        match self.device.link(JOURNAL_FILE, JOURNAL_PREV) {
            Ok(()) => true,
            Err(e) => {
                self.no_backup_this_time(JOURNAL_FILE, &e);
                false
            }
        }
    }

    /// A link failed: a file system without hard links (vfat, exFAT, some FUSE and SMB
    /// mounts: EPERM, EOPNOTSUPP), EMLINK, a full disk. The backup is a spare, not a
    /// checkpoint's duty: this checkpoint goes on without one (decision 0123), the half
    /// pair removed so that no stale one stays. Logged once per run.
    fn no_backup_this_time(&self, name: &str, e: &std::io::Error) {
        self.remove_backup_pair("after a failed link");
        if !self.link_failure_logged.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                "could not link {name} as the checkpoint's backup: {e}; checkpoints go on \
                 without a backup pair ({CHECKPOINT_PREV}, {JOURNAL_PREV}) while links fail \
                 (said once)"
            );
        }
    }

    /// Removes `checkpoint.prev` and `journal.prev` (`when`: for the log).
    fn remove_backup_pair(&self, when: &str) {
        for name in [CHECKPOINT_PREV, JOURNAL_PREV] {
            if let Err(e) = self.device.remove(name) {
                tracing::warn!("removing {name} {when}: {e}; the next checkpoint removes it");
            }
        }
    }

    /// After the checkpoint that replaced a damaged one (`kept`: the pair was kept for it):
    /// the backup pair that stood in for it no longer chains to the new journal (decision
    /// 0123); removed, and the next checkpoints keep one again.
    fn drop_backup_if_replaced(&self, kept: bool) {
        if !kept {
            return;
        }
        tracing::warn!(
            "a new checkpoint replaced the damaged one; the previous checkpoint and journal \
             that recovered the state are removed (the next checkpoint keeps a backup again)"
        );
        self.remove_backup_pair("after replacing the damaged checkpoint");
        self.keep_backup.store(false, Ordering::Release);
    }

    /// Step 1 of a checkpoint: encodes the image. Waits for a checkpoint already running.
    pub fn checkpoint_begin(&self, engine: &Engine) -> Result<CheckpointJob<'_>, PersistError> {
        self.claim_checkpoint();
        let mut job = CheckpointJob {
            persister: self,
            image: Vec::new(),
            image_bytes: 0,
            seq: 0,
            base_seq: 0,
            tail_from: 0,
            copied_to: 0,
            restarting: false,
            pause: Duration::ZERO,
            finished: false,
        };
        let mut image = self.prefaulted_image(engine);
        let created_ns = now_ns();
        let _writing = locked(&self.writing);
        let paused = Instant::now();
        // Under the engine's shared lock no op is being applied, so the image and the
        // sequence number agree. Ops gathered but not yet committed are in the image; they
        // still go to the old journal (its batches must stay contiguous), and recovery skips
        // them.
        let cut = engine.with_state(|state| {
            let cut = self.cut_for_image(engine);
            checkpoint::encode_body(state, created_ns, &mut image);
            cut
        });
        // Every byte below `journal_bytes` is a whole, synced batch, and the next batch (the
        // first of the new journal, from `base_seq`) starts there: read under the commit lock,
        // before a commit can move it. Read after the lock is dropped, a commit in between
        // would leave its batch out of the new journal (whose header says `base_seq`), and
        // its ops, durable, would be lost with the switch.
        let journal_bytes = locked(&self.durable).journal_bytes;
        job.pause = paused.elapsed();
        if !cut.trims_in_image.is_empty() && !cut.restarting {
            // A trim is punched below, and synced, before the image is durable: its op must
            // be in the old journal first (and so in `journal.prev`), or a power cut in
            // between leaves the old checkpoint and journal without the truncate and the
            // file's bytes zeros. Committed after `journal_bytes` was read: `copy_tail` copies
            // this batch (from `base_seq`) into the new journal too. (A restarting checkpoint
            // has no journal to commit to: decision 0123.)
            self.commit_locked()?;
        }
        drop(_writing);
        checkpoint::seal(&mut image, self.store_id, cut.seq, created_ns);
        job.image_bytes = image.len() as u64;
        job.image = image;
        job.seq = cut.seq;
        job.restarting = cut.restarting;
        job.base_seq = cut.base_seq;
        job.tail_from = journal_bytes;
        job.copied_to = journal_bytes;
        // The disk tier (data=ordered): the host files of the ops the image holds are synced,
        // and the trims it holds done, before the image is written.
        self.sync_host_files(&cut.hosts_in_image);
        if let Err(e) = engine.finish_trims(&cut.trims_in_image) {
            // The image would claim trims the host files may not have: not written (the
            // job, dropped, ends the checkpoint).
            return Err(self.checkpoint_failed(PersistStep::WriteCheckpoint, &e));
        }
        debug_assert!(job.base_seq <= cut.seq);
        Ok(job)
    }

    /// Marks a checkpoint as running, once the one running (if any) has ended.
    pub(super) fn claim_checkpoint(&self) {
        let mut running = lock(&self.checkpointing);
        while *running {
            running = self
                .checkpoint_ended
                .wait(running)
                .unwrap_or_else(|e| e.into_inner());
        }
        *running = true;
    }

    /// A buffer for the image, its pages already touched.
    fn prefaulted_image(&self, engine: &Engine) -> Vec<u8> {
        // The image is at most the last one plus what the journal has added since (and at
        // most the memory the engine uses). Touching that many pages now, before any lock,
        // keeps page faults out of the writers' pause; if the memory is not there, the image
        // grows as it is encoded instead.
        let (last_image_bytes, journal_bytes) = {
            let d = locked(&self.durable);
            (d.image_bytes, d.journal_bytes)
        };
        let estimate_bytes = last_image_bytes
            .saturating_add(journal_bytes)
            .min(engine.stats().memory_used_bytes)
            .min(IMAGE_PREFAULT_BYTES_MAX);
        let mut image = Vec::new();
        if image
            .try_reserve_exact(usize::try_from(estimate_bytes).unwrap_or(0))
            .is_ok()
        {
            // Not `vec![0; n]`: calloc hands out untouched pages, which would fault in the
            // pause. Within the reserved capacity, so no allocation here.
            image.resize(image.capacity(), 0u8);
        }
        image
    }

    /// Settles where the image cuts the op stream. Called under the engine's shared lock
    /// and the commit lock (`writing`), so no op is applied nor batch committed meanwhile.
    fn cut_for_image(&self, engine: &Engine) -> ImageCut {
        let mut p = locked(&self.pending);
        // Under the engine's shared lock no mutation runs, so no group of records is open:
        // the image never holds part of one (decision 0103).
        debug_assert_eq!(p.groups_open, 0, "an image taken inside a group of records");
        // The image holds the sizes these ops gave: their data must be durable first.
        let hosts_in_image = p.host_files.iter().cloned().collect();
        // And the trims it holds must be on the host files (recovery only redoes those
        // of the journal).
        let trims_in_image = engine.pending_trims();
        let seq = p.builder.next_seq();
        let restarting = self.failed.load(Ordering::Acquire);
        if restarting {
            // Persistence had stopped on an I/O error and the old journal may end in a
            // failed write: the new journal starts empty at `seq`, and the ops from here
            // on are gathered for it (no longer skipped) until `finish` writes them.
            p.builder = BatchBuilder::new(seq);
            self.pending_bytes.store(0, Ordering::Release);
            self.failed.store(false, Ordering::Release);
        }
        // The next batch committed starts here (under `writing`, none is in flight);
        // the new journal will hold it and the ones after.
        let base_seq = p.builder.taken_to();
        ImageCut {
            seq,
            base_seq,
            restarting,
            hosts_in_image,
            trims_in_image,
        }
    }
}

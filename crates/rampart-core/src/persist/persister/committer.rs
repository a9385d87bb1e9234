//! The committer thread: group commit at every commit interval, earlier deadline or fsync;
//! restarts persistence after an I/O error (by a checkpoint, tried now and then); starts a
//! background checkpoint once the journal has grown enough (the parent module's
//! documentation says when ops become durable).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::{lock, locked, Persister};
use crate::persist::journal::BATCH_BODY_BYTES_MAX;
use crate::persist::recovery::JOURNAL_FILE;

impl Persister {
    /// Commits what is gathered, under the commit lock.
    pub(super) fn commit_locked_now(&self) -> Result<(), crate::error::PersistError> {
        let _writing = locked(&self.writing);
        self.commit_locked()
    }

    /// Drops the journal's synced batches from the page cache (decision 0131). Only a hint:
    /// a range a checkpoint has since made part of a new journal loses nothing either
    /// (POSIX_FADV_DONTNEED never drops a dirty page).
    pub(super) fn drop_committed_cache(&self) {
        let Some((from, to)) = lock(&self.cache_to_drop).take() else {
            return;
        };
        if let Err(e) = self.device.drop_cached(JOURNAL_FILE, from, to - from) {
            tracing::debug!("dropping the journal's cached batches: {e}");
        }
    }

    /// The committer is stopping: whoever still waits is answered after one last commit.
    fn answer_waiters_at_stop(&self) {
        let _ = self.commit_locked_now();
        self.remove_ready();
        self.answer_waiters();
    }
}

pub(super) fn commit_loop(persister: Weak<Persister>) {
    // Group commit: a commit starts as soon as an fsync waits, and the fsyncs that arrive
    // while it syncs share the next one. No gathering delay (as jbd2's batch time): measured
    // over FUSE on io_uring it cost 10-15 % of durable writes at 8 and 16 writers, because
    // the waiting left both the CPUs and the disk idle (docs/decisions/0021).
    let mut last_restart: Option<Instant> = None;
    // The engine's memory use when the last restart was tried: after a full disk, a drop
    // (files deleted) is worth another try before the interval is up.
    let mut memory_at_restart = u64::MAX;
    // Where the journal's growth was last measured: writers that grow it by more than a
    // quarter of the batch bound per commit interval are a burst (`checkpoint_due`,
    // decision 0130). A rate, not what one commit took: commits are asked for at
    // `COMMIT_EARLY_BODY_BYTES` (decision 0128), and fsyncs commit on their own threads.
    let mut growth_from = match persister.upgrade() {
        Some(p) => (Instant::now(), locked(&p.durable).journal_bytes),
        None => return,
    };
    loop {
        let Some(p) = persister.upgrade() else { return };
        if p.stop.load(Ordering::Acquire) {
            return;
        }
        let interval = p.config.commit_interval;
        // The archiver's next held file (decision 0090): the engine is asked outside every
        // persister lock (it takes only the archiver's).
        let engine = lock(&p.engine).upgrade();
        let archive_at = engine.as_ref().and_then(|e| e.archive_next_due());
        drop(engine);
        let interval_at = Instant::now() + interval;
        wait_for_commit(&p, archive_at.map_or(interval_at, |a| a.min(interval_at)));
        if p.stop.load(Ordering::Acquire) {
            p.answer_waiters_at_stop();
            return;
        }
        // What the kernel wrote behind the engine (FUSE passthrough) is logged and synced
        // with this commit: the commit-interval deadline holds for it too.
        if let Some(engine) = lock(&p.engine).upgrade() {
            engine.sync_passthrough_files();
            // Held files whose time has come are made present, and committed now.
            engine.archive_due(Instant::now());
        }
        {
            let writing = locked(&p.writing);
            let committed = p.commit_locked();
            drop(writing);
            p.remove_ready();
            p.answer_waiters();
            p.drop_committed_cache();
            if committed.is_err() {
                // Persistence has stopped on an I/O error (a full or failing disk): a
                // checkpoint, which does not depend on the journal, restarts it. Try one now
                // and then, not after every failed commit.
                let retry = p.config.restart_retry_interval;
                // Deleted disk-tier files give their room back now (decision 0119).
                let freed = p.free_deleted_early();
                let memory = engine_memory_bytes(&p);
                let shrunk = p.disk_full() && (memory < memory_at_restart || freed > 0);
                if shrunk || last_restart.is_none_or(|at| at.elapsed() >= retry) {
                    last_restart = Some(Instant::now());
                    memory_at_restart = memory;
                    start_background_checkpoint(&p);
                }
                continue;
            }
        }
        last_restart = None;
        memory_at_restart = u64::MAX;
        let (grown_bytes, image_bytes, busy, failed_lately) = {
            let d = locked(&p.durable);
            let now = Instant::now();
            let busy = journal_outgrows_interval(
                d.journal_bytes.saturating_sub(growth_from.1),
                now.duration_since(growth_from.0),
                interval,
            );
            growth_from = (now, d.journal_bytes);
            (
                d.journal_bytes
                    .saturating_sub(d.journal_bytes_at_checkpoint),
                d.image_bytes,
                busy,
                // A failed checkpoint is tried again after the retry interval, not at every
                // commit.
                d.checkpoint_error
                    .as_ref()
                    .is_some_and(|(_, at)| at.elapsed() < p.config.restart_retry_interval),
            )
        };
        let busy = busy && room_to_defer(&p, grown_bytes, image_bytes);
        let due = p.config.checkpoint_due(grown_bytes, image_bytes, busy);
        if due && !failed_lately {
            start_background_checkpoint(&p);
        }
    }
}

/// Whether the disk under the store has room, twice over, for the journal to grow to the
/// deferred bound and for a checkpoint after it: a burst on a small disk checkpoints as
/// before rather than meet a full disk, which stops persistence (decision 0130). Asked
/// only when a checkpoint is due (a statvfs per commit of a burst, no more).
fn room_to_defer(p: &Persister, grown_bytes: u64, image_bytes: u64) -> bool {
    if !p.config.checkpoint_due(grown_bytes, image_bytes, false) {
        return true;
    }
    let deferred_bytes = p
        .config
        .checkpoint_deferred_journal_bytes
        .max(p.config.checkpoint_due_bytes(image_bytes));
    let needed_bytes = deferred_bytes
        .saturating_sub(grown_bytes)
        .saturating_add(image_bytes)
        .saturating_mul(2);
    match p.device.space() {
        Ok(Some(space)) => space.avail_bytes >= needed_bytes,
        // A device without a file system under it (tests' simulated one): nothing to fill.
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Whether the journal, grown by `grown_bytes` in `elapsed`, grows faster than a quarter of
/// the batch bound per commit interval: the writers outrun the interval (a burst).
fn journal_outgrows_interval(grown_bytes: u64, elapsed: Duration, interval: Duration) -> bool {
    let burst_bytes_per_interval = (BATCH_BODY_BYTES_MAX / 4) as u128;
    u128::from(grown_bytes) * interval.as_nanos() > burst_bytes_per_interval * elapsed.as_nanos()
}

/// Sleeps until `interval_at` (the commit interval, or the archiver's next held file), or the
/// earliest short deadline of what is gathered (`due_at`), or someone asks for a commit. A
/// wakeup that only moved `due_at` earlier (`rearm`) sleeps again, until the new time.
fn wait_for_commit(p: &Persister, interval_at: Instant) {
    let mut guard = locked(&p.pending);
    while guard.waiters.is_empty() && !p.stop.load(Ordering::Acquire) {
        // A bound reached while the last commit ran woke nobody (`ask_commit`); not once
        // persistence has stopped (the commit would fail, taking nothing).
        if guard.wants_commit() && !p.failed.load(Ordering::Acquire) {
            break;
        }
        let at = guard.due_at.map_or(interval_at, |d| d.min(interval_at));
        let now = Instant::now();
        if now >= at {
            break;
        }
        guard.rearm = false;
        guard.committer_sleeping = true;
        guard = guard.wait_timeout(&p.wake, at - now);
        guard.committer_sleeping = false;
        // Woken for another reason too (a batch or a list grown to its bound): commit.
        if !guard.rearm || guard.wants_commit() {
            break;
        }
    }
}

/// The memory the attached engine uses (u64::MAX without one).
fn engine_memory_bytes(p: &Persister) -> u64 {
    lock(&p.engine)
        .upgrade()
        .map_or(u64::MAX, |engine| engine.stats().memory_used_bytes)
}

/// Starts a checkpoint on a thread of its own, unless one is under way; commits go on.
fn start_background_checkpoint(p: &Arc<Persister>) {
    let Some(engine) = lock(&p.engine).upgrade() else {
        return;
    };
    if p.checkpoint_requested.swap(true, Ordering::AcqRel) {
        return;
    }
    let persister = Arc::clone(p);
    let spawned = std::thread::Builder::new()
        .name("checkpointer".into())
        .spawn(move || {
            if !persister.stop.load(Ordering::Acquire) {
                // A failure is logged and sticky (`fail`); the mount serves on from memory.
                let _ = persister.checkpoint(&engine);
            }
            persister
                .checkpoint_requested
                .store(false, Ordering::Release);
        });
    match spawned {
        // The one before has ended (`checkpoint_requested` was clear): dropping its handle
        // detaches nothing that still runs.
        Ok(handle) => {
            *lock(&p.checkpointer) = Some(handle);
            p.checkpoints_started.fetch_add(1, Ordering::AcqRel);
        }
        Err(e) => {
            tracing::warn!("could not start a checkpoint thread: {e}");
            p.checkpoint_requested.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_growth_faster_than_a_quarter_bound_per_interval() {
        let interval = Duration::from_secs(5);
        let quarter = (BATCH_BODY_BYTES_MAX / 4) as u64;
        // Commits asked for early (4 MiB) in quick succession: a burst.
        assert!(journal_outgrows_interval(
            4 << 20,
            Duration::from_millis(20),
            interval
        ));
        // A commit interval's worth of a slow stream, however it was committed: not one.
        assert!(!journal_outgrows_interval(4 << 20, interval, interval));
        assert!(!journal_outgrows_interval(quarter, interval, interval));
        assert!(journal_outgrows_interval(quarter + 1, interval, interval));
        // Nothing grown, or a journal just replaced by a checkpoint's: not one.
        assert!(!journal_outgrows_interval(0, Duration::ZERO, interval));
        assert!(!journal_outgrows_interval(0, interval, interval));
    }
}

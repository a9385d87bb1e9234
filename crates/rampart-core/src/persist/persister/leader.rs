//! Group commit led by the asker (decision 0100): an fsync that finds no commit under way and
//! no one else waiting writes and syncs the batch on its own thread, instead of waking the
//! committer and being woken again by it. On one writer that removes two cross-thread
//! wake-ups from every durable write; on many, fsyncs still share one disk sync.
//!
//! The commit itself is the committer's (`commit_locked` under `writing`): the same journal
//! order, zeros ahead, data=ordered host-file syncs, sticky errors and checkpoint interplay.
//! Only the thread that runs it differs. Who leads:
//! - the asker, when it also asked the sync before this one (one writer alone: a FUSE
//!   request's pid), the last commit answered at most one fsync, no other fsync waits,
//!   persistence is not stopping, and `writing` is free at once. The asker's identity, not
//!   only what waits, decides: a FUSE queue thread that commits does not read the requests
//!   queued behind it meanwhile, so with every writer on its CPU no one would seem to wait,
//!   and commits would go one writer at a time (measured: 685 commits for 1,200 writes at
//!   8 writers, all led, before this rule);
//! - otherwise the committer, as before: the asker's answer comes after the commit covering
//!   it, and every fsync arriving meanwhile shares that commit. A FUSE thread is then never
//!   held by a disk sync while other writers have requests for it (8 writers measured in
//!   docs/BENCHMARKS.md, "Where a durable write's time goes").

use std::sync::atomic::Ordering;

use super::{locked, try_locked, Locked, Persister};
use crate::op::SyncDone;

/// The largest batch body a fsync commits on its own thread (decision 0100): a durable small
/// write's batch is a few KiB; more is a bulk writer's, whose write and sync would hold the
/// FUSE queue thread.
const LED_COMMIT_BODY_BYTES_MAX: usize = 256 << 10;

/// The asker of a `sync_async` made without one: the calling thread (library callers and
/// tests, whose threads are the writers).
pub(super) fn thread_asker() -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::thread::current().id().hash(&mut h);
    h.finish()
}

impl Persister {
    /// `sync_async`: `done` runs once every op applied so far is durable, on this thread
    /// before the return when it leads the commit, else on the committer's.
    pub(super) fn sync_leading(&self, asker: u64, done: SyncDone) {
        // Pid 0 is every caller outside the daemon's pid namespace: not one writer.
        let alone = asker != 0 && self.last_asker.swap(asker, Ordering::AcqRel) == asker;
        let mut p = locked(&self.pending);
        let target = p.builder.next_seq();
        if locked(&self.durable).seq >= target {
            drop(p);
            return done(self.sticky_error().map_or(Ok(()), Err));
        }
        if let Some(e) = self.sticky_error() {
            drop(p);
            return done(Err(e));
        }
        // Only a small commit is led: a FUSE queue thread that commits serves nothing else
        // meanwhile, so gathered host files (another writer's disk-tier data to sync first) or
        // a large batch go to the committer, which absorbs them off the request path.
        let lead = alone
            && p.waiters.is_empty()
            && p.host_files.is_empty()
            && p.builder.body_bytes() <= LED_COMMIT_BODY_BYTES_MAX
            && self.last_commit_answered.load(Ordering::Acquire) <= 1
            && !self.stop.load(Ordering::Acquire);
        if lead {
            drop(p);
            if let Some(writing) = try_locked(&self.writing) {
                match self.commit_to(writing, target) {
                    Err(CommitFailure::Journal(e)) => {
                        done(Err(e));
                        // Those who asked meanwhile get the sticky error too.
                        self.answer_waiters();
                        // The committer restarts persistence after an I/O error: let it see
                        // it now.
                        self.wake.notify_one();
                    }
                    // Answered with those who asked meanwhile, by `answer_waiters`: a host
                    // file whose sync failed since the last answers (this commit's, or the
                    // committer's that held these ops already) makes each of them EIO, as for
                    // the committer's waiters (decision 0057).
                    Ok(()) | Err(CommitFailure::HostFile) => {
                        locked(&self.pending).waiters.push((target, done));
                        self.answer_waiters();
                        if locked(&self.durable).seq < target {
                            // The commit stopped short (an open group of records): the
                            // committer takes the rest at once.
                            self.wake.notify_one();
                        }
                    }
                }
                return;
            }
            // A commit is under way (a checkpoint's switch, or the committer): wait for the
            // next one (or, if the one under way covered these ops already, be answered with
            // its host-file failures at once).
            p = locked(&self.pending);
            if locked(&self.durable).seq >= target {
                p.waiters.push((target, done));
                drop(p);
                return self.answer_waiters();
            }
        }
        p.waiters.push((target, done));
        // The committer writes at once: everyone who asks meanwhile shares that sync. Awake,
        // it finds this waiter before it sleeps again (`committer_sleeping` is read under
        // `pending`). Signalled after `pending` is released: woken while it is still held,
        // the committer would block on it at once and need a second wake-up (decision 0116).
        let sleeping = p.committer_sleeping;
        drop(p);
        if sleeping {
            self.wake.notify_one();
        }
    }

    /// Commits on this thread, holding `writing`, unless the ops before `target` became
    /// durable meanwhile (another's commit held them). Fails if the commit failed, or if a
    /// disk-tier file's data could not be synced.
    pub(super) fn commit_to(
        &self,
        writing: Locked<'_, ()>,
        target: u64,
    ) -> Result<(), CommitFailure> {
        if locked(&self.durable).seq >= target {
            return Ok(());
        }
        let failures = self.host_sync_failures();
        self.commit_locked()
            .map_err(|e| CommitFailure::Journal(e.into()))?;
        drop(writing);
        if crate::disk::host_locks_held() {
            // The committer removes them (this thread may hold the lock a removal takes).
            self.wake.notify_one();
        } else {
            self.remove_ready();
        }
        if self.host_sync_failures() > failures {
            return Err(CommitFailure::HostFile);
        }
        Ok(())
    }
}

/// Why a commit made on the asker's thread failed.
pub(super) enum CommitFailure {
    /// The journal could not be written or synced (the sticky error).
    Journal(std::io::Error),
    /// A disk-tier file's data could not be synced (the journal went on).
    HostFile,
}

impl CommitFailure {
    /// As an `io::Error`, with `host_file` for a host file's failure.
    pub(super) fn into_io(self, host_file: impl FnOnce() -> std::io::Error) -> std::io::Error {
        match self {
            CommitFailure::Journal(e) => e,
            CommitFailure::HostFile => host_file(),
        }
    }
}

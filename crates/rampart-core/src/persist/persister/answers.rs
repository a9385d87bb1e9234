//! Answering the fsyncs a commit made durable. The answers of one commit are given together
//! (`set_answer_batch`): over FUSE on io_uring each answer from the commit thread is handed
//! to the queue thread of the asker's CPU, and a queue woken once commits all of its answers
//! in one pass, where one wake per answer woke it again for each answer pushed while it ran
//! (decision 0116).

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use super::{locked, Persister};
use crate::op::SyncDone;

/// How a group of answers is given: the transport's batching scope, or None (each at once).
static ANSWER_BATCH: OnceLock<fn(&mut dyn FnMut())> = OnceLock::new();

/// Sets, once per process, how the answers to the fsyncs one commit covers are given
/// together: `batch` calls its argument, which answers them all, and may defer what the
/// answers wake (the FUSE adapter passes `fuser::replies_batched`). Later calls change nothing.
pub fn set_answer_batch(batch: fn(&mut dyn FnMut())) {
    let _ = ANSWER_BATCH.set(batch);
}

impl Persister {
    /// Answers the `sync_async` callers whose ops are now durable (or all of them, with the
    /// error, if persistence has stopped).
    pub(super) fn answer_waiters(&self) {
        let durable = locked(&self.durable).seq;
        let error = self.sticky_error();
        // A host-file sync failed since the last answers: the fsyncs answered now may have
        // asked for that file's data, so each gets EIO (conservative: per file it is not
        // known which asker wrote what; decision 0057).
        let host_failures = self.host_sync_failures();
        let host_failed = self
            .host_failures_answered
            .swap(host_failures, Ordering::AcqRel)
            < host_failures;
        let mut ready: Vec<SyncDone> = {
            let mut p = locked(&self.pending);
            let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut p.waiters)
                .into_iter()
                .partition(|(target, _)| error.is_some() || *target <= durable);
            p.waiters = waiting;
            ready.into_iter().map(|(_, done)| done).collect()
        };
        self.last_commit_answered
            .store(ready.len(), Ordering::Release);
        if ready.is_empty() {
            return;
        }
        let mut answer = || {
            for done in ready.drain(..) {
                done(match &error {
                    Some(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                    None if host_failed => Err(std::io::Error::from_raw_os_error(libc::EIO)),
                    None => Ok(()),
                });
            }
        };
        match ANSWER_BATCH.get() {
            Some(batch) => batch(&mut answer),
            None => answer(),
        }
    }
}

//! Brings the kernel's view of a file back to the engine's after the engine refused a WRITE.
//!
//! Under the writeback cache a write(2) lands in the kernel's page cache and moves the kernel's
//! size at once; the daemon sees the bytes only when the pages are written back. When it
//! refuses them (ENOSPC at the memory cap, EFBIG past the largest file) the kernel has already
//! shown that size, and it keeps it and the refused pages: it trusts its own size of a file it
//! caches (`fuse_change_attributes` ignores the size a GETATTR reply carries), and no FUSE
//! notification shrinks it. Only a truncate through the kernel does.
//!
//! So, after replying to the refused WRITE, the adapter hands the inode to one worker thread,
//! which opens the file through the mount by its handle (inode number and generation), makes
//! the kernel write back whatever else is dirty, and if the kernel's size is still past the
//! engine's, truncates it to the engine's (the kernel drops its pages past it), then has the
//! kernel drop the file's remaining pages (refused bytes inside the file). Never from the
//! request handler: the pages of the refused WRITE stay under writeback until its reply, and
//! both steps wait for them (docs/decisions/0031). Nor from any thread of the daemon when it
//! has a helper process: those calls wait on the daemon's own mount (`own_mount`, decision
//! 0087).

use std::collections::HashSet;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};

use fuser::{INodeNo, Notifier};
use parking_lot::Mutex;
use rampart_core::{Engine, Ino};

use crate::own_mount::{InProcess, OwnMountCalls};

/// Inodes waiting for the worker; more refusals meanwhile are dropped with a warning (the next
/// refusal of the same file brings it back).
const QUEUE_LEN_MAX: usize = 64;

/// The adapter's side: where refused inodes go.
pub(crate) struct Refusals {
    queue: SyncSender<Ino>,
    /// Inodes queued and not yet taken: ten refused WRITEs of one file make one job.
    queued: Arc<Mutex<HashSet<Ino>>>,
}

/// The worker's side, started once the session (and its notifier) exists.
pub(crate) struct Worker {
    jobs: Receiver<Ino>,
    queued: Arc<Mutex<HashSet<Ino>>>,
}

pub(crate) fn channel() -> (Refusals, Worker) {
    let (queue, jobs) = std::sync::mpsc::sync_channel(QUEUE_LEN_MAX);
    let queued = Arc::new(Mutex::new(HashSet::new()));
    (
        Refusals {
            queue,
            queued: queued.clone(),
        },
        Worker { jobs, queued },
    )
}

impl Refusals {
    /// The engine refused a WRITE to `ino` (called after the reply is sent).
    pub(crate) fn refused(&self, ino: Ino) {
        if !self.queued.lock().insert(ino) {
            return;
        }
        match self.queue.try_send(ino) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.queued.lock().remove(&ino);
                tracing::warn!(
                    "too many refused writes at once: the kernel may show inode {ino}'s \
                     refused size until its caches are dropped"
                );
            }
            // The worker is gone (no mount point to reach the file through).
            Err(TrySendError::Disconnected(_)) => {
                self.queued.lock().remove(&ino);
            }
        }
    }
}

/// How the worker reaches the mount: through the helper the daemon sets once it has one
/// ([`crate::Mounted::set_own_mount_calls`]), else from its own thread.
pub(crate) type CallsSlot = Arc<OnceLock<Arc<dyn OwnMountCalls>>>;

impl Worker {
    /// Starts the worker thread; it ends when the adapter (the sender) is dropped.
    pub(crate) fn start(
        self,
        in_process: InProcess,
        calls: CallsSlot,
        engine: Arc<Engine>,
        notifier: Notifier,
    ) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("kernel-view".into())
            .spawn(move || {
                let mut warned = false;
                while let Ok(ino) = self.jobs.recv() {
                    self.queued.lock().remove(&ino);
                    let calls: &dyn OwnMountCalls = match calls.get() {
                        Some(c) => c.as_ref(),
                        None => &in_process,
                    };
                    if let Err(e) = realign(calls, &engine, &notifier, ino) {
                        if !warned {
                            tracing::warn!(
                                "after a refused write to inode {ino}, the kernel's view of it \
                                 could not be corrected (it shows the refused size until its \
                                 caches are dropped): {e}"
                            );
                            warned = true;
                        }
                    }
                }
            })?;
        Ok(())
    }
}

/// One correction: see the module's comment.
fn realign(
    calls: &dyn OwnMountCalls,
    engine: &Engine,
    notifier: &Notifier,
    ino: Ino,
) -> std::io::Result<()> {
    let Ok(attr) = engine.getattr(ino) else {
        return Ok(()); // gone: the kernel forgets it too
    };
    // The kernel's other dirty pages reach the engine first (they may be refused too), so that
    // its size is compared with everything the engine will get.
    let Some(kernel_size) = calls.sync_and_size(ino, attr.generation)? else {
        return Ok(()); // gone, or not our mount
    };
    let engine_size = engine.getattr(ino).map_or(kernel_size, |a| a.size_bytes);
    if kernel_size > engine_size {
        calls.truncate_past(ino, attr.generation, engine_size)?;
    }
    // Refused bytes inside the file: the engine holds zeros (or older bytes) there.
    match notifier.inval_inode(INodeNo(ino), 0, 0) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
        _ => Ok(()),
    }
}

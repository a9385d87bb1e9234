//! Reads of disk-tier files that must wait for the disk, served by threads of their own
//! (decision 0073).
//!
//! A FUSE-over-io_uring queue thread serves every request of its CPU one after the other, and a
//! `/dev/fuse` worker is one of a few: a read that waits for the disk there holds up every
//! request behind it, so a mount served at most two cold reads at a time where the host file
//! system, read directly by 8 or 32 threads, has that many in flight. So the FUSE thread reads
//! only what the host's page cache holds (`Engine::read_if_cached`) and hands the rest here;
//! the reply goes back from this thread (fuser takes replies from any thread).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use parking_lot::Mutex;
use rampart_core::limits::{DISK_READS_QUEUED_MAX, DISK_READ_THREADS_MAX};

/// A read to make and answer.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct DiskReads {
    queue: SyncSender<Job>,
    jobs: Arc<Mutex<Receiver<Job>>>,
    /// Threads started, and how many of them wait for a job.
    started: AtomicUsize,
    idle: Arc<AtomicUsize>,
}

impl Default for DiskReads {
    fn default() -> Self {
        let (queue, jobs) = std::sync::mpsc::sync_channel(DISK_READS_QUEUED_MAX);
        DiskReads {
            queue,
            jobs: Arc::new(Mutex::new(jobs)),
            started: AtomicUsize::new(0),
            idle: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl DiskReads {
    /// Queues `job` for a reading thread (one more is started if none is idle and the limit
    /// allows); gives it back when the queue is full or no thread can run it, for the caller
    /// to run itself.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        if self.idle.load(Ordering::Acquire) == 0 && self.start_thread().is_err() {
            // Running threads, if any, still take queued jobs.
            if self.started.load(Ordering::Acquire) == 0 {
                return Err(job);
            }
        }
        match self.queue.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => Err(job),
        }
    }

    /// Starts one more thread, unless the limit is reached.
    fn start_thread(&self) -> Result<(), ()> {
        let n = self.started.fetch_add(1, Ordering::AcqRel);
        if n >= DISK_READ_THREADS_MAX {
            self.started.fetch_sub(1, Ordering::AcqRel);
            return Err(());
        }
        let jobs = Arc::clone(&self.jobs);
        let idle = Arc::clone(&self.idle);
        // Counted idle before it runs, so that a burst does not start a thread per job.
        idle.fetch_add(1, Ordering::AcqRel);
        let spawned = std::thread::Builder::new()
            .name(format!("disk-read-{n}"))
            .spawn(move || serve(&jobs, &idle));
        if let Err(e) = spawned {
            tracing::warn!("cannot start a disk-read thread: {e}; the FUSE thread reads");
            self.idle.fetch_sub(1, Ordering::AcqRel);
            self.started.fetch_sub(1, Ordering::AcqRel);
            return Err(());
        }
        Ok(())
    }
}

/// A reading thread: runs jobs until the adapter (the sender) is gone.
fn serve(jobs: &Mutex<Receiver<Job>>, idle: &AtomicUsize) {
    loop {
        let job = jobs.lock().recv();
        let Ok(job) = job else {
            idle.fetch_sub(1, Ordering::AcqRel);
            return;
        };
        idle.fetch_sub(1, Ordering::AcqRel);
        // A panic drops the reply, which answers EIO; the thread goes on.
        if catch_unwind(AssertUnwindSafe(job)).is_err() {
            tracing::error!("bug: a disk-tier read panicked; answered EIO");
        }
        idle.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn jobs_run_on_other_threads_and_a_panic_does_not_stop_them() {
        let reads = DiskReads::default();
        let (done, results) = channel();
        let me = std::thread::current().id();
        reads
            .submit(Box::new(|| panic!("a bad job")))
            .unwrap_or_else(|_| panic!("queued"));
        for i in 0..10 {
            let done = done.clone();
            let job: Job = Box::new(move || done.send((i, std::thread::current().id())).unwrap());
            if let Err(job) = reads.submit(job) {
                job();
            }
        }
        let mut seen: Vec<_> = (0..10).map(|_| results.recv().unwrap()).collect();
        seen.sort_by_key(|(i, _)| *i);
        assert_eq!(
            seen.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        assert!(
            seen.iter().all(|(_, t)| *t != me),
            "ran on the reading threads"
        );
        assert!(reads.started.load(Ordering::Acquire) <= DISK_READ_THREADS_MAX);
    }
}

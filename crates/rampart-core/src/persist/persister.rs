//! The persister: receives every applied op (it is the engine's `OpSink`), gathers them into
//! journal batches, and makes them durable with group commit: one append and one fdatasync
//! for every op gathered since the last one, from any number of writers.
//!
//! When ops become durable:
//! - within `commit_interval` (default 5 s, like ext4's commit interval) in any case;
//! - at once when someone asks (`sync`: fsync, fdatasync, O_SYNC/O_DSYNC writes, fsyncdir);
//!   concurrent askers share one fdatasync;
//! - at a checkpoint, which writes the whole state and starts an empty journal.
//!
//! Checkpoints: the image is encoded under the engine's shared lock (writers wait for that
//! long; `last_checkpoint_pause` reports it), written to `checkpoint.tmp`, synced, and renamed
//! over `checkpoint`; then a new, empty journal replaces the old one the same way. A crash
//! anywhere in between leaves either the old checkpoint and the old journal, or the new
//! checkpoint and a journal whose ops it already holds (recovery skips them).
//!
//! An I/O error is sticky: the persister stops writing, every later `sync` fails with it, and
//! `status` reports it; the mount keeps serving from memory so nothing is lost that was not
//! already at risk.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::attr::Durability;
use crate::engine::Engine;
use crate::op::{Op, OpSink, SyncDone};
use crate::persist::checkpoint;
use crate::persist::device::Device;
use crate::persist::journal::{self, BatchBuilder, BATCH_BODY_MAX_BYTES};
use crate::persist::recovery::{CHECKPOINT_FILE, JOURNAL_FILE};
use crate::time::now_ns;

const CHECKPOINT_TMP: &str = "checkpoint.tmp";
const JOURNAL_TMP: &str = "journal.tmp";

#[derive(Clone, Debug)]
pub struct PersistConfig {
    /// Longest time an op may wait to become durable.
    pub commit_interval: Duration,
    /// A checkpoint is taken when the journal grows past this.
    pub checkpoint_journal_bytes: u64,
    /// Writers wait while more than this is gathered and not yet written (back-pressure).
    pub pending_bytes_max: usize,
}

impl Default for PersistConfig {
    fn default() -> Self {
        PersistConfig {
            commit_interval: Duration::from_secs(5),
            checkpoint_journal_bytes: 256 << 20,
            pending_bytes_max: 128 << 20,
        }
    }
}

/// Figures for `rampart status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PersistStats {
    /// Ops applied but not yet durable.
    pub ops_pending: u64,
    pub journal_bytes: u64,
    /// Bytes gathered and not yet written.
    pub pending_bytes: u64,
    pub commits: u64,
    pub checkpoints: u64,
    pub last_checkpoint_pause: Duration,
    pub error: Option<String>,
}

struct Pending {
    builder: BatchBuilder,
    /// Callers of `sync_async` waiting for ops before a sequence number to be durable.
    waiters: Vec<(u64, SyncDone)>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("builder", &self.builder)
            .field("waiters", &self.waiters.len())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Durable {
    /// Every op before this sequence number is durable.
    seq: u64,
    journal_bytes: u64,
    commits: u64,
    checkpoints: u64,
    last_checkpoint_pause: Duration,
    error: Option<String>,
}

#[derive(Debug)]
pub struct Persister {
    device: Arc<dyn Device>,
    store_id: [u8; 16],
    config: PersistConfig,
    pending: Mutex<Pending>,
    wake: Condvar,
    /// Signalled when the committer has taken what was gathered (back-pressure).
    drained: Condvar,
    durable: Mutex<Durable>,
    /// Serialises journal appends and checkpoints.
    writing: Mutex<()>,
    engine: Mutex<Weak<Engine>>,
    stop: AtomicBool,
    /// Mirrors `durable.error.is_some()`, read on every op without a lock.
    failed: AtomicBool,
    /// Mirrors the builder's gathered bytes, read after every op without a lock (throttle).
    pending_bytes: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn journal_header(store_id: [u8; 16], base_seq: u64) -> Vec<u8> {
    journal::Header {
        store_id,
        base_seq,
        created_ns: now_ns(),
    }
    .encode()
    .to_vec()
}

impl Persister {
    /// Starts persisting after recovery: `next_seq` is the first op to come, and the journal's
    /// valid prefix is `journal_valid_len` bytes (0: there is none). A torn tail is cut off so
    /// that new batches follow the valid ones.
    pub fn start(
        device: Arc<dyn Device>,
        store_id: [u8; 16],
        next_seq: u64,
        journal_valid_len: u64,
        config: PersistConfig,
    ) -> std::io::Result<Arc<Persister>> {
        let journal_bytes = if journal_valid_len == 0 {
            device.write(JOURNAL_TMP, &journal_header(store_id, next_seq))?;
            device.sync(JOURNAL_TMP)?;
            device.rename(JOURNAL_TMP, JOURNAL_FILE)?;
            journal::HEADER_BYTES as u64
        } else {
            if device.len(JOURNAL_FILE)? != Some(journal_valid_len) {
                device.truncate(JOURNAL_FILE, journal_valid_len)?;
                device.sync(JOURNAL_FILE)?;
            }
            journal_valid_len
        };
        let persister = Arc::new(Persister {
            device,
            store_id,
            config,
            pending: Mutex::new(Pending {
                builder: BatchBuilder::new(next_seq),
                waiters: Vec::new(),
            }),
            wake: Condvar::new(),
            drained: Condvar::new(),
            durable: Mutex::new(Durable {
                seq: next_seq,
                journal_bytes,
                ..Durable::default()
            }),
            writing: Mutex::new(()),
            engine: Mutex::new(Weak::new()),
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            pending_bytes: AtomicUsize::new(0),
        });
        let worker = Arc::downgrade(&persister);
        std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || commit_loop(worker))?;
        Ok(persister)
    }

    /// Lets the persister take checkpoints of `engine` (it holds it weakly: the engine holds
    /// the persister).
    pub fn attach(&self, engine: &Arc<Engine>) {
        *lock(&self.engine) = Arc::downgrade(engine);
    }

    pub fn commit_interval(&self) -> Duration {
        self.config.commit_interval
    }

    pub fn stats(&self) -> PersistStats {
        let (pending, pending_bytes) = {
            let p = lock(&self.pending);
            (p.builder.next_seq(), p.builder.body_bytes() as u64)
        };
        let d = lock(&self.durable);
        PersistStats {
            ops_pending: pending.saturating_sub(d.seq),
            journal_bytes: d.journal_bytes,
            pending_bytes,
            commits: d.commits,
            checkpoints: d.checkpoints,
            last_checkpoint_pause: d.last_checkpoint_pause,
            error: d.error.clone(),
        }
    }

    fn fail(&self, what: &str, e: &std::io::Error) -> std::io::Error {
        let message = format!("{what}: {e}");
        tracing::error!("persistence stopped: {message}");
        let mut d = lock(&self.durable);
        d.error.get_or_insert(message);
        self.failed.store(true, Ordering::Release);
        std::io::Error::new(e.kind(), d.error.clone().unwrap_or_default())
    }

    fn sticky_error(&self) -> Option<std::io::Error> {
        lock(&self.durable)
            .error
            .as_ref()
            .map(|m| std::io::Error::other(m.clone()))
    }

    /// Writes and syncs the open batch. The caller holds `writing`.
    fn commit_locked(&self) -> std::io::Result<()> {
        if let Some(e) = self.sticky_error() {
            return Err(e);
        }
        let (batch, next_seq) = {
            let mut p = lock(&self.pending);
            let taken = (p.builder.take_batch(), p.builder.next_seq());
            self.pending_bytes.store(0, Ordering::Release);
            self.drained.notify_all();
            taken
        };
        let Some(batch) = batch else {
            return Ok(());
        };
        self.device
            .append(JOURNAL_FILE, &batch)
            .map_err(|e| self.fail("appending to the journal", &e))?;
        self.device
            .sync(JOURNAL_FILE)
            .map_err(|e| self.fail("syncing the journal", &e))?;
        let mut d = lock(&self.durable);
        d.seq = d.seq.max(next_seq);
        d.journal_bytes += batch.len() as u64;
        d.commits += 1;
        Ok(())
    }

    /// Makes every op applied so far durable (fsync). Concurrent callers share the work: a
    /// caller whose ops went out in another's batch returns without a sync of its own.
    pub fn sync(&self) -> std::io::Result<()> {
        let target = lock(&self.pending).builder.next_seq();
        if lock(&self.durable).seq >= target {
            return self.sticky_error().map_or(Ok(()), Err);
        }
        let _writing = lock(&self.writing);
        if lock(&self.durable).seq >= target {
            return Ok(());
        }
        self.commit_locked()
    }

    /// Writes a checkpoint of `engine` and starts an empty journal. It does not depend on the
    /// journal, so it is tried even after an I/O error, and its success clears that error.
    pub fn checkpoint(&self, engine: &Engine) -> std::io::Result<()> {
        let _writing = lock(&self.writing);
        let paused = Instant::now();
        // Under the engine's shared lock no op is being applied, so the image and the
        // sequence number agree; the ops gathered but not written are in the image.
        let (image, seq) = engine.with_state(|state| {
            let mut p = lock(&self.pending);
            let seq = p.builder.next_seq();
            p.builder = BatchBuilder::new(seq);
            self.pending_bytes.store(0, Ordering::Release);
            (checkpoint::encode(state, self.store_id, seq, now_ns()), seq)
        });
        let pause = paused.elapsed();
        let result = (|| {
            self.device.write(CHECKPOINT_TMP, &image)?;
            self.device.sync(CHECKPOINT_TMP)?;
            self.device.rename(CHECKPOINT_TMP, CHECKPOINT_FILE)?;
            let header = journal_header(self.store_id, seq);
            self.device.write(JOURNAL_TMP, &header)?;
            self.device.sync(JOURNAL_TMP)?;
            self.device.rename(JOURNAL_TMP, JOURNAL_FILE)?;
            Ok::<u64, std::io::Error>(header.len() as u64)
        })();
        let journal_bytes = result.map_err(|e| self.fail("writing a checkpoint", &e))?;
        let mut d = lock(&self.durable);
        d.seq = d.seq.max(seq);
        d.journal_bytes = journal_bytes;
        d.checkpoints += 1;
        self.failed.store(false, Ordering::Release);
        if let Some(e) = d.error.take() {
            tracing::info!("persistence resumed after a checkpoint (it had stopped: {e})");
        }
        d.last_checkpoint_pause = pause;
        tracing::info!(
            "checkpoint of {} bytes at op {seq}; writers paused {:.1} ms",
            image.len(),
            pause.as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Clean shutdown: stops the committer and writes a final checkpoint, so that the next
    /// mount has nothing to replay.
    pub fn shutdown(&self, engine: &Engine) -> std::io::Result<()> {
        {
            // Under the lock the committer waits on, so the wakeup cannot fall between its
            // check and its wait.
            let _pending = lock(&self.pending);
            self.stop.store(true, Ordering::Release);
            self.wake.notify_all();
        }
        let result = self.checkpoint(engine);
        self.answer_waiters();
        result
    }

    /// The committer is stopping: whoever still waits is answered after one last commit.
    fn answer_waiters_at_stop(&self) {
        {
            let _writing = lock(&self.writing);
            let _ = self.commit_locked();
        }
        self.answer_waiters();
    }
}

impl OpSink for Persister {
    fn applied(&self, op: &Op<'_>, durability: Durability) {
        if durability == Durability::Volatile {
            // Never reaches the store; recovery drops volatile files.
            return;
        }
        let mut p = lock(&self.pending);
        if self.failed.load(Ordering::Acquire) {
            // Nothing is written until a checkpoint succeeds; keep only the numbering, so
            // memory does not grow with ops that cannot be journaled.
            p.builder.skip();
            return;
        }
        p.builder.add(op, op.time_ns());
        self.pending_bytes
            .store(p.builder.body_bytes(), Ordering::Release);
        if p.builder.body_bytes() > BATCH_BODY_MAX_BYTES / 4 {
            // Keep batches bounded: let the committer write this one now.
            self.wake.notify_one();
        }
    }

    fn sync(&self) -> std::io::Result<()> {
        Persister::sync(self)
    }

    fn throttle(&self) {
        if self.pending_bytes.load(Ordering::Acquire) <= self.config.pending_bytes_max {
            return;
        }
        let mut p = lock(&self.pending);
        while p.builder.body_bytes() > self.config.pending_bytes_max
            && !self.stop.load(Ordering::Acquire)
            && !self.failed.load(Ordering::Acquire)
        {
            self.wake.notify_one();
            p = self
                .drained
                .wait_timeout(p, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn sync_async(&self, done: SyncDone) {
        let mut p = lock(&self.pending);
        let target = p.builder.next_seq();
        if lock(&self.durable).seq >= target {
            drop(p);
            return done(self.sticky_error().map_or(Ok(()), Err));
        }
        if let Some(e) = self.sticky_error() {
            drop(p);
            return done(Err(e));
        }
        p.waiters.push((target, done));
        // The committer writes at once: everyone who asks meanwhile shares that sync.
        self.wake.notify_one();
    }
}

impl Persister {
    /// Answers the `sync_async` callers whose ops are now durable (or all of them, with the
    /// error, if persistence has stopped).
    fn answer_waiters(&self) {
        let durable = lock(&self.durable).seq;
        let error = self.sticky_error();
        let ready: Vec<SyncDone> = {
            let mut p = lock(&self.pending);
            let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut p.waiters)
                .into_iter()
                .partition(|(target, _)| error.is_some() || *target <= durable);
            p.waiters = waiting;
            ready.into_iter().map(|(_, done)| done).collect()
        };
        for done in ready {
            done(match &error {
                Some(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                None => Ok(()),
            });
        }
    }
}

/// Longest wait for more fsyncs to join a commit.
const GATHER_MAX: Duration = Duration::from_millis(2);

fn commit_loop(persister: Weak<Persister>) {
    // Group commit as jbd2 does it: when the last commit served several fsyncs, the next one
    // waits up to about one commit's time for as many to gather, instead of syncing for the
    // first alone and leaving the rest to the one after.
    let mut last_waiters = 0usize;
    let mut commit_time = Duration::from_micros(500);
    loop {
        let Some(p) = persister.upgrade() else { return };
        if p.stop.load(Ordering::Acquire) {
            return;
        }
        let interval = p.config.commit_interval;
        {
            let mut guard = lock(&p.pending);
            if guard.waiters.is_empty() {
                guard = p
                    .wake
                    .wait_timeout(guard, interval)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            if last_waiters > 1 && !guard.waiters.is_empty() {
                let deadline = Instant::now() + commit_time.min(GATHER_MAX);
                while guard.waiters.len() < last_waiters {
                    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    guard = p
                        .wake
                        .wait_timeout(guard, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            last_waiters = guard.waiters.len();
        }
        if p.stop.load(Ordering::Acquire) {
            p.answer_waiters_at_stop();
            return;
        }
        {
            let started = Instant::now();
            let _writing = lock(&p.writing);
            let committed = p.commit_locked();
            drop(_writing);
            commit_time = (commit_time * 7 + started.elapsed()) / 8;
            p.answer_waiters();
            if committed.is_err() {
                continue;
            }
        }
        let journal_bytes = lock(&p.durable).journal_bytes;
        if journal_bytes > p.config.checkpoint_journal_bytes {
            let engine = lock(&p.engine).upgrade();
            if let Some(engine) = engine {
                let _ = p.checkpoint(&engine);
            }
        }
    }
}

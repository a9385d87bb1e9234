//! The persister: receives every applied op (it is the engine's `OpSink`), gathers them into
//! journal batches, and makes them durable with group commit: one write at the journal's end
//! and one fdatasync per batch for every op gathered since the last commit, from any number of
//! writers (a commit is one batch unless more than 32 MiB gathered).
//!
//! When ops become durable:
//! - within `commit_interval` (default 5 s, like ext4's commit interval) in any case;
//! - at once when someone asks (`sync`: fsync, fdatasync, O_SYNC/O_DSYNC writes, fsyncdir);
//!   concurrent askers share one fdatasync; a lone asker commits on its own thread (the
//!   submodule `leader`, decision 0100), others wake the committer;
//! - at a checkpoint, which writes the whole state; the new journal holds only what was
//!   committed after the image was taken.
//!
//! Checkpoints run on a thread of their own, in four steps (`CheckpointJob`, in the submodule
//! `checkpoint_job`), so that commits go on meanwhile:
//! 1. `begin`: the image is encoded under the engine's shared lock (writers wait for that
//!    long; `last_checkpoint_pause` reports it). It holds every op before `seq`.
//! 2. `write_image`: the image goes to `checkpoint.tmp` and is synced. Commits keep writing
//!    to the old journal.
//! 3. `copy_tail`: the batches committed since step 1 are copied from the old journal into
//!    `journal.tmp`, behind a header whose `base_seq` is the first op of those batches.
//! 4. `finish`, holding the commit lock (no fsync is answered meanwhile;
//!    `last_checkpoint_switch` reports it): the few batches committed since step 3 are
//!    copied too, `journal.tmp` is synced, `checkpoint.tmp` is renamed over `checkpoint`, and
//!    `journal.tmp` over `journal`.
//!
//! A crash anywhere leaves a valid pair: before the first rename, the old checkpoint and the
//! old journal (which holds every commit); between the renames, the new checkpoint and the old
//! journal (recovery skips the ops before `seq`); after them, the new checkpoint and a journal
//! holding every commit since step 1 (again skipping the ops the image holds).
//!
//! The journal's health and the checkpoints' are kept apart (decision 0037). An I/O error of
//! the journal is sticky: the persister stops writing, every later `sync` fails with it, and
//! `status` reports it, until a checkpoint restarts persistence; the mount keeps serving from
//! memory so nothing is lost that was not already at risk. A failed checkpoint leaves the
//! old checkpoint and journal in force: commits go on, `status` reports the failure, and it
//! is retried every `restart_retry_interval`.
//!
//! A full disk (decision 0036): every batch is written over zeros synced ahead of it (the
//! journal's `FLAG_ZEROS_AHEAD`), so only the zeros' extension can meet ENOSPC, before any
//! batch byte is written; fsyncs then answer ENOSPC. The store keeps a `reserve` file that
//! is given up to let the checkpoint that restarts persistence fit, and written again after.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::attr::Durability;
use crate::engine::Engine;
use crate::error::{PersistError, PersistStep};
use crate::latency::LatencyHistogram;
use crate::lock_order::{self, Rank};
use crate::op::{Op, OpSink, SyncDone};
use crate::persist::device::{self, Device};
use crate::persist::journal::{self, BatchBuilder};
use crate::persist::recovery::{CHECKPOINT_FILE, JOURNAL_FILE};

mod answers;
pub(crate) mod at_risk;
mod checkpoint_job;
mod committer;
mod free_early;
mod host_files;
mod journal_tail;
use journal_tail::{journal_header, open_journal};
mod journal_room;
mod leader;
mod reserve;

pub use answers::set_answer_batch;
use at_risk::{AtRisk, Lags};
pub use checkpoint_job::Backup;

const CHECKPOINT_TMP: &str = "checkpoint.tmp";
/// The committer thread's name (it must never wait for itself: `throttle`).
const COMMITTER_THREAD: &str = "committer";
const JOURNAL_TMP: &str = "journal.tmp";
/// Space held for the checkpoint that restarts persistence after a full disk (decision 0036).
pub const RESERVE_FILE: &str = "reserve";

#[derive(Clone, Debug)]
pub struct PersistConfig {
    /// Longest time an op may wait to become durable.
    pub commit_interval: Duration,
    /// A checkpoint is taken each time the journal has grown by this much since the last one.
    pub checkpoint_journal_bytes: u64,
    /// Also wait until the journal has grown by the last checkpoint's size, so that
    /// checkpoints write at most as many bytes as the journal does, however much the mount
    /// holds (like Redis's `auto-aof-rewrite-percentage 100`; decision 0025).
    pub checkpoint_scales_with_image: bool,
    /// While writers keep the committer busy (a commit took a full batch bound), a
    /// checkpoint that is due waits until the journal has grown by this much, or until a
    /// commit takes less (the burst is over): one image at the end of a burst instead of one
    /// per `checkpoint_due_bytes` during it, when the CPU is needed by the writers (decision
    /// 0130). Never less than `checkpoint_due_bytes`; only with `checkpoint_scales_with_image`
    /// (an explicit size keeps its exact meaning). 0: never deferred.
    pub checkpoint_deferred_journal_bytes: u64,
    /// Writers wait while more than this is gathered and not yet written (back-pressure).
    pub pending_bytes_max: usize,
    /// After an I/O error stopped persistence, or a checkpoint failed, how often a checkpoint
    /// is tried again (sooner after a full disk when files were deleted).
    pub restart_retry_interval: Duration,
    /// Room kept in the store's `reserve` file for the checkpoint that frees the disk after
    /// it filled up: as much as the last checkpoint, at least this (0: none; decision 0036).
    /// The daemon sets `limits::STORE_RESERVE_BYTES_MIN`.
    pub reserve_bytes_min: u64,
}

impl Default for PersistConfig {
    fn default() -> Self {
        PersistConfig {
            commit_interval: Duration::from_secs(5),
            checkpoint_journal_bytes: 256 << 20,
            checkpoint_scales_with_image: true,
            checkpoint_deferred_journal_bytes: crate::limits::CHECKPOINT_DEFERRED_JOURNAL_BYTES,
            pending_bytes_max: 128 << 20,
            restart_retry_interval: Duration::from_secs(30),
            reserve_bytes_min: 0,
        }
    }
}

impl PersistConfig {
    /// How much the journal must grow after a checkpoint of `image_bytes` before the next.
    pub fn checkpoint_due_bytes(&self, image_bytes: u64) -> u64 {
        if self.checkpoint_scales_with_image {
            self.checkpoint_journal_bytes.max(image_bytes)
        } else {
            self.checkpoint_journal_bytes
        }
    }

    /// Whether a background checkpoint starts after a commit, the journal having grown by
    /// `grown_bytes` since the last one of `image_bytes`; `busy`: that commit took a full
    /// batch bound (the writers outrun the commit interval). A busy burst defers it up to
    /// `checkpoint_deferred_journal_bytes` (decision 0130).
    pub fn checkpoint_due(&self, grown_bytes: u64, image_bytes: u64, busy: bool) -> bool {
        let due_bytes = self.checkpoint_due_bytes(image_bytes);
        if grown_bytes <= due_bytes {
            return false;
        }
        !busy
            || !self.checkpoint_scales_with_image
            || grown_bytes > due_bytes.max(self.checkpoint_deferred_journal_bytes)
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
    /// How long the last checkpoint made writers wait (encoding the image).
    pub last_checkpoint_pause: Duration,
    /// How long the last checkpoint held commits, and so fsyncs (switching journals).
    pub last_checkpoint_switch: Duration,
    /// The last checkpoint's length.
    pub checkpoint_image_bytes: u64,
    /// The journal length at which the next background checkpoint is due.
    pub checkpoint_due_at_journal_bytes: u64,
    pub error: Option<String>,
    /// How long each commit took to write and sync its batches.
    pub commit_latency: LatencyHistogram,
    /// How long each checkpoint took, from its start to the new files in place.
    pub checkpoint_latency: LatencyHistogram,
    /// With ops pending: the oldest is at most this old (the time since the last commit took
    /// what was gathered); None when nothing is pending or no commit has run yet.
    pub oldest_pending_age_max: Option<Duration>,
    /// The last background checkpoint's failure, until one succeeds (commits go on).
    pub checkpoint_error: Option<String>,
}

struct Pending {
    builder: BatchBuilder,
    /// Callers of `sync_async` waiting for ops before a sequence number to be durable.
    waiters: Vec<(u64, SyncDone)>,
    /// Host files of disk-tier files changed by the ops gathered: synced before those ops'
    /// batch is written (data=ordered). At most one entry per disk-tier file.
    host_files: std::collections::BTreeSet<String>,
    /// Host files to remove once the ops gathered are durable (freed inodes, files moved
    /// back to memory).
    removals: Vec<String>,
    /// What the ops gathered changed, per category and inode.
    at_risk: AtRisk,
    /// The earliest deadline shorter than the commit interval among the ops gathered
    /// (`Durability::short_deadline`): the committer commits by then (issue 14 item 7).
    due_at: Option<Instant>,
    /// `due_at` became earlier since the committer went to sleep: it sleeps again, until then.
    rearm: bool,
    /// Groups of records being handed over, which commits take whole (`Level::group`).
    groups_open: u32,
    /// The committer was woken because what is gathered reached a bound (`wants_commit`),
    /// and has not taken it yet: the ops that follow do not wake it again (a condvar's
    /// notify is a futex system call even with nobody waiting: one per op, measured at 3 %
    /// of a library writer's time; decision 0113).
    commit_asked: bool,
    /// Writers waiting in `throttle` for a commit to take what is gathered: a commit
    /// signals `drained` only when there are some (each signal is a system call).
    throttled: u32,
    /// The committer sleeps on `wake`: an fsync's waiter needs to wake it. Otherwise it is
    /// committing or about to, and sees the waiter before it sleeps again (each signal is a
    /// system call on the asker's FUSE thread).
    committer_sleeping: bool,
}

/// What a commit takes from what was gathered.
struct Gathered {
    framed: Option<journal::Unchecked>,
    next_seq: u64,
    host_files: std::collections::BTreeSet<String>,
    removals: Vec<String>,
    at_risk: AtRisk,
}

impl Pending {
    /// Whether what is gathered has reached a bound at which the committer is woken
    /// (`applied`, `changed`, `remove_after_commit`).
    fn wants_commit(&self) -> bool {
        self.builder.body_bytes() > crate::limits::COMMIT_EARLY_BODY_BYTES
            || self.removals.len() >= crate::limits::HOST_REMOVALS_PENDING_MAX
            || self.at_risk.is_full()
    }

    /// Wakes the committer for a bound reached (`wants_commit`), once per commit.
    fn ask_commit(&mut self, wake: &Condvar) {
        if !self.commit_asked {
            self.commit_asked = true;
            wake.notify_one();
        }
    }
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
    /// The journal's committed length: every byte below it is a whole, synced batch.
    journal_bytes: u64,
    /// The journal file's length: `journal_bytes` and the reserved zeros after it.
    journal_file_bytes: u64,
    commits: u64,
    checkpoints: u64,
    last_checkpoint_pause: Duration,
    last_checkpoint_switch: Duration,
    /// The journal's length right after the last checkpoint (the tail it copied): the next
    /// checkpoint is due once the journal has grown past this by the configured amount.
    journal_bytes_at_checkpoint: u64,
    /// The last checkpoint's length (the one found at start, then each new one's).
    image_bytes: u64,
    error: Option<PersistError>,
    commit_latency: LatencyHistogram,
    checkpoint_latency: LatencyHistogram,
    /// When the last commit took what was gathered: every op pending now came after it.
    last_take: Option<Instant>,
    /// The last checkpoint's failure and when it happened, until one succeeds.
    checkpoint_error: Option<(PersistError, Instant)>,
    /// The `reserve` file's length (decision 0036).
    reserve_bytes: u64,
    /// What the commit under way (or one that failed) took and has not made durable.
    in_flight: AtRisk,
    /// Per category, the longest wait of a change before its commit, since start.
    lags: Lags,
}

#[derive(Debug)]
pub struct Persister {
    device: Arc<dyn Device>,
    store_id: [u8; 16],
    config: PersistConfig,
    pending: Ranked<Pending>,
    wake: Condvar,
    /// Signalled when an op closes its group of records (`Level::group`).
    group_closed: Condvar,
    /// Signalled when the committer has taken what was gathered (back-pressure).
    drained: Condvar,
    durable: Ranked<Durable>,
    /// Serialises journal writes and the steps of a checkpoint that touch the journal.
    writing: Ranked<()>,
    /// True while a checkpoint runs (one at a time); `checkpoint_ended` signals its end.
    checkpointing: Mutex<bool>,
    /// Held while the `reserve` file and `reserve_bytes` change (grown, released, or cut for
    /// the `freed` note), which happens both under the checkpoint claim and outside it.
    pub(super) reserve_file: Mutex<()>,
    checkpoint_ended: Condvar,
    /// The committer has started a background checkpoint that has not ended yet.
    checkpoint_requested: AtomicBool,
    /// Background checkpoints the committer has started (`background_checkpoints_started`).
    checkpoints_started: std::sync::atomic::AtomicU64,
    /// The journal's synced bytes to drop from the page cache (decision 0131), taken by the
    /// committer once it has answered the waiters, outside `writing`: the call may drain
    /// every CPU's page lists, which no commit should wait for.
    cache_to_drop: Mutex<Option<(u64, u64)>>,
    committer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The last background checkpoint thread (joined at shutdown).
    checkpointer: Mutex<Option<std::thread::JoinHandle<()>>>,
    engine: Mutex<Weak<Engine>>,
    stop: AtomicBool,
    /// Mirrors `durable.error.is_some()`, read on every op without a lock.
    failed: AtomicBool,
    /// Mirrors the builder's gathered bytes, read after every op without a lock (throttle).
    pending_bytes: AtomicUsize,
    /// Host-file syncs that failed (`sync_host_files`).
    host_sync_failures: std::sync::atomic::AtomicU64,
    /// The host files whose sync failed, until their file's next fsync is told
    /// (`take_host_sync_error`). Held alone.
    host_sync_errors: Mutex<host_files::SyncErrors>,
    /// Whether the committer said that the `freed` note cannot be read (once, not per round).
    note_unreadable_logged: std::sync::atomic::AtomicBool,
    /// `host_sync_failures` when waiters were last answered (`answer_waiters`).
    host_failures_answered: std::sync::atomic::AtomicU64,
    /// Host files to remove now that their removal is durable (`remove_ready`). Held alone.
    ready_removals: Mutex<Vec<String>>,
    /// How many fsyncs the last commit answered: at most one, and the next asker commits on
    /// its own thread (`leader`, decision 0100).
    last_commit_answered: AtomicUsize,
    /// Who asked for the last sync (`sync_async_by`): the same asker twice in a row, and it
    /// may commit on its own thread (`leader`).
    last_asker: std::sync::atomic::AtomicU64,
    /// [`Backup::KeepUntilReplaced`] until a checkpoint has replaced the damaged one.
    keep_backup: AtomicBool,
    /// [`Backup::Drop`] until a checkpoint has succeeded.
    drop_backup: AtomicBool,
    /// [`Backup::KeepWithJournalUntilReplaced`] until a checkpoint has put its journal in
    /// place: `journal` is not this persister's, nothing is appended to it.
    journal_deferred: AtomicBool,
    /// Whether a failed link (no backup made) has been logged: once per run, not per
    /// checkpoint.
    link_failure_logged: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A mutex with a place in the lock order (`lock_order`): the ones held while another lock
/// is taken. The others here (`checkpointing`, `engine`, the thread handles) are only ever
/// held alone.
#[derive(Debug)]
struct Ranked<T> {
    rank: Rank,
    mutex: Mutex<T>,
}

impl<T> Ranked<T> {
    fn new(rank: Rank, value: T) -> Ranked<T> {
        Ranked {
            rank,
            mutex: Mutex::new(value),
        }
    }
}

/// A held [`Ranked`] mutex.
struct Locked<'a, T> {
    guard: MutexGuard<'a, T>,
    _held: lock_order::Held,
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<'a, T> Locked<'a, T> {
    /// Waits on `condvar` for at most `timeout`; the lock (and its rank) is held again after.
    fn wait_timeout(self, condvar: &Condvar, timeout: Duration) -> Locked<'a, T> {
        let Locked { guard, _held } = self;
        let guard = condvar
            .wait_timeout(guard, timeout)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        Locked { guard, _held }
    }
}

fn locked<T>(m: &Ranked<T>) -> Locked<'_, T> {
    let held = lock_order::acquire(m.rank);
    Locked {
        guard: lock(&m.mutex),
        _held: held,
    }
}

/// As [`locked`], without waiting: None if another thread holds it.
fn try_locked<T>(m: &Ranked<T>) -> Option<Locked<'_, T>> {
    let guard = match m.mutex.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    Some(Locked {
        guard,
        _held: lock_order::acquire(m.rank),
    })
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
    ) -> Result<Arc<Persister>, PersistError> {
        let (seq, len) = (next_seq, journal_valid_len);
        Persister::start_with(device, store_id, seq, len, config, Backup::Rotate)
    }

    /// [`Persister::start`], saying what the first checkpoint does with the backup pair:
    /// [`Backup::KeepUntilReplaced`] after a recovery that needed it (decision 0123).
    pub fn start_with(
        device: Arc<dyn Device>,
        store_id: [u8; 16],
        next_seq: u64,
        journal_valid_len: u64,
        config: PersistConfig,
        backup: Backup,
    ) -> Result<Arc<Persister>, PersistError> {
        let opening = |e: std::io::Error| PersistError::new(PersistStep::OpenJournal, &e);
        let journal_deferred = backup == Backup::KeepWithJournalUntilReplaced;
        let (journal_bytes, journal_file_bytes) = open_journal(
            device.as_ref(),
            store_id,
            next_seq,
            journal_valid_len,
            journal_deferred,
        )
        .map_err(opening)?;
        // Only the reserve's measure: a damaged checkpoint that cannot even be looked at
        // (recovered from the backup pair) is replaced by the first checkpoint.
        let image_bytes = device.len(CHECKPOINT_FILE).ok().flatten().unwrap_or(0);
        let reserve_bytes = device.len(RESERVE_FILE).map_err(opening)?.unwrap_or(0);
        let persister = Arc::new(Persister {
            device,
            store_id,
            config,
            pending: Ranked::new(
                Rank::PersisterPending,
                Pending {
                    builder: BatchBuilder::new(next_seq),
                    waiters: Vec::new(),
                    host_files: Default::default(),
                    removals: Vec::new(),
                    at_risk: AtRisk::default(),
                    due_at: None,
                    rearm: false,
                    groups_open: 0,
                    commit_asked: false,
                    throttled: 0,
                    committer_sleeping: false,
                },
            ),
            wake: Condvar::new(),
            group_closed: Condvar::new(),
            drained: Condvar::new(),
            durable: Ranked::new(
                Rank::PersisterDurable,
                Durable {
                    seq: next_seq,
                    journal_bytes,
                    journal_file_bytes,
                    image_bytes,
                    reserve_bytes,
                    ..Durable::default()
                },
            ),
            writing: Ranked::new(Rank::PersisterWriting, ()),
            checkpointing: Mutex::new(false),
            reserve_file: Mutex::new(()),
            checkpoint_ended: Condvar::new(),
            checkpoint_requested: AtomicBool::new(false),
            checkpoints_started: std::sync::atomic::AtomicU64::new(0),
            cache_to_drop: Mutex::new(None),
            committer: Mutex::new(None),
            checkpointer: Mutex::new(None),
            engine: Mutex::new(Weak::new()),
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            pending_bytes: AtomicUsize::new(0),
            host_sync_failures: std::sync::atomic::AtomicU64::new(0),
            host_sync_errors: Mutex::new(host_files::SyncErrors::default()),
            note_unreadable_logged: std::sync::atomic::AtomicBool::new(false),
            host_failures_answered: std::sync::atomic::AtomicU64::new(0),
            ready_removals: Mutex::new(Vec::new()),
            last_commit_answered: AtomicUsize::new(0),
            last_asker: std::sync::atomic::AtomicU64::new(u64::MAX),
            keep_backup: AtomicBool::new(matches!(
                backup,
                Backup::KeepUntilReplaced | Backup::KeepWithJournalUntilReplaced
            )),
            drop_backup: AtomicBool::new(backup == Backup::Drop),
            journal_deferred: AtomicBool::new(journal_deferred),
            link_failure_logged: AtomicBool::new(false),
        });
        persister.grow_reserve(persister.reserve_target_bytes());
        let worker = Arc::downgrade(&persister);
        let committer = std::thread::Builder::new()
            .name(COMMITTER_THREAD.into())
            .spawn(move || committer::commit_loop(worker))
            .map_err(opening)?;
        *lock(&persister.committer) = Some(committer);
        Ok(persister)
    }

    /// Lets the persister take checkpoints of `engine` (it holds it weakly: the engine holds
    /// the persister).
    pub fn attach(&self, engine: &Arc<Engine>) {
        *lock(&self.engine) = Arc::downgrade(engine);
    }

    /// How many background checkpoints the committer has started: its decision after a
    /// commit is counted before its next commit begins (`PersistConfig::checkpoint_due`).
    pub fn background_checkpoints_started(&self) -> u64 {
        self.checkpoints_started.load(Ordering::Acquire)
    }

    pub fn commit_interval(&self) -> Duration {
        self.config.commit_interval
    }

    pub fn stats(&self) -> PersistStats {
        let (pending, pending_bytes) = {
            let p = locked(&self.pending);
            (p.builder.next_seq(), p.builder.body_bytes() as u64)
        };
        let d = locked(&self.durable);
        PersistStats {
            ops_pending: pending.saturating_sub(d.seq),
            journal_bytes: d.journal_bytes,
            pending_bytes,
            commits: d.commits,
            checkpoints: d.checkpoints,
            last_checkpoint_pause: d.last_checkpoint_pause,
            last_checkpoint_switch: d.last_checkpoint_switch,
            checkpoint_image_bytes: d.image_bytes,
            checkpoint_due_at_journal_bytes: d
                .journal_bytes_at_checkpoint
                .saturating_add(self.config.checkpoint_due_bytes(d.image_bytes)),
            error: d.error.as_ref().map(ToString::to_string),
            commit_latency: d.commit_latency.clone(),
            checkpoint_latency: d.checkpoint_latency.clone(),
            oldest_pending_age_max: d
                .last_take
                .filter(|_| pending > d.seq)
                .map(|at| at.elapsed()),
            checkpoint_error: d.checkpoint_error.as_ref().map(|(e, _)| e.to_string()),
        }
    }

    /// Per category slot: what is gathered or being committed, and the longest wait so far.
    pub fn at_risk(&self) -> Vec<at_risk::CategoryRisk> {
        let now = Instant::now();
        let p = locked(&self.pending);
        let d = locked(&self.durable);
        at_risk::report(&p.at_risk, &d.in_flight, &d.lags, now)
    }

    /// What of `ino` is gathered or being committed, not yet durable.
    pub fn at_risk_of(&self, ino: crate::attr::Ino) -> Option<at_risk::Waiting> {
        let p = locked(&self.pending);
        let d = locked(&self.durable);
        match (p.at_risk.of_ino(ino), d.in_flight.of_ino(ino)) {
            (Some(a), Some(b)) => Some(at_risk::Waiting {
                bytes: a.bytes.saturating_add(b.bytes),
                since: a.since.min(b.since),
            }),
            (a, b) => a.or(b),
        }
    }

    /// Stops persistence on `e` (the first error stays): returns the sticky error.
    fn fail(&self, step: PersistStep, e: &std::io::Error) -> PersistError {
        let error = PersistError::new(step, e);
        tracing::error!("persistence stopped: {error}");
        let mut d = locked(&self.durable);
        let sticky = d.error.get_or_insert(error).clone();
        self.failed.store(true, Ordering::Release);
        sticky
    }

    /// The error that stopped persistence, if it is stopped.
    pub fn error(&self) -> Option<PersistError> {
        locked(&self.durable).error.clone()
    }

    fn sticky_error(&self) -> Option<std::io::Error> {
        locked(&self.durable).error.clone().map(Into::into)
    }

    /// Takes every op gathered so far as framed batches (None if there are none), with the
    /// sequence number after them, and lets writers held back by `throttle` go on.
    fn take_gathered(&self) -> Gathered {
        let mut p = locked(&self.pending);
        // Not in the middle of one op's records: the op closes its group within its mutation,
        // which hands over nothing that waits for this (crash_concurrent seed 502 recovered a
        // file made durable again with only its durability and its truncation to 0).
        while p.groups_open > 0 {
            p = p.wait_timeout(&self.group_closed, Duration::from_millis(10));
        }
        let taken = Gathered {
            framed: p.builder.take_frames(),
            next_seq: p.builder.next_seq(),
            host_files: std::mem::take(&mut p.host_files),
            removals: std::mem::take(&mut p.removals),
            at_risk: std::mem::take(&mut p.at_risk),
        };
        p.due_at = None;
        p.commit_asked = false;
        self.pending_bytes.store(0, Ordering::Release);
        if p.throttled > 0 {
            self.drained.notify_all();
        }
        taken
    }

    /// Writes and syncs every batch gathered, one sync per batch. The caller holds `writing`.
    fn commit_locked(&self) -> Result<(), PersistError> {
        if let Some(e) = locked(&self.durable).error.clone() {
            return Err(e);
        }
        let started = Instant::now();
        let Gathered {
            framed,
            next_seq,
            host_files,
            removals,
            at_risk,
        } = self.take_gathered();
        locked(&self.durable).in_flight.merge(at_risk);
        let Some(framed) = framed else {
            let mut d = locked(&self.durable);
            d.last_take = Some(started);
            let settled = std::mem::take(&mut d.in_flight);
            d.lags.settle(&settled, Instant::now());
            drop(d);
            // Idle: the batch buffers kept for busy writers are given back.
            locked(&self.pending).builder.release_idle();
            // Everything gathered before is durable already.
            self.remove_host_files(&removals);
            return Ok(());
        };
        // The CRCs are computed here, out of the `pending` lock that every op takes.
        let framed = framed.finish();
        self.sync_host_files(&host_files);
        // One sync per batch: if several went out in one write, a crash could leave a later
        // batch whole and an earlier one missing (the file system orders the blocks of one
        // write as it likes), which recovery would have to take for damage.
        for batch in framed.batches() {
            self.write_batch(batch)?;
        }
        locked(&self.pending).builder.recycle(framed);
        {
            let mut d = locked(&self.durable);
            d.seq = d.seq.max(next_seq);
            d.commits += 1;
            d.commit_latency.record(started.elapsed());
            d.last_take = Some(started);
            // Durable now: how long each category's changes waited is measured here.
            let settled = std::mem::take(&mut d.in_flight);
            d.lags.settle(&settled, Instant::now());
        }
        self.remove_host_files(&removals);
        Ok(())
    }

    /// Writes one framed batch at the journal's end and syncs it. The caller holds `writing`.
    ///
    /// The batch goes over zeros already synced, with `JOURNAL_ZEROS_AHEAD_BYTES_MIN` of them
    /// left after it (the journal's `FLAG_ZEROS_AHEAD`): when they run short, the next
    /// `JOURNAL_RESERVE_BYTES` are written and synced first. So a crash never leaves the file
    /// ending inside a batch (which scanning takes for a journal cut short), and a full disk
    /// fails that extension, before any byte of the batch is written.
    fn write_batch(&self, batch: &[u8]) -> Result<(), PersistError> {
        if self.journal_deferred.load(Ordering::Acquire) {
            // The journal a repair keeps until its checkpoint is not written to.
            let e = std::io::Error::other("no journal to commit to before the first checkpoint");
            debug_assert!(false, "{e}");
            return Err(self.fail(PersistStep::WriteJournal, &e));
        }
        let batch_bytes = batch.len() as u64;
        let (end, mut file_end) = {
            let d = locked(&self.durable);
            (d.journal_bytes, d.journal_file_bytes)
        };
        let needed = end + batch_bytes + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN as u64;
        if needed > file_end {
            let extended = self.make_room_ahead(end, batch_bytes, file_end, needed);
            let new_end = match extended {
                Ok(new_end) => new_end,
                Err(e) => {
                    // Give back what part of the zeros was written (a full disk needs the
                    // room): the synced length holds every commit and the zeros after it.
                    let _ = self.device.truncate(JOURNAL_FILE, file_end);
                    return Err(self.fail(PersistStep::WriteJournal, &e));
                }
            };
            file_end = new_end;
            locked(&self.durable).journal_file_bytes = file_end;
        }
        self.device
            .write_at(JOURNAL_FILE, end, batch)
            .map_err(|e| self.fail(PersistStep::WriteJournal, &e))?;
        self.device
            .sync(JOURNAL_FILE)
            .map_err(|e| self.fail(PersistStep::SyncJournal, &e))?;
        if batch_bytes >= crate::limits::JOURNAL_CACHE_DROPPED_BATCH_BYTES_MIN as u64 {
            // Synced and only read again by a checkpoint's tail copy or a recovery: its pages
            // are freed by the committer after this commit is answered, and the next batches
            // reuse them (decision 0131). Ranges since the last drop are merged: all synced.
            let mut drop = lock(&self.cache_to_drop);
            let (from, to) = drop.map_or((end, end + batch_bytes), |(from, to)| {
                (from.min(end), to.max(end + batch_bytes))
            });
            *drop = Some((from, to));
        }
        let mut d = locked(&self.durable);
        d.journal_bytes += batch_bytes;
        debug_assert!(d.journal_bytes + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN as u64 <= file_end);
        Ok(())
    }

    /// A checkpoint failed (`step`): the old checkpoint and journal stay in force and commits
    /// go on; the failure is logged and reported until a checkpoint succeeds. The files it
    /// was writing are removed, so that a full disk gets their space back.
    fn checkpoint_failed(&self, step: PersistStep, e: &std::io::Error) -> PersistError {
        let error = PersistError::new(step, e);
        // Before the log line: on a full disk, the log needs the room they hold.
        for name in [CHECKPOINT_TMP, JOURNAL_TMP] {
            if let Err(e) = self.device.remove(name) {
                tracing::debug!("removing {name} after a failed checkpoint: {e}");
            }
        }
        tracing::error!(
            "checkpoint failed: {error}; the journal still holds every commit, and the \
             checkpoint is tried again in {} s",
            self.config.restart_retry_interval.as_secs()
        );
        locked(&self.durable).checkpoint_error = Some((error.clone(), Instant::now()));
        error
    }

    /// The last checkpoint's failure, until one succeeds.
    pub fn checkpoint_error(&self) -> Option<PersistError> {
        locked(&self.durable)
            .checkpoint_error
            .as_ref()
            .map(|(e, _)| e.clone())
    }

    /// Makes every op applied so far durable (fsync). Concurrent callers share the work: a
    /// caller whose ops went out in another's batch returns without a sync of its own.
    pub fn sync(&self) -> std::io::Result<()> {
        let target = locked(&self.pending).builder.next_seq();
        if locked(&self.durable).seq >= target {
            return self.sticky_error().map_or(Ok(()), Err);
        }
        self.commit_to(locked(&self.writing), target).map_err(|f| {
            f.into_io(|| {
                std::io::Error::other("a disk-tier file's data could not be synced (see the log)")
            })
        })
    }

    /// Writes a checkpoint of `engine` and replaces the journal with what was committed since
    /// (all four steps of [`CheckpointJob`]). Waits for a checkpoint already running. It does
    /// not depend on the journal, so it is tried even after an I/O error; when it starts
    /// after one, its success clears that error and persistence resumes.
    pub fn checkpoint(&self, engine: &Engine) -> Result<(), PersistError> {
        let started = Instant::now();
        if self.disk_full() || self.keep_backup.load(Ordering::Acquire) {
            // The room kept for this moment: without it, the journal holding the disk would
            // leave no room for the checkpoint that frees it (decision 0036). The checkpoint
            // replacing a damaged one keeps the pair while it writes its own: on a nearly
            // full disk it needs that room too (decision 0123).
            self.release_reserve();
        }
        let mut job = self.checkpoint_begin(engine)?;
        job.write_image()?;
        job.copy_tail()?;
        job.finish()?;
        locked(&self.durable)
            .checkpoint_latency
            .record(started.elapsed());
        self.grow_reserve(self.reserve_target_bytes());
        Ok(())
    }

    /// Whether the journal or the last checkpoint stopped on a full disk.
    fn disk_full(&self) -> bool {
        let d = locked(&self.durable);
        let full = |e: &PersistError| e.kind == std::io::ErrorKind::StorageFull;
        d.error.as_ref().is_some_and(full)
            || d.checkpoint_error.as_ref().is_some_and(|(e, _)| full(e))
    }

    /// Clean shutdown: stops the committer and writes a final checkpoint, so that the next
    /// mount has nothing to replay. An error means changes were lost (they never reached the
    /// journal); a failed checkpoint with every change in the journal is only logged.
    pub fn shutdown(&self, engine: &Engine) -> Result<(), PersistError> {
        // Files held out of the store until their deadline (decision 0090) are kept by a
        // clean unmount: made present before the committer's last commit.
        engine.archive_all();
        {
            // Under the lock the committer waits on, so the wakeup cannot fall between its
            // check and its wait.
            let _pending = locked(&self.pending);
            self.stop.store(true, Ordering::Release);
            self.wake.notify_all();
        }
        // Its last commit must be in the journal before the final checkpoint starts, so that
        // (no op being applied after it) the new journal has nothing to replay.
        let committer = lock(&self.committer).take();
        if let Some(committer) = committer {
            if committer.thread().id() != std::thread::current().id() {
                let _ = committer.join();
            }
        }
        // The committer started the last background checkpoint, if any; it must not run
        // after the final one.
        let checkpointer = lock(&self.checkpointer).take();
        if let Some(checkpointer) = checkpointer {
            if checkpointer.thread().id() != std::thread::current().id() {
                let _ = checkpointer.join();
            }
        }
        // A committer that stopped between two commits left ops uncommitted: committed now,
        // the old journal holds every op and the backup pair chains (decision 0123). On an
        // I/O error the checkpoint below restarts persistence instead (no backup chain).
        let _ = self.commit_locked_now();
        let result = match self.checkpoint(engine) {
            // On a full disk, say: the journal then still holds every change, and the next
            // mount replays it. Only changes that never reached the journal make this an error.
            Err(e) if self.stats().ops_pending == 0 => {
                tracing::warn!(
                    "the final checkpoint failed ({e}); nothing is lost: the journal holds \
                     every change, and the next mount replays it"
                );
                Ok(())
            }
            other => other,
        };
        self.answer_waiters();
        result
    }
}

impl OpSink for Persister {
    fn applied(&self, op: &Op<'_>, durability: Durability) {
        if durability == Durability::Volatile {
            // Never reaches the store; recovery drops volatile files.
            return;
        }
        let mut p = locked(&self.pending);
        if self.failed.load(Ordering::Acquire) {
            // Nothing is written until a checkpoint succeeds; keep only the numbering, so
            // memory does not grow with ops that cannot be journaled.
            p.builder.skip();
            return;
        }
        p.builder.add(op, op.time_ns());
        self.pending_bytes
            .store(p.builder.body_bytes(), Ordering::Release);
        if let Some(deadline) = durability.short_deadline() {
            // A deadline shorter than the commit interval: the committer wakes by then.
            let due = Instant::now() + deadline;
            if p.due_at.is_none_or(|at| due < at) {
                p.due_at = Some(due);
                p.rearm = true;
                self.wake.notify_one();
            }
        }
        if p.builder.body_bytes() > crate::limits::COMMIT_EARLY_BODY_BYTES {
            // Keep batches bounded: let the committer write this one now.
            p.ask_commit(&self.wake);
        }
    }

    fn sync(&self) -> std::io::Result<()> {
        Persister::sync(self)
    }

    fn changed(&self, change: &crate::persist::level::Change, _durability: Durability) {
        if self.failed.load(Ordering::Acquire) {
            return;
        }
        let mut p = locked(&self.pending);
        if p.at_risk.note(change, Instant::now) {
            // Keep the table bounded: let the committer commit now.
            p.ask_commit(&self.wake);
        }
    }

    fn at_risk(&self) -> Vec<at_risk::CategoryRisk> {
        Persister::at_risk(self)
    }

    fn at_risk_of(&self, ino: crate::attr::Ino) -> Option<at_risk::Waiting> {
        Persister::at_risk_of(self, ino)
    }

    fn group(&self, open: bool) {
        let mut p = locked(&self.pending);
        if open {
            p.groups_open += 1;
            if p.groups_open == 1 {
                p.builder.set_group_open(true);
            }
        } else {
            debug_assert!(p.groups_open > 0, "a group closed twice");
            p.groups_open = p.groups_open.saturating_sub(1);
            if p.groups_open == 0 {
                p.builder.set_group_open(false);
                self.group_closed.notify_all();
            }
        }
    }

    fn host_file_dirty(&self, name: &str, _durability: Durability) {
        let mut p = locked(&self.pending);
        if !p.host_files.contains(name) {
            p.host_files.insert(name.to_owned());
        }
    }

    fn host_sync_failed(&self, name: &str) {
        self.note_host_sync_failure(name);
    }

    fn take_host_sync_error(&self, name: &str, on_disk: bool) -> bool {
        self.take_host_sync_failure(name, on_disk)
    }

    fn remove_after_commit(&self, name: &str) -> bool {
        // The file is freed or back in memory: no fsync will ask about its host file now.
        self.forget_host_sync_failure(name);
        let mut p = locked(&self.pending);
        p.removals.push(name.to_owned());
        if p.removals.len() >= crate::limits::HOST_REMOVALS_PENDING_MAX {
            // Keep the list bounded: let the committer commit (and remove) now.
            p.ask_commit(&self.wake);
        }
        true
    }

    fn throttle(&self) {
        if self.pending_bytes.load(Ordering::Acquire) <= self.config.pending_bytes_max {
            return;
        }
        if std::thread::current().name() == Some(COMMITTER_THREAD) {
            // The committer logs passthrough writes itself: it is the one that drains.
            return;
        }
        if crate::disk::host_locks_held() {
            // The drain's commit removes freed host files under their stripe's exclusive
            // lock: a thread that waited here holding a stripe could hold the committer,
            // and so every writer, for good. Such a thread journals a disk-tier file's
            // metadata only, a few bytes.
            return;
        }
        let mut p = locked(&self.pending);
        while p.builder.body_bytes() > self.config.pending_bytes_max
            && !self.stop.load(Ordering::Acquire)
            && !self.failed.load(Ordering::Acquire)
        {
            self.wake.notify_one();
            p.throttled += 1;
            p = p.wait_timeout(&self.drained, Duration::from_millis(100));
            p.throttled -= 1;
        }
    }

    fn sync_async(&self, done: SyncDone) {
        self.sync_leading(leader::thread_asker(), done);
    }

    fn sync_async_by(&self, asker: u64, done: SyncDone) {
        self.sync_leading(asker, done);
    }
}

pub use crate::limits::IMAGE_PREFAULT_BYTES_MAX;

/// `copy_tail` copies in rounds until at most this much is left for `finish`...
const TAIL_LEFT_FOR_FINISH_BYTES: u64 = 1 << 20;
/// ... or until it has made this many rounds.
const TAIL_ROUNDS_MAX: usize = 8;

/// What a commit writes after its batch when it runs past the journal's reserved zeros.
static RESERVE_ZEROS: [u8; journal::JOURNAL_RESERVE_BYTES] = [0; journal::JOURNAL_RESERVE_BYTES];

/// A checkpoint image is written in chunks of this size (see `write_image`).
const IMAGE_CHUNK_BYTES: usize = 8 << 20;

/// Bytes copied from the old journal to the new one per read.
const TAIL_CHUNK_BYTES: usize = 4 << 20;

/// A checkpoint in progress: made by [`Persister::checkpoint_begin`], then `write_image`,
/// `copy_tail` and `finish`, in that order (the module documentation says why). Commits may
/// run between the steps. Dropping it unfinished abandons the checkpoint: the old checkpoint
/// and journal stay in force.
pub struct CheckpointJob<'a> {
    persister: &'a Persister,
    image: Vec<u8>,
    image_bytes: u64,
    /// The first op not in the image.
    seq: u64,
    /// The first op of the new journal: of the first batch committed after step 1.
    base_seq: u64,
    /// Length of the old journal at step 1: its batches from here on go to the new one.
    tail_from: u64,
    /// Old journal bytes copied so far.
    copied_to: u64,
    /// Persistence had stopped; this checkpoint restarts it (see `checkpoint_begin`).
    restarting: bool,
    pause: Duration,
    finished: bool,
}

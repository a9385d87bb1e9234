//! Recovery: the newest valid checkpoint, then the valid prefix of the journal replayed
//! through the same apply path as live operations.
//!
//! Rules: a torn journal tail (an unsynced batch cut by a crash) is dropped and reported, with
//! the batches of a group of records it would have ended (decision 0103: `journal::scan`); damage
//! followed by valid batches, a journal cut short (decision 0038), a checkpoint that fails its checks, a journal of another store or
//! one that leaves a gap after the checkpoint are refused with an error that says what is wrong.
//! Nothing is guessed.

use std::time::{Duration, Instant};

use crate::engine::{EngineConfig, State};
use crate::persist::checkpoint::{self, CheckpointError};
use crate::persist::codec::DecodeError;
use crate::persist::device::Device;
use crate::persist::journal::{self, Batch, JournalError, Scan, Tail};
use crate::Errno;

pub const CHECKPOINT_FILE: &str = "checkpoint";
pub const JOURNAL_FILE: &str = "journal";
/// The checkpoint the last one replaced, and its journal as it was frozen then: the backup
/// pair recovery falls back on when `checkpoint` is damaged (decision 0123).
pub const CHECKPOINT_PREV: &str = "checkpoint.prev";
pub const JOURNAL_PREV: &str = "journal.prev";

/// What recovery found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Sequence number the checkpoint covers up to (exclusive), if there was one.
    pub checkpoint_seq: Option<u64>,
    pub checkpoint_inodes: u64,
    pub batches_replayed: u64,
    pub ops_replayed: u64,
    /// Journal ops skipped because the checkpoint already holds them.
    pub ops_skipped: u64,
    pub tail: Tail,
    /// Length of the journal's valid prefix; new batches are written after it (0: none).
    pub journal_valid_len: u64,
    /// The sequence number the next op gets.
    pub next_seq: u64,
    /// Volatile files, gone as promised.
    pub volatile_dropped: u64,
    /// Files deleted while the disk was full whose host files were freed before the deletion
    /// was durable (the `freed` note, decision 0119): still in the state recovery returns
    /// (which matches the durable journal); the mount removes them and journals it.
    pub freed_deleted: Vec<crate::attr::Ino>,
    /// What is wrong with a damaged `freed` note: it was ignored (the files it named show as
    /// missing host files) and is left for fsck to report; the next checkpoint removes it.
    pub freed_note_damaged: Option<String>,
    /// What the pass over the data folder found and did (`disk::recover_host_files`; only a
    /// read-write open makes it).
    pub host_files: crate::disk::HostFilesReport,
    /// Why `checkpoint` could not be used, when the backup pair (`checkpoint.prev`,
    /// `journal.prev`, decision 0123) rebuilt the state instead; the mount then writes a
    /// new checkpoint before serving.
    pub backup_used: Option<String>,
    pub duration: Duration,
}

impl Report {
    /// The report of a recovery that has loaded its base state and replayed nothing yet.
    pub(crate) fn empty(checkpoint_seq: Option<u64>, checkpoint_inodes: u64) -> Report {
        Report {
            checkpoint_seq,
            checkpoint_inodes,
            batches_replayed: 0,
            ops_replayed: 0,
            ops_skipped: 0,
            tail: Tail::Clean,
            journal_valid_len: 0,
            next_seq: checkpoint_seq.unwrap_or(0),
            volatile_dropped: 0,
            freed_deleted: Vec::new(),
            freed_note_damaged: None,
            host_files: Default::default(),
            backup_used: None,
            duration: Duration::ZERO,
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(why) = &self.backup_used {
            write!(
                f,
                "THE CHECKPOINT COULD NOT BE USED ({why}): recovered from the backup pair \
                 {CHECKPOINT_PREV} and {JOURNAL_PREV}, then the journal; a new checkpoint \
                 replaces the damaged one before serving. From the backup: "
            )?;
        }
        match self.checkpoint_seq {
            Some(seq) => write!(
                f,
                "checkpoint of {} inodes (ops before {seq})",
                self.checkpoint_inodes
            )?,
            None => write!(f, "no checkpoint")?,
        }
        write!(
            f,
            ", {} ops replayed from {} journal batches",
            self.ops_replayed, self.batches_replayed
        )?;
        if let Tail::Torn { bytes, reason, .. } = &self.tail {
            write!(
                f,
                "; a torn tail of {bytes} bytes was dropped ({reason}): a write cut by a crash, \
                 never acknowledged as durable (or, rarely, a last batch damaged after its write, \
                 which no check can tell from a tear: the lead's note of 2026-11-27)"
            )?;
        }
        if !self.freed_deleted.is_empty() {
            write!(
                f,
                "; {} files deleted while the disk was full stay deleted (their host files \
                 were freed)",
                self.freed_deleted.len()
            )?;
        }
        write!(f, " in {:.1} ms", self.duration.as_secs_f64() * 1e3)
    }
}

#[derive(Debug)]
pub enum RecoveryError {
    Io(std::io::Error),
    Checkpoint(CheckpointError),
    Journal(JournalError),
    /// Damage inside durable journal data: later batches exist but cannot be reached.
    JournalDamaged {
        offset: u64,
        reason: String,
        next_valid_offset: u64,
    },
    /// The journal ends where no crash leaves it (inside a batch, or after one without the
    /// zeros its writer keeps there): it was cut short, and durable changes with it.
    JournalCut {
        offset: u64,
        reason: String,
    },
    /// The checkpoint or the journal (`what`) names another store (`found`).
    WrongStore {
        what: &'static str,
        found: [u8; 16],
    },
    /// The journal starts after the checkpoint ends: ops in between are missing.
    Gap {
        checkpoint_seq: u64,
        journal_base_seq: u64,
    },
    /// A checkpoint without a journal: the journal is made before the first checkpoint and
    /// only ever replaced by rename, so it was deleted, and the changes after the checkpoint
    /// with it. Also a store with neither but a file only a mounted store has (`checkpoint`
    /// false, `evidence` names it: decisions 0107, 0132): every change since mkfs went with
    /// the journal.
    JournalMissing {
        checkpoint: bool,
        evidence: String,
    },
    /// A journaled op does not apply to the state before it.
    Replay {
        seq: u64,
        error: Errno,
    },
    /// The replayed state breaks an invariant.
    Inconsistent(Vec<String>),
    /// `checkpoint` is missing, but `checkpoint.prev` shows the store had one: it was
    /// deleted.
    CheckpointMissing,
    /// `checkpoint` is missing, and the journal starts after op 0 (at `journal_base_seq`): a
    /// checkpoint held the ops before it, and was deleted.
    CheckpointMissingBeforeJournal {
        journal_base_seq: u64,
    },
    /// `checkpoint` cannot be used (`checkpoint`, the error) and neither can the backup pair
    /// (`why`).
    NoBackup {
        checkpoint: Box<RecoveryError>,
        why: String,
    },
}

impl std::fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryError::Io(e) => write!(f, "reading the store: {e}"),
            RecoveryError::Checkpoint(e) => write!(f, "{e}"),
            RecoveryError::Journal(e) => write!(
                f,
                "the journal cannot be replayed: {e}. Restore it, or see what `rampart fsck` \
                 reports (`rampart fsck --repair` keeps what the checkpoint holds)"
            ),
            RecoveryError::JournalDamaged {
                offset,
                reason,
                next_valid_offset,
            } => write!(
                f,
                "the journal is damaged at byte {offset} ({reason}) with valid data after it \
                 (from byte {next_valid_offset}); recovering would drop durable changes. \
                 `rampart fsck --repair` truncates it at the damage"
            ),
            RecoveryError::JournalCut { offset, reason } => write!(
                f,
                "the journal was cut short at byte {offset} ({reason}); changes that were \
                 durable after it are missing, and mounting would lose them silently. Restore \
                 the journal from a backup, or see what `rampart fsck` reports and accept the \
                 loss with `rampart fsck --repair`, which keeps the journal up to byte {offset}"
            ),
            RecoveryError::WrongStore { what, .. } => {
                write!(f, "the {what} belongs to another store")
            }
            RecoveryError::Gap {
                checkpoint_seq,
                journal_base_seq,
            } => write!(
                f,
                "the journal starts at op {journal_base_seq} but the checkpoint ends at op \
                 {checkpoint_seq}: changes in between are missing"
            ),
            RecoveryError::JournalMissing {
                checkpoint: true, ..
            } => write!(
                f,
                "the checkpoint is there but the journal is missing: any changes made after \
                 the checkpoint are lost with it. Restore the journal file, or accept the loss \
                 with `rampart fsck --repair`, which starts a new journal at the checkpoint"
            ),
            RecoveryError::JournalMissing {
                checkpoint: false,
                evidence,
            } => write!(
                f,
                "the journal is missing, and so is the checkpoint, though the store has been mounted \
                 ({evidence}): the changes they held are lost with them, and mounting would show \
                 an empty file system (and remove the data folder's host files). Restore the \
                 files, or see what `rampart fsck` reports and accept the loss with `rampart \
                 fsck --repair`, which keeps what the other files hold (host files of disk-tier \
                 files go to /lost+found)"
            ),
            RecoveryError::Replay { seq, error } => {
                write!(
                    f,
                    "journal op {seq} does not apply ({error}): the journal is inconsistent"
                )
            }
            RecoveryError::CheckpointMissing => write!(
                f,
                "the checkpoint is missing, though the store has had one ({CHECKPOINT_PREV} \
                 is there): it was deleted"
            ),
            RecoveryError::CheckpointMissingBeforeJournal { journal_base_seq } => write!(
                f,
                "the checkpoint is missing, though the journal starts at op {journal_base_seq}: \
                 a checkpoint held every change before it and was deleted. Restore the \
                 checkpoint file; `rampart fsck` says what else can be kept"
            ),
            RecoveryError::NoBackup { checkpoint, why } => write!(
                f,
                "{checkpoint}; the backup ({CHECKPOINT_PREV} and {JOURNAL_PREV}, then the \
                 journal) cannot stand in for it: {why}. Restore the files, or see what \
                 `rampart fsck` can keep (`rampart fsck --repair` rebuilds the store from the \
                 backup pair alone when only the journal fails it)"
            ),
            RecoveryError::Inconsistent(p) => write!(
                f,
                "the recovered file system breaks {} invariants, first: {}",
                p.len(),
                p.first().map_or("", String::as_str)
            ),
        }
    }
}

impl std::error::Error for RecoveryError {}

/// Reports how far a long recovery or check has come (`rampart fsck` draws a progress bar).
/// Every method has a default that does nothing.
pub trait Progress {
    /// A phase begins; `len` is its size in the phase's unit.
    fn phase(&self, _phase: Phase, _len: u64) {}
    /// `n` more units of the current phase are done.
    fn advance(&self, _n: u64) {}
    /// The current phase is done.
    fn done(&self) {}
}

/// Progress reported nowhere.
pub struct NoProgress;

impl Progress for NoProgress {}

/// The phases of a recovery or a check, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    CheckpointDecode,
    JournalScan,
    Replay,
    Invariants,
    /// `fsck --repair` repairs the state...
    Repair,
    /// ... and starts writing it: from here on a failure may have changed the store.
    Write,
}

impl Phase {
    /// Its number among the four phases of a check (repairing and writing end the fourth).
    pub fn number(self) -> u32 {
        match self {
            Phase::CheckpointDecode => 1,
            Phase::JournalScan => 2,
            Phase::Replay => 3,
            Phase::Invariants | Phase::Repair | Phase::Write => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Phase::CheckpointDecode => "checkpoint decode",
            Phase::JournalScan => "journal scan",
            Phase::Replay => "replay",
            Phase::Invariants => "invariants",
            Phase::Repair => "repair",
            Phase::Write => "write",
        }
    }

    /// What its length counts.
    pub fn unit(self) -> &'static str {
        match self {
            Phase::CheckpointDecode | Phase::JournalScan => "bytes",
            Phase::Replay => "ops",
            Phase::Invariants | Phase::Repair | Phase::Write => "",
        }
    }
}

/// A decoded checkpoint of this store, with the invariants its state breaks (mount refuses
/// any; `fsck --repair` can mend them).
pub struct LoadedCheckpoint {
    pub state: State,
    pub header: checkpoint::Header,
    pub problems: Vec<String>,
}

/// Decodes the checkpoint `bytes` of the store `store_id`.
pub fn load_checkpoint(
    bytes: &[u8],
    store_id: [u8; 16],
    config: &EngineConfig,
) -> Result<LoadedCheckpoint, RecoveryError> {
    let (state, header, problems) =
        checkpoint::decode_for_repair(bytes, config).map_err(RecoveryError::Checkpoint)?;
    if header.store_id != store_id {
        return Err(RecoveryError::WrongStore {
            what: "checkpoint",
            found: header.store_id,
        });
    }
    Ok(LoadedCheckpoint {
        state,
        header,
        problems,
    })
}

/// Checks that a scanned journal goes with the store and with a state holding every op
/// before `from_seq`: its store id, and no gap between them. (Its tail is the caller's to
/// judge: damage refuses a mount, fsck counts what it drops.)
pub fn journal_fits(
    scan: &Scan<'_>,
    store_id: [u8; 16],
    from_seq: u64,
) -> Result<(), RecoveryError> {
    if scan.header.store_id != store_id {
        return Err(RecoveryError::WrongStore {
            what: "journal",
            found: scan.header.store_id,
        });
    }
    if scan.header.base_seq > from_seq {
        return Err(RecoveryError::Gap {
            checkpoint_seq: from_seq,
            journal_base_seq: scan.header.base_seq,
        });
    }
    Ok(())
}

/// What a replay did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub batches: u64,
    pub ops_applied: u64,
    /// Ops the state held already (before `from_seq`).
    pub ops_skipped: u64,
}

/// Where a replay stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayFailure {
    /// A decoded op does not apply to the state before it; `op` describes it (never its data).
    NotApplied { seq: u64, op: String, error: Errno },
    /// An op passed its batch's checksum but does not decode.
    Undecodable { seq: u64, error: JournalError },
}

impl ReplayFailure {
    pub fn seq(&self) -> u64 {
        match self {
            ReplayFailure::NotApplied { seq, .. } | ReplayFailure::Undecodable { seq, .. } => *seq,
        }
    }
}

/// The one replay of journal batches onto a state, through the same apply path as live
/// operations: mount and fsck both use it. Ops before `from_seq` are skipped (the state holds
/// them). `replayed` counts what was done, also when it stops at a failure.
pub fn replay(
    state: &mut State,
    batches: &[Batch<'_>],
    from_seq: u64,
    progress: &dyn Progress,
    replayed: &mut Replayed,
) -> Result<(), ReplayFailure> {
    state.set_replaying(true);
    let result = batches.iter().try_for_each(|batch| {
        replayed.batches += 1;
        let mut failure = None;
        let decoded = batch.for_each_op(|seq, op| {
            progress.advance(1);
            if seq < from_seq {
                replayed.ops_skipped += 1;
                return Ok(());
            }
            if let Err(error) = state.apply(&op) {
                let op = crate::fsck::describe_op(&op);
                failure = Some(ReplayFailure::NotApplied { seq, op, error });
                return Err(JournalError::Op {
                    seq,
                    error: DecodeError::BadValue("op does not apply"),
                });
            }
            replayed.ops_applied += 1;
            Ok(())
        });
        match (failure, decoded) {
            (Some(failure), _) => Err(failure),
            (None, Err(error)) => Err(ReplayFailure::Undecodable {
                seq: match error {
                    JournalError::Op { seq, .. } => seq,
                    _ => batch.first_seq,
                },
                error,
            }),
            (None, Ok(())) => Ok(()),
        }
    });
    state.set_replaying(false);
    result
}

/// Rebuilds the state held by `device`: from `checkpoint` and `journal`, or, if the
/// checkpoint is damaged or was deleted, from the backup pair and the journal when they chain
/// (decision 0123; `Report::backup_used` says so).
pub fn recover(
    device: &dyn Device,
    store_id: [u8; 16],
    config: &EngineConfig,
) -> Result<(State, Report), RecoveryError> {
    let started = Instant::now();
    let (mut state, mut report) = match from_checkpoint(device, store_id, config) {
        Ok(recovered) => recovered,
        Err(Failed::Other(e)) => return Err(e),
        Err(Failed::Checkpoint(e)) => {
            match crate::persist::backup::replay_chain(device, store_id, config) {
                Ok((state, mut report)) => {
                    tracing::error!(
                        "the checkpoint cannot be used ({e}): recovering from the backup \
                         pair {CHECKPOINT_PREV} and {JOURNAL_PREV}, then the journal"
                    );
                    report.backup_used = Some(e.to_string());
                    (state, report)
                }
                Err(why) => {
                    return Err(RecoveryError::NoBackup {
                        checkpoint: Box::new(e),
                        why,
                    })
                }
            }
        }
    };
    report.volatile_dropped = after_replay(&mut state);
    let mut freed: Vec<_> = match crate::persist::freed_note::deleted_inodes(&state, device) {
        Ok(inos) => inos.into_iter().collect(),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            tracing::error!(
                "{e}: ignored; the files it named, deleted while the disk was full, show as \
                 missing host files (`rampart fsck` names them)"
            );
            report.freed_note_damaged = Some(e.to_string());
            Vec::new()
        }
        Err(e) => return Err(RecoveryError::Io(e)),
    };
    freed.sort_unstable();
    report.freed_deleted = freed;
    // The checkpoint's decode has checked every invariant already; check again only what
    // replay or the drop of volatile files changed (a second full check costs 0.5 s at 1M
    // files).
    if report.ops_replayed > 0 || report.volatile_dropped > 0 {
        let problems = state.check();
        if !problems.is_empty() {
            return Err(RecoveryError::Inconsistent(problems));
        }
    }
    report.duration = started.elapsed();
    Ok((state, report))
}

/// Why `from_checkpoint` failed: the checkpoint is damaged or missing (the backup may stand
/// in for it), or anything else (it cannot: the journal, or a checkpoint of another store or
/// of a newer rampart, which is not damage and is never replaced on a guess).
enum Failed {
    Checkpoint(RecoveryError),
    Other(RecoveryError),
}

impl Failed {
    /// A checkpoint that cannot be loaded.
    fn loading(e: RecoveryError) -> Failed {
        match e {
            RecoveryError::WrongStore { .. }
            | RecoveryError::Checkpoint(CheckpointError::Version(_)) => Failed::Other(e),
            e => Failed::Checkpoint(e),
        }
    }
}

/// The state of `checkpoint` with the journal replayed onto it.
fn from_checkpoint(
    device: &dyn Device,
    store_id: [u8; 16],
    config: &EngineConfig,
) -> Result<(State, Report), Failed> {
    let checkpoint = device
        .read(CHECKPOINT_FILE)
        .map_err(|e| Failed::Checkpoint(RecoveryError::Io(e)))?;
    let (mut state, checkpoint_seq) = match checkpoint {
        Some(bytes) => {
            let loaded = load_checkpoint(&bytes, store_id, config).map_err(Failed::loading)?;
            if !loaded.problems.is_empty() {
                return Err(Failed::Checkpoint(RecoveryError::Checkpoint(
                    CheckpointError::Inconsistent(loaded.problems),
                )));
            }
            (loaded.state, Some(loaded.header.seq))
        }
        None if crate::persist::backup::present(device) => {
            return Err(Failed::Checkpoint(RecoveryError::CheckpointMissing))
        }
        None => (State::new(config), None),
    };
    let mut report = Report::empty(checkpoint_seq, state.inodes().count() as u64);
    let from_seq = checkpoint_seq.unwrap_or(0);
    let journal = device
        .read(JOURNAL_FILE)
        .map_err(|e| Failed::Other(RecoveryError::Io(e)))?;
    match journal {
        None if checkpoint_seq.is_some() => {
            return Err(Failed::Other(RecoveryError::JournalMissing {
                checkpoint: true,
                evidence: String::new(),
            }))
        }
        None => {
            if let Some(evidence) = mounted_evidence(device).map_err(Failed::Other)? {
                return Err(Failed::Other(RecoveryError::JournalMissing {
                    checkpoint: false,
                    evidence,
                }));
            }
        }
        Some(bytes) => replay_journal(&bytes, &mut state, store_id, from_seq, &mut report)
            .map_err(|e| match e {
                RecoveryError::Gap {
                    journal_base_seq, ..
                } if checkpoint_seq.is_none() => {
                    RecoveryError::CheckpointMissingBeforeJournal { journal_base_seq }
                }
                e => e,
            })
            .map_err(Failed::Other)?,
    }
    Ok((state, report))
}

/// True if a mount has opened the store (`mounted_evidence`).
pub fn was_mounted(device: &dyn Device) -> Result<bool, RecoveryError> {
    Ok(mounted_evidence(device)?.is_some())
}

/// What shows that a mount has opened the store, if anything: a file that only exists after
/// the journal was made, and that nothing but a later file of the store replaces. The
/// `reserve` (made by the persister after the journal, decision 0107), the backup pair
/// (made by a checkpoint), a host file with a name rampart makes (a disk-tier file's bytes,
/// written through a journaled op; decision 0132). A store without a journal and a checkpoint
/// but with one of them lost its journal (a store just made by mkfs has none).
pub fn mounted_evidence(device: &dyn Device) -> Result<Option<String>, RecoveryError> {
    for (name, what) in [
        (crate::persist::persister::RESERVE_FILE, "its reserve file"),
        (CHECKPOINT_PREV, "its backup checkpoint"),
        (JOURNAL_PREV, "its backup journal"),
    ] {
        if device.len(name).map_err(RecoveryError::Io)?.is_some() {
            return Ok(Some(format!("{what} {name} is there")));
        }
    }
    let host_files = device
        .list_data()
        .map_err(RecoveryError::Io)?
        .into_iter()
        .filter(|name| crate::contents::host_file::parse_host_file_name(name).is_some())
        .count();
    Ok((host_files > 0).then(|| {
        format!(
            "its data folder holds {host_files} host files of disk-tier files, whose bytes \
             are durable"
        )
    }))
}

/// Recovery's journal step: scans `bytes`, refuses what does not fit or is damaged, replays
/// the valid prefix onto `state` and notes it in `report`.
pub(crate) fn replay_journal(
    bytes: &[u8],
    state: &mut State,
    store_id: [u8; 16],
    from_seq: u64,
    report: &mut Report,
) -> Result<(), RecoveryError> {
    let scan = journal::scan(bytes).map_err(RecoveryError::Journal)?;
    journal_fits(&scan, store_id, from_seq)?;
    if let Tail::Damaged {
        offset,
        reason,
        next_valid_offset,
    } = &scan.tail
    {
        return Err(RecoveryError::JournalDamaged {
            offset: *offset,
            reason: reason.clone(),
            next_valid_offset: *next_valid_offset,
        });
    }
    if let Tail::Cut { offset, reason } = &scan.tail {
        return Err(RecoveryError::JournalCut {
            offset: *offset,
            reason: reason.clone(),
        });
    }
    let mut replayed = Replayed::default();
    let result = replay(state, &scan.batches, from_seq, &NoProgress, &mut replayed);
    report.batches_replayed = replayed.batches;
    report.ops_replayed = replayed.ops_applied;
    report.ops_skipped = replayed.ops_skipped;
    result.map_err(|failure| match failure {
        ReplayFailure::NotApplied { seq, error, .. } => RecoveryError::Replay { seq, error },
        ReplayFailure::Undecodable { error, .. } => RecoveryError::Journal(error),
    })?;
    report.tail = scan.tail.clone();
    report.journal_valid_len = scan.valid_len;
    if scan.next_seq() < from_seq {
        // The checkpoint got ahead of this journal (a crash between the checkpoint's
        // rename and the journal's reset): new batches must not follow these; start a
        // fresh journal at the checkpoint.
        report.journal_valid_len = 0;
    }
    report.next_seq = report.next_seq.max(scan.next_seq());
    Ok(())
}

/// What recovery does to the state once the journal is replayed, before checking it: removes
/// every volatile file (all its names), as a restart promises. Returns how many there were.
pub fn after_replay(state: &mut State) -> u64 {
    state.drop_volatile()
}

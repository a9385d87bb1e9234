//! Recovery: the newest valid checkpoint, then the valid prefix of the journal replayed
//! through the same apply path as live operations.
//!
//! Rules: a torn journal tail (an unsynced batch cut by a crash) is dropped and reported; damage
//! followed by valid batches, a checkpoint that fails its checks, a journal of another store or
//! one that leaves a gap after the checkpoint are refused with an error that says what is wrong.
//! Nothing is guessed.

use std::time::{Duration, Instant};

use crate::engine::{EngineConfig, State};
use crate::persist::checkpoint::{self, CheckpointError};
use crate::persist::codec::DecodeError;
use crate::persist::device::Device;
use crate::persist::journal::{self, JournalError, Tail};

pub const CHECKPOINT_FILE: &str = "checkpoint";
pub const JOURNAL_FILE: &str = "journal";

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
    pub duration: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
                "; a torn tail of {bytes} bytes was dropped ({reason}): never acknowledged as durable"
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
    WrongStore(&'static str),
    /// The journal starts after the checkpoint ends: ops in between are missing.
    Gap {
        checkpoint_seq: u64,
        journal_base_seq: u64,
    },
    /// A checkpoint without a journal: the journal is made before the first checkpoint and
    /// only ever replaced by rename, so it was deleted, and the changes after the checkpoint
    /// with it.
    JournalMissing,
    /// A journaled op does not apply to the state before it.
    Replay {
        seq: u64,
        error: crate::Errno,
    },
    /// The replayed state breaks an invariant.
    Inconsistent(Vec<String>),
}

impl std::fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryError::Io(e) => write!(f, "reading the store: {e}"),
            RecoveryError::Checkpoint(e) => write!(f, "{e}"),
            RecoveryError::Journal(e) => write!(f, "{e}"),
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
            RecoveryError::WrongStore(what) => {
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
            RecoveryError::JournalMissing => write!(
                f,
                "the checkpoint is there but the journal is missing: any changes made after \
                 the checkpoint are lost with it. Restore the journal file, or accept the loss \
                 with `rampart fsck --repair`, which starts a new journal at the checkpoint"
            ),
            RecoveryError::Replay { seq, error } => {
                write!(
                    f,
                    "journal op {seq} does not apply ({error}): the journal is inconsistent"
                )
            }
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

/// Rebuilds the state held by `device`.
pub fn recover(
    device: &dyn Device,
    store_id: [u8; 16],
    config: &EngineConfig,
) -> Result<(State, Report), RecoveryError> {
    let started = Instant::now();
    let (mut state, checkpoint_seq) =
        match device.read(CHECKPOINT_FILE).map_err(RecoveryError::Io)? {
            Some(bytes) => {
                let (state, header) =
                    checkpoint::decode(&bytes, config).map_err(RecoveryError::Checkpoint)?;
                if header.store_id != store_id {
                    return Err(RecoveryError::WrongStore("checkpoint"));
                }
                (state, Some(header.seq))
            }
            None => (State::new(config), None),
        };
    let checkpoint_inodes = state.inodes().count() as u64;
    let mut report = Report {
        checkpoint_seq,
        checkpoint_inodes,
        batches_replayed: 0,
        ops_replayed: 0,
        ops_skipped: 0,
        tail: Tail::Clean,
        journal_valid_len: 0,
        next_seq: checkpoint_seq.unwrap_or(0),
        volatile_dropped: 0,
        duration: Duration::ZERO,
    };
    let from_seq = checkpoint_seq.unwrap_or(0);
    let journal = device.read(JOURNAL_FILE).map_err(RecoveryError::Io)?;
    if journal.is_none() && checkpoint_seq.is_some() {
        return Err(RecoveryError::JournalMissing);
    }
    if let Some(bytes) = journal {
        let scan = journal::scan(&bytes).map_err(RecoveryError::Journal)?;
        if scan.header.store_id != store_id {
            return Err(RecoveryError::WrongStore("journal"));
        }
        if scan.header.base_seq > from_seq {
            return Err(RecoveryError::Gap {
                checkpoint_seq: from_seq,
                journal_base_seq: scan.header.base_seq,
            });
        }
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
        state.set_replaying(true);
        for batch in &scan.batches {
            report.batches_replayed += 1;
            let mut replay_error = None;
            let decoded = batch.for_each_op(|seq, op| {
                if seq < from_seq {
                    report.ops_skipped += 1;
                    return Ok(());
                }
                if let Err(error) = state.apply(&op) {
                    replay_error = Some(RecoveryError::Replay { seq, error });
                    return Err(JournalError::Op {
                        seq,
                        error: DecodeError::BadValue("op does not apply"),
                    });
                }
                report.ops_replayed += 1;
                Ok(())
            });
            if let Some(e) = replay_error {
                return Err(e);
            }
            decoded.map_err(RecoveryError::Journal)?;
        }
        state.set_replaying(false);
        report.tail = scan.tail.clone();
        report.journal_valid_len = scan.valid_len;
        if scan.next_seq() < from_seq {
            // The checkpoint got ahead of this journal (a crash between the checkpoint's
            // rename and the journal's reset): new batches must not follow these; start a
            // fresh journal at the checkpoint.
            report.journal_valid_len = 0;
        }
        report.next_seq = report.next_seq.max(scan.next_seq());
    }
    report.volatile_dropped = state.drop_volatile();
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

/// The state recovery starts from when a store has no checkpoint yet: an empty file system
/// holding only its root directory (for `rampart fsck`, which replays the journal itself).
pub fn initial_state(config: &EngineConfig) -> State {
    State::new(config)
}

/// What recovery does to the state once the journal is replayed, before checking it: removes
/// every volatile file (all its names), as a restart promises. Returns how many there were.
/// (`rampart fsck` replays the journal itself and ends the same way.)
pub fn after_replay(state: &mut State) -> u64 {
    state.drop_volatile()
}

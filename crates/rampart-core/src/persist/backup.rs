//! The backup pair (decision 0123): `checkpoint.prev`, the checkpoint the last one replaced,
//! and `journal.prev`, the journal that went with it, frozen at the switch. Together with the
//! current `journal` they rebuild the state when `checkpoint` is damaged or missing, but only
//! when the three form a contiguous chain of ops; anything else is refused with the reason,
//! never guessed at.

use crate::engine::{EngineConfig, State};
use crate::persist::device::Device;
use crate::persist::journal::{self, Tail};
use crate::persist::recovery::{
    self, NoProgress, Replayed, Report, CHECKPOINT_PREV, JOURNAL_FILE, JOURNAL_PREV,
};

/// Whether the store has a backup checkpoint (with or without its journal).
pub fn present(device: &dyn Device) -> bool {
    device.len(CHECKPOINT_PREV).is_ok_and(|len| len.is_some())
}

/// The state the chain `checkpoint.prev`, `journal.prev`, `journal` rebuilds, with the
/// recovery report of its replay (before the steps every recovery takes after it: volatile
/// files, the `freed` note, the invariants). Err: why the chain cannot be used.
pub fn replay_chain(
    device: &dyn Device,
    store_id: [u8; 16],
    config: &EngineConfig,
) -> Result<(State, Report), String> {
    let (state, report, lost) = chain(device, store_id, config, false).map_err(|e| e.why)?;
    debug_assert!(lost.is_none(), "a strict chain loses nothing");
    Ok((state, report))
}

/// The chain for `fsck --repair` when `journal` cannot continue it (missing, unreadable,
/// another store's, a gap, damaged or cut, an op that does not apply): the backup pair's state
/// with as much of the journal as can be replayed onto it, and what was lost (None: nothing,
/// the strict chain). `report.journal_valid_len` is 0 after a loss: a new journal is started.
/// Err: the backup pair itself cannot be used, or `journal` cannot be read (an I/O error says
/// nothing of its content: it may be intact, and is never given up on that).
pub fn replay_chain_accepting_loss(
    device: &dyn Device,
    store_id: [u8; 16],
    config: &EngineConfig,
) -> Result<(State, Report, Option<Loss>), ChainError> {
    chain(device, store_id, config, true)
}

/// What [`replay_chain_accepting_loss`] gave up.
#[derive(Debug)]
pub struct Loss {
    /// Why `journal` cannot continue the chain.
    pub why: String,
    /// The ops of `journal` replayed before the point it fails at (the report's count also
    /// holds `journal.prev`'s).
    pub journal_ops_replayed: u64,
}

/// Why the chain cannot be used.
#[derive(Debug)]
pub struct ChainError {
    pub why: String,
    /// `journal` could not be read (EIO, EACCES…), as opposed to missing, damaged or
    /// another store's: whether its changes are lost is unknown.
    pub journal_unreadable: bool,
}

impl From<String> for ChainError {
    fn from(why: String) -> ChainError {
        ChainError {
            why,
            journal_unreadable: false,
        }
    }
}

fn chain(
    device: &dyn Device,
    store_id: [u8; 16],
    config: &EngineConfig,
    accept_loss: bool,
) -> Result<(State, Report, Option<Loss>), ChainError> {
    let read = |name: &str| match device.read(name) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(format!("{name} is missing")),
        Err(e) => Err(format!("reading {name}: {e}")),
    };
    let (checkpoint, prev_journal) = (read(CHECKPOINT_PREV)?, read(JOURNAL_PREV)?);
    let loaded = recovery::load_checkpoint(&checkpoint, store_id, config)
        .map_err(|e| format!("{CHECKPOINT_PREV}: {e}"))?;
    if let Some(p) = loaded.problems.first() {
        return Err(format!("{CHECKPOINT_PREV} holds an inconsistency: {p}").into());
    }
    drop(checkpoint);
    let mut state = loaded.state;
    let prev_seq = loaded.header.seq;
    let mut report = Report::empty(Some(prev_seq), state.inodes().count() as u64);
    // `journal.prev` was frozen after its last commit was synced: it must read whole.
    let scan = journal::scan(&prev_journal).map_err(|e| format!("{JOURNAL_PREV}: {e}"))?;
    recovery::journal_fits(&scan, store_id, prev_seq)
        .map_err(|e| format!("{JOURNAL_PREV} does not go with {CHECKPOINT_PREV}: {e}"))?;
    if scan.tail != Tail::Clean {
        return Err(format!(
            "{JOURNAL_PREV} does not end after a whole batch ({:?}): it is damaged",
            scan.tail
        )
        .into());
    }
    let mut replayed = Replayed::default();
    recovery::replay(
        &mut state,
        &scan.batches,
        prev_seq,
        &NoProgress,
        &mut replayed,
    )
    .map_err(|f| format!("{JOURNAL_PREV}: op {} does not apply ({f:?})", f.seq()))?;
    // Every op before this is in the state now.
    let chained_to = prev_seq.max(scan.next_seq());
    drop(scan);
    drop(prev_journal);
    report.batches_replayed = replayed.batches;
    report.ops_replayed = replayed.ops_applied;
    report.ops_skipped = replayed.ops_skipped;
    report.next_seq = chained_to;
    let journal = match device.read(JOURNAL_FILE) {
        Ok(journal) => journal,
        Err(e) => {
            return Err(ChainError {
                why: format!("reading {JOURNAL_FILE}: {e}"),
                journal_unreadable: true,
            })
        }
    };
    let onto = match journal {
        Some(bytes) => journal_onto(&bytes, &mut state, store_id, chained_to, &mut report),
        None => Err(format!("{JOURNAL_FILE} is missing")),
    };
    let lost = match onto {
        Ok(()) => None,
        Err(why) if accept_loss => {
            report.journal_valid_len = 0;
            Some(Loss {
                why,
                journal_ops_replayed: report.ops_replayed - replayed.ops_applied,
            })
        }
        Err(why) => return Err(why.into()),
    };
    Ok((state, report, lost))
}

/// Replays the bytes of `journal` onto the backup's state, which holds every op before
/// `chained_to`. Err: why it cannot (all of it, or from some point: a loss can still leave
/// ops replayed).
fn journal_onto(
    journal: &[u8],
    state: &mut State,
    store_id: [u8; 16],
    chained_to: u64,
    report: &mut Report,
) -> Result<(), String> {
    // Past every op the journal names, even those not replayed (a gap, a damaged batch):
    // the repaired checkpoint must not hand their numbers out again.
    if let Ok(header) = journal::Header::decode(journal) {
        report.next_seq = report.next_seq.max(header.base_seq);
    }
    let head = journal::scan(journal).map_err(|e| format!("{JOURNAL_FILE}: {e}"))?;
    report.next_seq = report.next_seq.max(head.next_seq());
    if head.header.base_seq > chained_to {
        // A checkpoint that restarted persistence after an I/O error began its journal
        // empty at its image's op: the ops between were only in that image.
        return Err(format!(
            "the journal starts at op {} but the backup reaches only op {chained_to}: the ops \
             in between were only in the damaged checkpoint (a checkpoint restarted \
             persistence after an I/O error)",
            head.header.base_seq
        ));
    }
    // replay_journal counts the journal alone (when it gets that far): the backup's counts
    // are added after.
    let (batches, ops, skipped) = (
        std::mem::take(&mut report.batches_replayed),
        std::mem::take(&mut report.ops_replayed),
        std::mem::take(&mut report.ops_skipped),
    );
    let replayed = recovery::replay_journal(journal, state, store_id, chained_to, report)
        .map_err(|e| format!("{JOURNAL_FILE}: {e}"));
    report.batches_replayed += batches;
    report.ops_replayed += ops;
    report.ops_skipped += skipped;
    if replayed.is_err() {
        let fits = recovery::journal_fits(&head, store_id, chained_to).is_ok();
        if fits && matches!(head.tail, Tail::Damaged { .. } | Tail::Cut { .. }) {
            // Its valid prefix still applies: replay it, the loss is what follows.
            let mut more = Replayed::default();
            let _ = recovery::replay(state, &head.batches, chained_to, &NoProgress, &mut more);
            report.batches_replayed += more.batches;
            report.ops_replayed += more.ops_applied;
            report.ops_skipped += more.ops_skipped;
        }
    }
    replayed
}

//! The phases of a check, each noting what it finds in the report. They call the functions
//! recovery calls at mount (`persist::recovery`), asking for more detail.

use std::path::Path;

use super::{count_after_damage, hex, Ctx, FailedOp, Report, TailReport};
use crate::engine::State;
use crate::persist::checkpoint::CheckpointError;
use crate::persist::journal::{self, JournalError, Scan, Tail};
use crate::persist::recovery::{
    self, Phase, Progress, RecoveryError, ReplayFailure, Replayed, CHECKPOINT_FILE, JOURNAL_FILE,
};
use crate::store::{StoreError, SUPERBLOCK_FILE};

/// The superblock is damaged or of another format version: nothing else can be read.
pub(super) fn superblock_damaged(r: &mut Report, path: &Path, e: StoreError) {
    r.superblock.error = Some(e.to_string());
    r.problems.push(format!("superblock: {e}"));
    r.unrepairable = Some(match e {
        StoreError::UnsupportedVersion { .. } => {
            "the store was made by a rampart of another format version: use a release that \
             reads it"
                .into()
        }
        _ => format!(
            "the superblock {} is damaged; fsck does not rebuild it (it names the store): \
             restore it from a backup",
            path.join(SUPERBLOCK_FILE).display()
        ),
    });
}

/// Phase 1: the state to replay onto, and the first op it does not hold (None: there is
/// none to build on).
pub(super) fn checkpoint(
    r: &mut Report,
    ctx: &Ctx<'_>,
) -> Result<Option<(State, u64)>, super::FsckError> {
    let checkpoint_path = ctx.file(CHECKPOINT_FILE).display().to_string();
    let bytes = match ctx.device.read(CHECKPOINT_FILE) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(Some((State::new(&ctx.config), 0))),
        Err(e) => {
            // Damage, as the mount takes it: the backup check (next) may stand in for it.
            let e = format!("{checkpoint_path} cannot be read: {e}");
            r.checkpoint.present = true;
            r.checkpoint.damaged = true;
            r.checkpoint.error = Some(e.clone());
            r.problems.push(e);
            r.unrepairable = Some(format!(
                "{checkpoint_path} cannot be read and is the only copy of the file system's \
                 state. Nothing was changed; restore the store from a backup"
            ));
            return Ok(None);
        }
    };
    r.checkpoint.present = true;
    r.checkpoint.bytes = bytes.len() as u64;
    ctx.progress
        .phase(Phase::CheckpointDecode, bytes.len() as u64);
    let loaded = recovery::load_checkpoint(&bytes, ctx.store_id, &ctx.config);
    ctx.progress.done();
    let e = match loaded {
        Ok(loaded) => {
            r.checkpoint.seq = Some(loaded.header.seq);
            r.checkpoint.ok = loaded.problems.is_empty();
            r.checkpoint.damaged = !r.checkpoint.ok;
            r.problems.extend(
                loaded
                    .problems
                    .iter()
                    .map(|p| format!("checkpoint {checkpoint_path} holds an inconsistency: {p}")),
            );
            r.checkpoint.problems = loaded.problems;
            return Ok(Some((loaded.state, loaded.header.seq)));
        }
        Err(RecoveryError::WrongStore { found, .. }) => {
            let e = format!(
                "checkpoint {checkpoint_path} belongs to another store (store id {}, the \
                 superblock's is {})",
                hex(&found),
                hex(&ctx.store_id)
            );
            r.checkpoint.error = Some(e.clone());
            r.problems.push(e);
            r.unrepairable = Some(format!(
                "{checkpoint_path} is another store's checkpoint; fsck does not guess which \
                 state is this store's: put the store's own checkpoint back, or restore the \
                 store from a backup"
            ));
            return Ok(None);
        }
        Err(RecoveryError::Checkpoint(e)) => e,
        Err(other) => CheckpointError::Format(other.to_string()),
    };
    r.checkpoint.error = Some(e.to_string());
    r.checkpoint.damaged = !matches!(e, CheckpointError::Version(_));
    r.problems.push(format!("{checkpoint_path}: {e}"));
    r.unrepairable = Some(match &e {
        CheckpointError::Version(_) => {
            format!("{checkpoint_path} was written by a newer rampart: use that release")
        }
        CheckpointError::Format(_) => format!(
            "{checkpoint_path} is damaged and cannot be repaired: it is the only copy of the \
             file system's state, and fsck does not guess at damaged data. Nothing was \
             changed; restore the store from a backup"
        ),
        CheckpointError::Inconsistent(_) => format!(
            "{checkpoint_path} has no root directory or repeats an inode number: fsck cannot \
             rebuild a file system from it. Nothing was changed; restore the store from a \
             backup"
        ),
    });
    Ok(None)
}

/// What phase 2 found.
pub(super) struct JournalPhase<'a> {
    /// The journal's scan, if it can be replayed onto the base state.
    pub scan: Option<Scan<'a>>,
    /// What a repair does to the journal (beyond replacing it with an empty one).
    pub repair: Option<String>,
    /// The first sequence number a repaired checkpoint may use: past every op seen in a
    /// journal of this store.
    pub next_seq: u64,
}

/// What shows the store was mounted (`recovery::mounted_evidence`); an error reading it is
/// taken as evidence too: fsck never calls a store fresh on a guess.
fn mounted_evidence(device: &dyn crate::persist::device::Device) -> Option<String> {
    recovery::mounted_evidence(device)
        .unwrap_or_else(|e| Some(format!("the store cannot be read: {e}")))
}

/// Phase 2: the journal scan. `have_base`: the checkpoint phase gave a state holding every op
/// before `from_seq`.
pub(super) fn journal<'a>(
    r: &mut Report,
    ctx: &Ctx<'_>,
    bytes: Option<&'a [u8]>,
    have_base: bool,
    from_seq: u64,
) -> JournalPhase<'a> {
    let journal_path = ctx.file(JOURNAL_FILE).display().to_string();
    let mut phase = JournalPhase {
        scan: None,
        repair: None,
        next_seq: from_seq,
    };
    let Some(bytes) = bytes else {
        if r.checkpoint.present {
            // The journal is made before the first checkpoint and only ever replaced by
            // rename: it was deleted, and with it the changes after the checkpoint.
            r.problems.push(format!(
                "journal {journal_path} is missing, but the checkpoint {} is there: any \
                 changes made after the checkpoint are lost with it (restore the file to keep \
                 them)",
                ctx.file(CHECKPOINT_FILE).display()
            ));
            phase.repair = Some(format!(
                "accepted the loss of the missing journal {journal_path}"
            ));
        } else if let Some(evidence) = mounted_evidence(ctx.device.as_ref()) {
            r.problems.push(format!(
                "journal {journal_path} is missing, and there is no checkpoint, though the \
                 store has been mounted ({evidence}): the changes they held are lost with them \
                 (restore the files to keep them; --repair links the host files no file uses \
                 into /lost+found)"
            ));
            phase.repair = Some(format!(
                "accepted the loss of the missing journal {journal_path}"
            ));
        }
        return phase;
    };
    r.journal.present = true;
    r.journal.bytes = bytes.len() as u64;
    ctx.progress.phase(Phase::JournalScan, bytes.len() as u64);
    match journal::scan(bytes) {
        Err(e @ JournalError::Version(_)) => {
            r.journal.error = Some(e.to_string());
            r.problems.push(format!("{journal_path}: {e}"));
            r.unrepairable.get_or_insert(format!(
                "{journal_path} was written by a newer rampart: use that release"
            ));
        }
        Err(e) => {
            r.journal.error = Some(e.to_string());
            r.problems.push(format!(
                "{journal_path}: {e}; none of its {} bytes can be replayed",
                bytes.len()
            ));
            phase.repair = Some(format!(
                "discarded the unreadable journal {journal_path} ({} bytes)",
                bytes.len()
            ));
        }
        Ok(scan) => scanned(r, ctx, bytes, scan, have_base, &mut phase),
    }
    ctx.progress.done();
    phase
}

/// Phase 2 for a journal whose header reads: does it fit the base state, and how it ends.
fn scanned<'a>(
    r: &mut Report,
    ctx: &Ctx<'_>,
    bytes: &'a [u8],
    scan: Scan<'a>,
    have_base: bool,
    phase: &mut JournalPhase<'a>,
) {
    let journal_path = ctx.file(JOURNAL_FILE).display().to_string();
    let from_seq = phase.next_seq;
    r.journal.base_seq = Some(scan.header.base_seq);
    r.journal.batches = scan.batches.len() as u64;
    r.journal.ops = scan.op_count();
    r.journal.valid_bytes = scan.valid_len;
    r.journal.reserved_bytes = scan.reserved_bytes;
    r.journal.next_seq = Some(scan.next_seq());
    // Without a base state only the store id can be checked (there is nothing to replay on).
    let fits = recovery::journal_fits(
        &scan,
        ctx.store_id,
        if have_base { from_seq } else { u64::MAX },
    );
    let usable = match fits {
        Ok(()) => true,
        Err(RecoveryError::WrongStore { found, .. }) => {
            r.problems.push(format!(
                "journal {journal_path} belongs to another store (store id {}, the \
                 superblock's is {}); none of it can be replayed",
                hex(&found),
                hex(&ctx.store_id)
            ));
            phase.repair = Some(format!(
                "discarded {journal_path}: another store's journal ({} bytes)",
                bytes.len()
            ));
            false
        }
        Err(_) => {
            gap(r, ctx, &scan, from_seq);
            false
        }
    };
    if usable {
        phase.next_seq = phase.next_seq.max(scan.next_seq());
    }
    r.journal.tail = Some(tail_report(r, ctx, bytes, &scan, usable, phase));
    r.journal.ok = usable && !matches!(scan.tail, Tail::Damaged { .. } | Tail::Cut { .. });
    if usable {
        phase.scan = Some(scan);
    }
}

/// The journal starts after the checkpoint ends: which of the two is wrong cannot be told
/// from here, so nothing is guessed.
fn gap(r: &mut Report, ctx: &Ctx<'_>, scan: &Scan<'_>, from_seq: u64) {
    let journal_path = ctx.file(JOURNAL_FILE).display().to_string();
    let checkpoint_path = ctx.file(CHECKPOINT_FILE).display().to_string();
    let base_seq = scan.header.base_seq;
    r.problems.push(if r.checkpoint.present {
        format!(
            "journal {journal_path} starts at op {base_seq} but the checkpoint \
             {checkpoint_path} ends at op {from_seq}: the ops in between are missing (the \
             checkpoint is older than the journal), so none of the journal's {} ops can be \
             replayed",
            scan.op_count()
        )
    } else {
        format!(
            "journal {journal_path} starts at op {base_seq}, but there is no checkpoint \
             {checkpoint_path} holding the ops before it"
        )
    });
    r.unrepairable.get_or_insert(format!(
        "the checkpoint that goes with the journal is missing: put it back (from a backup) as \
         {checkpoint_path}; or, to {} and lose the journal's changes, move {journal_path} out \
         of the store and run `rampart fsck --repair` again (it links the host files of \
         disk-tier files no file uses into /lost+found)",
        if r.checkpoint.present {
            "keep the checkpoint's state"
        } else {
            "start again from an empty file system"
        }
    ));
}

/// How the journal's valid prefix ends; for damage, what lies after it.
fn tail_report(
    r: &mut Report,
    ctx: &Ctx<'_>,
    bytes: &[u8],
    scan: &Scan<'_>,
    usable: bool,
    phase: &mut JournalPhase<'_>,
) -> TailReport {
    let journal_path = ctx.file(JOURNAL_FILE).display().to_string();
    let (offset, reason, next_valid_offset) = match &scan.tail {
        Tail::Clean => return TailReport::Clean,
        Tail::Torn {
            offset,
            bytes,
            reason,
        } => {
            return TailReport::Torn {
                offset: *offset,
                bytes: *bytes,
                reason: reason.clone(),
            }
        }
        Tail::Cut { offset, reason } => {
            return cut_report(r, ctx, bytes, scan, usable, phase, *offset, reason)
        }
        Tail::Damaged {
            offset,
            reason,
            next_valid_offset,
        } => (*offset, reason, *next_valid_offset),
    };
    let after = count_after_damage(bytes, ctx.store_id, next_valid_offset as usize);
    if usable {
        phase.next_seq = phase.next_seq.max(after.next_seq);
    }
    // Everything but the reserved zeros at the end, which held nothing.
    let content_end = journal::content_end(bytes) as u64;
    let dropped_bytes = after.end.max(content_end).max(offset) - offset;
    let (batches, ops) = (after.batches, after.ops);
    r.problems.push(format!(
        "journal {journal_path} is damaged at byte {offset} ({reason}) with valid data after \
         it (from byte {next_valid_offset}): the damaged batch and {batches} valid batches \
         after it ({ops} ops, {dropped_bytes} bytes in all) cannot be replayed"
    ));
    if usable {
        phase.repair = Some(format!(
            "truncated the journal {journal_path} at the damage (byte {offset}): dropped \
             {dropped_bytes} bytes, the damaged batch and {batches} batches after it ({ops} ops)"
        ));
    }
    TailReport::Damaged {
        offset,
        reason: reason.clone(),
        next_valid_offset,
        dropped_bytes,
        dropped_batches: batches,
        dropped_ops: ops,
    }
}

/// A journal cut short (decision 0038): what follows the valid prefix is unknown, so the
/// report says where it ends and what `--repair` keeps.
#[allow(clippy::too_many_arguments)]
fn cut_report(
    r: &mut Report,
    ctx: &Ctx<'_>,
    bytes: &[u8],
    scan: &Scan<'_>,
    usable: bool,
    phase: &mut JournalPhase<'_>,
    offset: u64,
    reason: &str,
) -> TailReport {
    let journal_path = ctx.file(JOURNAL_FILE).display().to_string();
    let dropped_bytes = (bytes.len() as u64).saturating_sub(offset);
    r.problems.push(format!(
        "journal {journal_path} was cut short at byte {offset} ({reason}): no crash leaves \
         it so, and the changes that were durable after that byte are gone from it (how many \
         cannot be known; the last op it holds is {}). Restore the journal from a backup, or \
         accept the loss with `rampart fsck --repair`",
        scan.next_seq().saturating_sub(1)
    ));
    if usable {
        phase.repair = Some(format!(
            "accepted the loss of the journal {journal_path} after byte {offset}: kept its \
             {} whole batches (ops before {}), dropped the {dropped_bytes} bytes of the cut \
             batch; whatever followed it was lost before this repair",
            scan.batches.len(),
            scan.next_seq()
        ));
    }
    TailReport::Cut {
        offset,
        reason: reason.to_string(),
        dropped_bytes,
    }
}

/// Phase 3: the replay of the journal's valid prefix, as at mount; it stops at the first op
/// that does not apply (or decode).
pub(super) fn replay(
    r: &mut Report,
    ctx: &Ctx<'_>,
    state: &mut State,
    scan: &Scan<'_>,
    from_seq: u64,
) {
    ctx.progress.phase(Phase::Replay, scan.op_count());
    r.replay.done = true;
    let mut replayed = Replayed::default();
    let result = recovery::replay(state, &scan.batches, from_seq, ctx.progress, &mut replayed);
    r.replay.batches = replayed.batches;
    r.replay.ops_applied = replayed.ops_applied;
    r.replay.ops_skipped = replayed.ops_skipped;
    if let Err(failure) = result {
        let seq = failure.seq();
        let f = match failure {
            ReplayFailure::NotApplied { op, error, .. } => FailedOp {
                seq,
                op,
                error: error.to_string(),
            },
            ReplayFailure::Undecodable { error, .. } => FailedOp {
                seq,
                op: "(undecodable op)".into(),
                error: error.to_string(),
            },
        };
        let rest = scan.next_seq().saturating_sub(f.seq);
        r.replay.ops_not_replayed = rest;
        r.problems.push(format!(
            "journal op {} ({}) does not apply: {}; the replay stops there, so {rest} ops of \
             {} (it and those after it) are not replayed",
            f.seq,
            f.op,
            f.error,
            ctx.file(JOURNAL_FILE).display()
        ));
        r.replay.failed = Some(f);
    }
    ctx.progress.done();
}

/// Phase 4: what recovery does after the replay, then every invariant of the state.
pub(super) fn invariants(
    r: &mut Report,
    state: &mut State,
    device: &dyn crate::persist::device::Device,
    progress: &dyn Progress,
) {
    progress.phase(Phase::Invariants, 1);
    r.replay.volatile_dropped = recovery::after_replay(state);
    // As recovery does: files deleted on a full disk whose host files were freed (0119).
    r.replay.freed_dropped = match crate::persist::freed_note::deleted_inodes(state, device) {
        Ok(inos) => state.drop_inodes(&inos),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            r.problems.push(format!(
                "{e}: the files it named, deleted while the disk was full, show as missing \
                 host files; --repair makes them empty files (their deletion is lost) and \
                 removes the note"
            ));
            0
        }
        Err(e) => {
            r.problems
                .push(format!("reading the store's freed note: {e}"));
            0
        }
    };
    let problems = state.check();
    r.invariants.checked = true;
    // The checkpoint's own problems are listed already (they alone refuse a mount).
    let replayed =
        r.replay.ops_applied > 0 || r.replay.volatile_dropped > 0 || r.replay.freed_dropped > 0;
    let new: Vec<String> = problems
        .iter()
        .filter(|p| !r.checkpoint.problems.contains(p))
        .map(|p| {
            if replayed {
                format!("after replaying the journal: {p}")
            } else {
                p.clone()
            }
        })
        .collect();
    r.problems.extend(new);
    r.invariants.problems = problems;
    progress.done();
}

/// Phase 4, continued: the data folder against the disk-tier files. Missing and short host
/// files are problems (their bytes are lost); orphans and long ones are what a crash leaves,
/// which every mount tidies.
pub(super) fn data_folder(r: &mut Report, ctx: &Ctx<'_>, state: &State) {
    let scan = match crate::disk::scan_host_files(ctx.device.as_ref(), state) {
        Ok(scan) => scan,
        Err(e) => {
            r.problems.push(format!(
                "the data folder {} cannot be read: {e}",
                ctx.file(crate::persist::device::DATA_FOLDER).display()
            ));
            return;
        }
    };
    let d = &mut r.data;
    d.checked = true;
    d.files = scan.files;
    d.bytes = scan.bytes;
    d.orphans = scan.orphans;
    d.foreign = scan.foreign;
    d.long = scan.long.iter().map(|(name, _, _)| name.clone()).collect();
    let paths = state.paths_of(&scan.damaged.iter().map(|(ino, ..)| *ino).collect());
    for (ino, name, size, len) in &scan.damaged {
        let path = ctx.file(name).display().to_string();
        let file = file_named(*ino, &paths);
        match len {
            None => {
                d.missing.push(name.clone());
                r.problems.push(format!(
                    "{file}: its host file {path} is missing: its {size} bytes are lost"
                ));
            }
            Some(len) => {
                d.short.push(name.clone());
                r.problems.push(format!(
                    "{file}: its host file {path} holds {len} of its {size} bytes: bytes \
                     {len} to {size} are lost"
                ));
            }
        }
    }
}

/// How a report names a file: its path in the file system where it has one, and its inode.
pub(super) fn file_named(
    ino: crate::attr::Ino,
    paths: &std::collections::HashMap<u64, String>,
) -> String {
    match paths.get(&ino) {
        Some(path) => format!("{path} (inode {ino})"),
        None => format!("inode {ino} (no name)"),
    }
}

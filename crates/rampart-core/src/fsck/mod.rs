//! Checking and repairing an unmounted store at memory speed (`rampart fsck`, docs/CLI.md).
//!
//! Phases, reported through [`Progress`]:
//! 1. the superblock (while taking the store's lock: a mounted store is refused) and the
//!    checkpoint, decoded without refusing broken invariants;
//! 2. the journal scan: its header, its valid batches and how it ends (`Tail`): clean, torn
//!    (an unsynced write cut by a crash, benign) or damaged (durable data after damage);
//! 3. the replay of the journal's ops onto the checkpoint's state: the same functions as
//!    recovery at mount (`persist::recovery`), so an op that does not apply is a problem;
//! 4. every invariant of the resulting state (`State::check`).
//!
//! [`check`] opens the store read-only (a shared lock, a read-only device) and writes nothing.
//! [`repair`] also drops the journal from its damage on, stops the replay at an op that does
//! not apply, runs `State::repair` (invariants; unreachable inodes go to /lost+found), and
//! writes the result as a new checkpoint with an empty journal through the persister, the
//! way the daemon checkpoints. A checkpoint that cannot be decoded is the only copy of the
//! file system: it is never rewritten.

mod backup;
mod damage;
mod describe;
mod phases;
mod report;
mod write;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

pub use crate::error::FsckError;
pub use crate::persist::recovery::{NoProgress, Phase, Progress};
pub use damage::{count_after_damage, AfterDamage};
pub use describe::describe_op;
pub use report::*;

use crate::engine::{Engine, EngineConfig};
use crate::persist::device::{Device, DirDevice};
use crate::store::{Store, StoreError};

/// Checks the store at `store_path` without changing anything in it (it may be read-only).
/// Err: the store could not be examined at all (missing, mounted, unreadable), with a message
/// that says what to do; problems found in it are in the report.
pub fn check(store_path: &Path, progress: &dyn Progress) -> Result<Report, FsckError> {
    run(store_path, false, progress, None)
}

/// Checks the store at `store_path` and repairs what can be repaired.
pub fn repair(store_path: &Path, progress: &dyn Progress) -> Result<Report, FsckError> {
    run(store_path, true, progress, None)
}

/// [`repair`] reading and writing the store's files through `device` (the crash tests: a
/// `SimDevice` holding a copy of them); the superblock and the lock are the folder's.
#[doc(hidden)]
pub fn repair_through(
    store_path: &Path,
    device: Arc<dyn Device>,
    progress: &dyn Progress,
) -> Result<Report, FsckError> {
    run(store_path, true, progress, Some(device))
}

/// The store folder's files, writable for a repair.
fn open_device(path: &Path, repair: bool) -> Result<Arc<dyn Device>, FsckError> {
    let device = if repair {
        DirDevice::open(path)
    } else {
        DirDevice::open_read_only(path)
    };
    match device {
        Ok(device) => Ok(Arc::new(device)),
        Err(error) => Err(FsckError::Folder {
            path: path.to_path_buf(),
            error,
        }),
    }
}

/// What the phases share.
struct Ctx<'a> {
    path: &'a Path,
    device: Arc<dyn Device>,
    store_id: [u8; 16],
    config: EngineConfig,
    progress: &'a dyn Progress,
}

impl Ctx<'_> {
    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, FsckError> {
        self.device.read(name).map_err(|error| FsckError::Read {
            path: self.file(name),
            error,
        })
    }
}

fn run(
    path: &Path,
    repair: bool,
    progress: &dyn Progress,
    through: Option<Arc<dyn Device>>,
) -> Result<Report, FsckError> {
    let started = Instant::now();
    let mut r = Report {
        store: path.display().to_string(),
        ..Report::default()
    };
    progress.phase(Phase::CheckpointDecode, 1);
    // A lost superblock is rebuilt first, from the store id in the other files' headers.
    let rebuilt = if repair {
        crate::store::rebuild_superblock(path).map_err(FsckError::Store)?
    } else {
        None
    };
    let opened = if repair {
        Store::open(path)
    } else {
        Store::open_read_only(path)
    };
    let store = match opened {
        Ok(store) => store,
        Err(e @ (StoreError::Corrupt(_) | StoreError::UnsupportedVersion { .. })) => {
            phases::superblock_damaged(&mut r, path, e);
            return Ok(finish(r, started));
        }
        Err(e) => return Err(FsckError::Store(e)),
    };
    let sb = *store.superblock();
    r.superblock = SuperblockReport {
        ok: true,
        format_version: Some(sb.format_version),
        store_id: Some(hex(&sb.store_id)),
        error: None,
    };
    if let Some(what) = rebuilt {
        r.repairs.push(what);
        r.repaired = true;
    }
    let ctx = Ctx {
        path,
        device: through.map_or_else(|| open_device(path, repair), Ok)?,
        store_id: sb.store_id,
        config: engine_config(path),
        progress,
    };
    let mut base = phases::checkpoint(&mut r, &ctx)?;
    match backup::check(&mut r, &ctx) {
        Ok(Some(chain)) => return from_backup(r, &ctx, chain, repair, started),
        Ok(None) => {}
        Err(backup::Stop) => return Ok(finish(r, started)),
    }
    let from_seq = base.as_ref().map_or(0, |(_, seq)| *seq);
    let journal_bytes = ctx.read(crate::persist::recovery::JOURNAL_FILE)?;
    let journal = phases::journal(
        &mut r,
        &ctx,
        journal_bytes.as_deref(),
        base.is_some(),
        from_seq,
    );
    if let (Some((state, from_seq)), Some(scan)) = (base.as_mut(), journal.scan.as_ref()) {
        phases::replay(&mut r, &ctx, state, scan, *from_seq);
    }
    if let Some((state, _)) = base.as_mut() {
        phases::invariants(&mut r, state, ctx.device.as_ref(), progress);
        phases::data_folder(&mut r, &ctx, state);
    }
    let clean = r.problems.is_empty();
    let Some((mut state, _)) = base else {
        return Ok(finish(r, started));
    };
    if clean && repair && (!r.data.orphans.is_empty() || !r.data.long.is_empty()) {
        // Benign, and what every mount tidies; `--repair` tidies them too, without a new
        // checkpoint (the state does not change).
        write::tidy_data_folder(&mut r, &ctx, &mut state)?;
    }
    if clean || !repair || r.unrepairable.is_some() {
        r.clean = clean;
        r.filesystem = Some(counts(&Engine::from_state(state)));
        return Ok(finish(r, started));
    }
    let plan = write::Plan {
        journal_repair: journal.repair,
        next_seq: journal.next_seq,
        journal_valid_len: journal.scan.as_ref().map_or(0, |scan| scan.valid_len),
        // The repaired state holds changes no journal has (dropped ops, adopted files): the
        // old pair would not chain to the new journal, so none is kept (decision 0123).
        backup: crate::persist::persister::Backup::Drop,
    };
    drop(journal.scan);
    write::repair(&mut r, &ctx, state, plan)?;
    drop(store);
    Ok(finish(r, started))
}

/// The rest of a check whose checkpoint the backup pair stands in for: the chain's state is
/// checked as a replayed one is, and `--repair` writes it as a new checkpoint, keeping the
/// pair until that is in place (decision 0123).
fn from_backup(
    mut r: Report,
    ctx: &Ctx<'_>,
    chain: backup::Chain,
    repair: bool,
    started: Instant,
) -> Result<Report, FsckError> {
    let backup::Chain {
        mut state,
        report: chain,
        journal_lost,
        ..
    } = chain;
    phases::invariants(&mut r, &mut state, ctx.device.as_ref(), ctx.progress);
    phases::data_folder(&mut r, ctx, &state);
    if !repair || r.unrepairable.is_some() {
        r.filesystem = Some(counts(&Engine::from_state(state)));
        return Ok(finish(r, started));
    }
    let (prev, prev_journal) = (
        ctx.file(crate::persist::recovery::CHECKPOINT_PREV),
        ctx.file(crate::persist::recovery::JOURNAL_PREV),
    );
    let journal_repair = match &journal_lost {
        None => format!(
            "rebuilt the state from the backup {} and {} and the journal",
            prev.display(),
            prev_journal.display()
        ),
        Some(why) => format!(
            "rebuilt the state from the backup {} and {} and accepted the loss of the \
             journal's changes it could not replay ({why})",
            prev.display(),
            prev_journal.display()
        ),
    };
    let plan = write::Plan {
        journal_repair: Some(journal_repair),
        next_seq: chain.next_seq,
        journal_valid_len: chain.journal_valid_len,
        // A chain cut short holds changes no journal continues: no pair is made (decision
        // 0123), but the pair and the journal stay until the new checkpoint is in place: a
        // failed or interrupted repair can be run again (decision 0133).
        backup: if journal_lost.is_none() {
            crate::persist::persister::Backup::KeepUntilReplaced
        } else {
            crate::persist::persister::Backup::KeepWithJournalUntilReplaced
        },
    };
    write::repair(&mut r, ctx, state, plan)?;
    Ok(finish(r, started))
}

/// The engine's configuration for replay. A store without a checkpoint starts from a root
/// owned by whoever mounts it: its owner (the folder is private to it), whoever runs fsck.
fn engine_config(path: &Path) -> EngineConfig {
    let (root_uid, root_gid) = std::fs::metadata(path)
        .map(|m| (m.uid(), m.gid()))
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        .unwrap_or_else(|_| unsafe { (libc::getuid(), libc::getgid()) });
    EngineConfig {
        // Replay never fails for want of memory: every op fitted the cap when it was made.
        memory_cap_bytes: u64::MAX,
        root_uid,
        root_gid,
        root_mode: 0o755,
        ..EngineConfig::default()
    }
}

fn finish(mut r: Report, started: Instant) -> Report {
    r.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    r
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn counts(engine: &Engine) -> FsCounts {
    let s = engine.stats();
    FsCounts {
        inodes: s.files + s.directories + s.symlinks + s.other,
        files: s.files,
        directories: s.directories,
        symlinks: s.symlinks,
        other: s.other,
        data_bytes: s.data_bytes,
    }
}

//! `fsck --repair`'s last step: repair the state, then write it as a new checkpoint with an
//! empty journal through the persister, exactly as the daemon's checkpoints are written
//! (`checkpoint.tmp` synced and renamed, then `journal.tmp` synced and renamed).

use std::sync::Arc;

use super::{counts, Ctx, FsckError, Phase, Report};
use crate::contents::Tier;
use crate::engine::{Engine, State};
use crate::op::Op;
use crate::persist::checkpoint;
use crate::persist::persister::{Backup, PersistConfig, Persister};
use crate::persist::recovery::{CHECKPOINT_FILE, JOURNAL_FILE};

/// What the journal phases decided for the write.
pub(super) struct Plan {
    /// What the repair does to the journal, for the report.
    pub journal_repair: Option<String>,
    /// The first op not in the repaired image.
    pub next_seq: u64,
    /// The journal's valid prefix when it is this store's and fits (0: none; a new journal
    /// is started).
    pub journal_valid_len: u64,
    /// What the checkpoint does with the backup pair: kept until the new checkpoint is in
    /// place when it stands in for a damaged one (decision 0123), with the journal too when
    /// that cannot continue it (decision 0133); else dropped.
    pub backup: Backup,
}

/// Repairs `state` and, if nothing is left broken, writes it. The report says what was done.
pub(super) fn repair(
    r: &mut Report,
    ctx: &Ctx<'_>,
    mut state: State,
    plan: Plan,
) -> Result<(), FsckError> {
    ctx.progress.phase(Phase::Repair, 1);
    if let Some(what) = &plan.journal_repair {
        r.repairs.push(what.clone());
    }
    if let Some(f) = &r.replay.failed {
        r.repairs.push(format!(
            "stopped the replay at op {} ({}): dropped it and the {} ops after it",
            f.seq,
            f.op,
            r.replay.ops_not_replayed.saturating_sub(1)
        ));
    }
    // The invariants first: an inode whose link count the repair fixes uses its host file.
    r.repairs.extend(state.repair());
    // Ops are dropped (a journal lost, cut or damaged): a host file no file uses may hold a
    // file created after the checkpoint, durable in the data folder though its inode is gone.
    let ops_lost = plan.journal_repair.is_some() || r.replay.failed.is_some();
    if ops_lost {
        adopt_orphans(r, ctx, &mut state)?;
    }
    repair_data_folder(r, ctx, &mut state)?;
    let left = state.check();
    if !left.is_empty() {
        r.unrepairable = Some(format!(
            "the repair left {} problems (first: {}); nothing was written",
            left.len(),
            left[0]
        ));
        r.problems
            .extend(left.into_iter().map(|p| format!("after the repair: {p}")));
        r.filesystem = Some(counts(&Engine::from_state(state)));
        return Ok(());
    }
    let engine = Arc::new(Engine::from_state(state));
    // The image must read back before it replaces anything.
    let image = engine
        .with_state(|s| checkpoint::encode(s, ctx.store_id, plan.next_seq, crate::time::now_ns()));
    if let Err(error) = checkpoint::decode(&image, &ctx.config) {
        return Err(FsckError::ReadBack {
            store: ctx.path.to_path_buf(),
            error,
        });
    }
    drop(image);
    ctx.progress.phase(Phase::Write, 1);
    let image_bytes = write(ctx, &engine, &plan)?;
    let fs = counts(&engine);
    r.repairs.push(format!(
        "wrote a new checkpoint {} ({image_bytes} bytes, {} inodes, ops before {}) and an \
         empty journal {}",
        ctx.file(CHECKPOINT_FILE).display(),
        fs.inodes,
        plan.next_seq,
        ctx.file(JOURNAL_FILE).display()
    ));
    r.filesystem = Some(fs);
    r.repaired = true;
    r.clean = true;
    ctx.progress.done();
    Ok(())
}

/// Writes the checkpoint of `engine` and an empty journal: a persister continues the journal
/// (cut at its valid prefix, or a new one), and its shutdown writes the final checkpoint. A
/// crash in between leaves the old checkpoint with the cut journal, or the new checkpoint
/// with the old journal, whose readable ops it already covers. Returns the image's length.
fn write(ctx: &Ctx<'_>, engine: &Arc<Engine>, plan: &Plan) -> Result<u64, FsckError> {
    let failed = |error| FsckError::Write {
        store: ctx.path.to_path_buf(),
        error,
    };
    let backup = plan.backup;
    let persister = Persister::start_with(
        ctx.device.clone(),
        ctx.store_id,
        plan.next_seq,
        plan.journal_valid_len,
        PersistConfig::default(),
        backup,
    )
    .map_err(failed)?;
    persister.attach(engine);
    // The final checkpoint's failure is sticky even when shutdown forgives it (with no op
    // pending, a mount would still have the journal): here nothing else is written.
    let shut = persister.shutdown(engine);
    let failed_checkpoint = persister.checkpoint_error();
    if let Some(error) = shut
        .err()
        .or_else(|| persister.error())
        .or(failed_checkpoint)
    {
        return Err(failed(error));
    }
    Ok(persister.stats().checkpoint_image_bytes)
}

/// Host files no file uses, when the repair drops ops: each becomes a file of
/// `/lost+found` (`#host-INO-GENERATION`, root's, 0600) holding its bytes, instead of being
/// removed as a mount removes what a crash leaves (e2fsck links unattached inodes likewise).
/// The host file is renamed to its new inode's name (a synced rename) before the repaired
/// state is written: a crash in between leaves it an orphan again, for the next repair.
fn adopt_orphans(r: &mut Report, ctx: &Ctx<'_>, state: &mut State) -> Result<(), FsckError> {
    let io_failed = |error: std::io::Error| FsckError::Write {
        store: ctx.path.to_path_buf(),
        error: crate::error::PersistError::new(crate::error::PersistStep::WriteCheckpoint, &error),
    };
    let device = ctx.device.as_ref();
    let scan = crate::disk::scan_host_files(device, state).map_err(io_failed)?;
    let named: Vec<(String, (u64, u32))> = scan
        .orphans
        .into_iter()
        .filter_map(|old| {
            let parsed = crate::contents::host_file::parse_host_file_name(&old)?;
            Some((old, parsed))
        })
        .collect();
    // The lost journal handed out these generations: new inodes get larger ones, so no
    // adopted file is renamed onto an orphan not yet adopted.
    let generation_floor = named.iter().map(|(_, (_, g))| *g).max().unwrap_or(0);
    for (old, (old_ino, old_generation)) in named {
        // Only a regular file can hold a file's bytes (a folder with such a name is left).
        if !std::fs::symlink_metadata(ctx.file(&old)).is_ok_and(|m| m.file_type().is_file()) {
            continue;
        }
        let Some(len) = device.len(&old).map_err(io_failed)? else {
            continue;
        };
        let name = format!("#host-{old_ino}-{old_generation}");
        let (ino, generation) = match state.adopt_host_file(name.as_bytes(), len, generation_floor)
        {
            Ok(new) => new,
            Err(e) => {
                r.problems.push(format!(
                    "the host file {} could not be linked into /lost+found ({e:?}); it is \
                     removed with the other unused ones",
                    ctx.file(&old).display()
                ));
                continue;
            }
        };
        let new = crate::contents::host_file::host_file_name(ino, generation);
        if device.len(&new).map_err(io_failed)?.is_some() {
            // Cannot happen (the generation is above every orphan's); never replace a file.
            return Err(io_failed(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("adopting {old}: {new} exists"),
            )));
        }
        device.rename(&old, &new).map_err(io_failed)?;
        // Its bytes may still be in the page cache only (the daemon was killed): durable
        // before the checkpoint that sizes the file by them.
        device.sync(&new).map_err(io_failed)?;
        r.repairs.push(format!(
            "linked {} ({len} bytes), a host file whose file was lost with the journal's \
             changes, as /lost+found/{name}",
            ctx.file(&old).display()
        ));
    }
    Ok(())
}

/// The data folder: trims a crash cut off are redone, host files no file uses are removed,
/// long ones trimmed (as a mount does), and each file whose host file is short or missing is
/// truncated to what its host file holds (a missing one becomes an empty file in memory),
/// saying what was lost.
fn repair_data_folder(r: &mut Report, ctx: &Ctx<'_>, state: &mut State) -> Result<(), FsckError> {
    let done = tidy_data_folder(r, ctx, state)?;
    let now = crate::time::now_ns();
    let paths = state.paths_of(&done.damaged.iter().map(|(ino, ..)| *ino).collect());
    for (ino, size, len) in done.damaged {
        let file = super::phases::file_named(ino, &paths);
        let kept = len.unwrap_or(0);
        let truncate = Op::SetAttr {
            ino,
            mode: None,
            uid: None,
            gid: None,
            size_bytes: Some(kept),
            atime_ns: None,
            mtime_ns: None,
            ctime_ns: now,
            kill_suidgid: false,
        };
        let mut applied = state.apply(&truncate);
        if applied.is_ok() && len.is_none() {
            // No host file to write to: the (now empty) file lives in memory.
            applied = state.apply(&Op::Migrate {
                ino,
                tier: Tier::Memory,
                time_ns: now,
            });
        }
        match applied {
            Ok(()) => r.repairs.push(match len {
                Some(len) => format!(
                    "truncated {file} from {size} to {len} bytes, what its host file holds: \
                     bytes {len} to {size} are lost"
                ),
                None => format!(
                    "emptied {file}: its host file was missing, so its {size} bytes are lost"
                ),
            }),
            Err(e) => r
                .problems
                .push(format!("{file}: could not be truncated ({e})")),
        }
    }
    Ok(())
}

/// The benign part of the data folder's repair, as a mount does it: trims a crash cut off
/// redone, host files no file uses removed, long ones trimmed. Returns what it found.
pub(super) fn tidy_data_folder(
    r: &mut Report,
    ctx: &Ctx<'_>,
    state: &mut State,
) -> Result<crate::disk::HostFilesReport, FsckError> {
    let done = crate::disk::recover_host_files(ctx.device.as_ref(), state).map_err(|error| {
        FsckError::Write {
            store: ctx.path.to_path_buf(),
            error: crate::error::PersistError::new(
                crate::error::PersistStep::WriteCheckpoint,
                &error,
            ),
        }
    })?;
    if done.orphans_removed > 0 {
        r.repairs.push(format!(
            "removed {} host files no file uses from the data folder",
            done.orphans_removed
        ));
    }
    if done.trimmed > 0 {
        r.repairs.push(format!(
            "trimmed {} host files longer than their files",
            done.trimmed
        ));
    }
    if done.orphans_removed > 0 || done.trimmed > 0 {
        r.repaired = true;
    }
    Ok(done)
}

//! Persistence: the journal, checkpoints and recovery of the memory tier.

pub mod backup;
pub mod checkpoint;
pub mod codec;
pub mod device;
#[cfg(any(test, feature = "fuzzing"))]
pub mod format_checks;
pub mod freed_note;
pub mod header;
pub mod journal;
pub mod level;
pub mod persister;
pub mod policy;
pub mod recovery;

use std::sync::Arc;

use crate::engine::{Engine, EngineConfig, State};
use crate::error::StartError;
use device::Device;
use persister::{PersistConfig, Persister};
use recovery::Report;

/// Opens a store's file system: recovery, then a persister journaling every change. When
/// recovery changed the state beyond the journal (volatile files dropped, a fresh journal
/// after a checkpoint that got ahead of it), a checkpoint is written before anything else,
/// so that the journal never refers to a state it cannot rebuild; so it is when the backup
/// pair stood in for a damaged checkpoint, which it replaces.
pub fn open(
    device: Arc<dyn Device>,
    store_id: [u8; 16],
    engine_config: &EngineConfig,
    persist_config: PersistConfig,
) -> Result<(Arc<Engine>, Arc<Persister>, Report), StartError> {
    let (mut state, mut report) =
        recovery::recover(&*device, store_id, engine_config).map_err(StartError::Recovery)?;
    device
        .create_data_folder()
        .and_then(|()| probe_data_folder(device.as_ref()))
        .map_err(StartError::DataFolder)?;
    let freed_unlinks = drop_freed(&mut state, &report.freed_deleted);
    report.host_files = crate::disk::recover_host_files(device.as_ref(), &mut state)
        .map_err(StartError::DataFolder)?;
    let journal_version = journal_version(device.as_ref());
    let engine = Arc::new(Engine::from_state(state));
    let disk = crate::disk::DiskConfig {
        threshold_bytes: engine_config
            .large_file_threshold_bytes
            .unwrap_or(crate::limits::LARGE_FILE_THRESHOLD_BYTES_DEFAULT),
        evict_min_size_bytes: engine_config.evict_min_size_bytes,
    };
    engine.set_disk_tier(crate::disk::DiskTier::new(device.clone(), disk));
    let note_device = Arc::clone(&device);
    // A journal of an older version is replaced by the checkpoint's new one (this version)
    // before anything is appended to it: a version 1 journal has no disk-tier ops, and a
    // version 2 reader takes `GROUP_CONTINUES` for part of a count (decision 0103).
    let old_journal = journal_version.is_some_and(|v| v < journal::VERSION);
    let checkpoint_now = report.volatile_dropped > 0 || old_journal || report.backup_used.is_some();
    // After a recovery from the backup pair, the first checkpoint keeps the pair until it has
    // replaced the damaged checkpoint. Any other checkpoint made here holds changes no
    // journal has (dropped volatile files and `freed` inodes): it makes no pair (decision
    // 0123).
    let backup = if report.backup_used.is_some() {
        persister::Backup::KeepUntilReplaced
    } else if checkpoint_now {
        persister::Backup::Drop
    } else {
        persister::Backup::Rotate
    };
    let persister = Persister::start_with(
        device,
        store_id,
        report.next_seq,
        report.journal_valid_len,
        persist_config,
        backup,
    )
    .map_err(StartError::Journal)?;
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    if checkpoint_now {
        // Its image holds the state without the files of the `freed` note, and removes it.
        persister
            .checkpoint(&engine)
            .map_err(StartError::Checkpoint)?;
    } else if report.freed_note_damaged.is_none() {
        journal_freed_unlinks(note_device.as_ref(), &persister, &freed_unlinks);
    }
    Ok((engine, persister, report))
}

/// Removes from `state` the files of the `freed` note whose host files are gone (decision
/// 0119); returns their names, which the journal must still hear of.
fn drop_freed(state: &mut State, inos: &[crate::attr::Ino]) -> Vec<(crate::attr::Ino, Vec<u8>)> {
    let inos = inos.iter().copied().collect();
    let unlinks = state.names_of(&inos);
    state.drop_inodes(&inos);
    unlinks
}

/// Journals the unlinks of the files `drop_freed` removed, before anything else is
/// journaled (the durable state still has them, and their numbers may be reused), and makes
/// them durable; then the `freed` note has done its work, whether it matched any inode or
/// not, and is removed: kept, it would outlive its meaning (numbers and generations of
/// files never durable are handed out again, and a later durable file could match a stale
/// name). If the journal cannot take them (a full disk), persistence stops and the
/// checkpoint that restarts it holds the state without them; the note stays until then.
fn journal_freed_unlinks(
    device: &dyn Device,
    persister: &Persister,
    unlinks: &[(crate::attr::Ino, Vec<u8>)],
) {
    if unlinks.is_empty() {
        crate::persist::freed_note::remove_if_present(device);
        return;
    }
    let time_ns = crate::time::now_ns();
    for (parent, name) in unlinks {
        let op = crate::op::Op::Unlink {
            parent: *parent,
            name,
            time_ns,
        };
        crate::op::OpSink::applied(persister, &op, crate::attr::Durability::default());
    }
    match persister.sync() {
        Ok(()) => crate::persist::freed_note::remove_if_present(device),
        Err(e) => tracing::warn!(
            "journaling the deletions of files deleted while the disk was full: {e}; the \
             store's freed note keeps them deleted until a checkpoint succeeds"
        ),
    }
}

/// The format version of the store's journal, if it has one with a readable header.
fn journal_version(device: &dyn Device) -> Option<u32> {
    let mut head = [0u8; 12];
    match device.read_at(recovery::JOURNAL_FILE, 0, &mut head) {
        Ok(12) => Some(u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"))),
        _ => None,
    }
}

/// Checks that the data folder takes new files (a clear error at mount, rather than EIO at
/// the first migration).
fn probe_data_folder(device: &dyn Device) -> std::io::Result<()> {
    const PROBE: &str = "data/.probe";
    device.write(PROBE, b"")?;
    device.remove(PROBE)
}

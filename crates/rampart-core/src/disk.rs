//! The disk tier's engine side: where large files' host files are, the per-file locks that
//! order host-file I/O with the ops that describe it, the files open for FUSE passthrough, and
//! what recovery does to the data folder.
//!
//! The rules (docs/FORMAT.md, "The data folder"; decisions 0056, 0057, 0059):
//! - data before metadata: a write goes to the host file before `Op::WriteExtent` is applied,
//!   and the persister syncs the host file before it writes a batch holding that op
//!   (data=ordered), so a crash never leaves a size that covers bytes never written;
//! - journal first for trims: a shrinking truncate, PUNCH_HOLE and ZERO_RANGE are made durable
//!   before the host file shrinks or is punched, so a crash never loses fsync'd bytes the
//!   journal still claims; recovery redoes a trim the crash cut off (`redo_trims`);
//! - a host file is removed only once the op that dropped it (unlink, migration back) is
//!   durable; recovery removes host files no live inode names (`recover_host_files`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::attr::{Durability, Ino};
use crate::contents::host_file::{host_file_name, parse_host_file_name};
use crate::contents::Tier;
use crate::limits::{HOST_FILE_LOCK_STRIPES, LARGE_FILE_THRESHOLD_BYTES_DEFAULT};
use crate::lock_order::{self, Rank};
use crate::persist::device::Device;
use crate::state::State;

/// How the disk tier is set up for an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskConfig {
    /// A regular file larger than this moves to the disk tier; `u64::MAX`: never.
    pub threshold_bytes: u64,
    /// The smallest file memory pressure moves to the disk tier.
    pub evict_min_size_bytes: u64,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            threshold_bytes: LARGE_FILE_THRESHOLD_BYTES_DEFAULT,
            evict_min_size_bytes: crate::limits::EVICT_MIN_SIZE_BYTES_DEFAULT,
        }
    }
}

impl DiskConfig {
    /// The threshold a superblock's value (0: the default; `u64::MAX`: off) stands for.
    pub fn threshold_from_superblock(value: u64) -> u64 {
        if value == 0 {
            LARGE_FILE_THRESHOLD_BYTES_DEFAULT
        } else {
            value
        }
    }

    pub fn enabled(&self) -> bool {
        self.threshold_bytes != u64::MAX
    }
}

/// The disk tier of one engine: its device (the store's, whose `data/` names are host files)
/// and its settings.
pub struct DiskTier {
    pub(crate) device: Arc<dyn Device>,
    pub(crate) config: DiskConfig,
    locks: Box<[RwLock<()>]>,
    /// Passthrough opens per inode (`Engine::passthrough_opened`): while any is open the file
    /// stays on the disk tier, and the committer syncs it within the commit interval.
    passthrough: Mutex<HashMap<Ino, u32>>,
    /// Descriptors handed out for passthrough, per inode (dropped when the host file goes).
    files: Mutex<HashMap<Ino, Arc<std::fs::File>>>,
    /// Trims applied (their ops in the state) whose host files are not trimmed and synced
    /// yet: (host file, (offset, len)). An entry lives while its thread holds the file's
    /// exclusive host lock, so no write reaches the range meanwhile and a checkpoint may
    /// punch it (`finish_trims`). At most one per thread trimming.
    trims: Mutex<Vec<(String, (u64, u64))>>,
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A host-file lock, shared (writes and reads of the file's bytes) or exclusive (trims,
/// migrations), with its place in the lock order: taken before the engine's state lock.
#[allow(dead_code)] // the fields are held for their `Drop`: the lock, then the rank
pub(crate) enum HostGuard<'a> {
    Shared(RwLockReadGuard<'a, ()>, lock_order::Held),
    Exclusive(RwLockWriteGuard<'a, ()>, lock_order::Held),
}

thread_local! {
    /// Host-file locks this thread holds (`host_locks_held`).
    static HOST_LOCKS_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether this thread holds a host-file lock: removing a host file takes one, so a thread
/// that holds one leaves removals to the committer.
pub(crate) fn host_locks_held() -> bool {
    HOST_LOCKS_HELD.with(|n| n.get() > 0)
}

impl Drop for HostGuard<'_> {
    fn drop(&mut self) {
        HOST_LOCKS_HELD.with(|n| n.set(n.get() - 1));
    }
}

impl DiskTier {
    pub fn new(device: Arc<dyn Device>, config: DiskConfig) -> DiskTier {
        DiskTier {
            device,
            config,
            locks: (0..HOST_FILE_LOCK_STRIPES)
                .map(|_| RwLock::new(()))
                .collect(),
            passthrough: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            trims: Mutex::new(Vec::new()),
        }
    }

    /// A trim of `name` was applied (under the engine's lock, its exclusive host lock held).
    pub(crate) fn trim_pending(&self, name: &str, range: (u64, u64)) {
        self.trims.lock().push((name.to_owned(), range));
    }

    /// The trims of `name` are done (trimmed and synced, or given up), and the host lock is
    /// about to be released.
    pub(crate) fn trim_done(&self, name: &str) {
        self.trims.lock().retain(|(n, _)| n != name);
    }

    pub(crate) fn pending_trims(&self) -> Vec<(String, (u64, u64))> {
        self.trims.lock().clone()
    }

    /// A checkpoint's image holds the trims of `snapshot`: those still pending (their
    /// threads still hold the host locks, so no write raced them) are punched and synced now,
    /// under the registry's lock, before the image is written. Punching twice is harmless.
    /// `sync_failed` hears of a host file whose sync failed (decision 0126).
    pub(crate) fn finish_trims(
        &self,
        snapshot: &[(String, (u64, u64))],
        sync_failed: &dyn Fn(&str),
    ) -> std::io::Result<()> {
        if snapshot.is_empty() {
            return Ok(());
        }
        let trims = self.trims.lock();
        let mut synced = HashSet::new();
        for entry in snapshot {
            if !trims.contains(entry) {
                continue;
            }
            let (name, (offset, len)) = entry;
            if let Some(host_len) = self.device.len(name)? {
                if *offset < host_len {
                    self.device
                        .punch_hole(name, *offset, (*len).min(host_len - offset))?;
                }
                if synced.insert(name.clone()) {
                    self.device.sync(name).inspect_err(|_| sync_failed(name))?;
                }
            }
        }
        Ok(())
    }

    fn stripe(&self, ino: Ino) -> &RwLock<()> {
        &self.locks[(ino as usize) % self.locks.len()]
    }

    /// The shared host-file lock of `ino` (reads, and writes of its bytes).
    pub(crate) fn shared(&self, ino: Ino) -> HostGuard<'_> {
        let held = lock_order::acquire(Rank::HostFile);
        let guard = HostGuard::Shared(self.stripe(ino).read(), held);
        HOST_LOCKS_HELD.with(|n| n.set(n.get() + 1));
        guard
    }

    /// The exclusive host-file lock of `ino` (trims, migrations, size changes).
    pub(crate) fn exclusive(&self, ino: Ino) -> HostGuard<'_> {
        let held = lock_order::acquire(Rank::HostFile);
        let guard = HostGuard::Exclusive(self.stripe(ino).write(), held);
        HOST_LOCKS_HELD.with(|n| n.set(n.get() + 1));
        guard
    }

    /// Whether a file of `size_bytes` belongs on the disk tier.
    pub fn passes_threshold(&self, size_bytes: u64) -> bool {
        self.config.enabled() && size_bytes > self.config.threshold_bytes
    }

    /// Whether a disk-tier file of `size_bytes` may come back to memory (hysteresis: a
    /// quarter of the threshold, decision 0059).
    pub fn below_return_size(&self, size_bytes: u64) -> bool {
        !self.config.enabled() || size_bytes < self.config.threshold_bytes / 4
    }

    pub(crate) fn passthrough_count(&self, ino: Ino) -> u32 {
        self.passthrough.lock().get(&ino).copied().unwrap_or(0)
    }

    pub(crate) fn passthrough_add(&self, ino: Ino) {
        *self.passthrough.lock().entry(ino).or_insert(0) += 1;
    }

    /// One passthrough open closed; true if it was the last.
    pub(crate) fn passthrough_remove(&self, ino: Ino) -> bool {
        let mut map = self.passthrough.lock();
        match map.get_mut(&ino) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                map.remove(&ino);
                true
            }
            None => true,
        }
    }

    /// The inodes open for passthrough now.
    pub(crate) fn passthrough_inodes(&self) -> Vec<Ino> {
        self.passthrough.lock().keys().copied().collect()
    }

    /// The descriptor of `ino`'s host file `name` for passthrough (opened once, shared);
    /// None if the device has no host files (a simulated one).
    pub(crate) fn file(&self, ino: Ino, name: &str) -> std::io::Result<Option<Arc<std::fs::File>>> {
        if let Some(file) = self.files.lock().get(&ino) {
            return Ok(Some(Arc::clone(file)));
        }
        let Some(file) = self.device.file_for_passthrough(name)? else {
            return Ok(None);
        };
        let file = Arc::new(file);
        self.files.lock().insert(ino, Arc::clone(&file));
        Ok(Some(file))
    }

    /// Forgets the descriptor of `ino` (its host file is going away).
    pub(crate) fn forget_file(&self, ino: Ino) {
        self.files.lock().remove(&ino);
    }
}

/// Whether a file may move to the disk tier: durable (a volatile file's data is never
/// synced, and stays in memory: decision 0059) and named (an unlinked or unnamed file is
/// never journaled).
pub(crate) fn may_migrate(durability: Durability, nlink: u32) -> bool {
    durability != Durability::Volatile && nlink > 0
}

/// What recovery found in the data folder and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFilesReport {
    /// Disk-tier files, and the bytes their sizes cover.
    pub files: u64,
    pub bytes: u64,
    /// Host files no live inode names (a crash between an unlink and the removal, a
    /// volatile or never-committed file): removed.
    pub orphans_removed: u64,
    /// Host files longer than their inode (a write whose op never committed): trimmed.
    pub trimmed: u64,
    /// Trims (truncate, punch) a crash cut off, done again.
    pub trims_redone: u64,
    /// Disk-tier files whose host file is missing or shorter than the size: their bytes past
    /// the host file's end read as EIO until `rampart fsck --repair`. (inode, size, host
    /// length or None if missing).
    pub damaged: Vec<(Ino, u64, Option<u64>)>,
}

/// What the data folder holds against a state (read only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFilesScan {
    /// Disk-tier files (named ones), and the bytes their sizes cover.
    pub files: u64,
    pub bytes: u64,
    /// Host files no live disk-tier inode names.
    pub orphans: Vec<String>,
    /// Entries whose names rampart does not make (someone else's): left alone.
    pub foreign: Vec<String>,
    /// Host files longer than their file: (name, host length, size).
    pub long: Vec<(String, u64, u64)>,
    /// Disk-tier files whose host file is missing (None) or shorter than the size:
    /// (inode, host file, size, host length).
    pub damaged: Vec<(Ino, String, u64, Option<u64>)>,
}

/// Compares the data folder with the disk-tier files of `state`, changing nothing.
pub fn scan_host_files(device: &dyn Device, state: &State) -> std::io::Result<HostFilesScan> {
    let live: HashMap<String, (Ino, u64)> = live_host_files(state);
    let mut scan = HostFilesScan {
        files: live.len() as u64,
        bytes: live.values().map(|(_, size)| size).sum(),
        ..HostFilesScan::default()
    };
    let mut present = HashSet::new();
    for name in device.list_data()? {
        match live.get(&name) {
            None if parse_host_file_name(&name).is_none() => scan.foreign.push(name),
            None => scan.orphans.push(name),
            Some(&(ino, size)) => {
                present.insert(name.clone());
                let len = device.len(&name)?.unwrap_or(0);
                if len > size {
                    scan.long.push((name, len, size));
                } else if len < size {
                    scan.damaged.push((ino, name, size, Some(len)));
                }
            }
        }
    }
    for (name, &(ino, size)) in &live {
        if !present.contains(name) {
            scan.damaged.push((ino, name.clone(), size, None));
        }
    }
    scan.orphans.sort_unstable();
    scan.foreign.sort_unstable();
    scan.long.sort_unstable();
    scan.damaged.sort_unstable();
    Ok(scan)
}

/// The host files the named disk-tier inodes of `state` use, with their inode and size.
fn live_host_files(state: &State) -> HashMap<String, (Ino, u64)> {
    state
        .inodes()
        .filter(|(_, i)| i.nlink > 0 && i.file().map(|f| f.tier()) == Some(Tier::Disk))
        .map(|(ino, i)| (host_file_name(ino, i.generation), (ino, i.size_bytes)))
        .collect()
}

/// Recovery's pass over the data folder, after the state is rebuilt: redoes the trims the
/// crash cut off, removes host files of no live inode, trims host files longer than their
/// inode and reports those that are missing or short. Every change is synced.
pub fn recover_host_files(
    device: &dyn Device,
    state: &mut State,
) -> std::io::Result<HostFilesReport> {
    // Replay's freed files are among the orphans below.
    state.freed_host_files.clear();
    let live = live_host_files(state);
    let trims_redone = redo_trims(device, state, &live)?;
    let scan = scan_host_files(device, state)?;
    let mut report = HostFilesReport {
        files: scan.files,
        bytes: scan.bytes,
        trims_redone,
        ..HostFilesReport::default()
    };
    for name in &scan.foreign {
        // Not ours to delete: a file (or folder) someone put in the store's data folder.
        tracing::warn!(
            "recovery: leaving {name} alone: not a name rampart makes (move it out of the \
             store's data folder)"
        );
    }
    for name in &scan.orphans {
        tracing::info!("recovery: removing {name}: no live file of the disk tier uses it");
        match device.remove(name) {
            Ok(()) => report.orphans_removed += 1,
            // A folder with a host file's name: not ours, and no reason to refuse the mount.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EISDIR | libc::ENOTEMPTY)) => {
                tracing::warn!("recovery: leaving {name} alone: {e}");
            }
            Err(e) => return Err(e),
        }
    }
    for (name, _, size) in &scan.long {
        device.set_len(name, *size)?;
        device.sync(name)?;
        report.trimmed += 1;
    }
    let paths = state.paths_of(&scan.damaged.iter().map(|(ino, ..)| *ino).collect());
    for (ino, name, size, len) in &scan.damaged {
        let path = paths.get(ino).map_or("", String::as_str);
        match len {
            Some(len) => tracing::error!(
                "recovery: the host file {name} of {path} (inode {ino}) holds {len} bytes, \
                 less than the file's size {size}: reads past byte {len} fail with EIO; \
                 `rampart fsck --repair` truncates the file to what it holds"
            ),
            None => tracing::error!(
                "recovery: the host file {name} of {path} (inode {ino}, {size} bytes) is \
                 missing: its reads fail with EIO; `rampart fsck --repair` empties the file"
            ),
        }
        report.damaged.push((*ino, *size, *len));
    }
    Ok(report)
}

/// Redoes the trims replay noted (`State::host_redo`) on the host files of live disk-tier
/// inodes: punching is idempotent, and no later write of the same file committed (that would
/// have cleared them). Returns how many files were trimmed again.
fn redo_trims(
    device: &dyn Device,
    state: &mut State,
    live: &HashMap<String, (Ino, u64)>,
) -> std::io::Result<u64> {
    let redo = std::mem::take(&mut state.host_redo);
    let by_ino: HashMap<Ino, &str> = live
        .iter()
        .map(|(name, (ino, _))| (*ino, name.as_str()))
        .collect();
    let mut redone = 0;
    for (ino, trims) in redo {
        let Some(name) = by_ino.get(&ino) else {
            continue;
        };
        let Some(len) = device.len(name)? else {
            continue;
        };
        for (offset, span) in trims {
            if offset < len {
                device.punch_hole(name, offset, span.min(len - offset))?;
            }
        }
        device.sync(name)?;
        redone += 1;
    }
    Ok(redone)
}

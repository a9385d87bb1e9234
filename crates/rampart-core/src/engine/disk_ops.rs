//! The engine's operations on the disk tier (`crate::disk`): reads and writes of host files,
//! migration between the tiers, trims, and the API the FUSE adapter uses for passthrough.
//!
//! Locking (docs/decisions/0059): host-file I/O of writes to a disk-tier file happens under
//! the file's shared host lock *before* the engine's exclusive lock is taken, which is then
//! held only to apply the `WriteExtent`. Trims hold the file's exclusive host lock across
//! the op, its commit and the trim. A migration to the disk copies the file's memory bytes
//! (at most the threshold plus one write, or an evicted file) into its new host file while
//! holding the exclusive state lock: the copy goes to the page cache, and holding the lock
//! keeps the copy and the `Migrate` op one atomic step that no other op can interleave.

use std::sync::Arc;

use super::file_ops::write_keeping_times;
use super::{Ctx, Engine, Invalidation, Mutation, WriteTimes};
use crate::attr::Ino;
use crate::contents::host_file::{host_file_name, parse_host_file_name};
use crate::contents::{Contents, Tier};
use crate::disk::{may_migrate, DiskTier};
use crate::error::{Errno, FsResult};
use crate::limits::{CHUNK_BYTES, MIGRATION_PIECE_BYTES};
use crate::op::Op;
use crate::persist::level::Levels;
use crate::state::State;
use crate::time::TimeNs;

/// An I/O error of a host file as the program sees it: ENOSPC stays, the rest is EIO (and a
/// log line: nothing else is lost).
pub(crate) fn host_errno(what: &str, name: &str, e: &std::io::Error) -> Errno {
    if e.raw_os_error() == Some(libc::ENOSPC) || e.kind() == std::io::ErrorKind::StorageFull {
        tracing::warn!("{what} {name}: the disk under the store is full");
        return Errno::ENOSPC;
    }
    tracing::error!("{what} {name}: {e}");
    Errno::EIO
}

/// Allocates `offset..offset + length` of the host file `name` (fallocate mode 0, or
/// KEEP_SIZE): ENOSPC if the host file system has not the room. A host file system without
/// fallocate: the file grows as a hole if it must (`grows`), and nothing is reserved. A
/// failure puts the host file back to `host_len`, which also frees what a failed fallocate
/// may have taken past it.
fn reserve_host_room(
    disk: &DiskTier,
    name: &str,
    offset: u64,
    length: u64,
    keep_size: bool,
    grows: bool,
    host_len: Option<u64>,
) -> FsResult<()> {
    let reserved = if keep_size {
        disk.device.allocate_keep_size(name, offset, length)
    } else {
        disk.device.allocate(name, offset, length)
    };
    let result = match reserved {
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => match grows {
            true => disk.device.set_len(name, offset + length),
            false => Ok(()),
        },
        other => other,
    };
    result.map_err(|e| {
        if let Some(len) = host_len {
            let _ = disk.device.set_len(name, len);
        }
        host_errno("allocating room for the disk-tier file", name, &e)
    })
}

/// What a trim after a commit does to a host file: cut it to the size (a truncate), or punch a
/// range (PUNCH_HOLE, ZERO_RANGE), which is done even when the op cannot be made durable.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trim {
    Cut,
    Punch,
}

/// A disk-tier file as an op on it needs it: its host file's name and its size.
struct OnDisk {
    name: String,
    size_bytes: u64,
}

impl Engine {
    /// Attaches the disk tier (the store's device and settings). Once only: later calls
    /// change nothing.
    pub fn set_disk_tier(&self, disk: DiskTier) {
        let _ = self.disk.set(Arc::new(disk));
    }

    /// The disk tier, if attached (a store's engine). With a threshold of "off" it still
    /// serves the files already on it; nothing new moves there.
    pub(crate) fn disk(&self) -> Option<&Arc<DiskTier>> {
        self.disk.get()
    }

    /// Says whether the FUSE adapter serves disk-tier files through FUSE passthrough (the
    /// kernel accepted it) or from the daemon; `rampart status` shows it.
    pub fn set_passthrough_available(&self, available: bool) {
        self.passthrough_available
            .store(available, std::sync::atomic::Ordering::Release);
    }

    /// How reads and writes of open disk-tier files travel: "passthrough" (the kernel goes to
    /// the host file) or "daemon" (each request through the engine).
    pub fn data_path(&self) -> &'static str {
        if self
            .passthrough_available
            .load(std::sync::atomic::Ordering::Acquire)
        {
            "passthrough"
        } else {
            "daemon"
        }
    }

    /// The disk tier's settings (None: no store, so no disk tier).
    pub fn disk_config(&self) -> Option<crate::disk::DiskConfig> {
        self.disk().map(|d| d.config)
    }

    /// The host file and size of `ino` if it is a disk-tier file (ENOENT, EISDIR, EINVAL as
    /// for any regular-file op).
    fn on_disk(&self, ino: Ino) -> FsResult<Option<OnDisk>> {
        let state = self.read_state();
        let inode = state.regular_file(ino)?;
        Ok(match inode.file().map(Contents::tier) {
            Some(Tier::Disk) => Some(OnDisk {
                name: host_file_name(ino, inode.generation),
                size_bytes: inode.size_bytes,
            }),
            _ => None,
        })
    }

    /// Host files of freed inodes (under the engine's lock): removed after the next commit,
    /// or now if no level keeps such a list.
    /// `state` is the engine's, locked: a host file removed now leaves its
    /// `replaced_host_files` entry.
    pub(crate) fn host_files_freed(&self, state: &mut State, names: &[String]) {
        let levels = self.levels.read().clone();
        for name in names {
            if let Some((ino, _)) = parse_host_file_name(name) {
                if !self.host_file_gone(&levels, ino, name) {
                    state.replaced_host_files.remove(name);
                }
            }
        }
    }

    /// `name`, the host file of `ino`, is no longer needed once the ops so far are durable.
    /// False if it was removed now (no level keeps such a list).
    pub(crate) fn host_file_gone(&self, levels: &Levels, ino: Ino, name: &str) -> bool {
        let Some(disk) = self.disk.get() else {
            return false;
        };
        disk.forget_file(ino);
        if levels.remove_after_commit(name) {
            return true;
        }
        if let Err(e) = disk.device.remove(name) {
            tracing::warn!("removing the disk-tier file {name}: {e}");
        }
        false
    }

    /// Removes the host file `name` whose removal is durable, unless its inode (the same
    /// number and generation) is on the disk tier again: it took the file back (a file moved
    /// to memory and out again). Under the file's exclusive host lock, so that no migration
    /// runs meanwhile. Called by the persister with no lock held.
    pub fn remove_host_file_if_unused(&self, name: &str) -> std::io::Result<()> {
        let Some(disk) = self.disk() else {
            return Ok(());
        };
        let Some((ino, generation)) = parse_host_file_name(name) else {
            return disk.device.remove(name);
        };
        let _host = disk.exclusive(ino);
        let in_use = {
            let mut state = self.write_state();
            let in_use = state.inode(ino).is_ok_and(|i| {
                i.generation == generation && i.file().map(Contents::tier) == Some(Tier::Disk)
            });
            if !in_use {
                state.replaced_host_files.remove(name);
            }
            in_use
        };
        if in_use {
            return Ok(());
        }
        disk.forget_file(ino);
        disk.device.remove(name)
    }

    /// Reads of a disk-tier file into `out`. With `cached_only`, only from the host's page
    /// cache: `WouldWait` where the disk would have to be read.
    pub(crate) fn read_disk(
        &self,
        disk: &DiskTier,
        ino: Ino,
        offset: u64,
        size: u32,
        out: &mut Vec<u8>,
        cached_only: bool,
    ) -> FsResult<DiskRead> {
        let _host = disk.shared(ino);
        let Some(file) = self.on_disk(ino)? else {
            return Ok(DiskRead::NotOnDisk);
        };
        out.clear();
        let want = file.size_bytes.saturating_sub(offset).min(u64::from(size)) as usize;
        out.resize(want, 0);
        if cached_only && want > 0 {
            match disk.device.read_at_cached(&file.name, offset, out) {
                Ok(Some(n)) if n == want => {
                    self.touch_atime(ino);
                    return Ok(DiskRead::Done);
                }
                // Some bytes are not in memory (or the host file is short: `read_at` says).
                Ok(_) => {
                    out.clear();
                    return Ok(DiskRead::WouldWait);
                }
                Err(e) => {
                    out.clear();
                    return Err(host_errno("reading the disk-tier file", &file.name, &e));
                }
            }
        }
        let mut filled = 0;
        while filled < want {
            match disk
                .device
                .read_at(&file.name, offset + filled as u64, &mut out[filled..])
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    out.clear();
                    return Err(host_errno("reading the disk-tier file", &file.name, &e));
                }
            }
        }
        if filled < want {
            out.clear();
            tracing::error!(
                "reading {}: the host file ends at byte {}, before the file's size {} \
                 (changed behind rampart?); `rampart fsck` reports it",
                file.name,
                offset + filled as u64,
                file.size_bytes
            );
            return Err(Errno::EIO);
        }
        self.touch_atime(ino);
        Ok(DiskRead::Done)
    }

    /// relatime, as `read` does for memory files.
    fn touch_atime(&self, ino: Ino) {
        let state = self.read_state();
        if let Ok(inode) = state.inode(ino) {
            let atime = inode.atime();
            let now = self.now_ns();
            if atime <= inode.mtime_ns
                || atime <= inode.ctime_ns
                || now - atime > crate::limits::RELATIME_INTERVAL_NS
            {
                inode.set_atime(now);
            }
        }
    }

    /// A write to a disk-tier file: the bytes go to the host file under the file's shared
    /// host lock, then `WriteExtent` is applied. `None` if `ino` is not on the disk tier.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_disk(
        &self,
        disk: &DiskTier,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
        times: WriteTimes,
    ) -> FsResult<Option<u32>> {
        let _host = disk.shared(ino);
        let Some(file) = self.on_disk(ino)? else {
            return Ok(None);
        };
        // Refused before the host file is touched: the op would refuse it after.
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > crate::limits::FILE_SIZE_BYTES_MAX {
            return Err(Errno::EFBIG);
        }
        debug_assert!(file.size_bytes <= crate::limits::FILE_SIZE_BYTES_MAX);
        write_host_file(disk, &file.name, offset, data)?;
        self.mutate(
            ctx,
            |m, time_ns| {
                write_keeping_times(m, ino, times, kill_suidgid, |m| {
                    apply_write_extent(m, ino, offset, data.len(), time_ns, kill_suidgid)
                })
            },
            |_| vec![Invalidation::Inode { ino }],
        )
    }

    /// Before memory file `ino` moves to the disk tier (the caller holds its exclusive host
    /// lock and no state lock): if its host file is still there, the file came back to memory
    /// and the removal waits for that `Migrate` to be durable. `migrate_to_disk` rewrites the
    /// host file from its start, while the journal may still say the file is on the disk tier
    /// with that host file's bytes: a crash then would leave an fsync'd file cut short. So the
    /// move back is made durable first (it is rare: a file cut below a quarter of the
    /// threshold that grows past it again before the next commit). False if that sync failed:
    /// the file stays in memory.
    pub(super) fn host_file_free_for_reuse(&self, disk: &DiskTier, ino: Ino) -> bool {
        let name = {
            let state = self.read_state();
            match state.regular_file(ino) {
                Ok(i) if i.file().map(Contents::tier) == Some(Tier::Memory) => {
                    host_file_name(ino, i.generation)
                }
                _ => return true,
            }
        };
        if let Ok(None) = disk.device.len(&name) {
            return true;
        }
        match self.sync() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("{name}: stays in memory, its move back is not durable ({e})");
                false
            }
        }
    }

    /// Moves memory file `ino` to the disk tier inside mutation `m` (its exclusive host lock
    /// is held by the caller): its bytes are copied to a new host file, then `Migrate` is
    /// applied (the persister syncs the host file before the record). A host-file error
    /// (ENOSPC, EIO) leaves the file in memory and is logged: Ok(false).
    pub(crate) fn migrate_to_disk(
        &self,
        disk: &DiskTier,
        m: &mut Mutation<'_>,
        ino: Ino,
        time_ns: TimeNs,
    ) -> FsResult<bool> {
        let state = m.state();
        let inode = state.regular_file(ino)?;
        let Some(data) = inode.file().and_then(Contents::memory) else {
            return Ok(true); // already there
        };
        if !may_migrate(inode.durability(), inode.nlink) {
            return Ok(false);
        }
        let name = host_file_name(ino, inode.generation);
        let size_bytes = inode.size_bytes;
        let copied = (|| {
            disk.device.write(&name, &[])?;
            for (index, bytes) in data.chunks() {
                disk.device
                    .write_at_sparse(&name, (index * CHUNK_BYTES) as u64, bytes)?;
            }
            disk.device.set_len(&name, size_bytes)
        })();
        if let Err(e) = copied {
            tracing::warn!(
                "moving inode {ino} ({size_bytes} bytes) to the disk tier failed: {e}; it \
                 stays in memory"
            );
            let _ = disk.device.remove(&name);
            return Ok(false);
        }
        m.apply(&Op::Migrate {
            ino,
            tier: Tier::Disk,
            time_ns,
        })?;
        Ok(true)
    }

    /// A write to a memory file that takes it past the threshold: the file moves to the disk
    /// tier first, then the write goes to its host file; all under the exclusive host lock
    /// and one mutation. `None` if it should not move (the caller writes it in memory).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_migrating(
        &self,
        disk: &DiskTier,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
        times: WriteTimes,
    ) -> FsResult<Option<u32>> {
        let _host = disk.exclusive(ino);
        if !self.host_file_free_for_reuse(disk, ino) {
            return Ok(None);
        }
        self.mutate(
            ctx,
            |m, time_ns| {
                let inode = m.state().regular_file(ino)?;
                if inode.file().map(Contents::tier) == Some(Tier::Disk) {
                    return Ok(None); // moved meanwhile: the caller retries
                }
                let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
                if end > crate::limits::FILE_SIZE_BYTES_MAX {
                    return Err(Errno::EFBIG);
                }
                if !disk.passes_threshold(end.max(inode.size_bytes))
                    || !may_migrate(inode.durability(), inode.nlink)
                {
                    return Ok(None);
                }
                write_keeping_times(m, ino, times, kill_suidgid, |m| {
                    if !self.migrate_to_disk(disk, m, ino, time_ns)? {
                        return Ok(None);
                    }
                    let name = host_file_name(ino, m.state().inode(ino)?.generation);
                    write_host_file(disk, &name, offset, data)?;
                    apply_write_extent(m, ino, offset, data.len(), time_ns, kill_suidgid)
                })
            },
            |_| vec![Invalidation::Inode { ino }],
        )
    }

    /// A size change of a file while the disk tier is on. Growth: the host file grows first,
    /// then the op (a memory file growing past the threshold moves first). Shrink of a
    /// disk-tier file: the op is made durable first, then the host file is trimmed; below a
    /// quarter of the threshold the file then comes back to memory. `None`: not a case for
    /// the disk tier (the caller applies the op as for memory).
    pub(crate) fn setattr_disk(
        &self,
        disk: &DiskTier,
        ctx: &Ctx,
        ino: Ino,
        op: &Op<'_>,
        size: u64,
    ) -> FsResult<Option<crate::attr::Attr>> {
        let _host = disk.exclusive(ino);
        let file = self.on_disk(ino)?;
        let apply = |m: &mut Mutation<'_>, _: TimeNs| -> FsResult<crate::attr::Attr> {
            m.apply(op)?;
            Ok(m.state().inode(ino)?.attr(ino))
        };
        let invalidate = |_: &crate::attr::Attr| vec![Invalidation::Inode { ino }];
        let Some(file) = file else {
            if !disk.passes_threshold(size) || !self.host_file_free_for_reuse(disk, ino) {
                return Ok(None);
            }
            return self
                .mutate(
                    ctx,
                    |m, time_ns| {
                        if !self.migrate_to_disk(disk, m, ino, time_ns)? {
                            return apply(m, time_ns).map(|a| (a, false));
                        }
                        let name = host_file_name(ino, m.state().inode(ino)?.generation);
                        disk.device
                            .set_len(&name, size)
                            .map_err(|e| host_errno("growing the disk-tier file", &name, &e))?;
                        apply(m, time_ns).map(|a| (a, true))
                    },
                    |(a, _)| invalidate(a),
                )
                .map(|(a, _)| Some(a));
        };
        if size >= file.size_bytes {
            if size > file.size_bytes {
                self.trim_outstanding(disk, &file.name, file.size_bytes)?;
                disk.device
                    .set_len(&file.name, size)
                    .map_err(|e| host_errno("growing the disk-tier file", &file.name, &e))?;
            }
            return self.mutate(ctx, apply, invalidate).map(Some);
        }
        let trim = (size, u64::MAX - size);
        let attr = self.mutate(
            ctx,
            |m, t| {
                let attr = apply(m, t)?;
                disk.trim_pending(&file.name, trim);
                Ok(attr)
            },
            invalidate,
        )?;
        self.trim_after_commit(disk, &file.name, Trim::Cut, |device| {
            device.set_len(&file.name, size)
        });
        if disk.below_return_size(size) && disk.passthrough_count(ino) == 0 {
            self.migrate_to_memory(disk, ctx, ino)?;
            self.remove_host_file_after_return(disk, ino, &file.name);
        }
        Ok(Some(attr))
    }

    /// A file just moved back to memory gives its host file back at once (the space, and
    /// `data/` holding only disk-tier files): once the move is durable — before, the journal
    /// may still name the host file's bytes — and only if the file is still in memory. The
    /// caller holds the file's exclusive host lock, so no move out runs meanwhile; the sync
    /// takes no engine lock (as a trim's). If the move cannot be made durable now the host
    /// file stays until the file moves out again (it is then reused) or the next mount.
    fn remove_host_file_after_return(&self, disk: &DiskTier, ino: Ino, name: &str) {
        let in_memory = self.read_state().regular_file(ino).is_ok_and(|i| {
            i.file().map(Contents::tier) == Some(Tier::Memory)
                && host_file_name(ino, i.generation) == name
        });
        if !in_memory {
            return;
        }
        if let Err(e) = self.sync() {
            tracing::warn!(
                "{name}: kept, the move of its file back to memory is not durable ({e})"
            );
            return;
        }
        disk.forget_file(ino);
        match disk.device.remove(name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("{name}: kept after its file moved back to memory ({e})"),
        }
    }

    /// Before a disk-tier file grows: a host file longer than the file's `size_bytes` holds a
    /// shrink whose trim waited (its op was not durable, `trim_after_commit`), and the bytes
    /// past the size are the old ones, which the grown range must not show (decision 0146).
    /// The shrink is made durable and the trim done first; if it cannot be, the growth is
    /// refused (ENOSPC or EIO): cutting the host file then would lose bytes the durable state
    /// still has. The caller holds the file's exclusive host lock.
    fn trim_outstanding(&self, disk: &DiskTier, name: &str, size_bytes: u64) -> FsResult<()> {
        let host_len = disk
            .device
            .len(name)
            .map_err(|e| host_errno("reading the length of the disk-tier file", name, &e))?;
        if host_len.is_none_or(|len| len <= size_bytes) {
            return Ok(());
        }
        self.sync().map_err(|e| {
            tracing::error!("{name} cannot grow: its earlier shrink is not durable ({e})");
            // A full store says so (ENOSPC, as fsync does); other failures are EIO.
            if e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(libc::ENOSPC)
            {
                Errno::ENOSPC
            } else {
                Errno::EIO
            }
        })?;
        disk.device
            .set_len(name, size_bytes)
            .map_err(|e| host_errno("trimming the disk-tier file", name, &e))
    }

    /// Journal first: makes the op just applied durable, then trims the host file (the
    /// caller holds the file's exclusive host lock). If the op cannot be made durable the
    /// trim waits for recovery (which redoes it from the journal, or finds the file longer
    /// and trims it); the space comes back then. But a punched range (`Trim::Punch`) is
    /// punched anyway: the file reads zeros there from now on, and until then it would read
    /// the old bytes, for the rest of the mount on a full disk; after a crash the range
    /// reads zeros, as the punch that returned success asked, and the size is the durable
    /// one (decision 0147).
    fn trim_after_commit(
        &self,
        disk: &DiskTier,
        name: &str,
        kind: Trim,
        trim: impl FnOnce(&dyn crate::persist::device::Device) -> std::io::Result<()>,
    ) {
        let committed = self.sync();
        match committed {
            Err(e) if kind == Trim::Punch => {
                tracing::error!(
                    "a hole punched in {name} could not be made durable ({e}); punched now, so \
                     that the file reads zeros there"
                );
                if let Err(e) = trim(disk.device.as_ref()) {
                    tracing::error!("punching the disk-tier file {name}: {e}");
                }
            }
            Err(e) => {
                tracing::error!("a trim of {name} waits: its op could not be made durable ({e})")
            }
            // Synced at once: a checkpoint taken since holds the trim, and recovery would not
            // redo it from the journal (`DiskTier::trim_pending`).
            Ok(()) => {
                if let Err(e) = trim(disk.device.as_ref()) {
                    tracing::error!(
                        "trimming the disk-tier file {name}: {e}; the next mount does it"
                    );
                } else if let Err(e) = disk.device.sync(name) {
                    tracing::error!("syncing the disk-tier file {name} after a trim: {e}");
                    // The file's next fsync must hear of it (decision 0126).
                    self.levels().host_sync_failed(name);
                }
            }
        }
        disk.trim_done(name);
    }

    /// Brings a small disk-tier file back to memory (decision 0059): `Migrate` to memory, then
    /// its bytes as writes (holes stay holes) and its times as they were; the host file is
    /// removed once that is durable. Skipped (Ok) when memory is short or the file carries a
    /// capability (which a write would drop). The caller holds the exclusive host lock.
    fn migrate_to_memory(&self, disk: &DiskTier, ctx: &Ctx, ino: Ino) -> FsResult<()> {
        let Some(file) = self.on_disk(ino)? else {
            return Ok(());
        };
        let mut bytes = vec![0u8; file.size_bytes as usize];
        let mut filled = 0;
        while filled < bytes.len() {
            match disk
                .device
                .read_at(&file.name, filled as u64, &mut bytes[filled..])
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!("{}: stays on the disk tier ({e})", file.name);
                    return Ok(());
                }
            }
        }
        if filled < bytes.len() {
            return Ok(()); // short: fsck's to judge; the file stays where it is
        }
        self.mutate(
            ctx,
            |m, time_ns| {
                let inode = m.state().regular_file(ino)?;
                let (mtime, ctime) = (inode.mtime_ns, inode.ctime_ns);
                let capability = inode
                    .xattrs
                    .as_ref()
                    .is_some_and(|x| x.get(crate::state::CAPABILITY_XATTR).is_some());
                let pieces: Vec<(usize, &[u8])> = bytes
                    .chunks(CHUNK_BYTES)
                    .enumerate()
                    .filter(|(_, c)| c.iter().any(|&b| b != 0))
                    .collect();
                let need: u64 = pieces.len() as u64 * (CHUNK_BYTES as u64 + 64);
                if capability || m.state().budget.free_bytes() < need.saturating_mul(2) {
                    return Ok(());
                }
                m.apply(&Op::Migrate {
                    ino,
                    tier: Tier::Memory,
                    time_ns,
                })?;
                for (index, piece) in pieces {
                    m.apply(&Op::Write {
                        ino,
                        offset: (index * CHUNK_BYTES) as u64,
                        data: piece,
                        time_ns,
                        kill_suidgid: false,
                    })?;
                }
                m.apply(&Op::SetAttr {
                    ino,
                    mode: None,
                    uid: None,
                    gid: None,
                    size_bytes: None,
                    atime_ns: None,
                    mtime_ns: Some(mtime),
                    ctime_ns: ctime,
                    kill_suidgid: false,
                })?;
                Ok(())
            },
            |_| Vec::new(),
        )
    }

    /// fallocate of a disk-tier file, or of a memory file it takes past the threshold.
    /// `None`: a memory file that stays there (the caller applies the op as usual).
    pub(crate) fn fallocate_disk(
        &self,
        disk: &DiskTier,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> FsResult<Option<()>> {
        use crate::op::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
        // An invalid request changes nothing: no move to the disk tier, no host file grown.
        crate::state::check_fallocate(offset, length, mode)?;
        let _host = disk.exclusive(ino);
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        let trims = mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0;
        let end = offset + length;
        let op = |time_ns| Op::Fallocate {
            ino,
            offset,
            length,
            mode,
            time_ns,
        };
        let invalidate = |_: &()| vec![Invalidation::Inode { ino }];
        let file = match self.on_disk(ino)? {
            Some(file) => file,
            None => {
                if keep_size
                    || !disk.passes_threshold(end)
                    || !self.host_file_free_for_reuse(disk, ino)
                {
                    return Ok(None);
                }
                // It moves first, then takes the op as any disk-tier file (a zeroed range is
                // punched in the host file after the commit).
                let moved = self.mutate(
                    ctx,
                    |m, time_ns| self.migrate_to_disk(disk, m, ino, time_ns),
                    |_| Vec::new(),
                )?;
                match self.on_disk(ino)? {
                    Some(file) if moved => file,
                    _ => return Ok(None),
                }
            }
        };
        // check_fallocate: the end is within the limit unless the size is kept.
        let grows = !keep_size && end > file.size_bytes;
        if grows {
            // Old bytes past the size must not show in the grown range (decision 0146).
            self.trim_outstanding(disk, &file.name, file.size_bytes)?;
        }
        // The host file's length before it grows, to put back if the op is refused.
        let mut grown_from = None;
        if !trims {
            // Mode 0 or KEEP_SIZE: the room is taken on the host now, so that writes into the
            // range cannot fail for lack of space (posix_fallocate's promise; decision 0136).
            let host_len = disk.device.len(&file.name).ok().flatten();
            reserve_host_room(disk, &file.name, offset, length, keep_size, grows, host_len)?;
            grown_from = host_len.filter(|_| grows);
        } else if grows {
            let host_len = disk.device.len(&file.name).ok().flatten();
            disk.device
                .set_len(&file.name, end)
                .map_err(|e| host_errno("growing the disk-tier file", &file.name, &e))?;
            grown_from = host_len;
        }
        let applied = self.mutate(
            ctx,
            |m, time_ns| {
                m.apply(&op(time_ns))?;
                if trims {
                    disk.trim_pending(&file.name, (offset, length));
                }
                Ok(())
            },
            invalidate,
        );
        if let Err(e) = applied {
            if let Some(len) = grown_from {
                // Refused (memory for the range's record, a file gone meanwhile): the host
                // file goes back to its length; a failure here leaves it long, which every
                // mount trims.
                let _ = disk.device.set_len(&file.name, len);
            }
            return Err(e);
        }
        if trims {
            self.trim_after_commit(disk, &file.name, Trim::Punch, |device| {
                device.punch_hole(&file.name, offset, length)
            });
        }
        Ok(Some(()))
    }

    /// The trims applied before a checkpoint's image whose host files may not be trimmed yet
    /// (their threads wait for the commit): the checkpoint does them itself, under the
    /// registry's lock, before it writes the image (`DiskTier::finish_trims`).
    pub fn pending_trims(&self) -> Vec<(String, (u64, u64))> {
        self.disk().map_or_else(Vec::new, |d| d.pending_trims())
    }

    /// Does the trims of `snapshot` still pending, and syncs their host files.
    pub fn finish_trims(&self, snapshot: &[(String, (u64, u64))]) -> std::io::Result<()> {
        match self.disk() {
            Some(disk) => disk.finish_trims(snapshot, &|name| self.levels().host_sync_failed(name)),
            None => Ok(()),
        }
    }

    /// Memory pressure on the file being written: a write that does not fit in memory moves
    /// its own file to the disk tier when the file will be at least `--evict-min-size` long
    /// (even below the threshold), rather than answering ENOSPC. Returns whether it moved.
    pub(crate) fn evict_file(&self, ino: Ino, size_after: u64) -> bool {
        let Some(disk) = self.disk().filter(|d| d.config.enabled()) else {
            return false;
        };
        if size_after < disk.config.evict_min_size_bytes {
            return false;
        }
        let _host = disk.exclusive(ino);
        if !self.host_file_free_for_reuse(disk, ino) {
            return false;
        }
        let kernel = Ctx {
            kernel: true,
            ..Ctx::library(0, 0)
        };
        self.mutate(
            &kernel,
            |m, time_ns| self.migrate_to_disk(disk, m, ino, time_ns),
            |_| Vec::new(),
        ) == Ok(true)
    }

    /// The open host file of a disk-tier inode (None for memory-tier inodes, and when the
    /// device has no host files): the backing file for FUSE passthrough, and what O_DIRECT
    /// reads and writes go to.
    pub fn host_file(&self, ino: Ino) -> FsResult<Option<Arc<std::fs::File>>> {
        let Some(disk) = self.disk() else {
            self.read_state().regular_file(ino)?;
            return Ok(None);
        };
        let _host = disk.shared(ino);
        let Some(file) = self.on_disk(ino)? else {
            return Ok(None);
        };
        disk.file(ino, &file.name)
            .map_err(|e| host_errno("opening the disk-tier file", &file.name, &e))
    }

    /// The kernel may now write this inode's host file behind the engine (a passthrough
    /// open). While any such open exists the file stays on the disk tier, and the committer
    /// logs and syncs what was written within the commit interval. EINVAL for a file that is
    /// not on the disk tier.
    pub fn passthrough_opened(&self, ino: Ino) -> FsResult<()> {
        let disk = self.disk().ok_or(Errno::EINVAL)?;
        let _host = disk.exclusive(ino);
        if self.on_disk(ino)?.is_none() {
            return Err(Errno::EINVAL);
        }
        disk.passthrough_add(ino);
        Ok(())
    }

    /// One passthrough open closed: fstat the host file, log the new size and mtime
    /// (`WriteExtent`), and drop the registration when the count reaches 0.
    pub fn passthrough_released(&self, ino: Ino) -> FsResult<()> {
        let logged = self.host_file_changed(ino);
        if let Some(disk) = self.disk() {
            disk.passthrough_remove(ino);
        }
        logged
    }

    /// The same fstat-and-log as [`Engine::passthrough_released`], without releasing (fsync,
    /// flush or getattr of a passthrough file): the host file's length and mtime become the
    /// file's size and times (a `WriteExtent`), and its data is synced before that record.
    pub fn host_file_changed(&self, ino: Ino) -> FsResult<()> {
        let Some(disk) = self.disk() else {
            return Ok(());
        };
        let _host = disk.shared(ino);
        let Some(file) = self.on_disk(ino)? else {
            return Ok(());
        };
        let Some(host) = disk.file(ino, &file.name).ok().flatten() else {
            // No descriptor (a simulated device): what the device holds is what the ops say.
            return Ok(());
        };
        let meta = host
            .metadata()
            .map_err(|e| host_errno("asking the length of", &file.name, &e))?;
        let len = meta.len();
        let mtime_ns = {
            use std::os::unix::fs::MetadataExt;
            meta.mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec())
        };
        let (size, mtime) = {
            let state = self.read_state();
            let inode = state.inode(ino)?;
            (inode.size_bytes, inode.mtime_ns)
        };
        if len <= size && mtime_ns <= mtime {
            return Ok(());
        }
        let (offset, grown) = if len > size {
            (size, len - size)
        } else {
            (0, 0)
        };
        let ctx = Ctx::library(0, 0);
        let kernel = Ctx {
            kernel: true,
            ..ctx
        };
        self.mutate(
            &kernel,
            |m, _| {
                m.apply(&Op::WriteExtent {
                    ino,
                    offset,
                    len: grown,
                    time_ns: mtime_ns.max(mtime),
                    kill_suidgid: false,
                })
            },
            |_| Vec::new(),
        )
    }

    /// The committer's pass over the files open for passthrough (every commit interval): their
    /// size and times are logged and their data synced with the next commit, so that the
    /// commit-interval deadline holds for what the kernel writes behind the engine.
    /// Returns how many host files could not be synced (each is logged).
    pub fn sync_passthrough_files(&self) -> usize {
        let Some(disk) = self.disk() else { return 0 };
        let mut failed = 0;
        for ino in disk.passthrough_inodes() {
            if let Err(e) = self.host_file_changed(ino) {
                tracing::warn!("logging the passthrough writes of inode {ino}: {e:?}");
            }
            let name = {
                let state = self.read_state();
                match state.inode(ino) {
                    Ok(inode) => host_file_name(ino, inode.generation),
                    Err(_) => continue,
                }
            };
            // Written in place without growing, the file's mtime may not have moved within
            // the clock's tick: sync its data anyway.
            if let Err(e) = disk.device.sync(&name) {
                tracing::error!(
                    "syncing the disk-tier file {name}: {e}; its latest data may be lost"
                );
                // No fsync waits on this pass: the file's next fsync must hear of it.
                self.levels().host_sync_failed(&name);
                failed += 1;
            }
        }
        failed
    }

    /// The host file a failed sync of `ino` would be recorded under (decision 0126), asked
    /// before an fsync's commit; None for a store without a disk tier or a non-regular file.
    /// Its data may be on the disk tier or have been there (moved back since).
    pub fn host_sync_name(&self, ino: Ino) -> Option<HostSyncName> {
        self.disk()?;
        let state = self.read_state();
        let inode = state.regular_file(ino).ok()?;
        Some(HostSyncName {
            ino,
            name: host_file_name(ino, inode.generation),
            on_disk: inode.file().map(Contents::tier) == Some(Tier::Disk),
        })
    }

    /// Whether a sync of `host`'s file failed since that file's last fsync was told (in a
    /// commit no fsync of it waited for: the committer's timed commit, its pass over
    /// passthrough files, a checkpoint, a trim). Each failure is told once: asked by every
    /// fsync (and close of a file durable at close) once its own sync has answered, whether
    /// that succeeded or not, so a failure the sync itself reported is not told again. Takes
    /// no engine lock (it runs in sync answers).
    pub fn take_host_sync_error(&self, host: &HostSyncName) -> bool {
        if !self.levels().take_host_sync_error(&host.name, host.on_disk) {
            return false;
        }
        tracing::error!(
            "inode {}: an earlier sync of its disk-tier file {} failed: this fsync answers \
             EIO (its latest data may be lost)",
            host.ino,
            host.name
        );
        true
    }
}

/// What a read of a disk-tier file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiskRead {
    /// The bytes are in the caller's buffer.
    Done,
    /// The file is not (or no longer) on the disk tier: read it as a memory file.
    NotOnDisk,
    /// A read from the host's page cache only, and some bytes were not there.
    WouldWait,
}

/// Writes `data` at `offset` of host file `name` (nothing for an empty write), with the
/// error as the program sees it.
fn write_host_file(disk: &DiskTier, name: &str, offset: u64, data: &[u8]) -> FsResult<()> {
    if data.is_empty() {
        return Ok(());
    }
    disk.device
        .write_at_sparse(name, offset, data)
        .map_err(|e| host_errno("writing the disk-tier file", name, &e))
}

/// Records a write whose bytes are already in the host file (`WriteExtent`). Returns the
/// bytes written, as `write` does.
fn apply_write_extent(
    m: &mut Mutation<'_>,
    ino: Ino,
    offset: u64,
    len: usize,
    time_ns: TimeNs,
    kill_suidgid: bool,
) -> FsResult<Option<u32>> {
    m.apply(&Op::WriteExtent {
        ino,
        offset,
        len: len as u64,
        time_ns,
        kill_suidgid,
    })?;
    Ok(Some(len as u32))
}

/// The most bytes a migration copies per device call.
const _: () = assert!(MIGRATION_PIECE_BYTES >= CHUNK_BYTES);

/// The host file of a regular file, as a failed sync of it is recorded
/// ([`Engine::host_sync_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSyncName {
    ino: Ino,
    name: String,
    on_disk: bool,
}

//! The file operations of the engine: attributes, reads, writes, fallocate.

use super::{Ctx, Engine, Invalidation, Mutation, WriteTimes};
use crate::attr::{Attr, Durability, Ino, SetAttr, SetTime};
use crate::contents::{Contents, Tier};
use crate::error::{Errno, FsResult};
use crate::limits::RELATIME_INTERVAL_NS;
use crate::op::Op;
use crate::persist::codec::WRITE_BYTES_MAX;
use crate::time::TimeNs;

/// Per-call scratch buffer for reads.
pub type ReadBuf = Vec<u8>;

/// The most one copy_file_range copies: the bytes are held twice while the engine's lock is
/// held, so other requests wait for the copy (a few milliseconds at this size).
pub const COPY_LEN_MAX: u64 = 8 << 20;

fn resolve_time(t: SetTime, now: TimeNs) -> TimeNs {
    match t {
        SetTime::At(ns) => ns,
        SetTime::Now => now,
    }
}

impl Engine {
    pub fn setattr(&self, ctx: &Ctx, ino: Ino, set: &SetAttr) -> FsResult<Attr> {
        let op = |now| Op::SetAttr {
            ino,
            mode: set.mode,
            uid: set.uid,
            gid: set.gid,
            size_bytes: set.size_bytes,
            atime_ns: set.atime.map(|t| resolve_time(t, now)),
            mtime_ns: set.mtime.map(|t| resolve_time(t, now)),
            ctime_ns: set.ctime_ns.unwrap_or(now),
            kill_suidgid: set.kill_suidgid,
        };
        // A few rounds at most: a round ends early only when memory pressure moved the file
        // to the disk tier between the look at its tier and the memory op (a size change
        // applied as for memory would leave the host file's length and bytes as they were).
        for _ in 0..TIER_ROUNDS_MAX {
            if let (Some(disk), Some(size)) = (self.disk(), set.size_bytes) {
                // Only a disk-tier file, or a memory file growing past the threshold.
                let concerned = match self.tier(ino) {
                    Ok(Tier::Disk) => true,
                    Ok(Tier::Memory) => disk.passes_threshold(size),
                    Err(_) => false,
                };
                if size <= crate::limits::FILE_SIZE_BYTES_MAX && concerned {
                    let now = self.now_ns();
                    if let Some(attr) = self.setattr_disk(disk, ctx, ino, &op(now), size)? {
                        return Ok(attr);
                    }
                }
            }
            let sized = set.size_bytes.is_some() && self.disk().is_some();
            let applied = self.mutate(
                ctx,
                |m, now| {
                    if sized && on_disk_tier(m, ino)? {
                        return Ok(None);
                    }
                    m.apply(&op(now))?;
                    Ok(Some(m.state().inode(ino)?.attr(ino)))
                },
                |a| match a {
                    Some(_) => vec![Invalidation::Inode { ino }],
                    None => Vec::new(),
                },
            )?;
            if let Some(attr) = applied {
                return Ok(attr);
            }
        }
        Err(Errno::ENOSPC)
    }

    /// Reads up to `size` bytes at `offset` into `out` (cleared first).
    pub fn read(&self, ino: Ino, offset: u64, size: u32, out: &mut ReadBuf) -> FsResult<()> {
        self.read_from(ino, offset, size, out, false).map(|_| ())
    }

    /// As [`Engine::read`], without waiting for the disk: false (and nothing read) where a
    /// disk-tier file's bytes are not all in the host's page cache. A FUSE queue thread reads
    /// this way and hands the misses to threads that may wait (decision 0073), so that one
    /// cold read does not hold up the requests queued behind it.
    pub fn read_if_cached(
        &self,
        ino: Ino,
        offset: u64,
        size: u32,
        out: &mut ReadBuf,
    ) -> FsResult<bool> {
        self.read_from(ino, offset, size, out, true)
    }

    fn read_from(
        &self,
        ino: Ino,
        offset: u64,
        size: u32,
        out: &mut ReadBuf,
        cached_only: bool,
    ) -> FsResult<bool> {
        // A few rounds at most: a round ends early only when the file moved meanwhile.
        for _ in 0..TIER_ROUNDS_MAX {
            let state = self.read_state();
            let inode = state.regular_file(ino)?;
            let contents = inode.file().expect("regular file");
            if contents.tier() == Tier::Disk {
                // Through the host file, under its host lock (taken before the state's).
                drop(state);
                let disk = self.disk().ok_or(Errno::EIO)?;
                match self.read_disk(disk, ino, offset, size, out, cached_only)? {
                    super::disk_ops::DiskRead::Done => return Ok(true),
                    super::disk_ops::DiskRead::WouldWait => return Ok(false),
                    super::disk_ops::DiskRead::NotOnDisk => continue,
                }
            }
            contents.read(inode.size_bytes, offset, size, out)?;
            // relatime: refresh the access time only when it is older than the last change
            // or a day.
            let atime = inode.atime();
            let now = self.now_ns();
            if atime <= inode.mtime_ns
                || atime <= inode.ctime_ns
                || now - atime > RELATIME_INTERVAL_NS
            {
                inode.set_atime(now);
            }
            return Ok(true);
        }
        Err(Errno::EIO)
    }

    /// Writes `data` at `offset` and stamps the file's mtime and ctime with the time; returns
    /// the number of bytes written (all of them). A write by an unprivileged caller clears
    /// setuid/setgid (`kill_suidgid`).
    pub fn write(
        &self,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
    ) -> FsResult<u32> {
        self.write_with(ctx, ino, offset, data, kill_suidgid, WriteTimes::Stamp)
    }

    /// [`Engine::write`], saying who sets the file's times.
    pub fn write_with(
        &self,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
        times: WriteTimes,
    ) -> FsResult<u32> {
        let n = self.write_applied(ctx, ino, offset, data, kill_suidgid, times)?;
        // A PARANOID write(2) returns once on both copies: with the mirror degraded it is on
        // the store alone, and says so (decision 0077).
        if self.mirror_health().is_some_and(|h| h.is_degraded())
            && self.read_state().inode(ino)?.durability() == Durability::BeforeReturn
        {
            self.check_da2_write(ino)?;
        }
        Ok(n)
    }

    fn write_applied(
        &self,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
        times: WriteTimes,
    ) -> FsResult<u32> {
        u32::try_from(data.len()).map_err(|_| Errno::EINVAL)?;
        // A few rounds at most: a round ends early only when another writer moved the file
        // to the disk tier meanwhile.
        let end = offset.saturating_add(data.len() as u64);
        for _ in 0..TIER_ROUNDS_MAX {
            if let Some(disk) = self.disk() {
                // Small memory files take none of these turns (one shared look at the tier).
                if self.tier(ino)? == Tier::Disk {
                    match self.write_disk(disk, ctx, ino, offset, data, kill_suidgid, times)? {
                        Some(n) => return Ok(n),
                        None => continue,
                    }
                }
                if disk.passes_threshold(end) {
                    match self.write_migrating(disk, ctx, ino, offset, data, kill_suidgid, times)? {
                        Some(n) => return Ok(n),
                        None if self.tier(ino)? == Tier::Disk => continue,
                        None => {}
                    }
                }
            }
            match self.write_memory(ctx, ino, offset, data, kill_suidgid, times) {
                Ok(Some(n)) => return Ok(n),
                Ok(None) => {}
                // Memory is full: the coldest large files move to disk, then a new try
                // (ENOSPC only once nothing more can move).
                Err(Errno::ENOSPC)
                    if self.evict_for(data.len() as u64 + crate::limits::EVICT_SLACK_BYTES)
                        || self.evict_file(ino, end) => {}
                Err(e) => return Err(e),
            }
        }
        Err(Errno::ENOSPC)
    }

    /// A write of a memory file; `None` if the file is on the disk tier (moved meanwhile).
    fn write_memory(
        &self,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
        times: WriteTimes,
    ) -> FsResult<Option<u32>> {
        self.mutate(
            ctx,
            |m, time_ns| {
                if self.discards_writes(m.state(), ino) {
                    // DISPOSABLE: accepted and dropped, like /dev/null.
                    m.state().regular_file(ino)?;
                    return Ok(Some(data.len() as u32));
                }
                let tier = m.state().regular_file(ino)?.file().map(Contents::tier);
                if tier == Some(Tier::Disk) {
                    return Ok(None);
                }
                let done = write_keeping_times(m, ino, times, kill_suidgid, |m| {
                    write_pieces(m, ino, offset, data, time_ns, kill_suidgid)
                })?;
                Ok(Some(done as u32))
            },
            |_| vec![Invalidation::Inode { ino }],
        )
    }

    /// Copies up to `len` bytes of `ino_in` from `offset_in` to `ino_out` at `offset_out`
    /// within the engine (copy_file_range: the bytes never go through user space); returns
    /// how many were copied, fewer than asked at the source's end or past [`COPY_LEN_MAX`]
    /// (callers loop, as for any copy_file_range). Journaled as the writes it makes, so replay
    /// gives the same bytes; the memory cap applies as to writes. The caller checked access
    /// (the kernel does, for a mount). `kill_suidgid` and `times` as for [`Engine::write_with`].
    #[allow(clippy::too_many_arguments)]
    pub fn copy_file_range(
        &self,
        ctx: &Ctx,
        ino_in: Ino,
        offset_in: u64,
        ino_out: Ino,
        offset_out: u64,
        len: u64,
        kill_suidgid: bool,
        times: WriteTimes,
    ) -> FsResult<u64> {
        let want = len.min(COPY_LEN_MAX);
        let out_end = offset_out.saturating_add(want);
        // Memory is full: the coldest large files move to disk, then a new try, as for a
        // write (ENOSPC only once nothing more can move; found by fsx, decision 0125).
        for _ in 0..TIER_ROUNDS_MAX {
            match self.copy_file_range_once(
                ctx,
                (ino_in, offset_in),
                (ino_out, offset_out),
                len,
                kill_suidgid,
                times,
            ) {
                Err(Errno::ENOSPC)
                    if self.evict_for(want + crate::limits::EVICT_SLACK_BYTES)
                        || self.evict_file(ino_out, out_end) => {}
                other => return other,
            }
        }
        Err(Errno::ENOSPC)
    }

    /// One try of [`Engine::copy_file_range`]: ENOSPC when memory is full.
    fn copy_file_range_once(
        &self,
        ctx: &Ctx,
        (ino_in, offset_in): (Ino, u64),
        (ino_out, offset_out): (Ino, u64),
        len: u64,
        kill_suidgid: bool,
        times: WriteTimes,
    ) -> FsResult<u64> {
        // A few rounds at most: a round ends early only when memory pressure moved a file to
        // the disk tier between the look at the tiers and the memory copy.
        for _ in 0..TIER_ROUNDS_MAX {
            if let Some(disk) = self.disk() {
                let on_disk = |ino| self.tier(ino).map(|t| t == Tier::Disk);
                let out_end = offset_out.saturating_add(len.min(COPY_LEN_MAX));
                if on_disk(ino_in)? || on_disk(ino_out)? || disk.passes_threshold(out_end) {
                    // Through the host files: a read, then a write (each atomic on its own).
                    let mut bytes = Vec::new();
                    self.read(ino_in, offset_in, len.min(COPY_LEN_MAX) as u32, &mut bytes)?;
                    self.read_state().regular_file(ino_out)?;
                    if bytes.is_empty() {
                        return Ok(0);
                    }
                    let n =
                        self.write_with(ctx, ino_out, offset_out, &bytes, kill_suidgid, times)?;
                    return Ok(u64::from(n));
                }
            }
            let tiered = self.disk().is_some();
            let copied = self.mutate(
                ctx,
                |m, time_ns| {
                    if tiered && (on_disk_tier(m, ino_in)? || on_disk_tier(m, ino_out)?) {
                        return Ok(None);
                    }
                    let source = m.state().regular_file(ino_in)?;
                    let mut bytes = Vec::new();
                    let want = len.min(COPY_LEN_MAX) as u32;
                    source.file().expect("regular file").read(
                        source.size_bytes,
                        offset_in,
                        want,
                        &mut bytes,
                    )?;
                    m.state().regular_file(ino_out)?;
                    if bytes.is_empty() {
                        return Ok(Some(0));
                    }
                    let done = write_keeping_times(m, ino_out, times, kill_suidgid, |m| {
                        write_pieces(m, ino_out, offset_out, &bytes, time_ns, kill_suidgid)
                    })?;
                    Ok(Some(done as u64))
                },
                |done| match done {
                    Some(_) => vec![Invalidation::Inode { ino: ino_out }],
                    None => Vec::new(),
                },
            )?;
            if let Some(n) = copied {
                return Ok(n);
            }
        }
        Err(Errno::ENOSPC)
    }

    /// fallocate(2) of `ino`. A caller other than root then loses the file's setuid bit (and
    /// setgid with group-exec), as file_modified() does on a local file system: FUSE gives
    /// fallocate no kill-privileges flag, and with KILLPRIV_V2 the kernel leaves it to us
    /// (xfstests generic/683-685; decision 0137).
    pub fn fallocate(
        &self,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> FsResult<()> {
        self.fallocate_tiered(ctx, ino, offset, length, mode)?;
        if ctx.uid != 0 {
            self.drop_setid_bits(ctx, ino)?;
        }
        Ok(())
    }

    /// Clears setuid, and setgid when the group may execute or the caller is outside the
    /// file's group, if the file has them.
    fn drop_setid_bits(&self, ctx: &Ctx, ino: Ino) -> FsResult<()> {
        self.mutate(
            ctx,
            |m, time_ns| {
                let inode = m.state().inode(ino)?;
                let mode = inode.mode;
                let mut kept = mode & !libc::S_ISUID;
                // The VFS's rule (setattr_should_drop_sgid): with group-exec, or for a caller
                // outside the file's group (FUSE tells us the primary group only).
                if mode & libc::S_IXGRP != 0 || ctx.gid != inode.gid {
                    kept &= !libc::S_ISGID;
                }
                if kept == mode {
                    return Ok(false);
                }
                m.apply(&Op::SetAttr {
                    ino,
                    mode: Some(kept),
                    uid: None,
                    gid: None,
                    size_bytes: None,
                    atime_ns: None,
                    mtime_ns: None,
                    ctime_ns: time_ns,
                    kill_suidgid: false,
                })?;
                // FALLOCATE's reply carries no attributes: the kernel keeps the old mode
                // cached unless told.
                m.behind_kernel.push(Invalidation::Attributes { ino });
                Ok(true)
            },
            |&changed| match changed {
                true => vec![Invalidation::Inode { ino }],
                false => Vec::new(),
            },
        )
        .map(|_| ())
    }

    fn fallocate_tiered(
        &self,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> FsResult<()> {
        // A few rounds at most: a round ends early only when memory pressure moved the file
        // to the disk tier between the look at its tier and the memory op.
        for _ in 0..TIER_ROUNDS_MAX {
            if let Some(disk) = self.disk() {
                let concerned = match self.tier(ino) {
                    Ok(Tier::Disk) => true,
                    Ok(Tier::Memory) => disk.passes_threshold(offset.saturating_add(length)),
                    Err(_) => false,
                };
                if length > 0 && concerned {
                    if let Some(()) = self.fallocate_disk(disk, ctx, ino, offset, length, mode)? {
                        return Ok(());
                    }
                }
            }
            match self.fallocate_memory(ctx, ino, offset, length, mode) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                // Through the tiers again: the file itself may have moved.
                Err(Errno::ENOSPC)
                    if self.evict_for(length.saturating_add(crate::limits::EVICT_SLACK_BYTES)) => {}
                Err(e) => return Err(e),
            }
        }
        Err(Errno::ENOSPC)
    }

    /// fallocate of a memory file; false (nothing done) if the file is on the disk tier:
    /// applied there, the op would leave the host file's bytes in a punched or zeroed range
    /// (memory pressure moves a file between the caller's look at its tier and this op;
    /// found by fsx, 2026-11-27).
    fn fallocate_memory(
        &self,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> FsResult<bool> {
        self.mutate(
            ctx,
            |m, time_ns| {
                if on_disk_tier(m, ino)? {
                    // An invalid request (a length of 0) is refused as the op would refuse it.
                    crate::state::check_fallocate(offset, length, mode)?;
                    return Ok(false);
                }
                m.apply(&Op::Fallocate {
                    ino,
                    offset,
                    length,
                    mode,
                    time_ns,
                })?;
                Ok(true)
            },
            |&done| match done {
                true => vec![Invalidation::Inode { ino }],
                false => Vec::new(),
            },
        )
    }
}

/// The most rounds an op makes through the tiers: a round ends early only when memory
/// pressure moved a file between the look at its tier and the op, or made room that others
/// took; past this many, the op answers as memory full.
const TIER_ROUNDS_MAX: usize = 4;

/// Whether regular file `ino` is on the disk tier, asked under the engine's lock by an op
/// that would otherwise apply to its memory bytes.
fn on_disk_tier(m: &mut Mutation<'_>, ino: Ino) -> FsResult<bool> {
    Ok(m.state().regular_file(ino)?.file().map(Contents::tier) == Some(Tier::Disk))
}

/// Applies a write as one op per WRITE_BYTES_MAX bytes (a journal record holds at most that
/// much); returns how many bytes went in. A short write, as POSIX allows, once some of it is
/// in; an error if none is.
fn write_pieces(
    m: &mut Mutation<'_>,
    ino: Ino,
    offset: u64,
    data: &[u8],
    time_ns: TimeNs,
    kill_suidgid: bool,
) -> FsResult<usize> {
    // Bytes the file holds already are left out of the op, and so of the journal: under the
    // writeback cache the kernel sends a page whole, so each append to a file resends the
    // bytes before it in its last page, and a page the flusher sent is sent again with the
    // rest at close (7 % of PostMark's journal; decision 0094). The state is the same.
    let same = m
        .state()
        .regular_file(ino)?
        .file()
        .map_or(0, |c| c.same_prefix_bytes(offset, data));
    let mut done = same;
    debug_assert!(done <= data.len());
    // An empty write is still an op (it updates the times).
    let empty = (done == data.len()).then_some(&data[..0]);
    for piece in data[done..].chunks(WRITE_BYTES_MAX).chain(empty) {
        let op = Op::Write {
            ino,
            offset: offset + done as u64,
            data: piece,
            time_ns,
            kill_suidgid,
        };
        match m.apply(&op) {
            Ok(()) => done += piece.len(),
            Err(_) if done > same => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Applies a write to `ino` (`write`, which stamps mtime and ctime) and, when the kernel owns
/// the file's times (`WriteTimes`), puts back the times it had before.
pub(super) fn write_keeping_times<T>(
    m: &mut Mutation<'_>,
    ino: Ino,
    times: WriteTimes,
    kill_suidgid: bool,
    write: impl FnOnce(&mut Mutation<'_>) -> FsResult<T>,
) -> FsResult<T> {
    let kept = kept_times(m, ino, times, kill_suidgid);
    let done = write(m)?;
    if let Some(kept) = kept {
        restore_times(m, ino, kept);
    }
    Ok(done)
}

/// The times before a write to `ino`, to put back after it (`restore_times`) when the kernel
/// owns them (`WriteTimes`); a write that clears setuid/setgid changes ctime all the same.
fn kept_times(
    m: &Mutation<'_>,
    ino: Ino,
    times: WriteTimes,
    kill_suidgid: bool,
) -> Option<(TimeNs, TimeNs)> {
    match times {
        WriteTimes::KeptByKernel if !kill_suidgid => {
            m.state().inode(ino).ok().map(|i| (i.mtime_ns, i.ctime_ns))
        }
        _ => None,
    }
}

/// Under the writeback cache a WRITE arrives when the kernel flushes its pages, maybe long
/// after the write(2); the kernel stamped the times then and sends them itself (SETATTR) if
/// they changed, so the flush time must not replace them. Only if the write changed them (not
/// within the same clock tick).
fn restore_times(m: &mut Mutation<'_>, ino: Ino, (mtime_ns, ctime_ns): (TimeNs, TimeNs)) {
    let now = m.state().inode(ino).ok().map(|i| (i.mtime_ns, i.ctime_ns));
    if now == Some((mtime_ns, ctime_ns)) {
        return;
    }
    let op = Op::SetAttr {
        ino,
        mode: None,
        uid: None,
        gid: None,
        size_bytes: None,
        atime_ns: None,
        mtime_ns: Some(mtime_ns),
        ctime_ns,
        kill_suidgid: false,
    };
    if let Err(e) = m.apply(&op) {
        // Times of a file just written cannot fail to be set; the write stands.
        debug_assert!(false, "restoring the times after a write: {e:?}");
    }
}

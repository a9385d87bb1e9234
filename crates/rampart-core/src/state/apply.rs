//! Applying ops: the one path of every mutation, live or replayed. Each `apply_*` validates
//! completely before it changes anything, so a failed op leaves no trace.

use std::sync::atomic::{AtomicI64, AtomicU64};

use super::privileges::{kill_privileges, Strip};
use super::{check_entry_name, entry_cost, inode_base_cost, State};
use crate::attr::{Durability, FileKind, Ino};
use crate::category::CATEGORY_XATTR;
use crate::contents::{Contents, Delta, HostFile, Tier};
use crate::error::{Errno, FsResult};
use crate::limits::{LINK_COUNT_MAX, SYMLINK_TARGET_BYTES_MAX};
use crate::memory::file_data::FILE_SIZE_BYTES_MAX;
use crate::namespace::dir::Dir;
use crate::namespace::inode::{Inode, Payload};
use crate::op::{Op, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
use crate::time::TimeNs;
use crate::xattr::{self, Xattrs};

impl State {
    /// Applies one op: validates it completely, then changes the state. The one path of every
    /// mutation, live or replayed.
    pub fn apply(&mut self, op: &Op<'_>) -> FsResult<()> {
        match *op {
            Op::Create {
                parent,
                name,
                ino,
                generation,
                mode,
                uid,
                gid,
                rdev,
                target,
                time_ns,
            } => self.apply_create(
                parent, name, ino, generation, mode, uid, gid, rdev, target, time_ns,
            ),
            Op::Link {
                ino,
                parent,
                name,
                time_ns,
            } => self.apply_link(ino, parent, name, time_ns),
            Op::Unlink {
                parent,
                name,
                time_ns,
            } => self.apply_unlink(parent, name, time_ns),
            Op::Rmdir {
                parent,
                name,
                time_ns,
            } => self.apply_rmdir(parent, name, time_ns),
            Op::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                time_ns,
            } => self.apply_rename(parent, name, new_parent, new_name, flags, time_ns),
            Op::SetAttr {
                ino,
                mode,
                uid,
                gid,
                size_bytes,
                atime_ns,
                mtime_ns,
                ctime_ns,
                kill_suidgid,
            } => self.apply_setattr(
                ino,
                mode,
                uid,
                gid,
                size_bytes,
                atime_ns,
                mtime_ns,
                ctime_ns,
                kill_suidgid,
            ),
            Op::Write {
                ino,
                offset,
                data,
                time_ns,
                kill_suidgid,
            } => self.apply_write(ino, offset, data, time_ns, kill_suidgid),
            Op::Fallocate {
                ino,
                offset,
                length,
                mode,
                time_ns,
            } => self.apply_fallocate(ino, offset, length, mode, time_ns),
            Op::SetXattr {
                ino,
                name,
                value,
                flags,
                time_ns,
            } => self.apply_setxattr(ino, name, value, flags, time_ns),
            Op::RemoveXattr { ino, name, time_ns } => self.apply_removexattr(ino, name, time_ns),
            Op::SetDurability {
                ino,
                durability,
                time_ns,
            } => self.apply_set_durability(ino, durability, time_ns),
            Op::WriteExtent {
                ino,
                offset,
                len,
                time_ns,
                kill_suidgid,
            } => self.apply_write_extent(ino, offset, len, time_ns, kill_suidgid),
            Op::Migrate { ino, tier, .. } => self.apply_migrate(ino, tier),
        }
    }

    /// Bytes written to a disk-tier file's host file: the size and times follow, as for a
    /// write (the bytes are in the host file already).
    fn apply_write_extent(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        time_ns: TimeNs,
        kill_suidgid: bool,
    ) -> FsResult<()> {
        let inode = self.regular_file(ino)?;
        let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
        if end > FILE_SIZE_BYTES_MAX {
            return Err(Errno::EFBIG);
        }
        if inode.file().map(Contents::tier) != Some(Tier::Disk) {
            return Err(Errno::EIO);
        }
        if len > 0 {
            let size_after = inode.size_bytes.max(end);
            self.change_contents(ino, |c| c.wrote_extent(len, size_after))?;
        }
        self.host_redo.remove(&ino);
        let inode = self.table.get_mut(ino).expect("inode");
        if len > 0 {
            inode.size_bytes = inode.size_bytes.max(end);
        }
        inode.mtime_ns = time_ns;
        inode.ctime_ns = time_ns;
        let strip = if kill_suidgid {
            Strip::KernelFlagged
        } else {
            Strip::Nothing
        };
        let freed = kill_privileges(inode, strip);
        self.budget.apply(freed);
        Ok(())
    }

    /// Moves a regular file's contents to `tier`: to the disk, the memory copy goes (its host
    /// file holds the bytes); to memory, the contents start empty (the writes after the op
    /// bring them back). Already there: nothing changes. Times stay as they are.
    fn apply_migrate(&mut self, ino: Ino, tier: Tier) -> FsResult<()> {
        let inode = self.regular_file(ino)?;
        let contents = inode.file().expect("regular file");
        if contents.tier() == tier {
            return Ok(());
        }
        let new = match tier {
            // The host file holds what memory held (holes stay holes).
            Tier::Disk => Contents::Disk(HostFile::holding(contents.stored_bytes())),
            Tier::Memory => Contents::default(),
        };
        let contents = self
            .table
            .get_mut(ino)
            .expect("inode")
            .file_mut()
            .expect("regular file");
        let old = std::mem::replace(contents, new);
        let heap_after = contents.heap_bytes();
        self.budget
            .apply(heap_after as i64 - old.heap_bytes() as i64);
        self.counts.count_contents(&old, -1);
        let inode = self.table.get(ino).expect("inode");
        let (slot, contents) = (inode.category, inode.file().expect("file"));
        self.counts.count_contents(contents, 1);
        // Moves the bytes between the tiers; the file itself stays counted.
        let disk = |c: &Contents| c.tier() == Tier::Disk;
        self.categories
            .count_bytes(slot, -(old.stored_bytes() as i64), disk(&old));
        self.categories
            .count_bytes(slot, contents.stored_bytes() as i64, disk(contents));
        self.host_redo.remove(&ino);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_create(
        &mut self,
        parent: Ino,
        name: &[u8],
        ino: Ino,
        generation: u32,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        target: &[u8],
        time_ns: TimeNs,
    ) -> FsResult<()> {
        check_entry_name(name)?;
        let kind = FileKind::from_mode(mode).ok_or(Errno::EINVAL)?;
        let parent_inode = self.live_dir(parent)?;
        let parent_dir = parent_inode.dir().expect("dir");
        if parent_dir.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        if !parent_dir.has_room_for(name.len()) {
            return Err(Errno::ENOSPC);
        }
        if kind == FileKind::Directory && parent_inode.nlink >= LINK_COUNT_MAX {
            return Err(Errno::EMLINK);
        }
        if kind == FileKind::Symlink {
            if target.is_empty() {
                return Err(Errno::ENOENT);
            }
            if target.len() > SYMLINK_TARGET_BYTES_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
        }
        if self.table.get(ino).is_ok() || ino == 0 {
            return Err(Errno::EIO);
        }
        let payload = match kind {
            FileKind::RegularFile => Payload::File(Contents::default()),
            FileKind::Directory => Payload::Dir(Box::new(Dir::new(parent))),
            FileKind::Symlink => Payload::Symlink(target.into()),
            _ => Payload::Special { rdev },
        };
        let inode = Inode {
            mode,
            uid,
            gid,
            nlink: if kind == FileKind::Directory { 2 } else { 1 },
            generation,
            durability: Durability::default().code(),
            absent: false,
            category: crate::category::counts::DEFAULT_SLOT,
            lookups: AtomicU64::new(0),
            size_bytes: if kind == FileKind::Symlink {
                target.len() as u64
            } else {
                0
            },
            atime_ns: AtomicI64::new(time_ns),
            mtime_ns: time_ns,
            ctime_ns: time_ns,
            payload,
            xattrs: None,
        };
        let cost = inode_base_cost(&inode) + entry_cost(name);
        self.budget.check(cost + self.table.growth_bytes(ino))?;
        // Validation is over: from here on nothing fails.
        self.budget.apply(cost as i64);
        self.table.insert(ino, inode);
        self.budget.set_table_bytes(self.table.heap_bytes());
        *self.counts.slot(kind) += 1;
        if kind == FileKind::RegularFile {
            // Empty, with no category of its own yet.
            self.categories
                .count_file(crate::category::counts::DEFAULT_SLOT, 1);
        }
        self.dir_mut(parent).insert(name, ino, kind.code());
        let parent_inode = self.table.get_mut(parent).expect("parent");
        if kind == FileKind::Directory {
            parent_inode.nlink += 1;
        }
        parent_inode.mtime_ns = time_ns;
        parent_inode.ctime_ns = time_ns;
        Ok(())
    }

    fn apply_link(&mut self, ino: Ino, parent: Ino, name: &[u8], time_ns: TimeNs) -> FsResult<()> {
        check_entry_name(name)?;
        let inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(Errno::EPERM);
        }
        // No links left: gone, unless it is an unnamed file made to be linked (O_TMPFILE).
        if inode.nlink == 0 && !self.is_linkable_unnamed(ino) {
            return Err(Errno::ENOENT);
        }
        if inode.nlink >= LINK_COUNT_MAX {
            return Err(Errno::EMLINK);
        }
        let kind = inode.kind();
        let parent_dir = self.live_dir(parent)?.dir().expect("dir");
        if parent_dir.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        if !parent_dir.has_room_for(name.len()) {
            return Err(Errno::ENOSPC);
        }
        let cost = entry_cost(name);
        self.budget.check(cost)?;
        self.budget.apply(cost as i64);
        self.dir_mut(parent).insert(name, ino, kind.code());
        let inode = self.table.get_mut(ino).expect("inode");
        inode.nlink += 1;
        inode.ctime_ns = time_ns;
        self.linkable.remove(&ino);
        self.touch_dir(parent, time_ns);
        Ok(())
    }

    fn apply_unlink(&mut self, parent: Ino, name: &[u8], time_ns: TimeNs) -> FsResult<()> {
        let (ino, kind_code) = self.child(parent, name)?;
        if FileKind::from_code(kind_code) == Some(FileKind::Directory) {
            return Err(Errno::EISDIR);
        }
        self.dir_mut(parent).remove(name);
        self.budget.apply(-(entry_cost(name) as i64));
        self.touch_dir(parent, time_ns);
        self.drop_link(ino, time_ns);
        Ok(())
    }

    fn apply_rmdir(&mut self, parent: Ino, name: &[u8], time_ns: TimeNs) -> FsResult<()> {
        let (ino, _) = self.child(parent, name)?;
        let dir = self.dir(ino)?;
        if !dir.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.dir_mut(parent).remove(name);
        self.budget.apply(-(entry_cost(name) as i64));
        let parent_inode = self.table.get_mut(parent).expect("parent");
        parent_inode.nlink -= 1;
        self.touch_dir(parent, time_ns);
        self.drop_link(ino, time_ns);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_setattr(
        &mut self,
        ino: Ino,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size_bytes: Option<u64>,
        atime_ns: Option<TimeNs>,
        mtime_ns: Option<TimeNs>,
        ctime_ns: TimeNs,
        kill_suidgid: bool,
    ) -> FsResult<()> {
        let inode = self.inode(ino)?;
        let chown = (uid.is_some() || gid.is_some()) && !inode.is_dir();
        if let Some(size) = size_bytes {
            match inode.payload {
                Payload::File(_) => {}
                Payload::Dir(_) => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
            if size > FILE_SIZE_BYTES_MAX {
                return Err(Errno::EFBIG);
            }
        }
        if let Some(size) = size_bytes {
            // Growing exposes zeros (no chunk holds bytes past the size) and keeps what
            // fallocate reserved past the end, as ext4 does; only shrinking drops bytes.
            if size < inode.size_bytes {
                let on_disk = inode.file().map(Contents::tier) == Some(Tier::Disk);
                self.change_contents(ino, |c| c.truncate(size))?;
                if on_disk {
                    self.note_host_trim(ino, size, u64::MAX - size);
                }
            }
        }
        let inode = self.table.get_mut(ino).expect("inode");
        if let Some(size) = size_bytes {
            inode.size_bytes = size;
            inode.mtime_ns = ctime_ns;
        }
        if let Some(mode) = mode {
            inode.mode = (inode.mode & libc::S_IFMT) | (mode & 0o7777);
        }
        if let Some(uid) = uid {
            inode.uid = uid;
        }
        if let Some(gid) = gid {
            inode.gid = gid;
        }
        if let Some(t) = atime_ns {
            inode.set_atime(t);
        }
        if let Some(t) = mtime_ns {
            inode.mtime_ns = t;
        }
        inode.ctime_ns = ctime_ns;
        if mode.is_some() {
            self.chmod_acl(ino);
        }
        let inode = self.table.get_mut(ino).expect("inode");
        if chown || size_bytes.is_some() {
            let strip = if chown || kill_suidgid {
                Strip::SetuidAndExecSetgid
            } else {
                Strip::Nothing
            };
            let freed = kill_privileges(inode, strip);
            self.budget.apply(freed);
        }
        Ok(())
    }

    /// Changes a regular file's contents and accounts for what that changed. Called once the
    /// op is validated: a memory file cannot fail here; a file on a device can (EIO, ENOSPC),
    /// and then nothing else of the op has changed yet.
    fn change_contents(
        &mut self,
        ino: Ino,
        change: impl FnOnce(&mut Contents) -> FsResult<Delta>,
    ) -> FsResult<()> {
        let inode = self.table.get_mut(ino)?;
        let slot = inode.category;
        let contents = inode.file_mut().ok_or(Errno::EINVAL)?;
        let delta = change(contents)?;
        let on_disk = contents.tier() == Tier::Disk;
        self.categories
            .count_bytes(slot, delta.stored_bytes, on_disk);
        self.budget.apply(delta.heap_bytes);
        self.counts.add_data(delta.stored_bytes);
        if on_disk {
            self.counts.disk_data_bytes = self
                .counts
                .disk_data_bytes
                .wrapping_add_signed(delta.stored_bytes);
        }
        Ok(())
    }

    pub(crate) fn regular_file(&self, ino: Ino) -> FsResult<&Inode> {
        let inode = self.inode(ino)?;
        match inode.payload {
            Payload::File(_) => Ok(inode),
            Payload::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    fn apply_write(
        &mut self,
        ino: Ino,
        offset: u64,
        data: &[u8],
        time_ns: TimeNs,
        kill_suidgid: bool,
    ) -> FsResult<()> {
        let inode = self.regular_file(ino)?;
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > FILE_SIZE_BYTES_MAX {
            return Err(Errno::EFBIG);
        }
        let file = inode.file().expect("regular file");
        self.budget
            .check(file.write_growth_bytes(offset, data.len()))?;
        self.change_contents(ino, |c| c.write(offset, data))?;
        let inode = self.table.get_mut(ino).expect("inode");
        if !data.is_empty() {
            inode.size_bytes = inode.size_bytes.max(end);
        }
        inode.mtime_ns = time_ns;
        inode.ctime_ns = time_ns;
        let strip = if kill_suidgid {
            Strip::KernelFlagged
        } else {
            Strip::Nothing
        };
        let freed = kill_privileges(inode, strip);
        self.budget.apply(freed);
        Ok(())
    }

    fn apply_fallocate(
        &mut self,
        ino: Ino,
        offset: u64,
        length: u64,
        mode: i32,
        time_ns: TimeNs,
    ) -> FsResult<()> {
        let inode = self.regular_file(ino)?;
        check_fallocate(offset, length, mode)?;
        let end = offset + length;
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & FALLOC_FL_ZERO_RANGE != 0;
        // Allocation (mode 0, KEEP_SIZE, ZERO_RANGE) reserves the range's memory now, as
        // tmpfs and disk file systems do, so that writes into it cannot fail with ENOSPC. A
        // punched or zeroed range gives its bytes back first, so it needs at most the rest.
        let file = inode.file().expect("regular file");
        let reserve = !punch;
        if reserve {
            self.budget
                .check(file.reserve_growth_bytes(offset, length))?;
        }
        let on_disk = file.tier() == Tier::Disk;
        if punch || zero {
            self.change_contents(ino, |c| c.punch_hole(offset, length))?;
            if on_disk {
                self.note_host_trim(ino, offset, length);
            }
        }
        if reserve {
            let size_before = self.regular_file(ino)?.size_bytes;
            let size_after = if keep_size {
                size_before
            } else {
                size_before.max(end)
            };
            self.change_contents(ino, |c| {
                let delta = c.reserve(offset, length, size_after)?;
                debug_assert!(
                    on_disk || delta.stored_bytes == 0,
                    "a reservation in memory stores nothing"
                );
                Ok(delta)
            })?;
        }
        let inode = self.table.get_mut(ino).expect("inode");
        if punch || zero {
            inode.mtime_ns = time_ns;
        }
        if !keep_size && end > inode.size_bytes {
            inode.size_bytes = end;
            inode.mtime_ns = time_ns;
        }
        inode.ctime_ns = time_ns;
        Ok(())
    }

    fn apply_setxattr(
        &mut self,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: i32,
        time_ns: TimeNs,
    ) -> FsResult<()> {
        if crate::acl::is_acl_name(name) {
            return self.apply_acl_setxattr(ino, name, value, flags, time_ns);
        }
        let inode = self.inode(ino)?;
        let empty = Xattrs::default();
        let current = inode.xattrs.as_deref().unwrap_or(&empty);
        let growth = current.check_set(name, value, flags)?;
        self.budget.check(growth)?;
        let inode = self.table.get_mut(ino).expect("inode");
        let xattrs = inode.xattrs.get_or_insert_with(Default::default);
        let before = xattrs.heap_bytes() as i64;
        xattrs.set(name, value);
        let delta = xattrs.heap_bytes() as i64 - before;
        inode.ctime_ns = time_ns;
        self.budget.apply(delta);
        if name == CATEGORY_XATTR {
            self.recount_category(ino);
        }
        Ok(())
    }

    fn apply_removexattr(&mut self, ino: Ino, name: &[u8], time_ns: TimeNs) -> FsResult<()> {
        let inode = self.table.get_mut(ino)?;
        xattr::check_name(name)?;
        let xattrs = inode.xattrs.as_mut().ok_or(Errno::ENODATA)?;
        let before = xattrs.heap_bytes() as i64;
        xattrs.remove(name)?;
        let after = xattrs.heap_bytes() as i64;
        if xattrs.is_empty() {
            inode.xattrs = None;
        }
        inode.ctime_ns = time_ns;
        self.budget.apply(after - before);
        if inode.xattrs.is_none() {
            // The emptied list's capacity is gone with it.
            self.budget.apply(-after);
        }
        if name == CATEGORY_XATTR {
            self.recount_category(ino);
        }
        Ok(())
    }

    /// The category attribute of `ino` changed: its file and bytes move to the new slot.
    fn recount_category(&mut self, ino: Ino) {
        let Ok(inode) = self.table.get(ino) else {
            return;
        };
        let (old, xattrs) = (inode.category, inode.xattrs.as_deref());
        let new = self.categories.slot_of(xattrs);
        if new == old {
            return;
        }
        let inode = self.table.get_mut(ino).expect("inode");
        inode.category = new;
        if let Some(f) = inode.file() {
            super::count_category(&mut self.categories, old, f, -1);
            super::count_category(&mut self.categories, new, f, 1);
        }
    }

    fn apply_set_durability(&mut self, ino: Ino, code: u8, time_ns: TimeNs) -> FsResult<()> {
        let inode = self.table.get_mut(ino)?;
        if Durability::from_code(code) == Durability::Volatile
            && !matches!(inode.payload, Payload::File(_))
        {
            // A directory's contents, a link target: volatility is for regular files (a
            // directory takes the strongest persistence of what it holds, DESIGN.md §4).
            return Err(Errno::EINVAL);
        }
        inode.durability = code;
        inode.ctime_ns = time_ns;
        Ok(())
    }
}

/// The checks of a fallocate that need no state: its length, its end, its mode. The disk tier
/// runs them before it touches a host file (an invalid mode changes nothing).
pub(crate) fn check_fallocate(offset: u64, length: u64, mode: i32) -> FsResult<()> {
    if length == 0 {
        return Err(Errno::EINVAL);
    }
    let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
    let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
    let punch = mode & FALLOC_FL_PUNCH_HOLE != 0;
    let zero = mode & FALLOC_FL_ZERO_RANGE != 0;
    if mode & !(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0
        || (punch && (!keep_size || zero))
    {
        return Err(Errno::EOPNOTSUPP);
    }
    if !keep_size && end > FILE_SIZE_BYTES_MAX {
        return Err(Errno::EFBIG);
    }
    Ok(())
}

//! The engine: the whole file system state behind one reader-writer lock, and the one path
//! ([`State::apply`]) through which every mutation passes as an [`Op`].
//!
//! Reads (lookup, getattr, read, readdir) share the lock; mutations take it exclusively. One
//! lock keeps multi-directory operations (rename) trivially atomic; the critical sections are
//! short memory operations, so on the machines we target the lock is not the bottleneck (see
//! docs/decisions/0002-one-engine-lock.md).
//!
//! Public methods build an `Op` (taking the time, choosing the inode number), apply it, and
//! hand it to the [`OpSink`] (the persistence engine, later). `apply` validates everything
//! before it changes anything, so a failed op leaves no trace.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::attr::{Attr, Durability, FileKind, Ino, SetAttr, SetTime, StatFs, Stats, ROOT_INO};
use crate::error::{Errno, FsResult};
use crate::memory::budget::Budget;
use crate::memory::file_data::{FileData, FILE_SIZE_MAX_BYTES};
use crate::namespace::dir::{Dir, NAME_LEN_MAX};
use crate::namespace::inode::{Inode, Payload};
use crate::namespace::table::InodeTable;
use crate::op::{
    Op, OpSink, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, RENAME_EXCHANGE,
    RENAME_NOREPLACE,
};
use crate::time::{file_time_ns, TimeNs};
use crate::xattr::{self, Xattrs};

/// Most links to one inode (and subdirectories of one directory).
pub const LINK_COUNT_MAX: u32 = u32::MAX / 2;
/// Longest symlink target, in bytes (PATH_MAX without its NUL).
pub const SYMLINK_TARGET_LEN_MAX: usize = 4095;
/// Block size reported by statfs and stat.
pub const BLOCK_SIZE: u32 = 4096;
/// Bytes charged to the budget for one directory entry besides its name.
const ENTRY_COST_BYTES: u64 = 24;
/// relatime: an access time older than this is refreshed on read.
const RELATIME_INTERVAL_NS: i64 = 24 * 3600 * 1_000_000_000;

/// Who asks: the owner of new inodes, and whether the caller is the kernel (whose lookups are
/// counted, and which needs no cache invalidation for the changes it makes itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
    pub kernel: bool,
}

impl Ctx {
    /// A library caller acting as `uid:gid`.
    pub fn library(uid: u32, gid: u32) -> Ctx {
        Ctx {
            uid,
            gid,
            kernel: false,
        }
    }
}

/// Who sets a regular file's mtime and ctime when it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteTimes {
    /// The engine, with the time of the write (a library, or FUSE without writeback cache).
    Stamp,
    /// The kernel (FUSE's writeback cache): a write leaves them as they are, and the kernel
    /// sends its own with SETATTR. Not when the write drops setuid/setgid: that changes ctime.
    KeptByKernel,
}

/// What the kernel may have cached that a change from outside it made stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalidation {
    /// An entry of a directory (its name now points elsewhere, or nowhere).
    Entry { parent: Ino, name: Vec<u8> },
    /// The attributes and data of an inode.
    Inode { ino: Ino },
}

/// Told of changes made by library callers, so that a mount can invalidate the kernel's caches.
pub trait Observer: Send + Sync {
    fn invalidate(&self, what: &[Invalidation]);
}

/// Settings of an engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub memory_cap_bytes: u64,
    pub root_uid: u32,
    pub root_gid: u32,
    pub root_mode: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_cap_bytes: crate::memory::budget::default_cap_bytes(),
            root_uid: 0,
            root_gid: 0,
            root_mode: 0o755,
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    files: u64,
    directories: u64,
    symlinks: u64,
    other: u64,
    data_bytes: u64,
}

impl Counts {
    fn slot(&mut self, kind: FileKind) -> &mut u64 {
        match kind {
            FileKind::RegularFile => &mut self.files,
            FileKind::Directory => &mut self.directories,
            FileKind::Symlink => &mut self.symlinks,
            _ => &mut self.other,
        }
    }
}

/// Everything behind the lock.
#[derive(Debug)]
pub struct State {
    table: InodeTable,
    budget: Budget,
    counts: Counts,
}

/// The file-system engine. Shared between threads (`Arc<Engine>`).
pub struct Engine {
    state: RwLock<State>,
    sink: RwLock<Option<Arc<dyn OpSink>>>,
    observer: RwLock<Option<Arc<dyn Observer>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

fn check_entry_name(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_LEN_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn inode_base_cost(inode: &Inode) -> u64 {
    let payload = match &inode.payload {
        Payload::Dir(_) => std::mem::size_of::<Dir>(),
        Payload::Symlink(t) => t.len(),
        _ => 0,
    };
    (std::mem::size_of::<Inode>() + payload) as u64
}

fn entry_cost(name: &[u8]) -> u64 {
    ENTRY_COST_BYTES + name.len() as u64
}

fn resolve_time(t: SetTime, now: TimeNs) -> TimeNs {
    match t {
        SetTime::At(ns) => ns,
        SetTime::Now => now,
    }
}

impl State {
    /// Every live inode, in increasing number order (the checkpoint writes them so).
    pub(crate) fn inodes(&self) -> impl Iterator<Item = (Ino, &Inode)> {
        self.table.iter()
    }

    /// Replay turns the memory cap off (see `Budget::set_enforced`).
    pub(crate) fn set_replaying(&mut self, replaying: bool) {
        self.budget.set_enforced(!replaying);
    }

    pub(crate) fn next_generation(&self) -> u32 {
        self.table.next_generation()
    }

    /// Builds a state from whole inodes (a checkpoint): the memory charge and the counts are
    /// recomputed and every invariant is checked. Structural errors (no root, a repeated
    /// number) are refused; broken invariants are returned beside the state, for the caller
    /// to refuse or to repair.
    pub(crate) fn from_inodes(
        config: &EngineConfig,
        next_generation: u32,
        inodes: Vec<(Ino, Inode)>,
    ) -> Result<(State, Vec<String>), Vec<String>> {
        let mut state = State {
            table: InodeTable::new(),
            budget: Budget::new(config.memory_cap_bytes),
            counts: Counts::default(),
        };
        let mut charged = 0u64;
        for (ino, inode) in inodes {
            if ino == 0 || state.table.get(ino).is_ok() || ino > crate::namespace::table::INODES_MAX
            {
                return Err(vec![format!("inode number {ino} is invalid or repeated")]);
            }
            charged += inode_charge(&inode);
            if let Some(d) = inode.dir() {
                d.list_from(0, |e| {
                    charged += entry_cost(e.name);
                    true
                });
            }
            *state.counts.slot(inode.kind()) += 1;
            if let Some(f) = inode.file() {
                state.counts.data_bytes += f.stored_bytes();
            }
            state.table.insert(ino, inode);
        }
        state.budget.set_table_bytes(state.table.heap_bytes());
        state.table.raise_next_generation(next_generation);
        if state.table.get(ROOT_INO).map(|r| r.is_dir()) != Ok(true) {
            return Err(vec!["there is no root directory".into()]);
        }
        state.budget.apply(charged as i64);
        let problems = state.check();
        Ok((state, problems))
    }

    /// A new, empty file system: just the root directory.
    pub(crate) fn new(config: &EngineConfig) -> State {
        let mut state = State {
            table: InodeTable::new(),
            budget: Budget::new(config.memory_cap_bytes),
            counts: Counts::default(),
        };
        let now = file_time_ns();
        let root = Inode {
            mode: libc::S_IFDIR | (config.root_mode & 0o7777),
            uid: config.root_uid,
            gid: config.root_gid,
            nlink: 2,
            generation: 0,
            durability: Durability::default().code(),
            lookups: AtomicU64::new(0),
            size_bytes: 0,
            atime_ns: AtomicI64::new(now),
            mtime_ns: now,
            ctime_ns: now,
            payload: Payload::Dir(Box::new(Dir::new(ROOT_INO))),
            xattrs: None,
        };
        let (ino, _) = state.table.next_allocation().expect("empty table");
        assert_eq!(ino, ROOT_INO);
        state.budget.apply(inode_base_cost(&root) as i64);
        state.table.insert(ROOT_INO, root);
        state.budget.set_table_bytes(state.table.heap_bytes());
        state.counts.directories = 1;
        state
    }

    fn inode(&self, ino: Ino) -> FsResult<&Inode> {
        self.table.get(ino)
    }

    fn dir(&self, ino: Ino) -> FsResult<&Dir> {
        self.inode(ino)?.dir().ok_or(Errno::ENOTDIR)
    }

    /// A directory that can still get entries (not removed).
    fn live_dir(&self, ino: Ino) -> FsResult<&Inode> {
        let inode = self.inode(ino)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if inode.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        Ok(inode)
    }

    fn child(&self, parent: Ino, name: &[u8]) -> FsResult<(Ino, u8)> {
        if name.len() > NAME_LEN_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.dir(parent)?.get(name).ok_or(Errno::ENOENT)
    }

    fn dir_mut(&mut self, ino: Ino) -> &mut Dir {
        self.table
            .get_mut(ino)
            .ok()
            .and_then(Inode::dir_mut)
            .expect("validated directory")
    }

    fn touch_dir(&mut self, ino: Ino, time_ns: TimeNs) {
        if let Ok(d) = self.table.get_mut(ino) {
            d.mtime_ns = time_ns;
            d.ctime_ns = time_ns;
        }
    }

    /// Frees an inode that has no links and no kernel references left.
    fn free_if_unreferenced(&mut self, ino: Ino) {
        let inode = match self.table.get(ino) {
            Ok(i) => i,
            Err(_) => return,
        };
        if ino == ROOT_INO || inode.nlink > 0 || inode.lookups.load(Ordering::Acquire) > 0 {
            return;
        }
        let inode = self.table.remove(ino);
        self.budget.set_table_bytes(self.table.heap_bytes());
        self.budget.apply(-(inode_charge(&inode) as i64));
        *self.counts.slot(inode.kind()) -= 1;
        if let Payload::File(f) = &inode.payload {
            self.counts.data_bytes -= f.stored_bytes();
        }
    }

    fn drop_link(&mut self, ino: Ino, time_ns: TimeNs) {
        let inode = self.table.get_mut(ino).expect("validated inode");
        debug_assert!(inode.nlink > 0);
        inode.ctime_ns = time_ns;
        if inode.is_dir() {
            inode.nlink = 0;
        } else {
            inode.nlink -= 1;
        }
        self.free_if_unreferenced(ino);
    }

    /// True if `ancestor` is `ino` or one of its ancestors.
    fn is_ancestor(&self, ancestor: Ino, mut ino: Ino) -> FsResult<bool> {
        // Bounded by the number of directories: parents form a tree rooted at ROOT_INO.
        let mut steps = 0u64;
        loop {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            ino = self.dir(ino)?.parent;
            steps += 1;
            debug_assert!(
                steps <= self.counts.directories,
                "cycle in the directory tree"
            );
            if steps > self.counts.directories {
                return Err(Errno::EIO);
            }
        }
    }

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
        }
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
        if parent_inode.dir().expect("dir").get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        if kind == FileKind::Directory && parent_inode.nlink >= LINK_COUNT_MAX {
            return Err(Errno::EMLINK);
        }
        if kind == FileKind::Symlink {
            if target.is_empty() {
                return Err(Errno::ENOENT);
            }
            if target.len() > SYMLINK_TARGET_LEN_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
        }
        if self.table.get(ino).is_ok() || ino == 0 {
            return Err(Errno::EIO);
        }
        let payload = match kind {
            FileKind::RegularFile => Payload::File(FileData::default()),
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
        if inode.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if inode.nlink >= LINK_COUNT_MAX {
            return Err(Errno::EMLINK);
        }
        let kind = inode.kind();
        if self
            .live_dir(parent)?
            .dir()
            .expect("dir")
            .get(name)
            .is_some()
        {
            return Err(Errno::EEXIST);
        }
        let cost = entry_cost(name);
        self.budget.check(cost)?;
        self.budget.apply(cost as i64);
        self.dir_mut(parent).insert(name, ino, kind.code());
        let inode = self.table.get_mut(ino).expect("inode");
        inode.nlink += 1;
        inode.ctime_ns = time_ns;
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

    fn apply_rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        flags: u32,
        time_ns: TimeNs,
    ) -> FsResult<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Errno::EINVAL);
        }
        check_entry_name(new_name)?;
        let (src, src_code) = self.child(parent, name)?;
        self.live_dir(new_parent)?;
        let dst = self.dir(new_parent)?.get(new_name);
        let src_is_dir = FileKind::from_code(src_code) == Some(FileKind::Directory);

        if flags & RENAME_EXCHANGE != 0 {
            let (dst, dst_code) = dst.ok_or(Errno::ENOENT)?;
            if src == dst {
                return Ok(());
            }
            let dst_is_dir = FileKind::from_code(dst_code) == Some(FileKind::Directory);
            if (src_is_dir && self.is_ancestor(src, new_parent)?)
                || (dst_is_dir && self.is_ancestor(dst, parent)?)
            {
                return Err(Errno::EINVAL);
            }
            self.dir_mut(parent).replace(name, dst, dst_code);
            self.dir_mut(new_parent).replace(new_name, src, src_code);
            if parent != new_parent && src_is_dir != dst_is_dir {
                let (into_new, into_old) = if src_is_dir { (1, -1) } else { (-1, 1) };
                let p = self.table.get_mut(parent).expect("parent");
                p.nlink = p.nlink.wrapping_add_signed(into_old);
                let np = self.table.get_mut(new_parent).expect("new parent");
                np.nlink = np.nlink.wrapping_add_signed(into_new);
            }
            if src_is_dir {
                self.dir_mut(src).parent = new_parent;
            }
            if dst_is_dir {
                self.dir_mut(dst).parent = parent;
            }
            for ino in [src, dst] {
                self.table.get_mut(ino).expect("inode").ctime_ns = time_ns;
            }
            self.touch_dir(parent, time_ns);
            self.touch_dir(new_parent, time_ns);
            return Ok(());
        }

        if let Some((dst, dst_code)) = dst {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(Errno::EEXIST);
            }
            if dst == src {
                // Two names of one inode (or the same name): POSIX says do nothing.
                return Ok(());
            }
            let dst_is_dir = FileKind::from_code(dst_code) == Some(FileKind::Directory);
            match (src_is_dir, dst_is_dir) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                (true, true) if !self.dir(dst)?.is_empty() => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
        }
        if src_is_dir && self.is_ancestor(src, new_parent)? {
            return Err(Errno::EINVAL);
        }
        if src_is_dir
            && parent != new_parent
            && dst.is_none()
            && self.inode(new_parent)?.nlink >= LINK_COUNT_MAX
        {
            return Err(Errno::EMLINK);
        }
        let cost = entry_cost(new_name) as i64 - entry_cost(name) as i64;
        if dst.is_none() && cost > 0 {
            self.budget.check(cost as u64)?;
        }
        // Validation is over.
        self.dir_mut(parent).remove(name);
        self.budget.apply(-(entry_cost(name) as i64));
        if let Some((dst, dst_code)) = dst {
            let dst_is_dir = FileKind::from_code(dst_code) == Some(FileKind::Directory);
            self.dir_mut(new_parent).replace(new_name, src, src_code);
            if dst_is_dir {
                let np = self.table.get_mut(new_parent).expect("new parent");
                np.nlink -= 1;
            }
            self.drop_link(dst, time_ns);
        } else {
            self.dir_mut(new_parent).insert(new_name, src, src_code);
            self.budget.apply(entry_cost(new_name) as i64);
        }
        if src_is_dir {
            self.dir_mut(src).parent = new_parent;
            if parent != new_parent {
                self.table.get_mut(parent).expect("parent").nlink -= 1;
                self.table.get_mut(new_parent).expect("new parent").nlink += 1;
            }
        }
        self.table.get_mut(src).expect("source").ctime_ns = time_ns;
        self.touch_dir(parent, time_ns);
        self.touch_dir(new_parent, time_ns);
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
            if size > FILE_SIZE_MAX_BYTES {
                return Err(Errno::EFBIG);
            }
        }
        let inode = self.table.get_mut(ino).expect("inode");
        if let Some(size) = size_bytes {
            // Growing exposes zeros (no chunk holds bytes past the size) and keeps what
            // fallocate reserved past the end, as ext4 does; only shrinking drops bytes.
            let shrinking = size < inode.size_bytes;
            if let (true, Payload::File(f)) = (shrinking, &mut inode.payload) {
                let delta = f.truncate(size);
                self.budget.apply(delta.heap_bytes);
                self.counts.data_bytes = self
                    .counts
                    .data_bytes
                    .wrapping_add_signed(delta.stored_bytes);
            }
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

    fn regular_file(&self, ino: Ino) -> FsResult<&Inode> {
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
        if end > FILE_SIZE_MAX_BYTES {
            return Err(Errno::EFBIG);
        }
        let file = inode.file().expect("file");
        self.budget
            .check(file.growth_bound_bytes(offset, data.len()))?;
        let inode = self.table.get_mut(ino).expect("inode");
        if let Payload::File(f) = &mut inode.payload {
            let delta = f.write(offset, data);
            self.budget.apply(delta.heap_bytes);
            self.counts.data_bytes = self
                .counts
                .data_bytes
                .wrapping_add_signed(delta.stored_bytes);
        }
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
        if !keep_size && end > FILE_SIZE_MAX_BYTES {
            return Err(Errno::EFBIG);
        }
        // Allocation (mode 0, KEEP_SIZE, ZERO_RANGE) reserves the range's memory now, as
        // tmpfs and disk file systems do, so that writes into it cannot fail with ENOSPC. A
        // punched or zeroed range gives its bytes back first, so it needs at most the rest.
        let file = inode.file().expect("file");
        let reserve = !punch;
        if reserve {
            self.budget
                .check(file.reserve_growth_bytes(offset, length))?;
        }
        let inode = self.table.get_mut(ino).expect("inode");
        if let Payload::File(f) = &mut inode.payload {
            if punch || zero {
                let delta = f.punch_hole(offset, length);
                self.budget.apply(delta.heap_bytes);
                self.counts.data_bytes = self
                    .counts
                    .data_bytes
                    .wrapping_add_signed(delta.stored_bytes);
            }
            if reserve {
                let delta = f.reserve(offset, length);
                debug_assert_eq!(delta.stored_bytes, 0);
                self.budget.apply(delta.heap_bytes);
            }
        }
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
        Ok(())
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

    /// What an applied op must honour: data ops the inode's own durability; namespace ops are
    /// always persisted (so that replay sees the structure the later ops expect) and are
    /// before-return when their directory is.
    fn op_durability(&self, op: &Op<'_>) -> Durability {
        let of = |ino: Ino| {
            self.table
                .get(ino)
                .map_or(Durability::default(), Inode::durability)
        };
        let namespace = |parents: &[Ino]| {
            parents
                .iter()
                .fold(Durability::default(), |d, &p| d.stronger(of(p)))
        };
        // An inode with no names left (unlinked while open) is gone at the next restart: its
        // changes must not reach the journal, where replay would find no inode to apply
        // them to.
        let orphan = |ino: Ino| self.table.get(ino).map_or(true, |i| i.nlink == 0);
        // A volatile file's data never reaches the store; its metadata does (cheap), so that
        // making it durable again only needs its data re-journaled.
        let data = |ino: Ino| match of(ino) {
            Durability::Volatile => Durability::Volatile,
            d => d,
        };
        let metadata = |ino: Ino| Durability::default().stronger(of(ino));
        match *op {
            Op::Write { ino, .. } | Op::Fallocate { ino, .. } if orphan(ino) => {
                Durability::Volatile
            }
            Op::SetAttr { ino, .. }
            | Op::SetXattr { ino, .. }
            | Op::RemoveXattr { ino, .. }
            | Op::SetDurability { ino, .. }
                if orphan(ino) =>
            {
                Durability::Volatile
            }
            Op::Write { ino, .. } | Op::Fallocate { ino, .. } => data(ino),
            Op::SetAttr {
                ino,
                size_bytes: Some(_),
                ..
            } => data(ino),
            Op::SetAttr { ino, .. } | Op::SetXattr { ino, .. } | Op::RemoveXattr { ino, .. } => {
                metadata(ino)
            }
            Op::SetDurability { ino, .. } => metadata(ino),
            Op::Create { parent, ino, .. } => namespace(&[parent]).stronger(of(ino)),
            Op::Link { parent, ino, .. } => namespace(&[parent]).stronger(of(ino)),
            Op::Unlink { parent, .. } | Op::Rmdir { parent, .. } => namespace(&[parent]),
            Op::Rename {
                parent, new_parent, ..
            } => namespace(&[parent, new_parent]),
        }
    }

    /// Removes every volatile file (all its names): what a restart does to them. Returns how
    /// many there were.
    /// Removes every directory entry naming one of `inos`; returns the budget those entries
    /// were charged.
    fn remove_names_of(&mut self, inos: &std::collections::HashSet<Ino>) -> u64 {
        let dirs: Vec<Ino> = self
            .table
            .iter()
            .filter(|(_, i)| i.is_dir())
            .map(|(n, _)| n)
            .collect();
        let mut charged = 0;
        for dir in dirs {
            let mut names = Vec::new();
            if let Some(d) = self.table.get(dir).ok().and_then(Inode::dir) {
                d.list_from(0, |e| {
                    if inos.contains(&e.ino) {
                        names.push(e.name.to_vec());
                    }
                    true
                });
            }
            for name in names {
                self.dir_mut(dir).remove(&name);
                charged += entry_cost(&name);
            }
        }
        charged
    }

    pub(crate) fn drop_volatile(&mut self) -> u64 {
        let volatile: std::collections::HashSet<Ino> = self
            .table
            .iter()
            .filter(|(_, i)| i.durability() == Durability::Volatile)
            .map(|(n, _)| n)
            .collect();
        if volatile.is_empty() {
            return 0;
        }
        let freed = self.remove_names_of(&volatile);
        self.budget.apply(-(freed as i64));
        for &ino in &volatile {
            if let Ok(inode) = self.table.get_mut(ino) {
                inode.nlink = 0;
            }
            self.free_if_unreferenced(ino);
        }
        volatile.len() as u64
    }

    /// The directory /lost+found, made if missing (as /lost+found.fsck if a non-directory has
    /// the name).
    fn lost_and_found(&mut self) -> Ino {
        match self.child(ROOT_INO, b"lost+found") {
            Ok((ino, _)) if self.table.get(ino).is_ok_and(Inode::is_dir) => ino,
            taken => {
                let name: &[u8] = if taken.is_ok() {
                    b"lost+found.fsck"
                } else {
                    b"lost+found"
                };
                let (ino, generation) = self.table.next_allocation().expect("room for one");
                let op = Op::Create {
                    parent: ROOT_INO,
                    name,
                    ino,
                    generation,
                    mode: libc::S_IFDIR | 0o700,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    target: b"",
                    time_ns: file_time_ns(),
                };
                self.apply(&op).expect("creating lost+found");
                ino
            }
        }
    }

    /// Inodes reachable from `start` through directory entries (including `start`).
    fn reachable_from(&self, start: Ino, seen: &mut std::collections::HashSet<Ino>) {
        let mut stack = vec![start];
        while let Some(ino) = stack.pop() {
            if !seen.insert(ino) {
                continue;
            }
            if let Some(d) = self.table.get(ino).ok().and_then(Inode::dir) {
                d.list_from(0, |e| {
                    if !seen.contains(&e.ino) && self.table.get(e.ino).is_ok() {
                        stack.push(e.ino);
                    }
                    true
                });
            }
        }
    }

    /// Repairs what `check` finds, in the manner of e2fsck: entries naming missing inodes are
    /// removed, entry kinds corrected, extra names of a directory dropped, parents and link
    /// counts recomputed from the entries, and inodes no entry reaches are linked into
    /// `/lost+found` as `#<ino>` (nothing with data is thrown away). Returns what it did.
    pub fn repair(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        let inos: Vec<Ino> = self.table.iter().map(|(i, _)| i).collect();
        // 1. Entries: drop those naming missing inodes, fix kinds, keep one name per directory.
        let mut dir_named: HashMap<Ino, Ino> = HashMap::new();
        for &dir_ino in &inos {
            let Some(dir) = self.table.get(dir_ino).ok().and_then(Inode::dir) else {
                continue;
            };
            let mut entries = Vec::new();
            dir.list_from(0, |e| {
                entries.push((e.name.to_vec(), e.ino, e.kind_code));
                true
            });
            for (name, child, code) in entries {
                let shown = String::from_utf8_lossy(&name).into_owned();
                let fix = match self.table.get(child) {
                    Err(_) => Some(None),
                    Ok(c)
                        if c.is_dir() && (child == ROOT_INO || dir_named.contains_key(&child)) =>
                    {
                        Some(None)
                    }
                    Ok(c) if c.kind().code() != code => Some(Some(c.kind().code())),
                    Ok(c) => {
                        if c.is_dir() {
                            dir_named.insert(child, dir_ino);
                        }
                        None
                    }
                };
                let d = self.dir_mut(dir_ino);
                match fix {
                    Some(None) => {
                        d.remove(&name);
                        done.push(format!("removed entry {shown:?} of directory {dir_ino}"));
                    }
                    Some(Some(kind)) => {
                        d.replace(&name, child, kind);
                        done.push(format!(
                            "corrected the kind of entry {shown:?} in {dir_ino}"
                        ));
                    }
                    None => {}
                }
            }
        }
        // 2. Inodes the root does not reach go to /lost+found: directories first (each taken
        //    out of wherever it was named, which also breaks cycles cut off from the root),
        //    then what is still unreached.
        let mut reached = std::collections::HashSet::new();
        self.reachable_from(ROOT_INO, &mut reached);
        let mut unreached: Vec<Ino> = inos
            .iter()
            .copied()
            .filter(|i| !reached.contains(i))
            .collect();
        unreached.sort_by_key(|&i| (!self.table.get(i).is_ok_and(Inode::is_dir), i));
        let mut found = None;
        for ino in unreached {
            if reached.contains(&ino) {
                continue;
            }
            let kind = self.table.get(ino).expect("inode").kind();
            if kind == FileKind::Directory {
                // (The accounting is recomputed at the end.)
                self.remove_names_of(&std::collections::HashSet::from([ino]));
            }
            let found = *found.get_or_insert_with(|| self.lost_and_found());
            let name = format!("#{ino}");
            self.dir_mut(found)
                .insert(name.as_bytes(), ino, kind.code());
            if kind == FileKind::Directory {
                dir_named.insert(ino, found);
            }
            self.reachable_from(ino, &mut reached);
            done.push(format!(
                "linked unreachable inode {ino} as /lost+found/{name}"
            ));
        }
        // 3. Parents and link counts from the entries.
        let mut names: HashMap<Ino, u32> = HashMap::new();
        let mut subdirs: HashMap<Ino, u32> = HashMap::new();
        for (dir_ino, inode) in self.table.iter() {
            if let Some(d) = inode.dir() {
                d.list_from(0, |e| {
                    *names.entry(e.ino).or_default() += 1;
                    if FileKind::from_code(e.kind_code) == Some(FileKind::Directory) {
                        *subdirs.entry(dir_ino).or_default() += 1;
                    }
                    true
                });
            }
        }
        for ino in self.table.iter().map(|(i, _)| i).collect::<Vec<_>>() {
            let inode = self.table.get_mut(ino).expect("inode");
            let expected = if inode.is_dir() {
                2 + subdirs.get(&ino).copied().unwrap_or(0)
            } else {
                names.get(&ino).copied().unwrap_or(0)
            };
            if inode.nlink != expected {
                done.push(format!(
                    "inode {ino}: link count {} set to {expected}",
                    inode.nlink
                ));
                inode.nlink = expected;
            }
            let parent = if ino == ROOT_INO {
                Some(ROOT_INO)
            } else {
                dir_named.get(&ino).copied()
            };
            if let (Some(d), Some(parent)) = (inode.dir_mut(), parent) {
                if d.parent != parent {
                    done.push(format!("directory {ino}: parent set to {parent}"));
                    d.parent = parent;
                }
            }
        }
        // 4. The accounting, recomputed.
        let mut counts = Counts::default();
        let mut charged = 0u64;
        for (_, inode) in self.table.iter() {
            *counts.slot(inode.kind()) += 1;
            charged += inode_charge(inode);
            if let Some(f) = inode.file() {
                counts.data_bytes += f.stored_bytes();
            }
            if let Some(d) = inode.dir() {
                d.list_from(0, |e| {
                    charged += entry_cost(e.name);
                    true
                });
            }
        }
        if counts != self.counts || charged != self.budget.used_bytes() {
            done.push("recomputed counts and memory accounting".into());
            self.counts = counts;
            let used = self.budget.used_bytes() as i64;
            self.budget.apply(charged as i64 - used);
        }
        done
    }

    /// Checks every invariant of the namespace and the accounting; returns what is wrong.
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut names_per_inode: std::collections::HashMap<Ino, u32> = Default::default();
        let mut subdirs: std::collections::HashMap<Ino, u32> = Default::default();
        let mut counts = Counts::default();
        let mut budget = 0u64;
        for (ino, inode) in self.table.iter() {
            *counts.slot(inode.kind()) += 1;
            budget += inode_charge(inode);
            match &inode.payload {
                Payload::File(f) => {
                    counts.data_bytes += f.stored_bytes();
                    if let Err(e) = f.check(inode.size_bytes) {
                        problems.push(format!("inode {ino}: {e}"));
                    }
                }
                Payload::Dir(d) => {
                    if let Err(e) = d.check() {
                        problems.push(format!("directory {ino}: {e}"));
                    }
                    d.list_from(0, |e| {
                        budget += entry_cost(e.name);
                        *names_per_inode.entry(e.ino).or_default() += 1;
                        match self.table.get(e.ino) {
                            Err(_) => problems.push(format!(
                                "directory {ino}: entry {:?} points to free inode {}",
                                String::from_utf8_lossy(e.name),
                                e.ino
                            )),
                            Ok(child) => {
                                if child.kind().code() != e.kind_code {
                                    problems.push(format!("directory {ino}: entry kind differs"));
                                }
                                if let Some(cd) = child.dir() {
                                    *subdirs.entry(ino).or_default() += 1;
                                    if cd.parent != ino {
                                        problems.push(format!(
                                            "directory {} is in {ino} but says its parent is {}",
                                            e.ino, cd.parent
                                        ));
                                    }
                                }
                            }
                        }
                        true
                    });
                }
                _ => {}
            }
        }
        for (ino, inode) in self.table.iter() {
            let names = names_per_inode.get(&ino).copied().unwrap_or(0);
            let expected = if inode.is_dir() {
                if inode.nlink == 0 {
                    0
                } else {
                    2 + subdirs.get(&ino).copied().unwrap_or(0)
                }
            } else {
                names
            };
            if inode.nlink != expected {
                problems.push(format!(
                    "inode {ino}: nlink {} but {expected} expected",
                    inode.nlink
                ));
            }
            if inode.is_dir() && ino != ROOT_INO && inode.nlink > 0 && names != 1 {
                problems.push(format!("directory {ino} has {names} names"));
            }
            if inode.nlink == 0 && inode.lookups.load(Ordering::Relaxed) == 0 && ino != ROOT_INO {
                problems.push(format!("inode {ino} is unreferenced but not freed"));
            }
        }
        let mut reached = std::collections::HashSet::new();
        self.reachable_from(ROOT_INO, &mut reached);
        for (ino, inode) in self.table.iter() {
            if inode.nlink > 0 && !reached.contains(&ino) {
                problems.push(format!("inode {ino} is not reachable from the root"));
            }
        }
        if counts != self.counts {
            problems.push(format!(
                "counts {:?} but {:?} recorded",
                counts, self.counts
            ));
        }
        if budget != self.budget.used_bytes() {
            problems.push(format!(
                "memory used is {budget} but {} recorded",
                self.budget.used_bytes()
            ));
        }
        let table_bytes = self.budget.table_bytes();
        if table_bytes != self.table.heap_bytes() {
            problems.push(format!(
                "the inode table holds {} bytes but {table_bytes} are recorded",
                self.table.heap_bytes()
            ));
        }
        problems
    }
}

/// Which mode bits a write, truncate or chown takes away.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strip {
    Nothing,
    /// Setuid, and setgid when the group may execute (chown, unprivileged truncate).
    SetuidAndExecSetgid,
    /// The kernel flagged a write (it has decided that something must go): setuid, and
    /// setgid when the group may execute or when there is no setuid bit (then the flag can
    /// only be about setgid, e.g. a writer outside the file's group).
    KernelFlagged,
}

/// What a write, truncate or chown does to privileges, as the VFS does for local file
/// systems: drop `security.capability`, and clear mode bits as `strip` says. Returns the
/// budget change.
fn kill_privileges(inode: &mut Inode, strip: Strip) -> i64 {
    if strip != Strip::Nothing {
        let had_setuid = inode.mode & libc::S_ISUID != 0;
        inode.mode &= !libc::S_ISUID;
        let group_exec = inode.mode & libc::S_IXGRP != 0;
        if group_exec || (strip == Strip::KernelFlagged && !had_setuid) {
            inode.mode &= !libc::S_ISGID;
        }
    }
    let Some(xattrs) = inode.xattrs.as_mut() else {
        return 0;
    };
    if xattrs.get(CAPABILITY_XATTR).is_none() {
        return 0;
    }
    let before = xattrs.heap_bytes() as i64;
    let _ = xattrs.remove(CAPABILITY_XATTR);
    let mut after = xattrs.heap_bytes() as i64;
    if xattrs.is_empty() {
        inode.xattrs = None;
        after = 0;
    }
    after - before
}

const CAPABILITY_XATTR: &[u8] = b"security.capability";

/// Everything charged to the budget for an inode besides its entries: its struct and fixed
/// payload when created, then its file data and xattrs by exact deltas. (Directory slots and
/// names are charged per entry, not by capacity.)
fn inode_charge(inode: &Inode) -> u64 {
    let data = inode.file().map_or(0, FileData::heap_bytes);
    let xattrs = inode.xattrs.as_ref().map_or(0, |x| x.heap_bytes());
    inode_base_cost(inode) + data + xattrs
}

/// Per-call scratch buffer for reads.
pub type ReadBuf = Vec<u8>;

impl Engine {
    /// An engine over a state rebuilt by recovery.
    pub fn from_state(state: State) -> Engine {
        Engine {
            state: RwLock::new(state),
            sink: RwLock::new(None),
            observer: RwLock::new(None),
        }
    }

    /// Runs `f` with shared access to the state (a checkpoint encodes it meanwhile; writers
    /// wait).
    pub fn with_state<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.state.read())
    }

    pub fn new(config: EngineConfig) -> Engine {
        Engine {
            state: RwLock::new(State::new(&config)),
            sink: RwLock::new(None),
            observer: RwLock::new(None),
        }
    }

    /// Installs the receiver of applied ops (the persistence engine).
    pub fn set_sink(&self, sink: Option<Arc<dyn OpSink>>) {
        *self.sink.write() = sink;
    }

    /// Like [`Engine::sync`], without blocking: `done` runs once every change so far is durable.
    pub fn sync_async(&self, done: crate::op::SyncDone) {
        let sink = self.sink.read().clone();
        match sink {
            Some(s) => s.sync_async(done),
            None => done(Ok(())),
        }
    }

    /// Makes every change so far durable, as far as the store's persistence goes (fsync).
    pub fn sync(&self) -> std::io::Result<()> {
        let sink = self.sink.read().clone();
        sink.map_or(Ok(()), |s| s.sync())
    }

    /// Installs the receiver of cache invalidations (a mount).
    pub fn set_observer(&self, observer: Option<Arc<dyn Observer>>) {
        *self.observer.write() = observer;
    }

    /// Applies `op` under the exclusive lock and hands it to the sink.
    /// Applies `op`, hands it to the sink, and says what durability it must honour.
    fn execute(&self, state: &mut State, op: &Op<'_>) -> FsResult<Durability> {
        state.apply(op)?;
        let durability = state.op_durability(op);
        if let Some(sink) = self.sink.read().as_ref() {
            sink.applied(op, durability);
        }
        Ok(durability)
    }

    /// After the lock is dropped: writers wait while too much waits to be written, and a
    /// before-return change is made durable before returning.
    fn honour(&self, durability: Durability) -> FsResult<()> {
        if let Some(sink) = self.sink.read().clone() {
            sink.throttle();
        }
        if durability != Durability::BeforeReturn {
            return Ok(());
        }
        self.sync().map_err(|e| {
            tracing::error!("a before-return change could not be made durable: {e}");
            Errno::EIO
        })
    }

    /// Sets how soon changes to `ino` must reach the store. A volatile file made durable has
    /// its whole current content journaled at once (its changes were not).
    pub fn set_durability(&self, ctx: &Ctx, ino: Ino, durability: Durability) -> FsResult<()> {
        let time_ns = file_time_ns();
        let mut state = self.state.write();
        let before = state.inode(ino)?.durability();
        let op = Op::SetDurability {
            ino,
            durability: durability.code(),
            time_ns,
        };
        let honour = self.execute(&mut state, &op)?;
        if before == Durability::Volatile && durability != Durability::Volatile {
            self.materialize(&state, ino, durability);
        }
        drop(state);
        self.notify(ctx, || vec![Invalidation::Inode { ino }]);
        self.honour(honour)
    }

    /// Hands the sink ops that rebuild a file's current content after a volatile period:
    /// replay has the file's structure and metadata (journaled all along) but not the data
    /// changes of that period. The ops are no-ops on the live state, so they are not applied
    /// again. Order matters: empty the file, write the data, then owner and size (a chown at
    /// replay clears setuid and capabilities), then mode and times, then the capability.
    fn materialize(&self, state: &State, ino: Ino, durability: Durability) {
        let Some(sink) = self.sink.read().clone() else {
            return;
        };
        let Ok(inode) = state.inode(ino) else { return };
        let Some(file) = inode.file() else { return };
        let durability = Durability::default().stronger(durability);
        let set = |mode, uid, gid, size_bytes, times: bool| Op::SetAttr {
            ino,
            mode,
            uid,
            gid,
            size_bytes,
            atime_ns: times.then(|| inode.atime()),
            mtime_ns: times.then_some(inode.mtime_ns),
            ctime_ns: inode.ctime_ns,
            kill_suidgid: false,
        };
        sink.applied(&set(None, None, None, Some(0), false), durability);
        for (index, bytes) in file.chunks() {
            let op = Op::Write {
                ino,
                offset: (index * crate::memory::file_data::CHUNK_BYTES) as u64,
                data: bytes,
                time_ns: inode.mtime_ns,
                kill_suidgid: false,
            };
            sink.applied(&op, durability);
        }
        let owner = set(
            None,
            Some(inode.uid),
            Some(inode.gid),
            Some(inode.size_bytes),
            false,
        );
        sink.applied(&owner, durability);
        sink.applied(
            &set(Some(inode.mode & 0o7777), None, None, None, true),
            durability,
        );
        if let Some(cap) = inode.xattrs.as_ref().and_then(|x| x.get(CAPABILITY_XATTR)) {
            let op = Op::SetXattr {
                ino,
                name: CAPABILITY_XATTR,
                value: cap,
                flags: 0,
                time_ns: inode.ctime_ns,
            };
            sink.applied(&op, durability);
        }
    }

    fn notify(&self, ctx: &Ctx, what: impl FnOnce() -> Vec<Invalidation>) {
        if ctx.kernel {
            return;
        }
        if let Some(observer) = self.observer.read().clone() {
            observer.invalidate(&what());
        }
    }

    fn count_lookup(ctx: &Ctx, inode: &Inode) {
        if ctx.kernel {
            inode.lookups.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Looks `name` up in `parent`; a kernel caller's lookup is counted until `forget`.
    pub fn lookup(&self, ctx: &Ctx, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        let state = self.state.read();
        let (ino, _) = state.child(parent, name)?;
        let inode = state.inode(ino)?;
        Self::count_lookup(ctx, inode);
        Ok(inode.attr(ino))
    }

    /// Drops `count` kernel references; frees the inode if it has no links left either.
    pub fn forget(&self, ino: Ino, count: u64) {
        let free = {
            let state = self.state.read();
            match state.inode(ino) {
                Ok(inode) => {
                    let before = inode
                        .lookups
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                            Some(n.saturating_sub(count))
                        })
                        .unwrap_or(0);
                    before <= count && inode.nlink == 0
                }
                Err(_) => false,
            }
        };
        if free {
            self.state.write().free_if_unreferenced(ino);
        }
    }

    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        let state = self.state.read();
        Ok(state.inode(ino)?.attr(ino))
    }

    /// Resolves a path relative to the root ("/a/b" or "a/b"), following no symlinks.
    pub fn lookup_path(&self, path: &[u8]) -> FsResult<Attr> {
        let state = self.state.read();
        let mut ino = ROOT_INO;
        for part in path
            .split(|&b| b == b'/')
            .filter(|p| !p.is_empty() && *p != b".")
        {
            ino = if part == b".." {
                state.dir(ino)?.parent
            } else {
                state.child(ino, part)?.0
            };
        }
        Ok(state.inode(ino)?.attr(ino))
    }

    pub fn setattr(&self, ctx: &Ctx, ino: Ino, set: &SetAttr) -> FsResult<Attr> {
        let now = file_time_ns();
        let mut state = self.state.write();
        let op = Op::SetAttr {
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
        let honour = self.execute(&mut state, &op)?;
        let attr = state.inode(ino)?.attr(ino);
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || vec![Invalidation::Inode { ino }]);
        Ok(attr)
    }

    pub fn readlink(&self, ino: Ino) -> FsResult<Vec<u8>> {
        let state = self.state.read();
        match &state.inode(ino)?.payload {
            Payload::Symlink(t) => Ok(t.to_vec()),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Creates an inode of the kind in `mode`'s type bits (regular file, directory, FIFO,
    /// socket, device; symlinks go through [`Engine::symlink`]). `mode` has the umask applied.
    pub fn mknod(
        &self,
        ctx: &Ctx,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
    ) -> FsResult<Attr> {
        let kind = FileKind::from_mode(mode).ok_or(Errno::EINVAL)?;
        if kind == FileKind::Symlink {
            return Err(Errno::EINVAL);
        }
        self.create_inode(ctx, parent, name, mode, rdev, b"")
    }

    pub fn mkdir(&self, ctx: &Ctx, parent: Ino, name: &[u8], mode: u32) -> FsResult<Attr> {
        self.create_inode(ctx, parent, name, libc::S_IFDIR | (mode & 0o7777), 0, b"")
    }

    pub fn symlink(&self, ctx: &Ctx, parent: Ino, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        self.create_inode(ctx, parent, name, libc::S_IFLNK | 0o777, 0, target)
    }

    fn create_inode(
        &self,
        ctx: &Ctx,
        parent: Ino,
        name: &[u8],
        mut mode: u32,
        rdev: u32,
        target: &[u8],
    ) -> FsResult<Attr> {
        let now = file_time_ns();
        let mut state = self.state.write();
        let parent_inode = state.live_dir(parent)?;
        let mut gid = ctx.gid;
        if parent_inode.mode & libc::S_ISGID != 0 {
            // BSD group semantics of a setgid directory, as ext4 and tmpfs do.
            gid = parent_inode.gid;
            if mode & libc::S_IFMT == libc::S_IFDIR {
                mode |= libc::S_ISGID;
            }
        }
        let (ino, generation) = state.table.next_allocation()?;
        let op = Op::Create {
            parent,
            name,
            ino,
            generation,
            mode,
            uid: ctx.uid,
            gid,
            rdev,
            target,
            time_ns: now,
        };
        let honour = self.execute(&mut state, &op)?;
        let inode = state.inode(ino)?;
        Self::count_lookup(ctx, inode);
        let attr = inode.attr(ino);
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || {
            vec![
                Invalidation::Entry {
                    parent,
                    name: name.to_vec(),
                },
                Invalidation::Inode { ino: parent },
            ]
        });
        Ok(attr)
    }

    pub fn link(&self, ctx: &Ctx, ino: Ino, new_parent: Ino, new_name: &[u8]) -> FsResult<Attr> {
        let now = file_time_ns();
        let mut state = self.state.write();
        let op = Op::Link {
            ino,
            parent: new_parent,
            name: new_name,
            time_ns: now,
        };
        let honour = self.execute(&mut state, &op)?;
        let inode = state.inode(ino)?;
        Self::count_lookup(ctx, inode);
        let attr = inode.attr(ino);
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || {
            vec![
                Invalidation::Entry {
                    parent: new_parent,
                    name: new_name.to_vec(),
                },
                Invalidation::Inode { ino },
                Invalidation::Inode { ino: new_parent },
            ]
        });
        Ok(attr)
    }

    pub fn unlink(&self, ctx: &Ctx, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove_entry(ctx, parent, name, false)
    }

    pub fn rmdir(&self, ctx: &Ctx, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove_entry(ctx, parent, name, true)
    }

    fn remove_entry(&self, ctx: &Ctx, parent: Ino, name: &[u8], dir: bool) -> FsResult<()> {
        let time_ns = file_time_ns();
        let mut state = self.state.write();
        let op = if dir {
            Op::Rmdir {
                parent,
                name,
                time_ns,
            }
        } else {
            Op::Unlink {
                parent,
                name,
                time_ns,
            }
        };
        let honour = self.execute(&mut state, &op)?;
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || {
            vec![Invalidation::Entry {
                parent,
                name: name.to_vec(),
            }]
        });
        Ok(())
    }

    pub fn rename(
        &self,
        ctx: &Ctx,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        let time_ns = file_time_ns();
        let mut state = self.state.write();
        let op = Op::Rename {
            parent,
            name,
            new_parent,
            new_name,
            flags,
            time_ns,
        };
        let honour = self.execute(&mut state, &op)?;
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || {
            vec![
                Invalidation::Entry {
                    parent,
                    name: name.to_vec(),
                },
                Invalidation::Entry {
                    parent: new_parent,
                    name: new_name.to_vec(),
                },
            ]
        });
        Ok(())
    }

    /// Reads up to `size` bytes at `offset` into `out` (cleared first).
    pub fn read(&self, ino: Ino, offset: u64, size: u32, out: &mut ReadBuf) -> FsResult<()> {
        let state = self.state.read();
        let inode = state.regular_file(ino)?;
        inode
            .file()
            .expect("file")
            .read(inode.size_bytes, offset, size, out);
        // relatime: refresh the access time only when it is older than the last change or a day.
        let atime = inode.atime();
        let now = file_time_ns();
        if atime <= inode.mtime_ns || atime <= inode.ctime_ns || now - atime > RELATIME_INTERVAL_NS
        {
            inode.set_atime(now);
        }
        Ok(())
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
        u32::try_from(data.len()).map_err(|_| Errno::EINVAL)?;
        let time_ns = file_time_ns();
        let mut state = self.state.write();
        // The times before the write, to put back when the kernel owns them.
        let kept_times = match times {
            WriteTimes::KeptByKernel if !kill_suidgid => state
                .table
                .get(ino)
                .ok()
                .map(|inode| (inode.mtime_ns, inode.ctime_ns)),
            _ => None,
        };
        // One op per WRITE_LEN_MAX bytes: a journal record holds at most that much.
        let mut done = 0usize;
        let mut honour = Durability::Volatile;
        for piece in data.chunks(crate::persist::codec::WRITE_LEN_MAX).chain(
            // An empty write is still an op (it updates the times).
            data.is_empty().then_some(&data[..0]),
        ) {
            let op = Op::Write {
                ino,
                offset: offset + done as u64,
                data: piece,
                time_ns,
                kill_suidgid,
            };
            match self.execute(&mut state, &op) {
                Ok(d) => {
                    honour = honour.stronger(d);
                    done += piece.len();
                }
                // A short write, as POSIX allows, once some of it is in.
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            }
        }
        // Only if the write changed them (not within the same clock tick).
        let changed = |kept: &(TimeNs, TimeNs)| {
            let now = state.table.get(ino).ok().map(|i| (i.mtime_ns, i.ctime_ns));
            now != Some(*kept)
        };
        if let Some((mtime_ns, ctime_ns)) = kept_times.filter(changed) {
            // Under the writeback cache a WRITE arrives when the kernel flushes its pages,
            // maybe long after the write(2); the kernel stamped the times then and sends them
            // itself (SETATTR) if they changed, so the flush time must not replace them.
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
            match self.execute(&mut state, &op) {
                Ok(d) => honour = honour.stronger(d),
                // Times of a file just written cannot fail to be set; the write stands.
                Err(e) => debug_assert!(false, "restoring the times after a write: {e:?}"),
            }
        }
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || vec![Invalidation::Inode { ino }]);
        Ok(done as u32)
    }

    pub fn fallocate(
        &self,
        ctx: &Ctx,
        ino: Ino,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> FsResult<()> {
        let time_ns = file_time_ns();
        let mut state = self.state.write();
        let op = Op::Fallocate {
            ino,
            offset,
            length,
            mode,
            time_ns,
        };
        let honour = self.execute(&mut state, &op)?;
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || vec![Invalidation::Inode { ino }]);
        Ok(())
    }

    /// Lists `ino` from `cookie` on: ".", "..", then the entries. `emit(ino, next_cookie, kind,
    /// name)` returns false when the caller's buffer is full.
    pub fn readdir(
        &self,
        ino: Ino,
        cookie: u64,
        mut emit: impl FnMut(Ino, u64, FileKind, &[u8]) -> bool,
    ) -> FsResult<()> {
        let state = self.state.read();
        let inode = state.inode(ino)?;
        let dir = inode.dir().ok_or(Errno::ENOTDIR)?;
        if cookie == 0 && !emit(ino, 1, FileKind::Directory, b".") {
            return Ok(());
        }
        if cookie <= 1 && !emit(dir.parent, 2, FileKind::Directory, b"..") {
            return Ok(());
        }
        dir.list_from(cookie.max(2), |e| {
            let kind = FileKind::from_code(e.kind_code).unwrap_or(FileKind::RegularFile);
            emit(e.ino, e.next_cookie, kind, e.name)
        });
        let atime = inode.atime();
        if atime <= inode.mtime_ns || atime <= inode.ctime_ns {
            inode.set_atime(file_time_ns());
        }
        Ok(())
    }

    pub fn setxattr(
        &self,
        ctx: &Ctx,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> FsResult<()> {
        let time_ns = file_time_ns();
        let mut state = self.state.write();
        let op = Op::SetXattr {
            ino,
            name,
            value,
            flags,
            time_ns,
        };
        let honour = self.execute(&mut state, &op)?;
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || vec![Invalidation::Inode { ino }]);
        Ok(())
    }

    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        xattr::check_name(name)?;
        let state = self.state.read();
        let inode = state.inode(ino)?;
        inode
            .xattrs
            .as_ref()
            .and_then(|x| x.get(name))
            .map(<[u8]>::to_vec)
            .ok_or(Errno::ENODATA)
    }

    /// The attribute names of `ino`, NUL-terminated; `trusted` includes trusted.* names (which
    /// only privileged callers may see).
    pub fn listxattr(&self, ino: Ino, trusted: bool) -> FsResult<Vec<u8>> {
        let state = self.state.read();
        let inode = state.inode(ino)?;
        Ok(inode.xattrs.as_ref().map_or_else(Vec::new, |x| {
            x.list(|name| trusted || !name.starts_with(b"trusted."))
        }))
    }

    pub fn removexattr(&self, ctx: &Ctx, ino: Ino, name: &[u8]) -> FsResult<()> {
        let time_ns = file_time_ns();
        let mut state = self.state.write();
        let op = Op::RemoveXattr { ino, name, time_ns };
        let honour = self.execute(&mut state, &op)?;
        drop(state);
        self.honour(honour)?;
        self.notify(ctx, || vec![Invalidation::Inode { ino }]);
        Ok(())
    }

    pub fn statfs(&self) -> StatFs {
        let state = self.state.read();
        let bs = u64::from(BLOCK_SIZE);
        let inode_bytes = (std::mem::size_of::<Inode>() as u64 + ENTRY_COST_BYTES + 16).max(1);
        let free = state.budget.free_bytes();
        StatFs {
            block_size: BLOCK_SIZE,
            blocks_total: state.budget.cap_bytes() / bs,
            blocks_free: free / bs,
            files_total: state.table.live() + free / inode_bytes,
            files_free: free / inode_bytes,
            name_len_max: NAME_LEN_MAX as u32,
        }
    }

    pub fn stats(&self) -> Stats {
        let state = self.state.read();
        Stats {
            files: state.counts.files,
            directories: state.counts.directories,
            symlinks: state.counts.symlinks,
            other: state.counts.other,
            data_bytes: state.counts.data_bytes,
            memory_used_bytes: state.budget.total_bytes(),
            memory_cap_bytes: state.budget.cap_bytes(),
        }
    }

    /// Checks every invariant; an empty list means the state is consistent.
    pub fn check(&self) -> Vec<String> {
        self.state.read().check()
    }
}

#[cfg(test)]
mod repair_tests {
    use super::*;

    #[test]
    fn repair_fixes_what_check_finds() {
        let e = Engine::new(EngineConfig::default());
        let c = Ctx::library(0, 0);
        let a = e.mkdir(&c, ROOT_INO, b"a", 0o755).unwrap().ino;
        let b = e.mkdir(&c, a, b"b", 0o755).unwrap().ino;
        let f = e.mknod(&c, b, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
        e.write(&c, f, 0, b"keep me", false).unwrap();
        e.link(&c, f, ROOT_INO, b"f2").unwrap();
        {
            let mut st = e.state.write();
            assert!(st.check().is_empty());
            // A wrong link count, an entry naming no inode, and a cycle cut off from the root
            // (a no longer in /, and b naming a).
            st.table.get_mut(f).unwrap().nlink = 7;
            st.dir_mut(ROOT_INO)
                .insert(b"ghost", 4242, FileKind::RegularFile.code());
            st.dir_mut(ROOT_INO).remove(b"a");
            st.dir_mut(b).insert(b"loop", a, FileKind::Directory.code());
            let problems = st.check();
            assert!(problems.len() >= 3, "{problems:?}");
            let done = st.repair();
            assert!(!done.is_empty());
            let left = st.check();
            assert!(left.is_empty(), "after repair: {left:?}\ndone: {done:?}");
        }
        // The cut-off directory and its file are back under /lost+found, data intact.
        let found = e.lookup_path(b"/lost+found").unwrap();
        assert_eq!(found.kind, FileKind::Directory);
        let f_again = e
            .lookup_path(format!("/lost+found/#{a}/b/f").as_bytes())
            .unwrap();
        assert_eq!(f_again.ino, f);
        assert_eq!(f_again.nlink, 2);
        let mut buf = Vec::new();
        e.read(f, 0, 100, &mut buf).unwrap();
        assert_eq!(buf, b"keep me");
        assert!(e.lookup_path(b"/ghost").is_err());
    }
}

//! The whole in-memory file system: the inode table, the memory budget and the counts, and the
//! one path every mutation takes, [`State::apply`] (in `apply`), live or replayed.
//!
//! `apply` validates everything before it changes anything, so a failed op leaves no trace.
//! Besides applying ops the state checks its invariants (`check`) and repairs them as fsck
//! does (`repair`). It holds no lock and does no I/O: the engine (`crate::engine`) owns the
//! lock, and the persistence levels see only the ops.

mod acl;
mod apply;
pub(crate) use apply::check_fallocate;
mod check;
mod paths;
mod privileges;
mod rename;
mod repair;
mod tmpfile;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::attr::{Durability, FileKind, Ino, ROOT_INO};
use crate::category::counts::CategoryCounts;
use crate::clock::Clock;
use crate::engine::EngineConfig;
use crate::error::{Broken, Errno, FsResult};
use crate::limits::{ENTRY_COST_BYTES, NAME_BYTES_MAX};
use crate::memory::budget::Budget;
use crate::namespace::dir::Dir;
use crate::namespace::inode::{Inode, Payload};
use crate::namespace::table::InodeTable;
use crate::time::TimeNs;

pub(crate) use acl::Inherited;
pub(crate) use privileges::CAPABILITY_XATTR;
pub(crate) use tmpfile::Unnamed;

/// Counts a regular file (`sign` 1) or stops counting it (-1) in its category's slot.
pub(crate) fn count_category(
    categories: &mut CategoryCounts,
    slot: u16,
    f: &crate::contents::Contents,
    sign: i64,
) {
    categories.count_file(slot, sign);
    let disk = f.tier() == crate::contents::Tier::Disk;
    categories.count_bytes(slot, f.stored_bytes() as i64 * sign, disk);
}

/// How many inodes of each kind, and the bytes of file contents stored.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) files: u64,
    pub(crate) directories: u64,
    pub(crate) symlinks: u64,
    pub(crate) other: u64,
    pub(crate) data_bytes: u64,
    /// Regular files on the disk tier, and the bytes of theirs counted in `data_bytes`.
    pub(crate) disk_files: u64,
    pub(crate) disk_data_bytes: u64,
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

    /// Adds a change of stored content bytes.
    fn add_data(&mut self, stored_bytes: i64) {
        self.data_bytes = self.data_bytes.wrapping_add_signed(stored_bytes);
    }

    /// Counts a regular file's contents (`sign` 1) or stops counting them (-1).
    pub(crate) fn count_contents(&mut self, f: &crate::contents::Contents, sign: i64) {
        let stored = f.stored_bytes() as i64 * sign;
        self.add_data(stored);
        if f.tier() == crate::contents::Tier::Disk {
            self.disk_files = self.disk_files.wrapping_add_signed(sign);
            self.disk_data_bytes = self.disk_data_bytes.wrapping_add_signed(stored);
        }
    }
}

/// Everything behind the engine's lock.
#[derive(Debug)]
pub struct State {
    pub(crate) table: InodeTable,
    pub(crate) budget: Budget,
    pub(crate) counts: Counts,
    /// Regular files and their bytes per category (decision 0085).
    pub(crate) categories: CategoryCounts,
    /// Unnamed files (`O_TMPFILE`) that `link` may still name; never more than the inodes.
    pub(crate) linkable: HashSet<Ino>,
    /// For what the state stamps itself (a repair's /lost+found); ops carry their own times.
    clock: Arc<dyn Clock>,
    /// Host files of disk-tier inodes freed since the engine last took them: it removes them
    /// once the op that freed them is durable (`Engine::remove_freed_host_files`). Never more
    /// than the inodes freed by one mutation (or by one replay).
    pub(crate) freed_host_files: Vec<String>,
    /// Host files of disk-tier inodes a rename replaced a name of (decision 0119): their
    /// removal must wait for the rename to be durable, never be made early on a full disk
    /// (recovery would drop the inode with the name the rename took). An entry goes when its
    /// host file is removed; never more than the inodes.
    pub(crate) replaced_host_files: HashSet<String>,
    /// While replaying: per disk-tier inode, the trims (shrinks, punched and zeroed ranges)
    /// its host file may not have had before the crash, as (offset, len), to redo at the end
    /// of recovery. A later write extent or migration of the inode clears them: the engine
    /// trims before it writes the same file again, and the host file was synced after.
    pub(crate) host_redo: HashMap<Ino, Vec<(u64, u64)>>,
    replaying: bool,
}

fn check_entry_name(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_BYTES_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// What an inode costs the budget when created: its struct and fixed payload.
fn inode_base_cost(inode: &Inode) -> u64 {
    let payload = match &inode.payload {
        Payload::Dir(_) => std::mem::size_of::<Dir>(),
        Payload::Symlink(t) => t.len(),
        _ => 0,
    };
    (std::mem::size_of::<Inode>() + payload) as u64
}

/// What one directory entry costs the budget.
pub(crate) fn entry_cost(name: &[u8]) -> u64 {
    ENTRY_COST_BYTES + name.len() as u64
}

/// Everything charged to the budget for an inode besides its entries: its struct and fixed
/// payload when created, then its file contents and xattrs by exact deltas. (Directory slots
/// and names are charged per entry, not by capacity.)
fn inode_charge(inode: &Inode) -> u64 {
    let data = inode.file().map_or(0, |f| f.heap_bytes());
    let xattrs = inode.xattrs.as_ref().map_or(0, |x| x.heap_bytes());
    inode_base_cost(inode) + data + xattrs
}

impl State {
    /// Every live inode, in increasing number order (the checkpoint writes them so).
    pub(crate) fn inodes(&self) -> impl Iterator<Item = (Ino, &Inode)> {
        self.table.iter()
    }

    /// Replay turns the memory cap off (see `Budget::set_enforced`).
    pub(crate) fn set_replaying(&mut self, replaying: bool) {
        self.budget.set_enforced(!replaying);
        self.replaying = replaying;
    }

    /// Notes (while replaying) a trim of a disk-tier inode's host file to redo at the end of
    /// recovery; bounded by the journal's ops.
    fn note_host_trim(&mut self, ino: Ino, offset: u64, len: u64) {
        if self.replaying {
            self.host_redo.entry(ino).or_default().push((offset, len));
        }
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
    ) -> Result<(State, Vec<String>), Broken> {
        let mut state = State {
            table: InodeTable::new(),
            budget: Budget::new(config.memory_cap_bytes),
            counts: Counts::default(),
            categories: CategoryCounts::default(),
            linkable: HashSet::new(),
            clock: config.clock.clone(),
            freed_host_files: Vec::new(),
            replaced_host_files: HashSet::new(),
            host_redo: HashMap::new(),
            replaying: false,
        };
        let mut charged = 0u64;
        for (ino, inode) in inodes {
            if ino == 0 || state.table.get(ino).is_ok() || ino > crate::namespace::table::INODES_MAX
            {
                return Err(Broken(format!("inode number {ino} is invalid or repeated")));
            }
            charged += inode_charge(&inode);
            if let Some(d) = inode.dir() {
                d.list_from(0, |e| {
                    charged += entry_cost(e.name);
                    true
                });
            }
            let mut inode = inode;
            inode.category = state.categories.slot_of(inode.xattrs.as_deref());
            *state.counts.slot(inode.kind()) += 1;
            if let Some(f) = inode.file() {
                state.counts.count_contents(f, 1);
                count_category(&mut state.categories, inode.category, f, 1);
            }
            state.table.insert(ino, inode);
        }
        state.budget.set_table_bytes(state.table.heap_bytes());
        state.table.raise_next_generation(next_generation);
        if state.table.get(ROOT_INO).map(|r| r.is_dir()) != Ok(true) {
            return Err(Broken("there is no root directory".into()));
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
            categories: CategoryCounts::default(),
            linkable: HashSet::new(),
            clock: config.clock.clone(),
            freed_host_files: Vec::new(),
            replaced_host_files: HashSet::new(),
            host_redo: HashMap::new(),
            replaying: false,
        };
        let now = state.clock.file_time_ns();
        let root = Inode {
            mode: libc::S_IFDIR | (config.root_mode & 0o7777),
            uid: config.root_uid,
            gid: config.root_gid,
            nlink: 2,
            generation: 0,
            durability: Durability::default().code(),
            absent: false,
            category: crate::category::counts::DEFAULT_SLOT,
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

    pub(crate) fn inode(&self, ino: Ino) -> FsResult<&Inode> {
        self.table.get(ino)
    }

    pub(crate) fn dir(&self, ino: Ino) -> FsResult<&Dir> {
        self.inode(ino)?.dir().ok_or(Errno::ENOTDIR)
    }

    /// A directory that can still get entries (not removed).
    pub(crate) fn live_dir(&self, ino: Ino) -> FsResult<&Inode> {
        let inode = self.inode(ino)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if inode.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        Ok(inode)
    }

    pub(crate) fn child(&self, parent: Ino, name: &[u8]) -> FsResult<(Ino, u8)> {
        if name.len() > NAME_BYTES_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.dir(parent)?.get(name).ok_or(Errno::ENOENT)
    }

    pub(crate) fn dir_mut(&mut self, ino: Ino) -> &mut Dir {
        self.table
            .get_mut(ino)
            .ok()
            .and_then(Inode::dir_mut)
            .expect("validated directory")
    }

    pub(crate) fn touch_dir(&mut self, ino: Ino, time_ns: TimeNs) {
        if let Ok(d) = self.table.get_mut(ino) {
            d.mtime_ns = time_ns;
            d.ctime_ns = time_ns;
        }
    }

    /// Frees an inode that has no links and no kernel references left, and gives it back:
    /// a caller that can let go of the state's lock first drops it (its file pages) after
    /// that (decision 0110).
    pub(crate) fn free_if_unreferenced(&mut self, ino: Ino) -> Option<Inode> {
        let inode = match self.table.get(ino) {
            Ok(i) => i,
            Err(_) => return None,
        };
        if ino == ROOT_INO || inode.nlink > 0 || inode.lookups.load(Ordering::Acquire) > 0 {
            return None;
        }
        let inode = self.table.remove(ino);
        self.linkable.remove(&ino);
        self.budget.set_table_bytes(self.table.heap_bytes());
        self.budget.apply(-(inode_charge(&inode) as i64));
        *self.counts.slot(inode.kind()) -= 1;
        if let Payload::File(f) = &inode.payload {
            self.counts.count_contents(f, -1);
            count_category(&mut self.categories, inode.category, f, -1);
            if f.tier() == crate::contents::Tier::Disk {
                self.host_redo.remove(&ino);
                let name = crate::contents::host_file::host_file_name(ino, inode.generation);
                self.freed_host_files.push(name);
            }
        }
        Some(inode)
    }

    pub(crate) fn drop_link(&mut self, ino: Ino, time_ns: TimeNs) {
        let inode = self.table.get_mut(ino).expect("validated inode");
        debug_assert!(inode.nlink > 0);
        inode.ctime_ns = time_ns;
        if inode.is_dir() {
            inode.nlink = 0;
        } else {
            inode.nlink -= 1;
        }
        // Dropped here, under the lock: an op's effects are applied whole.
        drop(self.free_if_unreferenced(ino));
    }

    /// True if `ancestor` is `ino` or one of its ancestors.
    pub(crate) fn is_ancestor(&self, ancestor: Ino, mut ino: Ino) -> FsResult<bool> {
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
}

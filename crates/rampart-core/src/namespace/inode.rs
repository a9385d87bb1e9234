//! The in-memory inode: POSIX attributes with nanosecond times, and what the inode holds.
//!
//! Kept compact (about 100 bytes with an empty file's payload) because a million of them is an
//! ordinary workload; `size_of::<Inode>()` is pinned by a test.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::attr::{Attr, Durability, FileKind, Ino};
use crate::contents::Contents;
use crate::namespace::dir::Dir;
use crate::time::TimeNs;
use crate::xattr::Xattrs;

/// What an inode holds besides its attributes.
#[derive(Debug)]
pub enum Payload {
    File(Contents),
    Dir(Box<Dir>),
    Symlink(Box<[u8]>),
    /// FIFOs, sockets and device nodes; the device number for the latter.
    Special {
        rdev: u32,
    },
}

#[derive(Debug)]
pub struct Inode {
    /// Type bits and permission bits, as in `st_mode`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub generation: u32,
    /// `Durability::code`: how soon changes must reach the store.
    pub durability: u8,
    /// Unknown to the store: created with a category that never reaches it (TEMPORARY,
    /// DISPOSABLE), so no op about it was handed to the levels (`persist::policy`). In memory
    /// only: such an inode never reaches the store, so no store holds this flag.
    pub absent: bool,
    /// The category's slot in the per-category counters (`category::counts`): follows the
    /// hidden category attribute. In memory only (recomputed from the attribute at load).
    pub category: u16,
    /// References the kernel holds (FUSE lookup count); the inode lives while this is non-zero
    /// even when `nlink` is zero (an unlinked file that is still open). Atomic so that lookups
    /// count under a shared lock; an inode is only freed under the exclusive lock.
    pub lookups: AtomicU64,
    pub size_bytes: u64,
    /// Access time; atomic so that reads can update it (relatime) under a shared lock.
    pub atime_ns: AtomicI64,
    pub mtime_ns: TimeNs,
    pub ctime_ns: TimeNs,
    pub payload: Payload,
    pub xattrs: Option<Box<Xattrs>>,
}

impl Inode {
    pub fn kind(&self) -> FileKind {
        FileKind::from_mode(self.mode).expect("inode with invalid type bits")
    }

    pub fn is_dir(&self) -> bool {
        matches!(self.payload, Payload::Dir(_))
    }

    pub fn dir(&self) -> Option<&Dir> {
        match &self.payload {
            Payload::Dir(d) => Some(d),
            _ => None,
        }
    }

    pub fn dir_mut(&mut self) -> Option<&mut Dir> {
        match &mut self.payload {
            Payload::Dir(d) => Some(d),
            _ => None,
        }
    }

    pub fn file(&self) -> Option<&Contents> {
        match &self.payload {
            Payload::File(f) => Some(f),
            _ => None,
        }
    }

    pub fn file_mut(&mut self) -> Option<&mut Contents> {
        match &mut self.payload {
            Payload::File(f) => Some(f),
            _ => None,
        }
    }

    pub fn durability(&self) -> Durability {
        Durability::from_code(self.durability)
    }

    pub fn atime(&self) -> TimeNs {
        self.atime_ns.load(Ordering::Relaxed)
    }

    pub fn set_atime(&self, t: TimeNs) {
        self.atime_ns.store(t, Ordering::Relaxed);
    }

    pub fn attr(&self, ino: Ino) -> Attr {
        let (rdev, allocated_bytes) = match &self.payload {
            Payload::File(f) => (0, f.allocated_bytes()),
            Payload::Dir(d) => (0, d.heap_bytes() as u64),
            Payload::Symlink(t) => (0, t.len() as u64),
            Payload::Special { rdev } => (*rdev, 0),
        };
        Attr {
            ino,
            generation: u64::from(self.generation),
            kind: self.kind(),
            perm: (self.mode & 0o7777) as u16,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev,
            size_bytes: self.size_bytes,
            allocated_bytes,
            atime_ns: self.atime(),
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            durability: self.durability(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_stays_compact() {
        // Budget for the per-file memory target (≤ 200 bytes per empty file with its entry).
        assert!(
            std::mem::size_of::<Inode>() <= 104,
            "{}",
            std::mem::size_of::<Inode>()
        );
        assert_eq!(
            std::mem::size_of::<Option<Inode>>(),
            std::mem::size_of::<Inode>()
        );
    }
}

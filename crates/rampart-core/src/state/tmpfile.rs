//! Unnamed files (`O_TMPFILE`): created with no link, so nothing about them is journaled (an
//! inode with no links is gone at the next restart, `persist::policy`); the ones created
//! linkable may get a first name with `link`, when `persist::policy::materialize_linked`
//! hands the levels their whole creation (docs/decisions/0051).

use std::sync::atomic::{AtomicI64, AtomicU64};

use super::{inode_base_cost, State};
use crate::attr::{Durability, FileKind, Ino};
use crate::contents::Contents;
use crate::error::{Errno, FsResult};
use crate::namespace::inode::{Inode, Payload};
use crate::time::TimeNs;

/// What an unnamed file is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unnamed {
    pub(crate) parent: Ino,
    pub(crate) ino: Ino,
    pub(crate) generation: u32,
    /// Permission bits; the type is always a regular file.
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Whether `link` may give it a name (no `O_EXCL`, Linux's `I_LINKABLE`).
    pub(crate) linkable: bool,
    pub(crate) time_ns: TimeNs,
}

impl State {
    /// Creates a regular file with no name in directory `u.parent` (which must still exist).
    /// The directory does not change (as on ext4 and tmpfs). Validated completely first, like
    /// every `apply_*`.
    pub(crate) fn create_unnamed(&mut self, u: &Unnamed) -> FsResult<()> {
        self.live_dir(u.parent)?;
        if self.table.get(u.ino).is_ok() || u.ino == 0 {
            return Err(Errno::EIO);
        }
        let inode = Inode {
            mode: libc::S_IFREG | (u.mode & 0o7777),
            uid: u.uid,
            gid: u.gid,
            nlink: 0,
            generation: u.generation,
            durability: Durability::default().code(),
            absent: false,
            category: crate::category::counts::DEFAULT_SLOT,
            lookups: AtomicU64::new(0),
            size_bytes: 0,
            atime_ns: AtomicI64::new(u.time_ns),
            mtime_ns: u.time_ns,
            ctime_ns: u.time_ns,
            payload: Payload::File(Contents::default()),
            xattrs: None,
        };
        let cost = inode_base_cost(&inode);
        self.budget.check(cost + self.table.growth_bytes(u.ino))?;
        self.budget.apply(cost as i64);
        self.table.insert(u.ino, inode);
        self.budget.set_table_bytes(self.table.heap_bytes());
        *self.counts.slot(FileKind::RegularFile) += 1;
        self.categories
            .count_file(crate::category::counts::DEFAULT_SLOT, 1);
        if u.linkable {
            self.linkable.insert(u.ino);
        }
        Ok(())
    }

    /// True if `ino` is an unnamed file that `link` may name (created linkable, never linked).
    pub(crate) fn is_linkable_unnamed(&self, ino: Ino) -> bool {
        self.linkable.contains(&ino) && self.inode(ino).is_ok_and(|i| i.nlink == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::ROOT_INO;
    use crate::engine::EngineConfig;
    use crate::op::Op;

    fn unnamed(state: &State, linkable: bool) -> Unnamed {
        let (ino, generation) = state.table.next_allocation().unwrap();
        Unnamed {
            parent: ROOT_INO,
            ino,
            generation,
            mode: 0o600,
            uid: 0,
            gid: 0,
            linkable,
            time_ns: 5,
        }
    }

    fn link<'a>(ino: Ino, name: &'a [u8]) -> Op<'a> {
        Op::Link {
            ino,
            parent: ROOT_INO,
            name,
            time_ns: 9,
        }
    }

    #[test]
    fn an_unnamed_file_has_no_link_and_leaves_its_directory_as_it_was() {
        let mut s = State::new(&EngineConfig::default());
        let root_mtime = s.inode(ROOT_INO).unwrap().mtime_ns;
        let u = unnamed(&s, true);
        s.create_unnamed(&u).unwrap();
        let inode = s.inode(u.ino).unwrap();
        inode.lookups.store(1, std::sync::atomic::Ordering::Relaxed); // the opener's
        assert_eq!(inode.nlink, 0);
        assert_eq!(inode.mode, libc::S_IFREG | 0o600);
        assert_eq!(s.inode(ROOT_INO).unwrap().mtime_ns, root_mtime);
        assert_eq!(s.counts.files, 1);
        assert!(s.check().is_empty(), "{:?}", s.check());
    }

    #[test]
    fn only_a_linkable_unnamed_file_is_linked_and_only_once_from_no_links() {
        let mut s = State::new(&EngineConfig::default());
        let excl = unnamed(&s, false);
        s.create_unnamed(&excl).unwrap();
        assert_eq!(s.apply(&link(excl.ino, b"x")), Err(Errno::ENOENT));

        let u = unnamed(&s, true);
        s.create_unnamed(&u).unwrap();
        s.apply(&link(u.ino, b"a")).unwrap();
        assert_eq!(s.inode(u.ino).unwrap().nlink, 1);
        assert_eq!(s.child(ROOT_INO, b"a").unwrap().0, u.ino);
        // Unlinked again while open, it is an ordinary unlinked file: no new name (ENOENT, as
        // on ext4 and tmpfs, where linking clears I_LINKABLE).
        s.apply(&Op::Unlink {
            parent: ROOT_INO,
            name: b"a",
            time_ns: 10,
        })
        .unwrap();
        assert_eq!(s.apply(&link(u.ino, b"b")), Err(Errno::ENOENT));
    }

    #[test]
    fn a_freed_unnamed_file_leaves_nothing_linkable_behind() {
        let mut s = State::new(&EngineConfig::default());
        let u = unnamed(&s, true);
        s.create_unnamed(&u).unwrap();
        s.free_if_unreferenced(u.ino);
        assert!(s.inode(u.ino).is_err());
        assert!(s.linkable.is_empty());
        assert_eq!(s.counts.files, 0);
    }
}

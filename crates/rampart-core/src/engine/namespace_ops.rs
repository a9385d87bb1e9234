//! The namespace operations of the engine: lookups, creation, links, removal, rename, readdir.

use std::sync::atomic::Ordering;

use super::{Ctx, Engine, Invalidation, Mutation};
use crate::attr::{Attr, Durability, FileKind, Ino, ROOT_INO};
use crate::category::{Assigned, CategoryError, Origin, Resolved};
use crate::error::{Errno, FsResult};
use crate::limits::PATH_DEPTH_MAX;
use crate::namespace::inode::{Inode, Payload};
use crate::op::Op;

fn count_lookup(ctx: &Ctx, inode: &Inode) {
    if ctx.kernel {
        inode.lookups.fetch_add(1, Ordering::AcqRel);
    }
}

/// The attributes of `ino` after an op made or linked it, counting the kernel's lookup.
fn looked_up(m: &Mutation<'_>, ctx: &Ctx, ino: Ino) -> FsResult<Attr> {
    let inode = m.state().inode(ino)?;
    count_lookup(ctx, inode);
    Ok(inode.attr(ino))
}

impl Engine {
    /// Looks `name` up in `parent`; a kernel caller's lookup is counted until `forget`.
    pub fn lookup(&self, ctx: &Ctx, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        let state = self.read_state();
        let (ino, _) = state.child(parent, name)?;
        let inode = state.inode(ino)?;
        count_lookup(ctx, inode);
        Ok(inode.attr(ino))
    }

    /// Looks up inode `ino` itself (`parent` false: the kernel's LOOKUP of ".") or, for a
    /// directory, its parent (LOOKUP of ".."; the root's is the root): how the kernel finds a
    /// file handle's inode that it no longer caches (FUSE_EXPORT_SUPPORT, decision 0142).
    /// Counted like any lookup. ESTALE for a number that names no inode, or one unlinked that
    /// nothing references any more: the handle's file is gone.
    pub fn lookup_by_number(&self, ctx: &Ctx, ino: Ino, parent: bool) -> FsResult<Attr> {
        let state = self.read_state();
        let inode = state.inode(ino).map_err(|_| Errno::ESTALE)?;
        if inode.nlink == 0 && inode.lookups.load(Ordering::Acquire) == 0 {
            return Err(Errno::ESTALE);
        }
        let found = match parent {
            false => ino,
            true => inode.dir().ok_or(Errno::ENOTDIR)?.parent,
        };
        let found_inode = state.inode(found).map_err(|_| Errno::ESTALE)?;
        count_lookup(ctx, found_inode);
        Ok(found_inode.attr(found))
    }

    /// Drops `count` kernel references; frees the inode if it has no links left either.
    pub fn forget(&self, ino: Ino, count: u64) {
        let free = {
            let state = self.read_state();
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
            let mut state = self.write_state();
            let unreferenced = state.free_if_unreferenced(ino);
            if !state.freed_host_files.is_empty() {
                let freed = std::mem::take(&mut state.freed_host_files);
                self.host_files_freed(&mut state, &freed);
            }
            // The inode's pages are freed after the lock is let go: a FORGET thread preempted
            // while freeing them held every FUSE queue thread (decision 0110).
            drop(state);
            drop(unreferenced);
        }
    }

    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        let state = self.read_state();
        Ok(state.inode(ino)?.attr(ino))
    }

    /// Resolves a path relative to the root ("/a/b" or "a/b"), following no symlinks.
    pub fn lookup_path(&self, path: &[u8]) -> FsResult<Attr> {
        let state = self.read_state();
        let mut ino = ROOT_INO;
        let parts = path
            .split(|&b| b == b'/')
            .filter(|p| !p.is_empty() && *p != b".");
        for (depth, part) in parts.enumerate() {
            if depth >= PATH_DEPTH_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            ino = if part == b".." {
                state.dir(ino)?.parent
            } else {
                state.child(ino, part)?.0
            };
        }
        Ok(state.inode(ino)?.attr(ino))
    }

    pub fn readlink(&self, ino: Ino) -> FsResult<Vec<u8>> {
        let state = self.read_state();
        match &state.inode(ino)?.payload {
            Payload::Symlink(t) => Ok(t.to_vec()),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Creates an inode of the kind in `mode`'s type bits (regular file, directory, FIFO,
    /// socket, device; symlinks go through [`Engine::symlink`]). It gets `mode` less
    /// `ctx.umask`, or, in a directory with a default ACL, that ACL (decision 0143).
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
        self.create_inode(ctx, parent, name, NewInode::plain(mode, rdev, b""))
    }

    /// Creates a regular file with the category `category` (the library API's, origin `api`,
    /// over any rule or directory), as [`Engine::mknod`] does: one created TEMPORARY is
    /// unknown to the store from the start, not created in it and then left (decision 0066).
    /// `category` is checked first, as [`Engine::set_category`] checks it.
    pub fn create_file_in_category(
        &self,
        ctx: &Ctx,
        parent: Ino,
        name: &[u8],
        mode: u32,
        category: &str,
    ) -> Result<Attr, CategoryError> {
        let (assigned, resolved) = self.checked_category(category, Origin::Api)?;
        let new = NewInode {
            category: Some((assigned, resolved)),
            ..NewInode::plain(libc::S_IFREG | (mode & 0o7777), 0, b"")
        };
        self.create_inode(ctx, parent, name, new)
            .map_err(CategoryError::Refused)
    }

    pub fn mkdir(&self, ctx: &Ctx, parent: Ino, name: &[u8], mode: u32) -> FsResult<Attr> {
        let new = NewInode::plain(libc::S_IFDIR | (mode & 0o7777), 0, b"");
        self.create_inode(ctx, parent, name, new)
    }

    pub fn symlink(&self, ctx: &Ctx, parent: Ino, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        self.create_inode(
            ctx,
            parent,
            name,
            NewInode::plain(libc::S_IFLNK | 0o777, 0, target),
        )
    }

    fn create_inode(
        &self,
        ctx: &Ctx,
        parent: Ino,
        name: &[u8],
        new: NewInode<'_>,
    ) -> FsResult<Attr> {
        let NewInode {
            mut mode,
            rdev,
            target,
            category: explicit,
        } = new;
        let categories = self.categories();
        self.with_room(|| {
            self.mutate(
                ctx,
                |m, time_ns| {
                    let parent_inode = m.state().live_dir(parent)?;
                    let mut gid = ctx.gid;
                    if parent_inode.mode & libc::S_ISGID != 0 {
                        // BSD group semantics of a setgid directory, as ext4 and tmpfs do.
                        gid = parent_inode.gid;
                        if mode & libc::S_IFMT == libc::S_IFDIR {
                            mode |= libc::S_ISGID;
                        }
                    }
                    let inherited = m.state().inherit_acls(parent, mode, ctx.umask);
                    let mode = inherited.mode;
                    let (ino, generation) = m.state().table.next_allocation()?;
                    let kind = FileKind::from_mode(mode).ok_or(Errno::EINVAL)?;
                    let category = match &explicit {
                        Some((assigned, resolved)) => {
                            Some(m.plan_explicit_category(assigned.clone(), *resolved, ino))
                        }
                        None => m.plan_category(&categories, parent, name, kind, ino),
                    };
                    let create = Op::Create {
                        parent,
                        name,
                        ino,
                        generation,
                        mode,
                        uid: ctx.uid,
                        gid,
                        rdev,
                        target,
                        time_ns,
                    };
                    m.create_with_acls(&create, &inherited)?;
                    if let Some((assigned, resolved)) = category {
                        m.assign_category(ino, assigned.as_ref(), resolved, time_ns)?;
                    }
                    if kind == FileKind::Directory && categories.rules_need_path() {
                        m.remember_new_dir(parent, name, ino);
                    }
                    looked_up(m, ctx, ino)
                },
                |_| {
                    vec![
                        Invalidation::Entry {
                            parent,
                            name: name.to_vec(),
                        },
                        Invalidation::Inode { ino: parent },
                    ]
                },
            )
        })
    }

    /// Creates an unnamed regular file in `parent` (`O_TMPFILE`): no links, so it is freed when
    /// the last reference goes and never reaches the store unless `link` names it, which only a
    /// `linkable` one (opened without `O_EXCL`) may. `mode` as for `mknod`. Access to
    /// `parent` is the caller's to check (the kernel does, as for every create). It gets the
    /// category a file created in `parent` would, but a filename rule's
    /// (`Mutation::plan_unnamed_category`).
    pub fn tmpfile(&self, ctx: &Ctx, parent: Ino, mode: u32, linkable: bool) -> FsResult<Attr> {
        let categories = self.categories();
        self.with_room(|| {
            self.mutate(
                ctx,
                |m, time_ns| {
                    let parent_inode = m.state().live_dir(parent)?;
                    // BSD group semantics of a setgid directory, as `create_inode`.
                    let gid = if parent_inode.mode & libc::S_ISGID != 0 {
                        parent_inode.gid
                    } else {
                        ctx.gid
                    };
                    let inherited =
                        m.state()
                            .inherit_acls(parent, libc::S_IFREG | (mode & 0o7777), ctx.umask);
                    let (ino, generation) = m.state().table.next_allocation()?;
                    m.create_unnamed(&crate::state::Unnamed {
                        parent,
                        ino,
                        generation,
                        mode: inherited.mode,
                        uid: ctx.uid,
                        gid,
                        linkable,
                        time_ns,
                    })?;
                    if let Err(e) = m.set_inherited_acls(ino, &inherited, time_ns) {
                        // Nothing refers to it yet: it goes, as a forgotten unlinked file.
                        drop(m.state.free_if_unreferenced(ino));
                        return Err(e);
                    }
                    if let Some((assigned, resolved)) = m.plan_unnamed_category(&categories, parent)
                    {
                        m.assign_category(ino, assigned.as_ref(), resolved, time_ns)?;
                        if resolved.durability == Durability::Volatile {
                            m.make_unnamed_absent(ino)?;
                        }
                    }
                    looked_up(m, ctx, ino)
                },
                // Nothing the kernel may have cached changed: the directory has no new entry.
                |_| Vec::new(),
            )
        })
    }

    /// A new name for `ino`; the first name of a linkable unnamed file (`tmpfile`) too.
    pub fn link(&self, ctx: &Ctx, ino: Ino, new_parent: Ino, new_name: &[u8]) -> FsResult<Attr> {
        self.with_room(|| {
            self.mutate(
                ctx,
                |m, time_ns| {
                    let op = Op::Link {
                        ino,
                        parent: new_parent,
                        name: new_name,
                        time_ns,
                    };
                    if m.state().is_linkable_unnamed(ino) {
                        m.name_unnamed(&op)?;
                    } else {
                        m.apply(&op)?;
                    }
                    looked_up(m, ctx, ino)
                },
                |_| {
                    vec![
                        Invalidation::Entry {
                            parent: new_parent,
                            name: new_name.to_vec(),
                        },
                        Invalidation::Inode { ino },
                        Invalidation::Inode { ino: new_parent },
                    ]
                },
            )
        })
    }

    pub fn unlink(&self, ctx: &Ctx, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove_entry(ctx, parent, name, false)
    }

    pub fn rmdir(&self, ctx: &Ctx, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove_entry(ctx, parent, name, true)
    }

    fn remove_entry(&self, ctx: &Ctx, parent: Ino, name: &[u8], dir: bool) -> FsResult<()> {
        self.mutate(
            ctx,
            |m, time_ns| {
                m.apply(&if dir {
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
                })
            },
            |_| {
                vec![Invalidation::Entry {
                    parent,
                    name: name.to_vec(),
                }]
            },
        )
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
        self.with_room(|| {
            self.mutate(
                ctx,
                |m, time_ns| {
                    m.apply(&Op::Rename {
                        parent,
                        name,
                        new_parent,
                        new_name,
                        flags,
                        time_ns,
                    })
                },
                |_| {
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
                },
            )
        })
    }

    /// Lists `ino` from `cookie` on: ".", "..", then the entries. `emit(ino, next_cookie, kind,
    /// name)` returns false when the caller's buffer is full.
    pub fn readdir(
        &self,
        ino: Ino,
        cookie: u64,
        mut emit: impl FnMut(Ino, u64, FileKind, &[u8]) -> bool,
    ) -> FsResult<()> {
        let state = self.read_state();
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
        self.listed(inode);
        Ok(())
    }

    /// Lists `ino` as [`readdir`](Self::readdir) does, with every entry's attributes (the
    /// kernel's READDIRPLUS). `emit(attr, next_cookie, name)` returns false when the caller's
    /// buffer is full. Each entry emitted but "." and ".." counts a kernel lookup, as
    /// [`lookup`](Self::lookup) does: the kernel takes a reference on each and forgets it
    /// later (fs/fuse/readdir.c, `fuse_direntplus_link`).
    pub fn readdir_plus(
        &self,
        ctx: &Ctx,
        ino: Ino,
        cookie: u64,
        mut emit: impl FnMut(&Attr, u64, &[u8]) -> bool,
    ) -> FsResult<()> {
        let state = self.read_state();
        let inode = state.inode(ino)?;
        let dir = inode.dir().ok_or(Errno::ENOTDIR)?;
        if cookie == 0 && !emit(&inode.attr(ino), 1, b".") {
            return Ok(());
        }
        if cookie <= 1 {
            // The kernel ignores the attributes of "." and ".." (it takes no reference on
            // them); the directory's own stand in if its parent is gone.
            let parent = state
                .inode(dir.parent)
                .map_or_else(|_| inode.attr(ino), |p| p.attr(dir.parent));
            if !emit(&parent, 2, b"..") {
                return Ok(());
            }
        }
        dir.list_from(cookie.max(2), |e| {
            let Ok(child) = state.inode(e.ino) else {
                debug_assert!(false, "entry {:?} names no inode {}", e.name, e.ino);
                return true;
            };
            let added = emit(&child.attr(e.ino), e.next_cookie, e.name);
            if added {
                count_lookup(ctx, child);
            }
            added
        });
        self.listed(inode);
        Ok(())
    }

    /// A listing reads the directory: its atime moves as relatime says.
    fn listed(&self, inode: &Inode) {
        let atime = inode.atime();
        if atime <= inode.mtime_ns || atime <= inode.ctime_ns {
            inode.set_atime(self.now_ns());
        }
    }
}

/// What `Engine::create_inode` makes: its mode (with the type bits), device number, symlink
/// target, and the category given by the library API, if any (else a rule's, the
/// directory's or the store default).
struct NewInode<'a> {
    mode: u32,
    rdev: u32,
    target: &'a [u8],
    category: Option<(Assigned, Resolved)>,
}

impl<'a> NewInode<'a> {
    fn plain(mode: u32, rdev: u32, target: &'a [u8]) -> NewInode<'a> {
        NewInode {
            mode,
            rdev,
            target,
            category: None,
        }
    }
}

//! The path operations of [`Fs`], each the `std::fs` function of the same name (or the
//! system call named in its doc), with the errno a mount would give.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::resolve::{last_of, Last};
use super::{errno, File, Fs, Metadata, ReadDir};
use crate::attr::{Durability, FileKind, Ino, SetAttr, ROOT_INO};
use crate::error::Errno;

/// Entries removed per listing by `remove_dir_all` before listing again.
const REMOVE_BATCH_ENTRIES: usize = 256;

impl Fs {
    /// Creates a directory (mode 0o755). `AlreadyExists` if the name exists, `NotFound` if
    /// its parent does not.
    ///
    /// ```
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.create_dir("d")?;
    /// assert_eq!(fs.create_dir("d").unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn create_dir(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let (found, name) = self.free_name(path.as_ref(), true)?;
        self.engine()
            .mkdir(self.ctx(), found.parent, &name, 0o755)
            .map(drop)
            .map_err(errno)
    }

    /// Creates a directory and every missing parent; an existing directory is fine.
    ///
    /// ```
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.create_dir_all("a/b/c")?;
    /// fs.create_dir_all("a/b/c")?;
    /// assert!(fs.metadata("a/b/c")?.is_dir());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> io::Result<()> {
        // As std does: the path itself first, then its missing ancestors from the top down,
        // so the error is the one creating the path itself gives (ENOTDIR under a file).
        let path = path.as_ref();
        let mut missing = Vec::new();
        let mut next = Some(path);
        while let Some(dir) = next.filter(|d| !d.as_os_str().is_empty()) {
            match self.create_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(dir),
                Err(_) if self.metadata(dir).is_ok_and(|m| m.is_dir()) => break,
                Err(e) => return Err(e),
            }
            next = dir.parent();
        }
        for dir in missing.into_iter().rev() {
            match self.create_dir(dir) {
                Ok(()) => {}
                Err(_) if self.metadata(dir).is_ok_and(|m| m.is_dir()) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes `contents` as the whole file, creating it (0o644) or replacing its contents.
    pub fn write(&self, path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> io::Result<()> {
        File::create(self, path)?.write_all(contents.as_ref())
    }

    /// Reads the whole file.
    ///
    /// ```
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.write("f", [1u8, 2, 3])?;
    /// assert_eq!(fs.read("f")?, [1, 2, 3]);
    /// assert_eq!(fs.read("none").unwrap_err().kind(), std::io::ErrorKind::NotFound);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read(&self, path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        let mut file = File::open(self, path)?;
        let size = file.metadata()?.len();
        let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Reads the whole file as UTF-8 (`InvalidData` if it is not).
    pub fn read_to_string(&self, path: impl AsRef<Path>) -> io::Result<String> {
        String::from_utf8(self.read(path)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Renames `from` to `to` (rename(2)): replaces a file, or an empty directory by a
    /// directory; symlinks are renamed, not followed.
    ///
    /// ```
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.write("draft", b"v2")?;
    /// fs.write("final", b"v1")?;
    /// fs.rename("draft", "final")?;
    /// assert_eq!(fs.read("final")?, b"v2");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        // The kernel's order (do_renameat2): both parent walks, then `.`/`..`/`/` refused,
        // then the source must exist, then a trailing slash needs a directory.
        let (from, from_last) = self.resolve_entry(from.as_ref()).map_err(errno)?;
        let (to, to_last) = self.resolve_entry(to.as_ref()).map_err(errno)?;
        if from_last != Last::Name || to_last != Last::Name {
            return Err(errno(Errno::EBUSY));
        }
        let attr = from.existing().map_err(errno)?;
        if attr.kind != FileKind::Directory && (from.must_be_dir || to.must_be_dir) {
            return Err(errno(Errno::ENOTDIR));
        }
        let (name, new_name) = (
            from.name_or(Errno::EBUSY).map_err(errno)?,
            to.name_or(Errno::EBUSY).map_err(errno)?,
        );
        self.engine()
            .rename(self.ctx(), from.parent, name, to.parent, new_name, 0)
            .map_err(errno)
    }

    /// Removes a file or symlink (unlink(2)); `IsADirectory` for a directory. A file still
    /// open lives on until its last [`File`] is dropped.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        // The kernel's order (do_unlinkat): `.`/`..`/`/`, then the name must exist, then a
        // trailing slash or a directory.
        let (found, last) = self.resolve_entry(path.as_ref()).map_err(errno)?;
        if last != Last::Name {
            return Err(errno(Errno::EISDIR));
        }
        let attr = found.existing().map_err(errno)?;
        if attr.kind == FileKind::Directory {
            return Err(errno(Errno::EISDIR));
        }
        if found.must_be_dir {
            return Err(errno(Errno::ENOTDIR));
        }
        let name = found.name_or(Errno::EISDIR).map_err(errno)?;
        self.engine()
            .unlink(self.ctx(), found.parent, name)
            .map_err(errno)
    }

    /// Removes an empty directory; `DirectoryNotEmpty` otherwise, `NotADirectory` for a file.
    pub fn remove_dir(&self, path: impl AsRef<Path>) -> io::Result<()> {
        // The kernel's order (do_rmdir): `.`/`..`/`/` each refused, then the name.
        let (found, last) = self.resolve_entry(path.as_ref()).map_err(errno)?;
        match last {
            Last::Name => {}
            Last::Dot => return Err(errno(Errno::EINVAL)),
            Last::DotDot => return Err(errno(Errno::ENOTEMPTY)),
            Last::Root => return Err(errno(Errno::EBUSY)),
        }
        let attr = found.existing().map_err(errno)?;
        if attr.kind != FileKind::Directory {
            return Err(errno(Errno::ENOTDIR));
        }
        let name = found.name_or(Errno::EBUSY).map_err(errno)?;
        self.engine()
            .rmdir(self.ctx(), found.parent, name)
            .map_err(errno)
    }

    /// Removes a directory and everything in it, without following symlinks.
    ///
    /// ```
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.create_dir_all("t/a/b")?;
    /// fs.write("t/a/b/f", b"x")?;
    /// fs.remove_dir_all("t")?;
    /// assert!(!fs.exists("t")?);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn remove_dir_all(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        let found = self.resolve(path, false).map_err(errno)?;
        let attr = found.existing().map_err(errno)?;
        if attr.kind == FileKind::Symlink {
            // As std: a symlink is removed itself, never followed.
            return self.remove_file(path);
        }
        // `.`, `..` and `/` are refused with rmdir's errno before anything is removed (std
        // empties them first, then fails at their rmdir: decision 0140).
        match last_of(path.as_os_str().as_bytes()) {
            Last::Name => {}
            Last::Dot => return Err(errno(Errno::EINVAL)),
            Last::DotDot => return Err(errno(Errno::ENOTEMPTY)),
            Last::Root => return Err(errno(Errno::EBUSY)),
        }
        if attr.kind != FileKind::Directory {
            return Err(errno(Errno::ENOTDIR));
        }
        if attr.ino == ROOT_INO {
            return Err(errno(Errno::EBUSY)); // the root through a symlink
        }
        // Depth first with a stack of its own: no recursion however deep the tree. The path
        // itself, at the bottom, is removed by its path (below), so it needs no name.
        let mut stack: Vec<(Ino, Vec<u8>, Ino)> = vec![(found.parent, Vec::new(), attr.ino)];
        while let Some((parent, name, dir)) = stack.last().cloned() {
            let entries = self.entries(dir, REMOVE_BATCH_ENTRIES)?;
            if entries.is_empty() && stack.len() == 1 {
                // The path itself, as rmdir(2) names it: `link/` to a directory is emptied
                // and then refused (ENOTDIR), as std does; gone already (the emptying removed
                // a symlink on the path) is done, as for std.
                return match self.remove_dir(path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    done => done,
                };
            }
            if entries.is_empty() {
                self.engine()
                    .rmdir(self.ctx(), parent, &name)
                    .map_err(errno)?;
                stack.pop();
                continue;
            }
            for (child_name, ino, kind) in entries {
                if kind == FileKind::Directory {
                    stack.push((dir, child_name, ino));
                } else {
                    self.engine()
                        .unlink(self.ctx(), dir, &child_name)
                        .map_err(errno)?;
                }
            }
        }
        Ok(())
    }

    /// The directory and the free name `path` would create (the kernel's filename_create):
    /// EEXIST for `.`, `..`, `/` or a name in use (a symlink is not followed), ENOENT for a
    /// trailing slash on anything but a new directory.
    fn free_name<'p>(
        &self,
        path: &'p Path,
        directory: bool,
    ) -> io::Result<(super::resolve::Found<'p>, std::borrow::Cow<'p, [u8]>)> {
        let (found, last) = self.resolve_entry(path).map_err(errno)?;
        if last != Last::Name || found.attr.is_some() {
            return Err(errno(Errno::EEXIST));
        }
        if found.must_be_dir && !directory {
            return Err(errno(Errno::ENOENT));
        }
        let name = found.name.clone().ok_or_else(|| errno(Errno::EEXIST))?;
        Ok((found, name))
    }

    /// Up to `max` entries of `dir` (without `.` and `..`).
    fn entries(&self, dir: Ino, max: usize) -> io::Result<Vec<(Vec<u8>, Ino, FileKind)>> {
        let mut out = Vec::new();
        self.engine()
            .readdir(dir, 2, |ino, _, kind, name| {
                out.push((name.to_vec(), ino, kind));
                out.len() < max
            })
            .map_err(errno)?;
        Ok(out)
    }

    /// The entries of a directory (following symlinks to it), without `.` and `..`.
    pub fn read_dir(&self, path: impl AsRef<Path>) -> io::Result<ReadDir> {
        let attr = self.metadata(path.as_ref())?;
        if !attr.is_dir() {
            return Err(errno(Errno::ENOTDIR));
        }
        Ok(ReadDir::new(
            self.clone(),
            attr.ino(),
            path.as_ref().to_path_buf(),
        ))
    }

    /// The attributes of what `path` names, following symlinks (stat).
    pub fn metadata(&self, path: impl AsRef<Path>) -> io::Result<Metadata> {
        self.stat(path.as_ref(), true)
    }

    /// The attributes of what `path` names, not following a last symlink (lstat).
    ///
    /// ```
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.write("target", b"12345")?;
    /// fs.symlink("target", "link")?;
    /// assert!(fs.symlink_metadata("link")?.is_symlink());
    /// assert_eq!(fs.metadata("link")?.len(), 5);
    /// assert_eq!(fs.read_link("link")?, std::path::Path::new("target"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn symlink_metadata(&self, path: impl AsRef<Path>) -> io::Result<Metadata> {
        self.stat(path.as_ref(), false)
    }

    fn stat(&self, path: &Path, follow: bool) -> io::Result<Metadata> {
        let found = self.resolve(path, follow).map_err(errno)?;
        found.existing().map(Metadata::new).map_err(errno)
    }

    /// Whether `path` names something (following symlinks); errors other than `NotFound`
    /// are returned (as `std::fs::exists`).
    pub fn exists(&self, path: impl AsRef<Path>) -> io::Result<bool> {
        match self.metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Sets the permission bits (chmod; follows symlinks).
    ///
    /// ```
    /// use std::os::unix::fs::PermissionsExt;
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.write("script", b"#!/bin/sh\n")?;
    /// fs.set_permissions("script", std::fs::Permissions::from_mode(0o755))?;
    /// assert_eq!(fs.metadata("script")?.mode(), 0o755);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_permissions(
        &self,
        path: impl AsRef<Path>,
        perm: std::fs::Permissions,
    ) -> io::Result<()> {
        let ino = self.metadata(path)?.ino();
        self.set_mode(ino, perm)
    }

    pub(crate) fn set_mode(&self, ino: Ino, perm: std::fs::Permissions) -> io::Result<()> {
        let set = SetAttr {
            mode: Some(perm.mode() & 0o7777),
            ..SetAttr::default()
        };
        self.engine()
            .setattr(self.ctx(), ino, &set)
            .map(drop)
            .map_err(errno)
    }

    /// Sets how soon changes to a file reach the store (follows symlinks): `Volatile` files
    /// are never written to it (gone after a restart, as on tmpfs), `BeforeReturn` ones are
    /// durable when each call returns.
    pub fn set_durability(&self, path: impl AsRef<Path>, durability: Durability) -> io::Result<()> {
        let ino = self.metadata(path)?.ino();
        self.engine()
            .set_durability(self.ctx(), ino, durability)
            .map_err(errno)
    }

    /// Gives a file or directory a category (follows symlinks; `None`: back to the store
    /// default), as the library API does (origin `api`). A directory hands it to what is
    /// created in it. Unknown or unusable names fail with `InvalidInput` and what to do.
    pub fn set_category(&self, path: impl AsRef<Path>, name: Option<&str>) -> io::Result<()> {
        let ino = self.metadata(path)?.ino();
        self.engine()
            .set_category(self.ctx(), ino, name, crate::category::Origin::Api)
            .map_err(super::category_error)
    }

    /// The category of a file or directory (follows symlinks): its name, where it came from
    /// and its spec.
    pub fn category(&self, path: impl AsRef<Path>) -> io::Result<crate::engine::CategoryInfo> {
        let ino = self.metadata(path)?.ino();
        self.engine().category(ino).map_err(errno)
    }

    /// Creates a symlink at `link` pointing to `original` (kept as given, resolved when
    /// followed), as `std::os::unix::fs::symlink`.
    pub fn symlink(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
        let (found, name) = self.free_name(link.as_ref(), false)?;
        let target = original.as_ref().as_os_str().as_bytes();
        self.engine()
            .symlink(self.ctx(), found.parent, &name, target)
            .map(drop)
            .map_err(errno)
    }

    /// The target of a symlink; `InvalidInput` if `path` is not one.
    pub fn read_link(&self, path: impl AsRef<Path>) -> io::Result<PathBuf> {
        let attr = self.symlink_metadata(path)?;
        let target = self.engine().readlink(attr.ino()).map_err(errno)?;
        Ok(PathBuf::from(OsString::from_vec(target)))
    }

    /// Makes `link` a new name of `original` (link(2); a symlink is linked, not followed).
    ///
    /// ```
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.write("a", b"shared")?;
    /// fs.hard_link("a", "b")?;
    /// fs.remove_file("a")?;
    /// assert_eq!(fs.read("b")?, b"shared");
    /// assert_eq!(fs.metadata("b")?.nlink(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn hard_link(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
        let attr = self.symlink_metadata(original)?;
        // The kernel's order (do_linkat): the new name must be free before the original
        // may be refused for being a directory.
        let (found, name) = self.free_name(link.as_ref(), false)?;
        if attr.is_dir() {
            return Err(errno(Errno::EPERM));
        }
        self.engine()
            .link(self.ctx(), attr.ino(), found.parent, &name)
            .map(drop)
            .map_err(errno)
    }

    /// The value of the extended attribute `name` ("user.x", ...; follows symlinks);
    /// ENODATA (`raw_os_error`) if it is not set.
    ///
    /// ```
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// fs.write("f", b"")?;
    /// fs.set_xattr("f", "user.colour", b"blue")?;
    /// assert_eq!(fs.get_xattr("f", "user.colour")?, b"blue");
    /// assert_eq!(fs.list_xattr("f")?, ["user.colour"]);
    /// fs.remove_xattr("f", "user.colour")?;
    /// let e = fs.get_xattr("f", "user.colour").unwrap_err();
    /// assert_eq!(e.raw_os_error(), Some(libc::ENODATA));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn get_xattr(
        &self,
        path: impl AsRef<Path>,
        name: impl AsRef<OsStr>,
    ) -> io::Result<Vec<u8>> {
        let ino = self.metadata(path)?.ino();
        self.engine()
            .getxattr(ino, name.as_ref().as_bytes())
            .map_err(errno)
    }

    /// Sets the extended attribute `name` to `value`, creating or replacing it.
    pub fn set_xattr(
        &self,
        path: impl AsRef<Path>,
        name: impl AsRef<OsStr>,
        value: impl AsRef<[u8]>,
    ) -> io::Result<()> {
        let ino = self.metadata(path)?.ino();
        self.engine()
            .setxattr(self.ctx(), ino, name.as_ref().as_bytes(), value.as_ref(), 0)
            .map_err(errno)
    }

    /// The names of the extended attributes (trusted.* ones only for uid 0, as the kernel
    /// shows them).
    pub fn list_xattr(&self, path: impl AsRef<Path>) -> io::Result<Vec<OsString>> {
        let ino = self.metadata(path)?.ino();
        let list = self
            .engine()
            .listxattr(ino, self.ctx().uid == 0)
            .map_err(errno)?;
        Ok(list
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| OsStr::from_bytes(n).to_owned())
            .collect())
    }

    /// Removes the extended attribute `name`; ENODATA if it is not set.
    pub fn remove_xattr(&self, path: impl AsRef<Path>, name: impl AsRef<OsStr>) -> io::Result<()> {
        let ino = self.metadata(path)?.ino();
        self.engine()
            .removexattr(self.ctx(), ino, name.as_ref().as_bytes())
            .map_err(errno)
    }
}

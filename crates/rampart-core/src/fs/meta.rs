//! What the path API reports about files: [`Metadata`], and directory listings ([`ReadDir`],
//! [`DirEntry`]).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{errno, Fs};
use crate::attr::{Attr, Durability, FileKind, Ino};
use crate::time::to_system_time;

/// A file's attributes, as [`std::fs::Metadata`] gives them (`stat`).
///
/// ```
/// # let fs = rampart_core::fs::Fs::in_memory();
/// fs.write("notes.txt", b"hello")?;
/// let meta = fs.metadata("notes.txt")?;
/// assert!(meta.is_file());
/// assert_eq!(meta.len(), 5);
/// assert_eq!(meta.nlink(), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata {
    attr: Attr,
}

impl Metadata {
    pub(crate) fn new(attr: Attr) -> Metadata {
        Metadata { attr }
    }

    /// The engine's attributes, with every field.
    pub fn attr(&self) -> &Attr {
        &self.attr
    }

    /// What kind of file it is.
    pub fn kind(&self) -> FileKind {
        self.attr.kind
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.attr.kind == FileKind::RegularFile
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.attr.kind == FileKind::Directory
    }

    /// A symbolic link (only from [`Fs::symlink_metadata`], which does not follow it).
    pub fn is_symlink(&self) -> bool {
        self.attr.kind == FileKind::Symlink
    }

    /// Size in bytes (a symlink's: its target's length).
    pub fn len(&self) -> u64 {
        self.attr.size_bytes
    }

    /// Whether the size is 0.
    pub fn is_empty(&self) -> bool {
        self.attr.size_bytes == 0
    }

    /// The inode number.
    pub fn ino(&self) -> Ino {
        self.attr.ino
    }

    /// How many names link to it.
    pub fn nlink(&self) -> u32 {
        self.attr.nlink
    }

    /// The owner's user id.
    pub fn uid(&self) -> u32 {
        self.attr.uid
    }

    /// The owner's group id.
    pub fn gid(&self) -> u32 {
        self.attr.gid
    }

    /// The permission bits (rwx, setuid, setgid, sticky) without the type bits.
    pub fn mode(&self) -> u32 {
        u32::from(self.attr.perm)
    }

    /// The permissions, as [`std::fs::Permissions`] (built with `PermissionsExt::from_mode`).
    pub fn permissions(&self) -> std::fs::Permissions {
        std::fs::Permissions::from_mode(self.mode())
    }

    /// Last modification of the contents (mtime).
    pub fn modified(&self) -> SystemTime {
        to_system_time(self.attr.mtime_ns)
    }

    /// Last access (atime, relatime as on a mount).
    pub fn accessed(&self) -> SystemTime {
        to_system_time(self.attr.atime_ns)
    }

    /// Last change of the inode (ctime).
    pub fn changed(&self) -> SystemTime {
        to_system_time(self.attr.ctime_ns)
    }

    /// How soon changes to it reach the store.
    pub fn durability(&self) -> Durability {
        self.attr.durability
    }
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    name: OsString,
    ino: Ino,
    kind: FileKind,
    path: PathBuf,
}

impl DirEntry {
    /// The entry's name.
    pub fn file_name(&self) -> &OsStr {
        &self.name
    }

    /// The path given to [`Fs::read_dir`] joined with the name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The inode number it names.
    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// The kind of file it names (a symlink is not followed).
    pub fn file_type(&self) -> FileKind {
        self.kind
    }
}

/// How many entries [`ReadDir`] fetches from the engine at a time (its memory bound).
const ENTRIES_PER_FETCH: usize = 256;

/// The entries of a directory, without `.` and `..`, from [`Fs::read_dir`]. Fetched a batch at
/// a time by cookie, so entries added or removed meanwhile appear or not, and none appears
/// twice (as with readdir(3)).
///
/// ```
/// # let fs = rampart_core::fs::Fs::in_memory();
/// fs.create_dir("d")?;
/// fs.write("d/a", b"1")?;
/// fs.create_dir("d/sub")?;
/// let mut names: Vec<_> = fs
///     .read_dir("d")?
///     .map(|e| e.map(|e| e.file_name().to_owned()))
///     .collect::<std::io::Result<_>>()?;
/// names.sort();
/// assert_eq!(names, ["a", "sub"]);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct ReadDir {
    fs: Fs,
    ino: Ino,
    base: PathBuf,
    cookie: u64,
    batch: std::collections::VecDeque<DirEntry>,
    done: bool,
}

impl ReadDir {
    pub(crate) fn new(fs: Fs, ino: Ino, base: PathBuf) -> ReadDir {
        ReadDir {
            fs,
            ino,
            base,
            cookie: 0,
            batch: Default::default(),
            done: false,
        }
    }

    fn fetch(&mut self) -> std::io::Result<()> {
        let mut next = self.cookie;
        let mut fetched = 0;
        let (base, batch) = (&self.base, &mut self.batch);
        self.fs
            .engine()
            .readdir(self.ino, self.cookie, |ino, cookie, kind, name| {
                if fetched == ENTRIES_PER_FETCH {
                    return false;
                }
                next = cookie;
                fetched += 1;
                if name != b"." && name != b".." {
                    let name = OsStr::from_bytes(name).to_owned();
                    batch.push_back(DirEntry {
                        path: base.join(&name),
                        name,
                        ino,
                        kind,
                    });
                }
                true
            })
            .map_err(errno)?;
        self.done = fetched < ENTRIES_PER_FETCH;
        self.cookie = next;
        Ok(())
    }
}

impl Iterator for ReadDir {
    type Item = std::io::Result<DirEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.batch.is_empty() && !self.done {
            if let Err(e) = self.fetch() {
                self.done = true;
                return Some(Err(e));
            }
        }
        self.batch.pop_front().map(Ok)
    }
}

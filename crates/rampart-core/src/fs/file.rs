//! Open files of the path API: [`OpenOptions`] and [`File`], with `Read`, `Write` and `Seek`.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::resolve::{last_of, Last};
use super::{errno, Fs, Metadata};
use crate::attr::{Durability, FileKind, Ino, SetAttr};
use crate::engine::ReadBuf;
use crate::error::Errno;
use crate::limits::WRITE_BYTES_MAX;

/// How to open a file, as [`std::fs::OpenOptions`]: read, write, append, truncate, create,
/// create_new, and the mode of a created file (0o644 unless set; no umask is applied).
///
/// ```
/// use std::io::{Read, Write};
/// use rampart_core::fs::OpenOptions;
/// # let fs = rampart_core::fs::Fs::in_memory();
/// let mut log = OpenOptions::new().append(true).create(true).open(&fs, "log")?;
/// log.write_all(b"one\n")?;
/// log.write_all(b"two\n")?;
/// assert_eq!(fs.read_to_string("log")?, "one\ntwo\n");
/// // create_new refuses an existing file.
/// let e = OpenOptions::new().write(true).create_new(true).open(&fs, "log").unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
    /// A category (or `spec:` and a raw spec) given to the file at open.
    category: Option<String>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// Every option off, mode 0o644.
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o644,
            category: None,
        }
    }

    /// Open for reading.
    pub fn read(&mut self, read: bool) -> &mut Self {
        self.read = read;
        self
    }

    /// Open for writing.
    pub fn write(&mut self, write: bool) -> &mut Self {
        self.write = write;
        self
    }

    /// Every write goes to the end of the file (implies writing).
    pub fn append(&mut self, append: bool) -> &mut Self {
        self.append = append;
        self
    }

    /// Cut the file to 0 bytes when opened (needs writing).
    pub fn truncate(&mut self, truncate: bool) -> &mut Self {
        self.truncate = truncate;
        self
    }

    /// Create the file if it does not exist (needs writing or appending).
    pub fn create(&mut self, create: bool) -> &mut Self {
        self.create = create;
        self
    }

    /// Create the file, failing with `AlreadyExists` if the name exists, even as a symlink
    /// (O_CREAT|O_EXCL).
    pub fn create_new(&mut self, create_new: bool) -> &mut Self {
        self.create_new = create_new;
        self
    }

    /// The permission bits of a created file (as `OpenOptionsExt::mode`, without a umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode & 0o7777;
        self
    }

    /// Gives the file this category when opened (or created), over any rule, attribute or
    /// directory (docs/CATEGORIES.md): a name such as `"SAFE"`, or `"spec:"` and a raw spec.
    /// An unknown or unusable one fails the open with `InvalidInput` and what to do; a file
    /// it created then stays, with the category rules gave it.
    ///
    /// ```
    /// use std::io::Write;
    /// use rampart_core::fs::OpenOptions;
    /// # let fs = rampart_core::fs::Fs::in_memory();
    /// let mut scratch = OpenOptions::new().write(true).create(true).category("TEMPORARY")
    ///     .open(&fs, "scratch")?;
    /// scratch.write_all(b"never written to the store")?;
    /// assert_eq!(scratch.category()?.name, "TEMPORARY");
    /// let e = OpenOptions::new().write(true).create(true).category("ROBUST")
    ///     .open(&fs, "x").unwrap_err();
    /// assert!(e.to_string().contains("needs a second copy (DA2)"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn category(&mut self, name: &str) -> &mut Self {
        self.category = Some(name.to_string());
        self
    }

    /// Opens `path` in `fs` with these options. Errors as open(2): `NotFound`,
    /// `AlreadyExists`, `IsADirectory` (writing a directory), `NotADirectory`, `InvalidInput`
    /// (an inconsistent set of options, or a category that cannot be used), ELOOP and
    /// ENAMETOOLONG.
    pub fn open(&self, fs: &Fs, path: impl AsRef<Path>) -> io::Result<File> {
        let (file, created) = self.open_inner(fs, path.as_ref())?;
        if let (Some(name), false) = (&self.category, created) {
            file.set_category(Some(name))?;
        }
        Ok(file)
    }

    /// The file opened, and whether it was created (then with its category, if any).
    fn open_inner(&self, fs: &Fs, path: &Path) -> io::Result<(File, bool)> {
        let mut created = false;
        let file = self
            .open_or_create(fs, path, &mut created)
            .map_err(|e| match e {
                OpenError::Errno(e) => errno(e),
                OpenError::Category(e) => super::category_error(e),
            })?;
        Ok((file, created))
    }

    fn open_or_create(&self, fs: &Fs, path: &Path, created: &mut bool) -> Result<File, OpenError> {
        let writes = self.write || self.append;
        let needs_writing = self.truncate || self.create || self.create_new;
        if !writes && (!self.read || needs_writing) {
            return Err(Errno::EINVAL.into());
        }
        if self.create || self.create_new {
            // The kernel's open_last_lookups: a path ending in `.`, `..` or `/` opens a
            // directory (EEXIST under O_EXCL, else EISDIR), and a trailing slash after a name
            // is EISDIR whether it exists or not; the parent walk's errors come first.
            let bytes = path.as_os_str().as_bytes();
            let last = last_of(bytes);
            if last != Last::Name || bytes.ends_with(b"/") {
                fs.resolve_entry(path)?;
                return Err(if last != Last::Name && self.create_new {
                    Errno::EEXIST
                } else {
                    Errno::EISDIR
                }
                .into());
            }
        }
        let engine = fs.engine();
        // The lookup of an existing name is counted as the kernel counts an open inode:
        // unlinked while open, it lives on until the handle is dropped (`forget`).
        let found = fs.resolve_counted(path, !self.create_new, self.create && !self.create_new)?;
        let attr = match (found.attr, found.name.as_deref()) {
            (Some(attr), name) if self.create_new => {
                if name.is_some() {
                    engine.forget(attr.ino, 1);
                }
                return Err(Errno::EEXIST.into());
            }
            (Some(attr), Some(_)) => attr,
            // The root, or a directory reached by "..": directories are not freed while
            // open, as they cannot be removed unless empty and an open one reads as empty.
            (Some(attr), None) => attr,
            (None, _) if !(self.create || self.create_new) => return Err(Errno::ENOENT.into()),
            (None, _) if found.must_be_dir => return Err(Errno::EISDIR.into()),
            (None, Some(name)) => {
                *created = true;
                match &self.category {
                    // Created in its category: one that never reaches the store is not
                    // created there first (decision 0066).
                    Some(category) => engine
                        .create_file_in_category(
                            &fs.open_ctx(),
                            found.parent,
                            name,
                            self.mode,
                            category,
                        )
                        .map_err(OpenError::Category)?,
                    None => engine.mknod(
                        &fs.open_ctx(),
                        found.parent,
                        name,
                        libc::S_IFREG | self.mode,
                        0,
                    )?,
                }
            }
            (None, None) => return Err(Errno::ENOENT.into()),
        };
        let counted = found.name.is_some();
        let file = File {
            fs: fs.clone(),
            ino: attr.ino,
            counted,
            pos: 0,
            read: self.read,
            write: writes,
            append: self.append,
            scratch: ReadBuf::new(),
        };
        if attr.kind == FileKind::Directory && writes {
            return Err(Errno::EISDIR.into());
        }
        if self.truncate && attr.kind == FileKind::RegularFile && attr.size_bytes > 0 {
            let set = SetAttr {
                size_bytes: Some(0),
                ..SetAttr::default()
            };
            engine.setattr(fs.ctx(), attr.ino, &set)?;
        }
        Ok(file)
    }
}

/// Why `OpenOptions::open_or_create` failed.
enum OpenError {
    Errno(Errno),
    /// The category to create the file in cannot be used.
    Category(crate::category::CategoryError),
}

impl From<Errno> for OpenError {
    fn from(e: Errno) -> Self {
        OpenError::Errno(e)
    }
}

/// An open file of an [`Fs`], as [`std::fs::File`]: `Read`, `Write` and `Seek` at a position
/// of its own. It keeps its inode (and the store) alive: a file removed while open can still be
/// read and written until the handle is dropped.
///
/// Writes are in memory when they return; [`File::sync_all`] (fsync) makes them durable, and
/// the store's commit interval does in any case.
///
/// ```
/// use std::io::{Read, Seek, SeekFrom, Write};
/// use rampart_core::fs::{File, OpenOptions};
/// # let fs = rampart_core::fs::Fs::in_memory();
/// let mut f = OpenOptions::new().read(true).write(true).create(true).open(&fs, "data.bin")?;
/// f.write_all(b"0123456789")?;
/// f.seek(SeekFrom::Start(4))?;
/// let mut four = [0; 4];
/// f.read_exact(&mut four)?;
/// assert_eq!(&four, b"4567");
/// f.sync_all()?; // durable (on a store; an in-memory Fs has nothing to sync)
/// drop(f);
/// let mut again = String::new();
/// File::open(&fs, "data.bin")?.read_to_string(&mut again)?;
/// assert_eq!(again, "0123456789");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct File {
    fs: Fs,
    ino: Ino,
    /// Whether opening counted a reference to the inode (dropped by `forget`).
    counted: bool,
    pos: u64,
    read: bool,
    write: bool,
    append: bool,
    scratch: ReadBuf,
}

impl File {
    /// Opens `path` for reading (follows symlinks).
    pub fn open(fs: &Fs, path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).open(fs, path)
    }

    /// Opens `path` for writing, creating it (mode 0o644) or cutting it to 0 bytes.
    pub fn create(fs: &Fs, path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(fs, path)
    }

    /// The file's inode number.
    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// Its attributes now (fstat).
    pub fn metadata(&self) -> io::Result<Metadata> {
        self.fs
            .engine()
            .getattr(self.ino)
            .map(Metadata::new)
            .map_err(errno)
    }

    /// Cuts or extends the file to `size_bytes` (extending with zeros); the position stays.
    pub fn set_len(&self, size_bytes: u64) -> io::Result<()> {
        if !self.write {
            return Err(errno(Errno::EINVAL));
        }
        let set = SetAttr {
            size_bytes: Some(size_bytes),
            kill_suidgid: self.fs.ctx().uid != 0,
            ..SetAttr::default()
        };
        self.fs
            .engine()
            .setattr(self.fs.ctx(), self.ino, &set)
            .map(drop)
            .map_err(errno)
    }

    /// Sets the permission bits (fchmod).
    pub fn set_permissions(&self, perm: std::fs::Permissions) -> io::Result<()> {
        self.fs.set_mode(self.ino, perm)
    }

    /// Sets how soon changes to this file reach the store (volatile files never do).
    pub fn set_durability(&self, durability: Durability) -> io::Result<()> {
        self.fs
            .engine()
            .set_durability(self.fs.ctx(), self.ino, durability)
            .map_err(errno)
    }

    /// Gives the file a category (`None`: back to the store default), as the library API
    /// does (origin `api`): a name such as `"EDITED"`, or `"spec:"` and a raw spec.
    pub fn set_category(&self, name: Option<&str>) -> io::Result<()> {
        self.fs
            .engine()
            .set_category(self.fs.ctx(), self.ino, name, crate::category::Origin::Api)
            .map_err(super::category_error)
    }

    /// The file's category: its name, where it came from and its spec.
    pub fn category(&self) -> io::Result<crate::engine::CategoryInfo> {
        self.fs.engine().category(self.ino).map_err(errno)
    }

    /// Makes the file's data and attributes durable (fsync). The store commits every change
    /// before this one with it: one journal sync for all of them.
    pub fn sync_all(&self) -> io::Result<()> {
        // A file held out of the store (decision 0090) is made present first.
        self.fs.engine().archive_for_sync(self.ino).map_err(errno)?;
        let host = self.fs.engine().host_sync_name(self.ino);
        let synced = self.fs.engine().sync();
        // A sync of its host file that failed with no fsync waiting (fsyncgate, decision
        // 0126); asked after the sync, and whatever it answered, so it is told once.
        let told = host.is_some_and(|h| self.fs.engine().take_host_sync_error(&h));
        synced?;
        if told {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        // A ROBUST or PARANOID file on a store whose mirror is degraded (decision 0077).
        self.fs
            .engine()
            .check_da2(self.ino)
            .map_err(|e| io::Error::from_raw_os_error(e.0))
    }

    /// Makes the file's data durable (fdatasync; the same as [`File::sync_all`] here).
    pub fn sync_data(&self) -> io::Result<()> {
        self.sync_all()
    }

    /// Closes the file, as close(2): for a file durable at close (`lm=until_close`, e.g.
    /// EDITED) it returns once the file's changes are durable, and says so if they could not
    /// be made durable (dropping the handle does the same but can only log the failure).
    pub fn close(mut self) -> io::Result<()> {
        let durable_at_close = self.write && self.fs.engine().durable_at_close(self.ino);
        // Drop must not sync again.
        self.write = false;
        if durable_at_close {
            self.sync_all()?;
        }
        Ok(())
    }

    fn write_at(&mut self, buf: &[u8]) -> Result<usize, Errno> {
        if !self.write {
            return Err(Errno(libc::EBADF));
        }
        let engine = self.fs.engine();
        if self.append {
            self.pos = engine.getattr(self.ino)?.size_bytes;
        }
        let piece = &buf[..buf.len().min(WRITE_BYTES_MAX)];
        let kill_suidgid = self.fs.ctx().uid != 0;
        let done = engine.write(self.fs.ctx(), self.ino, self.pos, piece, kill_suidgid)?;
        self.pos += u64::from(done);
        Ok(done as usize)
    }

    fn read_at(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        if !self.read {
            return Err(Errno(libc::EBADF));
        }
        let size = buf.len().min(WRITE_BYTES_MAX) as u32;
        self.fs
            .engine()
            .read(self.ino, self.pos, size, &mut self.scratch)?;
        let n = self.scratch.len().min(buf.len());
        buf[..n].copy_from_slice(&self.scratch[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_at(buf).map_err(errno)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_at(buf).map_err(errno)
    }

    /// Nothing to do: a write is in the file system when it returns.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match pos {
            SeekFrom::Start(offset) => {
                self.pos = offset;
                return Ok(offset);
            }
            SeekFrom::Current(delta) => (self.pos, delta),
            SeekFrom::End(delta) => (self.metadata()?.len(), delta),
        };
        let pos = base
            .checked_add_signed(delta)
            .ok_or_else(|| errno(Errno::EINVAL))?;
        self.pos = pos;
        Ok(pos)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        // `lm=until_close` (EDITED): durable once the handle is closed. A failure here has
        // no caller to go to; it is logged, and the commit interval still applies.
        if self.write && self.fs.engine().durable_at_close(self.ino) {
            if let Err(e) = self.fs.engine().sync() {
                tracing::error!("closing inode {}: not made durable: {e}", self.ino);
            }
        }
        if self.counted {
            self.fs.engine().forget(self.ino, 1);
        }
    }
}

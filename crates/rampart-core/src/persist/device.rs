//! The device: the seam through which the persistence layer does all of its I/O.
//!
//! The journal and the checkpoints never touch `std::fs`: they read, append, write, truncate,
//! sync, rename and remove flat-named files of the store folder through a [`Device`].
//! Production uses [`DirDevice`] (files in a folder; [`DirDevice::open_read_only`] to check a
//! store without changing it). Crash tests use [`SimDevice`], a deterministic simulated disk
//! that loses unsynced writes, tears the last appends, fails syncs or writes on demand and
//! flips bits, in the style of SQLite's test VFS and TigerBeetle's simulated storage.
//!
//! # The durability model
//!
//! Each file has a *volatile* content (what reads return now) and a *durable* content (what a
//! power cut leaves), possibly none: a file created and never synced has no durable content.
//! [`DirDevice`] relies on Linux file systems to provide these rules; [`SimDevice`] enforces
//! exactly them, no more, no less.
//!
//! 1. `append`, `write`, `write_at` and `truncate` change the volatile content only. A crash
//!    may lose them, partly or wholly, until the next `sync` of that file.
//! 2. `sync(name)` makes the file's volatile content its durable content, and the file's
//!    existence durable too ([`DirDevice`] also fsyncs the folder the first time it syncs a
//!    file it created). Nothing else becomes durable: each file is synced on its own.
//! 3. `rename(from, to)` and `remove(name)` are durable when they return (each ends with an
//!    fsync of the folder), but they sync no content. After `rename(from, to)` a crash leaves
//!    `from` absent, the old `to` gone, and at `to` the content that was durable for `from` at
//!    the moment of the rename — an empty file if `from` was never synced — plus, under torn
//!    writes, a prefix of what was appended to it since (rule 4). The safe way to replace a
//!    file is therefore: write `tmp`, sync `tmp`, rename `tmp` to the final name.
//! 4. What a power cut leaves of one file ([`CrashMode`]):
//!    - [`CrashMode::LoseUnsynced`]: its durable content, or no file if it has none.
//!    - [`CrashMode::TornTail`]: if the volatile content is at least as long as the durable
//!      one, the changes since the last sync reach the disk in file order up to a random byte
//!      (the cut, from nothing to all): the volatile bytes before the cut, the durable bytes
//!      after it. For appends that is the durable content followed by a prefix of the bytes
//!      appended since; for an overwrite (`write_at`) it is a write torn at any byte. If the
//!      file is now shorter than its durable content (`truncate`, a shorter `write`), the
//!      durable content. A file with no durable content is absent, or holds a prefix of its
//!      volatile content. (Real disks also land the sectors of one unsynced write in any
//!      order; the journal's format is argued against that in docs/FORMAT.md, and its scan is
//!      tested against it, but the simulation does not produce it.)
//!    - [`CrashMode::Random`]: per file, one of the two above.
//!
//!    So every byte of a file after a crash is either its durable byte or its volatile byte,
//!    and the new ones come before the old ones: a torn write never invents bytes (no zeros,
//!    no garbage, no reordering). Real disks can do worse (lying write caches, misdirected
//!    writes, sectors of one write landing out of order); bit flips model the damage that
//!    checksums must catch.
//! 5. A failed `sync`, `rename` or `remove` (EIO) makes nothing durable, and the caller must
//!    not assume anything reached the disk (on Linux a failed fsync may even drop the dirty
//!    pages, so retrying it proves nothing). A failed `append`, `write` or `write_at` (ENOSPC)
//!    changes nothing in the simulation; on a real disk it may have written a part.
//! 6. [`SimDevice::flip_bit`] damages durable content, as media corruption does. Detecting it is
//!    the job of the formats' checksums, never of this layer.
//!
//! Sync points, which [`SimDevice::sync_count`] counts and [`SimDevice::fail_after_syncs`]
//! makes fail, are the successful calls of `sync`, `rename`, and `remove` of an existing file:
//! the moments when the durable state changes. A test crashes "at every sync point" by running
//! a workload with `fail_after_syncs(k)` for each `k` and calling [`SimDevice::crash`].
//!
//! Names are flat: not empty, not `.` or `..`, no `/` or NUL, at most 255 bytes; anything else
//! is an `InvalidInput` error on both devices.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

/// The store's files, as the persistence layer sees them: flat names inside the store folder.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// The whole content of a file; Ok(None) if it does not exist.
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// The length of a file; Ok(None) if it does not exist.
    fn len(&self, name: &str) -> io::Result<Option<u64>>;
    /// Appends to a file (created if absent). Not durable until `sync`.
    fn append(&self, name: &str, data: &[u8]) -> io::Result<()>;
    /// Creates or replaces a file with `data` (not durable until `sync`).
    fn write(&self, name: &str, data: &[u8]) -> io::Result<()>;
    /// Writes `data` over an existing file from `offset`, which is at most its length; the
    /// file grows if the data runs past its end (not durable until `sync`). InvalidInput if
    /// `offset` is past the end (no holes), ENOENT if the file does not exist.
    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Shrinks a file to `len` bytes (not durable until `sync`).
    fn truncate(&self, name: &str, len: u64) -> io::Result<()>;
    /// Makes a file's content durable (fdatasync).
    fn sync(&self, name: &str) -> io::Result<()>;
    /// Atomically and durably renames `from` to `to`, replacing `to` (rename, then fsync of the folder).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Removes a file (durably: fsync of the folder). Absent is not an error.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// A hint: starts writing the file's changed data to the disk, without waiting and without
    /// making anything durable (only `sync` does). Writers of large files call it as they go,
    /// so that the final `sync` does not push everything at once while other files' syncs wait
    /// behind it. The default does nothing.
    fn start_writeback(&self, _name: &str) -> io::Result<()> {
        Ok(())
    }
    /// Closes the files that `rename` replaced. A device may keep them open so that a rename
    /// does not pay for freeing a large file; the caller calls this where waiting is harmless.
    fn release_replaced(&self) {}
    /// Reads up to `buf.len()` bytes of a file from `offset`; returns how many (0 past the
    /// end). ENOENT if it does not exist. The default reads the whole file; devices whose
    /// files are large override it.
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let data = self.read(name)?.ok_or_else(|| os_error(libc::ENOENT))?;
        Ok(copy_window(&data, offset, buf))
    }
}

/// Copies `data[offset..]` into `buf` as far as both go; returns how many bytes (0 past the end).
fn copy_window(data: &[u8], offset: u64, buf: &mut [u8]) -> usize {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let n = buf.len().min(data.len() - start);
    buf[..n].copy_from_slice(&data[start..start + n]);
    n
}

/// The longest file name a device accepts, in bytes (NAME_MAX of Linux file systems).
pub const MAX_NAME_BYTES: usize = 255;

/// How many open files [`DirDevice`] keeps cached at most.
pub const MAX_CACHED_FILES: usize = 16;

/// Checks that `name` is a flat file name: not empty, not `.` or `..`, no `/` or NUL, at most
/// [`MAX_NAME_BYTES`] bytes. Errors are `InvalidInput`.
pub fn validate_name(name: &str) -> io::Result<()> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name == "." || name == ".." {
        "it names a folder"
    } else if name.contains('/') {
        "it contains '/'"
    } else if name.contains('\0') {
        "it contains a NUL byte"
    } else if name.len() > MAX_NAME_BYTES {
        "it is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("invalid store file name {name:?}: {why}"),
    ))
}

fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn past_end(name: &str, len: u64, offset: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{name}: cannot write at {offset}, past its end ({len} bytes)"),
    )
}

fn shrink_only(name: &str, current: u64, len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "cannot truncate {name:?} to {len} bytes: it has {current}, and truncate only shrinks"
        ),
    )
}

// ------------------------------------------------------------------------------------------------
// DirDevice

/// The real device: files in a folder, mode 0600, with up to [`MAX_CACHED_FILES`] open file
/// descriptors cached by name (more while all of them are in use), each with the file's
/// length (see `CachedFile`).
///
/// Operations on different files run in parallel; the cache lock is held only to look up or
/// open a descriptor, and across the `rename`/`unlink` system calls so that a cached
/// descriptor always belongs to the file its name denotes. A `sync` of a file this device
/// created also fsyncs the folder once, so that the new name is as durable as the content.
///
/// Names are resolved against a descriptor of the folder opened once (openat, renameat,
/// unlinkat), never against its path: if the folder is removed or replaced while a daemon is
/// still finishing (an unmount, then `rm -rf` and `mkfs` of the same path), that daemon's
/// writes fail instead of landing in the new store.
pub struct DirDevice {
    dir: PathBuf,
    dir_file: File,
    cache: Mutex<DirCache>,
    /// Opened by [`DirDevice::open_read_only`]: files are opened O_RDONLY, never created, and
    /// every method that would change the folder fails with EROFS.
    read_only: bool,
}

/// An open store file. Opened without O_APPEND (pwrite ignores the offset under it), so
/// appends find the end themselves: from `len_bytes`, under its lock, so two appends to one
/// file never interleave or overwrite each other.
///
/// The length is kept here rather than asked of the file system (fstat) before each write:
/// on Linux 6.13+ a write to a file whose times were queried within the same clock tick gets
/// a fine-grained timestamp (multigrain timestamps on ext4, XFS, btrfs, tmpfs), which moves
/// the floor of the coarse clock the kernel stamps FUSE inodes with; the engine stamps inodes
/// with the plain coarse clock (docs/decisions/0020), and every create then cost a SETATTR.
/// Store files are private to the one device that has the store open.
struct CachedFile {
    file: File,
    len_bytes: Mutex<u64>,
}

impl CachedFile {
    fn new(file: File) -> io::Result<CachedFile> {
        let len = file.metadata()?.len();
        Ok(CachedFile {
            file,
            len_bytes: Mutex::new(len),
        })
    }

    /// Writes `data` at `offset` (at most `*len`) and updates `*len`, the locked length: on an
    /// error a part may have been written, so the length is asked of the file system then.
    fn write_tracked(&self, len: &mut u64, offset: u64, data: &[u8]) -> io::Result<()> {
        debug_assert!(offset <= *len);
        let result = self.file.write_all_at(data, offset);
        *len = match &result {
            Ok(()) => (*len).max(offset + data.len() as u64),
            Err(_) => self.file.metadata().map_or(*len, |m| m.len()),
        };
        result
    }
}

impl std::ops::Deref for CachedFile {
    type Target = File;
    fn deref(&self) -> &File {
        &self.file
    }
}

#[derive(Default)]
struct DirCache {
    files: HashMap<String, Arc<CachedFile>>,
    /// Files this device created whose folder entry may not be durable yet.
    new_entries: HashSet<String>,
    /// Files replaced by a rename, still open (see `Device::release_replaced`).
    replaced: Vec<Arc<CachedFile>>,
}

/// At most this many replaced files are kept open for `release_replaced`.
const REPLACED_KEPT_MAX: usize = 4;

/// `name` (checked by `validate_name`, so without NUL bytes) as a C string.
fn c_name(name: &str) -> io::Result<CString> {
    validate_name(name)?;
    CString::new(name).map_err(|_| os_error(libc::EINVAL))
}

impl DirDevice {
    /// A device over the files of the folder `dir`, which is opened now.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<DirDevice> {
        DirDevice::open_mode(dir.into(), false)
    }

    /// A device that only reads the files of the folder `dir`: it opens them read-only, never
    /// creates, writes, syncs, renames or removes anything, and every such call fails with
    /// EROFS (`ErrorKind::ReadOnlyFilesystem`) naming the file. For checking a store without
    /// changing it, possibly a copy on read-only media.
    pub fn open_read_only(dir: impl Into<PathBuf>) -> io::Result<DirDevice> {
        DirDevice::open_mode(dir.into(), true)
    }

    fn open_mode(dir: PathBuf, read_only: bool) -> io::Result<DirDevice> {
        let dir_file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&dir)?;
        Ok(DirDevice {
            dir,
            dir_file,
            cache: Mutex::new(DirCache::default()),
            read_only,
        })
    }

    /// Whether this device was opened by [`DirDevice::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Fails with EROFS if the device is read-only: `what` it refused, and on which file.
    fn check_writable(&self, what: &str, name: &str) -> io::Result<()> {
        if !self.read_only {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::ReadOnlyFilesystem,
            format!(
                "cannot {what} {name:?}: the store {} is opened read-only",
                self.dir.display()
            ),
        ))
    }

    /// The folder, as it was named when opened.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Whether the folder has been deleted since it was opened (its files with it).
    pub fn folder_removed(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.dir_file.metadata().is_ok_and(|m| m.nlink() == 0)
    }

    /// openat(2) of `name` in the folder, close-on-exec; new files get mode 0600.
    fn open_at(&self, name: &str, flags: libc::c_int) -> io::Result<File> {
        let name = c_name(name)?;
        // SAFETY: `dir_file` keeps the folder descriptor open, `name` is a NUL-terminated
        // string that outlives the call, and the mode argument is read only with O_CREAT.
        let fd = unsafe {
            libc::openat(
                self.dir_file.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: openat returned a new descriptor that nothing else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// renameat(2) within the folder.
    fn rename_at(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (c_name(from)?, c_name(to)?);
        let dir = self.dir_file.as_raw_fd();
        // SAFETY: both names are NUL-terminated strings that outlive the call; `dir` is open.
        if unsafe { libc::renameat(dir, from.as_ptr(), dir, to.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// unlinkat(2) of a file in the folder.
    fn unlink_at(&self, name: &str) -> io::Result<()> {
        let name = c_name(name)?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call; the folder
        // descriptor is open.
        if unsafe { libc::unlinkat(self.dir_file.as_raw_fd(), name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The cached descriptor of `name`, opening it (and creating it, if `create`) on a miss.
    /// Ok(None) if it does not exist and `create` is false.
    fn cached(&self, name: &str, create: bool) -> io::Result<Option<Arc<CachedFile>>> {
        validate_name(name)?;
        let mut cache = self.cache.lock();
        if let Some(file) = cache.files.get(name) {
            return Ok(Some(Arc::clone(file)));
        }
        // Not O_APPEND: see `CachedFile`.
        let mode = if self.read_only {
            libc::O_RDONLY
        } else {
            libc::O_RDWR
        };
        let file = match self.open_at(name, mode) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create && !self.read_only => {
                // Not O_TRUNC: it was not there a moment ago.
                let file = self.open_at(name, libc::O_RDWR | libc::O_CREAT)?;
                cache.new_entries.insert(name.to_owned());
                file
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if cache.files.len() >= MAX_CACHED_FILES {
            // Not one in use: a second descriptor of a file being written would have a length
            // of its own, and appends through it could overwrite. If all are in use, the
            // cache grows past the limit until some are released.
            let victim = cache
                .files
                .iter()
                .find(|(_, f)| Arc::strong_count(f) == 1)
                .map(|(name, _)| name.clone());
            if let Some(victim) = victim {
                cache.files.remove(&victim);
            }
        }
        let file = Arc::new(CachedFile::new(file)?);
        cache.files.insert(name.to_owned(), Arc::clone(&file));
        Ok(Some(file))
    }

    fn open_existing(&self, name: &str) -> io::Result<Arc<CachedFile>> {
        self.cached(name, false)?
            .ok_or_else(|| os_error(libc::ENOENT))
    }

    fn open_existing_or_create(&self, name: &str) -> io::Result<Arc<CachedFile>> {
        self.cached(name, true)?
            .ok_or_else(|| os_error(libc::ENOENT))
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.dir_file.sync_all()
    }
}

impl fmt::Debug for DirDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirDevice")
            .field("dir", &self.dir)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl Device for DirDevice {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let Some(file) = self.cached(name, false)? else {
            return Ok(None);
        };
        // The content as long as it was when the call began (stops early if it shrinks).
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "file too large"))?;
        let mut data = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            match file.read_at(&mut data[filled..], filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        data.truncate(filled);
        Ok(Some(data))
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let file = self.open_existing(name)?;
        if i64::try_from(offset).is_err() {
            return Ok(0); // past any file's end (pread would say EINVAL)
        }
        loop {
            match file.read_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                result => return result,
            }
        }
    }

    fn len(&self, name: &str) -> io::Result<Option<u64>> {
        match self.cached(name, false)? {
            Some(file) => Ok(Some(*file.len_bytes.lock())),
            None => Ok(None),
        }
    }

    fn append(&self, name: &str, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("append to", name)?;
        let file = self.open_existing_or_create(name)?;
        let mut len = file.len_bytes.lock();
        let end = *len;
        file.write_tracked(&mut len, end, data)
    }

    fn write(&self, name: &str, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("write", name)?;
        let file = self.open_existing_or_create(name)?;
        let mut len = file.len_bytes.lock();
        file.set_len(0)?;
        *len = 0;
        file.write_tracked(&mut len, 0, data)
    }

    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("write", name)?;
        let file = self.open_existing(name)?;
        let mut len = file.len_bytes.lock();
        if offset > *len {
            return Err(past_end(name, *len, offset));
        }
        file.write_tracked(&mut len, offset, data)
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("truncate", name)?;
        let file = self.open_existing(name)?;
        let mut current = file.len_bytes.lock();
        if len > *current {
            return Err(shrink_only(name, *current, len));
        }
        file.set_len(len)?;
        *current = len;
        Ok(())
    }

    fn sync(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("sync", name)?;
        let file = self.open_existing(name)?;
        file.sync_data()?;
        let is_new = self.cache.lock().new_entries.contains(name);
        if is_new {
            self.sync_dir()?;
            self.cache.lock().new_entries.remove(name);
        }
        Ok(())
    }

    fn start_writeback(&self, name: &str) -> io::Result<()> {
        let file = self.open_existing(name)?;
        if self.read_only {
            return Ok(()); // nothing of ours to write back
        }
        // SAFETY: sync_file_range(2) on a descriptor that `file` keeps open, with valid flags;
        // it touches no memory of ours. The result is checked.
        let rc =
            unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        self.check_writable("rename", from)?;
        if from == to {
            // POSIX: renaming a file to itself does nothing; it must exist.
            return self.open_existing(from).map(drop);
        }
        let mut evicted = None;
        {
            let mut cache = self.cache.lock();
            // Keep the file being replaced open: the rename (and the folder fsync after it)
            // then only drops a name, and freeing a large file's blocks and pages waits for
            // `release_replaced`, outside the caller's critical section.
            let replaced = match cache.files.remove(to) {
                Some(file) => Some(file),
                None => self
                    .open_at(to, libc::O_RDONLY)
                    .ok()
                    .and_then(|f| CachedFile::new(f).ok())
                    .map(Arc::new),
            };
            self.rename_at(from, to)?;
            if let Some(file) = replaced {
                if cache.replaced.len() >= REPLACED_KEPT_MAX {
                    // Closed (and so freed) below, outside the cache lock.
                    evicted = Some(cache.replaced.remove(0));
                }
                cache.replaced.push(file);
            }
            if let Some(file) = cache.files.remove(from) {
                cache.files.insert(to.to_owned(), file);
            }
            cache.new_entries.remove(from);
            cache.new_entries.remove(to);
        }
        drop(evicted);
        if let Err(e) = self.sync_dir() {
            // The folder is not known durable: the next sync of `to` retries.
            self.cache.lock().new_entries.insert(to.to_owned());
            return Err(e);
        }
        Ok(())
    }

    fn release_replaced(&self) {
        let replaced = std::mem::take(&mut self.cache.lock().replaced);
        // Closing the last descriptor frees the file, outside the cache lock.
        drop(replaced);
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("remove", name)?;
        let removed = {
            let mut cache = self.cache.lock();
            cache.files.remove(name);
            cache.new_entries.remove(name);
            match self.unlink_at(name) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(e),
            }
        };
        if removed {
            self.sync_dir()?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// SimDevice

/// What a simulated power cut does to the changes not yet synced (see the module's model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every file holds its durable content; files never synced are gone.
    LoseUnsynced,
    /// The changes since the last sync survive in file order up to a random byte (a torn
    /// write), unless the file is now shorter than its durable content; see the module's model.
    TornTail,
    /// Per file, randomly `LoseUnsynced` or `TornTail`.
    Random,
}

/// The simulated faulty device for crash tests: deterministic from its seed, shared through
/// `Arc<SimDevice>`. [`SimDevice::crash`] returns a new device holding the state after a power
/// cut, as stated by the module's model.
pub struct SimDevice {
    state: Mutex<SimState>,
}

#[derive(Clone)]
struct SimFile {
    /// What readers see.
    volatile: Vec<u8>,
    /// What survives a crash; None if the file would not exist after one.
    durable: Option<Vec<u8>>,
}

struct SimState {
    files: BTreeMap<String, SimFile>,
    rng: SplitMix64,
    syncs: u64,
    fail_after_syncs: Option<u64>,
    fail_writes: bool,
}

impl SimState {
    /// Passes a sync point: fails with EIO if syncs are set to fail, else counts it.
    fn sync_point(&mut self) -> io::Result<()> {
        if let Some(limit) = self.fail_after_syncs {
            if self.syncs >= limit {
                return Err(os_error(libc::EIO));
            }
        }
        self.syncs += 1;
        Ok(())
    }

    fn check_writes(&self) -> io::Result<()> {
        if self.fail_writes {
            Err(os_error(libc::ENOSPC))
        } else {
            Ok(())
        }
    }

    fn file_mut(&mut self, name: &str) -> io::Result<&mut SimFile> {
        self.files
            .get_mut(name)
            .ok_or_else(|| os_error(libc::ENOENT))
    }

    fn file_or_create(&mut self, name: &str) -> &mut SimFile {
        self.files
            .entry(name.to_owned())
            .or_insert_with(|| SimFile {
                volatile: Vec::new(),
                durable: None,
            })
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to pick torn lengths.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// How many of `n` unsynced bytes a torn write keeps: none and all are each likely (1/4),
    /// so recovery meets both edges often, else uniform in `0..=n`.
    fn torn_len(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        match self.below(4) {
            0 => 0,
            1 => n,
            _ => self.below(n as u64 + 1) as usize,
        }
    }
}

impl SimDevice {
    /// An empty device whose random choices (torn lengths, crash modes, bits) follow `seed`.
    pub fn new(seed: u64) -> SimDevice {
        SimDevice::from_files(BTreeMap::new(), SplitMix64(seed))
    }

    fn from_files(files: BTreeMap<String, SimFile>, rng: SplitMix64) -> SimDevice {
        SimDevice {
            state: Mutex::new(SimState {
                files,
                rng,
                syncs: 0,
                fail_after_syncs: None,
                fail_writes: false,
            }),
        }
    }

    /// Sync points passed so far: successful `sync`, `rename`, and `remove` of an existing file.
    pub fn sync_count(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Once `n` sync points have passed (counting from the device's creation, see
    /// [`SimDevice::sync_count`]), every further `sync`, `rename` and `remove` fails with EIO
    /// and makes nothing durable. `fail_after_syncs(0)` fails them all from now on.
    pub fn fail_after_syncs(&self, n: u64) {
        self.state.lock().fail_after_syncs = Some(n);
    }

    /// While `fail` is true, `append`, `write` and `write_at` fail with ENOSPC and change
    /// nothing.
    pub fn set_fail_writes(&self, fail: bool) {
        self.state.lock().fail_writes = fail;
    }

    /// Ends every injected fault (`fail_after_syncs`, `set_fail_writes`).
    pub fn clear_faults(&self) {
        let mut state = self.state.lock();
        state.fail_after_syncs = None;
        state.fail_writes = false;
    }

    /// The names of the files that exist now, in order.
    pub fn names(&self) -> Vec<String> {
        self.state.lock().files.keys().cloned().collect()
    }

    /// The durable content of a file (what [`CrashMode::LoseUnsynced`] would leave); None if
    /// the file would not exist after a crash.
    pub fn durable(&self, name: &str) -> Option<Vec<u8>> {
        self.state
            .lock()
            .files
            .get(name)
            .and_then(|f| f.durable.clone())
    }

    /// A new device holding the state after a power cut now (see the module's model). The
    /// new device's files are all durable; its sync count starts at 0, without faults, and its
    /// random choices follow from this device's. This device is unchanged and usable (its
    /// random state advances, so the next crash may differ).
    pub fn crash(&self, mode: CrashMode) -> SimDevice {
        let mut state = self.state.lock();
        let mut rng = SplitMix64(state.rng.next());
        let mut files = BTreeMap::new();
        for (name, file) in &state.files {
            let mode = match mode {
                CrashMode::Random if rng.below(2) == 0 => CrashMode::LoseUnsynced,
                CrashMode::Random => CrashMode::TornTail,
                other => other,
            };
            let image = match (mode, &file.durable) {
                (CrashMode::TornTail, Some(durable)) if file.volatile.len() >= durable.len() => {
                    // The changes since the sync reach the disk in file order, up to a
                    // random byte: from the first byte that differs, the new bytes up to the
                    // cut, the durable ones after it.
                    let first_change = durable
                        .iter()
                        .zip(&file.volatile)
                        .position(|(a, b)| a != b)
                        .unwrap_or(durable.len());
                    let changed = &file.volatile[first_change..];
                    let cut = first_change + rng.torn_len(changed.len());
                    let mut content = file.volatile[..cut].to_vec();
                    if cut < durable.len() {
                        content.extend_from_slice(&durable[cut..]);
                    }
                    Some(content)
                }
                (CrashMode::TornTail, None) => {
                    if rng.below(2) == 0 {
                        None
                    } else {
                        let keep = rng.torn_len(file.volatile.len());
                        Some(file.volatile[..keep].to_vec())
                    }
                }
                (_, durable) => durable.clone(),
            };
            if let Some(content) = image {
                let file = SimFile {
                    volatile: content.clone(),
                    durable: Some(content),
                };
                files.insert(name.clone(), file);
            }
        }
        let next = SplitMix64(rng.next());
        SimDevice::from_files(files, next)
    }

    /// Flips bit `bit_index` (bit `i % 8` of byte `i / 8`) of the file's durable content, as
    /// media damage would; the volatile content too if the file has no unsynced change, so
    /// readers see the damage (as they do after a crash). Errors: NotFound if the file has no
    /// durable content, InvalidInput if the bit lies past its end.
    pub fn flip_bit(&self, name: &str, bit_index: u64) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        let file = state.file_mut(name)?;
        let clean = file.durable.as_ref() == Some(&file.volatile);
        let durable = file
            .durable
            .as_mut()
            .ok_or_else(|| os_error(libc::ENOENT))?;
        let byte = usize::try_from(bit_index / 8)
            .ok()
            .filter(|&b| b < durable.len())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "bit {bit_index} is past the end of {name:?} ({} durable bytes)",
                        durable.len()
                    ),
                )
            })?;
        let mask = 1u8 << (bit_index % 8);
        durable[byte] ^= mask;
        if clean {
            file.volatile[byte] ^= mask;
        }
        Ok(())
    }

    /// Flips one random bit of the file's durable content (see [`SimDevice::flip_bit`]) and
    /// returns its index. InvalidInput if the durable content is empty.
    pub fn flip_random_bit(&self, name: &str) -> io::Result<u64> {
        validate_name(name)?;
        let bit = {
            let mut state = self.state.lock();
            let bits = match state.files.get(name).and_then(|f| f.durable.as_ref()) {
                Some(durable) => durable.len() as u64 * 8,
                None => return Err(os_error(libc::ENOENT)),
            };
            if bits == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{name:?} has no durable byte to damage"),
                ));
            }
            state.rng.below(bits)
        };
        self.flip_bit(name, bit)?;
        Ok(bit)
    }
}

impl fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        let mut files = f.debug_map();
        for (name, file) in &state.files {
            let durable = file.durable.as_ref().map(Vec::len);
            files.entry(
                name,
                &format_args!("{} bytes, durable {durable:?}", file.volatile.len()),
            );
        }
        files.finish()?;
        write!(f, " syncs {}", state.syncs)
    }
}

impl Device for SimDevice {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        validate_name(name)?;
        Ok(self
            .state
            .lock()
            .files
            .get(name)
            .map(|f| f.volatile.clone()))
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        validate_name(name)?;
        let state = self.state.lock();
        let data = &state
            .files
            .get(name)
            .ok_or_else(|| os_error(libc::ENOENT))?
            .volatile;
        Ok(copy_window(data, offset, buf))
    }

    fn len(&self, name: &str) -> io::Result<Option<u64>> {
        validate_name(name)?;
        Ok(self
            .state
            .lock()
            .files
            .get(name)
            .map(|f| f.volatile.len() as u64))
    }

    fn append(&self, name: &str, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        state.check_writes()?;
        state.file_or_create(name).volatile.extend_from_slice(data);
        Ok(())
    }

    fn write(&self, name: &str, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        state.check_writes()?;
        state.file_or_create(name).volatile = data.to_vec();
        Ok(())
    }

    fn start_writeback(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        // Makes nothing durable (rule 2): only checks that the file exists.
        self.state.lock().file_mut(name).map(drop)
    }

    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        let writable = state.check_writes(); // reported after ENOENT, as DirDevice does
        let file = state.file_mut(name)?;
        writable?;
        let len = file.volatile.len() as u64;
        if offset > len {
            return Err(past_end(name, len, offset));
        }
        let (at, end) = (offset as usize, offset as usize + data.len());
        if end > file.volatile.len() {
            file.volatile.resize(end, 0);
        }
        file.volatile[at..end].copy_from_slice(data);
        Ok(())
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        let file = state.file_mut(name)?;
        let current = file.volatile.len() as u64;
        if len > current {
            return Err(shrink_only(name, current, len));
        }
        file.volatile.truncate(len as usize);
        Ok(())
    }

    fn sync(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        state.file_mut(name)?;
        state.sync_point()?;
        let file = state.file_mut(name)?;
        file.durable = Some(file.volatile.clone());
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let mut state = self.state.lock();
        state.file_mut(from)?;
        state.sync_point()?;
        if from != to {
            let file = state.files.remove(from).expect("checked above");
            let moved = SimFile {
                volatile: file.volatile,
                durable: Some(file.durable.unwrap_or_default()),
            };
            state.files.insert(to.to_owned(), moved);
        }
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        if state.files.contains_key(name) {
            state.sync_point()?;
            state.files.remove(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn dir_device() -> (tempfile::TempDir, DirDevice) {
        let dir = tempfile::tempdir().unwrap();
        let dev = DirDevice::open(dir.path()).unwrap();
        (dir, dev)
    }

    fn bad_names() -> Vec<String> {
        vec![
            String::new(),
            ".".into(),
            "..".into(),
            "a/b".into(),
            "/abs".into(),
            "nul\0byte".into(),
            "x".repeat(256),
        ]
    }

    /// The visible contract, shared by both devices.
    fn contract(dev: &dyn Device) {
        assert_eq!(dev.read("j").unwrap(), None);
        assert_eq!(dev.len("j").unwrap(), None);
        dev.append("j", b"hello").unwrap();
        dev.append("j", b" world").unwrap();
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello world"[..]));
        assert_eq!(dev.len("j").unwrap(), Some(11));
        dev.start_writeback("j").unwrap(); // a hint: the content is unchanged
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello world"[..]));
        assert_eq!(
            dev.start_writeback("absent").unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        dev.sync("j").unwrap();

        dev.truncate("j", 5).unwrap();
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello"[..]));
        dev.append("j", b"!").unwrap();
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello!"[..]));
        let e = dev.truncate("j", 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            dev.truncate("absent", 0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            dev.sync("absent").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );

        // write creates and replaces (a shorter content leaves nothing of the old one).
        dev.write("c", b"first version").unwrap();
        dev.write("c", b"second").unwrap();
        assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"second"[..]));
        dev.write("empty", b"").unwrap();
        assert_eq!(dev.read("empty").unwrap(), Some(vec![]));

        // rename replaces the target; appends to the new name land in the moved file.
        dev.write("tmp", b"new").unwrap();
        dev.sync("tmp").unwrap();
        dev.rename("tmp", "c").unwrap();
        assert_eq!(dev.read("tmp").unwrap(), None);
        assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"new"[..]));
        dev.append("c", b"er").unwrap();
        assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"newer"[..]));
        dev.rename("c", "c").unwrap();
        assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"newer"[..]));
        assert_eq!(
            dev.rename("absent", "c").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"newer"[..]));

        // read_at: a window of the file, short at the end, empty past it; ENOENT if absent.
        let mut buf = [0u8; 4];
        assert_eq!(dev.read_at("c", 1, &mut buf).unwrap(), 4);
        assert_eq!(&buf, b"ewer");
        assert_eq!(dev.read_at("c", 3, &mut buf).unwrap(), 2);
        assert_eq!(&buf[..2], b"er");
        assert_eq!(dev.read_at("c", 5, &mut buf).unwrap(), 0);
        assert_eq!(dev.read_at("c", u64::MAX, &mut buf).unwrap(), 0);
        assert_eq!(
            dev.read_at("absent", 0, &mut buf).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        dev.release_replaced();
        assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"newer"[..]));

        // remove; absent is fine.
        dev.remove("c").unwrap();
        assert_eq!(dev.read("c").unwrap(), None);
        dev.remove("c").unwrap();
        dev.append("c", b"again").unwrap();
        assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"again"[..]));

        for name in bad_names() {
            let kind = io::ErrorKind::InvalidInput;
            assert_eq!(dev.read(&name).unwrap_err().kind(), kind, "{name:?}");
            assert_eq!(dev.len(&name).unwrap_err().kind(), kind);
            assert_eq!(dev.append(&name, b"x").unwrap_err().kind(), kind);
            assert_eq!(dev.write(&name, b"x").unwrap_err().kind(), kind);
            assert_eq!(dev.truncate(&name, 0).unwrap_err().kind(), kind);
            assert_eq!(dev.sync(&name).unwrap_err().kind(), kind);
            assert_eq!(dev.rename(&name, "j").unwrap_err().kind(), kind);
            assert_eq!(dev.rename("j", &name).unwrap_err().kind(), kind);
            assert_eq!(dev.remove(&name).unwrap_err().kind(), kind);
        }
        // The longest valid name works.
        let longest = "n".repeat(MAX_NAME_BYTES);
        dev.append(&longest, b"ok").unwrap();
        assert_eq!(dev.len(&longest).unwrap(), Some(2));
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello!"[..]));
    }

    #[test]
    fn dir_device_contract() {
        let (_dir, dev) = dir_device();
        contract(&dev);
    }

    #[test]
    fn sim_device_contract() {
        contract(&SimDevice::new(1));
    }

    #[test]
    fn dir_device_read_only_reads_and_changes_nothing() {
        let (dir, dev) = dir_device();
        dev.append("journal", b"batch").unwrap();
        dev.sync("journal").unwrap();
        drop(dev);
        let listing = |dir: &Path| {
            let mut names: Vec<_> = fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let before = listing(dir.path());
        let stamp = fs::metadata(dir.path().join("journal"))
            .unwrap()
            .modified()
            .unwrap();
        // A read-only file too: for a non-root user a writable open of it would fail.
        fs::set_permissions(
            dir.path().join("journal"),
            fs::Permissions::from_mode(0o400),
        )
        .unwrap();

        let ro = DirDevice::open_read_only(dir.path()).unwrap();
        assert!(ro.is_read_only());
        assert!(!DirDevice::open(dir.path()).unwrap().is_read_only());
        assert!(format!("{ro:?}").contains("read_only: true"));
        assert_eq!(ro.read("journal").unwrap().as_deref(), Some(&b"batch"[..]));
        assert_eq!(ro.len("journal").unwrap(), Some(5));
        let mut buf = [0u8; 3];
        assert_eq!(ro.read_at("journal", 2, &mut buf).unwrap(), 3);
        assert_eq!(&buf, b"tch");
        assert_eq!(ro.read("absent").unwrap(), None);
        assert_eq!(ro.len("absent").unwrap(), None);
        ro.start_writeback("journal").unwrap();
        ro.release_replaced();

        let refused: Vec<(&str, io::Result<()>)> = vec![
            ("append", ro.append("journal", b"x")),
            ("append new", ro.append("new", b"x")),
            ("write", ro.write("journal", b"x")),
            ("write new", ro.write("new", b"x")),
            ("write_at", ro.write_at("journal", 0, b"x")),
            ("truncate", ro.truncate("journal", 0)),
            ("sync", ro.sync("journal")),
            ("rename", ro.rename("journal", "moved")),
            ("rename to itself", ro.rename("journal", "journal")),
            ("remove", ro.remove("journal")),
            ("remove absent", ro.remove("absent")),
        ];
        for (what, result) in refused {
            let e = result.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::ReadOnlyFilesystem, "{what}: {e}");
            assert!(e.to_string().contains("read-only"), "{what}: {e}");
        }
        // Bad names are still InvalidInput, as on a writable device.
        assert_eq!(
            ro.write("a/b", b"x").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(listing(dir.path()), before);
        assert_eq!(fs::read(dir.path().join("journal")).unwrap(), b"batch");
        let meta = fs::metadata(dir.path().join("journal")).unwrap();
        assert_eq!(meta.modified().unwrap(), stamp);
    }

    #[test]
    fn dir_device_files_are_private_and_in_the_folder() {
        let (dir, dev) = dir_device();
        dev.append("journal", b"a").unwrap();
        dev.write("checkpoint", b"b").unwrap();
        dev.sync("journal").unwrap();
        for name in ["journal", "checkpoint"] {
            let meta = fs::metadata(dir.path().join(name)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
        }
        assert_eq!(fs::read(dir.path().join("journal")).unwrap(), b"a");
        assert_eq!(dev.path(), dir.path());
    }

    #[test]
    fn dir_device_stays_with_the_folder_it_opened() {
        // An unmount, then the store removed and made anew at the same path while the old
        // daemon still finishes: its writes must not land in the new store.
        let base = tempfile::tempdir().unwrap();
        let store = base.path().join("store");
        fs::create_dir(&store).unwrap();
        let dev = DirDevice::open(&store).unwrap();
        dev.append("journal", b"old").unwrap();
        fs::rename(&store, base.path().join("moved")).unwrap();
        fs::create_dir(&store).unwrap();
        fs::write(store.join("checkpoint"), b"new store").unwrap();
        dev.write("checkpoint.tmp", b"old state").unwrap();
        dev.sync("checkpoint.tmp").unwrap();
        dev.rename("checkpoint.tmp", "checkpoint").unwrap();
        dev.append("journal", b" more").unwrap();
        assert_eq!(fs::read(store.join("checkpoint")).unwrap(), b"new store");
        assert!(!store.join("journal").exists());
        let moved = base.path().join("moved");
        assert_eq!(fs::read(moved.join("checkpoint")).unwrap(), b"old state");
        assert_eq!(fs::read(moved.join("journal")).unwrap(), b"old more");
        // Once its folder is deleted, creating files fails instead of going anywhere else.
        assert!(!dev.folder_removed());
        fs::remove_dir_all(&moved).unwrap();
        assert!(dev.folder_removed());
        assert!(dev.write("another", b"x").is_err());
        assert_eq!(fs::read_dir(&store).unwrap().count(), 1);
    }

    #[test]
    fn dir_device_cache_stays_bounded_and_correct() {
        let (dir, dev) = dir_device();
        let names: Vec<String> = (0..3 * MAX_CACHED_FILES).map(|i| format!("f{i}")).collect();
        for round in 0..3u8 {
            for name in &names {
                dev.append(name, &[round]).unwrap();
                assert!(dev.cache.lock().files.len() <= MAX_CACHED_FILES);
            }
        }
        for name in &names {
            dev.sync(name).unwrap();
            assert_eq!(dev.read(name).unwrap(), Some(vec![0, 1, 2]));
        }
        assert!(dev.cache.lock().new_entries.is_empty());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), names.len());
    }

    #[test]
    fn dir_device_rename_keeps_cached_descriptors_right() {
        let (_dir, dev) = dir_device();
        dev.append("a", b"A").unwrap();
        dev.append("b", b"B").unwrap();
        dev.rename("a", "b").unwrap();
        // The old "b" descriptor must not be used any more, nor the one of "a" under its name.
        dev.append("b", b"2").unwrap();
        dev.append("a", b"fresh").unwrap();
        assert_eq!(dev.read("b").unwrap().as_deref(), Some(&b"A2"[..]));
        assert_eq!(dev.read("a").unwrap().as_deref(), Some(&b"fresh"[..]));
        dev.remove("a").unwrap();
        dev.write("a", b"x").unwrap();
        assert_eq!(dev.read("a").unwrap().as_deref(), Some(&b"x"[..]));
    }

    #[test]
    fn dir_device_keeps_replaced_files_open_until_released() {
        let (_dir, dev) = dir_device();
        for round in 0..REPLACED_KEPT_MAX + 2 {
            dev.write("tmp", format!("v{round}").as_bytes()).unwrap();
            if round % 2 == 0 {
                // Not cached: the rename opens the old file to keep it.
                dev.cache.lock().files.remove("final");
            }
            let had_final = dev.len("final").unwrap().is_some();
            dev.rename("tmp", "final").unwrap();
            let kept = dev.cache.lock().replaced.len();
            assert_eq!(
                kept,
                (round).min(REPLACED_KEPT_MAX),
                "round {round} ({had_final})"
            );
        }
        dev.release_replaced();
        assert!(dev.cache.lock().replaced.is_empty());
        assert_eq!(
            dev.read("final").unwrap().as_deref(),
            Some(format!("v{}", REPLACED_KEPT_MAX + 1).as_bytes())
        );
    }

    #[test]
    fn dir_device_is_shared_across_threads() {
        let (_dir, dev) = dir_device();
        let dev: Arc<dyn Device> = Arc::new(dev);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let dev = Arc::clone(&dev);
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        dev.append("shared", &[t; 8]).unwrap();
                    }
                    dev.sync("shared").unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let data = dev.read("shared").unwrap().unwrap();
        assert_eq!(data.len(), 4 * 100 * 8);
        // Appends are serialised per file: every 8-byte record is whole.
        for record in data.chunks(8) {
            assert!(record.iter().all(|&b| b == record[0]));
        }
    }

    fn image(dev: &SimDevice) -> Vec<(String, Vec<u8>)> {
        dev.names()
            .into_iter()
            .map(|n| {
                let content = dev.read(&n).unwrap().unwrap();
                (n, content)
            })
            .collect()
    }

    #[test]
    fn lose_unsynced_keeps_exactly_the_synced_content() {
        let dev = SimDevice::new(7);
        dev.append("j", b"synced").unwrap();
        dev.sync("j").unwrap();
        dev.append("j", b" lost").unwrap();
        dev.append("never", b"synced").unwrap();
        dev.write("w", b"old").unwrap();
        dev.sync("w").unwrap();
        dev.write("w", b"replaced").unwrap();
        dev.append("t", b"0123456789").unwrap();
        dev.sync("t").unwrap();
        dev.truncate("t", 3).unwrap();

        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.read("j").unwrap().as_deref(), Some(&b"synced"[..]));
        assert_eq!(after.read("never").unwrap(), None);
        assert_eq!(after.read("w").unwrap().as_deref(), Some(&b"old"[..]));
        assert_eq!(
            after.read("t").unwrap().as_deref(),
            Some(&b"0123456789"[..])
        );
        assert_eq!(after.names(), ["j", "t", "w"]);
        // The original is untouched, and a crashed image is fully durable.
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"synced lost"[..]));
        assert_eq!(image(&after.crash(CrashMode::TornTail)), image(&after));
        assert_eq!(after.sync_count(), 0);
    }

    #[test]
    fn synced_data_survives_every_crash_mode() {
        for seed in 0..50 {
            let dev = SimDevice::new(seed);
            dev.append("j", b"header").unwrap();
            dev.append("j", b"batch1").unwrap();
            dev.sync("j").unwrap();
            dev.write("c", b"checkpoint").unwrap();
            dev.sync("c").unwrap();
            for mode in [
                CrashMode::LoseUnsynced,
                CrashMode::TornTail,
                CrashMode::Random,
            ] {
                let after = dev.crash(mode);
                assert_eq!(
                    after.read("j").unwrap().as_deref(),
                    Some(&b"headerbatch1"[..])
                );
                assert_eq!(
                    after.read("c").unwrap().as_deref(),
                    Some(&b"checkpoint"[..])
                );
            }
        }
    }

    /// Whether `content` is `volatile` up to some cut and `durable` after it (the TornTail
    /// model for files that did not shrink).
    fn is_torn_in_order(content: &[u8], durable: &[u8], volatile: &[u8]) -> bool {
        (0..=volatile.len()).any(|cut| {
            let mut c = volatile[..cut].to_vec();
            if cut < durable.len() {
                c.extend_from_slice(&durable[cut..]);
            }
            c == content
        })
    }

    /// Whether `content` is `durable ‖ a prefix of tail`.
    fn is_durable_plus_prefix(content: &[u8], durable: &[u8], tail: &[u8]) -> bool {
        content.len() <= durable.len() + tail.len()
            && content.starts_with(durable)
            && tail.starts_with(&content[durable.len()..])
    }

    #[test]
    fn torn_tail_keeps_a_prefix_of_the_unsynced_appends_and_invents_nothing() {
        let (mut none, mut all, mut part) = (0, 0, 0);
        for seed in 0..300 {
            let dev = SimDevice::new(seed);
            dev.append("j", b"durable:").unwrap();
            dev.sync("j").unwrap();
            dev.append("j", b"first batch;").unwrap();
            dev.append("j", b"second batch;").unwrap();
            let tail = b"first batch;second batch;";
            for mode in [CrashMode::TornTail, CrashMode::Random] {
                let after = dev.crash(mode);
                let content = after.read("j").unwrap().unwrap();
                assert!(
                    is_durable_plus_prefix(&content, b"durable:", tail),
                    "{content:?}"
                );
                if mode == CrashMode::TornTail {
                    match content.len() - 8 {
                        0 => none += 1,
                        n if n == tail.len() => all += 1,
                        _ => part += 1,
                    }
                }
            }
        }
        assert!(none > 0 && all > 0 && part > 0, "{none} {all} {part}");
    }

    #[test]
    fn torn_tail_of_never_synced_and_rewritten_files() {
        let (mut absent, mut present) = (0, 0);
        for seed in 0..200 {
            let dev = SimDevice::new(seed);
            dev.append("new", b"never synced").unwrap();
            dev.write("w", b"old").unwrap();
            dev.sync("w").unwrap();
            dev.write("w", b"old and then some").unwrap();
            dev.truncate("w", 3).unwrap();
            dev.append("w", b"xyz").unwrap();
            let after = dev.crash(CrashMode::TornTail);
            match after.read("new").unwrap() {
                None => absent += 1,
                Some(c) => {
                    present += 1;
                    assert!(b"never synced".starts_with(&c));
                }
            }
            // "old" ‖ "xyz" is what a torn append could give; "old" too. Nothing else.
            let w = after.read("w").unwrap().unwrap();
            assert!(is_durable_plus_prefix(&w, b"old", b"xyz"), "{w:?}");
        }
        assert!(absent > 0 && present > 0);

        // A rewrite at least as long as the durable content tears in file order: the new
        // bytes up to a cut, the durable ones after it.
        let mut torn_mixes = 0;
        for seed in 0..50 {
            let dev = SimDevice::new(seed);
            dev.write("w", b"original").unwrap();
            dev.sync("w").unwrap();
            dev.write("w", b"other").unwrap();
            dev.append("w", b" tail").unwrap();
            let after = dev.crash(CrashMode::TornTail);
            let w = after.read("w").unwrap().unwrap();
            assert!(is_torn_in_order(&w, b"original", b"other tail"), "{w:?}");
            if w != b"original" && w != b"other tail" {
                torn_mixes += 1;
            }
        }
        assert!(torn_mixes > 0);

        // One that shrinks the file is lost whole.
        for seed in 0..20 {
            let dev = SimDevice::new(seed);
            dev.write("w", b"original").unwrap();
            dev.sync("w").unwrap();
            dev.write("w", b"short").unwrap();
            let after = dev.crash(CrashMode::TornTail);
            assert_eq!(after.read("w").unwrap().as_deref(), Some(&b"original"[..]));
        }
    }

    #[test]
    fn torn_overwrite_keeps_new_bytes_up_to_a_cut_and_old_ones_after() {
        let mut seen = std::collections::HashSet::new();
        for seed in 0..100 {
            let dev = SimDevice::new(seed);
            dev.write("j", b"head").unwrap();
            dev.write_at("j", 4, &[0; 8]).unwrap(); // reserved zeros
            dev.sync("j").unwrap();
            dev.write_at("j", 4, b"batch").unwrap();
            let after = dev.crash(CrashMode::TornTail);
            let j = after.read("j").unwrap().unwrap();
            assert!(
                is_torn_in_order(&j, b"head\0\0\0\0\0\0\0\0", b"headbatch\0\0\0"),
                "{j:?}"
            );
            seen.insert(j);
        }
        assert!(seen.len() > 2, "{seen:?}");
        assert!(SimDevice::new(0).write_at("absent", 0, b"x").is_err());
        let dev = SimDevice::new(0);
        dev.write("f", b"ab").unwrap();
        assert_eq!(
            dev.write_at("f", 3, b"x").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        dev.write_at("f", 1, b"xyz").unwrap();
        assert_eq!(dev.read("f").unwrap().unwrap(), b"axyz");
    }

    #[test]
    fn rename_is_durable_but_carries_only_durable_content() {
        // Synced source: the target's crash image is the source's durable content.
        let dev = SimDevice::new(3);
        dev.write("final", b"old checkpoint").unwrap();
        dev.sync("final").unwrap();
        dev.write("tmp", b"new checkpoint").unwrap();
        dev.sync("tmp").unwrap();
        dev.rename("tmp", "final").unwrap();
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.names(), ["final"]);
        assert_eq!(
            after.read("final").unwrap().as_deref(),
            Some(&b"new checkpoint"[..])
        );

        // Unsynced source: the old target is gone for good, the new one is empty.
        let dev = SimDevice::new(3);
        dev.write("final", b"old").unwrap();
        dev.sync("final").unwrap();
        dev.write("tmp", b"not synced").unwrap();
        dev.rename("tmp", "final").unwrap();
        assert_eq!(
            dev.read("final").unwrap().as_deref(),
            Some(&b"not synced"[..])
        );
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.names(), ["final"]);
        assert_eq!(after.read("final").unwrap(), Some(vec![]));
        // ... and under torn writes, a prefix of what it held.
        for seed in 0..50 {
            let dev = SimDevice::new(seed);
            dev.write("tmp", b"not synced").unwrap();
            dev.rename("tmp", "final").unwrap();
            let c = dev
                .crash(CrashMode::TornTail)
                .read("final")
                .unwrap()
                .unwrap();
            assert!(b"not synced".starts_with(&c));
        }

        // Partly synced source: durable part at rename time; a later sync of the target
        // makes the rest durable.
        let dev = SimDevice::new(3);
        dev.append("a", b"synced").unwrap();
        dev.sync("a").unwrap();
        dev.append("a", b"+unsynced").unwrap();
        dev.rename("a", "b").unwrap();
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.read("a").unwrap(), None);
        assert_eq!(after.read("b").unwrap().as_deref(), Some(&b"synced"[..]));
        dev.sync("b").unwrap();
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(
            after.read("b").unwrap().as_deref(),
            Some(&b"synced+unsynced"[..])
        );

        // remove is durable at once.
        let dev = SimDevice::new(3);
        dev.write("x", b"x").unwrap();
        dev.sync("x").unwrap();
        dev.remove("x").unwrap();
        assert_eq!(dev.crash(CrashMode::TornTail).read("x").unwrap(), None);
    }

    #[test]
    fn sync_count_counts_sync_points() {
        let dev = SimDevice::new(0);
        assert_eq!(dev.sync_count(), 0);
        dev.append("a", b"1").unwrap();
        assert_eq!(dev.sync_count(), 0);
        dev.sync("a").unwrap();
        dev.sync("a").unwrap();
        assert_eq!(dev.sync_count(), 2);
        dev.rename("a", "b").unwrap();
        assert_eq!(dev.sync_count(), 3);
        dev.remove("absent").unwrap();
        assert_eq!(dev.sync_count(), 3);
        dev.remove("b").unwrap();
        assert_eq!(dev.sync_count(), 4);
        let _ = dev.sync("absent");
        assert_eq!(dev.sync_count(), 4);
    }

    #[test]
    fn fail_after_syncs_fails_later_sync_points_with_eio() {
        let dev = SimDevice::new(0);
        dev.append("j", b"a").unwrap();
        dev.sync("j").unwrap();
        dev.fail_after_syncs(2);
        dev.append("j", b"b").unwrap();
        dev.sync("j").unwrap();
        dev.append("j", b"c").unwrap();
        let e = dev.sync("j").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(dev.sync_count(), 2);
        // Nothing more becomes durable; writes still succeed; rename and remove fail too.
        dev.append("j", b"d").unwrap();
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"abcd"[..]));
        assert_eq!(dev.durable("j").as_deref(), Some(&b"ab"[..]));
        assert_eq!(
            dev.rename("j", "k").unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        assert_eq!(dev.remove("j").unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(dev.names(), ["j"]);
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.read("j").unwrap().as_deref(), Some(&b"ab"[..]));

        dev.clear_faults();
        dev.sync("j").unwrap();
        assert_eq!(dev.durable("j").as_deref(), Some(&b"abcd"[..]));

        let dev = SimDevice::new(0);
        dev.fail_after_syncs(0);
        dev.write("x", b"x").unwrap();
        assert!(dev.sync("x").is_err());
    }

    #[test]
    fn failing_writes_report_enospc_and_change_nothing() {
        let dev = SimDevice::new(0);
        dev.write("a", b"keep").unwrap();
        dev.set_fail_writes(true);
        assert_eq!(
            dev.append("a", b"x").unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(
            dev.write("a", b"x").unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(
            dev.append("b", b"x").unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(dev.read("a").unwrap().as_deref(), Some(&b"keep"[..]));
        assert_eq!(dev.read("b").unwrap(), None);
        dev.truncate("a", 2).unwrap();
        dev.sync("a").unwrap();
        dev.set_fail_writes(false);
        dev.append("a", b"!").unwrap();
        assert_eq!(dev.read("a").unwrap().as_deref(), Some(&b"ke!"[..]));
    }

    fn differing_bits(a: &[u8], b: &[u8]) -> u32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
    }

    #[test]
    fn flip_bit_changes_exactly_one_bit() {
        let original = b"some durable checkpoint bytes".to_vec();
        let dev = SimDevice::new(11);
        dev.write("c", &original).unwrap();
        dev.sync("c").unwrap();
        dev.flip_bit("c", 13).unwrap();
        let damaged = dev.read("c").unwrap().unwrap();
        assert_eq!(differing_bits(&original, &damaged), 1);
        assert_eq!(damaged[1] ^ original[1], 1 << 5);
        assert_eq!(dev.durable("c").unwrap(), damaged);
        dev.flip_bit("c", 13).unwrap();
        assert_eq!(dev.read("c").unwrap().unwrap(), original);

        let bits = original.len() as u64 * 8;
        let e = dev.flip_bit("c", bits).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            dev.flip_bit("absent", 0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        dev.append("unsynced", b"x").unwrap();
        assert_eq!(
            dev.flip_bit("unsynced", 0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        dev.write("empty", b"").unwrap();
        dev.sync("empty").unwrap();
        assert!(dev.flip_random_bit("empty").is_err());

        for _ in 0..20 {
            let before = dev.durable("c").unwrap();
            let bit = dev.flip_random_bit("c").unwrap();
            assert!(bit < bits);
            let after = dev.durable("c").unwrap();
            assert_eq!(differing_bits(&before, &after), 1);
            assert_ne!(after[(bit / 8) as usize], before[(bit / 8) as usize]);
        }

        // With unsynced changes, readers keep the page cache until the crash shows the damage.
        let dev = SimDevice::new(11);
        dev.write("j", b"ab").unwrap();
        dev.sync("j").unwrap();
        dev.append("j", b"cd").unwrap();
        dev.flip_bit("j", 0).unwrap();
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"abcd"[..]));
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.read("j").unwrap().as_deref(), Some(&b"`b"[..]));
    }

    fn workload(dev: &SimDevice) {
        for i in 0..20u8 {
            let name = format!("f{}", i % 5);
            dev.append(&name, &vec![i; 1 + usize::from(i) * 7]).unwrap();
            if i % 3 == 0 {
                dev.sync(&name).unwrap();
            }
            if i % 7 == 6 {
                dev.rename(&name, &format!("r{i}")).unwrap();
            }
        }
    }

    #[test]
    fn crashes_are_deterministic_from_the_seed() {
        let images = |seed| {
            let dev = SimDevice::new(seed);
            workload(&dev);
            let mut out = Vec::new();
            for mode in [CrashMode::TornTail, CrashMode::Random, CrashMode::TornTail] {
                let after = dev.crash(mode);
                out.push(image(&after));
                out.push(image(&after.crash(CrashMode::Random)));
            }
            let bit = dev.flip_random_bit("f0").unwrap();
            (out, bit)
        };
        assert_eq!(images(42), images(42));
        assert!((0..10).any(|seed| images(seed) != images(42)));
    }

    #[test]
    fn crash_at_every_sync_point() {
        // The pattern crash tests use: stop durability after k sync points, then crash.
        let total = {
            let dev = SimDevice::new(5);
            workload(&dev);
            dev.sync_count()
        };
        assert!(total > 5);
        let mut previous_durable_bytes = 0;
        for k in 0..=total {
            let dev = SimDevice::new(5);
            dev.fail_after_syncs(k);
            for i in 0..20u8 {
                let name = format!("f{}", i % 5);
                dev.append(&name, &vec![i; 1 + usize::from(i) * 7]).unwrap();
                if i % 3 == 0 {
                    let _ = dev.sync(&name);
                }
                if i % 7 == 6 {
                    let _ = dev.rename(&name, &format!("r{i}"));
                }
            }
            assert_eq!(dev.sync_count(), k);
            let after = dev.crash(CrashMode::LoseUnsynced);
            let bytes: usize = image(&after).iter().map(|(_, c)| c.len()).sum();
            assert!(bytes >= previous_durable_bytes);
            previous_durable_bytes = bytes;
        }
    }

    #[test]
    fn devices_are_shareable() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SimDevice>();
        assert_send_sync::<DirDevice>();
        let dev: Arc<dyn Device> = Arc::new(SimDevice::new(0));
        dev.append("a", b"x").unwrap();
        assert!(format!("{dev:?}").contains("\"a\""));
        let (_dir, real) = dir_device();
        assert!(format!("{real:?}").contains("DirDevice"));
    }

    #[derive(Clone, Debug)]
    enum Action {
        Append(u8, Vec<u8>),
        Write(u8, Vec<u8>),
        WriteAt(u8, u64, Vec<u8>),
        Truncate(u8, u64),
        Sync(u8),
        Rename(u8, u8),
        Remove(u8),
    }

    fn action() -> impl proptest::strategy::Strategy<Value = Action> {
        use proptest::prelude::*;
        let data = proptest::collection::vec(any::<u8>(), 0..20);
        prop_oneof![
            (0..4u8, data.clone()).prop_map(|(f, d)| Action::Append(f, d)),
            (0..4u8, data.clone()).prop_map(|(f, d)| Action::Write(f, d)),
            (0..4u8, 0..30u64, data).prop_map(|(f, o, d)| Action::WriteAt(f, o, d)),
            (0..4u8, 0..30u64).prop_map(|(f, l)| Action::Truncate(f, l)),
            (0..4u8).prop_map(Action::Sync),
            (0..4u8, 0..4u8).prop_map(|(a, b)| Action::Rename(a, b)),
            (0..4u8).prop_map(Action::Remove),
        ]
    }

    fn apply(dev: &dyn Device, action: &Action) -> Result<(), io::ErrorKind> {
        let n = |f: &u8| format!("file{f}");
        match action {
            Action::Append(f, d) => dev.append(&n(f), d),
            Action::Write(f, d) => dev.write(&n(f), d),
            Action::WriteAt(f, o, d) => dev.write_at(&n(f), *o, d),
            Action::Truncate(f, l) => dev.truncate(&n(f), *l),
            Action::Sync(f) => dev.sync(&n(f)),
            Action::Rename(a, b) => dev.rename(&n(a), &n(b)),
            Action::Remove(f) => dev.remove(&n(f)),
        }
        .map_err(|e| e.kind())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// The simulation shows readers what the real device shows, and its crash images are
        /// always the unsynced changes in file order up to a cut, the durable bytes after it.
        #[test]
        fn sim_matches_dir_and_crashes_within_the_model(
            actions in proptest::collection::vec(action(), 1..40),
            seed in proptest::prelude::any::<u64>(),
        ) {
            let (_dir, real) = dir_device();
            let sim = SimDevice::new(seed);
            for a in &actions {
                proptest::prop_assert_eq!(apply(&real, a), apply(&sim, a), "{:?}", a);
            }
            for f in 0..4 {
                let name = format!("file{f}");
                proptest::prop_assert_eq!(real.read(&name).unwrap(), sim.read(&name).unwrap());
            }
            let torn = sim.crash(CrashMode::TornTail);
            for name in torn.names() {
                let content = torn.read(&name).unwrap().unwrap();
                let volatile = sim.read(&name).unwrap().unwrap();
                match sim.durable(&name) {
                    Some(d) if volatile.len() >= d.len() => {
                        proptest::prop_assert!(is_torn_in_order(&content, &d, &volatile));
                    }
                    Some(d) => proptest::prop_assert_eq!(content, d),
                    None => proptest::prop_assert!(volatile.starts_with(&content)),
                }
            }
            let lost = sim.crash(CrashMode::LoseUnsynced);
            for name in sim.names() {
                proptest::prop_assert_eq!(lost.read(&name).unwrap(), sim.durable(&name));
            }
        }
    }
}

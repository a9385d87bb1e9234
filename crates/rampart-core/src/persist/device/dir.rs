//! [`DirDevice`]: the real device, the files of one folder.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{
    is_data_name, os_error, past_end, shrink_only, validate_name, Device, DATA_FOLDER, DATA_PREFIX,
};

pub use crate::limits::CACHED_FILES_MAX;

/// The real device: files in a folder, mode 0600, with up to [`CACHED_FILES_MAX`] open file
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
    /// The data folder (`data/`), opened the first time a host file needs it.
    data_dir: std::sync::OnceLock<File>,
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

    /// Writes `data` at `offset` (past `*len` it leaves a hole) and updates `*len`, the locked
    /// length: on an error a part may have been written, so the length is asked of the file
    /// system then.
    fn write_tracked(&self, len: &mut u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let result = self.file.write_all_at(data, offset);
        if result.is_ok() {
            // A failed write may have written a part: not counted (the figure errs low).
            super::count_store_written(data.len() as u64);
        }
        *len = match &result {
            // pwrite of nothing does not extend the file, past its end either.
            Ok(()) if data.is_empty() => *len,
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
            data_dir: std::sync::OnceLock::new(),
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

    /// linkat(2) within the folder.
    fn link_at(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (c_name(from)?, c_name(to)?);
        let dir = self.dir_file.as_raw_fd();
        // SAFETY: both names are NUL-terminated strings that outlive the call; `dir` is open;
        // flags 0 (no symbolic link followed).
        if unsafe { libc::linkat(dir, from.as_ptr(), dir, to.as_ptr(), 0) } != 0 {
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
        if cache.files.len() >= CACHED_FILES_MAX {
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

    /// fsync of the folder that holds `name` (the store folder, or the data folder).
    fn sync_dir(&self, name: &str) -> io::Result<()> {
        self.folder_of(name)?.sync_all()
    }

    /// The folder holding `name`, as an open descriptor.
    fn folder_of(&self, name: &str) -> io::Result<&File> {
        if !is_data_name(name) {
            return Ok(&self.dir_file);
        }
        if let Some(dir) = self.data_dir.get() {
            return Ok(dir);
        }
        let dir = self.open_at(DATA_FOLDER, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok(self.data_dir.get_or_init(|| dir))
    }

    /// fallocate(2) of `name` with `mode` (0 or KEEP_SIZE): [`Device::allocate`] and
    /// [`Device::allocate_keep_size`].
    fn allocate_with(&self, name: &str, offset: u64, len: u64, mode: i32) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("allocate room in", name)?;
        let file = self.open_existing(name)?;
        let mut current = file.len_bytes.lock();
        if len == 0 {
            return Ok(()); // fallocate would say EINVAL
        }
        let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "range past 2^63 bytes");
        let start = libc::off_t::try_from(offset).map_err(|_| too_big())?;
        let span = libc::off_t::try_from(len).map_err(|_| too_big())?;
        let end = start.checked_add(span).ok_or_else(too_big)?;
        // SAFETY: fallocate(2) on a descriptor `file` keeps open, with in-range arguments; it
        // touches no memory of ours. The result is checked.
        if unsafe { libc::fallocate(file.as_raw_fd(), mode, start, span) } != 0 {
            let e = io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                io::Error::new(io::ErrorKind::Unsupported, e)
            } else {
                e
            });
        }
        if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            *current = (*current).max(end as u64);
        }
        Ok(())
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
    fn folder_removed(&self) -> bool {
        DirDevice::folder_removed(self)
    }
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

    fn read_at_cached(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let file = self.open_existing(name)?;
        let Ok(at) = libc::off_t::try_from(offset) else {
            return Ok(Some(0)); // past any file's end
        };
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        loop {
            // SAFETY: `iov` describes `buf`, which is valid for writes of `buf.len()` bytes
            // and borrowed mutably for the call; the descriptor is open while `file` lives.
            let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
            if n >= 0 {
                // A short read may be a page missing from the cache, not the end: the caller
                // asks again with `read_at`, which tells the two apart.
                return Ok((n as usize == buf.len()).then_some(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => return Ok(None),
                // A kernel or file system without RWF_NOWAIT: read as usual.
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
                    return self.read_at(name, offset, buf).map(Some)
                }
                _ => return Err(e),
            }
        }
    }

    fn len(&self, name: &str) -> io::Result<Option<u64>> {
        match self.cached(name, false)? {
            // A host file may be written behind the device (FUSE passthrough): ask.
            Some(file) if is_data_name(name) => {
                let mut len = file.len_bytes.lock();
                *len = file.metadata()?.len();
                Ok(Some(*len))
            }
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

    fn write_at_sparse(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("write", name)?;
        let file = self.open_existing(name)?;
        let mut len = file.len_bytes.lock();
        file.write_tracked(&mut len, offset, data)
    }

    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("set the length of", name)?;
        let file = self.open_existing(name)?;
        let mut current = file.len_bytes.lock();
        file.set_len(len)?;
        *current = len;
        Ok(())
    }

    fn allocate(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        self.allocate_with(name, offset, len, 0)
    }

    fn allocate_keep_size(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        self.allocate_with(name, offset, len, libc::FALLOC_FL_KEEP_SIZE)
    }

    fn punch_hole(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        validate_name(name)?;
        self.check_writable("punch a hole in", name)?;
        let file = self.open_existing(name)?;
        let _len = file.len_bytes.lock(); // no write of the same file meanwhile
        if len == 0 {
            return Ok(()); // fallocate would say EINVAL
        }
        let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "hole past 2^63 bytes");
        let start = libc::off_t::try_from(offset).map_err(|_| too_big())?;
        // Clamped: past the end, KEEP_SIZE makes the rest a no-op anyway.
        let span = libc::off_t::try_from(len).unwrap_or(libc::off_t::MAX - start);
        let span = span.min(libc::off_t::MAX - start);
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate(2) on a descriptor `file` keeps open, with in-range arguments; it
        // touches no memory of ours. The result is checked.
        if unsafe { libc::fallocate(file.as_raw_fd(), mode, start, span) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn file_for_passthrough(&self, name: &str) -> io::Result<Option<File>> {
        validate_name(name)?;
        let mode = if self.read_only {
            libc::O_RDONLY
        } else {
            libc::O_RDWR
        };
        let file = self.open_at(name, mode)?;
        // Writes through it change the length behind the cached one: forget that, so the next
        // call through the device starts from the file's real length.
        let mut cache = self.cache.lock();
        if cache
            .files
            .get(name)
            .is_some_and(|f| Arc::strong_count(f) == 1)
        {
            cache.files.remove(name);
        }
        Ok(Some(file))
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
            self.sync_dir(name)?;
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
        if is_data_name(from) != is_data_name(to) {
            self.sync_dir(from)?;
        }
        if let Err(e) = self.sync_dir(to) {
            // The folder is not known durable: the next sync of `to` retries.
            self.cache.lock().new_entries.insert(to.to_owned());
            return Err(e);
        }
        Ok(())
    }

    fn drop_cached(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        let file = self.open_existing(name)?;
        let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "range past 2^63 bytes");
        let start = libc::off_t::try_from(offset).map_err(|_| too_big())?;
        let span = libc::off_t::try_from(len).map_err(|_| too_big())?;
        // SAFETY: posix_fadvise(2) on a descriptor that `file` keeps open, with in-range
        // arguments; it touches no memory of ours and returns its error (no errno).
        let rc = unsafe {
            libc::posix_fadvise(file.as_raw_fd(), start, span, libc::POSIX_FADV_DONTNEED)
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    fn release_replaced(&self) {
        let replaced = std::mem::take(&mut self.cache.lock().replaced);
        // Closing the last descriptor frees the file, outside the cache lock.
        drop(replaced);
    }

    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        self.check_writable("link", from)?;
        if is_data_name(from) || is_data_name(to) {
            return Err(super::unsupported("link in the data folder", from));
        }
        {
            let mut cache = self.cache.lock();
            self.link_at(from, to)?;
            // The folder fsync below makes both names durable.
            cache.new_entries.remove(from);
        }
        if let Err(e) = self.sync_dir(to) {
            // Not known durable: the next sync of either name retries the folder's.
            let mut cache = self.cache.lock();
            cache.new_entries.insert(from.to_owned());
            cache.new_entries.insert(to.to_owned());
            return Err(e);
        }
        Ok(())
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
            self.sync_dir(name)?;
        }
        Ok(())
    }

    fn create_data_folder(&self) -> io::Result<()> {
        self.check_writable("make the data folder", DATA_FOLDER)?;
        let name = c_name(DATA_FOLDER)?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call; the folder
        // descriptor is open. The result is checked.
        let rc = unsafe { libc::mkdirat(self.dir_file.as_raw_fd(), name.as_ptr(), 0o700) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(e);
            }
            return Ok(());
        }
        self.dir_file.sync_all()
    }

    fn space(&self) -> io::Result<Option<super::HostSpace>> {
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: fstatvfs(2) fills the struct it is given on success (checked before it is
        // read); the folder descriptor is open.
        let rc = unsafe { libc::fstatvfs(self.dir_file.as_raw_fd(), st.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstatvfs returned 0, so it initialised the struct.
        let st = unsafe { st.assume_init() };
        let fragment = st.f_frsize;
        Ok(Some(super::HostSpace {
            total_bytes: st.f_blocks.saturating_mul(fragment),
            free_bytes: st.f_bfree.saturating_mul(fragment),
            avail_bytes: st.f_bavail.saturating_mul(fragment),
        }))
    }

    fn list_data(&self) -> io::Result<Vec<String>> {
        let dir = match self.folder_of(DATA_PREFIX) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        // Through the descriptor (not the path), as every other call: /proc/self/fd names it.
        let path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(format!("{DATA_PREFIX}{name}"));
            }
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::device::tests::dir_device;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

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
            ("write_at_sparse", ro.write_at_sparse("journal", 100, b"x")),
            ("set_len", ro.set_len("journal", 100)),
            ("punch_hole", ro.punch_hole("journal", 0, 2)),
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
        // The passthrough descriptor only reads.
        let mut file = ro.file_for_passthrough("journal").unwrap().unwrap();
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut content).unwrap();
        assert_eq!(content, b"batch");
        assert!(std::io::Write::write_all(&mut file, b"x").is_err());
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
        let names: Vec<String> = (0..3 * CACHED_FILES_MAX).map(|i| format!("f{i}")).collect();
        for round in 0..3u8 {
            for name in &names {
                dev.append(name, &[round]).unwrap();
                assert!(dev.cache.lock().files.len() <= CACHED_FILES_MAX);
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
}

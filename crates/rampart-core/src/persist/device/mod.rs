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
//! 1. `append`, `write`, `write_at`, `write_at_sparse`, `truncate`, `set_len`, `allocate` and
//!    `punch_hole` change the volatile content only. A crash may lose them, partly or wholly, until the
//!    next `sync` of that file. (A hole reads as zeros, in both contents.)
//! 2. `sync(name)` makes the file's volatile content its durable content, and the file's
//!    existence durable too ([`DirDevice`] also fsyncs the folder the first time it syncs a
//!    file it created). Nothing else becomes durable: each file is synced on its own.
//! 3. `rename(from, to)`, `link(from, to)` and `remove(name)` are durable when they return
//!    (each ends with an fsync of the folder), but they sync no content; after `link`, a crash
//!    leaves at `to` what it leaves at `from` (the device is only asked to link a file that
//!    is not written again under either name). After `rename(from, to)` a crash leaves
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
//!    pages, so retrying it proves nothing). A failed write (ENOSPC) changes nothing in the
//!    simulation; on a real disk it may have written a part.
//! 6. [`SimDevice::flip_bit`] damages durable content, as media corruption does. Detecting it is
//!    the job of the formats' checksums, never of this layer.
//!
//! Sync points, which [`SimDevice::sync_count`] counts and [`FailSyncs`] makes fail, are the
//! successful calls of `sync`, `rename`, and `remove` of an existing file: the moments when
//! the durable state changes. A test crashes "at every sync point" either by running a
//! workload with `fail_after_syncs(k)` for each `k` and calling [`SimDevice::crash`], or in
//! one run with [`CrashImages`], which keeps the image a crash just before each one leaves.
//! The other faults ([`Faults`]: failing writes, a full disk, slow files) are options of the
//! simulated device too, never wrappers around it.
//!
//! # Large files
//!
//! The disk tier keeps each large file as one host file, read and written through FUSE
//! passthrough: for it a device writes past a file's end (`write_at_sparse`, leaving a hole),
//! grows or shrinks a file to any length (`set_len`), frees a range (`punch_hole`), and hands
//! out the host file's descriptor where it has one (`file_for_passthrough`).
//!
//! Names are flat: not empty, not `.` or `..`, no `/` or NUL, at most 255 bytes; anything else
//! is an `InvalidInput` error on both devices. The one exception is the data folder: a name
//! `data/<flat name>` denotes a host file of the disk tier, in the store's `data/` folder
//! ([`DATA_FOLDER`]). Host files keep the same durability model (each synced on its own; the
//! first sync of a new one also makes its name in `data/` durable); [`Device::list_data`]
//! lists them and [`Device::create_data_folder`] makes the folder.

use std::io;

mod dir;
pub mod faults;
mod mirror;
mod sim;

pub use dir::{DirDevice, CACHED_FILES_MAX};
pub use faults::{CrashImages, Delay, FailSyncs, Faults, Files, SyncOp};
pub use mirror::{MirrorDevice, MirrorHealth};
pub use sim::{CrashMode, Event, SimDevice, Written, EVENTS_MAX};

/// Bytes this process has written to store files itself (journal, checkpoints, superblock,
/// the `reserve` file, disk-tier host files written by the daemon, the mirror's copies), as
/// counted where it writes them: [`DirDevice`]'s writes and the few writes made around it
/// ([`count_store_written`]). One figure per process: a daemon serves one store. What the
/// kernel writes through FUSE passthrough is not the daemon's and is not counted; neither is
/// the file system's own metadata. `write_bytes` of /proc/PID/io is no substitute: for
/// fdatasync'd small writes it over-counts about 30× (issue 15, docs/BENCHMARKS.md).
static STORE_WRITTEN_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// See [`STORE_WRITTEN_BYTES`]: bytes written to store files by this process so far.
pub fn store_written_bytes() -> u64 {
    STORE_WRITTEN_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts `bytes` written to a store file by this process outside [`DirDevice`].
pub fn count_store_written(bytes: u64) {
    STORE_WRITTEN_BYTES.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests;

/// The room of the file system under the store, in bytes (statvfs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostSpace {
    pub total_bytes: u64,
    /// Free blocks (`f_bfree`), with those only root may use.
    pub free_bytes: u64,
    /// Free blocks an unprivileged user may use (`f_bavail`).
    pub avail_bytes: u64,
}

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
    /// Gives the file `from` a second name `to` (a hard link, durably: fsync of the folder),
    /// so that a later `rename` over `from` leaves the old content under `to` (the previous
    /// checkpoint kept as a backup, decision 0123). EEXIST if `to` exists, ENOENT if `from`
    /// does not. The caller writes neither name afterwards until one of them is replaced or
    /// removed: [`SimDevice`] makes a copy, not a shared file. The default: Unsupported.
    fn link(&self, from: &str, _to: &str) -> io::Result<()> {
        Err(unsupported("link", from))
    }
    /// A hint: starts writing the file's changed data to the disk, without waiting and without
    /// making anything durable (only `sync` does). Writers of large files call it as they go,
    /// so that the final `sync` does not push everything at once while other files' syncs wait
    /// behind it. The default does nothing.
    fn start_writeback(&self, _name: &str) -> io::Result<()> {
        Ok(())
    }
    /// A hint: the synced bytes `offset..offset + len` of a file will not be read soon, and
    /// the host may drop them from its page cache (posix_fadvise DONTNEED). Nothing about
    /// the file's content or durability changes; a later read reads them from the disk. The
    /// journal's committed batches are dropped so: its next batches are written into pages
    /// the kernel has just freed rather than fresh ones (decision 0131). The default does
    /// nothing.
    fn drop_cached(&self, _name: &str, _offset: u64, _len: u64) -> io::Result<()> {
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
    /// As `read_at`, but only from memory: Ok(None) where the read would wait for the disk
    /// (the host's page cache lacks some of the bytes), so that a thread that must not block
    /// can hand the read to one that may. The default: `read_at` (devices that never wait).
    fn read_at_cached(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.read_at(name, offset, buf).map(Some)
    }
    /// Writes `data` over an existing file from `offset`, anywhere: past the end, the bytes
    /// between the old end and `offset` become a hole that reads as zeros (not durable until
    /// `sync`). ENOENT if the file does not exist. The default: Unsupported.
    fn write_at_sparse(&self, name: &str, _offset: u64, _data: &[u8]) -> io::Result<()> {
        Err(unsupported("write_at_sparse", name))
    }
    /// Sets an existing file's length: shrinking drops the bytes past `len`, growing adds a
    /// hole (not durable until `sync`). ENOENT if the file does not exist. The default:
    /// Unsupported.
    fn set_len(&self, name: &str, _len: u64) -> io::Result<()> {
        Err(unsupported("set_len", name))
    }
    /// Frees the bytes `offset..offset + len` of an existing file, which then read as zeros;
    /// the length stays (fallocate PUNCH_HOLE | KEEP_SIZE). The part past the end is ignored.
    /// Not durable until `sync`. ENOENT if the file does not exist. The default: Unsupported.
    fn punch_hole(&self, name: &str, _offset: u64, _len: u64) -> io::Result<()> {
        Err(unsupported("punch_hole", name))
    }
    /// Allocates `offset..offset + len` of an existing file without writing it (fallocate(2),
    /// mode 0): the file grows to at least `offset + len`, the new bytes read as zeros, bytes
    /// already there stay, and the room is taken now, so a full disk fails this call rather
    /// than a later write into the range. Not durable until `sync`. ENOENT if the file does
    /// not exist. The default, and file systems without fallocate: `ErrorKind::Unsupported`
    /// (callers then write zeros). Why: writing zeros to reserve room writes every byte
    /// twice, once as zeros and once for real (decision 0093).
    fn allocate(&self, name: &str, _offset: u64, _len: u64) -> io::Result<()> {
        Err(unsupported("allocate", name))
    }
    /// [`Device::allocate`] without changing the file's length (fallocate(2) KEEP_SIZE): room
    /// taken for `offset..offset + len`, also past the end. The default: Unsupported.
    fn allocate_keep_size(&self, name: &str, _offset: u64, _len: u64) -> io::Result<()> {
        Err(unsupported("allocate_keep_size", name))
    }
    /// A new open descriptor of the host file behind `name`, for the kernel to read and write
    /// directly (FUSE passthrough); Ok(None) if the device has no host files (the default).
    /// ENOENT if the file does not exist. Writes through it bypass the device: the caller
    /// writes the file only through such descriptors while it holds one, and calls `sync`
    /// for durability as usual.
    fn file_for_passthrough(&self, _name: &str) -> io::Result<Option<std::fs::File>> {
        Ok(None)
    }
    /// Makes the data folder (`data/`, mode 0700) if it is not there, durably. The default
    /// does nothing (a device without folders).
    fn create_data_folder(&self) -> io::Result<()> {
        Ok(())
    }
    /// The size and free room of the file system under the store (statvfs), if the device
    /// has one. The default: None.
    fn space(&self) -> io::Result<Option<HostSpace>> {
        Ok(None)
    }
    /// The host files in the data folder, as device names (`data/...`), in no order; empty if
    /// there is no data folder. The default: none.
    fn list_data(&self) -> io::Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// Whether the device's folder has been removed since it was opened (its files with it).
    /// The default: false (a device without a folder).
    fn folder_removed(&self) -> bool {
        false
    }
    /// The state of the store's mirror (DA2) if this device is a mirrored store
    /// ([`MirrorDevice`]); the default: None.
    fn mirror_health(&self) -> Option<std::sync::Arc<MirrorHealth>> {
        None
    }
}

/// The folder of the disk tier's host files, inside the store folder.
pub const DATA_FOLDER: &str = "data";
/// The prefix of a host file's device name.
pub const DATA_PREFIX: &str = "data/";

/// Whether `name` denotes a host file in the data folder.
pub fn is_data_name(name: &str) -> bool {
    name.starts_with(DATA_PREFIX)
}

/// Grows `name` by `len` bytes from `offset`, its length, that read as zeros: allocated
/// ([`Device::allocate`]) where the device can, else zeros written. Not durable until `sync`.
pub fn allocate_or_write_zeros(
    device: &dyn Device,
    name: &str,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    match device.allocate(name, offset, len) {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => write_zeros(device, name, offset, len),
        other => other,
    }
}

/// Writes `len` zeros into `name` from `offset` (at most its length), in pieces.
pub fn write_zeros(device: &dyn Device, name: &str, offset: u64, len: u64) -> io::Result<()> {
    static ZEROS: [u8; 1 << 20] = [0; 1 << 20];
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(ZEROS.len() as u64) as usize;
        device.write_at(name, at, &ZEROS[..n])?;
        at += n as u64;
    }
    Ok(())
}

fn unsupported(what: &str, name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what} of {name:?}: this device does not support it"),
    )
}

/// Copies `data[offset..]` into `buf` as far as both go; returns how many bytes (0 past the end).
pub(crate) fn copy_window(data: &[u8], offset: u64, buf: &mut [u8]) -> usize {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let n = buf.len().min(data.len() - start);
    buf[..n].copy_from_slice(&data[start..start + n]);
    n
}

pub use crate::limits::DEVICE_NAME_BYTES_MAX;

/// Checks that `name` is a flat file name: not empty, not `.` or `..`, no `/` or NUL, at most
/// [`DEVICE_NAME_BYTES_MAX`] bytes. Errors are `InvalidInput`.
pub fn validate_name(name: &str) -> io::Result<()> {
    // One level only: `data/` and a flat name after it.
    let flat = name.strip_prefix(DATA_PREFIX).unwrap_or(name);
    let why = if flat.is_empty() {
        "it is empty"
    } else if flat == "." || flat == ".." {
        "it names a folder"
    } else if flat.contains('/') {
        "it contains '/'"
    } else if flat.contains('\0') {
        "it contains a NUL byte"
    } else if flat.len() > DEVICE_NAME_BYTES_MAX {
        "it is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("invalid store file name {name:?}: {why}"),
    ))
}

pub(crate) fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

pub(crate) fn past_end(name: &str, len: u64, offset: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{name}: cannot write at {offset}, past its end ({len} bytes)"),
    )
}

pub(crate) fn shrink_only(name: &str, current: u64, len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "cannot truncate {name:?} to {len} bytes: it has {current}, and truncate only shrinks"
        ),
    )
}

//! O_DIRECT reads and writes of disk-tier files served by the daemon (no passthrough): they
//! go to the host file through an O_DIRECT descriptor of its own, so that no page cache sits
//! between the program and the disk (issue 13 item 4, DFS §3.3.3; decision 0058).
//!
//! The kernel sends an O_DIRECT open's READ and WRITE requests with the open's flags, and
//! without its own page cache. Requests aligned to [`ALIGN_BYTES`] (what databases send) take
//! this path; others, and writes that must clear setuid/setgid, go through the engine as any
//! write (the host's page cache). A write pins the file on the disk tier for its duration
//! (`passthrough_opened`/`passthrough_released`, as the kernel's own writes do), and the engine
//! then logs the host file's new size and mtime and syncs it before the record commits.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::sync::Arc;

use parking_lot::Mutex;
use rampart_core::{Engine, Errno, FsResult, Ino};

/// Offsets, lengths and buffers of O_DIRECT transfers (the host file systems' logical block
/// size is at most this on the machines we target).
pub(crate) const ALIGN_BYTES: u64 = 4096;

/// O_DIRECT descriptors kept open; more are dropped all at once (each is one open() to redo).
const DESCRIPTORS_MAX: usize = 256;

/// An O_DIRECT descriptor and the (device, inode) of the host file it was opened on, which
/// tells a host file made anew (a file that left the disk tier and came back).
struct Descriptor {
    file: Arc<File>,
    identity: (u64, u64),
}

#[derive(Default)]
pub(crate) struct DirectIo {
    descriptors: Mutex<HashMap<Ino, Descriptor>>,
}

/// Whether a request may take the O_DIRECT path.
pub(crate) fn wants_direct(open_flags: i32, offset: u64, len: u64) -> bool {
    open_flags & libc::O_DIRECT != 0
        && len > 0
        && offset.is_multiple_of(ALIGN_BYTES)
        && len.is_multiple_of(ALIGN_BYTES)
}

/// A zeroed buffer of `len` bytes whose start is aligned to [`ALIGN_BYTES`]: a slice of a
/// longer vector (no unsafe allocation).
struct AlignedBuf {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let align = ALIGN_BYTES as usize;
        let bytes = vec![0u8; len + align];
        let start = (align - (bytes.as_ptr() as usize) % align) % align;
        AlignedBuf { bytes, start, len }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

fn eio(ino: Ino, what: &str, e: &std::io::Error) -> Errno {
    tracing::error!("inode {ino}: O_DIRECT {what} of its host file: {e}");
    Errno::EIO
}

impl DirectIo {
    /// An O_DIRECT descriptor of `ino`'s host file; None when the file is not on the disk
    /// tier or its file system refuses O_DIRECT (the caller then goes through the engine).
    fn descriptor(&self, engine: &Engine, ino: Ino) -> FsResult<Option<Arc<File>>> {
        let Some(host) = engine.host_file(ino)? else {
            return Ok(None);
        };
        let meta = host.metadata().map_err(|e| eio(ino, "fstat", &e))?;
        let identity = (meta.dev(), meta.ino());
        let mut descriptors = self.descriptors.lock();
        if let Some(known) = descriptors.get(&ino) {
            if known.identity == identity {
                return Ok(Some(Arc::clone(&known.file)));
            }
        }
        // The same open file description's inode, opened anew with O_DIRECT.
        let path = format!("/proc/self/fd/{}", host.as_raw_fd());
        let fd = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
        {
            Ok(fd) => Arc::new(fd),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!("inode {ino}: the host file system has no O_DIRECT");
                return Ok(None);
            }
            Err(e) => return Err(eio(ino, "open", &e)),
        };
        if descriptors.len() >= DESCRIPTORS_MAX {
            descriptors.clear();
        }
        descriptors.insert(
            ino,
            Descriptor {
                file: Arc::clone(&fd),
                identity,
            },
        );
        Ok(Some(fd))
    }

    /// Reads `size` bytes at `offset` (both aligned) of a disk-tier file; None: not on the
    /// disk tier (read through the engine).
    pub(crate) fn read(
        &self,
        engine: &Engine,
        ino: Ino,
        offset: u64,
        size: u32,
    ) -> Option<FsResult<Vec<u8>>> {
        let fd = match self.descriptor(engine, ino) {
            Ok(Some(fd)) => fd,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        Some((|| {
            let file_size = engine.getattr(ino)?.size_bytes;
            if offset >= file_size {
                return Ok(Vec::new());
            }
            let wanted = u64::from(size).min(file_size - offset);
            let mut buf = AlignedBuf::new(wanted.next_multiple_of(ALIGN_BYTES) as usize);
            let mut done = 0usize;
            while (done as u64) < wanted {
                let n = fd
                    .read_at(&mut buf.as_mut_slice()[done..], offset + done as u64)
                    .map_err(|e| eio(ino, "read", &e))?;
                if n == 0 {
                    // The host file is shorter than the file: damage (as the engine says).
                    tracing::error!(
                        "inode {ino}: its host file ends at {} before the file's size {file_size}",
                        offset + done as u64
                    );
                    return Err(Errno::EIO);
                }
                done += n;
            }
            Ok(buf.as_slice()[..wanted as usize].to_vec())
        })())
    }

    /// Writes `data` at `offset` (both aligned) of a disk-tier file; None: not on the disk
    /// tier (written through the engine).
    pub(crate) fn write(
        &self,
        engine: &Engine,
        ino: Ino,
        offset: u64,
        data: &[u8],
    ) -> Option<FsResult<u32>> {
        // Pinned on the disk tier while the host file is written behind the engine (EINVAL:
        // not on it).
        if engine.passthrough_opened(ino).is_err() {
            return None;
        }
        let written = (|| {
            let Some(fd) = self.descriptor(engine, ino)? else {
                return Ok(None);
            };
            let mut buf = AlignedBuf::new(data.len());
            buf.as_mut_slice().copy_from_slice(data);
            fd.write_all_at(buf.as_slice(), offset)
                .map_err(|e| eio(ino, "write", &e))?;
            // The daemon's own write to the host file (not the kernel's, as passthrough's).
            rampart_core::persist::device::count_store_written(data.len() as u64);
            Ok(Some(data.len() as u32))
        })();
        // The host file's size and mtime become the file's (a WriteExtent, synced before it
        // commits).
        let logged = engine.passthrough_released(ino);
        match (written, logged) {
            (Ok(None), _) => None,
            (Err(e), _) | (Ok(Some(_)), Err(e)) => Some(Err(e)),
            (Ok(Some(n)), Ok(())) => Some(Ok(n)),
        }
    }
}

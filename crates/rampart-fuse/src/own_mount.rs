//! System calls on the daemon's own mount: those that wait for the daemon to answer requests.
//!
//! A thread of the daemon must not make them (decision 0087, after 0026's addendum): if the
//! daemon is killed (`kill -9`) while one of its threads waits in such a call, the thread
//! waits for replies only the dead threads could give, the process keeps /dev/fuse open, the
//! kernel never aborts the connection, and the daemon never finishes dying (the store's lock
//! stays held). So they run in a process that holds no /dev/fuse (the daemon's page-flusher
//! child, `rampart page-flusher-child`), which the daemon reaches through [`OwnMountCalls`].
//! The functions here are that process's side; [`InProcess`] makes them from the calling
//! thread, for embedders that have no such process (the risk above stays theirs).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rampart_core::Ino;

/// The calls on the own mount that correcting the kernel's view after a refused WRITE needs
/// (`refusals`). An implementation makes them where a kill of the daemon cannot leave a thread
/// of it waiting on its own mount.
pub trait OwnMountCalls: Send + Sync {
    /// Has the kernel write back the mount's dirty pages, then returns its size of file
    /// `ino` (`generation`); `None` if that file is gone or the mount point no longer shows
    /// this mount. A file the kernel no longer caches is looked up (decision 0142) and shows
    /// the engine's size.
    fn sync_and_size(&self, ino: Ino, generation: u64) -> std::io::Result<Option<u64>>;

    /// Truncates the kernel's view of file `ino` to `size_bytes` if it shows more.
    fn truncate_past(&self, ino: Ino, generation: u64, size_bytes: u64) -> std::io::Result<()>;
}

/// The calls made from the calling thread (an embedder's mount, or before a helper process
/// exists).
pub struct InProcess {
    /// The mount point and the device number the mount had when made: another file system
    /// mounted over it later must not be touched.
    pub path: PathBuf,
    pub device: u64,
}

impl InProcess {
    /// The mount just made at `path`, its device read without a FUSE request
    /// (AT_STATX_DONT_SYNC: nothing serves requests yet).
    pub fn of(path: &Path) -> std::io::Result<InProcess> {
        let c_path = CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: an all-zero statx is a valid value of this plain C struct.
        let mut stx: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: `c_path` is a NUL-terminated string and `stx` a valid out-pointer, both
        // alive for the call.
        let rc = unsafe {
            libc::statx(
                libc::AT_FDCWD,
                c_path.as_ptr(),
                libc::AT_STATX_DONT_SYNC | libc::AT_SYMLINK_NOFOLLOW,
                0,
                &mut stx,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(InProcess {
            path: path.to_path_buf(),
            device: libc::makedev(stx.stx_dev_major, stx.stx_dev_minor),
        })
    }

    /// The mount's root, if the mount point still shows this mount.
    fn root(&self) -> std::io::Result<Option<OwnedFd>> {
        let root = open_root(&self.path)?;
        Ok((fstat(root.as_raw_fd())?.st_dev == self.device).then_some(root))
    }
}

impl OwnMountCalls for InProcess {
    fn sync_and_size(&self, ino: Ino, generation: u64) -> std::io::Result<Option<u64>> {
        match self.root()? {
            Some(root) => sync_and_size(&root, ino, generation),
            None => Ok(None),
        }
    }

    fn truncate_past(&self, ino: Ino, generation: u64, size_bytes: u64) -> std::io::Result<()> {
        match self.root()? {
            Some(root) => truncate_past(&root, ino, generation, size_bytes),
            None => Ok(()),
        }
    }
}

/// Opens the directory at `path` (a mount's root) for the calls below.
pub fn open_root(path: &Path) -> std::io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `c_path` is NUL-terminated; the descriptor returned is owned below.
    let root = last_error(unsafe { libc::open(c_path.as_ptr(), flags) })?;
    // SAFETY: `root` is a descriptor just opened and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(root) })
}

/// [`OwnMountCalls::sync_and_size`] below the mount's `root`.
pub fn sync_and_size(root: &OwnedFd, ino: Ino, generation: u64) -> std::io::Result<Option<u64>> {
    let Some(file) = open_by_handle(root, ino, generation)? else {
        return Ok(None);
    };
    // syncfs, not fsync or sync_file_range: those report and clear the file's writeback
    // error (AS_ENOSPC), which the writer's close must still see; syncfs waits keeping errors
    // (wait_sb_inodes). Its own result (the mount's errors since our descriptor opened) is
    // not ours to report.
    // SAFETY: a plain syscall on a descriptor `file` keeps open.
    let _ = unsafe { libc::syncfs(file.as_raw_fd()) };
    Ok(Some(fstat(file.as_raw_fd())?.st_size as u64))
}

/// [`OwnMountCalls::truncate_past`] below the mount's `root`.
pub fn truncate_past(
    root: &OwnedFd,
    ino: Ino,
    generation: u64,
    size_bytes: u64,
) -> std::io::Result<()> {
    let Some(file) = open_by_handle(root, ino, generation)? else {
        return Ok(());
    };
    if fstat(file.as_raw_fd())?.st_size as u64 > size_bytes {
        // SAFETY: a plain syscall on a descriptor `file` keeps open.
        last_error(unsafe { libc::ftruncate(file.as_raw_fd(), size_bytes as libc::off_t) })?;
    }
    Ok(())
}

/// `struct file_handle` with the 12 bytes of a FUSE handle (`fuse_encode_fh`: the node id's
/// high and low halves, the generation; type FILEID_INO64_GEN).
#[repr(C)]
struct FuseHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u32; 3],
}

const FILEID_INO64_GEN: i32 = 0x81;

/// Opens file `ino` for writing by its handle; `None` if it is not ours any more (ESTALE:
/// deleted, or its number now another file's).
fn open_by_handle(root: &OwnedFd, ino: Ino, generation: u64) -> std::io::Result<Option<OwnedFd>> {
    let mut handle = FuseHandle {
        handle_bytes: 12,
        handle_type: FILEID_INO64_GEN,
        f_handle: [(ino >> 32) as u32, ino as u32, generation as u32],
    };
    // SAFETY: `handle` has the layout of a `struct file_handle` followed by `handle_bytes`
    // bytes of handle, and lives for the call; the kernel only reads it. The descriptor
    // returned is owned below. The kernel finds the inode in its own cache, the one to
    // correct; one it no longer caches it looks up in the daemon (LOOKUP of ".", export
    // support, decision 0142) and opens at the engine's size: nothing to truncate then.
    let fd = last_error(unsafe {
        libc::open_by_handle_at(
            root.as_raw_fd(),
            (&mut handle as *mut FuseHandle).cast::<libc::file_handle>(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    });
    match fd {
        // SAFETY: a descriptor just opened and owned by nobody else.
        Ok(fd) => Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) })),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE) | Some(libc::ENOENT)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn last_error<T>(rc: T) -> std::io::Result<T>
where
    T: Copy + PartialOrd + Default,
{
    if rc < T::default() {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn fstat(fd: i32) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer for the call; `fd` is open.
    last_error(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

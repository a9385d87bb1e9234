//! Brings the kernel's view of a file back to the engine's after the engine refused a WRITE.
//!
//! Under the writeback cache a write(2) lands in the kernel's page cache and moves the kernel's
//! size at once; the daemon sees the bytes only when the pages are written back. When it
//! refuses them (ENOSPC at the memory cap, EFBIG past the largest file) the kernel has already
//! shown that size, and it keeps it and the refused pages: it trusts its own size of a file it
//! caches (`fuse_change_attributes` ignores the size a GETATTR reply carries), and no FUSE
//! notification shrinks it. Only a truncate through the kernel does.
//!
//! So, after replying to the refused WRITE, the adapter hands the inode to one worker thread,
//! which opens the file through the mount by its handle (inode number and generation), makes
//! the kernel write back whatever else is dirty, and if the kernel's size is still past the
//! engine's, truncates it to the engine's (the kernel drops its pages past it), then has the
//! kernel drop the file's remaining pages (refused bytes inside the file). Never from the
//! request handler: the pages of the refused WRITE stay under writeback until its reply, and
//! both steps wait for them (docs/decisions/0031).

use std::collections::HashSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use fuser::{INodeNo, Notifier};
use parking_lot::Mutex;
use rampart_core::{Engine, Ino};

/// Inodes waiting for the worker; more refusals meanwhile are dropped with a warning (the next
/// refusal of the same file brings it back).
const QUEUE_LEN_MAX: usize = 64;

/// The adapter's side: where refused inodes go.
pub(crate) struct Refusals {
    queue: SyncSender<Ino>,
    /// Inodes queued and not yet taken: ten refused WRITEs of one file make one job.
    queued: Arc<Mutex<HashSet<Ino>>>,
}

/// The worker's side, started once the session (and its notifier) exists.
pub(crate) struct Worker {
    jobs: Receiver<Ino>,
    queued: Arc<Mutex<HashSet<Ino>>>,
}

pub(crate) fn channel() -> (Refusals, Worker) {
    let (queue, jobs) = std::sync::mpsc::sync_channel(QUEUE_LEN_MAX);
    let queued = Arc::new(Mutex::new(HashSet::new()));
    (
        Refusals {
            queue,
            queued: queued.clone(),
        },
        Worker { jobs, queued },
    )
}

impl Refusals {
    /// The engine refused a WRITE to `ino` (called after the reply is sent).
    pub(crate) fn refused(&self, ino: Ino) {
        if !self.queued.lock().insert(ino) {
            return;
        }
        match self.queue.try_send(ino) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.queued.lock().remove(&ino);
                tracing::warn!(
                    "too many refused writes at once: the kernel may show inode {ino}'s \
                     refused size until its caches are dropped"
                );
            }
            // The worker is gone (no mount point to reach the file through).
            Err(TrySendError::Disconnected(_)) => {
                self.queued.lock().remove(&ino);
            }
        }
    }
}

/// Where the worker reaches the mount: its path and the device number it had when mounted
/// (another file system mounted over it later must not be touched).
pub(crate) struct MountAt {
    pub(crate) path: PathBuf,
    pub(crate) device: u64,
}

impl MountAt {
    /// The device of the mount just made at `path`, read without a FUSE request
    /// (AT_STATX_DONT_SYNC: nothing serves requests yet).
    pub(crate) fn of(path: &Path) -> std::io::Result<MountAt> {
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
        Ok(MountAt {
            path: path.to_path_buf(),
            device: libc::makedev(stx.stx_dev_major, stx.stx_dev_minor),
        })
    }
}

impl Worker {
    /// Starts the worker thread; it ends when the adapter (the sender) is dropped.
    pub(crate) fn start(
        self,
        at: MountAt,
        engine: Arc<Engine>,
        notifier: Notifier,
    ) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("kernel-view".into())
            .spawn(move || {
                let mut warned = false;
                while let Ok(ino) = self.jobs.recv() {
                    self.queued.lock().remove(&ino);
                    if let Err(e) = realign(&at, &engine, &notifier, ino) {
                        if !warned {
                            tracing::warn!(
                                "after a refused write to inode {ino}, the kernel's view of it \
                                 could not be corrected (it shows the refused size until its \
                                 caches are dropped): {e}"
                            );
                            warned = true;
                        }
                    }
                }
            })?;
        Ok(())
    }
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

/// One correction: see the module's comment.
fn realign(at: &MountAt, engine: &Engine, notifier: &Notifier, ino: Ino) -> std::io::Result<()> {
    let Ok(attr) = engine.getattr(ino) else {
        return Ok(()); // gone: the kernel forgets it too
    };
    let c_path = CString::new(at.path.as_os_str().as_bytes())?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `c_path` is NUL-terminated; the descriptor returned is owned below.
    let root = last_error(unsafe { libc::open(c_path.as_ptr(), flags) })?;
    // SAFETY: `root` is a descriptor just opened and owned by nobody else.
    let root = unsafe { OwnedFd::from_raw_fd(root) };
    if fstat(root.as_raw_fd())?.st_dev != at.device {
        return Ok(()); // unmounted, or something else mounted over it
    }
    let mut handle = FuseHandle {
        handle_bytes: 12,
        handle_type: FILEID_INO64_GEN,
        f_handle: [(ino >> 32) as u32, ino as u32, attr.generation as u32],
    };
    // SAFETY: `handle` has the layout of a `struct file_handle` followed by `handle_bytes`
    // bytes of handle, and lives for the call; the kernel only reads it. The descriptor
    // returned is owned below. The kernel finds the inode in its own cache (fuse_get_dentry:
    // without export support only a cached inode resolves, which is the one to correct).
    let fd = last_error(unsafe {
        libc::open_by_handle_at(
            root.as_raw_fd(),
            (&mut handle as *mut FuseHandle).cast::<libc::file_handle>(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    });
    let fd = match fd {
        Ok(fd) => fd,
        // Not in the kernel's cache (nothing to correct) or not ours any more.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE) | Some(libc::ENOENT)) => {
            return Ok(())
        }
        Err(e) => return Err(e),
    };
    // SAFETY: as for `root`.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    // The kernel's other dirty pages reach the engine first (they may be refused too), so that
    // its size is compared with everything the engine will get. syncfs, not fsync or
    // sync_file_range: those report and clear the file's writeback error (AS_ENOSPC), which
    // the writer's close must still see; syncfs waits keeping errors (wait_sb_inodes). Its
    // own result (the mount's errors since our descriptor opened) is not ours to report.
    // SAFETY: a plain syscall on a descriptor `file` keeps open.
    let _ = unsafe { libc::syncfs(file.as_raw_fd()) };
    let kernel_size = fstat(file.as_raw_fd())?.st_size as u64;
    let engine_size = engine.getattr(ino).map_or(kernel_size, |a| a.size_bytes);
    if kernel_size > engine_size {
        // SAFETY: as above.
        last_error(unsafe { libc::ftruncate(file.as_raw_fd(), engine_size as libc::off_t) })?;
    }
    // Refused bytes inside the file: the engine holds zeros (or older bytes) there.
    match notifier.inval_inode(INodeNo(ino), 0, 0) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
        _ => Ok(()),
    }
}

fn fstat(fd: i32) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer for the call; `fd` is open.
    last_error(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

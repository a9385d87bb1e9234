//! Per-file OPEN when FUSE passthrough is in use (docs/decisions/0058-per-file-open-and-passthrough.md).
//!
//! A disk-tier file's first open registers its host file with the kernel as a backing file
//! (FUSE_DEV_IOC_BACKING_OPEN) and answers FOPEN_PASSTHROUGH: the kernel then reads, writes
//! and maps the host file itself, with no request to the daemon. Every other open is a
//! "cached" open, answered at once (the page cache as before; a disk-tier file opened so is
//! served by the daemon from its host file).
//!
//! The kernel keeps one I/O mode per inode (fs/fuse/iomode.c): while an inode has cached
//! opens a passthrough open fails, and while it has passthrough opens every open must be
//! passthrough with the same backing id (else the program's open() gets EIO). So the table
//! counts both kinds per inode and answers a new open in the mode already in use. The file
//! handle says which kind an open was (RELEASE brings it back).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use fuser::{BackingId, FileHandle, FopenFlags, INodeNo, Notifier, ReplyOpen};
use parking_lot::Mutex;
use rampart_core::time::to_system_time;
use rampart_core::{Engine, Ino};

/// The file handle of a cached open.
pub(crate) const FH_CACHED: FileHandle = FileHandle(0);
/// The file handle of a passthrough open.
pub(crate) const FH_PASSTHROUGH: FileHandle = FileHandle(1);

/// Shards of the table: opens of different files rarely wait for each other.
const SHARDS: usize = 16;

/// What a mount settled at INIT, shared with [`crate::Mounted`] for `rampart status`.
#[derive(Debug, Default)]
pub struct Negotiated {
    /// The kernel accepted FUSE_PASSTHROUGH (and the writeback cache is therefore off).
    passthrough: AtomicBool,
    /// A backing-file registration was refused for lack of privilege (EPERM): the daemon
    /// serves every disk-tier file from then on.
    backing_refused: AtomicBool,
    /// The writeback cache is in use.
    writeback_cache: AtomicBool,
}

impl Negotiated {
    pub(crate) fn set(&self, passthrough: bool, writeback_cache: bool) {
        self.passthrough.store(passthrough, Ordering::Relaxed);
        self.writeback_cache
            .store(writeback_cache, Ordering::Relaxed);
    }

    /// How the bytes of disk-tier files move: "passthrough" (the kernel reads and writes the
    /// host file) or "daemon" (every request served by the daemon from the host file).
    pub fn data_path(&self) -> &'static str {
        if self.passthrough.load(Ordering::Relaxed) && !self.backing_refused.load(Ordering::Relaxed)
        {
            "passthrough"
        } else {
            "daemon"
        }
    }

    /// The kernel accepted FUSE passthrough (OPEN of files is then answered).
    pub fn passthrough(&self) -> bool {
        self.passthrough.load(Ordering::Relaxed)
    }

    pub fn writeback_cache(&self) -> bool {
        self.writeback_cache.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct Opens {
    cached: u32,
    passthrough: u32,
    /// Registered while `passthrough > 0`.
    backing: Option<BackingId>,
}

pub(crate) struct OpenFiles {
    shards: [Mutex<HashMap<Ino, Opens>>; SHARDS],
    /// Inodes with passthrough opens: zero lets GETATTR & co skip the table.
    passthrough_inodes: AtomicUsize,
    negotiated: Arc<Negotiated>,
    /// To drop the kernel's page cache of a file the kernel wrote behind it (set after the
    /// session exists).
    notifier: Arc<OnceLock<Notifier>>,
}

/// How an open was answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    Cached,
    Passthrough,
}

impl OpenFiles {
    pub(crate) fn new(negotiated: Arc<Negotiated>, notifier: Arc<OnceLock<Notifier>>) -> Self {
        OpenFiles {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            passthrough_inodes: AtomicUsize::new(0),
            negotiated,
            notifier,
        }
    }

    fn shard(&self, ino: Ino) -> &Mutex<HashMap<Ino, Opens>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// The open flags of a cached open: the page cache survives it (every change comes
    /// through this kernel or is invalidated), and close sends no FLUSH (nothing to do).
    pub(crate) fn cached_flags(engine: &Engine, ino: Ino) -> FopenFlags {
        // A file durable at close (EDITED) needs FLUSH: close(2) waits for its commit
        // (decision 0063). Passthrough mounts have no writeback cache, so SAFE writes reach
        // the daemon at once without direct I/O.
        if engine.durable_at_close(ino) {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH
        }
    }

    /// Counts a cached open made by CREATE or TMPFILE.
    pub(crate) fn created(&self, ino: Ino) {
        self.shard(ino).lock().entry(ino).or_default().cached += 1;
    }

    /// Answers OPEN of the regular file `ino`.
    pub(crate) fn open(&self, engine: &Engine, ino: Ino, reply: ReplyOpen) -> Opened {
        // Outside the lock: for a memory-tier file (the common case) this is the only engine
        // call. A file that moves to disk meanwhile is opened cached, which is correct.
        let on_disk = match engine.host_file(ino) {
            Ok(host) => host.is_some(),
            Err(e) => {
                reply.error(crate::adapter::errno(e));
                return Opened::Cached;
            }
        };
        let mut shard = self.shard(ino).lock();
        let opens = shard.entry(ino).or_default();
        if opens.passthrough > 0 {
            opens.passthrough += 1;
            let backing = opens
                .backing
                .as_ref()
                .expect("a backing id while passthrough-open");
            reply.opened_passthrough(FH_PASSTHROUGH, FopenFlags::empty(), backing);
            return Opened::Passthrough;
        }
        if opens.cached > 0 || !on_disk || self.negotiated.backing_refused.load(Ordering::Relaxed) {
            opens.cached += 1;
            reply.opened(FH_CACHED, Self::cached_flags(engine, ino));
            return Opened::Cached;
        }
        match self.register(engine, ino, &reply) {
            Some(backing) => {
                opens.passthrough = 1;
                reply.opened_passthrough(FH_PASSTHROUGH, FopenFlags::empty(), &backing);
                opens.backing = Some(backing);
                self.passthrough_inodes.fetch_add(1, Ordering::Relaxed);
                Opened::Passthrough
            }
            None => {
                opens.cached += 1;
                reply.opened(FH_CACHED, Self::cached_flags(engine, ino));
                Opened::Cached
            }
        }
    }

    /// Registers `ino`'s host file as the backing file of its passthrough opens. None: the
    /// file is no longer on disk, or the kernel refused (the open is then served cached).
    fn register(&self, engine: &Engine, ino: Ino, reply: &ReplyOpen) -> Option<BackingId> {
        // First tell the engine, which then keeps the file on disk; then take the host file
        // (it may have left the disk tier since the caller looked).
        if let Err(e) = engine.passthrough_opened(ino) {
            tracing::warn!("inode {ino}: no passthrough ({e}); served by the daemon");
            return None;
        }
        let unregister = || {
            if let Err(e) = engine.passthrough_released(ino) {
                tracing::warn!("inode {ino}: {e}");
            }
        };
        let host = match engine.host_file(ino) {
            Ok(Some(host)) => host,
            Ok(None) => {
                tracing::debug!("inode {ino}: left the disk tier; opened through the daemon");
                unregister();
                return None;
            }
            Err(e) => {
                tracing::debug!("inode {ino}: opened through the daemon: {e}");
                unregister();
                return None;
            }
        };
        // A host file shorter than the file (damaged behind rampart's back) would read as an
        // early end of file through the kernel; the daemon answers EIO for the missing part.
        let short = match (host.metadata(), engine.getattr(ino)) {
            (Ok(meta), Ok(attr)) => {
                // The engine takes the host file's mtime as the file's after the kernel's
                // writes (`host_file_changed`): start it at the file's own, so that opens
                // that write nothing leave the file's mtime as it was (set by utimensat,
                // say), and those that write make it the time of their writes.
                if let Err(e) = host.set_modified(to_system_time(attr.mtime_ns)) {
                    tracing::warn!("inode {ino}: cannot set its host file's mtime: {e}");
                }
                meta.len() < attr.size_bytes
            }
            _ => true,
        };
        if short {
            tracing::warn!("inode {ino}: its host file is missing bytes; served by the daemon");
            unregister();
            return None;
        }
        match reply.open_backing(&*host) {
            Ok(backing) => Some(backing),
            Err(e) => {
                if e.raw_os_error() == Some(libc::EPERM) {
                    // Without CAP_SYS_ADMIN the kernel refuses every registration: say it
                    // once, and stop asking.
                    if !self
                        .negotiated
                        .backing_refused
                        .swap(true, Ordering::Relaxed)
                    {
                        engine.set_passthrough_available(false);
                        tracing::warn!(
                            "the kernel refuses backing files for FUSE passthrough ({e}); \
                             the daemon serves disk-tier files from now on"
                        );
                    }
                } else {
                    tracing::warn!(
                        "inode {ino}: cannot register its host file for passthrough: {e}; \
                         served by the daemon"
                    );
                }
                unregister();
                None
            }
        }
    }

    /// Answers RELEASE: one open of `ino`, of the kind `fh` says, is closed. The last
    /// passthrough open closes the backing id and tells the engine.
    pub(crate) fn released(&self, engine: &Engine, ino: Ino, fh: FileHandle) {
        let ended = {
            let mut shard = self.shard(ino).lock();
            let Some(opens) = shard.get_mut(&ino) else {
                debug_assert!(false, "RELEASE of inode {ino} that has no open");
                return;
            };
            let mut ended = None;
            if fh == FH_PASSTHROUGH {
                debug_assert!(opens.passthrough > 0);
                opens.passthrough = opens.passthrough.saturating_sub(1);
                if opens.passthrough == 0 {
                    ended = opens.backing.take();
                    self.passthrough_inodes.fetch_sub(1, Ordering::Relaxed);
                }
            } else {
                debug_assert!(opens.cached > 0);
                opens.cached = opens.cached.saturating_sub(1);
            }
            if opens.cached == 0 && opens.passthrough == 0 {
                shard.remove(&ino);
            }
            ended
        };
        if let Some(backing) = ended {
            // FUSE_DEV_IOC_BACKING_CLOSE.
            drop(backing);
            if let Err(e) = engine.passthrough_released(ino) {
                tracing::warn!("inode {ino}: after the last passthrough close: {e}");
            }
            // The kernel wrote the host file behind its own page cache of this inode: pages
            // cached by an earlier cached open are stale. Drop them (and the attributes).
            if let Some(notifier) = self.notifier.get() {
                if let Err(e) = notifier.inval_inode(INodeNo(ino), 0, 0) {
                    if e.raw_os_error() != Some(libc::ENOENT) {
                        tracing::warn!("inode {ino}: cannot drop its cached pages: {e}");
                    }
                }
            }
        }
    }

    /// After SETATTR set the times of a passthrough-open file: its host file's mtime follows,
    /// else the next `host_file_changed` would take the host file's older one back.
    pub(crate) fn times_set(
        &self,
        engine: &Engine,
        ino: Ino,
        mtime_ns: rampart_core::time::TimeNs,
    ) {
        if !self.is_passthrough(ino) {
            return;
        }
        match engine.host_file(ino) {
            Ok(Some(host)) => {
                if let Err(e) = host.set_modified(to_system_time(mtime_ns)) {
                    tracing::warn!("inode {ino}: cannot set its host file's mtime: {e}");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("inode {ino}: {e}"),
        }
    }

    /// Whether `ino` has passthrough opens (the kernel may be writing its host file).
    pub(crate) fn is_passthrough(&self, ino: Ino) -> bool {
        if self.passthrough_inodes.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.shard(ino)
            .lock()
            .get(&ino)
            .is_some_and(|o| o.passthrough > 0)
    }
}

/// Whether this process may register backing files (the kernel asks for CAP_SYS_ADMIN in
/// the initial user namespace; fs/fuse/backing.c).
pub(crate) fn may_register_backing_files() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    const CAP_SYS_ADMIN: u32 = 21;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

//! What rampart asks of the kernel for a mount: the FUSE session's configuration, the INIT
//! capabilities and request limits, and the reply for a name that does not exist. The bench's
//! FUSE floor (rampart-bench `floor`) uses the same, so that the kernel sends it the same
//! requests as rampart for the same program.

use std::time::UNIX_EPOCH;

use fuser::{
    Config, FileAttr, FileType, FopenFlags, INodeNo, InitFlags, KernelConfig, MountOption,
    SessionACL,
};

/// Requests one CPU's io_uring queue can hold at once (fsyncs waiting for a commit hold one
/// each, so 8 stalled a CPU's other requests under 16 writers); each costs a payload buffer of
/// max_write (1 MiB), touched only when a request fills it, and fuser keeps all of them under
/// 64 MiB (fewer per queue on machines with many CPUs).
pub const IO_URING_QUEUE_DEPTH: u16 = 32;

/// The most bytes of one WRITE, and of readahead: one request per MiB instead of per 4 KiB
/// page.
pub const REQUEST_BYTES_MAX: u32 = 1 << 20;

/// Requests the kernel may have in flight in the background (writeback, readahead).
pub const BACKGROUND_REQUESTS_MAX: u16 = 64;

/// The INIT capabilities asked for on every mount. Lookups and creates in one directory may
/// run in parallel (the engine serialises what must be); symlink targets may stay in the page
/// cache. HANDLE_KILLPRIV_V2: the file system clears setuid/setgid/capabilities on write,
/// truncate and chown itself, which lets the kernel mark the mount SB_NOSEC and stop asking for
/// security.capability before every write() (a round trip each). ABORT_ERROR: after an abort
/// (fusectl) the kernel says ECONNABORTED instead of ENODEV, which tells an aborted connection
/// from an unmount (the daemon then detaches the dead mount). EXPORT_SUPPORT: a file handle
/// (open_by_handle_at, NFS export) whose inode left the kernel's caches is found by LOOKUP of
/// "." under its number, and a directory's parent by ".." (decision 0142). The ACL
/// capabilities go with [`add_init_capabilities`].
pub const INIT_FLAGS: [InitFlags; 5] = [
    InitFlags::FUSE_PARALLEL_DIROPS,
    InitFlags::FUSE_CACHE_SYMLINKS,
    InitFlags::FUSE_HANDLE_KILLPRIV_V2,
    InitFlags::FUSE_ABORT_ERROR,
    InitFlags::FUSE_EXPORT_SUPPORT,
];

/// Asks for [`INIT_FLAGS`] and for POSIX ACLs: POSIX_ACL (the kernel enforces the ACLs
/// rampart stores and stops applying the umask; DONT_MASK says rampart does, as it must to
/// let a default ACL override it) only with SETXATTR_EXT, through which the kernel says that
/// an ACL's setter may not keep setgid: without it (Linux < 5.16) setgid would survive such a
/// setfacl, so ACLs stay unsupported there (EOPNOTSUPP; decision 0143). Returns whether the
/// kernel enforces ACLs.
pub fn add_init_capabilities(config: &mut KernelConfig) -> bool {
    add_capabilities(config, &INIT_FLAGS);
    if config
        .add_capabilities(InitFlags::FUSE_SETXATTR_EXT)
        .is_err()
    {
        tracing::info!("kernel lacks FUSE_SETXATTR_EXT: POSIX ACLs are not offered");
        return false;
    }
    // DONT_MASK first: POSIX_ACL without it would have the kernel strip the umask that a
    // default ACL must override.
    if config.add_capabilities(InitFlags::FUSE_DONT_MASK).is_err() {
        tracing::info!("kernel lacks FUSE_DONT_MASK: POSIX ACLs are not offered");
        return false;
    }
    config.add_capabilities(InitFlags::FUSE_POSIX_ACL).is_ok()
}

/// What a directory's OPEN answers: its pages and listing stay cached.
pub const DIR_OPEN_FLAGS: FopenFlags =
    FopenFlags::FOPEN_KEEP_CACHE.union(FopenFlags::FOPEN_CACHE_DIR);

/// The session's configuration: `mount_options`, who may enter the mount, worker threads, and
/// io_uring if asked for.
pub fn session_config(
    mount_options: Vec<MountOption>,
    allow_other: bool,
    threads: usize,
    io_uring: bool,
) -> Config {
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    if io_uring {
        config.io_uring_depth = Some(IO_URING_QUEUE_DEPTH);
    }
    config
}

/// Asks for each of `flags`; one the kernel lacks is logged and done without.
pub fn add_capabilities(config: &mut KernelConfig, flags: &[InitFlags]) {
    for &flag in flags {
        if config.add_capabilities(flag).is_err() {
            tracing::debug!("kernel lacks {flag:?}");
        }
    }
}

/// Asks for the writeback cache; false if the kernel has none.
pub fn add_writeback_cache(config: &mut KernelConfig) -> bool {
    config
        .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
        .is_ok()
}

/// Sets the request limits ([`REQUEST_BYTES_MAX`], [`BACKGROUND_REQUESTS_MAX`]); the kernel
/// lowers what it cannot take.
pub fn set_request_limits(config: &mut KernelConfig) {
    let _ = config.set_max_write(REQUEST_BYTES_MAX);
    let _ = config.set_max_readahead(REQUEST_BYTES_MAX);
    let _ = config.set_max_background(BACKGROUND_REQUESTS_MAX);
}

/// The attributes of a negative entry (an answer to LOOKUP that the kernel caches for the
/// entry timeout: "no such name"): only `ino == 0` matters to the kernel.
pub fn negative_entry() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: rampart_core::limits::BLOCK_SIZE_BYTES,
        flags: 0,
    }
}

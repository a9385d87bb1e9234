//! The `fuser::Filesystem` implementation: each kernel request becomes one engine call.
//!
//! Permission checks are the kernel's (the mount uses `default_permissions`). Every handler
//! runs inside `catch_unwind`: a bug that panics answers that one request with EIO and the
//! daemon keeps serving.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags,
    ForgetOne, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use rampart_core::time::to_ns;
use rampart_core::{Attr, Engine, FileKind, SetAttr, WriteTimes};

use crate::counters::{PendingRequest, RequestCounters, RequestKind};
use crate::direct_io::{self, DirectIo};
use crate::disk_reads::DiskReads;
use crate::kernel_settings;
use crate::open_files::{Negotiated, OpenFiles, Opened, FH_PASSTHROUGH};
use crate::refusals::Refusals;
pub(crate) use crate::reply_attr::errno;
use crate::reply_attr::{file_attr, file_type, reply_empty, reply_lookup, reply_xattr};
use crate::request_ctx::{create_ctx, ctx, guarded, set_time, xattr_flags};
use crate::PassthroughMode;

pub use crate::cache_policy::CachePolicy;

pub(crate) struct RampartFs {
    engine: Arc<Engine>,
    cache: CachePolicy,
    counters: Arc<RequestCounters>,
    /// Where refused writes go to have the kernel's view corrected (writeback cache only).
    refusals: Refusals,
    /// Whether to ask the kernel for FUSE passthrough at INIT.
    passthrough_mode: PassthroughMode,
    /// The kernel accepted FUSE passthrough: OPEN is answered per file (set at INIT).
    passthrough: bool,
    /// The opens of files, by kind (used once passthrough is in use).
    files: OpenFiles,
    negotiated: Arc<Negotiated>,
    /// O_DIRECT requests of disk-tier files served by the daemon.
    direct: Arc<DirectIo>,
    /// Reads that wait for the disk, off the FUSE threads (decision 0073).
    disk_reads: DiskReads,
    /// The kernel enforces POSIX ACLs (FUSE_POSIX_ACL with SETXATTR_EXT, set at INIT);
    /// otherwise their xattrs answer EOPNOTSUPP, as nothing would enforce them.
    posix_acl: bool,
}

impl RampartFs {
    pub(crate) fn new(
        engine: Arc<Engine>,
        cache: CachePolicy,
        counters: Arc<RequestCounters>,
        refusals: Refusals,
        passthrough_mode: PassthroughMode,
        negotiated: Arc<Negotiated>,
        notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    ) -> RampartFs {
        RampartFs {
            engine,
            cache,
            counters,
            refusals,
            passthrough_mode,
            passthrough: false,
            files: OpenFiles::new(negotiated.clone(), notifier),
            negotiated,
            direct: Arc::new(DirectIo::default()),
            disk_reads: DiskReads::default(),
            posix_acl: false,
        }
    }

    /// Asks the kernel for FUSE passthrough as the mode says. It excludes the writeback cache
    /// (the kernel drops passthrough when both are asked for) and needs OPEN of every file
    /// (there is no per-file no-open): when asked for, passthrough wins over both. `auto` asks
    /// only when neither is in use, so that it costs small files nothing (decision 0058).
    fn negotiate_passthrough(&mut self, config: &mut KernelConfig) -> std::io::Result<()> {
        let forced = match self.passthrough_mode {
            PassthroughMode::Off => return Ok(()),
            PassthroughMode::On => true,
            PassthroughMode::Auto if self.cache.writeback_cache || self.cache.no_open => {
                tracing::info!(
                    "no FUSE passthrough: it would turn off the writeback cache and no-open,                      which small files need (--passthrough on to have it anyway; decision 0058);                      the daemon serves disk-tier files"
                );
                return Ok(());
            }
            PassthroughMode::Auto => false,
        };
        let refuse = |why: &str| {
            if forced {
                Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    format!("--passthrough on: {why}"),
                ))
            } else {
                tracing::info!("no FUSE passthrough ({why}); the daemon serves disk-tier files");
                Ok(())
            }
        };
        if !crate::open_files::may_register_backing_files() {
            return refuse("registering backing files needs CAP_SYS_ADMIN");
        }
        if config
            .add_capabilities(InitFlags::FUSE_PASSTHROUGH)
            .is_err()
        {
            return refuse(
                "the kernel does not offer it (Linux 6.9+ with CONFIG_FUSE_PASSTHROUGH)",
            );
        }
        // 1: backing files on an ordinary file system, and this mount may itself be stacked
        // under one more (overlayfs). A store on overlayfs gets ELOOP per file, served by the
        // daemon.
        if config.set_max_stack_depth(1).is_err() {
            return refuse("the kernel refuses a stacking depth of 1");
        }
        if self.cache.writeback_cache {
            tracing::info!("FUSE passthrough in use: the writeback cache is off (the kernel allows one of them)");
            self.cache.writeback_cache = false;
        }
        self.passthrough = true;
        Ok(())
    }

    /// The kernel may have written `ino`'s host file behind the engine: have the engine take
    /// its size and mtime before it answers about it or changes it.
    fn catch_up_with_host(&self, ino: u64) {
        if self.files.is_passthrough(ino) {
            if let Err(e) = self.engine.host_file_changed(ino) {
                tracing::warn!("inode {ino}: cannot take the host file's size: {e}");
            }
        }
    }

    /// How a regular file is opened: through the page cache, kept across opens (every change
    /// comes through this kernel or is invalidated), unless its category needs every write
    /// sent at once: SAFE (durable before write(2) returns) and DISPOSABLE (nothing kept to
    /// read back) get direct I/O, whatever the writeback cache does (decision 0063).
    /// Without the writeback cache, the kernel skips FLUSH for files opened with
    /// FOPEN_NOFLUSH (with the cache it is always sent). A mount that answers FLUSH has a
    /// store that may make a file durable at close after it was opened (setfattr on an open
    /// file): there every close sends FLUSH and FLUSH decides; the others skip it
    /// (decision 0099).
    fn open_flags(&self, ino: u64) -> FopenFlags {
        let mut flags = if self.engine.writes_through(ino) {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        };
        if !self.cache.writeback_cache && self.cache.no_flush {
            flags |= FopenFlags::FOPEN_NOFLUSH;
        }
        flags
    }

    /// Answers once everything is durable (ENOSPC if the store is full, EIO if it could not be
    /// written). `asker` is the requesting thread (the request's pid): while one thread alone
    /// asks, with no other fsync waiting and no commit under way, this thread commits and
    /// answers (decision 0100: two cross-thread wake-ups fewer per durable write); otherwise
    /// it is not held: the persister answers after the disk sync that covers it, and every
    /// fsync that arrives meanwhile shares that sync.
    fn reply_synced(&self, asker: u32, reply: ReplyEmpty, request: PendingRequest) {
        self.reply_synced_file(asker, None, reply, request);
    }

    /// As `reply_synced`, and EIO if a sync of `host` failed with no fsync waiting, asked
    /// once this sync answered, whatever it answered (decision 0126).
    fn reply_synced_file(
        &self,
        asker: u32,
        host: Option<rampart_core::HostSyncName>,
        reply: ReplyEmpty,
        request: PendingRequest,
    ) {
        let counters = self.counters.clone();
        let engine = self.engine.clone();
        self.engine.sync_async_by(
            u64::from(asker),
            Box::new(move |result| {
                let told = host.is_some_and(|h| engine.take_host_sync_error(&h));
                match result.and_then(|()| match told {
                    true => Err(std::io::Error::from_raw_os_error(libc::EIO)),
                    false => Ok(()),
                }) {
                    Ok(()) => reply.ok(),
                    Err(e) => {
                        tracing::error!("sync failed: {e}");
                        counters.count_sync_failure();
                        // A full store says so (ENOSPC, as ext4 does); other failures are EIO.
                        let full = e.kind() == std::io::ErrorKind::StorageFull;
                        let code = if full { libc::ENOSPC } else { libc::EIO };
                        crate::counters::count_error_of(request.kind(), code);
                        reply.error(Errno::from_i32(code))
                    }
                }
                request.finish(&counters);
            }),
        );
    }

    fn reply_entry(&self, reply: ReplyEntry, result: rampart_core::FsResult<Attr>) {
        match result {
            Ok(a) => reply.entry(
                &self.cache.entry_ttl,
                &file_attr(&a),
                Generation(a.generation),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }
}

impl RampartFs {
    /// fsync of a passthrough-open file: the engine logs what the kernel did to the host
    /// file, whose pages are written out now (data=ordered: before the commit covering it).
    fn sync_host_file(&self, ino: u64) -> rampart_core::FsResult<()> {
        self.engine.host_file_changed(ino)?;
        if let Some(host) = self.engine.host_file(ino)? {
            host.sync_data().map_err(|e| {
                tracing::error!("inode {ino}: fdatasync of its host file: {e}");
                rampart_core::Errno::EIO
            })?;
        }
        Ok(())
    }
}

impl RampartFs {
    /// A POSIX ACL xattr on a mount whose kernel does not enforce ACLs.
    fn acl_unsupported(&self, name: &[u8]) -> bool {
        !self.posix_acl && name.starts_with(b"system.posix_acl_")
    }
}

impl Filesystem for RampartFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.posix_acl = kernel_settings::add_init_capabilities(config);
        // Files opened with direct I/O (SAFE, DISPOSABLE) can still be mapped shared.
        kernel_settings::add_capabilities(config, &[InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP]);
        self.negotiate_passthrough(config)?;
        // Listings carry the entries' attributes (READDIRPLUS), always: `ls -l`, `du`, `rm -r`
        // of N entries then cost no N LOOKUPs, for a few more listing requests. Not with
        // passthrough: the kernel writes those files behind the engine, and a listing's
        // attributes would be the engine's older size (decision 0080).
        if !self.passthrough
            && config
                .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS)
                .is_err()
        {
            tracing::debug!("kernel lacks READDIRPLUS");
        }
        self.negotiated
            .set(self.passthrough, self.cache.writeback_cache);
        if self.cache.writeback_cache && !kernel_settings::add_writeback_cache(config) {
            tracing::warn!("kernel has no writeback cache for FUSE; writing through");
            self.cache.writeback_cache = false;
            self.negotiated.set(self.passthrough, false);
        }
        kernel_settings::set_request_limits(config);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _timer = self.counters.start(RequestKind::lookup);
        guarded("lookup", || {
            let ttl = &self.cache.entry_ttl;
            reply_lookup(
                &self.engine,
                &ctx(req),
                parent.0,
                name.as_bytes(),
                ttl,
                reply,
            )
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _timer = self.counters.start(RequestKind::forget);
        guarded("forget", || self.engine.forget(ino.0, nlookup));
    }

    /// The kernel sends the forgets that queued up while the daemon was busy in one request
    /// (fs/fuse/dev.c, `fuse_read_batch_forget`): counted as one.
    fn batch_forget(&self, _req: &Request, nodes: &[ForgetOne]) {
        let _timer = self.counters.start(RequestKind::batch_forget);
        guarded("batch_forget", || {
            for node in nodes {
                self.engine.forget(node.nodeid().0, node.nlookup());
            }
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _timer = self.counters.start(RequestKind::getattr);
        guarded("getattr", || {
            self.catch_up_with_host(ino.0);
            match self.engine.getattr(ino.0) {
                Ok(a) => reply.attr(&self.cache.attr_ttl, &file_attr(&a)),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _timer = self.counters.start(RequestKind::setattr);
        guarded("setattr", || {
            // fuser does not pass FATTR_KILL_SUIDGID; the kernel sets it for a truncate by a
            // caller without CAP_FSETID, which we take to be every uid but root. (A chown of a
            // non-directory clears the bits in the engine regardless.)
            let set = SetAttr {
                mode,
                uid,
                gid,
                size_bytes: size,
                atime: atime.map(set_time),
                mtime: mtime.map(set_time),
                ctime_ns: ctime.map(to_ns),
                kill_suidgid: size.is_some() && req.uid() != 0,
            };
            if size.is_some() {
                self.catch_up_with_host(ino.0);
            }
            match self.engine.setattr(&ctx(req), ino.0, &set) {
                Ok(a) => {
                    if mtime.is_some() && self.passthrough {
                        self.files.times_set(&self.engine, ino.0, a.mtime_ns);
                    }
                    reply.attr(&self.cache.attr_ttl, &file_attr(&a))
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _timer = self.counters.start(RequestKind::readlink);
        guarded("readlink", || match self.engine.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _timer = self.counters.start(RequestKind::mknod);
        guarded("mknod", || {
            let r = self.engine.mknod(
                &create_ctx(req, umask),
                parent.0,
                name.as_bytes(),
                mode,
                rdev,
            );
            self.reply_entry(reply, r);
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let _timer = self.counters.start(RequestKind::mkdir);
        guarded("mkdir", || {
            let r = self
                .engine
                .mkdir(&create_ctx(req, umask), parent.0, name.as_bytes(), mode);
            self.reply_entry(reply, r);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.counters.start(RequestKind::unlink);
        guarded("unlink", || {
            reply_empty(
                reply,
                self.engine.unlink(&ctx(req), parent.0, name.as_bytes()),
            )
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.counters.start(RequestKind::rmdir);
        guarded("rmdir", || {
            reply_empty(
                reply,
                self.engine.rmdir(&ctx(req), parent.0, name.as_bytes()),
            )
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let _timer = self.counters.start(RequestKind::symlink);
        guarded("symlink", || {
            let r = self.engine.symlink(
                &ctx(req),
                parent.0,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
            );
            self.reply_entry(reply, r);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _timer = self.counters.start(RequestKind::rename);
        guarded("rename", || {
            let r = self.engine.rename(
                &ctx(req),
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.bits(),
            );
            reply_empty(reply, r);
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _timer = self.counters.start(RequestKind::link);
        guarded("link", || {
            let r = self
                .engine
                .link(&ctx(req), ino.0, newparent.0, newname.as_bytes());
            self.reply_entry(reply, r);
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _timer = self.counters.start(RequestKind::open);
        if self.passthrough {
            // O_DIRECT opens too: the kernel opens the backing file with the program's flags
            // (fs/fuse/passthrough.c), so O_DIRECT reaches the host file without a page cache.
            return guarded("open", || {
                let opened = self.files.open(&self.engine, ino.0, reply);
                if opened == Opened::Passthrough {
                    self.counters.count_passthrough_open();
                }
            });
        }
        if self.cache.no_open {
            // The kernel then opens files itself, with FOPEN_KEEP_CACHE.
            return reply.error(Errno::ENOSYS);
        }
        guarded("open", || match self.engine.getattr(ino.0) {
            Ok(_) => reply.opened(crate::open_files::FH_CACHED, self.open_flags(ino.0)),
            Err(e) => reply.error(errno(e)),
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let timer = self.counters.start(RequestKind::read);
        guarded("read", || {
            // O_DIRECT reads of a disk-tier file always reach the disk.
            let direct = direct_io::wants_direct(flags.0, offset, u64::from(size))
                && !matches!(self.engine.host_file(ino.0), Ok(None));
            if !direct {
                let mut buf = Vec::new();
                match self.engine.read_if_cached(ino.0, offset, size, &mut buf) {
                    Ok(true) => return reply.data(&buf),
                    Ok(false) => {}
                    Err(e) => return reply.error(errno(e)),
                }
            }
            // The read waits for the disk: on a thread of its own, so that the requests
            // behind it on this FUSE thread do not wait too (decision 0073).
            let engine = Arc::clone(&self.engine);
            let direct_io = Arc::clone(&self.direct);
            let counters = Arc::clone(&self.counters);
            let request = timer.hand_off();
            let job: crate::disk_reads::Job = Box::new(move || {
                let read = if direct {
                    direct_io.read(&engine, ino.0, offset, size)
                } else {
                    None
                };
                let read = read.unwrap_or_else(|| {
                    let mut buf = Vec::new();
                    engine.read(ino.0, offset, size, &mut buf).map(|()| buf)
                });
                match read {
                    Ok(data) => reply.data(&data),
                    Err(e) => {
                        crate::counters::count_error_of(request.kind(), e.code());
                        reply.error(Errno::from_i32(e.code()));
                    }
                }
                request.finish(&counters);
            });
            if let Err(job) = self.disk_reads.submit(job) {
                job();
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _timer = self.counters.start(RequestKind::write);
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        guarded("write", || {
            // Setuid/setgid to clear: the engine's write does it, so that one goes there.
            if !kill && direct_io::wants_direct(flags.0, offset, data.len() as u64) {
                if let Some(r) = self.direct.write(&self.engine, ino.0, offset, data) {
                    return match r {
                        Ok(n) => reply.written(n),
                        Err(e) => reply.error(errno(e)),
                    };
                }
            }
            // Under the writeback cache the kernel owns mtime and ctime (decision 0020).
            let times = if self.cache.writeback_cache {
                WriteTimes::KeptByKernel
            } else {
                WriteTimes::Stamp
            };
            match self
                .engine
                .write_with(&ctx(req), ino.0, offset, data, kill, times)
            {
                Ok(n) => {
                    reply.written(n);
                    // DISPOSABLE: the kernel has cached what the engine dropped.
                    if self.cache.writeback_cache && self.engine.discards(ino.0) {
                        self.refusals.refused(ino.0);
                    }
                }
                Err(e) => {
                    reply.error(errno(e));
                    // The kernel has shown these bytes and their size already (writeback
                    // cache): have it drop them, now that the reply frees the pages.
                    if self.cache.writeback_cache {
                        self.refusals.refused(ino.0);
                    }
                }
            }
        });
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let timer = self.counters.start(RequestKind::flush);
        // close(2) of a file whose category holds until close (EDITED, `lm=until_close`)
        // returns once it is durable; the kernel has written its dirty pages before FLUSH.
        // Other files have nothing to do. Where no file can need it (no-flush), the first is
        // refused with ENOSYS, which stops it for every file (decision 0063). Passthrough
        // opens send it too: the engine takes the size and mtime the kernel's writes gave the
        // host file.
        if self.cache.no_flush && !self.passthrough {
            return reply.error(Errno::ENOSYS);
        }
        guarded("flush", || {
            if self.passthrough && fh == FH_PASSTHROUGH {
                self.catch_up_with_host(ino.0);
            }
            if self.engine.durable_at_close(ino.0) {
                let host = self.engine.host_sync_name(ino.0); // decision 0126
                self.reply_synced_file(req.pid(), host, reply, timer.hand_off());
            } else {
                reply.ok();
            }
        });
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let timer = self.counters.start(RequestKind::fsync);
        // Everything applied so far becomes durable (group commit: concurrent fsyncs share
        // one fdatasync of the journal). The writeback cache has sent this file's dirty pages
        // before FSYNC arrives.
        guarded("fsync", || {
            if self.files.is_passthrough(ino.0) {
                // Written by the kernel behind the engine: log the size and mtime, and write
                // the host file's pages out here rather than in the shared sync.
                if let Err(e) = self.sync_host_file(ino.0) {
                    return reply.error(errno(e));
                }
            }
            match self.engine.getattr(ino.0) {
                Err(e) => reply.error(errno(e)),
                // A file whose category never reaches the store (TEMPORARY, DISPOSABLE) has
                // nothing to make durable: success at once, as tmpfs answers (decision 0065).
                Ok(a) if a.durability == rampart_core::Durability::Volatile => reply.ok(),
                Ok(_) if self.engine.check_da2(ino.0).is_err() => reply.error(Errno::EIO), // 0077
                // A file held out of the store until its deadline is made present first
                // (decision 0090).
                Ok(_) => match self.engine.archive_for_sync(ino.0) {
                    Err(e) => reply.error(errno(e)),
                    Ok(()) => {
                        let host = self.engine.host_sync_name(ino.0); // decision 0126
                        self.reply_synced_file(req.pid(), host, reply, timer.hand_off())
                    }
                },
            }
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if !self.passthrough {
            // Nothing to do (no per-open state without passthrough), and not counted, as
            // before per-file OPEN existed (test_round_trips counts without it).
            return reply.ok();
        }
        let _timer = self.counters.start(RequestKind::release);
        guarded("release", || {
            self.files.released(&self.engine, ino.0, fh);
            reply.ok()
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _timer = self.counters.start(RequestKind::opendir);
        if self.cache.no_open {
            return reply.error(Errno::ENOSYS);
        }
        guarded("opendir", || match self.engine.getattr(ino.0) {
            Ok(a) if a.kind == FileKind::Directory => {
                reply.opened(FileHandle(0), kernel_settings::DIR_OPEN_FLAGS)
            }
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(errno(e)),
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let _timer = self.counters.start(RequestKind::readdir);
        guarded("readdir", || {
            let r = self.engine.readdir(ino.0, offset, |ino, next, kind, name| {
                !reply.add(INodeNo(ino), next, file_type(kind), OsStr::from_bytes(name))
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    /// READDIRPLUS (every listing: FUSE_DO_READDIRPLUS without AUTO): the entries with their
    /// attributes, so `ls -l` and friends need no LOOKUP per entry. Each entry but "." and
    /// ".." is a kernel lookup.
    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let _timer = self.counters.start(RequestKind::readdirplus);
        guarded("readdirplus", || {
            let ttl = self.cache.entry_ttl;
            let r = self
                .engine
                .readdir_plus(&ctx(req), ino.0, offset, |a, next, name| {
                    let name = OsStr::from_bytes(name);
                    !reply.add(
                        INodeNo(a.ino),
                        next,
                        name,
                        &ttl,
                        &file_attr(a),
                        Generation(a.generation),
                    )
                });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let timer = self.counters.start(RequestKind::fsyncdir);
        // The held files named in it are made present first (decision 0090).
        guarded("fsyncdir", || match self.engine.archive_for_sync(ino.0) {
            Err(e) => reply.error(errno(e)),
            Ok(()) => self.reply_synced(req.pid(), reply, timer.hand_off()),
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _timer = self.counters.start(RequestKind::statfs);
        guarded("statfs", || {
            let s = self.engine.statfs();
            reply.statfs(
                s.blocks_total,
                s.blocks_free,
                s.blocks_avail,
                s.files_total,
                s.files_free,
                s.block_size,
                s.name_len_max,
                s.block_size,
            );
        });
    }

    /// FUSE_SETXATTR_EXT: an ACL set by a caller outside the file's group and unprivileged
    /// carries FUSE_SETXATTR_ACL_KILL_SGID, and setgid goes with the same op.
    fn setxattr_ext(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        setxattr_flags: u32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _timer = self.counters.start(RequestKind::setxattr);
        guarded("setxattr", || {
            let name = name.as_bytes();
            if self.acl_unsupported(name) {
                return reply.error(errno(rampart_core::Errno::EOPNOTSUPP));
            }
            let flags = xattr_flags(name, flags, setxattr_flags);
            let r = self.engine.setxattr(&ctx(req), ino.0, name, value, flags);
            reply_empty(reply, r);
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _timer = self.counters.start(RequestKind::getxattr);
        guarded("getxattr", || {
            if self.acl_unsupported(name.as_bytes()) {
                return reply.error(errno(rampart_core::Errno::EOPNOTSUPP));
            }
            reply_xattr(reply, size, self.engine.getxattr(ino.0, name.as_bytes()))
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _timer = self.counters.start(RequestKind::listxattr);
        guarded("listxattr", || {
            // trusted.* names are only listed to privileged callers, as the kernel does for
            // local file systems.
            let r = self.engine.listxattr(ino.0, req.uid() == 0);
            reply_xattr(reply, size, r)
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.counters.start(RequestKind::removexattr);
        guarded("removexattr", || {
            if self.acl_unsupported(name.as_bytes()) {
                return reply.error(errno(rampart_core::Errno::EOPNOTSUPP));
            }
            reply_empty(
                reply,
                self.engine.removexattr(&ctx(req), ino.0, name.as_bytes()),
            )
        });
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let _timer = self.counters.start(RequestKind::access);
        // With default_permissions the kernel checks access itself; this only confirms the
        // inode exists.
        guarded("access", || {
            reply_empty(reply, self.engine.getattr(ino.0).map(|_| ()))
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let _timer = self.counters.start(RequestKind::create);
        guarded("create", || {
            let mode = libc::S_IFREG | (mode & 0o7777);
            let ctx = create_ctx(req, umask);
            match self.engine.mknod(&ctx, parent.0, name.as_bytes(), mode, 0) {
                Ok(a) => {
                    let flags = if self.passthrough {
                        self.files.created(a.ino);
                        OpenFiles::cached_flags(&self.engine, a.ino)
                    } else {
                        self.open_flags(a.ino)
                    };
                    reply.created(
                        &self.cache.entry_ttl,
                        &file_attr(&a),
                        Generation(a.generation),
                        crate::open_files::FH_CACHED,
                        flags,
                    )
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    /// `O_TMPFILE`: an unnamed file, answered like `create`. The kernel has checked write and
    /// search access to `parent`; without `O_EXCL` a later `linkat` may name the file.
    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.counters.count(RequestKind::create);
        guarded("tmpfile", || {
            let linkable = flags & libc::O_EXCL == 0;
            let ctx = create_ctx(req, umask);
            match self.engine.tmpfile(&ctx, parent.0, mode & 0o7777, linkable) {
                Ok(a) => {
                    let flags = if self.passthrough {
                        self.files.created(a.ino);
                        OpenFiles::cached_flags(&self.engine, a.ino)
                    } else {
                        // As an ordinary open of a file of its category (the directory's): a
                        // SAFE or DISPOSABLE one writes through, not into the page cache.
                        self.open_flags(a.ino)
                    };
                    reply.created(
                        &self.cache.entry_ttl,
                        &file_attr(&a),
                        Generation(a.generation),
                        crate::open_files::FH_CACHED,
                        flags,
                    )
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // No file-system specific ioctls (FS_IOC_GETFLAGS, FICLONE...): ENOTTY is what a
        // program expects for "not supported here", and the kernel does not remember ENOSYS
        // for ioctl, so answering it quietly matters (cp and python probe on every file).
        reply.error(Errno::ENOTTY);
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _timer = self.counters.start(RequestKind::copy_file_range);
        guarded("copy_file_range", || {
            self.catch_up_with_host(ino_in.0);
            self.catch_up_with_host(ino_out.0);
            // The kernel has checked access and flushed both ranges' dirty pages. It clears
            // no privileges itself under KILLPRIV_V2 and passes no flag, so, as for truncate,
            // a caller other than root is taken to lack CAP_FSETID (decision 0032).
            let kill = req.uid() != 0;
            let times = if self.cache.writeback_cache {
                WriteTimes::KeptByKernel
            } else {
                WriteTimes::Stamp
            };
            let r = self.engine.copy_file_range(
                &ctx(req),
                ino_in.0,
                offset_in,
                ino_out.0,
                offset_out,
                // The reply's count is 32 bits.
                len.min(u64::from(u32::MAX)),
                kill,
                times,
            );
            match r {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _timer = self.counters.start(RequestKind::fallocate);
        guarded("fallocate", || {
            self.catch_up_with_host(ino.0);
            reply_empty(
                reply,
                self.engine
                    .fallocate(&ctx(req), ino.0, offset, length, mode),
            )
        });
    }
}

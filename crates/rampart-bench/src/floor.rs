//! The FUSE floor (issue 15 item 1; decision 0070): a FUSE server whose handlers do nothing
//! useful. Names, sizes, modes and times live in one small table in memory; written bytes are
//! dropped and reads return zeros. It mounts with rampart's FUSE settings (fuser with the
//! vendored io_uring transport, rampart's worker-thread count, the same INIT flags, cache
//! timeouts, writeback cache, no-open, negative entries, coarse timestamps), so the kernel sends
//! it the same requests as rampart for the same program: what a PostMark transaction costs on
//! it is what FUSE alone costs on this machine, the floor rampart is measured against.
//!
//! `rampart bench-floor MOUNTPOINT` (a hidden subcommand) serves it until it is unmounted.
//! The requests it answered, by opcode, are read from the extended attribute
//! [`REQUESTS_XATTR`] of its root; that getxattr is not counted.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, ForgetOne, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, Session, TimeOrNow, WriteFlags,
};
use rampart_fuse::kernel_settings;

/// The extended attribute of the floor's root that answers its request counts as JSON
/// (`{"getattr": 12, ...}`, opcodes answered at least once).
pub const REQUESTS_XATTR: &str = "user.rampart.floor.requests";

/// The most entries the table holds: a workload that makes more is refused with ENOSPC, as a
/// full file system would (PostMark's largest configuration makes 50,000 files).
const NODES_MAX: usize = 4_000_000;

/// Zeros for reads: the floor keeps no contents.
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

/// How to mount the floor; the defaults are rampart's (`rampart mount`'s defaults).
#[derive(Clone, Debug)]
pub struct FloorOptions {
    pub threads: usize,
    pub io_uring: bool,
    pub writeback_cache: bool,
    pub no_open: bool,
    /// FLUSH answered ENOSYS (as rampart on a store whose files need no FLUSH).
    pub no_flush: bool,
    pub allow_other: bool,
}

impl Default for FloorOptions {
    fn default() -> Self {
        FloorOptions {
            threads: rampart_fuse::MountOptions::default().threads,
            io_uring: true,
            writeback_cache: true,
            // rampart's `auto` on a store whose files need neither OPEN nor FLUSH.
            no_open: true,
            no_flush: true,
            // rampart mounts with allow_other when root mounts it.
            allow_other: nix::unistd::geteuid().is_root(),
        }
    }
}

/// Mounts the floor at `mountpoint` and serves it until it is unmounted. `ready` is called
/// once the kernel has accepted the mount, with whether requests come through io_uring.
pub fn serve(
    mountpoint: &Path,
    options: &FloorOptions,
    ready: impl FnOnce(bool),
) -> io::Result<()> {
    let config = kernel_settings::session_config(
        vec![
            MountOption::FSName("rampart-floor".into()),
            MountOption::CUSTOM("subtype=rampart-floor".into()),
            MountOption::DefaultPermissions,
        ],
        options.allow_other,
        options.threads,
        options.io_uring,
    );
    let floor = Floor::new(options.writeback_cache, options.no_open, options.no_flush);
    let session = Session::new(floor, mountpoint, &config)?;
    ready(session.uses_io_uring());
    session.run()
}

/// rampart-fuse's cache timeouts (`CachePolicy::default()`).
fn ttl() -> Duration {
    rampart_fuse::CachePolicy::default().entry_ttl
}

/// The opcodes counted, in the names `rampart status --json` uses.
const OPS: &[&str] = &[
    "lookup",
    "forget",
    "batch_forget",
    "getattr",
    "setattr",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "statfs",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "access",
    "create",
    "mknod",
    "symlink",
    "link",
    "readlink",
];

fn op_index(name: &str) -> usize {
    OPS.iter()
        .position(|&o| o == name)
        .unwrap_or_else(|| unreachable!("{name} is in OPS"))
}

struct Node {
    attr: FileAttr,
    /// Kernel references (entry replies less forgets); the node goes when it and nlink are 0.
    lookups: u64,
    /// A directory's entries, in name order (readdir offsets are positions in it).
    children: BTreeMap<OsString, u64>,
}

struct Table {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

impl Table {
    fn forget(&mut self, ino: u64, nlookup: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(nlookup);
            if node.lookups == 0 && node.attr.nlink == 0 {
                self.nodes.remove(&ino);
            }
        }
    }
}

struct Floor {
    table: Mutex<Table>,
    counts: Vec<AtomicU64>,
    writeback_cache: bool,
    no_open: bool,
    no_flush: bool,
}

/// The kernel's coarse clock, as rampart stamps inodes (decision 0020): a create and a write
/// in one tick then leave the kernel no times to send back.
fn file_time() -> SystemTime {
    let ns = rampart_core::time::file_time_ns();
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}

fn new_attr(ino: u64, kind: FileType, perm: u16, uid: u32, gid: u32) -> FileAttr {
    let now = file_time();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn time_of(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => file_time(),
    }
}

impl Floor {
    fn new(writeback_cache: bool, no_open: bool, no_flush: bool) -> Floor {
        let mut nodes = HashMap::new();
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        nodes.insert(
            1,
            Node {
                attr: new_attr(1, FileType::Directory, 0o755, uid, gid),
                lookups: 1,
                children: BTreeMap::new(),
            },
        );
        Floor {
            table: Mutex::new(Table { nodes, next_ino: 2 }),
            counts: OPS.iter().map(|_| AtomicU64::new(0)).collect(),
            writeback_cache,
            no_open,
            no_flush,
        }
    }

    fn count(&self, op: &str) {
        self.counts[op_index(op)].fetch_add(1, Ordering::Relaxed);
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // A handler that panicked left the table consistent enough for a floor.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn counts_json(&self) -> String {
        let map: BTreeMap<&str, u64> = OPS
            .iter()
            .zip(&self.counts)
            .map(|(op, c)| (*op, c.load(Ordering::Relaxed)))
            .filter(|(_, c)| *c > 0)
            .collect();
        serde_json::to_string(&map).unwrap_or_else(|_| "{}".into())
    }

    /// Adds `name` in `parent` (a directory the caller may write, as the kernel checked).
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileType,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr, Errno> {
        let mut t = self.table();
        if t.nodes.len() >= NODES_MAX {
            return Err(Errno::ENOSPC);
        }
        let ino = t.next_ino;
        let now = file_time();
        let dir = t.nodes.get_mut(&parent.0).ok_or(Errno::ENOENT)?;
        if dir.attr.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        if dir.children.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        dir.children.insert(name.to_owned(), ino);
        dir.attr.mtime = now;
        dir.attr.ctime = now;
        if kind == FileType::Directory {
            dir.attr.nlink += 1;
        }
        // The setgid bit of a directory passes its group on, as every Unix file system does.
        let gid = if dir.attr.perm & 0o2000 != 0 {
            dir.attr.gid
        } else {
            req.gid()
        };
        let perm = (mode & !umask & 0o7777) as u16;
        let attr = new_attr(ino, kind, perm, req.uid(), gid);
        t.next_ino += 1;
        t.nodes.insert(
            ino,
            Node {
                attr,
                lookups: 1,
                children: BTreeMap::new(),
            },
        );
        Ok(attr)
    }

    /// Takes `name` out of `parent`; `dir` says whether it must be an (empty) directory.
    fn remove(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let mut t = self.table();
        let ino = *t
            .nodes
            .get(&parent.0)
            .and_then(|p| p.children.get(name))
            .ok_or(Errno::ENOENT)?;
        let node = t.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        let is_dir = node.attr.kind == FileType::Directory;
        match (dir, is_dir) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !node.children.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        let now = file_time();
        if let Some(p) = t.nodes.get_mut(&parent.0) {
            p.children.remove(name);
            p.attr.mtime = now;
            p.attr.ctime = now;
            if is_dir {
                p.attr.nlink -= 1;
            }
        }
        let node = t.nodes.get_mut(&ino).expect("looked up above");
        node.attr.nlink = 0;
        node.attr.ctime = now;
        if node.lookups == 0 {
            t.nodes.remove(&ino);
        }
        Ok(())
    }
}

impl Filesystem for Floor {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // rampart-fuse's flags and limits, so the kernel behaves as it does for rampart.
        kernel_settings::add_init_capabilities(config);
        // As rampart does on a mount without passthrough (decision 0080).
        kernel_settings::add_capabilities(config, &[InitFlags::FUSE_DO_READDIRPLUS]);
        if self.writeback_cache && !kernel_settings::add_writeback_cache(config) {
            self.writeback_cache = false;
        }
        kernel_settings::set_request_limits(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.count("lookup");
        let mut t = self.table();
        let Some(&ino) = t.nodes.get(&parent.0).and_then(|p| p.children.get(name)) else {
            return reply.entry(&ttl(), &kernel_settings::negative_entry(), Generation(0));
        };
        let node = t.nodes.get_mut(&ino).expect("an entry names a node");
        node.lookups += 1;
        reply.entry(&ttl(), &node.attr, Generation(0));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.count("forget");
        self.table().forget(ino.0, nlookup);
    }

    /// One request however many inodes it forgets, as rampart counts it (decision 0079).
    fn batch_forget(&self, _req: &Request, nodes: &[ForgetOne]) {
        self.count("batch_forget");
        let mut t = self.table();
        for node in nodes {
            t.forget(node.nodeid().0, node.nlookup());
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.count("getattr");
        match self.table().nodes.get(&ino.0) {
            Some(node) => reply.attr(&ttl(), &node.attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
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
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.count("setattr");
        let mut t = self.table();
        let Some(node) = t.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let a = &mut node.attr;
        if let Some(mode) = mode {
            a.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = uid {
            a.uid = uid;
        }
        if let Some(gid) = gid {
            a.gid = gid;
        }
        if let Some(size) = size {
            a.size = size;
            a.blocks = size.div_ceil(512);
        }
        if let Some(t) = atime {
            a.atime = time_of(t);
        }
        if let Some(t) = mtime {
            a.mtime = time_of(t);
        }
        a.ctime = ctime.unwrap_or_else(file_time);
        reply.attr(&ttl(), a);
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
        self.count("mkdir");
        match self.make(req, parent, name, FileType::Directory, mode, umask) {
            Ok(attr) => reply.entry(&ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count("unlink");
        match self.remove(parent, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count("rmdir");
        match self.remove(parent, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.count("rename");
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let mut t = self.table();
        let Some(ino) = t
            .nodes
            .get_mut(&parent.0)
            .and_then(|p| p.children.remove(name))
        else {
            return reply.error(Errno::ENOENT);
        };
        // A replaced target loses its name (the floor does not check what replaces what).
        let replaced = t
            .nodes
            .get_mut(&newparent.0)
            .and_then(|p| p.children.insert(newname.to_owned(), ino));
        if let Some(old) = replaced {
            if let Some(node) = t.nodes.get_mut(&old) {
                node.attr.nlink = 0;
                if node.lookups == 0 {
                    t.nodes.remove(&old);
                }
            }
        }
        reply.ok();
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.count("open");
        if self.no_open {
            return reply.error(Errno::ENOSYS);
        }
        reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.count("read");
        let file_size = match self.table().nodes.get(&ino.0) {
            Some(node) => node.attr.size,
            None => return reply.error(Errno::ENOENT),
        };
        let len = file_size.saturating_sub(offset).min(u64::from(size)) as usize;
        reply.data(&ZEROS[..len.min(ZEROS.len())]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.count("write");
        let mut t = self.table();
        let Some(node) = t.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let end = offset.saturating_add(data.len() as u64);
        if end > node.attr.size {
            node.attr.size = end;
            node.attr.blocks = end.div_ceil(512);
        }
        let now = file_time();
        (node.attr.mtime, node.attr.ctime) = (now, now);
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.count("flush");
        // As rampart answers it where no file needs it: ENOSYS, after which the kernel sends
        // no more FLUSH.
        if self.no_flush {
            return reply.error(Errno::ENOSYS);
        }
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.count("release");
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count("fsync");
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.count("opendir");
        if self.no_open {
            return reply.error(Errno::ENOSYS);
        }
        reply.opened(FileHandle(0), kernel_settings::DIR_OPEN_FLAGS);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.count("readdir");
        let t = self.table();
        let Some(dir) = t.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        // Offsets: 1 after ".", 2 after "..", 2 + n after the n-th entry.
        let mut next = offset;
        if next == 0 {
            if reply.add(ino, 1, FileType::Directory, ".") {
                return reply.ok();
            }
            next = 1;
        }
        if next == 1 {
            if reply.add(ino, 2, FileType::Directory, "..") {
                return reply.ok();
            }
            next = 2;
        }
        for (i, (name, child)) in dir.children.iter().enumerate().skip((next - 2) as usize) {
            let kind = t
                .nodes
                .get(child)
                .map_or(FileType::RegularFile, |n| n.attr.kind);
            if reply.add(INodeNo(*child), 3 + i as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    /// As rampart answers it (decision 0080): every entry but "." and ".." is a kernel lookup.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.count("readdirplus");
        let mut t = self.table();
        let Some(dir) = t.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let dir_attr = dir.attr;
        let skip = offset.saturating_sub(2) as usize;
        let children: Vec<(OsString, u64)> = dir
            .children
            .iter()
            .skip(skip)
            .map(|(n, &c)| (n.clone(), c))
            .collect();
        for (next, name) in [(1, "."), (2, "..")] {
            if offset < next && reply.add(ino, next, name, &ttl(), &dir_attr, Generation(0)) {
                return reply.ok();
            }
        }
        for (i, (name, child)) in children.iter().enumerate() {
            let Some(node) = t.nodes.get_mut(child) else {
                continue;
            };
            let next = 3 + (skip + i) as u64;
            if reply.add(
                INodeNo(*child),
                next,
                name,
                &ttl(),
                &node.attr,
                Generation(0),
            ) {
                break;
            }
            node.lookups += 1;
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.count("releasedir");
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count("fsyncdir");
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.count("statfs");
        let files = self.table().nodes.len() as u64;
        let blocks = 1 << 30;
        reply.statfs(
            blocks,
            blocks,
            blocks,
            files,
            NODES_MAX as u64 - files,
            4096,
            255,
            4096,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if ino.0 == 1 && name == REQUESTS_XATTR {
            // Not counted: it is the bench asking, not the workload.
            let json = self.counts_json();
            return match size {
                0 => reply.size(json.len() as u32),
                s if (s as usize) < json.len() => reply.error(Errno::ERANGE),
                _ => reply.data(json.as_bytes()),
            };
        }
        self.count("getxattr");
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.count("listxattr");
        match size {
            0 => reply.size(0),
            _ => reply.data(&[]),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.count("setxattr");
        reply.error(Errno::EOPNOTSUPP);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        self.count("access");
        reply.ok();
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
        self.count("create");
        match self.make(req, parent, name, FileType::RegularFile, mode, umask) {
            Ok(attr) => reply.created(
                &ttl(),
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }
}

/// Parses the floor's request counts, as [`REQUESTS_XATTR`] answers them.
pub fn parse_counts(json: &[u8]) -> Result<BTreeMap<String, u64>, String> {
    serde_json::from_slice(json).map_err(|e| format!("the floor's request counts: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_trip_through_json() {
        let floor = Floor::new(true, true, true);
        floor.count("getattr");
        floor.count("getattr");
        floor.count("create");
        let counts = parse_counts(floor.counts_json().as_bytes()).unwrap();
        assert_eq!(counts.get("getattr"), Some(&2));
        assert_eq!(counts.get("create"), Some(&1));
        assert_eq!(counts.get("lookup"), None);
    }

    #[test]
    fn every_op_name_is_unique() {
        for (i, op) in OPS.iter().enumerate() {
            assert_eq!(op_index(op), i);
        }
    }
}

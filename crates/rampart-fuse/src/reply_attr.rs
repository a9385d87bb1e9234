//! What rampart-fuse puts in its replies: attributes, lookups' entries, xattr values by the
//! size protocol, and errors.

use std::time::{Duration, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, Generation, INodeNo, ReplyEmpty, ReplyEntry, ReplyXattr};
use rampart_core::time::to_system_time;
use rampart_core::{Attr, Ctx, Engine, FileKind};

pub(crate) fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::RegularFile => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::NamedPipe => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

pub(crate) fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size_bytes,
        blocks: a.allocated_bytes.div_ceil(512),
        atime: to_system_time(a.atime_ns),
        mtime: to_system_time(a.mtime_ns),
        ctime: to_system_time(a.ctime_ns),
        crtime: UNIX_EPOCH,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: rampart_core::limits::BLOCK_SIZE_BYTES,
        flags: 0,
    }
}

/// getxattr/listxattr protocol: size 0 asks for the length; too small a buffer is ERANGE.
pub(crate) fn reply_xattr(reply: ReplyXattr, size: u32, result: rampart_core::FsResult<Vec<u8>>) {
    match result {
        Ok(data) if size == 0 => reply.size(data.len() as u32),
        Ok(data) if data.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(data) => reply.data(&data),
        Err(e) => reply.error(errno(e)),
    }
}

/// The answer for an engine error, counted for the request this thread serves.
pub(crate) fn errno(e: rampart_core::Errno) -> Errno {
    crate::counters::count_error(e.code());
    Errno::from_i32(e.code())
}

pub(crate) fn reply_empty(reply: ReplyEmpty, result: rampart_core::FsResult<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

/// Answers a LOOKUP of `name` in `parent`; entries and "no such name" are cached for `ttl`.
pub(crate) fn reply_lookup(
    engine: &Engine,
    ctx: &Ctx,
    parent: u64,
    name: &[u8],
    ttl: &Duration,
    reply: ReplyEntry,
) {
    // The kernel sends "." and ".." only to find a file handle's inode it no longer caches
    // (FUSE_EXPORT_SUPPORT, decision 0142): by number, and never a negative entry.
    let result = match name {
        b"." => engine.lookup_by_number(ctx, parent, false),
        b".." => engine.lookup_by_number(ctx, parent, true),
        _ => engine.lookup(ctx, parent, name),
    };
    match result {
        Ok(a) => reply.entry(ttl, &file_attr(&a), Generation(a.generation)),
        Err(e) if e == rampart_core::Errno::ENOENT && name != b"." && name != b".." => {
            // A negative entry (inode 0) with a timeout: the kernel caches "no such name",
            // which saves the lookup that precedes every create.
            let negative = crate::kernel_settings::negative_entry();
            reply.entry(ttl, &negative, Generation(0));
        }
        Err(e) => reply.error(errno(e)),
    }
}

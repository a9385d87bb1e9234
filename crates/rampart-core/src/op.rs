//! Operations: every mutation of the file system is one of these values, applied through one
//! path ([`crate::engine`]). An `Op` carries everything its effect depends on (the time, the
//! inode number a creation got), so applying the same ops to the same state gives the same
//! state: the journal logs these values and replay applies them again.

use crate::attr::Ino;
use crate::time::TimeNs;

/// `rename` flags (renameat2).
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

/// `fallocate` modes.
pub const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
pub const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// Creates an inode of any kind (the type bits of `mode`) and its entry in `parent`.
    /// `target` is the symlink target (empty otherwise); `rdev` the device number.
    Create {
        parent: Ino,
        name: &'a [u8],
        ino: Ino,
        generation: u32,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        target: &'a [u8],
        time_ns: TimeNs,
    },
    /// A new name for an existing non-directory inode.
    Link {
        ino: Ino,
        parent: Ino,
        name: &'a [u8],
        time_ns: TimeNs,
    },
    /// Removes a non-directory entry.
    Unlink {
        parent: Ino,
        name: &'a [u8],
        time_ns: TimeNs,
    },
    /// Removes an empty directory.
    Rmdir {
        parent: Ino,
        name: &'a [u8],
        time_ns: TimeNs,
    },
    Rename {
        parent: Ino,
        name: &'a [u8],
        new_parent: Ino,
        new_name: &'a [u8],
        flags: u32,
        time_ns: TimeNs,
    },
    /// chmod, chown, truncate, utimens. `ctime_ns` is the new change time. `kill_suidgid`
    /// clears setuid (and setgid with group-exec) as an unprivileged truncate does; a chown of a
    /// non-directory always does, and any chown or truncate drops `security.capability`.
    SetAttr {
        ino: Ino,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size_bytes: Option<u64>,
        atime_ns: Option<TimeNs>,
        mtime_ns: Option<TimeNs>,
        ctime_ns: TimeNs,
        kill_suidgid: bool,
    },
    /// `kill_suidgid`: the writer is unprivileged, so setuid (and setgid with group-exec) go;
    /// every write drops `security.capability`, as on a local file system.
    Write {
        ino: Ino,
        offset: u64,
        data: &'a [u8],
        time_ns: TimeNs,
        kill_suidgid: bool,
    },
    Fallocate {
        ino: Ino,
        offset: u64,
        length: u64,
        mode: i32,
        time_ns: TimeNs,
    },
    SetXattr {
        ino: Ino,
        name: &'a [u8],
        value: &'a [u8],
        flags: i32,
        time_ns: TimeNs,
    },
    RemoveXattr {
        ino: Ino,
        name: &'a [u8],
        time_ns: TimeNs,
    },
    /// Sets how soon the inode's changes must reach the store (`Durability::code`).
    SetDurability {
        ino: Ino,
        durability: u8,
        time_ns: TimeNs,
    },
    /// Bytes `[offset, offset + len)` of a disk-tier file were written to its host file (the
    /// bytes are there, not here): the size grows to cover them, the times are `time_ns`.
    /// `kill_suidgid` as for `Write`. Replay changes the size and times only.
    WriteExtent {
        ino: Ino,
        offset: u64,
        len: u64,
        time_ns: TimeNs,
        kill_suidgid: bool,
    },
    /// Moves a regular file's contents to `tier`. To the disk: its host file already holds
    /// the bytes (copied before the op; synced before the op's record is written), and the
    /// memory copy is dropped. To memory: the file becomes empty in memory and the ops after
    /// it (writes) carry its bytes back; the host file is removed once this is durable. The
    /// file's times do not change (`time_ns` is only the op's time).
    Migrate {
        ino: Ino,
        tier: crate::contents::Tier,
        time_ns: TimeNs,
    },
}

impl Op<'_> {
    /// The time the op happened (its change time).
    pub fn time_ns(&self) -> TimeNs {
        match *self {
            Op::Create { time_ns, .. }
            | Op::Link { time_ns, .. }
            | Op::Unlink { time_ns, .. }
            | Op::Rmdir { time_ns, .. }
            | Op::Rename { time_ns, .. }
            | Op::Write { time_ns, .. }
            | Op::Fallocate { time_ns, .. }
            | Op::SetXattr { time_ns, .. }
            | Op::RemoveXattr { time_ns, .. }
            | Op::SetDurability { time_ns, .. }
            | Op::WriteExtent { time_ns, .. }
            | Op::Migrate { time_ns, .. } => time_ns,
            Op::SetAttr { ctime_ns, .. } => ctime_ns,
        }
    }
}

/// The receiver of applied ops: a persistence level (`persist::level::Level`), under its
/// older name.
pub use crate::persist::level::Level as OpSink;

/// What to do once a `sync_async` has finished.
pub type SyncDone = Box<dyn FnOnce(std::io::Result<()>) + Send>;

//! The public view of an inode's attributes, and the requests that change them.

use crate::time::TimeNs;

/// Inode number. 1 is the root directory; 0 is never used.
pub type Ino = u64;

/// The inode number of the root directory.
pub const ROOT_INO: Ino = 1;

/// The kind of a file, from the type bits of its mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    RegularFile,
    Directory,
    Symlink,
    NamedPipe,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    /// The kind named by the `S_IFMT` bits of `mode`, if any.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::RegularFile,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::NamedPipe,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::RegularFile => libc::S_IFREG,
            FileKind::Directory => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::NamedPipe => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
        }
    }

    /// A compact code for directory entries (the `S_IFMT` bits shifted down, like `d_type`).
    pub fn code(self) -> u8 {
        (self.mode_bits() >> 12) as u8
    }

    /// The kind of a code made by [`FileKind::code`].
    pub fn from_code(code: u8) -> Option<FileKind> {
        FileKind::from_mode(u32::from(code) << 12)
    }
}

/// How soon changes to a file must reach the store (DESIGN.md §4). Categories of a later issue
/// map onto these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Never written to the store; gone after a restart (like tmpfs). Regular files only.
    Volatile,
    /// Durable at most the deadline of this class after the change; class 0 is the store's
    /// commit interval (5 s by default), classes 1 to 64 longer ones (met at the commit
    /// interval), classes from [`Durability::SHORT_CLASS_BASE`] deadlines shorter than the
    /// commit interval, which make the persister commit early (`short_deadline`).
    Within(u8),
    /// Durable before the call that changed it returns.
    BeforeReturn,
}

impl Default for Durability {
    fn default() -> Self {
        Durability::Within(0)
    }
}

impl Durability {
    /// The first class of a deadline shorter than the commit interval: class `BASE + k` is
    /// due within 2^k ms (the spec's duration rounded down to a power of two, so the
    /// persister commits no later than asked).
    pub const SHORT_CLASS_BASE: u8 = 128;

    /// A deadline of `ms` milliseconds (at least 1), shorter than the commit interval.
    pub fn within_ms(ms: u64) -> Durability {
        Durability::Within(Self::SHORT_CLASS_BASE + ms.max(1).ilog2() as u8)
    }

    /// The deadline of a class shorter than the commit interval; None for other durabilities
    /// (met at the commit interval, at once, or never).
    pub fn short_deadline(self) -> Option<std::time::Duration> {
        match self {
            Durability::Within(c) if (Self::SHORT_CLASS_BASE..254).contains(&c) => Some(
                std::time::Duration::from_millis(1u64 << (c - Self::SHORT_CLASS_BASE).min(63)),
            ),
            _ => None,
        }
    }

    /// Orders deadline classes, smaller first: the short ones, then the commit interval's and
    /// the longer ones.
    fn urgency(class: u8) -> u16 {
        if class >= Self::SHORT_CLASS_BASE {
            u16::from(class - Self::SHORT_CLASS_BASE)
        } else {
            256 + u16::from(class)
        }
    }

    /// One byte: 0 volatile, 1 + class for a deadline, 255 before-return.
    pub fn code(self) -> u8 {
        match self {
            Durability::Volatile => 0,
            Durability::Within(class) => class.saturating_add(1).min(254),
            Durability::BeforeReturn => 255,
        }
    }

    pub fn from_code(code: u8) -> Durability {
        match code {
            0 => Durability::Volatile,
            255 => Durability::BeforeReturn,
            c => Durability::Within(c - 1),
        }
    }

    /// The stronger of two: what an op touching both must honour.
    pub fn stronger(self, other: Durability) -> Durability {
        match (self, other) {
            (Durability::BeforeReturn, _) | (_, Durability::BeforeReturn) => {
                Durability::BeforeReturn
            }
            (Durability::Within(a), Durability::Within(b)) => {
                Durability::Within(if Self::urgency(a) <= Self::urgency(b) {
                    a
                } else {
                    b
                })
            }
            (Durability::Within(a), _) | (_, Durability::Within(a)) => Durability::Within(a),
            _ => Durability::Volatile,
        }
    }
}

/// A snapshot of an inode's attributes, as `stat` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub generation: u64,
    pub kind: FileKind,
    /// Permission bits (the low 12 bits of the mode: rwx, setuid, setgid, sticky).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size_bytes: u64,
    /// Bytes of memory or disk that hold the file's data.
    pub allocated_bytes: u64,
    pub atime_ns: TimeNs,
    pub mtime_ns: TimeNs,
    pub ctime_ns: TimeNs,
    pub durability: Durability,
}

/// A time to set: a given instant, or the time of the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    At(TimeNs),
    Now,
}

/// A change of attributes (`chmod`, `chown`, `truncate`, `utimensat`); `None` leaves a field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size_bytes: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// An explicit ctime (the kernel sends one with the writeback cache); otherwise "now".
    pub ctime_ns: Option<TimeNs>,
    /// Clear setuid/setgid as an unprivileged truncate does (a chown of a non-directory clears
    /// them regardless).
    pub kill_suidgid: bool,
}

/// File-system wide figures for `statfs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks_total: u64,
    /// Free blocks, with those of the host file system only root may use (`f_bfree`).
    pub blocks_free: u64,
    /// Free blocks any user may use (`f_bavail`).
    pub blocks_avail: u64,
    pub files_total: u64,
    pub files_free: u64,
    pub name_len_max: u32,
}

/// Counts and memory figures of a mounted engine, for `rampart status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    /// FIFOs, sockets and device nodes.
    pub other: u64,
    /// Bytes of file contents held, on both tiers (holes left out in memory; a disk-tier
    /// file counts up to the end of what was written to it).
    pub data_bytes: u64,
    pub memory_used_bytes: u64,
    pub memory_cap_bytes: u64,
    /// Regular files on the disk tier, and their bytes (counted in `files` and `data_bytes`).
    pub disk_files: u64,
    pub disk_data_bytes: u64,
}

impl Stats {
    /// All live inodes, including the root.
    pub fn inodes(&self) -> u64 {
        self.files + self.directories + self.symlinks + self.other
    }

    /// Regular files in memory, and their bytes.
    pub fn memory_files(&self) -> u64 {
        self.files - self.disk_files
    }

    pub fn memory_data_bytes(&self) -> u64 {
        self.data_bytes - self.disk_data_bytes
    }
}

//! Errors of the engine. File-system operations fail with a POSIX errno, because that is what
//! every caller (the FUSE adapter, the library user) ultimately needs; store-level failures carry
//! a message that names the path and what to do.

use std::fmt;

/// A POSIX error number, as returned by file-system operations.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const EBUSY: Errno = Errno(libc::EBUSY);

    /// The raw errno value.
    pub fn code(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for Errno {}

/// Result of a file-system operation.
pub type FsResult<T> = Result<T, Errno>;

/// Which step of persistence failed (the first words of a [`PersistError`]'s message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistStep {
    /// Starting the journal after recovery (a new one, or cutting a torn tail).
    OpenJournal,
    WriteJournal,
    SyncJournal,
    WriteCheckpoint,
    /// Writing the new journal that goes with a checkpoint.
    WriteCheckpointJournal,
}

impl fmt::Display for PersistStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PersistStep::OpenJournal => "opening the journal",
            PersistStep::WriteJournal => "writing to the journal",
            PersistStep::SyncJournal => "syncing the journal",
            PersistStep::WriteCheckpoint => "writing a checkpoint",
            PersistStep::WriteCheckpointJournal => "writing a checkpoint's journal",
        })
    }
}

/// An I/O error that stopped the persister (it is sticky: later syncs fail with it until a
/// checkpoint succeeds). Clone, so that every waiter gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistError {
    pub step: PersistStep,
    pub kind: std::io::ErrorKind,
    /// The operating system's message.
    pub detail: String,
}

impl PersistError {
    pub fn new(step: PersistStep, error: &std::io::Error) -> PersistError {
        PersistError {
            step,
            kind: error.kind(),
            detail: error.to_string(),
        }
    }
}

impl fmt::Display for PersistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.step, self.detail)
    }
}

impl std::error::Error for PersistError {}

impl From<PersistError> for std::io::Error {
    fn from(e: PersistError) -> std::io::Error {
        std::io::Error::new(e.kind, e.to_string())
    }
}

/// Why a store's file system could not be started on a device: recovery refused it, or the
/// persister could not start (`persist::open`).
#[derive(Debug)]
pub enum StartError {
    Recovery(crate::persist::recovery::RecoveryError),
    Journal(PersistError),
    /// Recovery changed the state beyond the journal and the checkpoint recording it failed.
    Checkpoint(PersistError),
    /// The data folder of the disk tier (`data/`) cannot be made or written.
    DataFolder(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Recovery(e) => write!(f, "{e}"),
            StartError::Journal(e) => write!(f, "cannot open the journal: {e}"),
            StartError::Checkpoint(e) => {
                write!(f, "cannot write a checkpoint after recovery: {e}")
            }
            StartError::DataFolder(e) => write!(
                f,
                "the data folder of large files (data/ in the store) is not writable: {e}; \
                 give the daemon's user write access to it (mode 0700, owned by that user)"
            ),
        }
    }
}

impl std::error::Error for StartError {}

/// Why `Rampart::open` failed. Each message names the store and what to do.
#[derive(Debug)]
pub enum OpenError {
    /// The store itself: missing, not a store, damaged superblock, already mounted.
    Store(crate::store::StoreError),
    /// Its folder could not be opened (or its path resolved).
    Folder {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    Start {
        path: std::path::PathBuf,
        error: StartError,
    },
    /// The store's `rampart.toml` (categories and rules) is refused: the file, line, why.
    Config(crate::category::ConfigError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Store(e) => write!(f, "{e}"),
            OpenError::Folder { path, error } => {
                write!(f, "cannot open {}: {error}", path.display())
            }
            OpenError::Start { path, error } => {
                write!(f, "cannot recover {}: {error}", path.display())
            }
            OpenError::Config(e) => write!(
                f,
                "{e}; fix the file (docs/CATEGORIES.md) and mount again: nothing was changed"
            ),
        }
    }
}

impl std::error::Error for OpenError {}

/// How closing a store lost what it had not yet made durable.
#[derive(Debug)]
pub enum CloseError {
    /// The final checkpoint failed with changes that never reached the journal.
    FinalCheckpoint(PersistError),
    /// The store's folder was deleted while open: everything written to it went with it.
    FolderRemoved(std::path::PathBuf),
}

impl fmt::Display for CloseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseError::FinalCheckpoint(e) => write!(f, "the final checkpoint failed: {e}"),
            CloseError::FolderRemoved(path) => write!(
                f,
                "the store folder {} was removed while mounted: nothing of this mount was kept",
                path.display()
            ),
        }
    }
}

impl std::error::Error for CloseError {}

/// Why `rampart fsck` could not examine (or finish repairing) a store at all. Problems found
/// in the store are not errors: they are in its report.
#[derive(Debug)]
pub enum FsckError {
    /// Missing, not a store, or mounted.
    Store(crate::store::StoreError),
    Folder {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    Read {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// The repaired state does not decode as a checkpoint: nothing was written.
    ReadBack {
        store: std::path::PathBuf,
        error: crate::persist::checkpoint::CheckpointError,
    },
    /// Writing the repaired state failed part way.
    Write {
        store: std::path::PathBuf,
        error: PersistError,
    },
}

impl fmt::Display for FsckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsckError::Store(e) => write!(f, "{e}"),
            FsckError::Folder { path, error } => {
                write!(
                    f,
                    "cannot open the store folder {}: {error}",
                    path.display()
                )
            }
            FsckError::Read { path, error } => write!(
                f,
                "cannot read {}: {error}; check that the store's files are readable (run fsck \
                 as the store's owner) and that the disk is healthy",
                path.display()
            ),
            FsckError::ReadBack { store, error } => write!(
                f,
                "the repaired state does not read back as a checkpoint ({error}); nothing was \
                 written to {}. This is a bug in rampart: please report it",
                store.display()
            ),
            FsckError::Write { store, error } => write!(
                f,
                "writing the repaired state to {} failed ({error}); the store keeps its old \
                 state (or, if the checkpoint was already replaced, the repaired one); free \
                 space or fix the disk and run `rampart fsck --repair {}` again",
                store.display(),
                store.display()
            ),
        }
    }
}

impl std::error::Error for FsckError {}

/// An invariant of an in-memory structure that does not hold, described (what `check`
/// functions find in a decoded or damaged state; fsck reports them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken(pub String);

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Broken {}

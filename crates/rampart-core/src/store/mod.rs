//! The store: the folder on disk that holds a rampart file system (docs/FORMAT.md).
//!
//! For now it holds the superblock and the lock file; the journal, checkpoints and the data
//! folder of large files extend it. The store is private to its owner (mode 0700), and one
//! daemon at a time holds its lock (an `flock`, released by the kernel if the daemon dies).

mod lock;
pub mod mirror;
mod rebuild;
pub mod superblock;

pub use rebuild::rebuild_superblock;

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use lock::{lock, Access};
pub(crate) use lock::{mark as mark_lock, Mark};
use superblock::{Superblock, FORMAT_VERSION};

pub const SUPERBLOCK_FILE: &str = "superblock";
pub const LOCK_FILE: &str = "lock";

/// Why a store could not be created or opened. Each message names the path and what to do.
#[derive(Debug)]
pub enum StoreError {
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    NotAStore(String),
    Corrupt(String),
    UnsupportedVersion {
        path: String,
        found: u32,
        supported: u32,
    },
    AlreadyMounted {
        path: PathBuf,
        pid: Option<u32>,
    },
    /// The lock is still held for a daemon that has died: the kernel has not yet released
    /// its files after `waited_ms` of waiting.
    HolderExiting {
        path: PathBuf,
        pid: u32,
        waited_ms: u64,
    },
    /// The lock is still held for a daemon that has been unmounted and is still writing its
    /// final checkpoint after `waited_ms` of waiting.
    HolderUnmounting {
        path: PathBuf,
        pid: u32,
        waited_ms: u64,
    },
    /// The superblock is missing or damaged (`why`) while the store's checkpoint or journal
    /// is there: `rampart fsck --repair` rebuilds it.
    SuperblockLost {
        path: PathBuf,
        why: String,
    },
    /// The superblock and every file whose header names the store are gone, but the data
    /// folder holds `host_files` host files of disk-tier files: their bytes are durable data
    /// (decision 0132), and `rampart mkfs` must not be advised.
    OnlyHostFiles {
        path: PathBuf,
        host_files: usize,
    },
    /// `rampart fsck --repair` cannot rebuild the superblock: `why`.
    CannotRebuild {
        path: PathBuf,
        why: String,
    },
    NotEmpty(PathBuf),
    Missing(PathBuf),
    /// A setting given to mkfs is out of its range: the message says which and why.
    BadOption(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            StoreError::NotAStore(p) => write!(
                f,
                "{p} is not a rampart store (no valid superblock); create one with `rampart mkfs`"
            ),
            StoreError::Corrupt(m) => write!(f, "store is damaged: {m}"),
            StoreError::BadOption(m) => write!(f, "{m}"),
            StoreError::UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{path}: store format version {found} is not supported by this rampart \
                 (it reads version {supported}); use a matching rampart release"
            ),
            StoreError::AlreadyMounted { path, pid } => match pid {
                Some(pid) => write!(
                    f,
                    "store {} is already mounted (by daemon pid {pid}); unmount it first",
                    path.display()
                ),
                None => write!(
                    f,
                    "store {} is already mounted; unmount it first",
                    path.display()
                ),
            },
            StoreError::HolderExiting {
                path,
                pid,
                waited_ms,
            } => write!(
                f,
                "store {} is still locked by daemon pid {pid}, which has died but is still \
                 exiting (the kernel has not released its files after {waited_ms} ms); try \
                 again in a few seconds",
                path.display()
            ),
            StoreError::HolderUnmounting {
                path,
                pid,
                waited_ms,
            } => write!(
                f,
                "store {} is still locked by daemon pid {pid}, which has been unmounted and is \
                 still writing its final checkpoint after {waited_ms} ms; try again once it \
                 has exited",
                path.display()
            ),
            StoreError::SuperblockLost { path, why } => write!(
                f,
                "{}: the superblock is {why}, but the store's other files (its checkpoint, \
                 journal or their backups) are there; `rampart fsck --repair {}` rebuilds the \
                 superblock from the store id in their headers (do not run `rampart mkfs`: it \
                 makes a new, empty store)",
                path.display(),
                path.display()
            ),
            StoreError::OnlyHostFiles { path, host_files } => write!(
                f,
                "{}: the superblock, the checkpoint, the journal and their backups are all \
                 missing, but its data folder holds {host_files} host files of disk-tier files \
                 (names, owners and modes were in the lost files; each host file holds one \
                 file's bytes). Restore the store's files from a backup, or copy the host files \
                 out of {} before anything else; do not run `rampart mkfs` on this folder",
                path.display(),
                path.join(crate::persist::device::DATA_FOLDER).display()
            ),
            StoreError::CannotRebuild { path, why } => write!(
                f,
                "cannot rebuild the superblock of {}: {why}",
                path.display()
            ),
            StoreError::Missing(p) => write!(
                f,
                "store {} does not exist; create it with `rampart mkfs {}`",
                p.display(),
                p.display()
            ),
            StoreError::NotEmpty(p) if rebuild::holds_store_files(p) => write!(
                f,
                "{} holds a rampart store (its checkpoint or journal): mkfs would not replace \
                 it; if its superblock is missing or damaged, `rampart fsck --repair {}` \
                 rebuilds it; for a new store choose a new path",
                p.display(),
                p.display()
            ),
            StoreError::NotEmpty(p) => write!(
                f,
                "{} exists and is not empty; choose a new path for the store",
                p.display()
            ),
        }
    }
}

impl std::error::Error for StoreError {}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |error| StoreError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn new_store_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    if File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut id))
        .is_err()
    {
        let seed = crate::time::now_ns() as u128 ^ (u128::from(std::process::id()) << 64);
        id = seed.to_le_bytes();
    }
    id
}

/// Settings chosen when a store is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MkfsOptions {
    /// Files larger than this live on the disk tier: 0 for the default (1 MiB),
    /// [`superblock::THRESHOLD_OFF`] for never. Otherwise at least
    /// `limits::LARGE_FILE_THRESHOLD_BYTES_MIN`.
    pub large_file_threshold_bytes: u64,
}

/// Creates a new, empty store at `path` (which must not exist or be an empty folder).
pub fn mkfs(path: &Path) -> Result<Superblock, StoreError> {
    mkfs_with(path, &MkfsOptions::default())
}

/// Creates a new, empty store at `path` with `options`: the superblock and the data folder.
pub fn mkfs_with(path: &Path, options: &MkfsOptions) -> Result<Superblock, StoreError> {
    let threshold = options.large_file_threshold_bytes;
    if threshold != 0
        && threshold != superblock::THRESHOLD_OFF
        && threshold < crate::limits::LARGE_FILE_THRESHOLD_BYTES_MIN
    {
        return Err(StoreError::BadOption(format!(
            "the large-file threshold must be at least {} bytes (or off), not {threshold}",
            crate::limits::LARGE_FILE_THRESHOLD_BYTES_MIN
        )));
    }
    match fs::read_dir(path) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(StoreError::NotEmpty(path.to_path_buf()));
            }
            fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(io_err(path))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(io_err(path))?;
        }
        Err(e) => return Err(io_err(path)(e)),
    }
    let sb = Superblock {
        format_version: FORMAT_VERSION,
        flags: 0,
        store_id: new_store_id(),
        created_ns: crate::time::now_ns(),
        large_file_threshold_bytes: threshold,
    };
    write_superblock(path, &sb)?;
    let data = path.join(crate::persist::device::DATA_FOLDER);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&data)
        .map_err(io_err(&data))?;
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(io_err(path))?;
    Ok(sb)
}

/// Creates a new, empty store at `path` with `options` and its mirror (DA2) at `mirror_dir`
/// (absent or empty; meant for another disk), each copy recording the other. The mirror
/// folder is checked first, so that a refused one leaves nothing behind.
pub fn mkfs_mirrored(
    path: &Path,
    options: &MkfsOptions,
    mirror_dir: &Path,
) -> Result<Superblock, StoreError> {
    if fs::read_dir(mirror_dir).is_ok_and(|mut e| e.next().is_some()) {
        return Err(StoreError::BadOption(format!(
            "the mirror folder {} exists and is not empty; choose an empty or new folder \
             (on another disk)",
            mirror_dir.display()
        )));
    }
    mirror::check_apart(path, mirror_dir)?;
    let store_existed = path.exists();
    let sb = mkfs_with(path, options)?;
    if let Err(e) = mirror::add_mirror(path, mirror_dir) {
        unmake_store(path, store_existed);
        return Err(e);
    }
    Ok(sb)
}

/// Undoes a `mkfs` whose mirror failed, so that no half-made store is left behind: the folder
/// was absent or empty before, so everything in it is the mkfs's (a removal that fails is
/// logged; the refusal's message is what the user needs).
fn unmake_store(path: &Path, store_existed: bool) {
    let removed = if store_existed {
        fs::read_dir(path).and_then(|entries| {
            entries.into_iter().try_for_each(|entry| {
                let entry = entry?;
                if entry.file_type()?.is_dir() {
                    fs::remove_dir_all(entry.path())
                } else {
                    fs::remove_file(entry.path())
                }
            })
        })
    } else {
        fs::remove_dir_all(path)
    };
    if let Err(e) = removed {
        tracing::warn!(
            "could not remove the half-made store {}: {e}",
            path.display()
        );
    }
}

/// Writes `sb` as the superblock of the store at `path`, atomically (`write_file_atomically`):
/// a crash leaves no half superblock.
fn write_superblock(path: &Path, sb: &Superblock) -> Result<(), StoreError> {
    write_file_atomically(path, SUPERBLOCK_FILE, ".tmp", &sb.encode())
}

/// Writes `bytes` as file `name` of folder `dir`: to `name` + `tmp_suffix` (a temporary file
/// left by a crash holds nothing of value and is replaced), synced, renamed over `name`, then
/// the folder synced. Owner-only (0600).
pub(crate) fn write_file_atomically(
    dir: &Path,
    name: &str,
    tmp_suffix: &str,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{name}{tmp_suffix}"));
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    crate::persist::device::count_store_written(bytes.len() as u64);
    f.sync_all().map_err(io_err(&tmp))?;
    let final_path = dir.join(name);
    fs::rename(&tmp, &final_path).map_err(io_err(&final_path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// True if `path` holds a superblock file (valid or not).
pub fn looks_like_store(path: &Path) -> bool {
    path.join(SUPERBLOCK_FILE).is_file()
}

/// An open store, locked against a second mount for as long as it lives.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    superblock: Superblock,
    /// None: opened read-only and never mounted (no lock file, so no daemon holds it).
    _lock: Option<File>,
    /// The lock is exclusive (a mount's), so the lock file is ours to write.
    exclusive: bool,
}

impl Store {
    /// Opens the store at `path`: checks the superblock and takes the lock.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, Access::Exclusive)
    }

    /// Opens the store at `path` to read it only (`rampart fsck` without `--repair`): checks
    /// the superblock and takes a shared lock, writing nothing to the store.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, Access::ReadOnly)
    }

    /// Opens the store at `path` under an exclusive lock already taken (a mirrored mount
    /// locks both copies before it checks them).
    fn open_locked(path: &Path, lock: Option<File>) -> Result<Store, StoreError> {
        let superblock = read_superblock(path)?;
        Ok(Store {
            path: path.to_path_buf(),
            superblock,
            _lock: lock,
            exclusive: true,
        })
    }

    fn open_with(path: &Path, access: Access) -> Result<Store, StoreError> {
        let superblock = read_superblock(path)?;
        let lock = lock(path, access)?;
        Ok(Store {
            path: path.to_path_buf(),
            superblock,
            _lock: lock,
            exclusive: access == Access::Exclusive,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Says, in the lock file, that the daemon holding it is mounted, or has been unmounted
    /// and is finishing: a new mount of the store then waits for the lock instead of refusing
    /// (decision 0135).
    pub(crate) fn mark(&self, mark: Mark) -> Result<(), StoreError> {
        match &self._lock {
            Some(file) if self.exclusive => {
                lock::mark(file, mark).map_err(io_err(&self.path.join(LOCK_FILE)))
            }
            _ => Ok(()),
        }
    }

    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }
}

/// Reads and checks the superblock of the store at `path`.
fn read_superblock(path: &Path) -> Result<Superblock, StoreError> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::Missing(path.to_path_buf()))
        }
        Err(e) => return Err(io_err(path)(e)),
    };
    if !meta.is_dir() {
        return Err(StoreError::NotAStore(path.display().to_string()));
    }
    let sb_path = path.join(SUPERBLOCK_FILE);
    let bytes = match fs::read(&sb_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(lost_or(path, "missing".into(), || {
                StoreError::NotAStore(path.display().to_string())
            }))
        }
        Err(e) => return Err(io_err(&sb_path)(e)),
    };
    Superblock::decode(&bytes, &sb_path.display().to_string()).map_err(|e| match e {
        StoreError::NotAStore(_) => lost_or(path, "not a superblock".into(), || e),
        StoreError::Corrupt(why) => lost_or(path, format!("damaged ({why})"), || {
            StoreError::Corrupt(why.clone())
        }),
        e => e,
    })
}

/// [`StoreError::SuperblockLost`] if the folder holds the store's other files (so the advice
/// is to rebuild the superblock, not to make a new store), else `otherwise()`.
fn lost_or(path: &Path, why: String, otherwise: impl FnOnce() -> StoreError) -> StoreError {
    if rebuild::holds_store_files(path) {
        return StoreError::SuperblockLost {
            path: path.to_path_buf(),
            why,
        };
    }
    match rebuild::host_file_count(path) {
        0 => otherwise(),
        host_files => StoreError::OnlyHostFiles {
            path: path.to_path_buf(),
            host_files,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkfs_then_open_and_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        mkfs(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o700
        );
        let store = Store::open(&path).unwrap();
        match Store::open(&path) {
            Err(StoreError::AlreadyMounted { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id()))
            }
            other => panic!("second open: {other:?}"),
        }
        drop(store);
        Store::open(&path).unwrap();
        assert!(matches!(mkfs(&path), Err(StoreError::NotEmpty(_))));
    }

    #[test]
    fn a_plain_folder_is_not_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("not a rampart store"), "{err}");
    }

    #[test]
    fn a_read_only_open_shares_the_lock_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        mkfs(&path).unwrap();
        // Never mounted: no lock file, and none is made.
        let first = Store::open_read_only(&path).unwrap();
        assert!(!path.join(LOCK_FILE).exists());
        drop(first);
        drop(Store::open(&path).unwrap());
        let a = Store::open_read_only(&path).unwrap();
        let b = Store::open_read_only(&path).unwrap();
        // Readers exclude a mount, and a mount excludes readers.
        assert!(matches!(
            Store::open(&path),
            Err(StoreError::AlreadyMounted { .. })
        ));
        drop((a, b));
        let mounted = Store::open(&path).unwrap();
        match Store::open_read_only(&path) {
            Err(StoreError::AlreadyMounted { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id()))
            }
            other => panic!("read-only open of a mounted store: {other:?}"),
        }
        drop(mounted);
    }
}

//! Rebuilding a lost superblock (`rampart fsck --repair`).
//!
//! The superblock holds nothing the store cannot spare but its id and format version, and the
//! checkpoint's and the journal's headers each carry the store id (docs/FORMAT.md, "Headers"),
//! checksummed. So a missing or damaged superblock is rebuilt from them when every one of them
//! that can be read names the same store; when they disagree, or neither can be read, nothing
//! is written and the error says why. The damaged superblock is kept beside it
//! (`superblock.damaged`); the creation time, which only the superblock held, becomes the
//! oldest of the headers' creation times.

use std::fs;
use std::io::Read;
use std::path::Path;

use super::lock::{lock, Access};
use super::superblock::{Superblock, FORMAT_VERSION};
use super::{io_err, read_superblock, write_superblock, StoreError, SUPERBLOCK_FILE};
use crate::persist::header::HEADER_BYTES;
use crate::persist::recovery::{CHECKPOINT_FILE, CHECKPOINT_PREV, JOURNAL_FILE, JOURNAL_PREV};
use crate::persist::{checkpoint, journal};

/// Where a damaged superblock is kept when it is replaced.
pub const DAMAGED_SUPERBLOCK_FILE: &str = "superblock.damaged";

/// The files whose headers name the store: the checkpoint, the journal and their backups
/// (decision 0123), newest first.
const HEADED_FILES: [&str; 4] = [CHECKPOINT_FILE, JOURNAL_FILE, CHECKPOINT_PREV, JOURNAL_PREV];

/// True if `path` holds a checkpoint or a journal (or a backup of one): the files of a store
/// beyond its superblock.
pub(super) fn holds_store_files(path: &Path) -> bool {
    HEADED_FILES.iter().any(|name| path.join(name).is_file())
}

/// How many entries of the data folder have names rampart gives host files (0 if there is
/// no data folder or it cannot be read).
pub(super) fn host_file_count(path: &Path) -> usize {
    let Ok(dir) = fs::read_dir(path.join(crate::persist::device::DATA_FOLDER)) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(crate::contents::host_file::parse_host_file_name)
                .is_some()
        })
        .count()
}

/// What a file's header said.
struct Found {
    name: &'static str,
    store_id: [u8; 16],
    created_ns: i64,
}

/// Rebuilds the superblock of the store at `path` if it is missing or damaged, from the store
/// id in the checkpoint's and the journal's headers. Ok(None): the superblock is intact;
/// Ok(Some(what was done)) once the new one is durable. Err: a store already mounted, a
/// superblock of another format version (never overwritten), headers that disagree or none
/// readable, or an I/O error; nothing is changed then.
pub fn rebuild_superblock(path: &Path) -> Result<Option<String>, StoreError> {
    let why = match read_superblock(path) {
        Ok(_) => return Ok(None),
        Err(StoreError::SuperblockLost { why, .. }) => why,
        // Damaged with nothing to rebuild it from: the caller reports the damage.
        Err(StoreError::Corrupt(_) | StoreError::NotAStore(_)) if !holds_store_files(path) => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let cannot = |why: String| StoreError::CannotRebuild {
        path: path.to_path_buf(),
        why,
    };
    // Held until the new superblock is in place: no daemon may mount it meanwhile.
    let _lock = lock(path, Access::Exclusive)?;
    let mut found = Vec::new();
    let mut unreadable = Vec::new();
    for name in HEADED_FILES {
        let header = match read_header(path, name) {
            // A backup that cannot be read is only one source fewer: the checkpoint and the
            // journal may still name the store (if neither does, the error below says so).
            Err(e) if name == CHECKPOINT_PREV || name == JOURNAL_PREV => Some(Err(e.to_string())),
            header => header?,
        };
        match header {
            Some(Ok(f)) => found.push(f),
            Some(Err(e)) => unreadable.push(format!("{name}: {e}")),
            None => unreadable.push(format!("{name}: missing")),
        }
    }
    let Some(first) = found.first() else {
        return Err(cannot(format!(
            "none of the checkpoint, the journal and their backups has a readable header \
             ({}); restore the superblock from a backup",
            unreadable.join("; ")
        )));
    };
    if let Some(other) = found.iter().find(|f| f.store_id != first.store_id) {
        return Err(cannot(format!(
            "the {} names store {} and the {} names store {}: they come from different \
             stores, so the store id is unknown; restore the superblock from a backup, or \
             move the file of the other store away",
            first.name,
            hex(&first.store_id),
            other.name,
            hex(&other.store_id)
        )));
    }
    let sb = Superblock {
        format_version: FORMAT_VERSION,
        flags: 0,
        store_id: first.store_id,
        created_ns: found.iter().map(|f| f.created_ns).min().unwrap_or_default(),
        // Not in the other files: the default (a mount can override it).
        large_file_threshold_bytes: 0,
    };
    let old = path.join(SUPERBLOCK_FILE);
    let kept = if old.exists() {
        let aside = path.join(DAMAGED_SUPERBLOCK_FILE);
        fs::rename(&old, &aside).map_err(io_err(&aside))?;
        format!("; the damaged one is kept as {}", aside.display())
    } else {
        String::new()
    };
    write_superblock(path, &sb)?;
    let sources: Vec<&str> = found.iter().map(|f| f.name).collect();
    Ok(Some(format!(
        "superblock {why}: rebuilt from the store id {} in the header of the {}{kept}",
        hex(&sb.store_id),
        sources.join(" and the ")
    )))
}

/// The header of the store file `name`: None if the file is missing, Err(why) if it cannot be
/// decoded (short, foreign, damaged, of another version).
fn read_header(
    path: &Path,
    name: &'static str,
) -> Result<Option<Result<Found, String>>, StoreError> {
    let file_path = path.join(name);
    let mut bytes = Vec::with_capacity(HEADER_BYTES);
    match fs::File::open(&file_path) {
        Ok(f) => f
            .take(HEADER_BYTES as u64)
            .read_to_end(&mut bytes)
            .map_err(io_err(&file_path))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&file_path)(e)),
    };
    let decoded = if name == CHECKPOINT_FILE || name == CHECKPOINT_PREV {
        checkpoint::Header::decode(&bytes)
            .map(|h| (h.store_id, h.created_ns))
            .map_err(|e| e.to_string())
    } else {
        journal::Header::decode(&bytes)
            .map(|h| (h.store_id, h.created_ns))
            .map_err(|e| e.to_string())
    };
    Ok(Some(decoded.map(|(store_id, created_ns)| Found {
        name,
        store_id,
        created_ns,
    })))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{mkfs, Store};

    /// A store whose checkpoint and journal were written by a mount and a clean close.
    fn used_store() -> (tempfile::TempDir, std::path::PathBuf, Superblock) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let sb = mkfs(&path).unwrap();
        let fs = crate::Rampart::open(&path, &crate::rampart::Options::default()).unwrap();
        let c = crate::Ctx::library(0, 0);
        let f = fs
            .engine()
            .mknod(&c, crate::ROOT_INO, b"f", libc::S_IFREG | 0o644, 0)
            .unwrap();
        fs.engine().write(&c, f.ino, 0, b"kept", false).unwrap();
        fs.close().unwrap();
        (dir, path, sb)
    }

    #[test]
    fn a_missing_superblock_is_rebuilt_with_the_store_id() {
        let (_dir, path, sb) = used_store();
        fs::remove_file(path.join(SUPERBLOCK_FILE)).unwrap();
        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::SuperblockLost { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("rampart fsck --repair"), "{text}");
        let done = rebuild_superblock(&path).unwrap().unwrap();
        assert!(done.contains("checkpoint and the journal"), "{done}");
        let store = Store::open(&path).unwrap();
        assert_eq!(store.superblock().store_id, sb.store_id);
        drop(store);
        assert_eq!(
            rebuild_superblock(&path).unwrap(),
            None,
            "intact: nothing to do"
        );
        let fs = crate::Rampart::open(&path, &crate::rampart::Options::default()).unwrap();
        assert_eq!(fs.engine().lookup_path(b"f").unwrap().size_bytes, 4);
    }

    #[test]
    fn the_backup_pair_alone_names_the_store() {
        let (_dir, path, sb) = used_store();
        // A second clean close: its checkpoint keeps the first as the backup pair.
        crate::Rampart::open(&path, &crate::rampart::Options::default())
            .unwrap()
            .close()
            .unwrap();
        for name in [SUPERBLOCK_FILE, CHECKPOINT_FILE, JOURNAL_FILE] {
            fs::remove_file(path.join(name)).unwrap();
        }
        let done = rebuild_superblock(&path).unwrap().unwrap();
        assert!(
            done.contains("checkpoint.prev and the journal.prev"),
            "{done}"
        );
        assert_eq!(
            Store::open(&path).unwrap().superblock().store_id,
            sb.store_id
        );
    }

    #[test]
    fn an_unreadable_backup_does_not_stop_the_rebuild() {
        let (_dir, path, sb) = used_store();
        fs::remove_file(path.join(SUPERBLOCK_FILE)).unwrap();
        // A folder in the backup's place: opening it works, reading it fails (EISDIR).
        let _ = fs::remove_file(path.join(CHECKPOINT_PREV));
        fs::create_dir(path.join(CHECKPOINT_PREV)).unwrap();
        let done = rebuild_superblock(&path).unwrap().unwrap();
        assert!(done.contains("checkpoint and the journal"), "{done}");
        fs::remove_dir(path.join(CHECKPOINT_PREV)).unwrap();
        assert_eq!(
            Store::open(&path).unwrap().superblock().store_id,
            sb.store_id
        );
    }

    #[test]
    fn a_damaged_superblock_is_kept_aside_and_replaced() {
        let (_dir, path, sb) = used_store();
        let mut bytes = fs::read(path.join(SUPERBLOCK_FILE)).unwrap();
        bytes[20] ^= 1;
        fs::write(path.join(SUPERBLOCK_FILE), &bytes).unwrap();
        assert!(mkfs(&path)
            .unwrap_err()
            .to_string()
            .contains("rampart fsck --repair"));
        rebuild_superblock(&path).unwrap().unwrap();
        assert_eq!(fs::read(path.join(DAMAGED_SUPERBLOCK_FILE)).unwrap(), bytes);
        assert_eq!(
            Store::open(&path).unwrap().superblock().store_id,
            sb.store_id
        );
    }

    #[test]
    fn headers_of_two_stores_are_refused() {
        let (_dir, path, _) = used_store();
        let (_other_dir, other, _) = used_store();
        fs::copy(other.join(JOURNAL_FILE), path.join(JOURNAL_FILE)).unwrap();
        fs::remove_file(path.join(SUPERBLOCK_FILE)).unwrap();
        let err = rebuild_superblock(&path).unwrap_err();
        assert!(err.to_string().contains("different stores"), "{err}");
        assert!(!path.join(SUPERBLOCK_FILE).exists(), "nothing written");
    }

    #[test]
    fn unreadable_headers_are_refused() {
        let (_dir, path, _) = used_store();
        fs::remove_file(path.join(SUPERBLOCK_FILE)).unwrap();
        fs::remove_file(path.join(CHECKPOINT_FILE)).unwrap();
        fs::write(path.join(JOURNAL_FILE), b"garbage").unwrap();
        let err = rebuild_superblock(&path).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("none of the checkpoint, the journal") && text.contains("missing"),
            "{text}"
        );
        assert!(!path.join(SUPERBLOCK_FILE).exists());
        // A plain folder has nothing to rebuild from and is not called a lost store.
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(rebuild_superblock(plain.path()).unwrap(), None);
    }
}

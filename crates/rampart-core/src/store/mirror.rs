//! The store's mirror (DA2): a second, complete copy of the store in another folder, meant
//! for another disk (docs/FORMAT.md, "Mirror"; decisions 0076–0078).
//!
//! Each copy holds the file `mirror`, naming the store (its id) and the other copy's folder,
//! so either copy can be mounted and finds the other. At mount ([`open_mirrored`]) both copies
//! are checked by recovering each: a copy missing, unreadable or damaged is brought back in
//! line from the other (its files replaced by the other's), and if both are good the one with
//! the later commit wins and the other is brought up to it. The mount then writes both
//! (`persist::device::MirrorDevice`).

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::lock::{lock, Access};
use super::{io_err, read_superblock, Store, StoreError, LOCK_FILE, SUPERBLOCK_FILE};
use crate::engine::EngineConfig;
use crate::persist::device::{DirDevice, MirrorHealth, DATA_FOLDER};
use crate::persist::recovery::{self, CHECKPOINT_FILE, JOURNAL_FILE};

/// The file, in each copy, that names the other copy.
pub const MIRROR_FILE: &str = "mirror";
const MAGIC: [u8; 8] = *b"RAMPMIRR";
/// The format of the `mirror` file.
pub const MIRROR_FORMAT_VERSION: u32 = 1;
/// The longest folder path a `mirror` file holds.
pub const MIRROR_PATH_BYTES_MAX: usize = 4096;
/// magic, version, flags, store id, path length.
const FIXED_BYTES: usize = 8 + 4 + 4 + 16 + 4;

/// The store files a copy holds, beside `data/` (the lock and `mirror` are each copy's own).
const COPIED_FILES: [&str; 8] = [
    SUPERBLOCK_FILE,
    JOURNAL_FILE,
    CHECKPOINT_FILE,
    recovery::JOURNAL_PREV,
    recovery::CHECKPOINT_PREV,
    crate::persist::persister::RESERVE_FILE,
    crate::rampart::CONFIG_FILE,
    crate::persist::freed_note::FREED_FILE,
];
/// Zeros kept for a checkpoint on a full disk (up to 4 GiB): compared by length.
const RESERVE: &str = crate::persist::persister::RESERVE_FILE;
/// Left by a crash in the middle of a write; never copied, removed from a copy brought in line.
const LEFTOVER_FILES: [&str; 3] = ["checkpoint.tmp", "journal.tmp", "freed.tmp"];
/// A file being copied in, renamed over its name once complete and synced.
const COPY_SUFFIX: &str = ".mirror-copy";

/// What a copy's `mirror` file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorRecord {
    pub store_id: [u8; 16],
    /// The other copy's folder (absolute).
    pub peer: PathBuf,
}

impl MirrorRecord {
    pub fn encode(&self) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt;
        let path = self.peer.as_os_str().as_bytes();
        let mut out = Vec::with_capacity(FIXED_BYTES + path.len() + 4);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&MIRROR_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.store_id);
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and checks a `mirror` file; the error says what is wrong with it.
    pub fn decode(bytes: &[u8]) -> Result<MirrorRecord, String> {
        use std::os::unix::ffi::OsStrExt;
        if !bytes.starts_with(&MAGIC) {
            return Err("not a mirror record (bad magic)".into());
        }
        if bytes.len() < FIXED_BYTES + 4 {
            return Err(format!("cut short ({} bytes)", bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err("checksum mismatch".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4"));
        let version = u32_at(8);
        if version != MIRROR_FORMAT_VERSION {
            return Err(format!(
                "format version {version} (this rampart reads {MIRROR_FORMAT_VERSION})"
            ));
        }
        let path_len = u32_at(32) as usize;
        if path_len == 0 || path_len > MIRROR_PATH_BYTES_MAX || FIXED_BYTES + path_len != body.len()
        {
            return Err(format!("bad path length {path_len}"));
        }
        Ok(MirrorRecord {
            store_id: body[16..32].try_into().expect("16 bytes"),
            peer: PathBuf::from(std::ffi::OsStr::from_bytes(&body[FIXED_BYTES..])),
        })
    }
}

/// The `mirror` file of the copy at `dir`: Ok(None) if it has none (an unmirrored store).
pub fn read_record(dir: &Path) -> Result<Option<MirrorRecord>, StoreError> {
    let path = dir.join(MIRROR_FILE);
    match fs::read(&path) {
        Ok(bytes) => MirrorRecord::decode(&bytes)
            .map(Some)
            .map_err(|why| StoreError::Corrupt(format!("{}: {why}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&path)(e)),
    }
}

/// Writes `record` as the `mirror` file of `dir`, atomically.
pub fn write_record(dir: &Path, record: &MirrorRecord) -> Result<(), StoreError> {
    super::write_file_atomically(dir, MIRROR_FILE, COPY_SUFFIX, &record.encode())
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// `path` made absolute and resolved as far as it exists: its longest existing ancestor
/// canonicalized (symbolic links followed), the rest appended as written (`.` dropped, `..`
/// taking one component back), so that two paths of which neither exists yet compare.
fn resolved_as_far_as_it_exists(path: &Path) -> Result<PathBuf, StoreError> {
    let absolute = std::path::absolute(path).map_err(io_err(path))?;
    let parts: Vec<_> = absolute.components().collect();
    // The longest prefix that exists (the root always does).
    let (mut base, kept) = (1..=parts.len())
        .rev()
        .find_map(|n| {
            let prefix: PathBuf = parts[..n].iter().collect();
            fs::canonicalize(&prefix).ok().map(|resolved| (resolved, n))
        })
        .unwrap_or_else(|| (PathBuf::from("/"), 1));
    for part in &parts[kept..] {
        match part {
            std::path::Component::ParentDir => {
                base.pop();
            }
            std::path::Component::Normal(name) => base.push(name),
            _ => {}
        }
    }
    Ok(base)
}

/// Refuses a mirror folder that is the store, inside it, or holds it: the two copies must be
/// folders apart (a store inside its mirror would be in the copy's way, and a mirror inside
/// its store in the store's). Checked before anything is made.
pub(crate) fn check_apart(store_dir: &Path, mirror_dir: &Path) -> Result<(), StoreError> {
    let store = resolved_as_far_as_it_exists(store_dir)?;
    let mirror = resolved_as_far_as_it_exists(mirror_dir)?;
    if mirror.starts_with(&store) {
        return Err(StoreError::BadOption(format!(
            "the mirror {} must not be the store or inside it",
            mirror.display()
        )));
    }
    if store.starts_with(&mirror) {
        return Err(StoreError::BadOption(format!(
            "the store {} must not be inside its mirror {}: choose folders apart (the mirror \
             on another disk)",
            store.display(),
            mirror.display()
        )));
    }
    Ok(())
}

/// Makes `dir` (absent or empty) a folder for a new copy, mode 0700; returns it resolved.
fn prepare_empty_folder(dir: &Path) -> Result<PathBuf, StoreError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(StoreError::BadOption(format!(
                    "the mirror folder {} exists and is not empty; choose an empty or new \
                     folder (on another disk)",
                    dir.display()
                )));
            }
            fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(io_err(dir))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io_err(dir))?;
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
            sync_dir(parent.unwrap_or(Path::new(".")))?;
        }
        Err(e) => return Err(io_err(dir)(e)),
    }
    fs::canonicalize(dir).map_err(io_err(dir))
}

/// Adds a mirror to the unmounted store at `store_path`: copies its current state into `dir`
/// (absent or empty, made 0700), then records each copy in the other. Returns the mirror's
/// resolved path. A store that already has a mirror whose folder is there is refused.
pub fn add_mirror(store_path: &Path, dir: &Path) -> Result<PathBuf, StoreError> {
    let store = Store::open(store_path)?;
    let store_dir = fs::canonicalize(store.path()).map_err(io_err(store.path()))?;
    if let Some(old) = read_record(&store_dir)? {
        if old.peer.exists() && fs::canonicalize(dir).ok().as_deref() != Some(old.peer.as_path()) {
            return Err(StoreError::BadOption(format!(
                "{} already has a mirror at {}; a store has one mirror: remove that folder \
                 first to move the mirror",
                store_dir.display(),
                old.peer.display()
            )));
        }
    }
    check_apart(&store_dir, dir)?;
    let mirror_dir = prepare_empty_folder(dir)?;
    let store_id = store.superblock().store_id;
    bring_in_line(&store_dir, &mirror_dir, true)?;
    // The mirror first: a crash before the store's record leaves an unmirrored store and a
    // folder that names it (mount ignores it; `mirror add` asks for an empty folder again).
    write_record(
        &mirror_dir,
        &MirrorRecord {
            store_id,
            peer: store_dir.clone(),
        },
    )?;
    write_record(
        &store_dir,
        &MirrorRecord {
            store_id,
            peer: mirror_dir.clone(),
        },
    )?;
    Ok(mirror_dir)
}

/// Makes the copy at `to` hold what the copy at `from` holds: every store file and host file
/// that differs is replaced (copied to a temporary name, synced, renamed), files `from` lacks
/// are removed; the lock and the `mirror` file stay. `full`: host files and the reserve are
/// compared by content, else by length only (see [`open_mirrored`]). Returns how many files
/// it changed.
pub fn bring_in_line(from: &Path, to: &Path, full: bool) -> Result<u64, StoreError> {
    let mut changed = 0u64;
    if !to.is_dir() {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(to)
            .map_err(io_err(to))?;
    }
    for name in COPIED_FILES {
        let by_content = full || name != RESERVE;
        changed += u64::from(copy_if_different(
            &from.join(name),
            &to.join(name),
            by_content,
        )?);
    }
    for name in LEFTOVER_FILES {
        let path = to.join(name);
        if path.exists() {
            fs::remove_file(&path).map_err(io_err(&path))?;
            changed += 1;
        }
    }
    let (from_data, to_data) = (from.join(DATA_FOLDER), to.join(DATA_FOLDER));
    if !to_data.is_dir() {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&to_data)
            .map_err(io_err(&to_data))?;
    }
    // Only rampart's host files, and only regular ones: anything else someone put into a
    // data folder is theirs (left alone, as recovery leaves it).
    let names = |dir: &Path| -> Result<Vec<std::ffi::OsString>, StoreError> {
        let ours = |e: &fs::DirEntry| {
            e.file_type().is_ok_and(|t| t.is_file())
                && e.file_name()
                    .to_str()
                    .is_some_and(|n| crate::contents::host_file::parse_host_file_name(n).is_some())
        };
        match fs::read_dir(dir) {
            Ok(entries) => entries
                .filter(|e| e.as_ref().map_or(true, ours))
                .map(|e| e.map(|e| e.file_name()).map_err(io_err(dir)))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io_err(dir)(e)),
        }
    };
    let wanted = names(&from_data)?;
    for name in &wanted {
        changed += u64::from(copy_if_different(
            &from_data.join(name),
            &to_data.join(name),
            full,
        )?);
    }
    for name in names(&to_data)? {
        if !wanted.contains(&name) {
            let path = to_data.join(&name);
            fs::remove_file(&path).map_err(io_err(&path))?;
            changed += 1;
        }
    }
    sync_dir(&to_data)?;
    sync_dir(to)?;
    Ok(changed)
}

/// Replaces `to` by a copy of `from` if they differ (by length, and by content if
/// `by_content`); removes `to` if `from` does not exist. True if it changed anything.
fn copy_if_different(from: &Path, to: &Path, by_content: bool) -> Result<bool, StoreError> {
    let from_len = match fs::metadata(from) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match fs::remove_file(to) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(io_err(to)(e)),
            }
        }
        Err(e) => return Err(io_err(from)(e)),
    };
    if fs::metadata(to).is_ok_and(|m| m.len() == from_len)
        && (!by_content || same_content(from, to)?)
    {
        return Ok(false);
    }
    let tmp = PathBuf::from(format!("{}{COPY_SUFFIX}", to.display()));
    let _ = fs::remove_file(&tmp);
    let mut src = File::open(from).map_err(io_err(from))?;
    let mut dst = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    let copied = std::io::copy(&mut src, &mut dst).map_err(io_err(&tmp))?;
    crate::persist::device::count_store_written(copied);
    dst.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, to).map_err(io_err(to))?;
    Ok(true)
}

/// The store files and host files (`data/NAME`) in which the copies at `a` and `b` differ:
/// present in one only, or with other bytes. Reads both whole (`rampart fsck`).
pub fn compare(a: &Path, b: &Path) -> Result<Vec<String>, StoreError> {
    let mut differ = Vec::new();
    let mut check = |name: String, x: PathBuf, y: PathBuf| -> Result<(), StoreError> {
        let same = match (x.is_file(), y.is_file()) {
            (false, false) => true,
            (true, true) => same_content(&x, &y)?,
            _ => false,
        };
        if !same {
            differ.push(name);
        }
        Ok(())
    };
    for name in COPIED_FILES {
        check(name.to_string(), a.join(name), b.join(name))?;
    }
    let mut names = std::collections::BTreeSet::new();
    for dir in [a, b] {
        if let Ok(entries) = fs::read_dir(dir.join(DATA_FOLDER)) {
            for e in entries {
                names.insert(e.map_err(io_err(dir))?.file_name());
            }
        }
    }
    for name in names {
        check(
            format!("{DATA_FOLDER}/{}", name.to_string_lossy()),
            a.join(DATA_FOLDER).join(&name),
            b.join(DATA_FOLDER).join(&name),
        )?;
    }
    Ok(differ)
}

/// Whether two files hold the same bytes (read in blocks, never whole).
pub fn same_content(a: &Path, b: &Path) -> Result<bool, StoreError> {
    const BLOCK: usize = 1 << 20;
    let mut fa = File::open(a).map_err(io_err(a))?;
    let mut fb = File::open(b).map_err(io_err(b))?;
    let (mut ba, mut bb) = (vec![0u8; BLOCK], vec![0u8; BLOCK]);
    loop {
        let na = read_full(&mut fa, &mut ba).map_err(io_err(a))?;
        let nb = read_full(&mut fb, &mut bb).map_err(io_err(b))?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A mirrored store opened for a mount: the store (locked), its mirror (locked, if there),
/// the mirror's state, and what the checks found and did, for the log.
#[derive(Debug)]
pub struct MirroredOpen {
    pub store: Store,
    pub peer: PathBuf,
    /// Held for as long as the mount lives (None: the mirror is missing).
    pub peer_lock: Option<File>,
    pub health: Arc<MirrorHealth>,
    pub notes: Vec<String>,
}

/// Whether the two copies' store files (not the host files) hold the same bytes.
fn store_files_equal(a: &Path, b: &Path) -> Result<bool, StoreError> {
    for name in COPIED_FILES {
        let (x, y) = (a.join(name), b.join(name));
        let same = match (fs::metadata(&x), fs::metadata(&y)) {
            (Err(_), Err(_)) => true,
            // The reserve holds zeros (up to 4 GiB): its length is what matters.
            (Ok(m), Ok(n)) if name == RESERVE => m.len() == n.len(),
            (Ok(_), Ok(_)) => same_content(&x, &y)?,
            _ => false,
        };
        if !same {
            return Ok(false);
        }
    }
    Ok(true)
}

/// How a copy fared when recovered on its own: the op it recovers to, and whether it needs
/// the backup pair for that (its checkpoint is damaged: decision 0123).
fn judge(dir: &Path, store_id: [u8; 16], config: &EngineConfig) -> Result<Judged, String> {
    let sb = read_superblock(dir).map_err(|e| e.to_string())?;
    if sb.store_id != store_id {
        return Err("its superblock names another store".into());
    }
    let device = DirDevice::open_read_only(dir).map_err(|e| e.to_string())?;
    let (_, report) =
        recovery::recover(&device, store_id, config).map_err(|e| format!("cannot recover: {e}"))?;
    Ok(Judged {
        next_seq: report.next_seq,
        backup_used: report.backup_used,
    })
}

/// A copy that recovers.
#[derive(Debug)]
struct Judged {
    next_seq: u64,
    /// Why its checkpoint could not be used, if the backup pair stood in for it.
    backup_used: Option<String>,
}

impl Judged {
    /// Orders copies: the later commit wins; at the same commit, the one whose checkpoint
    /// is sound (copied from a copy that needs its backup, the damage would spread).
    fn rank(&self) -> (u64, bool) {
        (self.next_seq, self.backup_used.is_none())
    }

    /// How this copy is ahead of `other`, which ranks below it.
    fn ahead_of(&self, other: &Judged) -> &'static str {
        if self.next_seq > other.next_seq {
            "has later commits"
        } else {
            "has a sound checkpoint at the same commit"
        }
    }

    fn describe(&self) -> String {
        match &self.backup_used {
            None => format!("up to op {}", self.next_seq),
            Some(why) => format!(
                "up to op {}, from its backup checkpoint: {why}",
                self.next_seq
            ),
        }
    }
}

/// Opens the store at `path`, whose `mirror` file is `record`, with its mirror: locks both,
/// checks both, brings the one that is behind or damaged back in line from the other, and
/// says in `notes` which copy was used and why. A mirror that is missing (no folder, or a
/// folder that holds no copy of this store) is not touched: the store opens with its mirror
/// degraded, and the note says to run `rampart mirror add`. Err if neither copy can be used.
pub fn open_mirrored(
    path: &Path,
    record: &MirrorRecord,
    config: &EngineConfig,
) -> Result<MirroredOpen, StoreError> {
    let here = fs::canonicalize(path).map_err(io_err(path))?;
    let store_lock = lock(&here, Access::Exclusive)?;
    let peer = record.peer.clone();
    let mut notes = Vec::new();
    if !peer.is_dir() {
        return without_mirror(&here, store_lock, &peer, "is missing");
    }
    // A folder that holds no trace of this store (emptied, or a disk not mounted under it)
    // is not filled on a guess.
    let peer_record = read_record(&peer).ok().flatten();
    let peer_sb = read_superblock(&peer).ok();
    let ours = peer_record
        .as_ref()
        .is_some_and(|r| r.store_id == record.store_id)
        || peer_sb.is_some_and(|s| s.store_id == record.store_id);
    if !ours {
        return without_mirror(&here, store_lock, &peer, "holds no copy of this store");
    }
    let peer_lock = lock(&peer, Access::Exclusive)?;
    // The usual case (a clean unmount, or a crash after both copies' last writes): the same
    // store files, so the same recovery; the mount's own recovery judges them.
    let same = || {
        Ok(Judged {
            next_seq: 0,
            backup_used: None,
        })
    };
    let (here_state, peer_state) = if store_files_equal(&here, &peer)? {
        (same(), same())
    } else {
        (
            judge(&here, record.store_id, config),
            judge(&peer, record.store_id, config),
        )
    };
    let (from, to, why) = choose(&here, &peer, &here_state, &peer_state)?;
    // Host files are compared by content only when a copy was behind or damaged: when both
    // recovered to the same commit they hold the same committed bytes (decision 0078).
    let full = !why.is_empty();
    let changed = bring_in_line(from, to, full)?;
    if !why.is_empty() {
        notes.push(format!("{why} ({changed} files copied)"));
    } else if changed > 0 {
        notes.push(format!(
            "the mirror {} differed from the store in {changed} files after its last commit \
             (an interrupted write): brought it in line",
            peer.display()
        ));
    }
    for (dir, other) in [(&here, &peer), (&peer, &here)] {
        let want = MirrorRecord {
            store_id: record.store_id,
            peer: other.clone(),
        };
        if read_record(dir).ok().flatten().as_ref() != Some(&want) {
            write_record(dir, &want)?;
        }
    }
    let store = Store::open_locked(&here, store_lock)?;
    Ok(MirroredOpen {
        store,
        health: Arc::new(MirrorHealth::new(peer.display().to_string())),
        peer,
        peer_lock,
        notes,
    })
}

/// Which copy to bring in line from which (`from`, `to`), and why (empty: both equal), from
/// how each recovered on its own; Err if neither can be used.
fn choose<'p>(
    here: &'p PathBuf,
    peer: &'p PathBuf,
    here_state: &Result<Judged, String>,
    peer_state: &Result<Judged, String>,
) -> Result<(&'p PathBuf, &'p PathBuf, String), StoreError> {
    Ok(match (here_state, peer_state) {
        (Ok(a), Ok(b)) if b.rank() > a.rank() => (
            peer,
            here,
            format!(
                "the mirror {} {} ({}; the store {} {}): used the mirror and brought the \
                 store up to it",
                peer.display(),
                b.ahead_of(a),
                b.describe(),
                here.display(),
                a.describe()
            ),
        ),
        (Ok(a), Ok(b)) if a.rank() > b.rank() => (
            here,
            peer,
            format!(
                "the store {} {} ({}; the mirror {} {}): brought the mirror up to it",
                here.display(),
                a.ahead_of(b),
                a.describe(),
                peer.display(),
                b.describe()
            ),
        ),
        (Ok(_), Ok(_)) => (here, peer, String::new()),
        (Err(bad), Ok(_)) => (
            peer,
            here,
            format!(
                "the store copy {} cannot be used ({bad}): used the mirror {} and brought the \
                 store back in line from it",
                here.display(),
                peer.display()
            ),
        ),
        (Ok(_), Err(bad)) => (
            here,
            peer,
            format!(
                "the mirror {} cannot be used ({bad}): brought it back in line from the store {}",
                peer.display(),
                here.display()
            ),
        ),
        (Err(a), Err(b)) => {
            return Err(StoreError::Corrupt(format!(
                "neither copy of the store can be used: {} ({a}); its mirror {} ({b})",
                here.display(),
                peer.display()
            )))
        }
    })
}

/// The store at `here` opened with its mirror `peer` degraded from the start: it `why`.
fn without_mirror(
    here: &Path,
    store_lock: Option<File>,
    peer: &Path,
    why: &str,
) -> Result<MirroredOpen, StoreError> {
    let why = format!(
        "the mirror {} {why}: the store runs without it; when it is back, remount; to make a \
         new one, unmount and run `rampart mirror add {} DIR`",
        peer.display(),
        here.display()
    );
    let store = Store::open_locked(here, store_lock)?;
    Ok(MirroredOpen {
        store,
        peer: peer.to_path_buf(),
        peer_lock: None,
        health: Arc::new(MirrorHealth::degraded_from_start(
            peer.display().to_string(),
            why.clone(),
        )),
        notes: vec![why],
    })
}

/// True if `name` is one of each copy's own files, never copied.
pub fn is_own_file(name: &str) -> bool {
    name == LOCK_FILE || name == MIRROR_FILE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_damage() {
        let r = MirrorRecord {
            store_id: [3; 16],
            peer: PathBuf::from("/mnt/disk2/store-mirror"),
        };
        let bytes = r.encode();
        assert_eq!(MirrorRecord::decode(&bytes).unwrap(), r);
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(MirrorRecord::decode(&damaged).is_err(), "bit {bit}");
        }
        assert!(MirrorRecord::decode(&bytes[..bytes.len() - 1]).is_err());
    }
}

//! `rampart fsck STORE [--repair] [--json]`: checks an unmounted store at memory speed, and
//! repairs what can be repaired (docs/CLI.md).
//!
//! Phases, shown by a progress bar on stderr when it is a terminal:
//! 1. the superblock (while taking the store's lock: a mounted store is refused) and the
//!    checkpoint, decoded without refusing broken invariants;
//! 2. the journal scan: its header, its valid batches and how it ends (`Tail`): clean, torn
//!    (an unsynced write cut by a crash, benign) or damaged (durable data after damage);
//! 3. the replay of the journal's ops onto the checkpoint's state, through the same
//!    `State::apply` as live operations: an op that does not apply is a problem;
//! 4. every invariant of the resulting state (`State::check`).
//!
//! `--repair` drops the journal from its damage on, stops the replay at an op that does not
//! apply, runs `State::repair` (invariants; unreachable inodes go to /lost+found), and writes
//! the result as a new checkpoint with an empty journal, the same way the daemon checkpoints
//! (`checkpoint.tmp` synced and renamed, then `journal.tmp` synced and renamed). A checkpoint
//! that cannot be decoded is the only copy of the file system: it is never rewritten.

use std::any::Any;
use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rampart_core::engine::State;
use rampart_core::persist::checkpoint::{self, CheckpointError};
use rampart_core::persist::codec::DecodeError;
use rampart_core::persist::device::{Device, DirDevice};
use rampart_core::persist::journal::{self, JournalError, Tail};
use rampart_core::persist::recovery::{after_replay, initial_state, CHECKPOINT_FILE, JOURNAL_FILE};
use rampart_core::store::{Store, StoreError};
use rampart_core::{Engine, EngineConfig, FileKind, Op};
use serde::Serialize;

const CHECKPOINT_TMP: &str = "checkpoint.tmp";
const JOURNAL_TMP: &str = "journal.tmp";
/// Most damaged regions of one journal that are looked past to count what follows them.
const DAMAGE_SCAN_MAX: usize = 64;

/// What fsck found (and did), printed as text or as JSON (`--json`).
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub store: String,
    /// No problem remains: none was found, or all were repaired.
    pub clean: bool,
    /// `--repair` wrote a repaired state.
    pub repaired: bool,
    pub superblock: SuperblockReport,
    pub checkpoint: CheckpointReport,
    pub journal: JournalReport,
    pub replay: ReplayReport,
    pub invariants: InvariantsReport,
    /// The file system after replay (and repair), if it could be built.
    pub filesystem: Option<FsCounts>,
    /// Everything found wrong, in the order of the phases.
    pub problems: Vec<String>,
    /// What `--repair` did.
    pub repairs: Vec<String>,
    /// Why the problems cannot be repaired, if they cannot.
    pub unrepairable: Option<String>,
    pub duration_ms: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct SuperblockReport {
    pub ok: bool,
    pub format_version: Option<u32>,
    pub store_id: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct CheckpointReport {
    pub present: bool,
    /// Decoded, belongs to this store, and holds a consistent state.
    pub ok: bool,
    pub bytes: u64,
    /// The first op not in the image.
    pub seq: Option<u64>,
    /// Why it could not be decoded.
    pub error: Option<String>,
    /// Broken invariants of the state it holds.
    pub problems: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct JournalReport {
    pub present: bool,
    /// Readable, of this store, without damage.
    pub ok: bool,
    pub bytes: u64,
    pub base_seq: Option<u64>,
    /// Valid batches and their ops (the valid prefix).
    pub batches: u64,
    pub ops: u64,
    pub valid_bytes: u64,
    /// Zeros after the valid prefix: space reserved ahead by the writer (docs/FORMAT.md).
    pub reserved_bytes: u64,
    /// The sequence number the next op would get.
    pub next_seq: Option<u64>,
    /// How the valid prefix ends (null when there is no readable journal).
    pub tail: Option<TailReport>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum TailReport {
    Clean,
    /// An unsynced write cut by a crash: benign, dropped at the next mount.
    Torn {
        offset: u64,
        bytes: u64,
        reason: String,
    },
    /// Damage with valid batches after it: durable data that cannot be replayed.
    Damaged {
        offset: u64,
        reason: String,
        next_valid_offset: u64,
        /// Bytes from the damage to the end of the file.
        dropped_bytes: u64,
        /// Valid batches found after the damage, and their ops (the damaged batch itself
        /// cannot be read).
        dropped_batches: u64,
        dropped_ops: u64,
    },
}

#[derive(Debug, Default, Serialize)]
pub struct ReplayReport {
    /// The replay ran (a checkpoint state and a readable journal were there).
    pub done: bool,
    pub batches: u64,
    pub ops_applied: u64,
    /// Ops the checkpoint already holds.
    pub ops_skipped: u64,
    /// The first op that does not apply (or decode), where the replay stopped.
    pub failed: Option<FailedOp>,
    /// Ops of the valid prefix from the failed one on, not replayed.
    pub ops_not_replayed: u64,
    /// Volatile files removed after the replay, as every recovery does (not a problem).
    pub volatile_dropped: u64,
}

#[derive(Debug, Serialize)]
pub struct FailedOp {
    pub seq: u64,
    pub op: String,
    pub error: String,
}

#[derive(Debug, Default, Serialize)]
pub struct InvariantsReport {
    pub checked: bool,
    pub problems: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct FsCounts {
    pub inodes: u64,
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    pub other: u64,
    pub data_bytes: u64,
}

/// Set once a repair starts writing files: a failure after it may have changed the store.
static WRITING: AtomicBool = AtomicBool::new(false);
/// The message of a panic, kept by the hook for a clear error instead of a backtrace.
static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

/// Runs `rampart fsck`; prints the report (stdout) and returns the exit code: 0 clean (a torn
/// tail alone is clean), 1 problems left or an error.
pub fn run(store: &Path, repair: bool, json: bool) -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let message = panic_text(info.payload());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        *PANIC_MESSAGE.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{message}{at}"));
    }));
    let progress = Progress::new();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| fsck(store, repair, &progress)));
    progress.clear();
    let failure = match outcome {
        Ok(Ok(report)) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => outln!("{text}"),
                    Err(e) => {
                        eprintln!("rampart: cannot encode the report as JSON: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                out!("{}", render(&report, repair));
            }
            return if report.clean {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Ok(Err(message)) => message,
        Err(payload) => {
            let message = PANIC_MESSAGE
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_else(|| panic_text(&*payload));
            let state = if WRITING.load(Ordering::SeqCst) {
                "the repair had started writing: the store holds either its old state or the \
                 repaired one (files are replaced by rename); run `rampart fsck` again to see \
                 which"
            } else {
                "nothing in the store was changed"
            };
            format!(
                "internal error while checking {}: {message}; {state}. This is a bug in \
                 rampart: please report it with this message",
                store.display()
            )
        }
    };
    eprintln!("rampart: {failure}");
    if json {
        let out = serde_json::json!({
            "store": store.display().to_string(),
            "clean": false,
            "error": failure,
        });
        outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    }
    ExitCode::FAILURE
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// The progress bar: one bar whose prefix names the phase.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new() -> Progress {
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{prefix:>22} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress { bar }
    }

    /// A progress bar that draws nothing.
    #[cfg(test)]
    fn hidden() -> Progress {
        Progress {
            bar: ProgressBar::hidden(),
        }
    }

    fn phase(&self, n: u32, name: &str, len: u64, unit: &str) {
        self.bar.set_prefix(format!("[{n}/4] {name}"));
        self.bar.set_message(unit.to_string());
        self.bar.set_length(len);
        self.bar.set_position(0);
    }

    fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    fn done(&self) {
        if let Some(len) = self.bar.length() {
            self.bar.set_position(len);
        }
    }

    fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// "1 batch", "2 batches".
fn count_of(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn shown(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

/// A short description of an op, for reports (never its data).
fn describe_op(op: &Op<'_>) -> String {
    match *op {
        Op::Create {
            parent,
            name,
            ino,
            mode,
            ..
        } => {
            let kind = match FileKind::from_mode(mode) {
                Some(FileKind::RegularFile) => "file",
                Some(FileKind::Directory) => "directory",
                Some(FileKind::Symlink) => "symlink",
                Some(FileKind::NamedPipe) => "fifo",
                Some(FileKind::Socket) => "socket",
                Some(FileKind::CharDevice) => "character device",
                Some(FileKind::BlockDevice) => "block device",
                None => "inode of no valid type",
            };
            format!(
                "create {kind} {} (inode {ino}) in directory {parent}",
                shown(name)
            )
        }
        Op::Link {
            ino, parent, name, ..
        } => format!("link inode {ino} as {} in directory {parent}", shown(name)),
        Op::Unlink { parent, name, .. } => {
            format!("unlink {} from directory {parent}", shown(name))
        }
        Op::Rmdir { parent, name, .. } => {
            format!("rmdir {} from directory {parent}", shown(name))
        }
        Op::Rename {
            parent,
            name,
            new_parent,
            new_name,
            flags,
            ..
        } => format!(
            "rename {} in directory {parent} to {} in directory {new_parent} (flags {flags})",
            shown(name),
            shown(new_name)
        ),
        Op::Write {
            ino, offset, data, ..
        } => format!(
            "write of {} bytes at offset {offset} of inode {ino}",
            data.len()
        ),
        Op::SetAttr {
            ino,
            mode,
            uid,
            gid,
            size_bytes,
            atime_ns,
            mtime_ns,
            ..
        } => {
            let mut what = Vec::new();
            if let Some(mode) = mode {
                what.push(format!("mode {mode:o}"));
            }
            if let Some(uid) = uid {
                what.push(format!("uid {uid}"));
            }
            if let Some(gid) = gid {
                what.push(format!("gid {gid}"));
            }
            if let Some(size) = size_bytes {
                what.push(format!("size {size}"));
            }
            if atime_ns.is_some() {
                what.push("atime".into());
            }
            if mtime_ns.is_some() {
                what.push("mtime".into());
            }
            format!("setattr of inode {ino} ({})", what.join(", "))
        }
        Op::SetXattr { ino, name, .. } => format!("setxattr {} on inode {ino}", shown(name)),
        // The others carry no bulk data: their fields, shortened.
        ref other => {
            let mut text = format!("{other:?}");
            if text.len() > 200 {
                let mut cut = 200;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push('…');
            }
            text
        }
    }
}

/// What lies after the damage of a journal: (valid batches, their ops, the sequence number
/// after the last of them, the offset where the last of them ends). Looks past at most
/// `DAMAGE_SCAN_MAX` damaged regions.
fn count_after_damage(bytes: &[u8], store_id: [u8; 16], mut at: usize) -> (u64, u64, u64, u64) {
    // Each valid batch found after damage is scanned as the start of a journal of its own: a
    // header naming its first op is written just before it (in a copy; what was there has
    // been scanned already).
    let mut work = bytes.to_vec();
    let (mut batches, mut ops, mut next_seq) = (0u64, 0u64, 0u64);
    let mut end = at as u64;
    for _ in 0..DAMAGE_SCAN_MAX {
        if at < journal::HEADER_BYTES || at + journal::BATCH_HEADER_BYTES > work.len() {
            break;
        }
        let first_seq = u64::from_le_bytes(work[at + 12..at + 20].try_into().expect("8 bytes"));
        let header = journal::Header {
            store_id,
            base_seq: first_seq,
            created_ns: 0,
        };
        let start = at - journal::HEADER_BYTES;
        work[start..at].copy_from_slice(&header.encode());
        let Ok(scan) = journal::scan(&work[start..]) else {
            break;
        };
        batches += scan.batches.len() as u64;
        ops += scan.op_count();
        next_seq = next_seq.max(scan.next_seq());
        end = end.max((start as u64) + scan.valid_len);
        match scan.tail {
            Tail::Damaged {
                next_valid_offset, ..
            } if next_valid_offset as usize > journal::HEADER_BYTES => {
                at = start + next_valid_offset as usize;
            }
            _ => break,
        }
    }
    (batches, ops, next_seq, end)
}

/// Checks the store at `path` (and repairs it with `repair`). Err: the store could not be
/// examined at all (missing, mounted, unreadable), with a message that says what to do.
pub fn fsck(path: &Path, repair: bool, progress: &Progress) -> Result<Report, String> {
    let started = Instant::now();
    let mut r = Report {
        store: path.display().to_string(),
        ..Report::default()
    };
    let file = |name: &str| -> PathBuf { path.join(name) };

    // ---- 1. superblock and checkpoint --------------------------------------------------
    progress.phase(1, "checkpoint decode", 1, "bytes");
    let store = match Store::open(path) {
        Ok(store) => store,
        Err(e @ (StoreError::Corrupt(_) | StoreError::UnsupportedVersion { .. })) => {
            r.superblock.error = Some(e.to_string());
            r.problems.push(format!("superblock: {e}"));
            r.unrepairable = Some(match e {
                StoreError::UnsupportedVersion { .. } => {
                    "the store was made by a rampart of another format version: use a release \
                     that reads it"
                        .into()
                }
                _ => format!(
                    "the superblock {} is damaged; fsck does not rebuild it (it names the \
                     store): restore it from a backup",
                    file("superblock").display()
                ),
            });
            return Ok(finish(r, started));
        }
        Err(e) => return Err(e.to_string()),
    };
    let sb = *store.superblock();
    r.superblock = SuperblockReport {
        ok: true,
        format_version: Some(sb.format_version),
        store_id: Some(hex(&sb.store_id)),
        error: None,
    };
    let device = match DirDevice::open(path) {
        Ok(device) => device,
        Err(e) => {
            return Err(format!(
                "cannot open the store folder {}: {e}",
                path.display()
            ))
        }
    };
    // A store without a checkpoint starts from a root owned by whoever mounts it: its owner
    // (the folder is private to it), whoever runs fsck.
    let (root_uid, root_gid) = std::fs::metadata(path)
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or_else(|_| {
            (
                nix::unistd::getuid().as_raw(),
                nix::unistd::getgid().as_raw(),
            )
        });
    let config = EngineConfig {
        // Replay never fails for want of memory: every op fitted the cap when it was made.
        memory_cap_bytes: u64::MAX,
        root_uid,
        root_gid,
        root_mode: 0o755,
        ..EngineConfig::default()
    };
    let read = |name: &str| {
        device.read(name).map_err(|e| {
            format!(
                "cannot read {}: {e}; check that the store's files are readable (run fsck as \
                 the store's owner) and that the disk is healthy",
                file(name).display()
            )
        })
    };

    let checkpoint_path = file(CHECKPOINT_FILE).display().to_string();
    // The state to replay onto, and the first op it does not hold.
    let mut base: Option<(State, u64)> = None;
    match read(CHECKPOINT_FILE)? {
        None => base = Some((initial_state(&config), 0)),
        Some(bytes) => {
            r.checkpoint.present = true;
            r.checkpoint.bytes = bytes.len() as u64;
            progress.phase(1, "checkpoint decode", bytes.len() as u64, "bytes");
            match checkpoint::decode_for_repair(&bytes, &config) {
                Ok((state, header, problems)) => {
                    r.checkpoint.seq = Some(header.seq);
                    if header.store_id != sb.store_id {
                        let e = format!(
                            "checkpoint {checkpoint_path} belongs to another store (store id \
                             {}, the superblock's is {})",
                            hex(&header.store_id),
                            hex(&sb.store_id)
                        );
                        r.checkpoint.error = Some(e.clone());
                        r.problems.push(e);
                        r.unrepairable = Some(format!(
                            "{checkpoint_path} is another store's checkpoint; fsck does not \
                             guess which state is this store's: put the store's own \
                             checkpoint back, or restore the store from a backup"
                        ));
                    } else {
                        r.checkpoint.ok = problems.is_empty();
                        r.problems.extend(problems.iter().map(|p| {
                            format!("checkpoint {checkpoint_path} holds an inconsistency: {p}")
                        }));
                        r.checkpoint.problems = problems;
                        base = Some((state, header.seq));
                    }
                }
                Err(e) => {
                    r.checkpoint.error = Some(e.to_string());
                    r.problems.push(format!("{checkpoint_path}: {e}"));
                    r.unrepairable = Some(match &e {
                        CheckpointError::Version(_) => format!(
                            "{checkpoint_path} was written by a newer rampart: use that release"
                        ),
                        CheckpointError::Format(_) => format!(
                            "{checkpoint_path} is damaged and cannot be repaired: it is the \
                             only copy of the file system's state, and fsck does not guess at \
                             damaged data. Nothing was changed; restore the store from a \
                             backup"
                        ),
                        CheckpointError::Inconsistent(_) => format!(
                            "{checkpoint_path} has no root directory or repeats an inode \
                             number: fsck cannot rebuild a file system from it. Nothing was \
                             changed; restore the store from a backup"
                        ),
                    });
                }
            }
            progress.done();
        }
    }
    let from_seq = base.as_ref().map_or(0, |(_, seq)| *seq);

    // ---- 2. journal scan ------------------------------------------------------------------
    let journal_path = file(JOURNAL_FILE).display().to_string();
    let journal_bytes = read(JOURNAL_FILE)?;
    // The first sequence number a repaired checkpoint may use: past every op seen.
    let mut next_seq = from_seq;
    // What a repair does to the journal (beyond replacing it with an empty one).
    let mut journal_repair: Option<String> = None;
    let mut usable_scan = None;
    if let Some(bytes) = &journal_bytes {
        r.journal.present = true;
        r.journal.bytes = bytes.len() as u64;
        progress.phase(2, "journal scan", bytes.len() as u64, "bytes");
        match journal::scan(bytes) {
            Err(e @ JournalError::Version(_)) => {
                r.journal.error = Some(e.to_string());
                r.problems.push(format!("{journal_path}: {e}"));
                r.unrepairable.get_or_insert(format!(
                    "{journal_path} was written by a newer rampart: use that release"
                ));
            }
            Err(e) => {
                r.journal.error = Some(e.to_string());
                r.problems.push(format!(
                    "{journal_path}: {e}; none of its {} bytes can be replayed",
                    bytes.len()
                ));
                journal_repair = Some(format!(
                    "discarded the unreadable journal {journal_path} ({} bytes)",
                    bytes.len()
                ));
            }
            Ok(scan) => {
                r.journal.base_seq = Some(scan.header.base_seq);
                r.journal.batches = scan.batches.len() as u64;
                r.journal.ops = scan.op_count();
                r.journal.valid_bytes = scan.valid_len;
                r.journal.reserved_bytes = scan.reserved_bytes;
                r.journal.next_seq = Some(scan.next_seq());
                next_seq = next_seq.max(scan.next_seq());
                let mut usable = true;
                if scan.header.store_id != sb.store_id {
                    r.problems.push(format!(
                        "journal {journal_path} belongs to another store (store id {}, the \
                         superblock's is {}); none of it can be replayed",
                        hex(&scan.header.store_id),
                        hex(&sb.store_id)
                    ));
                    journal_repair = Some(format!(
                        "discarded {journal_path}: another store's journal ({} bytes)",
                        bytes.len()
                    ));
                    usable = false;
                } else if base.is_some() && scan.header.base_seq > from_seq {
                    let base_seq = scan.header.base_seq;
                    r.problems.push(if r.checkpoint.present {
                        format!(
                            "journal {journal_path} starts at op {base_seq} but the checkpoint \
                             {checkpoint_path} ends at op {from_seq}: the ops in between are \
                             missing (the checkpoint is older than the journal), so none of the \
                             journal's {} ops can be replayed",
                            scan.op_count()
                        )
                    } else {
                        format!(
                            "journal {journal_path} starts at op {base_seq}, but there is no \
                             checkpoint {checkpoint_path} holding the ops before it"
                        )
                    });
                    // Which file is wrong cannot be told from here: nothing is guessed.
                    r.unrepairable.get_or_insert(format!(
                        "the checkpoint that goes with the journal is missing: put it back \
                         (from a backup) as {checkpoint_path}; or, to {} and lose the \
                         journal's changes, move {journal_path} out of the store (the next \
                         mount starts a new one)",
                        if r.checkpoint.present {
                            "keep the checkpoint's state"
                        } else {
                            "start again from an empty file system"
                        }
                    ));
                    usable = false;
                }
                r.journal.tail = Some(match &scan.tail {
                    Tail::Clean => TailReport::Clean,
                    Tail::Torn {
                        offset,
                        bytes,
                        reason,
                    } => TailReport::Torn {
                        offset: *offset,
                        bytes: *bytes,
                        reason: reason.clone(),
                    },
                    Tail::Damaged {
                        offset,
                        reason,
                        next_valid_offset,
                    } => {
                        let (batches, ops, after_seq, valid_end) =
                            count_after_damage(bytes, sb.store_id, *next_valid_offset as usize);
                        next_seq = next_seq.max(after_seq);
                        // Everything but the reserved zeros at the end, which held nothing.
                        let content_end = journal::content_end(bytes) as u64;
                        let dropped_bytes = valid_end.max(content_end).max(*offset) - offset;
                        r.problems.push(format!(
                            "journal {journal_path} is damaged at byte {offset} ({reason}) \
                             with valid data after it (from byte {next_valid_offset}): the \
                             damaged batch and {batches} valid batches after it ({ops} ops, \
                             {dropped_bytes} bytes in all) cannot be replayed"
                        ));
                        if usable {
                            journal_repair = Some(format!(
                                "truncated the journal {journal_path} at the damage (byte \
                                 {offset}): dropped {dropped_bytes} bytes, the damaged batch \
                                 and {batches} batches after it ({ops} ops)"
                            ));
                        }
                        TailReport::Damaged {
                            offset: *offset,
                            reason: reason.clone(),
                            next_valid_offset: *next_valid_offset,
                            dropped_bytes,
                            dropped_batches: batches,
                            dropped_ops: ops,
                        }
                    }
                });
                r.journal.ok = usable && !matches!(scan.tail, Tail::Damaged { .. });
                if usable {
                    usable_scan = Some(scan);
                }
            }
        }
        progress.done();
    } else if r.checkpoint.present {
        // The journal is made before the first checkpoint and only ever replaced by rename:
        // it was deleted, and with it the changes after the checkpoint.
        r.problems.push(format!(
            "journal {journal_path} is missing, but the checkpoint {checkpoint_path} is there: \
             any changes made after the checkpoint are lost with it (restore the file to \
             keep them)"
        ));
        journal_repair = Some(format!(
            "accepted the loss of the missing journal {journal_path}"
        ));
    }

    // ---- 3. replay ----------------------------------------------------------------------
    if let (Some((state, from_seq)), Some(scan)) = (base.as_mut(), usable_scan.as_ref()) {
        let from_seq = *from_seq;
        progress.phase(3, "replay", scan.op_count(), "ops");
        r.replay.done = true;
        for batch in &scan.batches {
            r.replay.batches += 1;
            let mut failed = None;
            let (mut applied, mut skipped) = (0, 0);
            let decoded = batch.for_each_op(|seq, op| {
                progress.inc(1);
                if seq < from_seq {
                    skipped += 1;
                    return Ok(());
                }
                match state.apply(&op) {
                    Ok(()) => {
                        applied += 1;
                        Ok(())
                    }
                    Err(errno) => {
                        failed = Some(FailedOp {
                            seq,
                            op: describe_op(&op),
                            error: errno.to_string(),
                        });
                        Err(JournalError::Op {
                            seq,
                            error: DecodeError::BadValue("op does not apply"),
                        })
                    }
                }
            });
            r.replay.ops_applied += applied;
            r.replay.ops_skipped += skipped;
            if failed.is_none() {
                if let Err(e) = decoded {
                    let seq = match e {
                        JournalError::Op { seq, .. } => seq,
                        _ => batch.first_seq,
                    };
                    failed = Some(FailedOp {
                        seq,
                        op: "(undecodable op)".into(),
                        error: e.to_string(),
                    });
                }
            }
            if let Some(f) = failed {
                let rest = scan.next_seq().saturating_sub(f.seq);
                r.replay.ops_not_replayed = rest;
                r.problems.push(format!(
                    "journal op {} ({}) does not apply: {}; the replay stops there, so {rest} \
                     ops of {journal_path} (it and those after it) are not replayed",
                    f.seq, f.op, f.error
                ));
                r.replay.failed = Some(f);
                break;
            }
        }
        progress.done();
    }

    // ---- 4. invariants --------------------------------------------------------------------
    if let Some((state, _)) = base.as_mut() {
        progress.phase(4, "invariants", 1, "");
        // As recovery does: a restart removes volatile files.
        r.replay.volatile_dropped = after_replay(state);
        let problems = state.check();
        r.invariants.checked = true;
        // The checkpoint's own problems are listed already (they alone refuse a mount).
        let replayed = r.replay.ops_applied > 0 || r.replay.volatile_dropped > 0;
        let new: Vec<String> = problems
            .iter()
            .filter(|p| !r.checkpoint.problems.contains(p))
            .map(|p| {
                if replayed {
                    format!("after replaying the journal: {p}")
                } else {
                    p.clone()
                }
            })
            .collect();
        r.problems.extend(new);
        r.invariants.problems = problems;
        progress.done();
    }

    let clean = r.problems.is_empty();
    let Some((mut state, _)) = base else {
        return Ok(finish(r, started));
    };
    if clean || !repair || r.unrepairable.is_some() {
        r.clean = clean;
        r.filesystem = Some(counts(Engine::from_state(state)).0);
        return Ok(finish(r, started));
    }

    // ---- repair ---------------------------------------------------------------------------
    progress.phase(4, "repair", 1, "");
    if let Some(what) = journal_repair {
        r.repairs.push(what);
    }
    if let Some(f) = &r.replay.failed {
        r.repairs.push(format!(
            "stopped the replay at op {} ({}): dropped it and the {} ops after it",
            f.seq,
            f.op,
            r.replay.ops_not_replayed.saturating_sub(1)
        ));
    }
    r.repairs.extend(state.repair());
    let left = state.check();
    if !left.is_empty() {
        r.unrepairable = Some(format!(
            "the repair left {} problems (first: {}); nothing was written",
            left.len(),
            left[0]
        ));
        r.problems
            .extend(left.into_iter().map(|p| format!("after the repair: {p}")));
        r.filesystem = Some(counts(Engine::from_state(state)).0);
        return Ok(finish(r, started));
    }
    let (fs, engine) = counts(Engine::from_state(state));
    let image = engine
        .with_state(|s| checkpoint::encode(s, sb.store_id, next_seq, rampart_core::time::now_ns()));
    // The image must read back before it replaces anything.
    if let Err(e) = checkpoint::decode(&image, &config) {
        return Err(format!(
            "the repaired state does not read back as a checkpoint ({e}); nothing was \
             written to {}. This is a bug in rampart: please report it",
            path.display()
        ));
    }
    WRITING.store(true, Ordering::SeqCst);
    write_repaired(&device, path, sb.store_id, next_seq, &image)?;
    r.repairs.push(format!(
        "wrote a new checkpoint {checkpoint_path} ({} bytes, {} inodes, ops before {next_seq}) \
         and an empty journal {journal_path}",
        image.len(),
        fs.inodes
    ));
    r.filesystem = Some(fs);
    r.repaired = true;
    r.clean = true;
    drop(store);
    Ok(finish(r, started))
}

fn counts(engine: Engine) -> (FsCounts, Engine) {
    let s = engine.stats();
    let fs = FsCounts {
        inodes: s.files + s.directories + s.symlinks + s.other,
        files: s.files,
        directories: s.directories,
        symlinks: s.symlinks,
        other: s.other,
        data_bytes: s.data_bytes,
    };
    (fs, engine)
}

/// Replaces the checkpoint, then the journal, each by writing a temporary file, syncing it and
/// renaming it over the old one (as the daemon's checkpoints do): a crash in between leaves
/// the new checkpoint with the old journal, whose readable ops it already covers.
fn write_repaired(
    device: &DirDevice,
    path: &Path,
    store_id: [u8; 16],
    seq: u64,
    image: &[u8],
) -> Result<(), String> {
    let fail = |name: &str, e: std::io::Error| {
        format!(
            "writing {} failed: {e}; the store keeps its old state (or, if the checkpoint was \
             already replaced, the repaired one); free space or fix the disk and run `rampart \
             fsck --repair {}` again",
            path.join(name).display(),
            path.display()
        )
    };
    device
        .write(CHECKPOINT_TMP, image)
        .map_err(|e| fail(CHECKPOINT_TMP, e))?;
    device
        .sync(CHECKPOINT_TMP)
        .map_err(|e| fail(CHECKPOINT_TMP, e))?;
    device
        .rename(CHECKPOINT_TMP, CHECKPOINT_FILE)
        .map_err(|e| fail(CHECKPOINT_FILE, e))?;
    let header = journal::Header {
        store_id,
        base_seq: seq,
        created_ns: rampart_core::time::now_ns(),
    }
    .encode();
    device
        .write(JOURNAL_TMP, &header)
        .map_err(|e| fail(JOURNAL_TMP, e))?;
    device.sync(JOURNAL_TMP).map_err(|e| fail(JOURNAL_TMP, e))?;
    device
        .rename(JOURNAL_TMP, JOURNAL_FILE)
        .map_err(|e| fail(JOURNAL_FILE, e))?;
    Ok(())
}

fn finish(mut r: Report, started: Instant) -> Report {
    r.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    r
}

/// The report as text: one line per phase, then the problems, the repairs and the verdict.
pub fn render(r: &Report, repair: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut line = |label: &str, text: String| {
        let _ = writeln!(out, "  {label:<11} {text}");
    };
    let mut head = format!("rampart fsck {}\n", r.store);
    // Superblock.
    let sb = match (&r.superblock.error, r.superblock.format_version) {
        (Some(e), _) => format!("DAMAGED: {e}"),
        (None, Some(v)) => format!(
            "ok (format version {v}, store {})",
            r.superblock.store_id.as_deref().unwrap_or("?")
        ),
        (None, None) => "not read".into(),
    };
    line("superblock", sb);
    if r.superblock.ok {
        // Checkpoint.
        let c = &r.checkpoint;
        let text = if !c.present {
            "none (the journal is replayed onto an empty file system)".into()
        } else if let Some(e) = &c.error {
            format!("BAD ({} bytes): {e}", c.bytes)
        } else {
            let seq = c.seq.map_or(String::new(), |s| format!(", ops before {s}"));
            if c.problems.is_empty() {
                format!("ok ({} bytes{seq})", c.bytes)
            } else {
                format!(
                    "INCONSISTENT ({} bytes{seq}): {} problems",
                    c.bytes,
                    c.problems.len()
                )
            }
        };
        line("checkpoint", text);
        // Journal.
        let j = &r.journal;
        let text = if !j.present {
            "none".into()
        } else if let Some(e) = &j.error {
            format!("BAD ({} bytes): {e}", j.bytes)
        } else {
            let ops = match (j.base_seq, j.next_seq) {
                (Some(a), Some(b)) if b > a => format!(" (ops {a}..{b})"),
                _ => String::new(),
            };
            let tail = match &j.tail {
                None | Some(TailReport::Clean) if j.reserved_bytes > 0 => format!(
                    "tail clean, then {} bytes of zeros reserved ahead",
                    j.reserved_bytes
                ),
                None | Some(TailReport::Clean) => "tail clean".into(),
                Some(TailReport::Torn {
                    offset,
                    bytes,
                    reason,
                }) => format!(
                    "torn tail of {bytes} bytes at byte {offset} ({reason}): an unsynced \
                     write cut by a crash, never acknowledged as durable; benign, the next \
                     mount drops it"
                ),
                Some(TailReport::Damaged {
                    offset,
                    reason,
                    next_valid_offset,
                    dropped_bytes,
                    dropped_batches,
                    dropped_ops,
                }) => format!(
                    "DAMAGED at byte {offset} ({reason}), valid batches follow from byte \
                     {next_valid_offset}: {dropped_bytes} bytes ({dropped_batches} batches, \
                     {dropped_ops} ops) after the damage cannot be replayed"
                ),
            };
            if j.batches == 0 && j.bytes == j.valid_bytes + j.reserved_bytes {
                format!(
                    "empty ({} bytes: its header{}); nothing to replay",
                    j.bytes,
                    if j.reserved_bytes > 0 {
                        " and reserved zeros"
                    } else {
                        ""
                    }
                )
            } else {
                format!(
                    "{}, {}, {} of {} bytes valid{ops}; {tail}",
                    count_of(j.batches, "batch", "batches"),
                    count_of(j.ops, "op", "ops"),
                    j.valid_bytes,
                    j.bytes
                )
            }
        };
        line("journal", text);
        // Replay.
        let p = &r.replay;
        let text = if !p.done {
            "not run".into()
        } else {
            let mut skipped = if p.ops_skipped > 0 {
                format!(", {} already in the checkpoint", p.ops_skipped)
            } else {
                String::new()
            };
            if p.volatile_dropped > 0 {
                skipped.push_str(&format!(
                    "; {} volatile files removed, as at every mount",
                    p.volatile_dropped
                ));
            }
            match &p.failed {
                None => format!(
                    "ok: {} applied from {}{skipped}",
                    count_of(p.ops_applied, "op", "ops"),
                    count_of(p.batches, "batch", "batches")
                ),
                Some(f) => format!(
                    "STOPPED at op {} ({}): {}; {} ops applied before it{skipped}, {} not \
                     replayed",
                    f.seq, f.op, f.error, p.ops_applied, p.ops_not_replayed
                ),
            }
        };
        line("replay", text);
        // Invariants.
        let i = &r.invariants;
        let text = if !i.checked {
            "not checked".into()
        } else if i.problems.is_empty() {
            "ok: link counts, reachability, directory structure, accounting".into()
        } else {
            format!("{} PROBLEMS", i.problems.len())
        };
        line("invariants", text);
        if let Some(fs) = &r.filesystem {
            let partial = if r.journal.present && !r.replay.done && !r.repaired {
                " (without the journal's changes)"
            } else {
                ""
            };
            line(
                if r.repaired { "repaired" } else { "contents" },
                format!(
                    "{} inodes: {} files, {} directories, {} symlinks, {} other; {} bytes of \
                     file data{partial}",
                    fs.inodes, fs.files, fs.directories, fs.symlinks, fs.other, fs.data_bytes
                ),
            );
        }
    }
    head.push_str(&out);
    let mut out = head;
    if !r.problems.is_empty() {
        let _ = writeln!(out, "problems ({}):", r.problems.len());
        for p in &r.problems {
            let _ = writeln!(out, "  - {p}");
        }
    }
    if !r.repairs.is_empty() {
        let _ = writeln!(out, "repairs ({}):", r.repairs.len());
        for p in &r.repairs {
            let _ = writeln!(out, "  - {p}");
        }
    }
    let ms = r.duration_ms;
    let verdict = if r.repaired {
        format!("repaired: the store is clean now ({ms:.1} ms)")
    } else if r.clean {
        format!("clean ({ms:.1} ms)")
    } else if let Some(why) = &r.unrepairable {
        format!(
            "NOT CLEAN: {}; not repairable: {why}",
            count_of(r.problems.len() as u64, "problem", "problems")
        )
    } else if repair {
        format!(
            "NOT CLEAN: {}",
            count_of(r.problems.len() as u64, "problem", "problems")
        )
    } else {
        format!(
            "NOT CLEAN: {}; `rampart fsck --repair {}` repairs them{}",
            count_of(r.problems.len() as u64, "problem", "problems"),
            r.store,
            match (&r.journal.tail, &r.replay.failed) {
                (Some(TailReport::Damaged { dropped_ops, .. }), _) => format!(
                    ", dropping the journal from the damage on (the damaged batch and {dropped_ops} \
                     ops after it)"
                ),
                (_, Some(f)) => format!(
                    ", dropping the journal's ops from op {} on ({} ops)",
                    f.seq, r.replay.ops_not_replayed
                ),
                _ => String::new(),
            }
        )
    };
    let _ = writeln!(out, "{verdict}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rampart_core::persist::persister::PersistConfig;
    use rampart_core::{Ctx, ROOT_INO};
    use std::sync::Arc;

    /// A new store in a fresh temporary folder.
    fn temp_store(name: &str) -> PathBuf {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rampart-fsck-test-{}-{}-{name}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        rampart_core::store::mkfs(&dir).expect("mkfs");
        dir
    }

    /// Writes `files` through a mounted-like engine, one journal batch per file (a sync after
    /// each), then stops without a checkpoint, as a crash would (or with one, as a clean
    /// unmount does). Returns the journal's length after each file.
    fn written(path: &Path, files: &[(&[u8], &[u8])], unmount: bool) -> Vec<u64> {
        let store = Store::open(path).expect("open");
        let device: Arc<dyn Device> = Arc::new(DirDevice::open(path).expect("store folder"));
        let config = EngineConfig::default();
        let (engine, persister, _) = rampart_core::persist::open(
            device.clone(),
            store.superblock().store_id,
            &config,
            PersistConfig::default(),
        )
        .expect("persist::open");
        let c = Ctx::library(0, 0);
        let mut ends = Vec::new();
        for (name, data) in files {
            let f = engine
                .mknod(&c, ROOT_INO, name, libc::S_IFREG | 0o644, 0)
                .expect("mknod");
            engine.write(&c, f.ino, 0, data, false).expect("write");
            persister.sync().expect("sync");
            ends.push(persister.stats().journal_bytes);
        }
        if unmount {
            persister.shutdown(&engine).expect("checkpoint");
        }
        engine.set_sink(None);
        ends
    }

    fn crashed_with(path: &Path, files: &[(&[u8], &[u8])]) -> Vec<u64> {
        written(path, files, false)
    }

    fn check(path: &Path, repair: bool) -> Report {
        fsck(path, repair, &Progress::hidden()).expect("fsck")
    }

    const FILES: [(&[u8], &[u8]); 3] = [(b"a", b"first"), (b"b", b"second"), (b"c", b"third")];

    #[test]
    fn a_crashed_store_replays_clean() {
        let path = temp_store("crashed");
        crashed_with(&path, &FILES);
        let r = check(&path, false);
        assert!(r.clean, "{:?}", r.problems);
        assert_eq!(r.journal.batches, 3);
        assert_eq!(r.replay.ops_applied, r.journal.ops);
        assert_eq!(r.filesystem.as_ref().unwrap().files, 3);
        assert!(render(&r, false).ends_with("ms)\n"));
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_damaged_journal_is_cut_at_the_damage_and_then_clean() {
        let path = temp_store("damaged");
        let ends = crashed_with(&path, &FILES);
        let journal = path.join(JOURNAL_FILE);
        let mut bytes = std::fs::read(&journal).unwrap();
        let damage = ends[0] as usize + journal::BATCH_HEADER_BYTES + 1;
        bytes[damage] ^= 0x10;
        std::fs::write(&journal, &bytes).unwrap();
        let r = check(&path, false);
        assert!(!r.clean);
        match &r.journal.tail {
            Some(TailReport::Damaged {
                offset,
                dropped_batches,
                dropped_bytes,
                ..
            }) => {
                assert_eq!(*offset, ends[0]);
                assert_eq!(*dropped_batches, 1);
                assert_eq!(*dropped_bytes, ends[2] - ends[0]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            std::fs::read(&journal).unwrap(),
            bytes,
            "changed without --repair"
        );
        let r = check(&path, true);
        assert!(r.repaired && r.clean, "{:?}", r.unrepairable);
        assert_eq!(r.filesystem.as_ref().unwrap().files, 1);
        let again = check(&path, false);
        assert!(again.clean, "{:?}", again.problems);
        assert_eq!(again.journal.bytes, journal::HEADER_BYTES as u64);
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_damaged_checkpoint_is_never_rewritten() {
        let path = temp_store("checkpoint");
        written(&path, &FILES, true);
        assert!(check(&path, false).clean);
        let file = path.join(CHECKPOINT_FILE);
        let mut bytes = std::fs::read(&file).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        std::fs::write(&file, &bytes).unwrap();
        let r = check(&path, true);
        assert!(!r.clean && !r.repaired);
        assert!(r.unrepairable.unwrap().contains("cannot be repaired"));
        assert_eq!(std::fs::read(&file).unwrap(), bytes);
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn counts_what_follows_several_damages() {
        let id = [5; 16];
        let mut bytes = journal::Header {
            store_id: id,
            base_seq: 10,
            created_ns: 0,
        }
        .encode()
        .to_vec();
        let mut builder = journal::BatchBuilder::new(10);
        let mut starts = Vec::new();
        for i in 0..5u8 {
            for _ in 0..=i {
                builder.add(
                    &Op::Unlink {
                        parent: 1,
                        name: b"x",
                        time_ns: 1,
                    },
                    1,
                );
            }
            starts.push(bytes.len());
            bytes.extend(builder.take_batch().unwrap());
        }
        // damage batches 1 and 3: batches 2 and 4 (3 + 5 ops) are valid after the first damage
        bytes[starts[1] + journal::BATCH_HEADER_BYTES] ^= 1;
        bytes[starts[3] + journal::BATCH_HEADER_BYTES] ^= 1;
        let scan = journal::scan(&bytes).unwrap();
        let Tail::Damaged {
            next_valid_offset, ..
        } = scan.tail
        else {
            panic!("{:?}", scan.tail)
        };
        assert_eq!(next_valid_offset as usize, starts[2]);
        let (batches, ops, next_seq, end) = count_after_damage(&bytes, id, starts[2]);
        assert_eq!((batches, ops, next_seq), (2, 8, 10 + 15));
        assert_eq!(end, bytes.len() as u64); // the last valid batch ends the journal
    }

    #[test]
    fn ops_are_described_without_their_data() {
        let write = Op::Write {
            ino: 7,
            offset: 4096,
            data: &[0u8; 100_000],
            time_ns: 0,
            kill_suidgid: false,
        };
        assert_eq!(
            describe_op(&write),
            "write of 100000 bytes at offset 4096 of inode 7"
        );
        let rename = Op::Rename {
            parent: 1,
            name: b"a",
            new_parent: 2,
            new_name: b"b",
            flags: 0,
            time_ns: 0,
        };
        assert!(describe_op(&rename).contains("\"a\" in directory 1 to \"b\" in directory 2"));
    }
}

//! What `rampart fsck` found and did: the report it prints as text or as JSON.

use serde::Serialize;

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
    /// The backup pair, `checkpoint.prev` and `journal.prev` (decision 0123).
    pub backup: BackupReport,
    pub replay: ReplayReport,
    pub invariants: InvariantsReport,
    /// The data folder of the disk tier against the files that use it.
    pub data: DataFolderReport,
    /// The file system after replay (and repair), if it could be built.
    pub filesystem: Option<FsCounts>,
    /// Everything found wrong, in the order of the phases.
    pub problems: Vec<String>,
    /// What is worth knowing but leaves the store clean (a backup pair that cannot be used).
    pub warnings: Vec<String>,
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
    /// It does not decode or breaks invariants (not: another store's, a newer rampart's):
    /// the backup pair may stand in for it.
    #[serde(skip)]
    pub damaged: bool,
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
    /// The journal ends inside a batch or right after one without its zeros: cut short, so
    /// durable batches after it may be gone (decision 0038).
    Cut {
        offset: u64,
        reason: String,
        /// The bytes after the valid prefix (the cut batch).
        dropped_bytes: u64,
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
pub struct BackupReport {
    /// `checkpoint.prev` is there.
    pub present: bool,
    /// The chain `checkpoint.prev`, `journal.prev`, `journal` rebuilds the state.
    pub usable: bool,
    /// It stood in for the checkpoint, which is damaged or missing.
    pub used: bool,
    /// Why it cannot be used.
    pub error: Option<String>,
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
    /// Files deleted while the disk was full, whose host files were freed (decision 0119):
    /// dropped as every recovery does (not a problem).
    pub freed_dropped: u64,
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

/// What the data folder (`data/`) holds against the disk-tier files.
#[derive(Debug, Default, Serialize)]
pub struct DataFolderReport {
    pub checked: bool,
    /// Disk-tier files, and the bytes their sizes cover.
    pub files: u64,
    pub bytes: u64,
    /// Host files no file uses (left by a crash between an unlink and the removal): the next
    /// mount removes them, as `--repair` does (which links them into /lost+found instead
    /// when it drops journal changes). Benign.
    pub orphans: Vec<String>,
    /// Entries of the data folder whose names rampart does not make: left alone (and
    /// reported), never removed.
    pub foreign: Vec<String>,
    /// Host files longer than their file (a write whose op never committed): the next mount
    /// trims them, as `--repair` does. Benign.
    pub long: Vec<String>,
    /// Host files that are missing: their files' bytes are lost (a problem).
    pub missing: Vec<String>,
    /// Host files shorter than their file: the bytes past their end are lost (a problem).
    pub short: Vec<String>,
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

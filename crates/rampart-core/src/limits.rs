//! Every limit of the engine in one place, with units in the names and their relations
//! checked at compile time (TigerBeetle's constants.zig). A limit that a format depends on is
//! part of that format (docs/FORMAT.md): changing it needs a version.

/// Longest name of a directory entry, in bytes (NAME_MAX).
pub const NAME_BYTES_MAX: usize = 255;

/// The deepest path a filename rule is matched against; deeper files match name rules only.
pub const RULE_PATH_DEPTH_MAX: usize = 256;

/// Paths of directories remembered for filename rules that match paths (`engine`'s
/// `DirPaths`); past it the memory is cleared and refilled.
pub const RULE_DIR_PATHS_MAX: usize = 4096;

/// Longest symlink target, in bytes (PATH_MAX without its NUL).
pub const SYMLINK_TARGET_BYTES_MAX: usize = 4095;

/// Most links to one inode (and subdirectories of one directory).
pub const LINK_COUNT_MAX: u32 = u32::MAX / 2;

/// Block size reported by statfs and stat, in bytes.
pub const BLOCK_SIZE_BYTES: u32 = 4096;

/// Bytes charged to the memory budget for one directory entry besides its name.
pub const ENTRY_COST_BYTES: u64 = 24;

/// relatime: an access time older than this is refreshed on read.
pub const RELATIME_INTERVAL_NS: i64 = 24 * 3600 * 1_000_000_000;

/// Threads of a FUSE mount that read disk-tier files whose bytes are not in the host's page
/// cache (started as needed): that many cold reads wait for the disk at once, as that many
/// threads of a program would on the host file system (fio's 32 at most; decision 0073).
pub const DISK_READ_THREADS_MAX: usize = 32;

/// Cold reads waiting for one of those threads; past it the FUSE thread reads itself.
pub const DISK_READS_QUEUED_MAX: usize = 64;

/// Persistence levels of the hierarchy (LCM, DA1, DA2): the most a chain can hold.
pub const LEVELS_MAX: usize = 3;

/// How many path components `lookup_path` follows at most (deeper paths are refused with
/// ENAMETOOLONG, as PATH_MAX bounds them for the kernel).
pub const PATH_DEPTH_MAX: usize = 4096 / 2;

/// Longest path the library's path API (`fs`) accepts, in bytes (PATH_MAX without its NUL).
pub const PATH_BYTES_MAX: usize = 4095;

/// How many symlinks the library's path API follows while resolving one path (Linux's
/// MAXSYMLINKS); one more fails with ELOOP.
pub const SYMLINK_FOLLOWS_MAX: usize = 40;

/// How many resolved directories one `fs::Fs` remembers by path (all are forgotten when full,
/// and whenever a rename or rmdir may have moved one): at most this many keys of at most
/// `PATH_BYTES_MAX` bytes.
pub const LIBRARY_DIR_CACHE_ENTRIES_MAX: usize = 1024;

// Moved here from the modules that use them (each re-exports its own).

/// Longest attribute name, in bytes, including the namespace prefix (XATTR_NAME_MAX).
pub const XATTR_NAME_BYTES_MAX: usize = 255;

/// Most host files whose failed sync waits for its file's next fsync (persister
/// `SyncErrors`); past it every disk-tier fsync answers EIO.
pub const HOST_SYNC_ERRORS_MAX: usize = 4096;

/// Largest attribute value, in bytes (XATTR_SIZE_MAX).
pub const XATTR_VALUE_BYTES_MAX: usize = 64 * 1024;

/// Largest name list, in bytes (XATTR_LIST_MAX): listxattr must fit its answer in it.
pub const XATTR_LIST_BYTES_MAX: usize = 64 * 1024;

/// Most bytes of names and values on one inode.
pub const XATTR_INODE_BYTES_MAX: usize = 256 * 1024;

/// Zeros the writer keeps reserved ahead of the journal's end: when a commit would run past
/// them, it writes this many more after its batch (one commit in about 500 of 4 KiB writes).
pub const JOURNAL_RESERVE_BYTES: usize = 2 << 20;

/// Fewest zeros the daemon keeps after the journal's last synced batch (and after the last
/// batch it writes, before that write's sync): a journal that ends with fewer was cut short,
/// not torn by a crash (decision 0038).
pub const JOURNAL_ZEROS_AHEAD_BYTES_MIN: usize = 4096;
/// A commit whose batch is at most this long writes the journal's room ahead as zeros when it
/// runs past it (its fdatasync then has no file-system metadata to write); a larger one
/// allocates the room (fallocate): a batch written over zeros is written twice, and for a
/// large batch that costs more than the metadata (decision 0093).
pub const JOURNAL_ZEROS_WRITTEN_BATCH_BYTES_MAX: usize = 64 << 10;

/// A committed journal batch at least this long is dropped from the host's page cache once
/// synced (`Device::drop_cached`, decision 0131); smaller ones (fsync-driven commits) are
/// not worth the system call.
pub const JOURNAL_CACHE_DROPPED_BATCH_BYTES_MIN: usize = 1 << 20;

/// Least room the daemon keeps for a checkpoint in the store's `reserve` file (it keeps as
/// much as the last checkpoint, when that is more), given up to write the checkpoint that
/// frees a full disk (decision 0036).
pub const STORE_RESERVE_BYTES_MIN: u64 = 8 << 20;

/// How long the journal may grow, in bytes, while a burst of writes defers a checkpoint that
/// is due (`PersistConfig::checkpoint_deferred_journal_bytes`, decision 0130): PostgreSQL's
/// default `max_wal_size`. Recovery reads and replays at most this much journal (or the last
/// image's size, when that is more, as without the deferral).
pub const CHECKPOINT_DEFERRED_JOURNAL_BYTES: u64 = 1 << 30;

/// Most room kept in the `reserve` file, however large the last checkpoint.
pub const STORE_RESERVE_BYTES_MAX: u64 = 4 << 30;

/// Most capacity each of the journal's two batch buffers (the open batch, the one being
/// written) keeps between batches while writes go on, in bytes: a batch grows past
/// `COMMIT_EARLY_BODY_BYTES` (more while the committer is busy) before the committer takes
/// it, and a buffer trimmed below that faulted its pages in again at every batch (decision
/// 0114). An idle store gives them
/// back (`BatchBuilder::release_idle`).
pub const BATCH_BUFFER_KEPT_BYTES_MAX: usize = 48 << 20;

/// Most empty batch buffers kept for the next batches: the open batch takes one when it is
/// sealed; when writers outrun the committer several batches wait, one buffer each.
pub const BATCH_BUFFERS_SPARE_MAX: usize = 2;

/// Bytes gathered after which the committer is asked to commit before its deadline. The
/// batch buffers settle at about this size (each keeps at most twice what it held): a bound
/// of a quarter of `BATCH_BODY_BYTES_MAX` (16 MiB) made every byte of the first ~50 MiB a busy
/// store journaled land in a page faulted in for it, on the writer's thread (decision 0128).
pub const COMMIT_EARLY_BODY_BYTES: usize = 4 << 20;

/// Largest batch body; a batch holding more ops is cut in two by the writer.
pub const BATCH_BODY_BYTES_MAX: usize = 64 << 20;

/// Most batches after the journal's valid prefix zeroed one by one, last first, at start
/// (`persister::journal_tail`, decision 0103): what is left of a group of records cut short
/// is flagged batches of nearly 48 MiB each, so this covers any group the memory tier can
/// hold; what lies past them (only after a repair of damage) is zeroed with the rest of the
/// tail in one write.
pub const JOURNAL_TAIL_BATCHES_ZEROED_MAX: usize = 4096;

/// Largest data of one `Write` record, in bytes.
pub const WRITE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Longest varint, in bytes (10 × 7 bits ≥ 64 bits).
pub const VARINT_BYTES_MAX: usize = 10;

/// The longest file name a device accepts, in bytes (NAME_MAX of Linux file systems).
pub const DEVICE_NAME_BYTES_MAX: usize = 255;

/// The default large-file threshold (Conquest's 1 MiB): a regular file larger than this moves
/// to the disk tier (docs/decisions/0060).
pub const LARGE_FILE_THRESHOLD_BYTES_DEFAULT: u64 = 1 << 20;
/// The smallest threshold that can be set.
pub const LARGE_FILE_THRESHOLD_BYTES_MIN: u64 = 4096;
/// The smallest file memory pressure moves to the disk tier, by default.
pub const EVICT_MIN_SIZE_BYTES_DEFAULT: u64 = 64 << 10;
/// Files memory pressure considers moving to the disk tier at once, coldest first.
pub const EVICT_CANDIDATES_MAX: usize = 4096;
/// Memory freed by memory pressure beyond what the change that met the cap needs.
pub const EVICT_SLACK_BYTES: u64 = 4 << 20;
/// Host files removed after a commit at most at once (the rest wait for the next).
pub const HOST_REMOVALS_PENDING_MAX: usize = 4096;
/// Stripes of the per-inode host-file locks (writes and trims of one disk-tier file).
pub const HOST_FILE_LOCK_STRIPES: usize = 64;
/// Bytes copied per read or write while a file migrates between tiers.
pub const MIGRATION_PIECE_BYTES: usize = 1 << 20;

/// How many open files `persist::device::DirDevice` keeps cached at most.
pub const CACHED_FILES_MAX: usize = 16;

/// Bytes covered by one chunk.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Largest file size, in bytes: 2^44 (16 TiB), which keeps the chunk table of a sparse file
/// under 6 GiB even at its worst; the memory cap stops it far earlier.
pub const FILE_SIZE_BYTES_MAX: u64 = 1 << 44;

/// Most entries of one directory (keeps slot indices in a `u32`).
pub const DIR_ENTRIES_MAX: usize = (u32::MAX - 1) as usize;

/// Most bytes of names one directory holds (name offsets are `u32`s).
pub const DIR_NAMES_BYTES_MAX: usize = u32::MAX as usize;

/// Most inodes of one file system (the table is indexed by `u32`-sized numbers).
pub const INODES_MAX: u64 = u32::MAX as u64;

/// At most this much of a checkpoint image's buffer is touched before the writers' pause.
pub const IMAGE_PREFAULT_BYTES_MAX: u64 = 16 << 30;

/// Longest a mount (or fsck) waits for the store's lock while the daemon holding it has died
/// but is still exiting (the kernel releases a dead process's files, an io_uring ring's among
/// them, a moment after its leader becomes a zombie).
pub const LOCK_WAIT_EXITING_MS_MAX: u64 = 10_000;

/// Longest a mount (or fsck) waits for the store's lock while the daemon holding it has been
/// unmounted and is writing its final checkpoint (decision 0135); a store's image is written
/// at disk speed, so this allows some gigabytes on a slow disk.
pub const LOCK_WAIT_UNMOUNTED_MS_MAX: u64 = 120_000;

// Relations between limits, checked at compile time.
const _: () = assert!(CHUNK_BYTES.is_power_of_two());
const _: () = assert!(
    FILE_SIZE_BYTES_MAX.is_multiple_of(CHUNK_BYTES as u64),
    "whole chunks"
);
const _: () = assert!(
    WRITE_BYTES_MAX + 64 <= BATCH_BODY_BYTES_MAX,
    "a batch holds the largest write record with its fields"
);
const _: () = assert!(XATTR_VALUE_BYTES_MAX + XATTR_NAME_BYTES_MAX <= XATTR_INODE_BYTES_MAX);
const _: () = assert!(
    XATTR_NAME_BYTES_MAX < XATTR_LIST_BYTES_MAX,
    "one name fits a list"
);
const _: () = assert!(
    DIR_ENTRIES_MAX < u32::MAX as usize,
    "slot indices fit a u32 with a sentinel"
);
const _: () = assert!(INODES_MAX <= u32::MAX as u64);
const _: () = assert!(VARINT_BYTES_MAX * 7 >= 64, "a varint holds any u64");
const _: () = assert!(
    JOURNAL_RESERVE_BYTES.is_multiple_of(4096),
    "the reserve is whole pages"
);
const _: () = assert!(
    JOURNAL_ZEROS_AHEAD_BYTES_MIN < JOURNAL_RESERVE_BYTES,
    "a reserve leaves room for batches before the zeros that must stay"
);
const _: () = assert!(NAME_BYTES_MAX <= DEVICE_NAME_BYTES_MAX);
const _: () = assert!(BATCH_BUFFER_KEPT_BYTES_MAX <= BATCH_BODY_BYTES_MAX);
const _: () = assert!(
    COMMIT_EARLY_BODY_BYTES <= BATCH_BODY_BYTES_MAX / 4,
    "a commit is asked for well before a batch is sealed"
);
const _: () = assert!(
    NAME_BYTES_MAX <= u8::MAX as usize,
    "names are measured in a byte"
);
const _: () = assert!(
    SYMLINK_TARGET_BYTES_MAX < 4096,
    "a target fits PATH_MAX with its NUL"
);
const _: () = assert!(BLOCK_SIZE_BYTES.is_power_of_two());
const _: () = assert!(
    LINK_COUNT_MAX < u32::MAX,
    "a link count can grow by one unchecked"
);

/// Category names the per-category counters tell apart (`category::counts`): built-in and
/// user-defined categories and raw specs. Names past this many are counted together under
/// `category::counts::OTHER_NAME`, so a program setting endless raw specs cannot grow them.
pub const CATEGORY_SLOTS_MAX: usize = 256;

/// Inodes whose not-yet-durable changes the persister tracks one by one (for `rampart stat`);
/// when this many are gathered, the committer commits at once (like `HOST_REMOVALS_PENDING_MAX`).
pub const AT_RISK_INODES_MAX: usize = 65_536;

/// Files the archiver holds out of the store until their deadline (`engine::archiver`,
/// decision 0090); when one more is created, the one due first is made present early.
pub const HELD_FILES_MAX: usize = 65_536;

/// Held files the archiver makes present in one mutation (one hold of the engine's lock),
/// and their bytes (past it, no more files are added): more due at once are made present in
/// several, one per commit when the committer does it.
pub const HELD_PRESENT_PER_MUTATION_MAX: usize = 256;
pub const HELD_PRESENT_BYTES_PER_MUTATION_MAX: u64 = 16 << 20;

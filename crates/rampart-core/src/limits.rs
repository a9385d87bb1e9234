//! Every limit of the engine in one place, with units in the names and their relations
//! checked at compile time (TigerBeetle's constants.zig). A limit that a format depends on is
//! part of that format (docs/FORMAT.md): changing it needs a version.

/// Longest name of a directory entry, in bytes (NAME_MAX).
pub const NAME_LEN_MAX: usize = 255;

/// Longest symlink target, in bytes (PATH_MAX without its NUL).
pub const SYMLINK_TARGET_LEN_MAX: usize = 4095;

/// Most links to one inode (and subdirectories of one directory).
pub const LINK_COUNT_MAX: u32 = u32::MAX / 2;

/// Block size reported by statfs and stat, in bytes.
pub const BLOCK_SIZE_BYTES: u32 = 4096;

/// Bytes charged to the memory budget for one directory entry besides its name.
pub const ENTRY_COST_BYTES: u64 = 24;

/// relatime: an access time older than this is refreshed on read.
pub const RELATIME_INTERVAL_NS: i64 = 24 * 3600 * 1_000_000_000;

/// Persistence levels of the hierarchy (LCM, DA1, DA2): the most a chain can hold.
pub const LEVELS_MAX: usize = 3;

/// How many path components `lookup_path` follows at most (deeper paths are refused with
/// ENAMETOOLONG, as PATH_MAX bounds them for the kernel).
pub const PATH_DEPTH_MAX: usize = 4096 / 2;

const _: () = assert!(
    NAME_LEN_MAX <= u8::MAX as usize,
    "names are measured in a byte"
);
const _: () = assert!(
    SYMLINK_TARGET_LEN_MAX < 4096,
    "a target fits PATH_MAX with its NUL"
);
const _: () = assert!(BLOCK_SIZE_BYTES.is_power_of_two());
const _: () = assert!(
    LINK_COUNT_MAX < u32::MAX,
    "a link count can grow by one unchecked"
);

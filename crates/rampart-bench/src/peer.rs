//! The file systems under test ("peers") — set up fresh, remounted, measured and torn down.
//! (Interface fixed; the implementation is being written.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::cmd::Cancel;
use crate::error::{BenchError, Result};
use crate::profile::Profile;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeerKind {
    /// `mount -t tmpfs`: volatile, the ramfs bound of Conquest.
    Tmpfs,
    /// ext4 on a loop device over a file in /dev/shm.
    Ext4Ram,
    /// XFS on a loop device over a file in /dev/shm.
    XfsRam,
    /// btrfs with zstd compression on a loop device over a file in /dev/shm.
    BtrfsRam,
    /// ext4 on a loop device over a file on the real disk.
    Ext4Disk,
    /// fuse-overlayfs over tmpfs: the userspace (FUSE) baseline.
    FuseOverlay,
    /// rampart, its store on the real disk, default persistence (within 5 s).
    Rampart,
}

impl PeerKind {
    pub const ALL: [PeerKind; 7] = [
        PeerKind::Rampart,
        PeerKind::Tmpfs,
        PeerKind::Ext4Ram,
        PeerKind::XfsRam,
        PeerKind::BtrfsRam,
        PeerKind::Ext4Disk,
        PeerKind::FuseOverlay,
    ];

    pub fn id(self) -> &'static str {
        match self {
            PeerKind::Tmpfs => "tmpfs",
            PeerKind::Ext4Ram => "ext4-ram",
            PeerKind::XfsRam => "xfs-ram",
            PeerKind::BtrfsRam => "btrfs-ram",
            PeerKind::Ext4Disk => "ext4-disk",
            PeerKind::FuseOverlay => "fuse-overlayfs",
            PeerKind::Rampart => "rampart",
        }
    }

    pub fn parse(id: &str) -> Option<PeerKind> {
        PeerKind::ALL.into_iter().find(|k| k.id() == id)
    }
}

/// Where and how peers are made in this run.
pub struct PeerEnv {
    /// A private folder in /dev/shm for RAM-disk images and rampart's RAM-side files.
    pub shm_dir: PathBuf,
    /// A private folder on the real disk for the disk loop file and rampart's store.
    pub disk_dir: PathBuf,
    /// The rampart binary (normally the running executable).
    pub rampart_bin: PathBuf,
    /// Extra `rampart mount` options (e.g. `--commit-interval 5s`), named in the report.
    pub rampart_args: Vec<String>,
    pub profile: Profile,
    pub cancel: &'static Cancel,
}

/// Memory and store bytes a peer holds now.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Usage {
    /// Bytes of RAM the file system holds for its contents (None when not measurable).
    pub ram_bytes: Option<u64>,
    /// Bytes it occupies on persistent storage (None for volatile peers).
    pub store_bytes: Option<u64>,
    /// How the two were measured, for the report.
    pub method: String,
}

/// A mounted peer. Dropping it without `teardown` still tears it down (best effort).
pub trait Mounted {
    fn kind(&self) -> PeerKind;
    /// The mount point.
    fn dir(&self) -> &Path;
    /// Unmount and mount the same data again; the time from the mount command's start until
    /// the root can be listed.
    fn remount(&mut self) -> Result<Duration>;
    fn usage(&self) -> Result<Usage>;
    /// Devices, mkfs and mount options, exactly as used.
    fn settings(&self) -> Vec<(String, String)>;
    fn teardown(self: Box<Self>) -> Result<()>;
}

/// Makes a fresh peer of `kind`.
pub fn setup(kind: PeerKind, _env: &PeerEnv) -> Result<Box<dyn Mounted>> {
    Err(BenchError::Other(format!("peer {} not written yet", kind.id())))
}

/// Fails with `Missing` when a tool this peer needs is absent (mkfs.xfs, fuse-overlayfs, ...).
pub fn check_tools(_kind: PeerKind) -> Result<()> {
    Ok(())
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches` — between workloads, as the papers did.
pub fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .map_err(|e| BenchError::io("writing /proc/sys/vm/drop_caches (run as root)", e))
}

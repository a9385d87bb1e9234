//! `mount -o remount,...` of a rampart mount (docs/decisions/0138): mount(8) runs the helper
//! with `remount` among the options; the kernel changes a FUSE mount's generic flags (`ro`,
//! `nosuid`, ...) by itself, so the helper asks it with mount(2) MS_REMOUNT and starts no
//! daemon. rampart's own options are fixed while mounted.

use std::path::Path;

use nix::mount::MsFlags;
use nix::sys::statvfs::{statvfs, FsFlags};

/// The option that asks for a remount.
pub const REMOUNT: &str = "remount";

/// The options of the kernel's FUSE mount that /proc/mounts shows and mount(8) passes back at
/// a remount; they cannot change.
pub const FUSE_KERNEL_OPTIONS: [&str; 5] =
    ["user_id", "group_id", "rootmode", "max_read", "blksize"];

/// Gives the mount at `mountpoint` the per-mount flags it has now, changed by `flags` (generic
/// kernel flags, the later of a pair winning). MS_REMOUNT sets them all at once, so what is not
/// given must be passed as it is (else a remount to `ro` would also drop `nosuid`).
pub fn remount(mountpoint: &Path, flags: &[String]) -> Result<(), String> {
    let now =
        statvfs(mountpoint).map_err(|e| format!("cannot remount {}: {e}", mountpoint.display()))?;
    let mut ms = current(now.flags());
    for flag in flags {
        change(&mut ms, flag);
    }
    nix::mount::mount(
        None::<&str>,
        mountpoint,
        None::<&str>,
        MsFlags::MS_REMOUNT | ms,
        None::<&str>,
    )
    .map_err(|e| format!("cannot remount {}: {e}", mountpoint.display()))
}

/// The mount(2) flags of what statvfs reports.
fn current(st: FsFlags) -> MsFlags {
    let pairs = [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_SYNCHRONOUS, MsFlags::MS_SYNCHRONOUS),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ];
    pairs
        .iter()
        .filter(|(s, _)| st.contains(*s))
        .fold(MsFlags::empty(), |acc, (_, m)| acc | *m)
}

/// Applies one generic flag (mount_options' names) to `ms`.
fn change(ms: &mut MsFlags, flag: &str) {
    let (bit, on) = match flag {
        "ro" => (MsFlags::MS_RDONLY, true),
        "rw" => (MsFlags::MS_RDONLY, false),
        "nosuid" => (MsFlags::MS_NOSUID, true),
        "suid" => (MsFlags::MS_NOSUID, false),
        "nodev" => (MsFlags::MS_NODEV, true),
        "dev" => (MsFlags::MS_NODEV, false),
        "noexec" => (MsFlags::MS_NOEXEC, true),
        "exec" => (MsFlags::MS_NOEXEC, false),
        "sync" => (MsFlags::MS_SYNCHRONOUS, true),
        "async" => (MsFlags::MS_SYNCHRONOUS, false),
        "dirsync" => (MsFlags::MS_DIRSYNC, true),
        "noatime" => (MsFlags::MS_NOATIME, true),
        "atime" => (MsFlags::MS_NOATIME, false),
        _ => return,
    };
    ms.set(bit, on);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_flags_change_only_their_own_bit() {
        let mut ms = current(FsFlags::ST_NOSUID | FsFlags::ST_NODEV | FsFlags::ST_RELATIME);
        change(&mut ms, "ro");
        assert_eq!(
            ms,
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RELATIME
        );
        change(&mut ms, "rw");
        change(&mut ms, "suid");
        assert_eq!(ms, MsFlags::MS_NODEV | MsFlags::MS_RELATIME);
    }
}

//! The mount's readahead and dirty-page share, set in its backing device's sysfs folder
//! (`/sys/class/bdi/MAJ:MIN/`) once mounted (decision 0074).
//!
//! The kernel caps a FUSE mount's readahead at 128 KiB whatever INIT's max_readahead says (it
//! takes the smaller of the two), and lets its page cache hold at most 1 % of the dirty limit
//! (max_ratio 1, strict_limit): protections against unprivileged servers. On the daemon path
//! (no passthrough) both cut large files' throughput: a sequential reader waits on 128 KiB
//! READs, and a writer is throttled after some 50 MB while its pages are written back to the
//! daemon. Root may raise both, as libfuse's documentation suggests for readahead.

use std::path::Path;

/// Readahead of the mount, in KiB: INIT's max_readahead, so one READ request fills it.
pub(crate) const READ_AHEAD_KIB: u32 = 1024;

/// The share of the system's dirty-page limit the mount's page cache may hold (writeback
/// cache only), in percent, as a local file system's page cache could (the kernel's default
/// for FUSE is 1). Every dirty page still reaches the daemon within the commit interval (the
/// page flusher) and at fsync.
pub(crate) const DIRTY_RATIO_PERCENT: u32 = 20;

/// Sets the mount's readahead and (with the writeback cache) dirty share. Failures (not root,
/// no sysfs) leave the kernel's defaults and are logged: the mount works either way.
pub(crate) fn tune(mountpoint: &Path, writeback_cache: bool) {
    let at = match crate::own_mount::InProcess::of(mountpoint) {
        Ok(at) => at,
        Err(e) => {
            tracing::debug!("no device number for {}: {e}", mountpoint.display());
            return;
        }
    };
    let folder = format!(
        "/sys/class/bdi/{}:{}",
        libc::major(at.device),
        libc::minor(at.device)
    );
    let mut settings = vec![("read_ahead_kb", READ_AHEAD_KIB)];
    if writeback_cache {
        settings.push(("max_ratio", DIRTY_RATIO_PERCENT));
    }
    for (name, value) in settings {
        let path = format!("{folder}/{name}");
        match std::fs::write(&path, format!("{value}\n")) {
            Ok(()) => tracing::debug!("{path} = {value}"),
            Err(e) => tracing::info!("{path}: {e}; the kernel's default stays"),
        }
    }
}

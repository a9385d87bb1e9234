//! Measuring what a peer holds: used bytes of a mount, allocated bytes of files and folders,
//! and a process's resident memory.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{BenchError, Result};

/// Most entries walked when adding up a store folder's bytes.
const STORE_ENTRIES_MAX: usize = 1_000_000;

/// Bytes in use on the file system mounted at `mnt`, by statfs.
pub(super) fn statfs_used_bytes(mnt: &Path) -> Result<u64> {
    let stat = nix::sys::statvfs::statvfs(mnt).map_err(|e| {
        BenchError::io(
            format!("statfs of {}", mnt.display()),
            std::io::Error::from(e),
        )
    })?;
    let used_blocks = (stat.blocks() as u64).saturating_sub(stat.blocks_free() as u64);
    Ok(used_blocks * stat.fragment_size() as u64)
}

/// Bytes a file really occupies (st_blocks × 512: holes excluded).
pub(super) fn allocated_bytes(path: &Path) -> Result<u64> {
    std::fs::symlink_metadata(path)
        .map(|m| m.blocks() * 512)
        .map_err(|e| BenchError::io(format!("stat of {}", path.display()), e))
}

/// Allocated bytes of every file under `root` (at most `STORE_ENTRIES_MAX` entries).
pub(super) fn tree_allocated_bytes(root: &Path) -> Result<u64> {
    let mut total = 0;
    let mut pending = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(path) = pending.pop() {
        seen += 1;
        if seen > STORE_ENTRIES_MAX {
            return Err(BenchError::Other(format!(
                "{} holds more than {STORE_ENTRIES_MAX} entries: not adding them up",
                root.display()
            )));
        }
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            // A file the daemon replaced meanwhile (checkpoint.tmp renamed) is fine to miss.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(BenchError::io(format!("stat of {}", path.display()), e)),
        };
        total += meta.blocks() * 512;
        if meta.is_dir() {
            let entries = std::fs::read_dir(&path)
                .map_err(|e| BenchError::io(format!("listing {}", path.display()), e))?;
            pending.extend(entries.flatten().map(|entry| entry.path()));
        }
    }
    Ok(total)
}

/// A process's memory, from /proc.
pub(super) struct ProcessMemory {
    pub(super) rss_bytes: u64,
    pub(super) pss_bytes: Option<u64>,
    pub(super) source: String,
}

pub(super) fn process_memory(pid: u32) -> Result<ProcessMemory> {
    let rollup = format!("/proc/{pid}/smaps_rollup");
    if let Ok(text) = std::fs::read_to_string(&rollup) {
        if let Some(rss) = kib_field(&text, "Rss:") {
            return Ok(ProcessMemory {
                rss_bytes: rss,
                pss_bytes: kib_field(&text, "Pss:"),
                source: rollup,
            });
        }
    }
    // Kernels before 4.14 have no smaps_rollup.
    let status = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&status)
        .map_err(|e| BenchError::io(format!("reading {status}"), e))?;
    let rss = kib_field(&text, "VmRSS:")
        .ok_or_else(|| BenchError::Other(format!("{status} has no VmRSS")))?;
    Ok(ProcessMemory {
        rss_bytes: rss,
        pss_bytes: None,
        source: status,
    })
}

/// A "Key:   123 kB" line of /proc, in bytes.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_in_bytes() {
        let text = "Rss:                2048 kB\nPss:                1024 kB\n";
        assert_eq!(kib_field(text, "Rss:"), Some(2 << 20));
        assert_eq!(kib_field(text, "Pss:"), Some(1 << 20));
        assert_eq!(kib_field(text, "Swap:"), None);
        let own = process_memory(std::process::id()).unwrap();
        assert!(own.rss_bytes > 0);
    }
}

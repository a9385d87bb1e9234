//! What a peer's settings say about it: the mount as the kernel sees it, the versions of the
//! tools that made it, and byte sizes in words.

use std::path::Path;
use std::process::Command;

use super::{Peer, QUERY_TIMEOUT};
use crate::cleanup;
use crate::cmd;

impl Peer {
    /// The kernel's view of the mount at `mnt`: type, source and every option in effect, and
    /// the block size statfs reports.
    pub(super) fn describe_mount(&mut self, mnt: &Path) {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        if let Some(entry) = mountinfo_entry(&info, mnt) {
            self.set(
                "mount options in effect (/proc/self/mountinfo)",
                format!(
                    "{} {}: {}; {}",
                    entry.fs_type, entry.source, entry.mount_options, entry.super_options
                ),
            );
        }
        if let Ok(stat) = nix::sys::statvfs::statvfs(mnt) {
            self.set(
                "block size (statfs)",
                format!(
                    "{} B (fragment {} B)",
                    stat.block_size(),
                    stat.fragment_size()
                ),
            );
        }
    }

    /// What `command` prints, summed up by `summary`; "unknown (why)" when it fails.
    pub(super) fn query(
        &self,
        command: &mut Command,
        summary: impl FnOnce(cmd::Output) -> String,
    ) -> String {
        match self.run(command, QUERY_TIMEOUT) {
            Ok(out) => summary(out),
            Err(e) => format!("unknown ({e})"),
        }
    }

    /// The first line a `--version` style command prints.
    pub(super) fn version(&self, program: &Path, args: &[&str]) -> String {
        let text = self.version_lines(program, args);
        text.split("; ").next().unwrap_or_default().to_string()
    }

    /// Every line a `--version` style command prints, joined with "; ".
    pub(super) fn version_lines(&self, program: &Path, args: &[&str]) -> String {
        self.query(Command::new(program).args(args), |out| {
            let text = if out.stdout.trim().is_empty() {
                out.stderr
            } else {
                out.stdout
            };
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// One line of /proc/self/mountinfo.
struct MountEntry {
    fs_type: String,
    source: String,
    mount_options: String,
    super_options: String,
}

/// The last (topmost) mount at `mnt` in a mountinfo text.
fn mountinfo_entry(mountinfo: &str, mnt: &Path) -> Option<MountEntry> {
    let points = cleanup::mount_points(mountinfo);
    let index = points.iter().rposition(|p| p == mnt)?;
    let line = mountinfo.lines().nth(index)?;
    let (before, after) = line.split_once(" - ")?;
    let mount_options = before.split(' ').nth(5)?.to_string();
    let mut rest = after.split(' ');
    Some(MountEntry {
        fs_type: rest.next()?.to_string(),
        source: rest.next()?.to_string(),
        mount_options,
        super_options: rest.next().unwrap_or_default().to_string(),
    })
}

/// "512 MiB (536870912 B)".
pub(super) fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {} ({bytes} B)", UNITS[unit])
    }
}

/// [`bytes_text`], or "unknown" when the figure is missing.
pub(super) fn bytes_or_unknown(bytes: Option<u64>) -> String {
    bytes.map(bytes_text).unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_entries() {
        let text = "22 1 0:21 / / rw,relatime - ext4 /dev/vda rw,discard\n\
                    44 30 0:41 / /dev/shm/x/mnt rw,nosuid,nodev,relatime - fuse /store rw,user_id=0,allow_other\n";
        let e = mountinfo_entry(text, Path::new("/dev/shm/x/mnt")).unwrap();
        assert_eq!(e.fs_type, "fuse");
        assert_eq!(e.source, "/store");
        assert_eq!(e.mount_options, "rw,nosuid,nodev,relatime");
        assert_eq!(e.super_options, "rw,user_id=0,allow_other");
        assert!(mountinfo_entry(text, Path::new("/nowhere")).is_none());
    }

    #[test]
    fn byte_texts() {
        assert_eq!(bytes_text(512), "512 B");
        assert_eq!(bytes_text(512 << 20), "512.0 MiB (536870912 B)");
    }
}

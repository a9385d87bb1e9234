//! The block device under a path, and its write counters: what the write-amplification
//! workload reads before and after. Resolved through /proc/self/mountinfo (the mount holding
//! the path, its device number) and /sys/dev/block (the kernel's name for that device, a
//! partition or a whole disk); never assumed — a path on no block device (tmpfs, FUSE, an
//! overlay) is an error that says why.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::cleanup::mount_points;

/// Sectors in /sys/block/*/stat are always 512 bytes, whatever the device's block size.
const STAT_SECTOR_BYTES: u64 = 512;
/// Field of /sys/block/<dev>/stat holding the sectors written (Documentation/block/stat.rst).
const SECTORS_WRITTEN_FIELD: usize = 6;

/// A block device as the kernel names it, with where its counters are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockDevice {
    /// "vda", "vda1", "nvme0n1p2", "dm-0", "loop3".
    pub name: String,
    /// "254:0".
    pub number: String,
    /// The device's folder in /sys (holds `stat`).
    pub sys_dir: PathBuf,
    /// The whole disk, when `name` is a partition of it.
    pub partition_of: Option<String>,
    /// The mount the path is on: "ext4 /dev/vda at /".
    pub mount: String,
}

impl std::fmt::Display for BlockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}", self.name, self.number)?;
        match &self.partition_of {
            Some(disk) => write!(f, ", a partition of {disk}")?,
            None => write!(f, ", a whole device")?,
        }
        write!(f, "; {})", self.mount)
    }
}

impl BlockDevice {
    /// Bytes written to the device since boot (sectors written × 512).
    pub fn bytes_written(&self) -> Result<u64, String> {
        let path = self.sys_dir.join("stat");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        sectors_written(&text)
            .map(|s| s * STAT_SECTOR_BYTES)
            .ok_or_else(|| format!("{} does not parse: {text:?}", path.display()))
    }
}

/// Sectors written, from the text of a /sys/block/<dev>/stat file.
pub fn sectors_written(stat: &str) -> Option<u64> {
    stat.split_whitespace()
        .nth(SECTORS_WRITTEN_FIELD)?
        .parse()
        .ok()
}

/// The block device holding `path`, or why there is none.
pub fn device_under(path: &Path) -> Result<BlockDevice, String> {
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    let entry = mount_of(&info, &real)
        .ok_or_else(|| format!("no mount in /proc/self/mountinfo holds {}", real.display()))?;
    let mount = format!(
        "{} {} at {}",
        entry.fs_type,
        entry.source,
        entry.mount_point.display()
    );
    // The device number of the mount; a file system on no block device has an anonymous
    // one (major 0: tmpfs, FUSE, overlay, btrfs' subvolumes), then the source may still
    // name a device node.
    let mut number = entry.number.clone();
    if !sys_dev(&number).exists() {
        if let Some(rdev) = device_node_number(&entry.source) {
            number = rdev;
        }
    }
    let sys = sys_dev(&number);
    let sys_dir = std::fs::canonicalize(&sys).map_err(|_| {
        format!(
            "{} is on {mount}, device {}, which is not a block device the kernel lists in \
             /sys/dev/block: no disk counters to read",
            real.display(),
            entry.number
        )
    })?;
    if !sys_dir.join("stat").is_file() {
        return Err(format!("{} has no stat file", sys_dir.display()));
    }
    let name = file_name(&sys_dir).ok_or_else(|| format!("{} has no name", sys_dir.display()))?;
    let partition_of = sys_dir
        .join("partition")
        .is_file()
        .then(|| sys_dir.parent().and_then(file_name))
        .flatten();
    Ok(BlockDevice {
        name,
        number,
        sys_dir,
        partition_of,
        mount,
    })
}

fn sys_dev(number: &str) -> PathBuf {
    Path::new("/sys/dev/block").join(number)
}

fn file_name(path: &Path) -> Option<String> {
    path.file_name()?.to_str().map(str::to_string)
}

/// "major:minor" of a device node such as /dev/vda1.
fn device_node_number(source: &str) -> Option<String> {
    if !source.starts_with("/dev/") {
        return None;
    }
    let meta = std::fs::metadata(source).ok()?;
    let rdev = meta.rdev();
    Some(format!(
        "{}:{}",
        nix::sys::stat::major(rdev),
        nix::sys::stat::minor(rdev)
    ))
}

/// The parts of one mountinfo line the resolution needs.
#[derive(Debug, PartialEq, Eq)]
struct MountOf {
    mount_point: PathBuf,
    number: String,
    fs_type: String,
    source: String,
}

/// The mount in effect at `path`: the longest mount point above it, the last one mounted.
fn mount_of(mountinfo: &str, path: &Path) -> Option<MountOf> {
    let points = mount_points(mountinfo);
    let (index, mount_point) = points
        .iter()
        .enumerate()
        .filter(|(_, p)| path.starts_with(p))
        .max_by_key(|(i, p)| (p.components().count(), *i))?;
    let line = mountinfo.lines().nth(index)?;
    let (before, after) = line.split_once(" - ")?;
    let number = before.split(' ').nth(2)?.to_string();
    let mut rest = after.split(' ');
    Some(MountOf {
        mount_point: mount_point.clone(),
        number,
        fs_type: rest.next()?.to_string(),
        source: rest.next()?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_counter_is_the_seventh_field() {
        let stat = "   31035     6275  2980890    10717     9788    32676 15904736   113646 \
                    0     9484   125368     4477       22  2249472      977      266       26\n";
        assert_eq!(sectors_written(stat), Some(15_904_736));
        assert_eq!(sectors_written("1 2 3"), None);
    }

    #[test]
    fn the_longest_mount_point_wins() {
        let text = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n\
                    30 27 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw\n\
                    44 27 7:3 / /var/tmp/x/mnt rw - ext4 /dev/loop3 rw\n";
        let m = mount_of(text, Path::new("/var/tmp/x/mnt/a/b")).unwrap();
        assert_eq!(m.number, "7:3");
        assert_eq!(m.source, "/dev/loop3");
        let m = mount_of(text, Path::new("/var/tmp/y")).unwrap();
        assert_eq!((m.number.as_str(), m.fs_type.as_str()), ("254:0", "ext4"));
        assert_eq!(
            mount_of(text, Path::new("/dev/shm/z")).unwrap().fs_type,
            "tmpfs"
        );
    }

    #[test]
    fn ram_is_no_block_device_and_the_root_usually_is() {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            let err = device_under(shm).unwrap_err();
            assert!(err.contains("not a block device"), "{err}");
        }
        // The root file system of a test machine is on a disk, but a container's may not be:
        // only check that whatever is found is consistent.
        if let Ok(dev) = device_under(Path::new("/")) {
            assert!(dev.bytes_written().is_ok(), "{dev}");
            assert!(dev.sys_dir.join("stat").is_file());
            println!("/ is on {dev}");
        }
    }
}

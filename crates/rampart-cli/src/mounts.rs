//! Reading /proc/self/mountinfo: which rampart store is mounted where.

use std::path::{Path, PathBuf};

/// The file-system types a rampart mount shows in /proc/mounts: `fuse.rampart` when mounted
/// through fusermount3, plain `fuse` when root mounts directly (fuser sets no subtype then);
/// the source is the store's path either way.
pub const FS_TYPES: [&str; 2] = ["fuse.rampart", "fuse"];

/// A rampart mount: its mount point, its store (the mount's source) and the kernel's device
/// number of its FUSE connection (`major:minor`), which no other live mount shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RampartMount {
    pub mountpoint: PathBuf,
    pub store: PathBuf,
    pub device: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, etc.).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            if let Ok(v) = u8::from_str_radix(&field[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One mountinfo line's fields that matter here: (device, mount point, type, source).
fn parse_line(line: &str) -> Option<(&str, PathBuf, &str, PathBuf)> {
    // Fields: id parent major:minor root mountpoint options [optional...] - fstype source superopts
    let (left, right) = line.split_once(" - ")?;
    let left: Vec<&str> = left.split(' ').collect();
    let right: Vec<&str> = right.split(' ').collect();
    if left.len() < 5 || right.len() < 2 {
        return None;
    }
    Some((
        left[2],
        PathBuf::from(unescape(left[4])),
        right[0],
        PathBuf::from(unescape(right[1])),
    ))
}

/// Parses mountinfo text into the rampart mounts it lists.
pub fn parse_mountinfo(text: &str) -> Vec<RampartMount> {
    text.lines()
        .filter_map(parse_line)
        .filter(|(_, _, fs_type, _)| FS_TYPES.contains(fs_type))
        .map(|(device, mountpoint, _, store)| RampartMount {
            mountpoint,
            store,
            device: device.to_owned(),
        })
        .collect()
}

/// Rampart mounts of this mount namespace: FUSE mounts whose source is a rampart store.
pub fn rampart_mounts() -> Vec<RampartMount> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
        .into_iter()
        .filter(|m| rampart_core::store::looks_like_store(&m.store))
        .collect()
}

/// The rampart mount at `mountpoint` (compared after resolving the path).
pub fn find_mount(mountpoint: &Path) -> Option<RampartMount> {
    let wanted = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    rampart_mounts()
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == wanted || m.mountpoint == mountpoint)
}

/// A `fuse.rampart` mount at `mountpoint` whose store folder is no longer at its path:
/// deleted or moved while mounted (`find_mount` does not know it, having no store to check
/// it by). Only "not found" counts: a store we may not look at (EACCES) is not called gone.
pub fn find_mount_of_deleted_store(mountpoint: &Path) -> Option<RampartMount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let wanted = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    deleted_store_mount_in(&text, &wanted, mountpoint, |store| {
        !matches!(std::fs::symlink_metadata(store),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    })
}

fn deleted_store_mount_in(
    mountinfo: &str,
    wanted: &Path,
    given: &Path,
    exists: impl Fn(&Path) -> bool,
) -> Option<RampartMount> {
    mountinfo
        .lines()
        .filter_map(parse_line)
        .filter(|(_, point, fs_type, store)| {
            // Only the subtype rampart sets: a plain `fuse` mount may be anything.
            *fs_type == FS_TYPES[0]
                && (point == wanted || point == given)
                && store.is_absolute()
                && !exists(store)
        })
        .map(|(device, mountpoint, _, store)| RampartMount {
            mountpoint,
            store,
            device: device.to_owned(),
        })
        .last()
}

/// The rampart mount of `store` at `mountpoint` (both as mountinfo shows them), if any.
pub fn mount_of(store: &Path, mountpoint: &Path) -> Option<RampartMount> {
    rampart_mounts()
        .into_iter()
        .rev()
        .find(|m| m.store == store && m.mountpoint == mountpoint)
}

/// The device number (`major:minor`) of the topmost mount at `mountpoint`, of any type: the
/// one a path-based unmount there would take away.
pub fn top_device_at(mountpoint: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    top_device_in(&text, mountpoint)
}

fn top_device_in(mountinfo: &str, mountpoint: &Path) -> Option<String> {
    mountinfo.lines().rev().find_map(|line| {
        let (device, point, _, _) = parse_line(line)?;
        (point == mountpoint).then(|| device.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rampart_mount_whose_store_is_gone_is_found_and_no_other() {
        let text = "50 22 0:45 / /tmp/m rw - fuse.rampart /var/gone rw\n\
                    51 22 0:46 / /tmp/n rw - fuse.rampart /var/here rw\n\
                    52 22 0:47 / /tmp/o rw - fuse /var/gone2 rw\n";
        let exists = |p: &Path| p == Path::new("/var/here");
        let at = |p: &str| deleted_store_mount_in(text, Path::new(p), Path::new(p), exists);
        assert_eq!(
            at("/tmp/m").map(|m| m.store),
            Some(PathBuf::from("/var/gone"))
        );
        assert_eq!(at("/tmp/n"), None, "its store is there: find_mount's case");
        assert_eq!(at("/tmp/o"), None, "a plain fuse mount may be anything");
    }

    #[test]
    fn top_device_is_the_last_mount_at_the_place() {
        let text = "50 22 0:45 / /tmp/m rw - fuse.rampart /var/s rw\n\
                    51 22 0:46 / /tmp/other rw - fuse.rampart /var/t rw\n\
                    52 50 0:47 / /tmp/m rw - tmpfs none rw\n";
        assert_eq!(
            top_device_in(text, Path::new("/tmp/m")).as_deref(),
            Some("0:47")
        );
        assert_eq!(
            top_device_in(text, Path::new("/tmp/other")).as_deref(),
            Some("0:46")
        );
        assert_eq!(top_device_in(text, Path::new("/tmp/none")), None);
    }

    #[test]
    fn finds_rampart_mounts_with_escaped_paths() {
        let text = "36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw\n\
                    50 22 0:45 / /tmp/my\\040mnt rw,nosuid - fuse.rampart /var/my\\040store rw,user_id=0\n\
                    51 22 0:46 / /tmp/m2 rw,nosuid - fuse /var/s2 rw,user_id=0\n";
        assert_eq!(
            parse_mountinfo(text),
            vec![
                RampartMount {
                    mountpoint: PathBuf::from("/tmp/my mnt"),
                    store: PathBuf::from("/var/my store"),
                    device: "0:45".into(),
                },
                RampartMount {
                    mountpoint: PathBuf::from("/tmp/m2"),
                    store: PathBuf::from("/var/s2"),
                    device: "0:46".into(),
                }
            ]
        );
    }
}

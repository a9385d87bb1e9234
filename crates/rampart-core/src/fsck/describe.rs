//! Short descriptions of journal ops for reports: what an op does, never its data.

use crate::{FileKind, Op};

fn shown(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

/// A short description of an op, for reports (never its data).
pub fn describe_op(op: &Op<'_>) -> String {
    match *op {
        Op::Create {
            parent,
            name,
            ino,
            mode,
            ..
        } => {
            let kind = match FileKind::from_mode(mode) {
                Some(FileKind::RegularFile) => "file",
                Some(FileKind::Directory) => "directory",
                Some(FileKind::Symlink) => "symlink",
                Some(FileKind::NamedPipe) => "fifo",
                Some(FileKind::Socket) => "socket",
                Some(FileKind::CharDevice) => "character device",
                Some(FileKind::BlockDevice) => "block device",
                None => "inode of no valid type",
            };
            format!(
                "create {kind} {} (inode {ino}) in directory {parent}",
                shown(name)
            )
        }
        Op::Link {
            ino, parent, name, ..
        } => format!("link inode {ino} as {} in directory {parent}", shown(name)),
        Op::Unlink { parent, name, .. } => {
            format!("unlink {} from directory {parent}", shown(name))
        }
        Op::Rmdir { parent, name, .. } => {
            format!("rmdir {} from directory {parent}", shown(name))
        }
        Op::Rename {
            parent,
            name,
            new_parent,
            new_name,
            flags,
            ..
        } => format!(
            "rename {} in directory {parent} to {} in directory {new_parent} (flags {flags})",
            shown(name),
            shown(new_name)
        ),
        Op::Write {
            ino, offset, data, ..
        } => format!(
            "write of {} bytes at offset {offset} of inode {ino}",
            data.len()
        ),
        Op::SetAttr {
            ino,
            mode,
            uid,
            gid,
            size_bytes,
            atime_ns,
            mtime_ns,
            ..
        } => {
            let mut what = Vec::new();
            if let Some(mode) = mode {
                what.push(format!("mode {mode:o}"));
            }
            if let Some(uid) = uid {
                what.push(format!("uid {uid}"));
            }
            if let Some(gid) = gid {
                what.push(format!("gid {gid}"));
            }
            if let Some(size) = size_bytes {
                what.push(format!("size {size}"));
            }
            if atime_ns.is_some() {
                what.push("atime".into());
            }
            if mtime_ns.is_some() {
                what.push("mtime".into());
            }
            format!("setattr of inode {ino} ({})", what.join(", "))
        }
        Op::SetXattr { ino, name, .. } => format!("setxattr {} on inode {ino}", shown(name)),
        // The others carry no bulk data: their fields, shortened.
        ref other => {
            let mut text = format!("{other:?}");
            if text.len() > 200 {
                let mut cut = 200;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push('…');
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_are_described_without_their_data() {
        let write = Op::Write {
            ino: 7,
            offset: 4096,
            data: &[0u8; 100_000],
            time_ns: 0,
            kill_suidgid: false,
        };
        assert_eq!(
            describe_op(&write),
            "write of 100000 bytes at offset 4096 of inode 7"
        );
        let rename = Op::Rename {
            parent: 1,
            name: b"a",
            new_parent: 2,
            new_name: b"b",
            flags: 0,
            time_ns: 0,
        };
        assert!(describe_op(&rename).contains("\"a\" in directory 1 to \"b\" in directory 2"));
    }
}

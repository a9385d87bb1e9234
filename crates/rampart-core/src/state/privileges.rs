//! What writes, truncates and chowns take away from a file's privileges, as the VFS does for
//! local file systems (setuid, setgid, `security.capability`).

use crate::namespace::inode::Inode;

/// Which mode bits a write, truncate or chown takes away.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strip {
    Nothing,
    /// Setuid, and setgid when the group may execute (chown, unprivileged truncate).
    SetuidAndExecSetgid,
    /// The kernel flagged a write (it has decided that something must go): setuid, and
    /// setgid when the group may execute or when there is no setuid bit (then the flag can
    /// only be about setgid, e.g. a writer outside the file's group).
    KernelFlagged,
}

/// What a write, truncate or chown does to privileges, as the VFS does for local file
/// systems: drop `security.capability`, and clear mode bits as `strip` says. Returns the
/// budget change.
pub(crate) fn kill_privileges(inode: &mut Inode, strip: Strip) -> i64 {
    if strip != Strip::Nothing {
        let had_setuid = inode.mode & libc::S_ISUID != 0;
        inode.mode &= !libc::S_ISUID;
        let group_exec = inode.mode & libc::S_IXGRP != 0;
        if group_exec || (strip == Strip::KernelFlagged && !had_setuid) {
            inode.mode &= !libc::S_ISGID;
        }
    }
    let Some(xattrs) = inode.xattrs.as_mut() else {
        return 0;
    };
    if xattrs.get(CAPABILITY_XATTR).is_none() {
        return 0;
    }
    let before = xattrs.heap_bytes() as i64;
    let _ = xattrs.remove(CAPABILITY_XATTR);
    let mut after = xattrs.heap_bytes() as i64;
    if xattrs.is_empty() {
        inode.xattrs = None;
        after = 0;
    }
    after - before
}

pub(crate) const CAPABILITY_XATTR: &[u8] = b"security.capability";

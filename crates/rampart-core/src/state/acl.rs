//! POSIX ACLs in the state: setting one keeps the mode in step, chmod keeps the access ACL in
//! step, and a new inode's ACLs come from its directory's default ACL (decision 0143). Each is
//! decided inside one op's apply, so replay makes the same choice and a crash never leaves the
//! mode and the ACL half-changed.

use super::State;
use crate::acl::{Acl, ACCESS_XATTR, DEFAULT_XATTR};
use crate::attr::Ino;
use crate::error::{Errno, FsResult};
use crate::time::TimeNs;
use crate::xattr::{Xattrs, XATTR_ACL_KILL_SGID};

/// What a new inode gets from its directory: its mode and the ACL xattrs to set on it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Inherited {
    pub mode: u32,
    pub access: Option<Vec<u8>>,
    pub default: Option<Vec<u8>>,
}

impl State {
    /// The default ACL of directory `parent`, if it has one.
    fn default_acl(&self, parent: Ino) -> Option<Acl> {
        let xattrs = self.inode(parent).ok()?.xattrs.as_deref()?;
        Acl::parse(xattrs.get(DEFAULT_XATTR)?).ok().flatten()
    }

    /// `posix_acl_create`: a new inode of `mode` (type bits included) in `parent` inherits the
    /// default ACL when there is one (the umask is then ignored), else gets `mode` less `umask`.
    /// Symlinks get neither.
    pub(crate) fn inherit_acls(&self, parent: Ino, mode: u32, umask: u32) -> Inherited {
        if mode & libc::S_IFMT == libc::S_IFLNK {
            return Inherited {
                mode,
                ..Inherited::default()
            };
        }
        let Some(default) = self.default_acl(parent) else {
            return Inherited {
                mode: mode & !(umask & 0o777),
                ..Inherited::default()
            };
        };
        let (mode, access) = default.create_masq(mode);
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        Inherited {
            mode,
            access: access.map(|a| a.to_bytes()),
            default: is_dir.then(|| default.to_bytes()),
        }
    }

    /// A SetXattr of an ACL name, validated completely first: a default ACL only on a
    /// directory (EACCES); an access ACL sets the mode's bits and is stored only when it says
    /// more than them; a header with no entries removes the ACL.
    pub(super) fn apply_acl_setxattr(
        &mut self,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: i32,
        time_ns: TimeNs,
    ) -> FsResult<()> {
        let inode = self.inode(ino)?;
        let empty = Xattrs::default();
        let current = inode.xattrs.as_deref().unwrap_or(&empty);
        let growth = current.check_set(name, value, flags)?;
        let acl = Acl::parse(value)?;
        let mut mode = inode.mode;
        if name == DEFAULT_XATTR && !inode.is_dir() {
            return if acl.is_some() {
                Err(Errno::EACCES)
            } else {
                Ok(())
            };
        }
        let mut stored = acl.as_ref().map(Acl::to_bytes);
        if let (Some(acl), true) = (&acl, name == ACCESS_XATTR) {
            let (bits, equivalent) = acl.equiv_mode(mode);
            mode = bits;
            if equivalent {
                stored = None;
            }
            if flags & XATTR_ACL_KILL_SGID != 0 {
                mode &= !libc::S_ISGID;
            }
        }
        if stored.is_some() {
            self.budget.check(growth)?;
        }
        // Validation is over: from here on nothing fails.
        let inode = self.table.get_mut(ino).expect("inode");
        inode.mode = mode;
        inode.ctime_ns = time_ns;
        let before = inode.xattrs.as_ref().map_or(0, |x| x.heap_bytes() as i64);
        match stored {
            Some(bytes) => inode
                .xattrs
                .get_or_insert_with(Default::default)
                .set(name, &bytes),
            None => {
                if let Some(x) = inode.xattrs.as_mut() {
                    let _ = x.remove(name);
                    if x.is_empty() {
                        inode.xattrs = None;
                    }
                }
            }
        }
        let after = inode.xattrs.as_ref().map_or(0, |x| x.heap_bytes() as i64);
        self.budget.apply(after - before);
        Ok(())
    }

    /// `posix_acl_chmod`: after a chmod, the access ACL's owner, mask (or group) and other
    /// entries take the new bits (the same length: no budget change).
    pub(super) fn chmod_acl(&mut self, ino: Ino) {
        let Ok(inode) = self.table.get_mut(ino) else {
            return;
        };
        let mode = inode.mode;
        let Some(xattrs) = inode.xattrs.as_mut() else {
            return;
        };
        let Some(Ok(Some(mut acl))) = xattrs.get(ACCESS_XATTR).map(Acl::parse) else {
            return;
        };
        acl.chmod(mode);
        xattrs.set(ACCESS_XATTR, &acl.to_bytes());
    }
}

//! Extended attributes of one inode, with Linux's limits and error semantics.

use crate::error::{Errno, FsResult};

pub use crate::limits::XATTR_INODE_BYTES_MAX;
pub use crate::limits::XATTR_LIST_BYTES_MAX;
pub use crate::limits::XATTR_NAME_BYTES_MAX;
pub use crate::limits::XATTR_VALUE_BYTES_MAX;

/// The namespaces rampart stores; of `system.*` only the two POSIX ACL names are (crate::acl),
/// others answer EOPNOTSUPP.
const NAMESPACES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];

/// `setxattr` flags.
pub const XATTR_CREATE: i32 = 1;
pub const XATTR_REPLACE: i32 = 2;
/// rampart's own flag on an access ACL's SetXattr: the setter is neither in the file's group
/// nor privileged, so setgid goes (FUSE_SETXATTR_ACL_KILL_SGID, `posix_acl_update_mode`).
/// Journaled with the op, so replay clears it too.
pub const XATTR_ACL_KILL_SGID: i32 = 1 << 16;

/// One attribute: its full name (with namespace) and value.
type Entry = (Box<[u8]>, Box<[u8]>);

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Xattrs {
    entries: Vec<Entry>,
}

/// Checks an attribute name: its length and namespace.
pub fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() || name.len() > XATTR_NAME_BYTES_MAX {
        return Err(Errno::ERANGE);
    }
    if crate::acl::is_acl_name(name) {
        return Ok(());
    }
    match NAMESPACES.iter().find(|ns| name.starts_with(ns)) {
        Some(ns) if name.len() == ns.len() => Err(Errno::EINVAL),
        Some(_) => Ok(()),
        None => Err(Errno::EOPNOTSUPP),
    }
}

impl Xattrs {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| &**v)
    }

    fn total_bytes(&self) -> usize {
        self.entries.iter().map(|(n, v)| n.len() + v.len()).sum()
    }

    fn list_bytes(&self) -> usize {
        self.entries.iter().map(|(n, _)| n.len() + 1).sum()
    }

    /// Heap bytes held, for the memory budget.
    pub fn heap_bytes(&self) -> u64 {
        (self.entries.capacity() * std::mem::size_of::<Entry>() + self.total_bytes()) as u64
    }

    /// Validates a set without changing anything; returns the growth in bytes.
    pub fn check_set(&self, name: &[u8], value: &[u8], flags: i32) -> FsResult<u64> {
        check_name(name)?;
        if value.len() > XATTR_VALUE_BYTES_MAX {
            return Err(Errno::E2BIG);
        }
        let own = if name == crate::acl::ACCESS_XATTR {
            XATTR_ACL_KILL_SGID
        } else {
            0
        };
        if flags & !(XATTR_CREATE | XATTR_REPLACE | own) != 0 {
            return Err(Errno::EINVAL);
        }
        let existing = self.get(name);
        match existing {
            Some(_) if flags & XATTR_CREATE != 0 => return Err(Errno::EEXIST),
            None if flags & XATTR_REPLACE != 0 => return Err(Errno::ENODATA),
            _ => {}
        }
        let old = existing.map_or(0, |v| name.len() + v.len());
        let total = self.total_bytes() - old + name.len() + value.len();
        let list = self.list_bytes()
            + if existing.is_none() {
                name.len() + 1
            } else {
                0
            };
        if total > XATTR_INODE_BYTES_MAX || list > XATTR_LIST_BYTES_MAX {
            return Err(Errno::ENOSPC);
        }
        Ok((name.len() + value.len()) as u64 + 32)
    }

    /// Sets after a successful `check_set`.
    pub fn set(&mut self, name: &[u8], value: &[u8]) {
        match self.entries.iter_mut().find(|(n, _)| &**n == name) {
            Some(entry) => entry.1 = value.into(),
            None => self.entries.push((name.into(), value.into())),
        }
    }

    pub fn remove(&mut self, name: &[u8]) -> FsResult<()> {
        check_name(name)?;
        let i = self
            .entries
            .iter()
            .position(|(n, _)| &**n == name)
            .ok_or(Errno::ENODATA)?;
        self.entries.swap_remove(i);
        Ok(())
    }

    /// The names, each followed by a NUL byte, as listxattr returns them; `keep` filters.
    pub fn list(&self, keep: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.list_bytes());
        for (name, _) in self.entries.iter().filter(|(n, _)| keep(n)) {
            out.extend_from_slice(name);
            out.push(0);
        }
        out
    }

    /// All entries, in a stable order (for the checkpoint and tests).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entries.iter().map(|(n, v)| (&**n, &**v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_semantics() {
        let mut x = Xattrs::default();
        assert_eq!(check_name(b"system.posix_acl_access"), Ok(()));
        assert_eq!(
            check_name(b"system.posix_acl_defaults"),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(check_name(b"system.foo"), Err(Errno::EOPNOTSUPP));
        assert_eq!(check_name(b"user."), Err(Errno::EINVAL));
        assert_eq!(check_name(&[b'u'; 256]), Err(Errno::ERANGE));
        assert_eq!(
            x.check_set(b"user.a", b"1", XATTR_REPLACE),
            Err(Errno::ENODATA)
        );
        x.check_set(b"user.a", b"1", XATTR_CREATE).unwrap();
        x.set(b"user.a", b"1");
        assert_eq!(
            x.check_set(b"user.a", b"2", XATTR_CREATE),
            Err(Errno::EEXIST)
        );
        assert_eq!(
            x.check_set(b"user.b", &vec![0; XATTR_VALUE_BYTES_MAX + 1], 0),
            Err(Errno::E2BIG)
        );
        x.set(b"user.a", b"2");
        assert_eq!(x.get(b"user.a"), Some(&b"2"[..]));
        assert_eq!(x.list(|_| true), b"user.a\0");
        x.remove(b"user.a").unwrap();
        assert_eq!(x.remove(b"user.a"), Err(Errno::ENODATA));
    }
}

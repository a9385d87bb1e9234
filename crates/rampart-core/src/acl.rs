//! POSIX ACLs as Linux stores them: the `system.posix_acl_access` and `system.posix_acl_default`
//! xattrs in the `posix_acl_xattr` format (a little-endian u32 version 2, then 8-byte entries
//! `{u16 tag, u16 perm, u32 id}`), and the mode arithmetic of the kernel's fs/posix_acl.c
//! (`posix_acl_valid`, `posix_acl_equiv_mode`, `posix_acl_chmod`, `posix_acl_create`).
//! Enforcement is the kernel's (FUSE_POSIX_ACL with default_permissions); rampart stores the
//! ACLs and keeps the mode and the access ACL in step (decision 0143).

use crate::error::{Errno, FsResult};

pub const ACCESS_XATTR: &[u8] = b"system.posix_acl_access";
pub const DEFAULT_XATTR: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const HEADER_BYTES: usize = 4;
const ENTRY_BYTES: usize = 8;
/// The id of an entry that names no user or group (`ACL_UNDEFINED_ID`).
const UNDEFINED_ID: u32 = u32::MAX;

const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// Read, write, execute.
const PERM_BITS: u16 = 0o7;

/// True for the two ACL xattr names.
pub fn is_acl_name(name: &[u8]) -> bool {
    name == ACCESS_XATTR || name == DEFAULT_XATTR
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A valid ACL: entries in the kernel's order (user-obj, users, group-obj, groups, mask,
/// other), a mask when a named entry exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// Parses and validates xattr bytes as `posix_acl_from_xattr` and `posix_acl_valid` do;
    /// `Ok(None)` for a header with no entries (the kernel reads it as "no ACL").
    pub fn parse(bytes: &[u8]) -> FsResult<Option<Acl>> {
        if bytes.len() < HEADER_BYTES || !(bytes.len() - HEADER_BYTES).is_multiple_of(ENTRY_BYTES) {
            return Err(Errno::EINVAL);
        }
        let version = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(Errno::EOPNOTSUPP);
        }
        let entries: Vec<Entry> = bytes[HEADER_BYTES..]
            .chunks_exact(ENTRY_BYTES)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        if entries.is_empty() {
            return Ok(None);
        }
        let acl = Acl { entries };
        acl.validate()?;
        Ok(Some(acl.canonical()))
    }

    /// `posix_acl_valid`: the order of the entry kinds, their perms and the required ones.
    fn validate(&self) -> FsResult<()> {
        // The next tags allowed, as the kernel's state machine.
        let mut state = USER_OBJ;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.perm & !PERM_BITS != 0 {
                return Err(Errno::EINVAL);
            }
            match e.tag {
                USER_OBJ if state == USER_OBJ => state = USER,
                // Like Linux 6.18, ids need not be sorted or unique (the first match counts);
                // -1 names no one.
                USER | GROUP if state == e.tag => {
                    if e.id == UNDEFINED_ID {
                        return Err(Errno::EINVAL);
                    }
                    needs_mask = true;
                }
                GROUP_OBJ if state == USER => state = GROUP,
                MASK if state == GROUP => state = OTHER,
                OTHER if state == OTHER || (state == GROUP && !needs_mask) => state = 0,
                _ => return Err(Errno::EINVAL),
            }
        }
        if state == 0 {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        }
    }

    /// The ids of entries that name no one set to `ACL_UNDEFINED_ID`, as the kernel writes them.
    fn canonical(mut self) -> Acl {
        for e in &mut self.entries {
            if e.tag != USER && e.tag != GROUP {
                e.id = UNDEFINED_ID;
            }
        }
        self
    }

    /// The xattr bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + ENTRY_BYTES * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// `posix_acl_equiv_mode`: the permission bits the ACL gives `mode` (the mask stands for
    /// the group bits), and whether the ACL says no more than those bits (then it is stored as
    /// the mode alone).
    pub fn equiv_mode(&self, mode: u32) -> (u32, bool) {
        let mut bits = 0u32;
        let mut equivalent = true;
        for e in &self.entries {
            let perm = u32::from(e.perm & PERM_BITS);
            match e.tag {
                USER_OBJ => bits |= perm << 6,
                GROUP_OBJ => bits |= perm << 3,
                OTHER => bits |= perm,
                MASK => {
                    bits = (bits & !0o070) | (perm << 3);
                    equivalent = false;
                }
                _ => equivalent = false,
            }
        }
        ((mode & !0o777) | bits, equivalent)
    }

    /// `posix_acl_chmod`: the owner, mask (or group) and other entries take the new mode's bits.
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.entries.iter().any(|e| e.tag == MASK);
        for e in &mut self.entries {
            let shift = match e.tag {
                USER_OBJ => 6,
                MASK => 3,
                GROUP_OBJ if !has_mask => 3,
                OTHER => 0,
                _ => continue,
            };
            e.perm = ((mode >> shift) & 0o7) as u16;
        }
    }

    /// `posix_acl_create_masq`: the access ACL a new inode gets from its directory's default
    /// ACL (`self`) and the mode asked for, and the mode it gets. `None` when the result is
    /// equivalent to the mode (then no access ACL is stored).
    pub fn create_masq(&self, mode: u32) -> (u32, Option<Acl>) {
        let mut acl = self.clone();
        let mut bits = mode & 0o777;
        let mut equivalent = true;
        let mut group_obj = None;
        let mut mask = None;
        for (i, e) in acl.entries.iter_mut().enumerate() {
            let perm = u32::from(e.perm);
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((bits >> 6) & 0o7) as u16;
                    bits &= (u32::from(e.perm) << 6) | !0o700;
                }
                OTHER => {
                    e.perm &= (bits & 0o7) as u16;
                    bits &= perm | !0o007;
                }
                GROUP_OBJ => group_obj = Some(i),
                MASK => {
                    mask = Some(i);
                    equivalent = false;
                }
                _ => equivalent = false,
            }
        }
        // A valid ACL has a group-obj entry; the mask, when there is one, stands for it.
        if let Some(i) = mask.or(group_obj) {
            let e = &mut acl.entries[i];
            e.perm &= ((bits >> 3) & 0o7) as u16;
            bits &= (u32::from(e.perm) << 3) | !0o070;
        }
        let mode = (mode & !0o777) | bits;
        (mode, (!equivalent).then_some(acl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        Acl {
            entries: entries
                .iter()
                .map(|&(tag, perm, id)| Entry { tag, perm, id })
                .collect(),
        }
        .to_bytes()
    }

    const U: u32 = UNDEFINED_ID;

    #[test]
    fn parses_valid_and_rejects_malformed() {
        let minimal = acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
        let parsed = Acl::parse(&minimal).unwrap().unwrap();
        assert_eq!(parsed.equiv_mode(0o100000), (0o100644, true));
        let named = acl(&[
            (USER_OBJ, 7, U),
            (USER, 5, 1000),
            (USER, 4, 1001),
            (GROUP_OBJ, 5, U),
            (GROUP, 1, 50),
            (MASK, 5, U),
            (OTHER, 0, U),
        ]);
        let parsed = Acl::parse(&named).unwrap().unwrap();
        assert_eq!(parsed.equiv_mode(0o102000), (0o102750, false));
        assert_eq!(parsed.to_bytes(), named);
        assert_eq!(Acl::parse(&2u32.to_le_bytes()), Ok(None));
        let bad: [&[u8]; 3] = [b"", &minimal[..7], &[1, 0, 0, 0]];
        for b in bad {
            assert!(Acl::parse(b).is_err(), "{b:?}");
        }
        let invalid = [
            // No mask with a named user.
            acl(&[
                (USER_OBJ, 7, U),
                (USER, 5, 1),
                (GROUP_OBJ, 5, U),
                (OTHER, 0, U),
            ]),
            // A named user after the groups, and one naming no one.
            acl(&[
                (USER_OBJ, 7, U),
                (GROUP_OBJ, 5, U),
                (USER, 5, 1),
                (MASK, 5, U),
                (OTHER, 0, U),
            ]),
            acl(&[
                (USER_OBJ, 7, U),
                (USER, 5, U),
                (GROUP_OBJ, 5, U),
                (MASK, 5, U),
                (OTHER, 0, U),
            ]),
            // No other, two owners, a bad perm, an unknown tag.
            acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U)]),
            acl(&[
                (USER_OBJ, 7, U),
                (USER_OBJ, 7, U),
                (GROUP_OBJ, 5, U),
                (OTHER, 0, U),
            ]),
            acl(&[(USER_OBJ, 8, U), (GROUP_OBJ, 5, U), (OTHER, 0, U)]),
            acl(&[
                (USER_OBJ, 7, U),
                (0x40, 5, U),
                (GROUP_OBJ, 5, U),
                (OTHER, 0, U),
            ]),
        ];
        for b in invalid {
            assert_eq!(Acl::parse(&b), Err(Errno::EINVAL), "{b:?}");
        }
    }

    #[test]
    fn chmod_and_create_follow_the_kernel() {
        let default = Acl::parse(&acl(&[
            (USER_OBJ, 7, U),
            (USER, 7, 1000),
            (GROUP_OBJ, 5, U),
            (MASK, 7, U),
            (OTHER, 5, U),
        ]))
        .unwrap()
        .unwrap();
        // A file asked for 0666: the mask takes the group bits.
        let (mode, access) = default.create_masq(0o100666);
        assert_eq!(mode, 0o100664);
        let access = access.unwrap();
        assert_eq!(access.equiv_mode(0o100000).0, 0o100664);
        assert!(access.entries.contains(&Entry {
            tag: MASK,
            perm: 6,
            id: U
        }));
        let mut access = access;
        access.chmod(0o100640);
        assert_eq!(access.equiv_mode(0o100000).0, 0o100640);
        // A minimal default ACL gives no access ACL, only its bits.
        let minimal = Acl::parse(&acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 0, U), (OTHER, 0, U)]))
            .unwrap()
            .unwrap();
        assert_eq!(minimal.create_masq(0o40777), (0o40700, None));
    }
}

//! Extended attributes through the engine.

use super::{category_ops, Ctx, Engine, Invalidation, Mutation};
use crate::acl;
use crate::attr::Ino;
use crate::category;
use crate::error::{Errno, FsResult};
use crate::op::Op;
use crate::state::Inherited;
use crate::xattr;

impl Engine {
    pub fn setxattr(
        &self,
        ctx: &Ctx,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> FsResult<()> {
        if let Some(done) = self.set_category_xattr(ctx, ino, name, Some(value)) {
            return done;
        }
        self.with_room(|| {
            self.mutate(
                ctx,
                |m, time_ns| {
                    m.apply(&Op::SetXattr {
                        ino,
                        name,
                        value,
                        flags,
                        time_ns,
                    })
                },
                |_| vec![Invalidation::Inode { ino }],
            )
        })
    }

    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        xattr::check_name(name)?;
        if let Some(value) = self.get_category_xattr(ino, name) {
            return value;
        }
        let state = self.read_state();
        let inode = state.inode(ino)?;
        inode
            .xattrs
            .as_ref()
            .and_then(|x| x.get(name))
            .map(<[u8]>::to_vec)
            .ok_or(Errno::ENODATA)
    }

    /// The attribute names of `ino`, NUL-terminated; `trusted` includes trusted.* names (which
    /// only privileged callers may see).
    pub fn listxattr(&self, ino: Ino, trusted: bool) -> FsResult<Vec<u8>> {
        let state = self.read_state();
        let inode = state.inode(ino)?;
        let mut list = inode.xattrs.as_ref().map_or_else(Vec::new, |x| {
            x.list(|name| {
                (trusted || !name.starts_with(b"trusted.")) && name != category::CATEGORY_XATTR
            })
        });
        // A category set on the file shows as the attribute that sets it (so `cp -a` and
        // `getfattr -d` carry it); the store default does not.
        if category_ops::assigned(&state, ino).is_some() {
            list.extend_from_slice(category::USER_CATEGORY_XATTR);
            list.push(0);
        }
        Ok(list)
    }

    pub fn removexattr(&self, ctx: &Ctx, ino: Ino, name: &[u8]) -> FsResult<()> {
        if let Some(done) = self.set_category_xattr(ctx, ino, name, None) {
            return done;
        }
        let removed = self.mutate(
            ctx,
            |m, time_ns| m.apply(&Op::RemoveXattr { ino, name, time_ns }),
            |_| vec![Invalidation::Inode { ino }],
        );
        match removed {
            // Linux removes an absent ACL without error (`set_acl(NULL)` on ext4 and tmpfs):
            // one equal to the mode is not stored at all.
            Err(Errno::ENODATA) if acl::is_acl_name(name) => Ok(()),
            other => other,
        }
    }
}

impl Mutation<'_> {
    /// Applies `create` and then the ACLs its inode inherited from its directory, committed
    /// whole; if an ACL cannot be set (memory), the creation is taken back, so no inode has a
    /// mode computed for ACLs it lacks.
    pub(crate) fn create_with_acls(
        &mut self,
        create: &Op<'_>,
        inherited: &Inherited,
    ) -> FsResult<()> {
        let Op::Create {
            parent,
            name,
            ino,
            mode,
            time_ns,
            ..
        } = *create
        else {
            unreachable!("not a create: {create:?}");
        };
        if inherited.access.is_none() && inherited.default.is_none() {
            return self.apply(create);
        }
        self.grouped(|m| {
            m.apply(create)?;
            let set = m.set_inherited_acls(ino, inherited, time_ns);
            if set.is_err() {
                let _ = if mode & libc::S_IFMT == libc::S_IFDIR {
                    m.apply(&Op::Rmdir {
                        parent,
                        name,
                        time_ns,
                    })
                } else {
                    m.apply(&Op::Unlink {
                        parent,
                        name,
                        time_ns,
                    })
                };
            }
            set
        })
    }

    /// Sets the access and default ACLs a new inode inherited (`State::inherit_acls`).
    pub(crate) fn set_inherited_acls(
        &mut self,
        ino: Ino,
        inherited: &Inherited,
        time_ns: crate::time::TimeNs,
    ) -> FsResult<()> {
        let acls = [
            (acl::ACCESS_XATTR, &inherited.access),
            (acl::DEFAULT_XATTR, &inherited.default),
        ];
        for (name, value) in acls {
            if let Some(value) = value {
                self.apply(&Op::SetXattr {
                    ino,
                    name,
                    value,
                    flags: 0,
                    time_ns,
                })?;
            }
        }
        Ok(())
    }
}

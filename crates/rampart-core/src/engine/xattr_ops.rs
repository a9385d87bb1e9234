//! Extended attributes through the engine.

use super::{Ctx, Engine, Invalidation};
use crate::attr::Ino;
use crate::error::{Errno, FsResult};
use crate::op::Op;
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
    }

    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        xattr::check_name(name)?;
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
        Ok(inode.xattrs.as_ref().map_or_else(Vec::new, |x| {
            x.list(|name| trusted || !name.starts_with(b"trusted."))
        }))
    }

    pub fn removexattr(&self, ctx: &Ctx, ino: Ino, name: &[u8]) -> FsResult<()> {
        self.mutate(
            ctx,
            |m, time_ns| m.apply(&Op::RemoveXattr { ino, name, time_ns }),
            |_| vec![Invalidation::Inode { ino }],
        )
    }
}

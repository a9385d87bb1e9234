//! rename(2) and renameat2's RENAME_NOREPLACE and RENAME_EXCHANGE.

use super::{check_entry_name, entry_cost, State};
use crate::attr::{FileKind, Ino};
use crate::error::{Errno, FsResult};
use crate::limits::LINK_COUNT_MAX;
use crate::op::{RENAME_EXCHANGE, RENAME_NOREPLACE};
use crate::time::TimeNs;

impl State {
    pub(super) fn apply_rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        flags: u32,
        time_ns: TimeNs,
    ) -> FsResult<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Errno::EINVAL);
        }
        check_entry_name(new_name)?;
        let (src, src_code) = self.child(parent, name)?;
        self.live_dir(new_parent)?;
        let dst = self.dir(new_parent)?.get(new_name);
        let src_is_dir = FileKind::from_code(src_code) == Some(FileKind::Directory);

        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or(Errno::ENOENT)?;
            return self.rename_exchange(
                [parent, new_parent],
                [name, new_name],
                (src, src_code),
                dst,
                time_ns,
            );
        }

        if dst.is_some() && flags & RENAME_NOREPLACE != 0 {
            return Err(Errno::EEXIST);
        }
        self.check_rename_trap(src, src_is_dir, parent, new_parent, dst)?;
        if let Some((dst, dst_code)) = dst {
            if dst == src {
                // Two names of one inode (or the same name): POSIX says do nothing.
                return Ok(());
            }
            let dst_is_dir = FileKind::from_code(dst_code) == Some(FileKind::Directory);
            match (src_is_dir, dst_is_dir) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                (true, true) if !self.dir(dst)?.is_empty() => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
        }
        if src_is_dir
            && parent != new_parent
            && dst.is_none()
            && self.inode(new_parent)?.nlink >= LINK_COUNT_MAX
        {
            return Err(Errno::EMLINK);
        }
        if dst.is_none() && !self.dir(new_parent)?.has_room_for(new_name.len()) {
            return Err(Errno::ENOSPC);
        }
        let cost = entry_cost(new_name) as i64 - entry_cost(name) as i64;
        if dst.is_none() && cost > 0 {
            self.budget.check(cost as u64)?;
        }
        // Validation is over.
        self.dir_mut(parent).remove(name);
        self.budget.apply(-(entry_cost(name) as i64));
        if let Some((dst, dst_code)) = dst {
            let dst_is_dir = FileKind::from_code(dst_code) == Some(FileKind::Directory);
            self.dir_mut(new_parent).replace(new_name, src, src_code);
            if dst_is_dir {
                let np = self.table.get_mut(new_parent).expect("new parent");
                np.nlink -= 1;
            }
            self.note_replaced_host_file(dst);
            self.drop_link(dst, time_ns);
        } else {
            self.dir_mut(new_parent).insert(new_name, src, src_code);
            self.budget.apply(entry_cost(new_name) as i64);
        }
        if src_is_dir {
            self.dir_mut(src).parent = new_parent;
            if parent != new_parent {
                self.table.get_mut(parent).expect("parent").nlink -= 1;
                self.table.get_mut(new_parent).expect("new parent").nlink += 1;
            }
        }
        self.table.get_mut(src).expect("source").ctime_ns = time_ns;
        self.touch_dir(parent, time_ns);
        self.touch_dir(new_parent, time_ns);
        Ok(())
    }

    /// The kernel's order (do_renameat2's trap): a directory moved into its own subtree
    /// (EINVAL), or over a directory holding the source (ENOTEMPTY), is refused before the
    /// kinds are compared. Through a mount the kernel has checked this already.
    fn check_rename_trap(
        &self,
        src: Ino,
        src_is_dir: bool,
        parent: Ino,
        new_parent: Ino,
        dst: Option<(Ino, u8)>,
    ) -> FsResult<()> {
        if src_is_dir && self.is_ancestor(src, new_parent)? {
            return Err(Errno::EINVAL);
        }
        if let Some((dst, dst_code)) = dst {
            if FileKind::from_code(dst_code) == Some(FileKind::Directory)
                && dst != src
                && self.is_ancestor(dst, parent)?
            {
                return Err(Errno::ENOTEMPTY);
            }
        }
        Ok(())
    }

    /// Remembers the host file of `ino`, a disk-tier file whose name a rename replaces.
    fn note_replaced_host_file(&mut self, ino: Ino) {
        let Ok(inode) = self.inode(ino) else { return };
        if inode.file().map(|f| f.tier()) == Some(crate::contents::Tier::Disk) {
            let name = crate::contents::host_file::host_file_name(ino, inode.generation);
            self.replaced_host_files.insert(name);
        }
    }

    /// RENAME_EXCHANGE: `names[0]` in `parents[0]` and `names[1]` in `parents[1]` swap inodes.
    fn rename_exchange(
        &mut self,
        [parent, new_parent]: [Ino; 2],
        [name, new_name]: [&[u8]; 2],
        (src, src_code): (Ino, u8),
        (dst, dst_code): (Ino, u8),
        time_ns: TimeNs,
    ) -> FsResult<()> {
        let src_is_dir = FileKind::from_code(src_code) == Some(FileKind::Directory);
        if src == dst {
            return Ok(());
        }
        let dst_is_dir = FileKind::from_code(dst_code) == Some(FileKind::Directory);
        if (src_is_dir && self.is_ancestor(src, new_parent)?)
            || (dst_is_dir && self.is_ancestor(dst, parent)?)
        {
            return Err(Errno::EINVAL);
        }
        self.dir_mut(parent).replace(name, dst, dst_code);
        self.dir_mut(new_parent).replace(new_name, src, src_code);
        if parent != new_parent && src_is_dir != dst_is_dir {
            let (into_new, into_old) = if src_is_dir { (1, -1) } else { (-1, 1) };
            let p = self.table.get_mut(parent).expect("parent");
            p.nlink = p.nlink.wrapping_add_signed(into_old);
            let np = self.table.get_mut(new_parent).expect("new parent");
            np.nlink = np.nlink.wrapping_add_signed(into_new);
        }
        if src_is_dir {
            self.dir_mut(src).parent = new_parent;
        }
        if dst_is_dir {
            self.dir_mut(dst).parent = parent;
        }
        for ino in [src, dst] {
            self.table.get_mut(ino).expect("inode").ctime_ns = time_ns;
        }
        self.touch_dir(parent, time_ns);
        self.touch_dir(new_parent, time_ns);
        Ok(())
    }
}

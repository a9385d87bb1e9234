//! The durability policy: what each applied op must honour on each persistence level, decided
//! from the inodes it touches. The one place that reads an inode's persistence spec; the
//! categories (MBFS §5) extend it.
//!
//! Data ops honour the inode's own durability; namespace ops (create, link, unlink, rename,
//! rmdir) are always persisted, so that replay finds the structure later ops expect, and are
//! as strong as the strongest directory and inode they touch (docs/decisions/0010).

use crate::attr::{Durability, Ino};
use crate::memory::file_data::CHUNK_BYTES;
use crate::namespace::inode::Inode;
use crate::op::Op;
use crate::persist::level::Route;
use crate::state::{State, CAPABILITY_XATTR};

/// What `op`, just applied to `state`, must honour on each level.
pub fn route(state: &State, op: &Op<'_>) -> Route {
    Route::store(store_durability(state, op))
}

/// The inode's own durability (the store default for a missing inode).
fn of(state: &State, ino: Ino) -> Durability {
    state
        .inode(ino)
        .map_or(Durability::default(), Inode::durability)
}

/// An inode with no names left (unlinked while open) is gone at the next restart: its changes
/// must not reach the journal, where replay would find no inode to apply them to.
fn orphan(state: &State, ino: Ino) -> bool {
    state.inode(ino).map_or(true, |i| i.nlink == 0)
}

fn store_durability(state: &State, op: &Op<'_>) -> Durability {
    let namespace = |parents: &[Ino]| {
        parents
            .iter()
            .fold(Durability::default(), |d, &p| d.stronger(of(state, p)))
    };
    // A volatile file's data never reaches the store; its metadata does (cheap), so that
    // making it durable again only needs its data re-journaled.
    let metadata = |ino: Ino| Durability::default().stronger(of(state, ino));
    match *op {
        Op::Write { ino, .. }
        | Op::WriteExtent { ino, .. }
        | Op::Migrate { ino, .. }
        | Op::Fallocate { ino, .. }
        | Op::SetAttr { ino, .. }
        | Op::SetXattr { ino, .. }
        | Op::RemoveXattr { ino, .. }
        | Op::SetDurability { ino, .. }
            if orphan(state, ino) =>
        {
            Durability::Volatile
        }
        Op::Write { ino, .. }
        | Op::WriteExtent { ino, .. }
        | Op::Migrate { ino, .. }
        | Op::Fallocate { ino, .. } => of(state, ino),
        Op::SetAttr {
            ino,
            size_bytes: Some(_),
            ..
        } => of(state, ino),
        Op::SetAttr { ino, .. }
        | Op::SetXattr { ino, .. }
        | Op::RemoveXattr { ino, .. }
        | Op::SetDurability { ino, .. } => metadata(ino),
        Op::Create { parent, ino, .. } | Op::Link { parent, ino, .. } => {
            namespace(&[parent]).stronger(of(state, ino))
        }
        Op::Unlink { parent, .. } | Op::Rmdir { parent, .. } => namespace(&[parent]),
        Op::Rename {
            parent, new_parent, ..
        } => namespace(&[parent, new_parent]),
    }
}

/// The ops that rebuild a file's current content after a volatile period, for `emit` to hand
/// to the levels: replay has the file's structure and metadata (journaled all along) but not
/// the data changes of that period. The ops are no-ops on the live state, so they are not
/// applied again. Order matters: empty the file, write the data, then owner and size (a chown
/// at replay clears setuid and capabilities), then mode and times, then the capability.
pub fn materialize(state: &State, ino: Ino, mut emit: impl FnMut(&Op<'_>)) {
    let Ok(inode) = state.inode(ino) else { return };
    let Some(file) = inode.file() else { return };
    let set = |mode, uid, gid, size_bytes, times: bool| Op::SetAttr {
        ino,
        mode,
        uid,
        gid,
        size_bytes,
        atime_ns: times.then(|| inode.atime()),
        mtime_ns: times.then_some(inode.mtime_ns),
        ctime_ns: inode.ctime_ns,
        kill_suidgid: false,
    };
    emit(&set(None, None, None, Some(0), false));
    if file.tier() == crate::contents::Tier::Disk {
        // The host file holds the bytes (synced before these records: data=ordered); replay
        // may find the file in either tier.
        emit(&Op::Migrate {
            ino,
            tier: crate::contents::Tier::Disk,
            time_ns: inode.mtime_ns,
        });
        if inode.size_bytes > 0 {
            emit(&Op::WriteExtent {
                ino,
                offset: 0,
                len: inode.size_bytes,
                time_ns: inode.mtime_ns,
                kill_suidgid: false,
            });
        }
    }
    for (index, bytes) in file.chunks() {
        emit(&Op::Write {
            ino,
            offset: (index * CHUNK_BYTES) as u64,
            data: bytes,
            time_ns: inode.mtime_ns,
            kill_suidgid: false,
        });
    }
    emit(&set(
        None,
        Some(inode.uid),
        Some(inode.gid),
        Some(inode.size_bytes),
        false,
    ));
    emit(&set(Some(inode.mode & 0o7777), None, None, None, true));
    if let Some(cap) = inode.xattrs.as_ref().and_then(|x| x.get(CAPABILITY_XATTR)) {
        emit(&Op::SetXattr {
            ino,
            name: CAPABILITY_XATTR,
            value: cap,
            flags: 0,
            time_ns: inode.ctime_ns,
        });
    }
}

/// The ops that make an unnamed file (`O_TMPFILE`) just given its first name `name` in
/// `parent`, at `time_ns`, known to the levels: while it had no links nothing about it was
/// journaled (`orphan`), so replay must create it under that name, then get its durability,
/// its extended attributes and, unless it is volatile (recovery drops those), its contents
/// and attributes (`materialize`). Hand them all with the create's `route`. None is applied
/// again: the live state already is what they describe.
pub fn materialize_linked(
    state: &State,
    ino: Ino,
    parent: Ino,
    name: &[u8],
    time_ns: crate::time::TimeNs,
    mut emit: impl FnMut(&Op<'_>),
) {
    let Ok(inode) = state.inode(ino) else { return };
    emit(&Op::Create {
        parent,
        name,
        ino,
        generation: inode.generation,
        mode: inode.mode,
        uid: inode.uid,
        gid: inode.gid,
        rdev: 0,
        target: b"",
        time_ns,
    });
    let durability = inode.durability();
    if durability != Durability::default() {
        emit(&Op::SetDurability {
            ino,
            durability: durability.code(),
            time_ns: inode.ctime_ns,
        });
    }
    if durability == Durability::Volatile {
        return;
    }
    // The capability goes last, after the chown that would drop it (`materialize`).
    let xattrs = inode.xattrs.iter().flat_map(|x| x.iter());
    for (name, value) in xattrs.filter(|(n, _)| *n != CAPABILITY_XATTR) {
        emit(&Op::SetXattr {
            ino,
            name,
            value,
            flags: 0,
            time_ns: inode.ctime_ns,
        });
    }
    materialize(state, ino, emit);
}

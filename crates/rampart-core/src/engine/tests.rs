//! Engine-level tests that reach into the state.

use super::*;
use crate::attr::{FileKind, Ino, ROOT_INO};

#[test]
fn repair_fixes_what_check_finds() {
    let e = Engine::new(EngineConfig::default());
    let c = Ctx::library(0, 0);
    let a = e.mkdir(&c, ROOT_INO, b"a", 0o755).unwrap().ino;
    let b = e.mkdir(&c, a, b"b", 0o755).unwrap().ino;
    let f = e.mknod(&c, b, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    e.write(&c, f, 0, b"keep me", false).unwrap();
    e.link(&c, f, ROOT_INO, b"f2").unwrap();
    {
        let mut st = e.state.write();
        assert!(st.check().is_empty());
        // A wrong link count, an entry naming no inode, and a cycle cut off from the root
        // (a no longer in /, and b naming a).
        st.table.get_mut(f).unwrap().nlink = 7;
        st.dir_mut(ROOT_INO)
            .insert(b"ghost", 4242, FileKind::RegularFile.code());
        st.dir_mut(ROOT_INO).remove(b"a");
        st.dir_mut(b).insert(b"loop", a, FileKind::Directory.code());
        let problems = st.check();
        assert!(problems.len() >= 3, "{problems:?}");
        let done = st.repair();
        assert!(!done.is_empty());
        let left = st.check();
        assert!(left.is_empty(), "after repair: {left:?}\ndone: {done:?}");
    }
    // The cut-off directory and its file are back under /lost+found, data intact.
    let found = e.lookup_path(b"/lost+found").unwrap();
    assert_eq!(found.kind, FileKind::Directory);
    let f_again = e
        .lookup_path(format!("/lost+found/#{a}/b/f").as_bytes())
        .unwrap();
    assert_eq!(f_again.ino, f);
    assert_eq!(f_again.nlink, 2);
    let mut buf = Vec::new();
    e.read(f, 0, 100, &mut buf).unwrap();
    assert_eq!(buf, b"keep me");
    assert!(e.lookup_path(b"/ghost").is_err());
}

#[test]
fn a_root_without_links_is_a_broken_invariant() {
    let e = Engine::new(EngineConfig::default());
    assert!(e.check().is_empty());
    e.state.write().table.get_mut(ROOT_INO).unwrap().nlink = 0;
    let problems = e.check();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("root directory has no links")),
        "{problems:?}"
    );
}

/// Records what the engine tells a mount.
#[derive(Default)]
struct Recorder(parking_lot::Mutex<Vec<Invalidation>>);

impl Observer for Recorder {
    fn invalidate(&self, what: &[Invalidation]) {
        self.0.lock().extend_from_slice(what);
    }
}

#[test]
fn the_kernel_is_told_of_privileges_a_write_takes_away_and_only_of_those() {
    let e = Engine::new(EngineConfig::default());
    let recorder = Arc::new(Recorder::default());
    e.set_observer(Some(recorder.clone()));
    let kernel = Ctx {
        uid: 65534,
        gid: 65534,
        kernel: true,
        umask: 0,
    };
    let f = e
        .mknod(&kernel, ROOT_INO, b"f", libc::S_IFREG | 0o4777, 0)
        .unwrap()
        .ino;
    // The kernel's own changes, and a write that takes nothing away: nothing to tell.
    e.write(&kernel, f, 0, b"a", false).unwrap();
    assert!(recorder.0.lock().is_empty());
    // A flagged write clears setuid behind the kernel's back: its attributes, not its pages.
    e.write(&kernel, f, 1, b"b", true).unwrap();
    assert_eq!(
        std::mem::take(&mut *recorder.0.lock()),
        vec![Invalidation::Attributes { ino: f }]
    );
    // The capability goes with any write, even root's.
    let root = Ctx { uid: 0, ..kernel };
    e.setxattr(&root, f, b"security.capability", &[1, 0, 0, 2], 0)
        .unwrap();
    e.write(&root, f, 2, b"c", false).unwrap();
    assert_eq!(
        std::mem::take(&mut *recorder.0.lock()),
        vec![Invalidation::Attributes { ino: f }]
    );
}

fn lookups(e: &Engine, ino: Ino) -> u64 {
    e.state
        .read()
        .inode(ino)
        .unwrap()
        .lookups
        .load(Ordering::Acquire)
}

/// The kernel's LOOKUP of "." and ".." for a file handle (decision 0142): the inode and a
/// directory's parent, counted until FORGET, with the generation; ESTALE once it is gone.
#[test]
fn a_lookup_by_number_counts_and_goes_stale_with_the_inode() {
    let e = Engine::new(EngineConfig::default());
    let kernel = Ctx {
        uid: 0,
        gid: 0,
        kernel: true,
        umask: 0,
    };
    let dir = e.mkdir(&kernel, ROOT_INO, b"d", 0o755).unwrap();
    let f = e
        .mknod(&kernel, dir.ino, b"f", libc::S_IFREG | 0o644, 0)
        .unwrap();
    e.forget(dir.ino, 1);
    e.forget(f.ino, 1);
    let me = e.lookup_by_number(&kernel, f.ino, false).unwrap();
    assert_eq!((me.ino, me.generation), (f.ino, f.generation));
    assert_eq!(lookups(&e, f.ino), 1);
    assert_eq!(
        e.lookup_by_number(&kernel, dir.ino, true).unwrap().ino,
        ROOT_INO
    );
    assert_eq!(
        e.lookup_by_number(&kernel, ROOT_INO, true).unwrap().ino,
        ROOT_INO
    );
    assert_eq!(
        e.lookup_by_number(&kernel, f.ino, true).unwrap_err(),
        Errno::ENOTDIR
    );
    // Unlinked but still looked up: the kernel holds it. Forgotten: gone.
    e.unlink(&kernel, dir.ino, b"f").unwrap();
    assert_eq!(
        e.lookup_by_number(&kernel, f.ino, false).unwrap().ino,
        f.ino
    );
    assert_eq!(lookups(&e, f.ino), 2);
    e.forget(f.ino, 2);
    assert_eq!(
        e.lookup_by_number(&kernel, f.ino, false).unwrap_err(),
        Errno::ESTALE
    );
    // The number reused: found, with a different generation (the handle's check fails).
    let g = e
        .mknod(&kernel, dir.ino, b"g", libc::S_IFREG | 0o644, 0)
        .unwrap();
    assert_eq!(g.ino, f.ino);
    assert_ne!(g.generation, f.generation);
    assert_eq!(
        e.lookup_by_number(&kernel, 999_999, false).unwrap_err(),
        Errno::ESTALE
    );
}

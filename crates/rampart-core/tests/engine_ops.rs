//! Engine behaviour through its public API, with the invariant checker run after every step.

use proptest::prelude::*;
use rampart_core::op::{RENAME_EXCHANGE, RENAME_NOREPLACE};
use rampart_core::{Ctx, Engine, EngineConfig, Errno, FileKind, SetAttr, ROOT_INO};

const FILE: u32 = libc::S_IFREG | 0o644;

fn engine_with_cap(cap: u64) -> Engine {
    Engine::new(EngineConfig {
        memory_cap_bytes: cap,
        ..EngineConfig::default()
    })
}

fn lib() -> Ctx {
    Ctx::library(1000, 1000)
}

fn kernel() -> Ctx {
    Ctx {
        uid: 0,
        gid: 0,
        kernel: true,
        umask: 0,
    }
}

fn assert_consistent(e: &Engine) {
    let problems = e.check();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn directory_link_counts_follow_subdirectories() {
    let e = engine_with_cap(1 << 30);
    let a = e.mkdir(&lib(), ROOT_INO, b"a", 0o755).unwrap();
    e.mkdir(&lib(), a.ino, b"b", 0o755).unwrap();
    e.mknod(&lib(), a.ino, b"f", FILE, 0).unwrap();
    assert_eq!(e.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(e.getattr(ROOT_INO).unwrap().nlink, 3);
    assert_eq!(e.rmdir(&lib(), ROOT_INO, b"a"), Err(Errno::ENOTEMPTY));
    e.rmdir(&lib(), a.ino, b"b").unwrap();
    assert_eq!(e.getattr(a.ino).unwrap().nlink, 2);
    assert_consistent(&e);
}

#[test]
fn rename_rules() {
    let e = engine_with_cap(1 << 30);
    let c = lib();
    let a = e.mkdir(&c, ROOT_INO, b"a", 0o755).unwrap();
    let b = e.mkdir(&c, a.ino, b"b", 0o755).unwrap();
    let x = e.mkdir(&c, ROOT_INO, b"x", 0o755).unwrap();
    e.mknod(&c, x.ino, b"inside", FILE, 0).unwrap();
    let f = e.mknod(&c, ROOT_INO, b"f", FILE, 0).unwrap();
    let g = e.mknod(&c, ROOT_INO, b"g", FILE, 0).unwrap();

    // Into its own subtree, or onto itself as parent.
    assert_eq!(
        e.rename(&c, ROOT_INO, b"a", b.ino, b"a2", 0),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        e.rename(&c, ROOT_INO, b"a", a.ino, b"a2", 0),
        Err(Errno::EINVAL)
    );
    // Kinds must match; a non-empty directory cannot be replaced.
    assert_eq!(
        e.rename(&c, ROOT_INO, b"f", ROOT_INO, b"a", 0),
        Err(Errno::EISDIR)
    );
    assert_eq!(
        e.rename(&c, ROOT_INO, b"a", ROOT_INO, b"f", 0),
        Err(Errno::ENOTDIR)
    );
    assert_eq!(
        e.rename(&c, ROOT_INO, b"a", ROOT_INO, b"x", 0),
        Err(Errno::ENOTEMPTY)
    );
    assert_eq!(
        e.rename(&c, ROOT_INO, b"f", ROOT_INO, b"g", RENAME_NOREPLACE),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        e.rename(&c, ROOT_INO, b"f", ROOT_INO, b"none", RENAME_EXCHANGE),
        Err(Errno::ENOENT)
    );
    assert_consistent(&e);

    // Replace a file: the old target is freed.
    e.rename(&c, ROOT_INO, b"f", ROOT_INO, b"g", 0).unwrap();
    assert_eq!(e.lookup_path(b"/g").unwrap().ino, f.ino);
    assert_eq!(e.getattr(g.ino), Err(Errno::ENOENT));
    // Exchange a file and a directory across directories: parents' link counts move.
    e.rename(&c, ROOT_INO, b"g", a.ino, b"b", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(e.lookup_path(b"/g").unwrap().ino, b.ino);
    assert_eq!(e.lookup_path(b"/a/b").unwrap().ino, f.ino);
    assert_eq!(e.lookup_path(b"/g/..").unwrap().ino, ROOT_INO);
    assert_eq!(e.getattr(a.ino).unwrap().nlink, 2);
    assert_consistent(&e);
    // Move a directory over an empty one elsewhere.
    let empty = e.mkdir(&c, a.ino, b"empty", 0o755).unwrap();
    e.rename(&c, ROOT_INO, b"g", a.ino, b"empty", 0).unwrap();
    assert_eq!(e.getattr(empty.ino), Err(Errno::ENOENT));
    assert_eq!(e.lookup_path(b"/a/empty/..").unwrap().ino, a.ino);
    assert_consistent(&e);
}

#[test]
fn unlinked_inode_lives_until_the_kernel_forgets_it() {
    let e = engine_with_cap(1 << 30);
    let k = kernel();
    let f = e.mknod(&k, ROOT_INO, b"f", FILE, 0).unwrap(); // counts one lookup
    e.write(&k, f.ino, 0, b"still readable", false).unwrap();
    e.unlink(&k, ROOT_INO, b"f").unwrap();
    let mut buf = Vec::new();
    e.read(f.ino, 0, 100, &mut buf).unwrap();
    assert_eq!(buf, b"still readable");
    assert_eq!(e.getattr(f.ino).unwrap().nlink, 0);
    e.forget(f.ino, 1);
    assert_eq!(e.getattr(f.ino), Err(Errno::ENOENT));
    assert_eq!(e.stats().files, 0);
    assert_consistent(&e);
}

#[test]
fn readdir_plus_lists_with_attributes_and_counts_what_it_hands_out() {
    let e = engine_with_cap(1 << 30);
    let k = kernel();
    let d = e.mkdir(&lib(), ROOT_INO, b"d", 0o755).unwrap();
    for name in [&b"a"[..], b"b", b"c"] {
        e.mknod(&lib(), d.ino, name, FILE, 0).unwrap(); // a library create counts no lookup
    }
    e.write(
        &lib(),
        e.lookup_path(b"/d/b").unwrap().ino,
        0,
        b"12345",
        false,
    )
    .unwrap();
    // A buffer that takes ".", "..", "a" and then is full: "b" is not handed out.
    let mut listed = Vec::new();
    e.readdir_plus(&k, d.ino, 0, |a, next, name| {
        if listed.len() == 3 {
            return false;
        }
        listed.push((name.to_vec(), a.ino, a.size_bytes, next));
        true
    })
    .unwrap();
    let names: Vec<&[u8]> = listed.iter().map(|l| &l.0[..]).collect();
    assert_eq!(names, [&b"."[..], b"..", b"a"]);
    assert_eq!((listed[0].1, listed[1].1), (d.ino, ROOT_INO));
    // The rest from the cookie after "a", as readdir gives it.
    let mut rest = Vec::new();
    e.readdir_plus(&k, d.ino, listed[2].3, |a, _, name| {
        rest.push((name.to_vec(), a.size_bytes));
        true
    })
    .unwrap();
    assert_eq!(rest, [(b"b".to_vec(), 5), (b"c".to_vec(), 0)]);
    let mut plain = Vec::new();
    e.readdir(d.ino, 0, |ino, _, _, name| {
        plain.push((name.to_vec(), ino));
        true
    })
    .unwrap();
    assert_eq!(plain.len(), 5);
    // "a" was handed out once, "b" and "c" once: each unlinked inode lives until one forget.
    for name in [&b"a"[..], b"b", b"c"] {
        let ino = e.lookup_path(&[b"/d/", name].concat()).unwrap().ino;
        e.unlink(&lib(), d.ino, name).unwrap();
        assert_eq!(
            e.getattr(ino).unwrap().nlink,
            0,
            "{name:?} freed before the kernel forgot it"
        );
        e.forget(ino, 1);
        assert_eq!(
            e.getattr(ino),
            Err(Errno::ENOENT),
            "{name:?} outlives its last forget"
        );
    }
    assert_consistent(&e);
}

#[test]
fn memory_cap_gives_enospc_and_recovers_after_deletes() {
    let e = engine_with_cap(4 << 20);
    let c = lib();
    let chunk = vec![7u8; 256 * 1024];
    let mut written = Vec::new();
    let full = (0..64).find_map(|i| {
        let name = format!("f{i}");
        let f = match e.mknod(&c, ROOT_INO, name.as_bytes(), FILE, 0) {
            Ok(f) => f,
            Err(err) => return Some(err),
        };
        written.push(name);
        e.write(&c, f.ino, 0, &chunk, false).err()
    });
    assert_eq!(full, Some(Errno::ENOSPC));
    assert!(e.stats().memory_used_bytes <= 4 << 20);
    assert_consistent(&e);
    for name in &written {
        e.unlink(&c, ROOT_INO, name.as_bytes()).unwrap();
    }
    let f = e.mknod(&c, ROOT_INO, b"again", FILE, 0).unwrap();
    e.write(&c, f.ino, 0, &chunk, false).unwrap();
    assert_consistent(&e);
}

#[test]
fn memory_cap_holds_for_many_small_inodes_and_is_given_back() {
    // Inodes cost little each, but the table holding them grows by doubling: that growth
    // must fit under the cap too, and an emptied table gives its memory back.
    let cap = 4 << 20;
    let e = engine_with_cap(cap);
    let c = lib();
    let empty = e.stats().memory_used_bytes;
    let mut made = 0u32;
    let full = loop {
        match e.mkdir(&c, ROOT_INO, format!("d{made}").as_bytes(), 0o755) {
            Ok(_) => made += 1,
            Err(err) => break err,
        }
        assert!(made < 1_000_000, "the cap never stopped mkdir");
    };
    assert_eq!(full, Errno::ENOSPC);
    let used = e.stats().memory_used_bytes;
    assert!(used <= cap, "{used} bytes used under a cap of {cap}");
    assert!(
        used > cap / 2,
        "ENOSPC with only {used} of {cap} bytes used"
    );
    assert_consistent(&e);
    for i in 0..made {
        e.rmdir(&c, ROOT_INO, format!("d{i}").as_bytes()).unwrap();
    }
    assert_consistent(&e);
    let left = e.stats().memory_used_bytes;
    assert!(
        left < empty + 64 * 1024,
        "{left} bytes still held after deleting everything ({empty} when empty)"
    );
    // And the room is usable again.
    let f = e.mknod(&c, ROOT_INO, b"again", FILE, 0).unwrap();
    e.write(&c, f.ino, 0, &vec![1u8; 2 << 20], false).unwrap();
    assert!(e.stats().memory_used_bytes <= cap);
}

#[test]
fn fallocate_reserves_memory_so_writes_into_the_range_cannot_fail() {
    let cap = 8 << 20;
    let e = engine_with_cap(cap);
    let c = lib();
    let a = e.mknod(&c, ROOT_INO, b"a", FILE, 0).unwrap().ino;
    e.fallocate(&c, a, 0, 4 << 20, 0).unwrap();
    assert_eq!(e.getattr(a).unwrap().size_bytes, 4 << 20);
    assert!(
        e.stats().memory_used_bytes >= 4 << 20,
        "fallocate reserved nothing"
    );
    // More than is left cannot be reserved.
    let b = e.mknod(&c, ROOT_INO, b"b", FILE, 0).unwrap().ino;
    assert_eq!(e.fallocate(&c, b, 0, 5 << 20, 0), Err(Errno::ENOSPC));
    // Fill what is left with another file...
    let chunk = vec![3u8; 64 * 1024];
    let mut offset = 0u64;
    while e.write(&c, b, offset, &chunk, false).is_ok() {
        offset += chunk.len() as u64;
    }
    assert!(e.stats().memory_used_bytes <= cap);
    // ...and the reserved range still takes its writes in full.
    let data = vec![9u8; 4 << 20];
    e.write(&c, a, 0, &data, false).unwrap();
    let mut back = Vec::new();
    e.read(a, 1 << 20, 16, &mut back).unwrap();
    assert_eq!(back, vec![9u8; 16]);
    // KEEP_SIZE reserves past the end without changing the size.
    let k = e.mknod(&c, ROOT_INO, b"k", FILE, 0).unwrap().ino;
    e.unlink(&c, ROOT_INO, b"b").unwrap();
    e.fallocate(&c, k, 0, 1 << 20, rampart_core::op::FALLOC_FL_KEEP_SIZE)
        .unwrap();
    assert_eq!(e.getattr(k).unwrap().size_bytes, 0);
    // Growing the file keeps what was reserved past its end; shrinking gives it back.
    let held = e.stats().memory_used_bytes;
    let grow = SetAttr {
        size_bytes: Some(100),
        ..SetAttr::default()
    };
    e.setattr(&c, k, &grow).unwrap();
    assert_eq!(e.stats().memory_used_bytes, held);
    let shrink = SetAttr {
        size_bytes: Some(0),
        ..SetAttr::default()
    };
    e.setattr(&c, k, &shrink).unwrap();
    assert!(e.stats().memory_used_bytes + (1 << 20) <= held + 4096);
    assert_consistent(&e);
}

#[test]
fn names_and_limits() {
    let e = engine_with_cap(1 << 30);
    let c = lib();
    let long = vec![b'n'; 256];
    assert_eq!(
        e.mknod(&c, ROOT_INO, &long, FILE, 0),
        Err(Errno::ENAMETOOLONG)
    );
    e.mknod(&c, ROOT_INO, &long[..255], FILE, 0).unwrap();
    assert_eq!(e.mknod(&c, ROOT_INO, b"a/b", FILE, 0), Err(Errno::EINVAL));
    assert_eq!(e.mknod(&c, ROOT_INO, b"..", FILE, 0), Err(Errno::EINVAL));
    let f = e.mknod(&c, ROOT_INO, b"f", FILE, 0).unwrap();
    assert_eq!(e.mknod(&c, f.ino, b"x", FILE, 0), Err(Errno::ENOTDIR));
    assert_eq!(
        e.symlink(&c, ROOT_INO, b"l", &[b'x'; 4096]),
        Err(Errno::ENAMETOOLONG)
    );
    assert_eq!(e.readlink(f.ino), Err(Errno::EINVAL));
    assert_consistent(&e);
}

#[test]
fn setgid_directories_pass_on_their_group() {
    let e = engine_with_cap(1 << 30);
    let d = e
        .mkdir(&Ctx::library(0, 50), ROOT_INO, b"shared", 0o2775)
        .unwrap();
    let f = e.mknod(&lib(), d.ino, b"f", FILE, 0).unwrap();
    let sub = e.mkdir(&lib(), d.ino, b"sub", 0o755).unwrap();
    assert_eq!((f.gid, sub.gid), (50, 50));
    assert_eq!(sub.perm & 0o2000, 0o2000);
    assert_eq!(f.perm & 0o2000, 0);
}

#[test]
fn truncate_and_times() {
    let e = engine_with_cap(1 << 30);
    let c = lib();
    let f = e.mknod(&c, ROOT_INO, b"f", FILE, 0).unwrap();
    e.write(&c, f.ino, 0, b"0123456789", false).unwrap();
    let set = SetAttr {
        size_bytes: Some(4),
        ..SetAttr::default()
    };
    e.setattr(&c, f.ino, &set).unwrap();
    let set = SetAttr {
        size_bytes: Some(8),
        mtime: Some(rampart_core::SetTime::At(1_234_567_890_123_456_789)),
        ..SetAttr::default()
    };
    let a = e.setattr(&c, f.ino, &set).unwrap();
    assert_eq!(a.mtime_ns, 1_234_567_890_123_456_789);
    let mut buf = Vec::new();
    e.read(f.ino, 0, 100, &mut buf).unwrap();
    assert_eq!(buf, b"0123\0\0\0\0");
    assert_consistent(&e);
}

#[derive(Debug, Clone)]
enum Action {
    Create(u8, u8, bool),
    Unlink(u8, u8),
    Rmdir(u8, u8),
    Rename(u8, u8, u8, u8, u32),
    Link(u8, u8, u8, u8),
    Write(u8, u8, u16, u16),
    Truncate(u8, u8, u32),
    Xattr(u8, u8, u8),
}

/// Directory slots: 0 is the root, 1..4 are /d1../d3 if they exist.
fn dir_ino(e: &Engine, d: u8) -> u64 {
    if d == 0 {
        return ROOT_INO;
    }
    e.lookup_path(format!("/d{d}").as_bytes())
        .map(|a| a.ino)
        .unwrap_or(ROOT_INO)
}

fn name(n: u8) -> Vec<u8> {
    if n < 3 {
        format!("d{}", n + 1).into_bytes()
    } else {
        format!("n{n}").into_bytes()
    }
}

fn action() -> impl Strategy<Value = Action> {
    let d = 0u8..4;
    let n = 0u8..8;
    prop_oneof![
        (d.clone(), n.clone(), any::<bool>()).prop_map(|(d, n, dir)| Action::Create(d, n, dir)),
        (d.clone(), n.clone()).prop_map(|(d, n)| Action::Unlink(d, n)),
        (d.clone(), n.clone()).prop_map(|(d, n)| Action::Rmdir(d, n)),
        (d.clone(), n.clone(), d.clone(), n.clone(), 0u32..3)
            .prop_map(|(a, b, c, e, f)| Action::Rename(a, b, c, e, f)),
        (d.clone(), n.clone(), d.clone(), n.clone())
            .prop_map(|(a, b, c, e)| Action::Link(a, b, c, e)),
        (d.clone(), n.clone(), any::<u16>(), 0u16..5000)
            .prop_map(|(a, b, o, l)| Action::Write(a, b, o, l)),
        (d.clone(), n.clone(), 0u32..200_000).prop_map(|(a, b, s)| Action::Truncate(a, b, s)),
        (d.clone(), n.clone(), any::<u8>()).prop_map(|(a, b, v)| Action::Xattr(a, b, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Whatever sequence of operations (valid or not) is applied, every invariant holds:
    /// link counts, parents, entry kinds, counts and the memory accounting.
    #[test]
    fn random_operations_keep_every_invariant(actions in proptest::collection::vec(action(), 1..60)) {
        let e = engine_with_cap(2 << 20);
        let c = lib();
        for a in actions {
            match a {
                Action::Create(d, n, dir) => {
                    let p = dir_ino(&e, d);
                    let _ = if dir { e.mkdir(&c, p, &name(n), 0o755) } else { e.mknod(&c, p, &name(n), FILE, 0) };
                }
                Action::Unlink(d, n) => { let _ = e.unlink(&c, dir_ino(&e, d), &name(n)); }
                Action::Rmdir(d, n) => { let _ = e.rmdir(&c, dir_ino(&e, d), &name(n)); }
                Action::Rename(d1, n1, d2, n2, f) => {
                    let flags = [0, RENAME_NOREPLACE, RENAME_EXCHANGE][f as usize];
                    let _ = e.rename(&c, dir_ino(&e, d1), &name(n1), dir_ino(&e, d2), &name(n2), flags);
                }
                Action::Link(d1, n1, d2, n2) => {
                    if let Ok(a) = e.lookup(&c, dir_ino(&e, d1), &name(n1)) {
                        let _ = e.link(&c, a.ino, dir_ino(&e, d2), &name(n2));
                    }
                }
                Action::Write(d, n, off, len) => {
                    if let Ok(a) = e.lookup(&c, dir_ino(&e, d), &name(n)) {
                        let data = vec![n; len as usize];
                        let r = e.write(&c, a.ino, u64::from(off) * 7, &data, false);
                        if a.kind == FileKind::Directory { prop_assert_eq!(r, Err(Errno::EISDIR)); }
                    }
                }
                Action::Truncate(d, n, size) => {
                    if let Ok(a) = e.lookup(&c, dir_ino(&e, d), &name(n)) {
                        let set = SetAttr { size_bytes: Some(u64::from(size)), ..SetAttr::default() };
                        let _ = e.setattr(&c, a.ino, &set);
                    }
                }
                Action::Xattr(d, n, v) => {
                    if let Ok(a) = e.lookup(&c, dir_ino(&e, d), &name(n)) {
                        if v % 3 == 0 {
                            let _ = e.removexattr(&c, a.ino, b"user.k");
                        } else {
                            let _ = e.setxattr(&c, a.ino, b"user.k", &vec![v; v as usize * 3], 0);
                        }
                    }
                }
            }
            let problems = e.check();
            prop_assert!(problems.is_empty(), "{:#?}", problems);
        }
    }
}

#[test]
fn writes_under_kernel_owned_times_keep_them_unless_setuid_goes() {
    use rampart_core::{SetTime, WriteTimes};
    let e = Engine::new(EngineConfig::default());
    let k = kernel();
    let f = e.mknod(&k, ROOT_INO, b"f", FILE | 0o6755, 0).unwrap().ino;
    let set = SetAttr {
        mtime: Some(SetTime::At(1_000_000_000)),
        ctime_ns: Some(2_000_000_000),
        ..SetAttr::default()
    };
    e.setattr(&k, f, &set).unwrap();
    e.write_with(&k, f, 0, b"data", false, WriteTimes::KeptByKernel)
        .unwrap();
    let a = e.getattr(f).unwrap();
    assert_eq!((a.mtime_ns, a.ctime_ns), (1_000_000_000, 2_000_000_000));
    assert_eq!(a.size_bytes, 4);
    // Dropping setuid/setgid changes ctime: the write stamps then.
    e.write_with(&k, f, 4, b"more", true, WriteTimes::KeptByKernel)
        .unwrap();
    let a = e.getattr(f).unwrap();
    assert!(
        a.ctime_ns > 2_000_000_000 && a.mtime_ns > 1_000_000_000,
        "{a:?}"
    );
    assert_eq!(a.perm & 0o6000, 0);
    // A library write stamps as before.
    e.setattr(&k, f, &set).unwrap();
    e.write(&k, f, 0, b"x", false).unwrap();
    assert!(e.getattr(f).unwrap().mtime_ns > 1_000_000_000);
    assert_consistent(&e);
}

//! Unnamed files (`O_TMPFILE`) through a store: nothing of one reaches the journal until `link`
//! names it, and then all of it does (docs/decisions/0051).

use std::sync::Arc;
use std::time::Duration;

use rampart_core::category::Origin;
use rampart_core::persist::device::{CrashMode, Device, SimDevice};
use rampart_core::persist::journal;
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::{Ctx, Durability, Engine, EngineConfig, Errno, SetAttr, ROOT_INO};

const ID: [u8; 16] = [7; 16];
const KERNEL: Ctx = Ctx {
    uid: 0,
    gid: 0,
    kernel: true,
    umask: 0,
};

fn mount(device: Arc<dyn Device>) -> (Arc<Engine>, Arc<Persister>) {
    let cfg = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    };
    let (engine, p, _) =
        rampart_core::persist::open(device, ID, &EngineConfig::default(), cfg).unwrap();
    (engine, p)
}

/// What a crash after the last sync leaves, mounted again.
fn after_crash(device: &SimDevice) -> Arc<Engine> {
    let image: Arc<dyn Device> = Arc::new(device.crash(CrashMode::LoseUnsynced));
    let (e, _p) = mount(image);
    assert!(e.check().is_empty(), "{:?}", e.check());
    e
}

fn read_all(e: &Engine, ino: u64, len: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    e.read(ino, 0, len as u32, &mut buf).unwrap();
    buf
}

fn root_names(e: &Engine) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    e.readdir(ROOT_INO, 0, |_, _, _, name| {
        names.push(name.to_vec());
        true
    })
    .unwrap();
    names
}

#[test]
fn an_unnamed_file_given_a_name_comes_back_whole_after_a_crash() {
    let device = Arc::new(SimDevice::new(11));
    let (e, p) = mount(device.clone());
    let d = e.mkdir(&KERNEL, ROOT_INO, b"d", 0o755).unwrap().ino;
    let t = e.tmpfile(&KERNEL, d, 0o600, true).unwrap();
    assert_eq!(t.nlink, 0);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    e.write(&KERNEL, t.ino, 0, &data, false).unwrap();
    e.setxattr(&KERNEL, t.ino, b"user.origin", b"tmpfile", 0)
        .unwrap();
    let set = SetAttr {
        mode: Some(0o640),
        uid: Some(1000),
        gid: Some(100),
        ..SetAttr::default()
    };
    e.setattr(&KERNEL, t.ino, &set).unwrap();
    // After the chown, which drops it (replay must keep that order).
    e.setxattr(&KERNEL, t.ino, b"security.capability", &[1, 0, 0, 2], 0)
        .unwrap();
    // A checkpoint while the file has no name leaves it out; the journal after it must be
    // enough.
    p.checkpoint(&e).unwrap();
    let named = e.link(&KERNEL, t.ino, d, b"kept").unwrap();
    assert_eq!(named.nlink, 1);
    // Ops after the name are journaled as for any file.
    e.setxattr(&KERNEL, t.ino, b"user.after", b"1", 0).unwrap();
    let live = e.getattr(t.ino).unwrap();
    e.sync().unwrap();

    let r = after_crash(&device);
    let a = r.lookup_path(b"/d/kept").unwrap();
    assert_eq!(a.ino, t.ino);
    assert_eq!((a.nlink, a.perm, a.uid, a.gid), (1, 0o640, 1000, 100));
    assert_eq!(
        (a.size_bytes, a.mtime_ns, a.ctime_ns),
        (live.size_bytes, live.mtime_ns, live.ctime_ns)
    );
    assert!(read_all(&r, a.ino, a.size_bytes) == data, "contents differ");
    assert_eq!(r.getxattr(a.ino, b"user.after").unwrap(), b"1");
    assert_eq!(r.getxattr(a.ino, b"user.origin").unwrap(), b"tmpfile");
    assert_eq!(
        r.getxattr(a.ino, b"security.capability").unwrap(),
        [1, 0, 0, 2]
    );
    let dir = r.lookup_path(b"/d").unwrap();
    let live_dir = e.getattr(d).unwrap();
    assert_eq!(dir.mtime_ns, live_dir.mtime_ns);
}

#[test]
fn an_unnamed_file_never_named_leaves_nothing_behind() {
    let device = Arc::new(SimDevice::new(12));
    let (e, _p) = mount(device.clone());
    let t = e.tmpfile(&KERNEL, ROOT_INO, 0o600, true).unwrap();
    e.write(&KERNEL, t.ino, 0, &[b'x'; 70_000], false).unwrap();
    e.set_durability(&KERNEL, t.ino, Durability::Volatile)
        .unwrap();
    // Made durable again while it has no name: still nothing to journal (its contents once
    // went to the journal for an inode replay never creates, and recovery failed).
    e.set_durability(&KERNEL, t.ino, Durability::default())
        .unwrap();
    e.sync().unwrap();
    e.forget(t.ino, 1); // closed: freed
    assert!(e.getattr(t.ino).is_err());

    let r = after_crash(&device);
    assert!(root_names(&r).iter().all(|n| n == b"." || n == b".."));
    let stats = r.stats();
    assert_eq!((stats.files, stats.data_bytes), (0, 0));
}

#[test]
fn an_exclusive_unnamed_file_is_never_named() {
    let e = Engine::new(EngineConfig::default());
    let t = e.tmpfile(&KERNEL, ROOT_INO, 0o600, false).unwrap();
    assert_eq!(e.link(&KERNEL, t.ino, ROOT_INO, b"x"), Err(Errno::ENOENT));
    // Nor is a named one once its last name is gone (Linux clears I_LINKABLE on the link).
    let u = e.tmpfile(&KERNEL, ROOT_INO, 0o600, true).unwrap();
    e.link(&KERNEL, u.ino, ROOT_INO, b"y").unwrap();
    e.unlink(&KERNEL, ROOT_INO, b"y").unwrap();
    assert_eq!(e.link(&KERNEL, u.ino, ROOT_INO, b"z"), Err(Errno::ENOENT));
    assert!(e.check().is_empty(), "{:?}", e.check());
}

#[test]
fn a_volatile_unnamed_file_given_a_name_is_dropped_at_recovery() {
    let device = Arc::new(SimDevice::new(13));
    let (e, _p) = mount(device.clone());
    let t = e.tmpfile(&KERNEL, ROOT_INO, 0o600, true).unwrap();
    e.set_durability(&KERNEL, t.ino, Durability::Volatile)
        .unwrap();
    e.write(&KERNEL, t.ino, 0, b"scratch", false).unwrap();
    e.link(&KERNEL, t.ino, ROOT_INO, b"v").unwrap();
    e.mknod(&KERNEL, ROOT_INO, b"after", libc::S_IFREG | 0o644, 0)
        .unwrap();
    e.sync().unwrap();
    let r = after_crash(&device);
    assert!(r.lookup_path(b"/v").is_err(), "a volatile file is not kept");
    assert!(r.lookup_path(b"/after").is_ok());
}

/// How many ops the store's journal holds.
fn journaled_ops(device: &SimDevice) -> usize {
    let bytes = device.read("journal").unwrap().unwrap_or_default();
    let scan = journal::scan(&bytes).unwrap();
    let mut ops = 0;
    for batch in &scan.batches {
        batch
            .for_each_op(|_, _| {
                ops += 1;
                Ok(())
            })
            .unwrap();
    }
    ops
}

#[test]
fn an_unnamed_file_gets_its_directorys_category_and_keeps_it_when_named() {
    let device = Arc::new(SimDevice::new(14));
    let (e, _p) = mount(device.clone());
    let safe = e.mkdir(&KERNEL, ROOT_INO, b"safe", 0o755).unwrap().ino;
    e.set_category(&KERNEL, safe, Some("SAFE"), Origin::Xattr)
        .unwrap();
    let t = e.tmpfile(&KERNEL, safe, 0o600, true).unwrap();
    let info = e.category(t.ino).unwrap();
    assert_eq!(
        (info.name.as_str(), info.origin, info.durability),
        ("SAFE", Origin::Directory, Durability::BeforeReturn)
    );
    assert!(e.writes_through(t.ino));
    // Named in the root (no category): it keeps SAFE, as a link or rename would.
    e.link(&KERNEL, t.ino, ROOT_INO, b"kept").unwrap();
    assert_eq!(e.category(t.ino).unwrap().name, "SAFE");
    // Durable when write returns: no sync before the crash.
    e.write(&KERNEL, t.ino, 0, b"durable", false).unwrap();
    let r = after_crash(&device);
    let a = r.lookup_path(b"/kept").unwrap();
    assert_eq!(read_all(&r, a.ino, a.size_bytes), b"durable");
    assert_eq!(r.category(a.ino).unwrap().name, "SAFE");
}

#[test]
fn an_unnamed_file_in_a_temporary_directory_never_reaches_the_journal() {
    let device = Arc::new(SimDevice::new(15));
    let (e, _p) = mount(device.clone());
    let tmp = e.mkdir(&KERNEL, ROOT_INO, b"tmp", 0o755).unwrap().ino;
    e.set_category(&KERNEL, tmp, Some("TEMPORARY"), Origin::Xattr)
        .unwrap();
    e.sync().unwrap();
    let before = journaled_ops(&device);
    assert!(before > 0, "the directory is journaled");
    let t = e.tmpfile(&KERNEL, tmp, 0o600, true).unwrap();
    let info = e.category(t.ino).unwrap();
    assert_eq!(
        (info.name.as_str(), info.origin, info.durability),
        ("TEMPORARY", Origin::Directory, Durability::Volatile)
    );
    e.write(&KERNEL, t.ino, 0, &[b's'; 10_000], false).unwrap();
    // Named, in its directory and in the root: still unknown to the store (decision 0066).
    e.link(&KERNEL, t.ino, tmp, b"scratch").unwrap();
    e.link(&KERNEL, t.ino, ROOT_INO, b"also").unwrap();
    assert!(!e.known_to_store(t.ino).unwrap());
    assert!(e.check().is_empty(), "{:?}", e.check());
    e.write(&KERNEL, t.ino, 10_000, b"more", false).unwrap();
    e.sync().unwrap();
    assert_eq!(
        journaled_ops(&device),
        before,
        "nothing of the file is journaled"
    );
    let r = after_crash(&device);
    assert!(r.lookup_path(b"/tmp").is_ok());
    assert!(r.lookup_path(b"/tmp/scratch").is_err());
    assert!(r.lookup_path(b"/also").is_err());
}

#[test]
fn an_unnamed_file_without_a_directory_category_gets_the_store_default() {
    let e = Engine::new(EngineConfig::default());
    let t = e.tmpfile(&KERNEL, ROOT_INO, 0o600, true).unwrap();
    let info = e.category(t.ino).unwrap();
    assert_eq!(info.origin, Origin::Default);
    assert_eq!(info.durability, Durability::default());
}

#[test]
fn a_temporary_unnamed_file_named_then_made_safe_reaches_the_store_whole() {
    let device = Arc::new(SimDevice::new(16));
    let (e, _p) = mount(device.clone());
    let tmp = e.mkdir(&KERNEL, ROOT_INO, b"tmp", 0o755).unwrap().ino;
    e.set_category(&KERNEL, tmp, Some("TEMPORARY"), Origin::Xattr)
        .unwrap();
    let t = e.tmpfile(&KERNEL, tmp, 0o600, true).unwrap();
    e.write(&KERNEL, t.ino, 0, b"kept after all", false)
        .unwrap();
    e.link(&KERNEL, t.ino, tmp, b"a").unwrap();
    e.link(&KERNEL, t.ino, ROOT_INO, b"b").unwrap();
    assert!(!e.known_to_store(t.ino).unwrap());
    // Its category now reaches the store: created there under both names, before it returns.
    e.set_category(&KERNEL, t.ino, Some("SAFE"), Origin::Xattr)
        .unwrap();
    assert!(e.known_to_store(t.ino).unwrap());
    let r = after_crash(&device);
    for path in [&b"/tmp/a"[..], b"/b"] {
        let a = r.lookup_path(path).unwrap();
        assert_eq!((a.ino, a.nlink), (t.ino, 2));
        assert_eq!(read_all(&r, a.ino, a.size_bytes), b"kept after all");
    }
}

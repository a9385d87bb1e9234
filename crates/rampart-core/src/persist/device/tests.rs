//! The contract both devices keep, and the simulation checked against the real device.

use super::*;
use std::sync::Arc;

pub(super) fn dir_device() -> (tempfile::TempDir, DirDevice) {
    let dir = tempfile::tempdir().unwrap();
    let dev = DirDevice::open(dir.path()).unwrap();
    (dir, dev)
}

fn bad_names() -> Vec<String> {
    vec![
        String::new(),
        ".".into(),
        "..".into(),
        "a/b".into(),
        "/abs".into(),
        "nul\0byte".into(),
        "x".repeat(256),
    ]
}

/// The visible contract, shared by both devices.
fn contract(dev: &dyn Device) {
    assert_eq!(dev.read("j").unwrap(), None);
    assert_eq!(dev.len("j").unwrap(), None);
    dev.append("j", b"hello").unwrap();
    dev.append("j", b" world").unwrap();
    assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello world"[..]));
    assert_eq!(dev.len("j").unwrap(), Some(11));
    dev.start_writeback("j").unwrap(); // a hint: the content is unchanged
    assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello world"[..]));
    assert_eq!(
        dev.start_writeback("absent").unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    dev.sync("j").unwrap();

    dev.truncate("j", 5).unwrap();
    assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello"[..]));
    dev.append("j", b"!").unwrap();
    assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello!"[..]));
    let e = dev.truncate("j", 100).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(
        dev.truncate("absent", 0).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        dev.sync("absent").unwrap_err().kind(),
        io::ErrorKind::NotFound
    );

    // write creates and replaces (a shorter content leaves nothing of the old one).
    dev.write("c", b"first version").unwrap();
    dev.write("c", b"second").unwrap();
    assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"second"[..]));
    dev.write("empty", b"").unwrap();
    assert_eq!(dev.read("empty").unwrap(), Some(vec![]));

    // rename replaces the target; appends to the new name land in the moved file.
    dev.write("tmp", b"new").unwrap();
    dev.sync("tmp").unwrap();
    dev.rename("tmp", "c").unwrap();
    assert_eq!(dev.read("tmp").unwrap(), None);
    assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"new"[..]));
    dev.append("c", b"er").unwrap();
    assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"newer"[..]));
    dev.rename("c", "c").unwrap();
    assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"newer"[..]));
    assert_eq!(
        dev.rename("absent", "c").unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"newer"[..]));

    // read_at: a window of the file, short at the end, empty past it; ENOENT if absent.
    let mut buf = [0u8; 4];
    assert_eq!(dev.read_at("c", 1, &mut buf).unwrap(), 4);
    assert_eq!(&buf, b"ewer");
    assert_eq!(dev.read_at("c", 3, &mut buf).unwrap(), 2);
    assert_eq!(&buf[..2], b"er");
    assert_eq!(dev.read_at("c", 5, &mut buf).unwrap(), 0);
    assert_eq!(dev.read_at("c", u64::MAX, &mut buf).unwrap(), 0);
    assert_eq!(
        dev.read_at("absent", 0, &mut buf).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    dev.release_replaced();
    assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"newer"[..]));

    // remove; absent is fine.
    dev.remove("c").unwrap();
    assert_eq!(dev.read("c").unwrap(), None);
    dev.remove("c").unwrap();
    dev.append("c", b"again").unwrap();
    assert_eq!(dev.read("c").unwrap().as_deref(), Some(&b"again"[..]));

    for name in bad_names() {
        let kind = io::ErrorKind::InvalidInput;
        assert_eq!(dev.read(&name).unwrap_err().kind(), kind, "{name:?}");
        assert_eq!(dev.len(&name).unwrap_err().kind(), kind);
        assert_eq!(dev.append(&name, b"x").unwrap_err().kind(), kind);
        assert_eq!(dev.write(&name, b"x").unwrap_err().kind(), kind);
        assert_eq!(dev.truncate(&name, 0).unwrap_err().kind(), kind);
        assert_eq!(dev.sync(&name).unwrap_err().kind(), kind);
        assert_eq!(dev.rename(&name, "j").unwrap_err().kind(), kind);
        assert_eq!(dev.rename("j", &name).unwrap_err().kind(), kind);
        assert_eq!(dev.remove(&name).unwrap_err().kind(), kind);
    }
    // The longest valid name works.
    let longest = "n".repeat(DEVICE_NAME_BYTES_MAX);
    dev.append(&longest, b"ok").unwrap();
    assert_eq!(dev.len(&longest).unwrap(), Some(2));
    assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"hello!"[..]));
}

/// `link` (the backup pair, decision 0123): a second name for a file, which keeps its content
/// when the first name is replaced by a rename; EEXIST over an existing name, ENOENT from a
/// missing one.
fn link_contract(dev: &dyn Device) {
    dev.write("checkpoint", b"old image").unwrap();
    dev.sync("checkpoint").unwrap();
    dev.link("checkpoint", "checkpoint.prev").unwrap();
    assert_eq!(
        dev.read("checkpoint.prev").unwrap().as_deref(),
        Some(&b"old image"[..])
    );
    dev.write("checkpoint.tmp", b"new image").unwrap();
    dev.sync("checkpoint.tmp").unwrap();
    dev.rename("checkpoint.tmp", "checkpoint").unwrap();
    assert_eq!(
        dev.read("checkpoint").unwrap().as_deref(),
        Some(&b"new image"[..])
    );
    assert_eq!(
        dev.read("checkpoint.prev").unwrap().as_deref(),
        Some(&b"old image"[..])
    );
    let e = dev.link("checkpoint", "checkpoint.prev").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    let e = dev.link("absent", "other").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert_eq!(dev.read("other").unwrap(), None);
    dev.remove("checkpoint.prev").unwrap();
    assert_eq!(dev.read("checkpoint.prev").unwrap(), None);
    assert_eq!(
        dev.read("checkpoint").unwrap().as_deref(),
        Some(&b"new image"[..])
    );
}

#[test]
fn dir_device_links() {
    let (_dir, dev) = dir_device();
    link_contract(&dev);
}

#[test]
fn sim_device_links_survive_a_crash_as_renames_do() {
    let dev = SimDevice::new(4);
    link_contract(&dev);
    dev.link("checkpoint", "checkpoint.prev").unwrap();
    for mode in [CrashMode::LoseUnsynced, CrashMode::TornTail] {
        let after = dev.crash(mode);
        assert_eq!(
            after.read("checkpoint.prev").unwrap().as_deref(),
            Some(&b"new image"[..])
        );
    }
    // A link is a sync point, which can fail (and then makes nothing).
    let before = dev.sync_count();
    dev.remove("checkpoint.prev").unwrap();
    dev.set_faults(Faults {
        fail_syncs: Some(FailSyncs {
            ops: &[SyncOp::Link],
            ..FailSyncs::after(0)
        }),
        ..Faults::default()
    });
    assert!(dev.link("checkpoint", "checkpoint.prev").is_err());
    assert_eq!(dev.read("checkpoint.prev").unwrap(), None);
    assert_eq!(dev.sync_count(), before + 1);
}

#[test]
fn dir_device_contract() {
    let (_dir, dev) = dir_device();
    contract(&dev);
}

#[test]
fn sim_device_contract() {
    contract(&SimDevice::new(1));
}

/// Whether `content` is `volatile` up to some cut and `durable` after it (the TornTail
/// model for files that did not shrink).
pub(super) fn is_torn_in_order(content: &[u8], durable: &[u8], volatile: &[u8]) -> bool {
    (0..=volatile.len()).any(|cut| {
        let mut c = volatile[..cut].to_vec();
        if cut < durable.len() {
            c.extend_from_slice(&durable[cut..]);
        }
        c == content
    })
}

#[test]
fn devices_are_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SimDevice>();
    assert_send_sync::<DirDevice>();
    let dev: Arc<dyn Device> = Arc::new(SimDevice::new(0));
    dev.append("a", b"x").unwrap();
    assert!(format!("{dev:?}").contains("\"a\""));
    let (_dir, real) = dir_device();
    assert!(format!("{real:?}").contains("DirDevice"));
}

#[derive(Clone, Debug)]
enum Action {
    Append(u8, Vec<u8>),
    Write(u8, Vec<u8>),
    WriteAt(u8, u64, Vec<u8>),
    Truncate(u8, u64),
    Sync(u8),
    Rename(u8, u8),
    Remove(u8),
    WriteAtSparse(u8, u64, Vec<u8>),
    SetLen(u8, u64),
    PunchHole(u8, u64, u64),
}

fn action() -> impl proptest::strategy::Strategy<Value = Action> {
    use proptest::prelude::*;
    let data = proptest::collection::vec(any::<u8>(), 0..20);
    prop_oneof![
        (0..4u8, data.clone()).prop_map(|(f, d)| Action::Append(f, d)),
        (0..4u8, data.clone()).prop_map(|(f, d)| Action::Write(f, d)),
        (0..4u8, 0..30u64, data.clone()).prop_map(|(f, o, d)| Action::WriteAt(f, o, d)),
        (0..4u8, 0..30u64).prop_map(|(f, l)| Action::Truncate(f, l)),
        (0..4u8).prop_map(Action::Sync),
        (0..4u8, 0..4u8).prop_map(|(a, b)| Action::Rename(a, b)),
        (0..4u8).prop_map(Action::Remove),
        (0..4u8, 0..40u64, data).prop_map(|(f, o, d)| Action::WriteAtSparse(f, o, d)),
        (0..4u8, 0..40u64).prop_map(|(f, l)| Action::SetLen(f, l)),
        (0..4u8, 0..30u64, 0..30u64).prop_map(|(f, o, l)| Action::PunchHole(f, o, l)),
    ]
}

fn apply(dev: &dyn Device, action: &Action) -> Result<(), io::ErrorKind> {
    let n = |f: &u8| format!("file{f}");
    match action {
        Action::Append(f, d) => dev.append(&n(f), d),
        Action::Write(f, d) => dev.write(&n(f), d),
        Action::WriteAt(f, o, d) => dev.write_at(&n(f), *o, d),
        Action::Truncate(f, l) => dev.truncate(&n(f), *l),
        Action::Sync(f) => dev.sync(&n(f)),
        Action::Rename(a, b) => dev.rename(&n(a), &n(b)),
        Action::Remove(f) => dev.remove(&n(f)),
        Action::WriteAtSparse(f, o, d) => dev.write_at_sparse(&n(f), *o, d),
        Action::SetLen(f, l) => dev.set_len(&n(f), *l),
        Action::PunchHole(f, o, l) => dev.punch_hole(&n(f), *o, *l),
    }
    .map_err(|e| e.kind())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// The simulation shows readers what the real device shows, and its crash images are
    /// always the unsynced changes in file order up to a cut, the durable bytes after it.
    #[test]
    fn sim_matches_dir_and_crashes_within_the_model(
        actions in proptest::collection::vec(action(), 1..40),
        seed in proptest::prelude::any::<u64>(),
    ) {
        let (_dir, real) = dir_device();
        let sim = SimDevice::new(seed);
        for a in &actions {
            proptest::prop_assert_eq!(apply(&real, a), apply(&sim, a), "{:?}", a);
        }
        for f in 0..4 {
            let name = format!("file{f}");
            proptest::prop_assert_eq!(real.read(&name).unwrap(), sim.read(&name).unwrap());
        }
        let torn = sim.crash(CrashMode::TornTail);
        for name in torn.names() {
            let content = torn.read(&name).unwrap().unwrap();
            let volatile = sim.read(&name).unwrap().unwrap();
            match sim.durable(&name) {
                Some(d) if volatile.len() >= d.len() => {
                    proptest::prop_assert!(is_torn_in_order(&content, &d, &volatile));
                }
                Some(d) => proptest::prop_assert_eq!(content, d),
                None => proptest::prop_assert!(volatile.starts_with(&content)),
            }
        }
        let lost = sim.crash(CrashMode::LoseUnsynced);
        for name in sim.names() {
            proptest::prop_assert_eq!(lost.read(&name).unwrap(), sim.durable(&name));
        }
    }
}

/// The calls for large files, the same on both devices.
fn large_file_contract(dev: &dyn Device) {
    dev.write("big", b"abcdef").unwrap();
    // write_at_sparse: past the end leaves a hole of zeros; within, it overwrites.
    dev.write_at_sparse("big", 10, b"XY").unwrap();
    assert_eq!(dev.read("big").unwrap().unwrap(), b"abcdef\0\0\0\0XY");
    assert_eq!(dev.len("big").unwrap(), Some(12));
    dev.write_at_sparse("big", 1, b"B").unwrap();
    assert_eq!(dev.read("big").unwrap().unwrap(), b"aBcdef\0\0\0\0XY");
    // Plain write_at still refuses holes.
    assert_eq!(
        dev.write_at("big", 13, b"z").unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    // punch_hole zeroes a range and keeps the length; past the end is ignored.
    dev.punch_hole("big", 2, 3).unwrap();
    assert_eq!(dev.read("big").unwrap().unwrap(), b"aB\0\0\0f\0\0\0\0XY");
    dev.punch_hole("big", 11, 100).unwrap();
    dev.punch_hole("big", 50, 1).unwrap();
    dev.punch_hole("big", 0, 0).unwrap();
    assert_eq!(dev.read("big").unwrap().unwrap(), b"aB\0\0\0f\0\0\0\0X\0");
    // set_len grows (a hole) and shrinks.
    dev.set_len("big", 20).unwrap();
    assert_eq!(dev.len("big").unwrap(), Some(20));
    let mut tail = [9u8; 8];
    assert_eq!(dev.read_at("big", 12, &mut tail).unwrap(), 8);
    assert_eq!(tail, [0; 8]);
    dev.set_len("big", 3).unwrap();
    assert_eq!(dev.read("big").unwrap().unwrap(), b"aB\0");
    dev.append("big", b"!").unwrap(); // appends find the new end
    assert_eq!(dev.read("big").unwrap().unwrap(), b"aB\0!");
    dev.sync("big").unwrap();
    for result in [
        dev.write_at_sparse("absent", 5, b"x"),
        dev.set_len("absent", 5),
        dev.punch_hole("absent", 0, 5),
    ] {
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::NotFound);
    }
    assert_eq!(dev.read("absent").unwrap(), None);
    for name in bad_names() {
        let kind = io::ErrorKind::InvalidInput;
        assert_eq!(
            dev.write_at_sparse(&name, 0, b"x").unwrap_err().kind(),
            kind
        );
        assert_eq!(dev.set_len(&name, 0).unwrap_err().kind(), kind);
        assert_eq!(dev.punch_hole(&name, 0, 1).unwrap_err().kind(), kind);
        assert_eq!(dev.file_for_passthrough(&name).unwrap_err().kind(), kind);
    }
}

#[test]
fn dir_device_large_files() {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::MetadataExt;
    let (dir, dev) = dir_device();
    large_file_contract(&dev);

    // A hole takes no blocks, and punch_hole frees them.
    dev.write("sparse", b"x").unwrap();
    dev.set_len("sparse", 64 << 20).unwrap();
    let path = dir.path().join("sparse");
    assert!(std::fs::metadata(&path).unwrap().blocks() * 512 < 1 << 20);
    dev.write("dense", &vec![7u8; 4 << 20]).unwrap();
    dev.sync("dense").unwrap();
    let dense = dir.path().join("dense");
    let before = std::fs::metadata(&dense).unwrap().blocks();
    dev.punch_hole("dense", 0, 4 << 20).unwrap();
    let after = std::fs::metadata(&dense).unwrap();
    assert_eq!(after.len(), 4 << 20);
    assert!(
        after.blocks() < before / 2,
        "{before} -> {}",
        after.blocks()
    );

    // The passthrough descriptor is the host file; the device sees what is written through
    // it, length included.
    let mut file = dev.file_for_passthrough("big").unwrap().unwrap();
    let mut content = Vec::new();
    file.read_to_end(&mut content).unwrap();
    assert_eq!(content, b"aB\0!");
    file.seek(std::io::SeekFrom::End(0)).unwrap();
    file.write_all(b" more").unwrap();
    assert_eq!(dev.len("big").unwrap(), Some(9));
    dev.append("big", b"?").unwrap();
    assert_eq!(dev.read("big").unwrap().unwrap(), b"aB\0! more?");
    assert_eq!(
        dev.file_for_passthrough("absent").unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[test]
fn sim_device_large_files() {
    let dev = SimDevice::new(3);
    large_file_contract(&dev);
    // No host file to hand out.
    assert!(dev.file_for_passthrough("big").unwrap().is_none());
    // The new calls change the volatile content only, until a sync.
    dev.write("f", b"abcd").unwrap();
    dev.sync("f").unwrap();
    dev.punch_hole("f", 1, 2).unwrap();
    dev.write_at_sparse("f", 6, b"z").unwrap();
    assert_eq!(dev.read("f").unwrap().unwrap(), b"a\0\0d\0\0z");
    let after = dev.crash(CrashMode::LoseUnsynced);
    assert_eq!(after.read("f").unwrap().unwrap(), b"abcd");
    dev.set_len("f", 2).unwrap();
    assert_eq!(
        dev.crash(CrashMode::TornTail).read("f").unwrap().unwrap(),
        b"abcd"
    );
    dev.sync("f").unwrap();
    assert_eq!(
        dev.crash(CrashMode::LoseUnsynced)
            .read("f")
            .unwrap()
            .unwrap(),
        b"a\0"
    );
}

/// Host files in the data folder: the same calls, named `data/...`, listed by `list_data`.
fn data_folder_contract(dev: &dyn Device) {
    assert!(dev.list_data().unwrap().is_empty());
    dev.create_data_folder().unwrap();
    dev.create_data_folder().unwrap(); // already there: fine
    let name = "data/0000000000000002-00000001";
    dev.write(name, b"").unwrap();
    dev.write_at_sparse(name, 4, b"tail").unwrap();
    dev.sync(name).unwrap();
    assert_eq!(dev.read(name).unwrap().unwrap(), b"\0\0\0\0tail");
    assert_eq!(dev.len(name).unwrap(), Some(8));
    dev.punch_hole(name, 4, 2).unwrap();
    dev.set_len(name, 7).unwrap();
    assert_eq!(dev.read(name).unwrap().unwrap(), b"\0\0\0\0\0\0i");
    dev.write("journal", b"j").unwrap();
    assert_eq!(dev.list_data().unwrap(), vec![name.to_string()]);
    for bad in ["data/", "data/a/b", "data/..", "data/data/x"] {
        assert_eq!(
            dev.write(bad, b"x").unwrap_err().kind(),
            io::ErrorKind::InvalidInput,
            "{bad}"
        );
    }
    dev.remove(name).unwrap();
    assert!(dev.list_data().unwrap().is_empty());
    assert_eq!(dev.read("journal").unwrap().unwrap(), b"j");
}

#[test]
fn dir_device_data_folder() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, dev) = dir_device();
    data_folder_contract(&dev);
    let mode = std::fs::metadata(dir.path().join("data"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    dev.write("data/f", b"x").unwrap();
    let mode = std::fs::metadata(dir.path().join("data/f"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn sim_device_data_folder() {
    let dev = SimDevice::new(5);
    data_folder_contract(&dev);
    // A host file follows the crash model of every file: unsynced writes may be lost.
    dev.write("data/h", b"old").unwrap();
    dev.sync("data/h").unwrap();
    dev.write_at_sparse("data/h", 0, b"new").unwrap();
    let after = dev.crash(CrashMode::LoseUnsynced);
    assert_eq!(after.read("data/h").unwrap().unwrap(), b"old");
    assert_eq!(after.list_data().unwrap(), vec!["data/h".to_string()]);
}

/// Dropping a file's synced bytes from the page cache changes nothing that can be read
/// (decision 0131); a missing file is ENOENT, as for every other call.
#[test]
fn dropping_cached_bytes_keeps_the_content() {
    let (_dir, dev) = dir_device();
    let data: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
    dev.write("journal", &data[..1 << 20]).unwrap();
    dev.append("journal", &data[1 << 20..]).unwrap();
    dev.sync("journal").unwrap();
    dev.drop_cached("journal", 4096, 2 << 20).unwrap();
    dev.drop_cached("journal", 0, 64 << 20).unwrap(); // past the end: fine
    assert_eq!(dev.read("journal").unwrap().unwrap(), data);
    let mut window = vec![0u8; 8192];
    assert_eq!(dev.read_at("journal", 1 << 20, &mut window).unwrap(), 8192);
    assert_eq!(window, data[1 << 20..(1 << 20) + 8192]);
    let missing = dev.drop_cached("nope", 0, 4096).unwrap_err();
    assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
    // The simulated device has no page cache: a no-op there.
    let sim = SimDevice::new(1);
    sim.write("journal", &data).unwrap();
    sim.drop_cached("journal", 0, 4096).unwrap();
    assert_eq!(sim.read("journal").unwrap().unwrap(), data);
}

//! The path API (`rampart_core::fs`), operation by operation, with the errno each failure
//! must carry; and a store written through it, closed and opened again.

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rampart_core::fs::{File, Fs, OpenOptions};
use rampart_core::{Durability, FileKind};

fn raw(e: std::io::Error) -> i32 {
    e.raw_os_error()
        .unwrap_or_else(|| panic!("no errno in {e:?}"))
}

#[test]
fn directories_create_list_and_remove() {
    let fs = Fs::in_memory();
    fs.create_dir("a").unwrap();
    assert_eq!(raw(fs.create_dir("a").unwrap_err()), libc::EEXIST);
    assert_eq!(raw(fs.create_dir("missing/x").unwrap_err()), libc::ENOENT);
    assert_eq!(raw(fs.create_dir("/").unwrap_err()), libc::EEXIST);
    fs.create_dir_all("a/b/c/d").unwrap();
    fs.write("a/file", b"x").unwrap();
    assert_eq!(
        fs.create_dir_all("a/file/x").unwrap_err().kind(),
        ErrorKind::NotADirectory
    );
    let mut listed: Vec<(String, FileKind)> = fs
        .read_dir("a")
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            assert_eq!(e.path(), Path::new("a").join(e.file_name()));
            assert_eq!(e.ino(), fs.symlink_metadata(e.path()).unwrap().ino());
            (e.file_name().to_str().unwrap().to_owned(), e.file_type())
        })
        .collect();
    listed.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        listed,
        [
            ("b".to_owned(), FileKind::Directory),
            ("file".to_owned(), FileKind::RegularFile)
        ]
    );
    assert_eq!(
        fs.read_dir("a/file").unwrap_err().kind(),
        ErrorKind::NotADirectory
    );
    assert_eq!(
        fs.remove_dir("a").unwrap_err().kind(),
        ErrorKind::DirectoryNotEmpty
    );
    assert_eq!(
        fs.remove_dir("a/file").unwrap_err().kind(),
        ErrorKind::NotADirectory
    );
    assert_eq!(raw(fs.remove_dir("/").unwrap_err()), libc::EBUSY);
    fs.remove_dir("a/b/c/d").unwrap();
    fs.remove_dir_all("a").unwrap();
    assert!(!fs.exists("a").unwrap());
    assert_eq!(fs.read_dir("/").unwrap().count(), 0);
}

#[test]
fn a_listing_of_many_entries_comes_in_batches_without_repeats() {
    let fs = Fs::in_memory();
    fs.create_dir("big").unwrap();
    for i in 0..1000 {
        fs.write(format!("big/{i}"), b"").unwrap();
    }
    let mut names: Vec<String> = fs
        .read_dir("big")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_owned())
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 1000);
    fs.create_dir_all("big/deep/er").unwrap();
    fs.remove_dir_all("big").unwrap();
    assert_eq!(fs.engine().stats().inodes(), 1);
}

#[test]
fn files_read_write_seek_append_truncate() {
    let fs = Fs::in_memory();
    fs.write("f", b"hello world").unwrap();
    assert_eq!(fs.read_to_string("f").unwrap(), "hello world");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fs, "f")
        .unwrap();
    f.seek(SeekFrom::Start(6)).unwrap();
    f.write_all(b"WORLD").unwrap();
    assert_eq!(f.seek(SeekFrom::End(-5)).unwrap(), 6);
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "WORLD");
    assert_eq!(f.seek(SeekFrom::Current(-11)).unwrap(), 0);
    assert_eq!(
        raw(f.seek(SeekFrom::Current(-1)).unwrap_err()),
        libc::EINVAL
    );
    f.set_len(3).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 3);
    f.set_len(5).unwrap();
    assert_eq!(fs.read("f").unwrap(), b"hel\0\0");
    drop(f);

    let mut a = OpenOptions::new().append(true).open(&fs, "f").unwrap();
    a.seek(SeekFrom::Start(0)).unwrap();
    a.write_all(b"!").unwrap(); // append ignores the position
    assert_eq!(fs.read("f").unwrap(), b"hel\0\0!");
    let mut buf = [0u8; 1];
    assert_eq!(raw(a.read(&mut buf).unwrap_err()), libc::EBADF);
    let mut r = File::open(&fs, "f").unwrap();
    assert_eq!(raw(r.write(b"x").unwrap_err()), libc::EBADF);
    assert_eq!(raw(r.set_len(0).unwrap_err()), libc::EINVAL);

    // truncate cuts, create makes, create_new refuses what exists, inconsistent options fail.
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&fs, "f")
        .unwrap();
    assert_eq!(fs.metadata("f").unwrap().len(), 0);
    let e = OpenOptions::new().write(true).open(&fs, "new").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let made = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&fs, "new")
        .unwrap();
    assert_eq!(made.metadata().unwrap().mode(), 0o600);
    let e = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fs, "new");
    assert_eq!(e.unwrap_err().kind(), ErrorKind::AlreadyExists);
    let e = OpenOptions::new().read(true).truncate(true).open(&fs, "f");
    assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidInput);
    let e = OpenOptions::new().open(&fs, "f");
    assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidInput);
    // Directories: readable handle, not writable; writing a file path with a slash fails.
    fs.create_dir("d").unwrap();
    assert!(File::open(&fs, "d").is_ok());
    assert_eq!(
        File::create(&fs, "d").unwrap_err().kind(),
        ErrorKind::IsADirectory
    );
    assert_eq!(
        File::create(&fs, "d/missing/x").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(raw(File::create(&fs, "nodir/").unwrap_err()), libc::EISDIR);
    assert_eq!(
        File::open(&fs, "f/").unwrap_err().kind(),
        ErrorKind::NotADirectory
    );
}

#[test]
fn a_removed_file_lives_while_open() {
    let fs = Fs::in_memory();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "tmp")
        .unwrap();
    f.write_all(b"still here").unwrap();
    fs.remove_file("tmp").unwrap();
    assert!(!fs.exists("tmp").unwrap());
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here");
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    assert_eq!(fs.engine().stats().files, 1);
    drop(f);
    assert_eq!(
        fs.engine().stats().files,
        0,
        "freed once the handle is dropped"
    );
}

#[test]
fn rename_links_and_symlinks() {
    let fs = Fs::in_memory();
    fs.create_dir_all("x/y").unwrap();
    fs.write("x/f", b"1").unwrap();
    fs.rename("x/f", "x/y/g").unwrap();
    assert_eq!(fs.read("x/y/g").unwrap(), b"1");
    assert_eq!(
        fs.rename("x/f", "z").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(raw(fs.rename("/", "z").unwrap_err()), libc::EBUSY);
    fs.create_dir("x/full").unwrap();
    fs.write("x/full/k", b"").unwrap();
    assert_eq!(
        fs.rename("x/y", "x/full").unwrap_err().kind(),
        ErrorKind::DirectoryNotEmpty
    );
    assert_eq!(raw(fs.rename("x", "x/y/inside").unwrap_err()), libc::EINVAL);

    fs.hard_link("x/y/g", "h").unwrap();
    assert_eq!(fs.metadata("h").unwrap().nlink(), 2);
    assert_eq!(raw(fs.hard_link("x", "dirlink").unwrap_err()), libc::EPERM);
    assert_eq!(
        fs.hard_link("h", "x/y/g").unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );

    fs.symlink("x/y", "sy").unwrap();
    fs.symlink("/x/y/g", "abs").unwrap();
    fs.symlink("dangling", "dl").unwrap();
    assert_eq!(fs.read("sy/g").unwrap(), b"1");
    assert_eq!(fs.read("abs").unwrap(), b"1");
    assert_eq!(fs.read_link("sy").unwrap(), Path::new("x/y"));
    assert_eq!(
        fs.read_link("h").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(fs.read("dl").unwrap_err().kind(), ErrorKind::NotFound);
    // Creating through a dangling link creates its target, as open(O_CREAT) does...
    fs.write("dl", b"made").unwrap();
    assert_eq!(fs.read("dangling").unwrap(), b"made");
    // ...but create_new refuses the link itself.
    let e = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fs, "dl");
    assert_eq!(e.unwrap_err().kind(), ErrorKind::AlreadyExists);
    // rename and remove_file act on the link, not its target.
    fs.rename("sy", "sy2").unwrap();
    fs.remove_file("sy2").unwrap();
    assert!(fs.metadata("x/y").unwrap().is_dir());
    assert_eq!(
        fs.remove_file("x").unwrap_err().kind(),
        ErrorKind::IsADirectory
    );
    fs.symlink("loop", "loop").unwrap();
    assert_eq!(raw(fs.read("loop").unwrap_err()), libc::ELOOP);
    assert_eq!(
        fs.symlink("t", "loop").unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    // A path of many symlinks, each within the limit, resolves.
    fs.write("end", b"e").unwrap();
    fs.symlink("end", "l0").unwrap();
    for i in 1..40 {
        fs.symlink(format!("l{}", i - 1), format!("l{i}")).unwrap();
    }
    assert_eq!(fs.read("l39").unwrap(), b"e");
    fs.symlink("l39", "l40").unwrap();
    assert_eq!(raw(fs.read("l40").unwrap_err()), libc::ELOOP);
}

#[test]
fn metadata_permissions_durability_and_xattrs() {
    let fs = Fs::from_engine(
        std::sync::Arc::new(rampart_core::Engine::new(Default::default())),
        1000,
        100,
    );
    // The root is root's; the library caller is trusted and creates as itself.
    fs.write("f", b"abc").unwrap();
    let m = fs.metadata("f").unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode(), m.len()), (1000, 100, 0o644, 3));
    assert!(m.is_file() && !m.is_dir() && !m.is_symlink());
    assert!(m.modified() >= m.accessed() - std::time::Duration::from_secs(1));
    assert_eq!(m.durability(), Durability::default());
    fs.set_permissions("f", std::fs::Permissions::from_mode(0o4755))
        .unwrap();
    assert_eq!(
        fs.metadata("f").unwrap().permissions().mode() & 0o7777,
        0o4755
    );
    // A write by a uid other than 0 clears setuid, as the kernel does.
    fs.write("f", b"changed").unwrap();
    assert_eq!(fs.metadata("f").unwrap().mode(), 0o755);
    fs.set_durability("f", Durability::Volatile).unwrap();
    assert_eq!(fs.metadata("f").unwrap().durability(), Durability::Volatile);

    fs.set_xattr("f", "user.a", b"1").unwrap();
    fs.set_xattr("f", "user.b", b"").unwrap();
    let mut names = fs.list_xattr("f").unwrap();
    names.sort();
    assert_eq!(names, ["user.a", "user.b"]);
    assert_eq!(fs.get_xattr("f", "user.a").unwrap(), b"1");
    fs.remove_xattr("f", "user.a").unwrap();
    assert_eq!(
        raw(fs.remove_xattr("f", "user.a").unwrap_err()),
        libc::ENODATA
    );
    assert_eq!(
        fs.get_xattr("missing", "user.a").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        raw(fs.set_xattr("f", "bogus", b"").unwrap_err()),
        libc::EOPNOTSUPP
    );
}

#[test]
fn a_store_written_through_the_library_is_there_after_close_and_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    rampart_core::store::mkfs(&store).unwrap();
    let fs = Fs::open(&store).unwrap();
    // A second opener is refused while the store is open.
    assert_eq!(
        Fs::open(&store).unwrap_err().kind(),
        ErrorKind::ResourceBusy
    );
    fs.create_dir_all("a/b").unwrap();
    fs.write("a/b/f", b"kept").unwrap();
    fs.symlink("b/f", "a/l").unwrap();
    fs.set_xattr("a/b/f", "user.k", b"v").unwrap();
    let handle = File::open(&fs, "a/b/f").unwrap();
    let fs2 = fs.clone();
    let e = fs.close().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResourceBusy);
    assert!(e.to_string().contains("2 other handles"), "{e}");
    drop(handle);
    fs2.close().unwrap();

    let fs = Fs::open(&store).unwrap();
    assert_eq!(fs.read("a/l").unwrap(), b"kept");
    assert_eq!(fs.get_xattr("a/b/f", "user.k").unwrap(), b"v");
    assert_eq!(fs.store().unwrap().recovery().ops_replayed, 0);
    assert_eq!(
        Fs::open(dir.path().join("none")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn synced_changes_survive_without_a_clean_close() {
    use rampart_core::persist::device::{CrashMode, SimDevice};
    use rampart_core::rampart::{Options, Rampart};
    use std::sync::Arc;
    let device = Arc::new(SimDevice::new(1));
    let opened = Rampart::open_device(device.clone(), [3; 16], &Options::default()).unwrap();
    let fs = Fs::from_rampart(opened, 0, 0);
    let mut f = File::create(&fs, "synced").unwrap();
    f.write_all(b"durable").unwrap();
    f.sync_all().unwrap();
    fs.write("unsynced", b"lost").unwrap();
    let image = device.crash(CrashMode::LoseUnsynced);
    let reopened = Rampart::open_device(Arc::new(image), [3; 16], &Options::default()).unwrap();
    let after = Fs::from_rampart(reopened, 0, 0);
    assert_eq!(after.read("synced").unwrap(), b"durable");
    assert!(!after.exists("unsynced").unwrap());
}

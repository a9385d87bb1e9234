//! The disk tier through the engine on a real store folder: placement at the threshold, reads
//! and writes through host files, trims, removal after unlink, migration back, recovery's pass
//! over data/, and the API the FUSE adapter uses for passthrough.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rampart_core::rampart::{Options, Rampart};
use rampart_core::{Ctx, Engine, EngineConfig, Ino, SetAttr, Tier, ROOT_INO};

const THRESHOLD: u64 = 8 << 10;
const FILE: u32 = libc::S_IFREG | 0o644;

fn options() -> Options {
    Options {
        engine: EngineConfig {
            large_file_threshold_bytes: Some(THRESHOLD),
            ..EngineConfig::default()
        },
        ..Options::default()
    }
}

fn store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    rampart_core::store::mkfs(&path).unwrap();
    (dir, path)
}

fn c() -> Ctx {
    Ctx::library(0, 0)
}

fn host_files(path: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<_> = std::fs::read_dir(path.join("data"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    out.sort();
    out
}

fn read_all(e: &Engine, ino: Ino) -> Vec<u8> {
    let size = e.getattr(ino).unwrap().size_bytes;
    let mut out = Vec::new();
    e.read(ino, 0, size as u32, &mut out).unwrap();
    out
}

/// A pattern no two offsets share within a file, so misplaced bytes show.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

#[test]
fn a_file_passing_the_threshold_moves_to_its_host_file_and_keeps_its_bytes() {
    let (_dir, path) = store();
    let fs = Rampart::open(&path, &options()).unwrap();
    let e = fs.engine();
    let f = e.mknod(&c(), ROOT_INO, b"big", FILE, 0).unwrap().ino;
    let first = pattern(6000, 1);
    e.write(&c(), f, 0, &first, false).unwrap();
    assert_eq!(e.tier(f), Ok(Tier::Memory));
    assert!(host_files(&path).is_empty());
    // A hole, then bytes past the threshold.
    let second = pattern(5000, 2);
    e.write(&c(), f, 20_000, &second, false).unwrap();
    assert_eq!(e.tier(f), Ok(Tier::Disk));
    let gen = e.getattr(f).unwrap().generation;
    let name = format!("{f:016x}-{gen:08x}");
    assert_eq!(host_files(&path), vec![(name.clone(), 25_000)]);
    let mut expected = first.clone();
    expected.resize(20_000, 0);
    expected.extend_from_slice(&second);
    assert_eq!(read_all(e, f), expected);
    // Writes after the move go to the host file.
    e.write(&c(), f, 100, b"middle", false).unwrap();
    expected[100..106].copy_from_slice(b"middle");
    assert_eq!(read_all(e, f), expected);
    let host = std::fs::read(path.join("data").join(&name)).unwrap();
    assert_eq!(host, expected);
    // The host file is private and sparse: the hole takes no block.
    let meta = std::fs::metadata(path.join("data").join(&name)).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    e.sync().unwrap();
    fs.close().unwrap();

    // A checkpoint refers to the host file; the bytes come back from it.
    let fs = Rampart::open(&path, &options()).unwrap();
    let e = fs.engine();
    let f = e.lookup_path(b"/big").unwrap().ino;
    assert_eq!(e.tier(f), Ok(Tier::Disk));
    assert_eq!(read_all(e, f), expected);
    assert_eq!(fs.recovery().host_files.files, 1);
    assert!(fs.recovery().host_files.damaged.is_empty());
}

#[test]
fn truncate_and_punch_give_space_back_and_a_small_file_comes_back_to_memory() {
    let (_dir, path) = store();
    let fs = Rampart::open(&path, &options()).unwrap();
    let e = fs.engine();
    let f = e.mknod(&c(), ROOT_INO, b"f", FILE, 0).unwrap().ino;
    let data = pattern(1 << 20, 3);
    e.write(&c(), f, 0, &data, false).unwrap();
    assert_eq!(e.tier(f), Ok(Tier::Disk));
    let name = host_files(&path)[0].0.clone();
    let blocks = |p: &Path| {
        std::fs::metadata(p.join("data").join(&name))
            .unwrap()
            .blocks()
    };
    let before = blocks(&path);
    // PUNCH_HOLE: zeros, and the host file's blocks go at once.
    e.fallocate(
        &c(),
        f,
        0,
        512 << 10,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    assert!(
        blocks(&path) < before * 3 / 4,
        "{} of {before}",
        blocks(&path)
    );
    let mut expected = data.clone();
    expected[..512 << 10].fill(0);
    assert_eq!(read_all(e, f), expected);
    // A shrink, still above the threshold/4: the host file shrinks too.
    let set = |size| SetAttr {
        size_bytes: Some(size),
        ..SetAttr::default()
    };
    e.setattr(&c(), f, &set(600 << 10)).unwrap();
    assert_eq!(host_files(&path), vec![(name.clone(), 600 << 10)]);
    expected.truncate(600 << 10);
    assert_eq!(read_all(e, f), expected);
    // Grows with a hole.
    e.setattr(&c(), f, &set(700 << 10)).unwrap();
    expected.resize(700 << 10, 0);
    assert_eq!(read_all(e, f), expected);
    assert_eq!(e.tier(f), Ok(Tier::Disk));
    // Below a quarter of the threshold: back to memory; once that is durable the host file
    // goes (decision 0059).
    e.setattr(&c(), f, &set(1000)).unwrap();
    assert_eq!(e.tier(f), Ok(Tier::Memory));
    expected.truncate(1000);
    assert_eq!(read_all(e, f), expected);
    assert!(host_files(&path).is_empty(), "{:?}", host_files(&path));
    fs.close().unwrap();
    let fs = Rampart::open(&path, &options()).unwrap();
    assert!(host_files(&path).is_empty(), "{:?}", host_files(&path));
    let f = fs.engine().lookup_path(b"/f").unwrap().ino;
    assert_eq!(read_all(fs.engine(), f), expected);
}

#[test]
fn unlink_removes_the_host_file_once_durable_and_recovery_removes_strangers() {
    let (_dir, path) = store();
    let fs = Rampart::open(&path, &options()).unwrap();
    let e = fs.engine();
    let f = e.mknod(&c(), ROOT_INO, b"gone", FILE, 0).unwrap().ino;
    e.write(&c(), f, 0, &pattern(50_000, 4), false).unwrap();
    let keep = e.mknod(&c(), ROOT_INO, b"kept", FILE, 0).unwrap().ino;
    e.write(&c(), keep, 0, &pattern(40_000, 5), false).unwrap();
    assert_eq!(host_files(&path).len(), 2);
    e.unlink(&c(), ROOT_INO, b"gone").unwrap();
    e.sync().unwrap();
    e.sync().unwrap();
    assert_eq!(host_files(&path).len(), 1);
    fs.close().unwrap();

    // Behind rampart's back: a stranger, and the kept file's host file made longer.
    std::fs::write(path.join("data/0000000000000099-00000001"), b"junk").unwrap();
    let kept = path.join("data").join(&host_files(&path)[0].0);
    let f = std::fs::OpenOptions::new().write(true).open(&kept).unwrap();
    f.set_len(90_000).unwrap();
    drop(f);
    let fs = Rampart::open(&path, &options()).unwrap();
    let report = &fs.recovery().host_files;
    assert_eq!(
        (report.orphans_removed, report.trimmed),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(host_files(&path).len(), 1);
    assert_eq!(std::fs::metadata(&kept).unwrap().len(), 40_000);
    let keep = fs.engine().lookup_path(b"/kept").unwrap().ino;
    assert_eq!(read_all(fs.engine(), keep), pattern(40_000, 5));
}

#[test]
fn a_short_host_file_reads_as_eio_not_zeros() {
    let (_dir, path) = store();
    let fs = Rampart::open(&path, &options()).unwrap();
    let e = fs.engine();
    let f = e.mknod(&c(), ROOT_INO, b"f", FILE, 0).unwrap().ino;
    e.write(&c(), f, 0, &pattern(30_000, 6), false).unwrap();
    fs.close().unwrap();
    let host = path.join("data").join(&host_files(&path)[0].0);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&host)
        .unwrap()
        .set_len(10_000)
        .unwrap();
    let fs = Rampart::open(&path, &options()).unwrap();
    assert_eq!(fs.recovery().host_files.damaged.len(), 1);
    let e = fs.engine();
    let f = e.lookup_path(b"/f").unwrap().ino;
    let mut out = Vec::new();
    e.read(f, 0, 5000, &mut out).unwrap();
    assert_eq!(out, pattern(30_000, 6)[..5000]);
    assert_eq!(
        e.read(f, 5000, 10_000, &mut out),
        Err(rampart_core::Errno::EIO)
    );
}

#[test]
fn the_passthrough_api_hands_out_the_host_file_and_logs_what_the_kernel_wrote() {
    use std::os::unix::fs::FileExt;
    let (_dir, path) = store();
    let fs = Rampart::open(&path, &options()).unwrap();
    let e = fs.engine();
    let small = e.mknod(&c(), ROOT_INO, b"small", FILE, 0).unwrap().ino;
    assert_eq!(e.host_file(small).unwrap().map(|_| ()), None);
    assert_eq!(
        e.passthrough_opened(small),
        Err(rampart_core::Errno::EINVAL)
    );
    let f = e.mknod(&c(), ROOT_INO, b"big", FILE, 0).unwrap().ino;
    e.write(&c(), f, 0, &pattern(20_000, 7), false).unwrap();
    let host = e.host_file(f).unwrap().expect("a host file");
    e.passthrough_opened(f).unwrap();
    // The kernel writes behind the engine, past the end.
    host.write_all_at(b"tail", 30_000).unwrap();
    e.host_file_changed(f).unwrap();
    assert_eq!(e.getattr(f).unwrap().size_bytes, 30_004);
    // While open for passthrough, a shrink does not bring it back to memory.
    e.setattr(
        &c(),
        f,
        &SetAttr {
            size_bytes: Some(10),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(e.tier(f), Ok(Tier::Disk));
    host.write_all_at(b"0123456789abcdef", 0).unwrap();
    e.passthrough_released(f).unwrap();
    assert_eq!(e.getattr(f).unwrap().size_bytes, 16);
    e.sync().unwrap();
    drop(host);
    fs.close().unwrap();
    let fs = Rampart::open(&path, &options()).unwrap();
    let f = fs.engine().lookup_path(b"/big").unwrap().ino;
    assert_eq!(read_all(fs.engine(), f), b"0123456789abcdef");
}

#[test]
fn the_threshold_comes_from_the_superblock_unless_the_mount_says() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let options_mkfs = rampart_core::store::MkfsOptions {
        large_file_threshold_bytes: 16 << 10,
    };
    rampart_core::store::mkfs_with(&path, &options_mkfs).unwrap();
    let fs = Rampart::open(&path, &Options::default()).unwrap();
    let e = fs.engine();
    let f = e.mknod(&c(), ROOT_INO, b"f", FILE, 0).unwrap().ino;
    e.write(&c(), f, 0, &pattern(12 << 10, 8), false).unwrap();
    assert_eq!(e.tier(f), Ok(Tier::Memory));
    e.write(&c(), f, 12 << 10, &pattern(8 << 10, 8), false)
        .unwrap();
    assert_eq!(e.tier(f), Ok(Tier::Disk));
    fs.close().unwrap();
    // Off at mount: new files stay in memory, the disk-tier one is still read.
    let off = Options {
        engine: EngineConfig {
            large_file_threshold_bytes: Some(u64::MAX),
            ..EngineConfig::default()
        },
        ..Options::default()
    };
    let fs = Rampart::open(&path, &off).unwrap();
    let e = fs.engine();
    let f = e.lookup_path(b"/f").unwrap().ino;
    assert_eq!(e.tier(f), Ok(Tier::Disk));
    assert_eq!(read_all(e, f).len(), 20 << 10);
    let g = e.mknod(&c(), ROOT_INO, b"g", FILE, 0).unwrap().ino;
    e.write(&c(), g, 0, &pattern(1 << 20, 9), false).unwrap();
    assert_eq!(e.tier(g), Ok(Tier::Memory));
    assert!(rampart_core::store::mkfs_with(
        &dir.path().join("tiny"),
        &rampart_core::store::MkfsOptions {
            large_file_threshold_bytes: 100
        }
    )
    .is_err());
}

/// A 4 MiB memory cap where only memory pressure moves files to disk (files of 64 KiB up).
fn pressure_options() -> Options {
    Options {
        engine: EngineConfig {
            memory_cap_bytes: 4 << 20,
            large_file_threshold_bytes: Some(u64::MAX - 1),
            evict_min_size_bytes: 64 << 10,
            ..EngineConfig::default()
        },
        ..Options::default()
    }
}

/// `n` files `f0`, `f1`, ... of 256 KiB each in the root, written in that order.
fn files_of_256_kib(e: &Engine, n: u8) -> Vec<Ino> {
    (0..n)
        .map(|i| {
            let name = format!("f{i}");
            let f = e
                .mknod(&c(), ROOT_INO, name.as_bytes(), FILE, 0)
                .unwrap()
                .ino;
            e.write(&c(), f, 0, &pattern(256 << 10, i), false)
                .unwrap_or_else(|err| panic!("file {i}: {err:?}"));
            f
        })
        .collect()
}

#[test]
fn memory_pressure_moves_the_coldest_large_files_to_disk_before_enospc() {
    let (_dir, path) = store();
    let fs = Rampart::open(&path, &pressure_options()).unwrap();
    let e = fs.engine();
    // 20 files of 256 KiB: 5 MiB, more than the cap of 4 MiB allows.
    let files = files_of_256_kib(e, 20);
    let tiers: Vec<Tier> = files.iter().map(|&f| e.tier(f).unwrap()).collect();
    // The first written (coldest) went to disk; the last stay in memory.
    assert_eq!(tiers[0], Tier::Disk, "{tiers:?}");
    assert_eq!(*tiers.last().unwrap(), Tier::Memory, "{tiers:?}");
    for (i, &f) in files.iter().enumerate() {
        assert_eq!(read_all(e, f), pattern(256 << 10, i as u8), "file {i}");
    }
    let stats = e.stats();
    assert!(
        stats.disk_files > 0 && stats.memory_files() > 0,
        "{stats:?}"
    );
    assert!(stats.memory_used_bytes <= 4 << 20);
    // statfs counts the file system under the store too.
    let st = e.statfs();
    let bs = u64::from(st.block_size);
    assert!(st.blocks_total * bs > 4 << 20, "{st:?}");
    assert!(st.blocks_free * bs > stats.memory_cap_bytes - stats.memory_used_bytes);
}

/// Found by fsx under `--memory-cap` (decision 0125): copy_file_range between memory files
/// answered ENOSPC where a write of the same bytes moves the coldest large files to disk.
#[test]
fn memory_pressure_moves_files_to_disk_before_a_copy_gets_enospc() {
    let (_dir, path) = store();
    let fs = Rampart::open(&path, &pressure_options()).unwrap();
    let e = fs.engine();
    // 14 files of 256 KiB: 3.5 MiB of the cap of 4 MiB.
    let files = files_of_256_kib(e, 14);
    assert!(files.iter().all(|&f| e.tier(f).unwrap() == Tier::Memory));
    // 1 MiB more by copies of the last file: past the cap unless files move out.
    let dst = e.mknod(&c(), ROOT_INO, b"copy", FILE, 0).unwrap().ino;
    let source = *files.last().unwrap();
    for k in 0..4u64 {
        let mut done = 0;
        while done < 256 << 10 {
            let n = e
                .copy_file_range(
                    &c(),
                    source,
                    done,
                    dst,
                    (k << 18) + done,
                    (256 << 10) - done,
                    false,
                    rampart_core::WriteTimes::Stamp,
                )
                .unwrap_or_else(|err| panic!("copy {k} at {done}: {err:?}"));
            assert!(n > 0, "copy {k} at {done} copied nothing");
            done += n;
        }
    }
    assert_eq!(
        e.tier(files[0]).unwrap(),
        Tier::Disk,
        "the coldest file moved"
    );
    assert_eq!(read_all(e, dst), pattern(256 << 10, 13).repeat(4));
    for (i, &f) in files.iter().enumerate() {
        assert_eq!(read_all(e, f), pattern(256 << 10, i as u8), "file {i}");
    }
    assert!(e.stats().memory_used_bytes <= 4 << 20);
}

#[test]
fn a_host_file_that_cannot_be_synced_fails_the_fsync_and_loses_nothing_else() {
    use rampart_core::persist::device::{FailSyncs, Faults, Files, SimDevice, SyncOp};
    use std::sync::Arc;
    let device = Arc::new(SimDevice::new(9));
    let fs = Rampart::open_device(device.clone(), [3; 16], &options()).unwrap();
    let e = fs.engine();
    let big = e.mknod(&c(), ROOT_INO, b"big", FILE, 0).unwrap().ino;
    e.write(&c(), big, 0, &pattern(20_000, 1), false).unwrap();
    e.sync().unwrap();
    device.set_faults(Faults {
        fail_syncs: Some(FailSyncs {
            after: 0,
            count: None,
            ops: &[SyncOp::Sync],
            files: Files::Prefix("data/".into()),
        }),
        ..Faults::default()
    });
    e.write(&c(), big, 100, b"lost?", false).unwrap();
    let small = e.mknod(&c(), ROOT_INO, b"small", FILE, 0).unwrap().ino;
    e.write(&c(), small, 0, b"kept", false).unwrap();
    // fsync answers the error (through both ways of asking) ...
    assert!(e.sync().is_err());
    e.write(&c(), big, 200, b"again", false).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    e.sync_async(Box::new(move |r| {
        tx.send(r.map_err(|e| e.raw_os_error())).unwrap()
    }));
    assert_eq!(rx.recv().unwrap(), Err(Some(libc::EIO)));
    // ... and the rest of the store goes on: the journal took everything else.
    device.clear_faults();
    e.sync().unwrap();
    let after = device.crash(rampart_core::persist::device::CrashMode::LoseUnsynced);
    drop(fs);
    let fs = Rampart::open_device(Arc::new(after), [3; 16], &options()).unwrap();
    let e = fs.engine();
    let small = e.lookup_path(b"/small").unwrap().ino;
    assert_eq!(read_all(e, small), b"kept");
    let big = e.lookup_path(b"/big").unwrap().ino;
    assert_eq!(read_all(e, big).len(), 20_000);
}

/// fsyncgate: a host-file sync that fails in a commit no fsync waited for (the committer's
/// timed commit) is told to the file's next fsync, once; the kernel would tell a later sync
/// of the host file nothing, so without this the program's fsync would succeed on lost data.
#[test]
fn a_host_sync_that_failed_with_no_one_waiting_is_told_to_the_files_next_fsync() {
    use rampart_core::persist::device::{FailSyncs, Faults, Files, SimDevice, SyncOp};
    use std::sync::Arc;
    let device = Arc::new(SimDevice::new(10));
    let mut opts = options();
    opts.persist.commit_interval = std::time::Duration::from_millis(20);
    let fs = Rampart::open_device(device.clone(), [5; 16], &opts).unwrap();
    let e = fs.engine();
    let big = e.mknod(&c(), ROOT_INO, b"big", FILE, 0).unwrap().ino;
    let other = e.mknod(&c(), ROOT_INO, b"other", FILE, 0).unwrap().ino;
    e.write(&c(), big, 0, &pattern(20_000, 1), false).unwrap();
    e.write(&c(), other, 0, &pattern(20_000, 2), false).unwrap();
    e.sync().unwrap();
    device.set_faults(Faults {
        fail_syncs: Some(FailSyncs {
            after: 0,
            count: Some(1),
            ops: &[SyncOp::Sync],
            files: Files::Prefix("data/".into()),
        }),
        ..Faults::default()
    });
    e.write(&c(), big, 100, b"lost?", false).unwrap();
    // The committer's own commit meets the failure; no fsync is waiting.
    let failures = fs.persister().host_sync_failures();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while fs.persister().host_sync_failures() == failures {
        assert!(
            std::time::Instant::now() < deadline,
            "no commit synced the host file"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Syncs work again: the journal commits, and the host file syncs without an error.
    e.sync().unwrap();
    // The other file's fsync has nothing to hear; the file's own fsync hears it once.
    let (big, other) = (
        e.host_sync_name(big).unwrap(),
        e.host_sync_name(other).unwrap(),
    );
    assert!(!e.take_host_sync_error(&other));
    assert!(e.take_host_sync_error(&big));
    assert!(!e.take_host_sync_error(&big));
}

#[test]
fn a_journal_of_version_1_is_replaced_by_one_of_version_2_before_anything_is_appended() {
    use rampart_core::persist::device::{Device, SimDevice};
    use rampart_core::persist::journal;
    use std::sync::Arc;
    let id = [4; 16];
    // A journal as version 1 wrote it (the header, then the zeros ahead), and no checkpoint.
    let mut v1 = journal::Header {
        store_id: id,
        base_seq: 0,
        created_ns: 1,
    }
    .encode_zeros_ahead()
    .to_vec();
    v1[8] = 1;
    let crc = crc32c::crc32c(&v1[..60]);
    v1[60..64].copy_from_slice(&crc.to_le_bytes());
    v1.resize(64 + 4096, 0);
    let device = Arc::new(SimDevice::new(1));
    device.write("journal", &v1).unwrap();
    device.sync("journal").unwrap();
    let fs = Rampart::open_device(device.clone(), id, &options()).unwrap();
    let version = |d: &SimDevice| {
        let bytes = d.read("journal").unwrap().unwrap();
        u32::from_le_bytes(bytes[8..12].try_into().unwrap())
    };
    assert_eq!(version(&device), journal::VERSION);
    assert!(device.read("checkpoint").unwrap().is_some());
    let e = fs.engine();
    let f = e.mknod(&c(), ROOT_INO, b"big", FILE, 0).unwrap().ino;
    e.write(&c(), f, 0, &pattern(20_000, 2), false).unwrap();
    e.sync().unwrap();
    assert_eq!(version(&device), journal::VERSION);
}

/// The FUSE queue threads read through `read_if_cached` (decision 0073): bytes in the host's
/// page cache come at once and are the file's; bytes that are not say so and leave nothing
/// read, and `read` then gives them; a short host file is EIO either way, never zeros.
#[test]
fn a_read_from_the_host_cache_only_gives_the_bytes_or_says_it_would_wait() {
    use std::os::fd::AsRawFd;
    let (_dir, path) = store();
    let fs = Rampart::open(&path, &options()).unwrap();
    let e = fs.engine();
    let f = e.mknod(&c(), ROOT_INO, b"f", FILE, 0).unwrap().ino;
    let bytes = pattern(1 << 20, 9);
    e.write(&c(), f, 0, &bytes, false).unwrap();
    e.sync().unwrap(); // clean pages: DONTNEED below can drop them
                       // A blocking read first: the host file's large folios reach past its end and so are not
                       // all up to date after the writes alone, and a RWF_NOWAIT read of such a folio says it
                       // would wait (this failed 2 to 5 runs in 10 under load, on an old binary too).
    assert_eq!(read_all(e, f), bytes);
    let mut out = Vec::new();
    assert!(e.read_if_cached(f, 4096, 65536, &mut out).unwrap());
    assert_eq!(out, bytes[4096..4096 + 65536]);
    // Past the end and at the end: nothing to wait for.
    assert!(e.read_if_cached(f, 1 << 20, 4096, &mut out).unwrap());
    assert!(out.is_empty());

    let host = std::fs::File::open(path.join("data").join(&host_files(&path)[0].0)).unwrap();
    // SAFETY: fadvise on an open descriptor; only a hint to the page cache.
    let rc = unsafe { libc::posix_fadvise(host.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
    let mut cold = vec![1u8; 3];
    if !e.read_if_cached(f, 512 << 10, 65536, &mut cold).unwrap() {
        assert!(cold.is_empty(), "nothing read when it would wait");
    } else {
        // The host kept the pages after all (DONTNEED is a hint): they must be right.
        assert_eq!(cold, bytes[512 << 10..(512 << 10) + 65536]);
    }
    e.read(f, 512 << 10, 65536, &mut cold).unwrap();
    assert_eq!(cold, bytes[512 << 10..(512 << 10) + 65536]);

    // Cut behind rampart's back: the cached read of the missing part never gives zeros.
    std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("data").join(&host_files(&path)[0].0))
        .unwrap()
        .set_len(100_000)
        .unwrap();
    match e.read_if_cached(f, 90_000, 20_000, &mut out) {
        Ok(false) => assert!(out.is_empty()),
        other => panic!("a short host file read from the cache gave {other:?}"),
    }
    assert_eq!(
        e.read(f, 90_000, 20_000, &mut out),
        Err(rampart_core::Errno::EIO)
    );
}

/// Found by fsx (memory-pressure, seed 10; 2026-11-27): a punch of a memory file applied as a
/// memory op after memory pressure had moved the file to the disk tier (another file's write
/// evicted it between the punch's look at the tier and its op) left the host file's bytes, so
/// the range read the old bytes, also after a remount (decision 0148). One thread punches
/// 4 KiB blocks of 128 KiB memory files one by one; another fills memory with small files, so
/// that each fill evicts the punching thread's file (the only candidate). Every punched block
/// must read zeros, in whichever tier the file ends. Without the fix this failed within about
/// 150 files.
#[test]
fn a_punch_racing_an_eviction_of_its_file_reads_zeros() {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    race_an_eviction(&|e, f, at| e.fallocate(&c(), f, at, RACE_BLOCK, mode));
}

/// The same race for a truncate down to a block and back up: the block must read zeros (not
/// the host file's old bytes, nor EIO from a host file shorter than the size).
#[test]
fn a_truncate_racing_an_eviction_of_its_file_reads_zeros() {
    let size = |s| SetAttr {
        size_bytes: Some(s),
        ..SetAttr::default()
    };
    race_an_eviction(&|e, f, at| {
        e.setattr(&c(), f, &size(at))?;
        e.setattr(&c(), f, &size(RACE_FILE_BYTES as u64))?;
        Ok(())
    });
}

const RACE_BLOCK: u64 = 4 << 10;
const RACE_FILE_BYTES: usize = 128 << 10;

/// Runs `change` (which must leave block `at` reading zeros) on block after block of 128 KiB
/// memory files, writing each block back, while another thread fills the 1 MiB cap with small
/// files so that memory pressure moves the file to the disk tier; 400 files.
fn race_an_eviction(change: &(dyn Fn(&Engine, Ino, u64) -> rampart_core::FsResult<()> + Sync)) {
    const ROUNDS: u32 = 400;
    let (_dir, path) = store();
    let options = Options {
        engine: EngineConfig {
            memory_cap_bytes: 1 << 20,
            large_file_threshold_bytes: Some(u64::MAX - 1),
            evict_min_size_bytes: 64 << 10,
            ..EngineConfig::default()
        },
        ..Options::default()
    };
    let fs = Rampart::open(&path, &options).unwrap();
    let e = fs.engine();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (mut failure, mut evicted) = (None, 0u32);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Small files (below --evict-min-size), never candidates themselves.
            let mut next = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let mut made = Vec::new();
                loop {
                    let name = format!("s{next}");
                    next += 1;
                    let Ok(f) = e.mknod(&c(), ROOT_INO, name.as_bytes(), FILE, 0) else {
                        break;
                    };
                    made.push(name);
                    // Memory taken by a reservation: no data to journal, so rounds are quick.
                    if e.fallocate(&c(), f.ino, 0, 32 << 10, 0).is_err() {
                        break;
                    }
                }
                for name in made {
                    e.unlink(&c(), ROOT_INO, name.as_bytes()).unwrap();
                }
            }
        });
        for round in 0..ROUNDS {
            let name = format!("p{round}");
            let f = e
                .mknod(&c(), ROOT_INO, name.as_bytes(), FILE, 0)
                .unwrap()
                .ino;
            let bytes = pattern(RACE_FILE_BYTES, round as u8);
            if e.write(&c(), f, 0, &bytes, false).is_err() {
                e.unlink(&c(), ROOT_INO, name.as_bytes()).unwrap();
                continue;
            }
            // Change a block, check it, write it back; until the file is on the disk tier.
            for block in (0..(RACE_FILE_BYTES as u64 / RACE_BLOCK)).cycle() {
                let moved = e.tier(f).unwrap() == Tier::Disk;
                let at = block * RACE_BLOCK;
                let mut read = Vec::new();
                let checked =
                    change(e, f, at).and_then(|()| e.read(f, at, RACE_BLOCK as u32, &mut read));
                if checked.is_err() || read.iter().any(|&b| b != 0) {
                    failure = Some(format!(
                        "round {round}, block {block}: {checked:?}, old bytes: {} (tier {:?})",
                        read.iter().any(|&b| b != 0),
                        e.tier(f).unwrap()
                    ));
                    break;
                }
                if moved {
                    evicted += 1;
                    break; // changed on the disk tier: the race is over for this file
                }
                let back = &bytes[at as usize..(at + RACE_BLOCK) as usize];
                if e.write(&c(), f, at, back, false).is_err() {
                    break;
                }
            }
            if failure.is_some() {
                break;
            }
            e.unlink(&c(), ROOT_INO, name.as_bytes()).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(failure, None);
    assert!(evicted > ROUNDS / 2, "only {evicted} files were evicted");
}

//! fallocate on the disk tier through the library: a request the file system refuses (a
//! length of 0, a mode it does not support) changes nothing, neither the file nor its host
//! file, and a memory file it would take past the threshold stays in memory.

use std::path::Path;

use rampart_core::rampart::{Options, Rampart};
use rampart_core::{Ctx, EngineConfig, Errno, Tier, ROOT_INO};

const THRESHOLD: u64 = 8 << 10;

fn options() -> Options {
    Options {
        engine: EngineConfig {
            large_file_threshold_bytes: Some(THRESHOLD),
            ..EngineConfig::default()
        },
        ..Options::default()
    }
}

fn host_lengths(store: &Path) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(store.join("data"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn a_refused_fallocate_changes_no_file_and_no_host_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    rampart_core::store::mkfs(&path).unwrap();
    let fs = Rampart::open(&path, &options()).unwrap();
    let (e, c) = (fs.engine(), Ctx::library(0, 0));
    let file = libc::S_IFREG | 0o644;
    let big = e.mknod(&c, ROOT_INO, b"big", file, 0).unwrap().ino;
    e.write(&c, big, 0, &vec![7u8; 20_000], false).unwrap();
    let small = e.mknod(&c, ROOT_INO, b"small", file, 0).unwrap().ino;
    e.write(&c, small, 0, b"in memory", false).unwrap();
    assert_eq!(
        (e.tier(big), e.tier(small)),
        (Ok(Tier::Disk), Ok(Tier::Memory))
    );
    let hosts = host_lengths(&path);
    assert_eq!(hosts, vec![20_000]);
    let refused: [(u64, i32, Errno); 4] = [
        (1 << 20, 0x40, Errno::EOPNOTSUPP), // no such mode
        (1 << 20, libc::FALLOC_FL_PUNCH_HOLE, Errno::EOPNOTSUPP), // punch needs KEEP_SIZE
        (
            1 << 20,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_ZERO_RANGE,
            Errno::EOPNOTSUPP,
        ),
        (0, 0, Errno::EINVAL), // a length of 0
    ];
    for (ino, size) in [(big, 20_000u64), (small, 9)] {
        for (length, mode, errno) in refused {
            assert_eq!(
                e.fallocate(&c, ino, 0, length, mode),
                Err(errno),
                "mode {mode:#x}, length {length}"
            );
            assert_eq!(e.getattr(ino).unwrap().size_bytes, size);
            assert_eq!(
                host_lengths(&path),
                hosts,
                "mode {mode:#x} touched a host file"
            );
        }
    }
    assert_eq!(
        e.tier(small),
        Ok(Tier::Memory),
        "moved by a refused request"
    );
    // A valid one still grows both.
    e.fallocate(&c, big, 0, 1 << 20, 0).unwrap();
    assert_eq!(host_lengths(&path), vec![1 << 20]);
    fs.close().unwrap();
}

//! A group of records larger than one journal batch (decision 0103): a store whose journal
//! ends in such a group without the batch that ends it recovers without any of the group,
//! fsck finds it clean, and the mount that drops it (zeroing it) can itself crash at any sync
//! point and leave a store that still recovers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rampart_core::fsck::{self, NoProgress, TailReport};
use rampart_core::op::Op;
use rampart_core::persist::device::{CrashMode, Device, Event, SimDevice};
use rampart_core::persist::journal::{self, BatchBuilder, Tail};
use rampart_core::persist::recovery::{recover, JOURNAL_FILE};
use rampart_core::rampart::Options;
use rampart_core::{Ctx, EngineConfig, Rampart, ROOT_INO};

const TIME_NS: i64 = 1_700_000_000_000_000_000;
const FIRST: &[u8] = b"first";

/// `bytes` (a batch as `take_batch` frames it) flagged `GROUP_CONTINUES`, its CRC anew.
fn continued(mut bytes: Vec<u8>) -> Vec<u8> {
    let count = u32::from_le_bytes(bytes[20..24].try_into().unwrap()) | journal::GROUP_CONTINUES;
    bytes[20..24].copy_from_slice(&count.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[12..]);
    bytes[8..12].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// `whole` (a journal ending clean) with a group of records cut short after it: `batches`
/// batches of 4 KiB writes to `ino`, each flagged as going on in the next, and not the batch
/// that ends the group (what a crash between two of its syncs leaves); then the zeros its
/// writer keeps ahead.
fn with_unfinished_group(whole: &[u8], ino: u64, batches: u64) -> Vec<u8> {
    let scan = journal::scan(whole).unwrap();
    assert_eq!(scan.tail, Tail::Clean);
    let mut out = whole[..scan.valid_len as usize].to_vec();
    let mut builder = BatchBuilder::new(scan.next_seq());
    for i in 0..batches {
        let data = vec![0xe0 + i as u8; 4096];
        let op = Op::Write {
            ino,
            offset: i * 4096,
            data: &data,
            time_ns: TIME_NS,
            kill_suidgid: false,
        };
        builder.add(&op, TIME_NS);
        out.extend(continued(builder.take_batch().unwrap()));
    }
    out.resize(
        out.len().max(whole.len()) + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN,
        0,
    );
    out
}

fn temp_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    rampart_core::store::mkfs(&path).expect("mkfs");
    (dir, path)
}

/// Makes `/a` holding [`FIRST`], synced, then stops as a crash would (no final checkpoint).
/// Returns its inode.
fn crashed_with_a_file(path: &Path) -> u64 {
    let fs = Rampart::open(path, &Options::default()).expect("open");
    let c = Ctx::library(0, 0);
    let f = fs
        .engine()
        .mknod(&c, ROOT_INO, b"a", libc::S_IFREG | 0o644, 0)
        .unwrap()
        .ino;
    fs.engine().write(&c, f, 0, FIRST, false).unwrap();
    fs.persister().sync().unwrap();
    fs.engine().set_sink(None);
    std::mem::forget(fs);
    std::fs::remove_file(path.join(rampart_core::store::LOCK_FILE)).unwrap();
    f
}

fn content(fs: &Rampart, path: &[u8]) -> Vec<u8> {
    let a = fs.engine().lookup_path(path).unwrap();
    let mut buf = Vec::new();
    fs.engine()
        .read(a.ino, 0, a.size_bytes as u32, &mut buf)
        .unwrap();
    buf
}

#[test]
fn fsck_of_a_journal_ending_in_an_unfinished_group_is_clean_and_the_mount_drops_the_group() {
    let (_dir, path) = temp_store();
    let ino = crashed_with_a_file(&path);
    let journal_path = path.join(JOURNAL_FILE);
    let whole = std::fs::read(&journal_path).unwrap();
    let valid_len = journal::scan(&whole).unwrap().valid_len;
    let cut = with_unfinished_group(&whole, ino, 3);
    std::fs::write(&journal_path, &cut).unwrap();

    // Nothing durable is lost: the group was never acknowledged; it is a torn tail.
    let r = fsck::check(&path, &NoProgress).unwrap();
    assert!(r.clean, "{:?}", r.problems);
    match &r.journal.tail {
        Some(TailReport::Torn { offset, reason, .. }) => {
            assert_eq!(*offset, valid_len);
            assert!(reason.contains("group of records cut short"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.journal.valid_bytes, valid_len);
    assert_eq!(r.replay.ops_applied, r.journal.ops);
    assert_eq!(std::fs::read(&journal_path).unwrap(), cut, "a check wrote");

    // The mount recovers the file as it was before the group, and zeroes the group.
    let fs = Rampart::open(&path, &Options::default()).unwrap();
    assert!(matches!(fs.recovery().tail, Tail::Torn { .. }));
    assert_eq!(content(&fs, b"/a"), FIRST);
    fs.close().unwrap();
    let r = fsck::check(&path, &NoProgress).unwrap();
    assert!(r.clean, "{:?}", r.problems);
    assert!(
        matches!(r.journal.tail, Some(TailReport::Clean)),
        "{:?}",
        r.journal.tail
    );
}

/// A journal of `/a` holding [`FIRST`] (inode 2) on a new simulated device, then a group of
/// `batches` batches cut short.
fn device_with_unfinished_group(batches: u64) -> Arc<SimDevice> {
    let whole = journal_of_a_file();
    let device = Arc::new(SimDevice::new(batches));
    device
        .write(JOURNAL_FILE, &with_unfinished_group(&whole, 2, batches))
        .unwrap();
    device.sync(JOURNAL_FILE).unwrap();
    device
}

/// A journal (this version's) making `/a` (inode 2) hold [`FIRST`], with the zeros after it.
fn journal_of_a_file() -> Vec<u8> {
    let mut whole = journal::Header {
        store_id: ID,
        base_seq: 0,
        created_ns: TIME_NS,
    }
    .encode_zeros_ahead()
    .to_vec();
    let mut builder = BatchBuilder::new(0);
    let create = Op::Create {
        parent: ROOT_INO,
        name: b"a",
        ino: 2,
        generation: 2,
        mode: libc::S_IFREG | 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        target: b"",
        time_ns: TIME_NS,
    };
    builder.add(&create, TIME_NS);
    let write = Op::Write {
        ino: 2,
        offset: 0,
        data: FIRST,
        time_ns: TIME_NS,
        kill_suidgid: false,
    };
    builder.add(&write, TIME_NS);
    whole.extend(builder.take_batch().unwrap());
    whole.resize(whole.len() + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN, 0);
    whole
}

/// A store whose journal is of version 2 (no `GROUP_CONTINUES`) replays it as before and gets
/// a checkpoint and a journal of this version before anything is appended: a version 2
/// reader would take a flagged batch's count for a count.
#[test]
fn a_journal_of_version_2_is_replaced_before_a_group_could_be_appended() {
    let mut v2 = journal_of_a_file();
    v2[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&v2[..60]);
    v2[60..64].copy_from_slice(&crc.to_le_bytes());
    let device = Arc::new(SimDevice::new(5));
    device.write(JOURNAL_FILE, &v2).unwrap();
    device.sync(JOURNAL_FILE).unwrap();
    let fs = Rampart::open_device(device.clone(), ID, &Options::default()).unwrap();
    assert_eq!(content(&fs, b"/a"), FIRST);
    let version = |d: &SimDevice| {
        let bytes = d.read(JOURNAL_FILE).unwrap().unwrap();
        u32::from_le_bytes(bytes[8..12].try_into().unwrap())
    };
    assert_eq!(version(&device), journal::VERSION);
    assert!(device.read("checkpoint").unwrap().is_some());
    drop(fs);
    assert_eq!(recovered_a(&device.crash(CrashMode::LoseUnsynced)), FIRST);
}

const ID: [u8; 16] = [3; 16];

/// What recovery of `device` finds at `/a`, refusing nothing.
fn recovered_a(device: &SimDevice) -> Vec<u8> {
    let (state, report) = recover(device, ID, &EngineConfig::default())
        .unwrap_or_else(|e| panic!("recovery refused: {e}"));
    let e = rampart_core::Engine::from_state(state);
    assert!(e.check().is_empty(), "{:?} ({report})", e.check());
    let a = e.lookup_path(b"/a").unwrap();
    let mut buf = Vec::new();
    e.read(a.ino, 0, a.size_bytes as u32, &mut buf).unwrap();
    buf
}

#[test]
fn a_crash_while_the_mount_zeroes_an_unfinished_group_leaves_a_store_that_recovers() {
    let options = Options::default();
    let total = {
        let device = device_with_unfinished_group(4);
        let before = device.sync_count();
        let fs = Rampart::open_device(device.clone(), ID, &options).unwrap();
        assert_eq!(content(&fs, b"/a"), FIRST);
        device.sync_count() - before
    };
    // The group's batches are zeroed last first, one sync each, after the rest of the tail.
    assert!(total >= 4, "{total} syncs");
    for k in 0..total {
        for mode in [
            CrashMode::LoseUnsynced,
            CrashMode::TornTail,
            CrashMode::Random,
        ] {
            let device = device_with_unfinished_group(4);
            device.fail_after_syncs(device.sync_count() + k);
            let opened = Rampart::open_device(device.clone(), ID, &options);
            drop(opened);
            let image = device.crash(mode);
            // Never damage (a later batch of the group valid after a zeroed one): recovery
            // drops what is left of the group and `/a` is as it was before it.
            assert_eq!(recovered_a(&image), FIRST, "crash after {k} syncs");
        }
    }
}

/// The zeroing's writes, each landed in part (its first or its last half: the sectors of an
/// unsynced write reach the disk in any order) after the ones before it: scanning never finds
/// damage, only the file before the group and what is left of the group, dropped. (Zeroed in
/// file order, the first half of one write over the whole group leaves its later batches
/// valid after an invalid one.)
#[test]
fn every_write_of_the_zeroing_landed_in_part_leaves_no_damage() {
    let device = device_with_unfinished_group(4);
    let mut journal = device.read(JOURNAL_FILE).unwrap().unwrap();
    let events_before = device.events().len();
    let fs = Rampart::open_device(device.clone(), ID, &Options::default()).unwrap();
    drop(fs);
    let writes: Vec<(usize, usize)> = device.events()[events_before..]
        .iter()
        .filter_map(|event| match event {
            Event::Write {
                name,
                offset,
                len,
                zeros,
            } if name == JOURNAL_FILE => {
                assert!(zeros, "the open wrote more than zeros to the journal");
                Some((*offset as usize, *len as usize))
            }
            _ => None,
        })
        .collect();
    assert!(writes.len() >= 4, "{writes:?}");
    for (i, &(offset, len)) in writes.iter().enumerate() {
        let half = len / 2;
        for landed in [offset..offset + half, offset + half..offset + len] {
            let mut partial = journal.clone();
            let end = landed.end.min(partial.len());
            partial.resize(partial.len().max(offset + len), 0);
            partial[landed.start..end.max(landed.start)].fill(0);
            let scan = journal::scan(&partial).unwrap();
            assert!(
                matches!(scan.tail, Tail::Clean | Tail::Torn { .. }),
                "write {i} ({offset}+{len}) landed at {landed:?}: {:?}",
                scan.tail
            );
            assert_eq!(scan.next_seq(), 2, "write {i}: the group is not dropped");
        }
        journal.resize(journal.len().max(offset + len), 0);
        journal[offset..offset + len].fill(0);
    }
}

//! A full disk, a failing checkpoint and a journal cut short (issue 16, items 2-4; decisions
//! 0036-0038): each ends with a clear answer and nothing acknowledged lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_core::persist::device::{
    CrashMode, Device, FailSyncs, Faults, Files, SimDevice, SyncOp,
};
use rampart_core::persist::persister::{PersistConfig, Persister, RESERVE_FILE};
use rampart_core::{Ctx, Engine, EngineConfig, ROOT_INO};

const ID: [u8; 16] = [3; 16];
const FILE: u32 = libc::S_IFREG | 0o644;
const FILE_BYTES: usize = 256 << 10;

fn open(
    device: Arc<dyn Device>,
    config: PersistConfig,
) -> Result<(Arc<Engine>, Arc<Persister>), String> {
    let (engine, p, report) =
        rampart_core::persist::open(device, ID, &EngineConfig::default(), config)
            .map_err(|e| e.to_string())?;
    eprintln!("recovered: {report}");
    Ok((engine, p))
}

fn name(i: usize) -> Vec<u8> {
    format!("f{i}").into_bytes()
}

/// Creates `f{i}` holding FILE_BYTES of `i as u8` and syncs; the sync's result.
fn write_synced(e: &Engine, i: usize) -> std::io::Result<()> {
    let c = Ctx::library(0, 0);
    let ino = e.mknod(&c, ROOT_INO, &name(i), FILE, 0).unwrap().ino;
    e.write(&c, ino, 0, &vec![i as u8; FILE_BYTES], false)
        .unwrap();
    e.sync()
}

fn holds(e: &Engine, i: usize) -> bool {
    let Ok(a) = e.lookup_path(&name(i)) else {
        return false;
    };
    let mut buf = Vec::new();
    e.read(a.ino, 0, FILE_BYTES as u32, &mut buf).unwrap();
    buf == vec![i as u8; FILE_BYTES]
}

#[test]
fn a_full_disk_answers_enospc_and_deleting_files_lets_the_mount_recover_by_itself() {
    let device = Arc::new(SimDevice::new(11));
    device.set_faults(Faults {
        capacity_bytes: Some(24 << 20),
        ..Faults::default()
    });
    let config = PersistConfig {
        commit_interval: Duration::from_millis(20),
        checkpoint_journal_bytes: u64::MAX,
        // Only a drop of the memory in use (files deleted) makes it try again soon.
        restart_retry_interval: Duration::from_secs(3600),
        reserve_bytes_min: 4 << 20,
        ..PersistConfig::default()
    };
    let (e, p) = open(device.clone(), config.clone()).unwrap();
    assert_eq!(device.len(RESERVE_FILE).unwrap(), Some(4 << 20));
    // Fill the disk: every sync that succeeds is acknowledged.
    let mut acknowledged = Vec::new();
    let full = (0..200)
        .find_map(|i| match write_synced(&e, i) {
            Ok(()) => {
                acknowledged.push(i);
                None
            }
            Err(err) => Some(err),
        })
        .expect("the disk never filled up");
    assert_eq!(full.kind(), std::io::ErrorKind::StorageFull, "{full}");
    assert!(acknowledged.len() > 20, "{} files", acknowledged.len());
    // Delete all but three files: the mount frees the journal's space by itself.
    let c = Ctx::library(0, 0);
    let kept: Vec<usize> = acknowledged[..3].to_vec();
    for &i in &acknowledged[3..] {
        e.unlink(&c, ROOT_INO, &name(i)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.error().is_some() {
        assert!(
            Instant::now() < deadline,
            "persistence never resumed: {:?}",
            p.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Working again: new changes are acknowledged, and the room is kept again (the
    // checkpoint that cleared the error grows the reserve after clearing it, so wait).
    write_synced(&e, 1000).unwrap();
    while device.len(RESERVE_FILE).unwrap() != Some(4 << 20) {
        assert!(
            Instant::now() < deadline,
            "the reserve was not grown again: {:?}",
            device.len(RESERVE_FILE)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(p.stats().checkpoints >= 1);
    // A power cut now: the deletions and the new file are durable, the kept files whole.
    let image: Arc<dyn Device> = Arc::new(device.crash(CrashMode::LoseUnsynced));
    let (r, _rp) = open(image, config).unwrap();
    for &i in &kept {
        assert!(holds(&r, i), "f{i} lost");
    }
    assert!(holds(&r, 1000));
    for &i in &acknowledged[3..] {
        assert!(r.lookup_path(&name(i)).is_err(), "deleted f{i} came back");
    }
}

#[test]
fn a_full_disk_loses_nothing_acknowledged_when_nothing_is_deleted() {
    let device = Arc::new(SimDevice::new(12));
    device.set_faults(Faults {
        capacity_bytes: Some(16 << 20),
        ..Faults::default()
    });
    let config = PersistConfig {
        commit_interval: Duration::from_millis(20),
        checkpoint_journal_bytes: u64::MAX,
        reserve_bytes_min: 2 << 20,
        ..PersistConfig::default()
    };
    let (e, _p) = open(device.clone(), config.clone()).unwrap();
    let mut acknowledged = Vec::new();
    for i in 0..200 {
        match write_synced(&e, i) {
            Ok(()) => acknowledged.push(i),
            Err(err) => {
                assert_eq!(err.kind(), std::io::ErrorKind::StorageFull, "{err}");
                break;
            }
        }
    }
    // Later fsyncs keep saying the disk is full (never EIO).
    let err = write_synced(&e, 500).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::StorageFull, "{err}");
    let image: Arc<dyn Device> = Arc::new(device.crash(CrashMode::TornTail));
    let (r, _rp) = open(image, config).unwrap();
    for &i in &acknowledged {
        assert!(holds(&r, i), "acknowledged f{i} lost");
    }
}

/// Faults that fail only the checkpoint's own file: its sync, or its rename.
fn failing_checkpoints(op: &'static [SyncOp]) -> Faults {
    Faults {
        fail_syncs: Some(FailSyncs {
            after: 0,
            count: None,
            ops: op,
            files: Files::Named("checkpoint.tmp".into()),
        }),
        ..Faults::default()
    }
}

fn commits_go_on_while_checkpoints_fail(op: &'static [SyncOp]) {
    let device = Arc::new(SimDevice::new(13));
    let config = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    };
    let (e, p) = open(device.clone(), config.clone()).unwrap();
    write_synced(&e, 0).unwrap();
    device.set_faults(failing_checkpoints(op));
    let failed = p.checkpoint(&e).unwrap_err();
    eprintln!("the checkpoint failed as it should: {failed}");
    // The journal works: commits go on, and the failure is reported, not sticky.
    for i in 1..5 {
        write_synced(&e, i).unwrap();
    }
    assert!(p.error().is_none(), "{:?}", p.error());
    let stats = p.stats();
    assert!(stats.error.is_none());
    assert!(
        stats
            .checkpoint_error
            .as_deref()
            .is_some_and(|m| m.contains("checkpoint")),
        "{stats:?}"
    );
    // Nothing it wrote is left to hold the disk.
    assert_eq!(device.len("checkpoint.tmp").unwrap(), None);
    // Every acknowledged change survives a power cut.
    let image: Arc<dyn Device> = Arc::new(device.crash(CrashMode::TornTail));
    let (r, _rp) = open(image, config).unwrap();
    assert!((0..5).all(|i| holds(&r, i)));
    // The disk heals: the next checkpoint succeeds and the report clears.
    device.clear_faults();
    p.checkpoint(&e).unwrap();
    assert!(p.stats().checkpoint_error.is_none());
    write_synced(&e, 5).unwrap();
}

#[test]
fn commits_go_on_while_checkpoint_syncs_fail() {
    commits_go_on_while_checkpoints_fail(&[SyncOp::Sync]);
}

#[test]
fn commits_go_on_while_checkpoint_renames_fail() {
    commits_go_on_while_checkpoints_fail(&[SyncOp::Rename]);
}

#[test]
fn a_journal_cut_in_the_middle_is_refused_and_a_torn_tail_is_not() {
    let device = Arc::new(SimDevice::new(14));
    let config = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    };
    let (e, _p) = open(device.clone(), config.clone()).unwrap();
    for i in 0..20 {
        write_synced(&e, i).unwrap();
    }
    // A torn last write: recovered, every acknowledged file there.
    let image = Arc::new(device.crash(CrashMode::TornTail));
    let (r, _rp) = open(image.clone(), config.clone()).unwrap();
    assert!((0..20).all(|i| holds(&r, i)));
    drop((r, _rp));
    // The journal cut in the middle: refused, naming the repair.
    let cut = device.crash(CrashMode::LoseUnsynced);
    let journal = cut.read("journal").unwrap().unwrap();
    cut.write("journal", &journal[..journal.len() / 2]).unwrap();
    cut.sync("journal").unwrap();
    let refused = open(Arc::new(cut), config).unwrap_err();
    assert!(
        refused.contains("cut short") && refused.contains("rampart fsck --repair"),
        "{refused}"
    );
}

/// A store of 24 MiB on a simulated disk, with a 1 MiB large-file threshold, commits every
/// 20 ms and no checkpoint but the one that restarts persistence (retried after deletions
/// only, not by the clock): the setting of the full-disk tests of decision 0119.
fn full_disk_tier_store(seed: u64) -> (Arc<SimDevice>, PersistConfig, Arc<Engine>, Arc<Persister>) {
    let device = Arc::new(SimDevice::new(seed));
    device.set_faults(Faults {
        capacity_bytes: Some(24 << 20),
        ..Faults::default()
    });
    let config = PersistConfig {
        commit_interval: Duration::from_millis(20),
        checkpoint_journal_bytes: u64::MAX,
        restart_retry_interval: Duration::from_secs(3600),
        reserve_bytes_min: 4 << 20,
        ..PersistConfig::default()
    };
    let engine_config = EngineConfig {
        large_file_threshold_bytes: Some(1 << 20),
        ..EngineConfig::default()
    };
    let (e, p, _) =
        rampart_core::persist::open(device.clone(), ID, &engine_config, config.clone()).unwrap();
    (device, config, e, p)
}

/// Waits (until `deadline`) for the checkpoint that restarts persistence to have failed.
fn wait_for_a_failed_checkpoint(p: &Persister, deadline: Instant) {
    while p.checkpoint_error().is_none() {
        assert!(Instant::now() < deadline, "no checkpoint was tried");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Decision 0119: with the journal stopped on a full disk, deleting a disk-tier file frees
/// its host file at once (behind the `freed` note), which lets the restarting checkpoint fit;
/// after a power cut the file stays deleted and every acknowledged file is whole.
#[test]
fn deleting_a_disk_tier_file_on_a_full_disk_frees_its_room_and_stays_deleted() {
    let (device, config, e, p) = full_disk_tier_store(12);
    let c = Ctx::library(0, 0);
    let big = e.mknod(&c, ROOT_INO, b"big", FILE, 0).unwrap().ino;
    for mib in 0..10u64 {
        e.write(&c, big, mib << 20, &vec![0xb1; 1 << 20], false)
            .unwrap();
    }
    e.sync().unwrap();
    assert_eq!(e.tier(big).unwrap(), rampart_core::Tier::Disk);
    let mut acknowledged = Vec::new();
    let full = (0..200)
        .find_map(|i| match write_synced(&e, i) {
            Ok(()) => {
                acknowledged.push(i);
                None
            }
            Err(err) => Some(err),
        })
        .expect("the disk never filled up");
    assert_eq!(full.kind(), std::io::ErrorKind::StorageFull, "{full}");
    let deadline = Instant::now() + Duration::from_secs(20);
    // The checkpoint tried at once fails: too much in memory for the room left.
    wait_for_a_failed_checkpoint(&p, deadline);
    e.unlink(&c, ROOT_INO, b"big").unwrap();
    while p.error().is_some() {
        assert!(
            Instant::now() < deadline,
            "deleting a 10 MiB disk-tier file did not let persistence resume: {:?}",
            p.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    write_synced(&e, 1000).unwrap();
    let image: Arc<dyn Device> = Arc::new(device.crash(CrashMode::LoseUnsynced));
    let (r, _rp) = open(image, config).unwrap();
    assert!(r.lookup_path(b"big").is_err(), "the deleted file came back");
    for &i in acknowledged.iter().chain(&[1000]) {
        assert!(holds(&r, i), "f{i} lost");
    }
}

/// Decision 0119: a rename over a disk-tier file on a full disk does not free the replaced
/// file early (recovery would drop its inode with the name the rename took, and the rename
/// was not journaled): after a power cut the target holds what was durable, while a file
/// deleted in the same state stays deleted.
#[test]
fn a_rename_over_a_disk_tier_file_on_a_full_disk_keeps_the_target_after_a_crash() {
    let (device, config, e, p) = full_disk_tier_store(13);
    let c = Ctx::library(0, 0);
    let disk_file = |name: &[u8], mib: u64, byte: u8| {
        let a = e.mknod(&c, ROOT_INO, name, FILE, 0).unwrap();
        for m in 0..mib {
            e.write(&c, a.ino, m << 20, &vec![byte; 1 << 20], false)
                .unwrap();
        }
        a
    };
    let target = disk_file(b"target", 2, 0x7a);
    let doomed = disk_file(b"doomed", 2, 0xd0);
    let new = e.mknod(&c, ROOT_INO, b"new", FILE, 0).unwrap().ino;
    e.write(&c, new, 0, b"new contents", false).unwrap();
    e.sync().unwrap();
    assert_eq!(e.tier(target.ino).unwrap(), rampart_core::Tier::Disk);
    let host = |a: &rampart_core::Attr| {
        rampart_core::contents::host_file::host_file_name(a.ino, a.generation as u32)
    };
    let full = (0..200)
        .find_map(|i| write_synced(&e, i).err())
        .expect("the disk never filled up");
    assert_eq!(full.kind(), std::io::ErrorKind::StorageFull, "{full}");
    let deadline = Instant::now() + Duration::from_secs(20);
    wait_for_a_failed_checkpoint(&p, deadline);
    e.rename(&c, ROOT_INO, b"new", ROOT_INO, b"target", 0)
        .unwrap();
    e.unlink(&c, ROOT_INO, b"doomed").unwrap();
    // The deleted file's host file goes early; the replaced one's was queued before it.
    while device.len(&host(&doomed)).unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the deleted file was not freed early"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        p.error().is_some(),
        "2 MiB freed should not let persistence resume"
    );
    let image: Arc<dyn Device> = Arc::new(device.crash(CrashMode::LoseUnsynced));
    let (r, _rp) = open(image, config).unwrap();
    assert!(
        r.lookup_path(b"doomed").is_err(),
        "the deleted file came back"
    );
    let t = r
        .lookup_path(b"target")
        .expect("the rename's target lost its name");
    let mut buf = Vec::new();
    r.read(t.ino, 0, 1 << 20, &mut buf).unwrap();
    let renamed = buf == b"new contents";
    assert!(
        renamed || buf == vec![0x7a; 1 << 20],
        "target holds neither file"
    );
    assert_eq!(
        renamed,
        r.lookup_path(b"new").is_err(),
        "new and target disagree"
    );
}

/// Decision 0119: a mount that applied the `freed` note removes it even when it matched no
/// inode (a crash between the note and the host file's removal, or names of files never
/// durable): kept, it could later match a durable file that reuses a number and generation.
#[test]
fn a_mount_removes_a_freed_note_that_matched_nothing() {
    use rampart_core::persist::freed_note::{self, FREED_FILE};
    let device = Arc::new(SimDevice::new(14));
    let config = PersistConfig::default();
    let (e, _p) = open(device.clone(), config.clone()).unwrap();
    write_synced(&e, 0).unwrap();
    let image = Arc::new(device.crash(CrashMode::LoseUnsynced));
    let stale = rampart_core::contents::host_file::host_file_name(999, 7);
    freed_note::write(image.as_ref(), &[stale]).unwrap();
    let (r, _rp) = open(image.clone(), config).unwrap();
    assert!(holds(&r, 0), "f0 lost");
    assert_eq!(
        image.len(FREED_FILE).unwrap(),
        None,
        "the note outlived the mount that applied it"
    );
}

//! The backup pair (decision 0123): a checkpoint keeps the one it replaces as
//! `checkpoint.prev` and its journal as `journal.prev`; when `checkpoint` is damaged,
//! truncated or deleted, recovery rebuilds exactly the state a clean recovery gives from the
//! chain `checkpoint.prev`, `journal.prev`, `journal`, and refuses it when the chain has a
//! gap (a checkpoint that restarted persistence after an I/O error).

mod common;

use std::sync::Arc;
use std::time::Duration;

use rampart_core::persist::device::{Device, FailSyncs, Faults, Files, SimDevice, SyncOp};
use rampart_core::persist::recovery::{recover, RecoveryError};
use rampart_core::{Engine, EngineConfig};

use common::{engine_on_sim_device, random_op, snapshot, Rng, Snapshot, STORE_ID};

/// `n` random ops on `engine`, then a sync.
fn synced_random_ops(engine: &Engine, rng: &mut Rng, n: usize) {
    for _ in 0..n {
        random_op(engine, rng);
    }
    engine.sync().unwrap();
}

/// A store after two checkpoints (background style, with commits between them) and more
/// commits: its device, and the snapshot of the acknowledged state.
fn store_with_backup(seed: u64) -> (Arc<SimDevice>, Arc<Engine>, Snapshot) {
    let (device, engine, persister) = engine_on_sim_device(seed, Duration::from_secs(3600), None);
    let mut rng = Rng(seed);
    let mut ops = |n: usize| {
        for i in 0..n {
            random_op(&engine, &mut rng);
            if i % 7 == 6 {
                engine.sync().unwrap();
            }
        }
        engine.sync().unwrap();
    };
    ops(60);
    persister.checkpoint(&engine).unwrap();
    ops(60);
    // In its steps, with commits between them, as the background thread runs it.
    let mut job = persister.checkpoint_begin(&engine).unwrap();
    ops(10);
    job.write_image().unwrap();
    ops(10);
    job.copy_tail().unwrap();
    ops(10);
    job.finish().unwrap();
    ops(60);
    assert!(device.read("checkpoint.prev").unwrap().is_some());
    assert!(device.read("journal.prev").unwrap().is_some());
    let acknowledged = snapshot(&engine);
    (device, engine, acknowledged)
}

/// Damage: a bit flipped in the middle of `checkpoint`.
fn flip_checkpoint(d: &SimDevice) {
    let len = d.len("checkpoint").unwrap().unwrap();
    d.flip_bit("checkpoint", len * 4).unwrap();
}

/// Recovers a crash image of `device` after `damage`, and checks it gives `expected`, from
/// the backup.
fn recovers_from_backup(device: &SimDevice, damage: impl Fn(&SimDevice), expected: &Snapshot) {
    let image = device.crash(rampart_core::persist::device::CrashMode::LoseUnsynced);
    // Without damage: the clean recovery, which the backup must equal.
    let (clean, report) = recover(&image, STORE_ID, &EngineConfig::default()).unwrap();
    assert!(report.backup_used.is_none());
    assert_eq!(&snapshot(&Engine::from_state(clean)), expected);
    damage(&image);
    let (state, report) = recover(&image, STORE_ID, &EngineConfig::default())
        .unwrap_or_else(|e| panic!("recovery refused: {e}"));
    assert!(report.backup_used.is_some(), "{report}");
    assert!(report.to_string().contains("checkpoint.prev"), "{report}");
    let recovered = Engine::from_state(state);
    assert!(recovered.check().is_empty(), "{:?}", recovered.check());
    let got = snapshot(&recovered);
    assert!(
        &got == expected,
        "{report}: {}",
        common::diff(expected, &got)
    );
}

#[test]
fn a_flipped_byte_in_the_checkpoint_recovers_from_the_backup() {
    for seed in 0..4 {
        let (device, _engine, acknowledged) = store_with_backup(seed);
        let len = device.len("checkpoint").unwrap().unwrap();
        recovers_from_backup(
            &device,
            |d| d.flip_bit("checkpoint", len * 8 / 2 + seed).unwrap(),
            &acknowledged,
        );
        // The header too.
        recovers_from_backup(
            &device,
            |d| d.flip_bit("checkpoint", 8 * 20).unwrap(),
            &acknowledged,
        );
    }
}

#[test]
fn a_truncated_or_deleted_checkpoint_recovers_from_the_backup() {
    let (device, _engine, acknowledged) = store_with_backup(11);
    let len = device.len("checkpoint").unwrap().unwrap();
    recovers_from_backup(
        &device,
        |d| d.truncate("checkpoint", len / 2).unwrap(),
        &acknowledged,
    );
    recovers_from_backup(
        &device,
        |d| d.truncate("checkpoint", 0).unwrap(),
        &acknowledged,
    );
    recovers_from_backup(&device, |d| d.remove("checkpoint").unwrap(), &acknowledged);
}

#[test]
fn a_damaged_backup_or_a_missing_journal_refuses_with_both_reasons() {
    let (device, _engine, _) = store_with_backup(5);
    let len = device.len("checkpoint").unwrap().unwrap();
    for (file, why) in [
        ("checkpoint.prev", "checkpoint.prev"),
        ("journal.prev", "journal.prev"),
    ] {
        let image = device.crash(rampart_core::persist::device::CrashMode::LoseUnsynced);
        image.flip_bit("checkpoint", len * 4).unwrap();
        let prev_len = image.len(file).unwrap().unwrap();
        image.flip_bit(file, prev_len * 4).unwrap();
        let err = recover(&image, STORE_ID, &EngineConfig::default()).unwrap_err();
        assert!(matches!(err, RecoveryError::NoBackup { .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.contains("checksum") || message.contains("CRC"),
            "{message}"
        );
        assert!(message.contains(why), "{message}");
    }
    // A damaged checkpoint.prev alone is no problem: the checkpoint is used.
    let image = device.crash(rampart_core::persist::device::CrashMode::LoseUnsynced);
    let prev_len = image.len("checkpoint.prev").unwrap().unwrap();
    image.flip_bit("checkpoint.prev", prev_len * 4).unwrap();
    let (_, report) = recover(&image, STORE_ID, &EngineConfig::default()).unwrap();
    assert!(report.backup_used.is_none());
}

/// A checkpoint that restarts persistence after an I/O error starts its journal empty at its
/// image's op; the ops the failed commit held are only in that image. The chain through the
/// old pair would have a gap there: it makes none, and a pair with such a gap (the old
/// checkpoint and the journal that failed) is refused, not replayed without them.
#[test]
fn a_checkpoint_that_restarted_persistence_makes_no_backup_and_a_gap_is_refused() {
    let (device, engine, persister) = engine_on_sim_device(21, Duration::from_secs(3600), None);
    let mut rng = Rng(21);
    for _ in 0..40 {
        random_op(&engine, &mut rng);
    }
    engine.sync().unwrap();
    persister.checkpoint(&engine).unwrap();
    for _ in 0..40 {
        random_op(&engine, &mut rng);
    }
    device.set_faults(Faults {
        fail_syncs: Some(FailSyncs {
            after: device.sync_count(),
            count: Some(1),
            ops: &[SyncOp::Sync],
            files: Files::Prefix("journal".into()),
        }),
        ..Faults::default()
    });
    assert!(engine.sync().is_err(), "the journal's sync was to fail");
    device.clear_faults();
    let old_checkpoint = device.read("checkpoint").unwrap().unwrap();
    let old_journal = device.read("journal").unwrap().unwrap();
    for _ in 0..10 {
        random_op(&engine, &mut rng);
    }
    // Restarts persistence: its journal starts empty at its image's op.
    persister.checkpoint(&engine).unwrap();
    engine.sync().unwrap();
    let acknowledged = snapshot(&engine);
    let image = device.crash(rampart_core::persist::device::CrashMode::LoseUnsynced);
    let (state, _) = recover(&image, STORE_ID, &EngineConfig::default()).unwrap();
    assert_eq!(snapshot(&Engine::from_state(state)), acknowledged);
    // It makes no pair (one would not chain to its journal), so fsck has none to warn of.
    assert!(image.len("checkpoint.prev").unwrap().is_none());
    assert!(image.len("journal.prev").unwrap().is_none());
    // A pair that has the gap (as an older rampart left it) is refused.
    for (name, bytes) in [
        ("checkpoint.prev", &old_checkpoint),
        ("journal.prev", &old_journal),
    ] {
        image.write(name, bytes).unwrap();
        image.sync(name).unwrap();
    }
    let len = image.len("checkpoint").unwrap().unwrap();
    image.flip_bit("checkpoint", len * 4).unwrap();
    let err = recover(&image, STORE_ID, &EngineConfig::default()).unwrap_err();
    assert!(matches!(err, RecoveryError::NoBackup { .. }), "{err}");
    assert!(
        err.to_string().contains("only in the damaged checkpoint"),
        "{err}"
    );
    // The next checkpoint keeps a backup again.
    random_op(&engine, &mut rng);
    engine.sync().unwrap();
    persister.checkpoint(&engine).unwrap();
    assert!(device.len("checkpoint.prev").unwrap().is_some());
    assert!(device.len("journal.prev").unwrap().is_some());
}

/// The store's first checkpoint has nothing to keep; the second keeps the first.
#[test]
fn the_first_checkpoint_keeps_no_backup_and_the_next_one_does() {
    let (device, engine, persister) = engine_on_sim_device(3, Duration::from_secs(3600), None);
    let mut rng = Rng(3);
    for _ in 0..20 {
        random_op(&engine, &mut rng);
    }
    engine.sync().unwrap();
    persister.checkpoint(&engine).unwrap();
    assert!(device.read("checkpoint.prev").unwrap().is_none());
    assert!(device.read("journal.prev").unwrap().is_none());
    let first = device.read("checkpoint").unwrap();
    random_op(&engine, &mut rng);
    engine.sync().unwrap();
    let first_journal_end = device.read("journal").unwrap();
    persister.checkpoint(&engine).unwrap();
    assert_eq!(device.read("checkpoint.prev").unwrap(), first);
    // The journal as it was at the switch: every commit made to it.
    let prev_journal = device.read("journal.prev").unwrap();
    assert!(
        prev_journal == first_journal_end,
        "journal.prev is not the old journal"
    );
    // The next checkpoint replaces the pair.
    random_op(&engine, &mut rng);
    engine.sync().unwrap();
    let second = device.read("checkpoint").unwrap();
    persister.checkpoint(&engine).unwrap();
    assert_eq!(device.read("checkpoint.prev").unwrap(), second);
}

/// A clean shutdown's final checkpoint leaves a usable pair: every op is committed to the old
/// journal before the switch, ops applied since the last fsync included.
#[test]
fn the_final_checkpoint_of_a_clean_shutdown_leaves_a_usable_backup() {
    for seed in 30..34 {
        let (device, engine, persister) =
            engine_on_sim_device(seed, Duration::from_secs(3600), None);
        let mut rng = Rng(seed);
        for _ in 0..30 {
            random_op(&engine, &mut rng);
        }
        engine.sync().unwrap();
        persister.checkpoint(&engine).unwrap();
        for _ in 0..30 {
            random_op(&engine, &mut rng);
        }
        // Not synced: only the shutdown makes these durable.
        persister.shutdown(&engine).unwrap();
        let expected = snapshot(&engine);
        recovers_from_backup(
            &device,
            |d| {
                let len = d.len("checkpoint").unwrap().unwrap();
                d.flip_bit("checkpoint", len * 4).unwrap();
            },
            &expected,
        );
    }
}

/// Checkpoints, their backup made or not, and a recovery from the backup if one is there;
/// `fail_link_of`: the link of that file fails (EIO from the simulated device, as EPERM from
/// a file system without hard links).
fn checkpoint_with_failing_link(fail_link_of: &str) {
    let (device, engine, persister) = engine_on_sim_device(41, Duration::from_secs(3600), None);
    let mut rng = Rng(41);
    let mut ops = |n: usize| synced_random_ops(&engine, &mut rng, n);
    ops(30);
    persister.checkpoint(&engine).unwrap();
    ops(30);
    persister.checkpoint(&engine).unwrap();
    assert!(device.len("checkpoint.prev").unwrap().is_some());
    ops(30);
    device.set_faults(Faults {
        fail_syncs: Some(FailSyncs {
            after: 0,
            count: None,
            ops: &[SyncOp::Link],
            files: Files::Named(fail_link_of.into()),
        }),
        ..Faults::default()
    });
    // No backup this time, and no half pair; the checkpoint itself succeeds.
    persister.checkpoint(&engine).unwrap();
    assert!(persister.checkpoint_error().is_none());
    assert!(device.len("checkpoint.prev").unwrap().is_none());
    assert!(device.len("journal.prev").unwrap().is_none());
    ops(30);
    persister.checkpoint(&engine).unwrap();
    ops(10);
    let acknowledged = snapshot(&engine);
    let image = device.crash(rampart_core::persist::device::CrashMode::LoseUnsynced);
    let (state, report) = recover(&image, STORE_ID, &EngineConfig::default()).unwrap();
    assert!(report.backup_used.is_none());
    assert_eq!(snapshot(&Engine::from_state(state)), acknowledged);
    // Links work again: so does the backup.
    device.clear_faults();
    persister.checkpoint(&engine).unwrap();
    ops(10);
    let acknowledged = snapshot(&engine);
    recovers_from_backup(&device, flip_checkpoint, &acknowledged);
}

#[test]
fn a_failed_link_of_the_checkpoint_makes_no_backup_and_the_checkpoint_succeeds() {
    checkpoint_with_failing_link("checkpoint");
}

#[test]
fn a_failed_link_of_the_journal_removes_the_half_pair_and_the_checkpoint_succeeds() {
    checkpoint_with_failing_link("journal");
}

/// A checkpoint that fails after its links (here its first rename): the pair would name the
/// checkpoint and journal still in force (commits go on appending to `journal`; the simulated
/// device's link is even a copy, which would go stale). Both are removed; the next checkpoint
/// makes a usable pair again.
#[test]
fn a_checkpoint_failing_after_its_links_leaves_no_pair() {
    let (device, engine, persister) = engine_on_sim_device(43, Duration::from_secs(3600), None);
    let mut rng = Rng(43);
    let mut ops = |n: usize| synced_random_ops(&engine, &mut rng, n);
    ops(30);
    persister.checkpoint(&engine).unwrap();
    ops(30);
    device.set_faults(Faults {
        fail_syncs: Some(FailSyncs {
            after: 0,
            count: None,
            ops: &[SyncOp::Rename],
            files: Files::Named("checkpoint.tmp".into()),
        }),
        ..Faults::default()
    });
    assert!(persister.checkpoint(&engine).is_err());
    device.clear_faults();
    assert!(device.len("checkpoint.prev").unwrap().is_none());
    assert!(device.len("journal.prev").unwrap().is_none());
    ops(30);
    persister.checkpoint(&engine).unwrap();
    ops(10);
    let acknowledged = snapshot(&engine);
    recovers_from_backup(&device, flip_checkpoint, &acknowledged);
}

/// The mount's checkpoint replacing a damaged one keeps the pair (and the damaged file) while
/// it writes its own: on a disk with no room left but the `reserve` file's, it gives that up,
/// as the checkpoint after a full disk does, instead of refusing the mount with ENOSPC.
#[test]
fn replacing_a_damaged_checkpoint_on_a_full_disk_uses_the_reserve() {
    use rampart_core::persist::persister::PersistConfig;
    let config = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: u64::MAX,
        reserve_bytes_min: 256 << 10,
        ..PersistConfig::default()
    };
    let device = Arc::new(SimDevice::new(47));
    let ec = EngineConfig::default();
    let (engine, persister, _) =
        rampart_core::persist::open(device.clone(), STORE_ID, &ec, config.clone()).unwrap();
    let mut rng = Rng(47);
    let mut ops = |n: usize| synced_random_ops(&engine, &mut rng, n);
    ops(40);
    persister.checkpoint(&engine).unwrap();
    ops(40);
    persister.checkpoint(&engine).unwrap();
    ops(20);
    let acknowledged = snapshot(&engine);
    let image = Arc::new(device.crash(rampart_core::persist::device::CrashMode::LoseUnsynced));
    assert!(image.len("reserve").unwrap().unwrap() >= 256 << 10);
    let len = image.len("checkpoint").unwrap().unwrap();
    image.flip_bit("checkpoint", len * 4).unwrap();
    // Full: every byte in use.
    let used: u64 = image
        .names()
        .iter()
        .map(|n| image.len(n).unwrap().unwrap_or(0))
        .sum();
    image.set_faults(Faults {
        capacity_bytes: Some(used),
        ..Faults::default()
    });
    let (engine, _persister, report) =
        rampart_core::persist::open(image.clone(), STORE_ID, &ec, config)
            .unwrap_or_else(|e| panic!("the mount was refused: {e}"));
    assert!(report.backup_used.is_some(), "{report}");
    assert_eq!(snapshot(&engine), acknowledged);
    assert!(image.len("checkpoint.prev").unwrap().is_none());
}

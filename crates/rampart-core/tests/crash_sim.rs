//! Crash simulation in the style of SQLite's and TigerBeetle's test suites.
//!
//! A random workload (every kind of op: `common::random_op`) runs
//! on an engine whose persister writes to a simulated device. Just before every sync point the
//! test takes the image a power cut would leave there (unsynced appends lost or torn at a
//! random byte). Recovery from each image must give a consistent file system equal to the last
//! acknowledged state or to the one being acknowledged: every op acknowledged as durable is
//! present, nothing is half applied, and no file holds bytes never written to it.
//!
//! Each run takes two checkpoints: one at once, and one in its four steps with ops and syncs
//! between them, as the background checkpoint thread runs while commits go on.
//!
//! `RAMPART_CRASH_SEEDS=N` runs N seeds instead of the CI default (a longer soak).

mod common;

use std::sync::Arc;
use std::time::Duration;

use rampart_core::persist::device::{CrashImages, CrashMode, Faults, SimDevice, SyncOp};
use rampart_core::persist::journal::Tail;
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::persist::recovery::recover;
use rampart_core::{Ctx, Engine, EngineConfig, ROOT_INO};

use common::{random_op, seeds, snapshot, Rng, Snapshot, STORE_ID};

/// Runs the workload of `seed` with a crash image taken before every sync and rename (a
/// crash point too: between a checkpoint's two renames lies a state of its own), and checks
/// the recovery of each. Returns how many recoveries dropped a torn journal batch. With
/// `large_writes`, writes of 64–192 KiB come between the ops too, so that commits run past
/// the journal's room with batches large enough to allocate it (decision 0093).
fn run_seed(seed: u64, mode: CrashMode, large_writes: bool) -> usize {
    let device = Arc::new(SimDevice::new(seed));
    let config = EngineConfig {
        memory_cap_bytes: 1 << 30,
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::new(config.clone()));
    let persist = PersistConfig {
        commit_interval: Duration::from_secs(3600), // only explicit syncs commit
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    };
    let persister = Persister::start(device.clone(), STORE_ID, 0, 0, persist).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    // The root as created, durable (as `rampart mkfs` leaves a store): without a checkpoint,
    // recovery makes a new root, with times of its own.
    persister.checkpoint(&engine).unwrap();
    device.set_faults(Faults {
        crash_images: Some(CrashImages {
            mode,
            at: None,
            // The backup pair's removals and links are crash points too (decision 0123).
            ops: &[SyncOp::Sync, SyncOp::Rename, SyncOp::Remove, SyncOp::Link],
        }),
        ..Faults::default()
    });

    // acknowledged[i]: the state every sync point from images_at[i] on must at least reach.
    let mut snapshots: Vec<(usize, Snapshot)> = vec![(0, snapshot(&engine))];
    // The same for the backup pair, which holds what commits made durable: a checkpoint's
    // image alone acknowledges nothing (only fsync does; decision 0123).
    let mut synced = snapshots.clone();
    let mut rng = Rng(seed);
    let mut job = None;
    // The state the staged checkpoint's image holds, and whether a sync came after it.
    let mut at_begin: Option<(Snapshot, bool)> = None;
    for step in 0..240 {
        random_op(&engine, &mut rng);
        if large_writes && rng.below(3) == 0 {
            large_write(&engine, &mut rng);
        }
        if rng.below(6) == 0 {
            let images_before = device.crash_images_taken();
            engine.sync().unwrap();
            snapshots.push((images_before, snapshot(&engine)));
            synced.push((images_before, snapshot(&engine)));
            if let Some((_, synced)) = at_begin.as_mut() {
                *synced = true;
            }
        }
        match step {
            120 => {
                let images_before = device.crash_images_taken();
                persister.checkpoint(&engine).unwrap();
                snapshots.push((images_before, snapshot(&engine)));
            }
            160 => {
                job = Some(persister.checkpoint_begin(&engine).unwrap());
                at_begin = Some((snapshot(&engine), false));
            }
            175 => job.as_mut().unwrap().write_image().unwrap(),
            190 => job.as_mut().unwrap().copy_tail().unwrap(),
            205 => {
                let images_before = device.crash_images_taken();
                job.take().unwrap().finish().unwrap();
                // The image makes the state at `begin` durable; a sync since then already
                // acknowledged more.
                let (state, synced) = at_begin.take().unwrap();
                if !synced {
                    snapshots.push((images_before, state));
                }
            }
            _ => {}
        }
    }
    if large_writes {
        let written = device.written("journal");
        assert!(written.allocated_bytes > 0, "seed {seed}: {written:?}");
    }
    let images = device.take_crash_images();
    assert!(
        images.len() >= 5,
        "seed {seed}: only {} sync points",
        images.len()
    );
    let mut torn = 0;
    let mut backups_used = 0;
    for (i, image) in images.iter().enumerate() {
        let allowed = allowed_at(&snapshots, i);
        let (state, report) = recover(image, STORE_ID, &config)
            .unwrap_or_else(|e| panic!("seed {seed} image {i}: recovery failed: {e}"));
        if matches!(report.tail, Tail::Torn { .. }) {
            torn += 1;
        }
        let recovered = Engine::from_state(state);
        let problems = recovered.check();
        assert!(problems.is_empty(), "seed {seed} image {i}: {problems:?}");
        let got = snapshot(&recovered);
        assert!(
            allowed.iter().any(|s| **s == got),
            "seed {seed} image {i} ({report}): the recovered state is neither the acknowledged \
             one nor the one being acknowledged; against the acknowledged one:{}",
            common::diff(allowed[0], &got)
        );
        let by_commits = allowed_at(&synced, i);
        backups_used += usize::from(backup_gives(image, &config, &by_commits, seed, i));
    }
    assert!(
        backups_used > 0,
        "seed {seed}: no crash image had a backup pair"
    );
    torn
}

/// The states a recovery from the crash image before sync point `i` may give: the last one
/// acknowledged before it, and the one it acknowledges.
fn allowed_at(snapshots: &[(usize, Snapshot)], i: usize) -> Vec<&Snapshot> {
    let acked = snapshots
        .iter()
        .rposition(|(first, _)| *first <= i)
        .unwrap_or(0);
    snapshots[acked.saturating_sub(1)..=acked.min(snapshots.len() - 1)]
        .iter()
        .map(|(_, s)| s)
        .collect()
}

/// With a byte of its checkpoint flipped, a crash image that holds the whole backup pair
/// recovers from it one of the states `allowed` by commits (not always the intact image's:
/// ops gathered before a checkpoint's image and not yet committed are only in that image,
/// acknowledged by no fsync until a commit puts them in the new journal); one without the
/// whole pair is refused. Returns whether the backup was used.
fn backup_gives(
    image: &SimDevice,
    config: &EngineConfig,
    allowed: &[&Snapshot],
    seed: u64,
    i: usize,
) -> bool {
    use rampart_core::persist::device::Device;
    let Some(len) = image.len("checkpoint").unwrap() else {
        return false;
    };
    let damaged = image.crash(CrashMode::LoseUnsynced);
    damaged.flip_bit("checkpoint", len * 4).unwrap();
    let pair = ["checkpoint.prev", "journal.prev"]
        .iter()
        .all(|name| damaged.len(name).unwrap().is_some());
    match recover(&damaged, STORE_ID, config) {
        Ok((state, report)) => {
            assert!(
                pair && report.backup_used.is_some(),
                "seed {seed} image {i}: {report}"
            );
            let got = snapshot(&Engine::from_state(state));
            assert!(
                allowed.iter().any(|s| **s == got),
                "seed {seed} image {i} ({report}): the backup gives neither the acknowledged \
                 state nor the one being acknowledged:{}",
                common::diff(allowed[0], &got)
            );
            true
        }
        Err(e) => {
            assert!(
                !pair,
                "seed {seed} image {i}: the whole backup pair is there: {e}"
            );
            false
        }
    }
}

#[test]
fn crash_before_every_sync_losing_unsynced_writes() {
    for seed in 0..seeds(12) {
        // Only synced batches survive: none can be torn.
        assert_eq!(
            run_seed(seed, CrashMode::LoseUnsynced, false),
            0,
            "seed {seed}"
        );
    }
}

#[test]
fn crash_before_every_sync_with_torn_writes() {
    let torn: usize = (0..seeds(12))
        .map(|seed| run_seed(1000 + seed, CrashMode::TornTail, false))
        .sum();
    // The torn-tail path of recovery really ran (the simulation tears inside the batch
    // written, not in the zeros reserved after it).
    eprintln!("{torn} recoveries dropped a torn batch");
    assert!(
        torn >= seeds(12) as usize,
        "only {torn} torn batches recovered"
    );
}

#[test]
fn crash_before_every_sync_with_large_batches_over_allocated_room() {
    let torn: usize = (0..seeds(6))
        .map(|seed| {
            let mode = if seed % 2 == 0 {
                CrashMode::TornTail
            } else {
                CrashMode::LoseUnsynced
            };
            run_seed(2000 + seed, mode, true)
        })
        .sum();
    eprintln!("{torn} recoveries dropped a torn batch");
}

/// Writes 64–192 KiB to one of four files at the root (made when missing).
fn large_write(engine: &Engine, rng: &mut Rng) {
    let c = Ctx::library(0, 0);
    let name = format!("large{}", rng.below(4));
    let ino = match engine.lookup(&c, ROOT_INO, name.as_bytes()) {
        Ok(attr) => attr.ino,
        Err(_) => match engine.mknod(&c, ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0) {
            Ok(attr) => attr.ino,
            Err(_) => return,
        },
    };
    let len = (64 << 10) + rng.below(128 << 10) as usize;
    let byte = rng.below(255) as u8 + 1;
    let _ = engine.write(&c, ino, rng.below(256 << 10), &vec![byte; len], false);
}

#[test]
fn flipped_bits_give_an_error_or_a_valid_state_never_a_panic() {
    let config = EngineConfig::default();
    for seed in 0..seeds(12) {
        let device = Arc::new(SimDevice::new(seed));
        let engine = Arc::new(Engine::new(config.clone()));
        let persister = Persister::start(
            device.clone(),
            STORE_ID,
            0,
            0,
            PersistConfig {
                commit_interval: Duration::from_secs(3600),
                checkpoint_journal_bytes: u64::MAX,
                ..PersistConfig::default()
            },
        )
        .unwrap();
        persister.attach(&engine);
        engine.set_sink(Some(persister.clone()));
        let mut rng = Rng(seed);
        for step in 0..150 {
            random_op(&engine, &mut rng);
            if step % 10 == 9 {
                engine.sync().unwrap();
            }
            if step == 70 {
                persister.checkpoint(&engine).unwrap();
            }
        }
        engine.sync().unwrap();
        for file in ["journal", "checkpoint"] {
            for _ in 0..8 {
                let image = device.crash(CrashMode::LoseUnsynced);
                image.flip_random_bit(file).unwrap();
                if let Ok((state, _)) = recover(&image, STORE_ID, &config) {
                    let problems = Engine::from_state(state).check();
                    assert!(problems.is_empty(), "seed {seed}: {problems:?}");
                }
            }
        }
    }
}

/// Writers on several threads commit through the committer (as fsync does on a mount) while
/// checkpoints run in the background every few dozen commits; a power cut at the end, possibly
/// in the middle of a checkpoint, keeps every acknowledged write.
#[test]
fn background_checkpoints_beside_committing_writers_lose_nothing_acknowledged() {
    const THREADS: usize = 4;
    const WRITES: usize = 200;
    // Writers go on past WRITES until a checkpoint has finished beside them (a loaded machine
    // may run the checkpoint thread late), up to this many writes each.
    const WRITES_MAX: usize = 20_000;
    let device = Arc::new(SimDevice::new(77));
    let config = EngineConfig::default();
    let engine = Arc::new(Engine::new(config.clone()));
    let persist = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: 16 << 10,
        checkpoint_scales_with_image: false,
        ..PersistConfig::default()
    };
    let persister = Persister::start(device.clone(), STORE_ID, 0, 0, persist).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let engine = engine.clone();
            let persister = persister.clone();
            std::thread::spawn(move || {
                let c = Ctx::library(0, 0);
                let mut acknowledged = Vec::new();
                for i in 0..WRITES_MAX {
                    if i >= WRITES && persister.stats().checkpoints >= 1 {
                        break;
                    }
                    let name = format!("t{t}-{i}");
                    let ino = engine
                        .mknod(&c, ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0)
                        .unwrap()
                        .ino;
                    let body = name.repeat(40);
                    engine.write(&c, ino, 0, body.as_bytes(), false).unwrap();
                    let (tx, rx) = std::sync::mpsc::channel();
                    engine.sync_async(Box::new(move |r| {
                        let _ = tx.send(r.is_ok());
                    }));
                    assert!(rx.recv().unwrap(), "a sync failed");
                    acknowledged.push((name, body));
                }
                acknowledged
            })
        })
        .collect();
    let acknowledged: Vec<(String, String)> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(acknowledged.len() >= THREADS * WRITES);
    let stats = persister.stats();
    assert!(
        stats.checkpoints >= 1,
        "no checkpoint ran beside the writers: {stats:?}"
    );
    let image = device.crash(CrashMode::LoseUnsynced);
    let (state, report) =
        recover(&image, STORE_ID, &config).unwrap_or_else(|e| panic!("recovery failed: {e}"));
    let recovered = Engine::from_state(state);
    assert!(recovered.check().is_empty(), "{:?}", recovered.check());
    for (name, body) in &acknowledged {
        let attr = recovered
            .lookup_path(format!("/{name}").as_bytes())
            .unwrap_or_else(|e| panic!("{name} lost ({e:?}; {report})"));
        let mut got = Vec::new();
        recovered
            .read(attr.ino, 0, attr.size_bytes as u32, &mut got)
            .unwrap();
        assert_eq!(got, body.as_bytes(), "{name}");
    }
}

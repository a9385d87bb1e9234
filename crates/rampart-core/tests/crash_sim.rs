//! Crash simulation in the style of SQLite's and TigerBeetle's test suites.
//!
//! A random workload (creates, writes, renames, links, unlinks, truncates, xattr changes) runs
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rampart_core::op::{RENAME_EXCHANGE, RENAME_NOREPLACE};
use rampart_core::persist::device::{CrashImages, CrashMode, Faults, SimDevice, SyncOp};
use rampart_core::persist::journal::Tail;
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::persist::recovery::recover;
use rampart_core::{Ctx, Durability, Engine, EngineConfig, FileKind, SetAttr, ROOT_INO};

const STORE_ID: [u8; 16] = [7; 16];

/// Everything durable about a file system, by path (atime is not journaled).
type Snapshot = BTreeMap<Vec<u8>, String>;

fn snapshot(e: &Engine) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![(b"/".to_vec(), ROOT_INO)];
    while let Some((path, dir)) = stack.pop() {
        let mut children = Vec::new();
        e.readdir(dir, 0, |ino, _, _, name| {
            if name != b"." && name != b".." {
                children.push((name.to_vec(), ino));
            }
            true
        })
        .unwrap();
        for (name, ino) in children {
            let mut p = path.clone();
            if p.len() > 1 {
                p.push(b'/');
            }
            p.extend_from_slice(&name);
            let a = e.getattr(ino).unwrap();
            if a.durability == Durability::Volatile {
                continue; // gone after a restart, by contract
            }
            let mut content = Vec::new();
            if a.kind == FileKind::RegularFile {
                e.read(ino, 0, a.size_bytes as u32, &mut content).unwrap();
            }
            let xattrs = e.listxattr(ino, true).unwrap();
            let values: Vec<Vec<u8>> = xattrs
                .split(|&b| b == 0)
                .filter(|n| !n.is_empty())
                .map(|n| e.getxattr(ino, n).unwrap())
                .collect();
            out.insert(
                p.clone(),
                format!(
                    "{:?} ino={} perm={:o} nlink={} size={} mtime={} ctime={} data={:?} xattrs={:?}={:?}",
                    a.kind, ino, a.perm, a.nlink, a.size_bytes, a.mtime_ns, a.ctime_ns,
                    content, xattrs, values
                ),
            );
            if a.kind == FileKind::Directory {
                stack.push((p, ino));
            }
        }
    }
    out
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn path_ino(e: &Engine, path: &str) -> Option<u64> {
    e.lookup_path(path.as_bytes()).ok().map(|a| a.ino)
}

/// One random op; errors (absent names, wrong kinds) are part of the workload.
fn random_op(e: &Engine, rng: &mut Rng) {
    let c = Ctx::library(1000, 1000);
    let dirs = ["/", "/d0", "/d1", "/d0/d2"];
    let dir = |rng: &mut Rng| dirs[rng.below(dirs.len() as u64) as usize];
    let name = |rng: &mut Rng| format!("n{}", rng.below(6));
    let parent = |rng: &mut Rng| path_ino(e, dir(rng));
    match rng.below(12) {
        0 | 1 => {
            if let Some(p) = parent(rng) {
                let _ = e.mknod(&c, p, name(rng).as_bytes(), libc::S_IFREG | 0o644, 0);
            }
        }
        2 => {
            if let Some(p) = parent(rng) {
                let _ = e.mkdir(&c, p, format!("d{}", rng.below(3)).as_bytes(), 0o755);
            }
        }
        3 | 4 => {
            let path = format!("{}/{}", dir(rng).trim_end_matches('/'), name(rng));
            if let Some(ino) = path_ino(e, &path) {
                let len = rng.below(3000) as usize;
                let byte = rng.below(250) as u8 + 1;
                let _ = e.write(&c, ino, rng.below(100_000), &vec![byte; len], false);
            }
        }
        5 => {
            if let (Some(a), Some(b)) = (parent(rng), parent(rng)) {
                let flags = [0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][rng.below(4) as usize];
                let _ = e.rename(&c, a, name(rng).as_bytes(), b, name(rng).as_bytes(), flags);
            }
        }
        6 => {
            if let Some(p) = parent(rng) {
                let _ = e.unlink(&c, p, name(rng).as_bytes());
            }
        }
        7 => {
            let path = format!("{}/{}", dir(rng).trim_end_matches('/'), name(rng));
            if let (Some(ino), Some(p)) = (path_ino(e, &path), parent(rng)) {
                let _ = e.link(&c, ino, p, name(rng).as_bytes());
            }
        }
        8 => {
            let path = format!("{}/{}", dir(rng).trim_end_matches('/'), name(rng));
            if let Some(ino) = path_ino(e, &path) {
                let set = SetAttr {
                    size_bytes: Some(rng.below(70_000)),
                    ..SetAttr::default()
                };
                let _ = e.setattr(&c, ino, &set);
            }
        }
        9 => {
            let path = format!("{}/{}", dir(rng).trim_end_matches('/'), name(rng));
            if let Some(ino) = path_ino(e, &path) {
                if rng.below(3) == 0 {
                    let _ = e.removexattr(&c, ino, b"user.tag");
                } else {
                    let v = format!("v{}", rng.below(1000));
                    let _ = e.setxattr(&c, ino, b"user.tag", v.as_bytes(), 0);
                }
            }
        }
        10 => {
            if let Some(p) = parent(rng) {
                let _ = e.rmdir(&c, p, format!("d{}", rng.below(3)).as_bytes());
            }
        }
        _ => {
            // Volatile files never reach the store; made durable again, they carry their
            // content (before-return is left out: its syncs would acknowledge states the
            // model does not record).
            let path = format!("{}/{}", dir(rng).trim_end_matches('/'), name(rng));
            if let Some(ino) = path_ino(e, &path) {
                let d = if rng.below(2) == 0 {
                    Durability::Volatile
                } else {
                    Durability::default()
                };
                let _ = e.set_durability(&c, ino, d);
            }
        }
    }
}

/// Runs the workload of `seed` with a crash image taken before every sync and rename (a
/// crash point too: between a checkpoint's two renames lies a state of its own), and checks
/// the recovery of each. Returns how many recoveries dropped a torn journal batch.
fn run_seed(seed: u64, mode: CrashMode) -> usize {
    let device = Arc::new(SimDevice::new(seed));
    device.set_faults(Faults {
        crash_images: Some(CrashImages {
            mode,
            at: None,
            ops: &[SyncOp::Sync, SyncOp::Rename],
        }),
        ..Faults::default()
    });
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

    // acknowledged[i]: the state every sync point from images_at[i] on must at least reach.
    let mut snapshots: Vec<(usize, Snapshot)> = vec![(0, snapshot(&engine))];
    let mut rng = Rng(seed);
    let mut job = None;
    // The state the staged checkpoint's image holds, and whether a sync came after it.
    let mut at_begin: Option<(Snapshot, bool)> = None;
    for step in 0..240 {
        random_op(&engine, &mut rng);
        if rng.below(6) == 0 {
            let images_before = device.crash_images_taken();
            engine.sync().unwrap();
            snapshots.push((images_before, snapshot(&engine)));
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
    let images = device.take_crash_images();
    assert!(
        images.len() >= 5,
        "seed {seed}: only {} sync points",
        images.len()
    );
    let mut torn = 0;
    for (i, image) in images.iter().enumerate() {
        // The last state acknowledged before this sync point, and the one it acknowledges.
        let acked = snapshots
            .iter()
            .rposition(|(first, _)| *first <= i)
            .unwrap_or(0);
        let allowed: Vec<&Snapshot> = snapshots
            [acked.saturating_sub(1)..=acked.min(snapshots.len() - 1)]
            .iter()
            .map(|(_, s)| s)
            .collect();
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
             one nor the one being acknowledged"
        );
    }
    torn
}

fn seeds() -> u64 {
    std::env::var("RAMPART_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

#[test]
fn crash_before_every_sync_losing_unsynced_writes() {
    for seed in 0..seeds() {
        // Only synced batches survive: none can be torn.
        assert_eq!(run_seed(seed, CrashMode::LoseUnsynced), 0, "seed {seed}");
    }
}

#[test]
fn crash_before_every_sync_with_torn_writes() {
    let torn: usize = (0..seeds())
        .map(|seed| run_seed(1000 + seed, CrashMode::TornTail))
        .sum();
    // The torn-tail path of recovery really ran (the simulation tears inside the batch
    // written, not in the zeros reserved after it).
    eprintln!("{torn} recoveries dropped a torn batch");
    assert!(
        torn >= seeds() as usize,
        "only {torn} torn batches recovered"
    );
}

#[test]
fn flipped_bits_give_an_error_or_a_valid_state_never_a_panic() {
    let config = EngineConfig::default();
    for seed in 0..seeds() {
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

//! Crashes at every sync point of a workload run through the path API (`rampart_core::fs`),
//! on the store opened as a program opens it (`Rampart::open_device`: the same recovery and
//! persister as `Rampart::open` and a mount) over the faulty simulated device of
//! `crash_sim.rs`. Every image a power cut could leave just before a sync or a checkpoint's
//! rename must recover to the last state acknowledged (by `File::sync_all` or `Fs::sync`) or
//! to the one being acknowledged, as seen through the path API.
//!
//! `RAMPART_CRASH_SEEDS=N` runs N seeds instead of the CI default.

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rampart_core::fs::{File, Fs, OpenOptions};
use rampart_core::persist::device::{CrashImages, CrashMode, Faults, SimDevice, SyncOp};
use rampart_core::persist::persister::PersistConfig;
use rampart_core::persist::recovery::recover;
use rampart_core::rampart::{Options, Rampart};
use rampart_core::{Engine, EngineConfig, FileKind};

const STORE_ID: [u8; 16] = [9; 16];

/// Everything durable, by path, as the path API reports it (atime is not journaled).
type Snapshot = BTreeMap<PathBuf, String>;

fn snapshot(fs: &Fs) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::from("/")];
    while let Some(dir) = stack.pop() {
        for entry in fs.read_dir(&dir).unwrap() {
            let path = entry.unwrap().path().to_path_buf();
            let m = fs.symlink_metadata(&path).unwrap();
            let data = match m.kind() {
                FileKind::RegularFile => format!("{:?}", fs.read(&path).unwrap()),
                FileKind::Symlink => format!("-> {:?}", fs.read_link(&path).unwrap()),
                _ => String::new(),
            };
            // The xattr calls follow symlinks, as getxattr(2) does.
            let names = if m.is_symlink() {
                Vec::new()
            } else {
                fs.list_xattr(&path).unwrap()
            };
            let mut xattrs: Vec<(String, Vec<u8>)> = names
                .into_iter()
                .map(|n| {
                    let value = fs.get_xattr(&path, &n).unwrap();
                    (n.into_string().unwrap(), value)
                })
                .collect();
            xattrs.sort();
            out.insert(
                path.clone(),
                format!(
                    "{:?} ino={} mode={:o} nlink={} len={} mtime={:?} ctime={:?} {data} {xattrs:?}",
                    m.kind(),
                    m.ino(),
                    m.mode(),
                    m.nlink(),
                    m.len(),
                    m.modified(),
                    m.changed()
                ),
            );
            if m.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

fn path(rng: &mut Rng) -> PathBuf {
    let dirs = ["", "d0", "d1", "d0/d2", "link"];
    Path::new(dirs[rng.below(dirs.len() as u64) as usize]).join(format!("n{}", rng.below(6)))
}

/// One random operation of the path API; errors (absent names, wrong kinds) are part of it.
/// Returns an open file for the caller to sync through, sometimes.
fn random_op(fs: &Fs, rng: &mut Rng) -> Option<File> {
    let p = path(rng);
    match rng.below(13) {
        0 => {
            let byte = rng.below(250) as u8 + 1;
            let _ = fs.write(&p, vec![byte; rng.below(3000) as usize]);
        }
        1 | 2 => {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .open(fs, &p)
                .ok()?;
            f.seek(SeekFrom::Start(rng.below(100_000))).ok()?;
            let byte = rng.below(250) as u8 + 1;
            f.write_all(&vec![byte; rng.below(3000) as usize]).ok()?;
            return Some(f);
        }
        3 => {
            let mut f = OpenOptions::new().append(true).open(fs, &p).ok()?;
            f.write_all(b"appended").ok()?;
        }
        4 => {
            let _ = fs.create_dir_all(format!("d{}/d{}", rng.below(2), rng.below(3) + 1));
        }
        5 => {
            let _ = fs.rename(&p, path(rng));
        }
        6 => {
            let _ = fs.remove_file(&p);
        }
        7 => {
            let _ = fs.hard_link(&p, path(rng));
        }
        8 => {
            let f = OpenOptions::new().write(true).open(fs, &p).ok()?;
            f.set_len(rng.below(70_000)).ok()?;
        }
        9 => {
            let _ = if rng.below(3) == 0 {
                fs.remove_xattr(&p, "user.tag")
            } else {
                fs.set_xattr(&p, "user.tag", format!("v{}", rng.below(1000)))
            };
        }
        10 => {
            let _ = fs.remove_dir_all(format!("d{}", rng.below(3)));
        }
        11 => {
            let _ = fs.symlink(format!("d{}", rng.below(2)), "link");
        }
        _ => {
            use std::os::unix::fs::PermissionsExt;
            let mode = [0o600, 0o644, 0o755][rng.below(3) as usize];
            let _ = fs.set_permissions(&p, std::fs::Permissions::from_mode(mode));
        }
    }
    None
}

fn options() -> Options {
    Options {
        engine: EngineConfig {
            memory_cap_bytes: 1 << 30,
            ..EngineConfig::default()
        },
        persist: PersistConfig {
            commit_interval: Duration::from_secs(3600), // only explicit syncs commit
            checkpoint_journal_bytes: u64::MAX,
            ..PersistConfig::default()
        },
    }
}

/// Runs the workload of `seed`, syncing through files and the store, with a checkpoint in
/// the middle; checks the recovery of the image taken before every sync point. Returns how
/// many recoveries dropped a torn batch.
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
    let options = options();
    let store = Rampart::open_device(device.clone(), STORE_ID, &options).unwrap();
    let fs = Fs::from_rampart(store, 0, 0);
    // (images taken before this state was acknowledged, the state)
    let mut acknowledged: Vec<(usize, Snapshot)> = vec![(0, snapshot(&fs))];
    let mut rng = Rng(seed);
    for step in 0..200 {
        let file = random_op(&fs, &mut rng);
        let images_before = device.crash_images_taken();
        let synced = match (file, rng.below(5)) {
            (Some(f), 0 | 1) => f.sync_all().map(|_| true),
            (_, 0) => fs.sync().map(|_| true),
            _ => Ok(false),
        };
        if synced.unwrap() {
            acknowledged.push((images_before, snapshot(&fs)));
        }
        if step == 100 {
            let images_before = device.crash_images_taken();
            let store = fs.store().unwrap();
            store.persister().checkpoint(fs.engine()).unwrap();
            acknowledged.push((images_before, snapshot(&fs)));
        }
    }
    let images = device.take_crash_images();
    assert!(
        images.len() >= 10,
        "seed {seed}: only {} sync points",
        images.len()
    );
    let mut torn = 0;
    for (i, image) in images.iter().enumerate() {
        let acked = acknowledged
            .iter()
            .rposition(|(first, _)| *first <= i)
            .unwrap_or(0);
        let allowed = &acknowledged[acked.saturating_sub(1)..=acked];
        let (state, report) = recover(image, STORE_ID, &options.engine)
            .unwrap_or_else(|e| panic!("seed {seed} image {i}: recovery failed: {e}"));
        if matches!(
            report.tail,
            rampart_core::persist::journal::Tail::Torn { .. }
        ) {
            torn += 1;
        }
        let engine = Arc::new(Engine::from_state(state));
        assert!(
            engine.check().is_empty(),
            "seed {seed} image {i}: {:?}",
            engine.check()
        );
        let got = snapshot(&Fs::from_engine(engine, 0, 0));
        assert!(
            allowed.iter().any(|(_, s)| *s == got),
            "seed {seed} image {i} ({report}): the recovered state is neither the acknowledged \
             one nor the one being acknowledged"
        );
    }
    fs.close().unwrap();
    torn
}

fn seeds() -> u64 {
    std::env::var("RAMPART_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

#[test]
fn crash_before_every_sync_of_the_path_api_losing_unsynced_writes() {
    for seed in 0..seeds() {
        assert_eq!(run_seed(seed, CrashMode::LoseUnsynced), 0, "seed {seed}");
    }
}

#[test]
fn crash_before_every_sync_of_the_path_api_with_torn_writes() {
    let torn: usize = (0..seeds())
        .map(|seed| run_seed(500 + seed, CrashMode::TornTail))
        .sum();
    eprintln!("{torn} recoveries dropped a torn batch");
    assert!(
        torn >= 1,
        "no torn batch was recovered: the torn path did not run"
    );
}

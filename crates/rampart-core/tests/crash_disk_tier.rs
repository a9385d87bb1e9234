//! Crash simulation of the disk tier: a random workload of writes, truncates, punches,
//! unlinks and renames over a few files that cross an 8 KiB threshold both ways runs on an
//! engine whose persister and host files share one simulated device. Just before every sync
//! point (journal, checkpoint, host-file syncs, renames, removals) the test takes the image a
//! power cut would leave, recovers it (journal replay, then the pass over data/) and checks:
//! - the file system is consistent, its namespace and attributes those of the last
//!   acknowledged state or of the one being acknowledged;
//! - every byte of a file is a byte of one of those two states, or a byte written to that
//!   file between them (data=ordered: an overwrite in place may be cut, but no file shows a
//!   byte never written to it, and no fsync'd byte is lost);
//! - no host file is left without a live inode, none is longer than its file, none is missing.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rampart_core::disk::{recover_host_files, scan_host_files, DiskConfig, DiskTier};
use rampart_core::persist::device::{
    CrashImages, CrashMode, Delay, Device, Faults, Files, SimDevice, SyncOp,
};
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::persist::recovery::recover;
use rampart_core::{Ctx, Engine, EngineConfig, FileKind, SetAttr, Tier, ROOT_INO};

use common::{seeds, Rng, STORE_ID};

const THRESHOLD: u64 = 8 << 10;
const FILES: [&str; 4] = ["f0", "f1", "f2", "f3"];

/// A file as a state has it: its attributes (without atime) and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileState {
    ino: u64,
    attrs: String,
    data: Vec<u8>,
}

type State = BTreeMap<String, FileState>;

fn disk_config() -> DiskConfig {
    DiskConfig {
        threshold_bytes: THRESHOLD,
        ..DiskConfig::default()
    }
}

fn state_of(e: &Engine) -> State {
    let mut entries = Vec::new();
    e.readdir(ROOT_INO, 0, |ino, _, _, name| {
        if name != b"." && name != b".." {
            entries.push((String::from_utf8_lossy(name).into_owned(), ino));
        }
        true
    })
    .unwrap();
    let mut out = BTreeMap::new();
    for (name, ino) in entries {
        let a = e.getattr(ino).unwrap();
        assert_eq!(a.kind, FileKind::RegularFile);
        let mut data = Vec::new();
        e.read(ino, 0, a.size_bytes as u32, &mut data).unwrap();
        let attrs = format!(
            "ino={} perm={:o} nlink={} size={} mtime={} ctime={}",
            ino, a.perm, a.nlink, a.size_bytes, a.mtime_ns, a.ctime_ns
        );
        out.insert(name, FileState { ino, attrs, data });
    }
    out
}

/// The byte values written to each file (by inode: a rename keeps them).
type Written = HashMap<u64, HashSet<u8>>;

fn random_op(e: &Engine, rng: &mut Rng, step: u64, written: &mut Written) {
    let c = Ctx::library(0, 0);
    let name = rng.pick(&FILES);
    let ino = e.lookup_path(name.as_bytes()).ok().map(|a| a.ino);
    match (rng.below(10), ino) {
        (0, None) => {
            let _ = e.mknod(&c, ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0);
        }
        (0..=4, Some(ino)) => {
            // A byte of its own per write, so that where it lands tells which write it was.
            let byte = (step % 250) as u8 + 1;
            let len = 1 + rng.below(6000) as usize;
            let span = if rng.below(3) == 0 { 4000 } else { 30_000 };
            let offset = rng.below(span);
            if e.write(&c, ino, offset, &vec![byte; len], false).is_ok() {
                written.entry(ino).or_default().insert(byte);
            }
        }
        (5, Some(ino)) => {
            let size = rng.pick(&[0, 500, 1500, 5000, 9000, 20_000, 36_000]);
            let set = SetAttr {
                size_bytes: Some(size + rng.below(300)),
                ..SetAttr::default()
            };
            e.setattr(&c, ino, &set).unwrap();
        }
        (6, Some(ino)) => {
            let mode = rng.pick(&[
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                libc::FALLOC_FL_ZERO_RANGE,
                0,
            ]);
            let _ = e.fallocate(&c, ino, rng.below(30_000), 1 + rng.below(9000), mode);
        }
        (7, Some(_)) => {
            e.unlink(&c, ROOT_INO, name.as_bytes()).unwrap();
        }
        (8, Some(_)) => {
            let to = rng.pick(&FILES);
            let _ = e.rename(&c, ROOT_INO, name.as_bytes(), ROOT_INO, to.as_bytes(), 0);
        }
        (_, Some(ino)) => {
            let set = SetAttr {
                mode: Some(rng.pick(&[0o600, 0o644, 0o640])),
                ..SetAttr::default()
            };
            e.setattr(&c, ino, &set).unwrap();
        }
        (_, None) => {}
    }
}

/// Whether `got` has the names and attributes of one of `states` (the states the file system
/// passed through since the last acknowledged one), and each of its bytes is a byte of that
/// file in one of them or one written to it meanwhile.
fn allowed(got: &State, states: &[&State], written: &Written) -> Result<(), String> {
    let names: HashSet<&String> = got.keys().collect();
    let attrs_match = |s: &State| {
        s.keys().collect::<HashSet<_>>() == names && got.iter().all(|(n, f)| s[n].attrs == f.attrs)
    };
    if !states.iter().any(|s| attrs_match(s)) {
        return Err(format!(
            "names and attributes match none of the {} states:\n got {:?}\n first {:?}\n last {:?}",
            states.len(),
            got.iter().map(|(n, f)| (n, &f.attrs)).collect::<Vec<_>>(),
            states[0]
                .iter()
                .map(|(n, f)| (n, &f.attrs))
                .collect::<Vec<_>>(),
            states[states.len() - 1]
                .iter()
                .map(|(n, f)| (n, &f.attrs))
                .collect::<Vec<_>>()
        ));
    }
    for (name, file) in got {
        let none = HashSet::new();
        let w = written.get(&file.ino).unwrap_or(&none);
        for (i, &byte) in file.data.iter().enumerate() {
            let in_a_state = states
                .iter()
                .any(|s| s.get(name).and_then(|f| f.data.get(i)) == Some(&byte));
            if in_a_state || w.contains(&byte) {
                continue;
            }
            return Err(format!(
                "{name} byte {i} is {byte}: in none of the states nor written meanwhile"
            ));
        }
    }
    Ok(())
}

/// An engine whose persister (committing only at explicit syncs, never checkpointing by
/// journal size) and disk tier share one simulated device (`seed`).
fn disk_tier_engine(seed: u64) -> (Arc<SimDevice>, EngineConfig, Arc<Engine>, Arc<Persister>) {
    let device = Arc::new(SimDevice::new(seed));
    let config = EngineConfig {
        memory_cap_bytes: 1 << 30,
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::new(config.clone()));
    let persister = Persister::start(
        device.clone(),
        STORE_ID,
        0,
        0,
        PersistConfig {
            commit_interval: Duration::from_secs(3600), // only explicit syncs commit
            checkpoint_journal_bytes: u64::MAX,
            ..PersistConfig::default()
        },
    )
    .unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    engine.set_disk_tier(DiskTier::new(device.clone(), disk_config()));
    (device, config, engine, persister)
}

fn run_seed(seed: u64, mode: CrashMode) -> usize {
    let (device, config, engine, persister) = disk_tier_engine(seed);
    persister.checkpoint(&engine).unwrap();
    device.set_faults(Faults {
        crash_images: Some(CrashImages {
            mode,
            at: None,
            ops: &[SyncOp::Sync, SyncOp::Rename, SyncOp::Remove],
        }),
        ..Faults::default()
    });

    // Every state the file system passed through: (crash images taken before the step that
    // led to it, the state, what that step wrote). Ops sync on their own too (a truncate of
    // a disk-tier file commits before it trims), so any of them may be durable at a crash.
    let mut history: Vec<(usize, State, Written)> = vec![(0, state_of(&engine), Written::new())];
    // Acknowledged states: (index in `history`, crash images taken when the sync returned).
    let mut acks: Vec<(usize, usize)> = vec![(0, 0)];
    let mut rng = Rng(seed);
    let mut on_disk = 0;
    for step in 0..200u64 {
        let images_before = device.crash_images_taken();
        let mut written = Written::new();
        random_op(&engine, &mut rng, step, &mut written);
        history.push((images_before, state_of(&engine), written));
        for name in FILES {
            if let Ok(a) = engine.lookup_path(name.as_bytes()) {
                if engine.tier(a.ino) == Ok(Tier::Disk) {
                    on_disk += 1;
                }
            }
        }
        if rng.below(5) == 0 || step == 199 {
            if step == 100 {
                persister.checkpoint(&engine).unwrap();
            } else {
                engine.sync().unwrap();
            }
            acks.push((history.len() - 1, device.crash_images_taken()));
        }
    }
    let images = device.take_crash_images();
    assert!(
        images.len() >= 10,
        "seed {seed}: {} sync points",
        images.len()
    );
    for (i, image) in images.into_iter().enumerate() {
        // The step during which the image was taken (or the sync after it), and the last
        // state acknowledged before.
        let during = history
            .iter()
            .rposition(|(before, _, _)| *before <= i)
            .unwrap_or(0);
        let acked = acks
            .iter()
            .filter(|(_, done)| *done <= i)
            .map(|(at, _)| *at)
            .next_back()
            .unwrap_or(0);
        let states: Vec<&State> = history[acked..=during].iter().map(|(_, s, _)| s).collect();
        let mut written = Written::new();
        for (_, _, w) in &history[acked + 1..=during] {
            for (n, set) in w {
                written.entry(*n).or_default().extend(set);
            }
        }
        let image: Arc<dyn Device> = Arc::new(image);
        let (mut state, report) = recover(image.as_ref(), STORE_ID, &config)
            .unwrap_or_else(|e| panic!("seed {seed} image {i}: recovery failed: {e}"));
        let hosts = recover_host_files(image.as_ref(), &mut state).unwrap();
        assert!(
            hosts.damaged.is_empty(),
            "seed {seed} image {i}: missing or short host files {:?}",
            hosts.damaged
        );
        let recovered = Engine::from_state(state);
        recovered.set_disk_tier(DiskTier::new(image.clone(), disk_config()));
        assert!(recovered.check().is_empty(), "seed {seed} image {i}");
        let got = state_of(&recovered);
        if let Err(e) = allowed(&got, &states, &written) {
            panic!("seed {seed} image {i} (steps {acked}..={during}; {report}): {e}");
        }
        // Every host file left belongs to a live disk-tier file (and is as long as it: the
        // reads above would have failed otherwise).
        let live: HashSet<String> = got
            .keys()
            .filter_map(|n| {
                let a = recovered.lookup_path(n.as_bytes()).ok()?;
                (recovered.tier(a.ino) == Ok(Tier::Disk))
                    .then(|| format!("data/{:016x}-{:08x}", a.ino, a.generation))
            })
            .collect();
        let listed: HashSet<String> = image.list_data().unwrap().into_iter().collect();
        assert_eq!(listed, live, "seed {seed} image {i}");
    }
    on_disk
}

/// [`run_seed`] for each seed from `first`; returns the steps that had a file on the disk tier.
fn run_seeds(first: u64, mode: CrashMode) -> usize {
    (first..first + seeds(4))
        .map(|seed| run_seed(seed, mode))
        .sum()
}

#[test]
fn crash_before_every_sync_point_of_the_disk_tier_losing_unsynced_writes() {
    let disk_steps = run_seeds(0, CrashMode::LoseUnsynced);
    // The workload really kept files on the disk tier.
    assert!(disk_steps > 100, "{disk_steps}");
}

#[test]
fn crash_before_every_sync_point_of_the_disk_tier_with_torn_writes() {
    let disk_steps = run_seeds(500, CrashMode::TornTail);
    assert!(disk_steps > 100, "{disk_steps}");
}

/// [`disk_tier_engine`] with one file of three thresholds' bytes (all 1) on the disk tier,
/// synced.
struct OneDiskFile {
    device: Arc<SimDevice>,
    config: EngineConfig,
    engine: Arc<Engine>,
    persister: Arc<Persister>,
    ino: u64,
}

fn one_disk_file(device_seed: u64, name: &str) -> OneDiskFile {
    let (device, config, engine, persister) = disk_tier_engine(device_seed);
    let c = Ctx::library(0, 0);
    engine
        .mknod(&c, ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0)
        .unwrap();
    let ino = engine.lookup_path(name.as_bytes()).unwrap().ino;
    engine
        .write(&c, ino, 0, &vec![1; 3 * THRESHOLD as usize], false)
        .unwrap();
    engine.sync().unwrap();
    assert_eq!(engine.tier(ino), Ok(Tier::Disk));
    OneDiskFile {
        device,
        config,
        engine,
        persister,
        ino,
    }
}

/// What a `kill -9` now would leave (the device's current content, every write kept):
/// recovered, with no host file missing or short; its state and the recovery's report.
fn after_kill(device: &Arc<SimDevice>, config: &EngineConfig) -> (State, String) {
    let (mut state, report) = recover(device.as_ref(), STORE_ID, config)
        .unwrap_or_else(|e| panic!("recovery failed: {e}"));
    let scan = scan_host_files(device.as_ref(), &state).unwrap();
    assert!(
        scan.damaged.is_empty(),
        "missing or short host files ({report}): {:?}",
        scan.damaged
    );
    let hosts = recover_host_files(device.as_ref(), &mut state).unwrap();
    assert!(hosts.damaged.is_empty(), "{:?}", hosts.damaged);
    let recovered = Engine::from_state(state);
    recovered.set_disk_tier(DiskTier::new(device.clone(), disk_config()));
    (state_of(&recovered), report.to_string())
}

/// The checkpoint's race with a commit (the kill -9 e2e test's flake, issue 13): a commit that
/// runs while `checkpoint_begin` syncs the host files its image refers to. Its batch must be
/// in the new journal; when the old journal's length was read after that commit, the batch
/// was left out: the truncate it held, durable and already trimmed from the host file, was
/// lost with the switch (the file kept its old size over a host file cut short: "holds L of
/// its N bytes"), and the next batch started past the new journal's `base_seq` (damaged).
/// The device's matcher holds the checkpoint's first host-file sync until the commit is done,
/// so the interleaving is the same on every run. What is checked is what a `kill -9` leaves:
/// the device's current content, every write kept.
mod checkpoint_race {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// The next host-file call is the checkpoint's sync: hold it.
    pub static ARMED: AtomicBool = AtomicBool::new(false);
    /// The checkpoint is inside that sync.
    pub static IN_SYNC: AtomicBool = AtomicBool::new(false);
    /// The other thread's commit is done: let the sync go on.
    pub static COMMITTED: AtomicBool = AtomicBool::new(false);

    /// Waits for `flag` (at most a minute, so that a broken test fails instead of hanging).
    pub fn wait_for(flag: &AtomicBool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !flag.load(Ordering::Acquire) {
            assert!(
                Instant::now() < deadline,
                "the other thread never got there"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A `Files::Matching` function that delays nothing, but blocks the first host-file call
    /// after `ARMED` until `COMMITTED`.
    pub fn hold_first_host_call(name: &str) -> bool {
        if name.starts_with("data/") && ARMED.swap(false, Ordering::AcqRel) {
            IN_SYNC.store(true, Ordering::Release);
            wait_for(&COMMITTED);
        }
        false
    }
}

#[test]
fn a_commit_while_a_checkpoint_syncs_host_files_stays_in_the_new_journal() {
    use checkpoint_race::{hold_first_host_call, wait_for, ARMED, COMMITTED, IN_SYNC};
    use std::sync::atomic::Ordering;

    let OneDiskFile {
        device,
        config,
        engine,
        persister,
        ino,
    } = one_disk_file(7, "big");
    let c = Ctx::library(0, 0);
    // Pending at the checkpoint: a write of the disk-tier file, so its image names the host
    // file and syncs it.
    engine.write(&c, ino, 100, &[2; 100], false).unwrap();
    device.set_faults(Faults {
        delay: Some(Delay {
            files: Files::Matching(hold_first_host_call),
            write: Duration::ZERO,
            sync: Duration::ZERO,
        }),
        ..Faults::default()
    });
    ARMED.store(true, Ordering::Release);
    let cut = 2 * THRESHOLD;
    std::thread::scope(|s| {
        s.spawn(|| {
            wait_for(&IN_SYNC);
            // Journal first, then the trim: the truncate commits while the checkpoint syncs.
            let set = SetAttr {
                size_bytes: Some(cut),
                ..SetAttr::default()
            };
            engine.setattr(&c, ino, &set).unwrap();
            COMMITTED.store(true, Ordering::Release);
        });
        let mut job = persister.checkpoint_begin(&engine).unwrap();
        job.write_image().unwrap();
        job.copy_tail().unwrap();
        job.finish().unwrap();
    });
    assert!(
        !ARMED.load(Ordering::Acquire),
        "the checkpoint synced no host file"
    );
    // A batch after the switch: it must follow the new journal's last one.
    engine.write(&c, ino, 0, &[3; 10], false).unwrap();
    engine.sync().unwrap();
    let expected = state_of(&engine);
    assert_eq!(engine.getattr(ino).unwrap().size_bytes, cut);

    // kill -9: every write the device took is there.
    let (recovered, report) = after_kill(&device, &config);
    assert_eq!(recovered, expected, "{report}");
}

/// What a `kill -9` leaves at every host-file call of a file that comes back to memory and
/// leaves again before the next commit (the suspect of the e2e flake, issue 13): the move to
/// the disk rewrites the host file from its start, while the journal may still say the file
/// is on the disk tier with that host file's bytes. The move back must be durable before the
/// host file is reused, or a crash in between cuts an fsync'd file short.
mod reuse_check {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use rampart_core::disk::scan_host_files;
    use rampart_core::persist::device::SimDevice;
    use rampart_core::persist::recovery::recover;
    use rampart_core::EngineConfig;

    pub static ARMED: AtomicBool = AtomicBool::new(false);
    pub static DEVICE: Mutex<Option<Arc<SimDevice>>> = Mutex::new(None);
    /// What recovery of the device's current content found wrong, per call checked.
    pub static FOUND: Mutex<Vec<String>> = Mutex::new(Vec::new());
    pub static CHECKED: Mutex<u64> = Mutex::new(0);

    /// A `Files::Matching` function that delays nothing: before each host-file write or sync
    /// while `ARMED`, recovers the device as it is (every write kept, as after kill -9) and
    /// notes missing or short host files.
    pub fn check_before_host_calls(name: &str) -> bool {
        if !name.starts_with("data/") || !ARMED.load(Ordering::Acquire) {
            return false;
        }
        let device = DEVICE.lock().unwrap().clone().expect("device set");
        let config = EngineConfig {
            memory_cap_bytes: 1 << 30,
            ..EngineConfig::default()
        };
        *CHECKED.lock().unwrap() += 1;
        match recover(device.as_ref(), super::STORE_ID, &config) {
            Err(e) => FOUND
                .lock()
                .unwrap()
                .push(format!("before a call on {name}: recovery failed: {e}")),
            Ok((state, _)) => {
                let scan = scan_host_files(device.as_ref(), &state).unwrap();
                if !scan.damaged.is_empty() {
                    FOUND.lock().unwrap().push(format!(
                        "before a call on {name}: missing or short host files {:?}",
                        scan.damaged
                    ));
                }
            }
        }
        false
    }
}

#[test]
fn a_file_back_in_memory_reuses_its_host_file_only_once_that_is_durable() {
    use std::sync::atomic::Ordering;

    let OneDiskFile {
        device,
        config,
        engine,
        persister: _persister,
        ino,
    } = one_disk_file(11, "f");
    let c = Ctx::library(0, 0);
    // Below a quarter of the threshold: committed, trimmed, then back to memory (not
    // committed yet); its host file waits for that commit to go.
    let small = THRESHOLD / 8;
    let set = SetAttr {
        size_bytes: Some(small),
        ..SetAttr::default()
    };
    engine.setattr(&c, ino, &set).unwrap();
    assert_eq!(engine.tier(ino), Ok(Tier::Memory));
    *reuse_check::DEVICE.lock().unwrap() = Some(device.clone());
    device.set_faults(Faults {
        delay: Some(Delay {
            files: Files::Matching(reuse_check::check_before_host_calls),
            write: Duration::ZERO,
            sync: Duration::ZERO,
        }),
        ..Faults::default()
    });
    reuse_check::ARMED.store(true, Ordering::Release);
    // Past the threshold again, before any commit: the file moves back to the disk tier.
    engine
        .write(&c, ino, 2 * THRESHOLD, &[2; 100], false)
        .unwrap();
    engine.sync().unwrap();
    reuse_check::ARMED.store(false, Ordering::Release);
    assert_eq!(engine.tier(ino), Ok(Tier::Disk));
    assert!(*reuse_check::CHECKED.lock().unwrap() >= 2);
    let found = reuse_check::FOUND.lock().unwrap().clone();
    assert!(found.is_empty(), "{}", found.join("\n"));
    let expected = state_of(&engine);
    let (recovered, report) = after_kill(&device, &config);
    assert_eq!(recovered, expected, "{report}");
}

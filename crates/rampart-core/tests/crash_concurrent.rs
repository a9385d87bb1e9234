//! Crash simulation with concurrent writers, commits driven by the persister's timer, crash
//! images taken right after acknowledgements, and repeated cycles crash → recover → continue
//! → crash on the same simulated store.
//!
//! Several threads apply random ops (every kind: `common::random_op`) to one engine whose
//! persister commits every few milliseconds on its own, and now and then call `sync` or
//! `sync_async`; an Ok answer is an acknowledgement. Crash images come from two places: the
//! device takes one just before every sync point (journal syncs, checkpoint renames), and a
//! writer takes one (`SimDevice::crash`) right after each acknowledgement. Each image is
//! recovered and compared in full with the model; then the store continues from one of the
//! images, and the cycle repeats.
//!
//! # The model, and why the check is sound
//!
//! Writers apply ops one at a time, under the `History` lock: each op is applied, then the
//! state after it is snapshotted (`states[m]`: the state after the first `m` ops of the
//! cycle). The engine hands each op to the persister while applying it, so the journal's
//! order is the order of `states`, and every commit (a batch boundary) and every checkpoint
//! (an image taken under the engine's lock) falls between two ops: whatever recovery finds is
//! `states[m]` for some `m`. Which `m` an image may hold is bounded on both sides:
//!
//! - below, by the acknowledgements that completed before the image was taken. A writer
//!   reads `k` = ops applied (all of them handed to the persister) before calling `sync`, so
//!   an Ok covers at least the first `k` ops. For an image taken right after an
//!   acknowledgement, the bound is the largest `k` acknowledged by any writer before the
//!   image (read before taking it). For the device's images (taken inside the persister's
//!   calls), a writer reads `crash_images_taken()` after its sync returned: every image with
//!   an index at least that was taken after the acknowledgement.
//! - above, by the ops applied before the image: a writer reads `crash_images_taken()` before
//!   applying op `m`, so images with a smaller index were taken before op `m` and cannot
//!   hold it (ops are serialised, so neither can they hold any later op). For an image taken
//!   by a writer, the ops applied when it returned.
//!
//! Both bounds only widen the allowed range (they are read on the safe side of the instant),
//! so a failure is a real violation: an acknowledged op lost, or a state that no prefix of
//! the ops gives (something half applied, or invented).
//!
//! A persister that marked ops durable before writing and syncing them fails here: a `sync`
//! arriving while the committer writes finds its ops "durable" and returns at once, and the
//! image taken right after it holds no such batch (journal syncs are slowed down on purpose,
//! to keep that window open).
//!
//! `RAMPART_CRASH_SEEDS=N` runs N seeds instead of the CI default (a longer soak).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart_core::persist::device::{
    CrashImages, CrashMode, Delay, Faults, Files, SimDevice, SyncOp,
};
use rampart_core::persist::journal::Tail;
use rampart_core::persist::persister::PersistConfig;
use rampart_core::persist::recovery::{recover, JOURNAL_FILE};
use rampart_core::{Engine, EngineConfig};

use common::{diff, random_op, seeds, snapshot, Rng, Snapshot, STORE_ID};

const WRITERS: usize = 3;
const OPS_PER_WRITER: usize = 80;
const CYCLES: usize = 4;

/// The ops of one cycle, in the order they were applied (see the module's documentation).
struct History {
    /// `states[m]`: the state after the first `m` ops.
    states: Vec<Snapshot>,
    /// `images_before[m - 1]`: the device's crash images taken before op `m` was applied.
    images_before: Vec<usize>,
}

/// An acknowledgement: a sync that returned Ok.
struct Ack {
    /// It covers at least the first `ops` ops.
    ops: usize,
    /// Device crash images taken before it returned are fewer than this.
    images_before: usize,
}

/// A crash image a writer took right after an acknowledgement, with the range of states
/// recovery may find in it.
struct AckImage {
    image: SimDevice,
    ops_min: usize,
    ops_max: usize,
}

struct Cycle {
    engine: Arc<Engine>,
    device: Arc<SimDevice>,
    mode: CrashMode,
    history: Mutex<History>,
    acks: Mutex<Vec<Ack>>,
    acked_max: AtomicUsize,
    ack_images: Mutex<Vec<AckImage>>,
}

fn persist_config() -> PersistConfig {
    PersistConfig {
        // Commits on the timer, between and beside the writers' syncs.
        commit_interval: Duration::from_millis(2),
        // Background checkpoints now and then.
        checkpoint_journal_bytes: 96 << 10,
        checkpoint_scales_with_image: false,
        ..PersistConfig::default()
    }
}

fn faults(mode: CrashMode) -> Faults {
    Faults {
        crash_images: Some(CrashImages {
            mode,
            at: None,
            ops: &[SyncOp::Sync, SyncOp::Rename],
        }),
        // A journal sync takes a while, as on a disk: a commit's write and its sync are
        // apart long enough for other writers' syncs to arrive in between.
        delay: Some(Delay {
            files: Files::Named(JOURNAL_FILE.to_owned()),
            write: Duration::ZERO,
            sync: Duration::from_micros(300),
        }),
        ..Faults::default()
    }
}

fn writer(cycle: &Cycle, mut rng: Rng) {
    for _ in 0..OPS_PER_WRITER {
        {
            let mut h = cycle.history.lock().unwrap();
            let images_before = cycle.device.crash_images_taken();
            random_op(&cycle.engine, &mut rng);
            h.states.push(snapshot(&cycle.engine));
            h.images_before.push(images_before);
        }
        if rng.below(4) != 0 {
            continue;
        }
        let ops = cycle.history.lock().unwrap().states.len() - 1;
        let synced = if rng.below(2) == 0 {
            cycle.engine.sync()
        } else {
            let (tx, rx) = std::sync::mpsc::channel();
            cycle.engine.sync_async(Box::new(move |r| {
                let _ = tx.send(r);
            }));
            rx.recv().unwrap()
        };
        synced.unwrap_or_else(|e| panic!("a sync failed: {e}"));
        let images_before = cycle.device.crash_images_taken();
        cycle.acks.lock().unwrap().push(Ack { ops, images_before });
        cycle.acked_max.fetch_max(ops, Ordering::SeqCst);
        // What a power cut right after the acknowledgement leaves.
        let ops_min = cycle.acked_max.load(Ordering::SeqCst);
        let image = cycle.device.crash(cycle.mode);
        let ops_max = cycle.history.lock().unwrap().states.len() - 1;
        cycle.ack_images.lock().unwrap().push(AckImage {
            image,
            ops_min,
            ops_max,
        });
    }
}

/// Recovers `image` and checks that it holds one of `states[ops_min..=ops_max]`; returns
/// whether recovery dropped a torn batch.
fn check_image(
    image: &SimDevice,
    states: &[Snapshot],
    ops_min: usize,
    ops_max: usize,
    what: &str,
) -> bool {
    let config = EngineConfig::default();
    let (state, report) = recover(image, STORE_ID, &config)
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let recovered = Engine::from_state(state);
    let problems = recovered.check();
    assert!(problems.is_empty(), "{what}: {problems:?}");
    let got = snapshot(&recovered);
    assert!(
        ops_min <= ops_max,
        "{what}: acknowledged {ops_min} ops of {ops_max}"
    );
    if !states[ops_min..=ops_max].contains(&got) {
        let near = states.iter().position(|s| *s == got);
        panic!(
            "{what} ({report}): the recovered state is none of the states after {ops_min} to \
             {ops_max} ops (it is the state after {near:?}); against the last acknowledged \
             one:{}",
            diff(&states[ops_min], &got)
        );
    }
    matches!(report.tail, Tail::Torn { .. })
}

/// Runs one cycle on `device`, whose state is `start`; checks every crash image; returns the
/// images, for the next cycle to continue from one of them, and how many recoveries were torn.
fn run_cycle(
    seed: u64,
    cycle_index: usize,
    device: Arc<SimDevice>,
    mode: CrashMode,
) -> (Vec<SimDevice>, usize) {
    let what = |s: &str| format!("seed {seed} cycle {cycle_index}: {s}");
    let (engine, persister, _) = rampart_core::persist::open(
        device.clone(),
        STORE_ID,
        &EngineConfig::default(),
        persist_config(),
    )
    .unwrap_or_else(|e| panic!("{}", what(&format!("open failed: {e}"))));
    if cycle_index == 0 {
        // The root as created, durable (as `rampart mkfs` leaves a store).
        persister.checkpoint(&engine).unwrap();
    }
    // Images left by an earlier crash are not this cycle's.
    device.take_crash_images();
    device.set_faults(faults(mode));
    let cycle = Arc::new(Cycle {
        engine: engine.clone(),
        device: device.clone(),
        mode,
        history: Mutex::new(History {
            states: vec![snapshot(&engine)],
            images_before: Vec::new(),
        }),
        acks: Mutex::new(Vec::new()),
        acked_max: AtomicUsize::new(0),
        ack_images: Mutex::new(Vec::new()),
    });
    let threads: Vec<_> = (0..WRITERS)
        .map(|t| {
            let cycle = cycle.clone();
            let rng = Rng(seed * 1_000_003 + cycle_index as u64 * 101 + t as u64);
            std::thread::spawn(move || writer(&cycle, rng))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Let the timer commit the rest: the last images come after the last acknowledgement.
    std::thread::sleep(persister.commit_interval() * 3);
    let last = device.crash(mode);
    engine.set_sink(None);
    drop(persister);
    let device_images = device.take_crash_images();
    let history = cycle.history.lock().unwrap();
    let acks = cycle.acks.lock().unwrap();
    let ops = history.states.len() - 1;
    assert!(
        acks.len() >= WRITERS,
        "{}",
        what("too few acknowledgements")
    );
    let mut torn = 0;
    for (i, image) in device_images.iter().enumerate() {
        let ops_min = acks
            .iter()
            .filter(|a| a.images_before <= i)
            .map(|a| a.ops)
            .max()
            .unwrap_or(0);
        let ops_max = history.images_before.iter().filter(|&&c| c <= i).count();
        torn += usize::from(check_image(
            image,
            &history.states,
            ops_min,
            ops_max,
            &what(&format!("device image {i} of {}", device_images.len())),
        ));
    }
    let ack_images = std::mem::take(&mut *cycle.ack_images.lock().unwrap());
    for (i, a) in ack_images.iter().enumerate() {
        torn += usize::from(check_image(
            &a.image,
            &history.states,
            a.ops_min,
            a.ops_max,
            &what(&format!("image {i} after an acknowledgement")),
        ));
    }
    let acked = acks.iter().map(|a| a.ops).max().unwrap_or(0);
    torn += usize::from(check_image(
        &last,
        &history.states,
        acked,
        ops,
        &what("last image"),
    ));
    eprintln!(
        "{}",
        what(&format!(
            "{ops} ops, {} acknowledgements, {} device images, {} after acknowledgements",
            acks.len(),
            device_images.len(),
            ack_images.len()
        ))
    );
    let mut images: Vec<SimDevice> = device_images;
    images.extend(ack_images.into_iter().map(|a| a.image));
    images.push(last);
    (images, torn)
}

fn run_seed(seed: u64, mode: CrashMode) -> usize {
    let mut device = Arc::new(SimDevice::new(seed));
    let mut rng = Rng(seed ^ 0x5eed);
    let mut torn = 0;
    for cycle_index in 0..CYCLES {
        let (mut images, t) = run_cycle(seed, cycle_index, device, mode);
        torn += t;
        // Continue from a random crash image: any of them is a state a restart may find.
        let pick = rng.below(images.len() as u64) as usize;
        let image = images.swap_remove(pick);
        image.clear_faults();
        device = Arc::new(image);
    }
    torn
}

#[test]
fn concurrent_writers_lose_no_acknowledged_op_across_crash_cycles() {
    for seed in 0..seeds(6) {
        run_seed(seed, CrashMode::LoseUnsynced);
    }
}

#[test]
fn concurrent_writers_with_torn_writes_across_crash_cycles() {
    let mut torn = 0;
    for seed in 0..seeds(6) {
        let mode = if seed % 2 == 0 {
            CrashMode::TornTail
        } else {
            CrashMode::Random
        };
        torn += run_seed(500 + seed, mode);
    }
    eprintln!("{torn} recoveries dropped a torn batch");
    assert!(torn > 0, "no recovery met a torn batch");
}

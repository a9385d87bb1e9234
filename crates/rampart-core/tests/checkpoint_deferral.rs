//! A checkpoint that falls due during a burst of writes waits for the burst to end, or for
//! the journal to reach its deferred bound (decision 0130); what was written survives a crash
//! either way.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_core::persist::device::SimDevice;
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::{Ctx, Engine, EngineConfig, ROOT_INO};

use common::{content, crash_and_recover, STORE_ID};

const FILE: u32 = libc::S_IFREG | 0o644;
const MIB: usize = 1 << 20;

fn start(seed: u64, config: PersistConfig) -> (Arc<SimDevice>, Arc<Engine>, Arc<Persister>) {
    let device = Arc::new(SimDevice::new(seed));
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let persister = Persister::start(device.clone(), STORE_ID, 0, 0, config).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    (device, engine, persister)
}

/// Appends `mib` MiB of `byte` to a new file `name`, a MiB per write (a burst: the committer
/// is woken each time a quarter of the batch bound is gathered).
fn burst(e: &Engine, name: &str, mib: usize, byte: u8) {
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, name.as_bytes(), FILE, 0).unwrap().ino;
    for i in 0..mib {
        e.write(&c, f, (i * MIB) as u64, &vec![byte; MIB], false)
            .unwrap();
    }
}

/// Waits (not a timed assertion: 60 s is only a bound on a hang) until `done` holds.
fn wait_until(p: &Persister, what: &str, done: impl Fn(&Persister) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(p) {
        assert!(Instant::now() < deadline, "{what}: {:?}", p.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn when_a_checkpoint_is_due() {
    let config = PersistConfig {
        checkpoint_journal_bytes: 100,
        checkpoint_scales_with_image: true,
        checkpoint_deferred_journal_bytes: 1000,
        ..PersistConfig::default()
    };
    // (journal grown, last image, busy) → due
    let cases = [
        (100, 0, false, false),
        (101, 0, false, true),
        (101, 0, true, false),
        (1000, 0, true, false),
        (1001, 0, true, true),
        // The image's size is the due amount: 300 grown is not due, 301 is when quiet.
        (300, 300, false, false),
        (301, 300, false, true),
        (301, 300, true, false),
        // An image beyond the deferred bound: nothing is deferred past its size.
        (2001, 2000, true, true),
    ];
    for (grown, image, busy, due) in cases {
        assert_eq!(
            config.checkpoint_due(grown, image, busy),
            due,
            "grown {grown}, image {image}, busy {busy}"
        );
    }
    // An explicit size (not scaled with the image) keeps its exact meaning; 0 defers nothing.
    let exact = PersistConfig {
        checkpoint_scales_with_image: false,
        ..config.clone()
    };
    assert!(exact.checkpoint_due(101, 0, true));
    let never = PersistConfig {
        checkpoint_deferred_journal_bytes: 0,
        ..config
    };
    assert!(never.checkpoint_due(101, 0, true));
}

#[test]
fn a_burst_defers_the_checkpoint_until_the_deferred_bound() {
    // Due after 64 KiB of journal; a burst may take it to 56 MiB. The commit interval is
    // an hour: every commit here is one the burst asked for.
    let config = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: 64 << 10,
        checkpoint_scales_with_image: true,
        checkpoint_deferred_journal_bytes: 56 << 20,
        ..PersistConfig::default()
    };
    let (device, e, p) = start(1, config);
    burst(&e, "a", 40, 1);
    wait_until(&p, "32 MiB of the burst committed", |p| {
        p.stats().journal_bytes > 32 << 20
    });
    // Without the deferral the first commit (4 MiB or more, far past 64 KiB; a slow build
    // may take the whole burst in one) would have started one.
    let stats = p.stats();
    assert_eq!(p.background_checkpoints_started(), 0, "{stats:?}");
    // Past 56 MiB the burst no longer holds it back.
    burst(&e, "b", 24, 2);
    wait_until(&p, "the checkpoint at the bound", |p| {
        p.stats().checkpoints >= 1
    });
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/a"), vec![1u8; 40 * MIB]);
    assert_eq!(content(&r, b"/b"), vec![2u8; 24 * MIB]);
}

#[test]
fn the_first_quiet_commit_after_a_burst_starts_the_deferred_checkpoint() {
    let config = PersistConfig {
        commit_interval: Duration::from_millis(50),
        checkpoint_journal_bytes: 64 << 10,
        checkpoint_scales_with_image: true,
        checkpoint_deferred_journal_bytes: 1 << 30,
        ..PersistConfig::default()
    };
    let (device, e, p) = start(2, config);
    burst(&e, "a", 20, 3);
    // The burst is over: a commit by the interval takes the rest (less than a batch bound)
    // and starts the checkpoint, far below the deferred bound.
    wait_until(&p, "the checkpoint after the burst", |p| {
        p.stats().checkpoints >= 1
    });
    assert!(p.stats().journal_bytes < 1 << 30);
    // On a busy machine the checkpoint can start while the writer is off its CPU, before
    // the burst's last writes are committed (they are owed only within the interval):
    // made durable before the crash, as in the test above.
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/a"), vec![3u8; 20 * MIB]);
}

#[test]
fn a_burst_on_a_disk_without_room_for_the_deferral_checkpoints_as_before() {
    // A deferred bound no disk has room for: the checkpoint due during the burst starts
    // as without the deferral, rather than let the journal run into a full disk.
    let dir = tempfile::tempdir().unwrap();
    let device = Arc::new(rampart_core::persist::device::DirDevice::open(dir.path()).unwrap());
    let config = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: 64 << 10,
        checkpoint_scales_with_image: true,
        checkpoint_deferred_journal_bytes: 1 << 62,
        ..PersistConfig::default()
    };
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let p = Persister::start(device, STORE_ID, 0, 0, config).unwrap();
    p.attach(&engine);
    engine.set_sink(Some(p.clone()));
    burst(&engine, "a", 40, 4);
    wait_until(&p, "a checkpoint during the burst", |p| {
        p.background_checkpoints_started() >= 1
    });
    engine.sync().unwrap();
}

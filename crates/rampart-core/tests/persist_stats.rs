//! The persister's figures for monitoring: commit and checkpoint latencies, and the age of
//! the oldest change not yet durable (journal lag).

use std::sync::Arc;
use std::time::Duration;

use rampart_core::persist::device::SimDevice;
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::{Ctx, Engine, EngineConfig, ROOT_INO};

const ID: [u8; 16] = [2; 16];
const FILE: u32 = libc::S_IFREG | 0o644;

#[test]
fn commits_and_checkpoints_are_timed_and_the_lag_has_an_age() {
    let device = Arc::new(SimDevice::new(1));
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    // No commit but the ones asked for.
    let config = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    };
    let p = Persister::start(device, ID, 0, 0, config).unwrap();
    p.attach(&engine);
    engine.set_sink(Some(p.clone()));
    let c = Ctx::library(0, 0);
    let before = p.stats();
    assert_eq!(before.oldest_pending_age_max, None, "nothing pending");

    engine.mknod(&c, ROOT_INO, b"a", FILE, 0).unwrap();
    // Pending, but no commit has taken anything yet: the age is not known.
    assert_eq!(p.stats().oldest_pending_age_max, None);
    engine.sync().unwrap();
    let synced = p.stats();
    assert_eq!(synced.commits, before.commits + 1);
    assert_eq!(synced.commit_latency.count, synced.commits);
    assert!(synced.commit_latency.sum_ns > 0);
    assert_eq!(
        synced.oldest_pending_age_max, None,
        "nothing pending after the sync"
    );

    engine.mknod(&c, ROOT_INO, b"b", FILE, 0).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let lagging = p.stats();
    assert_eq!(lagging.ops_pending, 1);
    let age = lagging
        .oldest_pending_age_max
        .expect("known after a commit");
    assert!(age >= Duration::from_millis(30), "{age:?}");

    assert_eq!(lagging.checkpoint_latency.count, 0);
    p.checkpoint(&engine).unwrap();
    let checkpointed = p.stats();
    assert_eq!(checkpointed.checkpoint_latency.count, 1);
    assert!(checkpointed.checkpoint_latency.sum_ns > 0);
}

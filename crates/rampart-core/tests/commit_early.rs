//! A busy store is committed once `COMMIT_EARLY_BODY_BYTES` are gathered, long before its
//! commit interval (decision 0128): the journal's batch buffers stay small and are reused
//! from the next batches on, instead of growing over fresh pages.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_core::limits::COMMIT_EARLY_BODY_BYTES;
use rampart_core::persist::device::{CrashMode, Device, SimDevice};
use rampart_core::persist::journal;
use rampart_core::persist::persister::PersistConfig;
use rampart_core::{Ctx, EngineConfig, ROOT_INO};

const ID: [u8; 16] = [3; 16];
const FILE: u32 = libc::S_IFREG | 0o644;

/// Ops in the journal's synced part (what a crash now would keep).
fn synced_ops(device: &SimDevice) -> u64 {
    let image = device.crash(CrashMode::LoseUnsynced);
    let bytes = image.read("journal").unwrap().unwrap_or_default();
    journal::scan(&bytes)
        .unwrap()
        .batches
        .iter()
        .map(|b| u64::from(b.op_count))
        .sum()
}

#[test]
fn a_commit_is_asked_for_once_the_early_bound_is_gathered() {
    let device = Arc::new(SimDevice::new(7));
    let ec = EngineConfig {
        memory_cap_bytes: 1 << 30,
        large_file_threshold_bytes: Some(u64::MAX),
        ..EngineConfig::default()
    };
    let cfg = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    };
    let (e, _p, _report) = rampart_core::persist::open(device.clone(), ID, &ec, cfg).unwrap();
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"f", FILE, 0).unwrap().ino;
    let piece = vec![0xA5u8; 64 << 10];
    // The last write takes what is gathered past the bound (each record has a few bytes of
    // fields besides its data).
    let pieces = COMMIT_EARLY_BODY_BYTES / piece.len();
    for i in 0..pieces {
        e.write(&c, f, (i * piece.len()) as u64, &piece, false)
            .unwrap();
    }
    // No fsync, and the commit interval an hour away: only the bound can have asked for
    // the commit that makes these writes durable. (A bound on the wait, not a speed check.)
    let given_up_at = Instant::now() + Duration::from_secs(120);
    loop {
        let ops = synced_ops(&device);
        if ops > pieces as u64 {
            break;
        }
        assert!(
            Instant::now() < given_up_at,
            "{ops} ops synced of the mknod and {pieces} writes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

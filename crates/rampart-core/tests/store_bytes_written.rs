//! What a workload costs the store in bytes written, counted by the simulated device
//! (`SimDevice::written`): every journal byte is written once, room is allocated rather than
//! written, and bytes a file already holds are not journaled again (decisions 0093, 0094).

mod common;

use std::sync::Arc;
use std::time::Duration;

use rampart_core::persist::device::{Device, SimDevice};
use rampart_core::persist::journal;
use rampart_core::persist::persister::{PersistConfig, Persister, RESERVE_FILE};
use rampart_core::{Ctx, Engine, EngineConfig, Op, ROOT_INO};

use common::{content, crash_and_recover, engine_on_sim_device, STORE_ID};

const FILE: u32 = libc::S_IFREG | 0o644;
const MIB: u64 = 1 << 20;

/// Bytes of file data in the journal's Write records, and how many records.
fn journaled_write_bytes(device: &SimDevice) -> (u64, u64) {
    let bytes = device.read("journal").unwrap().unwrap();
    let scan = journal::scan(&bytes).unwrap();
    let (mut data, mut records) = (0u64, 0u64);
    for batch in &scan.batches {
        batch
            .for_each_op(|_, op| {
                if let Op::Write { data: d, .. } = op {
                    data += d.len() as u64;
                    records += 1;
                }
                Ok(())
            })
            .unwrap();
    }
    (data, records)
}

#[test]
fn large_journal_batches_are_not_written_over_zeros() {
    // 32 commits of 1 MiB each, past the zeros reserved ahead: the room ahead of them is
    // allocated, never written. Before, every batch byte was written twice, once as a zero.
    let (device, e, _p) = engine_on_sim_device(1, Duration::from_secs(3600), None);
    let c = Ctx::library(0, 0);
    let commits = 32u64;
    for i in 0..commits {
        let f = e
            .mknod(&c, ROOT_INO, format!("f{i}").as_bytes(), FILE, 0)
            .unwrap()
            .ino;
        e.write(&c, f, 0, &vec![i as u8 + 1; MIB as usize], false)
            .unwrap();
        e.sync().unwrap();
    }
    let written = device.written("journal");
    assert!(
        written.data_bytes >= commits * MIB && written.data_bytes < commits * (MIB + 4096),
        "{written:?}"
    );
    // None (the new journal's were written as journal.tmp).
    assert_eq!(written.zero_bytes, 0, "{written:?}");
    assert!(written.allocated_bytes >= commits * MIB, "{written:?}");
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/f31"), vec![32u8; MIB as usize]);
}

#[test]
fn small_commits_still_write_over_zeros_written_ahead() {
    // Decision 0021 stands for small commits (fsyncs of small writes): their room is zeros
    // written ahead, so their fdatasyncs write no file-system metadata.
    let (device, e, _p) = engine_on_sim_device(4, Duration::from_secs(3600), None);
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"log", FILE, 0).unwrap().ino;
    for i in 0..600u64 {
        e.write(&c, f, i * 4096, &[i as u8 | 1; 4096], false)
            .unwrap();
        e.sync().unwrap();
    }
    let written = device.written("journal");
    assert!(written.data_bytes > 600 * 4096, "{written:?}");
    assert!(
        written.zero_bytes >= journal::JOURNAL_RESERVE_BYTES as u64,
        "{written:?}"
    );
    assert_eq!(written.allocated_bytes, 0, "{written:?}");
}

#[test]
fn the_reserve_is_allocated_not_written() {
    let device = Arc::new(SimDevice::new(2));
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let config = PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: u64::MAX,
        reserve_bytes_min: 8 * MIB,
        ..PersistConfig::default()
    };
    let persister = Persister::start(device.clone(), STORE_ID, 0, 0, config).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    let c = Ctx::library(0, 0);
    let f = engine.mknod(&c, ROOT_INO, b"big", FILE, 0).unwrap().ino;
    engine
        .write(&c, f, 0, &vec![9u8; 12 * MIB as usize], false)
        .unwrap();
    // The checkpoint is larger than the 8 MiB the reserve starts with: it grows to match.
    persister.checkpoint(&engine).unwrap();
    let image_bytes = device.len("checkpoint").unwrap().unwrap();
    assert!(image_bytes > 12 * MIB);
    assert_eq!(device.len(RESERVE_FILE).unwrap(), Some(image_bytes));
    let written = device.written(RESERVE_FILE);
    assert_eq!(written.data_bytes + written.zero_bytes, 0, "{written:?}");
    assert_eq!(written.allocated_bytes, image_bytes, "{written:?}");
}

#[test]
fn bytes_a_file_already_holds_are_not_journaled_again() {
    // What the kernel's writeback cache sends on an append: the last page whole, its bytes
    // already written before the new ones.
    let (device, e, _p) = engine_on_sim_device(3, Duration::from_secs(3600), None);
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"f", FILE, 0).unwrap().ino;
    let first: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8 + 1).collect();
    e.write(&c, f, 0, &first, false).unwrap();
    let mut page = first.clone();
    page.extend_from_slice(&[0xAB; 500]);
    assert_eq!(e.write(&c, f, 0, &page, false).unwrap(), 1500);
    // Sent again unchanged (a page the flusher sent, then close): only the times change.
    let mtime_before = e.getattr(f).unwrap().mtime_ns;
    // File times are the kernel's coarse clock (a tick of up to 10 ms): wait past one.
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(e.write(&c, f, 0, &page, false).unwrap(), 1500);
    assert!(e.getattr(f).unwrap().mtime_ns > mtime_before);
    // A real change after an unchanged start: from the first byte that differs.
    let mut changed = page.clone();
    changed[1200] = 0xCD;
    e.write(&c, f, 0, &changed, false).unwrap();
    // Zeros over a hole are stored: a hole is not "held" (the memory held must not differ).
    let g = e.mknod(&c, ROOT_INO, b"g", FILE, 0).unwrap().ino;
    e.write(&c, g, 1 << 16, b"x", false).unwrap();
    e.write(&c, g, 0, &[0u8; 4097], false).unwrap();
    e.sync().unwrap();
    let (data, records) = journaled_write_bytes(&device);
    assert_eq!(records, 6);
    assert_eq!(data, 1000 + 500 + 300 + 1 + 4097);
    assert_eq!(content(&e, b"/f"), changed);
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/f"), changed);
    let mut g_content = vec![0u8; 1 << 16];
    g_content.push(b'x');
    assert_eq!(content(&r, b"/g"), g_content);
    assert_eq!(
        r.lookup_path(b"/f").unwrap().mtime_ns,
        e.lookup_path(b"/f").unwrap().mtime_ns
    );
}

//! Durability per inode: volatile files never reach the store and are gone after a restart;
//! a volatile file made durable carries its content; before-return changes are durable when
//! the call returns.

mod common;

use std::sync::Arc;
use std::time::Duration;

use rampart_core::persist::device::{Device, SimDevice};
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::{Ctx, Durability, Engine, EngineConfig, ROOT_INO};

use common::{content, crash_and_recover, engine_on_sim_device, STORE_ID};

const FILE: u32 = libc::S_IFREG | 0o644;

fn setup(seed: u64) -> (Arc<SimDevice>, Arc<Engine>, Arc<Persister>) {
    engine_on_sim_device(seed, Duration::from_secs(3600), None)
}

#[test]
fn volatile_files_are_never_written_and_gone_after_a_crash() {
    let (device, e, _p) = setup(1);
    let c = Ctx::library(0, 0);
    let keep = e.mknod(&c, ROOT_INO, b"keep", FILE, 0).unwrap().ino;
    e.write(&c, keep, 0, b"durable", false).unwrap();
    let tmp = e.mknod(&c, ROOT_INO, b"tmp", FILE, 0).unwrap().ino;
    e.set_durability(&c, tmp, Durability::Volatile).unwrap();
    e.sync().unwrap();
    let journal_before = device.len("journal").unwrap().unwrap();
    e.write(&c, tmp, 0, &vec![7u8; 1 << 20], false).unwrap();
    e.setxattr(&c, tmp, b"user.k", b"v", 0).unwrap();
    e.sync().unwrap();
    // Its metadata (the xattr) is journaled; its megabyte of data is not.
    let grown = device.len("journal").unwrap().unwrap() - journal_before;
    assert!(
        grown < 4096,
        "a volatile file's data reached the journal ({grown} bytes)"
    );
    e.link(&c, tmp, ROOT_INO, b"tmp2").unwrap();
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/keep"), b"durable");
    assert!(r.lookup_path(b"/tmp").is_err());
    assert!(r.lookup_path(b"/tmp2").is_err());
}

#[test]
fn a_volatile_file_made_durable_keeps_its_content() {
    let (device, e, _p) = setup(2);
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"f", FILE, 0).unwrap().ino;
    e.set_durability(&c, f, Durability::Volatile).unwrap();
    e.write(&c, f, 0, b"written while volatile", false).unwrap();
    e.write(&c, f, 200_000, b"far", false).unwrap();
    e.setxattr(&c, f, b"user.k", b"v", 0).unwrap();
    let set = rampart_core::SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    e.setattr(&c, f, &set).unwrap();
    e.set_durability(&c, f, Durability::default()).unwrap();
    e.sync().unwrap();
    let before = e.lookup_path(b"/f").unwrap();
    let r = crash_and_recover(&device);
    let after = r.lookup_path(b"/f").unwrap();
    assert_eq!(content(&r, b"/f"), content(&e, b"/f"));
    assert_eq!(r.getxattr(after.ino, b"user.k").unwrap(), b"v");
    assert_eq!(
        (after.perm, after.size_bytes, after.mtime_ns),
        (before.perm, before.size_bytes, before.mtime_ns)
    );
}

#[test]
fn before_return_changes_are_durable_when_the_call_returns() {
    let (device, e, p) = setup(3);
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"safe", FILE, 0).unwrap().ino;
    e.set_durability(&c, f, Durability::BeforeReturn).unwrap();
    assert_eq!(p.stats().ops_pending, 0);
    e.write(&c, f, 0, b"acknowledged", false).unwrap();
    assert_eq!(
        p.stats().ops_pending,
        0,
        "write returned before it was durable"
    );
    // No explicit sync: the crash image right after the call has it.
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/safe"), b"acknowledged");
}

#[test]
fn only_regular_files_can_be_volatile() {
    let (_d, e, _p) = setup(4);
    let c = Ctx::library(0, 0);
    let d = e.mkdir(&c, ROOT_INO, b"d", 0o755).unwrap().ino;
    assert_eq!(
        e.set_durability(&c, d, Durability::Volatile),
        Err(rampart_core::Errno::EINVAL)
    );
    e.set_durability(&c, d, Durability::BeforeReturn).unwrap();
}

#[test]
fn background_checkpoints_keep_the_journal_bounded_and_lose_nothing() {
    let device = Arc::new(SimDevice::new(9));
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let config = PersistConfig {
        commit_interval: Duration::from_millis(5),
        checkpoint_journal_bytes: 64 * 1024,
        checkpoint_scales_with_image: false,
        ..PersistConfig::default()
    };
    let persister = Persister::start(device.clone(), STORE_ID, 0, 0, config).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    let c = Ctx::library(0, 0);
    for i in 0..400u32 {
        let f = e_create(&engine, &c, i);
        engine.write(&c, f, 0, &[i as u8; 1000], false).unwrap();
        if i % 50 == 0 {
            // A commit every ~50 KB, whether or not the loaded machine lets the 5 ms
            // committer run: checkpoints stay the persister's own choice.
            engine.sync().unwrap();
        }
    }
    engine.sync().unwrap();
    // Checkpoints run in the background: wait (bounded) for one that leaves the journal
    // short. A change and a commit per round give the persister its chance to start one.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut round = 0u32;
    let stats = loop {
        let stats = persister.stats();
        if stats.checkpoints > 0 && stats.journal_bytes < 4 * 64 * 1024 {
            break stats;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no background checkpoint truncated the journal: {stats:?}"
        );
        engine
            .mknod(&c, ROOT_INO, format!("g{round}").as_bytes(), FILE, 0)
            .unwrap();
        engine.sync().unwrap();
        round += 1;
        std::thread::sleep(Duration::from_millis(10));
    };
    // The file holds the committed bytes and at most one reserve of zeros after them.
    let file_bytes = device.len("journal").unwrap().unwrap();
    assert!(
        file_bytes
            <= stats.journal_bytes + rampart_core::persist::journal::JOURNAL_RESERVE_BYTES as u64,
        "journal file of {file_bytes} bytes: {stats:?}"
    );
    let r = crash_and_recover(&device);
    for i in 0..400u32 {
        assert_eq!(
            content(&r, format!("/f{i}").as_bytes()),
            vec![i as u8; 1000]
        );
    }
}

#[test]
fn checkpoints_scaled_to_the_image_write_no_more_than_the_journal() {
    // A 64 KiB threshold, but a mount holding 2 MiB: the next checkpoint waits until the
    // journal has grown by the last image's size, not by 64 KiB.
    let device = Arc::new(SimDevice::new(11));
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let config = PersistConfig {
        commit_interval: Duration::from_millis(5),
        checkpoint_journal_bytes: 64 * 1024,
        checkpoint_scales_with_image: true,
        ..PersistConfig::default()
    };
    let persister = Persister::start(device.clone(), STORE_ID, 0, 0, config).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    let c = Ctx::library(0, 0);
    let big = e_create(&engine, &c, 0);
    engine
        .write(&c, big, 0, &vec![7u8; 2 << 20], false)
        .unwrap();
    engine.sync().unwrap();
    // The first checkpoint comes at 64 KiB (there was no image yet); then one of our own, so
    // that none is under way when we count.
    wait_for_checkpoints(&persister, 1);
    persister.checkpoint(&engine).unwrap();
    let after = persister.stats();
    assert!(after.checkpoint_image_bytes > 2 << 20, "{after:?}");
    assert_eq!(
        after.checkpoint_due_at_journal_bytes,
        after.journal_bytes + after.checkpoint_image_bytes,
        "{after:?}"
    );
    // 512 KiB of changes, eight times the threshold: no checkpoint yet.
    for i in 1..=128u32 {
        let f = e_create(&engine, &c, i);
        engine.write(&c, f, 0, &[i as u8; 4096], false).unwrap();
    }
    engine.sync().unwrap();
    std::thread::sleep(Duration::from_millis(50)); // the committer would have started one
    let stats = persister.stats();
    assert_eq!(stats.checkpoints, after.checkpoints, "{stats:?}");
    // Past the image's size: the background checkpoint comes.
    for i in 129..=(129 + 640u32) {
        let f = e_create(&engine, &c, i);
        engine.write(&c, f, 0, &[i as u8; 4096], false).unwrap();
    }
    engine.sync().unwrap();
    wait_for_checkpoints(&persister, after.checkpoints + 1);
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/f0"), vec![7u8; 2 << 20]);
    assert_eq!(content(&r, b"/f700"), vec![700u32 as u8; 4096]);
}

fn wait_for_checkpoints(persister: &Persister, count: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while persister.stats().checkpoints < count {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            persister.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn e_create(e: &Engine, c: &Ctx, i: u32) -> u64 {
    e.mknod(c, ROOT_INO, format!("f{i}").as_bytes(), FILE, 0)
        .unwrap()
        .ino
}

#[test]
fn writers_wait_when_too_much_waits_to_be_written() {
    let device = Arc::new(SimDevice::new(10));
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let config = PersistConfig {
        commit_interval: Duration::from_secs(3600), // commits only when asked
        pending_bytes_max: 1 << 20,
        ..PersistConfig::default()
    };
    let persister = Persister::start(device.clone(), STORE_ID, 0, 0, config).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    let c = Ctx::library(0, 0);
    let f = e_create(&engine, &c, 0);
    let chunk = vec![5u8; 64 * 1024];
    let mut most = 0;
    for i in 0..512u64 {
        engine
            .write(&c, f, i * chunk.len() as u64, &chunk, false)
            .unwrap();
        most = most.max(persister.stats().pending_bytes);
    }
    // One op past the limit at most, never the 32 MiB written.
    assert!(
        most <= (1 << 20) + 2 * chunk.len() as u64,
        "{most} bytes gathered"
    );
    engine.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(r.lookup_path(b"/f0").unwrap().size_bytes, 512 * 64 * 1024);
}

/// A volatile file made durable is handed to the journal as several records (the durability,
/// then its content and attributes, `policy::materialize`). A commit running meanwhile (the
/// timer's, another writer's fsync) must not take only the first of them: a crash after that
/// commit would recover the file durable but half rebuilt (emptied, say), a state no sequence
/// of whole ops gives (crash_concurrent found one: seed 502, a setuid file back with size 0).
#[test]
fn a_commit_never_splits_the_records_of_one_op() {
    use rampart_core::op::Op;
    use rampart_core::persist::journal;
    let (device, e, _p) = engine_on_sim_device(3, Duration::from_millis(1), None);
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"f", FILE | 0o4000, 0).unwrap().ino;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let (e, stop) = (e.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                e.sync().unwrap();
            }
        })
    };
    for i in 0..10_000u32 {
        e.set_durability(&c, f, Durability::Volatile).unwrap();
        // Small: the batch never grows to the size at which it is sealed on its own.
        e.write(
            &c,
            f,
            u64::from(i % 7) * 100,
            &[1 + (i % 200) as u8; 300],
            false,
        )
        .unwrap();
        e.set_durability(&c, f, Durability::default()).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    syncer.join().unwrap();
    e.sync().unwrap();
    let bytes = device.read("journal").unwrap().unwrap();
    let scan = journal::scan(&bytes).unwrap();
    // From a SetDurability that makes `f` durable to the SetAttr of its mode that ends its
    // rebuild, every record is in one batch.
    let (mut groups, mut open) = (0, false);
    for batch in &scan.batches {
        batch
            .for_each_op(|_, op| {
                match op {
                    Op::SetDurability {
                        ino, durability, ..
                    } if ino == f && durability != 0 => {
                        open = true;
                        groups += 1;
                    }
                    Op::SetAttr {
                        ino, mode: Some(_), ..
                    } if ino == f => open = false,
                    _ => {}
                }
                Ok(())
            })
            .unwrap();
        assert!(
            !open,
            "the batch at byte {} ends inside the records of one op",
            batch.offset
        );
    }
    assert_eq!(groups, 10_000);
}

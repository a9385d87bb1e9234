//! The archiver (issue 14 item 7, decision 0090): a regular file created with a deadline
//! longer than the commit interval is held out of the store and made present before its
//! deadline, or when something needs it there (fsync of it or its directory, syncfs, a clean
//! shutdown, a rename over a known file, a category that reaches the store sooner). Deleted
//! before then, it never costs the store a byte; after a crash within its deadline it is
//! simply absent; a crash at any sync point recovers a consistent tree.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_core::category::{Categories, Origin};
use rampart_core::persist::device::{CrashMode, SimDevice};
use rampart_core::persist::persister::Persister;
use rampart_core::persist::recovery::recover;
use rampart_core::{Ctx, Durability, Engine, EngineConfig, ROOT_INO};

use common::{content, crash_and_recover, engine_on_sim_device, STORE_ID};

const FILE: u32 = libc::S_IFREG | 0o644;
/// Long enough that no commit runs by the clock during a test (held files are due 9 min
/// after their creation).
const COMMIT: Duration = Duration::from_secs(60);

const CONFIG: &str = r#"
[categories]
BUILD = "lm=10min"

[[rules]]
glob = "*.o"
category = "BUILD"

[[rules]]
glob = "*.late"
category = "EVENTUAL"

[[rules]]
glob = "*.safe"
category = "SAFE"

[[rules]]
glob = "*.tmp"
category = "TEMPORARY"
"#;

fn setup(seed: u64) -> (Arc<SimDevice>, Arc<Engine>, Arc<Persister>) {
    let categories = Categories::from_toml(CONFIG, "rampart.toml", COMMIT).unwrap();
    engine_on_sim_device(seed, COMMIT, Some(categories))
}

/// The journal's length once everything is committed.
fn journal_len(device: &SimDevice, e: &Engine) -> u64 {
    e.sync().unwrap();
    device.durable("journal").unwrap_or_default().len() as u64
}

/// What fsync(2) does through the mount: the held file (or a directory's held files) made
/// present, then the journal synced.
fn fsync(e: &Engine, ino: u64) {
    e.archive_for_sync(ino).unwrap();
    e.sync().unwrap();
}

#[test]
fn held_files_created_and_deleted_before_their_deadline_write_nothing() {
    let (device, e, _p) = setup(1);
    let c = Ctx::library(0, 0);
    let src = e.mkdir(&c, ROOT_INO, b"src", 0o755).unwrap().ino;
    let main = e.mknod(&c, src, b"main.c", FILE, 0).unwrap().ino;
    e.write(&c, main, 0, b"int main;", false).unwrap();
    let before = journal_len(&device, &e);
    for i in 0..10u8 {
        // A compiler's object file and a cache entry: written, renamed, linked, gone.
        let o = e
            .mknod(&c, src, format!("t{i}.o").as_bytes(), FILE, 0)
            .unwrap();
        assert_ne!(o.durability, Durability::Volatile);
        assert!(
            !e.known_to_store(o.ino).unwrap(),
            "held: unknown to the store"
        );
        e.write(&c, o.ino, 0, &[i; 5000], false).unwrap();
        e.setxattr(&c, o.ino, b"user.x", b"y", 0).unwrap();
        e.rename(&c, src, format!("t{i}.o").as_bytes(), src, b"x.o", 0)
            .unwrap();
        e.link(&c, o.ino, ROOT_INO, b"hard.o").unwrap();
        e.unlink(&c, ROOT_INO, b"hard.o").unwrap();
        e.unlink(&c, src, b"x.o").unwrap();
        let late = e.mknod(&c, src, b"page.late", FILE, 0).unwrap().ino;
        e.write(&c, late, 0, &[i; 100], false).unwrap();
        e.unlink(&c, src, b"page.late").unwrap();
    }
    assert_eq!(e.held_files(), 0, "deleted files are forgotten");
    assert_eq!(
        journal_len(&device, &e),
        before,
        "held files deleted before their deadline wrote to the journal"
    );
}

#[test]
fn a_held_file_survives_a_clean_shutdown_and_is_gone_after_a_crash() {
    let build = |e: &Engine| {
        let c = Ctx::library(0, 0);
        let main = e.mknod(&c, ROOT_INO, b"main.c", FILE, 0).unwrap().ino;
        e.write(&c, main, 0, b"source", false).unwrap();
        e.sync().unwrap();
        let y = e.mknod(&c, ROOT_INO, b"y.o", FILE, 0).unwrap().ino;
        e.write(&c, y, 0, b"object code", false).unwrap();
        e.setxattr(&c, y, b"user.kept", b"yes", 0).unwrap();
        y
    };
    // A crash within its deadline: the held file is simply absent (the contract).
    let (device, e, _p) = setup(2);
    let y = build(&e);
    e.sync().unwrap();
    assert!(!e.known_to_store(y).unwrap());
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/main.c"), b"source");
    assert!(
        r.lookup_path(b"/y.o").is_err(),
        "a crash keeps no held file"
    );
    // A clean shutdown makes it present before the final checkpoint.
    let (device, e, p) = setup(2);
    build(&e);
    p.shutdown(&e).unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/y.o"), b"object code");
    let y2 = r.lookup_path(b"/y.o").unwrap().ino;
    assert_eq!(r.getxattr(y2, b"user.kept").unwrap(), b"yes");
    let info = r.category(y2).unwrap();
    assert_eq!(
        (info.name.as_str(), info.origin),
        ("BUILD", Origin::Rule(1))
    );
}

#[test]
fn fsync_of_a_held_file_or_its_directory_makes_it_durable() {
    let (device, e, _p) = setup(3);
    let c = Ctx::library(0, 0);
    let d = e.mkdir(&c, ROOT_INO, b"d", 0o755).unwrap().ino;
    let z = e.mknod(&c, d, b"z.o", FILE, 0).unwrap().ino;
    let w = e.mknod(&c, d, b"w.o", FILE, 0).unwrap().ino;
    e.write(&c, z, 0, b"zzz", false).unwrap();
    e.write(&c, w, 0, b"www", false).unwrap();
    fsync(&e, z);
    assert!(e.known_to_store(z).unwrap());
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/d/z.o"), b"zzz");
    assert!(r.lookup_path(b"/d/w.o").is_err(), "not fsync'd: still held");
    // Its later changes are journaled as a known file's.
    e.write(&c, z, 3, b"!", false).unwrap();
    fsync(&e, d);
    assert!(e.known_to_store(w).unwrap());
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/d/w.o"), b"www");
    assert_eq!(content(&r, b"/d/z.o"), b"zzz!");
}

#[test]
fn a_held_file_is_present_after_its_deadline() {
    // Due now or later: the archiver's tick (the committer's, driven here with a later time).
    let (device, e, _p) = setup(4);
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"f.late", FILE, 0).unwrap().ino;
    e.write(&c, f, 0, b"eventually", false).unwrap();
    assert_eq!(e.archive_due(Instant::now()), 0, "not due yet");
    assert!(e.archive_next_due().is_some());
    let risk = e.at_risk_of(f).unwrap().expect("a held file is at risk");
    assert_eq!(risk.bytes, 10);
    assert!(risk.held_for.is_some());
    let text = e.getxattr(f, b"user.rampart.at_risk").unwrap();
    assert!(String::from_utf8_lossy(&text).contains("held_ms="));
    let eventual = e
        .category_status()
        .into_iter()
        .find(|s| s.name == "EVENTUAL")
        .unwrap();
    assert_eq!(eventual.bytes_at_risk, 10);
    assert!(eventual.oldest_at_risk_age.is_some());
    assert_eq!(e.archive_due(Instant::now() + Duration::from_secs(3600)), 1);
    assert_eq!(e.archive_next_due(), None);
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/f.late"), b"eventually");

    // The committer does it by itself: a 3 s deadline with a 1 s commit interval.
    let categories = Categories::from_toml(
        "[categories]\nQUICK = \"lm=3s\"\n[[rules]]\nglob = \"*.o\"\ncategory = \"QUICK\"\n",
        "rampart.toml",
        Duration::from_secs(1),
    )
    .unwrap();
    let (device, e, p) = engine_on_sim_device(5, Duration::from_secs(1), Some(categories));
    // More than one mutation's worth (256): the committer goes round again for the rest.
    let files: Vec<u64> = (0..300)
        .map(|i| {
            let o = e
                .mknod(&c, ROOT_INO, format!("a{i}.o").as_bytes(), FILE, 0)
                .unwrap()
                .ino;
            e.write(&c, o, 0, format!("made present {i}").as_bytes(), false)
                .unwrap();
            o
        })
        .collect();
    // No speed is asserted: wait (within a generous bound) for the committer to do it.
    let mut waited = Duration::ZERO;
    while !(files.iter().all(|&o| e.known_to_store(o).unwrap()) && p.stats().ops_pending == 0) {
        assert!(waited < Duration::from_secs(120), "never made present");
        std::thread::sleep(Duration::from_millis(50));
        waited += Duration::from_millis(50);
    }
    assert_eq!(e.held_files(), 0);
    let r = crash_and_recover(&device);
    for i in 0..300 {
        let path = format!("/a{i}.o");
        assert_eq!(
            content(&r, path.as_bytes()),
            format!("made present {i}").as_bytes()
        );
    }
}

#[test]
fn a_held_file_renamed_over_a_known_one_never_loses_both() {
    for exchange in [false, true] {
        let flags = if exchange {
            rampart_core::op::RENAME_EXCHANGE
        } else {
            0
        };
        // Returns whether the old file was acknowledged durable.
        let workload = |e: &Engine| -> bool {
            let c = Ctx::library(0, 0);
            let Ok(old) = e.mknod(&c, ROOT_INO, b"lib.o", FILE, 0) else {
                return false;
            };
            // Made known (fsync), as an earlier build's output would be.
            if e.write(&c, old.ino, 0, b"old", false).is_err()
                || e.archive_for_sync(old.ino).is_err()
                || e.sync().is_err()
            {
                return false;
            }
            let Ok(new) = e.mknod(&c, ROOT_INO, b"lib.o.new.o", FILE, 0) else {
                return true;
            };
            let _ = e.write(&c, new.ino, 0, b"new", false);
            let _ = e.rename(&c, ROOT_INO, b"lib.o.new.o", ROOT_INO, b"lib.o", flags);
            let _ = e.sync();
            true
        };
        let total = {
            let (device, e, _p) = setup(6);
            assert!(workload(&e));
            device.sync_count()
        };
        let mut seen_new = false;
        for k in 0..=total {
            let (device, e, _p) = setup(6);
            device.fail_after_syncs(k);
            let old_durable = workload(&e);
            let r = crash_and_recover(&device);
            if !old_durable {
                continue;
            }
            let got = content(&r, b"/lib.o");
            assert!(
                got == b"old" || got == b"new",
                "exchange {exchange}, {k} syncs: {got:?}"
            );
            if exchange && got == b"new" {
                // The exchanged one keeps the other's name.
                assert_eq!(content(&r, b"/lib.o.new.o"), b"old", "{k} syncs");
            }
            seen_new |= got == b"new";
        }
        assert!(
            seen_new,
            "exchange {exchange}: the rename never became durable"
        );
    }
}

#[test]
fn a_category_that_reaches_the_store_sooner_makes_a_held_file_present() {
    let (device, e, _p) = setup(7);
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"keep.o", FILE, 0).unwrap().ino;
    e.write(&c, f, 0, b"precious", false).unwrap();
    assert_eq!(e.held_files(), 1);
    e.setxattr(&c, f, b"user.rampart.category", b"SOON", 0)
        .unwrap();
    assert!(e.known_to_store(f).unwrap());
    assert_eq!(e.held_files(), 0);
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/keep.o"), b"precious");
    // Made TEMPORARY instead: never reaches the store, and the archiver forgets it at once
    // (it held its slot until its deadline once: counted in `held_files`, and against
    // HELD_FILES_MAX); so does a library call that makes it volatile.
    let t = e.mknod(&c, ROOT_INO, b"drop.o", FILE, 0).unwrap().ino;
    assert_eq!(e.held_files(), 1);
    e.setxattr(&c, t, b"user.rampart.category", b"TEMPORARY", 0)
        .unwrap();
    assert_eq!(e.held_files(), 0, "a TEMPORARY file kept its archiver slot");
    assert_eq!(e.archive_all(), 0);
    assert!(!e.known_to_store(t).unwrap());
    let v = e.mknod(&c, ROOT_INO, b"volatile.o", FILE, 0).unwrap().ino;
    assert_eq!(e.held_files(), 1);
    e.set_durability(&c, v, Durability::Volatile).unwrap();
    assert_eq!(e.held_files(), 0, "a volatile file kept its archiver slot");
    assert!(!e.known_to_store(v).unwrap());
}

/// Random ops on held (`*.o`, `*.late`), SOON, SAFE and TEMPORARY files, with fsyncs, the
/// archiver's ticks, syncfs and checkpoints, and a crash at sync points along the way: the
/// recovered tree passes the consistency check, SAFE writes and fsync'd held files
/// acknowledged before the crash are there.
#[test]
fn random_ops_with_held_files_recover_consistently_at_every_sync_point() {
    fn workload(e: &Engine, p: &Persister, seed: u64, acked: &mut Vec<(Vec<u8>, Vec<u8>)>) {
        let c = Ctx::library(0, 0);
        let mut rng = common::Rng(seed);
        let dirs = ["/", "/tmp", "/tmp/d0", "/d1", "/d1/d2"];
        let names = ["a", "b.o", "c.o", "d.late", "e.safe", "f.tmp", "d0", "d2"];
        if let Ok(t) = e.mkdir(&c, ROOT_INO, b"tmp", 0o755) {
            let _ = e.setxattr(&c, t.ino, b"user.rampart.category", b"TEMPORARY", 0);
        }
        let forget = |acked: &mut Vec<(Vec<u8>, Vec<u8>)>, path: &str| {
            acked.retain(|(p, _)| !p.starts_with(path.as_bytes()));
        };
        for i in 0..300u32 {
            let dir = rng.pick(&dirs);
            let name = rng.pick(&names);
            let path = format!("{}/{name}", dir.trim_end_matches('/'));
            let Ok(parent) = e.lookup_path(dir.as_bytes()) else {
                continue;
            };
            let target = e.lookup_path(path.as_bytes()).ok();
            match rng.below(14) {
                0 => {
                    let _ = e.mkdir(&c, parent.ino, name.as_bytes(), 0o755);
                }
                1..=2 => {
                    let _ = e.mknod(&c, parent.ino, name.as_bytes(), FILE, 0);
                }
                3..=5 => {
                    if let Some(t) = target {
                        let data = format!("{path} {i}").into_bytes();
                        if e.write(&c, t.ino, 0, &data, false).is_ok() {
                            forget(acked, &path);
                            if t.durability == Durability::BeforeReturn {
                                acked.push((path.clone().into_bytes(), data));
                            }
                        }
                    }
                }
                6 => {
                    // fsync: the file (held ones made present) is durable with its content.
                    if let Some(t) = target {
                        let data = if t.kind == rampart_core::FileKind::RegularFile {
                            let mut buf = Vec::new();
                            e.read(t.ino, 0, t.size_bytes as u32, &mut buf)
                                .ok()
                                .map(|_| buf)
                        } else {
                            None
                        };
                        if e.archive_for_sync(t.ino).is_ok() && e.sync().is_ok() {
                            if let Some(data) = data {
                                if t.durability != Durability::Volatile && !path.starts_with("/tmp")
                                {
                                    forget(acked, &path);
                                    acked.push((path.clone().into_bytes(), data));
                                }
                            }
                        }
                    }
                }
                7 => {
                    let to = rng.pick(&dirs);
                    let new = rng.pick(&names);
                    if let Ok(q) = e.lookup_path(to.as_bytes()) {
                        let flags =
                            [0, 0, rampart_core::op::RENAME_EXCHANGE][rng.below(3) as usize];
                        if e.rename(
                            &c,
                            parent.ino,
                            name.as_bytes(),
                            q.ino,
                            new.as_bytes(),
                            flags,
                        )
                        .is_ok()
                        {
                            forget(acked, &path);
                            forget(acked, &format!("{}/{new}", to.trim_end_matches('/')));
                        }
                    }
                }
                8 => {
                    if e.unlink(&c, parent.ino, name.as_bytes()).is_ok()
                        || e.rmdir(&c, parent.ino, name.as_bytes()).is_ok()
                    {
                        forget(acked, &path);
                    }
                }
                9 => {
                    if let Some(t) = target {
                        let to = rng.pick(&dirs);
                        if let Ok(q) = e.lookup_path(to.as_bytes()) {
                            let _ = e.link(&c, t.ino, q.ino, format!("l{}.o", i % 3).as_bytes());
                        }
                    }
                }
                10 => {
                    if let Some(t) = target {
                        let category = rng.pick(&["TEMPORARY", "SOON", "EVENTUAL"]);
                        if e.set_category(&c, t.ino, Some(category), Origin::Api)
                            .is_ok()
                        {
                            forget(acked, &path);
                        }
                    }
                }
                11 => {
                    // The archiver's tick past every deadline, as the committer would run it.
                    e.archive_due(Instant::now() + Duration::from_secs(7200));
                }
                _ => match rng.below(4) {
                    0 => {
                        let _ = p.checkpoint(e);
                    }
                    1 => {
                        e.archive_all();
                        let _ = e.sync();
                    }
                    _ => {
                        let _ = e.sync();
                    }
                },
            }
        }
    }
    for seed in 1..=3u64 {
        let total = {
            let (device, e, p) = setup(seed);
            let mut acked = Vec::new();
            workload(&e, &p, seed, &mut acked);
            eprintln!(
                "seed {seed}: {} files acknowledged durable at the end, {} held",
                acked.len(),
                e.held_files()
            );
            device.sync_count()
        };
        for k in (0..=total).step_by(1 + total as usize / 40) {
            let (device, e, p) = setup(seed);
            device.fail_after_syncs(k);
            let mut acked = Vec::new();
            workload(&e, &p, seed, &mut acked);
            let r = crash_and_recover(&device);
            for (path, data) in &acked {
                assert_eq!(
                    &content(&r, path),
                    data,
                    "seed {seed}, {k} syncs: {}",
                    String::from_utf8_lossy(path)
                );
            }
        }
    }
}

/// A held file large enough for the disk tier moves there like any other (it is not
/// volatile); made present (fsync), its host file is synced before its records, and after a
/// power cut it is whole. One deleted while held leaves no host file behind.
#[test]
fn a_held_file_on_the_disk_tier_is_made_present_whole() {
    use rampart_core::disk::{recover_host_files, DiskConfig, DiskTier};
    use rampart_core::persist::device::CrashMode;
    use rampart_core::persist::recovery::recover;
    let disk = || DiskConfig {
        threshold_bytes: 8 << 10,
        ..DiskConfig::default()
    };
    let (device, e, _p) = setup(8);
    e.set_disk_tier(DiskTier::new(device.clone(), disk()));
    let c = Ctx::library(0, 0);
    let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let big = e.mknod(&c, ROOT_INO, b"big.o", FILE, 0).unwrap().ino;
    e.write(&c, big, 0, &data, false).unwrap();
    assert_eq!(e.tier(big).unwrap(), rampart_core::Tier::Disk);
    let gone = e.mknod(&c, ROOT_INO, b"gone.o", FILE, 0).unwrap().ino;
    e.write(&c, gone, 0, &data, false).unwrap();
    e.unlink(&c, ROOT_INO, b"gone.o").unwrap();
    fsync(&e, big);
    let image = Arc::new(device.crash(CrashMode::LoseUnsynced));
    let (mut state, _) = recover(
        image.as_ref(),
        common::STORE_ID,
        &rampart_core::EngineConfig::default(),
    )
    .unwrap();
    let hosts = recover_host_files(image.as_ref(), &mut state).unwrap();
    assert!(hosts.damaged.is_empty(), "{:?}", hosts.damaged);
    let r = Engine::from_state(state);
    r.set_disk_tier(DiskTier::new(image.clone(), disk()));
    assert!(r.check().is_empty(), "{:?}", r.check());
    assert_eq!(content(&r, b"/big.o"), data);
    assert!(r.lookup_path(b"/gone.o").is_err());
}

/// The archiver tracks a held file's names through links, renames and exchanges: made
/// present, it is created under exactly the names it has (a wrong one would fail the debug
/// check in `make_present`, or the recovered tree's).
#[test]
fn a_held_file_is_made_present_under_the_names_it_has_now() {
    let (device, e, _p) = setup(9);
    let c = Ctx::library(0, 0);
    let d = e.mkdir(&c, ROOT_INO, b"d", 0o755).unwrap().ino;
    let known = e.mknod(&c, d, b"known", FILE, 0).unwrap().ino;
    e.write(&c, known, 0, b"known", false).unwrap();
    let f = e.mknod(&c, ROOT_INO, b"a.o", FILE, 0).unwrap().ino;
    e.write(&c, f, 0, b"held", false).unwrap();
    e.link(&c, f, d, b"b.o").unwrap();
    e.link(&c, f, d, b"gone.o").unwrap();
    e.rename(&c, ROOT_INO, b"a.o", ROOT_INO, b"c.o", 0).unwrap();
    e.unlink(&c, d, b"gone.o").unwrap();
    // Exchanged with another held file: both stay held.
    let g = e.mknod(&c, ROOT_INO, b"x.o", FILE, 0).unwrap().ino;
    e.write(&c, g, 0, b"other", false).unwrap();
    e.rename(
        &c,
        d,
        b"b.o",
        ROOT_INO,
        b"x.o",
        rampart_core::op::RENAME_EXCHANGE,
    )
    .unwrap();
    assert!(!e.known_to_store(f).unwrap() && !e.known_to_store(g).unwrap());
    e.sync().unwrap();
    assert_eq!(e.archive_all(), 2);
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/c.o"), b"held");
    assert_eq!(content(&r, b"/x.o"), b"held");
    assert_eq!(content(&r, b"/d/b.o"), b"other");
    assert_eq!(content(&r, b"/d/known"), b"known");
    assert_eq!(
        r.getattr(r.lookup_path(b"/c.o").unwrap().ino)
            .unwrap()
            .nlink,
        2
    );
    assert!(r.lookup_path(b"/d/gone.o").is_err());
    assert!(r.lookup_path(b"/a.o").is_err());
}

/// Through the library: `File::sync_all` makes a held file present, `Fs::sync` (syncfs) all
/// of them, and closing the store keeps the others.
#[test]
fn the_library_makes_held_files_present_at_sync_all_sync_and_close() {
    use rampart_core::fs::{File, Fs};
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    rampart_core::store::mkfs(&store).unwrap();
    std::fs::write(store.join("rampart.toml"), CONFIG).unwrap();
    let fs = Fs::open(&store).unwrap();
    let e = fs.engine().clone();
    let known = |path: &str| {
        let ino = e.lookup_path(path.as_bytes()).unwrap().ino;
        e.known_to_store(ino).unwrap()
    };
    let mut f = File::create(&fs, "synced.o").unwrap();
    f.write_all(b"synced").unwrap();
    assert!(!known("synced.o"));
    f.sync_all().unwrap();
    assert!(known("synced.o"));
    drop(f);
    fs.write("a.o", b"a").unwrap();
    fs.write("b.late", b"b").unwrap();
    assert!(!known("a.o") && !known("b.late"));
    fs.sync().unwrap();
    assert!(known("a.o") && known("b.late"));
    fs.write("kept.o", b"kept by close").unwrap();
    assert!(!known("kept.o"));
    drop(e);
    fs.close().unwrap();
    let fs = Fs::open(&store).unwrap();
    assert_eq!(fs.read("kept.o").unwrap(), b"kept by close");
    assert_eq!(fs.read("synced.o").unwrap(), b"synced");
    assert_eq!(fs.category("kept.o").unwrap().name, "BUILD");
}

#[test]
fn a_full_archiver_that_gives_up_the_file_being_created_journals_it_once() {
    // The archiver is full of EVENTUAL files (due in 59 min); a BUILD file (due in 9 min) is
    // the one due first when it is created, so it is the one made present at once: inside
    // its own Create. Its Create must reach the journal once.
    let (device, e, _p) = setup(9);
    let c = Ctx::library(0, 0);
    let d = e.mkdir(&c, ROOT_INO, b"cache", 0o755).unwrap().ino;
    for i in 0..rampart_core::limits::HELD_FILES_MAX {
        e.mknod(&c, d, format!("{i}.late").as_bytes(), FILE, 0)
            .unwrap();
    }
    assert_eq!(e.held_files(), rampart_core::limits::HELD_FILES_MAX);
    let o = e.mknod(&c, ROOT_INO, b"x.o", FILE, 0).unwrap().ino;
    e.write(&c, o, 0, b"object", false).unwrap();
    assert!(
        e.known_to_store(o).unwrap(),
        "the file due first is made present"
    );
    assert_eq!(e.held_files(), rampart_core::limits::HELD_FILES_MAX);
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/x.o"), b"object");
    assert_eq!(r.lookup_path(b"/x.o").unwrap().nlink, 1);
}

#[test]
fn a_known_file_exchanged_with_a_held_one_is_never_lost() {
    // RENAME_EXCHANGE is symmetric: the held file may be either side. Here the known file is
    // the source, then the name it leaves for the held file's is unlinked (the old content).
    let (device, e, _p) = setup(10);
    let c = Ctx::library(0, 0);
    let old = e.mknod(&c, ROOT_INO, b"lib.o", FILE, 0).unwrap().ino;
    e.write(&c, old, 0, b"old", false).unwrap();
    fsync(&e, old);
    assert!(e.known_to_store(old).unwrap());
    let new = e.mknod(&c, ROOT_INO, b"lib.o.new.o", FILE, 0).unwrap().ino;
    e.write(&c, new, 0, b"new", false).unwrap();
    e.rename(
        &c,
        ROOT_INO,
        b"lib.o",
        ROOT_INO,
        b"lib.o.new.o",
        rampart_core::op::RENAME_EXCHANGE,
    )
    .unwrap();
    e.unlink(&c, ROOT_INO, b"lib.o.new.o").unwrap();
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    let got = r.lookup_path(b"/lib.o").map(|_| content(&r, b"/lib.o"));
    assert!(
        got.as_deref() == Ok(b"new".as_slice()) || got.as_deref() == Ok(b"old".as_slice()),
        "lib.o lost both: {got:?}"
    );
}

/// Past the names it tracks (4), the archiver keeps none: a link after that must not start a
/// list that misses the others (the debug check in `make_present` fails on it; a release
/// build scans).
#[test]
fn a_held_file_linked_past_the_names_tracked_is_made_present_under_all_of_them() {
    let (device, e, _p) = setup(11);
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"n0.o", FILE, 0).unwrap().ino;
    e.write(&c, f, 0, b"linked", false).unwrap();
    for i in 1..=6 {
        e.link(&c, f, ROOT_INO, format!("n{i}.o").as_bytes())
            .unwrap();
    }
    e.unlink(&c, ROOT_INO, b"n3.o").unwrap();
    e.link(&c, f, ROOT_INO, b"n7.o").unwrap();
    assert!(!e.known_to_store(f).unwrap());
    fsync(&e, f);
    assert!(e.known_to_store(f).unwrap());
    let r = crash_and_recover(&device);
    for i in [0, 1, 2, 4, 5, 6, 7] {
        assert_eq!(content(&r, format!("/n{i}.o").as_bytes()), b"linked");
    }
    assert!(r.lookup_path(b"/n3.o").is_err());
    assert_eq!(r.lookup_path(b"/n0.o").unwrap().nlink, 7);
}

/// A held file is made present as one group of records (`make_present`): a crash recovers all
/// of it or none, here one larger than half a journal batch (where a batch is sealed outside
/// a group): while a group is open the batch grows to `GROUP_WHOLE_BYTES_MAX` (48 MiB).
#[test]
fn a_large_held_file_is_made_present_whole_or_not_at_all() {
    made_present_whole_or_not_at_all(40 << 20);
}

/// The same for a group larger than one batch can hold (memory-tier files over ~48 MiB: the
/// disk tier's threshold raised or off): the committer writes and syncs each batch on its
/// own, and every batch of the group but its last is flagged `GROUP_CONTINUES`, so a crash
/// between two leaves a group recovery drops whole (decision 0103).
#[test]
fn a_held_file_larger_than_a_batch_is_made_present_whole_or_not_at_all() {
    made_present_whole_or_not_at_all(80 << 20);
}

fn made_present_whole_or_not_at_all(size: usize) {
    let mut want = vec![0xabu8; size];
    want[..4096].fill(0xcd);
    let workload = |e: &Engine| {
        let c = Ctx::library(0, 0);
        let Ok(f) = e.mknod(&c, ROOT_INO, b"big.o", FILE, 0) else {
            return;
        };
        let _ = e.write(&c, f.ino, 0, &vec![0xabu8; size], false);
        let _ = e.write(&c, f.ino, 0, &[0xcdu8; 4096], false);
        let _ = e.archive_for_sync(f.ino);
        let _ = e.sync();
    };
    let total = {
        let (device, e, _p) = setup(12);
        workload(&e);
        device.sync_count()
    };
    let (mut present, mut absent) = (0, 0);
    for k in 0..=total {
        let (device, e, _p) = setup(12);
        device.fail_after_syncs(k);
        workload(&e);
        // What a power cut leaves: the unsynced batch lost, or torn at any byte.
        for mode in [CrashMode::LoseUnsynced, CrashMode::TornTail] {
            let (state, report) = recover(&device.crash(mode), STORE_ID, &EngineConfig::default())
                .unwrap_or_else(|e| panic!("{k} syncs, {mode:?}: {e}"));
            let r = Engine::from_state(state);
            assert!(r.check().is_empty(), "{:?} ({report})", r.check());
            let Ok(a) = r.lookup_path(b"/big.o") else {
                absent += 1;
                continue;
            };
            present += 1;
            assert_eq!(
                a.size_bytes, size as u64,
                "{k} syncs, {mode:?}: half a held file"
            );
            assert!(
                content(&r, b"/big.o") == want,
                "{k} syncs, {mode:?}: its bytes"
            );
        }
    }
    // Both ends were reached: the crashes fell before the group's end and after it.
    assert!(
        present > 0 && absent > 0,
        "{present} present, {absent} absent"
    );
}

/// fsync of a directory naming more held files than one mutation makes present: every one of
/// them is made present (in rounds), and the directory's other entries are left alone.
#[test]
fn fsync_of_a_directory_with_many_held_files_makes_all_of_them_present() {
    let (device, e, _p) = setup(13);
    let c = Ctx::library(0, 0);
    let d = e.mkdir(&c, ROOT_INO, b"out", 0o755).unwrap().ino;
    let files: Vec<u64> = (0..600)
        .map(|i| {
            let f = e
                .mknod(&c, d, format!("{i}.o").as_bytes(), FILE, 0)
                .unwrap()
                .ino;
            e.write(&c, f, 0, format!("object {i}").as_bytes(), false)
                .unwrap();
            f
        })
        .collect();
    let elsewhere = e.mknod(&c, ROOT_INO, b"other.o", FILE, 0).unwrap().ino;
    fsync(&e, d);
    assert!(files.iter().all(|&f| e.known_to_store(f).unwrap()));
    assert!(!e.known_to_store(elsewhere).unwrap());
    assert_eq!(e.held_files(), 1);
    let r = crash_and_recover(&device);
    for i in 0..600 {
        let path = format!("/out/{i}.o");
        assert_eq!(
            content(&r, path.as_bytes()),
            format!("object {i}").as_bytes()
        );
    }
}

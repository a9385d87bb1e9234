//! DA2, the store's mirror (decisions 0076–0078): both copies written, either copy used when
//! the other is lost or damaged, the later one chosen when they differ, ROBUST and PARANOID
//! accepted only on a mirrored store, and a crash between the two copies' writes.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rampart_core::fs::{Fs, OpenOptions};
use rampart_core::persist::device::{
    CrashMode, FailSyncs, Faults, MirrorDevice, MirrorHealth, SimDevice,
};
use rampart_core::persist::persister::PersistConfig;
use rampart_core::persist::recovery::recover;
use rampart_core::rampart::{Options, Rampart};
use rampart_core::store::mirror::{read_record, same_content, MIRROR_FILE};
use rampart_core::store::{mkfs, mkfs_mirrored, MkfsOptions};
use rampart_core::EngineConfig;

use common::STORE_ID;

struct Copies {
    _dir: tempfile::TempDir,
    store: PathBuf,
    mirror: PathBuf,
}

fn mirrored() -> Copies {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mirror = dir.path().join("mirror");
    mkfs_mirrored(&store, &MkfsOptions::default(), &mirror).unwrap();
    Copies {
        store: store.canonicalize().unwrap(),
        mirror: mirror.canonicalize().unwrap(),
        _dir: dir,
    }
}

fn open(path: &Path) -> Fs {
    Fs::open_with(path, &Options::default(), 0, 0).unwrap()
}

/// Every store file of the two copies holds the same bytes (the lock, the log and the
/// `mirror` file are each copy's own).
fn assert_in_line(a: &Path, b: &Path) {
    for name in [
        "superblock",
        "journal",
        "checkpoint",
        "journal.prev",
        "checkpoint.prev",
        "reserve",
        "rampart.toml",
    ] {
        let (x, y) = (a.join(name), b.join(name));
        assert_eq!(x.exists(), y.exists(), "{name}");
        if x.exists() {
            assert!(same_content(&x, &y).unwrap(), "{name} differs");
        }
    }
    let list = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d.join("data"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(list(a), list(b));
    for name in list(a) {
        assert!(same_content(&a.join("data").join(&name), &b.join("data").join(&name)).unwrap());
    }
}

#[test]
fn mkfs_records_each_copy_in_the_other_and_refuses_a_full_folder() {
    let c = mirrored();
    let r = read_record(&c.store).unwrap().unwrap();
    assert_eq!(r.peer, c.mirror);
    assert_eq!(read_record(&c.mirror).unwrap().unwrap().peer, c.store);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&c.mirror).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), b"x").unwrap();
    let e = mkfs_mirrored(&dir.path().join("s"), &MkfsOptions::default(), &full).unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    assert!(!dir.path().join("s").exists(), "nothing made");
}

/// A mirror that is the store, inside it or around it is refused before anything is made:
/// no half-made store, no folder left in the other's way (`mkfs --mirror /a /a/store` once
/// left a whole unmirrored store behind). `mirror add` checks the same before making a folder.
#[test]
fn mkfs_refuses_a_mirror_inside_around_or_equal_to_the_store_and_makes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    for (store, mirror) in [
        (a.join("store"), a.clone()),
        (a.join("store"), a.join("store").join("mirror")),
        (a.join("store"), a.join("store")),
        (
            a.join("x").join("..").join("store"),
            a.join("store").join("."),
        ),
    ] {
        let e = mkfs_mirrored(&store, &MkfsOptions::default(), &mirror).unwrap_err();
        assert!(
            e.to_string().contains("must not be"),
            "{store:?} {mirror:?}: {e}"
        );
        assert!(!a.exists(), "{store:?} {mirror:?}: something was made");
    }
    // The store's folder existing and empty: left as it was, empty.
    std::fs::create_dir_all(a.join("store")).unwrap();
    let inside = a.join("store").join("m");
    let e = mkfs_mirrored(&a.join("store"), &MkfsOptions::default(), &inside).unwrap_err();
    assert!(e.to_string().contains("must not be"), "{e}");
    assert_eq!(std::fs::read_dir(a.join("store")).unwrap().count(), 0);
    // `mirror add` of a mirror inside the store: refused, no folder made in the store.
    std::fs::remove_dir(a.join("store")).unwrap();
    rampart_core::store::mkfs(&a.join("store")).unwrap();
    let e = rampart_core::store::mirror::add_mirror(&a.join("store"), &inside).unwrap_err();
    assert!(e.to_string().contains("must not be"), "{e}");
    assert!(
        !inside.exists(),
        "mirror add made a folder inside the store"
    );
    let e = rampart_core::store::mirror::add_mirror(&a.join("store"), &a).unwrap_err();
    assert!(e.to_string().contains("must not be"), "{e}");
}

#[test]
fn every_write_reaches_both_copies_and_either_mounts_alone() {
    let c = mirrored();
    let fs = open(&c.store);
    fs.write("a", b"first").unwrap();
    fs.sync().unwrap();
    // Synced, not closed: the journal of both copies holds it.
    assert_in_line(&c.store, &c.mirror);
    fs.write("b", vec![7u8; 3 << 20]).unwrap(); // the disk tier: a host file in data/
    fs.close().unwrap();
    assert_in_line(&c.store, &c.mirror);
    assert!(std::fs::read_dir(c.mirror.join("data")).unwrap().count() >= 1);
    // The store lost: the mirror mounts alone, degraded.
    std::fs::remove_dir_all(&c.store).unwrap();
    let fs = open(&c.mirror);
    assert_eq!(fs.read("a").unwrap(), b"first");
    assert_eq!(fs.read("b").unwrap(), vec![7u8; 3 << 20]);
    let m = fs.store().unwrap().mirror().unwrap();
    assert!(m.health.degraded().unwrap().contains("is missing"));
    fs.close().unwrap();
    // `mirror add` makes a new second copy of it.
    rampart_core::store::mirror::add_mirror(&c.mirror, &c.store).unwrap();
    assert_in_line(&c.mirror, &c.store);
    let fs = open(&c.store);
    assert!(fs
        .store()
        .unwrap()
        .mirror()
        .unwrap()
        .health
        .degraded()
        .is_none());
    assert_eq!(fs.read("a").unwrap(), b"first");
}

/// Each way a copy can be lost or damaged, on each copy in turn: the other is used, the
/// note says which and why, and the bad one is brought back in line.
#[test]
fn recovery_uses_either_copy_when_the_other_is_damaged() {
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 4] = [
        ("superblock", |d| {
            std::fs::write(d.join("superblock"), b"RAMPART\0garbage").unwrap()
        }),
        ("checkpoint", |d| {
            let p = d.join("checkpoint");
            let mut bytes = std::fs::read(&p).unwrap();
            let at = bytes.len() / 2;
            bytes[at] ^= 0x10;
            std::fs::write(p, bytes).unwrap();
        }),
        ("journal missing", |d| {
            std::fs::remove_file(d.join("journal")).unwrap()
        }),
        ("journal header", |d| {
            let p = d.join("journal");
            let mut bytes = std::fs::read(&p).unwrap();
            bytes[20] ^= 1;
            std::fs::write(p, bytes).unwrap();
        }),
    ];
    for (what, damage) in damages {
        for damaged_is_store in [true, false] {
            let c = mirrored();
            let fs = open(&c.store);
            fs.write("kept", b"both").unwrap();
            fs.close().unwrap();
            let (bad, good) = if damaged_is_store {
                (&c.store, &c.mirror)
            } else {
                (&c.mirror, &c.store)
            };
            damage(bad);
            let fs = open(&c.store);
            let label = format!(
                "{what} of the {}",
                if damaged_is_store { "store" } else { "mirror" }
            );
            assert_eq!(fs.read("kept").unwrap(), b"both", "{label}");
            let m = fs.store().unwrap().mirror().unwrap();
            assert!(m.health.degraded().is_none(), "{label}");
            let notes = m.notes.join("\n");
            assert!(notes.contains("cannot be used"), "{label}: {notes}");
            fs.write("after", b"x").unwrap();
            fs.close().unwrap();
            assert_in_line(good, bad);
        }
    }
}

/// Both copies recover to the same commit, one only through its backup pair (its checkpoint
/// is damaged, decision 0123): the copy with the sound checkpoint is used, and the damaged
/// one brought in line from it, never the other way round.
#[test]
fn at_the_same_commit_the_copy_with_a_sound_checkpoint_wins() {
    for damaged_is_store in [true, false] {
        let c = mirrored();
        for name in ["first", "second"] {
            let fs = open(&c.store);
            fs.write(name, b"kept").unwrap();
            fs.close().unwrap();
        }
        let (bad, good) = if damaged_is_store {
            (&c.store, &c.mirror)
        } else {
            (&c.mirror, &c.store)
        };
        assert!(bad.join("checkpoint.prev").exists() && bad.join("journal.prev").exists());
        let sound = std::fs::read(good.join("checkpoint")).unwrap();
        let p = bad.join("checkpoint");
        let mut bytes = std::fs::read(&p).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x10;
        std::fs::write(p, bytes).unwrap();
        let fs = open(&c.store);
        let label = format!("damaged_is_store={damaged_is_store}");
        assert_eq!(fs.read("first").unwrap(), b"kept", "{label}");
        assert_eq!(fs.read("second").unwrap(), b"kept", "{label}");
        let notes = fs.store().unwrap().mirror().unwrap().notes.join("\n");
        assert!(notes.contains("sound checkpoint"), "{label}: {notes}");
        // Brought in line from the sound copy: its checkpoint on both, no backup used.
        assert_eq!(
            std::fs::read(bad.join("checkpoint")).unwrap(),
            sound,
            "{label}"
        );
        assert!(
            fs.store().unwrap().recovery().backup_used.is_none(),
            "{label}"
        );
        fs.close().unwrap();
        assert_in_line(good, bad);
    }
}

#[test]
fn both_copies_damaged_is_refused_naming_both() {
    let c = mirrored();
    let fs = open(&c.store);
    fs.write("a", b"a").unwrap();
    fs.close().unwrap();
    for d in [&c.store, &c.mirror] {
        std::fs::remove_file(d.join("journal")).unwrap();
    }
    let e = Fs::open_with(&c.store, &Options::default(), 0, 0).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("neither copy"), "{text}");
    assert!(text.contains(c.mirror.to_str().unwrap()), "{text}");
}

/// Writes to one copy alone, as a crash between the two copies' writes leaves them: the
/// other copy's `mirror` file is set aside, so the copy opens as a store of its own.
fn write_alone(copy: &Path, name: &str) {
    let record = copy.join(MIRROR_FILE);
    let aside = copy.join("mirror.aside");
    std::fs::rename(&record, &aside).unwrap();
    let fs = open(copy);
    fs.write(name, b"later").unwrap();
    fs.close().unwrap();
    std::fs::rename(&aside, &record).unwrap();
}

#[test]
fn the_copy_with_the_later_commit_wins_and_the_other_catches_up() {
    for ahead_is_store in [true, false] {
        let c = mirrored();
        let fs = open(&c.store);
        fs.write("old", b"o").unwrap();
        fs.close().unwrap();
        let (ahead, behind) = if ahead_is_store {
            (&c.store, &c.mirror)
        } else {
            (&c.mirror, &c.store)
        };
        write_alone(ahead, "new");
        let fs = open(&c.store);
        assert_eq!(
            fs.read("new").unwrap(),
            b"later",
            "ahead_is_store={ahead_is_store}"
        );
        let notes = fs.store().unwrap().mirror().unwrap().notes.join("\n");
        assert!(notes.contains("later commits"), "{notes}");
        fs.close().unwrap();
        assert_in_line(ahead, behind);
    }
}

#[test]
fn robust_and_paranoid_need_a_mirror_and_fail_fsync_when_it_is_gone() {
    // Without a mirror: refused, as before.
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    mkfs(&plain).unwrap();
    let fs = open(&plain);
    fs.write("f", b"x").unwrap();
    let e = fs.set_category("f", Some("PARANOID")).unwrap_err();
    assert!(e.to_string().contains("this store has no mirror"), "{e}");
    fs.close().unwrap();

    let c = mirrored();
    let fs = open(&c.store);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .category("PARANOID")
        .open(&fs, "p")
        .unwrap();
    f.write_all(b"paranoid").unwrap();
    f.sync_all().unwrap();
    fs.write("r", b"robust").unwrap();
    fs.set_category("r", Some("ROBUST")).unwrap();
    let mut soon = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "s")
        .unwrap();
    // The mirror disappears while open.
    std::fs::remove_dir_all(&c.mirror).unwrap();
    // The write is applied and on the store, but not on two copies: EIO, and fsync says so
    // again.
    let e = f.write(b" more").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let e = f.sync_all().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    soon.write_all(b"soon").unwrap();
    soon.sync_all().unwrap(); // SOON needs the store alone
    let m = fs.store().unwrap().mirror().unwrap();
    assert!(m.health.degraded().unwrap().contains("removed"));
    // ROBUST: a write returns once on the store (as SAFE); DA2 only within seconds, so its
    // fsync is what fails.
    let mut r = OpenOptions::new().write(true).open(&fs, "r").unwrap();
    r.write_all(b"R").unwrap();
    assert_eq!(r.sync_all().unwrap_err().raw_os_error(), Some(libc::EIO));
    drop((f, r, soon));
    fs.close().unwrap();
    // Everything is on the store, which mounts degraded.
    let fs = open(&c.store);
    assert_eq!(fs.read("p").unwrap(), b"paranoid more");
    assert!(fs.store().unwrap().mirror().unwrap().health.is_degraded());
}

#[test]
fn a_mirrored_stores_config_may_name_paranoid_and_a_plain_ones_may_not() {
    let config = "default = \"ROBUST\"\n[[rules]]\nglob = \"*.p\"\ncategory = \"PARANOID\"\n";
    let c = mirrored();
    std::fs::write(c.store.join("rampart.toml"), config).unwrap();
    let fs = open(&c.store);
    fs.write("x.p", b"p").unwrap();
    assert_eq!(fs.category("x.p").unwrap().name, "PARANOID");
    fs.write("plain", b"r").unwrap();
    assert_eq!(fs.category("plain").unwrap().name, "ROBUST");
    fs.close().unwrap();
    // The configuration went to the mirror with the rest.
    assert_eq!(
        std::fs::read_to_string(c.mirror.join("rampart.toml")).unwrap(),
        config
    );
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    mkfs(&plain).unwrap();
    std::fs::write(plain.join("rampart.toml"), config).unwrap();
    let e = Fs::open_with(&plain, &Options::default(), 0, 0).unwrap_err();
    assert!(e.to_string().contains("this store has no mirror"), "{e}");
}

fn sim_engine_config() -> EngineConfig {
    EngineConfig {
        memory_cap_bytes: 1 << 30,
        ..EngineConfig::default()
    }
}

/// A store mirrored over two simulated disks; the mirror fails at its `k`-th sync (then it
/// is degraded), or the store does. Files are written and synced one by one; then a power
/// cut. Every file acknowledged while the mirror was in step is on both copies; every file
/// acknowledged at all is on the store; the mirror's state is never ahead of the store's.
#[test]
fn a_crash_between_the_two_copies_writes_loses_nothing_acknowledged() {
    // Runs in which some file was acknowledged on the store alone.
    let mut split_runs = 0;
    for failing_is_mirror in [true, false] {
        for k in 0..24u64 {
            let (a, b) = (
                Arc::new(SimDevice::new(k)),
                Arc::new(SimDevice::new(k + 1000)),
            );
            let health = Arc::new(MirrorHealth::new("sim-mirror".into()));
            let device = Arc::new(MirrorDevice::new(
                a.clone(),
                Some(b.clone()),
                "sim-mirror".into(),
                health.clone(),
            ));
            let options = Options {
                engine: sim_engine_config(),
                persist: PersistConfig {
                    commit_interval: Duration::from_secs(3600),
                    checkpoint_journal_bytes: 2048, // checkpoints now and then
                    ..PersistConfig::default()
                },
            };
            let fs = Fs::from_rampart(
                Rampart::open_device(device.clone(), STORE_ID, &options).unwrap(),
                0,
                0,
            );
            let failing = if failing_is_mirror { &b } else { &a };
            failing.set_faults(Faults {
                fail_syncs: Some(FailSyncs::after(failing.sync_count() + k)),
                ..Faults::default()
            });
            let (mut on_both, mut on_store) = (Vec::new(), Vec::new());
            for i in 0..12 {
                let name = format!("f{i}");
                let in_step = !health.is_degraded();
                if fs.write(&name, name.as_bytes()).is_err() || fs.sync().is_err() {
                    break; // the store failed: nothing more is acknowledged
                }
                on_store.push(name.clone());
                if in_step && !health.is_degraded() {
                    on_both.push(name);
                }
            }
            let label = format!("failing_is_mirror={failing_is_mirror} k={k}");
            split_runs += usize::from(on_both.len() < on_store.len());
            let (a, b) = (a.crash(CrashMode::Random), b.crash(CrashMode::Random));
            let (store_state, store_report) = recover(&a, STORE_ID, &sim_engine_config())
                .unwrap_or_else(|e| panic!("{label}: store: {e}"));
            let store_fs = Fs::from_engine(
                Arc::new(rampart_core::Engine::from_state(store_state)),
                0,
                0,
            );
            for name in &on_store {
                assert_eq!(store_fs.read(name).unwrap(), name.as_bytes(), "{label}");
            }
            match recover(&b, STORE_ID, &sim_engine_config()) {
                Ok((mirror_state, mirror_report)) => {
                    // A degraded mirror receives nothing more: never ahead. (A failed sync of
                    // the store may leave the mirror one unacknowledged commit ahead: mount
                    // then takes the mirror's, decision 0078.)
                    if failing_is_mirror {
                        assert!(mirror_report.next_seq <= store_report.next_seq, "{label}");
                    }
                    let mirror_fs = Fs::from_engine(
                        Arc::new(rampart_core::Engine::from_state(mirror_state)),
                        0,
                        0,
                    );
                    for name in &on_both {
                        assert_eq!(mirror_fs.read(name).unwrap(), name.as_bytes(), "{label}");
                    }
                }
                // A mirror that failed before its first sync may hold no store at all.
                Err(e) => assert!(
                    failing_is_mirror && on_both.is_empty(),
                    "{label}: mirror: {e}"
                ),
            }
            drop(fs);
        }
    }
    assert!(
        split_runs > 5,
        "the mirror failed mid-run in {split_runs} runs only"
    );
}

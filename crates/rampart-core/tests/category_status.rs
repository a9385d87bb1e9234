//! Per-category figures through the engine (issue 14 items 7 and 8, issue 17 item 4): files and
//! bytes per tier follow writes, truncates, renames, unlinks, category changes and migration to
//! the disk tier; bytes at risk and the longest wait come from the persister; a deadline
//! shorter than the commit interval is met by an early commit.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rampart_core::category::Origin;
use rampart_core::persist::persister::PersistConfig;
use rampart_core::rampart::{Options, Rampart};
use rampart_core::{CategoryStatus, Ctx, Engine, EngineConfig, SetAttr, Tier, ROOT_INO};

const FILE: u32 = libc::S_IFREG | 0o644;
const THRESHOLD: u64 = 64 << 10;
/// Long enough that no commit runs by the clock during a test.
const COMMIT: Duration = Duration::from_secs(120);

const CONFIG: &str = r#"
[categories]
QUICK = "lm=1s"

[[rules]]
glob = "*.gen"
category = "GENERATED"

[[rules]]
glob = "*.quick"
category = "QUICK"
"#;

fn open() -> (tempfile::TempDir, Rampart) {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("store");
    rampart_core::store::mkfs(&path).unwrap();
    std::fs::write(path.join("rampart.toml"), CONFIG).unwrap();
    let options = Options {
        engine: EngineConfig {
            large_file_threshold_bytes: Some(THRESHOLD),
            ..EngineConfig::default()
        },
        persist: PersistConfig {
            commit_interval: COMMIT,
            checkpoint_journal_bytes: u64::MAX,
            ..PersistConfig::default()
        },
    };
    let fs = Rampart::open(&path, &options).unwrap();
    (dir, fs)
}

fn c() -> Ctx {
    Ctx::library(0, 0)
}

fn of(e: &Engine, name: &str) -> CategoryStatus {
    e.category_status()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no category {name} in the status"))
}

/// (files, memory bytes, disk bytes) of a category.
fn counts(e: &Engine, name: &str) -> (u64, u64, u64) {
    let s = of(e, name);
    (s.files, s.memory_bytes, s.disk_bytes)
}

#[test]
fn counters_follow_writes_truncates_renames_unlinks_and_category_changes() {
    let (_dir, fs) = open();
    let e = fs.engine();
    assert_eq!(counts(e, "SOON"), (0, 0, 0));
    let a = e.mknod(&c(), ROOT_INO, b"a", FILE, 0).unwrap().ino;
    e.write(&c(), a, 0, &[7; 3000], false).unwrap();
    let g = e.mknod(&c(), ROOT_INO, b"x.gen", FILE, 0).unwrap().ino;
    e.write(&c(), g, 0, &[1; 5000], false).unwrap();
    assert_eq!(counts(e, "SOON"), (1, 3000, 0), "the store default");
    assert_eq!(counts(e, "GENERATED"), (1, 5000, 0), "a rule's");
    // Truncate down and up (a hole holds nothing), overwrite in place.
    let truncate = |size| SetAttr {
        size_bytes: Some(size),
        ..SetAttr::default()
    };
    e.setattr(&c(), a, &truncate(1000)).unwrap();
    assert_eq!(counts(e, "SOON"), (1, 1000, 0));
    e.write(&c(), a, 0, &[8; 500], false).unwrap();
    assert_eq!(counts(e, "SOON"), (1, 1000, 0));
    // A rename keeps the category (and so the counts).
    e.rename(&c(), ROOT_INO, b"x.gen", ROOT_INO, b"y", 0)
        .unwrap();
    assert_eq!(counts(e, "GENERATED"), (1, 5000, 0));
    // A category change moves the file and its bytes; taking it away gives the default.
    e.set_category(&c(), a, Some("EVENTUAL"), Origin::Xattr)
        .unwrap();
    assert_eq!(counts(e, "SOON"), (0, 0, 0));
    assert_eq!(counts(e, "EVENTUAL"), (1, 1000, 0));
    e.set_category(&c(), a, None, Origin::Xattr).unwrap();
    assert_eq!(counts(e, "EVENTUAL"), (0, 0, 0));
    assert_eq!(counts(e, "SOON"), (1, 1000, 0));
    // A raw spec is a category of its own.
    e.set_category(&c(), a, Some("spec:lm=10min"), Origin::Xattr)
        .unwrap();
    assert_eq!(counts(e, "spec:lm=10min"), (1, 1000, 0));
    // Unlink frees.
    e.unlink(&c(), ROOT_INO, b"y").unwrap();
    assert_eq!(counts(e, "GENERATED"), (0, 0, 0));
    assert!(e.check().is_empty(), "{:?}", e.check());
}

#[test]
fn bytes_move_between_tiers_within_their_category() {
    let (_dir, fs) = open();
    let e = fs.engine();
    let g = e.mknod(&c(), ROOT_INO, b"big.gen", FILE, 0).unwrap().ino;
    e.write(&c(), g, 0, &[3; 20_000], false).unwrap();
    assert_eq!(counts(e, "GENERATED"), (1, 20_000, 0));
    e.write(&c(), g, 20_000, &vec![4; THRESHOLD as usize], false)
        .unwrap();
    assert_eq!(e.tier(g), Ok(Tier::Disk));
    let size = 20_000 + THRESHOLD;
    assert_eq!(counts(e, "GENERATED"), (1, 0, size));
    // On the disk tier, a category change moves the disk bytes.
    e.set_category(&c(), g, Some("SOMETIME"), Origin::Xattr)
        .unwrap();
    assert_eq!(counts(e, "GENERATED"), (0, 0, 0));
    assert_eq!(counts(e, "SOMETIME"), (1, 0, size));
    e.unlink(&c(), ROOT_INO, b"big.gen").unwrap();
    assert_eq!(counts(e, "SOMETIME"), (0, 0, 0));
    assert!(e.check().is_empty(), "{:?}", e.check());
}

#[test]
fn counters_are_rebuilt_from_the_store_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    rampart_core::store::mkfs(&path).unwrap();
    std::fs::write(path.join("rampart.toml"), CONFIG).unwrap();
    {
        let fs = Rampart::open(&path, &Options::default()).unwrap();
        let e = fs.engine();
        let g = e.mknod(&c(), ROOT_INO, b"x.gen", FILE, 0).unwrap().ino;
        e.write(&c(), g, 0, &[1; 777], false).unwrap();
        fs.close().unwrap();
    }
    let fs = Rampart::open(&path, &Options::default()).unwrap();
    assert_eq!(counts(fs.engine(), "GENERATED"), (1, 777, 0));
}

#[test]
fn bytes_at_risk_wait_for_the_commit_and_the_wait_is_measured() {
    let (_dir, fs) = open();
    let e = fs.engine();
    let a = e.mknod(&c(), ROOT_INO, b"a", FILE, 0).unwrap().ino;
    e.write(&c(), a, 0, &[7; 4096], false).unwrap();
    let soon = of(e, "SOON");
    assert_eq!(soon.bytes_at_risk, 4096);
    assert!(soon.oldest_at_risk_age.is_some());
    assert_eq!(soon.deadline, Some(COMMIT));
    let risk = e.at_risk_of(a).unwrap().expect("a's write waits");
    assert_eq!(risk.bytes, 4096);
    assert_eq!(risk.deadline, Some(COMMIT));
    fs.persister().sync().unwrap();
    let soon = of(e, "SOON");
    assert_eq!((soon.bytes_at_risk, soon.oldest_at_risk_age), (0, None));
    assert!(soon.lag_max > Duration::ZERO, "the wait was measured");
    assert_eq!(e.at_risk_of(a).unwrap(), None);
    // A file created in a TEMPORARY directory never waits: nothing of it goes to the store.
    let d = e.mkdir(&c(), ROOT_INO, b"tmp", 0o755).unwrap().ino;
    e.set_category(&c(), d, Some("TEMPORARY"), Origin::Xattr)
        .unwrap();
    fs.persister().sync().unwrap();
    let t = e.mknod(&c(), d, b"t", FILE, 0).unwrap().ino;
    e.write(&c(), t, 0, &[1; 100], false).unwrap();
    assert_eq!(counts(e, "TEMPORARY"), (1, 100, 0));
    assert_eq!(of(e, "TEMPORARY").bytes_at_risk, 0);
    assert_eq!(of(e, "TEMPORARY").deadline, None);
    assert_eq!(e.at_risk_of(t).unwrap(), None);
}

#[test]
fn a_deadline_shorter_than_the_commit_interval_makes_the_committer_commit_early() {
    let (_dir, fs) = open();
    let e = fs.engine();
    let commits = fs.persister().stats().commits;
    let started = Instant::now();
    let q = e.mknod(&c(), ROOT_INO, b"f.quick", FILE, 0).unwrap().ino;
    e.write(&c(), q, 0, b"due within a second", false).unwrap();
    assert_eq!(of(e, "QUICK").deadline, Some(Duration::from_secs(1)));
    // The contract with generous slack: well before the 120 s commit interval.
    let settled = || fs.persister().stats().ops_pending == 0;
    while !settled() && started.elapsed() < COMMIT / 2 {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(settled(), "the QUICK file waited for the commit interval");
    assert!(fs.persister().stats().commits > commits);
    let quick = of(e, "QUICK");
    assert_eq!(quick.bytes_at_risk, 0);
    assert!(quick.lag_max > Duration::ZERO && quick.lag_max < COMMIT / 2);
}

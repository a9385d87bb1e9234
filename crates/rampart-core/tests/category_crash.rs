//! Issue 14's acceptance in the crash simulation: each category's contract, given by each
//! interface (the library API, `user.rampart.category`, a raw `user.rampart.spec`, a filename
//! rule, a directory's category, a user category of `rampart.toml`), with a crash at every
//! sync point. After recovery: writes acknowledged before the crash by a file that must be
//! durable before write returns are there; `until_close` data is there once close returned;
//! data whose deadline the store said it met is there; TEMPORARY and DISPOSABLE bytes never
//! reached the store; ROBUST and PARANOID data survives the loss of either copy of a
//! mirrored store. The kill -9 half is tests/e2e/test_category_crash.py, and
//! `a_library_process_killed_by_sigkill_keeps_its_contracts` below.

mod common;

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_core::category::Categories;
use rampart_core::fs::{Fs, OpenOptions};
use rampart_core::persist::device::{
    CrashMode, Device, FailSyncs, Faults, MirrorDevice, MirrorHealth, SimDevice,
};
use rampart_core::persist::persister::PersistConfig;
use rampart_core::persist::recovery::recover;
use rampart_core::rampart::{Options, Rampart};
use rampart_core::{Engine, EngineConfig};

use common::STORE_ID;

/// Long enough that no commit runs by the clock unless a category's deadline asks for it.
const COMMIT: Duration = Duration::from_secs(3600);
/// In the bytes of every TEMPORARY and DISPOSABLE write: no durable file may hold it.
const MARKER: &[u8] = b"never-in-the-store-3f9a";

fn engine_config() -> EngineConfig {
    EngineConfig {
        memory_cap_bytes: 1 << 30,
        ..EngineConfig::default()
    }
}

/// The library's file system over `device`, as `Fs::open` makes it over a store folder, with
/// `config` as the store's `rampart.toml` (`da2`: the store has a mirror).
fn open_on(device: Arc<dyn Device>, config: &str, da2: bool) -> Fs {
    let options = Options {
        engine: engine_config(),
        persist: PersistConfig {
            commit_interval: COMMIT,
            checkpoint_journal_bytes: u64::MAX,
            ..PersistConfig::default()
        },
    };
    let store = Rampart::open_device(device, STORE_ID, &options).unwrap();
    let categories = Categories::from_toml_on(config, "rampart.toml", COMMIT, da2).unwrap();
    store.engine().set_categories(Arc::new(categories));
    Fs::from_rampart(store, 0, 0)
}

/// What a power cut leaves of `device` (unsynced writes lost), recovered and checked.
fn recovered(image: &SimDevice) -> Fs {
    let (state, report) = recover(image, STORE_ID, &engine_config()).unwrap();
    let e = Engine::from_state(state);
    assert!(e.check().is_empty(), "{:?} ({report})", e.check());
    Fs::from_engine(Arc::new(e), 0, 0)
}

/// The names of `image`'s durable files that hold `needle`.
fn holding(image: &SimDevice, needle: &[u8]) -> Vec<String> {
    image
        .names()
        .into_iter()
        .filter(|name| {
            image
                .durable(name)
                .unwrap_or_default()
                .windows(needle.len())
                .any(|w| w == needle)
        })
        .collect()
}

/// The `round`-th version of `path`'s content: the same length every round, so that a
/// recovered file is exactly one version.
fn version(path: &str, round: u8) -> Vec<u8> {
    let mut data = format!("{path} round {round} ").into_bytes();
    data.resize(700 + path.len() * 13, b'a' + round);
    data
}

/// Per path: the last round acknowledged, and the last round written (acknowledged or not).
/// A recovered file must hold a version in between: a later one may be durable because a
/// commit for another file took it along.
#[derive(Default)]
struct Acks(BTreeMap<String, (Option<u8>, u8)>);

impl Acks {
    fn written(&mut self, path: &str, round: u8) {
        self.0.entry(path.to_string()).or_default().1 = round;
    }

    fn acked(&mut self, path: &str, round: u8) {
        self.0.entry(path.to_string()).or_default().0 = Some(round);
    }

    /// Every acknowledged path of `fs` holds a version at least as new as its last one.
    fn check(&self, fs: &Fs, label: &str) -> usize {
        let mut checked = 0;
        for (path, &(acked, written)) in &self.0 {
            let Some(acked) = acked else { continue };
            let got = fs
                .read(path)
                .unwrap_or_else(|e| panic!("{label}: {path} acknowledged (round {acked}): {e}"));
            assert!(
                (acked..=written).any(|r| got == version(path, r)),
                "{label}: {path}: acknowledged round {acked}, found {:?}",
                String::from_utf8_lossy(&got[..got.len().min(40)])
            );
            checked += 1;
        }
        checked
    }
}

/// How a file of the workload gets its category, and so its contract.
#[derive(Clone, Copy, Debug)]
enum Given {
    /// `OpenOptions::category` at create.
    Api(&'static str),
    /// `user.rampart.category` set on the file.
    Xattr(&'static str),
    /// A raw spec in `user.rampart.spec`.
    Spec(&'static str),
    /// Its name matches a rule (or its directory has a category): nothing to set.
    Name,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Contract {
    /// Durable when write returns.
    BeforeWrite,
    /// Durable when close returns.
    AtClose,
    /// Never in the store: gone after a crash, its bytes in no store file.
    Never,
}

const CONFIG: &str = r#"
[categories]
KEEP = "lm=before_write"
NOTES = "lm=until_close"

[[rules]]
glob = "*.safe"
category = "SAFE"

[[rules]]
glob = "*.keep"
category = "KEEP"

[[rules]]
glob = "*.tex"
category = "EDITED"

[[rules]]
glob = "*.notes"
category = "NOTES"

[[rules]]
glob = "*.null"
category = "DISPOSABLE"

[[rules]]
glob = "*.tmp"
category = "TEMPORARY"
"#;

/// Every interface × the three contracts it can give.
const FILES: &[(&str, Given, Contract)] = &[
    ("api-safe", Given::Api("safe"), Contract::BeforeWrite),
    ("api-edited", Given::Api("EDITED"), Contract::AtClose),
    ("api-temporary", Given::Api("TEMPORARY"), Contract::Never),
    ("api-user", Given::Api("keep"), Contract::BeforeWrite),
    (
        "api-spec",
        Given::Api("spec:lm=until_close"),
        Contract::AtClose,
    ),
    ("xattr-safe", Given::Xattr("SAFE"), Contract::BeforeWrite),
    ("xattr-edited", Given::Xattr("edited"), Contract::AtClose),
    (
        "xattr-disposable",
        Given::Xattr("DISPOSABLE"),
        Contract::Never,
    ),
    ("xattr-user", Given::Xattr("NOTES"), Contract::AtClose),
    (
        "spec-before",
        Given::Spec("lm=before_write"),
        Contract::BeforeWrite,
    ),
    (
        "spec-close",
        Given::Spec("lm=until_close"),
        Contract::AtClose,
    ),
    ("spec-never", Given::Spec("lm=never"), Contract::Never),
    ("rule.safe", Given::Name, Contract::BeforeWrite),
    ("rule.keep", Given::Name, Contract::BeforeWrite),
    ("rule.tex", Given::Name, Contract::AtClose),
    ("rule.notes", Given::Name, Contract::AtClose),
    ("rule.null", Given::Name, Contract::Never),
    ("rule.tmp", Given::Name, Contract::Never),
    ("safe-dir/f", Given::Name, Contract::BeforeWrite),
    ("edited-dir/f", Given::Name, Contract::AtClose),
    ("user-dir/f", Given::Name, Contract::BeforeWrite),
    ("temporary-dir/f", Given::Name, Contract::Never),
];

const DIRS: &[(&str, &str)] = &[
    ("safe-dir", "SAFE"),
    ("edited-dir", "EDITED"),
    ("user-dir", "KEEP"),
    ("temporary-dir", "TEMPORARY"),
];

const ROUNDS: u8 = 3;

/// Writes every file of [`FILES`] `ROUNDS` times, each round a new version, with a SOON file
/// written beside them; records what each contract acknowledged. Stops at the first error
/// of a durable file (the store failed: nothing more is acknowledged).
fn contracts_workload(fs: &Fs, acks: &mut Acks) {
    for (dir, category) in DIRS {
        if fs.create_dir(dir).is_err()
            || fs
                .set_xattr(dir, "user.rampart.category", category.as_bytes())
                .is_err()
        {
            return;
        }
    }
    for round in 0..ROUNDS {
        for &(path, given, contract) in FILES {
            let mut options = OpenOptions::new();
            options.write(true).create(true);
            if let Given::Api(name) = given {
                options.category(name);
            }
            let Ok(mut f) = options.open(fs, path) else {
                return;
            };
            let set = match given {
                Given::Xattr(name) => fs.set_xattr(path, "user.rampart.category", name),
                Given::Spec(spec) => fs.set_xattr(path, "user.rampart.spec", spec),
                Given::Api(_) | Given::Name => Ok(()),
            };
            if set.is_err() {
                return;
            }
            if round == 0 {
                assert_eq!(
                    fs.engine().durable_at_close(f.ino()),
                    contract == Contract::AtClose,
                    "{path}"
                );
            }
            let mut data = version(path, round);
            if contract == Contract::Never {
                data.extend_from_slice(MARKER);
            }
            acks.written(path, round);
            if f.write_all(&data).is_err() {
                return;
            }
            match contract {
                Contract::BeforeWrite => acks.acked(path, round),
                Contract::AtClose => {
                    if f.close().is_err() {
                        return;
                    }
                    acks.acked(path, round);
                }
                Contract::Never => {}
            }
        }
        // A SOON file: in memory until the commit interval (an hour), or another file's
        // commit, takes it.
        if fs.write("soon", version("soon", round)).is_err() {
            return;
        }
    }
}

/// Every interface's contract, with a crash before every sync point of the workload.
#[test]
fn every_interface_keeps_its_categorys_contract_at_every_sync_point() {
    let total = {
        let device = Arc::new(SimDevice::new(1));
        let fs = open_on(device.clone(), CONFIG, false);
        let start = device.sync_count();
        let mut acks = Acks::default();
        contracts_workload(&fs, &mut acks);
        // Check the workload's categories are what the test means.
        for &(path, given, contract) in FILES {
            let info = fs.category(path).unwrap();
            let known = fs.engine().known_to_store(fs.metadata(path).unwrap().ino());
            // Created with a category that never reaches the store: unknown to it. One set
            // after create was created SOON: its name is known, its data never is.
            let unknown =
                contract == Contract::Never && matches!(given, Given::Api(_) | Given::Name);
            assert_eq!(known.unwrap(), !unknown, "{path}: {info:?}");
        }
        assert!(fs.read("rule.null").unwrap().is_empty(), "DISPOSABLE kept");
        let image = device.crash(CrashMode::LoseUnsynced);
        let r = recovered(&image);
        assert_eq!(acks.check(&r, "no crash"), 16 /* every durable file */);
        device.sync_count() - start
    };
    assert!(total >= 30, "each acknowledgement syncs ({total} syncs)");
    for k in 0..=total {
        let device = Arc::new(SimDevice::new(1));
        let fs = open_on(device.clone(), CONFIG, false);
        device.fail_after_syncs(device.sync_count() + k);
        let mut acks = Acks::default();
        contracts_workload(&fs, &mut acks);
        let label = format!("crash after {k} of {total} syncs");
        let image = device.crash(CrashMode::LoseUnsynced);
        let r = recovered(&image);
        acks.check(&r, &label);
        for &(path, _, contract) in FILES {
            if contract == Contract::Never && r.exists(path).unwrap() {
                assert_eq!(r.read(path).unwrap(), b"", "{label}: {path} kept data");
            }
        }
        assert_eq!(holding(&image, MARKER), Vec::<String>::new(), "{label}");
        drop(fs);
    }
}

/// A store mirrored over two simulated disks, and its mirror's health.
struct Mirrored {
    store: Arc<SimDevice>,
    mirror: Arc<SimDevice>,
    health: Arc<MirrorHealth>,
    fs: Fs,
}

const MIRROR_CONFIG: &str = r#"
[[rules]]
glob = "*.paranoid"
category = "PARANOID"

[[rules]]
glob = "*.robust"
category = "ROBUST"
"#;

fn mirrored(seed: u64) -> Mirrored {
    let store = Arc::new(SimDevice::new(seed));
    let mirror = Arc::new(SimDevice::new(seed + 1000));
    let health = Arc::new(MirrorHealth::new("sim-mirror".into()));
    let device = Arc::new(MirrorDevice::new(
        store.clone(),
        Some(mirror.clone()),
        "sim-mirror".into(),
        health.clone(),
    ));
    let fs = open_on(device, MIRROR_CONFIG, true);
    fs.engine().set_mirror_health(health.clone());
    Mirrored {
        store,
        mirror,
        health,
        fs,
    }
}

/// What the two copies must hold.
#[derive(Default)]
struct CopyAcks {
    /// On both copies: PARANOID writes that returned, ROBUST ones whose fsync returned.
    both: Acks,
    /// On the store: ROBUST writes that returned (DA2 is owed within seconds only).
    store: Acks,
}

/// PARANOID files (by a rule, the API and the attribute) and ROBUST ones (a rule and a
/// raw spec), written round after round; a ROBUST file is fsynced every other round.
fn mirror_workload(fs: &Fs, acks: &mut CopyAcks) {
    let files: &[(&str, Given)] = &[
        ("a.paranoid", Given::Name),
        ("api-paranoid", Given::Api("paranoid")),
        ("xattr-paranoid", Given::Xattr("PARANOID")),
        ("b.robust", Given::Name),
        ("spec-robust", Given::Spec("lm=before_write,da1=5s")),
    ];
    for round in 0..4u8 {
        for &(path, given) in files {
            let mut options = OpenOptions::new();
            options.write(true).create(true);
            if let Given::Api(name) = given {
                options.category(name);
            }
            let Ok(mut f) = options.open(fs, path) else {
                return;
            };
            let set = match given {
                Given::Xattr(name) => fs.set_xattr(path, "user.rampart.category", name),
                Given::Spec(spec) => fs.set_xattr(path, "user.rampart.spec", spec),
                Given::Api(_) | Given::Name => Ok(()),
            };
            if set.is_err() {
                return;
            }
            let name = fs.category(path).unwrap().name;
            let paranoid = name == "PARANOID";
            assert!(
                paranoid || name == "ROBUST" || name.starts_with("spec:"),
                "{name}"
            );
            acks.both.written(path, round);
            acks.store.written(path, round);
            // A PARANOID write fails (EIO) once the mirror is lost: not acknowledged.
            if f.write_all(&version(path, round)).is_err() {
                continue;
            }
            acks.store.acked(path, round);
            if paranoid || (round % 2 == 1 && f.sync_all().is_ok()) {
                acks.both.acked(path, round);
            }
        }
    }
}

/// ROBUST and PARANOID data acknowledged before a crash at any sync point of either disk is
/// on both copies, and so survives the deletion of either: each copy is recovered alone.
#[test]
fn robust_and_paranoid_data_survive_the_loss_of_either_copy_at_every_sync_point() {
    let (store_total, mirror_total) = {
        let m = mirrored(5);
        let (s, r) = (m.store.sync_count(), m.mirror.sync_count());
        let mut acks = CopyAcks::default();
        mirror_workload(&m.fs, &mut acks);
        assert!(!m.health.is_degraded());
        (m.store.sync_count() - s, m.mirror.sync_count() - r)
    };
    assert!(
        store_total >= 12 && mirror_total >= 12,
        "{store_total} {mirror_total}"
    );
    let mut degraded_runs = 0;
    for failing_is_mirror in [false, true] {
        let total = if failing_is_mirror {
            mirror_total
        } else {
            store_total
        };
        for k in 0..=total {
            let m = mirrored(5);
            let failing = if failing_is_mirror {
                &m.mirror
            } else {
                &m.store
            };
            failing.set_faults(Faults {
                fail_syncs: Some(FailSyncs::after(failing.sync_count() + k)),
                ..Faults::default()
            });
            let mut acks = CopyAcks::default();
            mirror_workload(&m.fs, &mut acks);
            degraded_runs += usize::from(m.health.is_degraded());
            let label = format!("failing_is_mirror={failing_is_mirror}, after {k} syncs");
            let (store, mirror) = (
                m.store.crash(CrashMode::LoseUnsynced),
                m.mirror.crash(CrashMode::LoseUnsynced),
            );
            // The mirror lost: the store alone.
            let alone = recovered(&store);
            acks.store.check(&alone, &format!("{label}, store alone"));
            acks.both.check(&alone, &format!("{label}, store alone"));
            // The store lost: the mirror alone.
            let alone = recovered(&mirror);
            acks.both.check(&alone, &format!("{label}, mirror alone"));
            drop(m.fs);
        }
    }
    assert!(
        degraded_runs > 5,
        "the mirror failed in {degraded_runs} runs only"
    );
}

/// Deadlines shorter than the (hour-long) commit interval for every category that has one,
/// so that the deadline, not the interval, makes the commit (decision 0086).
const DEADLINE_CONFIG: &str = r#"
[categories]
SOON = "lm=100ms"
SOMETIME = "lm=150ms"
EVENTUAL = "lm=200ms"
GENERATED = "lm=150ms"
MULTIMEDIA = "lm=200ms"
COLLECTION = "lm=150ms"
DATABASE = "lm=100ms"
"#;

const DEADLINE_CATEGORIES: &[&str] = &[
    "SOON",
    "SOMETIME",
    "EVENTUAL",
    "GENERATED",
    "MULTIMEDIA",
    "COLLECTION",
    "DATABASE",
];

/// Writes each category's file round after round, without fsync or close, and waits until
/// the store says the round's bytes are no longer at risk (their deadline met) or failed.
fn deadline_workload(fs: &Fs, acks: &mut Acks) {
    let e = fs.engine();
    let persister = fs.store().unwrap().persister();
    let mut files = Vec::new();
    for name in DEADLINE_CATEGORIES {
        let path = name.to_lowercase();
        let Ok(f) = OpenOptions::new().write(true).create(true).open(fs, &path) else {
            return;
        };
        // The category by its attribute, SOON by the store default.
        if *name != "SOON" && fs.set_xattr(&path, "user.rampart.category", name).is_err() {
            return;
        }
        files.push((path, f));
    }
    for round in 0..3u8 {
        for (path, f) in &mut files {
            acks.written(path, round);
            if f.seek(SeekFrom::Start(0)).is_err() || f.write_all(&version(path, round)).is_err() {
                return;
            }
        }
        // The contract with generous slack; the speed is `rampart bench`'s to measure.
        let started = Instant::now();
        loop {
            if persister.stats().error.is_some() {
                return;
            }
            let at_risk = files
                .iter()
                .filter(|(_, f)| e.at_risk_of(f.ino()).unwrap().is_some())
                .count();
            if at_risk == 0 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "round {round}: {at_risk} files still at risk after a minute"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        for (path, _) in &files {
            acks.acked(path, round);
        }
    }
}

/// SOON, SOMETIME, EVENTUAL, GENERATED, MULTIMEDIA, COLLECTION and DATABASE data whose
/// deadline has passed (the store no longer counts it at risk) is there after a crash at
/// any sync point.
#[test]
fn data_past_its_deadline_is_in_the_store_at_every_sync_point() {
    let total = {
        let device = Arc::new(SimDevice::new(9));
        let fs = open_on(device.clone(), DEADLINE_CONFIG, false);
        let start = device.sync_count();
        let mut acks = Acks::default();
        deadline_workload(&fs, &mut acks);
        for name in DEADLINE_CATEGORIES {
            assert_eq!(fs.category(name.to_lowercase()).unwrap().name, *name);
        }
        let r = recovered(&device.crash(CrashMode::LoseUnsynced));
        assert_eq!(acks.check(&r, "no crash"), DEADLINE_CATEGORIES.len());
        device.sync_count() - start
    };
    assert!(total >= 3, "one commit per round at least ({total} syncs)");
    // The commits run on the committer's clock: a run may take a sync or two more.
    for k in 0..=total + 2 {
        let device = Arc::new(SimDevice::new(9));
        let fs = open_on(device.clone(), DEADLINE_CONFIG, false);
        device.fail_after_syncs(device.sync_count() + k);
        let mut acks = Acks::default();
        deadline_workload(&fs, &mut acks);
        let r = recovered(&device.crash(CrashMode::LoseUnsynced));
        acks.check(&r, &format!("crash after {k} of {total} syncs"));
        drop(fs);
    }
}

/// Set to a store's folder in the environment of [`library_process_killed_by_its_parent`].
const CHILD_STORE_ENV: &str = "RAMPART_CATEGORY_CRASH_STORE";

/// The library in a process of its own, until its parent kills it: files given their
/// category by the library API (`OpenOptions::category`), each written; prints `ready` once
/// every contract is acknowledged, then waits to be killed.
#[test]
#[ignore = "the child of a_library_process_killed_by_sigkill_keeps_its_contracts"]
fn library_process_killed_by_its_parent() {
    let store = std::env::var(CHILD_STORE_ENV).expect("run by its parent test");
    let options = Options {
        engine: engine_config(),
        persist: PersistConfig {
            commit_interval: COMMIT,
            ..PersistConfig::default()
        },
    };
    let fs = Fs::open_with(&store, &options, 0, 0).unwrap();
    let create = |path: &str, category: &str| {
        OpenOptions::new()
            .write(true)
            .create(true)
            .category(category)
            .open(&fs, path)
            .unwrap()
    };
    // Acknowledged when close returns (first: its commit takes everything before it).
    let mut edited = create("edited", "edited");
    edited.write_all(&version("edited", 0)).unwrap();
    edited.close().unwrap();
    // Acknowledged when write returns: kept open.
    let mut safe = create("safe", "SAFE");
    safe.write_all(&version("safe", 0)).unwrap();
    let mut spec = create("spec", "spec:lm=before_write");
    spec.write_all(&version("spec", 0)).unwrap();
    // Never in the store.
    let mut scratch = create("scratch", "TEMPORARY");
    scratch.write_all(MARKER).unwrap();
    let mut null = create("null", "DISPOSABLE");
    null.write_all(MARKER).unwrap();
    // SOON: an hour's commit interval, no sync.
    fs.write("soon", b"not acknowledged").unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(600));
    panic!("not killed within ten minutes");
}

/// kill -9 of a program using the library: what its categories acknowledged is in the store
/// when it is opened again; TEMPORARY and DISPOSABLE bytes are in no store file.
#[test]
fn a_library_process_killed_by_sigkill_keeps_its_contracts() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    rampart_core::store::mkfs(&store).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "library_process_killed_by_its_parent",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_STORE_ENV, &store)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let ready = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "ready");
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(ready, "the child ended before it was ready: {status}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let fs = Fs::open(&store).unwrap();
    for path in ["safe", "spec", "edited"] {
        assert_eq!(fs.read(path).unwrap(), version(path, 0), "{path}");
    }
    assert_eq!(fs.category("edited").unwrap().name, "EDITED");
    assert!(!fs.exists("scratch").unwrap());
    assert!(!fs.exists("null").unwrap());
    assert!(
        !fs.exists("soon").unwrap(),
        "SOON was durable without a sync"
    );
    fs.close().unwrap();
    let mut holding = Vec::new();
    for entry in walk(&store) {
        if std::fs::read(&entry)
            .unwrap()
            .windows(MARKER.len())
            .any(|w| w == MARKER)
        {
            holding.push(entry);
        }
    }
    assert_eq!(holding, Vec::<std::path::PathBuf>::new());
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// `File::close` of an `until_close` file says when its sync failed (dropping it cannot);
/// other files close without a sync.
#[test]
fn close_reports_an_until_close_file_that_could_not_be_made_durable() {
    let device = Arc::new(SimDevice::new(21));
    let fs = open_on(device.clone(), CONFIG, false);
    let mut plain = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "plain")
        .unwrap();
    plain.write_all(b"soon").unwrap();
    let mut notes = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "a.tex")
        .unwrap();
    notes.write_all(b"edited").unwrap();
    let syncs = device.sync_count();
    plain.close().unwrap();
    assert_eq!(device.sync_count(), syncs, "a SOON file's close synced");
    device.fail_after_syncs(0);
    let e = notes.close().unwrap_err();
    assert!(e.to_string().contains("os error 5"), "{e}");
}

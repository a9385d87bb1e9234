//! Categories through the engine: the store's configuration, filename rules, directory
//! inheritance and the attributes; SAFE writes durable when they return and TEMPORARY files
//! never in the store, with a crash at every sync point.

use std::sync::Arc;
use std::time::Duration;

use rampart_core::category::{Categories, Origin};
use rampart_core::persist::device::{CrashMode, SimDevice};
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::persist::recovery::recover;
use rampart_core::{Ctx, Durability, Engine, EngineConfig, ROOT_INO};

const ID: [u8; 16] = [3; 16];
const FILE: u32 = libc::S_IFREG | 0o644;
/// Long enough that no commit runs by the clock during a test, short enough for SOMETIME.
const COMMIT: Duration = Duration::from_secs(60);

const CONFIG: &str = r#"
[categories]
SCRATCH = "lm=never"

[[rules]]
glob = "*.safe"
category = "SAFE"

[[rules]]
glob = "*.tmp"
category = "TEMPORARY"

[[rules]]
glob = "build/**"
category = "GENERATED"

[[rules]]
glob = "*.null"
category = "DISPOSABLE"
"#;

fn setup(seed: u64) -> (Arc<SimDevice>, Arc<Engine>, Arc<Persister>) {
    let device = Arc::new(SimDevice::new(seed));
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let config = PersistConfig {
        commit_interval: COMMIT,
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    };
    engine.set_categories(Arc::new(
        Categories::from_toml(CONFIG, "rampart.toml", COMMIT).unwrap(),
    ));
    let persister = Persister::start(device.clone(), ID, 0, 0, config).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    (device, engine, persister)
}

fn recovered(device: &SimDevice) -> Engine {
    let image = device.crash(CrashMode::LoseUnsynced);
    let (state, report) = recover(&image, ID, &EngineConfig::default()).unwrap();
    let e = Engine::from_state(state);
    assert!(e.check().is_empty(), "{:?} ({report})", e.check());
    e
}

fn content(e: &Engine, path: &[u8]) -> Vec<u8> {
    let a = e.lookup_path(path).unwrap();
    let mut buf = Vec::new();
    e.read(a.ino, 0, a.size_bytes as u32, &mut buf).unwrap();
    buf
}

#[test]
fn rules_directories_and_attributes_choose_the_category_first_match_wins() {
    let (_device, e, _p) = setup(1);
    let c = Ctx::library(0, 0);
    let category = |ino| {
        let i = e.category(ino).unwrap();
        (i.name, i.origin)
    };
    let plain = e.mknod(&c, ROOT_INO, b"a.c", FILE, 0).unwrap().ino;
    assert_eq!(category(plain), ("SOON".into(), Origin::Default));
    let safe = e.mknod(&c, ROOT_INO, b"x.safe", FILE, 0).unwrap();
    assert_eq!(category(safe.ino), ("SAFE".into(), Origin::Rule(1)));
    assert_eq!(safe.durability, Durability::BeforeReturn);
    // A path rule: anything under a directory named build.
    let src = e.mkdir(&c, ROOT_INO, b"src", 0o755).unwrap().ino;
    let build = e.mkdir(&c, src, b"build", 0o755).unwrap().ino;
    let obj = e.mknod(&c, build, b"main.o", FILE, 0).unwrap().ino;
    assert_eq!(category(obj), ("GENERATED".into(), Origin::Rule(3)));
    // A directory's category is inherited, by files and directories, below rules.
    let scratch = e.mkdir(&c, ROOT_INO, b"scratch", 0o755).unwrap().ino;
    e.setxattr(&c, scratch, b"user.rampart.category", b"scratch\n", 0)
        .unwrap();
    assert_eq!(category(scratch), ("SCRATCH".into(), Origin::Xattr));
    assert_eq!(
        e.getattr(scratch).unwrap().durability,
        Durability::default()
    );
    let sub = e.mkdir(&c, scratch, b"sub", 0o755).unwrap().ino;
    let t = e.mknod(&c, sub, b"t", FILE, 0).unwrap();
    assert_eq!(category(t.ino), ("SCRATCH".into(), Origin::Directory));
    assert_eq!(t.durability, Durability::Volatile);
    let ruled = e.mknod(&c, sub, b"keep.safe", FILE, 0).unwrap().ino;
    assert_eq!(category(ruled), ("SAFE".into(), Origin::Rule(1)));
    // The attribute wins over the rule, the raw spec too; removing it gives the default.
    e.setxattr(&c, ruled, b"user.rampart.spec", b"lm=10min", 0)
        .unwrap();
    assert_eq!(category(ruled), ("spec:lm=10min".into(), Origin::Xattr));
    assert_eq!(
        e.getxattr(ruled, b"user.rampart.spec").unwrap(),
        b"lm=10min"
    );
    e.removexattr(&c, ruled, b"user.rampart.spec").unwrap();
    assert_eq!(category(ruled), ("SOON".into(), Origin::Default));
    assert_eq!(
        e.getxattr(ruled, b"user.rampart.category").unwrap(),
        b"SOON"
    );
    // Only set categories are listed; the stored attribute is hidden and cannot be set.
    let list = e.listxattr(safe.ino, true).unwrap();
    assert_eq!(list, b"user.rampart.category\0");
    assert!(e.listxattr(plain, true).unwrap().is_empty());
    assert!(e
        .setxattr(&c, plain, b"trusted.rampart.category", b"api SAFE", 0)
        .is_err());
    assert!(e.getxattr(safe.ino, b"trusted.rampart.category").is_err());
    // Bad names are refused and change nothing.
    for bad in [&b"FAST"[..], b"ROBUST", b"PARANOID"] {
        assert_eq!(
            e.setxattr(&c, plain, b"user.rampart.category", bad, 0),
            Err(rampart_core::Errno::EINVAL)
        );
    }
    assert!(e
        .setxattr(&c, plain, b"user.rampart.spec", b"lm=5", 0)
        .is_err());
    assert_eq!(category(plain), ("SOON".into(), Origin::Default));
    let api = e.set_category(&c, plain, Some("paranoid"), Origin::Api);
    assert!(api
        .unwrap_err()
        .to_string()
        .contains("needs a second copy (DA2), not built yet"));
    e.set_category(&c, plain, Some("edited"), Origin::Api)
        .unwrap();
    assert_eq!(category(plain), ("EDITED".into(), Origin::Api));
    assert!(e.durable_at_close(plain));
    let link = e.symlink(&c, ROOT_INO, b"l", b"a.c").unwrap().ino;
    assert!(e.set_category(&c, link, Some("SAFE"), Origin::Api).is_err());
}

#[test]
fn disposable_writes_are_dropped() {
    let (device, e, _p) = setup(2);
    let c = Ctx::library(0, 0);
    let null = e.mknod(&c, ROOT_INO, b"x.null", FILE, 0).unwrap().ino;
    assert_eq!(e.write(&c, null, 0, &[9u8; 5000], false).unwrap(), 5000);
    assert_eq!(e.getattr(null).unwrap().size_bytes, 0);
    assert!(e.writes_through(null));
    e.sync().unwrap();
    let r = recovered(&device);
    assert!(
        r.lookup_path(b"/x.null").is_err(),
        "volatile: gone after a crash"
    );
}

#[test]
fn categories_survive_a_crash_and_a_checkpoint() {
    let (device, e, p) = setup(3);
    let c = Ctx::library(0, 0);
    let d = e.mkdir(&c, ROOT_INO, b"d", 0o755).unwrap().ino;
    e.setxattr(&c, d, b"user.rampart.category", b"EDITED", 0)
        .unwrap();
    let f = e.mknod(&c, d, b"f", FILE, 0).unwrap().ino;
    e.write(&c, f, 0, b"text", false).unwrap();
    e.sync().unwrap();
    let r = recovered(&device);
    let f2 = r.lookup_path(b"/d/f").unwrap().ino;
    let info = r.category(f2).unwrap();
    assert_eq!(
        (info.name.as_str(), info.origin),
        ("EDITED", Origin::Directory)
    );
    p.checkpoint(&e).unwrap();
    let r = recovered(&device);
    let d2 = r.lookup_path(b"/d").unwrap().ino;
    assert_eq!(r.category(d2).unwrap().origin, Origin::Xattr);
    assert_eq!(r.getxattr(d2, b"user.rampart.category").unwrap(), b"EDITED");
}

/// SAFE writes acknowledged before a crash at any sync point are there after it; TEMPORARY
/// files are gone and their bytes never reached the store.
#[test]
fn safe_writes_survive_and_temporary_files_leave_nothing_at_every_sync_point() {
    const MARK: u8 = 0xA7;
    let workload = |e: &Engine, acked: &mut Vec<(String, Vec<u8>)>| {
        let c = Ctx::library(0, 0);
        let dir = e.mkdir(&c, ROOT_INO, b"d", 0o755);
        let Ok(dir) = dir else { return };
        let tmp = e.mknod(&c, dir.ino, b"scratch.tmp", FILE, 0);
        for i in 0..6u8 {
            if let Ok(t) = &tmp {
                let _ = e.write(&c, t.ino, u64::from(i) * 4096, &[MARK; 4096], false);
            }
            let name = format!("f{i}.safe");
            let Ok(f) = e.mknod(&c, dir.ino, name.as_bytes(), FILE, 0) else {
                continue;
            };
            let data = vec![i + 1; 100 + usize::from(i) * 333];
            if e.write(&c, f.ino, 0, &data, false).is_ok() {
                acked.push((format!("/d/{name}"), data));
            }
        }
    };
    let total = {
        let (device, e, _p) = setup(7);
        workload(&e, &mut Vec::new());
        device.sync_count()
    };
    assert!(total >= 6, "each SAFE write syncs ({total} syncs)");
    for k in 0..=total {
        let (device, e, _p) = setup(7);
        device.fail_after_syncs(k);
        let mut acked = Vec::new();
        workload(&e, &mut acked);
        let r = recovered(&device);
        for (path, data) in &acked {
            assert_eq!(
                &content(&r, path.as_bytes()),
                data,
                "{path} after {k} syncs"
            );
        }
        assert!(r.lookup_path(b"/d/scratch.tmp").is_err(), "{k}");
        let image = device.crash(CrashMode::LoseUnsynced);
        for name in image.names() {
            let bytes = image.durable(&name).unwrap_or_default();
            assert!(
                !bytes.windows(64).any(|w| w.iter().all(|&b| b == MARK)),
                "TEMPORARY data reached {name} ({k} syncs)"
            );
        }
    }
}

#[test]
fn the_library_reads_the_stores_config_and_sets_categories() {
    use rampart_core::fs::{Fs, OpenOptions};
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    rampart_core::store::mkfs(&store).unwrap();
    std::fs::write(
        store.join("rampart.toml"),
        "[[rules]]\nglob = \"*.o\"\ncategory = \"NOPE\"\n",
    )
    .unwrap();
    let e = Fs::open(&store).unwrap_err().to_string();
    assert!(
        e.contains("rampart.toml:3: ") && e.contains("unknown category"),
        "{e}"
    );
    std::fs::write(store.join("rampart.toml"), CONFIG).unwrap();
    let fs = Fs::open(&store).unwrap();
    fs.write("a.safe", b"x").unwrap();
    let info = fs.category("a.safe").unwrap();
    assert_eq!((info.name.as_str(), info.origin), ("SAFE", Origin::Rule(1)));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .category("edited")
        .open(&fs, "notes.safe")
        .unwrap();
    f.write_all(b"kept at close").unwrap();
    assert_eq!(
        f.category().unwrap().origin,
        Origin::Api,
        "the API wins over rules"
    );
    drop(f);
    fs.create_dir("scratch").unwrap();
    fs.set_category("scratch", Some("TEMPORARY")).unwrap();
    fs.write("scratch/t", b"gone").unwrap();
    let e = fs.set_category("a.safe", Some("ROBUST")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e
        .to_string()
        .contains("needs a second copy (DA2), not built yet"));
    fs.close().unwrap();
    let fs = Fs::open(&store).unwrap();
    assert_eq!(fs.read("notes.safe").unwrap(), b"kept at close");
    assert_eq!(fs.category("notes.safe").unwrap().name, "EDITED");
    assert!(!fs.exists("scratch/t").unwrap());
    assert_eq!(fs.category("scratch").unwrap().name, "TEMPORARY");
}

//! Categories through the engine: the store's configuration, filename rules, directory
//! inheritance and the attributes; SAFE writes durable when they return and TEMPORARY files
//! never in the store, with a crash at every sync point.

mod common;

use std::sync::Arc;
use std::time::Duration;

use rampart_core::category::{Categories, Origin};
use rampart_core::persist::device::{CrashMode, SimDevice};
use rampart_core::persist::persister::Persister;
use rampart_core::{Ctx, Durability, Engine, EngineConfig, ROOT_INO};

use common::{content, crash_and_recover, engine_on_sim_device};

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
    let categories = Categories::from_toml(CONFIG, "rampart.toml", COMMIT).unwrap();
    engine_on_sim_device(seed, COMMIT, Some(categories))
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
        .contains("needs a second copy (DA2): this store has no mirror"));
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
    let r = crash_and_recover(&device);
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
    let r = crash_and_recover(&device);
    let f2 = r.lookup_path(b"/d/f").unwrap().ino;
    let info = r.category(f2).unwrap();
    assert_eq!(
        (info.name.as_str(), info.origin),
        ("EDITED", Origin::Directory)
    );
    p.checkpoint(&e).unwrap();
    let r = crash_and_recover(&device);
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
        let r = crash_and_recover(&device);
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
        .contains("needs a second copy (DA2): this store has no mirror"));
    fs.close().unwrap();
    let fs = Fs::open(&store).unwrap();
    assert_eq!(fs.read("notes.safe").unwrap(), b"kept at close");
    assert_eq!(fs.category("notes.safe").unwrap().name, "EDITED");
    assert!(!fs.exists("scratch/t").unwrap());
    assert_eq!(fs.category("scratch").unwrap().name, "TEMPORARY");
}

/// The journal's length once everything is committed.
fn journal_len(device: &SimDevice, e: &Engine) -> u64 {
    e.sync().unwrap();
    device.durable("journal").unwrap_or_default().len() as u64
}

#[test]
fn a_tree_of_temporary_files_writes_nothing_at_all() {
    let (device, e, _p) = setup(11);
    let c = Ctx::library(0, 0);
    let tmp = e.mkdir(&c, ROOT_INO, b"tmp", 0o755).unwrap().ino;
    e.setxattr(&c, tmp, b"user.rampart.category", b"TEMPORARY", 0)
        .unwrap();
    let keep = e.mknod(&c, ROOT_INO, b"keep", FILE, 0).unwrap().ino;
    e.write(&c, keep, 0, b"kept", false).unwrap();
    let before = journal_len(&device, &e);
    // Directories, files, links, symlinks, renames, unlinks, attributes: all under tmp.
    let a = e.mkdir(&c, tmp, b"a", 0o755).unwrap().ino;
    let b = e.mkdir(&c, a, b"b", 0o700).unwrap().ino;
    assert!(!e.known_to_store(a).unwrap() && !e.known_to_store(b).unwrap());
    for i in 0..20u8 {
        let f = e
            .mknod(&c, b, format!("f{i}").as_bytes(), FILE, 0)
            .unwrap()
            .ino;
        e.write(&c, f, 0, &[i; 3000], false).unwrap();
        e.setxattr(&c, f, b"user.x", b"y", 0).unwrap();
    }
    e.symlink(&c, b, b"l", b"f0").unwrap();
    e.mknod(&c, b, b"fifo", libc::S_IFIFO | 0o600, 0).unwrap();
    let f1 = e.lookup_path(b"/tmp/a/b/f1").unwrap().ino;
    e.link(&c, f1, a, b"hard").unwrap();
    e.rename(&c, b, b"f2", a, b"moved", 0).unwrap();
    e.unlink(&c, b, b"f3").unwrap();
    e.rmdir(&c, tmp, b"none").unwrap_err();
    let e2 = e.mkdir(&c, tmp, b"empty", 0o755).unwrap().ino;
    assert!(!e.known_to_store(e2).unwrap());
    e.rmdir(&c, tmp, b"empty").unwrap();
    assert_eq!(
        journal_len(&device, &e),
        before,
        "TEMPORARY files wrote to the journal"
    );
    // A checkpoint leaves them out; recovery has the rest, consistent.
    _p.checkpoint(&e).unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/keep"), b"kept");
    assert!(r.lookup_path(b"/tmp/a").is_err());
    assert_eq!(
        r.getattr(r.lookup_path(b"/tmp").unwrap().ino)
            .unwrap()
            .nlink,
        2
    );
}

#[test]
fn a_durable_file_in_a_temporary_directory_makes_the_directories_durable_first() {
    let (device, e, _p) = setup(12);
    let c = Ctx::library(0, 0);
    let tmp = e.mkdir(&c, ROOT_INO, b"tmp", 0o755).unwrap().ino;
    e.setxattr(&c, tmp, b"user.rampart.category", b"TEMPORARY", 0)
        .unwrap();
    let a = e.mkdir(&c, tmp, b"a", 0o750).unwrap().ino;
    let b = e.mkdir(&c, a, b"b", 0o755).unwrap().ino;
    let scratch = e.mknod(&c, b, b"scratch", FILE, 0).unwrap().ino;
    e.write(&c, scratch, 0, b"gone", false).unwrap();
    e.setxattr(&c, b, b"user.tag", b"kept with b", 0).unwrap();
    // A SAFE file (a rule) in tmp/a/b: its write returns once it, b and a are durable.
    let safe = e.mknod(&c, b, b"x.safe", FILE, 0).unwrap().ino;
    e.write(&c, safe, 0, b"acknowledged", false).unwrap();
    assert!(e.known_to_store(a).unwrap() && e.known_to_store(b).unwrap());
    assert!(!e.known_to_store(scratch).unwrap());
    // A file moved from the store into a temporary directory makes it known, too.
    let t2 = e.mkdir(&c, tmp, b"t2", 0o755).unwrap().ino;
    let doc = e.mknod(&c, ROOT_INO, b"doc", FILE, 0).unwrap().ino;
    e.write(&c, doc, 0, b"document", false).unwrap();
    e.rename(&c, ROOT_INO, b"doc", t2, b"doc", 0).unwrap();
    // A temporary file renamed over a durable one: for the store, the durable one goes.
    let old = e.mknod(&c, ROOT_INO, b"old", FILE, 0).unwrap().ino;
    e.write(&c, old, 0, b"old", false).unwrap();
    e.rename(&c, b, b"scratch", ROOT_INO, b"old", 0).unwrap();
    // A temporary file made SOON is created in the store with its content and its names.
    let late = e.mknod(&c, b, b"late", FILE, 0).unwrap().ino;
    e.write(&c, late, 0, b"late content", false).unwrap();
    e.link(&c, late, t2, b"late2").unwrap();
    e.set_category(&c, late, Some("SOON"), Origin::Api).unwrap();
    e.sync().unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/tmp/a/b/x.safe"), b"acknowledged");
    let rb = r.lookup_path(b"/tmp/a/b").unwrap().ino;
    assert_eq!(r.getxattr(rb, b"user.tag").unwrap(), b"kept with b");
    assert_eq!(
        r.getattr(r.lookup_path(b"/tmp/a").unwrap().ino)
            .unwrap()
            .perm,
        0o750
    );
    assert_eq!(r.category(rb).unwrap().name, "TEMPORARY");
    assert_eq!(content(&r, b"/tmp/t2/doc"), b"document");
    assert!(
        r.lookup_path(b"/old").is_err(),
        "replaced by a temporary file"
    );
    assert!(r.lookup_path(b"/tmp/a/b/scratch").is_err());
    assert_eq!(content(&r, b"/tmp/a/b/late"), b"late content");
    assert_eq!(content(&r, b"/tmp/t2/late2"), b"late content");
    assert_eq!(
        r.getattr(r.lookup_path(b"/tmp/t2/late2").unwrap().ino)
            .unwrap()
            .nlink,
        2
    );
}

/// Random namespace ops in and out of temporary directories, with SAFE files, categories
/// changed on the way and checkpoints, and a crash at every sync point: every recovery is
/// consistent (`check`), and every SAFE write acknowledged last on a path that was not moved
/// or removed since is there.
#[test]
fn random_ops_across_temporary_trees_recover_consistently_at_every_sync_point() {
    fn workload(
        e: &Engine,
        p: &Persister,
        seed: u64,
        acked: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> usize {
        let mut acks = 0;
        let c = Ctx::library(0, 0);
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let dirs = ["/", "/tmp", "/tmp/d0", "/tmp/d0/d1", "/d2", "/tmp/d3"];
        let names = ["a", "c.safe", "d.safe", "e.safe", "d0", "d1", "d3"];
        if let Ok(t) = e.mkdir(&c, ROOT_INO, b"tmp", 0o755) {
            let _ = e.setxattr(&c, t.ino, b"user.rampart.category", b"TEMPORARY", 0);
        }
        for i in 0..400u32 {
            let dir = dirs[next(dirs.len() as u64) as usize];
            let name = names[next(names.len() as u64) as usize];
            let path = format!("{}/{name}", dir.trim_end_matches('/'));
            let Ok(parent) = e.lookup_path(dir.as_bytes()) else {
                continue;
            };
            let target = e.lookup_path(path.as_bytes()).ok();
            match next(13) {
                0 => {
                    let _ = e.mkdir(&c, parent.ino, name.as_bytes(), 0o755);
                }
                1 | 2 => {
                    let _ = e.mknod(&c, parent.ino, name.as_bytes(), FILE, 0);
                }
                3..=6 => {
                    if let Some(t) = target {
                        let data = format!("{path} {i}").into_bytes();
                        if e.write(&c, t.ino, 0, &data, false).is_ok()
                            && t.durability == Durability::BeforeReturn
                        {
                            acked.retain(|(p, _)| p != path.as_bytes());
                            acked.push((path.clone().into_bytes(), data));
                            acks += 1;
                        }
                    }
                }
                7 => {
                    let to = dirs[next(dirs.len() as u64) as usize];
                    let new = names[next(names.len() as u64) as usize];
                    if let Ok(q) = e.lookup_path(to.as_bytes()) {
                        let flags = [0, 0, rampart_core::op::RENAME_EXCHANGE][next(3) as usize];
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
                            let gone = format!("{}/{new}", to.trim_end_matches('/'));
                            acked.retain(|(p, _)| {
                                !p.starts_with(path.as_bytes()) && !p.starts_with(gone.as_bytes())
                            });
                        }
                    }
                }
                8 => {
                    if e.unlink(&c, parent.ino, name.as_bytes()).is_ok()
                        || e.rmdir(&c, parent.ino, name.as_bytes()).is_ok()
                    {
                        acked.retain(|(p, _)| !p.starts_with(path.as_bytes()));
                    }
                }
                9 => {
                    if let Some(t) = target {
                        let to = dirs[next(dirs.len() as u64) as usize];
                        if let Ok(q) = e.lookup_path(to.as_bytes()) {
                            let _ = e.link(&c, t.ino, q.ino, format!("l{i}").as_bytes());
                        }
                    }
                }
                10 => {
                    if let Some(t) = target {
                        let category = ["TEMPORARY", "SOON", "SOMETIME"][next(3) as usize];
                        if e.set_category(&c, t.ino, Some(category), Origin::Api)
                            .is_ok()
                        {
                            acked.retain(|(p, _)| !p.starts_with(path.as_bytes()));
                        }
                    }
                }
                _ => {
                    if next(4) == 0 {
                        let _ = p.checkpoint(e);
                    } else {
                        let _ = e.sync();
                    }
                }
            }
        }
        acks
    }
    for seed in 1..=3u64 {
        let total = {
            let (device, e, p) = setup(seed);
            let mut acked = Vec::new();
            let acks = workload(&e, &p, seed, &mut acked);
            assert!(acks > 0, "seed {seed}: no SAFE write to check");
            let unknown = ["/tmp/d0", "/tmp/d3", "/tmp/a", "/tmp/b"]
                .iter()
                .filter_map(|p| e.lookup_path(p.as_bytes()).ok())
                .filter(|a| !e.known_to_store(a.ino).unwrap())
                .count();
            eprintln!(
                "seed {seed}: {acks} SAFE writes, {} paths at the end, {unknown} unknown",
                acked.len()
            );
            device.sync_count()
        };
        for k in (0..=total).step_by(1 + total as usize / 40) {
            let (device, e, p) = setup(seed);
            device.fail_after_syncs(k);
            let mut acked = Vec::new();
            let _ = workload(&e, &p, seed, &mut acked);
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

#[test]
fn removing_or_moving_a_safe_file_is_durable_when_it_returns() {
    let (device, e, _p) = setup(13);
    let c = Ctx::library(0, 0);
    let a = e.mknod(&c, ROOT_INO, b"a.safe", FILE, 0).unwrap().ino;
    e.write(&c, a, 0, b"a", false).unwrap();
    let b = e.mknod(&c, ROOT_INO, b"b.safe", FILE, 0).unwrap().ino;
    e.write(&c, b, 0, b"b", false).unwrap();
    let plain = e.mknod(&c, ROOT_INO, b"plain", FILE, 0).unwrap().ino;
    e.write(&c, plain, 0, b"p", false).unwrap();
    e.sync().unwrap();
    e.unlink(&c, ROOT_INO, b"a.safe").unwrap();
    let r = crash_and_recover(&device);
    assert!(
        r.lookup_path(b"/a.safe").is_err(),
        "the unlink of a SAFE file was not durable"
    );
    e.rename(&c, ROOT_INO, b"b.safe", ROOT_INO, b"moved", 0)
        .unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/moved"), b"b");
    // A SOON file's unlink waits for the commit interval.
    e.unlink(&c, ROOT_INO, b"plain").unwrap();
    let r = crash_and_recover(&device);
    assert!(r.lookup_path(b"/plain").is_ok());
}

#[test]
fn path_rules_see_the_path_after_a_rename() {
    let (_device, e, _p) = setup(14);
    e.set_categories(Arc::new(
        Categories::from_toml(
            "[[rules]]\nregex = '^/b/'\ncategory = \"SOMETIME\"\n",
            "rampart.toml",
            COMMIT,
        )
        .unwrap(),
    ));
    let c = Ctx::library(0, 0);
    let a = e.mkdir(&c, ROOT_INO, b"a", 0o755).unwrap().ino;
    let sub = e.mkdir(&c, a, b"sub", 0o755).unwrap().ino;
    let before = e.mknod(&c, sub, b"x", FILE, 0).unwrap().ino;
    assert_eq!(e.category(before).unwrap().origin, Origin::Default);
    e.rename(&c, ROOT_INO, b"a", ROOT_INO, b"b", 0).unwrap();
    let after = e.mknod(&c, sub, b"y", FILE, 0).unwrap().ino;
    assert_eq!(e.category(after).unwrap().origin, Origin::Rule(1));
    let deeper = e.mkdir(&c, sub, b"d", 0o755).unwrap().ino;
    assert_eq!(e.category(deeper).unwrap().name, "SOMETIME");
    let z = e.mknod(&c, deeper, b"z", FILE, 0).unwrap().ino;
    assert_eq!(e.category(z).unwrap().origin, Origin::Rule(1));
}

/// What the kernel of a mount must send (decision 0063): found from the configuration and the
/// inodes at mount; a category needing what it does not send is refused, not weakened.
#[test]
fn a_category_the_kernel_cannot_serve_is_refused_and_one_held_is_found() {
    use rampart_core::category::{CategoryError, KernelRequest};
    use rampart_core::KernelRequests;
    let e = Engine::new(EngineConfig::default());
    let c = Ctx::library(0, 0);
    let needs = e.kernel_needs();
    assert_eq!((needs.open, needs.flush), (None, None));
    let f = e.mknod(&c, ROOT_INO, b"f", FILE, 0).unwrap().ino;
    let none = KernelRequests {
        open: false,
        flush: false,
    };
    e.set_kernel_requests(none, none);
    for (name, request) in [
        ("SAFE", KernelRequest::Open),
        ("DISPOSABLE", KernelRequest::Open),
        ("spec:lm=before_write", KernelRequest::Open),
        ("EDITED", KernelRequest::Flush),
    ] {
        let err = e
            .set_category(&c, f, Some(name), Origin::Xattr)
            .unwrap_err();
        assert!(
            matches!(err, CategoryError::NotSentByKernel { request: r, .. } if r == request),
            "{name}: {err}"
        );
        assert_eq!(err.errno(), rampart_core::Errno::EOPNOTSUPP);
        assert!(err.to_string().contains("--no-"), "{err}");
    }
    assert_eq!(e.category(f).unwrap().name, "SOON");
    e.set_category(&c, f, Some("TEMPORARY"), Origin::Xattr)
        .unwrap();
    // With both sent, they are kept, and the next mount finds them.
    let all = KernelRequests {
        open: true,
        flush: true,
    };
    e.set_kernel_requests(all, none);
    e.set_category(&c, f, Some("SAFE"), Origin::Xattr).unwrap();
    let d = e.mkdir(&c, ROOT_INO, b"d", 0o755).unwrap().ino;
    e.set_category(&c, d, Some("EDITED"), Origin::Xattr)
        .unwrap();
    let needs = e.kernel_needs();
    assert_eq!(
        needs.open.as_deref(),
        Some(format!("inode {f} has the category SAFE").as_str())
    );
    assert_eq!(
        needs.flush.as_deref(),
        Some(format!("inode {d} has the category EDITED").as_str())
    );
}

/// `default = "TEMPORARY"`: a file that no rule or directory decides gets the store default's
/// contract, not a plain file's: it writes nothing to the store and is gone after a crash.
#[test]
fn a_temporary_store_default_keeps_files_out_of_the_store() {
    let toml = "default = \"TEMPORARY\"\n\n[[rules]]\nglob = \"*.safe\"\ncategory = \"SAFE\"\n";
    let categories = Categories::from_toml(toml, "rampart.toml", COMMIT).unwrap();
    let (device, e, _p) = engine_on_sim_device(12, COMMIT, Some(categories));
    let c = Ctx::library(0, 0);
    let before = journal_len(&device, &e);
    let d = e.mkdir(&c, ROOT_INO, b"d", 0o755).unwrap().ino;
    for i in 0..20u8 {
        let f = e
            .mknod(&c, d, format!("f{i}").as_bytes(), FILE, 0)
            .unwrap()
            .ino;
        e.write(&c, f, 0, &[i; 1000], false).unwrap();
        assert!(!e.known_to_store(f).unwrap());
        assert_eq!(e.category(f).unwrap().origin, Origin::Default);
        assert_eq!(e.category(f).unwrap().durability, Durability::Volatile);
    }
    assert_eq!(
        journal_len(&device, &e),
        before,
        "files of a TEMPORARY store default wrote to the journal"
    );
    // A rule still wins over the default: a SAFE file is durable when write returns, with
    // the directory above it.
    let s = e.mknod(&c, d, b"x.safe", FILE, 0).unwrap().ino;
    e.write(&c, s, 0, b"kept", false).unwrap();
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/d/x.safe"), b"kept");
    assert!(r.lookup_path(b"/d/f0").is_err());
}

/// `default = "SAFE"`: a file no rule decides is durable when write returns, without fsync.
#[test]
fn a_safe_store_default_makes_writes_durable_when_they_return() {
    let categories = Categories::from_toml("default = \"SAFE\"\n", "rampart.toml", COMMIT).unwrap();
    let (device, e, _p) = engine_on_sim_device(13, COMMIT, Some(categories));
    let c = Ctx::library(0, 0);
    let f = e.mknod(&c, ROOT_INO, b"f", FILE, 0).unwrap().ino;
    e.write(&c, f, 0, b"durable", false).unwrap();
    // No sync: the commit interval (60 s) has not passed.
    let r = crash_and_recover(&device);
    assert_eq!(content(&r, b"/f"), b"durable");
}

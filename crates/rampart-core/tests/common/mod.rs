//! What the crash tests share: a full snapshot of a file system (the model's view of it), a
//! seeded random number generator, a workload of every kind of op the journal records, and an
//! engine persisted on a simulated device with its recovery after a crash.

#![allow(dead_code)] // each test file uses a part

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

use rampart_core::category::Categories;
use rampart_core::persist::device::{CrashMode, SimDevice};
use rampart_core::persist::persister::{PersistConfig, Persister};
use rampart_core::persist::recovery::recover;

use rampart_core::op::{
    FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, RENAME_EXCHANGE,
    RENAME_NOREPLACE,
};
use rampart_core::{Ctx, Durability, Engine, EngineConfig, FileKind, SetAttr, SetTime, ROOT_INO};

pub const STORE_ID: [u8; 16] = [7; 16];

/// An engine persisted on a new simulated device (`seed`): commits at explicit syncs and every
/// `commit_interval`, never a checkpoint by journal size; `categories`, if any, are the
/// store's from the start.
pub fn engine_on_sim_device(
    seed: u64,
    commit_interval: Duration,
    categories: Option<Categories>,
) -> (Arc<SimDevice>, Arc<Engine>, Arc<Persister>) {
    let device = Arc::new(SimDevice::new(seed));
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let config = PersistConfig {
        commit_interval,
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    };
    if let Some(categories) = categories {
        engine.set_categories(Arc::new(categories));
    }
    let persister = Persister::start(device.clone(), STORE_ID, 0, 0, config).unwrap();
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    (device, engine, persister)
}

/// What a power cut now leaves of `device` (unsynced writes lost), recovered; it must pass
/// the engine's consistency check.
pub fn crash_and_recover(device: &SimDevice) -> Engine {
    let image = device.crash(CrashMode::LoseUnsynced);
    let (state, report) = recover(&image, STORE_ID, &EngineConfig::default()).unwrap();
    let e = Engine::from_state(state);
    assert!(e.check().is_empty(), "{:?} ({report})", e.check());
    e
}

/// The bytes of the file at `path`.
pub fn content(e: &Engine, path: &[u8]) -> Vec<u8> {
    let a = e.lookup_path(path).unwrap();
    let mut buf = Vec::new();
    e.read(a.ino, 0, a.size_bytes as u32, &mut buf).unwrap();
    buf
}

/// Everything durable about a file system, by path: kind, inode number, mode, uid, gid, rdev,
/// size, mtime, ctime, nlink, contents (as a hash: snapshots are taken after every op), symlink
/// targets and xattrs. atime is left out: reads change it without an op, so it is not
/// journaled. Volatile files are left out: they are gone after a restart, by contract.
pub type Snapshot = BTreeMap<Vec<u8>, String>;

fn content_hash(data: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(data);
    h.finish()
}

pub fn snapshot(e: &Engine) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![(b"/".to_vec(), ROOT_INO)];
    let root = e.getattr(ROOT_INO).unwrap();
    out.insert(
        b"/".to_vec(),
        format!(
            "root perm={:o} uid={} gid={} mtime={} ctime={} nlink={}",
            root.perm, root.uid, root.gid, root.mtime_ns, root.ctime_ns, root.nlink
        ),
    );
    while let Some((path, dir)) = stack.pop() {
        let mut children = Vec::new();
        e.readdir(dir, 0, |ino, _, _, name| {
            if name != b"." && name != b".." {
                children.push((name.to_vec(), ino));
            }
            true
        })
        .unwrap();
        for (name, ino) in children {
            let mut p = path.clone();
            if p.len() > 1 {
                p.push(b'/');
            }
            p.extend_from_slice(&name);
            let a = e.getattr(ino).unwrap();
            if a.durability == Durability::Volatile {
                continue;
            }
            let mut content = Vec::new();
            match a.kind {
                FileKind::RegularFile => e.read(ino, 0, a.size_bytes as u32, &mut content).unwrap(),
                FileKind::Symlink => content = e.readlink(ino).unwrap(),
                _ => {}
            }
            let xattrs = e.listxattr(ino, true).unwrap();
            let mut names: Vec<&[u8]> = xattrs
                .split(|&b| b == 0)
                .filter(|n| !n.is_empty())
                .collect();
            names.sort();
            let values: Vec<(String, String)> = names
                .iter()
                .map(|n| {
                    let v = e.getxattr(ino, n).unwrap();
                    (
                        String::from_utf8_lossy(n).into_owned(),
                        String::from_utf8_lossy(&v).into_owned(),
                    )
                })
                .collect();
            let target = if a.kind == FileKind::Symlink {
                String::from_utf8_lossy(&content).into_owned()
            } else {
                String::new()
            };
            out.insert(
                p.clone(),
                format!(
                    "{:?} ino={} perm={:o} uid={} gid={} rdev={} nlink={} size={} mtime={} \
                     ctime={} durability={:?} data={:016x} target={target:?} xattrs={values:?}",
                    a.kind,
                    ino,
                    a.perm,
                    a.uid,
                    a.gid,
                    a.rdev,
                    a.nlink,
                    a.size_bytes,
                    a.mtime_ns,
                    a.ctime_ns,
                    a.durability,
                    content_hash(&content),
                ),
            );
            if a.kind == FileKind::Directory {
                stack.push((p, ino));
            }
        }
    }
    out
}

/// What differs between two snapshots, for a failure message (at most a few paths).
pub fn diff(a: &Snapshot, b: &Snapshot) -> String {
    let mut out = String::new();
    let keys: std::collections::BTreeSet<&Vec<u8>> = a.keys().chain(b.keys()).collect();
    for k in keys.into_iter().filter(|k| a.get(*k) != b.get(*k)).take(6) {
        out.push_str(&format!(
            "\n  {}:\n    {:?}\n    {:?}",
            String::from_utf8_lossy(k),
            a.get(k),
            b.get(k)
        ));
    }
    out
}

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

fn path_ino(e: &Engine, path: &str) -> Option<u64> {
    e.lookup_path(path.as_bytes()).ok().map(|a| a.ino)
}

/// How many kinds of op `random_op` makes.
pub const OP_KINDS: u64 = 18;

/// One random op of any kind the journal records: create (regular files, FIFOs, devices),
/// mkdir, symlink, link, unlink, rmdir, rename (with its flags), write, truncate, fallocate
/// (its modes), chmod, chown, utimens, setxattr, removexattr, set_durability. Errors (absent
/// names, wrong kinds, refused permissions) are part of the workload. Returns the kind.
///
/// Durability::BeforeReturn is left out: its syncs would acknowledge states that a test
/// committing only on explicit syncs does not record.
pub fn random_op(e: &Engine, rng: &mut Rng) -> u64 {
    // Mostly root (chown, device nodes); sometimes a user, whose writes clear setuid bits
    // and whose chmods and chowns of others' files are refused.
    let c = if rng.below(4) == 0 {
        Ctx::library(1000, 1000)
    } else {
        Ctx::library(0, 0)
    };
    let dirs = ["/", "/d0", "/d1", "/d0/d2"];
    let dir = |rng: &mut Rng| rng.pick(&dirs);
    let name = |rng: &mut Rng| format!("n{}", rng.below(6));
    let parent = |rng: &mut Rng| path_ino(e, dir(rng));
    let file = |rng: &mut Rng| {
        let path = format!("{}/{}", dir(rng).trim_end_matches('/'), name(rng));
        path_ino(e, &path)
    };
    let kind = rng.below(OP_KINDS);
    match kind {
        0 | 1 => {
            if let Some(p) = parent(rng) {
                let mode = rng.pick(&[0o644, 0o600, 0o4755, 0o2775]);
                let _ = e.mknod(&c, p, name(rng).as_bytes(), libc::S_IFREG | mode, 0);
            }
        }
        2 => {
            if let Some(p) = parent(rng) {
                let (kind, rdev) = rng.pick(&[
                    (libc::S_IFIFO, 0),
                    (libc::S_IFCHR, 0x0103),
                    (libc::S_IFBLK, 0x0801),
                    (libc::S_IFSOCK, 0),
                ]);
                let _ = e.mknod(&c, p, name(rng).as_bytes(), kind | 0o640, rdev);
            }
        }
        3 => {
            if let Some(p) = parent(rng) {
                let _ = e.mkdir(&c, p, format!("d{}", rng.below(3)).as_bytes(), 0o755);
            }
        }
        4 => {
            if let Some(p) = parent(rng) {
                let target = format!(
                    "../t{}/{}",
                    rng.below(100),
                    "x".repeat(rng.below(40) as usize)
                );
                let _ = e.symlink(&c, p, name(rng).as_bytes(), target.as_bytes());
            }
        }
        5 => {
            if let (Some(ino), Some(p)) = (file(rng), parent(rng)) {
                let _ = e.link(&c, ino, p, name(rng).as_bytes());
            }
        }
        6 => {
            if let Some(p) = parent(rng) {
                let _ = e.unlink(&c, p, name(rng).as_bytes());
            }
        }
        7 => {
            if let Some(p) = parent(rng) {
                let _ = e.rmdir(&c, p, format!("d{}", rng.below(3)).as_bytes());
            }
        }
        8 => {
            if let (Some(a), Some(b)) = (parent(rng), parent(rng)) {
                let flags = rng.pick(&[0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE]);
                // Directories move too (d0 into d1 and back), and into themselves (refused).
                let from = if rng.below(4) == 0 {
                    format!("d{}", rng.below(3))
                } else {
                    name(rng)
                };
                let _ = e.rename(&c, a, from.as_bytes(), b, name(rng).as_bytes(), flags);
            }
        }
        9 | 10 => {
            if let Some(ino) = file(rng) {
                let len = rng.below(3000) as usize;
                let byte = rng.below(250) as u8 + 1;
                let _ = e.write(&c, ino, rng.below(20_000), &vec![byte; len], false);
            }
        }
        11 => {
            if let Some(ino) = file(rng) {
                let set = SetAttr {
                    size_bytes: Some(rng.below(24_000)),
                    ..SetAttr::default()
                };
                let _ = e.setattr(&c, ino, &set);
            }
        }
        12 => {
            if let Some(ino) = file(rng) {
                let mode = rng.pick(&[
                    0,
                    FALLOC_FL_KEEP_SIZE,
                    FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    FALLOC_FL_ZERO_RANGE,
                    FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                ]);
                let _ = e.fallocate(&c, ino, rng.below(20_000), 1 + rng.below(6000), mode);
            }
        }
        13 => {
            if let Some(ino) = file(rng) {
                let set = SetAttr {
                    mode: Some(rng.pick(&[0o600, 0o644, 0o755, 0o4755, 0o2755, 0o1777])),
                    ..SetAttr::default()
                };
                let _ = e.setattr(&c, ino, &set);
            }
        }
        14 => {
            if let Some(ino) = file(rng) {
                let set = SetAttr {
                    uid: (rng.below(2) == 0).then(|| rng.pick(&[0, 1000, 1001])),
                    gid: (rng.below(2) == 0).then(|| rng.pick(&[0, 1000, 1001])),
                    ..SetAttr::default()
                };
                let _ = e.setattr(&c, ino, &set);
            }
        }
        15 => {
            if let Some(ino) = file(rng) {
                let at = |rng: &mut Rng| match rng.below(3) {
                    0 => None,
                    1 => Some(SetTime::Now),
                    _ => Some(SetTime::At(
                        1_600_000_000_000_000_000 + rng.below(1 << 40) as i64,
                    )),
                };
                let set = SetAttr {
                    atime: at(rng),
                    mtime: at(rng),
                    ..SetAttr::default()
                };
                let _ = e.setattr(&c, ino, &set);
            }
        }
        16 => {
            if let Some(ino) = file(rng) {
                let name = rng.pick(&[&b"user.tag"[..], b"user.other", b"trusted.t"]);
                if rng.below(3) == 0 {
                    let _ = e.removexattr(&c, ino, name);
                } else {
                    let v = format!("v{}", rng.below(1000)).repeat(1 + rng.below(20) as usize);
                    let _ = e.setxattr(&c, ino, name, v.as_bytes(), 0);
                }
            }
        }
        _ => {
            // Volatile files never reach the store; made durable again, they carry their
            // content.
            if let Some(ino) = file(rng) {
                let d = rng.pick(&[
                    Durability::Volatile,
                    Durability::default(),
                    Durability::Within(1),
                ]);
                let _ = e.set_durability(&c, ino, d);
            }
        }
    }
    kind
}

/// How many seeds a test runs: `RAMPART_CRASH_SEEDS`, or `default` (CI).
pub fn seeds(default: u64) -> u64 {
    std::env::var("RAMPART_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

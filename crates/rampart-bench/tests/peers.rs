//! Every peer whose tools are present, for real: set up at the tiny profile, a file written
//! and read, a remount (where the peer keeps its data) that the file survives, usage measured,
//! teardown, and nothing left mounted, attached or on disk. Needs root (fails
//! otherwise, rather than counting as passed without running).
//!
//! Run: `cargo test -p rampart-bench --test peers -- --test-threads=1`

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use rampart_bench::cleanup::{loop_devices, mount_points, pid_alive, sweep_stale};
use rampart_bench::cmd::Cancel;
use rampart_bench::peer::{self, PeerEnv, PeerKind};
use rampart_bench::profile::Profile;

/// The tests mount, drop caches and time things: one at a time even without
/// `--test-threads=1`.
static SERIAL: Mutex<()> = Mutex::new(());

/// These tests mount file systems: without root they cannot run, and a test that returns
/// without running would be counted as passed. So they fail, saying why.
fn require_root() {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(
        root,
        "this test mounts file systems and needs root: run it as root (scripts/test does), or \
         leave it out explicitly with `--skip` (it did not run)"
    );
}

/// The rampart binary of this workspace, if built.
fn rampart_bin() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    ["target/release/rampart", "target/debug/rampart"]
        .iter()
        .map(|p| root.join(p))
        .find(|p| p.is_file())
}

/// Tiny, unless `RAMPART_BENCH_PEERS_PROFILE=quick|full` asks for the bigger devices (to time
/// setup and teardown at those sizes).
fn profile() -> Profile {
    std::env::var("RAMPART_BENCH_PEERS_PROFILE")
        .ok()
        .and_then(|p| Profile::parse(&p))
        .unwrap_or(Profile::Tiny)
}

/// A run's private folders, as the runner makes them, removed on drop.
struct RunDirs {
    shm: PathBuf,
    disk: PathBuf,
}

impl RunDirs {
    fn new(test: &str) -> RunDirs {
        use std::os::unix::fs::DirBuilderExt;
        let tag = format!("rampart-bench-{}", std::process::id());
        let dirs = RunDirs {
            shm: Path::new("/dev/shm").join(&tag).join(test),
            // CARGO_TARGET_TMPDIR is under target/: on the real disk.
            disk: Path::new(env!("CARGO_TARGET_TMPDIR")).join(&tag).join(test),
        };
        for dir in [&dirs.shm, &dirs.disk] {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .unwrap();
        }
        dirs
    }

    fn env(&self, rampart_bin: PathBuf) -> PeerEnv {
        PeerEnv {
            shm_dir: self.shm.clone(),
            disk_dir: self.disk.clone(),
            rampart_bin,
            rampart_args: Vec::new(),
            profile: profile(),
            cancel: Cancel::global(),
        }
    }

    /// Nothing of ours mounted, attached, or left in the folders.
    fn assert_clean(&self, what: &str) {
        let mounts =
            mount_points(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
        for dir in [&self.shm, &self.disk] {
            let dir = std::fs::canonicalize(dir).unwrap();
            let busy: Vec<_> = mounts.iter().filter(|m| m.starts_with(&dir)).collect();
            assert!(busy.is_empty(), "{what}: still mounted: {busy:?}");
            let loops: Vec<_> = loop_devices()
                .into_iter()
                .filter(|(_, backing)| backing.starts_with(&dir))
                .collect();
            assert!(loops.is_empty(), "{what}: loop devices left: {loops:?}");
            let left: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            assert!(left.is_empty(), "{what}: left behind: {left:?}");
        }
    }
}

impl Drop for RunDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.shm);
        let _ = std::fs::remove_dir_all(&self.disk);
        for dir in [&self.shm, &self.disk] {
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

#[test]
fn every_available_peer_works_and_leaves_nothing_behind() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dirs = RunDirs::new("peers");
    let bin = rampart_bin();
    let env = dirs.env(bin.clone().unwrap_or_else(|| PathBuf::from("rampart")));
    let mut timings = Vec::new();
    for kind in PeerKind::ALL {
        if let Err(e) = peer::check_tools(kind) {
            eprintln!("{}: skipped: {e}", kind.id());
            continue;
        }
        // The floor is served by the rampart binary too (`rampart bench-floor`).
        if (kind.is_rampart() || kind == PeerKind::Floor) && bin.is_none() {
            eprintln!(
                "{}: skipped: build rampart first (cargo build --release -p rampart-cli)",
                kind.id()
            );
            continue;
        }
        let started = Instant::now();
        let mut mounted =
            peer::setup(kind, &env).unwrap_or_else(|e| panic!("setting up {}: {e}", kind.id()));
        let setup_s = started.elapsed().as_secs_f64();
        assert_eq!(mounted.kind(), kind);

        let file = mounted.dir().join("hello.txt");
        let text = format!("hello from {}\n", kind.id());
        {
            let mut f = std::fs::File::create(&file).unwrap();
            f.write_all(text.as_bytes()).unwrap();
            f.sync_all().unwrap();
        }
        if kind == PeerKind::Floor {
            // The floor keeps sizes, not contents (reads return zeros past the page cache).
            assert_eq!(std::fs::metadata(&file).unwrap().len(), text.len() as u64);
            let counts = mounted
                .request_counter()
                .expect("the floor counts its requests")
                .read()
                .unwrap();
            assert!(
                counts.counts.get("create").copied().unwrap_or(0) >= 1,
                "{counts:?}"
            );
        } else {
            assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
        }
        if kind.is_rampart() {
            let counts = mounted.request_counter().unwrap().read().unwrap();
            assert!(
                counts.counts.get("create").copied().unwrap_or(0) >= 1,
                "{counts:?}"
            );
        }

        let usage = mounted
            .usage()
            .unwrap_or_else(|e| panic!("usage of {}: {e}", kind.id()));
        assert!(
            usage.ram_bytes.is_some() || usage.store_bytes.is_some(),
            "{}: no figure: {usage:?}",
            kind.id()
        );
        assert!(!usage.method.is_empty());
        if let Some(ram) = usage.ram_bytes {
            assert!(ram > 0, "{}: {usage:?}", kind.id());
        }

        let settings = mounted.settings();
        for (key, value) in &settings {
            eprintln!("  {}: {key}: {value}", kind.id());
        }
        assert!(
            settings.iter().any(|(k, _)| k == "mount"),
            "{}: {settings:?}",
            kind.id()
        );

        let remount_s = match kind {
            PeerKind::Tmpfs
            | PeerKind::FuseOverlay
            | PeerKind::Host
            | PeerKind::HostFsync
            | PeerKind::Floor
            | PeerKind::JuiceFs => {
                let err = mounted.remount().unwrap_err().to_string();
                assert!(err.contains("cannot be remounted"), "{err}");
                None
            }
            PeerKind::RampartTemporary => {
                // It remounts, and its TEMPORARY file is gone: nothing of it reached the store.
                let took = mounted.remount().unwrap();
                assert!(!file.exists(), "a TEMPORARY file survived the remount");
                Some(took.as_secs_f64())
            }
            _ => {
                let took = mounted
                    .remount()
                    .unwrap_or_else(|e| panic!("remounting {}: {e}", kind.id()));
                assert_eq!(
                    std::fs::read_to_string(&file).unwrap(),
                    text,
                    "{}: the file did not survive the remount",
                    kind.id()
                );
                mounted.usage().unwrap();
                Some(took.as_secs_f64())
            }
        };

        let started = Instant::now();
        mounted
            .teardown()
            .unwrap_or_else(|e| panic!("tearing down {}: {e}", kind.id()));
        let teardown_s = started.elapsed().as_secs_f64();
        dirs.assert_clean(kind.id());
        timings.push((kind.id(), setup_s, teardown_s, remount_s, usage));
    }
    for (id, setup_s, teardown_s, remount_s, usage) in timings {
        eprintln!(
            "{id:15} setup {setup_s:.3} s  teardown {teardown_s:.3} s  remount {}  ram {:?} store {:?}",
            remount_s.map(|s| format!("{s:.3} s")).unwrap_or_else(|| "-".into()),
            usage.ram_bytes,
            usage.store_bytes
        );
    }
}

#[test]
fn a_dropped_peer_tears_itself_down() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dirs = RunDirs::new("dropped");
    let env = dirs.env(PathBuf::from("rampart"));
    for kind in [PeerKind::Tmpfs, PeerKind::Ext4Ram] {
        if peer::check_tools(kind).is_err() {
            continue;
        }
        let mounted = peer::setup(kind, &env).unwrap();
        std::fs::write(mounted.dir().join("f"), b"x").unwrap();
        drop(mounted);
        dirs.assert_clean(kind.id());
    }
}

#[test]
fn a_busy_peer_is_detached_lazily_and_that_is_reported() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dirs = RunDirs::new("busy");
    let env = dirs.env(PathBuf::from("rampart"));
    let mounted = peer::setup(PeerKind::Tmpfs, &env).unwrap();
    let open_file = std::fs::File::create(mounted.dir().join("held-open")).unwrap();
    let err = mounted.teardown().expect_err("a busy unmount is reported");
    assert!(err.to_string().contains("umount -l"), "{err}");
    dirs.assert_clean("busy tmpfs");
    drop(open_file);
}

#[test]
fn a_failed_setup_undoes_what_it_did() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dirs = RunDirs::new("failed");
    // `false mkfs STORE` fails after the folders were made.
    let env = dirs.env(PathBuf::from("/bin/false"));
    if let Err(e) = peer::check_tools(PeerKind::Rampart) {
        panic!("this test needs the tools of the rampart peer: {e}");
    }
    let err = peer::setup(PeerKind::Rampart, &env)
        .err()
        .expect("setup must fail");
    assert!(err.to_string().contains("false"), "{err}");
    dirs.assert_clean("failed rampart setup");
}

#[test]
fn sweep_removes_what_a_killed_run_left() {
    require_root();
    if let Err(e) = peer::check_tools(PeerKind::Ext4Ram) {
        panic!("this test needs the tools of ext4-ram (losetup, mkfs.ext4): {e}");
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A pid that has ended: a child we started and reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    assert!(!pid_alive(dead));
    let tag = format!("rampart-bench-{dead}");
    let shm = Path::new("/dev/shm").join(&tag);
    let disk = Path::new(env!("CARGO_TARGET_TMPDIR")).join(&tag);
    let mnt = shm.join("tmpfs-1/mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(disk.join("ext4-disk-2")).unwrap();
    std::fs::create_dir_all(shm.join("ext4-disk-2")).unwrap();
    std::fs::write(
        shm.join("ext4-disk-2/disk-dir"),
        format!("{}\n", disk.display()),
    )
    .unwrap();
    // As a run makes them: root's, 0700 (the sweep touches nothing else).
    for dir in [&shm, &disk] {
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    // A look-alike anyone could have made (mode 0755) is left alone.
    let mut other = std::process::Command::new("true").spawn().unwrap();
    let other_dead = other.id();
    other.wait().unwrap();
    let look_alike = Path::new("/dev/shm").join(format!("rampart-bench-{other_dead}"));
    std::fs::create_dir_all(&look_alike).unwrap();
    std::fs::set_permissions(
        &look_alike,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let image = disk.join("ext4-disk-2/image");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    run(&[
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=1m",
        "tmpfs",
        mnt.to_str().unwrap(),
    ]);
    let image = std::fs::canonicalize(&image).unwrap();
    let device = run(&["losetup", "--find", "--show", image.to_str().unwrap()]);
    let device = device.trim();

    let log = sweep_stale();
    eprintln!("{log:#?}");
    assert!(log.iter().any(|l| l.starts_with("unmounted")), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.starts_with(&format!("detached {device}"))),
        "{log:?}"
    );
    assert!(!shm.exists(), "{log:?}");
    assert!(
        look_alike.exists(),
        "the sweep removed a folder a run did not make: {log:?}"
    );
    std::fs::remove_dir(&look_alike).unwrap();
    assert!(!disk.exists(), "{log:?}");
    assert!(loop_devices().iter().all(|(d, _)| d != device));
}

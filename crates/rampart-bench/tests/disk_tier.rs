//! The disk tier's benchmarks for real, at the tiny profile: the `host` peer, every disk-tier
//! workload on the peers that keep data on the disk (host, ext4-disk, rampart), and a whole
//! `rampart bench` run of them whose report names every workload and peer and passes its own
//! validation. Needs root (fails otherwise, rather than counting as passed without running).
//!
//! Ignored by default: the e2e tiny run (tests/e2e/test_bench.py) makes the same checks in CI,
//! and these took 106 s of it again. Run: `cargo test --release -p rampart-bench --test
//! disk_tier -- --ignored --test-threads=1`

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rampart_bench::cmd::Cancel;
use rampart_bench::peer::{self, PeerEnv, PeerKind};
use rampart_bench::profile::Profile;
use rampart_bench::results::CellStatus;
use rampart_bench::workload::{self, Ctx, Workload};
use rampart_bench::BenchOptions;

static SERIAL: Mutex<()> = Mutex::new(());

/// Beside the disk-tier workloads, the large-file workloads that already ran on every peer.
const DISK_WORKLOADS: [&str; 4] = [
    "disk-fio-4k-random",
    "disk-fio-1m-seq",
    "disk-write-amplification",
    "disk-mount-time",
];
const DISK_PEERS: [PeerKind; 3] = [PeerKind::Host, PeerKind::Ext4Disk, PeerKind::Rampart];

fn require_root() {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(
        root,
        "this test mounts file systems and needs root: run it as root (scripts/test does), or \
         leave it out explicitly with `--skip` (it did not run)"
    );
}

fn rampart_bin() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    ["target/release/rampart", "target/debug/rampart"]
        .iter()
        .map(|p| root.join(p))
        .find(|p| p.is_file())
}

/// A private folder pair (RAM, disk) as a run makes them, removed on drop.
struct Dirs {
    shm: PathBuf,
    disk: PathBuf,
}

impl Dirs {
    fn new(test: &str) -> Dirs {
        use std::os::unix::fs::DirBuilderExt;
        // Short (rampart's control socket lives in the store: a path under 108 bytes), and
        // not the runner's own name (rampart-bench-PID), which the run test makes.
        let tag = format!("rb-dt-{}", std::process::id());
        let dirs = Dirs {
            shm: Path::new("/dev/shm").join(&tag).join(test),
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
}

impl Drop for Dirs {
    fn drop(&mut self) {
        for dir in [&self.shm, &self.disk] {
            let _ = std::fs::remove_dir_all(dir);
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

fn disk_workloads() -> Vec<Box<dyn Workload>> {
    workload::all()
        .into_iter()
        .filter(|w| DISK_WORKLOADS.contains(&w.id()))
        .collect()
}

#[test]
#[ignore = "tests/e2e/test_bench.py's tiny run covers it in CI (every disk workload on every disk peer, the write amplification bound, a validated report); run with --ignored"]
fn every_disk_workload_runs_on_every_disk_peer() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(disk_workloads().len(), DISK_WORKLOADS.len());
    let dirs = Dirs::new("workloads");
    let bin = rampart_bin();
    let env = PeerEnv {
        shm_dir: dirs.shm.clone(),
        disk_dir: dirs.disk.clone(),
        rampart_bin: bin.clone().unwrap_or_else(|| PathBuf::from("rampart")),
        rampart_args: Vec::new(),
        profile: Profile::Tiny,
        cancel: Cancel::global(),
    };
    for kind in DISK_PEERS {
        if peer::check_tools(kind).is_err() || (kind == PeerKind::Rampart && bin.is_none()) {
            eprintln!("{}: skipped (tools or binary missing)", kind.id());
            continue;
        }
        let mut mounted =
            peer::setup(kind, &env).unwrap_or_else(|e| panic!("setting up {}: {e}", kind.id()));
        let disk = mounted
            .disk_path()
            .expect("a disk peer names its data on the disk");
        assert!(disk.exists(), "{}: {}", kind.id(), disk.display());
        for w in disk_workloads() {
            if let Some(reason) = w.unsupported_on(kind) {
                assert_eq!(
                    (w.id(), kind),
                    ("disk-mount-time", PeerKind::Host),
                    "{reason}"
                );
                continue;
            }
            if w.check_tools().is_err() {
                eprintln!(
                    "{} on {}: skipped: {:?}",
                    w.id(),
                    kind.id(),
                    w.check_tools().err()
                );
                continue;
            }
            let dir = mounted.dir().join(format!("bench-{}", w.id()));
            std::fs::create_dir(&dir).unwrap();
            let scratch = dirs.shm.join("scratch");
            std::fs::create_dir_all(&scratch).unwrap();
            let progress = |_: &str| {};
            let mut ctx = Ctx {
                dir: dir.clone(),
                peer: mounted.as_mut(),
                profile: Profile::Tiny,
                scratch,
                cancel: Cancel::global(),
                progress: &progress,
            };
            let outcome = w
                .run(&mut ctx)
                .unwrap_or_else(|e| panic!("{} on {}: {e}", w.id(), kind.id()));
            eprintln!(
                "{} on {}: {:?}; {:?}",
                w.id(),
                kind.id(),
                outcome.metrics,
                outcome.notes
            );
            assert!(!outcome.metrics.is_empty());
            for m in &outcome.metrics {
                assert!(m.value.is_finite() && m.value > 0.0, "{}: {m:?}", w.id());
            }
            if w.id() == "disk-write-amplification" {
                // Every fsync'd byte reached the disk at least once.
                assert!(outcome.metrics[0].value >= 0.99, "{:?}", outcome.metrics);
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
        mounted
            .teardown()
            .unwrap_or_else(|e| panic!("tearing down {}: {e}", kind.id()));
    }
}

#[test]
#[ignore = "tests/e2e/test_bench.py's tiny run covers it in CI (every disk workload on every disk peer, the write amplification bound, a validated report); run with --ignored"]
fn a_disk_tier_run_reports_every_workload_on_every_peer() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bin) = rampart_bin() else {
        panic!("build the rampart binary first (cargo build --release -p rampart-cli)");
    };
    let dirs = Dirs::new("run");
    let out = dirs.shm.join("report");
    let peers = ["rampart", "host", "ext4-disk", "tmpfs"];
    let opts = BenchOptions {
        profile: Profile::Tiny,
        only: vec!["disk".into(), "mbfs-copy".into()],
        peers: peers.iter().map(|p| p.to_string()).collect(),
        out: out.clone(),
        repetitions: None,
        rampart_bin: bin,
        rampart_args: Vec::new(),
        disk_dir: dirs.disk.clone(),
        command_line: "disk_tier test".into(),
    };
    let (results, report) = rampart_bench::run(&opts).unwrap();
    let ids: Vec<&str> = results.workloads.iter().map(|w| w.id).collect();
    let mut expected = vec!["mbfs-copy"];
    expected.extend(DISK_WORKLOADS);
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    expected.sort_unstable();
    assert_eq!(sorted, expected);
    for w in &results.workloads {
        for cell in &w.cells {
            let at = format!("{} on {}", w.id, cell.peer.id());
            match &cell.status {
                CellStatus::Measured => assert!(!cell.runs.is_empty(), "{at}"),
                CellStatus::Unsupported(reason) => {
                    assert!(!reason.trim().is_empty(), "{at}");
                    let expected_gap = cell.peer == PeerKind::Tmpfs
                        || (w.id == "disk-mount-time" && cell.peer == PeerKind::Host);
                    assert!(expected_gap, "{at}: {reason}");
                }
                other => panic!("{at}: {other:?}"),
            }
        }
    }
    let text = std::fs::read_to_string(&report).unwrap();
    for w in &results.workloads {
        assert!(
            text.contains(w.title),
            "{} missing from the report",
            w.title
        );
    }
    for p in peers {
        assert!(text.contains(p), "{p} missing from the report");
    }
    assert!(
        text.contains("large-file threshold"),
        "rampart's threshold is not reported"
    );
    let problems = rampart_bench::report::validate(&out).unwrap();
    assert!(problems.is_empty(), "{problems:#?}");
}

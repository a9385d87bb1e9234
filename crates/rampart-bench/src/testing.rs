//! Test support: a "peer" that is just an existing directory, and a context to run a workload
//! on it at the tiny profile.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cmd::Cancel;
use crate::error::{BenchError, Result};
use crate::peer::{Mounted, PeerKind, Usage};
use crate::profile::Profile;
use crate::workload::{Ctx, Outcome, Workload};

/// An existing directory posing as a mounted peer of `kind`; it cannot remount.
pub struct DirPeer {
    pub dir: PathBuf,
    pub kind: PeerKind,
}

impl Mounted for DirPeer {
    fn kind(&self) -> PeerKind {
        self.kind
    }
    fn dir(&self) -> &Path {
        &self.dir
    }
    fn remount(&mut self) -> Result<Duration> {
        Err(BenchError::Other(
            "a plain directory cannot be remounted".into(),
        ))
    }
    fn usage(&self) -> Result<Usage> {
        Ok(Usage::default())
    }
    /// The directory itself: where it is, RAM or disk, is where its data is.
    fn disk_path(&self) -> Option<PathBuf> {
        Some(self.dir.clone())
    }
    fn settings(&self) -> Vec<(String, String)> {
        vec![("directory".into(), self.dir.display().to_string())]
    }
    fn teardown(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// /dev/shm when it exists, so tests stay off the real disk; else the temporary folder.
fn ram_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A fresh temporary directory in RAM (see [`ram_base`]), removed when dropped.
pub fn shm_tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(ram_base()).expect("making a temporary directory")
}

/// Runs `w` once at the tiny profile in a fresh temporary directory in RAM.
pub fn run_tiny(w: &dyn Workload) -> Result<Outcome> {
    run_at(w, Profile::Tiny, &ram_base())
}

/// Runs `w` once at `profile` in a fresh folder under `base` (a mounted peer, say).
pub fn run_at(w: &dyn Workload, profile: Profile, base: &Path) -> Result<Outcome> {
    let top = tempfile::tempdir_in(base).map_err(|e| {
        BenchError::io(
            format!("making a temporary directory in {}", base.display()),
            e,
        )
    })?;
    let dir = top.path().join("work");
    std::fs::create_dir(&dir).map_err(|e| BenchError::io("mkdir", e))?;
    run_in(w, profile, &dir)
}

/// Runs `w` once at `profile` in the existing folder `dir`, whose parent poses as the peer;
/// the scratch folder is a fresh one in RAM.
pub fn run_in(w: &dyn Workload, profile: Profile, dir: &Path) -> Result<Outcome> {
    run_in_as(w, profile, dir, PeerKind::Tmpfs)
}

/// Runs `w` once at `profile` in a fresh folder under `base`, which poses as a peer of `kind`.
pub fn run_in_on(
    w: &dyn Workload,
    profile: Profile,
    base: &Path,
    kind: PeerKind,
) -> Result<Outcome> {
    let dir = base.join("work");
    std::fs::create_dir(&dir).map_err(|e| BenchError::io("mkdir", e))?;
    run_in_as(w, profile, &dir, kind)
}

fn run_in_as(w: &dyn Workload, profile: Profile, dir: &Path, kind: PeerKind) -> Result<Outcome> {
    let scratch = shm_tempdir();
    let mut peer = DirPeer {
        dir: dir.parent().unwrap_or(dir).to_path_buf(),
        kind,
    };
    let progress = |_: &str| {};
    let mut ctx = Ctx {
        dir: dir.to_path_buf(),
        peer: &mut peer,
        profile,
        scratch: scratch.path().to_path_buf(),
        cancel: Cancel::global(),
        progress: &progress,
    };
    w.run(&mut ctx)
}

/// Times each of `workloads` whose id contains `BENCH_ONLY` (all without it) at
/// `BENCH_PROFILE` (default quick) in the folder `BENCH_DIR` (e.g. a rampart or
/// fuse-overlayfs mount), and prints each run's time, metrics and notes. For the ignored
/// `time_a_profile` tests of the workloads.
pub fn time_a_profile_from_env(workloads: Vec<Box<dyn Workload>>) {
    let dir = std::env::var("BENCH_DIR").expect("BENCH_DIR");
    let profile =
        Profile::parse(&std::env::var("BENCH_PROFILE").unwrap_or("quick".into())).unwrap();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    for w in workloads.iter().filter(|w| w.id().contains(&only)) {
        let started = std::time::Instant::now();
        match run_at(w.as_ref(), profile, Path::new(&dir)) {
            Ok(o) => println!(
                "{} {}: {:.2} s; {}; {}",
                w.id(),
                profile.name(),
                started.elapsed().as_secs_f64(),
                o.metrics
                    .iter()
                    .map(|m| match m.x {
                        Some(x) => format!("{}@{x} {:.0} {}", m.name, m.value, m.unit),
                        None => format!("{} {:.0} {}", m.name, m.value, m.unit),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                o.notes.join("; ")
            ),
            Err(e) => println!("{} {}: FAILED {e}", w.id(), profile.name()),
        }
    }
}

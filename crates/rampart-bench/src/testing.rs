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
    fn settings(&self) -> Vec<(String, String)> {
        vec![("directory".into(), self.dir.display().to_string())]
    }
    fn teardown(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Runs `w` once at the tiny profile in a fresh temporary directory (on /dev/shm when it
/// exists, so tests stay off the real disk).
pub fn run_tiny(w: &dyn Workload) -> Result<Outcome> {
    let base = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .map_err(|e| BenchError::io("making a temporary directory", e))?;
    let dir = base.path().join("work");
    let scratch = base.path().join("scratch");
    std::fs::create_dir_all(&dir).map_err(|e| BenchError::io("mkdir", e))?;
    std::fs::create_dir_all(&scratch).map_err(|e| BenchError::io("mkdir", e))?;
    let mut peer = DirPeer {
        dir: base.path().to_path_buf(),
        kind: PeerKind::Tmpfs,
    };
    let progress = |_: &str| {};
    let mut ctx = Ctx {
        dir,
        peer: &mut peer,
        profile: Profile::Tiny,
        scratch,
        cancel: Cancel::global(),
        progress: &progress,
    };
    w.run(&mut ctx)
}

//! PostMark in Conquest's configuration (§5.2: 512 B–16 KiB files, 512 B blocks, reads 4×
//! appends, creates = deletes, √files subdirectories) run through rampart's library
//! (`rampart_core::fs`, no system call per file operation) on the rampart peer, and through
//! system calls on tmpfs and ext4-ram: issue 17's benchmark of the embeddable file system.
//! The same driver ([`super::engine`]) runs both ways, so the operations are identical.

use std::path::{Path, PathBuf};

use rampart_core::fs::{File, Fs, OpenOptions};

use super::engine::{run_on, Config, Syscalls, Target};
use super::{describe_counts, secs, BIAS_CREATE, BIAS_READ, BLOCK_BYTES, SEED, SMALL};
use crate::error::{BenchError, Result};
use crate::peer::PeerKind;
use crate::profile::Profile;
use crate::workload::{Ctx, Metric, Outcome, PlotKind, Workload};

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(LibraryPostmark)]
}

/// (files, transactions) at a profile; the full one is the paper's.
fn scale(profile: Profile) -> (u32, u32) {
    profile.pick((50, 200), (2_000, 20_000), (10_000, 200_000))
}

fn config(profile: Profile) -> Config {
    let (files, transactions) = scale(profile);
    Config {
        files,
        transactions,
        subdirectories: super::subdirectories(files),
        small: SMALL,
        large: SMALL,
        large_per_mille: 0,
        read_block_bytes: BLOCK_BYTES,
        write_block_bytes: BLOCK_BYTES,
        bias_read: BIAS_READ,
        bias_create: BIAS_CREATE,
        seed: SEED,
    }
}

/// rampart's path API as the driver's target.
struct Library(Fs);

impl Target for Library {
    type File = File;
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        self.0.create_dir(path)
    }
    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        self.0.remove_dir(path)
    }
    fn create(&self, path: &Path) -> std::io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o644)
            .open(&self.0, path)
    }
    fn open_read(&self, path: &Path) -> std::io::Result<File> {
        File::open(&self.0, path)
    }
    fn open_append(&self, path: &Path) -> std::io::Result<File> {
        OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.0, path)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.0.remove_file(path)
    }
}

/// Where the library's store goes: the temporary folder ($TMPDIR, normally on the real disk,
/// like the rampart peer's store), one per process.
fn store_path() -> PathBuf {
    std::env::temp_dir().join(format!("rampart-bench-library-{}", std::process::id()))
}

struct LibraryPostmark;

impl LibraryPostmark {
    /// One run through the library on a fresh store with the default persistence; the final
    /// checkpoint at close is not timed (PostMark does not time an unmount either).
    fn run_library(
        &self,
        cfg: &Config,
        ctx: &Ctx,
    ) -> Result<(super::Counts, super::engine::RunTimes)> {
        let store = store_path();
        let _ = std::fs::remove_dir_all(&store);
        let fail = |what: &str, e: std::io::Error| {
            BenchError::Other(format!("library PostMark: {what} {}: {e}", store.display()))
        };
        rampart_core::store::mkfs(&store).map_err(|e| fail("mkfs", std::io::Error::other(e)))?;
        let outcome = (|| {
            let fs = Fs::open(&store).map_err(|e| fail("opening", e))?;
            fs.create_dir("/postmark")
                .map_err(|e| fail("creating /postmark in", e))?;
            let target = Library(fs);
            let result = run_on(&target, cfg, Path::new("/postmark"), ctx.cancel);
            target.0.close().map_err(|e| fail("closing", e))?;
            result
        })();
        let removed = std::fs::remove_dir_all(&store);
        let outcome = outcome?;
        removed.map_err(|e| fail("removing", e))?;
        Ok(outcome)
    }
}

impl Workload for LibraryPostmark {
    fn id(&self) -> &'static str {
        "library-postmark"
    }

    fn title(&self) -> &'static str {
        "PostMark (Conquest configuration) through rampart's library vs system calls"
    }

    fn source(&self) -> &'static str {
        "issue 17 item 6; MBFS (USENIX 1999) §5.1's raw interface; Conquest (USENIX 2002) §5.2's \
         PostMark configuration"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let (files, transactions) = scale(profile);
        vec![
            (
                "rampart".into(),
                "through the library (rampart_core::fs: no mount, no system call per file \
                 operation), a fresh store in $TMPDIR with the default persistence (commit \
                 within 5 s); the final checkpoint at close is not timed"
                    .into(),
            ),
            ("others".into(), "system calls on the mounted peer".into()),
            ("files in the pool".into(), files.to_string()),
            ("transactions".into(), transactions.to_string()),
            (
                "sizes".into(),
                format!("{}–{} B, uniform", SMALL.low_bytes, SMALL.high_bytes),
            ),
            (
                "subdirectories".into(),
                super::subdirectories(files).to_string(),
            ),
            (
                "bias".into(),
                format!("read {BIAS_READ}/10, create {BIAS_CREATE}/10"),
            ),
            ("block size".into(), format!("{BLOCK_BYTES} B")),
            ("seed".into(), SEED.to_string()),
        ]
    }

    fn unsupported_on(&self, peer: PeerKind) -> Option<String> {
        match peer {
            PeerKind::Tmpfs | PeerKind::Ext4Ram | PeerKind::Rampart => None,
            _ => Some(
                "compares rampart's library with tmpfs and ext4-ram through system calls only"
                    .into(),
            ),
        }
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let cfg = config(ctx.profile);
        let library = ctx.peer.kind() == PeerKind::Rampart;
        (ctx.progress)(if library {
            "through the library"
        } else {
            "through system calls"
        });
        let (counts, times) = if library {
            self.run_library(&cfg, ctx)?
        } else {
            run_on(&Syscalls, &cfg, &ctx.dir, ctx.cancel)?
        };
        let mut outcome = Outcome::default();
        outcome.metrics.push(Metric::rate(
            "transactions",
            "tx/s",
            cfg.transactions as f64,
            times.transactions,
        ));
        outcome.metrics.push(Metric::rate(
            "creation alone",
            "files/s",
            counts.created_alone as f64,
            times.create_pool,
        ));
        outcome.metrics.push(Metric::rate(
            "deletion alone",
            "files/s",
            counts.deleted_alone as f64,
            times.delete_rest,
        ));
        outcome.notes.push(format!(
            "{}: {}; phases: pool {:.4} s, transactions {:.4} s, deleting the rest {:.4} s",
            if library { "library" } else { "system calls" },
            describe_counts(&counts),
            secs(times.create_pool),
            secs(times.transactions),
            secs(times.delete_rest)
        ));
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library and system calls perform the same operations (same counts), and the
    /// library leaves nothing behind.
    #[test]
    fn the_library_runs_the_same_operations_as_system_calls() {
        let cfg = config(Profile::Tiny);
        let shm = crate::testing::shm_tempdir();
        let (syscalls, _) =
            run_on(&Syscalls, &cfg, shm.path(), crate::cmd::Cancel::global()).unwrap();
        let fs = Fs::in_memory();
        fs.create_dir("/pm").unwrap();
        let target = Library(fs.clone());
        let (library, _) = run_on(
            &target,
            &cfg,
            Path::new("/pm"),
            crate::cmd::Cancel::global(),
        )
        .unwrap();
        assert_eq!(syscalls, library);
        assert!(library.read > 0 && library.appended > 0 && library.deleted > 0);
        assert_eq!(fs.read_dir("/pm").unwrap().count(), 0);
    }
}

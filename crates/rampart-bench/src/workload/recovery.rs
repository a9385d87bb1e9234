//! Recovery: how long a file system holding many files takes to mount again, and what each file
//! costs in RAM and in the store (DESIGN.md §7). For a memory-first file system, which must
//! load its whole tree at mount, this is the price of its speed; for the disk file systems the
//! mount reads little and the figure is their baseline.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::data::{close_checked, group_digits, io_err, sync_and_fsync_dir};
use super::{Ctx, Metric, Outcome, PlotKind, Workload};
use crate::cmd::Cancel;
use crate::error::{BenchError, Result};
use crate::peer::{PeerKind, Usage};
use crate::profile::Profile;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(Recovery)]
}

/// Directories and empty files per directory: (directories, files each).
fn layout(profile: Profile) -> (usize, usize) {
    profile.pick((10, 100), (10, 1_000), (FULL_DIRS, 1_000))
}

/// Full size: bench/persistence.py used 1,000,000 files in 1,000 directories. Full makes
/// 200,000: ext4 made with default options on the Full profile's 4 GiB device has 262,144
/// inodes, and through FUSE creating 1,000,000 files takes about a minute.
const FULL_DIRS: usize = 200;
const PAPER_FILES: usize = 1_000_000;
/// Threads creating the files (each takes every n-th directory): enough to keep a FUSE daemon's
/// workers busy on a 2-core machine.
const CREATOR_THREADS: usize = 4;
/// Files checked after the remount, spread evenly over all of them.
const VERIFY_SAMPLE: usize = 1_000;

struct Recovery;

impl Workload for Recovery {
    fn id(&self) -> &'static str {
        "recovery"
    }

    fn title(&self) -> &'static str {
        "Recovery: mount time and bytes per file in RAM and in the store"
    }

    fn source(&self) -> &'static str {
        "DESIGN.md §7 (recovery time, bytes per file); bench/persistence.py and \
         bench/memory_per_file.py"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let (dirs, per_dir) = layout(profile);
        let files = dirs * per_dir;
        let mut count = format!(
            "{} empty files in {dirs} directories of {} (names d0000/f0000000 …)",
            group_digits(files as u64),
            group_digits(per_dir as u64)
        );
        if profile == Profile::Full {
            count.push_str(&format!(
                "; bench/persistence.py: {}, scaled down to fit the 262,144 inodes of a \
                 default ext4 on the 4 GiB device and to create through FUSE in seconds",
                group_digits(PAPER_FILES as u64)
            ));
        }
        vec![
            ("files".into(), count),
            (
                "creation".into(),
                format!(
                    "{CREATOR_THREADS} threads, each taking every {CREATOR_THREADS}th directory; \
                     open(O_CREAT|O_EXCL|O_WRONLY) + close per file; the directories are made \
                     first, before the baseline, so only the files are in the deltas"
                ),
            ),
            (
                "per-file figures".into(),
                "(usage after − usage before) / files, from the peer's own usage measure (its \
                 method is in each run's notes); \"before\" taken with the directories made, \
                 synced and remounted once (untimed, so earlier changes are settled, e.g. a \
                 journal folded into a checkpoint); \"after\" taken once the files were made \
                 durable (syncfs + fsync of the directory), and again after the timed remount; \
                 a delta that is not positive is reported as not measurable"
                    .into(),
            ),
            (
                "mount time".into(),
                "after a clean unmount (nothing to replay): the peer's remount (unmount, mount \
                 the same data) timed from the mount command's start until the root can be \
                 listed; caches dropped (sync; echo 3 > /proc/sys/vm/drop_caches) just before, \
                 so the mount reads cold storage"
                    .into(),
            ),
            (
                "mount time after kill -9".into(),
                "crash recovery, measured first, right after the files were made durable: the \
                 daemon killed with SIGKILL, its dead mount detached (fusermount3 -u -z), caches \
                 dropped, then the mount timed as above; it replays the journal (its length at \
                 the kill and the ops replayed are in the notes). Only peers with a daemon \
                 (rampart); the files are checked after it too"
                    .into(),
            ),
            (
                "check after the remount".into(),
                format!(
                    "{} files spread evenly over all are present, regular and empty, and the \
                     first and last directories hold exactly {} entries; anything else fails \
                     the run",
                    group_digits(VERIFY_SAMPLE.min(files) as u64),
                    group_digits(per_dir as u64)
                ),
            ),
        ]
    }

    fn unsupported_on(&self, peer: PeerKind) -> Option<String> {
        match peer {
            PeerKind::Tmpfs | PeerKind::FuseOverlay | PeerKind::RampartTemporary => Some(
                "volatile: a remount loses the data, so there is nothing to recover (and no \
                 store to measure)"
                    .into(),
            ),
            PeerKind::Host | PeerKind::HostFsync => Some(
                "the host's file system is the machine's own: the bench does not unmount it, \
                 so there is no mount to time"
                    .into(),
            ),
            PeerKind::JuiceFs => {
                Some("the bench does not remount JuiceFS: its recovery is not measured".into())
            }
            _ => None,
        }
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let (dirs, per_dir) = layout(ctx.profile);
        let tree = FileTree {
            root: ctx.dir.clone(),
            dirs,
            per_dir,
        };
        let files = tree.files() as f64;
        let mut outcome = Outcome::default();

        (ctx.progress)("making directories");
        tree.make_dirs()?;
        sync_and_fsync_dir(&ctx.dir)?;
        // A first remount (untimed) settles what came before — e.g. a journal that a mount
        // folds into a checkpoint — so the baseline is in the same state as the reading after
        // the timed remount.
        ctx.peer.remount()?;
        let before = ctx.peer.usage()?;

        (ctx.progress)(&format!(
            "creating {} files",
            group_digits(tree.files() as u64)
        ));
        let created_in = tree.create_files(CREATOR_THREADS, ctx.cancel)?;
        sync_and_fsync_dir(&ctx.dir)?;
        let after = ctx.peer.usage()?;

        ctx.cancel.check()?;
        // First the crash: the creations are still in the journal (unless a background
        // checkpoint folded some in), so the mount replays them.
        (ctx.progress)("kill -9 and remounting");
        let crash = ctx.peer.crash_remount()?;
        if crash.is_some() {
            (ctx.progress)("checking the files after the crash");
            tree.verify(VERIFY_SAMPLE)?;
        }

        (ctx.progress)("remounting");
        // remount() drops the caches itself, between its unmount and its mount. The clean
        // unmount leaves nothing to replay.
        let mount_time = ctx.peer.remount()?;
        let remounted = ctx.peer.usage()?;

        (ctx.progress)("checking the files");
        tree.verify(VERIFY_SAMPLE)?;

        outcome
            .metrics
            .push(Metric::lower("mount time", "s", mount_time.as_secs_f64()));
        match &crash {
            Some(crash) => {
                outcome.metrics.push(Metric::lower(
                    "mount time after kill -9",
                    "s",
                    crash.mount_time.as_secs_f64(),
                ));
                outcome.notes.push(format!(
                    "after kill -9: a journal of {} bytes to replay at the kill; the daemon's \
                     recovery: {}",
                    group_digits(crash.journal_bytes),
                    crash.recovered.as_deref().unwrap_or("not logged")
                ));
            }
            None => outcome.notes.push(
                "mount time after kill -9: not measured (no daemon to kill: a kernel file \
                 system recovers from a crash only at a power cut, which this run does not \
                 make)"
                    .into(),
            ),
        }
        outcome
            .metrics
            .push(Metric::rate("create", "files/s", files, created_in));
        let ram: fn(&Usage) -> Option<u64> = |u| u.ram_bytes;
        let store: fn(&Usage) -> Option<u64> = |u| u.store_bytes;
        let per_file = [
            ("RAM per file", &after, ram),
            ("store per file", &after, store),
            ("RAM per file, remounted", &remounted, ram),
            ("store per file, remounted", &remounted, store),
        ];
        for (name, later, field) in per_file {
            match per_file_bytes(field(&before), field(later), files) {
                Ok(Some(v)) => outcome.metrics.push(Metric::lower(name, "B/file", v)),
                Ok(None) => {}
                Err(why) => outcome.notes.push(format!("{name}: not measurable, {why}")),
            }
        }
        outcome.notes.push(format!(
            "usage (RAM, store bytes): before {}, after creating {}, after the remount {}; \
             measured by: {}",
            usage_text(&before),
            usage_text(&after),
            usage_text(&remounted),
            after.method
        ));
        Ok(outcome)
    }
}

/// Bytes per file from two readings of one usage figure: None when the peer does not measure
/// it, Err when the delta is not positive (noise larger than the files' cost).
fn per_file_bytes(
    before: Option<u64>,
    after: Option<u64>,
    files: f64,
) -> Result<Option<f64>, String> {
    match (before, after) {
        (Some(b), Some(a)) if a > b => Ok(Some((a - b) as f64 / files)),
        (Some(b), Some(a)) => Err(format!("it went from {b} to {a} bytes")),
        _ => Ok(None),
    }
}

fn usage_text(u: &Usage) -> String {
    let show = |v: Option<u64>| v.map_or("—".to_string(), group_digits);
    format!("({}, {})", show(u.ram_bytes), show(u.store_bytes))
}

/// `dirs` directories `dNNNN` under `root`, each with `per_dir` empty files `fNNNNNNN`
/// (numbered across the whole tree).
struct FileTree {
    root: PathBuf,
    dirs: usize,
    per_dir: usize,
}

impl FileTree {
    fn files(&self) -> usize {
        self.dirs * self.per_dir
    }

    fn dir_path(&self, d: usize) -> PathBuf {
        self.root.join(format!("d{d:04}"))
    }

    fn file_path(&self, n: usize) -> PathBuf {
        self.dir_path(n / self.per_dir).join(format!("f{n:07}"))
    }

    fn make_dirs(&self) -> Result<()> {
        for d in 0..self.dirs {
            let path = self.dir_path(d);
            std::fs::create_dir(&path).map_err(io_err("creating", &path))?;
        }
        Ok(())
    }

    /// Creates every file with `threads` threads; the time from start to the last one's end.
    fn create_files(&self, threads: usize, cancel: &Cancel) -> Result<Duration> {
        let threads = threads.clamp(1, self.dirs.max(1));
        let started = Instant::now();
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || -> Result<()> {
                        for d in (t..self.dirs).step_by(threads) {
                            if cancel.is_set() {
                                return Err(BenchError::Interrupted);
                            }
                            for n in d * self.per_dir..(d + 1) * self.per_dir {
                                let path = self.file_path(n);
                                let file = OpenOptions::new()
                                    .write(true)
                                    .create_new(true)
                                    .open(&path)
                                    .map_err(io_err("creating", &path))?;
                                close_checked(file, &path)?;
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(BenchError::Other("a creator thread panicked".into()))
                    })
                })
                .collect()
        });
        let elapsed = started.elapsed();
        cancel.check()?;
        results.into_iter().collect::<Result<Vec<()>>>()?;
        Ok(elapsed)
    }

    /// Checks `sample` files spread over the tree (present, regular, empty) and the exact entry
    /// count of the first and last directories.
    fn verify(&self, sample: usize) -> Result<()> {
        let files = self.files();
        let sample = sample.clamp(1, files.max(1));
        for k in 0..sample {
            let n = k * files / sample;
            let path = self.file_path(n);
            let meta = std::fs::symlink_metadata(&path).map_err(|e| {
                BenchError::Other(format!(
                    "after the remount, {} is gone: {e}",
                    path.display()
                ))
            })?;
            if !meta.is_file() || meta.len() != 0 {
                return Err(BenchError::Other(format!(
                    "after the remount, {} is not an empty regular file ({:?}, {} bytes)",
                    path.display(),
                    meta.file_type(),
                    meta.len()
                )));
            }
        }
        for d in [0, self.dirs.saturating_sub(1)] {
            let path = self.dir_path(d);
            let entries = std::fs::read_dir(&path)
                .map_err(|e| {
                    BenchError::Other(format!(
                        "after the remount, listing {}: {e}",
                        path.display()
                    ))
                })?
                .count();
            if entries != self.per_dir {
                return Err(BenchError::Other(format!(
                    "after the remount, {} holds {entries} entries, not {}",
                    path.display(),
                    self.per_dir
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    fn tree_in(dir: &Path, dirs: usize, per_dir: usize) -> FileTree {
        FileTree {
            root: dir.to_path_buf(),
            dirs,
            per_dir,
        }
    }

    #[test]
    fn created_files_verify_and_a_missing_one_is_caught() {
        let base = crate::testing::shm_tempdir();
        let tree = tree_in(base.path(), 7, 30);
        tree.make_dirs().unwrap();
        let elapsed = tree.create_files(3, Cancel::global()).unwrap();
        assert!(elapsed > Duration::ZERO);
        tree.verify(50).unwrap();
        assert_eq!(std::fs::read_dir(tree.dir_path(3)).unwrap().count(), 30);
        // A sampled file (n = 0) that vanished fails the check.
        std::fs::remove_file(tree.file_path(0)).unwrap();
        let err = tree.verify(50).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }

    #[test]
    fn a_short_directory_is_caught() {
        let base = crate::testing::shm_tempdir();
        let tree = tree_in(base.path(), 3, 20);
        tree.make_dirs().unwrap();
        tree.create_files(2, Cancel::global()).unwrap();
        // Not sampled with a sample of 1 (only n = 0 is), but the last directory is counted.
        std::fs::remove_file(tree.file_path(59)).unwrap();
        let err = tree.verify(1).unwrap_err();
        assert!(err.to_string().contains("entries"), "{err}");
    }

    #[test]
    fn per_file_bytes_needs_both_readings_and_growth() {
        assert_eq!(per_file_bytes(Some(100), Some(1100), 10.0), Ok(Some(100.0)));
        assert_eq!(per_file_bytes(None, Some(1100), 10.0), Ok(None));
        assert_eq!(per_file_bytes(Some(100), None, 10.0), Ok(None));
        assert!(per_file_bytes(Some(100), Some(100), 10.0).is_err());
    }

    #[test]
    fn volatile_peers_are_unsupported_with_a_reason() {
        assert!(Recovery
            .unsupported_on(PeerKind::Tmpfs)
            .unwrap()
            .contains("volatile"));
        assert!(Recovery.unsupported_on(PeerKind::FuseOverlay).is_some());
        assert!(Recovery.unsupported_on(PeerKind::Rampart).is_none());
        assert!(Recovery.unsupported_on(PeerKind::Ext4Disk).is_none());
    }
}

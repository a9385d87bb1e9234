//! fio on the disk tier: the DFS §4.3 microbenchmarks (4 KiB random and 1 MiB sequential
//! reads and writes, 1–32 threads) on files far above rampart's large-file threshold, so
//! rampart keeps them on the disk, against the host file system and ext4-disk.
//!
//! Unlike the RAM-sized `fio-*` workloads, every read run starts from a cold cache: `sync;
//! echo 3 > drop_caches` before each run (every peer alike: that also empties the page cache
//! of rampart's host files, which fio's own invalidate=1 cannot reach through FUSE), and no
//! block is read twice in a run (no time_based: a job stops after one pass over its file or
//! at the runtime, whichever comes first; the random map touches each block once per pass).
//! So reads measure the disk and the path to it, not the page cache. O_DIRECT is not used:
//! whether a FUSE open honours it depends on the daemon and the passthrough setup, so it
//! would measure different paths on different peers.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};
use crate::peer::{drop_caches, PeerKind};
use crate::profile::Profile;
use crate::workload::fio::{
    expect_group, fio_path, fio_version, lay_out, run_fio, Direction, Pattern, LAYOUT_SEED,
};
use crate::workload::{Ctx, Metric, Outcome, PlotKind, Workload};

const MIB: u64 = 1 << 20;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(DiskFio {
            pattern: Pattern::Random4k,
        }),
        Box::new(DiskFio {
            pattern: Pattern::Sequential1m,
        }),
    ]
}

/// Full: the brief's 1, 4, 8, 16 and 32 threads (DFS: 1–32).
fn thread_counts(profile: Profile) -> &'static [u32] {
    profile.pick(&[1, 2], &[1, 8], &[1, 4, 8, 16, 32])
}

/// Each thread's file: above the 1 MiB threshold at every profile; 256 MiB in full (8 GiB
/// at 32 threads, laid out in about half a minute on this machine's disk).
fn file_bytes_per_thread(profile: Profile) -> u64 {
    profile.pick(4 * MIB, 32 * MIB, 256 * MIB)
}

/// Longest a read or write run lasts (fio's runtime, not time_based: one pass at most).
fn runtime_ms(profile: Profile) -> u64 {
    profile.pick(200, 1_000, 3_000)
}

fn max_threads(profile: Profile) -> u32 {
    thread_counts(profile).iter().copied().max().unwrap_or(1)
}

/// One direction of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Read,
    Write,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Read => "read",
            Way::Write => "write",
        }
    }
}

pub struct DiskFio {
    pattern: Pattern,
}

impl DiskFio {
    fn block(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "4k",
            Pattern::Sequential1m => "1m",
        }
    }

    fn rw(&self, way: Way) -> &'static str {
        match (self.pattern, way) {
            (Pattern::Random4k, Way::Read) => "randread",
            (Pattern::Random4k, Way::Write) => "randwrite",
            (Pattern::Sequential1m, Way::Read) => "read",
            (Pattern::Sequential1m, Way::Write) => "write",
        }
    }

    fn unit(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "IOPS",
            Pattern::Sequential1m => "MiB/s",
        }
    }

    fn figure(&self, d: &Direction) -> f64 {
        match self.pattern {
            Pattern::Random4k => d.iops,
            Pattern::Sequential1m => d.bw_bytes / MIB as f64,
        }
    }

    /// One run: `threads` jobs of one direction. Not time_based: each job stops after one
    /// pass over its file or at the runtime.
    fn job_file(&self, dir: &Path, threads: u32, way: Way, profile: Profile) -> String {
        let end = if way == Way::Write {
            "end_fsync=1\n"
        } else {
            ""
        };
        format!(
            "[global]\n\
             directory={}\n\
             filename_format=data.$jobnum\n\
             ioengine=psync\n\
             direct=0\n\
             thread\n\
             numjobs={threads}\n\
             size={}m\n\
             runtime={}ms\n\
             invalidate=1\n\
             group_reporting\n\
             bs={}\n\
             \n\
             [{}]\n\
             rw={}\n\
             {end}",
            dir.display(),
            file_bytes_per_thread(profile) / MIB,
            runtime_ms(profile),
            self.block(),
            way.name(),
            self.rw(way),
        )
    }

    fn one_run(&self, ctx: &mut Ctx, fio: &Path, threads: u32, way: Way) -> Result<Direction> {
        // Cold: nothing of any peer's files (rampart's host files included) in the cache.
        drop_caches()?;
        let timeout = Duration::from_millis(2 * runtime_ms(ctx.profile)) + Duration::from_secs(300);
        let groups = run_fio(
            fio,
            &ctx.scratch,
            &format!("disk-{threads}-{}", way.name()),
            &self.job_file(&ctx.dir, threads, way, ctx.profile),
            ctx.cancel,
            timeout,
        )?;
        let group = expect_group(&groups, way.name())?;
        let d = match way {
            Way::Read => group.read.clone(),
            Way::Write => group.write.clone(),
        };
        if d.io_bytes == 0 || d.runtime_ms == 0 {
            return Err(BenchError::Other(format!(
                "fio did no {}s at {threads} thread(s): {d:?}",
                way.name()
            )));
        }
        Ok(d)
    }
}

impl Workload for DiskFio {
    fn id(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "disk-fio-4k-random",
            Pattern::Sequential1m => "disk-fio-1m-seq",
        }
    }

    fn title(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "Disk tier: 4 KiB random reads and writes against threads (fio)",
            Pattern::Sequential1m => {
                "Disk tier: 1 MiB sequential reads and writes against threads (fio)"
            }
        }
    }

    fn source(&self) -> &'static str {
        "DFS (virtualized flash file system) §4.3, Figures 7, 8 and 10 (Iozone); issue 13's \
         benchmarks (≥ 0.9× the host file system)"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let threads: Vec<String> = thread_counts(profile).iter().map(u32::to_string).collect();
        let per_thread = file_bytes_per_thread(profile);
        let mut s = vec![
            ("fio".to_string(), fio_version().to_string()),
            ("threads".into(), threads.join(", ")),
            (
                "access".into(),
                format!(
                    "{} blocks: rw={} (read run) and rw={} (write run), separate fio runs",
                    self.block(),
                    self.rw(Way::Read),
                    self.rw(Way::Write)
                ),
            ),
            (
                "files".into(),
                format!(
                    "one file per thread (data.N), {} MiB each ({} MiB at {} threads): far \
                     above rampart's large-file threshold (1 MiB by default), so they live on \
                     its disk tier",
                    per_thread / MIB,
                    per_thread / MIB * u64::from(max_threads(profile)),
                    max_threads(profile)
                ),
            ),
            (
                "layout".into(),
                format!(
                    "not timed: every file written in full first (1 MiB writes of splitmix64 \
                     bytes, seed {LAYOUT_SEED:#x}, then fsync), so reads find data and writes \
                     overwrite it"
                ),
            ),
            (
                "runtime".into(),
                format!(
                    "at most {} ms per run (fio's runtime without time_based: a job also \
                     stops after one pass over its file, so no block is read twice)",
                    runtime_ms(profile)
                ),
            ),
            (
                "cache".into(),
                "cold for every run: sync and drop_caches (echo 3) right before each fio run \
                 on every peer — this also empties the page cache of rampart's host files, \
                 which fio's invalidate=1 (also set) cannot reach through FUSE; with one pass \
                 at most, reads come from the disk, through each peer's readahead"
                    .into(),
            ),
            (
                "ioengine, direct".into(),
                "psync, buffered (direct=0) on every peer: O_DIRECT through FUSE depends on \
                 the daemon and the passthrough setup, so it would measure different paths \
                 on different peers"
                    .into(),
            ),
            (
                "writes".into(),
                "buffered, end_fsync=1: each write run ends with an fsync of every file, \
                 inside the runtime fio reports (the data is durable on every peer)"
                    .into(),
            ),
            (
                "metric".into(),
                match self.pattern {
                    Pattern::Random4k => "fio's IOPS for the read run and the write run",
                    Pattern::Sequential1m => "fio's bw_bytes / 2^20 (MiB/s) for each run",
                }
                .into(),
            ),
        ];
        let dir = Path::new("<workload directory on the peer>");
        for way in [Way::Read, Way::Write] {
            s.push((
                format!(
                    "job file, {} run ({} threads; the others differ only in numjobs)",
                    way.name(),
                    max_threads(profile)
                ),
                self.job_file(dir, max_threads(profile), way, profile),
            ));
        }
        s
    }

    fn check_tools(&self) -> Result<()> {
        fio_path().map(|_| ())
    }

    fn unsupported_on(&self, peer: PeerKind) -> Option<String> {
        super::unsupported_off_disk(peer)
    }

    fn plot(&self) -> PlotKind {
        PlotKind::Lines { x_label: "threads" }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let fio = fio_path()?;
        if ctx.dir.to_string_lossy().contains(':') {
            return Err(BenchError::Other(format!(
                "fio cannot use a directory whose path has a colon: {}",
                ctx.dir.display()
            )));
        }
        let profile = ctx.profile;
        let mut outcome = Outcome::default();
        let files = max_threads(profile);
        let file_bytes = file_bytes_per_thread(profile);
        (ctx.progress)(&format!("fio: laying out {files} files"));
        let started = Instant::now();
        lay_out(&ctx.dir, files, file_bytes, ctx.cancel)?;
        outcome.notes.push(format!(
            "layout (not timed): {files} files of {} MiB written and synced in {:.2} s",
            file_bytes / MIB,
            started.elapsed().as_secs_f64()
        ));
        if let Some(tiers) = ctx.peer.tier_summary() {
            outcome.notes.push(format!("after the layout: {tiers}"));
        }
        for &threads in thread_counts(profile) {
            let mut said = Vec::new();
            for way in [Way::Read, Way::Write] {
                (ctx.progress)(&format!("fio: {threads} thread(s), {}", way.name()));
                let d = self.one_run(ctx, &fio, threads, way)?;
                let value = self.figure(&d);
                if !value.is_finite() || value <= 0.0 {
                    return Err(BenchError::Other(format!(
                        "fio reported {value} {} for {}s at {threads} thread(s)",
                        self.unit(),
                        way.name()
                    )));
                }
                outcome
                    .metrics
                    .push(Metric::higher(way.name(), self.unit(), value).at(f64::from(threads)));
                said.push(format!(
                    "{} {} MiB in {} ms",
                    way.name(),
                    d.io_bytes / MIB,
                    d.runtime_ms
                ));
            }
            outcome
                .notes
                .push(format!("{threads} thread(s): {}", said.join("; ")));
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_pass_the_threshold_and_fit_the_disk_image() {
        for p in [Profile::Tiny, Profile::Quick, Profile::Full] {
            assert!(file_bytes_per_thread(p) >= 4 * MIB, "{p:?}");
            let total = file_bytes_per_thread(p) * u64::from(max_threads(p));
            assert!(total <= p.disk_device_size_bytes() / 4, "{p:?}: {total}");
        }
        assert_eq!(thread_counts(Profile::Full), [1, 4, 8, 16, 32]);
    }

    #[test]
    fn read_and_write_runs_are_separate_and_never_time_based() {
        let w = DiskFio {
            pattern: Pattern::Sequential1m,
        };
        let read = w.job_file(Path::new("/mnt/x"), 8, Way::Read, Profile::Full);
        let write = w.job_file(Path::new("/mnt/x"), 8, Way::Write, Profile::Full);
        for job in [&read, &write] {
            assert!(!job.contains("time_based"), "{job}");
            for line in [
                "numjobs=8",
                "size=256m",
                "runtime=3000ms",
                "bs=1m",
                "invalidate=1",
            ] {
                assert!(job.lines().any(|l| l == line), "{line} missing from\n{job}");
            }
        }
        assert!(read.contains("[read]\nrw=read\n") && !read.contains("end_fsync"));
        assert!(
            write.contains("[write]\nrw=write\nend_fsync=1\n"),
            "{write}"
        );
    }

    #[test]
    fn every_ram_peer_is_unsupported_with_a_reason() {
        let w = DiskFio {
            pattern: Pattern::Random4k,
        };
        for kind in PeerKind::ALL {
            let disk = matches!(
                kind,
                PeerKind::Rampart | PeerKind::Host | PeerKind::Ext4Disk
            );
            assert_eq!(w.unsupported_on(kind).is_none(), disk, "{}", kind.id());
        }
    }
}

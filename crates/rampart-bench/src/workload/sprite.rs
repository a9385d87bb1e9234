//! The Sprite LFS microbenchmarks (Rosenblum and Ousterhout, SOSP 1991 / TOCS 1992) as
//! Conquest ran them (Conquest, USENIX 2002, §5.1):
//! - small files: create, read and unlink 10,000 1-KB files in three separate phases, a
//!   transaction rate per phase (§5.1.1, Figure 5.1);
//! - large file: write a file sequentially (flushed), read it sequentially, write it randomly
//!   (flushed), read it randomly, read it sequentially again, a bandwidth per phase (§5.1.2,
//!   Figure 5.2).
//!
//! Details the papers leave out are taken from the LFS authors' own programs
//! (`performance.small.c` and `performance.large.c`, distributed with MIT 6.033's `lfs-0.0`):
//! small files go 100 to a directory (`d<j>/g<i>`); no cache flush or sync between phases;
//! the large file is one file, written in place by the random phase; each phase is timed from
//! open to close, the write phases including their fsync.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::data::{io_err, SplitMix64};
use super::{Ctx, Metric, Outcome, PlotKind, Workload};
use crate::error::{BenchError, Result};
use crate::profile::Profile;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(SmallFiles), Box::new(LargeFile)]
}

/// §5.1.1: "creating, reading, and unlinking 10,000 1-KB files".
const PAPER_SMALL_FILES: u32 = 10_000;
const SMALL_FILE_BYTES: usize = 1024;
/// `performance.small.c`: files `d<j>/g<i>`, j advancing every 100 files (NDIR = 100 for
/// 10,000 files).
const FILES_PER_DIRECTORY: u32 = 100;

/// LFS paper and Conquest §5.1.2: a 100-MB file (Conquest's on-disk case; its 1-MB case is
/// below rampart's large-file threshold and is covered by the small-file workloads).
const PAPER_LARGE_FILE_BYTES: u64 = 100 << 20;
/// Neither paper states the I/O size; 8 KiB is the buffer `performance.large.c` declares
/// (`SIZE 8192`), the largest block it can move.
const LARGE_IO_BYTES: usize = 8 << 10;
/// Seed of the random offsets and of the data (splitmix64). The data is incompressible, so a
/// compressing peer (btrfs zstd) gets no free ride from the zero-filled buffer the original
/// programs wrote.
const SEED: u64 = 42;

fn small_files(profile: Profile) -> u32 {
    profile.pick(200, 1_000, PAPER_SMALL_FILES)
}

fn large_file_bytes(profile: Profile) -> u64 {
    profile.pick(2 << 20, 16 << 20, PAPER_LARGE_FILE_BYTES)
}

fn scaled(here: u64, paper: u64, unit: &str) -> String {
    if here == paper {
        format!("{here} {unit} (as the paper)")
    } else {
        format!("{here} {unit} (paper: {paper}; scaled so a run fits the time budget)")
    }
}

// ---------------------------------------------------------------------------------------------
// Small files.

struct SmallFiles;

fn small_file_path(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("d{}", i / FILES_PER_DIRECTORY))
        .join(format!("g{i}"))
}

impl Workload for SmallFiles {
    fn id(&self) -> &'static str {
        "sprite-small"
    }

    fn title(&self) -> &'static str {
        "Sprite LFS small-file benchmark"
    }

    fn source(&self) -> &'static str {
        "Conquest (USENIX 2002) §5.1.1, Figure 5.1; Sprite LFS (Rosenblum & Ousterhout, TOCS \
         1992) §5.1; layout from the LFS authors' performance.small.c"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let files = small_files(profile);
        vec![
            (
                "files".into(),
                scaled(files as u64, PAPER_SMALL_FILES as u64, "files"),
            ),
            (
                "file size".into(),
                format!("{SMALL_FILE_BYTES} B, one write, one read"),
            ),
            (
                "layout".into(),
                format!(
                    "{FILES_PER_DIRECTORY} files per directory (d0/g0 … d{}/g{}), as \
                     performance.small.c; directories made before timing",
                    files.saturating_sub(1) / FILES_PER_DIRECTORY,
                    files.saturating_sub(1)
                ),
            ),
            (
                "phases".into(),
                "create (open O_CREAT|O_TRUNC, write, close), read (open, read, close), \
                 unlink; all in creation order"
                    .into(),
            ),
            (
                "between phases".into(),
                "nothing: no sync, no fsync, no cache drop (as performance.small.c; Conquest \
                 reports cached reads)"
                    .into(),
            ),
            (
                "data".into(),
                format!("incompressible bytes, splitmix64 seed {SEED}"),
            ),
            ("metric".into(), "files per second in each phase".into()),
        ]
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let files = small_files(ctx.profile);
        let dirs = files.div_ceil(FILES_PER_DIRECTORY);
        for j in 0..dirs {
            let d = ctx.dir.join(format!("d{j}"));
            std::fs::create_dir(&d).map_err(io_err("creating", &d))?;
        }
        let mut data = vec![0u8; SMALL_FILE_BYTES];
        SplitMix64(SEED).fill(&mut data);
        let paths: Vec<PathBuf> = (0..files).map(|i| small_file_path(&ctx.dir, i)).collect();
        let result = small_phases(ctx, &paths, &mut data);
        // Whatever happened, leave the directory empty (files remain only after an error).
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
        for j in 0..dirs {
            let d = ctx.dir.join(format!("d{j}"));
            std::fs::remove_dir(&d).map_err(io_err("removing", &d))?;
        }
        let (create, read, unlink) = result?;
        let n = files as f64;
        Ok(Outcome {
            metrics: vec![
                Metric::rate("create", "files/s", n, create),
                Metric::rate("read", "files/s", n, read),
                Metric::rate("unlink", "files/s", n, unlink),
            ],
            notes: vec![format!(
                "{files} files of {SMALL_FILE_BYTES} B in {dirs} directories; phases took \
                 {:.3} s, {:.3} s, {:.3} s",
                create.as_secs_f64(),
                read.as_secs_f64(),
                unlink.as_secs_f64()
            )],
        })
    }
}

fn small_phases(
    ctx: &mut Ctx,
    paths: &[PathBuf],
    data: &mut [u8],
) -> Result<(Duration, Duration, Duration)> {
    (ctx.progress)("phase 1/3: create");
    let started = Instant::now();
    for (i, p) in paths.iter().enumerate() {
        if i % 256 == 0 {
            ctx.cancel.check()?;
        }
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o700)
            .open(p)
            .map_err(io_err("creating", p))?;
        f.write_all(data).map_err(io_err("writing", p))?;
    }
    let create = started.elapsed();

    (ctx.progress)("phase 2/3: read");
    let started = Instant::now();
    for (i, p) in paths.iter().enumerate() {
        if i % 256 == 0 {
            ctx.cancel.check()?;
        }
        let mut f = File::open(p).map_err(io_err("opening", p))?;
        f.read_exact(data).map_err(io_err("reading", p))?;
    }
    let read = started.elapsed();

    (ctx.progress)("phase 3/3: unlink");
    let started = Instant::now();
    for (i, p) in paths.iter().enumerate() {
        if i % 256 == 0 {
            ctx.cancel.check()?;
        }
        std::fs::remove_file(p).map_err(io_err("unlinking", p))?;
    }
    let unlink = started.elapsed();
    Ok((create, read, unlink))
}

// ---------------------------------------------------------------------------------------------
// Large file.

struct LargeFile;

const LARGE_PHASES: [&str; 5] = [
    "seq write",
    "seq read",
    "rand write",
    "rand read",
    "seq read again",
];

impl Workload for LargeFile {
    fn id(&self) -> &'static str {
        "sprite-large"
    }

    fn title(&self) -> &'static str {
        "Sprite LFS large-file benchmark"
    }

    fn source(&self) -> &'static str {
        "Conquest (USENIX 2002) §5.1.2, Figure 5.2c; Sprite LFS (Rosenblum & Ousterhout, TOCS \
         1992) §5.1; phases and flushing from the LFS authors' performance.large.c"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let bytes = large_file_bytes(profile);
        vec![
            (
                "file size".into(),
                scaled(bytes >> 20, PAPER_LARGE_FILE_BYTES >> 20, "MiB"),
            ),
            (
                "files".into(),
                "one (as LFS; Conquest ran each phase over forty 100-MB files, 4 GB, to go \
                 past its 2 GB of RAM, which the RAM-disk peers here could not hold)"
                    .into(),
            ),
            (
                "I/O size".into(),
                format!(
                    "{LARGE_IO_BYTES} B (not stated in either paper; performance.large.c's \
                     buffer size)"
                ),
            ),
            (
                "phases".into(),
                "sequential write + fsync, sequential read, random write + fsync, random \
                 read, sequential read; the file is created empty before phase 1 and the \
                 random write overwrites it in place (as performance.large.c and the LFS \
                 paper; Conquest's text says \"a new large file\")"
                    .into(),
            ),
            (
                "random offsets".into(),
                format!(
                    "block-aligned (Conquest: \"memory-aligned\"); a random permutation of the \
                     blocks (Fisher–Yates, splitmix64 seed {SEED}), a new one for the read \
                     phase, so every block is written and read exactly once; pwrite/pread"
                ),
            ),
            (
                "timing".into(),
                "each phase from open to close, the write phases including fsync (\"data was \
                 flushed to disk at the end of each write phase\")"
                    .into(),
            ),
            (
                "between phases".into(),
                "no cache drop (as performance.large.c)".into(),
            ),
            (
                "data".into(),
                format!("incompressible bytes, splitmix64 seed {SEED}"),
            ),
            ("metric".into(), "MiB/s in each phase".into()),
        ]
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let bytes = large_file_bytes(ctx.profile);
        let path = ctx.dir.join("test_file");
        File::create(&path).map_err(io_err("creating", &path))?;
        let result = large_phases(ctx, &path, bytes);
        let removed = std::fs::remove_file(&path).map_err(io_err("removing", &path));
        let times = result?;
        removed?;
        let mib = bytes as f64 / (1 << 20) as f64;
        Ok(Outcome {
            metrics: LARGE_PHASES
                .iter()
                .zip(&times)
                .map(|(name, &t)| Metric::rate(*name, "MiB/s", mib, t))
                .collect(),
            notes: vec![format!(
                "{mib} MiB file in {LARGE_IO_BYTES}-byte I/Os; phases took {}",
                times
                    .iter()
                    .map(|t| format!("{:.3} s", t.as_secs_f64()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )],
        })
    }
}

fn large_phases(ctx: &mut Ctx, path: &Path, bytes: u64) -> Result<[Duration; 5]> {
    let blocks = bytes / LARGE_IO_BYTES as u64;
    let mut rng = SplitMix64(SEED);
    let mut buf = vec![0u8; LARGE_IO_BYTES];
    rng.fill(&mut buf);
    let write_order = rng.permutation(blocks);
    let read_order = rng.permutation(blocks);
    let cancel = ctx.cancel;
    let progress = ctx.progress;
    let mut times = [Duration::ZERO; 5];

    // Each phase: open, the I/Os, (fsync), close; `order` None = sequential.
    let mut phase = |n: usize, write: bool, order: Option<&[u64]>, buf: &mut [u8]| {
        progress(&format!("phase {}/5: {}", n + 1, LARGE_PHASES[n]));
        let started = Instant::now();
        let mut f = OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .map_err(io_err("opening", path))?;
        for i in 0..blocks {
            if i % 1024 == 0 {
                cancel.check()?;
            }
            let done = match (order, write) {
                (None, true) => f.write_all(buf),
                (None, false) => f.read_exact(buf),
                (Some(o), true) => f.write_all_at(buf, o[i as usize] * LARGE_IO_BYTES as u64),
                (Some(o), false) => f.read_exact_at(buf, o[i as usize] * LARGE_IO_BYTES as u64),
            };
            done.map_err(io_err(if write { "writing" } else { "reading" }, path))?;
        }
        if write {
            f.sync_all().map_err(io_err("fsync of", path))?;
        }
        drop(f);
        times[n] = started.elapsed();
        Ok::<(), BenchError>(())
    };
    phase(0, true, None, &mut buf)?;
    phase(1, false, None, &mut buf)?;
    phase(2, true, Some(&write_order), &mut buf)?;
    phase(3, false, Some(&read_order), &mut buf)?;
    phase(4, false, None, &mut buf)?;
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_runs_measure_every_phase() {
        for (w, phases) in [
            (
                &SmallFiles as &dyn Workload,
                &["create", "read", "unlink"][..],
            ),
            (&LargeFile as &dyn Workload, &LARGE_PHASES[..]),
        ] {
            let outcome = crate::testing::run_tiny(w).unwrap();
            let names: Vec<&str> = outcome.metrics.iter().map(|m| m.name.as_str()).collect();
            assert_eq!(names, phases, "{}", w.id());
            for m in &outcome.metrics {
                assert!(m.value.is_finite() && m.value > 0.0, "{}: {m:?}", w.id());
            }
        }
    }

    #[test]
    fn runs_leave_the_directory_empty() {
        let base = crate::testing::shm_tempdir();
        let dir = base.path().join("work");
        std::fs::create_dir(&dir).unwrap();
        for w in workloads() {
            crate::testing::run_in(w.as_ref(), Profile::Tiny, &dir).unwrap();
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "{}", w.id());
        }
    }
}

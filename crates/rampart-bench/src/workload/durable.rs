//! Durable small writes: N threads each create a file, write 4 KiB, fsync and close, over and
//! over — the pattern of mail spools and databases that commit small records (DESIGN.md §7).
//! A memory-first file system pays for durability only here, so this is where group commit
//! (many writers sharing one flush) shows.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::data::{close_checked, group_digits, io_err, sync_and_fsync_dir};
use super::{Ctx, Metric, Outcome, PlotKind, Workload};
use crate::cmd::Cancel;
use crate::error::{BenchError, Result};
use crate::profile::Profile;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(DurableSmallWrites)]
}

/// Bytes written to each file before its fsync.
const WRITE_BYTES: usize = 4096;

struct DurableSmallWrites;

/// The thread counts measured; 1 and 8 in every profile (the two points).
fn thread_counts(profile: Profile) -> Vec<usize> {
    profile.pick(vec![1, 8], vec![1, 8], vec![1, 2, 4, 8, 16])
}

/// How long each thread count runs: a fixed time, so slow and fast peers get the same chance
/// to settle (a fixed count would give a disk peer minutes and tmpfs milliseconds).
fn seconds_per_point(profile: Profile) -> f64 {
    profile.pick(0.1, 0.4, 3.0)
}

/// At most this many files per thread count, so a peer whose fsync is free (tmpfs) cannot fill
/// its device within the fixed time; a point ends at the time or at this count, whichever
/// comes first, and its rate is writes over the time it really took. The files stay until the
/// run ends (deleting them through FUSE would cost as long as the measurement), so the run
/// leaves at most thread counts × this many 4 KiB files.
fn max_writes_per_point(profile: Profile) -> usize {
    profile.pick(1_000, 10_000, 25_000)
}

impl Workload for DurableSmallWrites {
    fn id(&self) -> &'static str {
        "durable-small-writes"
    }

    fn title(&self) -> &'static str {
        "Durable small writes (create, write 4 KiB, fsync, close)"
    }

    fn source(&self) -> &'static str {
        "DESIGN.md §7 (durable small writes at 1 and 8 threads); bench/persistence.py"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let threads: Vec<String> = thread_counts(profile)
            .iter()
            .map(|t| t.to_string())
            .collect();
        vec![
            ("threads".into(), threads.join(", ")),
            (
                "each write".into(),
                format!(
                    "open(O_CREAT|O_EXCL|O_WRONLY) of a new file, one {WRITE_BYTES}-byte write, \
                     fsync, close (close errors checked); the bytes are pseudo-random \
                     (splitmix64, seed 0x4b1d), so compression gains nothing"
                ),
            ),
            (
                "files".into(),
                "a new file per write, each thread (of each thread count) in its own \
                 subdirectory; the files are kept until the run ends"
                    .into(),
            ),
            (
                "duration per thread count".into(),
                format!(
                    "{} s, or {} writes in all if that comes first",
                    seconds_per_point(profile),
                    group_digits(max_writes_per_point(profile) as u64)
                ),
            ),
            (
                "metrics".into(),
                "writes/s = writes by all threads / time from the first thread's start (they \
                 start together at a barrier) to the last thread's end; latency = one write's create-to-close time, median and 99th \
                 percentile (nearest rank) over all threads' writes"
                    .into(),
            ),
            (
                "before each thread count".into(),
                "syncfs and fsync of the workload directory (untimed), so no earlier writes are \
                 still pending"
                    .into(),
            ),
            (
                "order".into(),
                "the thread counts run in ascending order on one peer, so later points carry \
                 what earlier ones wrote: on rampart the journal passes its checkpoint \
                 threshold (256 MiB) after about 60,000 writes, and the point in which that \
                 happens pays for the checkpoint, as sustained durable writing would"
                    .into(),
            ),
        ]
    }

    fn runs_on_floor(&self) -> bool {
        true
    }

    /// Every file is fsync'd before its close on every peer already.
    fn fsyncs_each_file(&self) -> bool {
        true
    }

    fn plot(&self) -> PlotKind {
        PlotKind::Lines { x_label: "threads" }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let profile = ctx.profile;
        let duration = Duration::from_secs_f64(seconds_per_point(profile));
        let max_writes = max_writes_per_point(profile);
        let mut outcome = Outcome::default();
        let counts = thread_counts(profile);
        for (i, &threads) in counts.iter().enumerate() {
            ctx.cancel.check()?;
            (ctx.progress)(&format!("{threads} thread(s) ({}/{})", i + 1, counts.len()));
            let point_dir = ctx.dir.join(format!("threads-{threads}"));
            let point = measure_point(&point_dir, threads, duration, max_writes, ctx.cancel)?;
            let x = threads as f64;
            outcome
                .metrics
                .push(Metric::rate("writes", "writes/s", point.writes as f64, point.elapsed).at(x));
            outcome
                .metrics
                .push(Metric::lower("latency p50", "ms", point.p50_ms).at(x));
            outcome
                .metrics
                .push(Metric::lower("latency p99", "ms", point.p99_ms).at(x));
            outcome.notes.push(format!(
                "{threads} thread(s): {} writes in {:.3} s",
                point.writes,
                point.elapsed.as_secs_f64()
            ));
        }
        Ok(outcome)
    }
}

/// What one thread count measured.
struct Point {
    writes: usize,
    elapsed: Duration,
    p50_ms: f64,
    p99_ms: f64,
}

/// Runs `threads` writers in `point_dir` (created here) for `duration` or until `max_writes`
/// files exist in all.
fn measure_point(
    point_dir: &Path,
    threads: usize,
    duration: Duration,
    max_writes: usize,
    cancel: &Cancel,
) -> Result<Point> {
    let thread_dirs: Vec<PathBuf> = (0..threads)
        .map(|t| point_dir.join(format!("t{t:02}")))
        .collect();
    for d in &thread_dirs {
        std::fs::create_dir_all(d).map_err(io_err("creating", d))?;
    }
    sync_and_fsync_dir(point_dir)?;
    // The cap shared out exactly: the first `max_writes % threads` threads take one more.
    let share = |t: usize| max_writes / threads + usize::from(t < max_writes % threads);
    // The writers start together; the point lasts from the first one's start to the last one's
    // end, both taken by the writers themselves (the spawning thread may not get a core until
    // they are done).
    let start_line = Barrier::new(threads);
    let results: Vec<Result<Writer>> = std::thread::scope(|scope| {
        let handles: Vec<_> = thread_dirs
            .iter()
            .enumerate()
            .map(|(t, d)| {
                let start_line = &start_line;
                scope.spawn(move || {
                    start_line.wait();
                    write_files(d, duration, share(t), cancel)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Other("a writer thread panicked".into())))
            })
            .collect()
    });
    cancel.check()?;
    let writers = results.into_iter().collect::<Result<Vec<Writer>>>()?;
    let first_start = writers.iter().map(|w| w.started).min();
    let last_end = writers.iter().map(|w| w.ended).max();
    let elapsed = match (first_start, last_end) {
        (Some(a), Some(b)) => b - a,
        _ => Duration::ZERO,
    };
    let mut latencies_ns: Vec<u64> = writers.into_iter().flat_map(|w| w.latencies_ns).collect();
    if latencies_ns.is_empty() {
        return Err(BenchError::Other(format!(
            "no write finished in {:.1} s with {threads} thread(s)",
            duration.as_secs_f64()
        )));
    }
    latencies_ns.sort_unstable();
    let ms = |ns: u64| ns as f64 / 1e6;
    Ok(Point {
        writes: latencies_ns.len(),
        elapsed,
        p50_ms: ms(percentile(&latencies_ns, 0.50)),
        p99_ms: ms(percentile(&latencies_ns, 0.99)),
    })
}

/// What one writer did.
struct Writer {
    started: Instant,
    ended: Instant,
    /// Each write's create-to-close time.
    latencies_ns: Vec<u64>,
}

/// One writer: new files in `dir` for `duration` or until `max_files`.
fn write_files(
    dir: &Path,
    duration: Duration,
    max_files: usize,
    cancel: &Cancel,
) -> Result<Writer> {
    // Incompressible, so btrfs with zstd writes as many bytes as everyone else.
    let mut data = [0u8; WRITE_BYTES];
    super::data::SplitMix64(0x4b1d).fill(&mut data);
    let mut latencies_ns = Vec::with_capacity(max_files);
    let mut path = dir.join("f");
    let started = Instant::now();
    let deadline = started + duration;
    for i in 0..max_files {
        if cancel.is_set() || Instant::now() >= deadline {
            break;
        }
        path.set_file_name(format!("f{i:07}"));
        let write_started = Instant::now();
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_err("creating", &path))?;
        file.write_all(&data).map_err(io_err("writing", &path))?;
        file.sync_all().map_err(io_err("fsync of", &path))?;
        close_checked(file, &path)?;
        latencies_ns.push(write_started.elapsed().as_nanos() as u64);
    }
    Ok(Writer {
        started,
        ended: Instant::now(),
        latencies_ns,
    })
}

/// Nearest-rank percentile of sorted, non-empty `values`.
fn percentile(sorted: &[u64], q: f64) -> u64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::run_tiny;

    #[test]
    fn tiny_run_measures_every_thread_count() {
        let outcome = run_tiny(&DurableSmallWrites).unwrap();
        for name in ["writes", "latency p50", "latency p99"] {
            let xs: Vec<f64> = outcome
                .metrics
                .iter()
                .filter(|m| m.name == name)
                .map(|m| {
                    assert!(m.value.is_finite() && m.value > 0.0, "{m:?}");
                    m.x.unwrap()
                })
                .collect();
            assert_eq!(xs, vec![1.0, 8.0], "{name}");
        }
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[7], 0.99), 7);
    }
}

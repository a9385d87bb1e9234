//! 4 KiB random and 1 MiB sequential reads and writes with 1 to 32 threads: the
//! microbenchmarks of DFS §4.3 (which used Iozone), run with fio.
//!
//! DFS measured 4 KiB random I/O (IOPS against threads, 1–32) and 1 MiB sequential transfers
//! (MB/s), each thread on its own file, with direct I/O and through the buffer cache (8 GB
//! touched, twice the RAM, cache invalidated by unmounting between runs). Our peers live in
//! RAM, so the files are small and every run is buffered; see `settings` for each choice.
//!
//! The files are laid out first (not timed); then, per thread count, one fio run with two
//! groups: reads, then (stonewall) writes ending in an fsync.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::data::{io_err, write_random_file, SplitMix64};
use super::{Ctx, Metric, Outcome, PlotKind, Workload};
use crate::cmd::{self, Cancel};
use crate::error::{BenchError, Result};
use crate::profile::Profile;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pattern {
    /// 4 KiB blocks at uniformly random offsets; reported in IOPS.
    Random4k,
    /// 1 MiB blocks in file order; reported in MiB/s.
    Sequential1m,
}

struct Fio {
    pattern: Pattern,
}

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(Fio {
            pattern: Pattern::Random4k,
        }),
        Box::new(Fio {
            pattern: Pattern::Sequential1m,
        }),
    ]
}

const MIB: u64 = 1 << 20;

/// Thread counts per profile. Full: the paper's range in powers of two. Quick: 1 and 8 (8 is
/// past the 2 cores of a small machine and about rampart's FUSE worker count); fio spends
/// about 0.3 s starting each group, so every extra point costs more than its runtime.
fn thread_counts(profile: Profile) -> &'static [u32] {
    profile.pick(&[1, 2], &[1, 8], &[1, 2, 4, 8, 16, 32])
}

/// Size of each thread's file. Small because every peer holds its files in RAM (the RAM
/// disks are 512 MiB, 2 GiB, 4 GiB; rampart keeps all data in memory), and because on
/// rampart laying them out runs at under 100 MiB/s and each write run's end fsync takes
/// seconds today: with 16 MiB files a full run there took about 40 s.
fn file_bytes_per_thread(profile: Profile) -> u64 {
    profile.pick(2 * MIB, 4 * MIB, 8 * MIB)
}

/// fio's `runtime` for each read run and each write run (time_based). Full: 12 runs of 1 s
/// plus fio's start-up (about 0.3 s a run) stay near 20 s on tmpfs.
fn runtime_ms(profile: Profile) -> u64 {
    profile.pick(50, 200, 1_000)
}

fn max_threads(profile: Profile) -> u32 {
    thread_counts(profile).iter().copied().max().unwrap_or(1)
}

impl Fio {
    fn block(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "4k",
            Pattern::Sequential1m => "1m",
        }
    }

    fn read_rw(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "randread",
            Pattern::Sequential1m => "read",
        }
    }

    fn write_rw(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "randwrite",
            Pattern::Sequential1m => "write",
        }
    }

    fn unit(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "IOPS",
            Pattern::Sequential1m => "MiB/s",
        }
    }

    /// The figure this workload reports for one direction of one run.
    fn figure(&self, d: &Direction) -> f64 {
        match self.pattern {
            Pattern::Random4k => d.iops,
            Pattern::Sequential1m => d.bw_bytes / MIB as f64,
        }
    }

    /// What the paper measured with Iozone.
    fn paper(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => {
                "DFS §4.3: Iozone, 4 KiB uniformly random reads and \
                 writes of previously written blocks, 1, 2, 3, 4, 8, 16 and 32 threads, \
                 direct I/O (Figure 8) and through the buffer cache (Figure 10: 8 GB \
                 touched, twice the RAM, cache invalidated by unmounting after each run)"
            }
            Pattern::Sequential1m => {
                "DFS §4.3: Iozone, 1 MiB sequential transfers, \
                 direct I/O, aggregate of several readers or writers (Figure 7 gives 2 \
                 threads)"
            }
        }
    }

    /// How much and how long: thread counts, blocks, file sizes, the untimed layout and
    /// the runtime, as the profile sets them.
    fn scale_settings(&self, profile: Profile) -> Vec<(String, String)> {
        let threads = thread_counts(profile);
        let per_thread = file_bytes_per_thread(profile);
        vec![
            (
                "threads".to_string(),
                format!(
                    "{} ({})",
                    threads
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    profile.pick(
                        "tiny profile",
                        "quick profile: fio spends about 0.3 s starting each group, so two points",
                        "the paper's range in powers of two; it also measured 3"
                    )
                ),
            ),
            (
                "access".to_string(),
                format!(
                    "{} blocks: rw={} then rw={}",
                    self.block(),
                    self.read_rw(),
                    self.write_rw()
                ),
            ),
            (
                "files".to_string(),
                format!(
                    "one file per thread (data.N for thread N), as Iozone's throughput mode; \
                     {} MiB each, {} MiB at {} threads (paper: 8 GB touched per buffered run; \
                     here every peer holds its files in RAM: RAM disks of {} MiB at this \
                     profile, rampart's data in memory)",
                    per_thread / MIB,
                    per_thread / MIB * u64::from(max_threads(profile)),
                    max_threads(profile),
                    profile.device_size_bytes() / MIB
                ),
            ),
            (
                "layout".to_string(),
                format!(
                    "before any measurement, not timed: rampart bench writes every file in \
                     full (1 MiB writes of splitmix64 pseudo-random bytes, seed \
                     {LAYOUT_SEED:#x}, then fsync), so reads find data and writes overwrite it; \
                     the bytes do not compress (btrfs zstd gains nothing), and fio's own write \
                     buffers are pseudo-random too"
                ),
            ),
            (
                "runtime".to_string(),
                format!(
                    "time_based, {} ms for the read run and {} ms for the write run at each \
                     thread count (fio's runtime of the I/O; its start-up is not timed)",
                    runtime_ms(profile),
                    runtime_ms(profile)
                ),
            ),
        ]
    }

    /// The measuring job: a read group, then (stonewall) a write group, `threads` threads each.
    fn job_file(&self, dir: &Path, threads: u32, profile: Profile) -> String {
        format!(
            "{}bs={}\n\
             time_based\n\
             runtime={}ms\n\
             invalidate=1\n\
             \n\
             [read]\n\
             rw={}\n\
             \n\
             [write]\n\
             stonewall\n\
             rw={}\n\
             end_fsync=1\n",
            global_section(dir, threads, file_bytes_per_thread(profile)),
            self.block(),
            runtime_ms(profile),
            self.read_rw(),
            self.write_rw(),
        )
    }
}

/// What every job shares: one file per thread (`data.N` for thread N, so every thread count
/// reuses the files laid out once by [`lay_out`]), synchronous buffered I/O, threads of one fio process.
fn global_section(dir: &Path, threads: u32, file_bytes: u64) -> String {
    format!(
        "[global]\n\
         directory={}\n\
         filename_format=data.$jobnum\n\
         ioengine=psync\n\
         direct=0\n\
         thread\n\
         numjobs={threads}\n\
         size={}m\n\
         group_reporting\n",
        dir.display(),
        file_bytes / MIB,
    )
}

/// Seed of the pseudo-random bytes the files are laid out with.
pub(super) const LAYOUT_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// Writes every thread's file in full (1 MiB writes of pseudo-random bytes, then fsync)
/// before anything is measured, so reads find data and writes overwrite it. Done here rather
/// than by fio: fio spends about 0.3 s starting each run, more than a tiny layout takes.
pub(super) fn lay_out(dir: &Path, threads: u32, file_bytes: u64, cancel: &Cancel) -> Result<()> {
    let mut rng = SplitMix64(LAYOUT_SEED);
    for n in 0..threads {
        cancel.check()?;
        write_random_file(&dir.join(format!("data.{n}")), file_bytes, &mut rng)?;
    }
    Ok(())
}

/// How fio runs on every peer, and why: the same for both patterns and every profile.
const METHOD: [(&str, &str); 5] = [
    (
        "ioengine",
        "psync (pread/pwrite, one I/O in flight per thread): works the same on every \
         peer, FUSE included. libaio and io_uring are only asynchronous with O_DIRECT, \
         and O_DIRECT support differs between the peers (FUSE: up to the daemon; \
         tmpfs: only since Linux 6.6; the block file systems: yes), so they would \
         measure different paths on different peers",
    ),
    (
        "direct",
        "0: buffered, through the page cache, on every peer (for the same reason); the \
         paper's direct-I/O figures bypassed it",
    ),
    (
        "invalidate",
        "1: before each run fio drops the files' cached pages (posix_fadvise \
         DONTNEED). ext4, XFS and btrfs on RAM disks: reads then start from the loop \
         device (a file in /dev/shm); ext4 on disk: from the disk; fuse-overlayfs and \
         rampart: the kernel's FUSE page cache is dropped, so reads start from the \
         daemon; tmpfs: no effect (its page cache is the file itself). Pages read once \
         stay cached for the rest of the run, so reads come mostly from the page cache \
         on every peer",
    ),
    (
        "writes",
        "buffered; end_fsync=1 ends each write run with an fsync of every file, and \
         its time is inside the runtime fio reports (on rampart and ext4 on disk it \
         makes the data durable)",
    ),
    (
        "threads, reporting",
        "thread (fio jobs are threads of one process, as the paper's threads); \
         group_reporting (the figures are the sum over threads); read and write runs \
         are separate groups (stonewall), reads first",
    ),
];

impl Workload for Fio {
    fn id(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "fio-4k-random",
            Pattern::Sequential1m => "fio-1m-sequential",
        }
    }

    fn title(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => "4 KiB random reads and writes against threads (fio)",
            Pattern::Sequential1m => "1 MiB sequential reads and writes against threads (fio)",
        }
    }

    fn source(&self) -> &'static str {
        match self.pattern {
            Pattern::Random4k => {
                "DFS (virtualized flash file system) §4.3, Figures 8 and 10 (Iozone)"
            }
            Pattern::Sequential1m => "DFS (virtualized flash file system) §4.3, Figure 7 (Iozone)",
        }
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let mut s = vec![
            ("fio".to_string(), fio_version().to_string()),
            (
                "commands".to_string(),
                "fio --output-format=json --output=RESULT.json JOBFILE: one run per thread \
                 count (job file below, written to the scratch folder)"
                    .to_string(),
            ),
            ("paper".to_string(), self.paper().to_string()),
        ];
        s.extend(self.scale_settings(profile));
        s.extend(METHOD.map(|(key, text)| (key.to_string(), text.to_string())));
        if self.pattern == Pattern::Random4k {
            s.push((
                "random offsets".to_string(),
                "fio's defaults: randrepeat=1 (the same offsets on every peer) and a random \
                 map, so each block is touched once per pass over the file"
                    .to_string(),
            ));
        }
        s.push((
            "metric".to_string(),
            match self.pattern {
                Pattern::Random4k => {
                    "read and write: fio's IOPS (ios / runtime) at each thread count"
                }
                Pattern::Sequential1m => {
                    "read and write: fio's bw_bytes / 2^20 (MiB/s) at each thread count"
                }
            }
            .to_string(),
        ));
        let dir = Path::new("<workload directory on the peer>");
        s.push((
            format!(
                "job file ({} threads; the others differ only in numjobs)",
                max_threads(profile)
            ),
            self.job_file(dir, max_threads(profile), profile),
        ));
        s
    }

    fn check_tools(&self) -> Result<()> {
        fio_path().map(|_| ())
    }

    fn plot(&self) -> PlotKind {
        PlotKind::Lines { x_label: "threads" }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let fio = fio_path()?;
        if ctx.dir.to_string_lossy().contains(':') {
            // fio splits `directory=` at colons.
            return Err(BenchError::Other(format!(
                "fio cannot use a directory whose path has a colon: {}",
                ctx.dir.display()
            )));
        }
        let profile = ctx.profile;
        let mut outcome = Outcome::default();

        (ctx.progress)(&format!("fio: laying out {} files", max_threads(profile)));
        let started = Instant::now();
        let file_bytes = file_bytes_per_thread(profile);
        lay_out(&ctx.dir, max_threads(profile), file_bytes, ctx.cancel)?;
        outcome.notes.push(format!(
            "layout (not timed): {} files of {} MiB written and synced in {:.2} s",
            max_threads(profile),
            file_bytes / MIB,
            started.elapsed().as_secs_f64()
        ));

        for (i, &threads) in thread_counts(profile).iter().enumerate() {
            (ctx.progress)(&format!(
                "fio: {threads} thread(s) ({}/{})",
                i + 1,
                thread_counts(profile).len()
            ));
            let timeout = Duration::from_millis(2 * runtime_ms(profile)) + Duration::from_secs(300);
            let groups = run_fio(
                &fio,
                &ctx.scratch,
                &format!("{threads}-threads"),
                &self.job_file(&ctx.dir, threads, profile),
                ctx.cancel,
                timeout,
            )?;
            let read = expect_group(&groups, "read")?.read.clone();
            let write = expect_group(&groups, "write")?.write.clone();
            for (name, d) in [("read", &read), ("write", &write)] {
                if d.io_bytes == 0 || d.runtime_ms == 0 {
                    return Err(BenchError::Other(format!(
                        "fio did no {name}s at {threads} thread(s): {d:?}"
                    )));
                }
                let value = self.figure(d);
                if !value.is_finite() || value <= 0.0 {
                    return Err(BenchError::Other(format!(
                        "fio reported {value} {} for {name}s at {threads} thread(s)",
                        self.unit()
                    )));
                }
                outcome
                    .metrics
                    .push(Metric::higher(name, self.unit(), value).at(f64::from(threads)));
            }
            outcome.notes.push(format!(
                "{threads} thread(s): read {} MiB in {} ms; write {} MiB in {} ms (including \
                 the end fsync)",
                read.io_bytes / MIB,
                read.runtime_ms,
                write.io_bytes / MIB,
                write.runtime_ms
            ));
        }
        Ok(outcome)
    }
}

/// One direction of a fio group's report.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Direction {
    pub(super) iops: f64,
    pub(super) bw_bytes: f64,
    pub(super) io_bytes: u64,
    pub(super) runtime_ms: u64,
}

/// One group of fio's JSON report (with group_reporting, one entry per group).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Group {
    pub(super) name: String,
    pub(super) read: Direction,
    pub(super) write: Direction,
}

/// Writes the job file, runs fio on it and parses its JSON report.
pub(super) fn run_fio(
    fio: &Path,
    scratch: &Path,
    label: &str,
    job: &str,
    cancel: &Cancel,
    timeout: Duration,
) -> Result<Vec<Group>> {
    let job_path = scratch.join(format!("fio-{label}.fio"));
    let json_path = scratch.join(format!("fio-{label}.json"));
    std::fs::write(&job_path, job).map_err(io_err("writing", &job_path))?;
    let mut command = Command::new(fio);
    command
        .arg("--output-format=json")
        .arg(format!("--output={}", json_path.display()))
        .arg(&job_path)
        .current_dir(scratch);
    let line = cmd::describe(&command);
    cmd::run(&mut command, cancel, timeout)?;
    let text =
        std::fs::read_to_string(&json_path).map_err(io_err("reading fio's report", &json_path))?;
    parse_report(&text).map_err(|detail| BenchError::Command {
        command: line,
        detail,
    })
}

pub(super) fn expect_group<'a>(groups: &'a [Group], name: &str) -> Result<&'a Group> {
    groups
        .iter()
        .find(|g| g.name == name)
        .ok_or_else(|| BenchError::Other(format!("fio's report has no group {name:?}")))
}

/// Parses `fio --output-format=json`; a job that reports an error fails the whole report.
fn parse_report(text: &str) -> std::result::Result<Vec<Group>, String> {
    // fio may print warnings before the JSON object even with --output.
    let start = text.find('{').ok_or("fio wrote no JSON report")?;
    let root: Value = serde_json::from_str(&text[start..])
        .map_err(|e| format!("fio's JSON report does not parse: {e}"))?;
    let jobs = root["jobs"]
        .as_array()
        .ok_or("fio's JSON report has no \"jobs\"")?;
    let direction = |job: &Value, key: &str| -> std::result::Result<Direction, String> {
        let d = &job[key];
        let number = |field: &str| {
            d[field]
                .as_f64()
                .ok_or_else(|| format!("fio's report lacks {key}.{field}"))
        };
        Ok(Direction {
            iops: number("iops")?,
            bw_bytes: number("bw_bytes")?,
            io_bytes: number("io_bytes")? as u64,
            runtime_ms: number("runtime")? as u64,
        })
    };
    jobs.iter()
        .map(|job| {
            let name = job["jobname"].as_str().unwrap_or_default().to_string();
            let error = job["error"].as_i64().unwrap_or(-1);
            if error != 0 {
                return Err(format!(
                    "fio job {name:?} failed with error {error} ({})",
                    std::io::Error::from_raw_os_error(error as i32)
                ));
            }
            Ok(Group {
                read: direction(job, "read")?,
                write: direction(job, "write")?,
                name,
            })
        })
        .collect()
}

pub(super) fn fio_path() -> Result<std::path::PathBuf> {
    cmd::which("fio").ok_or_else(|| BenchError::Missing("fio (apt-get install fio)".into()))
}

/// `fio --version` ("fio-3.33") and where it is, once.
pub(super) fn fio_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let Ok(path) = fio_path() else {
            return "not installed (apt-get install fio)".into();
        };
        match cmd::run(
            Command::new(&path).arg("--version"),
            Cancel::global(),
            Duration::from_secs(10),
        ) {
            Ok(out) => format!("{}, {}", out.stdout.trim(), path.display()),
            Err(e) => format!("{} (`fio --version` failed: {e})", path.display()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::run_tiny;

    #[test]
    fn files_fit_in_the_ram_disks() {
        for p in [Profile::Tiny, Profile::Quick, Profile::Full] {
            let total = file_bytes_per_thread(p) * u64::from(max_threads(p));
            // A quarter leaves room for the file system's own use and for rampart's copy.
            assert!(total <= p.device_size_bytes() / 4, "{p:?}: {total}");
        }
    }

    #[test]
    fn job_files_name_every_setting() {
        let w = Fio {
            pattern: Pattern::Random4k,
        };
        let job = w.job_file(Path::new("/mnt/x"), 8, Profile::Quick);
        for line in [
            "directory=/mnt/x",
            "filename_format=data.$jobnum",
            "ioengine=psync",
            "direct=0",
            "thread",
            "numjobs=8",
            "size=4m",
            "group_reporting",
            "bs=4k",
            "time_based",
            "runtime=200ms",
            "invalidate=1",
            "rw=randread",
            "stonewall",
            "rw=randwrite",
            "end_fsync=1",
        ] {
            assert!(job.lines().any(|l| l == line), "{line} missing from\n{job}");
        }
    }

    #[test]
    fn settings_name_every_parameter() {
        for w in workloads() {
            for p in [Profile::Tiny, Profile::Quick, Profile::Full] {
                let settings = w.settings(p);
                let keys: Vec<&str> = settings.iter().map(|(k, _)| k.as_str()).collect();
                for key in [
                    "fio",
                    "paper",
                    "threads",
                    "access",
                    "files",
                    "layout",
                    "runtime",
                    "ioengine",
                    "direct",
                    "invalidate",
                    "writes",
                    "metric",
                ] {
                    assert!(
                        keys.contains(&key),
                        "{} {p:?}: no {key:?} in {keys:?}",
                        w.id()
                    );
                }
                let job = &settings.last().unwrap().1;
                assert!(
                    job.contains(&format!("numjobs={}\n", max_threads(p))),
                    "{job}"
                );
                if p == Profile::Full {
                    for (k, v) in &settings {
                        println!("{}: {k}: {v}", w.id());
                    }
                }
            }
        }
    }

    #[test]
    fn parses_a_json_report_and_refuses_a_failed_job() {
        let text = r#"note: a warning first
{
  "fio version" : "fio-3.33",
  "jobs" : [
    { "jobname" : "read", "groupid" : 0, "error" : 0,
      "read" : { "io_bytes" : 2838686647, "bw_bytes" : 9995375517, "iops" : 693038.7, "runtime" : 284 },
      "write" : { "io_bytes" : 0, "bw_bytes" : 0, "iops" : 0.0, "runtime" : 0 } },
    { "jobname" : "write", "groupid" : 1, "error" : 0,
      "read" : { "io_bytes" : 0, "bw_bytes" : 0, "iops" : 0.0, "runtime" : 0 },
      "write" : { "io_bytes" : 2274039621, "bw_bytes" : 8269234985, "iops" : 555185.4, "runtime" : 275 } }
  ]
}"#;
        let groups = parse_report(text).unwrap();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].name, "read");
        assert_eq!(groups[0].read.runtime_ms, 284);
        assert!((groups[1].write.iops - 555185.4).abs() < 1e-6);
        let failed = text.replacen("\"error\" : 0", "\"error\" : 28", 1);
        let err = parse_report(&failed).unwrap_err();
        assert!(err.contains("error 28"), "{err}");
        assert!(parse_report("no json").is_err());
    }

    /// Times both fio workloads at `BENCH_PROFILE` (quick or full) on the folder `BENCH_DIR`:
    /// `BENCH_DIR=/mnt BENCH_PROFILE=quick cargo test -p rampart-bench --lib
    /// fio::tests::time_a_profile -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn time_a_profile() {
        crate::testing::time_a_profile_from_env(workloads());
    }

    #[test]
    fn both_patterns_run_at_the_tiny_profile() {
        if fio_path().is_err() {
            println!("skipped: fio is not installed (apt-get install fio)");
            return;
        }
        for w in workloads() {
            let started = std::time::Instant::now();
            let outcome = run_tiny(w.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", w.id()));
            let points: Vec<(&str, Option<f64>)> = outcome
                .metrics
                .iter()
                .map(|m| (m.name.as_str(), m.x))
                .collect();
            assert_eq!(
                points,
                [
                    ("read", Some(1.0)),
                    ("write", Some(1.0)),
                    ("read", Some(2.0)),
                    ("write", Some(2.0))
                ],
                "{}",
                w.id()
            );
            for m in &outcome.metrics {
                assert!(m.value.is_finite() && m.value > 0.0, "{}: {m:?}", w.id());
                // Plausible on any machine: under 100 million IOPS or 1 TiB/s.
                assert!(m.value < 1e8, "{}: {m:?}", w.id());
            }
            println!(
                "{}: {} in {:.2} s",
                w.id(),
                outcome
                    .metrics
                    .iter()
                    .map(|m| format!(
                        "{} {:.0} {} @{}",
                        m.name,
                        m.value,
                        m.unit,
                        m.x.unwrap_or_default()
                    ))
                    .collect::<Vec<_>>()
                    .join(", "),
                started.elapsed().as_secs_f64()
            );
        }
    }
}

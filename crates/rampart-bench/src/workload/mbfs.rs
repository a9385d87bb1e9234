//! MBFS (USENIX 1999) §7.1: the workloads whose data need not reach the disk — a copy of a
//! 10 MB file, the small-file create/write/delete loop, and the untar of a source tree. As in
//! the paper nothing is fsync'd: they measure how fast a file system takes data it may keep in
//! memory, which is what a memory-first file system is for.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::data::{
    close_checked, group_digits, io_err, sync_and_fsync_dir, write_random_file, SplitMix64,
};
use super::fsync_each::{fsync_note, FsyncShim};
use super::{Ctx, Metric, Outcome, PlotKind, Workload};
use crate::cmd::{self, Cancel};
use crate::error::{BenchError, Result};
use crate::profile::Profile;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(LargeCopy),
        Box::new(SmallFileLoop),
        Box::new(Untar),
    ]
}

const MIB: f64 = (1u64 << 20) as f64;

/// What the copy and the small-file loop do on host-fsync.
const HOST_FSYNC_TEXT: &str = "the file written is fsync'd before it is closed, inside the \
     timed part (the close's time includes it), so that it is durable as a program that wants \
     it on disk would make it; every other peer runs without fsync, as the paper did";

// ---------------------------------------------------------------------------------------------
// Copy of a 10 MB file.

/// The paper's "existing 10 MB file"; read as MiB here.
const COPY_SIZE_BYTES: u64 = 10 << 20;
/// The read/write chunk: coreutils `cp`'s buffer when it copies by read/write.
const COPY_CHUNK_BYTES: usize = 128 << 10;
/// Seed of the source file's pseudo-random contents.
const COPY_SEED: u64 = 0x4d42_4653_1999;

fn copies_per_run(profile: Profile) -> usize {
    profile.pick(1, 3, 10)
}

struct LargeCopy;

impl Workload for LargeCopy {
    fn id(&self) -> &'static str {
        "mbfs-copy"
    }

    fn title(&self) -> &'static str {
        "MBFS large-write test: copy of a 10 MiB file"
    }

    fn source(&self) -> &'static str {
        "MBFS (USENIX 1999) §7.1, Figure 1"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        vec![
            (
                "file size".into(),
                format!("10 MiB ({} B; paper: 10 MB)", group_digits(COPY_SIZE_BYTES)),
            ),
            (
                "source file".into(),
                format!(
                    "written on the peer before timing, pseudo-random bytes (splitmix64, seed \
                     {COPY_SEED:#x}: incompressible), fsync'd, then read once so it is in the page \
                     cache (the paper preloaded it into the client cache to remove read traffic)"
                ),
            ),
            (
                "copy".into(),
                format!(
                    "open the source, create the copy, read/write {} KiB chunks, close both; timed \
                     from the first open to the last close; no fsync, as in the paper (a copy \
                     needs no disk persistence; MBFS issues no commit); read/write rather than \
                     copy_file_range, so no peer can reflink instead of writing",
                    COPY_CHUNK_BYTES >> 10
                ),
            ),
            (
                "copies per run".into(),
                format!(
                    "{} (the paper ran each test several times and averaged); the mean is \
                     reported; before each copy the previous one is deleted and the file system \
                     synced (untimed)",
                    copies_per_run(profile)
                ),
            ),
            (
                "clients".into(),
                "1 local process (paper: 1–10 client machines over a network)".into(),
            ),
            ("on host-fsync".into(), HOST_FSYNC_TEXT.into()),
        ]
    }

    fn fsyncs_each_file(&self) -> bool {
        true
    }

    // On the daemon path the copy's time is the kernel's writeback through FUSE, which the
    // floor measures (its reads return zeros, and the copy checks only the size: decision 0104).
    fn runs_on_floor(&self) -> bool {
        true
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let source = ctx.dir.join("source-10MiB");
        (ctx.progress)("writing the source file");
        write_random_file(&source, COPY_SIZE_BYTES, &mut SplitMix64(COPY_SEED))?;
        read_whole_file(&source)?;
        sync_and_fsync_dir(&ctx.dir)?;
        let copies = copies_per_run(ctx.profile);
        let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
        let mut total = Duration::ZERO;
        for i in 0..copies {
            ctx.cancel.check()?;
            (ctx.progress)(&format!("copy {}/{copies}", i + 1));
            let target = ctx.dir.join("copy");
            total += copy_file(&source, &target, &mut buffer, ctx.fsync_each_file())?;
            let copied_bytes = std::fs::metadata(&target)
                .map_err(io_err("reading the size of", &target))?
                .len();
            if copied_bytes != COPY_SIZE_BYTES {
                return Err(BenchError::Other(format!(
                    "the copy {} has {copied_bytes} bytes, not {COPY_SIZE_BYTES}",
                    target.display()
                )));
            }
            std::fs::remove_file(&target).map_err(io_err("removing", &target))?;
            sync_and_fsync_dir(&ctx.dir)?;
        }
        let mean_s = total.as_secs_f64() / copies as f64;
        Ok(Outcome {
            metrics: vec![
                Metric::higher(
                    "copy",
                    "MiB/s",
                    COPY_SIZE_BYTES as f64 / MIB / mean_s.max(1e-9),
                ),
                Metric::lower("copy time", "s", mean_s),
            ],
            notes: if ctx.fsync_each_file() {
                vec![
                    format!("mean of {copies} copies"),
                    fsync_note(copies as u64, "each copy fsync'd before its close, timed"),
                ]
            } else {
                vec![format!("mean of {copies} copies")]
            },
        })
    }
}

fn read_whole_file(path: &Path) -> Result<u64> {
    let mut file = File::open(path).map_err(io_err("opening", path))?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(io_err("reading", path))?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
    }
}

/// The timed copy: both opens, the read/write loop and both closes.
fn copy_file(source: &Path, target: &Path, buffer: &mut [u8], fsync: bool) -> Result<Duration> {
    let started = Instant::now();
    let mut from = File::open(source).map_err(io_err("opening", source))?;
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(target)
        .map_err(io_err("creating", target))?;
    loop {
        let n = from.read(buffer).map_err(io_err("reading", source))?;
        if n == 0 {
            break;
        }
        to.write_all(&buffer[..n])
            .map_err(io_err("writing", target))?;
    }
    close_checked(from, source)?;
    if fsync {
        to.sync_all().map_err(io_err("fsync of", target))?;
    }
    close_checked(to, target)?;
    Ok(started.elapsed())
}

// ---------------------------------------------------------------------------------------------
// The small-file loop.

/// Iterations per client in the paper ("repeatedly (100 times)").
const LOOP_ROUND: usize = 100;
const LOOP_FILE_BYTES: usize = 1024;

fn loop_rounds(profile: Profile) -> usize {
    profile.pick(1, 20, 100)
}

struct SmallFileLoop;

impl Workload for SmallFileLoop {
    fn id(&self) -> &'static str {
        "mbfs-small-file-loop"
    }

    fn title(&self) -> &'static str {
        "MBFS small-file test: create, write 1 KiB, close, delete"
    }

    fn source(&self) -> &'static str {
        "MBFS (USENIX 1999) §7.1, Figure 3"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let rounds = loop_rounds(profile);
        vec![
            (
                "iteration".into(),
                format!(
                    "open(O_CREAT|O_EXCL|O_WRONLY) a new file, one {LOOP_FILE_BYTES}-byte write, \
                     close, unlink; each file has its own name; no fsync (the paper: these files \
                     need no persistence); the bytes are pseudo-random (splitmix64, seed \
                     0x5eed), so compression gains nothing"
                ),
            ),
            (
                "iterations".into(),
                format!(
                    "{} = {rounds} × the paper's {LOOP_ROUND} (paper: 100 per client; repeated \
                     here so the rate is not a millisecond's noise)",
                    group_digits((rounds * LOOP_ROUND) as u64)
                ),
            ),
            (
                "metrics".into(),
                "files/s = iterations / their total time; the mean time of each system call \
                 (the paper's per-operation breakdown, Figure 3b)"
                    .into(),
            ),
            (
                "clients".into(),
                "1 local process (paper: 1–10 client machines over a network)".into(),
            ),
            ("on host-fsync".into(), HOST_FSYNC_TEXT.into()),
        ]
    }

    fn runs_on_floor(&self) -> bool {
        true
    }

    fn fsyncs_each_file(&self) -> bool {
        true
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let loop_dir = ctx.dir.join("loop");
        std::fs::create_dir(&loop_dir).map_err(io_err("creating", &loop_dir))?;
        sync_and_fsync_dir(&ctx.dir)?;
        let rounds = loop_rounds(ctx.profile);
        // Incompressible, so btrfs with zstd writes as many bytes as everyone else.
        let mut data = [0u8; LOOP_FILE_BYTES];
        super::data::SplitMix64(0x5eed).fill(&mut data);
        // Time in create, write, close, unlink.
        let mut op_time = [Duration::ZERO; 4];
        let mut total = Duration::ZERO;
        let mut path = loop_dir.join("f");
        let fsync_each = ctx.fsync_each_file();
        let mut fsyncs = 0u64;
        for round in 0..rounds {
            ctx.cancel.check()?;
            if round % 10 == 0 {
                (ctx.progress)(&format!("round {}/{rounds}", round + 1));
            }
            let round_started = Instant::now();
            for i in 0..LOOP_ROUND {
                path.set_file_name(format!("f{round:04}-{i:03}"));
                let t0 = Instant::now();
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(io_err("creating", &path))?;
                let t1 = Instant::now();
                file.write_all(&data).map_err(io_err("writing", &path))?;
                let t2 = Instant::now();
                if fsync_each {
                    file.sync_all().map_err(io_err("fsync of", &path))?;
                    fsyncs += 1;
                }
                close_checked(file, &path)?;
                let t3 = Instant::now();
                std::fs::remove_file(&path).map_err(io_err("removing", &path))?;
                let t4 = Instant::now();
                op_time[0] += t1 - t0;
                op_time[1] += t2 - t1;
                op_time[2] += t3 - t2;
                op_time[3] += t4 - t3;
            }
            total += round_started.elapsed();
        }
        let iterations = rounds * LOOP_ROUND;
        let mean_us = |d: Duration| d.as_secs_f64() * 1e6 / iterations as f64;
        let mut notes = vec![format!(
            "{iterations} iterations in {:.3} s",
            total.as_secs_f64()
        )];
        if fsync_each {
            notes.push(fsync_note(
                fsyncs,
                "each file fsync'd before its close, timed with it",
            ));
        }
        Ok(Outcome {
            metrics: vec![
                Metric::rate("create-write-delete", "files/s", iterations as f64, total),
                Metric::lower("create", "µs", mean_us(op_time[0])),
                Metric::lower("write 1 KiB", "µs", mean_us(op_time[1])),
                Metric::lower("close", "µs", mean_us(op_time[2])),
                Metric::lower("delete", "µs", mean_us(op_time[3])),
            ],
            notes,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Untar of a source tree.

/// The workspace's lock file, compiled in: it names the exact crate versions this binary was
/// built from, whose `.crate` files (gzip'd tars) are therefore in the builder's cargo cache.
const CARGO_LOCK: &str = include_str!("../../../../Cargo.lock");
/// The crate used as the source tarball: libc, hundreds of files of C bindings, on every Linux
/// build of rampart.
const TARBALL_CRATE: &str = "libc";
/// The repository, for the `git archive` fallback.
const REPO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// How long one tar may run before it is killed.
const TAR_TIMEOUT: Duration = Duration::from_secs(300);

fn untars_per_run(profile: Profile) -> usize {
    profile.pick(1, 2, 5)
}

/// Where the tarball comes from.
enum TarSource {
    /// A `.crate` from the cargo cache (gzip'd).
    Crate { path: PathBuf, name: String },
    /// `git archive HEAD` of the repository (plain tar).
    Git { repo: PathBuf, commit: String },
}

impl TarSource {
    fn describe(&self) -> String {
        match self {
            TarSource::Crate { path, name } => {
                format!("{name} from the cargo cache ({})", path.display())
            }
            TarSource::Git { repo, commit } => {
                format!("`git archive HEAD` of {} (commit {commit})", repo.display())
            }
        }
    }

    /// Puts the plain (uncompressed) tar into `scratch`; returns its path.
    fn prepare(&self, scratch: &Path, cancel: &Cancel) -> Result<PathBuf> {
        match self {
            TarSource::Crate { path, name } => {
                let gz = scratch.join(format!("{name}.tar.gz"));
                std::fs::copy(path, &gz).map_err(io_err("copying to scratch", path))?;
                cmd::run(Command::new("gzip").arg("-d").arg(&gz), cancel, TAR_TIMEOUT)?;
                Ok(scratch.join(format!("{name}.tar")))
            }
            TarSource::Git { repo, .. } => {
                let tar = scratch.join("rampart-source.tar");
                cmd::run(
                    Command::new("git")
                        .arg("-C")
                        .arg(repo)
                        .args(["archive", "--format=tar", "-o"])
                        .arg(&tar)
                        .arg("HEAD"),
                    cancel,
                    TAR_TIMEOUT,
                )?;
                Ok(tar)
            }
        }
    }
}

/// The version of `name` pinned in a Cargo.lock text (the first one when several are).
fn locked_version<'a>(lock: &'a str, name: &str) -> Option<&'a str> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == wanted {
            let version = lines.next()?.trim();
            return version
                .strip_prefix("version = \"")
                .and_then(|v| v.strip_suffix('"'));
        }
    }
    None
}

/// The sha256 Cargo.lock records for the first package named `name`.
fn locked_checksum<'a>(lock: &'a str, name: &str) -> Option<&'a str> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines().skip_while(|l| l.trim() != wanted).skip(1);
    lines
        .by_ref()
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("[["))
        .find_map(|l| {
            l.trim()
                .strip_prefix("checksum = \"")
                .and_then(|c| c.strip_suffix('"'))
        })
}

/// Whether `path` has the sha256 `expected`: the bench extracts it as root, and the cargo
/// cache may belong to another user, so only the exact crate Cargo.lock pins is used.
fn has_checksum(path: &Path, expected: &str) -> bool {
    cmd::run(
        Command::new("sha256sum").arg(path),
        Cancel::global(),
        Duration::from_secs(60),
    )
    .is_ok_and(|out| out.stdout.split_whitespace().next() == Some(expected))
}

fn cargo_homes() -> Vec<PathBuf> {
    let mut homes = Vec::new();
    if let Some(h) = std::env::var_os("CARGO_HOME") {
        homes.push(PathBuf::from(h));
    }
    if let Some(h) = option_env!("CARGO_HOME") {
        homes.push(PathBuf::from(h));
    }
    if let Some(h) = std::env::var_os("HOME") {
        homes.push(PathBuf::from(h).join(".cargo"));
    }
    homes.push(PathBuf::from("/root/.cargo"));
    homes
}

/// The source tarball: the pinned libc `.crate` from the cargo cache, else a `git archive` of
/// the repository, else `Missing`.
fn locate_tarball() -> Result<TarSource> {
    let version = locked_version(CARGO_LOCK, TARBALL_CRATE);
    if let Some(version) = version {
        let name = format!("{TARBALL_CRATE}-{version}");
        for home in cargo_homes() {
            let cache = home.join("registry/cache");
            let Ok(entries) = std::fs::read_dir(&cache) else {
                continue;
            };
            let mut registries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            registries.sort();
            for registry in registries {
                let path = registry.join(format!("{name}.crate"));
                let checksum = locked_checksum(CARGO_LOCK, TARBALL_CRATE);
                if path.is_file() && checksum.is_some_and(|c| has_checksum(&path, c)) {
                    return Ok(TarSource::Crate { path, name });
                }
            }
        }
    }
    let repo = Path::new(REPO_DIR);
    if repo.join(".git").exists() {
        let out = cmd::run(
            Command::new("git")
                .arg("-C")
                .arg(repo)
                .args(["rev-parse", "HEAD"]),
            Cancel::global(),
            Duration::from_secs(30),
        );
        if let Ok(out) = out {
            return Ok(TarSource::Git {
                repo: repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf()),
                commit: out.stdout.trim().to_string(),
            });
        }
    }
    Err(BenchError::Missing(format!(
        "a source tarball for mbfs-untar: neither {TARBALL_CRATE}-{}.crate in a cargo registry \
         cache (~/.cargo/registry/cache/*/; `cargo fetch` in the rampart repository puts it \
         there) nor the rampart git repository at {REPO_DIR}",
        version.unwrap_or("?")
    )))
}

/// What a tar holds.
#[derive(Debug, PartialEq)]
struct TarListing {
    /// Everything that is not a directory (regular files, links).
    files: u64,
    /// Directories, listed or implied by the paths.
    dirs: u64,
    /// Sum of the listed sizes.
    bytes: u64,
}

/// Parses `tar -tv` output (GNU format: `-rw-r--r-- 0/0 1234 2024-01-01 00:00 path`).
fn parse_listing(text: &str) -> Result<TarListing> {
    let mut dirs = BTreeSet::new();
    let (mut files, mut bytes) = (0u64, 0u64);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(mode), Some(size), true) = (fields.first(), fields.get(2), fields.len() > 5)
        else {
            return Err(BenchError::Other(format!(
                "unexpected `tar -tv` line: {line:?}"
            )));
        };
        // The path is the rest (it may hold spaces); a link's target follows it.
        let rest = fields[5..].join(" ");
        let path = match rest
            .split_once(" -> ")
            .or_else(|| rest.split_once(" link to "))
        {
            Some((path, _)) => path.to_string(),
            None => rest,
        };
        let size: u64 = size.parse().map_err(|_| {
            BenchError::Other(format!("unexpected size in `tar -tv` line: {line:?}"))
        })?;
        let path = path.trim_end_matches('/');
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            dirs.insert(p.to_path_buf());
            parent = p.parent();
        }
        if mode.starts_with('d') {
            dirs.insert(PathBuf::from(path));
        } else {
            files += 1;
            bytes += size;
        }
    }
    Ok(TarListing {
        files,
        dirs: dirs.len() as u64,
        bytes,
    })
}

fn list_tar(tar: &Path, cancel: &Cancel) -> Result<TarListing> {
    let gzip = tar.extension().is_some_and(|e| e == "crate" || e == "gz");
    let flags = if gzip { "-tvzf" } else { "-tvf" };
    let out = cmd::run(Command::new("tar").arg(flags).arg(tar), cancel, TAR_TIMEOUT)?;
    parse_listing(&out.stdout)
}

/// Counts what is under `root` (not `root` itself): (non-directories, directories).
fn count_tree(root: &Path) -> Result<(u64, u64)> {
    let (mut files, mut dirs) = (0u64, 0u64);
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io_err("listing", &dir))? {
            let entry = entry.map_err(io_err("listing", &dir))?;
            let kind = entry
                .file_type()
                .map_err(io_err("reading the type of", &entry.path()))?;
            if kind.is_dir() {
                dirs += 1;
                stack.push(entry.path());
            } else {
                files += 1;
            }
        }
    }
    Ok((files, dirs))
}

/// How tar extracts: as an ordinary user would, without restoring owners or exact modes (root
/// would otherwise chown every file).
const TAR_EXTRACT_ARGS: [&str; 3] = ["--no-same-owner", "--no-same-permissions", "-xf"];

struct Untar;

impl Workload for Untar {
    fn id(&self) -> &'static str {
        "mbfs-untar"
    }

    fn title(&self) -> &'static str {
        "MBFS untar test: untar of a source tree"
    }

    fn source(&self) -> &'static str {
        "MBFS (USENIX 1999) §7.1, Figure 4 (the paper untarred the Tcl 7.5 sources)"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let tarball = match locate_tarball() {
            Ok(source) => {
                let contents = match &source {
                    TarSource::Crate { path, .. } => {
                        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                        match list_tar(path, Cancel::global()) {
                            Ok(l) => format!(
                                "; {} B gzip'd; {} files and {} directories, {} B unpacked",
                                group_digits(size),
                                group_digits(l.files),
                                group_digits(l.dirs),
                                group_digits(l.bytes)
                            ),
                            Err(e) => format!("; could not be listed: {e}"),
                        }
                    }
                    TarSource::Git { .. } => {
                        "; its size and file count are in each run's notes".into()
                    }
                };
                format!("{}{contents}", source.describe())
            }
            Err(e) => e.to_string(),
        };
        vec![
            ("tarball".into(), tarball),
            (
                "choice".into(),
                format!(
                    "the {TARBALL_CRATE} crate at the version pinned in rampart's Cargo.lock (a \
                     real source tree on every machine that built rampart; no network needed); \
                     fallback: `git archive HEAD` of the rampart repository"
                ),
            ),
            (
                "preparation (untimed)".into(),
                "copied to a scratch folder in /dev/shm and decompressed there, so the timed \
                 part is the file system's work, not gunzip's (the paper: untar is I/O bound)"
                    .into(),
            ),
            (
                "timed command".into(),
                format!(
                    "tar {} TARBALL.tar -C DIR (GNU tar; run as root)",
                    TAR_EXTRACT_ARGS.join(" ")
                ),
            ),
            (
                "sync".into(),
                "none in the timed part, as in the paper (the files are recreatable from the \
                 tar, so they need no disk persistence); the file system is synced untimed \
                 before each untar"
                    .into(),
            ),
            (
                "on host-fsync".into(),
                "tar runs under an LD_PRELOAD shim whose close(2) fsyncs every regular file \
                 open for writing before closing it (compiled with cc, untimed); the fsyncs \
                 are counted in the notes"
                    .into(),
            ),
            (
                "untars per run".into(),
                format!(
                    "{}, each into a new directory; the mean is reported; the extracted tree is \
                     counted (untimed) against the tar's listing",
                    untars_per_run(profile)
                ),
            ),
        ]
    }

    fn check_tools(&self) -> Result<()> {
        for tool in ["tar", "gzip"] {
            cmd::run(
                Command::new(tool).arg("--version"),
                Cancel::global(),
                Duration::from_secs(10),
            )?;
        }
        locate_tarball().map(|_| ())
    }

    fn fsyncs_each_file(&self) -> bool {
        true
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        (ctx.progress)("preparing the tarball");
        let source = locate_tarball()?;
        let tar = source.prepare(&ctx.scratch, ctx.cancel)?;
        let listing = list_tar(&tar, ctx.cancel)?;
        let tar_bytes = std::fs::metadata(&tar)
            .map_err(io_err("reading the size of", &tar))?
            .len();
        let untars = untars_per_run(ctx.profile);
        let shim = if ctx.fsync_each_file() {
            Some(FsyncShim::build(&ctx.scratch, ctx.cancel)?)
        } else {
            None
        };
        let mut total = Duration::ZERO;
        for i in 0..untars {
            ctx.cancel.check()?;
            (ctx.progress)(&format!("untar {}/{untars}", i + 1));
            let target = ctx.dir.join(format!("untar-{i}"));
            std::fs::create_dir(&target).map_err(io_err("creating", &target))?;
            sync_and_fsync_dir(&ctx.dir)?;
            let mut command = Command::new("tar");
            command
                .args(TAR_EXTRACT_ARGS)
                .arg(&tar)
                .arg("-C")
                .arg(&target);
            if let Some(shim) = &shim {
                shim.apply(&mut command);
            }
            total += cmd::run(&mut command, ctx.cancel, TAR_TIMEOUT)?.elapsed;
            let found = count_tree(&target)?;
            if found != (listing.files, listing.dirs) {
                return Err(BenchError::Other(format!(
                    "untar into {} made {} files and {} directories; the tar lists {} and {}",
                    target.display(),
                    found.0,
                    found.1,
                    listing.files,
                    listing.dirs
                )));
            }
        }
        let mean_s = total.as_secs_f64() / untars as f64;
        let mut notes = Vec::new();
        if let Some(shim) = &shim {
            notes.push(fsync_note(
                shim.fsyncs()?,
                "tar under the LD_PRELOAD shim: close fsyncs a file open for writing",
            ));
        }
        Ok(Outcome {
            metrics: vec![
                Metric::higher("untar", "files/s", listing.files as f64 / mean_s.max(1e-9)),
                Metric::lower("untar time", "s", mean_s),
            ],
            notes: notes
                .into_iter()
                .chain([format!(
                    "{}: {} B tar, {} files and {} directories; mean of {untars} untar(s)",
                    source.describe(),
                    tar_bytes,
                    listing.files,
                    listing.dirs
                )])
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::run_tiny;

    fn assert_positive(outcome: &Outcome, names: &[&str]) {
        for name in names {
            let m = outcome
                .metrics
                .iter()
                .find(|m| m.name == *name)
                .unwrap_or_else(|| panic!("no metric {name}: {outcome:?}"));
            assert!(m.value.is_finite() && m.value > 0.0, "{m:?}");
        }
    }

    #[test]
    fn copy_measures_rate_and_time() {
        let outcome = run_tiny(&LargeCopy).unwrap();
        assert_positive(&outcome, &["copy", "copy time"]);
    }

    #[test]
    fn small_file_loop_measures_rate_and_each_call() {
        let outcome = run_tiny(&SmallFileLoop).unwrap();
        assert_positive(
            &outcome,
            &[
                "create-write-delete",
                "create",
                "write 1 KiB",
                "close",
                "delete",
            ],
        );
    }

    #[test]
    fn untar_measures_rate_and_time() {
        let outcome = run_tiny(&Untar).unwrap();
        assert_positive(&outcome, &["untar", "untar time"]);
        let settings = Untar.settings(Profile::Tiny);
        assert!(!settings[0].1.starts_with("missing"), "{settings:?}");
    }

    #[test]
    fn libc_version_comes_from_the_lock_file() {
        let lock = "[[package]]\nname = \"libc\"\nversion = \"0.2.191\"\nsource = \"x\"\n";
        assert_eq!(locked_version(lock, "libc"), Some("0.2.191"));
        assert_eq!(locked_version(lock, "nix"), None);
        assert!(locked_version(CARGO_LOCK, TARBALL_CRATE).is_some());
    }

    #[test]
    fn the_tarball_must_match_the_lock_files_checksum() {
        let lock = "[[package]]\nname = \"libc\"\nversion = \"1\"\nchecksum = \"ab\"\n\n\
                    [[package]]\nname = \"nix\"\nversion = \"2\"\nchecksum = \"cd\"\n";
        assert_eq!(locked_checksum(lock, "libc"), Some("ab"));
        assert_eq!(locked_checksum(lock, "nix"), Some("cd"));
        assert_eq!(locked_checksum(lock, "zstd"), None);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.crate");
        std::fs::write(&file, b"abc").unwrap();
        // sha256("abc")
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert!(has_checksum(&file, abc));
        assert!(!has_checksum(&file, &abc.replace('b', "c")));
    }

    #[test]
    fn tar_listing_counts_files_and_implied_directories() {
        let text = "-rw-r--r-- 0/0 10 2024-01-01 00:00 a-1/Cargo.toml\n\
                    -rw-r--r-- 0/0 5 2024-01-01 00:00 a-1/src/lib.rs\n\
                    drwxr-xr-x 0/0 0 2024-01-01 00:00 a-1/empty/\n\
                    lrwxrwxrwx 0/0 0 2024-01-01 00:00 a-1/b c/link -> ../x\n";
        assert_eq!(
            parse_listing(text).unwrap(),
            TarListing {
                files: 3,
                dirs: 4,
                bytes: 15
            }
        );
    }
}

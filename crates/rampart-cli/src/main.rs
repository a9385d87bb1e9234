//! `rampart`: create, mount, unmount and inspect rampart file systems (docs/CLI.md).

/// `print!` without its panic: see [`print_out`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::print_out(&format!($($arg)*)) };
}

/// `println!` without its panic: see [`print_out`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::print_out(&format!("{}\n", format_args!($($arg)*))) };
}

mod bench;
mod categories_cmd;
mod control;
mod daemon;
mod fsck;
mod manuals;
mod memory_trim;
mod metrics;
mod mount_helper;
mod mount_options;
mod mounts;
mod page_flusher;
mod remount;
mod sd_notify;
mod size;
mod sync_cmd;
mod unprivileged;
mod watch;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use rampart_core::physical_memory_bytes;

#[derive(Parser)]
#[command(
    name = "rampart",
    version,
    about = "A memory-first hybrid file system: metadata and small files live in RAM"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a new, empty store (a folder that holds a rampart file system).
    Mkfs {
        /// Path of the store folder to create (must not exist, or be empty).
        store: PathBuf,
        /// Files larger than this live on the disk tier, one host file each in the store's
        /// data/ folder: a size (4096, 64K, 1M, 1G; at least 4K) or `off` [default: 1M]. A
        /// mount can override it.
        #[arg(long, value_name = "SIZE|off", value_parser = parse_threshold)]
        large_file_threshold: Option<u64>,
        /// Make a second copy of the store (DA2) in DIR (must not exist, or be empty; meant
        /// for another disk): every durable write reaches both copies, and ROBUST and
        /// PARANOID can be used.
        #[arg(long, value_name = "DIR")]
        mirror: Option<PathBuf>,
    },
    /// Manage the store's second copy (DA2).
    #[command(subcommand)]
    Mirror(MirrorCmd),
    /// Mount a store (by default as a background daemon).
    #[command(after_long_help = MOUNT_LONG_HELP)]
    Mount(MountArgs),
    /// Unmount a rampart mount; waits for its daemon to finish.
    Umount {
        mountpoint: PathBuf,
        /// Detach now even if files are open (they are closed when their users let go).
        #[arg(long)]
        lazy: bool,
    },
    /// Show files, directories, bytes and memory used against the cap of a mount.
    Status {
        mountpoint: PathBuf,
        /// Print one JSON object (its schema: docs/status-schema.json).
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Redraw the figures every --interval, like top, until Ctrl-C or the unmount.
        #[arg(long)]
        watch: bool,
        /// How often --watch redraws: e.g. 1s, 500ms (100ms to 1h).
        #[arg(long, default_value = "1s", value_parser = watch::parse_interval)]
        interval: Duration,
    },
    /// Make what was written to a mount durable now (what sync(1) cannot ask of a FUSE file
    /// system): the kernel's cached writes are sent to the daemon, files held until a later
    /// deadline are made present, and the journal is committed to the store. TEMPORARY and
    /// DISPOSABLE files stay out of the store, as their category says.
    Sync {
        mountpoint: PathBuf,
        /// Only commit what is pending, as the commit timer would now: files the archiver
        /// holds until their deadline (EVENTUAL, SOMETIME, ...) stay held.
        #[arg(long)]
        commit_only: bool,
    },
    /// Show the category of files on a mount: its name, where it came from (the API, an
    /// attribute, rule N, the directory, the store default) and its spec per level.
    Stat {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Show the categories and filename rules in force on a mount (that of the first PATH,
    /// or of the current directory), and for each PATH which rule matches it and why.
    Rules {
        paths: Vec<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run the papers' benchmarks on rampart and its peers and write a report (as root).
    Bench(bench::BenchArgs),
    /// Check an unmounted store (superblock, checkpoint, journal, replay, invariants).
    Fsck {
        store: PathBuf,
        /// Repair what can be repaired: drop the journal from a damage on, stop the replay at
        /// an op that does not apply, fix invariants (unreachable inodes go to /lost+found),
        /// and write the result as a new checkpoint with an empty journal.
        #[arg(long)]
        repair: bool,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write the manual pages (man1/*.1) and shell completions (bash, zsh, fish) into DIR.
    #[command(hide = true)]
    GenerateManuals { dir: PathBuf },
    /// The page flusher's child process (a syncfs of MOUNTPOINT per line read; the daemon
    /// starts it: docs/decisions/0026).
    #[command(name = "page-flusher-child", hide = true)]
    PageFlusherChild { mountpoint: PathBuf, device: String },
    /// Serve the FUSE floor at MOUNTPOINT until it is unmounted: a FUSE server whose handlers
    /// do nothing useful, mounted with rampart's FUSE settings (`rampart bench`'s `floor` peer;
    /// docs/decisions/0070).
    #[command(hide = true)]
    BenchFloor {
        mountpoint: PathBuf,
        /// FUSE worker threads [default: rampart's].
        #[arg(long, value_parser = parse_threads)]
        threads: Option<usize>,
        #[arg(long, value_parser = ["on", "off"], default_value = "on")]
        fuse_io_uring: String,
        #[arg(long, value_parser = ["on", "off"], default_value = "on")]
        writeback_cache: String,
        /// As rampart's: `auto` is `on` here (the floor has no store whose files need OPEN).
        #[arg(long, value_parser = ["auto", "on", "off"], default_value = "auto")]
        no_open: String,
        /// As rampart's: `auto` is `on` here (no file needs FLUSH).
        #[arg(long, value_parser = ["auto", "on", "off"], default_value = "auto")]
        no_flush: String,
    },
}

#[derive(clap::Args, Clone)]
struct MountArgs {
    /// The store to mount [default: $RAMPART_HOME/store, created on first use].
    store: Option<PathBuf>,
    /// Where to mount it [default: ~/rampart, created if missing].
    mountpoint: Option<PathBuf>,
    /// Stay in the foreground (prints "ready" once mounted).
    #[arg(long, short)]
    foreground: bool,
    /// Most memory the file system may hold: bytes, K/M/G/T, or a share of RAM like 50%.
    #[arg(long, default_value = "50%", value_parser = parse_memory_cap)]
    memory_cap: u64,
    /// FUSE worker threads, 1 to 256 [default: twice the cores, at least 4, at most 16].
    #[arg(long, value_parser = parse_threads)]
    threads: Option<usize>,
    /// Only the mounting user may enter the mount (the default for root is every user, with
    /// permissions enforced by the kernel).
    #[arg(long, conflicts_with = "allow_other")]
    private: bool,
    /// Every user may enter the mount, with permissions enforced by the kernel (the default
    /// for root; other users need `user_allow_other` in /etc/fuse.conf).
    #[arg(long)]
    allow_other: bool,
    /// Options in mount(8)'s form, comma-separated: every option above by its name with `_`
    /// (memory_cap=4G,threads=8,commit_interval=1s,...; --private is owner_only, as mount(8)
    /// keeps `private` for itself), the generic flags ro, rw,
    /// nosuid, suid, nodev, dev, noexec, exec, noatime, atime, sync, async, dirsync (passed to
    /// the kernel), and defaults, nofail, noauto, _netdev, x-* (ignored). Later ones win.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// The generic kernel flags the options asked for, resolved (`apply_options`).
    #[arg(skip)]
    kernel_flags: Vec<String>,
    /// Say nothing on success (as mount(8)'s helper).
    #[arg(skip)]
    quiet: bool,
    /// Cache writes in the kernel's page cache and send them in large batches.
    #[arg(long, value_parser = ["on", "off"], default_value = "on")]
    writeback_cache: String,
    /// Skip FUSE OPEN/RELEASE round trips (the kernel opens files itself). `auto`: unless
    /// the store needs OPEN (its rampart.toml can give a file a SAFE-like or DISPOSABLE
    /// category, or a file has one), and then a category that needs it is refused on this
    /// mount. `on`: always (a SAFE or DISPOSABLE file opened again then goes through the
    /// page cache). `off`: never (decision 0063).
    #[arg(long, value_parser = ["auto", "on", "off"], default_value = "auto")]
    no_open: String,
    /// Answer the first FLUSH (sent at close) with ENOSYS, after which the kernel sends none.
    /// `auto`: unless the store needs it (an `until_close` category such as EDITED
    /// reachable as for --no-open). `on`: always (close of an EDITED file then returns before
    /// it is durable). `off`: never (decision 0063).
    #[arg(long, value_parser = ["auto", "on", "off"], default_value = "auto")]
    no_flush: String,
    /// Serve requests through FUSE over io_uring, one queue per CPU, when the kernel offers it
    /// (Linux 6.14+ with /sys/module/fuse/parameters/enable_uring set to Y); else /dev/fuse.
    #[arg(long, value_parser = ["on", "off"], default_value = "on")]
    fuse_io_uring: String,
    /// Disk-tier files read, written and mapped by the kernel itself (FUSE passthrough: no
    /// daemon round trip per request; needs CAP_SYS_ADMIN; turns the writeback cache and
    /// no-open off, which slows small files), or by the daemon. `auto`: passthrough only where
    /// that costs nothing (with --writeback-cache off --no-open off). `on`: passthrough, or the
    /// mount fails saying why.
    #[arg(long, value_parser = ["on", "off", "auto"], default_value = "auto")]
    passthrough: String,
    /// Longest time a change waits before it is durable (group commit): e.g. 5s, 500ms, 1m.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    commit_interval: std::time::Duration,
    /// Take a checkpoint in the background each time the journal has grown by this much (bytes
    /// or K/M/G/T; 64K to 1T). Smaller: faster mounts after a crash, more checkpoint writing.
    /// `auto`: 256M, or the last checkpoint's size if that is larger, so checkpoints never
    /// write more than the journal does.
    #[arg(long, default_value = "auto", value_parser = parse_checkpoint_after)]
    checkpoint_after: (u64, bool),
    /// Files larger than this live on the disk tier (a host file each in the store's data/
    /// folder): a size (4096, 64K, 1M, 1G; at least 4K) or `off` (no new file moves there)
    /// [default: the store's, set by `rampart mkfs` (1M)].
    #[arg(long, value_name = "SIZE|off", value_parser = parse_threshold)]
    large_file_threshold: Option<u64>,
    /// The smallest file that memory pressure moves to the disk tier before a write would
    /// fail with ENOSPC.
    #[arg(long, value_name = "SIZE", default_value = "64K", value_parser = parse_evict_min_size)]
    evict_min_size: u64,
    /// Serve Prometheus metrics (GET /metrics) on this Unix socket (mode 0600).
    #[arg(long, value_name = "PATH")]
    metrics_socket: Option<PathBuf>,
    /// Serve Prometheus metrics (GET /metrics) on this loopback address, e.g. 127.0.0.1:9750.
    #[arg(long, value_name = "ADDR:PORT", value_parser = metrics::parse_listen)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Log level.
    #[arg(long, default_value = "info", value_parser = ["error", "warn", "info", "debug", "trace"])]
    log_level: String,
    /// Internal: run as the detached child of a background `rampart mount`.
    #[arg(long, hide = true)]
    daemon_child: bool,
}

impl MountArgs {
    /// Applies the `-o` options over the `--` ones (they come later on the command line, as
    /// mount(8) has them).
    fn apply_options(&mut self) -> Result<(), String> {
        use mount_options::Parsed;
        let on_off = |name: &str, value: &str| match value {
            "on" | "off" => Ok(value.to_string()),
            _ => Err(format!("mount option {name}={value}: give on or off")),
        };
        let auto_on_off = |name: &str, value: &str| match value {
            "auto" | "on" | "off" => Ok(value.to_string()),
            _ => Err(format!("mount option {name}={value}: give auto, on or off")),
        };
        let mut flags = Vec::new();
        for option in mount_options::split(&self.options) {
            match mount_options::parse_one(option)? {
                Parsed::Value(name, value) => {
                    let v = value.as_str();
                    let bad = |e: String| format!("mount option {name}={v}: {e}");
                    match name {
                        "memory_cap" => self.memory_cap = parse_memory_cap(v).map_err(bad)?,
                        "threads" => self.threads = Some(parse_threads(v).map_err(bad)?),
                        "writeback_cache" => self.writeback_cache = on_off(name, v)?,
                        "no_open" => self.no_open = auto_on_off(name, v)?,
                        "no_flush" => self.no_flush = auto_on_off(name, v)?,
                        "fuse_io_uring" => self.fuse_io_uring = on_off(name, v)?,
                        "passthrough" => {
                            v.parse::<rampart_fuse::PassthroughMode>()
                                .map_err(|e| format!("mount option {name}={v}: {e}"))?;
                            self.passthrough = value.clone();
                        }
                        "commit_interval" => {
                            self.commit_interval = parse_duration(v).map_err(bad)?
                        }
                        "checkpoint_after" => {
                            self.checkpoint_after = parse_checkpoint_after(v).map_err(bad)?
                        }
                        "log_level" => {
                            if !["error", "warn", "info", "debug", "trace"].contains(&v) {
                                return Err(bad("give error, warn, info, debug or trace".into()));
                            }
                            self.log_level = value.clone();
                        }
                        "large_file_threshold" => {
                            self.large_file_threshold = Some(parse_threshold(v).map_err(bad)?)
                        }
                        "evict_min_size" => {
                            self.evict_min_size = parse_evict_min_size(v).map_err(bad)?
                        }
                        "metrics_socket" => self.metrics_socket = Some(PathBuf::from(v)),
                        "metrics_listen" => {
                            self.metrics_listen = Some(metrics::parse_listen(v).map_err(bad)?)
                        }
                        _ => unreachable!("mount_options::VALUE_OPTIONS lists {name}"),
                    }
                }
                Parsed::Switch("allow_other") => (self.private, self.allow_other) = (false, true),
                Parsed::Switch(_owner_only) => (self.private, self.allow_other) = (true, false),
                Parsed::KernelFlag(flag) => flags.push(flag),
                Parsed::Ignored => {}
            }
        }
        self.kernel_flags = mount_options::resolve_kernel_flags(&flags);
        Ok(())
    }
}

/// The end of `rampart mount --help` and of the rampart-mount(1) manual page.
const MOUNT_LONG_HELP: &str = "\
mount(8), /etc/fstab and systemd:
  mount -t fuse.rampart -o memory_cap=4G,commit_interval=1s STORE MOUNTPOINT
  STORE MOUNTPOINT fuse.rampart defaults,memory_cap=4G,nofail 0 0     (an /etc/fstab line)
mount(8) runs /sbin/mount.fuse.rampart (a link to rampart that scripts/install makes); without \
it mount.fuse3 runs `rampart STORE MOUNTPOINT -o OPTIONS`, which works the same. umount \
MOUNTPOINT runs /sbin/umount.fuse.rampart, which waits for the final checkpoint as `rampart \
umount` does (without that link, umount returns before it). A mount unit and a service: \
contrib/systemd (installed by scripts/install).

Users other than root mount through fusermount3, as for every FUSE file system: a store and a \
mount point of their own, and /dev/fuse readable and writable by them; unmount with \
`rampart umount` or `fusermount3 -u`. allow_other needs user_allow_other in /etc/fuse.conf.

Exit status: 0 mounted, 1 failed (the message says why), 2 bad usage. As mount(8)'s helper: 0, \
1 bad usage, 32 failed.";

/// Most FUSE worker threads: each holds a request buffer of about 1 MiB and a descriptor.
const THREADS_MAX: usize = 256;

/// `--memory-cap`: a size, or a share of this machine's RAM.
fn parse_memory_cap(text: &str) -> Result<u64, String> {
    size::parse_size(text, physical_memory_bytes())
}

/// `--large-file-threshold`: a size of at least 4 KiB (no percentage), or `off`.
fn parse_threshold(text: &str) -> Result<u64, String> {
    if text.trim() == "off" {
        return Ok(rampart_core::store::superblock::THRESHOLD_OFF);
    }
    if text.trim().ends_with('%') {
        return Err(format!(
            "invalid size {text:?}: give bytes or K/M/G/T, or off"
        ));
    }
    let bytes = size::parse_size(text, 0)?;
    let min = rampart_core::limits::LARGE_FILE_THRESHOLD_BYTES_MIN;
    if bytes < min || bytes == u64::MAX {
        return Err(format!(
            "the large-file threshold must be at least {min} bytes (4K), or off"
        ));
    }
    Ok(bytes)
}

/// `--evict-min-size`: a size (no percentage).
fn parse_evict_min_size(text: &str) -> Result<u64, String> {
    if text.trim().ends_with('%') {
        return Err(format!("invalid size {text:?}: give bytes or K/M/G/T"));
    }
    size::parse_size(text, 0)
}

/// `--threads`: 1 to [`THREADS_MAX`].
fn parse_threads(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=THREADS_MAX).contains(&n) => Ok(n),
        _ => Err(format!("give a whole number from 1 to {THREADS_MAX}")),
    }
}

/// Smallest and largest `--checkpoint-after`.
const CHECKPOINT_AFTER_BYTES_MIN: u64 = 64 << 10;
const CHECKPOINT_AFTER_BYTES_MAX: u64 = 1 << 40;

/// `--checkpoint-after`: `auto`, or a size (no percentage) in [64K, 1T]. Gives the journal
/// growth that triggers a checkpoint and whether it also waits for the last image's size.
fn parse_checkpoint_after(text: &str) -> Result<(u64, bool), String> {
    if text.trim() == "auto" {
        // The library's default: 256 MiB, scaled with the image.
        let auto = rampart_core::persist::persister::PersistConfig::default();
        return Ok((
            auto.checkpoint_journal_bytes,
            auto.checkpoint_scales_with_image,
        ));
    }
    if text.trim().ends_with('%') {
        return Err(format!(
            "invalid --checkpoint-after {text:?}: give a size like 256M, not a share of RAM"
        ));
    }
    let bytes = size::parse_size(text, 0)?;
    if !(CHECKPOINT_AFTER_BYTES_MIN..=CHECKPOINT_AFTER_BYTES_MAX).contains(&bytes) {
        return Err(format!(
            "invalid --checkpoint-after {text:?}: it must be `auto` or between 64K and 1T"
        ));
    }
    Ok((bytes, false))
}

/// `5s`, `500ms`, `2m`, `1h`: a duration of at least 1 ms and at most a day.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: use e.g. 5s, 500ms, 2m"))?;
    let seconds = match unit {
        "ms" => n / 1e3,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration {text:?}: units are ms, s, m, h")),
    };
    if !(0.001..=86_400.0).contains(&seconds) {
        return Err(format!("duration {text:?} must be between 1 ms and 24 h"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

/// Set once writing to standard output has failed: the command then exits 1.
static STDOUT_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes to standard output. `println!` panics when that fails; here a closed pipe
/// (`rampart status | head -3`) ends the output quietly, and any other error (`> /dev/full`)
/// is reported once on stderr and makes the command exit 1.
fn print_out(text: &str) {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            if !STDOUT_FAILED.swap(true, Ordering::SeqCst) {
                eprintln!("rampart: cannot write to standard output: {e}");
            }
        }
    }
}

fn rampart_home() -> PathBuf {
    std::env::var_os("RAMPART_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".local/share/rampart"))
}

fn init_logging(level: &str) {
    // fuser logs its routine teardown at info and warn; only its errors are worth a user's
    // attention.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},fuser=error")));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        // A log line that cannot be written (the daemon's log on a full disk) is dropped:
        // reporting it with eprintln! would panic the daemon.
        .log_internal_errors(false)
        .try_init();
}

#[derive(Subcommand)]
enum MirrorCmd {
    /// Add a mirror to an unmounted store: copies the store's current state into DIR (must
    /// not exist, or be empty; made 0700), then records each copy in the other.
    Add {
        /// The store (not mounted).
        store: PathBuf,
        /// The mirror's folder (meant for another disk).
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    if let Some(code) = mount_helper::run_if_called_as_helper() {
        return with_stdout_checked(code);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Mkfs {
            store,
            large_file_threshold,
            mirror,
        } => cmd_mkfs(&store, large_file_threshold, mirror.as_deref()),
        Cmd::Mirror(MirrorCmd::Add { store, dir }) => cmd_mirror_add(&store, &dir),
        Cmd::Mount(mut args) => match args.apply_options() {
            Ok(()) => cmd_mount(args),
            Err(e) => {
                eprintln!("rampart: {e}");
                return ExitCode::from(2);
            }
        },
        Cmd::Umount { mountpoint, lazy } => cmd_umount(&mountpoint, lazy),
        Cmd::Status {
            mountpoint,
            watch: true,
            interval,
            ..
        } => watch::run(&mountpoint, interval),
        Cmd::Status {
            mountpoint, json, ..
        } => cmd_status(&mountpoint, json),
        Cmd::Sync {
            mountpoint,
            commit_only,
        } => sync_cmd::run(&mountpoint, commit_only),
        Cmd::Stat { paths, json } => categories_cmd::stat(&paths, json),
        Cmd::Rules { paths, json } => categories_cmd::rules(&paths, json),
        Cmd::Bench(args) => return with_stdout_checked(bench::run(args)),
        Cmd::Fsck {
            store,
            repair,
            json,
        } => return with_stdout_checked(fsck::run(&store, repair, json)),
        Cmd::GenerateManuals { dir } => manuals::generate(&dir),
        Cmd::PageFlusherChild { mountpoint, device } => {
            return page_flusher::child_main(&mountpoint, &device)
        }
        Cmd::BenchFloor {
            mountpoint,
            threads,
            fuse_io_uring,
            writeback_cache,
            no_open,
            no_flush,
        } => {
            let defaults = rampart_bench::floor::FloorOptions::default();
            let options = rampart_bench::floor::FloorOptions {
                threads: threads.unwrap_or(defaults.threads),
                io_uring: fuse_io_uring == "on",
                writeback_cache: writeback_cache == "on",
                no_open: no_open != "off",
                no_flush: no_flush != "off",
                ..defaults
            };
            rampart_bench::floor::serve(&mountpoint, &options, |uring| {
                let transport = if uring { "io_uring" } else { "/dev/fuse" };
                println!("ready: {} threads, transport {transport}", options.threads);
            })
            .map_err(|e| format!("the floor at {}: {e}", mountpoint.display()))
        }
    };
    with_stdout_checked(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("rampart: {message}");
            ExitCode::FAILURE
        }
    })
}

/// `code`, or failure if the command's output could not be written.
fn with_stdout_checked(code: ExitCode) -> ExitCode {
    if STDOUT_FAILED.load(std::sync::atomic::Ordering::SeqCst) {
        ExitCode::FAILURE
    } else {
        code
    }
}

fn cmd_mkfs(
    store: &Path,
    large_file_threshold: Option<u64>,
    mirror: Option<&Path>,
) -> Result<(), String> {
    let options = rampart_core::store::MkfsOptions {
        large_file_threshold_bytes: large_file_threshold.unwrap_or(0),
    };
    match mirror {
        None => {
            rampart_core::store::mkfs_with(store, &options).map_err(|e| e.to_string())?;
            outln!("created rampart store {}", store.display());
        }
        Some(dir) => {
            rampart_core::store::mkfs_mirrored(store, &options, dir).map_err(|e| e.to_string())?;
            outln!(
                "created rampart store {} with its mirror {}",
                store.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

fn cmd_mirror_add(store: &Path, dir: &Path) -> Result<(), String> {
    let mirror = rampart_core::store::mirror::add_mirror(store, dir).map_err(|e| e.to_string())?;
    outln!(
        "added the mirror {} to the store {} (a copy of its current state)",
        mirror.display(),
        store.display()
    );
    Ok(())
}

/// Mounts as `args` ask; their `-o` options must have been applied (`apply_options`).
fn cmd_mount(args: MountArgs) -> Result<(), String> {
    init_logging(&args.log_level);
    let memory_cap_bytes = args.memory_cap;
    let (checkpoint_after_bytes, checkpoint_scales_with_image) = args.checkpoint_after;
    let store = match &args.store {
        Some(s) => s.clone(),
        None => default_store()?,
    };
    let mountpoint = match &args.mountpoint {
        Some(m) => m.clone(),
        None => default_mountpoint()?,
    };
    let config = daemon::ServeConfig {
        store: store.clone(),
        mountpoint: mountpoint.clone(),
        memory_cap_bytes,
        threads: args
            .threads
            .unwrap_or_else(|| rampart_fuse::MountOptions::default().threads),
        allow_other: args.allow_other || (!args.private && nix::unistd::geteuid().is_root()),
        kernel_flags: args.kernel_flags.clone(),
        writeback_cache: args.writeback_cache == "on",
        no_open: args
            .no_open
            .parse()
            .map_err(|e: String| format!("--no-open {e}"))?,
        no_flush: args
            .no_flush
            .parse()
            .map_err(|e: String| format!("--no-flush {e}"))?,
        io_uring: args.fuse_io_uring == "on",
        passthrough: args
            .passthrough
            .parse()
            .map_err(|e: String| format!("--passthrough: {e}"))?,
        commit_interval: args.commit_interval,
        checkpoint_after_bytes,
        checkpoint_scales_with_image,
        large_file_threshold_bytes: args.large_file_threshold,
        evict_min_size_bytes: args.evict_min_size,
        metrics: metrics_config(&args)?,
    };

    if !args.daemon_child && !nix::unistd::geteuid().is_root() {
        unprivileged::check(&mountpoint, config.allow_other)?;
    }
    if args.daemon_child {
        daemon::detach_session();
        return daemon::serve(&config, daemon::report_ready_and_close_stdout).map_err(|e| {
            // The parent relays this line to the user.
            outln!("{}{e}", daemon::ERROR_PREFIX);
            e
        });
    }
    if args.foreground {
        return daemon::serve(&config, || {
            outln!("{}", daemon::READY);
        });
    }

    // Background: check what can be checked here for a fast, clear error, then start the
    // daemon and wait until it is mounted or has failed.
    daemon::check_mountpoint(&mountpoint)?;
    rampart_core::store::Store::open(&store).map_err(|e| e.to_string())?;
    let child_args = daemon_child_args(&args, &config);
    let pid = daemon::spawn_daemon(&child_args, &store.join("rampart.log"))?;
    if args.quiet {
        return Ok(());
    }
    outln!(
        "mounted {} at {} (daemon pid {pid})",
        store.display(),
        mountpoint.display()
    );
    Ok(())
}

/// `--metrics-socket` and `--metrics-listen`. The socket path is made absolute: the daemon
/// child does not keep the caller's working directory in mind.
fn metrics_config(args: &MountArgs) -> Result<metrics::MetricsConfig, String> {
    let socket = match &args.metrics_socket {
        Some(path) => Some(
            std::path::absolute(path)
                .map_err(|e| format!("invalid --metrics-socket {}: {e}", path.display()))?,
        ),
        None => None,
    };
    Ok(metrics::MetricsConfig {
        socket,
        listen: args.metrics_listen,
    })
}

/// `store` in the rampart home ($RAMPART_HOME, else ~/.local/share/rampart), made on first
/// use.
fn default_store() -> Result<PathBuf, String> {
    let s = rampart_home().join("store");
    if !rampart_core::store::looks_like_store(&s) {
        rampart_core::store::mkfs(&s).map_err(|e| e.to_string())?;
        eprintln!("rampart: created the default store {}", s.display());
    }
    Ok(s)
}

/// `~/rampart`, created when missing.
fn default_mountpoint() -> Result<PathBuf, String> {
    let m = home().join("rampart");
    std::fs::create_dir_all(&m)
        .map_err(|e| format!("cannot create mount point {}: {e}", m.display()))?;
    Ok(m)
}

/// The arguments of `rampart mount --daemon-child` that serve `config` as `args` asked.
fn daemon_child_args(args: &MountArgs, config: &daemon::ServeConfig) -> Vec<OsString> {
    let mut child_args: Vec<OsString> = vec![
        "mount".into(),
        "--daemon-child".into(),
        "--memory-cap".into(),
        config.memory_cap_bytes.to_string().into(),
        "--threads".into(),
        config.threads.to_string().into(),
        "--writeback-cache".into(),
        args.writeback_cache.clone().into(),
        "--no-open".into(),
        args.no_open.clone().into(),
        "--no-flush".into(),
        args.no_flush.clone().into(),
        "--fuse-io-uring".into(),
        args.fuse_io_uring.clone().into(),
        "--passthrough".into(),
        args.passthrough.clone().into(),
        "--log-level".into(),
        args.log_level.clone().into(),
        "--commit-interval".into(),
        format!("{}ms", args.commit_interval.as_millis()).into(),
        "--checkpoint-after".into(),
        if config.checkpoint_scales_with_image {
            "auto".into()
        } else {
            config.checkpoint_after_bytes.to_string().into()
        },
    ];
    if let Some(threshold) = config.large_file_threshold_bytes {
        child_args.push("--large-file-threshold".into());
        child_args.push(
            if threshold == rampart_core::store::superblock::THRESHOLD_OFF {
                "off".into()
            } else {
                threshold.to_string().into()
            },
        );
    }
    child_args.extend([
        "--evict-min-size".into(),
        config.evict_min_size_bytes.to_string().into(),
    ]);
    if args.private {
        child_args.push("--private".into());
    }
    if let Some(path) = &config.metrics.socket {
        child_args.extend(["--metrics-socket".into(), path.clone().into()]);
    }
    if let Some(addr) = config.metrics.listen {
        child_args.extend(["--metrics-listen".into(), addr.to_string().into()]);
    }
    if args.allow_other {
        child_args.push("--allow-other".into());
    }
    if !args.kernel_flags.is_empty() {
        child_args.push("-o".into());
        child_args.push(args.kernel_flags.join(",").into());
    }
    child_args.push(config.store.clone().into());
    child_args.push(config.mountpoint.clone().into());
    child_args
}

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
}

/// A rampart mount whose store folder is no longer at its path (decision 0121): deleted, or
/// moved (the daemon then still writes to it through its open folder).
fn deleted_store_error(mount: &mounts::RampartMount) -> String {
    format!(
        "{} is a rampart mount whose store is no longer at {} (deleted or moved while \
         mounted): the mount still serves its files, but if the store was deleted nothing \
         of them is durable any more; copy out what you need, then `rampart umount {}`",
        mount.mountpoint.display(),
        mount.store.display(),
        mount.mountpoint.display()
    )
}

fn cmd_umount(mountpoint: &Path, lazy: bool) -> Result<(), String> {
    if let Some(mount) = mounts::find_mount(mountpoint) {
        return umount_rampart(&mount, lazy);
    }
    let mount = mounts::find_mount_of_deleted_store(mountpoint)
        .ok_or_else(|| format!("{} is not a rampart mount", mountpoint.display()))?;
    // No control socket to ask: unmount, and say what the user has lost.
    umount_rampart(&mount, lazy)?;
    Err(format!(
        "unmounted {}, but its store was no longer at {} (deleted or moved while mounted): \
         if it was deleted, the files the mount held are gone with it; if it was moved, the \
         daemon wrote its final checkpoint there (through its open folder): mount it from \
         where it is now",
        mount.mountpoint.display(),
        mount.store.display()
    ))
}

fn umount_rampart(mount: &mounts::RampartMount, lazy: bool) -> Result<(), String> {
    // Another mount of the same FUSE connection (a bind mount, or this is one) keeps the
    // daemon serving: nothing to wait for (waiting hung `umount` of a bind mount, xfstests
    // generic/306; decision 0139).
    let shared = mounts::rampart_mounts()
        .iter()
        .filter(|m| m.device == mount.device)
        .count()
        > 1;
    let no_wait = lazy || shared;
    let pid = control::query_status(&mount.store).ok().map(|s| s.pid);
    // Registered before the unmount, so that the daemon can say how its shutdown ended (a
    // lazy unmount returns before that, so it does not wait).
    let exit_watch = if no_wait {
        None
    } else {
        control::watch_exit(&mount.store).ok()
    };
    let fusermount = || {
        let mut cmd = std::process::Command::new("fusermount3");
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        cmd.arg(&mount.mountpoint)
            .output()
            .map_err(|e| format!("cannot run fusermount3 (install fuse3): {e}"))
    };
    let busy = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).contains("busy");
    let mut out = fusermount()?;
    // Right after a close the kernel may hold the mount for a moment: retry a busy unmount
    // for up to a second before telling the user.
    for _ in 0..20 {
        if out.status.success() || !busy(&out) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        out = fusermount()?;
    }
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if busy(&out) {
            return Err(format!(
                "{} is busy (files or directories in use); close them, or use --lazy",
                mount.mountpoint.display()
            ));
        }
        return Err(format!(
            "cannot unmount {}: {}",
            mount.mountpoint.display(),
            stderr.trim()
        ));
    }
    // The daemon now writes its final checkpoint, which takes as long as the memory tier is
    // large: wait for it (one deadline for both waits), so that the store is free and its
    // outcome known when we return.
    let deadline = Instant::now() + SHUTDOWN_WAIT_MAX;
    let watched =
        exit_watch.map(|watch| watch.wait(deadline.saturating_duration_since(Instant::now())));
    let waited_too_long = || {
        format!(
            "unmounted, but the daemon has not finished its shutdown after {} s",
            SHUTDOWN_WAIT_MAX.as_secs()
        )
    };
    // A lazy unmount leaves the daemon serving whoever still has files open: do not wait.
    if let Some(pid) = pid.filter(|_| !no_wait) {
        while pid_alive(pid) {
            if Instant::now() > deadline {
                return Err(waited_too_long());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let log = mount.store.join("rampart.log");
    match watched {
        None | Some(control::Watched::Exit(control::Exit::Clean)) => Ok(()),
        Some(control::Watched::Exit(control::Exit::Failed(why))) => Err(format!(
            "unmounted, but the daemon's shutdown failed: {why}. Nothing durable was lost \
             (log: {})",
            log.display()
        )),
        Some(control::Watched::Exit(control::Exit::Lost(why))) => Err(format!(
            "unmounted, but the daemon's shutdown failed: {why}. The store holds what was \
             durable before the unmount; changes made since its last commit are lost (log: {})",
            log.display()
        )),
        Some(control::Watched::TimedOut) => Err(waited_too_long()),
        Some(control::Watched::Ended) => Err(format!(
            "unmounted, but the daemon ended without finishing its shutdown (killed?). The next \
             mount recovers what was durable (log: {})",
            log.display()
        )),
    }
}

/// How long `rampart umount` waits for the daemon's shutdown (its final checkpoint).
const SHUTDOWN_WAIT_MAX: Duration = Duration::from_secs(600);

fn cmd_status(mountpoint: &Path, json: bool) -> Result<(), String> {
    let mount = mounts::find_mount(mountpoint).ok_or_else(|| {
        mounts::find_mount_of_deleted_store(mountpoint).map_or_else(
            || format!("{} is not a rampart mount", mountpoint.display()),
            |m| deleted_store_error(&m),
        )
    })?;
    let status = control::query_status(&mount.store)?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&status).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let pct = if status.memory_cap_bytes > 0 {
        100.0 * status.memory_used_bytes as f64 / status.memory_cap_bytes as f64
    } else {
        0.0
    };
    outln!("mountpoint: {}", status.mountpoint.display());
    outln!("store: {}", status.store.display());
    outln!("pid: {}", status.pid);
    outln!("files: {}", status.files);
    outln!("directories: {}", status.directories);
    outln!("symlinks: {}", status.symlinks);
    outln!("other: {}", status.other);
    outln!("inodes: {}", status.inodes);
    outln!("data_bytes: {}", status.data_bytes);
    outln!(
        "tiers: memory {} files, {} bytes; disk {} files, {} bytes",
        status.tiers.memory.files,
        status.tiers.memory.bytes,
        status.tiers.disk.files,
        status.tiers.disk.bytes
    );
    outln!("data_path: {}", status.data_path);
    out!("{}", watch::kernel_line(&status));
    if let Some(why) = &status.recovered_from_backup {
        outln!(
            "recovered_from_backup: the checkpoint could not be used ({why}); the mount \
             recovered from checkpoint.prev and journal.prev and wrote a new checkpoint"
        );
    }
    if let Some(m) = &status.mirror {
        match &m.reason {
            None => outln!("mirror: {} ({})", m.path, m.state),
            Some(why) => outln!("mirror: {} ({}: {why})", m.path, m.state),
        }
    }
    outln!("memory_used_bytes: {}", status.memory_used_bytes);
    outln!("memory_cap_bytes: {}", status.memory_cap_bytes);
    outln!("memory_used: {pct:.1}% of the cap");
    let p = &status.persistence;
    outln!(
        "persistence: changes durable within {} ms or at fsync; {} pending; journal {} bytes; \
         {} commits, {} checkpoints (last paused writers {:.1} ms, commits {:.1} ms)",
        p.commit_interval_ms,
        p.ops_pending,
        p.journal_bytes,
        p.commits,
        p.checkpoints,
        p.last_checkpoint_pause_ms,
        p.last_checkpoint_switch_ms
    );
    if let Some(e) = &p.error {
        outln!("persistence error: {e}");
    }
    if let Some(e) = &p.checkpoint_error {
        outln!("checkpoint failing (commits go on): {e}");
    }
    if p.host_sync_failures > 0 {
        outln!(
            "host file syncs failed: {} (disk-tier data may be lost; the log names the files)",
            p.host_sync_failures
        );
    }
    outln!("fuse_transport: {}", status.fuse_transport);
    outln!(
        "held_files: {} (out of the store until their deadline)",
        status.held_files
    );
    out!("{}", watch::category_table(&status));
    let errors = watch::errors_line(&status);
    if !errors.is_empty() {
        out!("{errors}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_checkpoint_after;

    #[test]
    fn checkpoint_after_auto_scales_with_the_image_and_a_size_does_not() {
        assert_eq!(parse_checkpoint_after("auto"), Ok((256 << 20, true)));
        assert_eq!(parse_checkpoint_after("64K"), Ok((64 << 10, false)));
        assert_eq!(parse_checkpoint_after("256M"), Ok((256 << 20, false)));
        assert!(parse_checkpoint_after("1K").is_err());
        assert!(parse_checkpoint_after("50%").is_err());
    }
}

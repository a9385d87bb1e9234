//! Serving a mount: open the store, build the engine, mount, answer signals and the control
//! socket, and unmount cleanly. `rampart mount` runs this in the foreground, or in a detached
//! child of itself that reports readiness through a pipe.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use nix::sys::signal::{SigSet, Signal};
use rampart_core::persist::persister::PersistConfig;
use rampart_core::{Engine, EngineConfig, Rampart};
use rampart_fuse::{CachePolicy, MountOptions};

use crate::control::Exit;

/// What a mount needs, resolved from the command line.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub store: PathBuf,
    pub mountpoint: PathBuf,
    pub memory_cap_bytes: u64,
    pub threads: usize,
    pub allow_other: bool,
    pub writeback_cache: bool,
    /// Whether OPEN and FLUSH are answered (`auto`: as the store needs, decision 0063).
    pub no_open: rampart_fuse::SkipMode,
    pub no_flush: rampart_fuse::SkipMode,
    /// FUSE over io_uring when the kernel offers it.
    pub io_uring: bool,
    /// FUSE passthrough for disk-tier files.
    pub passthrough: rampart_fuse::PassthroughMode,
    pub commit_interval: std::time::Duration,
    /// A checkpoint is taken each time the journal has grown by this much.
    pub checkpoint_after_bytes: u64,
    /// And also each time it has grown by the last checkpoint's size (`--checkpoint-after auto`).
    pub checkpoint_scales_with_image: bool,
    /// `--large-file-threshold`: None for the store's own.
    pub large_file_threshold_bytes: Option<u64>,
    /// `--evict-min-size`.
    pub evict_min_size_bytes: u64,
    /// Where to serve Prometheus metrics, if anywhere.
    pub metrics: crate::metrics::MetricsConfig,
    /// Generic mount flags for the kernel (`ro`, `noexec`, ...), from `-o`.
    pub kernel_flags: Vec<String>,
}

/// How often, and how far apart, a busy unmount is retried before detaching lazily.
const UNMOUNT_RETRIES: u32 = 20;
const UNMOUNT_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The line a serving daemon prints on stdout once the mount is ready.
pub const READY: &str = "ready";
/// The prefix of a fatal error a daemon child reports on its stdout pipe.
pub const ERROR_PREFIX: &str = "error: ";

/// Checks that `mountpoint` can take a mount: an existing directory.
pub fn check_mountpoint(mountpoint: &Path) -> Result<(), String> {
    match std::fs::metadata(mountpoint) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "mount point {} is not a directory",
            mountpoint.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "mount point {} does not exist; create it first (mkdir -p {})",
            mountpoint.display(),
            mountpoint.display()
        )),
        Err(e) => Err(format!("mount point {}: {e}", mountpoint.display())),
    }
}

/// Mounts and serves until unmounted (by `rampart umount`, `fusermount3 -u`, SIGTERM or SIGINT).
/// `on_ready` runs once the kernel has accepted the mount.
pub fn serve(config: &ServeConfig, on_ready: impl FnOnce()) -> Result<(), String> {
    check_mountpoint(&config.mountpoint)?;
    let mountpoint = std::fs::canonicalize(&config.mountpoint).map_err(|e| e.to_string())?;
    // Block the shutdown signals in this thread before any other starts (the store's
    // persister starts some), so that every thread inherits the mask and only the signal
    // thread below receives them.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals
        .thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    // The store's lock, then recovery (the newest checkpoint and the journal's valid prefix,
    // through the same apply path as live operations; damage is refused with a message, never
    // guessed at), then the persister.
    let rampart = Rampart::open(&config.store, &open_options(config)).map_err(|e| e.to_string())?;
    let store_path = rampart.path().to_path_buf();
    let engine = rampart.engine().clone();
    tracing::info!("recovered {}: {}", store_path.display(), rampart.recovery());
    // Bound before mounting, so that a refused address fails the mount cleanly.
    let metrics_listeners = crate::metrics::bind(&config.metrics)?;
    let mut options = mount_options(config, &store_path);
    mirror_without_passthrough(&rampart, &mut options)?;
    let mut mounted = rampart_fuse::mount(engine.clone(), &mountpoint, &options)
        .map_err(|e| format!("cannot mount at {}: {e}", mountpoint.display()))?;
    // This mount's device number tells it from a later mount at the same place (see below).
    let own_mount = crate::mounts::mount_of(&store_path, &mountpoint);
    rampart.mark_mounted(); // a mount after ours is gone waits for our end (decision 0135)
    let fuse_transport = if mounted.uses_io_uring() {
        "io_uring"
    } else {
        "/dev/fuse"
    };
    if let Err(e) = crate::memory_trim::start() {
        tracing::warn!("cannot start the memory trimmer: {e}");
    }
    spawn_signal_thread(signals, mounted.unmounter(), mountpoint.clone())?;
    let sources = Arc::new(crate::control::Sources {
        engine: engine.clone(),
        persister: rampart.persister().clone(),
        counters: mounted.counters(),
        store: store_path.clone(),
        mountpoint: mountpoint.clone(),
        fuse_transport,
        writeback_cache: mounted.negotiated().writeback_cache(),
        recovered_from_backup: rampart.recovery().backup_used.clone(),
    });
    let metrics = metrics_listeners.serve(sources.clone());
    let socket = crate::control::serve(sources).map_err(|e| {
        format!(
            "cannot open the control socket in {}: {e}",
            store_path.display()
        )
    })?;
    tracing::info!(
        "mounted {} at {} (memory cap {} bytes; requests through {})",
        store_path.display(),
        mountpoint.display(),
        config.memory_cap_bytes,
        fuse_transport
    );
    on_ready();
    crate::sd_notify::notify(&format!(
        "READY=1\nMAINPID={}\nSTATUS=serving {} at {} through {fuse_transport}",
        std::process::id(),
        store_path.display(),
        mountpoint.display()
    ));
    let page_flusher =
        start_page_flusher(config, &mountpoint, own_mount.as_ref(), &mounted, &engine);
    let result = mounted.run();
    drop(page_flusher);
    detach_if_aborted(&result, own_mount.as_ref(), &mountpoint);
    // umount(8) may have returned: a new mount waits for our final checkpoint (decision 0135).
    rampart.mark_unmounted();
    // Clean unmount: a final checkpoint, so that the next mount has nothing to replay.
    socket.remove();
    crate::sync_cmd::wait_for_syncs(std::time::Duration::from_secs(600));
    drop(metrics);
    crate::sd_notify::notify("STOPPING=1\nSTATUS=unmounted; writing the final checkpoint");
    drop(engine);
    let closed = rampart.close();
    // What the shutdown lost, if anything, and why; then whether the session ended badly.
    let outcome = match (closed, result) {
        (Err(lost), _) => Exit::Lost(lost.to_string()),
        (Ok(()), Err(e)) => Exit::Failed(format!("the FUSE session ended with an error: {e}")),
        (Ok(()), Ok(())) => Exit::Clean,
    };
    if outcome == Exit::Clean {
        tracing::info!("unmounted {}", mountpoint.display());
    }
    crate::sd_notify::notify(&format!("STATUS=stopped: {outcome:?}"));
    // After the lock is released: whoever waits for this can mount the store at once.
    socket.report_exit(&outcome);
    match outcome {
        Exit::Clean => Ok(()),
        Exit::Failed(e) | Exit::Lost(e) => Err(e),
    }
}

/// On a mirrored store, passthrough off: the kernel's writes to host files would reach the
/// store and never the mirror (decision 0076). Logs the mirror's state.
fn mirror_without_passthrough(rampart: &Rampart, options: &mut MountOptions) -> Result<(), String> {
    let Some(mirror) = rampart.mirror() else {
        return Ok(());
    };
    if options.passthrough == rampart_fuse::PassthroughMode::On {
        return Err(format!(
            "--passthrough on: a mirrored store is served without FUSE passthrough (the \
             kernel's writes would miss the mirror {}); mount without it",
            mirror.path.display()
        ));
    }
    options.passthrough = rampart_fuse::PassthroughMode::Off;
    match mirror.health.degraded() {
        None => tracing::info!("mirror (DA2): {}, in step", mirror.path.display()),
        Some(why) => tracing::error!("mirror (DA2) degraded: {why}"),
    }
    Ok(())
}

/// The FUSE mount's settings, from the command line.
fn mount_options(config: &ServeConfig, store_path: &Path) -> MountOptions {
    MountOptions {
        threads: config.threads,
        allow_other: config.allow_other,
        fs_name: store_path.display().to_string(),
        cache: CachePolicy {
            writeback_cache: config.writeback_cache,
            ..CachePolicy::default()
        },
        no_open: config.no_open,
        no_flush: config.no_flush,
        io_uring: config.io_uring,
        passthrough: config.passthrough,
        kernel_flags: config.kernel_flags.clone(),
    }
}

/// The store's engine and persister settings, from the command line.
fn open_options(config: &ServeConfig) -> rampart_core::rampart::Options {
    rampart_core::rampart::Options {
        engine: EngineConfig {
            memory_cap_bytes: config.memory_cap_bytes,
            root_uid: nix::unistd::getuid().as_raw(),
            root_gid: nix::unistd::getgid().as_raw(),
            root_mode: 0o755,
            large_file_threshold_bytes: config.large_file_threshold_bytes,
            evict_min_size_bytes: config.evict_min_size_bytes,
            ..EngineConfig::default()
        },
        persist: PersistConfig {
            commit_interval: config.commit_interval,
            checkpoint_journal_bytes: config.checkpoint_after_bytes,
            checkpoint_scales_with_image: config.checkpoint_scales_with_image,
            reserve_bytes_min: rampart_core::limits::STORE_RESERVE_BYTES_MIN,
            ..PersistConfig::default()
        },
    }
}

/// The thread that answers SIGTERM and SIGINT by unmounting.
fn spawn_signal_thread(
    signals: SigSet,
    mut unmounter: rampart_fuse::Unmounter,
    mountpoint: PathBuf,
) -> Result<(), String> {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Ok(signal) = signals.wait() {
                tracing::info!("{signal:?}: unmounting {}", mountpoint.display());
                // Just after a close the kernel may still hold the mount for a moment (async
                // release, writeback): retry briefly before detaching lazily.
                // (fuser's unmounter gives its mount up after one try, so retries go
                // through fusermount3.)
                let Err(e) = unmounter.unmount() else {
                    continue;
                };
                let unmounted = e.raw_os_error() == Some(libc::EBUSY)
                    && (0..UNMOUNT_RETRIES).any(|_| {
                        std::thread::sleep(UNMOUNT_RETRY_PAUSE);
                        fusermount_unmount(&mountpoint, false)
                    });
                if !unmounted {
                    tracing::warn!("unmount failed ({e}); detaching lazily");
                    fusermount_unmount(&mountpoint, true);
                }
            }
        })
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Under the writeback cache, bytes written to a file kept open stay in the kernel until it
/// writes them back; the flusher sends them within the commit interval.
fn start_page_flusher(
    config: &ServeConfig,
    mountpoint: &Path,
    own_mount: Option<&crate::mounts::RampartMount>,
    mounted: &rampart_fuse::Mounted,
    engine: &Arc<Engine>,
) -> Option<crate::page_flusher::PageFlusher> {
    // What INIT settled: FUSE passthrough turns the writeback cache off.
    match (own_mount, mounted.negotiated().writeback_cache()) {
        (Some(own), true) => crate::page_flusher::start(
            mountpoint.to_path_buf(),
            own.device.clone(),
            // A category due sooner than the commit interval needs the kernel's pages sooner.
            engine
                .categories()
                .shortest_deadline()
                .map_or(config.commit_interval, |d| d.min(config.commit_interval)),
            mounted.counters(),
            engine.clone(),
        )
        // The kernel-view corrections after refused writes go through its child too.
        .inspect(|flusher| mounted.set_own_mount_calls(flusher.own_mount_calls()))
        .map_err(|e| tracing::warn!("cannot start the page flusher: {e}"))
        .ok(),
        (None, true) => {
            tracing::warn!(
                "{} is not in /proc/self/mountinfo: bytes written to files kept open become \
                 durable only when the kernel writes them back (up to 30 s)",
                mountpoint.display()
            );
            None
        }
        (_, false) => None,
    }
}

/// fuser unmounts when its session ends, unless the connection is already gone. It is also
/// gone after an abort (our own, when a ring fails, or through fusectl: the session then
/// ends with ECONNABORTED, where an unmount ends it cleanly), which leaves a dead mount
/// behind: detach it, but only then, and only if the mount on top still has our device
/// number. After an ordinary unmount a new mount may already sit at the same place, and the
/// kernel hands device numbers out again.
fn detach_if_aborted(
    result: &std::io::Result<()>,
    own_mount: Option<&crate::mounts::RampartMount>,
    mountpoint: &Path,
) {
    let aborted = matches!(result, Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED));
    if let (true, Some(own)) = (aborted, own_mount) {
        if crate::mounts::top_device_at(mountpoint).is_some_and(|device| device == own.device) {
            tracing::warn!(
                "the FUSE connection was aborted; detaching the dead mount at {}",
                mountpoint.display()
            );
            fusermount_unmount(mountpoint, true);
        }
    }
}

/// Unmounts with `fusermount3 -u` (`-z`: lazily); true on success.
fn fusermount_unmount(mountpoint: &Path, lazy: bool) -> bool {
    Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg(mountpoint)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `rampart mount --foreground --daemon-child ...` detached, and waits for it to report
/// ready (Ok, with its pid) or an error (Err, with its message).
pub fn spawn_daemon(args: &[std::ffi::OsString], log: &Path) -> Result<u32, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(|e| format!("cannot open log {}: {e}", log.display()))?;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .map_err(|e| format!("cannot start the daemon: {e}"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut error = None;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if line == READY {
            return Ok(child.id());
        }
        if let Some(message) = line.strip_prefix(ERROR_PREFIX) {
            error = Some(message.to_string());
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    Err(error.unwrap_or_else(|| {
        format!(
            "the daemon exited ({status}) before the mount was ready; see {}",
            log.display()
        )
    }))
}

/// In a daemon child: leave the caller's session and tell the parent we are ready, then stop
/// writing to the pipe (the parent has gone).
pub fn detach_session() {
    let _ = nix::unistd::setsid();
}

pub fn report_ready_and_close_stdout() {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{READY}");
    let _ = out.flush();
    if let Ok(devnull) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2(devnull.as_raw_fd(), 1);
    }
}

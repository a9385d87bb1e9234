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
use rampart_core::persist::device::{Device, DirDevice};
use rampart_core::persist::persister::PersistConfig;
use rampart_core::store::Store;
use rampart_core::EngineConfig;
use rampart_fuse::{CachePolicy, MountOptions};

/// What a mount needs, resolved from the command line.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub store: PathBuf,
    pub mountpoint: PathBuf,
    pub memory_cap_bytes: u64,
    pub threads: usize,
    pub allow_other: bool,
    pub writeback_cache: bool,
    pub no_open: bool,
    /// FUSE over io_uring when the kernel offers it.
    pub io_uring: bool,
    pub commit_interval: std::time::Duration,
    /// A checkpoint is taken each time the journal has grown by this much.
    pub checkpoint_after_bytes: u64,
    /// And also each time it has grown by the last checkpoint's size (`--checkpoint-after auto`).
    pub checkpoint_scales_with_image: bool,
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
    let store = Store::open(&config.store).map_err(|e| e.to_string())?;
    let store_path = std::fs::canonicalize(store.path()).map_err(|e| e.to_string())?;
    let mountpoint = std::fs::canonicalize(&config.mountpoint).map_err(|e| e.to_string())?;

    // Block the shutdown signals in this thread before any other starts, so that every thread
    // inherits the mask and only the signal thread below receives them.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals
        .thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;

    let engine_config = EngineConfig {
        memory_cap_bytes: config.memory_cap_bytes,
        root_uid: nix::unistd::getuid().as_raw(),
        root_gid: nix::unistd::getgid().as_raw(),
        root_mode: 0o755,
        ..EngineConfig::default()
    };
    // Recovery: the newest checkpoint and the journal's valid prefix, through the same apply
    // path as live operations; damage is refused with a message, never guessed at.
    let store_id = store.superblock().store_id;
    let dir_device = Arc::new(
        DirDevice::open(store_path.clone())
            .map_err(|e| format!("cannot open {}: {e}", store_path.display()))?,
    );
    let device: Arc<dyn Device> = dir_device.clone();
    let persist_config = PersistConfig {
        commit_interval: config.commit_interval,
        checkpoint_journal_bytes: config.checkpoint_after_bytes,
        checkpoint_scales_with_image: config.checkpoint_scales_with_image,
        ..PersistConfig::default()
    };
    let (engine, persister, report) =
        rampart_core::persist::open(device, store_id, &engine_config, persist_config)
            .map_err(|e| format!("cannot recover {}: {e}", store_path.display()))?;
    tracing::info!("recovered {}: {report}", store_path.display());
    let options = MountOptions {
        threads: config.threads,
        allow_other: config.allow_other,
        fs_name: store_path.display().to_string(),
        cache: CachePolicy {
            writeback_cache: config.writeback_cache,
            no_open: config.no_open,
            ..CachePolicy::default()
        },
        io_uring: config.io_uring,
    };
    let mut mounted = rampart_fuse::mount(engine.clone(), &mountpoint, &options)
        .map_err(|e| format!("cannot mount at {}: {e}", mountpoint.display()))?;
    // This mount's device number tells it from a later mount at the same place (see below).
    let own_mount = crate::mounts::mount_of(&store_path, &mountpoint);

    let fuse_transport = if mounted.uses_io_uring() {
        "io_uring"
    } else {
        "/dev/fuse"
    };
    if let Err(e) = crate::memory_trim::start() {
        tracing::warn!("cannot start the memory trimmer: {e}");
    }
    let mut unmounter = mounted.unmounter();
    let signal_mountpoint = mountpoint.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Ok(signal) = signals.wait() {
                tracing::info!("{signal:?}: unmounting {}", signal_mountpoint.display());
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
                        fusermount_unmount(&signal_mountpoint, false)
                    });
                if !unmounted {
                    tracing::warn!("unmount failed ({e}); detaching lazily");
                    fusermount_unmount(&signal_mountpoint, true);
                }
            }
        })
        .map_err(|e| e.to_string())?;

    let socket = crate::control::serve(
        engine.clone(),
        persister.clone(),
        mounted.counters(),
        store_path.clone(),
        mountpoint.clone(),
        fuse_transport,
    )
    .map_err(|e| {
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
    // Under the writeback cache, bytes written to a file kept open stay in the kernel until
    // it writes them back; the flusher sends them within the commit interval.
    let page_flusher = match (&own_mount, config.writeback_cache) {
        (Some(own), true) => crate::page_flusher::start(
            mountpoint.clone(),
            own.device.clone(),
            config.commit_interval,
            mounted.counters(),
            engine.clone(),
        )
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
    };
    let result = mounted.run();
    drop(page_flusher);
    // fuser unmounts when its session ends, unless the connection is already gone. It is also
    // gone after an abort (our own, when a ring fails, or through fusectl: the session then
    // ends with ECONNABORTED, where an unmount ends it cleanly), which leaves a dead mount
    // behind: detach it, but only then, and only if the mount on top still has our device
    // number. After an ordinary unmount a new mount may already sit at the same place, and
    // the kernel hands device numbers out again.
    let aborted = matches!(&result, Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED));
    if let (true, Some(own)) = (aborted, &own_mount) {
        if crate::mounts::top_device_at(&mountpoint).is_some_and(|device| device == own.device) {
            tracing::warn!(
                "the FUSE connection was aborted; detaching the dead mount at {}",
                mountpoint.display()
            );
            fusermount_unmount(&mountpoint, true);
        }
    }
    // Clean unmount: a final checkpoint, so that the next mount has nothing to replay.
    let saved = persister.shutdown(&engine);
    engine.set_sink(None);
    socket.remove();
    drop(store);
    // What the shutdown lost, if anything, and why; then whether the session ended badly.
    let lost = match saved {
        Err(e) => Some(format!("the final checkpoint failed: {e}")),
        // The journal was written through the folder's descriptor: if the folder was deleted
        // meanwhile, so was everything written to it.
        Ok(()) if dir_device.folder_removed() => Some(format!(
            "the store folder {} was removed while mounted: nothing of this mount was kept",
            store_path.display()
        )),
        Ok(()) => None,
    };
    let outcome = match (lost, result) {
        (Some(why), _) => crate::control::Exit::Lost(why),
        (None, Err(e)) => {
            crate::control::Exit::Failed(format!("the FUSE session ended with an error: {e}"))
        }
        (None, Ok(())) => crate::control::Exit::Clean,
    };
    if outcome == crate::control::Exit::Clean {
        tracing::info!("unmounted {}", mountpoint.display());
    }
    // After the lock is released: whoever waits for this can mount the store at once.
    socket.report_exit(&outcome);
    match outcome {
        crate::control::Exit::Clean => Ok(()),
        crate::control::Exit::Failed(e) | crate::control::Exit::Lost(e) => Err(e),
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

//! rampart-fuse: mounts a rampart engine as a POSIX file system through FUSE.
//!
//! [`mount`] starts a multi-threaded FUSE session over an [`Engine`]; the kernel checks
//! permissions (`default_permissions`) and caches entries, attributes and pages under the
//! [`CachePolicy`]. Changes made to the engine by a library caller while it is mounted are
//! announced to the kernel through FUSE notifications, so its caches never go stale.

mod adapter;
mod bdi;
mod cache_policy;
pub mod counters;
mod direct_io;
mod disk_reads;
pub mod kernel_settings;
mod open_files;
pub mod own_mount;
mod refusals;
mod reply_attr;
mod request_ctx;

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use fuser::{Config, INodeNo, MountOption, Notifier, Session, SessionUnmounter};
use rampart_core::{Engine, Invalidation, Observer};

pub use adapter::CachePolicy;
pub use counters::{PendingRequest, RequestCounters, RequestKind, RequestTimer};
pub use open_files::Negotiated;
pub use own_mount::OwnMountCalls;

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Worker threads reading FUSE requests.
    pub threads: usize,
    /// Let every user enter the mount (permissions are still enforced by the kernel).
    pub allow_other: bool,
    /// Name shown as the mount's source in /proc/mounts (the store path).
    pub fs_name: String,
    pub cache: CachePolicy,
    /// Serve requests through FUSE over io_uring when the kernel offers it (Linux 6.14+ with
    /// `fuse.enable_uring=Y`): a queue thread per CPU, so a request never wakes another CPU.
    pub io_uring: bool,
    /// Generic mount flags for the kernel by mount(8)'s names: `ro`, `rw`, `nosuid`, `suid`,
    /// `nodev`, `dev`, `noexec`, `exec`, `noatime`, `atime`, `sync`, `async`, `dirsync`.
    /// FUSE mounts are `nosuid,nodev` unless `suid` and `dev` are given (by root).
    pub kernel_flags: Vec<String>,
    /// FUSE passthrough for disk-tier files (decision 0058).
    pub passthrough: PassthroughMode,
    /// Whether OPEN is answered ENOSYS (no-open); sets `cache.no_open` at mount.
    pub no_open: SkipMode,
    /// Whether FLUSH is answered ENOSYS; sets `cache.no_flush` at mount.
    pub no_flush: SkipMode,
}

/// Whether the first OPEN (or FLUSH) is answered ENOSYS, after which the kernel sends none
/// on the connection (a round trip saved per open or close). SAFE-like and DISPOSABLE files
/// need OPEN (its reply gives them direct I/O), `until_close` ones FLUSH (decision 0063).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SkipMode {
    /// Answered only if the store needs it at mount (`Engine::kernel_needs`: its
    /// configuration can give a file such a category, or a file has one); a category that
    /// needs it set later on that mount is refused (EOPNOTSUPP).
    #[default]
    Auto,
    /// Refused whatever the store needs (a warning says what it weakens).
    On,
    /// Always answered.
    Off,
}

impl std::str::FromStr for SkipMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SkipMode::Auto),
            "on" => Ok(SkipMode::On),
            "off" => Ok(SkipMode::Off),
            _ => Err(format!("{s:?}: give auto, on or off")),
        }
    }
}

/// Whether the kernel is told to skip a request, as `mode` says and the store needs
/// (`needed`: why, if it does).
fn skips(mode: SkipMode, needed: &Option<String>) -> bool {
    match mode {
        SkipMode::On => true,
        SkipMode::Off => false,
        SkipMode::Auto => needed.is_none(),
    }
}

/// Whether disk-tier files are read and written by the kernel itself (FUSE passthrough) or
/// by the daemon. On Linux 6.18 passthrough excludes the writeback cache and needs OPEN of
/// every file, which costs small files up to 2-5x on open-heavy workloads (decision 0058).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PassthroughMode {
    /// Passthrough when it costs small files nothing: the mount has neither the writeback
    /// cache nor no-open, the kernel offers it and the daemon may register backing files
    /// (CAP_SYS_ADMIN). Else the daemon.
    #[default]
    Auto,
    /// Passthrough (the writeback cache and no-open of files then off), or the mount fails
    /// saying why.
    On,
    /// The daemon serves every request (the writeback cache stays available).
    Off,
}

impl std::str::FromStr for PassthroughMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(PassthroughMode::Auto),
            "on" => Ok(PassthroughMode::On),
            "off" => Ok(PassthroughMode::Off),
            _ => Err(format!("passthrough {s:?}: give on, off or auto")),
        }
    }
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            // Twice the cores: a worker waiting on a disk sync for a before-return change, or
            // simply descheduled, should not hold up requests that need none (measured:
            // docs/decisions/0013-worker-threads.md).
            threads: std::thread::available_parallelism().map_or(4, |n| (2 * n.get()).clamp(4, 16)),
            allow_other: false,
            fs_name: "rampart".into(),
            cache: CachePolicy::default(),
            io_uring: false,
            kernel_flags: Vec::new(),
            passthrough: PassthroughMode::default(),
            no_open: SkipMode::default(),
            no_flush: SkipMode::default(),
        }
    }
}

/// A mounted file system; [`Mounted::run`] serves requests until it is unmounted.
pub struct Mounted {
    session: Session<adapter::RampartFs>,
    engine: Arc<Engine>,
    counters: Arc<RequestCounters>,
    negotiated: Arc<Negotiated>,
    own_mount_calls: refusals::CallsSlot,
}

/// Unmounts a [`Mounted`] from another thread (signal handlers, shutdown).
pub struct Unmounter(SessionUnmounter);

impl Unmounter {
    pub fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
    }
}

struct KernelNotifier(Notifier);

impl Observer for KernelNotifier {
    fn invalidate(&self, what: &[Invalidation]) {
        for item in what {
            let result = match item {
                Invalidation::Entry { parent, name } => self
                    .0
                    .inval_entry(INodeNo(*parent), OsStr::from_bytes(name)),
                Invalidation::Inode { ino } => self.0.inval_inode(INodeNo(*ino), 0, 0),
                // A negative offset: the attributes (and cached ACLs) only, no pages, so
                // nothing in the kernel waits (fs/fuse/inode.c, fuse_reverse_inval_inode).
                Invalidation::Attributes { ino } => self.0.inval_inode(INodeNo(*ino), -1, 0),
            };
            // ENOENT: the kernel had nothing cached for it, which is fine.
            if let Err(e) = result {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    tracing::warn!("cache invalidation {item:?} failed: {e}");
                }
            }
        }
    }
}

/// The FUSE subtype: rampart mounts are of type `fuse.rampart`.
pub const SUBTYPE: &str = "rampart";

/// A generic mount flag by its mount(8) name.
fn kernel_flag(name: &str) -> io::Result<MountOption> {
    Ok(match name {
        "ro" => MountOption::RO,
        "rw" => MountOption::RW,
        "nosuid" => MountOption::NoSuid,
        "suid" => MountOption::Suid,
        "nodev" => MountOption::NoDev,
        "dev" => MountOption::Dev,
        "noexec" => MountOption::NoExec,
        "exec" => MountOption::Exec,
        "noatime" => MountOption::NoAtime,
        "atime" => MountOption::Atime,
        "sync" => MountOption::Sync,
        "async" => MountOption::Async,
        "dirsync" => MountOption::DirSync,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown mount flag {name:?}"),
            ))
        }
    })
}

/// Mounts `engine` at `mountpoint`. Returns once the kernel has accepted the mount.
pub fn mount(
    engine: Arc<Engine>,
    mountpoint: &Path,
    options: &MountOptions,
) -> io::Result<Mounted> {
    let config = session_config(options)?;
    // The fsyncs one commit covers are answered together: each io_uring queue is woken once
    // for all of its answers (decision 0116).
    rampart_core::persist::persister::set_answer_batch(fuser::replies_batched);
    let counters = Arc::new(RequestCounters::default());
    let (refusals, refusals_worker) = refusals::channel();
    let own_mount_calls = refusals::CallsSlot::default();
    let negotiated = Arc::new(Negotiated::default());
    let notifier = Arc::new(std::sync::OnceLock::new());
    let cache = kernel_cache(&engine, options);
    let fs = adapter::RampartFs::new(
        engine.clone(),
        cache,
        counters.clone(),
        refusals,
        options.passthrough,
        negotiated.clone(),
        notifier.clone(),
    );
    // The handshake (INIT) happens here: `negotiated` is settled once it returns.
    let session = Session::new(fs, mountpoint, &config)?;
    let _ = notifier.set(session.notifier());
    engine.set_observer(Some(Arc::new(KernelNotifier(session.notifier()))));
    apply_negotiated(&engine, options, cache, &negotiated);
    bdi::tune(mountpoint, negotiated.writeback_cache());
    if negotiated.writeback_cache() {
        // Without it the worker is not started and refusals are dropped: the kernel's size
        // then follows the engine's (write-through).
        match own_mount::InProcess::of(mountpoint) {
            Ok(at) => refusals_worker.start(
                at,
                own_mount_calls.clone(),
                engine.clone(),
                session.notifier(),
            )?,
            Err(e) => tracing::warn!("cannot correct the kernel's view after refused writes: {e}"),
        }
    }
    Ok(Mounted {
        session,
        engine,
        counters,
        negotiated,
        own_mount_calls,
    })
}

/// The FUSE session's configuration: mount options, who may access it, worker threads.
fn session_config(options: &MountOptions) -> io::Result<Config> {
    let mut mount_options = vec![
        MountOption::FSName(options.fs_name.clone()),
        // The type /proc/mounts shows is `fuse.rampart` either way: fusermount3 reads
        // `subtype=` from its options, and the kernel takes it as a mount option when root
        // mounts directly (fuser's `Subtype` would reach only fusermount3).
        MountOption::CUSTOM(format!("subtype={SUBTYPE}")),
        MountOption::DefaultPermissions,
    ];
    for name in &options.kernel_flags {
        mount_options.push(kernel_flag(name)?);
    }
    Ok(kernel_settings::session_config(
        mount_options,
        options.allow_other,
        options.threads,
        options.io_uring,
    ))
}

/// The kernel cache policy: `options.cache`, with OPEN and FLUSH skipped as the no-open and
/// no-flush modes and the store's categories decide (decision 0063); logs the choice.
fn kernel_cache(engine: &Engine, options: &MountOptions) -> CachePolicy {
    // What the store's categories need the kernel to send (decision 0063).
    let needs = engine.kernel_needs();
    let mut cache = options.cache;
    cache.no_open = skips(options.no_open, &needs.open);
    cache.no_flush = skips(options.no_flush, &needs.flush);
    for (what, mode, skipped, why) in [
        ("OPEN", options.no_open, cache.no_open, &needs.open),
        ("FLUSH", options.no_flush, cache.no_flush, &needs.flush),
    ] {
        let option = if what == "OPEN" {
            "no-open"
        } else {
            "no-flush"
        };
        match (mode, why) {
            (SkipMode::Auto, Some(why)) => {
                tracing::info!("{what} answered (--{option} auto): {why}")
            }
            (SkipMode::Auto, None) => tracing::info!(
                "{what} not sent by the kernel (--{option} auto: no file or rule of the store \
                 needs it; a category that does is refused on this mount)"
            ),
            _ => tracing::info!(
                "{what} {} (--{option} {})",
                if skipped {
                    "not sent by the kernel"
                } else {
                    "answered"
                },
                if mode == SkipMode::On { "on" } else { "off" }
            ),
        }
    }
    cache
}

/// After the handshake: tells the engine what the kernel settled on (data path, which
/// requests it sends) and warns of the guarantees the skipped requests weaken.
fn apply_negotiated(
    engine: &Engine,
    options: &MountOptions,
    cache: CachePolicy,
    negotiated: &Negotiated,
) {
    // `rampart status` reads it from the engine.
    engine.set_passthrough_available(negotiated.data_path() == "passthrough");
    // Passthrough answers OPEN (and FLUSH) of files whatever no-open says.
    let passthrough = negotiated.passthrough();
    if options.no_open == SkipMode::On && negotiated.writeback_cache() && !passthrough {
        tracing::warn!(
            "no_open=on with the writeback cache: SAFE and DISPOSABLE files opened again \
             (not created) write through the page cache, so write(2) returns before their \
             data is durable (SAFE) or dropped (DISPOSABLE); fsync and close still hold"
        );
    }
    if options.no_flush == SkipMode::On && !passthrough {
        tracing::warn!(
            "no_flush=on: close(2) of an `until_close` (EDITED) file returns before its data \
             is durable; fsync still holds"
        );
    }
    engine.set_kernel_requests(
        rampart_core::KernelRequests {
            open: !cache.no_open || passthrough,
            flush: !cache.no_flush || passthrough,
        },
        rampart_core::KernelRequests {
            open: options.no_open == SkipMode::Auto,
            flush: options.no_flush == SkipMode::Auto,
        },
    );
    tracing::info!("disk-tier data path: {}", negotiated.data_path());
}

impl Mounted {
    /// Whether requests are served through FUSE over io_uring (else through /dev/fuse).
    pub fn uses_io_uring(&self) -> bool {
        self.session.uses_io_uring()
    }

    /// What INIT settled: the data path of disk-tier files (for `rampart status`) and whether
    /// the writeback cache is in use.
    pub fn negotiated(&self) -> Arc<Negotiated> {
        self.negotiated.clone()
    }

    /// FUSE requests served so far, by kind.
    pub fn counters(&self) -> Arc<RequestCounters> {
        self.counters.clone()
    }

    /// Where the calls on this mount that wait for its own replies are made from now on (a
    /// process without /dev/fuse: `own_mount`); first call only. Set it before [`Mounted::run`]:
    /// until then they are made from a thread of this process.
    pub fn set_own_mount_calls(&self, calls: Arc<dyn OwnMountCalls>) {
        let _ = self.own_mount_calls.set(calls);
    }

    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter(self.session.unmount_callable())
    }

    /// Serves requests until the file system is unmounted.
    pub fn run(self) -> io::Result<()> {
        let engine = self.engine.clone();
        let result = self.session.run();
        engine.set_observer(None);
        result
    }
}

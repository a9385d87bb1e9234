//! The daemon's control socket (`STORE/control.sock`, private to the store's owner): the
//! channel through which `rampart status` asks a running mount for its figures.
//!
//! Protocol: the client sends one command line, the daemon answers one line of JSON.
//! - `status`: the daemon's figures ([`Status`], whose JSON form is docs/status-schema.json).
//! - `watch-exit`: `{"watching":true}` at once; then, on the same connection, one [`Exit`]
//!   line when the daemon has finished its shutdown (final checkpoint written or failed).
//!   `rampart umount` uses it to say whether the last changes were saved. If the daemon dies
//!   without finishing, the connection just ends.
//! - `categories`: the categories and filename rules in force ([`CategoriesInForce`]), for
//!   `rampart rules` and `rampart stat`.
//! - `sync`, `sync-commit-only`: make everything durable now, answered when it is
//!   (`rampart sync`, [`crate::sync_cmd`]).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rampart_core::category::RulePattern;
use rampart_core::latency::LatencyHistogram;
use rampart_core::persist::persister::Persister;
use rampart_core::Engine;
use rampart_fuse::RequestCounters;
use serde::{Deserialize, Serialize};

pub const SOCKET_FILE: &str = "control.sock";
/// Longest command line accepted.
const COMMAND_BYTES_MAX: u64 = 256;
/// Longest answer line read from the daemon (the rules in force may be long).
const ANSWER_BYTES_MAX: u64 = 1 << 20;

/// The persister's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Persistence {
    /// Longest time a change waits to become durable.
    pub commit_interval_ms: u64,
    /// Changes applied but not yet durable.
    pub ops_pending: u64,
    /// Bytes of those changes gathered in memory (writers wait past 128 MiB).
    pub pending_bytes: u64,
    pub journal_bytes: u64,
    pub commits: u64,
    pub checkpoints: u64,
    /// How long writers waited while the last checkpoint was encoded.
    pub last_checkpoint_pause_ms: f64,
    /// How long the last checkpoint held commits (and so fsyncs) while it switched journals.
    pub last_checkpoint_switch_ms: f64,
    /// The last checkpoint's length.
    #[serde(default)]
    pub checkpoint_image_bytes: u64,
    /// The journal length at which the next background checkpoint is due (`--checkpoint-after`).
    #[serde(default)]
    pub checkpoint_due_at_journal_bytes: u64,
    /// The I/O error that stopped persistence, if any.
    pub error: Option<String>,
    /// With changes pending: the oldest is at most this old (null when nothing is pending, or
    /// before the first commit).
    #[serde(default)]
    pub oldest_pending_age_ms_max: Option<f64>,
    /// How long commits took (write and sync of the journal).
    #[serde(default)]
    pub commit_latency: Latency,
    /// How long checkpoints took, start to finish.
    #[serde(default)]
    pub checkpoint_latency: Latency,
    /// The last background checkpoint's failure, until one succeeds (commits go on).
    #[serde(default)]
    pub checkpoint_error: Option<String>,
    /// Bytes the daemon wrote to store files since it started, counted where it writes them
    /// (`rampart_core::persist::device::store_written_bytes`); 0 from a daemon before minor
    /// version 4.
    #[serde(default)]
    pub store_written_bytes: u64,
    /// Syncs of disk-tier host files that failed since the mount: their latest data may be
    /// lost; each file's next fsync answers EIO (decision 0126). Minor version 6.
    #[serde(default)]
    pub host_sync_failures: u64,
}

/// A latency summary: how many were measured and their total (mean = sum / count). The
/// metrics endpoint has the full histograms.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub sum_seconds: f64,
}

impl From<&LatencyHistogram> for Latency {
    fn from(h: &LatencyHistogram) -> Latency {
        Latency {
            count: h.count,
            sum_seconds: h.sum_ns as f64 / 1e9,
        }
    }
}

/// The version of the `status --json` object (docs/status-schema.json). Raise it when a
/// field changes meaning or goes away; new fields keep it.
pub const STATUS_SCHEMA_VERSION: u32 = 1;

/// Raised when fields are added (`categories`: 1, `writeback_cache`: 2, `held_files`: 3,
/// `persistence.store_written_bytes`: 4, `recovered_from_backup`: 5,
/// `persistence.host_sync_failures`: 6); consumers of the same [`STATUS_SCHEMA_VERSION`] read
/// any minor version.
pub const STATUS_SCHEMA_MINOR_VERSION: u32 = 6;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// [`STATUS_SCHEMA_VERSION`] of the daemon that answered.
    #[serde(default)]
    pub schema_version: u32,
    /// [`STATUS_SCHEMA_MINOR_VERSION`] of the daemon that answered (0: before it existed).
    #[serde(default)]
    pub schema_minor_version: u32,
    pub pid: u32,
    pub store: PathBuf,
    pub mountpoint: PathBuf,
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    pub other: u64,
    pub inodes: u64,
    pub data_bytes: u64,
    pub memory_used_bytes: u64,
    pub memory_cap_bytes: u64,
    pub persistence: Persistence,
    /// How requests reach the daemon: "io_uring" (a queue per CPU) or "/dev/fuse".
    pub fuse_transport: String,
    /// Opens answered with FUSE passthrough since the mount.
    #[serde(default)]
    pub fuse_passthrough_opens: u64,
    /// FUSE requests served since the mount, by kind (round trips with the kernel).
    pub fuse_requests: BTreeMap<String, u64>,
    /// Their latencies, by kind (only kinds answered at least once).
    #[serde(default)]
    pub fuse_latency: BTreeMap<String, Latency>,
    /// fsyncs answered EIO because the store could not be written.
    #[serde(default)]
    pub fuse_sync_failures: u64,
    /// Errors answered to programs, by operation, then by errno name (`ENOENT`).
    #[serde(default)]
    pub fuse_errors: BTreeMap<String, BTreeMap<String, u64>>,
    /// Regular files and their bytes per tier.
    #[serde(default)]
    pub tiers: Tiers,
    /// How reads and writes of open disk-tier files travel: "passthrough" or "daemon".
    #[serde(default)]
    pub data_path: String,
    /// Whether the daemon answers OPEN ("answered") or the kernel opens files itself
    /// ("no-open"), as `--no-open` chose (decision 0063).
    #[serde(default)]
    pub kernel_open: String,
    /// Whether the daemon answers FLUSH at close ("answered") or the kernel was told to send
    /// none ("no-flush").
    #[serde(default)]
    pub kernel_flush: String,
    /// Whether the kernel of the mount caches writes ("on") or writes through ("off"), as
    /// INIT settled it: FUSE passthrough or a kernel without it turns it off whatever
    /// `--writeback-cache` asked (decision 0058). Empty: a daemon before minor version 2.
    #[serde(default)]
    pub writeback_cache: String,
    /// Per category, by name: files, bytes per tier, bytes not yet durable and deadlines.
    #[serde(default)]
    pub categories: BTreeMap<String, CategoryFigures>,
    /// Regular files the archiver holds out of the store until their deadline (decision
    /// 0090), all categories together.
    #[serde(default)]
    pub held_files: u64,
    /// The store's second copy (DA2), on a mirrored store (decision 0077).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<MirrorStatus>,
    /// Why the mount's recovery could not use the checkpoint, when the backup pair rebuilt
    /// the state instead (decision 0123).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_from_backup: Option<String>,
}

/// One category in `rampart status` (docs/CATEGORIES.md, "Watching the categories").
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CategoryFigures {
    /// Its spec (null: a name the configuration no longer knows).
    pub spec: Option<String>,
    pub files: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    /// Data bytes written and not yet in the store.
    pub bytes_at_risk: u64,
    /// The age of the oldest change not yet in the store (null: nothing waits).
    pub oldest_at_risk_age_ms: Option<f64>,
    /// How long its spec lets a change wait before it must be in the store (null: never
    /// goes there; 0: before the write returns).
    pub deadline_ms: Option<f64>,
    /// The longest any change of it waited before it was in the store, since the mount.
    pub lag_ms_max: f64,
    /// Its regular files the archiver holds out of the store until their deadline (decision
    /// 0090); 0 from a daemon before minor version 3.
    #[serde(default)]
    pub held_files: u64,
}

impl From<&rampart_core::CategoryStatus> for CategoryFigures {
    fn from(c: &rampart_core::CategoryStatus) -> CategoryFigures {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        CategoryFigures {
            spec: c.spec.map(|s| s.to_string()),
            files: c.files,
            memory_bytes: c.memory_bytes,
            disk_bytes: c.disk_bytes,
            bytes_at_risk: c.bytes_at_risk,
            oldest_at_risk_age_ms: c.oldest_at_risk_age.map(ms),
            deadline_ms: c.deadline.map(ms),
            lag_ms_max: ms(c.lag_max),
            held_files: c.held_files,
        }
    }
}

/// The state of a mirrored store's second copy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MirrorStatus {
    pub path: String,
    /// "ok": every change reaches it; "degraded": it does not (see `reason`).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Files and bytes on one tier.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TierFigures {
    pub files: u64,
    pub bytes: u64,
}

/// The two tiers of `rampart status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Tiers {
    pub memory: TierFigures,
    pub disk: TierFigures,
}

/// What a daemon reports on: its engine, persister and FUSE counters, and where it serves.
pub struct Sources {
    pub engine: Arc<Engine>,
    pub persister: Arc<Persister>,
    pub counters: Arc<RequestCounters>,
    pub store: PathBuf,
    pub mountpoint: PathBuf,
    /// How requests reach the daemon: "io_uring" or "/dev/fuse".
    pub fuse_transport: &'static str,
    /// The kernel uses the writeback cache (what INIT settled, not what was asked).
    pub writeback_cache: bool,
    /// Why the checkpoint could not be used, if recovery used the backup pair.
    pub recovered_from_backup: Option<String>,
}

pub fn status_of(sources: &Sources) -> Status {
    let Sources {
        engine,
        persister,
        counters,
        store,
        mountpoint,
        fuse_transport,
        writeback_cache,
        recovered_from_backup,
    } = sources;
    let s = engine.stats();
    let categories: BTreeMap<String, CategoryFigures> = engine
        .category_status()
        .iter()
        .map(|c| (c.name.clone(), CategoryFigures::from(c)))
        .collect();
    Status {
        schema_version: STATUS_SCHEMA_VERSION,
        schema_minor_version: STATUS_SCHEMA_MINOR_VERSION,
        held_files: categories.values().map(|c| c.held_files).sum(),
        categories,
        pid: std::process::id(),
        store: store.to_path_buf(),
        mountpoint: mountpoint.to_path_buf(),
        files: s.files,
        directories: s.directories,
        symlinks: s.symlinks,
        other: s.other,
        inodes: s.inodes(),
        data_bytes: s.data_bytes,
        tiers: Tiers {
            memory: TierFigures {
                files: s.memory_files(),
                bytes: s.memory_data_bytes(),
            },
            disk: TierFigures {
                files: s.disk_files,
                bytes: s.disk_data_bytes,
            },
        },
        data_path: engine.data_path().to_string(),
        recovered_from_backup: recovered_from_backup.clone(),
        mirror: engine.mirror_health().map(|h| {
            let reason = h.degraded();
            MirrorStatus {
                path: h.path().to_string(),
                state: if reason.is_some() { "degraded" } else { "ok" }.to_string(),
                reason,
            }
        }),
        kernel_open: match engine.kernel_requests() {
            Some(k) if !k.open => "no-open",
            _ => "answered",
        }
        .to_string(),
        kernel_flush: match engine.kernel_requests() {
            Some(k) if !k.flush => "no-flush",
            _ => "answered",
        }
        .to_string(),
        writeback_cache: if *writeback_cache { "on" } else { "off" }.to_string(),
        memory_used_bytes: s.memory_used_bytes,
        memory_cap_bytes: s.memory_cap_bytes,
        persistence: persistence_of(persister),
        fuse_transport: fuse_transport.to_string(),
        fuse_passthrough_opens: counters.passthrough_opens(),
        fuse_requests: counters
            .snapshot()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        fuse_latency: counters
            .latencies()
            .iter()
            .map(|(k, h)| (k.to_string(), Latency::from(h)))
            .collect(),
        fuse_sync_failures: counters.sync_failures(),
        fuse_errors: errors_by_operation(),
    }
}

/// The persister's figures for `status`.
fn persistence_of(persister: &Persister) -> Persistence {
    let p = persister.stats();
    Persistence {
        commit_interval_ms: persister.commit_interval().as_millis() as u64,
        ops_pending: p.ops_pending,
        pending_bytes: p.pending_bytes,
        journal_bytes: p.journal_bytes,
        commits: p.commits,
        checkpoints: p.checkpoints,
        last_checkpoint_pause_ms: p.last_checkpoint_pause.as_secs_f64() * 1e3,
        last_checkpoint_switch_ms: p.last_checkpoint_switch.as_secs_f64() * 1e3,
        checkpoint_image_bytes: p.checkpoint_image_bytes,
        checkpoint_due_at_journal_bytes: p.checkpoint_due_at_journal_bytes,
        error: p.error,
        oldest_pending_age_ms_max: p.oldest_pending_age_max.map(|age| age.as_secs_f64() * 1e3),
        commit_latency: Latency::from(&p.commit_latency),
        checkpoint_latency: Latency::from(&p.checkpoint_latency),
        checkpoint_error: p.checkpoint_error,
        store_written_bytes: rampart_core::persist::device::store_written_bytes(),
        host_sync_failures: persister.host_sync_failures(),
    }
}

fn errors_by_operation() -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (op, errno, n) in rampart_fuse::counters::errors() {
        out.entry(op.to_string())
            .or_default()
            .insert(rampart_fuse::counters::errno_name(errno), n);
    }
    out
}

/// How a daemon's shutdown ended, for `watch-exit`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// The final checkpoint was written and the FUSE session ended without an error.
    Clean,
    /// It kept everything durable but ended with an error, and why.
    Failed(String),
    /// Changes that were acknowledged to programs (but not yet durable) are gone, and why.
    Lost(String),
}

/// Most `watch-exit` connections held at once.
const EXIT_WATCHERS_MAX: usize = 16;

/// The connections waiting for the daemon's [`Exit`], and the exit once it is known (a client
/// that registers after it gets it at once).
#[derive(Default)]
struct ExitState {
    streams: Vec<UnixStream>,
    exit: Option<Exit>,
}

type ExitWatchers = Arc<std::sync::Mutex<ExitState>>;

fn exit_line(exit: &Exit) -> String {
    serde_json::to_string(exit).unwrap_or_default() + "\n"
}

/// The control socket this daemon bound, known by its inode as well as its path.
pub struct ControlSocket {
    path: PathBuf,
    dev_ino: Option<(u64, u64)>,
    exit_watchers: ExitWatchers,
}

impl ControlSocket {
    /// Tells every `watch-exit` client, and any that comes later, how the shutdown ended.
    pub fn report_exit(&self, exit: &Exit) {
        let line = exit_line(exit);
        let streams = {
            let mut state = self.exit_watchers.lock().unwrap_or_else(|e| e.into_inner());
            state.exit = Some(exit.clone());
            std::mem::take(&mut state.streams)
        };
        for mut stream in streams {
            let _ = stream.write_all(line.as_bytes());
        }
    }

    /// Removes the socket, unless its path now names another file: after an unmount the store
    /// folder may have been replaced and a new daemon bound its own socket there.
    pub fn remove(&self) {
        use std::os::unix::fs::MetadataExt;
        let now = std::fs::symlink_metadata(&self.path).map(|m| (m.dev(), m.ino()));
        if now.ok() == self.dev_ino && self.dev_ino.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Serves the control socket on a background thread until the process ends.
pub fn serve(sources: Arc<Sources>) -> std::io::Result<ControlSocket> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let path = sources.store.join(SOCKET_FILE);
    // A socket left by a daemon that died: we hold the store lock, so it is stale.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    // Like every store file, private to the owner (connecting needs write permission).
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let exit_watchers = ExitWatchers::default();
    let socket = ControlSocket {
        dev_ino: std::fs::symlink_metadata(&path)
            .map(|m| (m.dev(), m.ino()))
            .ok(),
        path,
        exit_watchers: exit_watchers.clone(),
    };
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if let Err(e) = answer(stream, &sources, &exit_watchers) {
                    tracing::debug!("control request failed: {e}");
                }
            }
        })?;
    Ok(socket)
}

fn answer(
    stream: UnixStream,
    sources: &Sources,
    exit_watchers: &ExitWatchers,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new((&stream).take_limit()).read_line(&mut line)?;
    let reply = match line.trim() {
        "watch-exit" => {
            let mut state = exit_watchers.lock().unwrap_or_else(|e| e.into_inner());
            // Clients that gave up (an unmount refused as busy) leave room for new ones.
            state.streams.retain(peer_still_there);
            if let Some(exit) = &state.exit {
                let line = exit_line(exit);
                drop(state);
                return (&stream).write_all(format!("{{\"watching\":true}}\n{line}").as_bytes());
            }
            if state.streams.len() >= EXIT_WATCHERS_MAX {
                serde_json::json!({ "error": "too many clients wait for the exit" }).to_string()
            } else {
                (&stream).write_all(b"{\"watching\":true}\n")?;
                state.streams.push(stream);
                return Ok(());
            }
        }
        "status" => serde_json::to_string(&status_of(sources))
            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")),
        "sync" => return crate::sync_cmd::serve(stream, sources.engine.clone(), true),
        "sync-commit-only" => return crate::sync_cmd::serve(stream, sources.engine.clone(), false),
        "categories" => serde_json::to_string(&categories_in_force(&sources.engine))
            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")),
        other => serde_json::json!({ "error": format!("unknown command {other:?}") }).to_string(),
    };
    (&stream).write_all(format!("{reply}\n").as_bytes())
}

/// Whether the client of `stream` still has its end open.
fn peer_still_there(stream: &UnixStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    // Nothing to consume: the client sends nothing after its command.
    let mut byte = [0u8; 1];
    let open = match std::io::Read::read(&mut &*stream, &mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    };
    open && stream.set_nonblocking(false).is_ok()
}

trait TakeLimit: std::io::Read + Sized {
    fn take_limit(self) -> std::io::Take<Self> {
        self.take(COMMAND_BYTES_MAX)
    }
}
impl<R: std::io::Read> TakeLimit for R {}

/// A connection on which the daemon of a store will say how its shutdown ended.
pub struct ExitWatch(BufReader<UnixStream>);

/// What [`ExitWatch::wait`] saw.
pub enum Watched {
    Exit(Exit),
    /// The connection ended without an exit: the daemon died.
    Ended,
    TimedOut,
}

/// Sends `command` to the daemon of `store` and reads its first answer line. The reader is
/// returned for whatever the daemon says after it.
fn request(store: &Path, command: &str) -> Result<(String, BufReader<UnixStream>), String> {
    let path = store.join(SOCKET_FILE);
    let stream = UnixStream::connect(&path)
        .map_err(|e| format!("cannot reach the rampart daemon at {}: {e}", path.display()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    (&stream)
        .write_all(format!("{command}\n").as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    (&mut reader)
        .take(ANSWER_BYTES_MAX)
        .read_line(&mut line)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((line, reader))
}

/// Registers for the daemon's [`Exit`]; do it before unmounting.
pub fn watch_exit(store: &Path) -> Result<ExitWatch, String> {
    // The same reader for what follows: the exit may arrive with the acknowledgement.
    let (line, reader) = request(store, "watch-exit")?;
    if line.trim() != "{\"watching\":true}" {
        return Err(format!(
            "the daemon refused to report its exit: {}",
            line.trim()
        ));
    }
    Ok(ExitWatch(reader))
}

impl ExitWatch {
    /// Waits up to `timeout` for the daemon's [`Exit`].
    pub fn wait(mut self, timeout: Duration) -> Watched {
        if self
            .0
            .get_ref()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .is_err()
        {
            return Watched::Ended;
        }
        let mut line = String::new();
        match (&mut self.0).take(ANSWER_BYTES_MAX).read_line(&mut line) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Watched::TimedOut
            }
            Err(_) => Watched::Ended,
            Ok(_) => serde_json::from_str(&line).map_or(Watched::Ended, Watched::Exit),
        }
    }
}

/// A category as the mount has it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CategoryInForce {
    pub name: String,
    pub spec: String,
    /// MBFS's (docs/CATEGORIES.md), else the store's rampart.toml.
    pub builtin: bool,
    /// Why it cannot be used, if it cannot (needs DA2, ...).
    pub unusable: Option<String>,
}

/// A filename rule as the mount has it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuleInForce {
    /// From 1, in the configuration's order: the first that matches wins.
    pub number: u32,
    /// `glob` or `regex`.
    pub kind: String,
    pub pattern: String,
    /// Matches the path from the mount's root (else the name alone).
    pub on_path: bool,
    pub category: String,
    /// Its line in the store's rampart.toml.
    pub line: usize,
}

/// The answer to `categories`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CategoriesInForce {
    pub default: String,
    pub commit_interval_ms: u64,
    pub categories: Vec<CategoryInForce>,
    pub rules: Vec<RuleInForce>,
}

fn categories_in_force(engine: &Engine) -> CategoriesInForce {
    let c = engine.categories();
    CategoriesInForce {
        default: c.default_category().name.clone(),
        commit_interval_ms: c.commit_interval().as_millis() as u64,
        categories: c
            .list()
            .iter()
            .map(|k| CategoryInForce {
                name: k.name.clone(),
                spec: k.spec.to_string(),
                builtin: k.builtin,
                unusable: c.resolve(&k.name).err().map(|e| e.to_string()),
            })
            .collect(),
        rules: c
            .rules()
            .iter()
            .enumerate()
            .map(|(i, r)| RuleInForce {
                number: i as u32 + 1,
                kind: match &r.pattern {
                    RulePattern::Glob(_) => "glob".into(),
                    RulePattern::Regex(_) => "regex".into(),
                },
                pattern: match &r.pattern {
                    RulePattern::Glob(p) | RulePattern::Regex(p) => p.clone(),
                },
                on_path: r.on_path(),
                category: r.category.clone(),
                line: r.line,
            })
            .collect(),
    }
}

/// Asks the daemon of `store` for the categories and rules in force.
pub fn query_categories(store: &Path) -> Result<CategoriesInForce, String> {
    let (line, _) = request(store, "categories")?;
    serde_json::from_str(&line).map_err(|e| format!("bad answer from the daemon ({e}): {line}"))
}

/// Asks the daemon of `store` for its status.
pub fn query_status(store: &Path) -> Result<Status, String> {
    let (line, _) = request(store, "status")?;
    serde_json::from_str(&line).map_err(|e| format!("bad answer from the daemon ({e}): {line}"))
}

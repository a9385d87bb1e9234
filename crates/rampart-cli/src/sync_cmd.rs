//! `rampart sync MOUNTPOINT`: make what was written to a mount durable now.
//!
//! sync(1) reaches a FUSE file system only as far as the kernel's own caches: the kernel
//! writes its dirty pages to the daemon, but sends no SYNCFS (the kernel offers it to
//! virtiofs only), so the daemon never learns that a sync was asked for. This command does
//! both halves: a syncfs(2) of the mount (the kernel's dirty pages become requests), then the
//! control socket's `sync` (decision 0122): the files the archiver holds until a later
//! deadline are made present (unless `--commit-only`), the disk-tier files written through
//! passthrough are synced, and the journal is committed and synced. TEMPORARY and DISPOSABLE
//! files stay out of the store: their contract says so.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rampart_core::Engine;
use serde::{Deserialize, Serialize};

use crate::control::SOCKET_FILE;
use crate::mounts;

/// Syncs the control socket serves at once; more are refused (each holds a thread).
const SYNCS_IN_FLIGHT_MAX: usize = 4;
/// How long `rampart sync` waits for the daemon's answer: a commit waits for the disk, and a
/// disk can be slow, but a daemon that does not answer in this time is reported.
const SYNC_ANSWER_WAIT: Duration = Duration::from_secs(600);

static SYNCS_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Set when the daemon shuts down: syncs asked from then on are refused.
static CLOSING: AtomicBool = AtomicBool::new(false);

/// A sync's place among [`SYNCS_IN_FLIGHT`], given back when dropped (also on a panic).
struct InFlight;

impl InFlight {
    /// Takes a place, unless all are taken or the daemon shuts down.
    fn take() -> Result<InFlight, String> {
        // Counted first, then CLOSING read (both SeqCst): `wait_for_syncs` sets CLOSING, then
        // waits for the count, so a sync is either refused here or waited for there.
        let before = SYNCS_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        let place = InFlight;
        if CLOSING.load(Ordering::SeqCst) {
            return Err(
                "the daemon is shutting down (its final checkpoint makes every change durable)"
                    .into(),
            );
        }
        if before >= SYNCS_IN_FLIGHT_MAX {
            return Err(format!(
                "{SYNCS_IN_FLIGHT_MAX} syncs are already under way; try again when they end"
            ));
        }
        Ok(place)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        SYNCS_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// At shutdown, before the final checkpoint: refuses new syncs and waits (at most
/// `wait_max`) for those under way, so that no op is applied behind the checkpoint.
pub fn wait_for_syncs(wait_max: Duration) {
    CLOSING.store(true, Ordering::SeqCst);
    let started = std::time::Instant::now();
    while SYNCS_IN_FLIGHT.load(Ordering::SeqCst) > 0 {
        if started.elapsed() >= wait_max {
            tracing::warn!(
                "shutting down with a `rampart sync` still under way after {} s",
                wait_max.as_secs()
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The daemon's answer to `sync` and `sync-commit-only`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SyncAnswer {
    /// Held files made present (0 with `sync-commit-only`).
    #[serde(default)]
    pub held_files_made_present: usize,
    /// Why the sync failed, if it did.
    #[serde(default)]
    pub error: Option<String>,
}

/// Daemon side: answers `stream` on a thread of its own, so that a slow disk does not hold
/// `rampart status` behind it.
pub fn serve(stream: UnixStream, engine: Arc<Engine>, held_too: bool) -> std::io::Result<()> {
    let place = match InFlight::take() {
        Ok(place) => place,
        Err(e) => {
            let answer = SyncAnswer {
                held_files_made_present: 0,
                error: Some(e),
            };
            return write_answer(&stream, &answer);
        }
    };
    std::thread::Builder::new()
        .name("control-sync".into())
        .spawn(move || {
            let answer = match sync_store(&engine, held_too) {
                Ok(held) => SyncAnswer {
                    held_files_made_present: held,
                    error: None,
                },
                Err(e) => SyncAnswer {
                    held_files_made_present: 0,
                    error: Some(format!("the store could not be synced: {e}")),
                },
            };
            drop(engine);
            drop(place);
            if let Err(e) = write_answer(&stream, &answer) {
                tracing::debug!("answering a sync request: {e}");
            }
        })?;
    Ok(())
}

/// What a sync does in the daemon; returns how many held files were made present.
fn sync_store(engine: &Engine, held_too: bool) -> std::io::Result<usize> {
    let held = if held_too { engine.archive_all() } else { 0 };
    // What the kernel wrote behind the engine (passthrough) is logged and synced, as the
    // committer does every interval; then one commit makes everything durable.
    let failed = engine.sync_passthrough_files();
    engine.sync()?;
    if failed > 0 {
        return Err(std::io::Error::other(format!(
            "{failed} disk-tier files written through passthrough could not be synced (the \
             daemon's log names them)"
        )));
    }
    Ok(held)
}

fn write_answer(mut stream: &UnixStream, answer: &SyncAnswer) -> std::io::Result<()> {
    let line = serde_json::to_string(answer).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    stream.write_all(format!("{line}\n").as_bytes())
}

/// `rampart sync MOUNTPOINT [--commit-only]`.
pub fn run(mountpoint: &Path, commit_only: bool) -> Result<(), String> {
    let mount = mounts::find_mount(mountpoint)
        .ok_or_else(|| format!("{} is not a rampart mount", mountpoint.display()))?;
    syncfs(&mount.mountpoint)?;
    let command = if commit_only {
        "sync-commit-only"
    } else {
        "sync"
    };
    let answer = ask(&mount.store, command)?;
    if let Some(e) = answer.error {
        return Err(format!("{}: {e}", mount.mountpoint.display()));
    }
    if answer.held_files_made_present > 0 {
        println!(
            "{}: synced; {} held files made present",
            mount.mountpoint.display(),
            answer.held_files_made_present
        );
    }
    Ok(())
}

/// syncfs(2) of the mount: the kernel sends the daemon what its page cache holds dirty.
fn syncfs(mountpoint: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(mountpoint)
        .map_err(|e| format!("opening {}: {e}", mountpoint.display()))?;
    // SAFETY: syncfs(2) only reads the descriptor, which `dir` keeps open for the call.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "syncfs of {}: {e} (the kernel could not write its cached pages to the daemon)",
            mountpoint.display()
        ));
    }
    Ok(())
}

fn ask(store: &Path, command: &str) -> Result<SyncAnswer, String> {
    let path = store.join(SOCKET_FILE);
    let stream = UnixStream::connect(&path)
        .map_err(|e| format!("cannot reach the rampart daemon at {}: {e}", path.display()))?;
    stream
        .set_read_timeout(Some(SYNC_ANSWER_WAIT))
        .map_err(|e| e.to_string())?;
    (&stream)
        .write_all(format!("{command}\n").as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut line = String::new();
    BufReader::new(stream)
        .take(1 << 16)
        .read_line(&mut line)
        .map_err(|e| {
            format!(
                "no answer from the daemon at {} within {} s: {e}",
                path.display(),
                SYNC_ANSWER_WAIT.as_secs()
            )
        })?;
    if line.is_empty() {
        return Err(format!(
            "the daemon at {} closed the connection without answering (did it exit?)",
            path.display()
        ));
    }
    serde_json::from_str(&line).map_err(|e| format!("bad answer from the daemon ({e}): {line}"))
}

//! Hands the kernel's dirty pages of the mount to the daemon within the commit interval.
//!
//! Under the writeback cache a write(2) only fills the kernel's page cache; the daemon gets the
//! bytes when the kernel writes them back: at close, at fsync, or when the kernel's flusher
//! finds them older than `vm.dirty_expire_centisecs` (30 s by default). A file kept open (a
//! log) would miss the commit interval's promise by up to 30 s. `syncfs(2)` on the mount makes
//! the kernel send every dirty page at once; a child process calls it every half interval
//! (never the daemon itself: see [`start`]) and, if
//! that brought writes, asks for a commit, so those bytes are durable within about half an
//! interval more (docs/decisions/0026).
//!
//! The same child makes the daemon's other calls on its own mount (`rampart_fuse::own_mount`:
//! correcting the kernel's view after a refused WRITE, decision 0087), for the same reason.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rampart_core::{Engine, Ino};
use rampart_fuse::{OwnMountCalls, RequestCounters, RequestKind};

/// The shortest pause between two flushes, whatever the commit interval.
const PERIOD_MIN: Duration = Duration::from_millis(50);

/// Stops the flusher thread when dropped (it is not joined: it may wait for a syncfs).
pub struct PageFlusher {
    stop: Arc<AtomicBool>,
    child: SharedChild,
}

impl PageFlusher {
    /// The daemon's calls on its own mount, made by the flusher's child process.
    pub fn own_mount_calls(&self) -> Arc<dyn OwnMountCalls> {
        Arc::new(ChildCalls(self.child.clone()))
    }
}

/// The child process, shared by the flusher thread and the own-mount calls; `None` while it
/// is not running (it could not be restarted, or the flusher stopped).
#[derive(Clone)]
struct SharedChild(Arc<Mutex<Option<FlusherChild>>>);

impl SharedChild {
    fn lock(&self) -> MutexGuard<'_, Option<FlusherChild>> {
        // A panic while asking left at worst a child that answers out of turn, which the next
        // question notices (an answer it does not expect): it is then restarted.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for PageFlusher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// How long the flusher waits between two flushes for a commit interval.
pub fn period(commit_interval: Duration) -> Duration {
    (commit_interval / 2).max(PERIOD_MIN)
}

/// The hidden subcommand that runs [`child_main`].
pub const CHILD_COMMAND: &str = "page-flusher-child";

/// Starts flushing `mountpoint`, whose mount has the device number `device` (`major:minor`).
/// `commit_interval` is the shortest deadline it keeps up with (the commit interval, or a
/// category's shorter one).
///
/// The syncfs runs in a child process, never in the daemon: a syncfs waits for the daemon to
/// answer the WRITEs it causes, and a daemon killed (`kill -9`) while one of its own threads
/// sat in that syncfs could never finish dying — the thread waits for replies that only the
/// dead threads could give, and the process keeps /dev/fuse open, so the kernel never aborts
/// the connection (seen in the kill -9 tests: the store's lock stayed held for ever). The
/// child holds no /dev/fuse: when the daemon dies, the connection is aborted, the child's
/// syncfs fails and the child exits (it also dies with its parent: PR_SET_PDEATHSIG).
pub fn start(
    mountpoint: PathBuf,
    device: String,
    commit_interval: Duration,
    counters: Arc<RequestCounters>,
    engine: Arc<Engine>,
) -> std::io::Result<PageFlusher> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let child = SharedChild(Arc::new(Mutex::new(Some(FlusherChild::spawn(
        &mountpoint,
        &device,
    )?))));
    let shared = child.clone();
    std::thread::Builder::new()
        .name("page-flusher".into())
        .spawn(move || {
            let period = period(commit_interval);
            let mut warned = false;
            loop {
                std::thread::sleep(period);
                let mut child = shared.lock();
                if stopped.load(Ordering::Acquire) {
                    if let Some(child) = child.take() {
                        child.stop();
                    }
                    return;
                }
                let writes_before = counters.get(RequestKind::write);
                let answer = match child.as_mut() {
                    Some(c) => c.flush(),
                    None => Err(std::io::Error::other("not running")),
                };
                match answer {
                    Ok(ChildAnswer::Flushed) | Ok(ChildAnswer::NotOurs) => {}
                    Ok(ChildAnswer::OpenFailed(e)) if !warned => {
                        tracing::warn!(
                            "cannot open {} to flush the kernel's dirty pages: {e}",
                            mountpoint.display()
                        );
                        warned = true;
                    }
                    Ok(ChildAnswer::OpenFailed(_)) => {}
                    // syncfs also reports writeback errors of any file since the last call
                    // (ENOSPC at the memory cap); their writers see them at fsync or close.
                    // Pages of other files did arrive: commit them all the same.
                    Ok(ChildAnswer::SyncFailed(e)) => tracing::debug!("syncfs: {e}"),
                    Err(e) => {
                        // The child died (or never ran): start another for the next period.
                        tracing::warn!("the page flusher's child process: {e}; restarting it");
                        if let Some(old) = child.take() {
                            old.stop();
                        }
                        *child = FlusherChild::spawn(&mountpoint, &device)
                            .map_err(|e| tracing::warn!("restarting the page flusher: {e}"))
                            .ok();
                    }
                }
                drop(child);
                if counters.get(RequestKind::write) > writes_before {
                    // Errors reach the callers of fsync and the status; nobody waits here.
                    engine.sync_async(Box::new(|_| ()));
                }
            }
        })?;
    Ok(PageFlusher { stop, child })
}

/// [`OwnMountCalls`] through the flusher's child. A child that fails to answer is left to the
/// flusher thread to restart (within a period); the call fails meanwhile.
struct ChildCalls(SharedChild);

impl ChildCalls {
    fn ask(&self, question: &str) -> std::io::Result<String> {
        match self.0.lock().as_mut() {
            Some(child) => child.ask(question),
            None => Err(std::io::Error::other(
                "the page flusher's child is not running",
            )),
        }
    }
}

impl OwnMountCalls for ChildCalls {
    fn sync_and_size(&self, ino: Ino, generation: u64) -> std::io::Result<Option<u64>> {
        let answer = self.ask(&format!("size {ino} {generation}"))?;
        match answer.split_once(' ') {
            _ if answer == "none" || answer == "not-ours" => Ok(None),
            Some(("size", n)) => n
                .parse()
                .map(Some)
                .map_err(|_| std::io::Error::other(format!("the child answered {answer:?}"))),
            _ => Err(child_error(&answer)),
        }
    }

    fn truncate_past(&self, ino: Ino, generation: u64, size_bytes: u64) -> std::io::Result<()> {
        let answer = self.ask(&format!("truncate {ino} {generation} {size_bytes}"))?;
        match answer.as_str() {
            "ok" | "none" | "not-ours" => Ok(()),
            _ => Err(child_error(&answer)),
        }
    }
}

/// The error a child's answer line (`open E`, `err E`) reports.
fn child_error(answer: &str) -> std::io::Error {
    std::io::Error::other(format!("the page flusher's child: {answer}"))
}

/// The child process that does the syncfs, and the pipes to it: one line asks for a flush,
/// one line answers.
struct FlusherChild {
    child: std::process::Child,
    ask: std::process::ChildStdin,
    answers: std::io::BufReader<std::process::ChildStdout>,
}

enum ChildAnswer {
    Flushed,
    NotOurs,
    OpenFailed(String),
    SyncFailed(String),
}

impl FlusherChild {
    fn spawn(mountpoint: &std::path::Path, device: &str) -> std::io::Result<FlusherChild> {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        // This very binary, even if it was replaced on disk since the mount started.
        let mut child = Command::new("/proc/self/exe")
            .arg0("rampart")
            .arg(CHILD_COMMAND)
            .arg(mountpoint)
            .arg(device)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let (Some(ask), Some(answers)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("no pipes to the child"));
        };
        Ok(FlusherChild {
            child,
            ask,
            answers: std::io::BufReader::new(answers),
        })
    }

    /// Sends one question line and waits for its answer line. A daemon killed meanwhile dies
    /// at once: this thread waits in a pipe read, which a kill interrupts.
    fn ask(&mut self, question: &str) -> std::io::Result<String> {
        use std::io::{BufRead, Write};
        debug_assert!(!question.contains('\n'));
        self.ask.write_all(format!("{question}\n").as_bytes())?;
        self.ask.flush()?;
        let mut line = String::new();
        if self.answers.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("it exited"));
        }
        line.truncate(line.trim_end().len());
        Ok(line)
    }

    /// Asks for one syncfs and waits for its answer.
    fn flush(&mut self) -> std::io::Result<ChildAnswer> {
        let line = self.ask("flush")?;
        let line = line.as_str();
        Ok(match line.split_once(' ') {
            _ if line == "ok" => ChildAnswer::Flushed,
            _ if line == "not-ours" => ChildAnswer::NotOurs,
            Some(("open", e)) => ChildAnswer::OpenFailed(e.to_string()),
            Some(("sync", e)) => ChildAnswer::SyncFailed(e.to_string()),
            _ => return Err(std::io::Error::other(format!("it answered {line:?}"))),
        })
    }

    /// Closes its input (it exits at the end of it) and reaps it.
    fn stop(self) {
        let FlusherChild { mut child, ask, .. } = self;
        drop(ask);
        let _ = child.wait();
    }
}

/// The child's side (`rampart page-flusher-child MOUNTPOINT DEVICE`): a syncfs of the mount
/// for each `flush` line read, the own-mount calls for `size INO GEN` and `truncate INO GEN
/// SIZE` lines, an answer line for each; exits at the end of its input or when its parent
/// dies.
pub fn child_main(mountpoint: &std::path::Path, device: &str) -> std::process::ExitCode {
    use std::io::{BufRead, Write};
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of this process; getppid reads one.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    }
    // SAFETY: as above. Parent already gone (adopted by init): nothing to flush for.
    if unsafe { libc::getppid() } == 1 {
        return std::process::ExitCode::SUCCESS;
    }
    // Descriptors inherited by mistake (a /dev/fuse without O_CLOEXEC) would keep a dead
    // daemon's connection alive: close all but stdin, stdout and stderr.
    // SAFETY: close_range only closes descriptors; this process owns no Rust object holding
    // one above 2 yet (it has just started and opened nothing).
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    }
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let answer = match line.split(' ').collect::<Vec<_>>()[..] {
            ["flush"] => match flush(mountpoint, device) {
                Ok(true) => "ok".to_string(),
                Ok(false) => "not-ours".to_string(),
                Err(Flush::Open(e)) => format!("open {e}"),
                Err(Flush::Sync(e)) => format!("sync {e}"),
            },
            ["size", ino, generation] => own_mount_call(mountpoint, device, |root| {
                let (ino, generation) = (number(ino)?, number(generation)?);
                Ok(
                    match rampart_fuse::own_mount::sync_and_size(root, ino, generation)? {
                        Some(size) => format!("size {size}"),
                        None => "none".to_string(),
                    },
                )
            }),
            ["truncate", ino, generation, size] => own_mount_call(mountpoint, device, |root| {
                let (ino, generation, size) = (number(ino)?, number(generation)?, number(size)?);
                rampart_fuse::own_mount::truncate_past(root, ino, generation, size)?;
                Ok("ok".to_string())
            }),
            _ => format!("err unknown question {line:?}"),
        };
        if writeln!(stdout, "{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
    std::process::ExitCode::SUCCESS
}

/// An own-mount call below the mount's root, as an answer line: its result, `not-ours` if the
/// mount point no longer shows the mount, `open E` or `err E`.
fn own_mount_call(
    mountpoint: &std::path::Path,
    device: &str,
    call: impl FnOnce(&std::os::fd::OwnedFd) -> std::io::Result<String>,
) -> String {
    let root = match our_root(mountpoint, device) {
        Ok(Some(root)) => root,
        Ok(None) => return "not-ours".to_string(),
        Err(e) => return format!("open {e}"),
    };
    call(&root.into()).unwrap_or_else(|e| format!("err {e}"))
}

fn number(word: &str) -> std::io::Result<u64> {
    word.parse()
        .map_err(|_| std::io::Error::other(format!("not a number: {word:?}")))
}

/// The mount's root, unless the mount point no longer shows our mount (unmounted, or another
/// mounted over it).
fn our_root(mountpoint: &std::path::Path, device: &str) -> std::io::Result<Option<std::fs::File>> {
    let root = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(mountpoint)?;
    let dev = root.metadata()?.dev();
    Ok((format!("{}:{}", libc::major(dev), libc::minor(dev)) == device).then_some(root))
}

/// One syncfs of the mount, unless the mount point no longer shows our mount (unmounted, or
/// another mounted over it). The descriptor is held only for the call: while it is open the
/// mount is busy, and an unmount then is refused (both unmount paths of rampart retry).
fn flush(mountpoint: &std::path::Path, device: &str) -> Result<bool, Flush> {
    let Some(root) = our_root(mountpoint, device).map_err(Flush::Open)? else {
        return Ok(false);
    };
    // SAFETY: syncfs only reads the descriptor, which `root` keeps open for the call.
    if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
        return Err(Flush::Sync(std::io::Error::last_os_error()));
    }
    Ok(true)
}

/// Why a flush did not happen (`Open`) or reported an error (`Sync`).
enum Flush {
    Open(std::io::Error),
    Sync(std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_twice_per_commit_interval_but_not_more_often_than_the_minimum() {
        assert_eq!(period(Duration::from_secs(5)), Duration::from_millis(2500));
        assert_eq!(period(Duration::from_millis(1)), PERIOD_MIN);
    }
}

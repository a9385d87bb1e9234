//! Hands the kernel's dirty pages of the mount to the daemon within the commit interval.
//!
//! Under the writeback cache a write(2) only fills the kernel's page cache; the daemon gets the
//! bytes when the kernel writes them back: at close, at fsync, or when the kernel's flusher
//! finds them older than `vm.dirty_expire_centisecs` (30 s by default). A file kept open (a
//! log) would miss the commit interval's promise by up to 30 s. `syncfs(2)` on the mount makes
//! the kernel send every dirty page at once; a thread calls it every half interval and, if
//! that brought writes, asks for a commit, so those bytes are durable within about half an
//! interval more (docs/decisions/0026).

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rampart_core::Engine;
use rampart_fuse::{RequestCounters, RequestKind};

/// The shortest pause between two flushes, whatever the commit interval.
const PERIOD_MIN: Duration = Duration::from_millis(50);

/// Stops the flusher thread when dropped (it is not joined: it may sit in a syncfs).
pub struct PageFlusher {
    stop: Arc<AtomicBool>,
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

/// Starts flushing `mountpoint`, whose mount has the device number `device` (`major:minor`).
pub fn start(
    mountpoint: PathBuf,
    device: String,
    commit_interval: Duration,
    counters: Arc<RequestCounters>,
    engine: Arc<Engine>,
) -> std::io::Result<PageFlusher> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name("page-flusher".into())
        .spawn(move || {
            let period = period(commit_interval);
            let mut warned = false;
            loop {
                std::thread::sleep(period);
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                let writes_before = counters.get(RequestKind::write);
                match flush(&mountpoint, &device) {
                    Err(Flush::Open(e)) if !warned => {
                        tracing::warn!(
                            "cannot open {} to flush the kernel's dirty pages: {e}",
                            mountpoint.display()
                        );
                        warned = true;
                    }
                    // syncfs also reports writeback errors of any file since the last call
                    // (ENOSPC at the memory cap); their writers see them at fsync or close.
                    // Pages of other files did arrive: commit them all the same.
                    Err(Flush::Sync(e)) => tracing::debug!("syncfs: {e}"),
                    _ => {}
                }
                if counters.get(RequestKind::write) > writes_before {
                    // Errors reach the callers of fsync and the status; nobody waits here.
                    engine.sync_async(Box::new(|_| ()));
                }
            }
        })?;
    Ok(PageFlusher { stop })
}

/// One syncfs of the mount, unless the mount point no longer shows our mount (unmounted, or
/// another mounted over it). The descriptor is held only for the call: while it is open the
/// mount is busy, and an unmount then is refused (both unmount paths of rampart retry).
fn flush(mountpoint: &std::path::Path, device: &str) -> Result<(), Flush> {
    let root = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(mountpoint)
        .map_err(Flush::Open)?;
    let dev = root.metadata().map_err(Flush::Open)?.dev();
    if format!("{}:{}", libc::major(dev), libc::minor(dev)) != device {
        return Ok(());
    }
    // SAFETY: syncfs only reads the descriptor, which `root` keeps open for the call.
    if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
        return Err(Flush::Sync(std::io::Error::last_os_error()));
    }
    Ok(())
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

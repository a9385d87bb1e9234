//! The store's lock: an `flock` on the file `lock`, exclusive for a daemon (which writes its pid
//! there), shared for a read-only check.
//!
//! The kernel releases an flock when the last descriptor of its open file is closed, which for
//! a killed daemon is not when its pid dies: the thread-group leader becomes a zombie first,
//! and the files go only once its last thread has finished exiting (cancelling its io_uring
//! requests takes a while). A restart right after `kill -9` (by hand, by systemd) would meet a
//! lock held by a dead daemon. So a lock whose holder has died (gone or a zombie) is waited
//! for, polling, for at most `LOCK_WAIT_EXITING_MS_MAX`, and then said to be held by a daemon
//! still exiting.
//!
//! Likewise a daemon that has been unmounted but is still writing its final checkpoint: it
//! marks the lock file (`PID` then a line `mounted` once mounted, `unmounted` once its session
//! has ended, [`mark`]), and a mount waits for it, for at most `LOCK_WAIT_UNMOUNTED_MS_MAX`
//! (decision 0135). A holder marked `mounted` whose store is in no mount of the mount table
//! has been unmounted too, and has not noticed yet (umount(2) returns before the daemon reads
//! the end of its session). umount(8) run by root
//! returns as soon as the kernel has detached the mount (libmount finds the type `fuse` by
//! statfs and never runs umount.fuse.rampart), so `umount M && mount S M` meets exactly that.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use super::{io_err, StoreError, LOCK_FILE};
use crate::limits::{LOCK_WAIT_EXITING_MS_MAX, LOCK_WAIT_UNMOUNTED_MS_MAX};

/// Between two attempts at a lock held by a dying daemon.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The line a daemon adds to the lock file once mounted, and once unmounted ([`mark`]).
const MOUNTED_LINE: &str = "mounted";
const UNMOUNTED_LINE: &str = "unmounted";

/// What a daemon holding the lock says of its mount in the lock file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Nothing (starting, a library, or a binary from before the marks).
    None,
    Mounted,
    Unmounted,
}

/// How long a lock is waited for, by what its holder is doing.
#[derive(Clone, Copy, Debug)]
struct Waits {
    /// The holder has died (gone, or a zombie).
    exiting: Duration,
    /// The holder lives but has been unmounted (its final checkpoint).
    unmounted: Duration,
}

/// How a store is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// To mount or change it: an exclusive lock, the lock file (created if needed) holding
    /// our pid.
    Exclusive,
    /// To read it: a shared lock on the existing lock file, opened read-only; nothing is
    /// written, so a read-only copy of a store can be checked. Still refused while a daemon
    /// holds the exclusive lock.
    ReadOnly,
}

/// Takes the store's lock (see [`Access`]). None: read-only, and there is no lock file.
pub(super) fn lock(path: &Path, access: Access) -> Result<Option<File>, StoreError> {
    lock_waiting(
        path,
        access,
        Waits {
            exiting: Duration::from_millis(LOCK_WAIT_EXITING_MS_MAX),
            unmounted: Duration::from_millis(LOCK_WAIT_UNMOUNTED_MS_MAX),
        },
    )
}

/// Marks the lock file, held by this process, as a daemon's that is mounted or has been
/// unmounted and is finishing: a mount of the store waits for the latter rather than refusing
/// (see the module's doc).
pub(crate) fn mark(lock: &File, mark: Mark) -> std::io::Result<()> {
    let line = match mark {
        Mark::None => "",
        Mark::Mounted => MOUNTED_LINE,
        Mark::Unmounted => UNMOUNTED_LINE,
    };
    let text = format!("{}\n{line}\n", std::process::id());
    let text = text.trim_end_matches('\n').to_string() + "\n";
    lock.write_all_at(text.as_bytes(), 0)?;
    lock.set_len(text.len() as u64)?;
    crate::persist::device::count_store_written(text.len() as u64);
    Ok(())
}

/// [`lock`], waiting at most `waits` for a holder that has died or has been unmounted.
fn lock_waiting(path: &Path, access: Access, waits: Waits) -> Result<Option<File>, StoreError> {
    let lock_path = path.join(LOCK_FILE);
    let opened = match access {
        Access::Exclusive => OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path),
        Access::ReadOnly => File::open(&lock_path),
    };
    let lock = match opened {
        Ok(file) => file,
        // Never mounted: no daemon can hold it.
        Err(e) if access == Access::ReadOnly && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(io_err(&lock_path)(e)),
    };
    let started = Instant::now();
    loop {
        match try_flock(&lock, access) {
            Ok(true) => break,
            Ok(false) => {}
            Err(err) => return Err(io_err(&lock_path)(err)),
        }
        let (pid, marked) = holder(&lock);
        let unmounted = marked == Mark::Unmounted
            || (marked == Mark::Mounted && !in_mount_table(path).unwrap_or(true));
        let dying = pid.is_some_and(|pid| !process_running(pid));
        if !dying && !unmounted {
            return Err(StoreError::AlreadyMounted {
                path: path.to_path_buf(),
                pid,
            });
        }
        let waited_ms = started.elapsed().as_millis() as u64;
        let pid = pid.unwrap_or_default();
        if dying && started.elapsed() >= waits.exiting {
            let path = path.to_path_buf();
            return Err(StoreError::HolderExiting {
                path,
                pid,
                waited_ms,
            });
        }
        if !dying && started.elapsed() >= waits.unmounted {
            let path = path.to_path_buf();
            return Err(StoreError::HolderUnmounting {
                path,
                pid,
                waited_ms,
            });
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    if started.elapsed() > POLL_INTERVAL {
        tracing::debug!(
            "{}: waited {} ms for the store's lock, held by a daemon that had died or was \
             finishing after its unmount",
            path.display(),
            started.elapsed().as_millis()
        );
    }
    if access == Access::Exclusive {
        lock.set_len(0).map_err(io_err(&lock_path))?;
        let pid_line = format!("{}\n", std::process::id());
        lock.write_all_at(pid_line.as_bytes(), 0)
            .map_err(io_err(&lock_path))?;
        crate::persist::device::count_store_written(pid_line.len() as u64);
    }
    Ok(Some(lock))
}

/// Ok(false): someone else holds it.
fn try_flock(lock: &File, access: Access) -> std::io::Result<bool> {
    let operation = match access {
        Access::Exclusive => libc::LOCK_EX,
        Access::ReadOnly => libc::LOCK_SH,
    };
    // SAFETY: flock on a valid open descriptor has no memory-safety preconditions.
    let rc = unsafe { libc::flock(lock.as_raw_fd(), operation | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// The pid the last daemon wrote in the lock file, if any, and what it says of its mount.
fn holder(lock: &File) -> (Option<u32>, Mark) {
    let mut buf = [0u8; 64];
    // At offset 0, leaving the descriptor's position alone.
    let Ok(n) = lock.read_at(&mut buf, 0) else {
        return (None, Mark::None);
    };
    let Ok(text) = std::str::from_utf8(&buf[..n]) else {
        return (None, Mark::None);
    };
    let mut lines = text.lines();
    let pid = lines.next().and_then(|line| line.trim().parse().ok());
    let mark = match lines.next().map(str::trim) {
        Some(MOUNTED_LINE) => Mark::Mounted,
        Some(UNMOUNTED_LINE) => Mark::Unmounted,
        _ => Mark::None,
    };
    (pid, mark)
}

/// Whether a mount of this mount namespace has the store at `path` as its source (rampart
/// mounts show the store's resolved path there). None if the table cannot be read.
fn in_mount_table(path: &Path) -> Option<bool> {
    let store = std::fs::canonicalize(path).ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    Some(table.lines().any(|line| {
        // After the separator: type, source, super options.
        let source = line
            .split(" - ")
            .nth(1)
            .and_then(|rest| rest.split(' ').nth(1));
        source.is_some_and(|s| Path::new(&unescape_mountinfo(s)) == store)
    }))
}

/// mountinfo's octal escapes (`\040` for a space, ...) undone.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// True while `pid` is a process that has not died: it exists and is no zombie (a zombie's
/// threads may still be exiting, but it runs no more code of its own).
fn process_running(pid: u32) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks that the process exists; no memory is touched.
    let exists = unsafe { libc::kill(raw, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    // The state follows the command name's closing parenthesis in /proc/PID/stat.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .map(str::trim_start)
            .is_some_and(|state| state.starts_with('Z') || state.starts_with('X')),
        // Gone between the two looks.
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that has died but whose pid stays a zombie until reaped: the state a killed
    /// daemon is in while its last threads exit.
    fn zombie() -> std::process::Child {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_running(pid) {
            assert!(Instant::now() < deadline, "`true` did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
        child
    }

    fn store() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        super::super::mkfs(&path).unwrap();
        (dir, path)
    }

    /// Holds the lock through a descriptor of its own, as a dead daemon's unreleased file
    /// does, with `pid` in the file.
    fn held_by(path: &Path, pid: u32) -> File {
        let holder = lock(path, Access::Exclusive).unwrap().unwrap();
        std::fs::write(path.join(LOCK_FILE), format!("{pid}\n")).unwrap();
        holder
    }

    #[test]
    fn a_lock_held_for_a_dead_daemon_is_waited_for_and_taken() {
        let (_dir, path) = store();
        let mut child = zombie();
        let holder = held_by(&path, child.id());
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(holder); // the kernel releases the dead daemon's files
        });
        let started = Instant::now();
        let taken = lock(&path, Access::Exclusive).unwrap();
        assert!(taken.is_some());
        assert!(started.elapsed() >= Duration::from_millis(250));
        released.join().unwrap();
        child.wait().unwrap();
        let text = std::fs::read_to_string(path.join(LOCK_FILE)).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
    }

    #[test]
    fn a_dead_daemon_that_never_lets_go_is_named_as_still_exiting() {
        let (_dir, path) = store();
        let mut child = zombie();
        let _holder = held_by(&path, child.id());
        let waits = Waits {
            exiting: Duration::from_millis(200),
            unmounted: Duration::ZERO,
        };
        let err = lock_waiting(&path, Access::ReadOnly, waits).unwrap_err();
        assert!(
            matches!(err, StoreError::HolderExiting { pid, .. } if pid == child.id()),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("has died but is still exiting") && text.contains("try again"),
            "{text}"
        );
        child.wait().unwrap();
    }

    #[test]
    fn a_live_holder_is_refused_at_once() {
        let (_dir, path) = store();
        let _holder = lock(&path, Access::Exclusive).unwrap();
        let started = Instant::now();
        let err = lock(&path, Access::Exclusive).unwrap_err();
        assert!(matches!(err, StoreError::AlreadyMounted { .. }), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_holder_marked_unmounted_is_waited_for_and_taken() {
        let (_dir, path) = store();
        let holder = lock(&path, Access::Exclusive).unwrap().unwrap();
        mark(&holder, Mark::Unmounted).unwrap();
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(holder); // its final checkpoint written
        });
        let started = Instant::now();
        let taken = lock(&path, Access::Exclusive).unwrap();
        assert!(taken.is_some());
        assert!(started.elapsed() >= Duration::from_millis(250));
        released.join().unwrap();
        // Our pid alone: a later mount of ours is not taken for one that is finishing.
        let text = std::fs::read_to_string(path.join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
    }

    #[test]
    fn a_holder_that_stays_unmounted_too_long_is_named() {
        let (_dir, path) = store();
        let holder = lock(&path, Access::Exclusive).unwrap().unwrap();
        mark(&holder, Mark::Unmounted).unwrap();
        let waits = Waits {
            exiting: Duration::ZERO,
            unmounted: Duration::from_millis(200),
        };
        let err = lock_waiting(&path, Access::Exclusive, waits).unwrap_err();
        assert!(
            matches!(err, StoreError::HolderUnmounting { pid, .. } if pid == std::process::id()),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("final checkpoint"), "{text}");
        drop(holder);
    }

    #[test]
    fn a_holder_marked_mounted_but_in_no_mount_is_waited_for() {
        // A store in a temporary folder is in no mount: its holder's session has ended.
        let (_dir, path) = store();
        let holder = lock(&path, Access::Exclusive).unwrap().unwrap();
        mark(&holder, Mark::Mounted).unwrap();
        assert_eq!(holder_of(&path), (Some(std::process::id()), Mark::Mounted));
        assert_eq!(in_mount_table(&path), Some(false));
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(holder);
        });
        assert!(lock(&path, Access::Exclusive).unwrap().is_some());
        released.join().unwrap();
        // A holder with no mark (starting, or a library) is refused at once.
        let holder = lock(&path, Access::Exclusive).unwrap().unwrap();
        mark(&holder, Mark::None).unwrap();
        let started = Instant::now();
        assert!(matches!(
            lock(&path, Access::Exclusive),
            Err(StoreError::AlreadyMounted { .. })
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(unescape_mountinfo("/plain\\x"), "/plain\\x");
    }

    fn holder_of(path: &Path) -> (Option<u32>, Mark) {
        holder(&File::open(path.join(LOCK_FILE)).unwrap())
    }
}

//! Teardown that happens even on failure or Ctrl-C: an undo stack.
//!
//! Every step that changes the machine (a folder made, a loop device attached, a file system
//! mounted) pushes the action that undoes it, with a description. Undoing runs the actions last
//! first, goes on past a failed one (a busy unmount must not leave the loop device and the
//! image behind), and returns what went wrong. A stack dropped without being undone undoes
//! itself, so an early return or a panic between setup and teardown still cleans up.
//!
//! Undo actions run commands with [`run_to_end`], which ignores the Ctrl-C flag: after Ctrl-C,
//! [`crate::cmd::run`] refuses to start anything, and teardown must still run.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cmd::Output;
use crate::error::{BenchError, Result};

type Action = Box<dyn FnOnce() -> Result<()> + Send>;

/// A LIFO stack of described undo actions.
#[derive(Default)]
pub struct UndoStack {
    actions: Vec<(String, Action)>,
}

impl UndoStack {
    pub fn new() -> UndoStack {
        UndoStack::default()
    }

    /// Remembers how to undo a step that just succeeded; `what` names the undo ("unmount
    /// /dev/shm/x/mnt").
    pub fn push(
        &mut self,
        what: impl Into<String>,
        action: impl FnOnce() -> Result<()> + Send + 'static,
    ) {
        self.actions.push((what.into(), Box::new(action)));
    }

    pub fn len(&self) -> usize {
        self.actions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// What is pending, in the order it would be undone.
    pub fn pending(&self) -> Vec<&str> {
        self.actions.iter().rev().map(|(w, _)| w.as_str()).collect()
    }

    /// Runs every action, last pushed first, and empties the stack; returns one line per
    /// action that failed (or panicked), in the order they ran.
    pub fn undo_all(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        while let Some((what, action)) = self.actions.pop() {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(action)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => problems.push(format!("{what}: {e}")),
                Err(_) => problems.push(format!("{what}: panicked")),
            }
        }
        problems
    }

    /// [`undo_all`](Self::undo_all) as one result: `Err` names every problem.
    pub fn undo(&mut self) -> Result<()> {
        let problems = self.undo_all();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(BenchError::Other(format!(
                "teardown: {}",
                problems.join("; ")
            )))
        }
    }
}

impl Drop for UndoStack {
    fn drop(&mut self) {
        if self.actions.is_empty() {
            return;
        }
        // Nobody is left to return the problems to: say them on stderr rather than lose them.
        for problem in self.undo_all() {
            eprintln!("rampart bench: cleanup: {problem}");
        }
    }
}

/// Like [`crate::cmd::run`] (own process group, pipes drained, killed on timeout, fails on a
/// non-zero exit) but deaf to Ctrl-C: for undo actions, which must run after an interrupt.
pub fn run_to_end(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    crate::cmd::run(cmd, crate::cmd::Cancel::never(), timeout)
}

/// Removes a file or a folder tree; gone already is fine. Refuses a folder with anything
/// mounted inside it: removing through a live mount would destroy that file system's files.
pub fn remove_path(path: &Path) -> Result<()> {
    let result = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => {
            let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            if let Some(busy) = current_mount_points()
                .into_iter()
                .find(|m| m.starts_with(&real))
            {
                return Err(BenchError::Other(format!(
                    "left {} in place: {} is still mounted inside it",
                    path.display(),
                    busy.display()
                )));
            }
            remove_tree(path)
        }
        Ok(_) => std::fs::remove_file(path),
    };
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(BenchError::io(format!("removing {}", path.display()), e))
        }
        _ => Ok(()),
    }
}

/// Threads that unlink a tree's files at once.
const REMOVE_THREADS: usize = 8;
/// Files gathered before they are unlinked (bounds the memory a huge tree takes).
const REMOVE_BATCH_FILES: usize = 4096;

/// `remove_dir_all` with the files unlinked by several threads: on a host file system mounted
/// with `discard` each unlink waits for the device (about 1 ms here), and a peer's folder can
/// hold tens of thousands of files (JuiceFS keeps deleted files' chunks in its trash), which
/// took the tiny run 100 s one by one. Symbolic links are removed, never followed.
fn remove_tree(root: &Path) -> std::io::Result<()> {
    let mut dirs = vec![root.to_path_buf()];
    let mut files = Vec::with_capacity(REMOVE_BATCH_FILES);
    while let Some(dir) = dirs.pop() {
        // What vanished meanwhile (a server still cleaning its folder) is gone, as for
        // `remove_dir_all`; only the root's own absence is passed up.
        let entries = match std::fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir != root => continue,
            entries => entries?,
        };
        for entry in entries {
            let entry = match entry {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                entry => entry?,
            };
            let is_dir = match entry.file_type() {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                file_type => file_type?.is_dir(),
            };
            if is_dir {
                dirs.push(entry.path());
            } else {
                files.push(entry.path());
                if files.len() == REMOVE_BATCH_FILES {
                    unlink_all(&mut files)?;
                }
            }
        }
    }
    unlink_all(&mut files)?;
    // Only folders are left.
    std::fs::remove_dir_all(root)
}

/// Unlinks `files` on up to [`REMOVE_THREADS`] threads and empties the list.
fn unlink_all(files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let per_thread = files.len().div_ceil(REMOVE_THREADS).max(1);
    let result = std::thread::scope(|scope| {
        let workers: Vec<_> = files
            .chunks(per_thread)
            .map(|chunk| {
                scope.spawn(move || {
                    for file in chunk {
                        match std::fs::remove_file(file) {
                            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                            _ => {}
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a remover panicked")))
            })
            .collect::<std::io::Result<Vec<()>>>()
    });
    files.clear();
    result.map(|_| ())
}

// ---- mounts, loop devices and processes: the undo actions peers use ----

/// `name` as found by [`crate::cmd::which`], or the bare name (then running it says it is
/// missing).
pub fn tool(name: &str) -> PathBuf {
    crate::cmd::which(name).unwrap_or_else(|| PathBuf::from(name))
}

/// Mount points listed in a `/proc/self/mountinfo` text, in mount order (octal escapes such
/// as `\040` for a space decoded).
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(OsString::from_vec(unescape_octal(field))))
        .collect()
}

fn unescape_octal(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes.get(i + 1..i + 4);
        if bytes[i] == b'\\' && digits.is_some_and(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
        {
            let d = digits.expect("checked");
            out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn current_mount_points() -> Vec<PathBuf> {
    mount_points(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// Whether something is mounted at exactly `path`.
pub fn is_mounted(path: &Path) -> bool {
    current_mount_points().iter().any(|m| m == path)
}

/// How many times a busy unmount is tried before giving up (or detaching lazily).
const UNMOUNT_ATTEMPTS: u32 = 6;

/// Unmounts `mnt` if it is mounted, retrying a busy unmount for about 2 s. When it stays busy
/// and `lazy_last_resort` is set, detaches it with `umount -l` and still returns an error
/// saying so (the report must show it); otherwise returns the last error.
pub fn unmount(mnt: &Path, lazy_last_resort: bool, timeout: Duration) -> Result<()> {
    let mut last_error = None;
    for attempt in 0..UNMOUNT_ATTEMPTS {
        if !is_mounted(mnt) {
            return Ok(());
        }
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(100 << (attempt - 1).min(3)));
        }
        // On success the loop checks again: mounts may be stacked on the same point.
        if let Err(e) = run_to_end(Command::new(tool("umount")).arg(mnt), timeout) {
            last_error = Some(e);
        }
    }
    if !is_mounted(mnt) {
        return Ok(());
    }
    let last = last_error.map(|e| e.to_string()).unwrap_or_default();
    if !lazy_last_resort {
        return Err(BenchError::Other(format!(
            "cannot unmount {}: {last}",
            mnt.display()
        )));
    }
    run_to_end(Command::new(tool("umount")).arg("-l").arg(mnt), timeout)?;
    Err(BenchError::Other(format!(
        "{} stayed busy ({last}); detached it lazily with `umount -l`: it goes away when its \
         last user lets go",
        mnt.display()
    )))
}

/// Attached loop devices and their backing files, from /sys/block/loop*/loop/backing_file
/// (a deleted backing file keeps its name, with " (deleted)" cut off here).
pub fn loop_devices() -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                return None;
            }
            let backing = std::fs::read(entry.path().join("loop/backing_file")).ok()?;
            Some((format!("/dev/{name}"), parse_backing_file(&backing)))
        })
        .collect();
    out.sort();
    out
}

fn parse_backing_file(raw: &[u8]) -> PathBuf {
    let mut bytes = raw.strip_suffix(b"\n").unwrap_or(raw);
    bytes = bytes.strip_suffix(b" (deleted)").unwrap_or(bytes);
    PathBuf::from(OsString::from_vec(bytes.to_vec()))
}

/// Detaches loop device `dev` if it is still attached to `image` (a device since reused by
/// someone else is left alone). A device still in use is detached by the kernel when released.
pub fn detach_loop(dev: &str, image: &Path) -> Result<()> {
    let ours = loop_devices()
        .into_iter()
        .any(|(d, backing)| d == dev && backing == image);
    if !ours {
        return Ok(());
    }
    run_to_end(
        Command::new(tool("losetup")).arg("-d").arg(dev),
        Duration::from_secs(30),
    )?;
    Ok(())
}

/// Detaches every loop device attached to `image`; none is fine.
pub fn detach_loops_of(image: &Path) -> Result<()> {
    let mut problems = Vec::new();
    for (dev, backing) in loop_devices() {
        if backing == image {
            if let Err(e) = detach_loop(&dev, image) {
                problems.push(e.to_string());
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Other(problems.join("; ")))
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks that the process exists; no memory is touched.
    let exists = unsafe { libc::kill(raw, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
}

/// Waits up to `timeout` for `pid` to end; true once it has.
pub fn wait_for_exit(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while pid_alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// The prefix of the folders a run makes (`rampart-bench-<pid>`, in /dev/shm and on disk).
pub const RUN_DIR_PREFIX: &str = "rampart-bench-";

/// The file in each peer's /dev/shm folder naming the run's folder on the real disk, so a
/// sweep after `kill -9` can find that one too.
pub const DISK_DIR_MARKER: &str = "disk-dir";

/// The pid in a run folder's name (`rampart-bench-1234` → 1234); None past the kernel's
/// largest pid (such a name was not made by a run).
pub fn run_dir_pid(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(RUN_DIR_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let pid: u32 = digits.parse().ok()?;
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(4_194_304);
    (pid > 0 && pid <= pid_max).then_some(pid)
}

/// Whether `dir` is a folder a run made: a real directory (not a symlink), owned by root,
/// mode 0700. Nobody but root can make such a folder, so a sweep never acts on a folder or a
/// marker planted by another user in a world-writable place like /dev/shm.
pub fn is_run_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == 0 && m.mode() & 0o7777 == 0o700)
}

/// The run folder a path lies in (the last `rampart-bench-<pid>` component) and its pid.
pub fn run_dir_of(path: &Path) -> Option<(PathBuf, u32)> {
    let mut found = None;
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        if let Some(pid) = component.as_os_str().to_str().and_then(run_dir_pid) {
            found = Some((prefix.clone(), pid));
        }
    }
    found
}

/// Cleans up after runs killed with `-9`: for every `rampart-bench-<pid>` folder whose pid is
/// dead, unmounts what is mounted inside it (latest mount first, lazily if it stays busy),
/// detaches loop devices over files inside it, and removes the folder (in /dev/shm, and on the
/// real disk when a marker names it). Returns one line per thing done or failed.
pub fn sweep_stale() -> Vec<String> {
    let own = std::process::id();
    let dead = |pid: u32| pid != own && !pid_alive(pid);
    let mut log = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    let note_dir = |dirs: &mut Vec<PathBuf>, dir: PathBuf| {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    };
    // The run folder holding `path`, when its run is dead.
    let stale_run_dir = |path: &Path| {
        run_dir_of(path)
            .filter(|(dir, pid)| dead(*pid) && is_run_dir(dir))
            .map(|(dir, _)| dir)
    };

    for mnt in current_mount_points().into_iter().rev() {
        let Some(dir) = stale_run_dir(&mnt) else {
            continue;
        };
        note_dir(&mut dirs, dir);
        match unmount(&mnt, true, Duration::from_secs(30)) {
            Ok(()) => log.push(format!("unmounted {}", mnt.display())),
            Err(e) => log.push(format!("unmounting {}: {e}", mnt.display())),
        }
    }
    for (dev, backing) in loop_devices() {
        let Some(dir) = stale_run_dir(&backing) else {
            continue;
        };
        note_dir(&mut dirs, dir);
        match detach_loop(&dev, &backing) {
            Ok(()) => log.push(format!("detached {dev} ({})", backing.display())),
            Err(e) => log.push(format!("detaching {dev}: {e}")),
        }
    }
    if let Ok(entries) = std::fs::read_dir("/dev/shm") {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(run_dir_pid) else {
                continue;
            };
            if !dead(pid) || !is_run_dir(&entry.path()) {
                continue;
            }
            for disk_dir in marked_disk_dirs(&entry.path(), &name) {
                note_dir(&mut dirs, disk_dir);
            }
            note_dir(&mut dirs, entry.path());
        }
    }
    remove_dead_run_dirs(dirs, &mut log);
    log
}

/// The run's folders on the real disk that the peers' markers in `shm_run_dir` (named `name`)
/// name.
fn marked_disk_dirs(shm_run_dir: &Path, name: &std::ffi::OsStr) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for peer_dir in std::fs::read_dir(shm_run_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(peer_dir.path().join(DISK_DIR_MARKER)) else {
            continue;
        };
        let disk_dir = PathBuf::from(text.trim_end_matches('\n'));
        if disk_dir.is_absolute() && disk_dir.file_name() == Some(name) && is_run_dir(&disk_dir) {
            found.push(disk_dir);
        }
    }
    found
}

/// Stops the servers a killed run started in `dir`: a `redis-server` (JuiceFS' metadata)
/// whose working folder is inside it (Redis works in its `--dir`). Only those: a shell left in
/// such a folder is not the bench's to end. SIGTERM, then SIGKILL after 5 s.
fn stop_processes_in(dir: &Path, log: &mut Vec<String>) {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let inside =
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir));
        if pid == own || !inside || !pid_alive(pid) {
            continue;
        }
        let target = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGTERM);
        if !wait_for_exit(pid, Duration::from_secs(5)) {
            let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL);
        }
        log.push(format!(
            "stopped pid {pid}, which worked in {}",
            dir.display()
        ));
    }
}

/// Removes each of a dead run's folders that nothing is mounted in any more.
fn remove_dead_run_dirs(dirs: Vec<PathBuf>, log: &mut Vec<String>) {
    let mounts = current_mount_points();
    for dir in dirs {
        stop_processes_in(&dir, log);
        if let Some(busy) = mounts.iter().find(|m| m.starts_with(&dir)) {
            log.push(format!(
                "left {} in place: {} is still mounted",
                dir.display(),
                busy.display()
            ));
            continue;
        }
        if !dir.exists() {
            continue;
        }
        match remove_path(&dir) {
            Ok(()) => log.push(format!("removed {}", dir.display())),
            Err(e) => log.push(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::{Arc, Mutex};

    #[test]
    fn remove_path_removes_a_tree_of_more_files_than_a_batch_and_follows_no_link() {
        let base = std::env::temp_dir().join(format!("rb-rmtree-{}", std::process::id()));
        let outside = base.join("outside");
        let tree = base.join("tree");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("kept"), b"not the tree's").unwrap();
        for d in 0..3 {
            let dir = tree.join(format!("d{d}")).join("deeper");
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..(REMOVE_BATCH_FILES / 2 + 7) {
                std::fs::write(dir.join(f.to_string()), b"x").unwrap();
            }
        }
        std::os::unix::fs::symlink(&outside, tree.join("link")).unwrap();
        remove_path(&tree).unwrap();
        assert!(!tree.exists());
        assert_eq!(
            std::fs::read(outside.join("kept")).unwrap(),
            b"not the tree's"
        );
        remove_path(&tree).unwrap(); // gone already is fine
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn undoes_last_first_and_goes_on_past_failures() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut stack = UndoStack::new();
        for i in 0..4 {
            let log = log.clone();
            stack.push(format!("step {i}"), move || {
                log.lock().unwrap().push(i);
                if i == 2 {
                    Err(BenchError::Other("busy".into()))
                } else {
                    Ok(())
                }
            });
        }
        assert_eq!(stack.pending(), ["step 3", "step 2", "step 1", "step 0"]);
        let problems = stack.undo_all();
        assert_eq!(*log.lock().unwrap(), [3, 2, 1, 0]);
        assert_eq!(problems, ["step 2: busy"]);
        assert!(stack.is_empty());
        // A second undo has nothing left to do.
        assert!(stack.undo().is_ok());
    }

    #[test]
    fn a_dropped_stack_undoes_itself_and_survives_a_panicking_action() {
        let log = Arc::new(Mutex::new(Vec::new()));
        {
            let mut stack = UndoStack::new();
            let first = log.clone();
            stack.push("first", move || {
                first.lock().unwrap().push("first");
                Ok(())
            });
            stack.push("panics", || panic!("boom"));
        }
        assert_eq!(*log.lock().unwrap(), ["first"]);
    }

    #[test]
    fn undo_reports_every_problem() {
        let mut stack = UndoStack::new();
        stack.push("a", || Err(BenchError::Other("one".into())));
        stack.push("b", || Err(BenchError::Other("two".into())));
        let text = stack.undo().unwrap_err().to_string();
        assert!(text.contains("b: two") && text.contains("a: one"), "{text}");
    }

    #[test]
    fn run_to_end_reports_exit_status_and_timeout() {
        let out = run_to_end(
            Command::new("sh").args(["-c", "echo hi"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout.trim(), "hi");
        let err = run_to_end(
            Command::new("sh").args(["-c", "echo bad >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .err()
        .expect("exit 3 is a failure");
        assert!(err.to_string().contains("bad"), "{err}");
        let err = run_to_end(Command::new("sleep").arg("10"), Duration::from_millis(100))
            .err()
            .expect("a timeout is a failure");
        assert!(err.to_string().contains("timed out"), "{err}");
    }

    #[test]
    fn remove_path_accepts_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("a/b");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("f"), b"x").unwrap();
        remove_path(&dir.path().join("a")).unwrap();
        assert!(!dir.path().join("a").exists());
        remove_path(&dir.path().join("a")).unwrap();
    }

    #[test]
    fn mount_points_decode_escapes() {
        let text = "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw\n\
                    44 30 0:41 / /dev/shm/rampart-bench-77/rampart-3/mnt rw - fuse /x rw\n";
        assert_eq!(
            mount_points(text),
            [
                PathBuf::from("/mnt/with space"),
                PathBuf::from("/dev/shm/rampart-bench-77/rampart-3/mnt")
            ]
        );
        assert_eq!(unescape_octal("a\\134b\\0"), b"a\\b\\0");
    }

    #[test]
    fn run_folders_and_their_pids() {
        assert_eq!(run_dir_pid("rampart-bench-1234"), Some(1234));
        assert_eq!(run_dir_pid("rampart-bench-"), None);
        assert_eq!(run_dir_pid("rampart-bench-12x"), None);
        assert_eq!(run_dir_pid("rampart-bench-"), None);
        assert_eq!(run_dir_pid("other-1234"), None);
        // A report folder named by a Unix time is not a run folder (no pid is that large).
        assert_eq!(run_dir_pid("rampart-bench-1712345678"), None);
        assert_eq!(run_dir_pid("rampart-bench-0"), None);
        assert_eq!(
            run_dir_of(Path::new("/var/tmp/rampart-bench-55/ext4-disk-2/image")),
            Some((PathBuf::from("/var/tmp/rampart-bench-55"), 55))
        );
        assert_eq!(run_dir_of(Path::new("/dev/shm/mine/image")), None);
    }

    #[test]
    fn only_private_root_folders_are_run_folders() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("rampart-bench-77");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!is_run_dir(&dir), "a folder others may enter is not ours");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Tests run as root (the peers need it); as anyone else the folder is not root's.
        // SAFETY: geteuid(2) has no preconditions.
        assert_eq!(is_run_dir(&dir), unsafe { libc::geteuid() } == 0);
        let link = base.path().join("rampart-bench-78");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(!is_run_dir(&link), "a symlink is never a run folder");
    }

    #[test]
    fn remove_path_refuses_a_folder_with_a_mount_inside() {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting needs root");
            return;
        }
        let base = tempfile::tempdir_in("/dev/shm").unwrap();
        let mnt = base.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        run_to_end(
            Command::new(tool("mount"))
                .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
                .arg(&mnt),
            Duration::from_secs(10),
        )
        .unwrap();
        std::fs::write(mnt.join("precious"), b"keep").unwrap();
        let refused = remove_path(base.path());
        let survived = std::fs::read(mnt.join("precious")).ok();
        unmount(&mnt, true, Duration::from_secs(10)).unwrap();
        assert!(
            refused.is_err(),
            "removed a folder with a live mount inside"
        );
        assert_eq!(survived.as_deref(), Some(&b"keep"[..]));
        remove_path(base.path()).unwrap();
        assert!(!base.path().exists());
    }

    #[test]
    fn backing_file_names_lose_the_deleted_suffix() {
        assert_eq!(
            parse_backing_file(b"/dev/shm/rampart-bench-9/xfs-ram-1/image (deleted)\n"),
            PathBuf::from("/dev/shm/rampart-bench-9/xfs-ram-1/image")
        );
        assert_eq!(parse_backing_file(b"/a b\n"), PathBuf::from("/a b"));
    }

    #[test]
    fn liveness_of_processes() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(wait_for_exit(pid, Duration::from_secs(5)));
    }
}

//! Running child processes so that Ctrl-C reaches us, not them: each child gets its own process
//! group, we poll it, and on cancel or timeout we kill the whole group and say so.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};

/// Set by SIGINT/SIGTERM/SIGHUP; everything long-running polls it.
pub struct Cancel(AtomicBool);

static CANCEL: Cancel = Cancel(AtomicBool::new(false));
static NEVER: Cancel = Cancel(AtomicBool::new(false));

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    CANCEL.0.store(true, Ordering::SeqCst);
}

impl Cancel {
    /// The process-wide flag, with handlers for SIGINT, SIGTERM and SIGHUP installed on first
    /// use.
    pub fn global() -> &'static Cancel {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                // SAFETY: `on_signal` only stores to an atomic, which is async-signal-safe; the
                // sigaction struct is zero-initialised and then filled with valid values.
                unsafe {
                    let mut action: libc::sigaction = std::mem::zeroed();
                    action.sa_sigaction = on_signal as *const () as usize;
                    // Restart interrupted system calls: a workload's read or write must not
                    // fail with EINTR; it sees the flag at its next check instead.
                    action.sa_flags = libc::SA_RESTART;
                    libc::sigemptyset(&mut action.sa_mask);
                    libc::sigaction(signal, &action, std::ptr::null_mut());
                }
            }
        });
        &CANCEL
    }

    /// A flag nobody sets: for teardown commands, which must run to the end after Ctrl-C.
    pub fn never() -> &'static Cancel {
        &NEVER
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `Err(Interrupted)` once the user asked to stop.
    pub fn check(&self) -> Result<()> {
        if self.is_set() {
            Err(BenchError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// For tests.
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst)
    }
}

/// How much of each stream a finished child's [`Output`] keeps: enough for any report or
/// listing we parse, and a child that prints without end cannot fill our memory.
pub const KEEP_BYTES: usize = 4 << 20;

/// What a finished child printed.
pub struct Output {
    /// The first [`KEEP_BYTES`] of stdout; past that, a last line says how much was cut.
    pub stdout: String,
    /// The first [`KEEP_BYTES`] of stderr, cut the same way.
    pub stderr: String,
    /// Lines printed on stderr in all, kept or cut (a failing tool may print one per file).
    pub stderr_lines: u64,
    pub elapsed: Duration,
}

/// How [`run_watching`] reads the child's stdout.
#[derive(Clone, Copy, Debug, Default)]
pub struct WatchOptions {
    /// Read stdout on a thread at real-time priority (SCHED_FIFO) when allowed, so the
    /// instants `watch` gets follow the child's writes even on busy cores.
    pub realtime_reader: bool,
}

/// The command line as a user would type it (for error messages and the report).
pub fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
            format!("'{}'", a.replace('\'', "'\\''"))
        } else {
            a.into_owned()
        }
    }));
    parts.join(" ")
}

/// `program` on PATH, or in the sbin and bin folders a non-login root shell may lack: the
/// first executable regular file of that name.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(
            [
                "/usr/local/sbin",
                "/usr/local/bin",
                "/usr/sbin",
                "/usr/bin",
                "/sbin",
                "/bin",
            ]
            .map(PathBuf::from),
        )
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

/// Runs `cmd` to completion in its own process group; fails on a non-zero exit, on `timeout`,
/// or when `cancel` is set (the group is killed first in both of the latter cases).
pub fn run(cmd: &mut Command, cancel: &Cancel, timeout: Duration) -> Result<Output> {
    run_watching(
        cmd,
        cancel,
        timeout,
        |_: &[u8], _: Instant, _: libc::pid_t| {},
        WatchOptions::default(),
    )
}

/// [`run`], but `watch` sees stdout as it arrives: each chunk read from the pipe, the
/// instant the read returned and the child's pid (postmark's phase markers are timed this
/// way, and the child can be paused while something is read at a marker; [`run`] alone only
/// hands the output back at the end). On success `watch` has seen all of stdout.
pub fn run_watching(
    cmd: &mut Command,
    cancel: &Cancel,
    timeout: Duration,
    mut watch: impl FnMut(&[u8], Instant, libc::pid_t) + Send + 'static,
    options: WatchOptions,
) -> Result<Output> {
    let line = describe(cmd);
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BenchError::Missing(format!(
                "{} (not found on PATH)",
                cmd.get_program().to_string_lossy()
            )),
            _ => BenchError::io(format!("starting `{line}`"), e),
        })?;
    // Drain the pipes on threads so a chatty child cannot block on a full pipe. They are not
    // joined after a kill: a process that left the group may still hold a pipe open.
    let out_pipe = child.stdout.take().expect("piped");
    let err_pipe = child.stderr.take().expect("piped");
    let pid = child.id() as libc::pid_t;
    let out_reader = std::thread::spawn(move || {
        if options.realtime_reader {
            realtime_priority();
        }
        drain(out_pipe, &mut |chunk: &[u8], at: Instant| {
            watch(chunk, at, pid)
        })
    });
    let err_reader = std::thread::spawn(move || drain(err_pipe, &mut |_, _| {}));
    // A waiter thread notes the exit instant, so `elapsed` is exact rather than rounded up to
    // the polling interval (an untar can take 30 ms).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = child.wait();
        let _ = done_tx.send((status, Instant::now()));
    });
    let (status, finished) = loop {
        match done_rx.recv_timeout(Duration::from_millis(20)) {
            Ok(done) => break done,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(BenchError::Other(format!("lost track of `{line}`")));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(err) = stop_reason(cancel, started, timeout, &line) {
            // SAFETY: kill(2) with a negative pid signals the child's process group, which
            // `process_group(0)` made; it has no memory-safety preconditions.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            let _ = waiter.join();
            return Err(err);
        }
    };
    let _ = waiter.join();
    let status = status.map_err(|e| BenchError::io(format!("waiting for `{line}`"), e))?;
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let elapsed = finished - started;
    if !status.success() {
        let text = if stderr.text.trim().is_empty() {
            &stdout.text
        } else {
            &stderr.text
        };
        let tail = last_lines(text, 5);
        return Err(BenchError::Command {
            command: line,
            detail: format!("{status}: {tail}"),
        });
    }
    Ok(Output {
        stdout: stdout.text,
        stderr: stderr.text,
        stderr_lines: stderr.lines,
        elapsed,
    })
}

/// Why a running child must be stopped now: Ctrl-C, or it ran past `timeout`.
fn stop_reason(
    cancel: &Cancel,
    started: Instant,
    timeout: Duration,
    line: &str,
) -> Option<BenchError> {
    if cancel.is_set() {
        Some(BenchError::Interrupted)
    } else if started.elapsed() > timeout {
        Some(BenchError::Command {
            command: line.to_string(),
            detail: format!("timed out after {:.0} s", timeout.as_secs_f64()),
        })
    } else {
        None
    }
}

/// The last `count` lines of `text`, joined with " | ": a child's last words, for an error.
pub(crate) fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(count)..].join(" | ")
}

/// One stream as [`drain`] kept it.
#[derive(Default)]
struct Drained {
    text: String,
    lines: u64,
}

/// Reads `pipe` to its end, handing each chunk to `watch` with the instant its read returned;
/// keeps the first [`KEEP_BYTES`] and says how much more was cut.
fn drain(mut pipe: impl Read, watch: &mut impl FnMut(&[u8], Instant)) -> Drained {
    let mut kept = Vec::new();
    let (mut lines, mut cut_bytes) = (0u64, 0u64);
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                watch(&chunk[..n], Instant::now());
                lines += chunk[..n].iter().filter(|&&b| b == b'\n').count() as u64;
                let room = KEEP_BYTES.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&chunk[..room]);
                cut_bytes += (n - room) as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if cut_bytes > 0 {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[rampart bench kept the first {} MiB of this output and cut {cut_bytes} more bytes]\n",
            KEEP_BYTES >> 20
        ));
    }
    Drained { text, lines }
}

/// Makes the calling thread SCHED_FIFO (lowest real-time priority) when allowed (root), so it
/// reads each chunk the moment the child flushes it even when the cores are busy: a reader
/// that waits for a time slice can get two of postmark's phase markers in one read and lose
/// the phase between. Without the privilege the thread stays as it is; a lost phase is then an
/// error, never a guess.
fn realtime_priority() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a fully initialised sched_param that outlives the call; pid 0 names
    // the calling thread; sched_setscheduler has no other preconditions and only changes
    // scheduling, which cannot affect memory safety.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_times_exactly_and_reports_failures() {
        let out = run(
            Command::new("sh").args(["-c", "sleep 0.05; echo hi"]),
            Cancel::never(),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout, "hi\n");
        assert!(out.elapsed >= Duration::from_millis(50) && out.elapsed < Duration::from_secs(5));
        let err = run(
            Command::new("sh").args(["-c", "echo oops >&2; exit 3"]),
            Cancel::never(),
            Duration::from_secs(10),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("oops"), "{err}");
        let err = run(
            Command::new("sleep").arg("10"),
            Cancel::never(),
            Duration::from_millis(100),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("timed out"), "{err}");
        assert!(matches!(
            run(
                &mut Command::new("no-such-tool-xyz"),
                Cancel::never(),
                Duration::from_secs(1)
            ),
            Err(BenchError::Missing(_))
        ));
    }

    #[test]
    fn a_watcher_sees_all_of_stdout_in_order() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new((Vec::new(), Vec::new())));
        let record = seen.clone();
        let out = run_watching(
            Command::new("sh").args(["-c", "printf one; sleep 0.05; printf two; echo x >&2"]),
            Cancel::never(),
            Duration::from_secs(10),
            move |chunk: &[u8], at: Instant, _: libc::pid_t| {
                let mut seen = record.lock().unwrap();
                seen.0.extend_from_slice(chunk);
                seen.1.push(at);
            },
            WatchOptions {
                realtime_reader: true,
            },
        )
        .unwrap();
        let (bytes, instants) = &*seen.lock().unwrap();
        assert_eq!(bytes, b"onetwo");
        assert_eq!(out.stdout, "onetwo");
        assert_eq!((out.stderr.as_str(), out.stderr_lines), ("x\n", 1));
        // The two writes were 50 ms apart, so they arrived in two reads.
        assert!(instants.len() >= 2 && instants.is_sorted(), "{instants:?}");
        assert!(instants[instants.len() - 1] - instants[0] >= Duration::from_millis(40));
    }

    #[test]
    fn output_is_cut_past_the_limit_and_says_so() {
        let lines = KEEP_BYTES / 4 + 1_000;
        let out = run(
            Command::new("sh").args(["-c", &format!("yes abc | head -n {lines} >&2")]),
            Cancel::never(),
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(out.stderr_lines, lines as u64);
        assert!(out.stderr.len() < KEEP_BYTES + 200, "{}", out.stderr.len());
        assert!(
            out.stderr.ends_with("and cut 4000 more bytes]\n"),
            "{}",
            &out.stderr[out.stderr.len() - 200..]
        );
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn which_finds_executables_only() {
        assert!(which("sh").is_some_and(|p| p.is_absolute()));
        assert!(which("no-such-tool-here").is_none());
        // A directory of that name is not a program.
        assert!(which("..").is_none());
    }
}

//! Running child processes so that Ctrl-C reaches us, not them: each child gets its own process
//! group, we poll it, and on cancel or timeout we kill the whole group and say so.

use std::io::Read;
use std::os::unix::process::CommandExt;
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

/// What a finished child printed.
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
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

/// Runs `cmd` to completion in its own process group; fails on a non-zero exit, on `timeout`,
/// or when `cancel` is set (the group is killed first in both of the latter cases).
pub fn run(cmd: &mut Command, cancel: &Cancel, timeout: Duration) -> Result<Output> {
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
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut out_pipe = child.stdout.take().expect("piped");
    let mut err_pipe = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let pid = child.id() as libc::pid_t;
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
        let stop = if cancel.is_set() {
            Some(BenchError::Interrupted)
        } else if started.elapsed() > timeout {
            Some(BenchError::Command {
                command: line.clone(),
                detail: format!("timed out after {:.0} s", timeout.as_secs_f64()),
            })
        } else {
            None
        };
        if let Some(err) = stop {
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
        let tail: String = {
            let text = if stderr.trim().is_empty() {
                &stdout
            } else {
                &stderr
            };
            let lines: Vec<&str> = text.trim().lines().collect();
            lines[lines.len().saturating_sub(5)..].join(" | ")
        };
        return Err(BenchError::Command {
            command: line,
            detail: format!("{status}: {tail}"),
        });
    }
    Ok(Output {
        stdout,
        stderr,
        elapsed,
    })
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
}

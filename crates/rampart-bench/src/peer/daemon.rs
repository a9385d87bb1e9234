//! Servers the bench starts itself (the floor, JuiceFS and its Redis): each in its own session
//! with its output in a log file, waited for until it serves, and stopped at teardown.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cleanup;
use crate::cmd::{self, Cancel};
use crate::error::{BenchError, Result};

/// A server started by the bench; `stop` ends it (SIGTERM, then SIGKILL).
pub(super) struct Daemon {
    pub(super) child: Child,
    pub(super) log: PathBuf,
    pub(super) what: String,
}

impl Daemon {
    /// Starts `command` with stdout and stderr in `log`, in its own session and so its own
    /// process group (the bench's Ctrl-C reaches it only through teardown).
    ///
    /// Its own session, as rampart's daemon (which calls setsid): with the scheduler's
    /// autogroups (`kernel.sched_autogroup_enabled`, on by default) each session competes for
    /// the CPU as one entity, and a FUSE server in the session of the program it serves hands
    /// the CPU back and forth inside one entity, while one in its own session must win it
    /// anew at every request. On a busy machine that made the floor 42 % faster than it is
    /// served as rampart is (decision 0112).
    pub(super) fn start(command: &mut Command, log: &Path, what: &str) -> Result<Daemon> {
        let out = File::create(log)
            .map_err(|e| BenchError::io(format!("creating {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| BenchError::io(format!("opening {}", log.display()), e))?;
        let line = cmd::describe(command);
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // setsid(2), which is async-signal-safe and touches no memory of the parent's.
        let child = unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()
                    .map(drop)
                    .map_err(std::io::Error::from)
            })
        }
        .spawn()
        .map_err(|e| BenchError::Command {
            command: line,
            detail: format!("could not start: {e}"),
        })?;
        Ok(Daemon {
            child,
            log: log.to_path_buf(),
            what: what.to_string(),
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The end of its log, for an error message.
    pub(super) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        cmd::last_lines(&text, 5)
    }

    /// Waits until `ready()` holds, failing when the server exits first, on Ctrl-C, or after
    /// `timeout`.
    pub(super) fn wait_until(
        &mut self,
        cancel: &Cancel,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready() {
                return Ok(());
            }
            cancel.check()?;
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(BenchError::Other(format!(
                    "{} exited ({status}) before it was ready; its log ({}) ends: {}",
                    self.what,
                    self.log.display(),
                    self.log_tail()
                )));
            }
            if Instant::now() > deadline {
                return Err(BenchError::Other(format!(
                    "{} was not ready after {} s; its log ({}) ends: {}",
                    self.what,
                    timeout.as_secs(),
                    self.log.display(),
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends it: waits `grace` for it to exit by itself (a FUSE server does once unmounted),
    /// then SIGTERM, then SIGKILL.
    pub(super) fn stop(mut self, grace: Duration) -> Result<()> {
        let pid = self.pid();
        let exited = |child: &mut Child, within: Duration| {
            let deadline = Instant::now() + within;
            loop {
                if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                    return true;
                }
                if Instant::now() > deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        if exited(&mut self.child, grace) {
            return Ok(());
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        if exited(&mut self.child, Duration::from_secs(10)) {
            return Ok(());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err(BenchError::Other(format!(
            "{} (pid {pid}) did not stop on SIGTERM within 10 s; killed it",
            self.what
        )))
    }
}

/// Whether `mnt` is a mount point now.
pub(super) fn mounted(mnt: &Path) -> bool {
    cleanup::is_mounted(mnt)
}

//! The floor peer: `rampart bench-floor`, a FUSE server whose handlers do nothing useful,
//! mounted with rampart's FUSE settings (crate::floor; decision 0070). What a workload costs
//! on it is what FUSE alone costs on this machine.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::daemon::{mounted, Daemon};
use super::describe::bytes_text;
use super::measure::process_memory;
use super::rampart::option_value;
use super::{Peer, PeerEnv, Usage, MOUNT_TIMEOUT, UNMOUNT_TIMEOUT};
use crate::cleanup;
use crate::error::{BenchError, Result};

/// rampart's mount options the floor takes too, so both mount alike.
const SHARED_OPTIONS: [&str; 5] = [
    "--threads",
    "--fuse-io-uring",
    "--writeback-cache",
    "--no-open",
    "--no-flush",
];

impl Peer {
    pub(super) fn build_floor(&mut self, env: &PeerEnv, shm_base: &Path) -> Result<()> {
        let mut args: Vec<OsString> = vec!["bench-floor".into(), self.mnt.clone().into()];
        let mut given = Vec::new();
        for name in SHARED_OPTIONS {
            if let Some(value) = option_value(&env.rampart_args, name) {
                args.extend([OsString::from(name), OsString::from(&value)]);
                given.push(format!("{name} {value}"));
            }
        }
        let mut command = Command::new(&env.rampart_bin);
        command.args(&args);
        let text = crate::cmd::describe(&command);
        let log = shm_base.join("floor.log");
        let daemon = Daemon::start(&mut command, &log, "the floor (rampart bench-floor)")?;
        let pid = daemon.pid();
        self.daemon_pid = Some(pid);
        let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(daemon)));
        let (mnt, owned) = (self.mnt.clone(), slot.clone());
        self.undo.push(
            format!("unmount the floor at {}", mnt.display()),
            move || {
                let unmounted = cleanup::unmount(&mnt, true, UNMOUNT_TIMEOUT);
                let stopped = match owned.lock().map(|mut d| d.take()) {
                    Ok(Some(d)) => d.stop(Duration::from_secs(10)),
                    _ => Ok(()),
                };
                unmounted.and(stopped)
            },
        );
        let mnt = self.mnt.clone();
        {
            let mut guard = slot
                .lock()
                .map_err(|_| BenchError::Other("floor lock".into()))?;
            let d = guard.as_mut().expect("just started");
            d.wait_until(self.cancel, MOUNT_TIMEOUT, || mounted(&mnt))?;
        }
        let ready = std::fs::read_to_string(&log).unwrap_or_default();
        self.set(
            "file system",
            "the FUSE floor: a FUSE server whose handlers do nothing useful (names, sizes and \
             times in a small table in memory; written bytes dropped, reads return zeros), \
             mounted with rampart's FUSE settings: fuser with the vendored io_uring transport, \
             rampart's worker threads, INIT flags (parallel dirops, killpriv v2, writeback \
             cache, 1 MiB writes), 1 h entry and attribute timeouts, negative entries, no-open and \
             FLUSH answered ENOSYS (rampart's `auto` on a store without SAFE, DISPOSABLE or \
             EDITED files), coarse timestamps",
        );
        self.set("mount", text);
        self.set(
            "as started",
            ready.lines().next().unwrap_or("(said nothing)").to_string(),
        );
        self.set(
            "options shared with rampart",
            if given.is_empty() {
                "rampart's defaults (none of --threads, --fuse-io-uring, --writeback-cache, \
                 --no-open, --no-flush given)"
                    .to_string()
            } else {
                format!("{} (given for rampart)", given.join(", "))
            },
        );
        self.set(
            "request counts",
            format!(
                "read from the extended attribute {} of its root (that request not counted)",
                crate::floor::REQUESTS_XATTR
            ),
        );
        let mnt = self.mnt.clone();
        self.describe_mount(&mnt);
        Ok(())
    }

    pub(super) fn floor_usage(&self) -> Result<Usage> {
        let pid = self
            .daemon_pid
            .ok_or_else(|| BenchError::Other("the floor has no process".into()))?;
        let memory = process_memory(pid)?;
        Ok(Usage {
            ram_bytes: Some(memory.rss_bytes),
            store_bytes: None,
            method: format!(
                "RAM: Rss of the floor's process, pid {pid}, from {} ({}); it keeps no contents; \
                 store: none",
                memory.source,
                bytes_text(memory.rss_bytes)
            ),
        })
    }
}

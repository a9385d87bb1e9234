//! The rampart peer: `rampart mkfs` and `rampart mount` with its store on the real disk, its
//! settings as `rampart status` reports them, and stopping and unmounting its daemon.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::describe::{bytes_or_unknown, bytes_text};
use super::measure::{process_memory, tree_allocated_bytes};
use super::mount_command::MountCommand;
use super::{
    Peer, PeerEnv, PeerKind, Usage, MKFS_TIMEOUT, MOUNT_TIMEOUT, QUERY_TIMEOUT, UNMOUNT_TIMEOUT,
};
use crate::cleanup::{self, run_to_end};
use crate::cmd;
use crate::error::{BenchError, Result};

/// The store configuration of the rampart-temporary peer (docs/CATEGORIES.md): a rule that
/// makes every new file and directory TEMPORARY. Not `default = "TEMPORARY"`: a file that
/// gets the store default is journaled even when that default is `lm=never` (issue 14; the
/// bench measured it: 1 KiB TEMPORARY files by default reach the journal), and the peer
/// measures the category, not that bug.
const TEMPORARY_CONFIG: &str = "[[rules]]\nglob = \"*\"\ncategory = \"TEMPORARY\"\n";
/// rampart-safe: every new file and directory SAFE (`lm=before_write`), by a rule as above.
const SAFE_CONFIG: &str = "[[rules]]\nglob = \"*\"\ncategory = \"SAFE\"\n";
/// rampart-eventual: every new file and directory EVENTUAL (`lm=1h`: held by the archiver).
const EVENTUAL_CONFIG: &str = "[[rules]]\nglob = \"*\"\ncategory = \"EVENTUAL\"\n";
/// rampart-edited: the edit session's sources and mails (and their temporary names while
/// saved, so the file renamed over the original keeps EDITED) are EDITED; everything else
/// the store default, SOON. The names are the mbfs-edit workload's (`edit::EDITED_REGEX`).
const EDITED_CONFIG: &str = concat!(
    "[[rules]]\nregex = '",
    r"\.(c|eml)(\.new)?$",
    "'\ncategory = \"EDITED\"\n"
);

/// The `rampart.toml` a rampart peer's store gets before the mount, and how the report
/// words it; None for the SOON default (no file).
fn store_config(kind: PeerKind) -> Option<(&'static str, &'static str)> {
    match kind {
        PeerKind::RampartTemporary => Some((
            TEMPORARY_CONFIG,
            "TEMPORARY for everything the bench creates (a rule `glob = \"*\"`, \
             `category = \"TEMPORARY\"` written to STORE/rampart.toml before the mount: \
             lm=never, nothing reaches the store)",
        )),
        PeerKind::RampartSafe => Some((
            SAFE_CONFIG,
            "SAFE for everything the bench creates (a rule `glob = \"*\"`, `category = \
             \"SAFE\"` in STORE/rampart.toml: lm=before_write, each write(2), create, \
             rename and unlink durable in the store when it returns; no fsync needed)",
        )),
        PeerKind::RampartEventual => Some((
            EVENTUAL_CONFIG,
            "EVENTUAL for everything the bench creates (a rule `glob = \"*\"`, `category = \
             \"EVENTUAL\"` in STORE/rampart.toml: lm=1h; a new file is held out of the \
             store by the archiver until its deadline, so one deleted before then costs \
             the store nothing, decision 0090)",
        )),
        PeerKind::RampartEdited => Some((
            EDITED_CONFIG,
            "EDITED for the edit session's files (a rule `regex = '\\.(c|eml)(\\.new)?$'`, \
             `category = \"EDITED\"` in STORE/rampart.toml: lm=until_close, close(2) \
             returns once the file is in the store); everything else SOON",
        )),
        _ => None,
    }
}

/// Longest the bench waits for a rampart mount's pending changes to become durable before it
/// reads the bytes written to the store (`rampart sync --commit-only` commits them at once).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

impl Peer {
    pub(super) fn build_rampart(&mut self, env: &PeerEnv, disk_base: &Path) -> Result<()> {
        let bin = env.rampart_bin.clone();
        let store = disk_base.join("store");
        let mut mkfs = Command::new(&bin);
        mkfs.arg("mkfs").arg(&store);
        self.run(&mut mkfs, MKFS_TIMEOUT)?;
        self.store = Some(store.clone());
        let config = store_config(self.kind);
        if let Some((text, _)) = config {
            let path = store.join("rampart.toml");
            std::fs::write(&path, text)
                .map_err(|e| BenchError::io(format!("writing {}", path.display()), e))?;
        }
        let mut args: Vec<OsString> = vec![
            "mount".into(),
            store.clone().into(),
            self.mnt.clone().into(),
        ];
        args.extend(env.rampart_args.iter().map(OsString::from));
        let threshold = self.large_file_threshold(&bin, &env.rampart_args);
        if let Threshold::Passed = threshold {
            args.extend(["--large-file-threshold".into(), DEFAULT_THRESHOLD.into()]);
        }
        let mount = MountCommand::new(bin.clone(), args);
        let (owned_bin, mnt, owned_store) = (bin.clone(), self.mnt.clone(), store.clone());
        self.undo
            .push(format!("rampart umount {}", mnt.display()), move || {
                // A mount interrupted by Ctrl-C may have left its daemon starting (it runs in
                // its own session, out of reach of the process-group kill): stop it before
                // its store is removed, then unmount whatever it managed to mount.
                let stopped = stop_daemons_of(&owned_store);
                rampart_unmount(&owned_bin, &mnt, true)?;
                stopped
            });
        self.run(&mut mount.command(), MOUNT_TIMEOUT)?;
        self.mount_again = Some(mount.clone());

        self.set(
            "file system",
            "rampart (FUSE daemon; metadata and small files in RAM, persisted to the store)",
        );
        self.set("rampart version", self.version(&bin, &["--version"]));
        let disk = crate::machine::file_system_of(&store)
            .map(|fs| format!(" (the real disk: {fs})"))
            .unwrap_or_default();
        self.set("store", format!("{}{disk}", store.display()));
        self.set("mkfs", cmd::describe(&mkfs));
        self.set(
            "category of new files (rampart.toml)",
            config.map_or(
                "SOON (no rampart.toml: durable within the commit interval)",
                |(_, words)| words,
            ),
        );
        self.set("mount", mount.text());
        self.describe_rampart_options(&env.rampart_args);
        self.describe_threshold(threshold);
        let mnt = self.mnt.clone();
        self.describe_mount(&mnt);
        Ok(())
    }

    /// The options the mount runs with: as `rampart status` reports them where it does, and
    /// whether each was given or is the default.
    fn describe_rampart_options(&mut self, rampart_args: &[String]) {
        let status = self.rampart_status();
        let named = |name: &str, default: &str| match option_value(rampart_args, name) {
            Some(v) => format!("{v} (given)"),
            None => format!("{default} (default)"),
        };
        let interval = match &status {
            Ok(s) => format!(
                "{} ms (reported by `rampart status`; {})",
                s["persistence"]["commit_interval_ms"],
                named("--commit-interval", "5s")
            ),
            Err(_) => named("--commit-interval", "5s"),
        };
        self.set(
            "persistence: commit interval (longest a change waits to be durable)",
            interval,
        );
        self.set(
            "bytes written to the store",
            "the daemon's own count (`persistence.store_written_bytes` of `rampart status \
             --json`), read after `rampart sync --commit-only` has committed what was \
             pending (held files stay held): journal, checkpoints, superblock, disk-tier \
             host files the daemon wrote; not what the kernel writes through FUSE \
             passthrough, nor ext4's own metadata (/proc/PID/io write_bytes, used before, \
             counted ~30× too much for fdatasync'd small writes)",
        );
        self.set(
            "persistence: fsync",
            "durable at once: fsync, fdatasync and O_SYNC wait for the journal to reach the \
             store on the real disk; concurrent fsyncs share one disk sync (README); a lone \
             writer's fsync commits on its own FUSE thread (decision 0100)",
        );
        self.set(
            "writeback cache",
            writeback_cache_text(status.as_ref().ok(), rampart_args),
        );
        self.set(
            "no-open (kernel skips OPEN/RELEASE)",
            match &status {
                Ok(s) => format!(
                    "{} (reported by `rampart status`; {})",
                    s["kernel_open"].as_str().unwrap_or("not reported"),
                    named("--no-open", "auto")
                ),
                Err(_) => named("--no-open", "auto"),
            },
        );
        self.set(
            "no-flush (kernel skips FLUSH at close)",
            match &status {
                Ok(s) => format!(
                    "{} (reported by `rampart status`; {})",
                    s["kernel_flush"].as_str().unwrap_or("not reported"),
                    named("--no-flush", "auto")
                ),
                Err(_) => named("--no-flush", "auto"),
            },
        );
        self.set(
            "FUSE worker threads",
            named("--threads", "twice the cores, at least 4, at most 16"),
        );
        let transport = match &status {
            Ok(s) => format!(
                "{} (reported by `rampart status`; --fuse-io-uring {})",
                s["fuse_transport"].as_str().unwrap_or("not reported"),
                named("--fuse-io-uring", "on")
            ),
            Err(_) => named("--fuse-io-uring", "on"),
        };
        self.set(
            "FUSE transport (io_uring: a queue per CPU, when the kernel offers it)",
            transport,
        );
        let cap = match &status {
            Ok(s) => format!(
                "{} ({})",
                s["memory_cap_bytes"]
                    .as_u64()
                    .map(bytes_text)
                    .unwrap_or_default(),
                named("--memory-cap", "50% of RAM")
            ),
            Err(_) => named("--memory-cap", "50% of RAM"),
        };
        self.set("memory cap", cap);
        if let Err(e) = &status {
            self.set("status", format!("`rampart status --json` failed: {e}"));
        }
        if !rampart_args.is_empty() {
            self.set("extra mount arguments", rampart_args.join(" "));
        }
    }

    fn rampart_status(&self) -> Result<serde_json::Value> {
        let out = self.run(
            Command::new(&self.rampart_bin)
                .args(["status", "--json"])
                .arg(&self.mnt),
            QUERY_TIMEOUT,
        )?;
        serde_json::from_str(&out.stdout).map_err(|e| {
            BenchError::Other(format!("`rampart status --json` printed no JSON ({e})"))
        })
    }

    /// Bytes the daemon has written to the store since the mount, once nothing is pending:
    /// its own count (`persistence.store_written_bytes` of `rampart status --json`: journal,
    /// checkpoints, superblock, disk-tier host files it wrote). Not `write_bytes` of
    /// /proc/PID/io, which for fdatasync'd small writes counted about 30× what reached the
    /// disk (issue 15); writes the kernel makes through FUSE passthrough are not counted.
    pub(super) fn rampart_store_bytes_written(&self) -> Result<u64> {
        // Commit what is pending now, as the commit timer would within its interval (held
        // files stay held: `--commit-only`), instead of waiting for the timer: the bench
        // spent up to 5 s per workload here (decision 0122).
        self.run(
            Command::new(&self.rampart_bin)
                .args(["sync", "--commit-only"])
                .arg(&self.mnt),
            SETTLE_TIMEOUT,
        )?;
        let started = std::time::Instant::now();
        let status = loop {
            let status = self.rampart_status()?;
            let pending = status["persistence"]["ops_pending"].as_u64().unwrap_or(0);
            if pending == 0 || started.elapsed() > SETTLE_TIMEOUT {
                break status;
            }
            self.cancel.check()?;
            std::thread::sleep(Duration::from_millis(100));
        };
        status["persistence"]["store_written_bytes"]
            .as_u64()
            .ok_or_else(|| {
                BenchError::Other(
                    "`rampart status --json` gave no persistence.store_written_bytes (a \
                     daemon before status schema minor version 4)"
                        .into(),
                )
            })
    }

    pub(super) fn rampart_usage(&self) -> Result<Usage> {
        let status = self.rampart_status()?;
        let pid = status_pid(&status)
            .ok_or_else(|| BenchError::Other("`rampart status --json` gave no pid".into()))?;
        let memory = process_memory(pid)?;
        let store = self.store.as_deref().expect("rampart has a store");
        let store_bytes = tree_allocated_bytes(store)?;
        Ok(Usage {
            ram_bytes: Some(memory.rss_bytes),
            store_bytes: Some(store_bytes),
            method: format!(
                "RAM: Rss of the daemon (pid {pid} from `rampart status --json`) in {} \
                 (Pss {}; rampart's own accounting memory_used_bytes {}; the kernel's \
                 page cache of the mount is not counted); store: allocated bytes \
                 (st_blocks × 512) of every file in {}",
                memory.source,
                bytes_or_unknown(memory.pss_bytes),
                bytes_or_unknown(status["memory_used_bytes"].as_u64()),
                store.display()
            ),
        })
    }
}

/// The disk tier's threshold the bench gives rampart unless told otherwise: the default
/// (Conquest's 1 MiB), passed explicitly so the report names it.
const DEFAULT_THRESHOLD: &str = "1M";

/// How the mount got its large-file threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Threshold {
    /// `--large-file-threshold DEFAULT_THRESHOLD` added by the bench.
    Passed,
    /// Given in the extra mount arguments (`--rampart-opt`).
    Given(String),
    /// This binary has no disk tier: `rampart mount --help` names no such option.
    Unsupported,
    /// `rampart mount --help` could not be run.
    Unknown(String),
}

impl Peer {
    /// Whether the binary takes `--large-file-threshold` (the disk tier), and whether the
    /// extra arguments already set it.
    fn large_file_threshold(&self, bin: &Path, rampart_args: &[String]) -> Threshold {
        if let Some(v) = option_value(rampart_args, "--large-file-threshold") {
            return Threshold::Given(v);
        }
        if let Some(v) = rampart_args
            .iter()
            .flat_map(|a| a.split(','))
            .find_map(|o| o.strip_prefix("large_file_threshold="))
        {
            return Threshold::Given(v.to_string());
        }
        match self.run(Command::new(bin).args(["mount", "--help"]), QUERY_TIMEOUT) {
            Ok(out) if out.stdout.contains("--large-file-threshold") => Threshold::Passed,
            Ok(_) => Threshold::Unsupported,
            Err(e) => Threshold::Unknown(e.to_string()),
        }
    }

    fn describe_threshold(&mut self, threshold: Threshold) {
        let reported = self.rampart_status().ok().and_then(|s| {
            s["tiers"]["large_file_threshold_bytes"]
                .as_u64()
                .map(|b| format!("; `rampart status` reports {}", bytes_text(b)))
        });
        let reported = reported.unwrap_or_default();
        let text = match threshold {
            Threshold::Passed => format!(
                "{DEFAULT_THRESHOLD} (the default, passed as --large-file-threshold \
                 {DEFAULT_THRESHOLD}){reported}: larger files live on the disk tier, one \
                 host file each in STORE/data/"
            ),
            Threshold::Given(v) => format!("{v} (given){reported}"),
            Threshold::Unsupported => "none: this binary has no disk tier (`rampart mount \
                 --help` names no --large-file-threshold), so every file lives in RAM and \
                 its bytes go through the journal"
                .into(),
            Threshold::Unknown(e) => format!("unknown: `rampart mount --help` failed: {e}"),
        };
        self.set("large-file threshold (disk tier)", text);
    }

    /// Files and bytes per tier and the data path, from `rampart status --json`.
    pub(super) fn rampart_tiers(&self) -> String {
        let status = match self.rampart_status() {
            Ok(s) => s,
            Err(e) => return format!("tiers unknown: {e}"),
        };
        let tiers = &status["tiers"];
        if tiers.is_null() {
            return "`rampart status --json` reports no tiers (no disk tier in this binary): \
                    every file is in RAM"
                .into();
        }
        let tier = |name: &str| {
            format!(
                "{name} {} files, {}",
                tiers[name]["files"],
                tiers[name]["bytes"]
                    .as_u64()
                    .map(bytes_text)
                    .unwrap_or_else(|| "? bytes".into())
            )
        };
        format!(
            "rampart status: {}; {}; host bytes allocated {}; data path {}",
            tier("memory"),
            tier("disk"),
            bytes_or_unknown(tiers["disk"]["host_bytes_allocated"].as_u64()),
            tiers["data_path"].as_str().unwrap_or("not reported")
        )
    }

    /// `kill -9` of the daemon, `fusermount3 -u -z` of its dead mount, caches dropped, then the
    /// mount timed until the root can be listed (it replays the journal).
    pub(super) fn rampart_crash_remount(
        &mut self,
        mount: &MountCommand,
    ) -> Result<super::CrashRemount> {
        self.cancel.check()?;
        let status = self.rampart_status()?;
        let pid = status_pid(&status)
            .ok_or_else(|| BenchError::Other("`rampart status --json` gave no pid".into()))?;
        let journal_bytes = status["persistence"]["journal_bytes"].as_u64().unwrap_or(0);
        let raw = libc::pid_t::try_from(pid)
            .map_err(|_| BenchError::Other(format!("daemon pid {pid} out of range")))?;
        // SAFETY: kill(2) sends a signal; it has no memory-safety preconditions.
        unsafe { libc::kill(raw, libc::SIGKILL) };
        if !cleanup::wait_for_exit(pid, Duration::from_secs(30)) {
            return Err(BenchError::Other(format!(
                "rampart daemon {pid} still runs 30 s after SIGKILL"
            )));
        }
        self.run(
            Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.mnt),
            UNMOUNT_TIMEOUT,
        )?;
        super::drop_caches()?;
        let started = std::time::Instant::now();
        self.run(&mut mount.command(), MOUNT_TIMEOUT)?;
        let listed = std::fs::read_dir(&self.mnt)
            .and_then(|dir| dir.collect::<std::io::Result<Vec<_>>>())
            .map_err(|e| {
                BenchError::io(
                    format!("listing {} after the crash remount", self.mnt.display()),
                    e,
                )
            });
        let mount_time = started.elapsed();
        listed?;
        let recovered = self.store.as_deref().and_then(last_recovery_line);
        Ok(super::CrashRemount {
            mount_time,
            journal_bytes,
            recovered,
        })
    }
}

/// What the daemon last logged of a recovery (`recovered STORE: …`) in `STORE/rampart.log`.
fn last_recovery_line(store: &Path) -> Option<String> {
    let log = std::fs::read_to_string(store.join("rampart.log")).ok()?;
    let line = log.lines().rev().find(|l| l.contains("recovered "))?;
    let at = line.find("recovered ")?;
    let text = &line[at..];
    Some(
        text.split_once(": ")
            .map_or(text, |(_, what)| what)
            .to_string(),
    )
}

/// The daemon's pid in a `rampart status --json` answer.
fn status_pid(status: &serde_json::Value) -> Option<u32> {
    status["pid"].as_u64().and_then(|p| u32::try_from(p).ok())
}

/// Stops (SIGTERM, then SIGKILL after 10 s) every rampart daemon not yet serving a mount whose
/// command line names `store`, so that no daemon is left behind a removed store. A daemon
/// that is serving a mount is left to `rampart umount`.
fn stop_daemons_of(store: &Path) -> Result<()> {
    let store = store.as_os_str().as_encoded_bytes();
    let mut stubborn = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if !(args.contains(&&b"--daemon-child"[..]) && args.contains(&store)) {
            continue;
        }
        // The mount point follows the store in the daemon's arguments; a mounted daemon is
        // stopped by unmounting, which lets it write its clean checkpoint.
        let mounted = args
            .iter()
            .position(|a| *a == store)
            .and_then(|i| args.get(i + 1))
            .map(|m| Path::new(std::ffi::OsStr::from_bytes(m)))
            .is_some_and(cleanup::is_mounted);
        if mounted {
            continue;
        }
        let Ok(raw) = libc::pid_t::try_from(pid) else {
            continue;
        };
        // SAFETY: kill(2) sends a signal; it has no memory-safety preconditions.
        unsafe { libc::kill(raw, libc::SIGTERM) };
        if !cleanup::wait_for_exit(pid, Duration::from_secs(10)) {
            // SAFETY: as above.
            unsafe { libc::kill(raw, libc::SIGKILL) };
            if !cleanup::wait_for_exit(pid, Duration::from_secs(5)) {
                stubborn.push(pid);
            }
        }
    }
    if stubborn.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Other(format!(
            "rampart daemon(s) {stubborn:?} of a store being removed did not exit"
        )))
    }
}

/// Unmounts a rampart mount with `rampart umount` (which waits for the daemon to finish
/// writing). When that keeps failing and `lazy_last_resort` is set, falls back to the plain
/// unmount (lazily if busy) and waits for the daemon, and still returns the failure.
pub(super) fn rampart_unmount(bin: &Path, mnt: &Path, lazy_last_resort: bool) -> Result<()> {
    if !cleanup::is_mounted(mnt) {
        return Ok(());
    }
    let daemon = run_to_end(
        Command::new(bin).args(["status", "--json"]).arg(mnt),
        QUERY_TIMEOUT,
    )
    .ok()
    .and_then(|out| serde_json::from_str::<serde_json::Value>(&out.stdout).ok())
    .and_then(|s| status_pid(&s));
    let mut last_error = None;
    for attempt in 0..3u32 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(500));
        }
        match run_to_end(Command::new(bin).arg("umount").arg(mnt), UNMOUNT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last_error = Some(e),
        }
        if !cleanup::is_mounted(mnt) {
            break;
        }
    }
    let failure = last_error.map(|e| e.to_string()).unwrap_or_default();
    if !lazy_last_resort {
        return Err(BenchError::Other(failure));
    }
    let fallback = match cleanup::unmount(mnt, true, UNMOUNT_TIMEOUT) {
        Ok(()) => "unmounted it with umount".to_string(),
        Err(e) => e.to_string(),
    };
    let waited = match daemon {
        Some(pid) if !cleanup::wait_for_exit(pid, Duration::from_secs(60)) => {
            format!("; daemon {pid} still runs after 60 s")
        }
        _ => String::new(),
    };
    Err(BenchError::Other(format!("{failure}; {fallback}{waited}")))
}

/// Whether the mount's kernel uses the writeback cache, as `rampart status` reports what the
/// handshake settled: the option asks for it, but FUSE passthrough turns it off (decision 0058),
/// so the option alone may say "on" of a mount that writes through.
fn writeback_cache_text(status: Option<&serde_json::Value>, rampart_args: &[String]) -> String {
    let asked = match option_value(rampart_args, "--writeback-cache") {
        Some(v) => format!("--writeback-cache {v} given"),
        None => "--writeback-cache on by default".into(),
    };
    let passthrough = option_value(rampart_args, "--passthrough")
        .map(|v| format!(", --passthrough {v} given"))
        .unwrap_or_default();
    match status.and_then(|s| s["writeback_cache"].as_str()) {
        Some(in_use) => format!(
            "{in_use} (reported by `rampart status`; {asked}{passthrough}; FUSE passthrough              turns it off)"
        ),
        None => format!(
            "unknown: `rampart status` does not report it ({asked}{passthrough}; FUSE              passthrough turns it off)"
        ),
    }
}

/// The value given to a `--name value` or `--name=value` option.
pub(super) fn option_value(args: &[String], name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == name {
            return Some(iter.next().cloned().unwrap_or_else(|| "(set)".into()));
        }
        if let Some(value) = arg.strip_prefix(&prefix) {
            return Some(value.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_store_config_parses_and_the_edited_rule_takes_the_edit_sessions_names() {
        use crate::workload::edit::{EDITED_REGEX, MAIL_SUFFIX, SOURCE_SUFFIX, TEMP_SUFFIX};
        use rampart_core::category::Categories;
        let interval = Duration::from_secs(5);
        for kind in PeerKind::ALL {
            let Some((text, words)) = store_config(kind) else {
                continue;
            };
            let categories = Categories::from_toml(text, "rampart.toml", interval)
                .unwrap_or_else(|e| panic!("{}: {e}", kind.id()));
            let matched = categories.rule_for(b"x", Some(b"/x")).is_some();
            assert_eq!(matched, kind != PeerKind::RampartEdited, "{}", kind.id());
            // The category the rule gives is the one the report names.
            let category = categories.rules()[0].category.as_str();
            assert!(words.starts_with(category), "{}: {words}", kind.id());
        }
        assert!(EDITED_CONFIG.contains(EDITED_REGEX));
        let edited = Categories::from_toml(EDITED_CONFIG, "rampart.toml", interval).unwrap();
        let category = |name: &str| {
            let path = format!("/bench-mbfs-edit-r0/session/src/{name}");
            edited
                .rule_for(name.as_bytes(), Some(path.as_bytes()))
                .map(|(_, r)| r.category.clone())
        };
        for suffix in [SOURCE_SUFFIX, MAIL_SUFFIX] {
            for name in [format!("f{suffix}"), format!("f{suffix}{TEMP_SUFFIX}")] {
                assert_eq!(category(&name).as_deref(), Some("EDITED"), "{name}");
            }
        }
        for other in ["f.cc", "f.new", "notes.txt", "src"] {
            assert_eq!(category(other), None, "{other}");
        }
    }

    #[test]
    fn option_values_in_both_spellings() {
        let args: Vec<String> = ["--commit-interval", "1s", "--writeback-cache=off"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            option_value(&args, "--commit-interval").as_deref(),
            Some("1s")
        );
        assert_eq!(
            option_value(&args, "--writeback-cache").as_deref(),
            Some("off")
        );
        assert_eq!(option_value(&args, "--threads"), None);
    }

    #[test]
    fn the_writeback_cache_is_what_the_mount_uses_not_what_was_asked() {
        let args: Vec<String> = vec!["--passthrough=on".into()];
        // With passthrough the kernel writes through, whatever the default asked.
        let status = serde_json::json!({ "writeback_cache": "off" });
        let text = writeback_cache_text(Some(&status), &args);
        assert!(
            text.starts_with("off (reported by `rampart status`"),
            "{text}"
        );
        assert!(text.contains("--passthrough on given"), "{text}");
        let status = serde_json::json!({ "writeback_cache": "on" });
        assert!(writeback_cache_text(Some(&status), &[]).starts_with("on "));
        // A daemon that does not report it: the text does not guess from the options.
        let old = serde_json::json!({ "pid": 1 });
        for status in [Some(&old), None] {
            let text = writeback_cache_text(status, &[]);
            assert!(text.starts_with("unknown"), "{text}");
        }
    }

    #[test]
    fn a_given_threshold_is_not_overridden() {
        let peer_args = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let given = peer_args(&["--large-file-threshold=64K"]);
        assert_eq!(
            option_value(&given, "--large-file-threshold").as_deref(),
            Some("64K")
        );
        let o = peer_args(&["-o", "threads=4,large_file_threshold=off"]);
        let found = o
            .iter()
            .flat_map(|a| a.split(','))
            .find_map(|x| x.strip_prefix("large_file_threshold="));
        assert_eq!(found, Some("off"));
    }
}

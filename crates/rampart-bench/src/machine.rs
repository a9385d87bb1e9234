//! What machine a run was made on: CPU, memory, kernel, disks, FUSE, versions, load.
//!
//! Every fact is read best effort: a file that is missing or unreadable means the fact is left
//! out, never a panic or a failed run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use crate::cleanup::mount_points;
use crate::cmd::{self, Cancel};

#[derive(Clone, Debug, Default, Serialize)]
pub struct Machine {
    /// (what, value) pairs in report order: "CPU", "Intel Xeon ... (2 vCPUs)".
    pub facts: Vec<(String, String)>,
}

/// Longest any one probe (rustc --version, git) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most FUSE module parameters listed.
const FUSE_PARAMETERS_MAX: usize = 32;

/// Describes this machine now.
pub fn describe() -> Machine {
    let mut facts: Vec<(String, String)> = Vec::new();
    let mut add = |key: &str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.trim().is_empty()) {
            facts.push((key.to_string(), value));
        }
    };
    let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
    add("CPU", cpu_model(&cpuinfo));
    add("CPUs", cpu_count(&cpuinfo));
    add(
        "CPU frequency governor",
        read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
    );
    add(
        "virtualized",
        cpuinfo
            .lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"))
            .then(|| "yes (the CPU reports the hypervisor flag)".to_string()),
    );
    let meminfo = read("/proc/meminfo").unwrap_or_default();
    add("RAM", meminfo_bytes(&meminfo, "MemTotal:").map(gib_text));
    add(
        "RAM available at start",
        meminfo_bytes(&meminfo, "MemAvailable:").map(gib_text),
    );
    add(
        "swap",
        meminfo_bytes(&meminfo, "SwapTotal:").map(|b| match b {
            0 => "none".to_string(),
            b => gib_text(b),
        }),
    );
    add("kernel", read("/proc/sys/kernel/osrelease"));
    add("distribution", distribution());
    add(
        "root file system",
        file_system_of(Path::new("/")).map(|fs| fs.to_string()),
    );
    add("/dev/shm", shm_size());
    add("FUSE module parameters", fuse_parameters());
    add(
        "FUSE max_pages_limit (/proc/sys/fs/fuse)",
        read("/proc/sys/fs/fuse/max_pages_limit"),
    );
    add(
        "rampart bench version",
        Some(env!("CARGO_PKG_VERSION").to_string()),
    );
    add(
        "rustc on PATH",
        probe(Command::new("rustc").arg("--version")),
    );
    add("git commit", git_commit());
    add(
        "load average (1, 5, 15 min) at start",
        read("/proc/loadavg").map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")),
    );
    Machine { facts }
}

/// A file's text, trimmed; None when missing or unreadable.
fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The first line a command prints, or None when it fails.
fn probe(command: &mut Command) -> Option<String> {
    let out = cmd::run(command, Cancel::global(), PROBE_TIMEOUT).ok()?;
    out.stdout.lines().next().map(|l| l.trim().to_string())
}

fn cpuinfo_value<'a>(cpuinfo: &'a str, key: &str) -> Option<&'a str> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    // x86 says "model name"; some ARM kernels say "Hardware" or only "CPU part".
    [
        "model name",
        "Hardware",
        "Processor",
        "cpu model",
        "CPU part",
    ]
    .iter()
    .find_map(|key| cpuinfo_value(cpuinfo, key))
    .map(str::to_string)
}

fn cpu_count(cpuinfo: &str) -> Option<String> {
    let listed = cpuinfo
        .lines()
        .filter(|l| l.split(':').next().map(str::trim) == Some("processor"))
        .count();
    let usable = std::thread::available_parallelism().ok().map(|n| n.get());
    match (listed, usable) {
        (0, None) => None,
        (0, Some(u)) => Some(format!("{u} usable")),
        (l, Some(u)) if u != l => Some(format!("{l} online, {u} usable by this process")),
        (l, _) => Some(l.to_string()),
    }
}

fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

fn gib_text(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn distribution() -> Option<String> {
    let text = read("/etc/os-release")?;
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim_matches('"').to_string())
    };
    value("PRETTY_NAME=").or_else(|| value("NAME="))
}

/// The file system holding a path and the block device under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSystemInfo {
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
    /// The whole disk under `source` in /sys/block ("vda" for /dev/vda1), if it is one.
    pub disk: Option<String>,
    pub model: Option<String>,
    pub rotational: Option<bool>,
}

impl std::fmt::Display for FileSystemInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {} (mounted at {})",
            self.fs_type,
            self.source,
            self.mount_point.display()
        )?;
        if let Some(disk) = &self.disk {
            write!(f, ", disk {disk}")?;
            if let Some(model) = &self.model {
                write!(f, " \"{model}\"")?;
            }
            match self.rotational {
                Some(true) => write!(f, ", rotational (as the kernel reports it)")?,
                Some(false) => write!(f, ", non-rotational")?,
                None => {}
            }
        }
        Ok(())
    }
}

/// The file system holding `path` (the longest mount point above it), and its disk.
pub fn file_system_of(path: &Path) -> Option<FileSystemInfo> {
    let path = std::fs::canonicalize(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let points = mount_points(&info);
    // The last mount of the longest matching mount point is the one in effect.
    let (index, mount_point) = points
        .iter()
        .enumerate()
        .filter(|(_, p)| path.starts_with(p))
        .max_by_key(|(i, p)| (p.components().count(), *i))?;
    let line = info.lines().nth(index)?;
    let (_, after) = line.split_once(" - ")?;
    let mut rest = after.split(' ');
    let fs_type = rest.next()?.to_string();
    let source = rest.next()?.to_string();
    let disk = disk_of_device(&source);
    let sys = disk.as_ref().map(|d| Path::new("/sys/block").join(d));
    Some(FileSystemInfo {
        mount_point: mount_point.clone(),
        fs_type,
        source,
        model: sys
            .as_ref()
            .and_then(|s| read(s.join("device/model")).or_else(|| read(s.join("device/name")))),
        rotational: sys
            .as_ref()
            .and_then(|s| read(s.join("queue/rotational")))
            .map(|r| r == "1"),
        disk,
    })
}

/// The whole disk under a device node: /dev/vda1 → vda, /dev/nvme0n1p2 → nvme0n1,
/// /dev/mapper/x → its dm-N (no whole disk is followed through device mapper).
fn disk_of_device(source: &str) -> Option<String> {
    let real = std::fs::canonicalize(source).ok()?;
    let name = real.file_name()?.to_str()?.to_string();
    if Path::new("/sys/block").join(&name).exists() {
        return Some(name);
    }
    // A partition: /sys/class/block/<part> links into its disk's folder.
    let link = std::fs::canonicalize(Path::new("/sys/class/block").join(&name)).ok()?;
    let parent = link.parent()?.file_name()?.to_str()?.to_string();
    Path::new("/sys/block")
        .join(&parent)
        .exists()
        .then_some(parent)
}

fn shm_size() -> Option<String> {
    let stat = nix::sys::statvfs::statvfs("/dev/shm").ok()?;
    let size = stat.blocks() as u64 * stat.fragment_size() as u64;
    let free = stat.blocks_available() as u64 * stat.fragment_size() as u64;
    let fs = file_system_of(Path::new("/dev/shm"))
        .map(|f| format!(", {}", f.fs_type))
        .unwrap_or_default();
    Some(format!("{} ({} free{fs})", gib_text(size), gib_text(free)))
}

fn fuse_parameters() -> Option<String> {
    let mut entries: Vec<_> = std::fs::read_dir("/sys/module/fuse/parameters")
        .ok()?
        .flatten()
        .take(FUSE_PARAMETERS_MAX)
        .filter_map(|entry| {
            let value = read(entry.path())?;
            Some(format!("{}={value}", entry.file_name().to_string_lossy()))
        })
        .collect();
    entries.sort();
    Some(entries.join(", "))
}

/// The commit of the repository the running binary was built in (the nearest folder above
/// it holding `.git`: target/release/rampart → the repository), with "-dirty" for uncommitted
/// changes.
fn git_commit() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    // Few levels: a binary installed elsewhere must not pick up an unrelated repository far up.
    let repo = exe
        .ancestors()
        .skip(1)
        .take(5)
        .find(|dir| dir.join(".git").exists())?;
    probe(Command::new("git").arg("-C").arg(repo).args([
        "describe",
        "--always",
        "--dirty",
        "--abbrev=12",
    ]))
    .map(|commit| format!("{commit} ({})", repo.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_this_machine_without_panicking() {
        let machine = describe();
        let keys: Vec<&str> = machine.facts.iter().map(|(k, _)| k.as_str()).collect();
        assert!(keys.contains(&"kernel"), "{keys:?}");
        assert!(keys.contains(&"RAM"), "{keys:?}");
        assert!(machine.facts.iter().all(|(_, v)| !v.trim().is_empty()));
    }

    #[test]
    fn cpu_facts_from_cpuinfo() {
        let text = "processor\t: 0\nmodel name\t: Test CPU @ 2GHz\nflags\t\t: fpu hypervisor\n\n\
                    processor\t: 1\nmodel name\t: Test CPU @ 2GHz\n";
        assert_eq!(cpu_model(text).as_deref(), Some("Test CPU @ 2GHz"));
        assert!(cpu_count(text).unwrap().starts_with('2'));
        assert_eq!(cpu_model(""), None);
    }

    #[test]
    fn meminfo_in_bytes() {
        let text = "MemTotal:       24683772 kB\nMemFree:        1 kB\n";
        assert_eq!(meminfo_bytes(text, "MemTotal:"), Some(24683772 * 1024));
        assert_eq!(meminfo_bytes(text, "SwapTotal:"), None);
    }

    #[test]
    fn the_root_file_system_is_found() {
        let fs = file_system_of(Path::new("/")).unwrap();
        assert_eq!(fs.mount_point, Path::new("/"));
        assert!(!fs.fs_type.is_empty());
    }
}

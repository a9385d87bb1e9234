//! FUSE requests a peer answered, by opcode: rampart's from `rampart status --json`
//! (`fuse_requests`), the floor's from an extended attribute of its root. The PostMark
//! workloads read them before and after the transactions to state requests per transaction.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::Command;

use super::QUERY_TIMEOUT;
use crate::cmd::{self, Cancel};
use crate::error::{BenchError, Result};

/// Requests the program does not wait for: the kernel sends them and goes on (FORGET and
/// BATCH_FORGET have no answer; INTERRUPT is sent only to cancel).
pub const NOT_WAITED: [&str; 3] = ["forget", "batch_forget", "interrupt"];

/// How to read a peer's request counts.
#[derive(Clone, Debug)]
pub enum RequestCounter {
    /// `rampart status --json MOUNTPOINT`.
    Rampart { bin: PathBuf, mnt: PathBuf },
    /// getxattr of [`crate::floor::REQUESTS_XATTR`] on the floor's root.
    Floor { mnt: PathBuf },
}

/// Requests by opcode name.
pub type Counts = BTreeMap<String, u64>;

/// What a peer's counters said at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub counts: Counts,
    /// Time the daemon spent answering them, all opcodes together (rampart's
    /// `fuse_latency`, from arrival to answer); None where it is not measured.
    pub daemon_seconds: Option<f64>,
}

impl RequestCounter {
    pub fn read(&self) -> Result<Snapshot> {
        match self {
            RequestCounter::Rampart { bin, mnt } => {
                let out = cmd::run(
                    Command::new(bin).args(["status", "--json"]).arg(mnt),
                    Cancel::never(),
                    QUERY_TIMEOUT,
                )?;
                let status: serde_json::Value = serde_json::from_str(&out.stdout)
                    .map_err(|e| BenchError::Other(format!("`rampart status --json`: {e}")))?;
                let requests = status["fuse_requests"].as_object().ok_or_else(|| {
                    BenchError::Other("`rampart status --json` has no fuse_requests".into())
                })?;
                let counts = requests
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                    .collect();
                let daemon_seconds = status["fuse_latency"].as_object().map(|ops| {
                    ops.values()
                        .filter_map(|l| l["sum_seconds"].as_f64())
                        .sum::<f64>()
                });
                Ok(Snapshot {
                    counts,
                    daemon_seconds,
                })
            }
            RequestCounter::Floor { mnt } => {
                let bytes = get_xattr(mnt, crate::floor::REQUESTS_XATTR)?;
                Ok(Snapshot {
                    counts: crate::floor::parse_counts(&bytes).map_err(BenchError::Other)?,
                    daemon_seconds: None,
                })
            }
        }
    }

    /// What the counts cover, for the report.
    pub fn source(&self) -> &'static str {
        match self {
            RequestCounter::Rampart { .. } => {
                "rampart's own counters (`rampart status --json`, fuse_requests); RELEASE and \
                 RELEASEDIR are answered by fuser and not counted there"
            }
            RequestCounter::Floor { .. } => "the floor's own counters",
        }
    }
}

/// What happened between two snapshots.
pub fn between(before: &Snapshot, after: &Snapshot) -> Snapshot {
    Snapshot {
        counts: difference(&before.counts, &after.counts),
        daemon_seconds: match (before.daemon_seconds, after.daemon_seconds) {
            (Some(b), Some(a)) => Some((a - b).max(0.0)),
            _ => None,
        },
    }
}

/// `after - before`, opcode by opcode (opcodes that did not move are left out).
pub fn difference(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(op, &n)| {
            let d = n.saturating_sub(before.get(op).copied().unwrap_or(0));
            (d > 0).then(|| (op.clone(), d))
        })
        .collect()
}

fn get_xattr(path: &std::path::Path, name: &str) -> Result<Vec<u8>> {
    let failed =
        |e: std::io::Error| BenchError::io(format!("getxattr {name} of {}", path.display()), e);
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| BenchError::Other(format!("{} holds a NUL byte", path.display())))?;
    let c_name = CString::new(name).expect("a constant without NUL");
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: both strings are NUL-terminated and live across the call; the kernel writes at
    // most buf.len() bytes into buf, which is valid and exclusively borrowed.
    let n = unsafe {
        libc::getxattr(
            c_path.as_ptr(),
            c_name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    buf.truncate(n as usize);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difference_keeps_what_moved() {
        let before: Counts = [("getattr".to_string(), 5), ("lookup".to_string(), 2)].into();
        let after: Counts = [
            ("getattr".to_string(), 9),
            ("lookup".to_string(), 2),
            ("create".to_string(), 3),
        ]
        .into();
        let d = difference(&before, &after);
        assert_eq!(d.get("getattr"), Some(&4));
        assert_eq!(d.get("create"), Some(&3));
        assert_eq!(d.get("lookup"), None);
    }
}

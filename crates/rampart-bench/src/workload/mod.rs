//! The workloads, each named after the paper it comes from. A workload gets an empty directory
//! on a mounted peer and returns measured metrics; it never fakes a number: what it cannot
//! measure on a peer it reports as unsupported, with the reason.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::cmd::Cancel;
use crate::error::Result;
use crate::peer::{Mounted, PeerKind};
use crate::profile::Profile;

pub mod conquest_postmark;
pub(crate) mod data;
pub mod disk;
pub mod durable;
pub mod edit;
pub mod fio;
pub mod fsync_each;
pub mod mbfs;
pub mod postmark;
pub mod recovery;
pub mod sprite;

/// Which way is better for a metric (for ratios and for the report's wording).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
}

/// One measured number. `name` is the phase or quantity ("create", "transactions"), `x` the
/// independent variable when there is one (threads), so a workload can return a whole curve.
#[derive(Clone, Debug, Serialize)]
pub struct Metric {
    pub name: String,
    /// "ops/s", "tx/s", "MiB/s", "IOPS", "s", "ms", "B/file", ...
    pub unit: &'static str,
    pub value: f64,
    pub x: Option<f64>,
    pub better: Better,
}

impl Metric {
    pub fn higher(name: impl Into<String>, unit: &'static str, value: f64) -> Metric {
        Metric {
            name: name.into(),
            unit,
            value,
            x: None,
            better: Better::Higher,
        }
    }

    pub fn lower(name: impl Into<String>, unit: &'static str, value: f64) -> Metric {
        Metric {
            name: name.into(),
            unit,
            value,
            x: None,
            better: Better::Lower,
        }
    }

    pub fn at(mut self, x: f64) -> Metric {
        self.x = Some(x);
        self
    }

    /// A rate from a count and the time it took.
    pub fn rate(
        name: impl Into<String>,
        unit: &'static str,
        count: f64,
        elapsed: Duration,
    ) -> Metric {
        Metric::higher(name, unit, count / elapsed.as_secs_f64().max(1e-9))
    }
}

/// The metric the runner adds to every run on a peer that counts the bytes it writes to its
/// store (rampart: issue 14's "bytes written to the store in each case").
pub const STORE_BYTES_WRITTEN: &str = "bytes written to the store";

/// What one run of a workload on one peer produced.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    pub metrics: Vec<Metric>,
    /// Anything the reader should know about this run (e.g. "postmark reported 3 errors").
    pub notes: Vec<String>,
}

/// How the report should draw a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlotKind {
    /// One group of bars per metric name (phases), one bar per peer: the papers' per-phase
    /// transaction-rate and bandwidth figures.
    PhaseBars,
    /// One line per (peer, metric name) against `x`, plus a speedup plot against the first
    /// peer's single-thread value: IOPS against threads.
    Lines { x_label: &'static str },
    /// Table only.
    None,
}

/// What a workload can see while it runs.
pub struct Ctx<'a> {
    /// An empty directory on the peer under test, owned by root.
    pub dir: PathBuf,
    /// The peer itself: its kind, remount, memory and store usage.
    pub peer: &'a mut dyn Mounted,
    pub profile: Profile,
    /// A private folder in /dev/shm for inputs (configs, tarballs); emptied by the runner.
    pub scratch: PathBuf,
    pub cancel: &'static Cancel,
    /// Progress message for the progress bar ("phase 2/5: sequential read").
    pub progress: &'a dyn Fn(&str),
}

impl Ctx<'_> {
    /// Whether every file written must be fsync'd before it is closed (host-fsync).
    pub fn fsync_each_file(&self) -> bool {
        self.peer.kind().fsync_each_file()
    }
}

/// Why a workload does not run on host-fsync.
pub fn does_not_fsync_each_file() -> String {
    "host-fsync is for the workloads that fsync every file they write before closing it \
     (PostMark, the MBFS copy, small-file loop, untar and edit session); this one does not"
        .into()
}

pub trait Workload: Send + Sync {
    /// Short id used by `--only` and in file names: "postmark-conquest".
    fn id(&self) -> &'static str;
    /// "PostMark, Conquest configuration".
    fn title(&self) -> &'static str;
    /// Where it comes from: "Conquest (USENIX 2002) §5.2".
    fn source(&self) -> &'static str;
    /// Every parameter at this profile, for the report (file counts, sizes, tool versions).
    fn settings(&self, profile: Profile) -> Vec<(String, String)>;
    /// Fails with `BenchError::Missing` when a tool it needs is absent (postmark, fio, tar).
    fn check_tools(&self) -> Result<()> {
        Ok(())
    }
    /// Why this workload cannot run on a peer of this kind, if it cannot (e.g. it needs a
    /// capability rampart does not have yet). The report prints the reason; nothing is skipped
    /// silently.
    fn unsupported_on(&self, _peer: PeerKind) -> Option<String> {
        None
    }
    /// Whether it means something on the floor, which keeps no contents (reads return
    /// zeros): the metadata-heavy workloads, whose cost is the requests (decision 0070).
    fn runs_on_floor(&self) -> bool {
        false
    }
    /// Whether it fsyncs every file it writes before closing it when the peer asks for that
    /// (host-fsync, `PeerKind::fsync_each_file`); a workload that does not is not run there.
    fn fsyncs_each_file(&self) -> bool {
        false
    }
    fn plot(&self) -> PlotKind;
    fn run(&self, ctx: &mut Ctx) -> Result<Outcome>;
}

/// Why a workload does not run on the floor.
pub fn floor_keeps_no_data() -> String {
    "the floor keeps no contents (written bytes are dropped, reads return zeros): it runs the \
     metadata-heavy workloads (PostMark, the MBFS small-file loop, durable small writes), \
     where FUSE's requests are the cost it measures, and the MBFS copy, whose cost is the \
     kernel's writeback through FUSE"
        .into()
}

/// Every workload, in report order.
pub fn all() -> Vec<Box<dyn Workload>> {
    let mut all: Vec<Box<dyn Workload>> = Vec::new();
    all.extend(postmark::workloads());
    all.extend(conquest_postmark::workloads());
    all.extend(conquest_postmark::library::workloads());
    all.extend(sprite::workloads());
    all.extend(fio::workloads());
    all.extend(disk::workloads());
    all.extend(mbfs::workloads());
    all.extend(edit::workloads());
    all.extend(durable::workloads());
    all.extend(recovery::workloads());
    all
}

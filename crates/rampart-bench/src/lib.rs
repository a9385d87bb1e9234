//! `rampart bench`: sets up rampart and its peers (tmpfs, ext4/XFS/btrfs on RAM disks, ext4 on
//! the real disk, fuse-overlayfs), runs the papers' workloads on each in one interleaved run,
//! tears everything down, and writes a Markdown report with PNG plots (DESIGN.md §7).
//!
//! The pieces, each one idea:
//! - [`profile`]: how big and how often (tiny, quick, full);
//! - [`floor`]: the FUSE floor, a server whose handlers do nothing useful;
//! - [`peer`]: setting up, remounting and tearing down one file system under test;
//! - [`cleanup`]: the undo stack and the Ctrl-C/SIGTERM handling that guarantee teardown;
//! - [`workload`]: the workloads, each named after its paper;
//! - [`runner`]: the interleaved, repeated schedule and the progress bars;
//! - [`stats`]: median and spread;
//! - [`machine`]: what machine this ran on;
//! - [`report`]: Markdown tables, ratios, plots, raw JSON.

pub mod cleanup;
pub mod cmd;
pub mod error;
pub mod floor;
pub mod machine;
pub mod peer;
pub mod profile;
pub mod report;
pub mod results;
pub mod runner;
pub mod stats;
pub mod workload;

#[cfg(test)]
pub mod testing;

pub use error::BenchError;
pub use runner::{run, BenchOptions};

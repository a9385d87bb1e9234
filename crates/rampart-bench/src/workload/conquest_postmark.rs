//! Conquest's modified PostMark (Conquest, USENIX 2002, §5.3): PostMark with a share of the
//! files (0–10 %) in a large class of 2–5 MiB, the rest 512 B–16 KiB, so that the workload
//! reaches the disk side of a hybrid file system. The Debian `postmark` has one size range, so
//! this is our own driver ([`engine`]) of PostMark's exact algorithm and random number
//! generator ([`mt`]); at 0 % large files it performs the very operations the real tool does,
//! which `tests::same_operations_as_real_postmark` checks against `/usr/bin/postmark`.

mod engine;
pub mod library;
mod mt;

use std::time::Duration;

use super::data::io_err;
use super::{Ctx, Metric, Outcome, PlotKind, Workload};
use crate::error::Result;
use crate::profile::Profile;

use engine::{Config, Counts, SizeClass};

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(ConquestPostmark)]
}

/// Conquest §5.2/§5.3: 10,000 files, 512 B–16 KiB, large files 2–5 MiB ("MB" in PostMark
/// since v1.5 is 1024 KB).
const SMALL: SizeClass = SizeClass {
    low_bytes: 512,
    high_bytes: 16 << 10,
};
const LARGE: SizeClass = SizeClass {
    low_bytes: 2 << 20,
    high_bytes: 5 << 20,
};
const PAPER_FILES: u32 = 10_000;
const PAPER_TRANSACTIONS: u32 = 200_000;
/// PostMark's default seed.
const SEED: u32 = 42;
/// §5.2: "equal probability of creates and deletes": 5 out of 10.
const BIAS_CREATE: i32 = 5;
/// §5.2: "a four times higher probability of performing reads than appends": 8 out of 10.
const BIAS_READ: i32 = 8;
/// §5.2: "The transaction block size is 512 bytes."
const BLOCK_BYTES: u32 = 512;

/// How big a run is at one profile.
struct Scale {
    files: u32,
    transactions: u32,
    /// Large-file shares to measure, in percent.
    large_percents: &'static [u32],
}

fn scale(profile: Profile) -> Scale {
    profile.pick(
        Scale {
            files: 10,
            transactions: 20,
            large_percents: &[0, 10],
        },
        Scale {
            files: 20,
            transactions: 40,
            // Issue 13 asks for 0, 5 and 10 % (the disk tier's acceptance).
            large_percents: &[0, 5, 10],
        },
        // The 2–5 MiB files are written and read 512 B at a time, which a FUSE peer without
        // a writeback cache does at ~20 MiB/s: 1/33 of the paper's files and 1/100 of its
        // transactions keep a seven-point run on the slowest peer near a minute.
        Scale {
            files: 300,
            transactions: 2_000,
            large_percents: &[0, 2, 4, 5, 6, 8, 10],
        },
    )
}

/// §5.2: "one subdirectory level ... with the number of directories equal to the square root
/// of the file set size".
fn subdirectories(files: u32) -> u32 {
    (files as f64).sqrt().round().max(1.0) as u32
}

fn config(s: &Scale, large_percent: u32) -> Config {
    Config {
        files: s.files,
        transactions: s.transactions,
        subdirectories: subdirectories(s.files),
        small: SMALL,
        large: LARGE,
        large_per_mille: large_percent * 10,
        read_block_bytes: BLOCK_BYTES,
        write_block_bytes: BLOCK_BYTES,
        bias_read: BIAS_READ,
        bias_create: BIAS_CREATE,
        seed: SEED,
    }
}

fn describe_counts(c: &Counts) -> String {
    format!(
        "{} created ({} alone, {} mixed with transactions; {} large), {} read, {} appended, \
         {} deleted ({} alone, {} mixed), {} bytes read, {} bytes written",
        c.created,
        c.created_alone,
        c.created_mixed,
        c.created_large,
        c.read,
        c.appended,
        c.deleted,
        c.deleted_alone,
        c.deleted_mixed,
        c.bytes_read,
        c.bytes_written
    )
}

struct ConquestPostmark;

impl Workload for ConquestPostmark {
    fn id(&self) -> &'static str {
        "conquest-postmark"
    }

    fn title(&self) -> &'static str {
        "Conquest's modified PostMark (0–10 % large files)"
    }

    fn source(&self) -> &'static str {
        "Conquest (USENIX 2002) §5.3, with the PostMark configuration of §5.2; PostMark 1.53 \
         (Katcher, NetApp TR3022) algorithm and generator"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let s = scale(profile);
        let percents: Vec<String> = s.large_percents.iter().map(|p| format!("{p} %")).collect();
        let scaled = |here: u32, paper: u32| {
            if here == paper {
                format!("{here} (as the paper)")
            } else {
                format!("{here} (paper: {paper}; scaled so a run fits the time budget)")
            }
        };
        vec![
            (
                "driver".into(),
                "built in: PostMark 1.53's algorithm and Mersenne Twister re-done in Rust, plus \
                 a large size class; checked against /usr/bin/postmark to perform the same \
                 operations at 0 % large files"
                    .into(),
            ),
            ("files in the pool".into(), scaled(s.files, PAPER_FILES)),
            (
                "transactions".into(),
                scaled(s.transactions, PAPER_TRANSACTIONS),
            ),
            ("large-file shares".into(), percents.join(", ")),
            (
                "data set".into(),
                "the paper's reached 3.5 GB at 10 %, beyond its 2 GB of RAM; the scaled one \
                 here stays in memory on every peer, so the curve shows the cost of large-file \
                 traffic, not of paging"
                    .into(),
            ),
            (
                "large-file share draw".into(),
                "at each creation, RND(1000) < share in tenths of a percent, just before the \
                 size (none at 0 %)"
                    .into(),
            ),
            (
                "small files".into(),
                format!("{}–{} B, uniform", SMALL.low_bytes, SMALL.high_bytes),
            ),
            (
                "large files".into(),
                format!(
                    "{}–{} MiB, uniform",
                    LARGE.low_bytes >> 20,
                    LARGE.high_bytes >> 20
                ),
            ),
            (
                "appends".into(),
                "up to the file's own class maximum, as PostMark does for its one range".into(),
            ),
            (
                "subdirectories".into(),
                format!(
                    "{} (square root of the file count, §5.2)",
                    subdirectories(s.files)
                ),
            ),
            (
                "bias".into(),
                format!("read {BIAS_READ}/10 (reads 4× appends), create {BIAS_CREATE}/10"),
            ),
            (
                "block sizes".into(),
                format!("read {BLOCK_BYTES} B, write {BLOCK_BYTES} B"),
            ),
            (
                "I/O".into(),
                "unbuffered (PostMark `set buffering false`): open/read/write/close".into(),
            ),
            (
                "seed".into(),
                format!("{SEED} (PostMark's default), same at every share"),
            ),
            (
                "metric".into(),
                "transactions / time of the transaction phase, as PostMark reports it".into(),
            ),
            (
                "between shares".into(),
                "every share runs in a fresh directory that is removed afterwards, then sync"
                    .into(),
            ),
        ]
    }

    fn plot(&self) -> PlotKind {
        PlotKind::Lines {
            x_label: "large files (%)",
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let s = scale(ctx.profile);
        let mut outcome = Outcome::default();
        for &percent in s.large_percents {
            ctx.cancel.check()?;
            (ctx.progress)(&format!("{percent} % large files"));
            let cfg = config(&s, percent);
            let dir = ctx.dir.join(format!("large-{percent}pct"));
            std::fs::create_dir(&dir).map_err(io_err("creating", &dir))?;
            let result = engine::run(&cfg, &dir, ctx.cancel);
            let removed = std::fs::remove_dir_all(&dir).map_err(io_err("removing", &dir));
            let (counts, times) = result?;
            removed?;
            // Keep one share's write-back from being charged to the next.
            nix::unistd::sync();
            outcome.metrics.push(
                Metric::rate(
                    "transactions",
                    "tx/s",
                    cfg.transactions as f64,
                    times.transactions,
                )
                .at(percent as f64),
            );
            outcome.notes.push(format!(
                "{percent} % large: {}; phases: pool {:.3} s, transactions {:.3} s, deleting \
                 the rest {:.3} s",
                describe_counts(&counts),
                secs(times.create_pool),
                secs(times.transactions),
                secs(times.delete_rest)
            ));
        }
        Ok(outcome)
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;
    use crate::cmd::Cancel;

    #[test]
    fn tiny_run_measures_every_share() {
        let outcome = crate::testing::run_tiny(&ConquestPostmark).unwrap();
        let s = scale(Profile::Tiny);
        assert_eq!(outcome.metrics.len(), s.large_percents.len());
        for (m, &p) in outcome.metrics.iter().zip(s.large_percents) {
            assert_eq!(m.name, "transactions");
            assert_eq!(m.x, Some(p as f64));
            assert!(m.value.is_finite() && m.value > 0.0, "{m:?}");
        }
        assert_eq!(outcome.notes.len(), s.large_percents.len());
        // The 10 % share really made large files.
        assert!(
            !outcome.notes[1].contains(" 0 large)"),
            "{}",
            outcome.notes[1]
        );
    }

    #[test]
    fn tiny_run_leaves_the_directory_empty() {
        let base = crate::testing::shm_tempdir();
        let dir = base.path().join("work");
        std::fs::create_dir(&dir).unwrap();
        crate::testing::run_in(&ConquestPostmark, Profile::Tiny, &dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    /// How far from the true byte count postmark's printed figure may be: it prints bytes to
    /// six decimals, kilobytes and megabytes (from 1 KiB and 1 MiB on) to two.
    fn printed_precision_bytes(printed_bytes: f64) -> f64 {
        let unit = if printed_bytes >= 1_048_576.0 {
            1_048_576.0
        } else if printed_bytes >= 1024.0 {
            1024.0
        } else {
            return 0.5e-6;
        };
        0.005 * unit
    }

    fn postmark_script(cfg: &Config, location: &Path) -> String {
        format!(
            "set location {}\nset number {}\nset size {} {}\nset subdirectories {}\n\
             set transactions {}\nset seed {}\nset read {}\nset write {}\nset buffering false\n\
             set bias read {}\nset bias create {}\nrun\nquit\n",
            location.display(),
            cfg.files,
            cfg.small.low_bytes,
            cfg.small.high_bytes,
            cfg.subdirectories,
            cfg.transactions,
            cfg.seed,
            cfg.read_block_bytes,
            cfg.write_block_bytes,
            cfg.bias_read,
            cfg.bias_create,
        )
    }

    /// The real PostMark and our driver, given the same configuration (one size class, i.e.
    /// 0 % large files) and seed, report the same operation counts: files created alone and
    /// with transactions, read, appended, deleted alone and with transactions, and the bytes
    /// read and written (which postmark prints to two decimals of their unit, so those are
    /// compared at that precision). Any divergence in the random sequence, the file table or
    /// the order of choices would change these. Not a timing check.
    #[test]
    fn same_operations_as_real_postmark() {
        // The issue asks for this check, so a machine without postmark fails it rather than
        // passing it silently (scripts/setup installs postmark).
        let postmark = Path::new("/usr/bin/postmark");
        assert!(
            postmark.exists(),
            "/usr/bin/postmark is not installed (scripts/setup, or apt-get install postmark)"
        );
        let small = |low_bytes, high_bytes| SizeClass {
            low_bytes,
            high_bytes,
        };
        let base_config = config(
            &Scale {
                files: 200,
                transactions: 1_000,
                large_percents: &[0],
            },
            0,
        );
        let configs = [
            // Conquest's configuration, scaled down, with subdirectories.
            Config {
                seed: 7,
                ..base_config.clone()
            },
            // PostMark's default sizes, no subdirectories, odd block sizes (remainders), and
            // more creates than deletes so the file table fills up.
            Config {
                files: 100,
                transactions: 2_000,
                subdirectories: 0,
                small: small(500, 10_000),
                read_block_bytes: 1_000,
                write_block_bytes: 700,
                bias_read: 5,
                bias_create: 6,
                ..base_config.clone()
            },
            // Reads and appends switched off; three subdirectories.
            Config {
                files: 50,
                transactions: 500,
                subdirectories: 3,
                bias_read: -1,
                seed: 1234,
                ..base_config.clone()
            },
        ];
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        for (i, cfg) in configs.iter().enumerate() {
            let theirs_dir = shm.path().join(format!("postmark-{i}"));
            let ours_dir = shm.path().join(format!("ours-{i}"));
            std::fs::create_dir(&theirs_dir).unwrap();
            std::fs::create_dir(&ours_dir).unwrap();
            let script = shm.path().join(format!("config-{i}"));
            std::fs::write(&script, postmark_script(cfg, &theirs_dir)).unwrap();
            let out = Command::new(postmark).arg(&script).output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "postmark failed: {stdout}");
            let theirs = crate::workload::postmark::parse_report(&stdout)
                .unwrap_or_else(|e| panic!("{e}:\n{stdout}"));

            let (ours, _) = engine::run(cfg, &ours_dir, Cancel::global()).unwrap();
            let context = format!("config {i}: {cfg:?}\npostmark: {theirs:?}\nours: {ours:?}");
            assert_eq!(theirs.created, ours.created, "{context}");
            assert_eq!(theirs.created_alone, ours.created_alone, "{context}");
            assert_eq!(theirs.created_mixed, ours.created_mixed, "{context}");
            assert_eq!(theirs.read_files, ours.read, "{context}");
            assert_eq!(theirs.appended, ours.appended, "{context}");
            assert_eq!(theirs.deleted, ours.deleted, "{context}");
            assert_eq!(theirs.deleted_alone, ours.deleted_alone, "{context}");
            assert_eq!(theirs.deleted_mixed, ours.deleted_mixed, "{context}");
            for (printed, exact) in [
                (theirs.read_bytes, ours.bytes_read),
                (theirs.written_bytes, ours.bytes_written),
            ] {
                // postmark sums bytes in a C float: exact only below 2^24.
                assert!(exact < 1 << 24, "keep the check's totals below 16 MiB");
                assert!(
                    (printed - exact as f64).abs() <= printed_precision_bytes(printed) + 1e-6,
                    "printed {printed} vs exact {exact}: {context}"
                );
            }
            // Both left their directories empty.
            assert_eq!(std::fs::read_dir(&theirs_dir).unwrap().count(), 0);
            assert_eq!(std::fs::read_dir(&ours_dir).unwrap().count(), 0);
        }
    }
}

//! PostMark, the real Debian `/usr/bin/postmark` (package 1.53, prints "v1.51"), in the
//! configurations of Conquest (§5.2), NGS (Table 1: Low, Medium, Large) and MRAMFS (§5).
//!
//! postmark is driven by a config file in the scratch folder whose `set location` is the
//! workload's directory on the peer. Its own timer is `time(2)`, so its printed figures have a
//! 1-second resolution (a 0.5 s run prints "1 seconds total"); the papers' authors patched
//! PostMark for finer timing. We leave the binary alone and instead timestamp the progress
//! markers postmark flushes to its stdout pipe at each phase boundary, right next to its own
//! `time()` calls (the method of bench/postmark_peers.py): phase times to well under a
//! millisecond. postmark's own figures go into the notes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use super::data::{group_digits, io_err};
use super::fsync_each::{fsync_note, FsyncShim};
use super::{Ctx, Metric, Outcome, PlotKind, Workload};
use crate::cmd::{self, Cancel, WatchOptions};
use crate::error::{BenchError, Result};
use crate::peer::requests::{self, RequestCounter, Snapshot, NOT_WAITED};
use crate::profile::Profile;

/// Every PostMark parameter we set (postmark's `set ...` commands).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostmarkConfig {
    /// `set number`: files created before the transactions.
    pub files: u64,
    pub transactions: u64,
    /// `set size LOW HIGH`: file sizes, uniform in [low, high].
    pub size_low_bytes: u64,
    pub size_high_bytes: u64,
    pub subdirectories: u64,
    /// `set read` / `set write`: the block of one read or append call.
    pub read_block_bytes: u64,
    pub write_block_bytes: u64,
    /// `set buffering`: stdio (true) or open/read/write/close (false).
    pub buffering: bool,
    /// `set bias read`: reads out of 10 read-or-append choices.
    pub bias_read: u32,
    /// `set bias create`: creates out of 10 create-or-delete choices.
    pub bias_create: u32,
    pub seed: u64,
}

impl PostmarkConfig {
    /// The config file postmark reads (`postmark FILE`); postmark has no comment syntax, so the
    /// reasons live in `settings`.
    pub fn text(&self, location: &Path) -> String {
        format!(
            "set size {} {}\n\
             set number {}\n\
             set seed {}\n\
             set transactions {}\n\
             set subdirectories {}\n\
             set read {}\n\
             set write {}\n\
             set buffering {}\n\
             set bias read {}\n\
             set bias create {}\n\
             set report verbose\n\
             set location {}\n\
             show\n\
             run\n\
             quit\n",
            self.size_low_bytes,
            self.size_high_bytes,
            self.files,
            self.seed,
            self.transactions,
            self.subdirectories,
            self.read_block_bytes,
            self.write_block_bytes,
            self.buffering,
            self.bias_read,
            self.bias_create,
            location.display(),
        )
    }
}

/// How the number of subdirectories follows the file count.
#[derive(Clone, Copy, Debug)]
enum Subdirs {
    /// Conquest §5.2: "the number of directories equal to the square root of the file set
    /// size", so it follows a scaled file count.
    SqrtOfFiles,
    /// The paper fixes it (NGS: 10, MRAMFS: 100).
    Fixed,
}

/// One PostMark workload: the paper's configuration and how each profile scales it.
struct Postmark {
    id: &'static str,
    title: &'static str,
    source: &'static str,
    /// Exactly as the paper ran it.
    paper: PostmarkConfig,
    subdirs: Subdirs,
    /// (files, transactions) for tiny, quick and full.
    scale: [(u64, u64); 3],
    /// Why full differs from the paper, when it does.
    full_reason: &'static str,
    /// Where each parameter comes from, for the report.
    provenance: &'static [(&'static str, &'static str)],
}

const QUICK_REASON: &str = "quick profile: about a second per run on a FUSE peer";
const TINY_REASON: &str = "tiny profile: a fraction of a second per run";

/// Every PostMark workload, in report order.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    postmarks()
        .into_iter()
        .map(|w| Box::new(w) as Box<dyn Workload>)
        .collect()
}

fn postmarks() -> Vec<Postmark> {
    vec![
        Postmark {
            id: "postmark-conquest",
            title: "PostMark, Conquest configuration",
            source: "Conquest (USENIX 2002) §5.2; configuration as derived in bench/README.md",
            paper: PostmarkConfig {
                files: 10_000,
                transactions: 200_000,
                size_low_bytes: 512,
                size_high_bytes: 16_384,
                subdirectories: 100,
                read_block_bytes: 512,
                write_block_bytes: 512,
                buffering: false,
                bias_read: 8,
                bias_create: 5,
                seed: 42,
            },
            subdirs: Subdirs::SqrtOfFiles,
            scale: [(1_000, 1_000), (1_000, 2_500), (10_000, 40_000)],
            full_reason: "transactions scaled so a run on fuse-overlayfs (about 2,000 tx/s, and \
                          about 12 s to create the 10,000 files with 512 B writes) stays under \
                          about 40 s; the file set is the paper's",
            provenance: &[
                ("files, transactions, sizes", "§5.2: 10,000 files of 512 B–16 KB, 200,000 transactions"),
                ("subdirectories", "§5.2: one level, square root of the file count (100 for 10,000)"),
                ("read/write block", "§5.2: \"the transaction block size is 512 bytes\""),
                ("bias read 8", "§5.2: reads four times as likely as appends (postmark reads when rand%10 < 8)"),
                ("bias create 5", "§5.2: creates and deletes equally likely"),
                ("buffering false", "bench/README.md: open/read/write/close rather than stdio (the paper does not say)"),
                ("seed 42", "postmark's default; every peer gets the same operation sequence"),
            ],
        },
        ngs(
            "postmark-ngs-low",
            "PostMark, NGS Low workload",
            (1_000, 50_000),
            [(1_000, 1_000), (1_000, 2_000), (1_000, 50_000)],
            "",
        ),
        ngs(
            "postmark-ngs-medium",
            "PostMark, NGS Medium workload",
            (20_000, 50_000),
            [(1_500, 1_000), (2_000, 2_000), (20_000, 12_500)],
            "transactions scaled by 1/4 (as for Large, keeping Medium:Large = 1:2) so a run on \
             fuse-overlayfs (about 1,000 tx/s here, and about 11 s to create and delete the \
             20,000 files) stays under about 40 s; the file set is the paper's",
        ),
        ngs(
            "postmark-ngs-large",
            "PostMark, NGS Large workload",
            (20_000, 100_000),
            [(1_500, 2_000), (2_000, 4_000), (20_000, 25_000)],
            "transactions scaled by 1/4 (as for Medium, keeping Medium:Large = 1:2) so a run on \
             fuse-overlayfs (about 1,000 tx/s here, and about 11 s to create and delete the \
             20,000 files) stays under about 40 s; the file set is the paper's",
        ),
        Postmark {
            id: "postmark-mramfs",
            title: "PostMark, MRAMFS configuration",
            source: "MRAMFS (compressing NVRAM file system) §5, Figure 3",
            paper: PostmarkConfig {
                files: 50_000,
                transactions: 100_000,
                size_low_bytes: 1,
                size_high_bytes: 4_095,
                subdirectories: 100,
                read_block_bytes: 512,
                write_block_bytes: 512,
                buffering: true,
                bias_read: 5,
                bias_create: 5,
                seed: 42,
            },
            subdirs: Subdirs::Fixed,
            scale: [(1_500, 3_000), (2_000, 4_000), (50_000, 40_000)],
            full_reason: "transactions scaled so a run on fuse-overlayfs (about 19 s to create \
                          and delete the 50,000 files, then about 2,900 tx/s) stays under about \
                          40 s; the file set is the paper's",
            provenance: &[
                ("files, transactions, sizes", "§5: \"100,000 transactions, 50,000 files, and file sizes between 1 and 4095 bytes\""),
                ("subdirectories", "§5: the figures are for runs with 100 subdirectories"),
                ("everything else", "postmark's defaults (§5: \"no other changes were made\"): 512 B blocks, stdio buffering, bias read 5, bias create 5, seed 42"),
            ],
        },
    ]
}

/// NGS §3: files of 512 B–32 KiB, 10 subdirectories, read/write blocks "varied from 512 byte
/// to 8192 byte"; Table 1 gives the files and transactions.
fn ngs(
    id: &'static str,
    title: &'static str,
    (files, transactions): (u64, u64),
    scale: [(u64, u64); 3],
    full_reason: &'static str,
) -> Postmark {
    Postmark {
        id,
        title,
        source: "NGS (RAM-based storage evaluation) §3 and Table 1",
        paper: PostmarkConfig {
            files,
            transactions,
            size_low_bytes: 512,
            size_high_bytes: 32_768,
            subdirectories: 10,
            read_block_bytes: 4_096,
            write_block_bytes: 4_096,
            buffering: true,
            bias_read: 5,
            bias_create: 5,
            seed: 42,
        },
        subdirs: Subdirs::Fixed,
        scale,
        full_reason,
        provenance: &[
            ("files, transactions", "Table 1 (Low 1,000/50,000; Medium 20,000/50,000; Large 20,000/100,000)"),
            ("sizes, subdirectories", "§3: files of 512 B to 32,768 B, 10 subdirectories"),
            ("read/write block 4096", "§3 varied it from 512 B to 8,192 B without saying which value its figures use; one run needs one value: 4,096 B, the page size, inside that range"),
            ("everything else", "postmark's defaults (the paper names no other setting): stdio buffering, bias read 5, bias create 5, seed 42"),
        ],
    }
}

impl Postmark {
    fn config(&self, profile: Profile) -> PostmarkConfig {
        let (files, transactions) = profile.pick(self.scale[0], self.scale[1], self.scale[2]);
        let subdirectories = match self.subdirs {
            Subdirs::Fixed => self.paper.subdirectories,
            Subdirs::SqrtOfFiles => ((files as f64).sqrt().round() as u64).max(1),
        };
        PostmarkConfig {
            files,
            transactions,
            subdirectories,
            ..self.paper.clone()
        }
    }

    fn scaled_reason(&self, profile: Profile) -> &'static str {
        profile.pick(TINY_REASON, QUICK_REASON, self.full_reason)
    }

    fn timeout(profile: Profile) -> Duration {
        Duration::from_secs(profile.pick(120, 300, 1_200))
    }
}

/// "paper: 200,000; here: 40,000 (why)" or "10,000 (as the paper)".
fn versus_paper(here: u64, paper: u64, why: &str) -> String {
    if here == paper {
        format!("{} (as the paper)", group_digits(here))
    } else {
        format!(
            "paper: {}; here: {} ({why})",
            group_digits(paper),
            group_digits(here)
        )
    }
}

impl Workload for Postmark {
    fn id(&self) -> &'static str {
        self.id
    }

    fn title(&self) -> &'static str {
        self.title
    }

    fn source(&self) -> &'static str {
        self.source
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let cfg = self.config(profile);
        let why = self.scaled_reason(profile);
        let mut s = vec![
            ("postmark".to_string(), postmark_version().to_string()),
            (
                "command".to_string(),
                "postmark SCRATCH/postmark.cfg, run in the workload's directory on the peer \
                 with `set location .` (postmark garbles paths longer than ~76 characters)"
                    .to_string(),
            ),
            (
                "files".to_string(),
                versus_paper(cfg.files, self.paper.files, why),
            ),
            (
                "transactions".to_string(),
                versus_paper(cfg.transactions, self.paper.transactions, why),
            ),
            (
                "file sizes".to_string(),
                format!(
                    "{}–{} B, uniform (as the paper, at every profile)",
                    cfg.size_low_bytes, cfg.size_high_bytes
                ),
            ),
            (
                "subdirectories".to_string(),
                match self.subdirs {
                    Subdirs::Fixed => format!("{} (as the paper)", cfg.subdirectories),
                    Subdirs::SqrtOfFiles => format!(
                        "{} (square root of the file count, the paper's rule; paper: {})",
                        cfg.subdirectories, self.paper.subdirectories
                    ),
                },
            ),
            (
                "read/write block".to_string(),
                format!("{} B / {} B", cfg.read_block_bytes, cfg.write_block_bytes),
            ),
            ("buffering".to_string(), cfg.buffering.to_string()),
            (
                "bias read / bias create".to_string(),
                format!("{} / {}", cfg.bias_read, cfg.bias_create),
            ),
            ("seed".to_string(), cfg.seed.to_string()),
        ];
        for (what, from) in self.provenance {
            s.push((format!("from the paper: {what}"), from.to_string()));
        }
        s.push((
            "timing".to_string(),
            "phase times are the moments postmark's flushed progress markers ('Creating \
             files...', 'Performing transactions', 'Deleting files...', 'Deleting \
             subdirectories...') reach our pipe; they sit next to postmark's own time(2) \
             calls, whose 1-second figures are in the notes"
                .to_string(),
        ));
        s.push((
            "metrics".to_string(),
            "transactions = transactions / transaction phase; creation alone = files created \
             before the transactions / creation phase; creation mixed and deletion mixed = \
             files created or deleted during the transactions / transaction phase; deletion \
             alone = files deleted after them / deletion phase; read and write = postmark's \
             MiB read and written / whole run (first file created to last deleted), as \
             postmark computes them"
                .to_string(),
        ));
        s.push((
            "on host-fsync".to_string(),
            "postmark runs under an LD_PRELOAD shim whose close(2) and fclose(3) fsync every \
             regular file open for writing before closing it (compiled with cc before the run, \
             untimed); the fsyncs are counted and named in the notes"
                .to_string(),
        ));
        s.push((
            "failure".to_string(),
            "any postmark error message (stderr or stdout), \"out of files\", a non-zero exit, \
             or a report whose counts do not match the config fails the run"
                .to_string(),
        ));
        s.push((
            "config".to_string(),
            cfg.text(Path::new("<workload directory on the peer>")),
        ));
        s
    }

    fn check_tools(&self) -> Result<()> {
        postmark_path().map(|_| ())
    }

    fn runs_on_floor(&self) -> bool {
        true
    }

    fn fsyncs_each_file(&self) -> bool {
        true
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let cfg = self.config(ctx.profile);
        (ctx.progress)(&format!(
            "postmark: {} files, {} transactions",
            group_digits(cfg.files),
            group_digits(cfg.transactions)
        ));
        let shim = if ctx.fsync_each_file() {
            Some(FsyncShim::build(&ctx.scratch, ctx.cancel)?)
        } else {
            None
        };
        let run = run_postmark(
            &cfg,
            &ctx.dir,
            &ctx.scratch,
            ctx.cancel,
            Self::timeout(ctx.profile),
            ctx.peer.request_counter(),
            shim.as_ref(),
        )?;
        let mut outcome = run.outcome();
        if let Some(shim) = &shim {
            outcome.notes.push(fsync_note(
                shim.fsyncs()?,
                "postmark under the LD_PRELOAD shim: close and fclose fsync a file open for \
                 writing",
            ));
        }
        Ok(outcome)
    }
}

/// Where postmark is, or how to get it.
fn postmark_path() -> Result<PathBuf> {
    cmd::which("postmark")
        .ok_or_else(|| BenchError::Missing("postmark (apt-get install postmark)".into()))
}

/// "postmark 1.53-2 (Debian package; prints v1.51 : 8/14/01), /usr/bin/postmark", once.
fn postmark_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let Ok(path) = postmark_path() else {
            return "not installed (apt-get install postmark)".into();
        };
        let package = cmd::run(
            Command::new("dpkg-query").args(["-W", "-f", "${Version}", "postmark"]),
            Cancel::global(),
            Duration::from_secs(10),
        )
        .ok()
        .map(|o| o.stdout.trim().to_string())
        .filter(|v| !v.is_empty());
        // postmark prints its banner as the first line of any run; an empty config only
        // prints the banner and the "Reading configuration" line.
        let banner =
            std::env::temp_dir().join(format!("rampart-bench-postmark-{}.cfg", std::process::id()));
        let printed = std::fs::write(&banner, "quit\n").ok().and_then(|_| {
            let out = cmd::run(
                Command::new(&path).arg(&banner),
                Cancel::global(),
                Duration::from_secs(10),
            );
            let _ = std::fs::remove_file(&banner);
            out.ok()?
                .stdout
                .lines()
                .next()
                .map(|l| l.trim().to_string())
        });
        format!(
            "{}{}, {}",
            package.map_or(
                "postmark (package version unknown)".to_string(),
                |v| format!("postmark {v} (Debian package)")
            ),
            printed.map_or(String::new(), |b| format!("; prints \"{b}\"")),
            path.display()
        )
    })
}

/// The phase markers postmark flushes to stdout, in order. In postmark.c's `cli_run`,
/// "Creating files..." is flushed right after `time(&start_time)`, "Performing transactions"
/// right before `time(&t_start_time)`, "Deleting files..." right after `time(&t_end_time)`,
/// and "Deleting subdirectories..." (only with more than one subdirectory) right after
/// `time(&end_time)`; the report ("Time:") follows, and is missing when the transactions did
/// not complete.
const MARKERS: [&str; 5] = [
    "Creating files...",
    "Performing transactions",
    "Deleting files...",
    "Deleting subdirectories...",
    "Time:",
];
const CREATE: usize = 0;
const TRANSACT: usize = 1;
const DELETE: usize = 2;
const END_SUBDIRS: usize = 3;
const REPORT: usize = 4;

/// Finds where each of a few markers first appears in a stream read in chunks, a marker split
/// across two chunks included.
struct MarkerScan {
    markers: Vec<Vec<u8>>,
    found: Vec<bool>,
    /// The end of the stream so far, as long as the longest marker: with the next chunk it
    /// holds any marker that straddles the two.
    window: Vec<u8>,
}

impl MarkerScan {
    fn new(markers: &[&str]) -> MarkerScan {
        MarkerScan {
            markers: markers.iter().map(|m| m.as_bytes().to_vec()).collect(),
            found: vec![false; markers.len()],
            window: Vec::new(),
        }
    }

    /// The markers (as indices) that first appear with `chunk`.
    fn feed(&mut self, chunk: &[u8]) -> Vec<usize> {
        self.window.extend_from_slice(chunk);
        let mut new = Vec::new();
        for (i, marker) in self.markers.iter().enumerate() {
            if !self.found[i] && self.window.windows(marker.len()).any(|w| w == marker) {
                self.found[i] = true;
                new.push(i);
            }
        }
        let longest = self.markers.iter().map(Vec::len).max().unwrap_or(0);
        let keep_from = self.window.len().saturating_sub(longest);
        self.window.drain(..keep_from);
        new
    }
}

/// One postmark run: its report and the phase times we measured.
#[derive(Clone, Debug)]
pub struct PostmarkRun {
    pub config: PostmarkConfig,
    pub report: PostmarkReport,
    pub create_phase: Duration,
    pub transaction_phase: Duration,
    pub delete_phase: Duration,
    /// From the first file created to the last deleted (postmark's "total").
    pub total: Duration,
    /// FUSE requests during the transactions, by opcode, where the peer counts them (read
    /// when the transactions' start and end markers arrive); an error says why they are
    /// missing.
    pub requests: Option<std::result::Result<Snapshot, String>>,
    /// Where the counts come from, for the notes.
    pub requests_source: Option<&'static str>,
}

impl PostmarkRun {
    pub fn transactions_per_s(&self) -> f64 {
        self.config.transactions as f64 / self.transaction_phase.as_secs_f64()
    }

    /// Requests and daemon time per transaction, where the peer counts them, and the note
    /// that lists the counts.
    fn request_metrics(&self) -> (Vec<Metric>, Vec<String>) {
        let mut metrics = Vec::new();
        let mut request_notes = Vec::new();
        match &self.requests {
            Some(Ok(Snapshot {
                counts,
                daemon_seconds,
            })) => {
                let per_tx = |n: u64| n as f64 / self.config.transactions as f64;
                if let Some(seconds) = daemon_seconds {
                    // Arrival to answer, every request of the transactions: the daemon's own
                    // share of the time per transaction (the rest is the kernel's and the
                    // hand-offs').
                    metrics.push(Metric::lower(
                        "daemon time per transaction",
                        "µs/tx",
                        seconds * 1e6 / self.config.transactions as f64,
                    ));
                }
                let waited: u64 = counts
                    .iter()
                    .filter(|(op, _)| !NOT_WAITED.contains(&op.as_str()))
                    .map(|(_, n)| n)
                    .sum();
                let not_waited: u64 = counts.values().sum::<u64>() - waited;
                metrics.push(Metric::lower(
                    "requests/tx: waited",
                    "req/tx",
                    per_tx(waited),
                ));
                metrics.push(Metric::lower(
                    "requests/tx: not waited (forget)",
                    "req/tx",
                    per_tx(not_waited),
                ));
                for (op, &n) in counts {
                    metrics.push(Metric::lower(
                        format!("requests/tx: {op}"),
                        "req/tx",
                        per_tx(n),
                    ));
                }
                request_notes.push(format!(
                    "FUSE requests during the transactions ({}; read as the start and end \
                     markers arrived, so a few requests of the neighbouring phases may be \
                     counted): {}",
                    self.requests_source.unwrap_or("the peer's counters"),
                    counts
                        .iter()
                        .map(|(op, n)| format!("{op} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            Some(Err(e)) => request_notes.push(format!("FUSE requests not counted: {e}")),
            None => {}
        }
        (metrics, request_notes)
    }

    /// The metrics, headline first, and postmark's own figures as notes.
    pub fn outcome(&self) -> Outcome {
        let r = &self.report;
        let metrics = vec![
            Metric::rate(
                "transactions",
                "tx/s",
                self.config.transactions as f64,
                self.transaction_phase,
            ),
            Metric::rate(
                "creation alone",
                "files/s",
                r.created_alone as f64,
                self.create_phase,
            ),
            Metric::rate(
                "creation mixed",
                "files/s",
                r.created_mixed as f64,
                self.transaction_phase,
            ),
            Metric::rate(
                "deletion alone",
                "files/s",
                r.deleted_alone as f64,
                self.delete_phase,
            ),
            Metric::rate(
                "deletion mixed",
                "files/s",
                r.deleted_mixed as f64,
                self.transaction_phase,
            ),
            Metric::rate("read", "MiB/s", r.read_bytes / MIB, self.total),
            Metric::rate("write", "MiB/s", r.written_bytes / MIB, self.total),
        ];
        let mut metrics = metrics;
        // The time a transaction takes, to set beside the floor's and the kernel's.
        metrics.push(Metric::lower(
            "time per transaction",
            "µs/tx",
            self.transaction_phase.as_secs_f64() * 1e6 / self.config.transactions as f64,
        ));
        let (request_metrics, request_notes) = self.request_metrics();
        metrics.extend(request_metrics);
        let notes = vec![
            format!(
                "phases: creation {:.3} s, transactions {:.3} s, deletion {:.3} s, total {:.3} s",
                self.create_phase.as_secs_f64(),
                self.transaction_phase.as_secs_f64(),
                self.delete_phase.as_secs_f64(),
                self.total.as_secs_f64()
            ),
            format!(
                "postmark's counts: {} created ({} alone, {} mixed), {} read, {} appended, {} \
                 deleted ({} alone, {} mixed), {:.2} MiB read, {:.2} MiB written",
                r.created,
                r.created_alone,
                r.created_mixed,
                r.read_files,
                r.appended,
                r.deleted,
                r.deleted_alone,
                r.deleted_mixed,
                r.read_bytes / MIB,
                r.written_bytes / MIB
            ),
            format!(
                "postmark's own figures (1-second resolution): {} s total, {} s of \
                 transactions, {} tx/s",
                r.total_s, r.transactions_s, r.transactions_per_s
            ),
        ];
        let mut notes = notes;
        notes.extend(request_notes);
        Outcome { metrics, notes }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// The requests between the counts read at the transactions' start and end, and the pauses
/// taken to read them (at the start, at the end).
fn counts_at_both_ends(
    reads: impl Iterator<Item = (usize, std::result::Result<Snapshot, String>, Duration)>,
) -> (std::result::Result<Snapshot, String>, [Duration; 2]) {
    let (mut at, mut paused) = ([None, None], [Duration::ZERO; 2]);
    for (marker, counts, pause) in reads {
        let i = usize::from(marker == DELETE);
        at[i] = Some(counts);
        paused[i] = pause;
    }
    let requests = match at {
        [Some(before), Some(after)] => {
            before.and_then(|b| after.map(|a| requests::between(&b, &a)))
        }
        _ => Err("the counts were not read at both ends of the transactions".to_string()),
    };
    (requests, paused)
}

/// Reads the request counts with postmark (`pid`) stopped, and how long it was stopped.
/// Reading them asks the daemon, which on busy cores can take longer than a whole phase of a
/// small run; a postmark running on meanwhile would put its requests on the wrong side of the
/// count and its next marker in the same read as this one. The caller takes the pause out of
/// the phase it fell in.
fn counts_with_postmark_stopped(
    counter: &RequestCounter,
    pid: libc::pid_t,
) -> (std::result::Result<Snapshot, String>, Duration) {
    let paused_at = Instant::now();
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own child, not yet
    // reaped while its stdout is being read.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let counts = counter.read().map_err(|e| e.to_string());
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    (counts, paused_at.elapsed())
}

/// Writes `cfg` (location `dir`) to `scratch`, runs postmark on it and checks what it printed.
/// Public so that the modified-PostMark driver can check itself against the real postmark.
pub fn run_postmark(
    cfg: &PostmarkConfig,
    dir: &Path,
    scratch: &Path,
    cancel: &Cancel,
    timeout: Duration,
    counter: Option<RequestCounter>,
    fsync_shim: Option<&FsyncShim>,
) -> Result<PostmarkRun> {
    let postmark = postmark_path()?;
    let requests_source = counter.as_ref().map(RequestCounter::source);
    let config_path = scratch.join("postmark.cfg");
    // postmark garbles file names whose path passes ~76 characters (a fixed buffer), and
    // peers' paths are long: run it in the workload's directory with a relative location.
    std::fs::write(&config_path, cfg.text(Path::new(".")))
        .map_err(io_err("writing", &config_path))?;
    let mut command = Command::new(&postmark);
    command.arg(&config_path).current_dir(dir);
    if let Some(shim) = fsync_shim {
        shim.apply(&mut command);
    }
    let line = cmd::describe(&command);
    let (found_tx, found_rx) = mpsc::channel();
    let (counts_tx, counts_rx) = mpsc::channel();
    let mut scan = MarkerScan::new(&MARKERS);
    let out = cmd::run_watching(
        &mut command,
        cancel,
        timeout,
        move |chunk: &[u8], at: Instant, pid: libc::pid_t| {
            for marker in scan.feed(chunk) {
                let _ = found_tx.send((marker, at));
                // The counts at the transactions' start and end (after the time is taken).
                if let (Some(counter), TRANSACT | DELETE) = (&counter, marker) {
                    let (counts, paused) = counts_with_postmark_stopped(counter, pid);
                    let _ = counts_tx.send((marker, counts, paused));
                }
            }
        },
        WatchOptions {
            realtime_reader: true,
        },
    )?;
    // run_watching returned Ok, so the watcher has seen all of stdout and sent every marker.
    let mut marks = [None; MARKERS.len()];
    for (marker, at) in found_rx.try_iter() {
        marks[marker] = Some(at);
    }

    let failed = |detail: String| BenchError::Command {
        command: line.clone(),
        detail,
    };
    if let Some(detail) = complaint(&out) {
        return Err(failed(detail));
    }
    let report = parse_report(&out.stdout).map_err(|e| {
        failed(format!(
            "{e}; stdout ends: {}",
            cmd::last_lines(&out.stdout, 3)
        ))
    })?;
    report.check(cfg).map_err(failed)?;

    let at = |i: usize| {
        marks[i].ok_or_else(|| failed(format!("postmark never printed {:?}", MARKERS[i])))
    };
    let (create, transact, delete) = (at(CREATE)?, at(TRANSACT)?, at(DELETE)?);
    // Without subdirectories postmark has no "Deleting subdirectories..."; the report follows.
    let end = marks[END_SUBDIRS].map_or_else(|| at(REPORT), Ok)?;
    let phase = |name: &str, from: Instant, to: Instant| {
        let d = to.saturating_duration_since(from);
        if d.is_zero() {
            // Both markers arrived in one read: the phase was shorter than we can time.
            Err(failed(format!(
                "the {name} phase was too short to time (its start and end markers arrived \
                 together); use more files or transactions"
            )))
        } else {
            Ok(d)
        }
    };
    let (requests, paused) = match requests_source {
        Some(_) => {
            let (requests, paused) = counts_at_both_ends(counts_rx.try_iter());
            (Some(requests), paused)
        }
        None => (None, [Duration::ZERO; 2]),
    };
    Ok(PostmarkRun {
        config: cfg.clone(),
        requests,
        requests_source,
        report,
        create_phase: phase("creation", create, transact)?,
        transaction_phase: phase("transaction", transact, delete)?.saturating_sub(paused[0]),
        delete_phase: phase("deletion", delete, end)?.saturating_sub(paused[1]),
        total: phase("whole", create, end)?.saturating_sub(paused[0] + paused[1]),
    })
}

/// What postmark complained about, if anything. It reports I/O errors ("Error: cannot open
/// ... for writing") on stderr and still exits 0, so any complaint fails the run.
fn complaint(out: &cmd::Output) -> Option<String> {
    let first_complaint = out
        .stderr
        .lines()
        .chain(out.stdout.lines())
        .map(str::trim)
        .find(|l| {
            l.starts_with("Error")
                || l.contains("out of files")
                || l.starts_with("invalid")
                || l.contains("decrease the number")
        });
    if let Some(first) = first_complaint {
        return Some(format!(
            "postmark reported errors ({} line(s) on stderr), first: {first}",
            out.stderr_lines
        ));
    }
    if !out.stderr.trim().is_empty() {
        return Some(format!(
            "postmark wrote to stderr: {}",
            out.stderr.lines().next().unwrap_or_default()
        ));
    }
    None
}

/// postmark's verbose report (after "Time:").
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PostmarkReport {
    pub total_s: u64,
    pub transactions_s: u64,
    pub transactions_per_s: u64,
    pub created: u64,
    pub created_alone: u64,
    pub created_mixed: u64,
    pub read_files: u64,
    pub appended: u64,
    pub deleted: u64,
    pub deleted_alone: u64,
    pub deleted_mixed: u64,
    pub read_bytes: f64,
    pub written_bytes: f64,
}

impl PostmarkReport {
    /// The counts must add up and match the config: a run that silently lost files is no
    /// measurement.
    fn check(&self, cfg: &PostmarkConfig) -> std::result::Result<(), String> {
        // Each transaction is one create-or-delete and one read-or-append; postmark skips an
        // append to a file already at the largest size, so reads + appends may fall short.
        let create_or_delete = self.created_mixed + self.deleted_mixed;
        let read_or_append = self.read_files + self.appended;
        let problems = [
            (
                self.created_alone != cfg.files,
                "files created before the transactions",
            ),
            (
                self.created != self.created_alone + self.created_mixed,
                "created = alone + mixed",
            ),
            (
                self.deleted != self.deleted_alone + self.deleted_mixed,
                "deleted = alone + mixed",
            ),
            (self.created != self.deleted, "every created file deleted"),
            (
                create_or_delete != cfg.transactions,
                "one create or delete per transaction",
            ),
            (
                read_or_append > cfg.transactions,
                "at most one read or append per transaction",
            ),
            (read_or_append == 0, "some reads or appends"),
        ];
        match problems.iter().find(|(bad, _)| *bad) {
            Some((_, what)) => Err(format!(
                "postmark's report fails the check \"{what}\": {self:?}"
            )),
            None => Ok(()),
        }
    }
}

/// Parses postmark's verbose report. The two "Mixed with transactions" lines are told apart by
/// the count line above them (created, then deleted).
pub fn parse_report(stdout: &str) -> Result<PostmarkReport> {
    let Some(start) = stdout.find("Time:") else {
        return Err(BenchError::Other(
            "postmark printed no report (no \"Time:\")".into(),
        ));
    };
    let mut r = PostmarkReport::default();
    let mut seen = 0u32;
    let mut mixed_owner = "";
    for line in stdout[start..].lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        // "(N per second)"
        let per_second = || {
            let open = line.find('(')?;
            line[open + 1..]
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        };
        match words.as_slice() {
            [_, "seconds", "total"] => {
                r.total_s = num(0).unwrap_or_default();
                seen |= 1;
            }
            [_, "seconds", "of", "transactions", ..] => {
                r.transactions_s = num(0).unwrap_or_default();
                r.transactions_per_s = per_second().unwrap_or_default();
                seen |= 2;
            }
            [_, "created", ..] => {
                r.created = num(0).unwrap_or_default();
                mixed_owner = "created";
                seen |= 4;
            }
            ["Creation", "alone:", ..] => {
                r.created_alone = num(2).unwrap_or_default();
                seen |= 8;
            }
            ["Mixed", "with", "transactions:", ..] => {
                let n = num(3).unwrap_or_default();
                match mixed_owner {
                    "created" => {
                        r.created_mixed = n;
                        seen |= 16;
                    }
                    "deleted" => {
                        r.deleted_mixed = n;
                        seen |= 32;
                    }
                    _ => {}
                }
            }
            [_, "read", ..] if num(0).is_some() => {
                r.read_files = num(0).unwrap_or_default();
                seen |= 64;
            }
            [_, "appended", ..] => {
                r.appended = num(0).unwrap_or_default();
                seen |= 128;
            }
            [_, "deleted", ..] => {
                r.deleted = num(0).unwrap_or_default();
                mixed_owner = "deleted";
                seen |= 256;
            }
            ["Deletion", "alone:", ..] => {
                r.deleted_alone = num(2).unwrap_or_default();
                seen |= 512;
            }
            [amount, unit, "read", ..] => {
                r.read_bytes = bytes(amount, unit).unwrap_or(f64::NAN);
                seen |= 1024;
            }
            [amount, unit, "written", ..] => {
                r.written_bytes = bytes(amount, unit).unwrap_or(f64::NAN);
                seen |= 2048;
            }
            _ => {}
        }
    }
    if seen != 4095 || !r.read_bytes.is_finite() || !r.written_bytes.is_finite() {
        return Err(BenchError::Other(format!(
            "postmark's report is incomplete or in an unknown format (lines found: {seen:#b} of 0b111111111111)"
        )));
    }
    Ok(r)
}

/// "147.75" "megabytes" → bytes (postmark's units are powers of 1024).
fn bytes(amount: &str, unit: &str) -> Option<f64> {
    let scale = match unit {
        "bytes" => 1.0,
        "kilobytes" => 1024.0,
        "megabytes" => MIB,
        "gigabytes" => 1024.0 * MIB,
        _ => return None,
    };
    amount.parse::<f64>().ok().map(|a| a * scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::run_tiny;

    const SAMPLE: &str = "PostMark v1.51 : 8/14/01\n\
        Creating subdirectories...Done\n\
        Creating files...Done\n\
        Performing transactions..........Done\n\
        Deleting files...Done\n\
        Deleting subdirectories...Done\n\
        Time:\n\
        \t1 seconds total\n\
        \t1 seconds of transactions (20000 per second)\n\
        \n\
        Files:\n\
        \t10989 created (10989 per second)\n\
        \t\tCreation alone: 1000 files (1000 per second)\n\
        \t\tMixed with transactions: 9989 files (9989 per second)\n\
        \t16002 read (16002 per second)\n\
        \t3995 appended (3995 per second)\n\
        \t10989 deleted (10989 per second)\n\
        \t\tDeletion alone: 978 files (978 per second)\n\
        \t\tMixed with transactions: 10011 files (10011 per second)\n\
        \n\
        Data:\n\
        \t147.75 megabytes read (147.75 megabytes per second)\n\
        \t101.32 kilobytes written (101.32 kilobytes per second)\n";

    #[test]
    fn parses_the_verbose_report() {
        let r = parse_report(SAMPLE).unwrap();
        assert_eq!(r.total_s, 1);
        assert_eq!(r.transactions_per_s, 20_000);
        assert_eq!(
            (r.created, r.created_alone, r.created_mixed),
            (10_989, 1_000, 9_989)
        );
        assert_eq!((r.read_files, r.appended), (16_002, 3_995));
        assert_eq!(
            (r.deleted, r.deleted_alone, r.deleted_mixed),
            (10_989, 978, 10_011)
        );
        assert!((r.read_bytes - 147.75 * MIB).abs() < 1.0);
        assert!((r.written_bytes - 101.32 * 1024.0).abs() < 1.0);
        let cfg = PostmarkConfig {
            files: 1_000,
            transactions: 20_000,
            size_low_bytes: 512,
            size_high_bytes: 16_384,
            subdirectories: 10,
            read_block_bytes: 512,
            write_block_bytes: 512,
            buffering: false,
            bias_read: 8,
            bias_create: 5,
            seed: 42,
        };
        r.check(&cfg).unwrap();
        assert!(r
            .check(&PostmarkConfig {
                files: 999,
                ..cfg.clone()
            })
            .is_err());
        assert!(r
            .check(&PostmarkConfig {
                transactions: 19_999,
                ..cfg
            })
            .is_err());
    }

    #[test]
    fn markers_are_found_once_even_split_across_chunks() {
        let mut scan = MarkerScan::new(&MARKERS);
        assert_eq!(
            scan.feed(b"PostMark v1.51\nCreating fi"),
            Vec::<usize>::new()
        );
        assert_eq!(
            scan.feed(b"les...Done\nPerforming transactions"),
            [CREATE, TRANSACT]
        );
        assert_eq!(
            scan.feed(b"....Done\nCreating files..."),
            Vec::<usize>::new()
        );
        assert_eq!(
            scan.feed(b"Deleting files...Done\nTime:\n"),
            [DELETE, REPORT]
        );
        assert!(scan.window.len() <= MARKERS.iter().map(|m| m.len()).max().unwrap());
    }

    #[test]
    fn an_empty_data_section_parses_as_zero_bytes() {
        let text = SAMPLE.replace(
            "147.75 megabytes read (147.75 megabytes per second)",
            "0.000000 bytes read (0.000000 bytes per second)",
        );
        assert_eq!(parse_report(&text).unwrap().read_bytes, 0.0);
    }

    #[test]
    fn an_incomplete_report_is_an_error() {
        assert!(parse_report("Creating files...").is_err());
        let cut = &SAMPLE[..SAMPLE.find("Data:").unwrap()];
        assert!(parse_report(cut).is_err());
    }

    #[test]
    fn conquest_full_config_is_the_readme_one_with_scaled_transactions() {
        let all = workloads();
        let conquest = all.iter().find(|w| w.id() == "postmark-conquest").unwrap();
        let settings = conquest.settings(Profile::Full);
        let config = &settings.iter().find(|(k, _)| k == "config").unwrap().1;
        for line in [
            "set size 512 16384",
            "set number 10000",
            "set seed 42",
            "set transactions 40000",
            "set subdirectories 100",
            "set read 512",
            "set write 512",
            "set buffering false",
            "set bias read 8",
            "set bias create 5",
            "set report verbose",
        ] {
            assert!(
                config.lines().any(|l| l == line),
                "{line} missing from\n{config}"
            );
        }
        let tx = &settings
            .iter()
            .find(|(k, _)| k == "transactions")
            .unwrap()
            .1;
        assert!(tx.contains("paper: 200,000; here: 40,000"), "{tx}");
    }

    #[test]
    fn every_profile_keeps_the_papers_file_sizes_and_never_exceeds_it() {
        for w in workloads() {
            for p in [Profile::Tiny, Profile::Quick, Profile::Full] {
                let settings = w.settings(p);
                let sizes = &settings.iter().find(|(k, _)| k == "file sizes").unwrap().1;
                assert!(sizes.contains("as the paper"), "{}: {sizes}", w.id());
            }
        }
        for w in postmarks() {
            for p in [Profile::Tiny, Profile::Quick, Profile::Full] {
                let cfg = w.config(p);
                assert!(cfg.files <= w.paper.files, "{} {p:?}", w.id);
                assert!(cfg.transactions <= w.paper.transactions, "{} {p:?}", w.id);
                assert_eq!(
                    (cfg.size_low_bytes, cfg.size_high_bytes),
                    (w.paper.size_low_bytes, w.paper.size_high_bytes)
                );
            }
            // Full keeps the paper's file set; only transactions are scaled.
            assert_eq!(w.config(Profile::Full).files, w.paper.files, "{}", w.id);
            let full = w.config(Profile::Full).transactions;
            assert_eq!(
                full == w.paper.transactions,
                w.full_reason.is_empty(),
                "{}",
                w.id
            );
        }
        let ids: Vec<&str> = workloads().iter().map(|w| w.id()).collect();
        assert_eq!(
            ids,
            [
                "postmark-conquest",
                "postmark-ngs-low",
                "postmark-ngs-medium",
                "postmark-ngs-large",
                "postmark-mramfs"
            ]
        );
    }

    #[test]
    fn settings_name_every_parameter() {
        for w in workloads() {
            let settings = w.settings(Profile::Full);
            let keys: Vec<&str> = settings.iter().map(|(k, _)| k.as_str()).collect();
            for key in [
                "postmark",
                "files",
                "transactions",
                "file sizes",
                "subdirectories",
                "read/write block",
                "buffering",
                "bias read / bias create",
                "seed",
                "timing",
                "metrics",
                "config",
            ] {
                assert!(keys.contains(&key), "{}: no {key:?} in {keys:?}", w.id());
            }
            for (k, v) in &settings {
                println!("{}: {k}: {v}", w.id());
            }
        }
    }

    #[test]
    fn every_configuration_runs_at_the_tiny_profile() {
        if postmark_path().is_err() {
            println!("skipped: postmark is not installed (apt-get install postmark)");
            return;
        }
        for w in workloads() {
            let started = Instant::now();
            let outcome = run_tiny(w.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", w.id()));
            let names: Vec<&str> = outcome.metrics.iter().map(|m| m.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "transactions",
                    "creation alone",
                    "creation mixed",
                    "deletion alone",
                    "deletion mixed",
                    "read",
                    "write",
                    "time per transaction"
                ],
                "{}",
                w.id()
            );
            for m in &outcome.metrics {
                assert!(m.value.is_finite() && m.value > 0.0, "{}: {m:?}", w.id());
                // Plausible for any machine: below 10 million operations or 1 TiB a second.
                assert!(m.value < 1e7, "{}: {m:?}", w.id());
            }
            assert!(outcome
                .notes
                .iter()
                .any(|n| n.contains("postmark's counts")));
            println!(
                "{}: {:.0} tx/s in {:.2} s",
                w.id(),
                outcome.metrics[0].value,
                started.elapsed().as_secs_f64()
            );
        }
    }

    /// Times every PostMark workload at `BENCH_PROFILE` (quick or full) on the folder
    /// `BENCH_DIR` (e.g. a rampart or fuse-overlayfs mount), optionally only those whose id
    /// contains `BENCH_ONLY`:
    /// `BENCH_DIR=/mnt BENCH_PROFILE=quick cargo test -p rampart-bench --lib
    /// postmark::tests::time_a_profile -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn time_a_profile() {
        crate::testing::time_a_profile_from_env(workloads());
    }

    #[test]
    fn postmark_errors_fail_the_run() {
        if postmark_path().is_err() {
            println!("skipped: postmark is not installed (apt-get install postmark)");
            return;
        }
        let scratch = crate::testing::shm_tempdir();
        let cfg = PostmarkConfig {
            files: 20,
            transactions: 20,
            size_low_bytes: 1,
            size_high_bytes: 100,
            subdirectories: 2,
            read_block_bytes: 512,
            write_block_bytes: 512,
            buffering: true,
            bias_read: 5,
            bias_create: 5,
            seed: 42,
        };
        // Files where postmark wants its subdirectories: it cannot create its files there.
        let blocked = scratch.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        for sub in ["s0", "s1"] {
            std::fs::write(blocked.join(sub), b"in the way").unwrap();
        }
        let err = run_postmark(
            &cfg,
            &blocked,
            scratch.path(),
            Cancel::global(),
            Duration::from_secs(30),
            None,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("Error: cannot"), "{err}");
    }
}

//! `rampart bench`: the papers' benchmarks on rampart and its peers (crates/rampart-bench).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rampart_bench::profile::Profile;
use rampart_bench::{BenchError, BenchOptions};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The quick profile: every workload on every peer in under 3 minutes (the default).
    #[arg(long, conflicts_with_all = ["full", "profile"])]
    quick: bool,
    /// The full profile: paper-sized runs, three repetitions (the published numbers).
    #[arg(long, conflicts_with = "profile")]
    full: bool,
    /// A profile by name: tiny (seconds; for tests), quick, full.
    #[arg(long, value_parser = ["tiny", "quick", "full"])]
    profile: Option<String>,
    /// Only these workloads (comma-separated ids or id prefixes, e.g. postmark,fio-4k-random).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Only these peers (comma-separated): rampart, rampart-temporary (every new file
    /// TEMPORARY by a rule of its rampart.toml), tmpfs, ext4-ram, xfs-ram, btrfs-ram, ext4-disk, host (the file system under --disk-dir, used directly), fuse-overlayfs, floor
    /// (a FUSE server that does nothing useful: the FUSE floor), juicefs. Run only when
    /// named: rampart-safe, rampart-eventual (every new file SAFE or EVENTUAL by a rule),
    /// rampart-edited (the edit session's files EDITED), ext4-sync (ext4-disk mounted
    /// -o sync), host-fsync (host, the workloads fsync each file before closing it).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Where the report goes [default: ./rampart-bench-report-<unix time>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Repetitions of every run [default: 1 for tiny and quick, 3 for full].
    #[arg(long)]
    repetitions: Option<usize>,
    /// A folder on the real disk for ext4-disk's image and rampart's store.
    #[arg(long, default_value = "/var/tmp")]
    disk_dir: PathBuf,
    /// An extra option for `rampart mount` (repeatable), e.g. --rampart-opt=--commit-interval=1s.
    #[arg(long = "rampart-opt", allow_hyphen_values = true)]
    rampart_opts: Vec<String>,
    /// List the workloads and peers and exit.
    #[arg(long)]
    list: bool,
    /// Check a written report (numbers, plots, results.json) instead of running.
    #[arg(long, value_name = "DIR")]
    validate: Option<PathBuf>,
}

pub fn run(args: BenchArgs) -> ExitCode {
    if args.list {
        list();
        return ExitCode::SUCCESS;
    }
    if let Some(dir) = &args.validate {
        return validate(dir);
    }
    let profile = if args.full {
        Profile::Full
    } else if let Some(p) = &args.profile {
        Profile::parse(p).unwrap_or(Profile::Quick)
    } else {
        Profile::Quick
    };
    let rampart_bin = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rampart bench: cannot find the rampart executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = args.out.clone().unwrap_or_else(default_out);
    let opts = BenchOptions {
        profile,
        only: args.only,
        peers: args.peers,
        out,
        repetitions: args.repetitions,
        rampart_bin,
        rampart_args: args.rampart_opts,
        disk_dir: args.disk_dir,
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
    };
    match rampart_bench::run(&opts) {
        Ok((results, report)) => finished(&results, &report),
        Err(BenchError::Interrupted) => {
            eprintln!("rampart bench: interrupted; everything was torn down");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("rampart bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--list`: the workloads and peers.
fn list() {
    outln!("workloads:");
    for w in rampart_bench::workload::all() {
        outln!("  {:<24} {} — {}", w.id(), w.title(), w.source());
    }
    outln!("peers:");
    for p in rampart_bench::peer::PeerKind::ALL {
        if rampart_bench::peer::PeerKind::DEFAULT.contains(&p) {
            outln!("  {}", p.id());
        } else {
            outln!("  {:<24} (run only when named in --peers)", p.id());
        }
    }
}

/// `--validate DIR`: checks a written report.
fn validate(dir: &Path) -> ExitCode {
    match rampart_bench::report::validate(dir) {
        Ok(problems) if problems.is_empty() => {
            outln!(
                "{}: the report is complete and every figure is a number",
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Ok(problems) => {
            for p in problems {
                eprintln!("rampart bench: {p}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("rampart bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Says where the report is and which runs failed; 130 when the run was interrupted.
fn finished(results: &rampart_bench::results::RunResults, report: &Path) -> ExitCode {
    outln!("report: {}", report.display());
    let failed: Vec<String> = results
        .workloads
        .iter()
        .flat_map(|w| {
            w.cells.iter().filter_map(move |c| match &c.status {
                rampart_bench::results::CellStatus::Failed(_) => {
                    Some(format!("{} on {}", w.id, c.peer.id()))
                }
                _ => None,
            })
        })
        .collect();
    if !failed.is_empty() {
        eprintln!(
            "rampart bench: {} run(s) failed, with the reasons in the report: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    if results.interrupted {
        eprintln!("rampart bench: interrupted; everything was torn down and the report is partial");
        return ExitCode::from(130);
    }
    ExitCode::SUCCESS
}

fn default_out() -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from(format!("rampart-bench-report-{now}"))
}

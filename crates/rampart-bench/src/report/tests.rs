//! The report from synthetic results. The numbers here are test data for the report's
//! structure, not benchmark results.

use std::path::Path;

use super::{format, validate, write};
use crate::machine::Machine;
use crate::peer::PeerKind;
use crate::profile::Profile;
use crate::results::{Cell, CellStatus, PeerResult, RunResults, WorkloadResult};
use crate::workload::{Metric, Outcome, PlotKind};

fn outcome(metrics: Vec<Metric>) -> Outcome {
    Outcome {
        metrics,
        notes: Vec::new(),
    }
}

fn measured(peer: PeerKind, runs: Vec<Outcome>) -> Cell {
    let run_seconds = (0..runs.len()).map(|i| 1.0 + i as f64 * 0.25).collect();
    Cell {
        peer,
        status: CellStatus::Measured,
        runs,
        run_seconds,
        errors: Vec::new(),
    }
}

fn not_measured(peer: PeerKind, status: CellStatus) -> Cell {
    Cell {
        peer,
        status,
        runs: Vec::new(),
        run_seconds: Vec::new(),
        errors: Vec::new(),
    }
}

/// Per-phase rates, three repetitions: create/read in ops/s, and a lower-is-better total.
fn phase_run(create: f64, read: f64, total_s: f64) -> Outcome {
    outcome(vec![
        Metric::higher("create", "ops/s", create),
        Metric::higher("read", "ops/s", read),
        Metric::lower("total", "s", total_s),
    ])
}

fn curve_run(iops: [f64; 4]) -> Outcome {
    outcome(
        [1.0, 2.0, 4.0, 8.0]
            .iter()
            .zip(iops)
            .map(|(&threads, v)| Metric::higher("randread", "IOPS", v).at(threads))
            .collect(),
    )
}

fn synthetic(interrupted: bool) -> RunResults {
    let peers = [PeerKind::Rampart, PeerKind::Tmpfs, PeerKind::FuseOverlay];
    let mut rampart_runs = vec![
        phase_run(1000.0, 50_000.0, 2.0),
        phase_run(1100.0, 52_000.0, 2.5),
        phase_run(1200.0, 51_000.0, 3.0),
    ];
    rampart_runs[0]
        .notes
        .push("postmark reported 3 errors".to_string());
    let phases = WorkloadResult {
        id: "sprite-small",
        title: "Sprite LFS small-file",
        source: "Sprite LFS (SOSP 1991) §5.1",
        settings: vec![
            ("files".into(), "10,000".into()),
            ("file size".into(), "1 KiB".into()),
        ],
        plot: PlotKind::PhaseBars,
        cells: vec![
            measured(PeerKind::Rampart, rampart_runs),
            measured(
                PeerKind::Tmpfs,
                vec![
                    phase_run(2000.0, 80_000.0, 5.0),
                    phase_run(2200.0, 81_000.0, 5.0),
                    phase_run(2100.0, 79_000.0, 5.0),
                ],
            ),
            not_measured(
                PeerKind::FuseOverlay,
                CellStatus::Failed("mount failed: fusermount | permission denied".into()),
            ),
        ],
    };
    let curves = WorkloadResult {
        id: "fio-randread",
        title: "4 KiB random reads",
        source: "DFS (FAST 2010) §4",
        settings: vec![("block size".into(), "4 KiB".into())],
        plot: PlotKind::Lines { x_label: "threads" },
        cells: vec![
            measured(
                PeerKind::Rampart,
                vec![
                    curve_run([10_000.0, 19_000.0, 30_000.0, 31_000.0]),
                    curve_run([11_000.0, 20_000.0, 32_000.0, 33_000.0]),
                    curve_run([12_000.0, 21_000.0, 34_000.0, 35_000.0]),
                ],
            ),
            // Two of three repetitions: the report must say the median rests on two.
            measured(
                PeerKind::Tmpfs,
                vec![
                    curve_run([40_000.0, 70_000.0, 90_000.0, 95_000.0]),
                    curve_run([42_000.0, 72_000.0, 92_000.0, 97_000.0]),
                ],
            ),
            not_measured(
                PeerKind::FuseOverlay,
                CellStatus::Unsupported("needs O_DIRECT, which fuse-overlayfs refuses".into()),
            ),
        ],
    };
    let table_only = WorkloadResult {
        id: "recovery",
        title: "Recovery time",
        source: "Conquest (USENIX 2002) §5.4",
        settings: vec![("files".into(), "1,000".into())],
        plot: PlotKind::None,
        cells: vec![
            measured(
                PeerKind::Rampart,
                vec![
                    outcome(vec![Metric::lower("mount", "ms", 12.5)]),
                    outcome(vec![Metric::lower("mount", "ms", 13.5)]),
                    outcome(vec![Metric::lower("mount", "ms", 11.5)]),
                ],
            ),
            not_measured(
                PeerKind::Tmpfs,
                CellStatus::Unsupported("volatile: nothing to recover".into()),
            ),
            not_measured(PeerKind::FuseOverlay, CellStatus::NotRun),
        ],
    };
    RunResults {
        started: "2026-11-22 14:03:05".into(),
        duration_s: 151.0,
        profile: Profile::Full,
        repetitions: 3,
        command_line: "rampart bench --full --out /tmp/x".into(),
        procedure: vec![("caches".into(), "dropped before every run".into())],
        machine: Machine {
            facts: vec![("CPU".into(), "synthetic test CPU (2 vCPUs)".into())],
        },
        peers: peers
            .iter()
            .map(|&kind| PeerResult {
                kind,
                id: kind.id(),
                settings: if kind == PeerKind::FuseOverlay {
                    Vec::new()
                } else {
                    vec![("mount options".into(), format!("{} defaults", kind.id()))]
                },
                setup_error: (kind == PeerKind::FuseOverlay)
                    .then(|| "fusermount: permission denied".to_string()),
            })
            .collect(),
        workloads: vec![phases, curves, table_only],
        interrupted,
    }
}

/// The part of the report between `### <title>` and the next `### `.
fn section<'r>(report: &'r str, title: &str) -> &'r str {
    let start = report
        .find(&format!("### {title}"))
        .unwrap_or_else(|| panic!("no section {title}"));
    let rest = &report[start + 4..];
    let end = rest
        .find("\n### ")
        .or_else(|| rest.find("\n## "))
        .unwrap_or(rest.len());
    &rest[..end]
}

fn is_png(path: &Path) -> bool {
    std::fs::read(path)
        .map(|b| b.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]))
        .unwrap_or(false)
}

#[test]
fn report_has_every_section_figure_ratio_reason_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let results = synthetic(false);
    let path = write(&results, dir.path()).unwrap();
    assert_eq!(path, dir.path().join("report.md"));
    let report = std::fs::read_to_string(&path).unwrap();

    for heading in [
        "# rampart bench — 2026-11-22 14:03:05, full profile",
        "## Summary",
        "## Peers",
        "## Workloads",
        "## Machine",
        "## Per-run times",
        "### rampart",
        "### tmpfs",
        "### fuse-overlayfs",
    ] {
        assert!(report.contains(heading), "missing {heading:?}");
    }
    assert!(report.contains("rampart bench --full --out /tmp/x"));
    assert!(
        report.contains("| caches | dropped before every run |"),
        "the procedure is missing"
    );
    assert!(report.contains("2 min 31 s"));
    assert!(report.contains("synthetic test CPU (2 vCPUs)"));
    assert!(report.contains("**Setup failed:** fusermount: permission denied"));
    assert!(!report.contains("interrupted (Ctrl-C"));

    // Every measured median is in its workload's table.
    for workload in &results.workloads {
        let text = section(&report, workload.title);
        for cell in &workload.cells {
            for (key, value) in cell.summaries() {
                let written = format::number(value.summary.median);
                assert!(
                    text.contains(&written),
                    "{} on {:?}: {key:?} median {written} missing",
                    workload.id,
                    cell.peer
                );
            }
        }
    }

    // By hand: rampart's create is 1000/1100/1200 → median 1,100, spread 200/1100 = 18 %.
    let sprite = section(&report, "Sprite LFS small-file");
    assert!(sprite.contains("| create | ops/s ↑ | 1,100 (±18 %) | 2,100 (±9.5 %) |"));
    // Ratios: create is higher-is-better, rampart/tmpfs = 1100/2100 = 0.524; total is
    // lower-is-better, tmpfs/rampart = 5.0/2.5 = 2.00.
    assert!(
        sprite.contains("| create | rampart / peer | 0.524× |"),
        "{sprite}"
    );
    assert!(
        sprite.contains("| total | peer / rampart | 2.00× |"),
        "{sprite}"
    );
    // The failed peer: its reason once below the table, pipes escaped in the note.
    assert!(sprite.contains("failed: mount failed: fusermount \\| permission denied"));
    assert_eq!(
        sprite.matches("mount failed").count(),
        1,
        "once, below the table"
    );
    assert!(sprite.contains("postmark reported 3 errors (repetition 1)"));
    assert!(sprite
        .contains("![Sprite LFS small-file: median per phase and peer](plots/sprite-small.png)"));

    let fio = section(&report, "4 KiB random reads");
    assert!(
        fio.contains("| randread @ 8 threads | IOPS ↑ | 33,000 (±12 %) |"),
        "{fio}"
    );
    assert!(fio.contains("unsupported: needs O_DIRECT, which fuse-overlayfs refuses"));
    assert!(fio.contains("median of 2 of 3 repetitions"));
    // tmpfs at 8 threads: (95,000 + 97,000) / 2 = 96,000; rampart/tmpfs = 33,000/96,000.
    assert!(fio.contains(&format!("{}×", format::number(33_000.0 / 96_000.0))));
    assert!(fio.contains("](plots/fio-randread.png)"));
    assert!(fio.contains("](plots/fio-randread-speedup.png)"));

    let recovery = section(&report, "Recovery time");
    assert!(recovery.contains("unsupported: volatile: nothing to recover"));
    assert!(recovery.contains("not run"));
    assert!(
        !recovery.contains("!["),
        "a table-only workload has no plot"
    );

    // The summary: the headline of a curve is its largest x.
    let summary = &report[report.find("## Summary").unwrap()..report.find("## Peers").unwrap()];
    assert!(summary.contains("randread @ 8 threads"));
    assert!(
        summary.contains("| mount | ms ↓ | 12.5 (±16 %) |"),
        "{summary}"
    );

    for plot in [
        "sprite-small.png",
        "fio-randread.png",
        "fio-randread-speedup.png",
    ] {
        assert!(is_png(&dir.path().join("plots").join(plot)), "{plot}");
    }
    assert!(!dir.path().join("plots/recovery.png").exists());

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(json["workloads"].as_array().unwrap().len(), 3);

    let problems = validate(dir.path()).unwrap();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn interrupted_run_says_so_at_the_top() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&synthetic(true), dir.path()).unwrap();
    let report = std::fs::read_to_string(path).unwrap();
    let warning = report.find("**Warning: this run was interrupted").unwrap();
    assert!(warning < report.find("## Summary").unwrap());
    assert!(report.contains("not run: the run was interrupted"));
    assert!(validate(dir.path()).unwrap().is_empty());
}

#[test]
fn validate_finds_broken_figures_reasons_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&synthetic(false), dir.path()).unwrap();
    let good = std::fs::read_to_string(&path).unwrap();
    let check = |text: &str| {
        std::fs::write(&path, text).unwrap();
        validate(dir.path()).unwrap()
    };

    let problems = check(&good.replace("| 1,100 (±18 %) |", "| 1,101 (±18 %) |"));
    assert!(
        problems.iter().any(|p| p.contains("1,101 is not a median")),
        "{problems:#?}"
    );
    let problems = check(&good.replace("| 0.524× |", "| 0.5× |"));
    assert!(
        problems.iter().any(|p| p.contains("0.5 is not a median")),
        "{problems:#?}"
    );
    let problems = check(&good.replace("| 1,100 (±18 %) |", "| NaN |"));
    assert!(
        problems.iter().any(|p| p.contains("not a finite number")),
        "{problems:#?}"
    );
    let problems = check(&good.replace("| 2,100 (±9.5 %) |", "| — |"));
    assert!(
        problems.iter().any(|p| p.contains("without a reason")),
        "{problems:#?}"
    );
    let problems = check(&good.replace("## Machine", "## Computer"));
    assert!(problems
        .iter()
        .any(|p| p.contains("\"## Machine\" missing")));

    std::fs::write(&path, &good).unwrap();
    std::fs::remove_file(dir.path().join("plots/fio-randread-speedup.png")).unwrap();
    let problems = validate(dir.path()).unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("fio-randread-speedup.png")),
        "{problems:#?}"
    );

    std::fs::write(dir.path().join("results.json"), "{ not json").unwrap();
    let problems = validate(dir.path()).unwrap();
    assert!(problems
        .iter()
        .any(|p| p.contains("results.json does not parse")));
}

#[test]
fn without_a_font_the_report_says_why_and_has_no_plots() {
    let dir = tempfile::tempdir().unwrap();
    let results = synthetic(false);
    let views: Vec<super::model::View> = results
        .workloads
        .iter()
        .map(|w| super::model::View::new(w, super::model::reference_peer(&results)))
        .collect();
    let plots = super::plot::PlotSet {
        skipped: Some("no usable TrueType font was found".into()),
        per_workload: views.iter().map(|_| Vec::new()).collect(),
    };
    let report = super::markdown::render(&results, &views, &plots);
    assert!(report.contains("**No plots in this report:** no usable TrueType font was found"));
    assert!(!report.contains("!["));
    std::fs::write(dir.path().join("report.md"), &report).unwrap();
    std::fs::write(
        dir.path().join("results.json"),
        serde_json::to_string(&results).unwrap(),
    )
    .unwrap();
    assert!(validate(dir.path()).unwrap().is_empty());
}

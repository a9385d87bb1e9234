//! Everything one `rampart bench` run measured, as the report and results.json see it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::machine::Machine;
use crate::peer::PeerKind;
use crate::profile::Profile;
use crate::stats::Summary;
use crate::workload::{Better, Outcome, PlotKind};

#[derive(Debug, Serialize)]
pub struct RunResults {
    /// Local time the run started, `2026-11-22 14:03:05`.
    pub started: String,
    pub duration_s: f64,
    pub profile: Profile,
    pub repetitions: usize,
    /// How the benchmark was invoked, for reproducing it.
    pub command_line: String,
    /// How the runs were made: schedule, peer freshness, cache drops (what, how) pairs.
    pub procedure: Vec<(String, String)>,
    pub machine: Machine,
    pub peers: Vec<PeerResult>,
    pub workloads: Vec<WorkloadResult>,
    /// Set when Ctrl-C/SIGTERM stopped the run early: the report is partial and says so.
    pub interrupted: bool,
}

#[derive(Debug, Serialize)]
pub struct PeerResult {
    pub kind: PeerKind,
    pub id: &'static str,
    /// Devices, mkfs and mount options as used (from the first successful setup).
    pub settings: Vec<(String, String)>,
    /// Set when this peer could not be made at all (e.g. a tool is missing).
    pub setup_error: Option<String>,
}

impl PeerResult {
    /// A peer before its setup: no settings, no error yet.
    pub fn new(kind: PeerKind) -> PeerResult {
        PeerResult {
            kind,
            id: kind.id(),
            settings: Vec::new(),
            setup_error: None,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct WorkloadResult {
    pub id: &'static str,
    pub title: &'static str,
    pub source: &'static str,
    pub settings: Vec<(String, String)>,
    pub plot: PlotKind,
    /// One cell per selected peer, in peer order.
    pub cells: Vec<Cell>,
}

#[derive(Debug, Serialize)]
pub struct Cell {
    pub peer: PeerKind,
    pub status: CellStatus,
    /// One outcome per successful repetition.
    pub runs: Vec<Outcome>,
    /// Seconds each repetition took, wall clock (setup excluded).
    pub run_seconds: Vec<f64>,
    /// The errors of repetitions that failed (the cell may still be measured by the others).
    pub errors: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum CellStatus {
    Measured,
    /// The workload needs something this peer does not have; the reason says what.
    Unsupported(String),
    /// It was tried and failed; the error says how (the other peers still ran).
    Failed(String),
    /// Not reached (interrupted run).
    NotRun,
}

/// The key of one series in a cell: metric name and x (None for scalar metrics).
#[derive(Clone, Debug, PartialEq, PartialOrd)]
pub struct SeriesKey {
    pub name: String,
    pub x: Option<f64>,
}

/// A summarised metric: its unit, direction and the median/spread over repetitions.
#[derive(Clone, Debug)]
pub struct Summarised {
    pub unit: &'static str,
    pub better: Better,
    pub summary: Summary,
}

impl Cell {
    /// Median and spread of every (metric, x) over this cell's repetitions, in first-seen
    /// order of metric names and then by x.
    pub fn summaries(&self) -> Vec<(SeriesKey, Summarised)> {
        let mut order: Vec<String> = Vec::new();
        // (metric index in `order`, x bits) -> the key, unit, direction and samples.
        type Samples = (SeriesKey, &'static str, Better, Vec<f64>);
        let mut values: BTreeMap<(usize, u64), Samples> = BTreeMap::new();
        for run in &self.runs {
            for m in &run.metrics {
                let idx = match order.iter().position(|n| *n == m.name) {
                    Some(i) => i,
                    None => {
                        order.push(m.name.clone());
                        order.len() - 1
                    }
                };
                let x_bits = m.x.map(|x| x.to_bits()).unwrap_or(0);
                values
                    .entry((idx, x_bits))
                    .or_insert_with(|| {
                        (
                            SeriesKey {
                                name: m.name.clone(),
                                x: m.x,
                            },
                            m.unit,
                            m.better,
                            Vec::new(),
                        )
                    })
                    .3
                    .push(m.value);
            }
        }
        let mut out: Vec<(SeriesKey, Summarised)> = values
            .into_values()
            .filter_map(|(key, unit, better, vals)| {
                Summary::of(&vals).map(|summary| {
                    (
                        key,
                        Summarised {
                            unit,
                            better,
                            summary,
                        },
                    )
                })
            })
            .collect();
        // Names keep first-seen order; within a name, ascending x.
        out.sort_by(|a, b| {
            let ia = order.iter().position(|n| *n == a.0.name);
            let ib = order.iter().position(|n| *n == b.0.name);
            ia.cmp(&ib).then(
                a.0.x
                    .unwrap_or(0.0)
                    .partial_cmp(&b.0.x.unwrap_or(0.0))
                    .unwrap_or(std::cmp::Ordering::Equal),
            )
        });
        out
    }
}

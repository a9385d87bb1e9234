//! What the tables and plots show, computed once from `RunResults`: the rows (metric, x) of a
//! workload, each peer's medians, which peer the ratios are taken against, and why a peer has
//! no figures.

use crate::peer::PeerKind;
use crate::results::{Cell, CellStatus, RunResults, SeriesKey, Summarised, WorkloadResult};
use crate::workload::{Better, PlotKind};

use super::format;

/// One row of a workload's tables: a metric name at one x.
#[derive(Clone, Debug)]
pub struct Row {
    pub key: SeriesKey,
    /// "read @ 8 threads".
    pub label: String,
    pub unit: &'static str,
    pub better: Better,
}

/// One peer's figures for a workload.
pub struct Column<'a> {
    pub kind: PeerKind,
    pub cell: &'a Cell,
    pub values: Vec<(SeriesKey, Summarised)>,
}

impl Column<'_> {
    pub fn get(&self, key: &SeriesKey) -> Option<&Summarised> {
        self.values.iter().find(|(k, _)| k == key).map(|(_, s)| s)
    }

    pub fn has_values(&self) -> bool {
        !self.values.is_empty()
    }

    /// Why this peer has no figures, in words for the report.
    pub fn reason(&self, interrupted: bool) -> String {
        match &self.cell.status {
            CellStatus::Unsupported(why) => format!("unsupported: {}", one_line(why)),
            CellStatus::Failed(why) => format!("failed: {}", one_line(why)),
            CellStatus::NotRun if interrupted => {
                "not run: the run was interrupted before it got here".to_string()
            }
            CellStatus::NotRun => "not run".to_string(),
            CellStatus::Measured => "ran, but returned no metrics".to_string(),
        }
    }

    /// The reason in one or two words, for the summary and run-time tables.
    pub fn short_reason(&self) -> &'static str {
        match &self.cell.status {
            CellStatus::Unsupported(_) => "unsupported",
            CellStatus::Failed(_) => "failed",
            CellStatus::NotRun => "not run",
            CellStatus::Measured => "no metrics",
        }
    }
}

/// A workload as the report shows it.
pub struct View<'a> {
    pub workload: &'a WorkloadResult,
    pub rows: Vec<Row>,
    pub columns: Vec<Column<'a>>,
    /// The column ratios are taken against (rampart, or the first peer without it).
    pub reference: Option<usize>,
}

impl<'a> View<'a> {
    pub fn new(workload: &'a WorkloadResult, reference: Option<PeerKind>) -> View<'a> {
        let columns: Vec<Column<'a>> = workload
            .cells
            .iter()
            .map(|cell| Column {
                kind: cell.peer,
                cell,
                values: cell.summaries(),
            })
            .collect();
        let x_label = match workload.plot {
            PlotKind::Lines { x_label } => x_label,
            _ => "",
        };
        // Names in first-seen order over the peers; within a name, ascending x.
        let mut names: Vec<&str> = Vec::new();
        for column in &columns {
            for (key, _) in &column.values {
                if !names.contains(&key.name.as_str()) {
                    names.push(&key.name);
                }
            }
        }
        let mut rows = Vec::new();
        for name in names {
            let mut of_name: Vec<Row> = Vec::new();
            for column in &columns {
                for (key, summarised) in &column.values {
                    if key.name == name && !of_name.iter().any(|r| r.key == *key) {
                        of_name.push(Row {
                            key: key.clone(),
                            label: label(key, x_label),
                            unit: summarised.unit,
                            better: summarised.better,
                        });
                    }
                }
            }
            of_name.sort_by(|a, b| {
                a.key
                    .x
                    .unwrap_or(f64::NEG_INFINITY)
                    .total_cmp(&b.key.x.unwrap_or(f64::NEG_INFINITY))
            });
            rows.extend(of_name);
        }
        let reference = reference.and_then(|kind| columns.iter().position(|c| c.kind == kind));
        View {
            workload,
            rows,
            columns,
            reference,
        }
    }

    /// The headline row: the first metric, at its largest x when it has one.
    pub fn headline(&self) -> Option<&Row> {
        let first = self.rows.first()?;
        self.rows.iter().rfind(|r| r.key.name == first.key.name)
    }

    /// Distinct metric names in row order.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for row in &self.rows {
            if !names.contains(&row.key.name.as_str()) {
                names.push(&row.key.name);
            }
        }
        names
    }

    pub fn reference_column(&self) -> Option<&Column<'a>> {
        self.reference.map(|i| &self.columns[i])
    }
}

/// The peer ratios are taken against: rampart if it took part, else the first peer.
pub fn reference_peer(results: &RunResults) -> Option<PeerKind> {
    if results.peers.iter().any(|p| p.kind == PeerKind::Rampart) {
        Some(PeerKind::Rampart)
    } else {
        results.peers.first().map(|p| p.kind)
    }
}

/// How much better the reference is than `other` on one metric: reference/other for
/// higher-is-better metrics, other/reference for lower-is-better ones, so > 1 always means the
/// reference is better. Err says why there is no ratio.
pub fn advantage(better: Better, reference: f64, other: f64) -> Result<f64, String> {
    let (numerator, denominator, whose) = match better {
        Better::Higher => (reference, other, "the peer's"),
        Better::Lower => (other, reference, "the reference peer's"),
    };
    if denominator == 0.0 {
        return Err(format!("no ratio: {whose} median is 0"));
    }
    let value = numerator / denominator;
    if value.is_finite() {
        Ok(value)
    } else {
        Err("no ratio: the quotient is not a finite number".to_string())
    }
}

/// "rampart / peer" or "peer / rampart": how a row's ratio is computed.
pub fn advantage_formula(better: Better, reference: &str) -> String {
    match better {
        Better::Higher => format!("{reference} / peer"),
        Better::Lower => format!("peer / {reference}"),
    }
}

fn label(key: &SeriesKey, x_label: &str) -> String {
    match key.x {
        Some(x) if x_label.is_empty() => format!("{} @ {}", key.name, format::x_value(x)),
        // "1 thread", "8 threads".
        Some(1.0) => format!(
            "{} @ 1 {}",
            key.name,
            x_label.strip_suffix('s').unwrap_or(x_label)
        ),
        Some(x) => format!("{} @ {} {}", key.name, format::x_value(x), x_label),
        None => key.name.clone(),
    }
}

/// Error texts can span lines (a command's stderr tail); a table note keeps them on one.
pub fn one_line(text: &str) -> String {
    let joined: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    joined.join(" ⏎ ")
}

//! Checks a written report: the sections are there, every cell of a numeric table is a finite
//! number or "—" with a reason, absolute figures and ratios are medians (or ratios of medians)
//! recomputed from results.json, every referenced plot is a PNG that exists, and results.json
//! parses.

use std::path::Path;

use serde_json::Value;

use crate::error::{BenchError, Result};
use crate::peer::PeerKind;
use crate::stats::Summary;
use crate::workload::Better;

use super::format;
use super::model;

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
const SECTIONS: [&str; 5] = [
    "## Summary",
    "## Peers",
    "## Workloads",
    "## Machine",
    "## Per-run times",
];
/// Enough problems to act on; a broken report would otherwise list thousands.
const MAX_PROBLEMS: usize = 200;

/// Problems found in the report written into `report_dir` (empty: the report is sound).
/// Fails only when `report_dir` is not a readable directory.
pub fn validate(report_dir: &Path) -> Result<Vec<String>> {
    std::fs::read_dir(report_dir)
        .map_err(|e| BenchError::io(format!("reading {}", report_dir.display()), e))?;
    let mut problems = Vec::new();
    let json = match std::fs::read_to_string(report_dir.join("results.json")) {
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.get("workloads").is_some_and(Value::is_array) => Some(v),
            Ok(_) => {
                problems.push("results.json: no \"workloads\" array".to_string());
                None
            }
            Err(e) => {
                problems.push(format!("results.json does not parse: {e}"));
                None
            }
        },
        Err(e) => {
            problems.push(format!("results.json: {e}"));
            None
        }
    };
    let report = match std::fs::read_to_string(report_dir.join("report.md")) {
        Ok(text) => text,
        Err(e) => {
            problems.push(format!("report.md: {e}"));
            return Ok(problems);
        }
    };
    for section in SECTIONS {
        if !report.lines().any(|l| l.trim_end() == section) {
            problems.push(format!("report.md: section {section:?} missing"));
        }
    }
    check_tables(&report, json.as_ref(), &mut problems);
    check_images(&report, report_dir, &mut problems);
    if let Some(json) = &json {
        check_against_json(&report, json, &mut problems);
    }
    if problems.len() > MAX_PROBLEMS {
        let more = problems.len() - MAX_PROBLEMS;
        problems.truncate(MAX_PROBLEMS);
        problems.push(format!("… and {more} more problems"));
    }
    Ok(problems)
}

/// What a `<!-- numeric-table … -->` comment says about the table below it.
struct TableSpec {
    /// 0-based index of the first column that holds numbers.
    first_numeric: usize,
    /// Cells hold "a / b / c" lists of numbers.
    list: bool,
    kind: TableKind,
    workload: Option<String>,
}

#[derive(PartialEq)]
enum TableKind {
    Absolute,
    Ratio,
    Other,
}

fn parse_marker(line: &str) -> Option<TableSpec> {
    let inner = line
        .trim()
        .strip_prefix("<!-- numeric-table")?
        .strip_suffix("-->")?;
    let mut spec = TableSpec {
        first_numeric: 1,
        list: false,
        kind: TableKind::Other,
        workload: None,
    };
    for word in inner.split_whitespace() {
        if let Some(n) = word.strip_prefix("from=") {
            spec.first_numeric = n.parse::<usize>().ok()?.checked_sub(1)?;
        } else if let Some(id) = word.strip_prefix("workload=") {
            spec.workload = Some(id.to_string());
        } else if word == "list" {
            spec.list = true;
        } else if word == "absolute" {
            spec.kind = TableKind::Absolute;
        } else if word == "ratio" {
            spec.kind = TableKind::Ratio;
        }
    }
    Some(spec)
}

/// Splits `| a | b \| c |` into its cells, honouring escaped pipes.
fn split_row(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut current = String::new();
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                current.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    cells.push(current);
    // The leading and trailing pipes leave empty strings at both ends.
    if cells.first().is_some_and(|c| c.trim().is_empty()) {
        cells.remove(0);
    }
    if cells.last().is_some_and(|c| c.trim().is_empty()) {
        cells.pop();
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// `(a)`, `(ab)`: a note marker.
fn is_marker(word: &str) -> bool {
    word.strip_prefix('(')
        .and_then(|w| w.strip_suffix(')'))
        .is_some_and(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase()))
}

/// The number a figure starts with, as written (`12,346`, `1.23×` → `1.23`), and its value.
/// What may follow: a spread `(±3.1 %)` and note markers.
fn parse_figure<'t>(
    text: &'t str,
    notes: &[String],
) -> std::result::Result<(&'t str, f64), String> {
    let text = text.trim();
    let (first, rest) = text.split_once(' ').unwrap_or((text, ""));
    let written = first.strip_suffix('×').unwrap_or(first);
    let value = parse_number(written).ok_or_else(|| format!("{text:?} is not a finite number"))?;
    let mut rest = rest.trim();
    if let Some(after) = rest.strip_prefix("(±") {
        let (inner, tail) = after
            .split_once(')')
            .ok_or_else(|| format!("{text:?}: unclosed spread"))?;
        let pct = inner.trim().strip_suffix('%').unwrap_or(inner).trim();
        if parse_number(pct).is_none() {
            return Err(format!(
                "{text:?}: the spread {inner:?} is not a finite number"
            ));
        }
        rest = tail.trim();
    }
    for word in rest.split_whitespace() {
        check_marker(word, text, notes)?;
    }
    Ok((written, value))
}

fn check_marker(word: &str, cell: &str, notes: &[String]) -> std::result::Result<(), String> {
    if !is_marker(word) {
        return Err(format!("{cell:?}: unexpected {word:?} after the number"));
    }
    if !notes.iter().any(|n| n == word) {
        return Err(format!(
            "{cell:?}: note {word} is not explained below the table"
        ));
    }
    Ok(())
}

/// A number as `format::number` writes it: thousands separators allowed, finite only.
pub(super) fn parse_number(text: &str) -> Option<f64> {
    let plain: String = text.chars().filter(|&c| c != ',').collect();
    let looks_numeric = !plain.is_empty()
        && plain
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e'));
    if !looks_numeric {
        return None;
    }
    plain.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn check_tables(report: &str, json: Option<&Value>, problems: &mut Vec<String>) {
    let lines: Vec<&str> = report.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(spec) = parse_marker(lines[i]) else {
            i += 1;
            continue;
        };
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && lines[end].trim_start().starts_with('|') {
            end += 1;
        }
        // Notes follow the table, up to the next heading, table or marker.
        let mut notes = Vec::new();
        let mut j = end;
        while j < lines.len() {
            let line = lines[j].trim();
            if line.starts_with('#') || line.starts_with('|') || line.starts_with("<!--") {
                break;
            }
            if let Some(marker) = line.strip_prefix("- ").and_then(|l| l.split(' ').next()) {
                if is_marker(marker) {
                    notes.push(marker.to_string());
                }
            }
            j += 1;
        }
        let place = format!("report.md line {}", start + 1);
        check_table(&place, &lines[start..end], &spec, &notes, json, problems);
        i = end.max(i + 1);
    }
}

fn check_table(
    place: &str,
    table: &[&str],
    spec: &TableSpec,
    notes: &[String],
    json: Option<&Value>,
    problems: &mut Vec<String>,
) {
    if table.len() < 2 {
        problems.push(format!("{place}: a numeric-table marker without a table"));
        return;
    }
    let header = split_row(table[0]);
    let separator = split_row(table[1]);
    if separator.len() != header.len()
        || !separator
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| ch == '-' || ch == ':'))
    {
        problems.push(format!("{place}: the second row is not a table separator"));
    }
    let allowed = allowed_figures(table, &header, spec, json);
    for (r, row) in table[2..].iter().enumerate() {
        let cells = split_row(row);
        let row_place = format!("{place}, row {}", r + 1);
        if cells.len() != header.len() {
            problems.push(format!(
                "{row_place}: {} cells, the header has {}",
                cells.len(),
                header.len()
            ));
            continue;
        }
        for (c, cell) in cells.iter().enumerate().skip(spec.first_numeric) {
            let allowed = allowed.get(c).and_then(Option::as_deref);
            check_cell(
                &row_place, &header[c], cell, spec.list, notes, allowed, problems,
            );
        }
    }
}

/// What results.json says each column of a numeric table may hold (absolute and ratio
/// tables); None for a column it says nothing about.
fn allowed_figures(
    table: &[&str],
    header: &[String],
    spec: &TableSpec,
    json: Option<&Value>,
) -> Vec<Option<Vec<String>>> {
    header
        .iter()
        .enumerate()
        .map(|(c, name)| {
            let json = json?;
            let workload = spec.workload.as_deref()?;
            if c < spec.first_numeric {
                return None;
            }
            match spec.kind {
                TableKind::Absolute => {
                    let peer = PeerKind::parse(name)?;
                    Some(
                        series(json, workload, peer)
                            .iter()
                            .map(|s| format::number(s.median))
                            .collect(),
                    )
                }
                TableKind::Ratio => {
                    let peer = PeerKind::parse(name.strip_prefix("vs ")?)?;
                    let reference = table.get(2).and_then(|row| {
                        let formula = split_row(row).get(1)?.clone();
                        let name = formula
                            .strip_suffix(" / peer")
                            .or_else(|| formula.strip_prefix("peer / "))?
                            .to_string();
                        PeerKind::parse(&name)
                    })?;
                    Some(ratios(json, workload, reference, peer))
                }
                TableKind::Other => None,
            }
        })
        .collect()
}

/// Checks one numeric cell: a figure (or, in a list table, figures split by " / ") that
/// results.json allows, or "—" with a reason.
fn check_cell(
    row_place: &str,
    column: &str,
    cell: &str,
    list: bool,
    notes: &[String],
    allowed: Option<&[String]>,
    problems: &mut Vec<String>,
) {
    if let Some(rest) = cell.strip_prefix('—') {
        let rest = rest.trim();
        if rest.is_empty() {
            problems.push(format!("{row_place}, {column}: \"—\" without a reason"));
        } else if let Err(e) = check_marker(rest, cell, notes) {
            problems.push(format!("{row_place}, {column}: {e}"));
        }
        return;
    }
    let parts: Vec<&str> = if list {
        cell.split(" / ").collect()
    } else {
        vec![cell]
    };
    for part in parts {
        match parse_figure(part, notes) {
            Ok((written, _)) => {
                if let Some(allowed) = allowed {
                    if !allowed.iter().any(|a| a == written) {
                        problems.push(format!(
                            "{row_place}, {column}: {written} is not a median (or ratio \
                             of medians) in results.json"
                        ));
                    }
                }
            }
            Err(e) => problems.push(format!("{row_place}, {column}: {e}")),
        }
    }
}

/// A series' median as recomputed from results.json.
struct JsonSeries {
    name: String,
    x_bits: Option<u64>,
    better: Better,
    median: f64,
}

/// The medians of one (workload, peer) cell, recomputed from the raw runs in results.json.
fn series(json: &Value, workload: &str, peer: PeerKind) -> Vec<JsonSeries> {
    let Ok(peer_value) = serde_json::to_value(peer) else {
        return Vec::new();
    };
    let cell = json["workloads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["id"] == workload)
        .flat_map(|w| w["cells"].as_array().into_iter().flatten())
        .find(|c| c["peer"] == peer_value);
    let Some(cell) = cell else {
        return Vec::new();
    };
    let mut groups: Vec<(String, Option<u64>, Better, Vec<f64>)> = Vec::new();
    for run in cell["runs"].as_array().into_iter().flatten() {
        for metric in run["metrics"].as_array().into_iter().flatten() {
            let name = metric["name"].as_str().unwrap_or_default().to_string();
            let x_bits = metric["x"].as_f64().map(f64::to_bits);
            let better = if metric["better"] == "lower" {
                Better::Lower
            } else {
                Better::Higher
            };
            // NaN values are written as null; like the report, leave them out.
            let Some(value) = metric["value"].as_f64() else {
                continue;
            };
            match groups.iter_mut().find(|g| g.0 == name && g.1 == x_bits) {
                Some(g) => g.3.push(value),
                None => groups.push((name, x_bits, better, vec![value])),
            }
        }
    }
    groups
        .into_iter()
        .filter_map(|(name, x_bits, better, values)| {
            Summary::of(&values).map(|s| JsonSeries {
                name,
                x_bits,
                better,
                median: s.median,
            })
        })
        .collect()
}

fn ratios(json: &Value, workload: &str, reference: PeerKind, peer: PeerKind) -> Vec<String> {
    let peer_series = series(json, workload, peer);
    series(json, workload, reference)
        .iter()
        .filter_map(|r| {
            let p = peer_series
                .iter()
                .find(|p| p.name == r.name && p.x_bits == r.x_bits)?;
            model::advantage(r.better, r.median, p.median).ok()
        })
        .map(format::number)
        .collect()
}

fn check_images(report: &str, report_dir: &Path, problems: &mut Vec<String>) {
    for (n, line) in report.lines().enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find("![") {
            let after = &rest[start + 2..];
            let Some(mid) = after.find("](") else {
                break;
            };
            let target_on = &after[mid + 2..];
            let Some(end) = target_on.find(')') else {
                break;
            };
            let target = &target_on[..end];
            rest = &target_on[end..];
            let place = format!("report.md line {}", n + 1);
            if target.contains("://") || target.starts_with('/') {
                problems.push(format!("{place}: plot {target:?} is not a relative path"));
                continue;
            }
            let path = report_dir.join(target);
            match std::fs::read(&path) {
                Ok(bytes) if bytes.starts_with(&PNG_SIGNATURE) => {}
                Ok(_) => problems.push(format!("{place}: {target} is not a PNG file")),
                Err(e) => problems.push(format!("{place}: plot {target}: {e}")),
            }
        }
    }
}

fn check_against_json(report: &str, json: &Value, problems: &mut Vec<String>) {
    for workload in json["workloads"].as_array().into_iter().flatten() {
        let Some(id) = workload["id"].as_str() else {
            problems.push("results.json: a workload without an id".to_string());
            continue;
        };
        let heading = format!("({})", format::code(id));
        if !report
            .lines()
            .any(|l| l.starts_with("### ") && l.contains(&heading))
        {
            problems.push(format!("report.md: no section for workload {id}"));
        }
    }
    if json["interrupted"] == true && !report.contains("this run was interrupted") {
        problems.push("report.md: the run was interrupted but the report does not say so".into());
    }
}

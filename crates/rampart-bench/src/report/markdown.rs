//! report.md: summary, peers, one section per workload (settings, absolute figures, ratios,
//! plots, run notes), machine, per-run times. Every number comes from `RunResults`; what was
//! not measured is "—" with its reason.
//!
//! Tables whose cells must be numbers are preceded by a `<!-- numeric-table … -->` comment so
//! that `validate` can find and check them.

use std::fmt::Write as _;

use crate::results::{RunResults, Summarised};
use crate::workload::Better;

use super::format::{self, Notes};
use super::model::{self, Column, View};
use super::plot::PlotSet;

/// At most this many distinct run notes per workload; the rest are in results.json.
const MAX_RUN_NOTES: usize = 40;

pub fn render(results: &RunResults, views: &[View], plots: &PlotSet) -> String {
    let mut out = String::new();
    header(&mut out, results, views, plots);
    summary(&mut out, results, views);
    peers(&mut out, results);
    out.push_str("## Workloads\n\n");
    for (view, files) in views.iter().zip(&plots.per_workload) {
        workload(&mut out, results, view, files);
    }
    machine(&mut out, results);
    run_times(&mut out, results, views);
    out
}

fn reference_name(results: &RunResults) -> &'static str {
    model::reference_peer(results)
        .map(|k| k.id())
        .unwrap_or("the first peer")
}

fn header(out: &mut String, results: &RunResults, views: &[View], plots: &PlotSet) {
    let _ = writeln!(
        out,
        "# rampart bench — {}, {} profile\n",
        results.started,
        results.profile.name()
    );
    if results.interrupted {
        out.push_str(
            "**Warning: this run was interrupted (Ctrl-C or SIGTERM). The report is partial: \
             figures marked \"not run\" were never measured, and medians may rest on fewer \
             repetitions than planned.**\n\n",
        );
    }
    let peers: Vec<&str> = results.peers.iter().map(|p| p.id).collect();
    out.push_str("| what | value |\n|---|---|\n");
    let _ = writeln!(out, "| started | {} |", format::cell(&results.started));
    let _ = writeln!(out, "| profile | {} |", results.profile.name());
    let _ = writeln!(
        out,
        "| repetitions | {} of every workload on every peer |",
        results.repetitions
    );
    let _ = writeln!(
        out,
        "| total duration | {} |",
        format::duration(results.duration_s)
    );
    let _ = writeln!(out, "| peers | {} |", format::cell(&peers.join(", ")));
    let _ = writeln!(out, "| workloads | {} |", views.len());
    let _ = writeln!(
        out,
        "\nCommand line:\n\n```text\n{}\n```\n",
        results.command_line.replace("```", "` ` `")
    );
    if !results.procedure.is_empty() {
        out.push_str("How the runs were made:\n\n| what | how |\n|---|---|\n");
        for (what, how) in &results.procedure {
            let _ = writeln!(out, "| {} | {} |", format::cell(what), format::cell(how));
        }
        out.push('\n');
    }
    let reference = reference_name(results);
    let _ = writeln!(
        out,
        "**How to read the tables.** Each figure is the median over the repetitions; \"±\" is \
         the spread, (max − min) / median, shown when there was more than one repetition. \
         ↑ after a unit means higher is better, ↓ lower is better. Ratios give {reference}'s \
         advantage: {reference} / peer for ↑ metrics and peer / {reference} for ↓ metrics, so a \
         ratio above 1 always means {reference} did better and below 1 that the peer did. \"—\" \
         marks a figure that was not measured; the letter after it points to the reason below \
         the table.\n"
    );
    if let Some(why) = &plots.skipped {
        let _ = writeln!(out, "**No plots in this report:** {}\n", format::cell(why));
    }
}

/// "12,346 (±3.1 %)"; the spread only with several samples, a note when some are missing.
fn figure(value: &Summarised, repetitions: usize, notes: &mut Notes) -> String {
    let summary = &value.summary;
    let mut text = format::number(summary.median);
    if summary.samples > 1 {
        let _ = write!(text, " (±{} %)", format::percent(summary.spread()));
    }
    if summary.samples < repetitions {
        let _ = write!(
            text,
            " {}",
            notes.mark(&format!(
                "median of {} of {} repetitions: the others failed or were not reached (their \
                 errors are in results.json, under the cell's `errors`)",
                summary.samples, repetitions
            ))
        );
    }
    text
}

fn arrow(better: Better) -> &'static str {
    match better {
        Better::Higher => "↑",
        Better::Lower => "↓",
    }
}

fn dash(notes: &mut Notes, reason: &str) -> String {
    format!("— {}", notes.mark(reason))
}

fn summary(out: &mut String, results: &RunResults, views: &[View]) {
    out.push_str("## Summary\n\n");
    let Some(reference) = model::reference_peer(results) else {
        out.push_str("No peers took part in this run.\n\n");
        return;
    };
    let reference = reference.id();
    let others: Vec<&str> = results
        .peers
        .iter()
        .map(|p| p.id)
        .filter(|id| *id != reference)
        .collect();
    let _ = writeln!(
        out,
        "One headline figure per workload (its first metric, at the largest x for curves): \
         {reference}'s median, then {reference}'s advantage over each peer (> 1: {reference} \
         is better).\n"
    );
    out.push_str("<!-- numeric-table from=4 -->\n");
    let _ = write!(out, "| workload | headline | unit | {reference} |");
    for other in &others {
        let _ = write!(out, " vs {other} |");
    }
    out.push_str("\n|---|---|---|--:|");
    for _ in &others {
        out.push_str("--:|");
    }
    out.push('\n');
    let mut notes = Notes::default();
    for view in views {
        let w = view.workload;
        let _ = write!(
            out,
            "| {} ({}) |",
            format::cell(w.title),
            format::code(w.id)
        );
        let headline = view.headline();
        let reference_column = view.reference_column();
        match headline {
            Some(row) => {
                let _ = write!(
                    out,
                    " {} | {} {} |",
                    format::cell(&row.label),
                    format::cell(row.unit),
                    arrow(row.better)
                );
            }
            None => out.push_str(" nothing measured | |"),
        }
        let reference_value =
            headline.and_then(|row| reference_column.and_then(|c| c.get(&row.key)));
        match reference_value {
            Some(v) => {
                let _ = write!(out, " {} |", figure(v, results.repetitions, &mut notes));
            }
            None => {
                let why = missing_short(reference_column);
                let _ = write!(out, " — {} |", notes.mark_for(reference, &why));
            }
        }
        for other in &others {
            let column = view.columns.iter().find(|c| c.kind.id() == *other);
            let cell = match (headline, reference_value) {
                (Some(row), Some(rv)) => match column.and_then(|c| c.get(&row.key)) {
                    Some(ov) => {
                        match model::advantage(row.better, rv.summary.median, ov.summary.median) {
                            Ok(r) => format::ratio(r),
                            Err(e) => format!("— {}", notes.mark_for(other, &e)),
                        }
                    }
                    None => format!("— {}", notes.mark_for(other, &missing_short(column))),
                },
                _ => dash(
                    &mut notes,
                    &format!("no {reference} figure to compare with (see the workload's section)"),
                ),
            };
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out.push_str(&notes.render());
    out.push('\n');
}

/// Why a peer has no headline figure, briefly (the workload's section has the full reason).
fn missing_short(column: Option<&Column>) -> String {
    match column {
        Some(c) if !c.has_values() => {
            format!("{} (see the workload's section)", c.short_reason())
        }
        Some(_) => "no value of this metric".to_string(),
        None => "not selected for this workload".to_string(),
    }
}

fn settings_table(out: &mut String, settings: &[(String, String)]) {
    out.push_str("| setting | value |\n|---|---|\n");
    for (name, value) in settings {
        let _ = writeln!(out, "| {} | {} |", format::cell(name), format::cell(value));
    }
    out.push('\n');
}

fn peers(out: &mut String, results: &RunResults) {
    out.push_str("## Peers\n\n");
    if results.peers.is_empty() {
        out.push_str("No peers took part in this run.\n\n");
    }
    for peer in &results.peers {
        let _ = writeln!(out, "### {}\n", peer.id);
        if let Some(error) = &peer.setup_error {
            let _ = writeln!(out, "**Setup failed:** {}\n", model::one_line(error));
        }
        if !peer.settings.is_empty() {
            settings_table(out, &peer.settings);
        } else if peer.setup_error.is_none() {
            let ran = results
                .workloads
                .iter()
                .flat_map(|w| &w.cells)
                .any(|c| c.peer == peer.kind && !c.runs.is_empty());
            out.push_str(if ran {
                "Its setup reported no settings.\n\n"
            } else {
                "Not set up in this run: no workload ran on it.\n\n"
            });
        }
    }
}

fn workload(out: &mut String, results: &RunResults, view: &View, files: &[super::plot::PlotFile]) {
    let w = view.workload;
    let _ = writeln!(out, "### {} ({})\n", w.title, format::code(w.id));
    let _ = writeln!(out, "Source: {}.\n", w.source.trim_end_matches('.'));
    if w.settings.is_empty() {
        out.push_str("No settings reported.\n\n");
    } else {
        settings_table(out, &w.settings);
    }
    if view.rows.is_empty() {
        out.push_str("Nothing was measured for this workload:\n\n");
        for column in &view.columns {
            let _ = writeln!(
                out,
                "- **{}**: {}",
                column.kind.id(),
                column.reason(results.interrupted)
            );
        }
        out.push('\n');
        return;
    }
    absolute_table(out, results, view);
    ratio_table(out, results, view);
    for file in files {
        match &file.outcome {
            Ok(()) => {
                let _ = writeln!(out, "![{}]({})\n", file.caption, file.relative);
            }
            Err(why) => {
                let _ = writeln!(
                    out,
                    "*Plot {} not drawn: {}*\n",
                    file.relative,
                    format::cell(&model::one_line(why))
                );
            }
        }
    }
    run_notes(out, view);
}

fn absolute_table(out: &mut String, results: &RunResults, view: &View) {
    out.push_str("Absolute figures:\n\n");
    let _ = writeln!(
        out,
        "<!-- numeric-table from=3 absolute workload={} -->",
        view.workload.id
    );
    table_head(
        out,
        "unit",
        view.columns.iter().map(|c| c.kind.id().to_string()),
    );
    let mut notes = Notes::default();
    for row in &view.rows {
        let _ = write!(
            out,
            "| {} | {} {} |",
            format::cell(&row.label),
            format::cell(row.unit),
            arrow(row.better)
        );
        for column in &view.columns {
            let text = match column.get(&row.key) {
                Some(v) => figure(v, results.repetitions, &mut notes),
                None if column.has_values() => format!(
                    "— {}",
                    notes.mark_for(
                        column.kind.id(),
                        "the workload reported no value of this metric on this peer (see the \
                         notes from the runs, if any)"
                    )
                ),
                None => format!(
                    "— {}",
                    notes.mark_for(
                        column.kind.id(),
                        &format::cell(&column.reason(results.interrupted))
                    )
                ),
            };
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
    out.push_str(&notes.render());
    out.push('\n');
}

fn ratio_table(out: &mut String, results: &RunResults, view: &View) {
    let Some(reference_index) = view.reference else {
        out.push_str("No ratios: the reference peer did not take part in this workload.\n\n");
        return;
    };
    let reference = &view.columns[reference_index];
    let name = reference.kind.id();
    if view.columns.len() < 2 {
        out.push_str("No ratios: only one peer took part.\n\n");
        return;
    }
    if !reference.has_values() {
        let _ = writeln!(
            out,
            "No ratios: {name} has no figures for this workload ({}).\n",
            format::cell(&reference.reason(results.interrupted))
        );
        return;
    }
    if !view
        .columns
        .iter()
        .enumerate()
        .any(|(i, c)| i != reference_index && c.has_values())
    {
        out.push_str("No ratios: no other peer has figures for this workload.\n\n");
        return;
    }
    let _ = writeln!(out, "Ratios ({name}'s advantage; > 1: {name} is better):\n");
    let _ = writeln!(
        out,
        "<!-- numeric-table from=3 ratio workload={} -->",
        view.workload.id
    );
    let others: Vec<&Column> = view
        .columns
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != reference_index)
        .map(|(_, c)| c)
        .collect();
    table_head(
        out,
        "ratio",
        others.iter().map(|c| format!("vs {}", c.kind.id())),
    );
    let mut notes = Notes::default();
    for row in &view.rows {
        let _ = write!(
            out,
            "| {} | {} |",
            format::cell(&row.label),
            model::advantage_formula(row.better, name)
        );
        let reference_value = reference.get(&row.key);
        for column in &others {
            let text = match (reference_value, column.get(&row.key)) {
                (Some(rv), Some(ov)) => {
                    match model::advantage(row.better, rv.summary.median, ov.summary.median) {
                        Ok(r) => format::ratio(r),
                        Err(e) => dash(&mut notes, &e),
                    }
                }
                (None, _) => dash(&mut notes, &format!("{name} did not report this metric")),
                (Some(_), None) => format!(
                    "— {}",
                    notes.mark_for(
                        column.kind.id(),
                        "no figure (see the absolute figures above)"
                    )
                ),
            };
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
    out.push_str(&notes.render());
    out.push('\n');
}

/// A numeric table's header and separator rows: "metric", `second`, then one right-aligned
/// column per name in `columns`.
fn table_head(out: &mut String, second: &str, columns: impl Iterator<Item = String>) {
    let _ = write!(out, "| metric | {second} |");
    let mut count = 0;
    for name in columns {
        let _ = write!(out, " {name} |");
        count += 1;
    }
    out.push_str("\n|---|---|");
    out.push_str(&"--:|".repeat(count));
    out.push('\n');
}

/// What the workload said about its runs ("postmark reported 3 errors"), once per text.
fn run_notes(out: &mut String, view: &View) {
    let mut lines: Vec<(String, Vec<usize>)> = Vec::new();
    let mut dropped = 0usize;
    for column in &view.columns {
        for (rep, run) in column.cell.runs.iter().enumerate() {
            for note in &run.notes {
                let text = format!("**{}**: {}", column.kind.id(), model::one_line(note));
                if let Some((_, reps)) = lines.iter_mut().find(|(t, _)| *t == text) {
                    reps.push(rep + 1);
                } else if lines.len() < MAX_RUN_NOTES {
                    lines.push((text, vec![rep + 1]));
                } else {
                    dropped += 1;
                }
            }
        }
    }
    if lines.is_empty() {
        return;
    }
    out.push_str("Notes from the runs:\n\n");
    for (text, reps) in &lines {
        let reps: Vec<String> = reps.iter().map(|r| r.to_string()).collect();
        let which = if reps.len() == 1 {
            "repetition"
        } else {
            "repetitions"
        };
        let _ = writeln!(out, "- {text} ({which} {})", reps.join(", "));
    }
    if dropped > 0 {
        let _ = writeln!(out, "- … and {dropped} more notes, in results.json");
    }
    out.push('\n');
}

fn machine(out: &mut String, results: &RunResults) {
    out.push_str("## Machine\n\n");
    if results.machine.facts.is_empty() {
        out.push_str("The machine description was not recorded.\n\n");
        return;
    }
    out.push_str("| what | value |\n|---|---|\n");
    for (what, value) in &results.machine.facts {
        let _ = writeln!(out, "| {} | {} |", format::cell(what), format::cell(value));
    }
    out.push('\n');
}

fn run_times(out: &mut String, results: &RunResults, views: &[View]) {
    out.push_str("## Per-run times\n\n");
    out.push_str(
        "Wall-clock seconds of each repetition of each workload on each peer, in the order \
         they ran (setup and teardown excluded).\n\n",
    );
    out.push_str("<!-- numeric-table from=2 list -->\n| workload |");
    for peer in &results.peers {
        let _ = write!(out, " {} (s) |", peer.id);
    }
    out.push_str("\n|---|");
    for _ in &results.peers {
        out.push_str("--:|");
    }
    out.push('\n');
    let mut notes = Notes::default();
    let mut totals = vec![0.0f64; results.peers.len()];
    let mut counted = vec![0usize; results.peers.len()];
    for view in views {
        let _ = write!(out, "| {} |", format::code(view.workload.id));
        for (pi, peer) in results.peers.iter().enumerate() {
            let column = view.columns.iter().find(|c| c.kind == peer.kind);
            let seconds: Vec<f64> = column
                .map(|c| {
                    c.cell
                        .run_seconds
                        .iter()
                        .copied()
                        .filter(|s| s.is_finite())
                        .collect()
                })
                .unwrap_or_default();
            let text = if seconds.is_empty() {
                let why = match column {
                    Some(c) => format!("{} (see the workload's section)", c.short_reason()),
                    None => "not selected".to_string(),
                };
                dash(&mut notes, &why)
            } else {
                totals[pi] += seconds.iter().sum::<f64>();
                counted[pi] += seconds.len();
                let parts: Vec<String> = seconds.iter().map(|s| format::number(*s)).collect();
                parts.join(" / ")
            };
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
    out.push_str("| all workloads (sum) |");
    for (pi, _) in results.peers.iter().enumerate() {
        let text = if counted[pi] == 0 {
            dash(&mut notes, "no runs")
        } else {
            format::number(totals[pi])
        };
        let _ = write!(out, " {text} |");
    }
    out.push('\n');
    out.push_str(&notes.render());
    out.push('\n');
}

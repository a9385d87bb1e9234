//! The PNG plots, in the manner of the papers' figures: per-phase bars (PostMark transaction
//! rates, Sprite LFS phase rates, bandwidth per phase) and curves against x (IOPS against
//! threads) with their speedup. A plot that cannot be drawn never fails the run: the report
//! says why instead.

use std::error::Error;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::peer::PeerKind;
use crate::workload::{Better, PlotKind};

use super::format;
use super::model::{Column, Row, View};

type PlotResult = std::result::Result<(), Box<dyn Error>>;
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

const WIDTH_PX: u32 = 1200;
/// Title, subtitle and the legend row above the panels.
const HEADER_PX: u32 = 100;
/// More panels than this would make an unreadable image; the rest stay in the tables.
const MAX_PANELS: usize = 12;
const FONT: &str = "sans-serif";

/// Places the ab_glyph feature of plotters can take a TrueType font from.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

/// One plot file of a workload and whether it was drawn.
pub struct PlotFile {
    /// Path relative to the report, `plots/<id>.png`.
    pub relative: String,
    pub caption: String,
    pub outcome: Result<(), String>,
}

pub struct PlotSet {
    /// Why no plot was drawn at all (no font, plots folder not writable).
    pub skipped: Option<String>,
    /// Per workload, in the order of the views.
    pub per_workload: Vec<Vec<PlotFile>>,
}

/// Registers a system font with plotters, once per process (the font bytes are leaked on
/// purpose: plotters keeps a `'static` reference to them).
fn font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            for path in FONT_PATHS {
                let Ok(bytes) = std::fs::read(path) else {
                    continue;
                };
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
            Err(format!(
                "no usable TrueType font was found (looked for {}); install fonts-dejavu-core \
                 to get plots",
                FONT_PATHS.join(", ")
            ))
        })
        .clone()
}

/// Draws every workload's plots into `plots_dir`.
pub fn draw_all(views: &[View], plots_dir: &Path) -> PlotSet {
    let nothing = || views.iter().map(|_| Vec::new()).collect();
    if let Err(why) = font() {
        return PlotSet {
            skipped: Some(why),
            per_workload: nothing(),
        };
    }
    if let Err(e) = std::fs::create_dir_all(plots_dir) {
        return PlotSet {
            skipped: Some(format!("could not create {}: {e}", plots_dir.display())),
            per_workload: nothing(),
        };
    }
    let per_workload = views
        .iter()
        .map(|view| {
            if view.rows.is_empty() {
                return Vec::new();
            }
            let stem = format::file_stem(view.workload.id);
            let title = view.workload.title;
            match view.workload.plot {
                PlotKind::PhaseBars => vec![attempt(
                    plots_dir,
                    &format!("{stem}.png"),
                    format!("{title}: median per phase and peer"),
                    |path| phase_bars(view, path),
                )],
                PlotKind::Lines { x_label } => vec![
                    attempt(
                        plots_dir,
                        &format!("{stem}.png"),
                        format!("{title}: median against {x_label}"),
                        |path| lines(view, x_label, Curve::Absolute, path),
                    ),
                    attempt(
                        plots_dir,
                        &format!("{stem}-speedup.png"),
                        format!("{title}: speedup, each peer against its own first point"),
                        |path| lines(view, x_label, Curve::Speedup, path),
                    ),
                ],
                PlotKind::None => Vec::new(),
            }
        })
        .collect();
    PlotSet {
        skipped: None,
        per_workload,
    }
}

/// Draws one file; a failure or a panic inside plotters becomes the reason in the report, and
/// no half-written or stale file is left under that name.
fn attempt(
    plots_dir: &Path,
    file_name: &str,
    caption: String,
    draw: impl FnOnce(&Path) -> PlotResult,
) -> PlotFile {
    let path = plots_dir.join(file_name);
    let outcome = match catch_unwind(AssertUnwindSafe(|| draw(&path))) {
        Ok(Ok(())) if path.is_file() => Ok(()),
        Ok(Ok(())) => Err("the plotting library wrote no file".to_string()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!(
            "the plotting library panicked: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "no message".to_string())
        )),
    };
    if outcome.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    PlotFile {
        relative: format!("plots/{file_name}"),
        caption,
        outcome,
    }
}

/// One colour per peer in every plot; rampart's red stands out and is drawn heavier.
fn colour(kind: PeerKind) -> RGBColor {
    match kind {
        PeerKind::Rampart => RGBColor(214, 39, 40),
        PeerKind::RampartTemporary => RGBColor(255, 152, 150),
        PeerKind::RampartSafe => RGBColor(140, 20, 30),
        PeerKind::RampartEventual => RGBColor(240, 90, 60),
        PeerKind::RampartEdited => RGBColor(190, 80, 120),
        PeerKind::Ext4Sync => RGBColor(90, 50, 40),
        PeerKind::HostFsync => RGBColor(200, 100, 0),
        PeerKind::Tmpfs => RGBColor(31, 119, 180),
        PeerKind::Ext4Ram => RGBColor(44, 160, 44),
        PeerKind::XfsRam => RGBColor(148, 103, 189),
        PeerKind::BtrfsRam => RGBColor(188, 189, 34),
        PeerKind::Ext4Disk => RGBColor(140, 86, 75),
        PeerKind::Host => RGBColor(255, 127, 14),
        PeerKind::FuseOverlay => RGBColor(23, 190, 207),
        PeerKind::JuiceFs => RGBColor(227, 119, 194),
        PeerKind::Floor => RGBColor(127, 127, 127),
    }
}

fn highlighted(kind: PeerKind) -> bool {
    kind == PeerKind::Rampart
}

/// Title, a grey subtitle and the legend (a swatch and the name of each plotted peer).
fn header(root: &Area, title: &str, subtitle: &str, peers: &[PeerKind]) -> PlotResult {
    root.draw(&Text::new(
        title.to_string(),
        (20, 10),
        (FONT, 26).into_font().color(&BLACK),
    ))?;
    root.draw(&Text::new(
        subtitle.to_string(),
        (20, 42),
        (FONT, 16).into_font().color(&RGBColor(90, 90, 90)),
    ))?;
    let legend_style = (FONT, 18).into_font().color(&BLACK);
    let mut x = 20i32;
    for &kind in peers {
        let swatch = [(x, 70), (x + 22, 88)];
        root.draw(&Rectangle::new(swatch, colour(kind).filled()))?;
        if highlighted(kind) {
            root.draw(&Rectangle::new(swatch, BLACK.stroke_width(2)))?;
        }
        root.draw(&Text::new(
            kind.id().to_string(),
            (x + 28, 68),
            &legend_style,
        ))?;
        let (text_w, _) = root.estimate_text_size(kind.id(), &legend_style)?;
        x += 28 + text_w as i32 + 28;
    }
    Ok(())
}

fn repetitions_text(view: &View) -> String {
    let most = view
        .columns
        .iter()
        .flat_map(|c| c.values.iter().map(|(_, s)| s.summary.samples))
        .max()
        .unwrap_or(0);
    if most > 1 {
        format!("median of up to {most} repetitions; whiskers span min–max")
    } else {
        "one repetition (no spread)".to_string()
    }
}

/// "; not plotted: fuse-overlayfs (failed)" for peers without figures.
fn missing_text(view: &View) -> String {
    let missing: Vec<String> = view
        .columns
        .iter()
        .filter(|c| !c.has_values())
        .map(|c| format!("{} ({})", c.kind.id(), c.short_reason()))
        .collect();
    if missing.is_empty() {
        String::new()
    } else {
        format!("; not plotted: {}", missing.join(", "))
    }
}

fn plotted_columns<'v, 'a>(view: &'v View<'a>) -> Vec<&'v Column<'a>> {
    view.columns.iter().filter(|c| c.has_values()).collect()
}

/// Grouped bars: one group per phase, one bar per peer, one panel per unit.
fn phase_bars(view: &View, path: &Path) -> PlotResult {
    let columns = plotted_columns(view);
    let mut units: Vec<&str> = Vec::new();
    for row in &view.rows {
        if !units.contains(&row.unit) {
            units.push(row.unit);
        }
    }
    units.truncate(MAX_PANELS);
    let panel_px = if units.len() == 1 { 600 } else { 420 };
    let height = HEADER_PX + panel_px * units.len() as u32;
    let root = BitMapBackend::new(path, (WIDTH_PX, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(HEADER_PX);
    let kinds: Vec<PeerKind> = columns.iter().map(|c| c.kind).collect();
    header(
        &top,
        &format!("{} ({})", view.workload.title, view.workload.id),
        &format!("{}{}", repetitions_text(view), missing_text(view)),
        &kinds,
    )?;
    for (panel, unit) in body.split_evenly((units.len(), 1)).iter().zip(&units) {
        let rows: Vec<&Row> = view.rows.iter().filter(|r| r.unit == *unit).collect();
        bars_panel(panel, &rows, &columns, unit)?;
    }
    root.present()?;
    Ok(())
}

fn bars_panel(area: &Area, rows: &[&Row], columns: &[&Column], unit: &str) -> PlotResult {
    let groups = rows.len();
    let (mut low, mut high) = (0.0f64, 0.0f64);
    for row in rows {
        for column in columns {
            if let Some(v) = column.get(&row.key) {
                low = low.min(v.summary.min);
                high = high.max(v.summary.max).max(v.summary.median);
            }
        }
    }
    if high <= low {
        high = low + 1.0;
    }
    // Room above the tallest bar for its value label.
    let high = high + (high - low) * 0.12;
    let x_axis = LabelledAxis {
        low: -0.5,
        high: groups as f64 - 0.5,
        ticks: rows
            .iter()
            .enumerate()
            .map(|(i, r)| (i as f64, r.label.clone()))
            .collect(),
    };
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(100)
        .build_cartesian_2d(x_axis, low..high)?;
    let y_label = |y: &f64| format::tick(*y);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(RGBColor(242, 242, 242))
        .y_label_formatter(&y_label)
        .y_desc(format!("{unit} {}", direction(rows)).trim_end())
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()?;
    // A group is at most 0.8 of the space between group centres; few peers, narrower bars.
    let group_width = (0.18 * columns.len() as f64).min(0.8);
    let slot = group_width / columns.len().max(1) as f64;
    let (plot_px, _) = chart.plotting_area().dim_in_pixel();
    let bar_px = plot_px as f64 / groups.max(1) as f64 * slot * 0.88;
    let value_style = (FONT, 13)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for (j, column) in columns.iter().enumerate() {
        let fill = colour(column.kind);
        for (i, row) in rows.iter().enumerate() {
            let Some(v) = column.get(&row.key) else {
                continue;
            };
            let x0 = i as f64 - group_width / 2.0 + j as f64 * slot + slot * 0.06;
            let x1 = x0 + slot * 0.88;
            let bar = [(x0, 0.0), (x1, v.summary.median)];
            chart.draw_series(std::iter::once(Rectangle::new(bar, fill.filled())))?;
            // The median above the bar when it fits: small bars stay readable.
            let value = format::number(v.summary.median);
            if bar_px >= 8.0 * value.len() as f64 {
                let at = ((x0 + x1) / 2.0, v.summary.max.max(v.summary.median));
                chart.draw_series(std::iter::once(
                    EmptyElement::at(at) + Text::new(value, (0, -4), value_style.clone()),
                ))?;
            }
            if highlighted(column.kind) {
                chart.draw_series(std::iter::once(Rectangle::new(bar, BLACK.stroke_width(2))))?;
            }
            if v.summary.samples > 1 {
                let mid = (x0 + x1) / 2.0;
                let cap = slot * 0.2;
                let (lo, hi) = (v.summary.min, v.summary.max);
                let style = BLACK.stroke_width(2);
                chart.draw_series([
                    PathElement::new(vec![(mid, lo), (mid, hi)], style),
                    PathElement::new(vec![(mid - cap, lo), (mid + cap, lo)], style),
                    PathElement::new(vec![(mid - cap, hi), (mid + cap, hi)], style),
                ])?;
            }
        }
    }
    Ok(())
}

/// "(higher is better)" when all rows of a panel agree, else nothing.
fn direction(rows: &[&Row]) -> &'static str {
    if rows.iter().all(|r| r.better == Better::Higher) {
        "(higher is better)"
    } else if rows.iter().all(|r| r.better == Better::Lower) {
        "(lower is better)"
    } else {
        ""
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Curve {
    Absolute,
    /// Value at x over the same peer's value at its smallest x (inverted for lower-is-better
    /// metrics, so up is always faster).
    Speedup,
}

/// One point of a curve: x, the plotted value, and the whisker (min, max) when there is one.
struct Point {
    x: f64,
    y: f64,
    whisker: Option<(f64, f64)>,
}

fn curve(view: &View, column: &Column, name: &str, kind: Curve) -> Vec<Point> {
    let mut points: Vec<(f64, f64, f64, f64, usize, Better)> = view
        .rows
        .iter()
        .filter(|r| r.key.name == name)
        .filter_map(|r| {
            let x = r.key.x?;
            let v = column.get(&r.key)?;
            let s = &v.summary;
            Some((x, s.median, s.min, s.max, s.samples, r.better))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    match kind {
        Curve::Absolute => points
            .into_iter()
            .map(|(x, median, min, max, samples, _)| Point {
                x,
                y: median,
                whisker: (samples > 1).then_some((min, max)),
            })
            .collect(),
        Curve::Speedup => {
            let Some(&(_, base, ..)) = points.first() else {
                return Vec::new();
            };
            points
                .into_iter()
                .filter_map(|(x, median, _, _, _, better)| {
                    let y = match better {
                        Better::Higher => median / base,
                        Better::Lower => base / median,
                    };
                    y.is_finite().then_some(Point {
                        x,
                        y,
                        whisker: None,
                    })
                })
                .collect()
        }
    }
}

/// The x axis of a curve plot: log2 for doubling series such as thread counts.
struct XAxis {
    log2: bool,
    /// Distinct measured x values, ascending.
    points: Vec<f64>,
}

impl XAxis {
    fn new(view: &View) -> XAxis {
        let mut points: Vec<f64> = view.rows.iter().filter_map(|r| r.key.x).collect();
        points.sort_by(|a, b| a.total_cmp(b));
        points.dedup();
        let log2 = points.first().is_some_and(|&lo| lo > 0.0)
            && points
                .last()
                .zip(points.first())
                .is_some_and(|(hi, lo)| hi / lo >= 4.0);
        XAxis { log2, points }
    }

    fn at(&self, x: f64) -> f64 {
        if self.log2 {
            x.log2()
        } else {
            x
        }
    }

    fn range(&self) -> (f64, f64) {
        let lo = self.at(*self.points.first().unwrap_or(&0.0));
        let hi = self.at(*self.points.last().unwrap_or(&1.0));
        let pad = if hi > lo { (hi - lo) * 0.05 } else { 0.5 };
        (lo - pad, hi + pad)
    }

    /// Labelled ticks at the measured x values (thinned when there are many).
    fn ticks(&self) -> Vec<(f64, String)> {
        let step = self.points.len().div_ceil(16).max(1);
        self.points
            .iter()
            .step_by(step)
            .map(|&x| (self.at(x), format::x_value(x)))
            .collect()
    }
}

/// A linear axis whose ticks sit exactly where we say, with our labels: phase names under
/// bar groups, measured thread counts under curves.
struct LabelledAxis {
    low: f64,
    high: f64,
    ticks: Vec<(f64, String)>,
}

impl Ranged for LabelledAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.high - self.low;
        if span <= 0.0 {
            return (limit.0 + limit.1) / 2;
        }
        let fraction = (value - self.low) / span;
        limit.0 + ((limit.1 - limit.0) as f64 * fraction).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Only bold ticks; light grid lines between them would mean nothing here.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.iter().map(|(at, _)| *at).collect()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.low..self.high
    }
}

impl ValueFormatter<f64> for LabelledAxis {
    fn format_ext(&self, value: &f64) -> String {
        self.ticks
            .iter()
            .find(|(at, _)| (at - value).abs() < 1e-9)
            .map(|(_, label)| label.clone())
            .unwrap_or_default()
    }
}

/// One panel per metric name: the median against x for each peer, or its speedup.
fn lines(view: &View, x_label: &str, kind: Curve, path: &Path) -> PlotResult {
    let columns = plotted_columns(view);
    let axis = XAxis::new(view);
    if axis.points.is_empty() {
        return Err("no metric of this workload has an x value to plot against".into());
    }
    let mut names: Vec<&str> = view
        .names()
        .into_iter()
        .filter(|n| {
            view.rows
                .iter()
                .any(|r| r.key.name == *n && r.key.x.is_some())
        })
        .collect();
    let dropped = names.len().saturating_sub(MAX_PANELS);
    names.truncate(MAX_PANELS);
    let panel_cols = if names.len() == 1 { 1 } else { 2 };
    let panel_rows = names.len().div_ceil(panel_cols);
    let panel_px = if panel_rows == 1 { 600 } else { 380 };
    let height = HEADER_PX + panel_px * panel_rows as u32;
    let root = BitMapBackend::new(path, (WIDTH_PX, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(HEADER_PX);
    let kinds: Vec<PeerKind> = columns.iter().map(|c| c.kind).collect();
    let mut subtitle = match kind {
        Curve::Absolute => repetitions_text(view),
        Curve::Speedup => format!(
            "each peer's median at x over its median at its smallest {x_label} (inverted for \
             lower-is-better metrics)"
        ),
    };
    subtitle.push_str(&missing_text(view));
    if dropped > 0 {
        subtitle.push_str(&format!("; {dropped} more metrics only in the tables"));
    }
    let without_x = view.names().len() - names.len() - dropped;
    if without_x > 0 {
        subtitle.push_str(&format!(
            "; {without_x} metrics without {x_label} only in the tables"
        ));
    }
    let title = match kind {
        Curve::Absolute => format!("{} ({})", view.workload.title, view.workload.id),
        Curve::Speedup => format!("{} ({}): speedup", view.workload.title, view.workload.id),
    };
    header(&top, &title, &subtitle, &kinds)?;
    let panels = body.split_evenly((panel_rows, panel_cols));
    for (panel, name) in panels.iter().zip(&names) {
        let curves: Vec<(PeerKind, Vec<Point>)> = columns
            .iter()
            .map(|c| (c.kind, curve(view, c, name, kind)))
            .filter(|(_, points)| !points.is_empty())
            .collect();
        let of_name: Vec<&Row> = view.rows.iter().filter(|r| r.key.name == *name).collect();
        let unit = of_name.first().map(|r| r.unit).unwrap_or("");
        let y_desc = match kind {
            Curve::Absolute => format!("{unit} {}", direction(&of_name))
                .trim_end()
                .to_string(),
            Curve::Speedup => "speedup (×)".to_string(),
        };
        line_panel(panel, name, &curves, &axis, x_label, &y_desc, kind)?;
    }
    root.present()?;
    Ok(())
}

fn line_panel(
    area: &Area,
    name: &str,
    curves: &[(PeerKind, Vec<Point>)],
    axis: &XAxis,
    x_label: &str,
    y_desc: &str,
    kind: Curve,
) -> PlotResult {
    let mut high = if kind == Curve::Speedup { 1.0f64 } else { 0.0 };
    for (_, points) in curves {
        for p in points {
            high = high.max(p.y).max(p.whisker.map_or(p.y, |w| w.1));
        }
    }
    if high <= 0.0 {
        high = 1.0;
    }
    let high = high * 1.08;
    let (x_lo, x_hi) = axis.range();
    let x_axis = LabelledAxis {
        low: x_lo,
        high: x_hi,
        ticks: axis.ticks(),
    };
    let mut chart = ChartBuilder::on(area)
        .caption(name, (FONT, 20))
        .margin(12)
        .margin_right(30)
        .x_label_area_size(45)
        .y_label_area_size(90)
        .build_cartesian_2d(x_axis, 0.0..high)?;
    let y_text = |y: &f64| format::tick(*y);
    let x_desc = if axis.log2 {
        format!("{x_label} (log2 scale)")
    } else {
        x_label.to_string()
    };
    chart
        .configure_mesh()
        .light_line_style(RGBColor(242, 242, 242))
        .y_label_formatter(&y_text)
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .draw()?;
    if kind == Curve::Speedup {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x_lo, 1.0), (x_hi, 1.0)],
            RGBColor(160, 160, 160).stroke_width(1),
        )))?;
    }
    for (peer, points) in curves {
        let stroke = if highlighted(*peer) { 4 } else { 2 };
        let style = colour(*peer).stroke_width(stroke);
        chart.draw_series(LineSeries::new(
            points.iter().map(|p| (axis.at(p.x), p.y)),
            style,
        ))?;
        let radius = if highlighted(*peer) { 6 } else { 4 };
        chart.draw_series(
            points
                .iter()
                .map(|p| Circle::new((axis.at(p.x), p.y), radius, colour(*peer).filled())),
        )?;
        for p in points {
            if let Some((lo, hi)) = p.whisker {
                let x = axis.at(p.x);
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, lo), (x, hi)],
                    colour(*peer).stroke_width(2),
                )))?;
            }
        }
    }
    Ok(())
}

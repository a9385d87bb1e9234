//! The report: report.md (tables of absolute figures and ratios, settings, machine),
//! plots/*.png, results.json.
//!
//! - `format` writes numbers and cells;
//! - `model` computes the rows, each peer's medians, the reference peer and ratios, once;
//! - `markdown` writes report.md;
//! - `plot` draws the PNG plots;
//! - `validate` checks a written report (the end-to-end test uses it).

use std::path::{Path, PathBuf};

use crate::error::{BenchError, Result};
use crate::results::RunResults;

mod format;
mod markdown;
mod model;
mod plot;
#[cfg(test)]
mod tests;
mod validate;

pub use validate::validate;

/// Writes report.md, results.json and plots/ into `out`; returns the report's path.
pub fn write(results: &RunResults, out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out)
        .map_err(|e| BenchError::io(format!("creating {}", out.display()), e))?;
    // The raw figures first: whatever happens to the report, they are kept.
    let json =
        serde_json::to_string_pretty(results).map_err(|e| BenchError::Other(e.to_string()))?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| BenchError::io("writing results.json", e))?;
    let reference = model::reference_peer(results);
    let views: Vec<model::View> = results
        .workloads
        .iter()
        .map(|w| model::View::new(w, reference))
        .collect();
    let plots = plot::draw_all(&views, &out.join("plots"));
    let text = markdown::render(results, &views, &plots);
    let report = out.join("report.md");
    std::fs::write(&report, text)
        .map_err(|e| BenchError::io(format!("writing {}", report.display()), e))?;
    Ok(report)
}

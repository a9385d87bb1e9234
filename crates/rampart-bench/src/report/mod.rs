//! The report: report.md (tables of absolute figures and ratios, settings, machine),
//! plots/*.png, results.json. (Interface fixed; the implementation is being written.)

use std::path::{Path, PathBuf};

use crate::error::{BenchError, Result};
use crate::results::RunResults;

/// Writes report.md, results.json and plots/ into `out`; returns the report's path.
pub fn write(results: &RunResults, out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(format!("creating {}", out.display()), e))?;
    let json = serde_json::to_string_pretty(results).map_err(|e| BenchError::Other(e.to_string()))?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| BenchError::io("writing results.json", e))?;
    Ok(out.join("results.json"))
}

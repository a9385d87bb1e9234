//! `rampart status --watch`: a live view of a mount for people, redrawn every interval like
//! top(1), until Ctrl-C (or SIGTERM) or the mount goes away. Rates and mean latencies are
//! over the last interval, from the difference of two status answers.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};

use crate::control::{self, Latency, Status};

/// Shortest and longest `--interval`.
const INTERVAL_MIN: Duration = Duration::from_millis(100);
const INTERVAL_MAX: Duration = Duration::from_secs(3600);
/// Most request kinds shown, busiest first.
const KINDS_SHOWN_MAX: usize = 16;

/// `--interval`: a duration from 100 ms to 1 h.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = crate::parse_duration(text)?;
    if !(INTERVAL_MIN..=INTERVAL_MAX).contains(&d) {
        return Err(format!(
            "invalid --interval {text:?}: it must be between 100ms and 1h"
        ));
    }
    Ok(d)
}

/// Redraws the status of the mount at `mountpoint` every `interval`.
pub fn run(mountpoint: &Path, interval: Duration) -> Result<(), String> {
    let stop = stop_on_signals()?;
    let tty = std::io::stdout().is_terminal();
    let mut previous: Option<(Instant, Status)> = None;
    loop {
        let Some(status) = crate::mounts::find_mount(mountpoint)
            .and_then(|mount| control::query_status(&mount.store).ok())
        else {
            if previous.is_none() {
                return Err(format!("{} is not a rampart mount", mountpoint.display()));
            }
            eprintln!(
                "rampart: {} is no longer mounted; stopped watching",
                mountpoint.display()
            );
            return Ok(());
        };
        let now = Instant::now();
        let frame = render(&status, previous.as_ref().map(|(at, s)| (now - *at, s)));
        // Clear and redraw on a terminal; frames one after another into a pipe or file.
        let shown = if tty {
            format!("\x1b[H\x1b[2J{frame}")
        } else {
            format!("{frame}\n")
        };
        let mut out = std::io::stdout().lock();
        if out
            .write_all(shown.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            // Nobody reads any more (`| head`): stop quietly.
            return Ok(());
        }
        drop(out);
        previous = Some((now, status));
        match stop.recv_timeout(interval) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

/// A channel that receives once SIGINT or SIGTERM arrives (they are blocked in this thread
/// and taken by a waiting thread, so that the view ends between frames, never mid-line).
fn stop_on_signals() -> Result<mpsc::Receiver<()>, String> {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals
        .thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if signals.wait().is_ok() {
                let _ = tx.send(());
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(rx)
}

/// `bytes` with a binary unit.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The mean of what was measured between two summaries, in milliseconds.
fn mean_ms(now: &Latency, before: Option<&Latency>) -> Option<f64> {
    let (count, sum) = match before {
        Some(b) => (
            now.count.saturating_sub(b.count),
            now.sum_seconds - b.sum_seconds,
        ),
        None => (now.count, now.sum_seconds),
    };
    (count > 0).then(|| sum * 1e3 / count as f64)
}

/// A latency in milliseconds, in µs below one (memory-speed requests take a few µs).
fn show_ms(ms: Option<f64>) -> String {
    match ms {
        None => "-".into(),
        Some(ms) if ms < 1.0 => format!("{:.1} µs", ms * 1e3),
        Some(ms) => format!("{ms:.1} ms"),
    }
}

/// One frame: the mount's figures, and its requests over `since` (the previous answer and
/// how long ago it came).
fn render(s: &Status, since: Option<(Duration, &Status)>) -> String {
    let mut out = String::new();
    let p = &s.persistence;
    let pct = if s.memory_cap_bytes > 0 {
        100.0 * s.memory_used_bytes as f64 / s.memory_cap_bytes as f64
    } else {
        0.0
    };
    out.push_str(&format!(
        "rampart {}  (store {}, pid {}, requests through {})\n",
        s.mountpoint.display(),
        s.store.display(),
        s.pid,
        s.fuse_transport
    ));
    out.push_str(&format!(
        "inodes {} ({} files, {} directories, {} symlinks, {} other)   data {}\n",
        s.inodes,
        s.files,
        s.directories,
        s.symlinks,
        s.other,
        human_bytes(s.data_bytes)
    ));
    out.push_str(&format!(
        "memory {} of {} ({pct:.1}%)   tiers: memory {} files {}, disk {} files {} ({})\n",
        human_bytes(s.memory_used_bytes),
        human_bytes(s.memory_cap_bytes),
        s.tiers.memory.files,
        human_bytes(s.tiers.memory.bytes),
        s.tiers.disk.files,
        human_bytes(s.tiers.disk.bytes),
        if s.data_path.is_empty() {
            "daemon"
        } else {
            &s.data_path
        }
    ));
    let before = since.map(|(_, b)| &b.persistence);
    out.push_str(&format!(
        "commits {} (mean {}), checkpoints {} (mean {}); journal {}; not yet durable: {} \
         changes, {}{}\n",
        p.commits,
        show_ms(mean_ms(
            &p.commit_latency,
            before.map(|b| &b.commit_latency)
        )),
        p.checkpoints,
        show_ms(mean_ms(&p.checkpoint_latency, None)),
        human_bytes(p.journal_bytes),
        p.ops_pending,
        human_bytes(p.pending_bytes),
        p.oldest_pending_age_ms_max
            .map_or(String::new(), |ms| format!(
                ", oldest at most {ms:.0} ms old"
            ))
    ));
    if let Some(e) = &p.error {
        out.push_str(&format!("PERSISTENCE STOPPED: {e}\n"));
    }
    if s.fuse_sync_failures > 0 {
        out.push_str(&format!("fsyncs answered EIO: {}\n", s.fuse_sync_failures));
    }
    out.push_str(&errors_line(s));
    out.push_str(&category_table(s));
    out.push_str(&requests_table(s, since));
    out
}

/// A duration in ms as people read it (`-` for none).
fn human_ms(ms: Option<f64>) -> String {
    match ms {
        None => "-".to_string(),
        Some(ms) if ms < 1000.0 => format!("{ms:.0} ms"),
        Some(ms) if ms < 120_000.0 => format!("{:.1} s", ms / 1e3),
        Some(ms) if ms < 7_200_000.0 => format!("{:.0} min", ms / 60e3),
        Some(ms) => format!("{:.1} h", ms / 3_600e3),
    }
}

/// The categories that hold files or waited for the store, one line each (all of them are
/// in `--json`).
pub(crate) fn category_table(status: &Status) -> String {
    use std::fmt::Write as _;
    let rows: Vec<_> = status
        .categories
        .iter()
        .filter(|(_, c)| {
            c.files > 0 || c.bytes_at_risk > 0 || c.lag_ms_max > 0.0 || c.held_files > 0
        })
        .collect();
    if rows.is_empty() {
        return "categories: no files\n".to_string();
    }
    let mut out = String::from("categories:\n");
    let _ = writeln!(
        out,
        "  {:<16} {:>7} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>6}",
        "CATEGORY", "FILES", "MEMORY", "DISK", "AT RISK", "OLDEST", "DEADLINE", "LAG MAX", "HELD"
    );
    for (name, c) in rows {
        let deadline = match c.deadline_ms {
            None => "never".to_string(),
            Some(0.0) => "at write".to_string(),
            d => human_ms(d),
        };
        let _ = writeln!(
            out,
            "  {:<16} {:>7} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>6}",
            name,
            c.files,
            human_bytes(c.memory_bytes),
            human_bytes(c.disk_bytes),
            human_bytes(c.bytes_at_risk),
            human_ms(c.oldest_at_risk_age_ms),
            deadline,
            human_ms(Some(c.lag_ms_max)),
            c.held_files,
        );
    }
    out
}

/// Errors answered so far, by errno, lookup's ENOENT (negative lookups) left out.
pub(crate) fn errors_line(s: &Status) -> String {
    let mut by_errno: std::collections::BTreeMap<&str, u64> = Default::default();
    for (op, errors) in &s.fuse_errors {
        for (name, &n) in errors {
            if !(op == "lookup" && name == "ENOENT") {
                *by_errno.entry(name).or_default() += n;
            }
        }
    }
    if by_errno.is_empty() {
        return String::new();
    }
    let list: Vec<String> = by_errno.iter().map(|(e, n)| format!("{e} {n}")).collect();
    format!("errors answered: {}\n", list.join(", "))
}

/// What the kernel of the mount does, as the FUSE handshake and the mount options settled it
/// (`kernel_open`, `kernel_flush`, `writeback_cache`, `data_path` of `status --json`), in words:
/// `kernel: writeback cache on, OPEN answered, FLUSH not sent, passthrough off`. A figure an
/// older daemon does not report (empty) is left out, and the line with all of them.
pub(crate) fn kernel_line(s: &Status) -> String {
    kernel_words(
        &s.writeback_cache,
        &s.kernel_open,
        &s.kernel_flush,
        &s.data_path,
    )
}

fn kernel_words(writeback_cache: &str, open: &str, flush: &str, data_path: &str) -> String {
    // (what, its figure, the figure meaning yes, yes in words, no in words)
    let figures = [
        ("writeback cache", writeback_cache, "on", "on", "off"),
        ("OPEN", open, "answered", "answered", "not sent"),
        ("FLUSH", flush, "answered", "answered", "not sent"),
        ("passthrough", data_path, "passthrough", "on", "off"),
    ];
    let parts: Vec<String> = figures
        .iter()
        .filter(|(_, figure, ..)| !figure.is_empty())
        .map(|(what, figure, yes_figure, yes, no)| {
            format!("{what} {}", if figure == yes_figure { yes } else { no })
        })
        .collect();
    if parts.is_empty() {
        return String::new();
    }
    format!("kernel: {}\n", parts.join(", "))
}

/// The busiest request kinds: rate and mean latency over the interval, and totals.
fn requests_table(s: &Status, since: Option<(Duration, &Status)>) -> String {
    let mut rows: Vec<(&str, Option<f64>, u64, Option<f64>)> =
        s.fuse_requests
            .iter()
            .map(|(op, &total)| {
                let before = since.map(|(elapsed, b)| (elapsed, b.fuse_requests.get(op), b));
                let rate = before.map(|(elapsed, count, _)| {
                    total.saturating_sub(count.copied().unwrap_or(0)) as f64
                        / elapsed.as_secs_f64().max(1e-3)
                });
                let latency = s.fuse_latency.get(op).and_then(|now| {
                    mean_ms(now, before.and_then(|(_, _, b)| b.fuse_latency.get(op)))
                });
                (op.as_str(), rate, total, latency)
            })
            .collect();
    rows.sort_by(|a, b| {
        b.1.unwrap_or(0.0)
            .total_cmp(&a.1.unwrap_or(0.0))
            .then(b.2.cmp(&a.2))
    });
    let mut out = format!(
        "\n{:<12} {:>10} {:>12} {:>14}\n",
        "request", "per second", "total", "mean latency"
    );
    for (op, rate, total, latency) in rows.into_iter().take(KINDS_SHOWN_MAX) {
        let rate = rate.map_or_else(|| "-".into(), |r| format!("{r:.1}"));
        out.push_str(&format!(
            "{op:<12} {rate:>10} {total:>12} {:>14}\n",
            show_ms(latency)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_bounded() {
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_interval("10ms").is_err());
        assert!(parse_interval("2h").is_err());
    }

    #[test]
    fn bytes_are_shown_with_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn the_kernel_line_says_what_the_kernel_does() {
        assert_eq!(
            kernel_words("on", "answered", "no-flush", "daemon"),
            "kernel: writeback cache on, OPEN answered, FLUSH not sent, passthrough off\n"
        );
        assert_eq!(
            kernel_words("off", "no-open", "answered", "passthrough"),
            "kernel: writeback cache off, OPEN not sent, FLUSH answered, passthrough on\n"
        );
        // An older daemon's status lacks some figures: they are left out.
        assert_eq!(
            kernel_words("", "answered", "answered", ""),
            "kernel: OPEN answered, FLUSH answered\n"
        );
        assert_eq!(kernel_words("", "", "", ""), "");
    }

    #[test]
    fn latency_means_are_over_the_interval() {
        let before = Latency {
            count: 10,
            sum_seconds: 1.0,
        };
        let now = Latency {
            count: 20,
            sum_seconds: 1.5,
        };
        assert_eq!(mean_ms(&now, Some(&before)), Some(50.0));
        assert_eq!(mean_ms(&now, None), Some(75.0));
        assert_eq!(mean_ms(&before, Some(&before)), None);
        assert_eq!(show_ms(Some(0.0026)), "2.6 µs");
        assert_eq!(show_ms(Some(12.34)), "12.3 ms");
        assert_eq!(show_ms(None), "-");
    }
}

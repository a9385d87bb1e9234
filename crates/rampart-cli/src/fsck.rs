//! `rampart fsck STORE [--repair] [--json]`: checks an unmounted store at memory speed, and
//! repairs what can be repaired (docs/CLI.md). The checking is `rampart_core::fsck`; this is
//! its command line: the report printed as text or JSON, and a progress bar on stderr when
//! it is a terminal.

use std::any::Any;
use std::io::IsTerminal;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rampart_core::fsck::{self, Phase, Progress, Report, TailReport};

/// The message of a panic, kept by the hook for a clear error instead of a backtrace.
static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

/// Runs `rampart fsck`; prints the report (stdout) and returns the exit code: 0 clean (a torn
/// tail alone is clean), 1 problems left or an error.
pub fn run(store: &Path, repair: bool, json: bool) -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let message = panic_text(info.payload());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        *PANIC_MESSAGE.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{message}{at}"));
    }));
    let progress = Bar::new();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        if repair {
            fsck::repair(store, &progress)
        } else {
            fsck::check(store, &progress)
        }
    }));
    progress.clear();
    let failure = match outcome {
        Ok(Ok(report)) => {
            let mirror = check_mirror(store, repair && report.clean);
            let clean = report.clean && mirror.as_ref().is_none_or(|m| m.clean);
            if json {
                let mut value = serde_json::to_value(&report).unwrap_or_default();
                if let (Some(m), Some(obj)) = (&mirror, value.as_object_mut()) {
                    obj.insert("mirror".into(), serde_json::json!(m));
                    obj.insert("clean".into(), serde_json::json!(clean));
                }
                match serde_json::to_string_pretty(&value) {
                    Ok(text) => outln!("{text}"),
                    Err(e) => {
                        eprintln!("rampart: cannot encode the report as JSON: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                out!("{}", render(&report, repair));
                if let Some(m) = &mirror {
                    outln!("{}", m.text());
                }
            }
            return if clean {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Ok(Err(error)) => error.to_string(),
        Err(payload) => {
            let message = PANIC_MESSAGE
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_else(|| panic_text(&*payload));
            let state = if progress.writing.load(Ordering::SeqCst) {
                "the repair had started writing: the store holds either its old state or the \
                 repaired one (files are replaced by rename); run `rampart fsck` again to see \
                 which"
            } else {
                "nothing in the store was changed"
            };
            format!(
                "internal error while checking {}: {message}; {state}. This is a bug in \
                 rampart: please report it with this message",
                store.display()
            )
        }
    };
    eprintln!("rampart: {failure}");
    if json {
        let out = serde_json::json!({
            "store": store.display().to_string(),
            "clean": false,
            "error": failure,
        });
        outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    }
    ExitCode::FAILURE
}

/// What `rampart fsck` found of a mirrored store's second copy.
#[derive(serde::Serialize)]
struct MirrorCheck {
    path: String,
    /// The mirror's own check: None if it is clean, else what is wrong.
    problem: Option<String>,
    /// Store files and host files that differ between the two copies.
    differs: Vec<String>,
    /// What `--repair` did to it.
    repaired: Option<String>,
    clean: bool,
}

impl MirrorCheck {
    fn text(&self) -> String {
        let mut text = format!("mirror      {}: ", self.path);
        match &self.problem {
            None => text.push_str("its own check is clean"),
            Some(p) => text.push_str(p),
        }
        if self.differs.is_empty() {
            text.push_str("; the same as the store");
        } else {
            text.push_str(&format!(
                "; differs from the store in {} (the next mount brings the copy that is \
                 behind in line)",
                self.differs.join(", ")
            ));
        }
        if let Some(r) = &self.repaired {
            text.push_str(&format!("; {r}"));
        }
        text
    }
}

/// Checks the mirror of the store at `store`, if it has one: its own fsck (read only) and a
/// comparison of the two copies. After a clean repair (`bring_in_line`), the mirror is made a
/// copy of the repaired store.
fn check_mirror(store: &Path, bring_in_line: bool) -> Option<MirrorCheck> {
    use rampart_core::store::mirror;
    let record = match mirror::read_record(store) {
        Ok(r) => r?,
        Err(e) => {
            return Some(MirrorCheck {
                path: String::new(),
                problem: Some(e.to_string()),
                differs: Vec::new(),
                repaired: None,
                clean: false,
            })
        }
    };
    let peer = record.peer;
    let mut check = MirrorCheck {
        path: peer.display().to_string(),
        problem: None,
        differs: Vec::new(),
        repaired: None,
        clean: false,
    };
    if !peer.is_dir() {
        check.problem = Some("missing (`rampart mirror add` makes a new one)".into());
        return Some(check);
    }
    let quiet = NoProgress;
    check.problem = match fsck::check(&peer, &quiet) {
        Ok(r) if r.clean => None,
        Ok(r) => Some(format!(
            "its own check found {}: {}",
            count_of(r.problems.len() as u64, "problem", "problems"),
            r.problems.join("; ")
        )),
        Err(e) => Some(e.to_string()),
    };
    let here = std::fs::canonicalize(store).unwrap_or_else(|_| store.to_path_buf());
    match mirror::compare(&here, &peer) {
        Ok(d) => check.differs = d,
        Err(e) => check.problem = Some(e.to_string()),
    }
    if bring_in_line && (check.problem.is_some() || !check.differs.is_empty()) {
        check.repaired = Some(match mirror::bring_in_line(&here, &peer, true) {
            Ok(n) => {
                check.problem = None;
                check.differs.clear();
                format!("brought in line with the repaired store ({n} files copied)")
            }
            Err(e) => format!("could not be brought in line: {e}"),
        });
    }
    check.clean = check.problem.is_none() && check.differs.is_empty();
    Some(check)
}

/// No progress bar (the mirror's check is quiet).
struct NoProgress;

impl Progress for NoProgress {
    fn phase(&self, _: Phase, _: u64) {}
    fn advance(&self, _: u64) {}
    fn done(&self) {}
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// The progress bar: one bar whose prefix names the phase. Hidden unless stderr is a
/// terminal.
struct Bar {
    bar: ProgressBar,
    /// A repair has started writing files: a failure after it may have changed the store.
    writing: AtomicBool,
}

impl Bar {
    fn new() -> Bar {
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{prefix:>22} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        } else {
            ProgressBar::hidden()
        };
        Bar {
            bar,
            writing: AtomicBool::new(false),
        }
    }

    fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for Bar {
    fn phase(&self, phase: Phase, len: u64) {
        if phase == Phase::Write {
            self.writing.store(true, Ordering::SeqCst);
        }
        self.bar
            .set_prefix(format!("[{}/4] {}", phase.number(), phase.name()));
        self.bar.set_message(phase.unit());
        self.bar.set_length(len);
        self.bar.set_position(0);
    }

    fn advance(&self, n: u64) {
        self.bar.inc(n);
    }

    fn done(&self) {
        if let Some(len) = self.bar.length() {
            self.bar.set_position(len);
        }
    }
}

/// "1 batch", "2 batches".
fn count_of(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The report as text: one line per phase, then the problems, the repairs and the verdict.
pub fn render(r: &Report, repair: bool) -> String {
    use std::fmt::Write;
    let mut lines = vec![("superblock", superblock_text(r))];
    if r.superblock.ok {
        lines.push(("checkpoint", checkpoint_text(r)));
        lines.push(("journal", journal_text(r)));
        if r.backup.present {
            lines.push(("backup", backup_text(r)));
        }
        lines.push(("replay", replay_text(r)));
        lines.push(("invariants", invariants_text(r)));
        if r.data.checked {
            let d = &r.data;
            let mut text = format!("{} large files, {} bytes", d.files, d.bytes);
            for (n, what) in [
                (d.missing.len(), "missing"),
                (d.short.len(), "short"),
                (
                    d.orphans.len(),
                    "unused (a mount removes them; a repair that drops journal changes links \
                     them into /lost+found)",
                ),
                (d.long.len(), "too long (trimmed at the next mount)"),
                (
                    d.foreign.len(),
                    "with names rampart does not make (left alone: move them out)",
                ),
            ] {
                if n > 0 {
                    text.push_str(&format!("; {n} host files {what}"));
                }
            }
            lines.push(("data", text));
        }
        if let Some(fs) = &r.filesystem {
            let partial = if r.journal.present && !r.replay.done && !r.repaired {
                " (without the journal's changes)"
            } else {
                ""
            };
            lines.push((
                if r.repaired { "repaired" } else { "contents" },
                format!(
                    "{} inodes: {} files, {} directories, {} symlinks, {} other; {} bytes of \
                     file data{partial}",
                    fs.inodes, fs.files, fs.directories, fs.symlinks, fs.other, fs.data_bytes
                ),
            ));
        }
    }
    let mut out = format!("rampart fsck {}\n", r.store);
    for (label, text) in lines {
        let _ = writeln!(out, "  {label:<11} {text}");
    }
    for (title, items) in [
        ("problems", &r.problems),
        ("warnings", &r.warnings),
        ("repairs", &r.repairs),
    ] {
        if !items.is_empty() {
            let _ = writeln!(out, "{title} ({}):", items.len());
            for p in items {
                let _ = writeln!(out, "  - {p}");
            }
        }
    }
    let _ = writeln!(out, "{}", verdict(r, repair));
    out
}

/// The backup pair, `checkpoint.prev` and `journal.prev` (decision 0123).
fn backup_text(r: &Report) -> String {
    let b = &r.backup;
    match (&b.error, b.used) {
        (Some(e), _) => format!("UNUSABLE: {e}"),
        (None, true) => "USED: the previous checkpoint and its journal stand in for the \
                         checkpoint"
            .into(),
        (None, false) => "ok (the previous checkpoint and its journal)".into(),
    }
}

fn superblock_text(r: &Report) -> String {
    match (&r.superblock.error, r.superblock.format_version) {
        (Some(e), _) => format!("DAMAGED: {e}"),
        (None, Some(v)) => format!(
            "ok (format version {v}, store {})",
            r.superblock.store_id.as_deref().unwrap_or("?")
        ),
        (None, None) => "not read".into(),
    }
}

fn checkpoint_text(r: &Report) -> String {
    let c = &r.checkpoint;
    if !c.present {
        return "none (the journal is replayed onto an empty file system)".into();
    }
    if let Some(e) = &c.error {
        return format!("BAD ({} bytes): {e}", c.bytes);
    }
    let seq = c.seq.map_or(String::new(), |s| format!(", ops before {s}"));
    if c.problems.is_empty() {
        format!("ok ({} bytes{seq})", c.bytes)
    } else {
        format!(
            "INCONSISTENT ({} bytes{seq}): {} problems",
            c.bytes,
            c.problems.len()
        )
    }
}

fn journal_text(r: &Report) -> String {
    let j = &r.journal;
    if !j.present {
        return "none".into();
    }
    if let Some(e) = &j.error {
        return format!("BAD ({} bytes): {e}", j.bytes);
    }
    if j.batches == 0 && j.bytes == j.valid_bytes + j.reserved_bytes {
        return format!(
            "empty ({} bytes: its header{}); nothing to replay",
            j.bytes,
            if j.reserved_bytes > 0 {
                " and reserved zeros"
            } else {
                ""
            }
        );
    }
    let ops = match (j.base_seq, j.next_seq) {
        (Some(a), Some(b)) if b > a => format!(" (ops {a}..{b})"),
        _ => String::new(),
    };
    format!(
        "{}, {}, {} of {} bytes valid{ops}; {}",
        count_of(j.batches, "batch", "batches"),
        count_of(j.ops, "op", "ops"),
        j.valid_bytes,
        j.bytes,
        tail_text(r)
    )
}

fn tail_text(r: &Report) -> String {
    let j = &r.journal;
    match &j.tail {
        None | Some(TailReport::Clean) if j.reserved_bytes > 0 => format!(
            "tail clean, then {} bytes of zeros reserved ahead",
            j.reserved_bytes
        ),
        None | Some(TailReport::Clean) => "tail clean".into(),
        Some(TailReport::Torn {
            offset,
            bytes,
            reason,
        }) => format!(
            "torn tail of {bytes} bytes at byte {offset} ({reason}): an unsynced write cut by \
             a crash, never acknowledged as durable; benign, the next mount drops it"
        ),
        Some(TailReport::Cut {
            offset,
            reason,
            dropped_bytes,
        }) => format!(
            "CUT SHORT at byte {offset} ({reason}): {dropped_bytes} bytes of a cut batch, and \
             whatever durable batches followed it, are gone"
        ),
        Some(TailReport::Damaged {
            offset,
            reason,
            next_valid_offset,
            dropped_bytes,
            dropped_batches,
            dropped_ops,
        }) => format!(
            "DAMAGED at byte {offset} ({reason}), valid batches follow from byte \
             {next_valid_offset}: {dropped_bytes} bytes ({dropped_batches} batches, \
             {dropped_ops} ops) after the damage cannot be replayed"
        ),
    }
}

fn replay_text(r: &Report) -> String {
    let p = &r.replay;
    if !p.done {
        return "not run".into();
    }
    let mut skipped = if p.ops_skipped > 0 {
        format!(", {} already in the checkpoint", p.ops_skipped)
    } else {
        String::new()
    };
    if p.volatile_dropped > 0 {
        skipped.push_str(&format!(
            "; {} volatile files removed, as at every mount",
            p.volatile_dropped
        ));
    }
    if p.freed_dropped > 0 {
        skipped.push_str(&format!(
            "; {} deleted while the disk was full kept deleted (the store's freed note), as \
             the next mount does",
            count_of(p.freed_dropped, "file", "files")
        ));
    }
    match &p.failed {
        None => format!(
            "ok: {} applied from {}{skipped}",
            count_of(p.ops_applied, "op", "ops"),
            count_of(p.batches, "batch", "batches")
        ),
        Some(f) => format!(
            "STOPPED at op {} ({}): {}; {} ops applied before it{skipped}, {} not replayed",
            f.seq, f.op, f.error, p.ops_applied, p.ops_not_replayed
        ),
    }
}

fn invariants_text(r: &Report) -> String {
    let i = &r.invariants;
    if !i.checked {
        "not checked".into()
    } else if i.problems.is_empty() {
        "ok: link counts, reachability, directory structure, accounting".into()
    } else {
        format!("{} PROBLEMS", i.problems.len())
    }
}

fn verdict(r: &Report, repair: bool) -> String {
    let ms = r.duration_ms;
    let problems = count_of(r.problems.len() as u64, "problem", "problems");
    if r.repaired {
        format!("repaired: the store is clean now ({ms:.1} ms)")
    } else if r.clean {
        format!("clean ({ms:.1} ms)")
    } else if let Some(why) = &r.unrepairable {
        format!("NOT CLEAN: {problems}; not repairable: {why}")
    } else if repair {
        format!("NOT CLEAN: {problems}")
    } else {
        let dropping = match (&r.journal.tail, &r.replay.failed) {
            (Some(TailReport::Damaged { dropped_ops, .. }), _) => format!(
                ", dropping the journal from the damage on (the damaged batch and {dropped_ops} \
                 ops after it)"
            ),
            (_, Some(f)) => format!(
                ", dropping the journal's ops from op {} on ({} ops)",
                f.seq, r.replay.ops_not_replayed
            ),
            _ => String::new(),
        };
        format!(
            "NOT CLEAN: {problems}; `rampart fsck --repair {}` repairs them{dropping}",
            r.store
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_report_reads_as_clean() {
        let mut r = Report {
            store: "/s".into(),
            clean: true,
            duration_ms: 1.25,
            ..Report::default()
        };
        r.superblock.ok = true;
        r.superblock.format_version = Some(1);
        r.superblock.store_id = Some("ab".into());
        let text = render(&r, false);
        assert!(
            text.starts_with("rampart fsck /s\n  superblock  ok (format version 1, store ab)\n")
        );
        assert!(text.contains("  journal     none\n"), "{text}");
        assert!(
            text.ends_with("clean (1.2 ms)\n") || text.ends_with("clean (1.3 ms)\n"),
            "{text}"
        );
    }

    #[test]
    fn a_damaged_journal_says_how_to_repair() {
        let mut r = Report {
            store: "/s".into(),
            problems: vec!["x".into()],
            ..Report::default()
        };
        r.superblock.ok = true;
        r.journal.present = true;
        (r.journal.bytes, r.journal.valid_bytes, r.journal.batches) = (500, 100, 1);
        r.journal.tail = Some(TailReport::Damaged {
            offset: 100,
            reason: "bad".into(),
            next_valid_offset: 200,
            dropped_bytes: 300,
            dropped_batches: 2,
            dropped_ops: 5,
        });
        let text = render(&r, false);
        assert!(text.contains("problems (1):\n  - x\n"), "{text}");
        assert!(text.contains("DAMAGED at byte 100 (bad)"), "{text}");
        assert!(text.ends_with(
            "NOT CLEAN: 1 problem; `rampart fsck --repair /s` repairs them, dropping the journal \
             from the damage on (the damaged batch and 5 ops after it)\n"
        ), "{text}");
    }
}

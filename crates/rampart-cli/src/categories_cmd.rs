//! `rampart stat PATH…` (a file's category, where it came from, its spec) and `rampart rules
//! [PATH…]` (the rules in force and which one a path matches). Both read the virtual
//! attributes of the mount (`user.rampart.category`, `.spec`, `.origin`) and ask the daemon
//! for the rules in force (`control::query_categories`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rampart_core::category::{Rule, RulePattern, Spec, SpecLevel};
use serde::Serialize;

use crate::control::{self, CategoriesInForce, RuleInForce};
use crate::mounts::{self, RampartMount};

/// The rampart mount that holds `path`, and `path` from the mount's root (with a leading /).
fn on_mount(path: &Path) -> Result<(RampartMount, PathBuf), String> {
    let absolute = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // Resolve the directory, not the last name: a symlink is stat'ed where it is.
    let resolved = match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .join(name),
        _ => std::fs::canonicalize(&absolute).map_err(|e| format!("{}: {e}", path.display()))?,
    };
    let mount = mounts::rampart_mounts()
        .into_iter()
        .filter(|m| resolved.starts_with(&m.mountpoint))
        .max_by_key(|m| m.mountpoint.as_os_str().len())
        .ok_or_else(|| {
            format!(
                "{} is not on a rampart mount (see `rampart status MOUNTPOINT`)",
                path.display()
            )
        })?;
    let inside = resolved
        .strip_prefix(&mount.mountpoint)
        .expect("filtered on the prefix");
    Ok((mount, Path::new("/").join(inside)))
}

/// A virtual attribute of `path` (not following a last symlink).
fn attribute(path: &Path, name: &str) -> Result<String, std::io::Error> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let c_name = CString::new(name).expect("no NUL in the names");
    let mut buf = vec![0u8; 512];
    // SAFETY: both strings are NUL-terminated and live across the call; `buf` is writable for
    // its length, which is what the call is told.
    let n = unsafe {
        libc::lgetxattr(
            c_path.as_ptr(),
            c_name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[derive(Serialize)]
struct Level {
    level: &'static str,
    stay: String,
    replication: String,
}

#[derive(Serialize)]
struct FileCategory {
    path: PathBuf,
    category: String,
    /// api, xattr, ruleN, directory, default.
    origin: String,
    /// The rule, when a rule gave it.
    rule: Option<RuleInForce>,
    spec: String,
    levels: Vec<Level>,
    /// What the store is asked: before the write returns, at close, within a time, never.
    on_the_store: String,
    /// Data bytes written and not yet in the store (issue 14 item 8).
    bytes_not_in_store: u64,
    /// How long the oldest change not yet in the store has waited (null: nothing waits).
    oldest_change_age_ms: Option<u64>,
    /// How long from now until that change must be in the store (null: nothing waits, or it
    /// never goes there; negative: overdue).
    due_in_ms: Option<i64>,
    /// Held out of the store by the archiver (decision 0090): how long until it is made
    /// present (null: not held; the store knows the file).
    held_for_ms: Option<u64>,
    /// The same as a time of day, `HH:MM:SS UTC`.
    held_until: Option<String>,
}

/// What `user.rampart.at_risk` says of a file.
struct AtRisk {
    bytes: u64,
    age_ms: Option<u64>,
    due_in_ms: Option<i64>,
    held_ms: Option<u64>,
}

/// `now + in_ms` as a time of day, UTC.
fn time_of_day_utc(in_ms: u64) -> String {
    let at = std::time::SystemTime::now() + std::time::Duration::from_millis(in_ms);
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// What of a file is not yet in the store: bytes, age of its oldest change, time left until
/// its deadline, and until the archiver makes it present, from `user.rampart.at_risk`.
fn at_risk(path: &Path) -> Result<AtRisk, String> {
    let text = attribute(path, "user.rampart.at_risk")
        .map_err(|e| format!("{}: cannot read user.rampart.at_risk: {e}", path.display()))?;
    let mut bytes = 0;
    let mut age = None;
    let mut deadline = None;
    let mut held_ms = None;
    for field in text.split_whitespace() {
        match field.split_once('=') {
            Some(("bytes", v)) => bytes = v.parse().unwrap_or(0),
            Some(("held_ms", v)) => held_ms = v.parse::<u64>().ok(),
            Some(("age_ms", v)) => age = v.parse::<u64>().ok(),
            Some(("deadline_ms", v)) => deadline = v.parse::<u64>().ok(),
            _ => {}
        }
    }
    let due_in = match (age, deadline) {
        (Some(a), Some(d)) => Some(d as i64 - a as i64),
        _ => None,
    };
    Ok(AtRisk {
        bytes,
        age_ms: age,
        due_in_ms: due_in,
        held_ms,
    })
}

fn describe(spec: &Spec) -> (Vec<Level>, String) {
    let levels = SpecLevel::ALL
        .iter()
        .map(|&l| {
            let s = spec.level(l);
            Level {
                level: l.name(),
                stay: s.stay.to_string(),
                replication: s.replication.to_string(),
            }
        })
        .collect();
    use rampart_core::category::Stay;
    let store = match spec.level(SpecLevel::Lm).stay {
        Stay::Never if spec.discard => "never: writes are dropped".to_string(),
        Stay::Never => "never: gone after a restart".to_string(),
        Stay::BeforeWrite => "before write(2) returns".to_string(),
        Stay::UntilClose => "when close(2) returns".to_string(),
        Stay::For(_) => format!("within {}", spec.level(SpecLevel::Lm).stay),
    };
    (levels, store)
}

fn file_category(
    path: &Path,
    rules: &mut Option<Result<CategoriesInForce, String>>,
) -> Result<FileCategory, String> {
    let (mount, _) = on_mount(path)?;
    let read = |name| {
        attribute(path, name).map_err(|e| match e.raw_os_error() {
            Some(libc::ENODATA) => format!(
                "{}: has no category (only regular files and directories have one)",
                path.display()
            ),
            _ => format!("{}: cannot read {name}: {e}", path.display()),
        })
    };
    let category = read("user.rampart.category")?;
    let spec_text = read("user.rampart.spec")?;
    let origin = read("user.rampart.origin")?;
    let rule = match origin.strip_prefix("rule").map(str::parse::<u32>) {
        Some(Ok(n)) => rules
            .get_or_insert_with(|| control::query_categories(&mount.store))
            .as_ref()
            .ok()
            .and_then(|c| c.rules.iter().find(|r| r.number == n).cloned()),
        _ => None,
    };
    let spec = Spec::parse(&spec_text).map_err(|e| format!("{}: {e}", path.display()))?;
    let (levels, on_the_store) = describe(&spec);
    let risk = at_risk(path)?;
    Ok(FileCategory {
        bytes_not_in_store: risk.bytes,
        oldest_change_age_ms: risk.age_ms,
        due_in_ms: risk.due_in_ms,
        held_for_ms: risk.held_ms,
        held_until: risk.held_ms.map(time_of_day_utc),
        path: path.to_path_buf(),
        category,
        origin,
        rule,
        spec: spec_text,
        levels,
        on_the_store,
    })
}

fn origin_text(f: &FileCategory) -> String {
    match (&f.rule, f.origin.as_str()) {
        (Some(r), _) => format!(
            "rule {} ({} {:?}, rampart.toml line {})",
            r.number, r.kind, r.pattern, r.line
        ),
        (None, "xattr") => "set on the file (user.rampart.category or user.rampart.spec)".into(),
        (None, "api") => "set by a program (the library API)".into(),
        (None, "directory") => "inherited from the directory it was created in".into(),
        (None, "default") => "the store default".into(),
        (None, other) => other.to_string(),
    }
}

fn at_risk_text(f: &FileCategory) -> String {
    match (f.oldest_change_age_ms, f.due_in_ms) {
        (None, _) if f.on_the_store.starts_with("never") => {
            "nothing: this file never goes to the store".to_string()
        }
        (None, _) => "nothing: every change is in the store".to_string(),
        (Some(age), Some(due)) if due >= 0 => format!(
            "{} bytes not in the store yet; oldest change {age} ms ago, due within {due} ms",
            f.bytes_not_in_store
        ),
        (Some(age), Some(due)) => format!(
            "{} bytes not in the store yet; oldest change {age} ms ago, {} ms past its deadline",
            f.bytes_not_in_store, -due
        ),
        (Some(age), None) => format!(
            "{} bytes not in the store; oldest change {age} ms ago",
            f.bytes_not_in_store
        ),
    }
}

/// `rampart stat PATH…`.
pub fn stat(paths: &[PathBuf], json: bool) -> Result<(), String> {
    let mut rules = None;
    let mut failed = Vec::new();
    let mut found = Vec::new();
    for path in paths {
        match file_category(path, &mut rules) {
            Ok(f) => found.push(f),
            Err(e) => failed.push(e),
        }
    }
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&found).map_err(|e| e.to_string())?
        );
    } else {
        for f in &found {
            outln!("{}", f.path.display());
            outln!("  category:  {}", f.category);
            outln!("  from:      {}", origin_text(f));
            outln!("  spec:      {}", f.spec);
            outln!("  store:     {}", f.on_the_store);
            outln!("  at risk:   {}", at_risk_text(f));
            if let Some(until) = &f.held_until {
                outln!(
                    "  held:      out of the store until {until} (or until fsync, sync or unmount)"
                );
            }
            for l in &f.levels {
                outln!("  {:<4} stays {:<13} {}", l.level, l.stay, l.replication);
            }
        }
    }
    match failed.len() {
        0 => Ok(()),
        _ => Err(failed.join("\nrampart: ")),
    }
}

#[derive(Serialize)]
struct PathMatch {
    path: PathBuf,
    /// The path as the rules see it: from the mount's root.
    from_root: String,
    rule: Option<RuleInForce>,
    /// The category the file has now, if it exists.
    category: Option<String>,
    origin: Option<String>,
    why: String,
}

fn first_match(
    rules: &[RuleInForce],
    name: &[u8],
    from_root: &[u8],
) -> Result<Option<RuleInForce>, String> {
    for r in rules {
        let pattern = match r.kind.as_str() {
            "glob" => RulePattern::Glob(r.pattern.clone()),
            _ => RulePattern::Regex(r.pattern.clone()),
        };
        let rule = Rule::new(pattern, r.category.clone(), r.line)?;
        if rule.matches(name, Some(from_root)) {
            return Ok(Some(r.clone()));
        }
    }
    Ok(None)
}

/// `rampart rules [PATH…]`: the rules in force on the mount of the first path (or of the
/// current directory), then for each path which rule matches it.
pub fn rules(paths: &[PathBuf], json: bool) -> Result<(), String> {
    let here = [PathBuf::from(".")];
    let anchor = paths.first().unwrap_or(&here[0]);
    let (mount, _) = on_mount(anchor)?;
    let in_force = control::query_categories(&mount.store)?;
    let mut matches = Vec::new();
    for path in paths {
        let (m, from_root) = on_mount(path)?;
        if m.store != mount.store {
            return Err(format!(
                "{} is on another mount ({}); give paths of one mount",
                path.display(),
                m.mountpoint.display()
            ));
        }
        let name = from_root.file_name().map_or(&b""[..], |n| n.as_bytes());
        let rule = first_match(&in_force.rules, name, from_root.as_os_str().as_bytes())?;
        let category = attribute(path, "user.rampart.category").ok();
        let origin = attribute(path, "user.rampart.origin").ok();
        let why = match (&rule, origin.as_deref()) {
            (Some(r), Some(o)) if o == format!("rule{}", r.number) => format!(
                "rule {} matches ({} {:?}) and gave it {}",
                r.number, r.kind, r.pattern, r.category
            ),
            (Some(r), Some(o)) => format!(
                "rule {} matches ({} {:?} → {}), but its category came from {o}: an \
                 attribute or the API wins over rules, and rules apply when a file is created",
                r.number, r.kind, r.pattern, r.category
            ),
            (Some(r), None) => format!(
                "a file created here would be {} (rule {}, {} {:?})",
                r.category, r.number, r.kind, r.pattern
            ),
            (None, _) => format!(
                "no rule matches: a file created here gets its directory's category, or the \
                 store default ({})",
                in_force.default
            ),
        };
        matches.push(PathMatch {
            path: path.clone(),
            from_root: from_root.display().to_string(),
            rule,
            category,
            origin,
            why,
        });
    }
    if json {
        let out = serde_json::json!({ "in_force": in_force, "paths": matches });
        outln!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    outln!(
        "store default: {} (commit interval {} ms)",
        in_force.default,
        in_force.commit_interval_ms
    );
    outln!("categories:");
    for c in &in_force.categories {
        let from = if c.builtin { "" } else { " (rampart.toml)" };
        match &c.unusable {
            Some(why) => outln!("  {:<12} {}{from}  refused: {why}", c.name, c.spec),
            None => outln!("  {:<12} {}{from}", c.name, c.spec),
        }
    }
    if in_force.rules.is_empty() {
        outln!("rules: none (the store's rampart.toml has no [[rules]])");
    } else {
        outln!("rules (first match wins):");
        for r in &in_force.rules {
            let on = if r.on_path { "path" } else { "name" };
            outln!(
                "  {:>3}. {} {:?} on the {on} → {}  (line {})",
                r.number,
                r.kind,
                r.pattern,
                r.category,
                r.line
            );
        }
    }
    for m in &matches {
        outln!("{} ({}):", m.path.display(), m.from_root);
        if let (Some(c), Some(o)) = (&m.category, &m.origin) {
            outln!("  category now: {c} (from {o})");
        }
        outln!("  {}", m.why);
    }
    Ok(())
}

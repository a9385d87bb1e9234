//! Per-file persistence categories (MBFS §5): names for volatility specs (`spec`), the
//! store's configuration of them and of filename rules (`config`, `rules`), and how a file
//! gets its category (`Categories::for_new`; the engine's `set_category`).
//!
//! A file's category is kept with the inode as the reserved attribute
//! [`CATEGORY_XATTR`] (`trusted.rampart.category`, value `ORIGIN NAME`), which the journal and
//! the checkpoint already carry (decision 0064). Programs see and change it as the virtual
//! attributes `user.rampart.category` and `user.rampart.spec`. What the engine enforces is
//! the inode's `Durability`, set from the category's spec whenever the category is.

mod config;
pub(crate) mod counts;
mod rules;
pub mod spec;

use std::fmt;
use std::time::Duration;

pub use config::ConfigError;
pub use counts::CategoryCount;
pub use rules::{Rule, RulePattern};
pub use spec::{Replication, Spec, SpecError, SpecLevel, Stay};

use crate::attr::Durability;

/// Where an inode's category is kept (hidden from listings; set only through the engine).
pub const CATEGORY_XATTR: &[u8] = b"trusted.rampart.category";
/// The virtual attribute that names a file's category.
pub const USER_CATEGORY_XATTR: &[u8] = b"user.rampart.category";
/// The virtual attribute that holds a file's raw spec.
pub const USER_SPEC_XATTR: &[u8] = b"user.rampart.spec";
/// The read-only virtual attribute that says where a file's category came from (`api`,
/// `xattr`, `ruleN`, `directory`, `default`), for `rampart stat`.
pub const USER_ORIGIN_XATTR: &[u8] = b"user.rampart.origin";
/// The read-only virtual attribute that says what of a file is not yet in the store, for
/// `rampart stat`: `bytes=N age_ms=N deadline_ms=N` (`deadline_ms=never` for a file that never
/// goes there), or `bytes=0` when nothing waits. Changes still in the kernel's page cache
/// (writeback cache) are not seen until the kernel sends them.
pub const USER_AT_RISK_XATTR: &[u8] = b"user.rampart.at_risk";
/// The name under which a raw spec is kept as a category: `spec:` and the spec.
pub const RAW_SPEC_PREFIX: &str = "spec:";
/// The longest category name.
pub const CATEGORY_NAME_BYTES_MAX: usize = 32;

/// Where a file's category came from, first match wins in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The library API, at create or open.
    Api,
    /// `user.rampart.category` or `user.rampart.spec`, set on the file.
    Xattr,
    /// Filename rule number N (from 1, in the configuration's order).
    Rule(u32),
    /// Inherited from the directory it was created in.
    Directory,
    /// The store default.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Api => f.write_str("api"),
            Origin::Xattr => f.write_str("xattr"),
            Origin::Rule(n) => write!(f, "rule{n}"),
            Origin::Directory => f.write_str("directory"),
            Origin::Default => f.write_str("default"),
        }
    }
}

impl Origin {
    fn parse(text: &str) -> Option<Origin> {
        Some(match text {
            "api" => Origin::Api,
            "xattr" => Origin::Xattr,
            "directory" => Origin::Directory,
            "default" => Origin::Default,
            _ => Origin::Rule(text.strip_prefix("rule")?.parse().ok()?),
        })
    }
}

/// A category as the store's configuration defines it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Category {
    pub name: String,
    pub spec: Spec,
    /// Defined by MBFS (and documented in docs/CATEGORIES.md), not by the store's config.
    pub builtin: bool,
    /// Named under `[categories]` of the store's config (defined or given a spec there).
    pub configured: bool,
}

/// A category stored on an inode: its name (or `spec:...`) and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assigned {
    pub name: String,
    pub origin: Origin,
}

impl Assigned {
    /// The stored value: `ORIGIN NAME`.
    pub fn encode(&self) -> Vec<u8> {
        format!("{} {}", self.origin, self.name).into_bytes()
    }

    pub fn decode(value: &[u8]) -> Option<Assigned> {
        let text = std::str::from_utf8(value).ok()?;
        let (origin, name) = text.split_once(' ')?;
        Some(Assigned {
            name: name.to_string(),
            origin: Origin::parse(origin)?,
        })
    }
}

/// Why a category cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CategoryError {
    /// No category of that name: the name, and those there are (built in and defined).
    Unknown { name: String, known: Vec<String> },
    /// Known, but its spec needs what is not built (or is malformed, for a raw spec).
    Unusable { name: String, why: SpecError },
    /// Its contract needs a request the kernel was told at mount not to send (OPEN or
    /// FLUSH, decision 0063): accepting it would weaken it silently.
    NotSentByKernel {
        name: String,
        request: KernelRequest,
    },
    /// The file refused it (it is gone, or is not a regular file or directory).
    Refused(crate::error::Errno),
}

impl CategoryError {
    /// The errno a system call answers with.
    pub fn errno(&self) -> crate::error::Errno {
        match self {
            CategoryError::Refused(e) => *e,
            CategoryError::NotSentByKernel { .. } => crate::error::Errno::EOPNOTSUPP,
            _ => crate::error::Errno::EINVAL,
        }
    }
}

impl fmt::Display for CategoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CategoryError::Unknown { name, known } => write!(
                f,
                "unknown category {name:?}: use one of {}, or define it under [categories] in \
                 the store's rampart.toml (docs/CATEGORIES.md)",
                known.join(", ")
            ),
            CategoryError::Unusable { name, why } => write!(f, "category {name}: {why}"),
            CategoryError::NotSentByKernel { name, request } => write!(
                f,
                "category {name} needs the kernel to send {req} ({why}), and the kernel of this \
                 mount does not (--{opt}: nothing in the store needed it when mounted, or `on`). \
                 Name the category in the store's rampart.toml (a rule, or under [categories]) \
                 and remount, and --{opt} auto answers {req}; or mount with --{opt} off",
                req = request.name(),
                why = request.why(),
                opt = request.option(),
            ),
            CategoryError::Refused(e) => write!(
                f,
                "refused ({e}): only regular files and directories have a category"
            ),
        }
    }
}

impl std::error::Error for CategoryError {}

/// A request the kernel stops sending on a mount once the daemon answers its first one
/// ENOSYS, and which some categories need (decision 0063).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelRequest {
    /// OPEN, whose reply gives SAFE-like (`lm=before_write`) and DISPOSABLE files direct I/O.
    Open,
    /// FLUSH, sent at close(2), which an `until_close` file waits on.
    Flush,
}

impl KernelRequest {
    pub fn name(self) -> &'static str {
        match self {
            KernelRequest::Open => "OPEN",
            KernelRequest::Flush => "FLUSH",
        }
    }

    /// The mount option that turns it off.
    pub fn option(self) -> &'static str {
        match self {
            KernelRequest::Open => "no-open",
            KernelRequest::Flush => "no-flush",
        }
    }

    fn why(self) -> &'static str {
        match self {
            KernelRequest::Open => "its writes must reach the daemon when write(2) is made",
            KernelRequest::Flush => "close(2) must wait for its data to be durable",
        }
    }

    /// Whether a file of `spec` needs this request.
    pub fn needed_by(self, spec: &Spec) -> bool {
        match self {
            KernelRequest::Open => {
                spec.discard || spec.level(SpecLevel::Lm).stay == Stay::BeforeWrite
            }
            KernelRequest::Flush => spec.until_close(),
        }
    }
}

/// Why the store needs the kernel to send OPEN and FLUSH (None: nothing in it does), as found
/// at mount: its configuration can give a file a category that needs them, or a file or
/// directory already has one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelNeeds {
    pub open: Option<String>,
    pub flush: Option<String>,
}

impl KernelNeeds {
    pub fn of(&self, request: KernelRequest) -> &Option<String> {
        match request {
            KernelRequest::Open => &self.open,
            KernelRequest::Flush => &self.flush,
        }
    }

    fn of_mut(&mut self, request: KernelRequest) -> &mut Option<String> {
        match request {
            KernelRequest::Open => &mut self.open,
            KernelRequest::Flush => &mut self.flush,
        }
    }

    /// Notes `why` for each request `spec` needs that has no reason yet.
    pub fn note(&mut self, spec: &Spec, why: impl Fn() -> String) {
        for request in [KernelRequest::Open, KernelRequest::Flush] {
            if request.needed_by(spec) && self.of(request).is_none() {
                *self.of_mut(request) = Some(why());
            }
        }
    }

    pub fn complete(&self) -> bool {
        self.open.is_some() && self.flush.is_some()
    }
}

/// What a category means to the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub spec: Spec,
    pub durability: Durability,
}

/// The categories and filename rules in force on a mount (the store's `rampart.toml` over
/// MBFS's defaults).
#[derive(Clone, Debug)]
pub struct Categories {
    list: Vec<Category>,
    rules: Vec<Rule>,
    /// Index in `list` of the store default.
    default: usize,
    commit_interval: Duration,
    /// Whether the store has a mirror (DA2): specs that need it are usable.
    da2: bool,
    /// Whether some rule matches on a path (not the name alone).
    rules_need_path: bool,
}

/// MBFS's categories with their default specs (docs/CATEGORIES.md, decision 0062). SOON
/// follows the store's commit interval.
fn builtin(commit_interval: Duration) -> Vec<Category> {
    use Stay::*;
    let da1 = |stay| LevelSpec {
        stay,
        replication: Replication::Single,
    };
    use spec::LevelSpec;
    let minutes = |m: u64| For(Duration::from_secs(60 * m));
    let defs: [(&str, Spec); 13] = [
        ("DISPOSABLE", Spec::lm(Never).discarding()),
        ("TEMPORARY", Spec::lm(Never)),
        ("EVENTUAL", Spec::lm(minutes(60))),
        ("SOMETIME", Spec::lm(minutes(5))),
        ("SOON", Spec::lm(For(commit_interval))),
        ("SAFE", Spec::lm(BeforeWrite)),
        (
            "ROBUST",
            Spec::lm(BeforeWrite).with(SpecLevel::Da1, da1(For(Duration::from_secs(5)))),
        ),
        (
            "PARANOID",
            Spec::lm(BeforeWrite).with(SpecLevel::Da1, da1(BeforeWrite)),
        ),
        ("EDITED", Spec::lm(UntilClose)),
        ("GENERATED", Spec::lm(minutes(5))),
        ("MULTIMEDIA", Spec::lm(minutes(60))),
        ("COLLECTION", Spec::lm(minutes(5))),
        ("DATABASE", Spec::lm(For(commit_interval))),
    ];
    defs.into_iter()
        .map(|(name, spec)| Category {
            name: name.to_string(),
            spec,
            builtin: true,
            configured: false,
        })
        .collect()
}

impl Categories {
    /// MBFS's categories, no rules, SOON the default.
    pub fn builtin(commit_interval: Duration) -> Categories {
        let list = builtin(commit_interval);
        let default = list.iter().position(|c| c.name == "SOON").expect("SOON");
        Categories {
            list,
            rules: Vec::new(),
            default,
            commit_interval,
            da2: false,
            rules_need_path: false,
        }
    }

    /// These categories on a store with a mirror (DA2) or without.
    pub fn with_da2(mut self, da2: bool) -> Categories {
        self.da2 = da2;
        self
    }

    /// Whether the store has a mirror (DA2).
    pub fn da2(&self) -> bool {
        self.da2
    }

    /// The categories and rules of a `rampart.toml` (`text`) over the built-in ones; every
    /// error names the line (`source` names the file in messages).
    pub fn from_toml(
        text: &str,
        source: &str,
        commit_interval: Duration,
    ) -> Result<Categories, ConfigError> {
        config::parse(text, source, commit_interval, false)
    }

    /// [`Categories::from_toml`] for a store with a mirror (DA2) or without.
    pub fn from_toml_on(
        text: &str,
        source: &str,
        commit_interval: Duration,
        da2: bool,
    ) -> Result<Categories, ConfigError> {
        config::parse(text, source, commit_interval, da2)
    }

    pub fn list(&self) -> &[Category] {
        &self.list
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn default_category(&self) -> &Category {
        &self.list[self.default]
    }

    pub fn commit_interval(&self) -> Duration {
        self.commit_interval
    }

    /// The shortest `lm` deadline of a category defined here, if shorter than the commit
    /// interval: what the page flusher must keep up with (a raw spec set on a file later is
    /// not known in advance).
    pub fn shortest_deadline(&self) -> Option<Duration> {
        self.list
            .iter()
            .filter_map(|c| match c.spec.level(SpecLevel::Lm).stay {
                Stay::For(d) if d < self.commit_interval => Some(d),
                _ => None,
            })
            .min()
    }

    pub fn get(&self, name: &str) -> Option<&Category> {
        self.list.iter().find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The store default's spec and durability, when a file given it must differ from a file
    /// created without a category (whose durability is `Durability::default()`); None when it
    /// need not (SOON as shipped). Read at every create that no rule or directory decides, so
    /// it allocates nothing.
    pub fn default_if_not_plain(&self) -> Option<Resolved> {
        let c = self.default_category();
        let durability = c.spec.durability_on(self.commit_interval, self.da2).ok()?;
        (durability != Durability::default()).then_some(Resolved {
            spec: c.spec,
            durability,
        })
    }

    /// The spec and durability of a category name (or `spec:...`), or why it cannot be used.
    pub fn resolve(&self, name: &str) -> Result<Resolved, CategoryError> {
        let (shown, spec) = match name.strip_prefix(RAW_SPEC_PREFIX) {
            Some(raw) => (
                name.to_string(),
                Spec::parse(raw).map_err(|why| CategoryError::Unusable {
                    name: name.to_string(),
                    why,
                })?,
            ),
            None => {
                let c = self.get(name).ok_or_else(|| CategoryError::Unknown {
                    name: name.to_string(),
                    known: self.list().iter().map(|c| c.name.clone()).collect(),
                })?;
                (c.name.clone(), c.spec)
            }
        };
        let durability = spec
            .durability_on(self.commit_interval, self.da2)
            .map_err(|why| CategoryError::Unusable { name: shown, why })?;
        Ok(Resolved { spec, durability })
    }

    /// The canonical name of a category as written by a user (`safe` → `SAFE`), checked.
    pub fn canonical(&self, name: &str) -> Result<String, CategoryError> {
        self.resolve(name)?;
        Ok(match name.strip_prefix(RAW_SPEC_PREFIX) {
            Some(raw) => format!(
                "{RAW_SPEC_PREFIX}{}",
                Spec::parse(raw).expect("resolved above")
            ),
            None => self.get(name).expect("resolved above").name.clone(),
        })
    }

    /// The first filename rule that matches a new file named `name` at `path` (from the
    /// mount's root, with a leading `/`; None when no rule needs it), with its number.
    pub fn rule_for(&self, name: &[u8], path: Option<&[u8]>) -> Option<(u32, &Rule)> {
        self.rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(name, path))
            .map(|(i, r)| (i as u32 + 1, r))
    }

    pub fn rules_need_path(&self) -> bool {
        self.rules_need_path
    }

    /// The requests of the kernel that a category this configuration can give a file needs:
    /// the store default's, a rule's, or one named under `[categories]` (set later by a
    /// user). Built-in categories it does not name are not counted.
    pub fn kernel_needs(&self) -> KernelNeeds {
        let mut needs = KernelNeeds::default();
        let default = self.default_category();
        needs.note(&default.spec, || {
            format!("the store default is {}", default.name)
        });
        for (i, rule) in self.rules.iter().enumerate() {
            if let Some(c) = self.get(&rule.category) {
                needs.note(&c.spec, || {
                    format!("rule {} of rampart.toml gives {}", i + 1, c.name)
                });
            }
        }
        for c in self.list.iter().filter(|c| c.configured) {
            needs.note(&c.spec, || {
                format!("rampart.toml defines {} ({})", c.name, c.spec)
            });
        }
        needs
    }

    /// The category of a file created as `name` (at `path`) in a directory whose category is
    /// `parent`: a rule's, else the directory's (MBFS §5.3, §5.4); None for the store
    /// default. The library API and the attributes come later and win.
    pub fn for_new(
        &self,
        name: &[u8],
        path: Option<&[u8]>,
        parent: Option<&Assigned>,
    ) -> Option<Assigned> {
        if let Some((n, rule)) = self.rule_for(name, path) {
            return Some(Assigned {
                name: rule.category.clone(),
                origin: Origin::Rule(n),
            });
        }
        let parent = parent?;
        Some(Assigned {
            name: parent.name.clone(),
            origin: Origin::Directory,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: Duration = Duration::from_secs(5);

    #[test]
    fn every_mbfs_category_is_defined_and_the_unbuilt_ones_say_so() {
        let c = Categories::builtin(COMMIT);
        for name in [
            "DISPOSABLE",
            "TEMPORARY",
            "EVENTUAL",
            "SOMETIME",
            "SOON",
            "SAFE",
            "EDITED",
            "GENERATED",
            "MULTIMEDIA",
            "COLLECTION",
            "DATABASE",
        ] {
            assert!(c.resolve(name).is_ok(), "{name}");
        }
        for name in ["ROBUST", "PARANOID"] {
            let e = c.resolve(name).unwrap_err().to_string();
            assert!(
                e.contains("needs a second copy (DA2): this store has no mirror"),
                "{e}"
            );
        }
        assert_eq!(c.default_category().name, "SOON");
        assert_eq!(
            c.resolve("safe").unwrap().durability,
            Durability::BeforeReturn
        );
        assert_eq!(
            c.resolve("TEMPORARY").unwrap().durability,
            Durability::Volatile
        );
        assert!(c.resolve("DISPOSABLE").unwrap().spec.discard);
        let unknown = c.resolve("FAST").unwrap_err();
        assert!(matches!(unknown, CategoryError::Unknown { .. }));
        // The message lists what there is (it once sent users to a command that is not).
        let message = unknown.to_string();
        assert!(
            message.contains("SOON") && message.contains("TEMPORARY") && !message.contains("--"),
            "{message}"
        );
        assert_eq!(c.canonical("spec: lm=60s").unwrap(), "spec:lm=1min");
    }

    #[test]
    fn assigned_categories_round_trip() {
        for origin in [
            Origin::Api,
            Origin::Xattr,
            Origin::Rule(12),
            Origin::Directory,
            Origin::Default,
        ] {
            let a = Assigned {
                name: "spec:lm=5s,da1=never".into(),
                origin,
            };
            assert_eq!(Assigned::decode(&a.encode()), Some(a));
        }
        assert_eq!(Assigned::decode(b"rulex SAFE"), None);
        assert_eq!(Assigned::decode(b"SAFE"), None);
    }
}

//! Volatility specs (MBFS §4.2): per level of the storage hierarchy, how long modified data
//! may stay there before it must reach the next level, and how many copies that level keeps.
//!
//! The written form, used by `rampart.toml`, the `user.rampart.spec` attribute and `rampart
//! stat`:
//!
//! ```text
//! spec        := item (',' item)*
//! item        := level '=' stay ['/' replication] | 'discard'
//! level       := 'lm' | 'lcm' | 'da1' | 'da2'
//! stay        := duration | 'until_close' | 'before_write' | 'never'
//! duration    := number ('ms' | 's' | 'min' | 'h' | 'd')
//! replication := 'single' | 'mirror' N | 'stripe' N
//! ```
//!
//! `lm` must be given; a level not named stays `never` with a single copy. `discard` drops
//! the data written (DISPOSABLE) and needs `lm=never`. A spec is checked against what this
//! build can do ([`Spec::durability`]): the remote-memory level (LCM) and the second archive
//! copy (DA2) are not built, so a spec that needs them is refused, never weakened.

use std::fmt;
use std::time::Duration;

use crate::attr::Durability;

/// The levels of MBFS's hierarchy a spec speaks of, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecLevel {
    /// This machine's memory.
    Lm,
    /// The memory of other machines (not built).
    Lcm,
    /// The store.
    Da1,
    /// A second archive copy (not built).
    Da2,
}

impl SpecLevel {
    pub const ALL: [SpecLevel; 4] = [
        SpecLevel::Lm,
        SpecLevel::Lcm,
        SpecLevel::Da1,
        SpecLevel::Da2,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SpecLevel::Lm => "lm",
            SpecLevel::Lcm => "lcm",
            SpecLevel::Da1 => "da1",
            SpecLevel::Da2 => "da2",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How long modified data may stay on a level before it must reach the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stay {
    /// At most this long.
    For(Duration),
    /// Until the file is closed: close returns once the data has reached the next level.
    UntilClose,
    /// Not at all: the write returns once the data has reached the next level.
    BeforeWrite,
    /// Forever: the data never reaches the next level.
    Never,
}

/// How many copies a level keeps (MBFS's `mbfs_replication`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    Single,
    Mirror(u8),
    Stripe(u8),
}

/// What one level of a spec asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelSpec {
    pub stay: Stay,
    pub replication: Replication,
}

/// Why a spec that needs DA2 is refused on a store without a mirror.
pub const NO_MIRROR: &str =
    "needs a second copy (DA2): this store has no mirror (`rampart mirror add STORE DIR` adds one)";

const UNSPECIFIED: LevelSpec = LevelSpec {
    stay: Stay::Never,
    replication: Replication::Single,
};

/// A file's volatility spec: one [`LevelSpec`] per level, and whether written data is
/// dropped (DISPOSABLE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    levels: [LevelSpec; 4],
    pub discard: bool,
}

/// The longest a spec's text may be.
pub const SPEC_BYTES_MAX: usize = 200;
/// The most copies a replication may ask.
pub const REPLICAS_MAX: u8 = 16;

/// Why a spec's text is not a spec, or asks what this build cannot do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    Malformed(String),
    /// Well formed, but needs something not built (`what` says what).
    Unsupported(String),
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Malformed(m) => write!(f, "malformed spec: {m}"),
            SpecError::Unsupported(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for SpecError {}

fn malformed(m: impl Into<String>) -> SpecError {
    SpecError::Malformed(m.into())
}

impl Spec {
    /// A spec that asks `lm` of this machine's memory and nothing of the other levels.
    pub const fn lm(stay: Stay) -> Spec {
        let mut levels = [UNSPECIFIED; 4];
        levels[0].stay = stay;
        Spec {
            levels,
            discard: false,
        }
    }

    /// The same spec, dropping what is written (DISPOSABLE).
    pub const fn discarding(mut self) -> Spec {
        self.discard = true;
        self
    }

    pub fn level(&self, level: SpecLevel) -> LevelSpec {
        self.levels[level.index()]
    }

    pub fn with(mut self, level: SpecLevel, spec: LevelSpec) -> Spec {
        self.levels[level.index()] = spec;
        self
    }

    /// Parses the written form (module documentation).
    pub fn parse(text: &str) -> Result<Spec, SpecError> {
        if text.len() > SPEC_BYTES_MAX {
            return Err(malformed(format!("longer than {SPEC_BYTES_MAX} bytes")));
        }
        let mut levels = [None; 4];
        let mut discard = false;
        for item in text.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(malformed(format!("an empty item in {text:?}")));
            }
            if item == "discard" {
                discard = true;
                continue;
            }
            let (level, value) = item.split_once('=').ok_or_else(|| {
                malformed(format!(
                    "{item:?} is not LEVEL=STAY (LEVEL: lm, lcm, da1, da2)"
                ))
            })?;
            let level = match level.trim() {
                "lm" => SpecLevel::Lm,
                "lcm" => SpecLevel::Lcm,
                "da1" => SpecLevel::Da1,
                "da2" => SpecLevel::Da2,
                other => {
                    return Err(malformed(format!(
                        "unknown level {other:?} (lm, lcm, da1, da2)"
                    )))
                }
            };
            let (stay, replication) = match value.split_once('/') {
                Some((s, r)) => (s.trim(), Some(r.trim())),
                None => (value.trim(), None),
            };
            let spec = LevelSpec {
                stay: parse_stay(stay)?,
                replication: replication.map_or(Ok(Replication::Single), parse_replication)?,
            };
            if levels[level.index()].replace(spec).is_some() {
                return Err(malformed(format!("level {} given twice", level.name())));
            }
        }
        let Some(lm) = levels[0] else {
            return Err(malformed(format!("{text:?} does not say lm=STAY")));
        };
        if discard && lm.stay != Stay::Never {
            return Err(malformed("discard needs lm=never"));
        }
        let mut spec = Spec::lm(lm.stay).with(SpecLevel::Lm, lm);
        for level in SpecLevel::ALL {
            if let Some(l) = levels[level.index()] {
                spec = spec.with(level, l);
            }
        }
        spec.discard = discard;
        Ok(spec)
    }

    /// What the engine must honour for a file of this spec on the store, given the store's
    /// commit interval (the shortest deadline the persister meets), or why this build cannot
    /// keep the spec.
    pub fn durability(&self, commit_interval: Duration) -> Result<Durability, SpecError> {
        self.durability_on(commit_interval, false)
    }

    /// [`Spec::durability`] on a store that has a mirror (`da2`) or not. On a mirrored store
    /// every durable change reaches both copies before it is acknowledged (decision 0076), so
    /// a spec's `da1` stay (how long before DA2) is met at once, whatever it says.
    pub fn durability_on(
        &self,
        commit_interval: Duration,
        da2: bool,
    ) -> Result<Durability, SpecError> {
        let unsupported = |m: String| Err(SpecError::Unsupported(m));
        let lcm = self.level(SpecLevel::Lcm);
        if lcm != UNSPECIFIED {
            return unsupported(
                "needs the memory of other machines (LCM), not built yet: leave lcm out".into(),
            );
        }
        let da1 = self.level(SpecLevel::Da1);
        let da2_spec = self.level(SpecLevel::Da2);
        if !da2 && (da1 != UNSPECIFIED || da2_spec != UNSPECIFIED) {
            return unsupported(NO_MIRROR.into());
        }
        match da1.replication {
            Replication::Single | Replication::Mirror(2) => {}
            Replication::Mirror(_) => {
                return unsupported(
                    "da1 keeps two copies at most (the store and its mirror): use /mirror2".into(),
                )
            }
            Replication::Stripe(_) => {
                return unsupported("striping is not built: use /single or /mirror2".into())
            }
        }
        if da2_spec != UNSPECIFIED {
            return unsupported(
                "DA2 is the last level: nothing comes after it (leave da2 out, or da2=never)"
                    .into(),
            );
        }
        let lm = self.level(SpecLevel::Lm);
        if lm.replication != Replication::Single {
            return unsupported(
                "replication in memory needs other machines (LCM), not built yet: use lm=.../single"
                    .into(),
            );
        }
        Ok(match lm.stay {
            Stay::Never => Durability::Volatile,
            Stay::BeforeWrite => Durability::BeforeReturn,
            // Close makes it durable (the mount's FLUSH); in between, the commit interval.
            Stay::UntilClose => Durability::Within(0),
            Stay::For(d) if d.is_zero() => {
                return unsupported(
                    "lm=0s asks for no time at all: use lm=before_write".to_string(),
                )
            }
            // Shorter than the commit interval: the persister commits early for it.
            Stay::For(d) if d < commit_interval => {
                Durability::within_ms(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            }
            Stay::For(d) => Durability::Within(deadline_class(d, commit_interval)),
        })
    }

    /// Whether the spec asks for the second copy (DA2): its data reaches the store (`lm` is
    /// not `never`) and goes on from there (`da1` says anything).
    pub fn needs_da2(&self) -> bool {
        self.level(SpecLevel::Lm).stay != Stay::Never && self.level(SpecLevel::Da1) != UNSPECIFIED
    }

    /// Whether the spec asks for DA2 before the write returns (`da1=before_write`: PARANOID).
    pub fn needs_da2_before_write(&self) -> bool {
        self.needs_da2() && self.level(SpecLevel::Da1).stay == Stay::BeforeWrite
    }

    /// Whether close must make the file's data durable (`lm=until_close`).
    pub fn until_close(&self) -> bool {
        self.level(SpecLevel::Lm).stay == Stay::UntilClose
    }
}

/// The deadline class of `Durability::Within` for a deadline `d` (at least the commit
/// interval): 0 for the commit interval, else 1 + log2 of the seconds, so that a shorter
/// deadline is a smaller (stronger) class. The persister meets every such class at its commit
/// interval; the classes keep the order for an archiver that waits longer. (Deadlines shorter
/// than the commit interval are `Durability::within_ms`.)
fn deadline_class(d: Duration, commit_interval: Duration) -> u8 {
    if d <= commit_interval {
        return 0;
    }
    let secs = d.as_secs().max(1);
    (1 + secs.ilog2()).min(253) as u8
}

fn parse_stay(text: &str) -> Result<Stay, SpecError> {
    Ok(match text {
        "never" => Stay::Never,
        "until_close" => Stay::UntilClose,
        "before_write" => Stay::BeforeWrite,
        _ => Stay::For(parse_duration(text)?),
    })
}

/// A duration: a whole number and a unit (ms, s, min, h, d).
pub fn parse_duration(text: &str) -> Result<Duration, SpecError> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let bad = || {
        malformed(format!(
            "{text:?} is not a stay: a duration such as 5s, 10min, 2h, or until_close, \
             before_write, never"
        ))
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    let ms = n
        .checked_mul(ms)
        .filter(|&ms| ms <= 366 * 86_400_000)
        .ok_or_else(|| malformed(format!("{text:?} is longer than a year")))?;
    Ok(Duration::from_millis(ms))
}

fn parse_replication(text: &str) -> Result<Replication, SpecError> {
    if text == "single" {
        return Ok(Replication::Single);
    }
    let bad = || {
        malformed(format!(
            "{text:?} is not a replication (single, mirrorN, stripeN with N from 2 to {REPLICAS_MAX})"
        ))
    };
    let (kind, n) = if let Some(n) = text.strip_prefix("mirror") {
        (Replication::Mirror as fn(u8) -> Replication, n)
    } else if let Some(n) = text.strip_prefix("stripe") {
        (Replication::Stripe as fn(u8) -> Replication, n)
    } else {
        return Err(bad());
    };
    match n.parse::<u8>() {
        Ok(n) if (2..=REPLICAS_MAX).contains(&n) => Ok(kind(n)),
        _ => Err(bad()),
    }
}

/// A duration in the largest unit that divides it.
struct DurationText(Duration);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (unit, per) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("min", 60_000),
            ("s", 1000),
        ] {
            if ms >= per && ms.is_multiple_of(per) {
                return write!(f, "{}{unit}", ms / per);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl fmt::Display for Stay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stay::For(d) => write!(f, "{}", DurationText(*d)),
            Stay::UntilClose => f.write_str("until_close"),
            Stay::BeforeWrite => f.write_str("before_write"),
            Stay::Never => f.write_str("never"),
        }
    }
}

impl fmt::Display for Replication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Replication::Single => f.write_str("single"),
            Replication::Mirror(n) => write!(f, "mirror{n}"),
            Replication::Stripe(n) => write!(f, "stripe{n}"),
        }
    }
}

/// The canonical written form: `lm` always, other levels when they ask something.
impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for level in SpecLevel::ALL {
            let l = self.level(level);
            if level != SpecLevel::Lm && l == UNSPECIFIED {
                continue;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}={}", level.name(), l.stay)?;
            if l.replication != Replication::Single {
                write!(f, "/{}", l.replication)?;
            }
        }
        if self.discard {
            f.write_str(",discard")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: Duration = Duration::from_secs(5);

    #[test]
    fn written_forms_round_trip() {
        for text in [
            "lm=5s",
            "lm=never,discard",
            "lm=before_write",
            "lm=until_close",
            "lm=1h",
            "lm=before_write,da1=5s",
            "lm=10min/mirror2,da1=never,da2=never",
            "lm=250ms,lcm=1s/stripe4",
        ] {
            let spec = Spec::parse(text).unwrap();
            assert_eq!(Spec::parse(&spec.to_string()).unwrap(), spec, "{text}");
        }
        assert_eq!(Spec::parse(" lm = 60s ").unwrap().to_string(), "lm=1min");
    }

    #[test]
    fn malformed_specs_say_why() {
        for (text, why) in [
            ("", "empty item"),
            ("da1=never", "does not say lm"),
            ("lm=5", "not a stay"),
            ("lm=5s,lm=6s", "given twice"),
            ("lm=fast", "not a stay"),
            ("lx=5s", "unknown level"),
            ("lm=5s/mirror1", "not a replication"),
            ("lm=5s/raid", "not a replication"),
            ("lm=5s,discard", "discard needs lm=never"),
            ("lm=400d", "longer than a year"),
            ("lm5s", "not LEVEL=STAY"),
        ] {
            let e = Spec::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_mirrored_store_takes_specs_that_need_da2() {
        let on_mirror = |t: &str| Spec::parse(t).unwrap().durability_on(COMMIT, true);
        for text in [
            "lm=before_write,da1=5s",
            "lm=before_write,da1=before_write",
            "lm=before_write,da1=before_write/mirror2,da2=never",
        ] {
            assert_eq!(on_mirror(text).unwrap(), Durability::BeforeReturn, "{text}");
        }
        assert_eq!(on_mirror("lm=1h,da1=5s").unwrap(), Durability::Within(12));
        for (text, why) in [
            ("lm=5s,da1=5s,da2=1h", "last level"),
            ("lm=5s,da1=5s/mirror3", "two copies at most"),
            ("lm=5s,da1=5s/stripe2", "striping"),
        ] {
            let e = on_mirror(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        let e = Spec::parse("lm=before_write,da1=5s")
            .unwrap()
            .durability(COMMIT)
            .unwrap_err();
        assert_eq!(e.to_string(), NO_MIRROR);
    }

    #[test]
    fn what_is_not_built_is_refused_not_weakened() {
        for (text, why) in [
            ("lm=before_write,da1=5s", "DA2"),
            ("lm=before_write,da1=before_write", "DA2"),
            ("lm=5s,da1=never/mirror2", "DA2"),
            ("lm=5s,lcm=1s", "LCM"),
            ("lm=5s/mirror2", "LCM"),
            ("lm=0s", "before_write"),
        ] {
            let e = Spec::parse(text).unwrap().durability(COMMIT).unwrap_err();
            assert!(matches!(e, SpecError::Unsupported(_)), "{text}");
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn specs_map_onto_the_engines_durabilities_in_order() {
        let d = |t: &str| Spec::parse(t).unwrap().durability(COMMIT).unwrap();
        assert_eq!(d("lm=never"), Durability::Volatile);
        assert_eq!(d("lm=never,discard"), Durability::Volatile);
        assert_eq!(d("lm=before_write"), Durability::BeforeReturn);
        assert_eq!(d("lm=until_close"), Durability::Within(0));
        assert_eq!(d("lm=5s"), Durability::Within(0));
        let (min5, h1) = (d("lm=5min"), d("lm=1h"));
        assert_eq!(min5.stronger(h1), min5, "a shorter deadline is stronger");
        assert_ne!(min5, h1);
        assert!(Spec::parse("lm=until_close").unwrap().until_close());
    }

    #[test]
    fn a_deadline_shorter_than_the_commit_interval_is_kept_not_refused() {
        let d = |t: &str| Spec::parse(t).unwrap().durability(COMMIT).unwrap();
        let (s1, ms300) = (d("lm=1s"), d("lm=300ms"));
        // Rounded down to a power of two of milliseconds: never later than asked.
        assert_eq!(s1.short_deadline(), Some(Duration::from_millis(512)));
        assert_eq!(ms300.short_deadline(), Some(Duration::from_millis(256)));
        assert_eq!(d("lm=5s").short_deadline(), None);
        assert_eq!(
            s1.stronger(d("lm=5s")),
            s1,
            "shorter than the commit interval is stronger"
        );
        assert_eq!(s1.stronger(ms300), ms300);
        assert_eq!(
            s1.stronger(Durability::BeforeReturn),
            Durability::BeforeReturn
        );
        assert_eq!(Durability::from_code(s1.code()), s1, "the code keeps it");
    }
}

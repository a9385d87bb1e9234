//! The store's `rampart.toml`: changed default specs, user-defined categories, the store
//! default and the filename rules. Read at mount; every error names its line.
//!
//! ```toml
//! default = "SOON"               # the category of files nothing else places
//!
//! [categories]                   # NAME = "spec" (docs/CATEGORIES.md); a built-in name
//! SOMETIME = "lm=10min"          # changes its default, a new name defines a category
//! SCRATCH = "lm=never"
//!
//! [[rules]]                      # first match wins
//! glob = "*.o"
//! category = "GENERATED"
//!
//! [[rules]]
//! regex = '\.(aux|dvi|log)$'
//! category = "GENERATED"
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::rules::{Rule, RulePattern, RULES_MAX};
use super::{Categories, Category, CategoryError, Spec, CATEGORY_NAME_BYTES_MAX, RAW_SPEC_PREFIX};

/// Why a configuration was refused: the file, the line (when known) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub source: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.source, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    default: Option<Spanned<String>>,
    #[serde(default)]
    categories: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    rules: Vec<Spanned<RuleDef>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleDef {
    glob: Option<Spanned<String>>,
    regex: Option<Spanned<String>>,
    category: Spanned<String>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

pub(super) fn parse(
    text: &str,
    source: &str,
    commit_interval: Duration,
    da2: bool,
) -> Result<Categories, ConfigError> {
    let error = |offset: Option<usize>, message: String| ConfigError {
        source: source.to_string(),
        line: offset.map(|o| line_of(text, o)),
        message,
    };
    let file: File = toml::from_str(text)
        .map_err(|e| error(e.span().map(|s| s.start), e.message().trim().to_string()))?;
    let mut categories = Categories::builtin(commit_interval).with_da2(da2);
    for (name, spec_text) in &file.categories {
        let at = Some(spec_text.span().start);
        if name.is_empty()
            || name.len() > CATEGORY_NAME_BYTES_MAX
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(error(
                at,
                format!(
                    "category name {name:?}: use 1 to {CATEGORY_NAME_BYTES_MAX} letters, digits, _ or -"
                ),
            ));
        }
        let spec = Spec::parse(spec_text.get_ref())
            .map_err(|e| error(at, format!("category {name}: {e}")))?;
        // Refused at mount rather than when a file first asks for it.
        spec.durability_on(commit_interval, da2)
            .map_err(|e| error(at, format!("category {name}: {e}")))?;
        match categories
            .list
            .iter_mut()
            .find(|c| c.name.eq_ignore_ascii_case(name))
        {
            Some(c) => {
                c.spec = spec;
                c.configured = true;
            }
            None => categories.list.push(Category {
                name: name.clone(),
                spec,
                builtin: false,
                configured: true,
            }),
        }
    }
    let usable = |categories: &Categories, name: &Spanned<String>| {
        let at = Some(name.span().start);
        if name.get_ref().starts_with(RAW_SPEC_PREFIX) {
            return Err(error(
                at,
                "a rule or the default names a category; define a spec under [categories]".into(),
            ));
        }
        categories
            .canonical(name.get_ref())
            .map_err(|e: CategoryError| error(at, e.to_string()))
    };
    if let Some(default) = &file.default {
        let name = usable(&categories, default)?;
        categories.default = categories
            .list
            .iter()
            .position(|c| c.name == name)
            .expect("canonical names are in the list");
    }
    if file.rules.len() > RULES_MAX {
        return Err(error(None, format!("more than {RULES_MAX} rules")));
    }
    for def in &file.rules {
        let at = Some(def.span().start);
        let def = def.get_ref();
        let category = usable(&categories, &def.category)?;
        let (pattern, pattern_at) = match (&def.glob, &def.regex) {
            (Some(g), None) => (RulePattern::Glob(g.get_ref().clone()), g.span().start),
            (None, Some(r)) => (RulePattern::Regex(r.get_ref().clone()), r.span().start),
            _ => {
                return Err(error(
                    at,
                    "a rule has either glob = \"...\" or regex = \"...\"".into(),
                ))
            }
        };
        let line = line_of(text, pattern_at);
        let rule = Rule::new(pattern, category, line)
            .map_err(|e| error(Some(pattern_at), format!("rule: {e}")))?;
        categories.rules_need_path |= rule.on_path();
        categories.rules.push(rule);
    }
    Ok(categories)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::Durability;

    const COMMIT: Duration = Duration::from_secs(5);

    fn parse(text: &str) -> Result<Categories, ConfigError> {
        super::parse(text, "rampart.toml", COMMIT, false)
    }

    #[test]
    fn a_config_changes_defaults_adds_categories_and_rules() {
        let c = parse(
            "default = \"sometime\"\n\
             [categories]\n\
             SOMETIME = \"lm=10min\"\n\
             SCRATCH = \"lm=never\"\n\
             [[rules]]\n\
             glob = \"*.o\"\n\
             category = \"generated\"\n\
             [[rules]]\n\
             regex = '^/scratch/'\n\
             category = \"SCRATCH\"\n",
        )
        .unwrap();
        assert_eq!(c.default_category().name, "SOMETIME");
        assert_eq!(c.get("SOMETIME").unwrap().spec.to_string(), "lm=10min");
        assert_eq!(
            c.resolve("scratch").unwrap().durability,
            Durability::Volatile
        );
        let (n, r) = c.rule_for(b"a.o", Some(b"/x/a.o")).unwrap();
        assert_eq!((n, r.category.as_str(), r.line), (1, "GENERATED", 6));
        let (n, r) = c.rule_for(b"a", Some(b"/scratch/a")).unwrap();
        assert_eq!((n, r.category.as_str()), (2, "SCRATCH"));
        assert!(c.rules_need_path());
        assert!(c.rule_for(b"a.c", Some(b"/a.c")).is_none());
    }

    #[test]
    fn what_the_kernel_must_send_follows_what_the_config_can_give() {
        let needs = parse("").unwrap().kernel_needs();
        assert_eq!(
            (needs.open, needs.flush),
            (None, None),
            "SOON needs neither"
        );
        let needs = parse(
            "[categories]\nSCRATCH = \"lm=never\"\n\
             [[rules]]\nglob = \"*.tmp\"\ncategory = \"SCRATCH\"\n\
             [[rules]]\nglob = \"*.c\"\ncategory = \"EDITED\"\n",
        )
        .unwrap()
        .kernel_needs();
        assert_eq!(needs.open, None);
        assert_eq!(
            needs.flush.as_deref(),
            Some("rule 2 of rampart.toml gives EDITED")
        );
        let needs = parse("default = \"SAFE\"\n").unwrap().kernel_needs();
        assert_eq!(needs.open.as_deref(), Some("the store default is SAFE"));
        assert_eq!(needs.flush, None);
        // Named under [categories], even unchanged: a user means to set it.
        let needs = parse("[categories]\nDISPOSABLE = \"lm=never,discard\"\n")
            .unwrap()
            .kernel_needs();
        assert!(needs.open.unwrap().contains("defines DISPOSABLE"));
    }

    #[test]
    fn every_error_names_its_line() {
        for (text, line, why) in [
            ("default = \n", 1, ""),
            (
                "[categories]\nX = \"lm=5\"\n",
                2,
                "category X: malformed spec",
            ),
            ("[categories]\n\nX = \"lm=before_write,da1=5s\"\n", 3, "DA2"),
            ("[categories]\nX = \"lm=0s\"\n", 2, "before_write"),
            ("default = \"FAST\"\n", 1, "unknown category \"FAST\""),
            (
                "default = \"ROBUST\"\n",
                1,
                "needs a second copy (DA2): this store has no mirror",
            ),
            (
                "\n[[rules]]\nglob = \"*.o\"\ncategory = \"NOPE\"\n",
                4,
                "unknown category",
            ),
            (
                "[[rules]]\nglob = \"*.[o\"\ncategory = \"SAFE\"\n",
                2,
                "without its ]",
            ),
            (
                "[[rules]]\n\nregex = \"(\"\ncategory = \"SAFE\"\n",
                3,
                "regular expression",
            ),
            ("[[rules]]\ncategory = \"SAFE\"\n", 1, "either glob"),
            ("colour = 1\n", 1, "unknown field"),
            ("[categories]\n\"a b\" = \"lm=5s\"\n", 2, "category name"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text:?}: {e}");
            assert!(e.to_string().contains(why), "{text:?}: {e}");
            assert!(
                e.to_string().starts_with(&format!("rampart.toml:{line}: ")),
                "{e}"
            );
        }
    }
}

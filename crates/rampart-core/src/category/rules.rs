//! Filename rules (MBFS §5.3): a glob or a regular expression → a category, first match wins,
//! so that unmodified programs get the right persistence (`*.o` GENERATED, `.cache/**`
//! TEMPORARY).
//!
//! A glob without `/` matches the file's name; a glob with `/` matches its path from the
//! mount's root, in any directory unless it starts with `/` (`target/**` matches
//! `/src/target/debug/x`). `*` and `?` stay within a name, `**` crosses directories, `[...]`
//! is a class. A regular expression matches the path from the mount's root, which starts
//! with `/` (unanchored unless it says `^` or `$`).

use regex::bytes::Regex;

/// What a rule matches on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RulePattern {
    Glob(String),
    Regex(String),
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub pattern: RulePattern,
    /// The category's canonical name.
    pub category: String,
    /// The line of the configuration that defines it.
    pub line: usize,
    matcher: Regex,
    /// Matches the path (else the name alone).
    on_path: bool,
}

/// The longest pattern.
pub const PATTERN_BYTES_MAX: usize = 1024;
/// The most rules a store may have.
pub const RULES_MAX: usize = 1000;
/// The most memory a compiled rule may take.
const REGEX_BYTES_MAX: usize = 1 << 20;

impl Rule {
    pub fn new(pattern: RulePattern, category: String, line: usize) -> Result<Rule, String> {
        let (source, on_path) = match &pattern {
            RulePattern::Glob(g) => (glob_regex(g)?, g.contains('/')),
            RulePattern::Regex(r) => (r.clone(), true),
        };
        if source.len() > PATTERN_BYTES_MAX * 8 {
            return Err("the pattern is too long".into());
        }
        let matcher = regex::bytes::RegexBuilder::new(&source)
            .size_limit(REGEX_BYTES_MAX)
            .build()
            .map_err(|e| format!("not a regular expression: {e}"))?;
        Ok(Rule {
            pattern,
            category,
            line,
            matcher,
            on_path,
        })
    }

    /// Whether it matches a file named `name` at `path` (None: the path is not known, so
    /// a path rule does not match).
    pub fn matches(&self, name: &[u8], path: Option<&[u8]>) -> bool {
        if self.on_path {
            path.is_some_and(|p| self.matcher.is_match(p))
        } else {
            self.matcher.is_match(name)
        }
    }

    pub fn on_path(&self) -> bool {
        self.on_path
    }
}

impl std::fmt::Display for RulePattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RulePattern::Glob(g) => write!(f, "glob {g:?}"),
            RulePattern::Regex(r) => write!(f, "regex {r:?}"),
        }
    }
}

/// The regular expression of a glob (module documentation).
fn glob_regex(glob: &str) -> Result<String, String> {
    if glob.is_empty() {
        return Err("an empty glob".into());
    }
    if glob.len() > PATTERN_BYTES_MAX {
        return Err(format!("longer than {PATTERN_BYTES_MAX} bytes"));
    }
    let mut out = String::from("^");
    let mut rest = glob;
    if glob.contains('/') {
        match rest.strip_prefix('/') {
            Some(r) => {
                out.push('/');
                rest = r;
            }
            // In any directory.
            None => out.push_str("(?:.*/)?"),
        }
    }
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => {
                if chars.get(i + 2) == Some(&'/') {
                    out.push_str("(?:.*/)?");
                    i += 3;
                } else {
                    out.push_str(".*");
                    i += 2;
                }
                continue;
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            '[' => {
                let end = chars[i + 1..]
                    .iter()
                    .skip(1)
                    .position(|&c| c == ']')
                    .map(|p| i + 2 + p)
                    .ok_or_else(|| format!("{glob:?}: a [ without its ]"))?;
                out.push('[');
                let mut class: String = chars[i + 1..end].iter().collect();
                if let Some(r) = class.strip_prefix('!') {
                    class = format!("^{r}");
                }
                out.push_str(&class.replace('\\', "\\\\").replace('[', "\\["));
                out.push(']');
                i = end + 1;
                continue;
            }
            c => out.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    out.push('$');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(p: RulePattern) -> Rule {
        Rule::new(p, "X".into(), 1).unwrap()
    }

    fn glob(g: &str) -> Rule {
        rule(RulePattern::Glob(g.into()))
    }

    fn m(r: &Rule, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap();
        r.matches(name.as_bytes(), Some(path.as_bytes()))
    }

    #[test]
    fn globs_match_names_or_paths() {
        let o = glob("*.o");
        assert!(m(&o, "/a/b/main.o"));
        assert!(!m(&o, "/a/b/main.oo"));
        assert!(!m(&o, "/a/b.o/main.c"));
        assert!(!o.on_path(), "a name glob needs no path");
        let target = glob("target/**");
        assert!(m(&target, "/p/target/debug/x"));
        assert!(m(&target, "/target/x"));
        assert!(!m(&target, "/p/target"));
        assert!(!m(&target, "/p/mytarget/x"));
        let cache = glob(".cache/**");
        assert!(m(&cache, "/home/u/.cache/a/b"));
        assert!(!m(&cache, "/home/u/xcache/a"));
        let rooted = glob("/build/*.log");
        assert!(m(&rooted, "/build/x.log"));
        assert!(!m(&rooted, "/src/build/x.log"));
        assert!(!m(&rooted, "/build/sub/x.log"));
        let any_log = glob("**/logs/*.txt");
        assert!(m(&any_log, "/logs/a.txt"));
        assert!(m(&any_log, "/x/y/logs/a.txt"));
        let class = glob("*.[ch]");
        assert!(m(&class, "/a.c") && m(&class, "/a.h") && !m(&class, "/a.o"));
        let not = glob("x[!0-9]");
        assert!(m(&not, "/xa") && !m(&not, "/x1"));
        assert!(m(&glob("?.tmp"), "/a.tmp") && !m(&glob("?.tmp"), "/ab.tmp"));
        assert!(
            m(&glob("a+b(1).txt"), "/a+b(1).txt"),
            "regex characters are literal"
        );
        assert!(!target.matches(b"x", None), "a path rule needs the path");
    }

    #[test]
    fn regexes_match_paths() {
        let r = rule(RulePattern::Regex(r"\.(aux|dvi|log)$".into()));
        assert!(m(&r, "/doc/paper.aux"));
        assert!(!m(&r, "/doc/paper.tex"));
        let anchored = rule(RulePattern::Regex("^/scratch/".into()));
        assert!(m(&anchored, "/scratch/a"));
        assert!(!m(&anchored, "/home/scratch/a"));
    }

    #[test]
    fn bad_patterns_say_why() {
        assert!(Rule::new(RulePattern::Glob("*.[ch".into()), "X".into(), 1)
            .unwrap_err()
            .contains("without its ]"));
        assert!(Rule::new(RulePattern::Regex("(".into()), "X".into(), 1)
            .unwrap_err()
            .contains("not a regular expression"));
        assert!(Rule::new(RulePattern::Glob(String::new()), "X".into(), 1).is_err());
    }
}

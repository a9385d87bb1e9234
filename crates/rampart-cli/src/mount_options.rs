//! `-o` mount options, as mount(8), /etc/fstab and systemd mount units give them: every
//! `rampart mount` option under its own name (`memory_cap=4G`, `threads=8`, `private`, ...),
//! the generic flags the kernel understands (`ro`, `noexec`, `nosuid`, ...), and the options
//! that belong to mount(8), fstab or systemd, which are accepted and ignored
//! (docs/decisions/0042).

/// Generic mount flags passed to the kernel, as pairs of opposites: the later of a pair wins.
const KERNEL_FLAG_PAIRS: [(&str, &str); 6] = [
    ("rw", "ro"),
    ("dev", "nodev"),
    ("suid", "nosuid"),
    ("exec", "noexec"),
    ("atime", "noatime"),
    ("async", "sync"),
];

/// Kernel flags without an opposite.
const KERNEL_FLAGS_SINGLE: [&str; 1] = ["dirsync"];

/// Options that mean something to mount(8), fstab, systemd or the kernel's defaults but
/// nothing to rampart: accepted and ignored. `x-*` and `comment=*` are too.
const IGNORED: [&str; 24] = [
    "defaults",
    "auto",
    "noauto",
    "nofail",
    "_netdev",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "lazytime",
    "nolazytime",
    "diratime",
    "nodiratime",
    "silent",
    "loud",
    "iversion",
    "noiversion",
    // rampart always lets the kernel check permissions.
    "default_permissions",
    // What the kernel calls the mount is rampart's to set (the store and `fuse.rampart`).
    "subtype=rampart",
];

/// `rampart mount` options that take a value, by their `-o` name (also spelled with `-`).
pub const VALUE_OPTIONS: [&str; 14] = [
    "memory_cap",
    "threads",
    "writeback_cache",
    "no_open",
    "no_flush",
    "fuse_io_uring",
    "passthrough",
    "commit_interval",
    "checkpoint_after",
    "log_level",
    "metrics_socket",
    "metrics_listen",
    "large_file_threshold",
    "evict_min_size",
];

/// `rampart mount` switches, by their `-o` name. `owner_only` is `--private`: mount(8) takes
/// `private` for itself (mount propagation) and never passes it on.
pub const SWITCH_OPTIONS: [&str; 3] = ["owner_only", "private", "allow_other"];

/// One `-o` option, sorted out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A `rampart mount` option with a value: (`--` name, value).
    Value(&'static str, String),
    /// A `rampart mount` switch, by its `--` name.
    Switch(&'static str),
    /// A generic flag for the kernel.
    KernelFlag(String),
    /// Meaningless here.
    Ignored,
}

/// Sorts out one option (`memory_cap=4G`, `noexec`, `nofail`, ...).
pub fn parse_one(option: &str) -> Result<Parsed, String> {
    let (name, value) = match option.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (option, None),
    };
    let name_norm = name.replace('-', "_");
    if let Some(&known) = VALUE_OPTIONS.iter().find(|o| **o == name_norm) {
        return match value {
            Some(v) if !v.is_empty() => Ok(Parsed::Value(known, v.to_string())),
            _ => Err(format!(
                "mount option {option:?} needs a value, like {known}=VALUE"
            )),
        };
    }
    if let Some(&known) = SWITCH_OPTIONS.iter().find(|o| **o == name_norm) {
        return match value {
            None => Ok(Parsed::Switch(known)),
            Some(_) => Err(format!("mount option {known} takes no value")),
        };
    }
    let is_flag = KERNEL_FLAG_PAIRS
        .iter()
        .any(|(on, off)| *on == option || *off == option)
        || KERNEL_FLAGS_SINGLE.contains(&option);
    if is_flag {
        return Ok(Parsed::KernelFlag(option.to_string()));
    }
    if IGNORED.contains(&option) || name.starts_with("x-") || name == "comment" {
        return Ok(Parsed::Ignored);
    }
    Err(format!(
        "unknown mount option {option:?}: rampart takes {}=VALUE, {}, the generic flags {}, \
         and ignores defaults, nofail, noauto, _netdev, x-* and mount(8)'s other options \
         (man rampart-mount)",
        VALUE_OPTIONS.join("=, "),
        SWITCH_OPTIONS.join(", "),
        kernel_flag_names().join(","),
    ))
}

/// Every generic flag rampart passes to the kernel.
pub fn kernel_flag_names() -> Vec<&'static str> {
    KERNEL_FLAG_PAIRS
        .iter()
        .flat_map(|(on, off)| [*on, *off])
        .chain(KERNEL_FLAGS_SINGLE)
        .collect()
}

/// Splits `-o` strings at commas, dropping empty pieces (`rw,,noexec` and a trailing comma
/// are harmless, as for mount(8)).
pub fn split(options: &[String]) -> impl Iterator<Item = &str> {
    options
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::trim)
        .filter(|o| !o.is_empty())
}

/// The kernel flags to use, one per pair at most: the last given of each pair wins, so that
/// `defaults`-style prefixes (`rw,...`) and a later `ro` give `ro`, as with mount(8).
pub fn resolve_kernel_flags(flags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for flag in flags {
        let opposite = KERNEL_FLAG_PAIRS.iter().find_map(|(on, off)| {
            if on == flag {
                Some(*off)
            } else if off == flag {
                Some(*on)
            } else {
                None
            }
        });
        out.retain(|f| f != flag && Some(f.as_str()) != opposite);
        out.push(flag.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rampart_options_have_o_spellings() {
        assert_eq!(
            parse_one("memory_cap=4G"),
            Ok(Parsed::Value("memory_cap", "4G".into()))
        );
        assert_eq!(
            parse_one("commit-interval=1s"),
            Ok(Parsed::Value("commit_interval", "1s".into()))
        );
        assert_eq!(parse_one("private"), Ok(Parsed::Switch("private")));
        assert_eq!(parse_one("owner_only"), Ok(Parsed::Switch("owner_only")));
        assert!(parse_one("memory_cap").is_err());
        assert!(parse_one("memory_cap=").is_err());
        assert!(parse_one("private=yes").is_err());
    }

    #[test]
    fn generic_options_are_flags_or_ignored_and_the_rest_is_refused() {
        assert_eq!(parse_one("noexec"), Ok(Parsed::KernelFlag("noexec".into())));
        for ignored in [
            "defaults",
            "nofail",
            "noauto",
            "_netdev",
            "x-systemd.requires=a.mount",
            "x-systemd.automount",
            "comment=x",
            "relatime",
        ] {
            assert_eq!(parse_one(ignored), Ok(Parsed::Ignored), "{ignored}");
        }
        let err = parse_one("memory_kap=4G").unwrap_err();
        assert!(
            err.contains("unknown mount option \"memory_kap=4G\""),
            "{err}"
        );
        assert!(err.contains("memory_cap="), "{err}");
        assert!(parse_one("subtype=other").is_err());
    }

    #[test]
    fn the_last_of_a_pair_of_kernel_flags_wins() {
        let given: Vec<String> = ["rw", "nosuid", "ro", "dev", "suid", "nodev"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(resolve_kernel_flags(&given), ["ro", "suid", "nodev"]);
        let given = ["a,,b,".to_string(), "c".to_string()];
        let split: Vec<&str> = split(&given).collect();
        assert_eq!(split, ["a", "b", "c"]);
    }
}

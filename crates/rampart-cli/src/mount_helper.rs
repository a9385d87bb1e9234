//! rampart as mount(8)'s and umount(8)'s helper for the type `fuse.rampart`
//! (docs/decisions/0042):
//!
//! - called as `mount.fuse.rampart STORE MOUNTPOINT [-sfnvrw] [-o OPTIONS] [-t TYPE]` (a link
//!   to the binary in /sbin, where mount(8) looks for helpers), or as
//!   `rampart STORE MOUNTPOINT -o OPTIONS`, which is how fuse3's `mount.fuse3` runs the
//!   program of a `fuse.rampart` mount (found on the standard PATH);
//! - called as `umount.fuse.rampart MOUNTPOINT [-nlfvr] [-t TYPE]`, so that `umount`
//!   waits for the daemon's final checkpoint as `rampart umount` does.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::{mount_options, remount};

/// The name mount(8) runs for `-t fuse.rampart` (the helper's file name in /sbin).
pub const MOUNT_HELPER: &str = "mount.fuse.rampart";
/// The name umount(8) runs for a `fuse.rampart` mount.
pub const UMOUNT_HELPER: &str = "umount.fuse.rampart";

/// mount(8)'s exit codes: bad usage, and a mount that failed.
const EXIT_USAGE: u8 = 1;
const EXIT_MOUNT_FAILED: u8 = 32;

/// Runs the helper if this process was called as one, and gives its exit code.
pub fn run_if_called_as_helper() -> Option<ExitCode> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let called_as = argv
        .first()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let args = argv.get(1..).unwrap_or_default();
    let code = if called_as == MOUNT_HELPER || (called_as != UMOUNT_HELPER && is_fuse3_call(args)) {
        mount(args)
    } else if called_as == UMOUNT_HELPER {
        umount(args)
    } else {
        return None;
    };
    Some(match code {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("{called_as}: {message}");
            ExitCode::from(code)
        }
    })
}

/// `rampart STORE MOUNTPOINT ...`: a first argument that is neither a subcommand nor an
/// option is how mount.fuse3 calls the program of a `fuse.TYPE` mount.
fn is_fuse3_call(args: &[OsString]) -> bool {
    let Some(first) = args.first().and_then(|a| a.to_str()) else {
        return args.len() >= 2;
    };
    args.len() >= 2
        && !first.starts_with('-')
        && first != "help"
        && !crate::Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == first || c.get_all_aliases().any(|a| a == first))
}

/// What mount(8) gave the helper.
#[derive(Debug, Default, PartialEq)]
struct HelperArgs {
    positional: Vec<OsString>,
    options: Vec<String>,
    sloppy: bool,
    fake: bool,
    verbose: bool,
    lazy: bool,
}

/// Parses `SPEC DIR [-sfnvrwl] [-o OPTIONS] [-t TYPE]` (options anywhere, letters combined).
fn parse(args: &[OsString]) -> Result<HelperArgs, String> {
    let mut parsed = HelperArgs::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy();
        let Some(letters) = text.strip_prefix('-').filter(|l| !l.is_empty()) else {
            parsed.positional.push(arg.clone());
            continue;
        };
        for (at, letter) in letters.char_indices() {
            match letter {
                'o' | 't' | 'N' => {
                    let attached = &letters[at + 1..];
                    let value = if attached.is_empty() {
                        rest.next()
                            .map(|v| v.to_string_lossy().into_owned())
                            .ok_or_else(|| format!("-{letter} needs a value"))?
                    } else {
                        attached.to_string()
                    };
                    match letter {
                        'o' => parsed.options.push(value),
                        'N' => {
                            return Err("mounting in another namespace (-N) is not supported".into())
                        }
                        _ => {} // -t fuse.rampart: what we are.
                    }
                    break;
                }
                's' => parsed.sloppy = true,
                'f' => parsed.fake = true,
                'v' => parsed.verbose = true,
                'l' => parsed.lazy = true,
                'r' => parsed.options.push("ro".into()),
                'w' => parsed.options.push("rw".into()),
                'n' | 'i' => {} // no mtab to write; internal-only
                _ => return Err(format!("unknown option -{letter}")),
            }
        }
    }
    Ok(parsed)
}

/// `mount.fuse.rampart STORE MOUNTPOINT -o OPTIONS`: `rampart mount -o OPTIONS STORE
/// MOUNTPOINT` in the background, quietly unless -v.
fn mount(args: &[OsString]) -> Result<(), (u8, String)> {
    let usage = |e: String| (EXIT_USAGE, e);
    let helper = parse(args).map_err(usage)?;
    let [store, mountpoint] = helper.positional.as_slice() else {
        return Err(usage(
            "usage: mount.fuse.rampart STORE MOUNTPOINT [-o OPTIONS]".into(),
        ));
    };
    if mount_options::split(&helper.options).any(|o| o == remount::REMOUNT) {
        return remount_options(&helper, mountpoint);
    }
    let mut options = Vec::new();
    for option in mount_options::split(&helper.options) {
        match mount_options::parse_one(option) {
            Ok(_) => options.push(option.to_string()),
            // -s (sloppy): tolerate options we do not know, as mount(8) asks.
            Err(e) if helper.sloppy => eprintln!("{MOUNT_HELPER}: ignored: {e}"),
            Err(e) => return Err(usage(e)),
        }
    }
    let mut argv: Vec<OsString> = vec!["rampart".into(), "mount".into()];
    if !options.is_empty() {
        argv.extend(["-o".into(), options.join(",").into()]);
    }
    argv.extend(["--".into(), store.clone(), mountpoint.clone()]);
    let cli = crate::Cli::try_parse_from(argv).map_err(|e| usage(e.to_string()))?;
    let crate::Cmd::Mount(mut mount_args) = cli.command else {
        unreachable!("the argv above names the mount subcommand")
    };
    mount_args.apply_options().map_err(usage)?;
    if helper.fake {
        return Ok(());
    }
    mount_args.quiet = !helper.verbose;
    crate::cmd_mount(mount_args).map_err(|e| (EXIT_MOUNT_FAILED, e))
}

/// `mount -o remount,...`: the generic flags go to the kernel (crate::remount); rampart's own
/// options cannot change while mounted and are ignored, said only under -v (mount(8) repeats
/// them from fstab, xfstests from its MOUNT_OPTIONS).
fn remount_options(helper: &HelperArgs, mountpoint: &OsString) -> Result<(), (u8, String)> {
    let mut flags = Vec::new();
    for option in mount_options::split(&helper.options) {
        let name = option.split_once('=').map_or(option, |(name, _)| name);
        match mount_options::parse_one(option) {
            // mount(8) repeats what /proc/mounts shows, the kernel's FUSE options among them.
            _ if option == remount::REMOUNT || remount::FUSE_KERNEL_OPTIONS.contains(&name) => {}
            Ok(mount_options::Parsed::KernelFlag(flag)) => flags.push(flag),
            Ok(mount_options::Parsed::Value(..)) if helper.verbose => {
                eprintln!("{MOUNT_HELPER}: ignored at remount (fixed while mounted): {option}")
            }
            Ok(_) => {}
            Err(e) if helper.sloppy => eprintln!("{MOUNT_HELPER}: ignored: {e}"),
            Err(e) => return Err((EXIT_USAGE, e)),
        }
    }
    if helper.fake {
        return Ok(());
    }
    let flags = mount_options::resolve_kernel_flags(&flags);
    remount::remount(&PathBuf::from(mountpoint), &flags).map_err(|e| (EXIT_MOUNT_FAILED, e))
}

/// `umount.fuse.rampart MOUNTPOINT [-l]`: `rampart umount [--lazy] MOUNTPOINT`.
fn umount(args: &[OsString]) -> Result<(), (u8, String)> {
    let helper = parse(args).map_err(|e| (EXIT_USAGE, e))?;
    let [mountpoint] = helper.positional.as_slice() else {
        return Err((
            EXIT_USAGE,
            "usage: umount.fuse.rampart MOUNTPOINT [-l]".into(),
        ));
    };
    if helper.fake {
        return Ok(());
    }
    crate::cmd_umount(&PathBuf::from(mountpoint), helper.lazy).map_err(|e| (EXIT_MOUNT_FAILED, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn mount_8_helper_arguments_parse() {
        let parsed = parse(&os(&[
            "/s",
            "/m",
            "-o",
            "rw,memory_cap=4G",
            "-sv",
            "-t",
            "fuse.rampart",
            "-onoexec",
        ]))
        .unwrap();
        assert_eq!(parsed.positional, os(&["/s", "/m"]));
        assert_eq!(parsed.options, ["rw,memory_cap=4G", "noexec"]);
        assert!(parsed.sloppy && parsed.verbose && !parsed.fake);
        assert!(parse(&os(&["/s", "/m", "-o"])).is_err());
        assert!(parse(&os(&["/s", "/m", "-N", "x"])).is_err());
        assert!(parse(&os(&["/m", "-l"])).unwrap().lazy);
    }

    #[test]
    fn only_a_call_without_a_subcommand_is_mount_fuse3s() {
        assert!(is_fuse3_call(&os(&["/var/store", "/mnt/x", "-o", "rw"])));
        assert!(!is_fuse3_call(&os(&["mount", "/var/store", "/mnt/x"])));
        assert!(!is_fuse3_call(&os(&["umount", "/mnt/x"])));
        assert!(!is_fuse3_call(&os(&["status", "/mnt/x"])));
        assert!(!is_fuse3_call(&os(&["--version"])));
        assert!(!is_fuse3_call(&os(&["/var/store"])));
    }
}

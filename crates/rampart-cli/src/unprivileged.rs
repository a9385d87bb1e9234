//! What a user other than root needs to mount, checked before the mount so that a refusal
//! names what is missing and what to do (docs/decisions/0044). As for every FUSE file system:
//! read and write access to /dev/fuse, the setuid `fusermount3` (which makes the mount),
//! write access to the mount point, and `user_allow_other` in /etc/fuse.conf for
//! `allow_other`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::unistd::{access, AccessFlags};

const DEV_FUSE: &str = "/dev/fuse";
const FUSE_CONF: &str = "/etc/fuse.conf";
/// Where fuse3 installs fusermount3 (it is also looked up on PATH).
const FUSERMOUNT_PATHS: [&str; 2] = ["/usr/bin/fusermount3", "/bin/fusermount3"];

/// Checks that this (non-root) user can mount at `mountpoint`.
pub fn check(mountpoint: &Path, allow_other: bool) -> Result<(), String> {
    check_dev_fuse()?;
    check_fusermount()?;
    if access(mountpoint, AccessFlags::W_OK | AccessFlags::X_OK).is_err() {
        return Err(format!(
            "you cannot mount on {}: a user may mount only on a directory they can write \
             (their own); use one under your home, or ask root to `chown {} {}`",
            mountpoint.display(),
            nix::unistd::getuid(),
            mountpoint.display()
        ));
    }
    if allow_other && !user_allow_other(&std::fs::read_to_string(FUSE_CONF).unwrap_or_default()) {
        return Err(format!(
            "allow_other needs `user_allow_other` in {FUSE_CONF} for users other than root; \
             ask root to add that line, or mount without allow_other (only you will see the \
             files)"
        ));
    }
    Ok(())
}

fn check_dev_fuse() -> Result<(), String> {
    let meta = match std::fs::metadata(DEV_FUSE) {
        Ok(m) => m,
        Err(e) => {
            return Err(format!(
                "{DEV_FUSE} is missing ({e}): this kernel has no FUSE loaded; ask root to run \
                 `modprobe fuse`"
            ))
        }
    };
    if access(DEV_FUSE, AccessFlags::R_OK | AccessFlags::W_OK).is_ok() {
        return Ok(());
    }
    let group = group_name(meta.gid());
    let mode = meta.permissions().mode() & 0o777;
    let in_group = if group == "fuse" {
        "; or add yourself to the `fuse` group (`sudo usermod -aG fuse $USER`, then log in \
         again)"
    } else {
        ""
    };
    Err(format!(
        "you cannot open {DEV_FUSE} (mode {mode:04o}, owner root, group {group}): users mount \
         FUSE file systems through it. Ask root to make it usable by every user as most \
         distributions do (`chmod 0666 {DEV_FUSE}`; for good: a udev rule \
         KERNEL==\"fuse\", MODE=\"0666\"){in_group}"
    ))
}

fn check_fusermount() -> Result<(), String> {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("fusermount3"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let found = FUSERMOUNT_PATHS
        .iter()
        .map(std::path::PathBuf::from)
        .chain(on_path)
        .find(|p| p.is_file());
    let Some(path) = found else {
        return Err(
            "fusermount3 is not installed: users mount FUSE file systems through it; ask root \
             to install fuse3 (`apt install fuse3`)"
                .into(),
        );
    };
    let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.uid() != 0 || meta.permissions().mode() & 0o4000 == 0 {
        return Err(format!(
            "{} is not setuid root, so it cannot mount for users; ask root to run \
             `chmod u+s {}` (or reinstall fuse3)",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// Whether /etc/fuse.conf's text has the `user_allow_other` line.
fn user_allow_other(conf: &str) -> bool {
    conf.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .any(|l| l == "user_allow_other")
}

fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn user_allow_other_is_found_only_uncommented() {
        assert!(super::user_allow_other("# x\nuser_allow_other\n"));
        assert!(super::user_allow_other("  user_allow_other # yes\n"));
        assert!(!super::user_allow_other("#user_allow_other\n"));
        assert!(!super::user_allow_other("mount_max = 10\n"));
    }
}

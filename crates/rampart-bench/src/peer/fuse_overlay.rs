//! The fuse-overlayfs peer over a tmpfs: the userspace (FUSE) baseline.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::describe::{bytes_or_unknown, bytes_text};
use super::measure::{process_memory, statfs_used_bytes};
use super::mount_command::MountCommand;
use super::{create_dir, resolve, Peer, PeerEnv, Usage, MOUNT_TIMEOUT, UNMOUNT_TIMEOUT};
use crate::cleanup::{self, tool};
use crate::error::{BenchError, Result};

impl Peer {
    pub(super) fn build_fuse_overlay(&mut self, env: &PeerEnv, base: &Path) -> Result<()> {
        let size = env.profile.device_size_bytes();
        let backing = base.join("backing");
        create_dir(&backing)?;
        let backing = resolve(&backing)?;
        let tmpfs_mount = MountCommand::tmpfs(size, &backing);
        self.mount(tmpfs_mount.clone(), &backing)?;
        self.backing_tmpfs = Some(backing.clone());
        let dirs = ["lower", "upper", "work"].map(|d| backing.join(d));
        for dir in &dirs {
            create_dir(dir)?;
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            dirs[0].display(),
            dirs[1].display(),
            dirs[2].display()
        );
        if options.matches(',').count() != 2 {
            return Err(BenchError::Other(format!(
                "fuse-overlayfs cannot take folders whose names hold a comma: {options}"
            )));
        }
        let program = tool("fuse-overlayfs");
        let mount = MountCommand::new(
            program.clone(),
            [
                OsString::from("-o"),
                options.into(),
                self.mnt.clone().into(),
            ],
        );
        let mnt = self.mnt.clone();
        self.undo
            .push(format!("unmount {}", mnt.display()), move || {
                // The daemon holds the backing tmpfs open: wait for it to go before that unmount.
                let daemon = fuse_overlay_pid(&mnt);
                let unmounted = cleanup::unmount(&mnt, true, UNMOUNT_TIMEOUT);
                if let Some(pid) = daemon {
                    if !cleanup::wait_for_exit(pid, Duration::from_secs(10)) {
                        return Err(BenchError::Other(format!(
                            "fuse-overlayfs (pid {pid}) still runs 10 s after its unmount"
                        )));
                    }
                }
                unmounted
            });
        self.run(&mut mount.command(), MOUNT_TIMEOUT)?;
        self.set(
            "file system",
            "fuse-overlayfs over tmpfs (the userspace FUSE baseline)",
        );
        self.set(
            "backing",
            format!(
                "tmpfs of {} at {} holding lower (empty), upper and work: `{}`",
                bytes_text(size),
                backing.display(),
                tmpfs_mount.text()
            ),
        );
        self.set("mount", mount.text());
        let mnt = self.mnt.clone();
        self.describe_mount(&mnt);
        self.set(
            "fuse-overlayfs version",
            self.version_lines(&program, &["--version"]),
        );
        Ok(())
    }

    pub(super) fn fuse_overlay_usage(&self) -> Result<Usage> {
        let backing = self
            .backing_tmpfs
            .as_deref()
            .expect("fuse-overlayfs has a tmpfs");
        let tmpfs = statfs_used_bytes(backing)?;
        let pid = fuse_overlay_pid(&self.mnt).ok_or_else(|| {
            BenchError::Other(format!(
                "no fuse-overlayfs process serves {}",
                self.mnt.display()
            ))
        })?;
        let memory = process_memory(pid)?;
        Ok(Usage {
            ram_bytes: Some(tmpfs + memory.rss_bytes),
            store_bytes: None,
            method: format!(
                "RAM: statfs used bytes of the backing tmpfs ({}) + Rss of fuse-overlayfs \
                 pid {pid} from {} ({}; Pss {}); store: none (volatile)",
                bytes_text(tmpfs),
                memory.source,
                bytes_text(memory.rss_bytes),
                bytes_or_unknown(memory.pss_bytes)
            ),
        })
    }
}

/// The fuse-overlayfs process serving `mnt` (its last argument is the mount point).
fn fuse_overlay_pid(mnt: &Path) -> Option<u32> {
    let want = mnt.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .collect();
            let program = Path::new(std::str::from_utf8(args.first()?).ok()?);
            (program.file_name()? == "fuse-overlayfs"
                && *args.last()? == want
                && cleanup::pid_alive(pid))
            .then_some(pid)
        })
}

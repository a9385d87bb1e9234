//! The loop-device peers: ext4, XFS and btrfs, each made with its defaults on a loop device
//! over a sparse file (in /dev/shm for the RAM disks, on the real disk for ext4-disk).

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::describe::bytes_text;
use super::measure::allocated_bytes;
use super::mount_command::MountCommand;
use super::{resolve, Peer, PeerEnv, PeerKind, Usage, MKFS_TIMEOUT, MOUNT_TIMEOUT};
use crate::cleanup::{self, tool};
use crate::cmd;
use crate::error::{BenchError, Result};

/// How a loop-device peer's file system is made and mounted.
struct LoopFs {
    /// The type given to `mount -t`.
    fs: &'static str,
    mkfs: &'static str,
    mkfs_flags: &'static [&'static str],
    mount_options: &'static [&'static str],
    /// What makes mkfs print its version.
    mkfs_version_flag: &'static str,
}

fn loop_fs(kind: PeerKind) -> LoopFs {
    let (fs, mkfs, mkfs_flags, mount_options): (_, _, &[&str], &[&str]) = match kind {
        PeerKind::Ext4Ram | PeerKind::Ext4Disk => ("ext4", "mkfs.ext4", &["-q", "-F"], &[]),
        // Every write(2) synchronous: ext4's own answer to "durable when write returns".
        PeerKind::Ext4Sync => ("ext4", "mkfs.ext4", &["-q", "-F"], &["-o", "sync"]),
        PeerKind::XfsRam => ("xfs", "mkfs.xfs", &["-q", "-f"], &[]),
        PeerKind::BtrfsRam => (
            "btrfs",
            "mkfs.btrfs",
            &["-q", "-f"],
            &["-o", "compress=zstd"],
        ),
        other => unreachable!("{} is not a loop-device peer", other.id()),
    };
    let mkfs_version_flag = if kind == PeerKind::BtrfsRam {
        "--version"
    } else {
        "-V"
    };
    LoopFs {
        fs,
        mkfs,
        mkfs_flags,
        mount_options,
        mkfs_version_flag,
    }
}

/// A file system made on a loop device and mounted, as the settings describe it.
struct MadeLoopFs {
    spec: LoopFs,
    device: String,
    mkfs: Command,
    mount: MountCommand,
    /// `dumpe2fs -h` as mkfs left it (ext4 only: read before mounting).
    ext4_layout: Option<String>,
}

impl Peer {
    /// Makes the file system of this peer's kind on a loop device over a sparse file in
    /// `base` (on `medium`, named in the settings) and mounts it.
    pub(super) fn build_loop(&mut self, env: &PeerEnv, base: &Path, medium: &str) -> Result<()> {
        let size_bytes = if matches!(self.kind, PeerKind::Ext4Disk | PeerKind::Ext4Sync) {
            env.profile.disk_device_size_bytes()
        } else {
            env.profile.device_size_bytes()
        };
        let image = self.create_image(base, size_bytes)?;
        let device = self.attach_loop(&image)?;
        let made = self.make_and_mount(loop_fs(self.kind), device)?;
        self.describe_loop(&made, &image, size_bytes, medium);
        Ok(())
    }

    /// A sparse file of `size_bytes` in `base`, removed on undo.
    fn create_image(&mut self, base: &Path, size_bytes: u64) -> Result<PathBuf> {
        let image_path = base.join("image");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&image_path)
            .and_then(|file| file.set_len(size_bytes))
            .map_err(|e| {
                BenchError::io(format!("creating the image {}", image_path.display()), e)
            })?;
        let image = resolve(&image_path)?;
        let owned = image.clone();
        self.undo
            .push(format!("remove {}", image.display()), move || {
                cleanup::remove_path(&owned)
            });
        self.image = Some(image.clone());
        Ok(image)
    }

    /// Attaches a free loop device to `image`; its name (`/dev/loopN`).
    fn attach_loop(&mut self, image: &Path) -> Result<String> {
        // Undo pushed first, by image: a losetup cut short may have attached a device it
        // never named.
        let owned_image = image.to_path_buf();
        self.undo.push(
            format!("detach the loop device of {}", image.display()),
            move || cleanup::detach_loops_of(&owned_image),
        );
        let out = self.run(
            Command::new(tool("losetup"))
                .args(["--find", "--show"])
                .arg(image),
            MOUNT_TIMEOUT,
        )?;
        let device = out.stdout.trim().to_string();
        if !device.starts_with("/dev/loop") {
            return Err(BenchError::Other(format!(
                "losetup --find --show printed {device:?}, not a loop device"
            )));
        }
        Ok(device)
    }

    fn make_and_mount(&mut self, spec: LoopFs, device: String) -> Result<MadeLoopFs> {
        let mut mkfs = Command::new(tool(spec.mkfs));
        mkfs.args(spec.mkfs_flags).arg(&device);
        self.run(&mut mkfs, MKFS_TIMEOUT)?;
        // Read before mounting: the layout as mkfs made it (no needs_recovery flag).
        let ext4_layout = (spec.fs == "ext4").then(|| self.ext4_layout(&device));

        let mut args: Vec<OsString> = vec!["-t".into(), spec.fs.into()];
        args.extend(spec.mount_options.iter().map(OsString::from));
        args.push(device.clone().into());
        args.push(self.mnt.clone().into());
        let mount = MountCommand::new(tool("mount"), args);
        let mnt = self.mnt.clone();
        self.mount(mount.clone(), &mnt)?;
        self.mount_again = Some(mount.clone());
        Ok(MadeLoopFs {
            spec,
            device,
            mkfs,
            mount,
            ext4_layout,
        })
    }

    fn describe_loop(&mut self, made: &MadeLoopFs, image: &Path, size_bytes: u64, medium: &str) {
        let fs = made.spec.fs;
        self.set("file system", fs);
        self.set(
            "device",
            format!(
                "{} (loop device, `{} --find --show`, buffered I/O) over a sparse file of {} \
                 on {medium}: {}",
                made.device,
                tool("losetup").display(),
                bytes_text(size_bytes),
                image.display()
            ),
        );
        self.set("mkfs", cmd::describe(&made.mkfs));
        self.set(
            "mkfs version",
            self.version(&tool(made.spec.mkfs), &[made.spec.mkfs_version_flag]),
        );
        self.set("mount", made.mount.text());
        let mnt = self.mnt.clone();
        self.describe_mount(&mnt);
        self.set(
            "mount version",
            self.version(&tool("mount"), &["--version"]),
        );
        match fs {
            "ext4" => {
                let layout = made.ext4_layout.clone().unwrap_or_default();
                self.set("ext4 layout (dumpe2fs -h, after mkfs)", layout);
            }
            "xfs" => {
                let layout = self.xfs_layout(&mnt);
                self.set("xfs layout (xfs_info)", layout);
            }
            _ => {
                let layout = self.btrfs_layout(&mnt);
                self.set("btrfs profiles (btrfs filesystem df)", layout);
            }
        }
        if self.kind == PeerKind::Ext4Sync {
            self.set(
                "sync mount (-o sync)",
                "every write(2) and every metadata change returns once it is on the loop \
                 device (ext4 commits its journal and writes the data synchronously): the \
                 kernel file system's way of making each write durable when it returns, \
                 the contract of rampart's SAFE; no fsync by the workloads",
            );
        }
        if matches!(self.kind, PeerKind::Ext4Disk | PeerKind::Ext4Sync) {
            self.set(
                "what the loop device costs",
                "two file systems: every write lands in ext4's page cache, then in the \
                 loop driver's (buffered I/O on the image file), and every fsync commits \
                 ext4's journal on the loop device and then flushes the image file on the \
                 host's file system; the host peer is that file system without the rest",
            );
        }
        self.set(
            "as in the papers",
            if self.kind == PeerKind::Ext4Sync {
                "ext4-disk's mkfs and mount with `-o sync` added: issue 14's reference for \
                 SAFE (ext4 on the disk mounted -o sync); the loop device adds a second file \
                 system, as for ext4-disk"
            } else if self.kind == PeerKind::Ext4Disk {
                "the same mkfs and mount defaults as ext4-ram (NGS §4.1-4.2, MRAMFS §5), on a \
                 file on the real disk instead of RAM: the disk-based reference"
            } else {
                "NGS §4.1 and MRAMFS §5: the file system made with its defaults on one \
                 RAM-backed block device (MRAMFS: 512 MB on mtdram); NGS §4.2: default \
                 journaling (data=ordered for ext*)"
            },
        );
    }

    fn ext4_layout(&self, device: &str) -> String {
        const KEYS: [&str; 6] = [
            "Filesystem features",
            "Block size",
            "Inode size",
            "Inode count",
            "Journal size",
            "Default mount options",
        ];
        self.query(
            Command::new(tool("dumpe2fs")).arg("-h").arg(device),
            |out| {
                out.stdout
                    .lines()
                    .filter_map(|line| {
                        let (key, value) = line.split_once(':')?;
                        KEYS.contains(&key.trim())
                            .then(|| format!("{}: {}", key.trim(), value.trim()))
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        )
    }

    fn xfs_layout(&self, mnt: &Path) -> String {
        self.query(Command::new(tool("xfs_info")).arg(mnt), |out| {
            xfs_info_summary(&out.stdout)
        })
    }

    fn btrfs_layout(&self, mnt: &Path) -> String {
        self.query(
            Command::new(tool("btrfs"))
                .args(["filesystem", "df"])
                .arg(mnt),
            |out| {
                out.stdout
                    .lines()
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        )
    }

    /// RAM disks: the image's allocated bytes are RAM; ext4-disk: they are the store.
    pub(super) fn loop_usage(&self) -> Result<Usage> {
        let image = self.image.as_deref().expect("loop peers have an image");
        let allocated = allocated_bytes(image)?;
        Ok(if self.kind == PeerKind::Ext4Disk {
            Usage {
                ram_bytes: None,
                store_bytes: Some(allocated),
                method: format!(
                    "store: allocated bytes (st_blocks × 512) of the disk image {}; RAM: not \
                     measurable (ext4's caches are the kernel's shared page and buffer \
                     caches, not attributed per file system)",
                    image.display()
                ),
            }
        } else {
            Usage {
                ram_bytes: Some(allocated),
                store_bytes: None,
                method: format!(
                    "RAM: allocated bytes (st_blocks × 512) of the RAM-disk image {} in \
                     /dev/shm (the file system's page cache is not counted); store: none \
                     (volatile)",
                    image.display()
                ),
            }
        })
    }
}

/// The key figures of `xfs_info`: inode size, allocation groups, block sizes, log.
fn xfs_info_summary(text: &str) -> String {
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    let mut section = String::new();
    for line in text.lines() {
        // A section's first line starts with its name ("meta-data=/dev/loop0", "data");
        // continuation lines start with "=".
        let first = line.split_whitespace().next().unwrap_or_default();
        let name = first.split('=').next().unwrap_or_default();
        if !name.is_empty() {
            section = name.to_string();
        }
        let keep: &[&str] = match section.as_str() {
            "meta-data" => &["isize", "agcount", "crc", "reflink"],
            "data" => &["bsize", "blocks"],
            "log" => &["bsize", "blocks", "version"],
            _ => &[],
        };
        let kept = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter_map(|t| {
                let (key, value) = t.split_once('=')?;
                (!value.is_empty() && keep.contains(&key)).then(|| format!("{key}={value}"))
            });
        match sections.last_mut() {
            Some((name, tokens)) if *name == section => tokens.extend(kept),
            _ => sections.push((section.clone(), kept.collect())),
        }
    }
    sections
        .into_iter()
        .filter(|(_, tokens)| !tokens.is_empty())
        .map(|(name, tokens)| format!("{name} {}", tokens.join(" ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xfs_info_is_summarised() {
        let text = "meta-data=/dev/loop0             isize=512    agcount=4, agsize=32768 blks\n\
                    \x20        =                       sectsz=512   attr=2, projid32bit=1\n\
                    \x20        =                       crc=1        finobt=1, sparse=1, rmapbt=0\n\
                    \x20        =                       reflink=1    bigtime=1 inobtcount=1 nrext64=0\n\
                    data     =                       bsize=4096   blocks=131072, imaxpct=25\n\
                    \x20        =                       sunit=0      swidth=0 blks\n\
                    naming   =version 2              bsize=4096   ascii-ci=0, ftype=1\n\
                    log      =internal log           bsize=4096   blocks=16384, version=2\n\
                    realtime =none                   extsz=4096   blocks=0, rtextents=0\n";
        assert_eq!(
            xfs_info_summary(text),
            "meta-data isize=512 agcount=4 crc=1 reflink=1; data bsize=4096 blocks=131072; \
             log bsize=4096 blocks=16384 version=2"
        );
    }
}

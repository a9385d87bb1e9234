//! The file systems under test ("peers") — set up fresh, remounted, measured and torn down.
//!
//! Every peer lives in its own folder `<id>-<n>` under the run's private folder in /dev/shm
//! (mount point, RAM-disk image, fuse-overlayfs' tmpfs) and, for ext4-disk and rampart, under
//! the run's folder on the real disk (disk image, rampart store). Every step that changes the
//! machine pushes its undo on the peer's [`UndoStack`], so a failed setup, a teardown and a
//! dropped peer all undo exactly what was done, last step first.
//!
//! The RAM disks follow the papers: NGS (§4.1) and MRAMFS (§5) built each file system with its
//! defaults on a single RAM-backed block device (a SCSI-emulated memory array; `mtdram` with
//! 512 MB), and NGS (§4.2) took ext3's default journaling (`data=ordered`) as the reference.
//! Here the block device is a loop device over a sparse file in /dev/shm, mkfs and mount run
//! with their defaults, and the only option added is btrfs' `compress=zstd` (issue 4).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cleanup::{self, run_to_end, tool, UndoStack, DISK_DIR_MARKER};
use crate::cmd::{self, Cancel};
use crate::error::{BenchError, Result};
use crate::profile::Profile;

pub use crate::cleanup::sweep_stale;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeerKind {
    /// `mount -t tmpfs`: volatile, the ramfs bound of Conquest.
    Tmpfs,
    /// ext4 on a loop device over a file in /dev/shm.
    Ext4Ram,
    /// XFS on a loop device over a file in /dev/shm.
    XfsRam,
    /// btrfs with zstd compression on a loop device over a file in /dev/shm.
    BtrfsRam,
    /// ext4 on a loop device over a file on the real disk.
    Ext4Disk,
    /// fuse-overlayfs over tmpfs: the userspace (FUSE) baseline.
    #[serde(rename = "fuse-overlayfs")]
    FuseOverlay,
    /// rampart, its store on the real disk, default persistence (within 5 s).
    Rampart,
}

impl PeerKind {
    pub const ALL: [PeerKind; 7] = [
        PeerKind::Rampart,
        PeerKind::Tmpfs,
        PeerKind::Ext4Ram,
        PeerKind::XfsRam,
        PeerKind::BtrfsRam,
        PeerKind::Ext4Disk,
        PeerKind::FuseOverlay,
    ];

    pub fn id(self) -> &'static str {
        match self {
            PeerKind::Tmpfs => "tmpfs",
            PeerKind::Ext4Ram => "ext4-ram",
            PeerKind::XfsRam => "xfs-ram",
            PeerKind::BtrfsRam => "btrfs-ram",
            PeerKind::Ext4Disk => "ext4-disk",
            PeerKind::FuseOverlay => "fuse-overlayfs",
            PeerKind::Rampart => "rampart",
        }
    }

    pub fn parse(id: &str) -> Option<PeerKind> {
        PeerKind::ALL.into_iter().find(|k| k.id() == id)
    }
}

/// Where and how peers are made in this run.
pub struct PeerEnv {
    /// A private folder in /dev/shm for RAM-disk images and rampart's RAM-side files.
    pub shm_dir: PathBuf,
    /// A private folder on the real disk for the disk loop file and rampart's store.
    pub disk_dir: PathBuf,
    /// The rampart binary (normally the running executable).
    pub rampart_bin: PathBuf,
    /// Extra `rampart mount` options (e.g. `--commit-interval 5s`), named in the report.
    pub rampart_args: Vec<String>,
    pub profile: Profile,
    pub cancel: &'static Cancel,
}

/// Memory and store bytes a peer holds now.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Usage {
    /// Bytes of RAM the file system holds for its contents (None when not measurable).
    pub ram_bytes: Option<u64>,
    /// Bytes it occupies on persistent storage (None for volatile peers).
    pub store_bytes: Option<u64>,
    /// How the two were measured, for the report.
    pub method: String,
}

/// A mounted peer. Dropping it without `teardown` still tears it down (best effort).
pub trait Mounted {
    fn kind(&self) -> PeerKind;
    /// The mount point.
    fn dir(&self) -> &Path;
    /// Unmount and mount the same data again; the time from the mount command's start until
    /// the root can be listed.
    fn remount(&mut self) -> Result<Duration>;
    fn usage(&self) -> Result<Usage>;
    /// Devices, mkfs and mount options, exactly as used.
    fn settings(&self) -> Vec<(String, String)>;
    fn teardown(self: Box<Self>) -> Result<()>;
}

/// Longest a mkfs may take (a 4 GiB device takes a second or two).
const MKFS_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest a mount (or rampart's checkpoint load) may take.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest an unmount may take: ext4-disk may have gigabytes of dirty data to write.
const UNMOUNT_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest a query (status, version, dumpe2fs) may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(20);
/// Most entries walked when adding up a store folder's bytes.
const STORE_ENTRIES_MAX: usize = 1_000_000;

/// Numbers the peers' folders so no two peers of a run share one.
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// Makes a fresh peer of `kind`. On failure everything done so far is undone; the error says
/// what failed (and what could not be undone).
pub fn setup(kind: PeerKind, env: &PeerEnv) -> Result<Box<dyn Mounted>> {
    env.cancel.check()?;
    check_tools(kind)?;
    let started = Instant::now();
    let mut peer = Peer {
        kind,
        mnt: PathBuf::new(),
        mount_again: None,
        image: None,
        backing_tmpfs: None,
        store: None,
        rampart_bin: env.rampart_bin.clone(),
        cancel: env.cancel,
        settings: Vec::new(),
        undo: UndoStack::new(),
    };
    match peer.build(env) {
        Ok(()) => {
            peer.settings.push((
                "setup time (this run)".into(),
                format!("{:.2} s", started.elapsed().as_secs_f64()),
            ));
            Ok(Box::new(peer))
        }
        Err(e) => {
            let problems = peer.undo.undo_all();
            if problems.is_empty() {
                return Err(e);
            }
            if matches!(e, BenchError::Interrupted) {
                for problem in &problems {
                    eprintln!("rampart bench: cleanup: {problem}");
                }
                return Err(e);
            }
            Err(BenchError::Other(format!(
                "{e}; undoing the setup also failed: {}",
                problems.join("; ")
            )))
        }
    }
}

/// What `kind` needs: (program, Debian package).
fn tools_needed(kind: PeerKind) -> Vec<(&'static str, &'static str)> {
    // On Debian, mount, umount and losetup are in the package "mount" (from util-linux).
    let mut tools = vec![("mount", "mount"), ("umount", "mount")];
    match kind {
        PeerKind::Tmpfs => {}
        PeerKind::Ext4Ram | PeerKind::Ext4Disk => {
            tools.extend([("losetup", "mount"), ("mkfs.ext4", "e2fsprogs")])
        }
        PeerKind::XfsRam => tools.extend([("losetup", "mount"), ("mkfs.xfs", "xfsprogs")]),
        PeerKind::BtrfsRam => tools.extend([("losetup", "mount"), ("mkfs.btrfs", "btrfs-progs")]),
        PeerKind::FuseOverlay => tools.push(("fuse-overlayfs", "fuse-overlayfs")),
        // `rampart umount` unmounts with fusermount3.
        PeerKind::Rampart => tools.push(("fusermount3", "fuse3")),
    }
    tools
}

/// The kernel file system a peer mounts, when it needs one beyond FUSE and tmpfs.
fn kernel_fs(kind: PeerKind) -> Option<&'static str> {
    match kind {
        PeerKind::Ext4Ram | PeerKind::Ext4Disk => Some("ext4"),
        PeerKind::XfsRam => Some("xfs"),
        PeerKind::BtrfsRam => Some("btrfs"),
        PeerKind::Tmpfs | PeerKind::FuseOverlay | PeerKind::Rampart => None,
    }
}

/// Fails with `Missing` when a tool this peer needs is absent (mkfs.xfs, fuse-overlayfs, ...).
pub fn check_tools(kind: PeerKind) -> Result<()> {
    for (tool, package) in tools_needed(kind) {
        if cmd::which(tool).is_none() {
            return Err(BenchError::Missing(format!(
                "{tool}, which the {} peer needs: install the Debian package {package} \
                 (apt-get install {package})",
                kind.id()
            )));
        }
    }
    let fuse = matches!(kind, PeerKind::FuseOverlay | PeerKind::Rampart);
    if fuse && !Path::new("/dev/fuse").exists() {
        return Err(BenchError::Missing(format!(
            "/dev/fuse, which the {} peer needs: load the fuse module (modprobe fuse)",
            kind.id()
        )));
    }
    if kernel_fs(kind).is_some() && !Path::new("/dev/loop-control").exists() {
        return Err(BenchError::Missing(format!(
            "/dev/loop-control, which the {} peer needs: load the loop module (modprobe loop)",
            kind.id()
        )));
    }
    if let Some(fs) = kernel_fs(kind) {
        if !kernel_knows(fs) {
            // mount(8) would load the module itself; try the same now to answer early.
            if let Some(modprobe) = cmd::which("modprobe") {
                let _ = cmd::run(
                    Command::new(modprobe).args(["-q", fs]),
                    Cancel::global(),
                    QUERY_TIMEOUT,
                );
            }
            if !kernel_knows(fs) {
                return Err(BenchError::Missing(format!(
                    "kernel support for {fs} (not in /proc/filesystems and `modprobe {fs}` \
                     did not load it), which the {} peer needs",
                    kind.id()
                )));
            }
        }
    }
    Ok(())
}

fn kernel_knows(fs: &str) -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|text| {
        text.lines()
            .any(|l| l.split_whitespace().last() == Some(fs))
    })
}

/// A mount command kept to mount the same data again.
#[derive(Clone)]
struct MountCommand {
    program: PathBuf,
    args: Vec<OsString>,
}

impl MountCommand {
    fn new(program: PathBuf, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        MountCommand {
            program,
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// `mount -t tmpfs -o size=SIZE tmpfs TARGET`.
    fn tmpfs(size_bytes: u64, target: &Path) -> Self {
        MountCommand::new(
            tool("mount"),
            [
                OsString::from("-t"),
                "tmpfs".into(),
                "-o".into(),
                format!("size={size_bytes}").into(),
                "tmpfs".into(),
                target.into(),
            ],
        )
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        command
    }

    fn text(&self) -> String {
        cmd::describe(&self.command())
    }
}

/// One mounted peer of any kind.
struct Peer {
    kind: PeerKind,
    mnt: PathBuf,
    /// How to mount the same data again; None when the data does not outlive an unmount.
    mount_again: Option<MountCommand>,
    /// The loop device's image (RAM disks, ext4-disk).
    image: Option<PathBuf>,
    /// fuse-overlayfs' tmpfs holding lower, upper and work.
    backing_tmpfs: Option<PathBuf>,
    /// rampart's store.
    store: Option<PathBuf>,
    rampart_bin: PathBuf,
    cancel: &'static Cancel,
    settings: Vec<(String, String)>,
    undo: UndoStack,
}

impl Peer {
    fn set(&mut self, key: &str, value: impl Into<String>) {
        self.settings.push((key.into(), value.into()));
    }

    fn run(&self, command: &mut Command, timeout: Duration) -> Result<cmd::Output> {
        cmd::run(command, self.cancel, timeout)
    }

    /// Makes `dir` (mode 0700, must not exist: every peer is made fresh) and remembers to
    /// remove it.
    fn make_dir(&mut self, dir: &Path) -> Result<()> {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| BenchError::io(format!("creating {}", dir.display()), e))?;
        let owned = dir.to_path_buf();
        self.undo
            .push(format!("remove {}", dir.display()), move || {
                cleanup::remove_path(&owned)
            });
        Ok(())
    }

    fn build(&mut self, env: &PeerEnv) -> Result<()> {
        let name = format!(
            "{}-{}",
            self.kind.id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let shm_base = env.shm_dir.join(&name);
        self.make_dir(&shm_base)?;
        let mnt = shm_base.join("mnt");
        std::fs::create_dir(&mnt)
            .map_err(|e| BenchError::io(format!("creating {}", mnt.display()), e))?;
        // The kernel lists mount points by their real path; compare with that one.
        self.mnt = std::fs::canonicalize(&mnt)
            .map_err(|e| BenchError::io(format!("resolving {}", mnt.display()), e))?;
        match self.kind {
            PeerKind::Tmpfs => self.build_tmpfs(env),
            PeerKind::Ext4Ram | PeerKind::XfsRam | PeerKind::BtrfsRam => {
                self.build_loop(env, &shm_base, "/dev/shm (tmpfs: RAM)")
            }
            PeerKind::Ext4Disk => {
                let disk_base = self.make_disk_dir(env, &shm_base, &name)?;
                let disk = crate::machine::file_system_of(&disk_base)
                    .map(|fs| format!("the real disk: {fs}"))
                    .unwrap_or_else(|| "the real disk".into());
                self.build_loop(env, &disk_base, &disk)
            }
            PeerKind::FuseOverlay => self.build_fuse_overlay(env, &shm_base),
            PeerKind::Rampart => {
                let disk_base = self.make_disk_dir(env, &shm_base, &name)?;
                self.build_rampart(env, &disk_base)
            }
        }?;
        self.set(
            "remount",
            match self.mount_again {
                Some(_) => {
                    "unmount, sync, drop caches, then the same mount command; timed from \
                            the mount command's start until the root is listed"
                }
                None => "not possible: the contents live only while mounted",
            },
        );
        Ok(())
    }

    /// The peer's folder on the real disk; a marker in its /dev/shm folder names the run's
    /// disk folder first, so a sweep after `kill -9` finds it.
    fn make_disk_dir(&mut self, env: &PeerEnv, shm_base: &Path, name: &str) -> Result<PathBuf> {
        let marker = shm_base.join(DISK_DIR_MARKER);
        std::fs::write(&marker, format!("{}\n", env.disk_dir.display()))
            .map_err(|e| BenchError::io(format!("writing {}", marker.display()), e))?;
        let disk_base = env.disk_dir.join(name);
        self.make_dir(&disk_base)?;
        Ok(disk_base)
    }

    /// Runs `mount` and remembers to unmount (lazily as a last resort, reported).
    /// The undo is pushed first: a mount cut short by a timeout or Ctrl-C may still have
    /// happened, and the unmount does nothing when nothing is mounted.
    fn mount(&mut self, command: MountCommand, mnt: &Path) -> Result<()> {
        let owned = mnt.to_path_buf();
        self.undo
            .push(format!("unmount {}", mnt.display()), move || {
                cleanup::unmount(&owned, true, UNMOUNT_TIMEOUT)
            });
        self.run(&mut command.command(), MOUNT_TIMEOUT)?;
        Ok(())
    }

    fn build_tmpfs(&mut self, env: &PeerEnv) -> Result<()> {
        let size = env.profile.device_size_bytes();
        let mount = MountCommand::tmpfs(size, &self.mnt);
        let mnt = self.mnt.clone();
        self.mount(mount.clone(), &mnt)?;
        self.set(
            "file system",
            "tmpfs (volatile: the ramfs/tmpfs bound of Conquest §5 and MRAMFS §5)",
        );
        self.set("size", bytes_text(size));
        self.set("mount", mount.text());
        self.describe_mount(&mnt);
        self.set(
            "mount version",
            self.version(&tool("mount"), &["--version"]),
        );
        Ok(())
    }

    fn build_loop(&mut self, env: &PeerEnv, base: &Path, medium: &str) -> Result<()> {
        let size = env.profile.device_size_bytes();
        let image_path = base.join("image");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&image_path)
            .and_then(|file| file.set_len(size))
            .map_err(|e| {
                BenchError::io(format!("creating the image {}", image_path.display()), e)
            })?;
        let image = std::fs::canonicalize(&image_path)
            .map_err(|e| BenchError::io(format!("resolving {}", image_path.display()), e))?;
        let owned = image.clone();
        self.undo
            .push(format!("remove {}", image.display()), move || {
                cleanup::remove_path(&owned)
            });
        self.image = Some(image.clone());

        // Undo pushed first, by image: a losetup cut short may have attached a device it
        // never named.
        let owned_image = image.clone();
        self.undo.push(
            format!("detach the loop device of {}", image.display()),
            move || cleanup::detach_loops_of(&owned_image),
        );
        let losetup = tool("losetup");
        let out = self.run(
            Command::new(&losetup)
                .args(["--find", "--show"])
                .arg(&image),
            MOUNT_TIMEOUT,
        )?;
        let device = out.stdout.trim().to_string();
        if !device.starts_with("/dev/loop") {
            return Err(BenchError::Other(format!(
                "losetup --find --show printed {device:?}, not a loop device"
            )));
        }

        let (fs, mkfs_name, mkfs_flags, mount_options): (&str, &str, &[&str], &[&str]) =
            match self.kind {
                PeerKind::Ext4Ram | PeerKind::Ext4Disk => ("ext4", "mkfs.ext4", &["-q", "-F"], &[]),
                PeerKind::XfsRam => ("xfs", "mkfs.xfs", &["-q", "-f"], &[]),
                PeerKind::BtrfsRam => (
                    "btrfs",
                    "mkfs.btrfs",
                    &["-q", "-f"],
                    &["-o", "compress=zstd"],
                ),
                other => unreachable!("{} is not a loop-device peer", other.id()),
            };
        let mkfs = tool(mkfs_name);
        let mut mkfs_command = Command::new(&mkfs);
        mkfs_command.args(mkfs_flags).arg(&device);
        self.run(&mut mkfs_command, MKFS_TIMEOUT)?;
        // Read before mounting: the layout as mkfs made it (no needs_recovery flag).
        let ext4_layout = (fs == "ext4").then(|| self.ext4_layout(&device));

        let mut args: Vec<OsString> = vec!["-t".into(), fs.into()];
        args.extend(mount_options.iter().map(OsString::from));
        args.push(device.clone().into());
        args.push(self.mnt.clone().into());
        let mount = MountCommand::new(tool("mount"), args);
        let mnt = self.mnt.clone();
        self.mount(mount.clone(), &mnt)?;
        self.mount_again = Some(mount.clone());

        self.set("file system", fs);
        self.set(
            "device",
            format!(
                "{device} (loop device, `{} --find --show`, buffered I/O) over a sparse file of {} \
                 on {medium}: {}",
                losetup.display(),
                bytes_text(size),
                image.display()
            ),
        );
        self.set("mkfs", cmd::describe(&mkfs_command));
        let version_flag = if self.kind == PeerKind::BtrfsRam {
            "--version"
        } else {
            "-V"
        };
        self.set("mkfs version", self.version(&mkfs, &[version_flag]));
        self.set("mount", mount.text());
        self.describe_mount(&mnt);
        self.set(
            "mount version",
            self.version(&tool("mount"), &["--version"]),
        );
        match fs {
            "ext4" => {
                let layout = ext4_layout.unwrap_or_default();
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
        self.set(
            "as in the papers",
            if self.kind == PeerKind::Ext4Disk {
                "the same mkfs and mount defaults as ext4-ram (NGS §4.1-4.2, MRAMFS §5), on a \
                 file on the real disk instead of RAM: the disk-based reference"
            } else {
                "NGS §4.1 and MRAMFS §5: the file system made with its defaults on one \
                 RAM-backed block device (MRAMFS: 512 MB on mtdram); NGS §4.2: default \
                 journaling (data=ordered for ext*)"
            },
        );
        Ok(())
    }

    fn build_fuse_overlay(&mut self, env: &PeerEnv, base: &Path) -> Result<()> {
        let size = env.profile.device_size_bytes();
        let backing = base.join("backing");
        std::fs::create_dir(&backing)
            .map_err(|e| BenchError::io(format!("creating {}", backing.display()), e))?;
        let backing = std::fs::canonicalize(&backing)
            .map_err(|e| BenchError::io(format!("resolving {}", backing.display()), e))?;
        let tmpfs_mount = MountCommand::tmpfs(size, &backing);
        self.mount(tmpfs_mount.clone(), &backing)?;
        self.backing_tmpfs = Some(backing.clone());
        let dirs = ["lower", "upper", "work"].map(|d| backing.join(d));
        for dir in &dirs {
            std::fs::create_dir(dir)
                .map_err(|e| BenchError::io(format!("creating {}", dir.display()), e))?;
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

    fn build_rampart(&mut self, env: &PeerEnv, disk_base: &Path) -> Result<()> {
        let bin = env.rampart_bin.clone();
        let store = disk_base.join("store");
        let mut mkfs = Command::new(&bin);
        mkfs.arg("mkfs").arg(&store);
        self.run(&mut mkfs, MKFS_TIMEOUT)?;
        self.store = Some(store.clone());
        let mut args: Vec<OsString> = vec![
            "mount".into(),
            store.clone().into(),
            self.mnt.clone().into(),
        ];
        args.extend(env.rampart_args.iter().map(OsString::from));
        let mount = MountCommand::new(bin.clone(), args);
        let (owned_bin, mnt, owned_store) = (bin.clone(), self.mnt.clone(), store.clone());
        self.undo
            .push(format!("rampart umount {}", mnt.display()), move || {
                // A mount interrupted by Ctrl-C may have left its daemon starting (it runs in
                // its own session, out of reach of the process-group kill): stop it before
                // its store is removed, then unmount whatever it managed to mount.
                let stopped = stop_daemons_of(&owned_store);
                rampart_unmount(&owned_bin, &mnt, true)?;
                stopped
            });
        self.run(&mut mount.command(), MOUNT_TIMEOUT)?;
        self.mount_again = Some(mount.clone());

        self.set(
            "file system",
            "rampart (FUSE daemon; metadata and small files in RAM, persisted to the store)",
        );
        self.set("rampart version", self.version(&bin, &["--version"]));
        let disk = crate::machine::file_system_of(&store)
            .map(|fs| format!(" (the real disk: {fs})"))
            .unwrap_or_default();
        self.set("store", format!("{}{disk}", store.display()));
        self.set("mkfs", cmd::describe(&mkfs));
        self.set("mount", mount.text());
        let status = self.rampart_status();
        let given = |name: &str| option_value(&env.rampart_args, name);
        let named = |name: &str, default: &str| match given(name) {
            Some(v) => format!("{v} (given)"),
            None => format!("{default} (default)"),
        };
        let interval = match &status {
            Ok(s) => format!(
                "{} ms (reported by `rampart status`; {})",
                s["persistence"]["commit_interval_ms"],
                named("--commit-interval", "5s")
            ),
            Err(_) => named("--commit-interval", "5s"),
        };
        self.set(
            "persistence: commit interval (longest a change waits to be durable)",
            interval,
        );
        self.set(
            "persistence: fsync",
            "durable at once: fsync, fdatasync and O_SYNC wait for the journal to reach the \
             store on the real disk; concurrent fsyncs share one disk sync (README)",
        );
        self.set("writeback cache", named("--writeback-cache", "on"));
        self.set(
            "no-open (kernel skips OPEN/RELEASE)",
            named("--no-open", "on"),
        );
        self.set(
            "FUSE worker threads",
            named("--threads", "twice the cores, at least 4, at most 16"),
        );
        let transport = match &status {
            Ok(s) => format!(
                "{} (reported by `rampart status`; --fuse-io-uring {})",
                s["fuse_transport"].as_str().unwrap_or("not reported"),
                named("--fuse-io-uring", "on")
            ),
            Err(_) => named("--fuse-io-uring", "on"),
        };
        self.set(
            "FUSE transport (io_uring: a queue per CPU, when the kernel offers it)",
            transport,
        );
        let cap = match &status {
            Ok(s) => format!(
                "{} ({})",
                s["memory_cap_bytes"]
                    .as_u64()
                    .map(bytes_text)
                    .unwrap_or_default(),
                named("--memory-cap", "50% of RAM")
            ),
            Err(_) => named("--memory-cap", "50% of RAM"),
        };
        self.set("memory cap", cap);
        if let Err(e) = &status {
            self.set("status", format!("`rampart status --json` failed: {e}"));
        }
        if !env.rampart_args.is_empty() {
            self.set("extra mount arguments", env.rampart_args.join(" "));
        }
        let mnt = self.mnt.clone();
        self.describe_mount(&mnt);
        Ok(())
    }

    /// The kernel's view of the mount at `mnt`: type, source and every option in effect, and
    /// the block size statfs reports.
    fn describe_mount(&mut self, mnt: &Path) {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        if let Some(entry) = mountinfo_entry(&info, mnt) {
            self.set(
                "mount options in effect (/proc/self/mountinfo)",
                format!(
                    "{} {}: {}; {}",
                    entry.fs_type, entry.source, entry.mount_options, entry.super_options
                ),
            );
        }
        if let Ok(stat) = nix::sys::statvfs::statvfs(mnt) {
            self.set(
                "block size (statfs)",
                format!(
                    "{} B (fragment {} B)",
                    stat.block_size(),
                    stat.fragment_size()
                ),
            );
        }
    }

    /// The first line a `--version` style command prints.
    fn version(&self, program: &Path, args: &[&str]) -> String {
        let text = self.version_lines(program, args);
        text.split("; ").next().unwrap_or_default().to_string()
    }

    /// Every line a `--version` style command prints, joined with "; ".
    fn version_lines(&self, program: &Path, args: &[&str]) -> String {
        match self.run(Command::new(program).args(args), QUERY_TIMEOUT) {
            Ok(out) => {
                let text = if out.stdout.trim().is_empty() {
                    out.stderr
                } else {
                    out.stdout
                };
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ")
            }
            Err(e) => format!("unknown ({e})"),
        }
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
        match self.run(
            Command::new(tool("dumpe2fs")).arg("-h").arg(device),
            QUERY_TIMEOUT,
        ) {
            Ok(out) => out
                .stdout
                .lines()
                .filter_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    KEYS.contains(&key.trim())
                        .then(|| format!("{}: {}", key.trim(), value.trim()))
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => format!("unknown ({e})"),
        }
    }

    fn xfs_layout(&self, mnt: &Path) -> String {
        match self.run(Command::new(tool("xfs_info")).arg(mnt), QUERY_TIMEOUT) {
            Ok(out) => xfs_info_summary(&out.stdout),
            Err(e) => format!("unknown ({e})"),
        }
    }

    fn btrfs_layout(&self, mnt: &Path) -> String {
        match self.run(
            Command::new(tool("btrfs"))
                .args(["filesystem", "df"])
                .arg(mnt),
            QUERY_TIMEOUT,
        ) {
            Ok(out) => out
                .stdout
                .lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => format!("unknown ({e})"),
        }
    }

    fn rampart_status(&self) -> Result<serde_json::Value> {
        let out = self.run(
            Command::new(&self.rampart_bin)
                .args(["status", "--json"])
                .arg(&self.mnt),
            QUERY_TIMEOUT,
        )?;
        serde_json::from_str(&out.stdout).map_err(|e| {
            BenchError::Other(format!("`rampart status --json` printed no JSON ({e})"))
        })
    }
}

impl Mounted for Peer {
    fn kind(&self) -> PeerKind {
        self.kind
    }

    fn dir(&self) -> &Path {
        &self.mnt
    }

    fn remount(&mut self) -> Result<Duration> {
        let Some(mount) = self.mount_again.clone() else {
            return Err(BenchError::Other(format!(
                "{} keeps its contents only while mounted: a remount would lose everything, so \
                 it cannot be remounted",
                self.kind.id()
            )));
        };
        self.cancel.check()?;
        // No lazy unmount here: mounting the same data again while the old mount lingers
        // would be wrong; a busy mount is an error of the workload.
        match self.kind {
            PeerKind::Rampart => rampart_unmount(&self.rampart_bin, &self.mnt, false)?,
            _ => cleanup::unmount(&self.mnt, false, UNMOUNT_TIMEOUT)?,
        }
        // Recovery starts cold, as after a reboot: nothing of the store in the page cache.
        drop_caches()?;
        let started = Instant::now();
        self.run(&mut mount.command(), MOUNT_TIMEOUT)?;
        let entries = std::fs::read_dir(&self.mnt)
            .and_then(|dir| dir.collect::<std::io::Result<Vec<_>>>())
            .map_err(|e| {
                BenchError::io(
                    format!("listing {} after the remount", self.mnt.display()),
                    e,
                )
            });
        let elapsed = started.elapsed();
        entries?;
        Ok(elapsed)
    }

    fn usage(&self) -> Result<Usage> {
        match self.kind {
            PeerKind::Tmpfs => Ok(Usage {
                ram_bytes: Some(statfs_used_bytes(&self.mnt)?),
                store_bytes: None,
                method: "RAM: statfs of the mount, (blocks − free blocks) × fragment size; \
                         store: none (volatile)"
                    .into(),
            }),
            PeerKind::Ext4Ram | PeerKind::XfsRam | PeerKind::BtrfsRam => {
                let image = self.image.as_deref().expect("loop peers have an image");
                Ok(Usage {
                    ram_bytes: Some(allocated_bytes(image)?),
                    store_bytes: None,
                    method: format!(
                        "RAM: allocated bytes (st_blocks × 512) of the RAM-disk image {} in \
                         /dev/shm (the file system's page cache is not counted); store: none \
                         (volatile)",
                        image.display()
                    ),
                })
            }
            PeerKind::Ext4Disk => {
                let image = self.image.as_deref().expect("loop peers have an image");
                Ok(Usage {
                    ram_bytes: None,
                    store_bytes: Some(allocated_bytes(image)?),
                    method: format!(
                        "store: allocated bytes (st_blocks × 512) of the disk image {}; RAM: not \
                         measurable (ext4's caches are the kernel's shared page and buffer \
                         caches, not attributed per file system)",
                        image.display()
                    ),
                })
            }
            PeerKind::FuseOverlay => {
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
                        memory
                            .pss_bytes
                            .map(bytes_text)
                            .unwrap_or_else(|| "unknown".into())
                    ),
                })
            }
            PeerKind::Rampart => {
                let status = self.rampart_status()?;
                let pid = status["pid"]
                    .as_u64()
                    .and_then(|p| u32::try_from(p).ok())
                    .ok_or_else(|| {
                        BenchError::Other("`rampart status --json` gave no pid".into())
                    })?;
                let memory = process_memory(pid)?;
                let store = self.store.as_deref().expect("rampart has a store");
                let store_bytes = tree_allocated_bytes(store)?;
                Ok(Usage {
                    ram_bytes: Some(memory.rss_bytes),
                    store_bytes: Some(store_bytes),
                    method: format!(
                        "RAM: Rss of the daemon (pid {pid} from `rampart status --json`) in {} \
                         (Pss {}; rampart's own accounting memory_used_bytes {}; the kernel's \
                         page cache of the mount is not counted); store: allocated bytes \
                         (st_blocks × 512) of every file in {}",
                        memory.source,
                        memory
                            .pss_bytes
                            .map(bytes_text)
                            .unwrap_or_else(|| "unknown".into()),
                        status["memory_used_bytes"]
                            .as_u64()
                            .map(bytes_text)
                            .unwrap_or_else(|| "unknown".into()),
                        store.display()
                    ),
                })
            }
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn teardown(mut self: Box<Self>) -> Result<()> {
        self.undo.undo()
    }
}

/// Stops (SIGTERM, then SIGKILL after 10 s) every rampart daemon not yet serving a mount whose
/// command line names `store`, so that no daemon is left behind a removed store. A daemon
/// that is serving a mount is left to `rampart umount`.
fn stop_daemons_of(store: &Path) -> Result<()> {
    let store = store.as_os_str().as_encoded_bytes();
    let mut stubborn = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if !(args.contains(&&b"--daemon-child"[..]) && args.contains(&store)) {
            continue;
        }
        // The mount point follows the store in the daemon's arguments; a mounted daemon is
        // stopped by unmounting, which lets it write its clean checkpoint.
        let mounted = args
            .iter()
            .position(|a| *a == store)
            .and_then(|i| args.get(i + 1))
            .map(|m| Path::new(std::ffi::OsStr::from_bytes(m)))
            .is_some_and(cleanup::is_mounted);
        if mounted {
            continue;
        }
        let Ok(raw) = libc::pid_t::try_from(pid) else {
            continue;
        };
        // SAFETY: kill(2) sends a signal; it has no memory-safety preconditions.
        unsafe { libc::kill(raw, libc::SIGTERM) };
        if !cleanup::wait_for_exit(pid, Duration::from_secs(10)) {
            // SAFETY: as above.
            unsafe { libc::kill(raw, libc::SIGKILL) };
            if !cleanup::wait_for_exit(pid, Duration::from_secs(5)) {
                stubborn.push(pid);
            }
        }
    }
    if stubborn.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Other(format!(
            "rampart daemon(s) {stubborn:?} of a store being removed did not exit"
        )))
    }
}

/// Unmounts a rampart mount with `rampart umount` (which waits for the daemon to finish
/// writing). When that keeps failing and `lazy_last_resort` is set, falls back to the plain
/// unmount (lazily if busy) and waits for the daemon, and still returns the failure.
fn rampart_unmount(bin: &Path, mnt: &Path, lazy_last_resort: bool) -> Result<()> {
    if !cleanup::is_mounted(mnt) {
        return Ok(());
    }
    let daemon = run_to_end(
        Command::new(bin).args(["status", "--json"]).arg(mnt),
        QUERY_TIMEOUT,
    )
    .ok()
    .and_then(|out| serde_json::from_str::<serde_json::Value>(&out.stdout).ok())
    .and_then(|s| s["pid"].as_u64())
    .and_then(|p| u32::try_from(p).ok());
    let mut last_error = None;
    for attempt in 0..3u32 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(500));
        }
        match run_to_end(Command::new(bin).arg("umount").arg(mnt), UNMOUNT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last_error = Some(e),
        }
        if !cleanup::is_mounted(mnt) {
            break;
        }
    }
    let failure = last_error.map(|e| e.to_string()).unwrap_or_default();
    if !lazy_last_resort {
        return Err(BenchError::Other(failure));
    }
    let fallback = match cleanup::unmount(mnt, true, UNMOUNT_TIMEOUT) {
        Ok(()) => "unmounted it with umount".to_string(),
        Err(e) => e.to_string(),
    };
    let waited = match daemon {
        Some(pid) if !cleanup::wait_for_exit(pid, Duration::from_secs(60)) => {
            format!("; daemon {pid} still runs after 60 s")
        }
        _ => String::new(),
    };
    Err(BenchError::Other(format!("{failure}; {fallback}{waited}")))
}

/// The value given to a `--name value` or `--name=value` option.
fn option_value(args: &[String], name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == name {
            return Some(iter.next().cloned().unwrap_or_else(|| "(set)".into()));
        }
        if let Some(value) = arg.strip_prefix(&prefix) {
            return Some(value.to_string());
        }
    }
    None
}

/// One line of /proc/self/mountinfo.
struct MountEntry {
    fs_type: String,
    source: String,
    mount_options: String,
    super_options: String,
}

/// The last (topmost) mount at `mnt` in a mountinfo text.
fn mountinfo_entry(mountinfo: &str, mnt: &Path) -> Option<MountEntry> {
    let points = cleanup::mount_points(mountinfo);
    let index = points.iter().rposition(|p| p == mnt)?;
    let line = mountinfo.lines().nth(index)?;
    let (before, after) = line.split_once(" - ")?;
    let mount_options = before.split(' ').nth(5)?.to_string();
    let mut rest = after.split(' ');
    Some(MountEntry {
        fs_type: rest.next()?.to_string(),
        source: rest.next()?.to_string(),
        mount_options,
        super_options: rest.next().unwrap_or_default().to_string(),
    })
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

/// "512 MiB (536870912 B)".
fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {} ({bytes} B)", UNITS[unit])
    }
}

/// Bytes in use on the file system mounted at `mnt`, by statfs.
fn statfs_used_bytes(mnt: &Path) -> Result<u64> {
    let stat = nix::sys::statvfs::statvfs(mnt).map_err(|e| {
        BenchError::io(
            format!("statfs of {}", mnt.display()),
            std::io::Error::from(e),
        )
    })?;
    let used_blocks = (stat.blocks() as u64).saturating_sub(stat.blocks_free() as u64);
    Ok(used_blocks * stat.fragment_size() as u64)
}

/// Bytes a file really occupies (st_blocks × 512: holes excluded).
fn allocated_bytes(path: &Path) -> Result<u64> {
    std::fs::symlink_metadata(path)
        .map(|m| m.blocks() * 512)
        .map_err(|e| BenchError::io(format!("stat of {}", path.display()), e))
}

/// Allocated bytes of every file under `root` (at most `STORE_ENTRIES_MAX` entries).
fn tree_allocated_bytes(root: &Path) -> Result<u64> {
    let mut total = 0;
    let mut pending = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(path) = pending.pop() {
        seen += 1;
        if seen > STORE_ENTRIES_MAX {
            return Err(BenchError::Other(format!(
                "{} holds more than {STORE_ENTRIES_MAX} entries: not adding them up",
                root.display()
            )));
        }
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            // A file the daemon replaced meanwhile (checkpoint.tmp renamed) is fine to miss.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(BenchError::io(format!("stat of {}", path.display()), e)),
        };
        total += meta.blocks() * 512;
        if meta.is_dir() {
            let entries = std::fs::read_dir(&path)
                .map_err(|e| BenchError::io(format!("listing {}", path.display()), e))?;
            pending.extend(entries.flatten().map(|entry| entry.path()));
        }
    }
    Ok(total)
}

/// A process's memory, from /proc.
struct ProcessMemory {
    rss_bytes: u64,
    pss_bytes: Option<u64>,
    source: String,
}

fn process_memory(pid: u32) -> Result<ProcessMemory> {
    let rollup = format!("/proc/{pid}/smaps_rollup");
    if let Ok(text) = std::fs::read_to_string(&rollup) {
        if let Some(rss) = kib_field(&text, "Rss:") {
            return Ok(ProcessMemory {
                rss_bytes: rss,
                pss_bytes: kib_field(&text, "Pss:"),
                source: rollup,
            });
        }
    }
    // Kernels before 4.14 have no smaps_rollup.
    let status = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&status)
        .map_err(|e| BenchError::io(format!("reading {status}"), e))?;
    let rss = kib_field(&text, "VmRSS:")
        .ok_or_else(|| BenchError::Other(format!("{status} has no VmRSS")))?;
    Ok(ProcessMemory {
        rss_bytes: rss,
        pss_bytes: None,
        source: status,
    })
}

/// A "Key:   123 kB" line of /proc, in bytes.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
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

/// `sync; echo 3 > /proc/sys/vm/drop_caches` — between workloads, as the papers did.
pub fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .map_err(|e| BenchError::io("writing /proc/sys/vm/drop_caches (run as root)", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_values_in_both_spellings() {
        let args: Vec<String> = ["--commit-interval", "1s", "--writeback-cache=off"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            option_value(&args, "--commit-interval").as_deref(),
            Some("1s")
        );
        assert_eq!(
            option_value(&args, "--writeback-cache").as_deref(),
            Some("off")
        );
        assert_eq!(option_value(&args, "--threads"), None);
    }

    #[test]
    fn mountinfo_entries() {
        let text = "22 1 0:21 / / rw,relatime - ext4 /dev/vda rw,discard\n\
                    44 30 0:41 / /dev/shm/x/mnt rw,nosuid,nodev,relatime - fuse /store rw,user_id=0,allow_other\n";
        let e = mountinfo_entry(text, Path::new("/dev/shm/x/mnt")).unwrap();
        assert_eq!(e.fs_type, "fuse");
        assert_eq!(e.source, "/store");
        assert_eq!(e.mount_options, "rw,nosuid,nodev,relatime");
        assert_eq!(e.super_options, "rw,user_id=0,allow_other");
        assert!(mountinfo_entry(text, Path::new("/nowhere")).is_none());
    }

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

    #[test]
    fn byte_texts() {
        assert_eq!(bytes_text(512), "512 B");
        assert_eq!(bytes_text(512 << 20), "512.0 MiB (536870912 B)");
    }

    #[test]
    fn proc_fields_in_bytes() {
        let text = "Rss:                2048 kB\nPss:                1024 kB\n";
        assert_eq!(kib_field(text, "Rss:"), Some(2 << 20));
        assert_eq!(kib_field(text, "Pss:"), Some(1 << 20));
        assert_eq!(kib_field(text, "Swap:"), None);
        let own = process_memory(std::process::id()).unwrap();
        assert!(own.rss_bytes > 0);
    }

    #[test]
    fn every_peer_names_its_tools_packages() {
        for kind in PeerKind::ALL {
            assert!(!tools_needed(kind).is_empty(), "{}", kind.id());
        }
    }
}

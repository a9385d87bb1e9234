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
//!
//! One module per kind of peer (`tmpfs`, `loop_device` for ext4/XFS/btrfs,
//! `fuse_overlay`, `rampart`); `requirements` checks what a peer needs before setup,
//! `measure` adds up RAM and store bytes, `describe` words the settings.

mod daemon;
mod describe;
mod floor;
mod fuse_overlay;
mod host;
mod juicefs;
mod loop_device;
mod measure;
mod mount_command;
mod rampart;
pub mod requests;
mod requirements;
mod tmpfs;

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cleanup::{self, UndoStack, DISK_DIR_MARKER};
use crate::cmd::{self, Cancel};
use crate::error::{BenchError, Result};
use crate::profile::Profile;
use mount_command::MountCommand;

pub use crate::cleanup::sweep_stale;
pub use requests::RequestCounter;
pub use requirements::check_tools;

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
    /// ext4 on a loop device over a file on the real disk: a fresh file system, paid for with
    /// two (the loop image lives on the host's file system).
    Ext4Disk,
    /// The host's file system under the store, used directly: a folder beside rampart's store
    /// (no FUSE, no loop device). The durable and large-file peer (decision 0061).
    Host,
    /// fuse-overlayfs over tmpfs: the userspace (FUSE) baseline.
    #[serde(rename = "fuse-overlayfs")]
    FuseOverlay,
    /// JuiceFS: metadata in a local Redis, data in a folder on the real disk (decision 0071).
    #[serde(rename = "juicefs")]
    JuiceFs,
    /// The FUSE floor: a FUSE server whose handlers do nothing useful, mounted with rampart's
    /// FUSE settings (decision 0070).
    Floor,
    /// rampart, its store on the real disk, default persistence (within 5 s).
    Rampart,
    /// rampart as above, its store's `rampart.toml` making every new file and directory
    /// TEMPORARY (`lm=never`: nothing reaches the store; issue 14).
    RampartTemporary,
    /// rampart, every new file and directory SAFE by a rule (`lm=before_write`: each
    /// write(2) durable when it returns; issue 14).
    RampartSafe,
    /// rampart, every new file and directory EVENTUAL by a rule (`lm=1h`: held out of the
    /// store by the archiver, decision 0090).
    RampartEventual,
    /// rampart, the edit workload's files EDITED by a rule (`lm=until_close`).
    RampartEdited,
    /// ext4 on a loop device over a file on the real disk, as ext4-disk, mounted `-o sync`.
    Ext4Sync,
    /// The host folder, as `host`, where the workloads fsync every file they write before
    /// closing it (decision 0108).
    HostFsync,
}

impl PeerKind {
    /// Every peer `--peers` knows, in report order.
    pub const ALL: [PeerKind; 16] = [
        PeerKind::Rampart,
        PeerKind::RampartTemporary,
        PeerKind::RampartSafe,
        PeerKind::RampartEventual,
        PeerKind::RampartEdited,
        PeerKind::Floor,
        PeerKind::Tmpfs,
        PeerKind::Ext4Ram,
        PeerKind::XfsRam,
        PeerKind::BtrfsRam,
        PeerKind::Ext4Disk,
        PeerKind::Ext4Sync,
        PeerKind::Host,
        PeerKind::HostFsync,
        PeerKind::FuseOverlay,
        PeerKind::JuiceFs,
    ];

    /// The peers of a run that names none: the issue-14 variants (SAFE, EVENTUAL, EDITED,
    /// `-o sync`, fsync per file) run only when named, so the default run does not grow
    /// (decision 0108).
    pub const DEFAULT: [PeerKind; 11] = [
        PeerKind::Rampart,
        PeerKind::RampartTemporary,
        PeerKind::Floor,
        PeerKind::Tmpfs,
        PeerKind::Ext4Ram,
        PeerKind::XfsRam,
        PeerKind::BtrfsRam,
        PeerKind::Ext4Disk,
        PeerKind::Host,
        PeerKind::FuseOverlay,
        PeerKind::JuiceFs,
    ];

    pub fn id(self) -> &'static str {
        match self {
            PeerKind::Tmpfs => "tmpfs",
            PeerKind::Ext4Ram => "ext4-ram",
            PeerKind::XfsRam => "xfs-ram",
            PeerKind::BtrfsRam => "btrfs-ram",
            PeerKind::Ext4Disk => "ext4-disk",
            PeerKind::Host => "host",
            PeerKind::FuseOverlay => "fuse-overlayfs",
            PeerKind::JuiceFs => "juicefs",
            PeerKind::Floor => "floor",
            PeerKind::Rampart => "rampart",
            PeerKind::RampartTemporary => "rampart-temporary",
            PeerKind::RampartSafe => "rampart-safe",
            PeerKind::RampartEventual => "rampart-eventual",
            PeerKind::RampartEdited => "rampart-edited",
            PeerKind::Ext4Sync => "ext4-sync",
            PeerKind::HostFsync => "host-fsync",
        }
    }

    /// rampart, whatever its store default or rules.
    pub fn is_rampart(self) -> bool {
        matches!(
            self,
            PeerKind::Rampart
                | PeerKind::RampartTemporary
                | PeerKind::RampartSafe
                | PeerKind::RampartEventual
                | PeerKind::RampartEdited
        )
    }

    /// Whether the workloads fsync every file they write before closing it on this peer
    /// (host-fsync); a workload that cannot is not run on it (`Workload::fsyncs_each_file`).
    pub fn fsync_each_file(self) -> bool {
        self == PeerKind::HostFsync
    }

    /// The host's own file system under the store, used directly (host, host-fsync).
    pub fn is_host(self) -> bool {
        matches!(self, PeerKind::Host | PeerKind::HostFsync)
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

/// What a crash remount measured.
#[derive(Clone, Debug)]
pub struct CrashRemount {
    /// From the mount command's start until the root can be listed.
    pub mount_time: Duration,
    /// The journal's length at the kill, as the daemon reported it.
    pub journal_bytes: u64,
    /// What the new daemon logged of its recovery (ops replayed, batches, its own time).
    pub recovered: Option<String>,
}

/// A mounted peer. Dropping it without `teardown` still tears it down (best effort).
pub trait Mounted {
    fn kind(&self) -> PeerKind;
    /// The mount point.
    fn dir(&self) -> &Path;
    /// Unmount and mount the same data again; the time from the mount command's start until
    /// the root can be listed.
    fn remount(&mut self) -> Result<Duration>;
    /// Kill the file system's daemon (`kill -9`), detach the dead mount and mount the same
    /// data again, timed as `remount`: a crash recovery with a journal to replay. None for
    /// peers without a daemon to kill (kernel file systems).
    fn crash_remount(&mut self) -> Result<Option<CrashRemount>> {
        Ok(None)
    }
    fn usage(&self) -> Result<Usage>;
    /// Where the peer keeps its data on the real disk (rampart's store, ext4-disk's image, the
    /// host peer's folder); None for peers that live in RAM. The disk-tier workloads find the
    /// block device to count writes on from it.
    fn disk_path(&self) -> Option<PathBuf> {
        None
    }
    /// How the peer placed its data across tiers, as it reports it (rampart's `status
    /// --json` tiers); None for peers without tiers.
    fn tier_summary(&self) -> Option<String> {
        None
    }
    /// Bytes the file system has written to its store since it was mounted, once the changes
    /// made so far are durable; None for peers that do not count them (rampart counts them
    /// itself: `persistence.store_written_bytes` of `rampart status --json`).
    fn store_bytes_written(&self) -> Option<Result<u64>> {
        None
    }
    /// How to read the FUSE requests it answered, by opcode, where it counts them (rampart,
    /// the floor).
    fn request_counter(&self) -> Option<RequestCounter> {
        None
    }
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
        daemon_pid: None,
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
    /// rampart's store, the host peer's folder, or JuiceFS' folder.
    store: Option<PathBuf>,
    /// The server the bench started and stops: the floor's, or JuiceFS' Redis.
    daemon_pid: Option<u32>,
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
        create_dir(&mnt)?;
        // The kernel lists mount points by their real path; compare with that one.
        self.mnt = resolve(&mnt)?;
        match self.kind {
            PeerKind::Tmpfs => self.build_tmpfs(env),
            PeerKind::Ext4Ram | PeerKind::XfsRam | PeerKind::BtrfsRam => {
                self.build_loop(env, &shm_base, "/dev/shm (tmpfs: RAM)")
            }
            PeerKind::Ext4Disk | PeerKind::Ext4Sync => {
                let disk_base = self.make_disk_dir(env, &shm_base, &name)?;
                let disk = crate::machine::file_system_of(&disk_base)
                    .map(|fs| format!("the real disk: {fs}"))
                    .unwrap_or_else(|| "the real disk".into());
                self.build_loop(env, &disk_base, &disk)
            }
            PeerKind::FuseOverlay => self.build_fuse_overlay(env, &shm_base),
            PeerKind::Host | PeerKind::HostFsync => {
                let disk_base = self.make_disk_dir(env, &shm_base, &name)?;
                self.build_host(&disk_base)
            }
            PeerKind::Rampart
            | PeerKind::RampartTemporary
            | PeerKind::RampartSafe
            | PeerKind::RampartEventual
            | PeerKind::RampartEdited => {
                let disk_base = self.make_disk_dir(env, &shm_base, &name)?;
                self.build_rampart(env, &disk_base)
            }
            PeerKind::Floor => self.build_floor(env, &shm_base),
            PeerKind::JuiceFs => {
                let disk_base = self.make_disk_dir(env, &shm_base, &name)?;
                self.build_juicefs(env, &disk_base)
            }
        }?;
        self.set(
            "remount",
            match self.mount_again {
                Some(_) => {
                    "unmount, sync, drop caches, then the same mount command; timed from \
                            the mount command's start until the root is listed"
                }
                None if self.kind.is_host() => {
                    "not possible: the host's file system is the machine's own, not the \
                     bench's to unmount"
                }
                None if self.kind == PeerKind::JuiceFs => {
                    "not done by the bench for JuiceFS (its recovery is not measured)"
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
            if self.kind.is_host() {
                return Err(BenchError::Other(
                    "host is the machine's own file system under the store: the bench does \
                     not unmount it, so it cannot be remounted"
                        .into(),
                ));
            }
            if self.kind == PeerKind::JuiceFs {
                return Err(BenchError::Other(
                    "JuiceFS cannot be remounted by the bench: its recovery is not measured".into(),
                ));
            }
            return Err(BenchError::Other(format!(
                "{} keeps its contents only while mounted: a remount would lose everything, so \
                 it cannot be remounted",
                self.kind.id()
            )));
        };
        self.cancel.check()?;
        // No lazy unmount here: mounting the same data again while the old mount lingers
        // would be wrong; a busy mount is an error of the workload.
        if self.kind.is_rampart() {
            rampart::rampart_unmount(&self.rampart_bin, &self.mnt, false)?;
        } else {
            cleanup::unmount(&self.mnt, false, UNMOUNT_TIMEOUT)?;
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

    fn crash_remount(&mut self) -> Result<Option<CrashRemount>> {
        match (self.kind, self.mount_again.clone()) {
            (kind, Some(mount)) if kind.is_rampart() => {
                self.rampart_crash_remount(&mount).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn usage(&self) -> Result<Usage> {
        match self.kind {
            PeerKind::Tmpfs => self.tmpfs_usage(),
            PeerKind::Ext4Ram
            | PeerKind::XfsRam
            | PeerKind::BtrfsRam
            | PeerKind::Ext4Disk
            | PeerKind::Ext4Sync => self.loop_usage(),
            PeerKind::FuseOverlay => self.fuse_overlay_usage(),
            PeerKind::Rampart
            | PeerKind::RampartTemporary
            | PeerKind::RampartSafe
            | PeerKind::RampartEventual
            | PeerKind::RampartEdited => self.rampart_usage(),
            PeerKind::Host | PeerKind::HostFsync => self.host_usage(),
            PeerKind::Floor => self.floor_usage(),
            PeerKind::JuiceFs => self.juicefs_usage(),
        }
    }

    fn disk_path(&self) -> Option<PathBuf> {
        match self.kind {
            kind if kind.is_rampart() || kind.is_host() => self.store.clone(),
            PeerKind::JuiceFs => self.store.clone(),
            PeerKind::Ext4Disk | PeerKind::Ext4Sync => self.image.clone(),
            _ => None,
        }
    }

    fn tier_summary(&self) -> Option<String> {
        self.kind.is_rampart().then(|| self.rampart_tiers())
    }

    fn store_bytes_written(&self) -> Option<Result<u64>> {
        self.kind
            .is_rampart()
            .then(|| self.rampart_store_bytes_written())
    }

    fn request_counter(&self) -> Option<RequestCounter> {
        match self.kind {
            kind if kind.is_rampart() => Some(RequestCounter::Rampart {
                bin: self.rampart_bin.clone(),
                mnt: self.mnt.clone(),
            }),
            PeerKind::Floor => Some(RequestCounter::Floor {
                mnt: self.mnt.clone(),
            }),
            _ => None,
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn teardown(mut self: Box<Self>) -> Result<()> {
        self.undo.undo()
    }
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches` — between workloads, as the papers did.
pub fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .map_err(|e| BenchError::io("writing /proc/sys/vm/drop_caches (run as root)", e))
}

/// Makes `dir` (its parent must exist).
fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir(dir).map_err(|e| BenchError::io(format!("creating {}", dir.display()), e))
}

/// The real path of `path`: the kernel lists mount points by theirs.
fn resolve(path: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(path)
        .map_err(|e| BenchError::io(format!("resolving {}", path.display()), e))
}

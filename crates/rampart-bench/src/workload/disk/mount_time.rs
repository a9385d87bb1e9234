//! Mount time of a store holding many GiB in large files against one holding none (issue 13:
//! "no slower"): a checkpoint refers to the disk tier's host files, it does not contain them,
//! so neither checkpoints nor mounts should grow with the bytes on the disk tier.
//!
//! The files are not written in full (50 GiB would take minutes to write on every peer): each
//! gets its first 2 MiB written with real bytes — past the 1 MiB threshold, so rampart moves
//! it to its disk tier as any growing file — then the rest allocated with fallocate(2) mode 0
//! (blocks reserved, reading as zeros; the size grows). Where a peer refuses fallocate
//! (EOPNOTSUPP) the rest is written with zeros, if the total is small enough; the notes say
//! which happened.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{BenchError, Result};
use crate::peer::PeerKind;
use crate::profile::Profile;
use crate::workload::data::{close_checked, io_err, sync_and_fsync_dir, SplitMix64};
use crate::workload::{Ctx, Metric, Outcome, PlotKind, Workload};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// Written with real bytes at the start of every file: above the default threshold.
const HEAD_BYTES: usize = 2 << 20;
const SEED: u64 = 0x4d4f_554e_5447_4942;
/// Writing the rest instead of fallocating it is done only up to this total.
const WRITE_FALLBACK_BYTES_MAX: u64 = 4 * GIB;
/// Room left free on the disk beyond the data: a tenth of it and 64 MiB.
fn free_margin_bytes(data_bytes: u64) -> u64 {
    data_bytes / 10 + 64 * MIB
}

/// (files, bytes each): 50 GiB in full (issue 13), 1 GiB quick.
fn layout(profile: Profile) -> (u32, u64) {
    profile.pick((2, 16 * MIB), (4, 256 * MIB), (50, GIB))
}

pub struct MountTime;

impl Workload for MountTime {
    fn id(&self) -> &'static str {
        "disk-mount-time"
    }

    fn title(&self) -> &'static str {
        "Disk tier: mount time with and without GiBs of large files"
    }

    fn source(&self) -> &'static str {
        "issue 13's benchmarks (mount time of a store holding 50 GiB in large files no \
         slower than one holding none); Conquest §3 (the disk holds only file data)"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let (files, bytes) = layout(profile);
        vec![
            (
                "data".into(),
                format!(
                    "{files} files of {} MiB ({} MiB in all): the first {} MiB of each \
                     written with splitmix64 bytes (past the 1 MiB threshold: rampart moves \
                     the file to its disk tier), the rest allocated with fallocate(2) mode 0 \
                     (blocks reserved, not written; reads give zeros); each file fsync'd. \
                     Where fallocate is refused (EOPNOTSUPP) the rest is written with zeros, \
                     up to {} GiB in all, and the notes say so",
                    bytes / MIB,
                    u64::from(files) * bytes / MIB,
                    HEAD_BYTES as u64 / MIB,
                    WRITE_FALLBACK_BYTES_MAX / GIB
                ),
            ),
            (
                "mount time, empty".into(),
                "the peer holding one empty folder: unmount, drop caches, mount again, timed \
                 from the mount command's start until the root can be listed (after one \
                 untimed remount that settles the setup)"
                    .into(),
            ),
            (
                "mount time, full".into(),
                "the same after the files were made and synced (syncfs + fsync of the \
                 folder); then every file's size and the first file's written head are \
                 checked"
                    .into(),
            ),
            (
                "free space".into(),
                format!(
                    "the run needs the data plus {} MiB free, both as the peer reports it \
                     and on the disk under its data; it fails early otherwise",
                    free_margin_bytes(u64::from(files) * bytes) / MIB
                ),
            ),
        ]
    }

    fn unsupported_on(&self, peer: PeerKind) -> Option<String> {
        match peer {
            PeerKind::Host | PeerKind::HostFsync => Some(
                "the host's file system is the machine's own: the bench does not unmount it".into(),
            ),
            other => super::unsupported_off_disk(other),
        }
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let (files, file_bytes) = layout(ctx.profile);
        let total = u64::from(files) * file_bytes;
        check_free(&ctx.dir, total)?;
        if let Some(disk) = ctx.peer.disk_path() {
            check_free(disk.parent().unwrap_or(&disk), total)?;
        }
        let mut outcome = Outcome::default();
        (ctx.progress)("remounting (settling)");
        sync_and_fsync_dir(&ctx.dir)?;
        ctx.peer.remount()?;
        (ctx.progress)("remounting, empty");
        let empty = ctx.peer.remount()?;

        let paths: Vec<PathBuf> = (0..files)
            .map(|i| ctx.dir.join(format!("large.{i:03}")))
            .collect();
        let result = fill_and_remount(ctx, &paths, file_bytes, &mut outcome);
        for path in &paths {
            let _ = std::fs::remove_file(path);
        }
        let full = result?;
        outcome.notes.push(format!(
            "mount time with {} GiB / empty: {:.3} s / {:.3} s = {:.2}",
            fmt_gib(total),
            full.as_secs_f64(),
            empty.as_secs_f64(),
            full.as_secs_f64() / empty.as_secs_f64().max(1e-9)
        ));
        // The full store first: it is the report's headline.
        outcome.metrics.push(Metric::lower(
            format!("mount time, {} GiB in large files", fmt_gib(total)),
            "s",
            full.as_secs_f64(),
        ));
        outcome
            .metrics
            .push(Metric::lower("mount time, empty", "s", empty.as_secs_f64()));
        Ok(outcome)
    }
}

/// Makes the files, remounts (timed) and checks them; the mount time.
fn fill_and_remount(
    ctx: &mut Ctx,
    paths: &[PathBuf],
    file_bytes: u64,
    outcome: &mut Outcome,
) -> Result<std::time::Duration> {
    let total = paths.len() as u64 * file_bytes;
    let mut head = vec![0u8; HEAD_BYTES];
    SplitMix64(SEED).fill(&mut head);
    let started = Instant::now();
    let mut written_rest = 0;
    for (i, path) in paths.iter().enumerate() {
        ctx.cancel.check()?;
        (ctx.progress)(&format!("making file {}/{}", i + 1, paths.len()));
        if !make_file(path, &head, file_bytes, total)? {
            written_rest += 1;
        }
    }
    sync_and_fsync_dir(&ctx.dir)?;
    outcome.notes.push(format!(
        "{} files of {} MiB made in {:.2} s: {}",
        paths.len(),
        file_bytes / MIB,
        started.elapsed().as_secs_f64(),
        if written_rest == 0 {
            "head written, rest fallocated".to_string()
        } else {
            format!(
                "head written; the rest written with zeros in {written_rest} (fallocate refused)"
            )
        }
    ));
    if let Some(tiers) = ctx.peer.tier_summary() {
        outcome.notes.push(format!("before the remount: {tiers}"));
    }
    (ctx.progress)("remounting, full");
    let full = ctx.peer.remount()?;
    (ctx.progress)("checking the files");
    check_files(paths, &head, file_bytes)?;
    Ok(full)
}

/// Writes the head, then allocates (or writes) the rest, fsyncs and closes. Whether the rest
/// was fallocated.
fn make_file(path: &Path, head: &[u8], file_bytes: u64, total: u64) -> Result<bool> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err("creating", path))?;
    file.write_all(head).map_err(io_err("writing", path))?;
    let rest = file_bytes.saturating_sub(head.len() as u64);
    let fallocated = match fallocate(&file, head.len() as u64, rest) {
        Ok(()) => true,
        Err(e)
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) && total <= WRITE_FALLBACK_BYTES_MAX =>
        {
            write_zeros(&mut file, rest).map_err(io_err("writing zeros to", path))?;
            false
        }
        Err(e) => return Err(io_err("fallocate of", path)(e)),
    };
    file.sync_all().map_err(io_err("fsync of", path))?;
    close_checked(file, path)?;
    Ok(fallocated)
}

fn fallocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
    };
    // SAFETY: fallocate(2) on an open descriptor with plain integer arguments; no memory is
    // passed.
    let done = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn write_zeros(file: &mut File, mut left: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        file.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// Every file has its size; the first one starts with the head.
fn check_files(paths: &[PathBuf], head: &[u8], file_bytes: u64) -> Result<()> {
    for path in paths {
        let size = std::fs::metadata(path)
            .map_err(io_err("stat of", path))?
            .len();
        if size != file_bytes {
            return Err(BenchError::Other(format!(
                "{} is {size} B after the remount, not {file_bytes}",
                path.display()
            )));
        }
    }
    if let Some(first) = paths.first() {
        let mut read = vec![0u8; head.len()];
        File::open(first)
            .and_then(|mut f| f.read_exact(&mut read))
            .map_err(io_err("reading", first))?;
        if read != head {
            return Err(BenchError::Other(format!(
                "{} does not start with the bytes written to it",
                first.display()
            )));
        }
    }
    Ok(())
}

/// Fails when `path`'s file system has less than `bytes` + the margin free.
fn check_free(path: &Path, bytes: u64) -> Result<()> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(|e| {
        BenchError::io(
            format!("statfs of {}", path.display()),
            std::io::Error::from(e),
        )
    })?;
    let free = stat.blocks_available() as u64 * stat.fragment_size() as u64;
    let margin = free_margin_bytes(bytes);
    if free < bytes + margin {
        return Err(BenchError::Other(format!(
            "{} has {} MiB free; this run needs {} MiB of large files plus {} MiB",
            path.display(),
            free / MIB,
            bytes / MIB,
            margin / MIB
        )));
    }
    Ok(())
}

/// "50" for 50 GiB, "0.03" for 32 MiB.
fn fmt_gib(bytes: u64) -> String {
    if bytes.is_multiple_of(GIB) {
        (bytes / GIB).to_string()
    } else {
        format!("{:.2}", bytes as f64 / GIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_holds_fifty_gib_and_every_file_passes_the_threshold() {
        let (files, bytes) = layout(Profile::Full);
        assert_eq!(u64::from(files) * bytes, 50 * GIB);
        for p in [Profile::Tiny, Profile::Quick, Profile::Full] {
            let (files, bytes) = layout(p);
            assert!(bytes > HEAD_BYTES as u64, "{p:?}");
            let total = bytes * u64::from(files);
            assert!(
                total + free_margin_bytes(total) <= p.disk_device_size_bytes(),
                "{p:?}"
            );
        }
        assert_eq!(fmt_gib(50 * GIB), "50");
        assert_eq!(fmt_gib(32 * MIB), "0.03");
    }

    #[test]
    fn only_peers_that_remount_from_the_disk_run_it() {
        for kind in PeerKind::ALL {
            let runs = MountTime.unsupported_on(kind).is_none();
            assert_eq!(
                runs,
                matches!(kind, PeerKind::Rampart | PeerKind::Ext4Disk),
                "{}",
                kind.id()
            );
        }
    }

    #[test]
    fn a_file_gets_its_head_and_its_size() {
        let dir = crate::testing::shm_tempdir();
        let path = dir.path().join("f");
        let mut head = vec![0u8; HEAD_BYTES];
        SplitMix64(SEED).fill(&mut head);
        let fallocated = make_file(&path, &head, 5 * MIB, 5 * MIB).unwrap();
        assert!(fallocated, "tmpfs supports fallocate");
        check_files(std::slice::from_ref(&path), &head, 5 * MIB).unwrap();
        assert!(check_files(&[path], &head, 6 * MIB).is_err());
    }
}

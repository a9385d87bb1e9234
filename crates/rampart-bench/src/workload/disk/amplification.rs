//! Write amplification of large-file data: bytes the block device under a peer's data writes
//! per byte of large-file data a program writes (issue 13: ≤ 1.1 for rampart), read from the
//! device's own counter (/sys/dev/block/M:m/stat, sectors written) before and after — never
//! assumed. The device is the one under the peer's data on the real disk (rampart's store,
//! ext4-disk's image, the host folder), found through /proc/self/mountinfo; when it cannot be
//! found the run fails and says why.
//!
//! The disk is shared with the rest of the machine: whatever else writes to it meanwhile is
//! counted too. The background is measured over an idle interval just before and reported
//! beside the figures (not subtracted: it is an estimate, the figures stay what the device
//! counted).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::block_device::{device_under, BlockDevice};
use crate::error::{BenchError, Result};
use crate::peer::PeerKind;
use crate::profile::Profile;
use crate::workload::data::{close_checked, io_err, SplitMix64};
use crate::workload::{Ctx, Metric, Outcome, PlotKind, Workload};

const MIB: u64 = 1 << 20;
/// The program's write size.
const WRITE_BYTES: usize = 1 << 20;
const SEED: u64 = 0x5752_4954_4541_4d50;
/// How long the device is watched while the bench does nothing, for the background rate.
const IDLE: Duration = Duration::from_secs(2);
/// Wait after the last fsync before the second reading: past the commit intervals of
/// rampart (5 s) and ext4's journal (5 s), so metadata they write later is counted too.
const SETTLE: Duration = Duration::from_secs(6);

/// (files, bytes each): 1 GiB in full.
fn layout(profile: Profile) -> (u32, u64) {
    profile.pick((2, 4 * MIB), (2, 64 * MIB), (4, 256 * MIB))
}

pub struct WriteAmplification;

impl Workload for WriteAmplification {
    fn id(&self) -> &'static str {
        "disk-write-amplification"
    }

    fn title(&self) -> &'static str {
        "Disk tier: bytes written to the disk per byte of large-file data"
    }

    fn source(&self) -> &'static str {
        "issue 13's benchmarks (≤ 1.1 bytes on the disk per byte of large-file data, from the \
         block device's counters); DFS §3.3 (one file, one extent: no second copy)"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let (files, bytes) = layout(profile);
        vec![
            (
                "data".into(),
                format!(
                    "{files} new files of {} MiB ({} MiB in all), written sequentially in \
                     1 MiB writes of splitmix64 bytes (incompressible), each fsync'd then \
                     closed",
                    bytes / MIB,
                    u64::from(files) * bytes / MIB
                ),
            ),
            (
                "device".into(),
                "the block device under the peer's data on the real disk (rampart's store, \
                 ext4-disk's loop image, the host folder), resolved through \
                 /proc/self/mountinfo and /sys/dev/block (a partition's own counter when the \
                 file system is on a partition); a path on no block device fails the run"
                    .into(),
            ),
            (
                "counter".into(),
                "field 7 of the device's stat file (sectors written, 512 B each), read \
                 before the first write, after the last fsync, and after settling"
                    .into(),
            ),
            (
                "settling".into(),
                format!(
                    "{} s after the last fsync (past the 5 s commit intervals of rampart and \
                     of ext4's journal), without a sync (a syncfs of the host's file system \
                     would flush the rest of the machine's dirty pages into the count)",
                    SETTLE.as_secs()
                ),
            ),
            (
                "background".into(),
                format!(
                    "the device's writes over {} s of idleness just before, scaled to the \
                     run's length, in the notes; not subtracted (the disk is shared)",
                    IDLE.as_secs()
                ),
            ),
            (
                "metric".into(),
                "device bytes written / data bytes, at the last fsync and after settling \
                 (lower is better; 1.0 = each byte written once)"
                    .into(),
            ),
        ]
    }

    fn unsupported_on(&self, peer: PeerKind) -> Option<String> {
        super::unsupported_off_disk(peer)
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let disk_path = ctx.peer.disk_path().ok_or_else(|| {
            BenchError::Other(format!(
                "{} keeps no data on the disk: no block device to count writes on",
                ctx.peer.kind().id()
            ))
        })?;
        let device = device_under(&disk_path).map_err(|why| {
            BenchError::Other(format!(
                "the block device under {} cannot be resolved, so write amplification is \
                 not measured (never assumed): {why}",
                disk_path.display()
            ))
        })?;
        let counter = |dev: &BlockDevice| dev.bytes_written().map_err(BenchError::Other);
        let (files, file_bytes) = layout(ctx.profile);
        let data_bytes = u64::from(files) * file_bytes;
        let mut outcome = Outcome::default();

        // What came before (the peer's setup, the layout of earlier workloads) reaches the
        // disk first, so it is not counted.
        sync_mount(&ctx.dir)?;
        (ctx.progress)("watching the idle disk");
        let idle_start = counter(&device)?;
        std::thread::sleep(IDLE);
        let background_per_s =
            counter(&device)?.saturating_sub(idle_start) as f64 / IDLE.as_secs_f64();

        (ctx.progress)("writing");
        let paths: Vec<PathBuf> = (0..files)
            .map(|i| ctx.dir.join(format!("large.{i}")))
            .collect();
        let started = Instant::now();
        let before = counter(&device)?;
        let mut rng = SplitMix64(SEED);
        for path in &paths {
            ctx.cancel.check()?;
            write_and_fsync(path, file_bytes, &mut rng)?;
        }
        let at_fsync = counter(&device)?;
        let written_in = started.elapsed();
        (ctx.progress)("settling");
        // No syncfs here: on the host peer it would flush the whole machine's dirty pages
        // into the count. The wait lets the commit threads write what they defer.
        std::thread::sleep(SETTLE);
        let settled = counter(&device)?;
        let total_time = started.elapsed();
        if let Some(tiers) = ctx.peer.tier_summary() {
            outcome.notes.push(format!("after the writes: {tiers}"));
        }
        for path in &paths {
            std::fs::remove_file(path).map_err(io_err("removing", path))?;
        }

        let ratio = |after: u64| after.saturating_sub(before) as f64 / data_bytes as f64;
        outcome.metrics.push(Metric::lower(
            "disk bytes per data byte, at the last fsync",
            "B/B",
            ratio(at_fsync),
        ));
        outcome.metrics.push(Metric::lower(
            "disk bytes per data byte, after settling",
            "B/B",
            ratio(settled),
        ));
        outcome.notes.push(format!(
            "device {device}: {} B written by the last fsync and {} B after settling, for {} B \
             of data ({:.2} s to write and fsync, {:.2} s with the settling)",
            at_fsync.saturating_sub(before),
            settled.saturating_sub(before),
            data_bytes,
            written_in.as_secs_f64(),
            total_time.as_secs_f64()
        ));
        outcome.notes.push(format!(
            "background: the device wrote {:.0} B/s while idle just before; over this run's \
             {:.1} s that would be about {:.3} B per data byte, counted in the figures",
            background_per_s,
            total_time.as_secs_f64(),
            background_per_s * total_time.as_secs_f64() / data_bytes as f64
        ));
        Ok(outcome)
    }
}

/// Creates `path`, writes `size_bytes` of fresh bytes in 1 MiB writes, fsyncs and closes it.
fn write_and_fsync(path: &Path, size_bytes: u64, rng: &mut SplitMix64) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err("creating", path))?;
    let mut chunk = vec![0u8; WRITE_BYTES];
    let mut left = size_bytes;
    while left > 0 {
        let n = left.min(WRITE_BYTES as u64) as usize;
        rng.fill(&mut chunk[..n]);
        file.write_all(&chunk[..n])
            .map_err(io_err("writing", path))?;
        left -= n as u64;
    }
    file.sync_all().map_err(io_err("fsync of", path))?;
    close_checked(file, path)
}

/// syncfs of the file system holding `dir` (only that one: a global sync would flush the
/// rest of the machine's writes into the count).
fn sync_mount(dir: &Path) -> Result<()> {
    let handle = File::open(dir).map_err(io_err("opening", dir))?;
    nix::unistd::syncfs(handle.as_raw_fd()).map_err(|e| io_err("syncfs of", dir)(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{run_in_on, shm_tempdir};

    #[test]
    fn a_folder_in_ram_is_refused_with_the_reason() {
        let top = shm_tempdir();
        let err = run_in_on(
            &WriteAmplification,
            Profile::Tiny,
            top.path(),
            PeerKind::Host,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("cannot be resolved"), "{err}");
        assert!(err.contains("never assumed"), "{err}");
    }

    #[test]
    fn a_folder_on_the_disk_is_measured() {
        let base = std::env::temp_dir();
        if device_under(&base).is_err() {
            println!("skipped: {} is on no block device", base.display());
            return;
        }
        let top = tempfile::tempdir_in(&base).unwrap();
        let outcome = run_in_on(
            &WriteAmplification,
            Profile::Tiny,
            top.path(),
            PeerKind::Host,
        )
        .unwrap();
        let names: Vec<&str> = outcome.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "disk bytes per data byte, at the last fsync",
                "disk bytes per data byte, after settling"
            ]
        );
        // Every fsync'd byte reached the device at least once.
        let at_fsync = outcome.metrics[0].value;
        assert!(at_fsync >= 1.0, "{outcome:?}");
        assert!(outcome.metrics[1].value >= at_fsync, "{outcome:?}");
        assert!(std::fs::read_dir(top.path().join("work"))
            .unwrap()
            .next()
            .is_none());
        println!("{outcome:#?}");
    }
}

//! The schedule: every selected workload on every selected peer, repeated, interleaved (the
//! peer order rotates between repetitions so drift and noise do not favour one peer), with
//! progress bars, caches dropped between runs, and teardown whatever happens.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::cmd::Cancel;
use crate::error::{BenchError, Result};
use crate::peer::{self, Mounted, PeerEnv, PeerKind};
use crate::profile::Profile;
use crate::results::{Cell, CellStatus, PeerResult, RunResults, WorkloadResult};
use crate::workload::{self, Ctx, Metric, Outcome, Workload, STORE_BYTES_WRITTEN};

pub struct BenchOptions {
    pub profile: Profile,
    /// Workload ids or id prefixes ("postmark" selects every PostMark configuration).
    pub only: Vec<String>,
    /// Peer ids; empty means all.
    pub peers: Vec<String>,
    pub out: PathBuf,
    /// Overrides the profile's repetitions.
    pub repetitions: Option<usize>,
    pub rampart_bin: PathBuf,
    pub rampart_args: Vec<String>,
    /// A folder on the real disk for ext4-disk's loop file and rampart's store.
    pub disk_dir: PathBuf,
    pub command_line: String,
}

/// Which workloads `only` selects; an unknown name is an error listing the known ones.
pub fn select_workloads(only: &[String]) -> Result<Vec<Box<dyn Workload>>> {
    let all = workload::all();
    if only.is_empty() {
        return Ok(all);
    }
    for name in only {
        if !all.iter().any(|w| selects(name, w.id())) {
            let known: Vec<&str> = all.iter().map(|w| w.id()).collect();
            return Err(BenchError::Usage(format!(
                "unknown workload {name:?}; known: {}",
                known.join(", ")
            )));
        }
    }
    Ok(all
        .into_iter()
        .filter(|w| only.iter().any(|name| selects(name, w.id())))
        .collect())
}

/// Whether the name given to --only selects the workload `id`: the id itself or its prefix
/// ("postmark" selects "postmark-small").
fn selects(name: &str, id: &str) -> bool {
    id == name || id.starts_with(&format!("{name}-"))
}

pub fn select_peers(names: &[String]) -> Result<Vec<PeerKind>> {
    if names.is_empty() {
        return Ok(PeerKind::DEFAULT.to_vec());
    }
    let mut out = Vec::new();
    for name in names {
        let kind = PeerKind::parse(name).ok_or_else(|| {
            let known: Vec<&str> = PeerKind::ALL.iter().map(|k| k.id()).collect();
            BenchError::Usage(format!(
                "unknown peer {name:?}; known: {}",
                known.join(", ")
            ))
        })?;
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    Ok(out)
}

/// Runs the benchmark and writes the report; returns the results and the report's path.
/// An interrupted run still tears down and writes a partial report, then returns
/// `Err(Interrupted)` only if not even that could be written.
pub fn run(opts: &BenchOptions) -> Result<(RunResults, PathBuf)> {
    require_root()?;
    let workloads = select_workloads(&opts.only)?;
    let peers = select_peers(&opts.peers)?;
    let repetitions = opts
        .repetitions
        .unwrap_or(opts.profile.repetitions())
        .max(1);
    let cancel = Cancel::global();
    let started_at = Instant::now();
    let started = local_time_text();
    let machine_before = machine_before(opts);
    let (shm_dir, disk_dir) = make_run_dirs(opts)?;
    let env = PeerEnv {
        shm_dir: shm_dir.clone(),
        disk_dir: disk_dir.clone(),
        rampart_bin: opts.rampart_bin.clone(),
        rampart_args: opts.rampart_args.clone(),
        profile: opts.profile,
        cancel,
    };
    let mut results = RunResults {
        started,
        duration_s: 0.0,
        profile: opts.profile,
        repetitions,
        command_line: opts.command_line.clone(),
        procedure: procedure(opts.profile, repetitions),
        machine: machine_before,
        peers: peers.iter().map(|&kind| PeerResult::new(kind)).collect(),
        workloads: workloads
            .iter()
            .map(|w| workload_result(w.as_ref(), opts.profile, &peers))
            .collect(),
        interrupted: false,
    };
    let runnable = runnable_cells(
        &workloads,
        &peers,
        &mut results.workloads,
        &mut results.peers,
    );

    let total_runs: usize = runnable.iter().flatten().filter(|&&r| r).count() * repetitions;
    let bar = progress_bar(total_runs);
    let mut schedule = Schedule {
        opts,
        env: &env,
        workloads: &workloads,
        peers: &peers,
        runnable: &runnable,
        results: &mut results,
        bar: &bar,
        cancel,
    };
    let outcome = schedule.all(repetitions);
    bar.finish_and_clear();

    let leftovers = remove_run_dirs(&[&shm_dir, &disk_dir]);
    results.duration_s = started_at.elapsed().as_secs_f64();
    results.interrupted = matches!(outcome, Err(BenchError::Interrupted));
    if let Some(problem) = leftovers {
        results
            .machine
            .facts
            .push(("teardown problem".into(), problem));
    }
    if let Err(e) = &outcome {
        if !results.interrupted {
            return Err(BenchError::Other(format!("{e}")));
        }
    }
    let report = crate::report::write(&results, &opts.out)?;
    Ok((results, report))
}

fn require_root() -> Result<()> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(BenchError::Usage(
            "rampart bench must run as root: it mounts file systems, sets up loop devices and \
             drops caches"
                .into(),
        ));
    }
    Ok(())
}

/// The machine as the run starts, with the leftovers of an earlier run cleared.
fn machine_before(opts: &BenchOptions) -> crate::machine::Machine {
    let mut machine = crate::machine::describe();
    // A run killed with -9 leaves mounts and loop devices; clear them before measuring.
    for done in peer::sweep_stale() {
        eprintln!("rampart bench: removed leftovers of an earlier run: {done}");
    }
    if let Some(fs) = crate::machine::file_system_of(&opts.disk_dir) {
        machine.facts.push((
            "disk folder (--disk-dir)".into(),
            format!("{}: {fs}", opts.disk_dir.display()),
        ));
    }
    machine
}

/// Makes the report folder and the run's private folders in /dev/shm and on the real disk;
/// the latter two.
fn make_run_dirs(opts: &BenchOptions) -> Result<(PathBuf, PathBuf)> {
    let tag = format!("rampart-bench-{}", std::process::id());
    let shm_dir = Path::new("/dev/shm").join(&tag);
    let disk_dir = opts.disk_dir.join(&tag);
    // The report folder first: a mistyped --out must not cost a whole run's results.
    std::fs::create_dir_all(&opts.out).map_err(|e| {
        BenchError::io(
            format!("creating the report folder {}", opts.out.display()),
            e,
        )
    })?;
    make_private_dir(&shm_dir)?;
    if let Err(e) = make_private_dir(&disk_dir) {
        let _ = std::fs::remove_dir(&shm_dir);
        return Err(e);
    }
    Ok((shm_dir, disk_dir))
}

/// A workload's results before any run: every cell not run yet.
fn workload_result(w: &dyn Workload, profile: Profile, peers: &[PeerKind]) -> WorkloadResult {
    WorkloadResult {
        id: w.id(),
        title: w.title(),
        source: w.source(),
        settings: w.settings(profile),
        plot: w.plot(),
        cells: peers
            .iter()
            .map(|&peer| Cell {
                peer,
                status: CellStatus::NotRun,
                runs: Vec::new(),
                run_seconds: Vec::new(),
                errors: Vec::new(),
            })
            .collect(),
    }
}

/// Which cells (workload × peer) can run at all; those that cannot say why in `results`.
/// Decided up front so the report names every gap.
fn runnable_cells(
    workloads: &[Box<dyn Workload>],
    peers: &[PeerKind],
    workload_results: &mut [WorkloadResult],
    peer_results: &mut [PeerResult],
) -> Vec<Vec<bool>> {
    let mut runnable = vec![vec![true; peers.len()]; workloads.len()];
    for (wi, w) in workloads.iter().enumerate() {
        let tools = w.check_tools();
        for (pi, &peer) in peers.iter().enumerate() {
            let cell = &mut workload_results[wi].cells[pi];
            if let Err(e) = &tools {
                cell.status = CellStatus::Failed(e.to_string());
                runnable[wi][pi] = false;
            } else if peer == PeerKind::Floor && !w.runs_on_floor() {
                cell.status = CellStatus::Unsupported(crate::workload::floor_keeps_no_data());
                runnable[wi][pi] = false;
            } else if peer.fsync_each_file() && !w.fsyncs_each_file() {
                cell.status = CellStatus::Unsupported(crate::workload::does_not_fsync_each_file());
                runnable[wi][pi] = false;
            } else if let Some(reason) = w.unsupported_on(peer) {
                cell.status = CellStatus::Unsupported(reason);
                runnable[wi][pi] = false;
            }
        }
    }
    for (pi, &peer) in peers.iter().enumerate() {
        if let Err(e) = peer::check_tools(peer) {
            peer_results[pi].setup_error = Some(e.to_string());
            for (wi, w) in workload_results.iter_mut().enumerate() {
                if runnable[wi][pi] {
                    w.cells[pi].status = CellStatus::Failed(format!("peer not available: {e}"));
                    runnable[wi][pi] = false;
                }
            }
        }
    }
    runnable
}

fn progress_bar(total_runs: usize) -> ProgressBar {
    let bar = ProgressBar::new(total_runs as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs  {wide_msg}",
        )
        .expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

struct Schedule<'a> {
    opts: &'a BenchOptions,
    env: &'a PeerEnv,
    workloads: &'a [Box<dyn Workload>],
    peers: &'a [PeerKind],
    runnable: &'a [Vec<bool>],
    results: &'a mut RunResults,
    bar: &'a ProgressBar,
    cancel: &'static Cancel,
}

impl Schedule<'_> {
    fn all(&mut self, repetitions: usize) -> Result<()> {
        let fresh = self.opts.profile.fresh_peer_per_workload();
        for rep in 0..repetitions {
            if fresh {
                for wi in 0..self.workloads.len() {
                    for pi in rotated(self.peers.len(), rep + wi) {
                        if !self.runnable[wi][pi] {
                            continue;
                        }
                        self.cancel.check()?;
                        let Some(mut mounted) = self.setup(pi, &[wi], rep, repetitions)? else {
                            continue;
                        };
                        let outcome = self.one(wi, pi, mounted.as_mut(), rep, repetitions);
                        self.teardown(pi, mounted);
                        outcome?;
                    }
                }
            } else {
                for pi in rotated(self.peers.len(), rep) {
                    let wis: Vec<usize> = (0..self.workloads.len())
                        .filter(|&wi| self.runnable[wi][pi])
                        .collect();
                    if wis.is_empty() {
                        continue;
                    }
                    self.cancel.check()?;
                    let Some(mut mounted) = self.setup(pi, &wis, rep, repetitions)? else {
                        continue;
                    };
                    let mut outcome = Ok(());
                    for &wi in &wis {
                        outcome = self.one(wi, pi, mounted.as_mut(), rep, repetitions);
                        if outcome.is_err() {
                            break;
                        }
                    }
                    self.teardown(pi, mounted);
                    outcome?;
                }
            }
        }
        Ok(())
    }

    /// Makes peer `pi`; on failure marks the cells of `wis` failed and returns None.
    fn setup(
        &mut self,
        pi: usize,
        wis: &[usize],
        rep: usize,
        reps: usize,
    ) -> Result<Option<Box<dyn Mounted>>> {
        let kind = self.peers[pi];
        self.bar
            .set_message(format!("rep {}/{reps} · setting up {}", rep + 1, kind.id()));
        match peer::setup(kind, self.env) {
            Ok(m) => {
                if self.results.peers[pi].settings.is_empty() {
                    self.results.peers[pi].settings = m.settings();
                }
                Ok(Some(m))
            }
            Err(BenchError::Interrupted) => Err(BenchError::Interrupted),
            Err(e) => {
                let text = format!("setting up {} failed: {e}", kind.id());
                say(self.bar, format!("! {text}"));
                self.results.peers[pi].setup_error = Some(e.to_string());
                for &wi in wis {
                    let cell = &mut self.results.workloads[wi].cells[pi];
                    cell.errors.push(format!("repetition {}: {text}", rep + 1));
                    if cell.runs.is_empty() {
                        cell.status = CellStatus::Failed(text.clone());
                    }
                    self.bar.inc(1);
                }
                Ok(None)
            }
        }
    }

    fn teardown(&mut self, pi: usize, mounted: Box<dyn Mounted>) {
        if let Err(e) = mounted.teardown() {
            let text = format!("tearing down {} failed: {e}", self.peers[pi].id());
            say(self.bar, format!("! {text}"));
            self.results
                .machine
                .facts
                .push(("teardown problem".into(), text));
        }
    }

    /// Runs workload `wi` once on the mounted peer `pi`; only `Interrupted` is an error here,
    /// every other failure lands in the cell.
    fn one(
        &mut self,
        wi: usize,
        pi: usize,
        mounted: &mut dyn Mounted,
        rep: usize,
        reps: usize,
    ) -> Result<()> {
        let w = &self.workloads[wi];
        let kind = self.peers[pi];
        let label = format!("rep {}/{reps} · {} · {}", rep + 1, w.id(), kind.id());
        self.bar.set_message(label.clone());
        let dir = mounted.dir().join(format!("bench-{}-r{rep}", w.id()));
        let scratch = self.env.shm_dir.join("scratch");
        let prepared = std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::io(format!("creating {}", dir.display()), e))
            .and_then(|_| {
                let _ = std::fs::remove_dir_all(&scratch);
                std::fs::create_dir_all(&scratch)
                    .map_err(|e| BenchError::io(format!("creating {}", scratch.display()), e))
            })
            .and_then(|_| peer::drop_caches());
        // Read before the clock starts: it waits for earlier changes to become durable.
        let written_before = mounted.store_bytes_written();
        let started = Instant::now();
        let outcome = prepared.and_then(|_| {
            let bar = self.bar.clone();
            let progress = move |phase: &str| bar.set_message(format!("{label} · {phase}"));
            let mut ctx = Ctx {
                dir: dir.clone(),
                peer: mounted,
                profile: self.opts.profile,
                scratch: scratch.clone(),
                cancel: self.cancel,
                progress: &progress,
            };
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.run(&mut ctx))) {
                Ok(r) => r,
                Err(panic) => Err(BenchError::Other(format!(
                    "the workload panicked (a bug in rampart bench): {}",
                    panic_text(&panic)
                ))),
            }
        });
        let seconds = started.elapsed().as_secs_f64();
        let outcome = outcome.map(|o| with_store_bytes_written(o, written_before, mounted));
        self.bar.inc(1);
        let cell = &mut self.results.workloads[wi].cells[pi];
        match outcome {
            Ok(o) => {
                let headline = o
                    .metrics
                    .first()
                    .map(|m| format!("{} {:.1} {}", m.name, m.value, m.unit))
                    .unwrap_or_default();
                say(
                    self.bar,
                    format!("{} on {}: {headline} ({seconds:.1} s)", w.id(), kind.id()),
                );
                cell.runs.push(o);
                cell.run_seconds.push(seconds);
                cell.status = CellStatus::Measured;
            }
            // A system call cut short by Ctrl-C may fail with EINTR or worse: after a cancel,
            // every error is the interruption, not a result.
            Err(_) if self.cancel.is_set() => return Err(BenchError::Interrupted),
            Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
            Err(e) => {
                say(
                    self.bar,
                    format!("! {} on {} failed: {e}", w.id(), kind.id()),
                );
                cell.errors.push(format!("repetition {}: {e}", rep + 1));
                if cell.runs.is_empty() {
                    cell.status = CellStatus::Failed(e.to_string());
                }
            }
        }
        // Leave the peer as clean as we found it for the next workload (shared-peer profiles).
        if !self.opts.profile.fresh_peer_per_workload() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(())
    }
}

/// A line above the progress bar, or plainly on stderr when there is no terminal to draw the
/// bar on (CI logs still show what ran).
fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// How the runs are made, in words, for the report.
fn procedure(profile: Profile, repetitions: usize) -> Vec<(String, String)> {
    let freshness = if profile.fresh_peer_per_workload() {
        "every run gets a peer made anew (mkfs / mount), torn down after the run".to_string()
    } else {
        "each peer is made once per repetition; every workload runs in a fresh directory on it, \
         removed afterwards"
            .to_string()
    };
    vec![
        (
            "schedule".into(),
            format!(
                "{repetitions} repetition(s); in each, workload by workload, every peer in turn, \
                 the peer order rotated by one for every repetition and workload so drift and \
                 noise do not favour one peer"
            ),
        ),
        ("peers".into(), freshness),
        (
            "caches".into(),
            "`sync; echo 3 > /proc/sys/vm/drop_caches` before every run".into(),
        ),
        (
            "figures".into(),
            "median over the repetitions that succeeded; spread = (max − min) / median".into(),
        ),
        (
            "timing".into(),
            "each workload times its own phases (see its settings); setup and teardown are \
             never timed"
                .into(),
        ),
    ]
}

/// 0..n starting at `start % n`.
fn rotated(n: usize, start: usize) -> Vec<usize> {
    (0..n).map(|i| (i + start) % n.max(1)).collect()
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Makes the run's own folder: new (an existing one, perhaps planted by another user in a
/// world-writable place, is refused), root's, mode 0700. Everything root later writes and
/// runs (configs, job files, tarballs) lives below it.
fn make_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| BenchError::io(format!("creating {}", parent.display()), e))?;
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => BenchError::Other(format!(
                "{} already exists and was not made by this run; remove it if no benchmark \
                 is running",
                dir.display()
            )),
            _ => BenchError::io(format!("creating {}", dir.display()), e),
        })?;
    // The umask may have narrowed the mode; set it exactly.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| BenchError::io(format!("setting the mode of {}", dir.display()), e))?;
    if !crate::cleanup::is_run_dir(dir) {
        return Err(BenchError::Other(format!(
            "{} is not a private folder of root's after creating it",
            dir.display()
        )));
    }
    Ok(())
}

/// Removes the run's folders; `cleanup::remove_path` refuses one with a mount still inside
/// (removing files under a live mount would destroy that file system's contents).
fn remove_run_dirs(dirs: &[&Path]) -> Option<String> {
    let problems: Vec<String> = dirs
        .iter()
        .filter_map(|dir| {
            crate::cleanup::remove_path(dir)
                .err()
                .map(|e| e.to_string())
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn local_time_text() -> String {
    // SAFETY: time(2) and localtime_r(3) with valid pointers; `tm` is plain data.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    }
}

/// Adds the bytes the peer wrote to its store during the run (once its changes are durable),
/// for peers that count them; a failed reading becomes a note, not a number.
fn with_store_bytes_written(
    mut outcome: Outcome,
    before: Option<Result<u64>>,
    peer: &dyn Mounted,
) -> Outcome {
    let Some(before) = before else {
        return outcome;
    };
    let after = || {
        peer.store_bytes_written()
            .unwrap_or_else(|| Err(BenchError::Other("the peer stopped counting".into())))
    };
    match before.and_then(|b| after().map(|a| (b, a))) {
        Ok((before, after)) => outcome.metrics.push(Metric::lower(
            STORE_BYTES_WRITTEN,
            "B",
            after.saturating_sub(before) as f64,
        )),
        Err(e) => outcome
            .notes
            .push(format!("bytes written to the store not measured: {e}")),
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_host_fsync_only_the_workloads_that_fsync_each_file_run() {
        let workloads = crate::workload::all();
        let peers = [PeerKind::Host, PeerKind::HostFsync];
        let mut workload_results: Vec<WorkloadResult> = workloads
            .iter()
            .map(|w| workload_result(w.as_ref(), Profile::Tiny, &peers))
            .collect();
        let mut peer_results: Vec<PeerResult> =
            peers.iter().map(|&kind| PeerResult::new(kind)).collect();
        let runnable = runnable_cells(&workloads, &peers, &mut workload_results, &mut peer_results);
        let mut ran = Vec::new();
        for (wi, w) in workloads.iter().enumerate() {
            let status = &workload_results[wi].cells[1].status;
            if runnable[wi][1] {
                assert!(w.fsyncs_each_file(), "{} runs on host-fsync", w.id());
                ran.push(w.id());
            } else if !w.fsyncs_each_file() {
                assert!(
                    matches!(status, CellStatus::Unsupported(r) if r.contains("fsync")),
                    "{}: {status:?}",
                    w.id()
                );
            }
        }
        for id in [
            "postmark-conquest",
            "mbfs-small-file-loop",
            "mbfs-copy",
            "mbfs-edit",
        ] {
            let tools = workloads
                .iter()
                .find(|w| w.id() == id)
                .unwrap()
                .check_tools();
            assert_eq!(ran.contains(&id), tools.is_ok(), "{id}");
        }
        // The sprite workloads do not fsync each file: not on host-fsync, still on host.
        let sprite = workloads
            .iter()
            .position(|w| w.id() == "sprite-small")
            .unwrap();
        assert!(!runnable[sprite][1] && runnable[sprite][0]);
    }
}

#!/usr/bin/env python3
"""PostMark in the Conquest configuration (USENIX 2002, section 5.2) on three peers.

Peers, each freshly made for every run and torn down after it:
  tmpfs     mount -t tmpfs tmpfs MNT                         (kernel RAM file system)
  ext4-ram  ext4 (mkfs.ext4 defaults, mount defaults) on a loop device over a file in /dev/shm
  rampart   rampart mkfs STORE + rampart mount STORE MNT [--rampart-opts], store in /dev/shm

Workload (defaults = the paper's): 10,000 files of 512 B..16 KiB, 200,000 transactions,
100 subdirectories (sqrt of the file count), 512-byte read and write blocks, unbuffered I/O
(`set buffering false`), creates and deletes equally likely (`set bias create 5`), reads four
times as likely as appends (`set bias read 8`), seed 42 so every peer gets the same sequence.

Timing: Debian's postmark (1.53, prints "v1.51") times with time(2), so its own figures have a
1-second resolution (a 4-second phase can read as 3 or 5). The paper's authors patched PostMark
for clock resolution; instead of patching, this script timestamps the progress markers that
postmark flushes to its stdout pipe at each phase boundary ("Creating files...",
"Performing transactions", "Deleting files...", "Deleting subdirectories..."), giving
sub-millisecond phase times for the unmodified binary. Both the precise figures and postmark's
own printed figures are reported.

Progress goes to stderr; the Markdown report goes to stdout and to --out/report.md together
with results.json and every raw postmark output.

Run as root (mount, losetup, drop_caches). Example:
    python3 bench/postmark_peers.py --transactions 20000 --files 2000 --repeat 1
    python3 bench/postmark_peers.py --repeat 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import select
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchlib import (  # noqa: E402
    CommandError, OthersCpu, RampartMount, REPO, Runner, Teardown,
    _cpu_times, cpu_busy, find_rampart, fmt_cmd, install_signal_handlers,
    loadavg, log, machine_info, md_kv_table, mount_options, proc_memory,
    rampart_status, rmdir_if_unmounted, snapshot_binary, tool_versions,
    wait_idle)

ALL_PEERS = ("tmpfs", "ext4-ram", "rampart")


# ---------------------------------------------------------------------------
# peers

class Peer:
    name = "?"

    def __init__(self, args, runner: Runner, td: Teardown, shm_base: str, mnt_base: str):
        self.args, self.runner, self.td = args, runner, td
        self.shm_base, self.mnt_base = shm_base, mnt_base
        self.mnt = ""
        self.extra: dict = {}

    def _mountpoint(self, run_id: str) -> str:
        mnt = os.path.join(self.mnt_base, f"{self.name}-{run_id}")
        os.mkdir(mnt)
        self.td.push(f"rmdir {mnt}", lambda: rmdir_if_unmounted(mnt))
        self.mnt = mnt
        return mnt

    def setup(self, run_id: str) -> str:
        raise NotImplementedError

    def after_run(self) -> None:
        pass


class TmpfsPeer(Peer):
    name = "tmpfs"

    def setup(self, run_id):
        mnt = self._mountpoint(run_id)
        self.runner.run(["mount", "-t", "tmpfs", "tmpfs", mnt])
        self.td.push(f"umount {mnt}", lambda: self.runner.run(["umount", mnt]))
        return mnt


class Ext4RamPeer(Peer):
    name = "ext4-ram"

    def setup(self, run_id):
        r = self.runner
        img = os.path.join(self.shm_base, f"ext4-{run_id}.img")
        self.td.push(f"rm {img}", lambda: os.path.exists(img) and os.unlink(img))
        r.run(["truncate", "-s", self.args.ext4_size, img])
        dev = r.run(["losetup", "--find", "--show", img]).stdout.strip()
        self.td.push(f"losetup -d {dev}", lambda: r.run(["losetup", "-d", dev]))
        r.run(["mkfs.ext4", "-q", "-F", dev], timeout=300)
        mnt = self._mountpoint(run_id)
        r.run(["mount", dev, mnt])
        self.td.push(f"umount {mnt}", lambda: r.run(["umount", mnt], timeout=300))
        self.extra["device"] = dev
        return mnt


class RampartPeer(Peer):
    name = "rampart"

    def __init__(self, *a, rbin: str, **kw):
        super().__init__(*a, **kw)
        self.rbin = rbin
        self.rm: RampartMount | None = None

    def setup(self, run_id):
        mnt = self._mountpoint(run_id)
        store = os.path.join(self.shm_base, f"rampart-store-{run_id}")
        self.rm = RampartMount(self.runner, self.td, self.rbin, store, mnt,
                               shlex.split(self.args.rampart_opts))
        self.rm.setup()
        self.extra = {"daemon pid": self.rm.pid, "pid source": self.rm.pid_source}
        return mnt

    def after_run(self):
        try:
            self.extra["status after run"] = rampart_status(self.runner, self.rbin, self.mnt)
        except Exception as e:
            self.extra["status after run"] = f"unavailable: {e}"
        if self.rm and self.rm.pid:
            try:
                m = proc_memory(self.rm.pid)
                self.extra["daemon VmHWM"] = m.get("VmHWM")
                self.extra["daemon Rss"] = m.get("Rss")
            except OSError:
                pass


# ---------------------------------------------------------------------------
# postmark

def proc_cpu_s(pid: int) -> float | None:
    """user+system CPU seconds of a process and its threads (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def noisy_reason(rec: dict, a) -> str:
    """Why a run's figures are suspect because of other work on the machine ('' if clean)."""
    why = []
    if (rec.get("busy_before") or 0) > a.idle_threshold:
        why.append(f"machine {rec['busy_before']:.0%} busy before")
    c = rec.get("cpu") or {}
    if c.get("wall_s"):
        c["others_cores"] = c["others_cpu_s"] / c["wall_s"]
        if c["others_cores"] > a.max_others:
            why.append(f"other processes used {c['others_cores']:.2f} cores during the run")
    return "; ".join(why)


def postmark_config(a, location: str) -> list[str]:
    return [
        f"set size {a.size_low} {a.size_high}",
        f"set number {a.files}",
        f"set seed {a.seed}",
        f"set transactions {a.transactions}",
        f"set subdirectories {a.subdirs}",
        f"set read {a.read_block}",
        f"set write {a.write_block}",
        "set buffering false",
        f"set bias read {a.bias_read}",
        f"set bias create {a.bias_create}",
        "set report verbose",
        f"set location {location}",
        "show",
        "run",
        "quit",
    ]


MARKERS = {
    "create": b"Creating files...",          # flushed right after time(&start_time)
    "transact": b"Performing transactions",  # flushed right before time(&t_start_time)
    "delete": b"Deleting files...",          # flushed right after time(&t_end_time)
    "end_subdirs": b"Deleting subdirectories...",  # flushed right after time(&end_time)
    "report": b"Time:",
}


def run_postmark(postmark: str, cfg: str, cwd: str, timeout: float, td: Teardown,
                 daemon_pid: int | None = None):
    """Returns (stdout text, stderr text, {marker: monotonic time}, exit code, cpu dict)."""
    errf = tempfile.TemporaryFile()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    st0 = _cpu_times()
    p = subprocess.Popen([postmark, cfg], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=errf, cwd=cwd, start_new_session=True)
    others = OthersCpu({os.getpid(), p.pid, daemon_pid or -1})
    next_sample = time.monotonic() + 0.5

    def kill():
        if p.poll() is None:
            log(f"killing postmark pid {p.pid}")
            p.kill()
        p.wait()

    mark = td.mark()
    td.push("kill postmark", kill)
    fd = p.stdout.fileno()
    buf = b""
    ts: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommandError(f"postmark did not finish within {timeout:.0f}s")
            ready, _, _ = select.select([fd], [], [], max(0.0, min(
                left, next_sample - time.monotonic())))
            if ready:  # read and timestamp first, then do anything else
                chunk = os.read(fd, 65536)
                now = time.monotonic()
                if not chunk:
                    break
                # a marker may straddle two reads: search the tail of the old buffer too
                start = max(0, len(buf) - 40)
                buf += chunk
                for k, m in MARKERS.items():
                    if k not in ts and buf.find(m, start) != -1:
                        ts[k] = now
            if time.monotonic() >= next_sample:
                others.sample()
                next_sample = time.monotonic() + 0.5
        rc = p.wait(timeout=60)
    finally:
        td.unwind(mark)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    st1 = _cpu_times()
    others.sample()
    ticks = os.sysconf("SC_CLK_TCK")
    wall = (st1[0] - st0[0]) / ticks / (os.cpu_count() or 1)
    cpu = {"postmark_user_s": ru1.ru_utime - ru0.ru_utime,
           "postmark_sys_s": ru1.ru_stime - ru0.ru_stime,
           "machine_busy_core_s": ((st1[0] - st0[0]) - (st1[1] - st0[1])) / ticks,
           "others_cpu_s": others.seconds(),
           "wall_s": wall}
    errf.seek(0)
    err = errf.read().decode(errors="replace")
    errf.close()
    return buf.decode(errors="replace"), err, ts, rc, cpu


_INT = r"(\d+)"
REPORT_RE = [
    ("total_s", rf"^\s*{_INT} seconds total"),
    ("tx_s", rf"^\s*{_INT} seconds of transactions \({_INT} per second\)", "tx_per_s"),
    ("created", rf"^\s*{_INT} created \({_INT} per second\)", "created_per_s"),
    ("create_alone", rf"^\s*Creation alone: {_INT} files \({_INT} per second\)",
     "create_alone_per_s"),
    ("create_mixed", rf"^\s*Mixed with transactions: {_INT} files \({_INT} per second\)",
     "create_mixed_per_s"),
    ("read", rf"^\s*{_INT} read \({_INT} per second\)", "read_per_s"),
    ("appended", rf"^\s*{_INT} appended \({_INT} per second\)", "appended_per_s"),
    ("deleted", rf"^\s*{_INT} deleted \({_INT} per second\)", "deleted_per_s"),
    ("delete_alone", rf"^\s*Deletion alone: {_INT} files \({_INT} per second\)",
     "delete_alone_per_s"),
    ("delete_mixed", rf"^\s*Mixed with transactions: {_INT} files \({_INT} per second\)",
     "delete_mixed_per_s"),
]
UNITS = {"bytes": 1, "kilobytes": 1024, "megabytes": 1024 ** 2}


def parse_report(out: str) -> dict:
    """Parse postmark's verbose report (the part after 'Time:'); the two 'Mixed with
    transactions' lines are told apart by order (creation first, then deletion)."""
    i = out.find("Time:")
    if i < 0:
        return {}
    lines = out[i:].splitlines()
    res: dict = {}
    pos = 0
    for spec in REPORT_RE:
        key, rx = spec[0], re.compile(spec[1])
        for j in range(pos, len(lines)):
            m = rx.search(lines[j])
            if m:
                res[key] = int(m.group(1))
                if len(spec) > 2:
                    res[spec[2]] = int(m.group(2))
                pos = j + 1
                break
    for what in ("read", "written"):
        m = re.search(rf"([\d.]+) (bytes|kilobytes|megabytes) {what} \(([\d.]+) "
                      rf"(bytes|kilobytes|megabytes) per second\)", out[i:])
        if m:
            res[f"mb_{what}"] = float(m.group(1)) * UNITS[m.group(2)] / 2 ** 20
            res[f"mb_{what}_per_s"] = float(m.group(3)) * UNITS[m.group(4)] / 2 ** 20
    return res


def precise_figures(ts: dict, rep: dict, a) -> dict:
    if not all(k in ts for k in ("create", "transact", "delete")):
        return {}
    end = ts.get("end_subdirs", ts.get("report"))
    create_s = ts["transact"] - ts["create"]
    tx_s = ts["delete"] - ts["transact"]
    out = {"create_phase_s": create_s, "tx_phase_s": tx_s,
           "tx_per_s": a.transactions / tx_s if tx_s > 0 else None}
    if end:
        out["delete_phase_s"] = end - ts["delete"]
        out["total_s"] = end - ts["create"]
    if rep:
        if create_s > 0:
            out["create_alone_per_s"] = rep.get("create_alone", a.files) / create_s
        if tx_s > 0:
            for k in ("create_mixed", "read", "appended", "delete_mixed"):
                if k in rep:
                    out[f"{k}_per_s"] = rep[k] / tx_s
        if end and out["delete_phase_s"] > 0 and "delete_alone" in rep:
            out["delete_alone_per_s"] = rep["delete_alone"] / out["delete_phase_s"]
        if end and out["total_s"] > 0:
            for k in ("mb_read", "mb_written"):
                if k in rep:
                    out[f"{k}_per_s"] = rep[k] / out["total_s"]
    return out


# ---------------------------------------------------------------------------
# report

def fnum(x, nd=0) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{nd}f}"


def stats(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def build_report(a, peers, runs, notes, commands, machine, versions, cfg_lines,
                 started, finished, drop) -> str:
    L = []
    L.append("# PostMark (Conquest configuration) on tmpfs, ext4 on a RAM disk and rampart")
    L.append("")
    L.append(f"Started {started}, finished {finished}. Repetitions: {a.repeat} "
             f"(peer order rotated each repetition).")
    L.append("")
    for n in notes:
        L.append(f"- **{n}**")
    if notes:
        L.append("")
    ok_runs = {p: [r for r in runs if r["peer"] == p and r.get("ok")] for p in peers}
    # figures use the clean runs (no other work on the machine); all runs if none is clean
    by_peer = {p: [r for r in ok_runs[p] if not r.get("noisy")] or ok_runs[p] for p in peers}
    med = {}
    L.append("## Transactions per second")
    L.append("")
    L.append("Precise = transactions / wall time of the transaction phase, from the timestamps "
             "of postmark's flushed progress markers. postmark's own figure has 1-second "
             "resolution (shown for reference).")
    L.append("")
    L.append("Runs used: clean runs (no other work on the machine, see 'Every run'); a "
             "noisy repetition is run again (up to --retry-noisy times). If a peer has no "
             "clean run, all its runs are used and it is marked.")
    L.append("")
    L.append("| peer | runs used | tx/s median | tx/s min | tx/s max | postmark's own tx/s "
             "(median, 1-s res.) | transaction phase s (median) | whole run s (median) |")
    L.append("|---|---|---|---|---|---|---|---|")
    for p in peers:
        rs = by_peer[p]
        s = stats([r["precise"].get("tx_per_s") for r in rs])
        own = stats([r["postmark"].get("tx_per_s") for r in rs])
        txs = stats([r["precise"].get("tx_phase_s") for r in rs])
        tot = stats([r["precise"].get("total_s") for r in rs])
        nfail = len([r for r in runs if r["peer"] == p and not r.get("ok")])
        nnoisy = len([r for r in ok_runs[p] if r.get("noisy")])
        used = f"{s['n']}" if s else "0"
        if nnoisy:
            used += (" (all noisy!)" if all(r.get("noisy") for r in rs)
                     else f" ({nnoisy} noisy left out)")
        if nfail:
            used += f" ({nfail} failed)"
        if s:
            med[p] = s["median"]
            L.append(f"| {p} | {used}" +
                     f" | **{fnum(s['median'])}** | {fnum(s['min'])} | {fnum(s['max'])} | "
                     f"{fnum(own['median'] if own else None)} | "
                     f"{fnum(txs['median'] if txs else None, 3)} | "
                     f"{fnum(tot['median'] if tot else None, 3)} |")
        else:
            L.append(f"| {p} | {used} | not measured | | | | | |")
    L.append("")
    if len(med) > 1:
        L.append("## Ratios of median tx/s (row peer / column peer)")
        L.append("")
        ps = list(med)
        L.append("| | " + " | ".join(ps) + " |")
        L.append("|---|" + "---|" * len(ps))
        for p in ps:
            L.append(f"| {p} | " + " | ".join(f"{med[p] / med[q]:.3f}" for q in ps) + " |")
        L.append("")
    L.append("## Per-phase figures (medians over runs)")
    L.append("")
    L.append("Precise rates use the same counts postmark prints, divided by the wall time of "
             "the phase they belong to (creation alone: file-creation phase; mixed/read/append: "
             "transaction phase; deletion alone: deletion phase; MB/s: whole run, as postmark).")
    L.append("")
    rows = [("creation alone (files/s)", "create_alone_per_s"),
            ("creation mixed with transactions (files/s)", "create_mixed_per_s"),
            ("read (files/s)", "read_per_s"),
            ("appended (files/s)", "appended_per_s"),
            ("deletion alone (files/s)", "delete_alone_per_s"),
            ("deletion mixed with transactions (files/s)", "delete_mixed_per_s"),
            ("data read (MiB/s)", "mb_read_per_s"),
            ("data written (MiB/s)", "mb_written_per_s")]
    hdr = [p for p in peers if by_peer[p]]
    if hdr:
        L.append("| figure | " + " | ".join(f"{p} precise | {p} postmark" for p in hdr) + " |")
        L.append("|---|" + "---|---|" * len(hdr))
        for label, key in rows:
            cells = []
            for p in hdr:
                sp = stats([r["precise"].get(key) for r in by_peer[p]])
                so = stats([r["postmark"].get(key) for r in by_peer[p]])
                nd = 1 if key.startswith("mb_") else 0
                cells.append(fnum(sp["median"] if sp else None, nd))
                cells.append(fnum(so["median"] if so else None, nd))
            L.append(f"| {label} | " + " | ".join(cells) + " |")
        cells = []
        for p in hdr:
            ph = [(stats([r["precise"].get(k) for r in by_peer[p]]) or {}).get("median")
                  for k in ("create_phase_s", "tx_phase_s", "delete_phase_s")]
            own = [(stats([r["postmark"].get(k) for r in by_peer[p]]) or {}).get("median")
                   for k in ("total_s", "tx_s")]
            cells.append(" / ".join(fnum(x, 3) for x in ph))
            cells.append(f"total {fnum(own[0])}, transactions {fnum(own[1])}")
        L.append("| phase times s (create / transactions / delete) | " + " | ".join(cells)
                 + " |")
        L.append("")
        keys = ("created", "read", "appended", "deleted")
        counts = {p: ", ".join(f"{k} {r['postmark'].get(k)}" for k in keys)
                  for p in hdr for r in by_peer[p][:1]}
        allc = {", ".join(f"{k} {r['postmark'].get(k)}" for k in keys)
                for p in hdr for r in by_peer[p]}
        if len(allc) == 1:
            L.append(f"Operation counts, identical in every run (fixed seed): {allc.pop()}.")
        else:
            L.append("Operation counts DIFFER between runs (unexpected with a fixed seed); "
                     "first run of each peer: " + "; ".join(f"{p}: {c}" for p, c in
                                                             counts.items()))
        L.append("")
    L.append("## Every run")
    L.append("")
    L.append("Busy before = share of all CPUs busy in the 0.5 s before postmark started "
             f"(> {a.idle_threshold:.0%} means someone else was using the machine). CPU during "
             "run = core-seconds used over the whole postmark run by the whole machine "
             "(/proc/stat, incl. kernel threads) / postmark (user+sys) / the rampart daemon / "
             "other user-space processes (others' work: noise).")
    L.append("")
    L.append("| # | rep | peer | tx/s precise | tx/s postmark | tx phase s | total s | "
             "busy before | CPU during run: machine / postmark / daemon / others | "
             "loadavg before | note |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(runs, 1):
        pr, pm = r.get("precise", {}), r.get("postmark", {})
        note = r.get("error", "")
        if r.get("noisy"):
            note += " noisy: " + r["noisy"]
        if r.get("stderr_lines"):
            note += f" postmark stderr: {r['stderr_lines']} lines"
        c = r.get("cpu", {})
        cpu = (f"{fnum(c.get('machine_busy_core_s'), 2)} / "
               f"{fnum((c.get('postmark_user_s') or 0) + (c.get('postmark_sys_s') or 0), 2)}"
               f" / {fnum(c.get('daemon_cpu_s'), 2)} / {fnum(c.get('others_cpu_s'), 2)}"
               ) if c else ""
        busy = r.get("busy_before")
        busy = "" if busy is None else (f"**{busy:.0%}**" if busy > a.idle_threshold
                                        else f"{busy:.0%}")
        L.append(f"| {i} | {r['rep']} | {r['peer']} | {fnum(pr.get('tx_per_s'))} | "
                 f"{fnum(pm.get('tx_per_s'))} | {fnum(pr.get('tx_phase_s'), 3)} | "
                 f"{fnum(pr.get('total_s'), 3)} | {busy} | {cpu} | {r.get('loadavg', '')} | "
                 f"{note.strip().replace('|', '/')[:200]} |")
    L.append("")
    ram = [r for r in runs if r["peer"] == "rampart" and r.get("extra")]
    fr = [r for r in by_peer.get("rampart", []) if isinstance(
        (r.get("extra") or {}).get("status after run"), dict) and
        r["extra"]["status after run"].get("fuse_requests")]
    if fr:
        req = fr[0]["extra"]["status after run"]["fuse_requests"]
        tot = sum(v for v in req.values() if isinstance(v, (int, float)))
        L.append(f"rampart FUSE requests in one run (`status --json` fuse_requests, rep "
                 f"{fr[0]['rep']}; includes setup and postmark's own file creation and "
                 f"deletion): {tot:,} in all, {tot / a.transactions:.1f} per transaction; " +
                 ", ".join(f"{k} {v:,}" for k, v in sorted(
                     req.items(), key=lambda kv: -kv[1] if isinstance(kv[1], (int, float))
                     else 0)) + ".")
        L.append("")
    if ram:
        L.append("rampart daemon after each run (before unmount): " + "; ".join(
            f"rep {r['rep']}: VmHWM {fnum((r['extra'].get('daemon VmHWM') or 0) / 2**20, 1)} "
            f"MiB, Rss {fnum((r['extra'].get('daemon Rss') or 0) / 2**20, 1)} MiB" for r in ram))
        L.append("")
    L.append("## Method")
    L.append("")
    L.append(f"- Each run: fresh file system for the peer, then `{drop}` "
             "(page cache, dentries and inodes dropped before every PostMark run), "
             "then `postmark CONFIG`, then teardown (unmount; loop device detached and "
             "backing file removed; rampart store removed)."
             if drop else "- Caches were NOT dropped between runs (--no-drop-caches).")
    L.append("- Every peer gets the same operation sequence (fixed seed).")
    if a.wait_idle > 0:
        L.append(f"- Before each run the script waited (up to {a.wait_idle:g} s) for the "
                 f"machine to be under {a.idle_threshold:.0%} busy; see 'busy before'.")
    noisy = [r for r in runs if r.get("noisy")]
    if noisy:
        L.append(f"- {len(noisy)} run(s) were noisy (other work on the machine before or "
                 f"during the run: busy > {a.idle_threshold:.0%} before, or others using > "
                 f"{a.max_others} cores during); they are listed but left out of the figures "
                 "when the peer has clean runs.")
    L.append("- ext4-ram: loop device in its default mode (buffered, not direct I/O) over a "
             f"sparse {a.ext4_size} file in /dev/shm; ext4 journal on (mkfs defaults), "
             "mount defaults (data=ordered).")
    L.append("- tmpfs: a fresh `mount -t tmpfs tmpfs MNT` with default options per run.")
    L.append("- rampart: `rampart mkfs STORE` (store in /dev/shm) and `" +
             fmt_cmd(["rampart", "mount", "STORE", "MNT", *shlex.split(a.rampart_opts)]) +
             "` per run; `rampart umount MNT` afterwards.")
    L.append("")
    L.append("### PostMark configuration (fed as a config file: `postmark CONFIG`)")
    L.append("")
    L.append("```")
    L.extend(cfg_lines)
    L.append("```")
    L.append("")
    L.append("Paper (Conquest, USENIX 2002, §5.2): 10,000 files of 512 B–16 KB, 200,000 "
             "transactions, creates and deletes equally likely, reads four times as likely as "
             "appends (PostMark `set bias read 8`: read if rand%10 < 8), 512-byte transaction "
             "block, one subdirectory level with sqrt(files) = 100 directories. "
             "`set buffering false` = open/read/write/close instead of stdio.")
    L.append("")
    L.append("### Exact commands (first repetition of each peer; later ones differ only in "
             "the run number in paths and loop device)")
    L.append("")
    for p in peers:
        if p in commands:
            L.append(f"{p}:")
            L.append("```")
            L.extend(commands[p])
            L.append("```")
    L.append("")
    L.append("### Machine")
    L.append("")
    L.extend(md_kv_table({**machine, **versions}))
    L.append("")
    return "\n".join(L)


# ---------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=200000)
    ap.add_argument("--files", type=int, default=10000, help="PostMark `set number`")
    ap.add_argument("--subdirs", type=int, default=100)
    ap.add_argument("--size-low", type=int, default=512)
    ap.add_argument("--size-high", type=int, default=16384)
    ap.add_argument("--read-block", type=int, default=512)
    ap.add_argument("--write-block", type=int, default=512)
    ap.add_argument("--bias-read", type=int, default=8,
                    help="read vs append out of 10 (paper: reads 4x appends = 8; "
                         "PostMark default 5)")
    ap.add_argument("--bias-create", type=int, default=5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--repeat", type=int, default=5, help="repetitions (paper: 5)")
    ap.add_argument("--peers", default=",".join(ALL_PEERS))
    ap.add_argument("--rampart-opts", default="", help="extra options for `rampart mount`")
    ap.add_argument("--rampart-bin", default=None,
                    help=f"default $RAMPART_BIN or {REPO}/target/release/rampart")
    ap.add_argument("--ext4-size", default="2G", help="size of the ext4 RAM-disk backing file")
    ap.add_argument("--shm-dir", default="/dev/shm", help="where backing files and stores go")
    ap.add_argument("--mnt-dir", default="/tmp", help="where mount points are made")
    ap.add_argument("--postmark", default=shutil.which("postmark") or "/usr/bin/postmark")
    ap.add_argument("--timeout", type=float, default=3600, help="per postmark run, seconds")
    ap.add_argument("--no-drop-caches", action="store_true")
    ap.add_argument("--wait-idle", type=float, default=300,
                    help="before each run wait up to this many seconds for the machine to be "
                         "idle (others' builds share the cores); 0 = don't wait")
    ap.add_argument("--idle-threshold", type=float, default=0.10,
                    help="busy fraction of all CPUs counted as idle (default 0.10)")
    ap.add_argument("--max-others", type=float, default=0.10,
                    help="a run is noisy if user-space processes other than postmark, the "
                         "rampart daemon and this script used more than this many cores on "
                         "average during it (default 0.10)")
    ap.add_argument("--retry-noisy", type=int, default=2,
                    help="run a noisy repetition again up to this many times (default 2)")
    ap.add_argument("--out", default=None,
                    help="results folder (default bench/results/postmark-TIMESTAMP)")
    a = ap.parse_args()

    peers = [p.strip() for p in a.peers.split(",") if p.strip()]
    bad = [p for p in peers if p not in ALL_PEERS]
    if bad or not peers:
        ap.error(f"unknown peer(s) {bad}; choose from {','.join(ALL_PEERS)}")
    if os.geteuid() != 0:
        ap.error("must run as root (mount, losetup, drop_caches)")
    if not os.path.exists(a.postmark):
        ap.error(f"postmark not found at {a.postmark}")

    install_signal_handlers()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(a.out or REPO / "bench" / "results" / f"postmark-{stamp}")
    (out / "raw").mkdir(parents=True, exist_ok=True)

    notes = []
    rbin, where = (None, "")
    if "rampart" in peers:
        rbin, where = find_rampart(a.rampart_bin)
        if not rbin:
            notes.append(f"rampart was NOT measured: no executable at {where}.")
            log(notes[-1])
            peers.remove("rampart")
            peers_report = peers + ["rampart"]
        else:
            peers_report = peers
    else:
        peers_report = peers
    drop = "" if a.no_drop_caches else "sync; echo 3 > /proc/sys/vm/drop_caches"

    runner, td = Runner(), Teardown()
    runs: list[dict] = []
    commands: dict[str, list[str]] = {}
    machine = machine_info()
    cfg_example = postmark_config(a, "MNT")
    versions = tool_versions(None)
    rc = 0
    try:
        shm_base = tempfile.mkdtemp(prefix="rampart-bench-", dir=a.shm_dir)
        td.push(f"rm -rf {shm_base}", lambda: shutil.rmtree(shm_base, ignore_errors=True))
        if rbin:
            orig, rbin = rbin, snapshot_binary(rbin, shm_base)
            versions = tool_versions(rbin, snapshot_of=orig)
        mnt_base = tempfile.mkdtemp(prefix="rampart-bench-mnt-", dir=a.mnt_dir)
        td.push(f"rmdir {mnt_base}", lambda: rmdir_if_unmounted(mnt_base))
        cfg_dir = tempfile.mkdtemp(prefix="rampart-bench-cfg-")
        td.push(f"rm -rf {cfg_dir}", lambda: shutil.rmtree(cfg_dir, ignore_errors=True))

        def make_peer(name):
            kw = dict(args=a, runner=runner, td=td, shm_base=shm_base, mnt_base=mnt_base)
            if name == "tmpfs":
                return TmpfsPeer(**kw)
            if name == "ext4-ram":
                return Ext4RamPeer(**kw)
            return RampartPeer(**kw, rbin=rbin)

        for rep in range(1, a.repeat + 1):
            k = (rep - 1) % len(peers)
            order = peers[k:] + peers[:k]
            for name in order:
                for attempt in range(1 + a.retry_noisy):
                    run_id = f"r{rep}" + (f"-retry{attempt}" if attempt else "")
                    rec = {"peer": name, "rep": rep, "attempt": attempt, "ok": False,
                           "precise": {}, "postmark": {}}
                    runs.append(rec)
                    peer = make_peer(name)
                    first_cmd = len(runner.commands)
                    mark = td.mark()
                    log(f"rep {rep}/{a.repeat}: {name}: setting up")
                    try:
                        mnt = peer.setup(run_id)
                        rec["mount"] = mount_options(mnt)
                        cfg_lines = postmark_config(a, mnt)
                        cfg = os.path.join(cfg_dir, f"{name}-{run_id}.pmrc")
                        Path(cfg).write_text("\n".join(cfg_lines) + "\n")
                        if a.wait_idle > 0:
                            wait_idle(a.wait_idle, a.idle_threshold)
                        if drop:
                            runner.drop_caches()
                        rec["busy_before"] = cpu_busy(0.5)
                        rec["loadavg"] = loadavg()
                        if rec["busy_before"] > a.idle_threshold:
                            log(f"warning: machine {rec['busy_before']:.0%} busy before this run")
                        pid = getattr(getattr(peer, "rm", None), "pid", None)
                        dcpu0 = proc_cpu_s(pid) if pid else None
                        runner.note(f"postmark {cfg}   # config: see below, location {mnt}")
                        log(f"rep {rep}/{a.repeat}: {name}: postmark running "
                            f"({a.transactions} transactions, {a.files} files)")
                        stdout, stderr, ts, prc, cpu = run_postmark(
                            a.postmark, cfg, cfg_dir, a.timeout, td, daemon_pid=pid)
                        if dcpu0 is not None:
                            d1 = proc_cpu_s(pid)
                            cpu["daemon_cpu_s"] = d1 - dcpu0 if d1 is not None else None
                        rec["cpu"] = cpu
                        (out / "raw" / f"{name}-{run_id}.txt").write_text(
                            stdout + ("\n--- stderr ---\n" + stderr if stderr else ""))
                        rec["postmark"] = parse_report(stdout)
                        rec["precise"] = precise_figures(ts, rec["postmark"], a)
                        rec["stderr_lines"] = len(stderr.splitlines())
                        if "out of files" in stdout:
                            rec["error"] = "postmark ran out of files (raise --files)"
                        elif prc != 0 and not rec["postmark"]:
                            rec["error"] = f"postmark exit {prc}"
                        elif not rec["precise"].get("tx_per_s") or not rec["postmark"]:
                            rec["error"] = "could not parse postmark output"
                        else:
                            rec["ok"] = True
                        if stderr.strip():
                            log(f"postmark stderr ({rec['stderr_lines']} lines), first: "
                                f"{stderr.strip().splitlines()[0]}")
                        peer.after_run()
                        rec["extra"] = peer.extra
                        log(f"rep {rep}/{a.repeat}: {name}: "
                            f"{fnum(rec['precise'].get('tx_per_s'))} tx/s "
                            f"(postmark says {rec['postmark'].get('tx_per_s')})")
                    except KeyboardInterrupt:
                        rec["error"] = "interrupted"
                        raise
                    except (CommandError, OSError, ValueError) as e:
                        rec["error"] = str(e).splitlines()[0]
                        log(f"rep {rep}/{a.repeat}: {name}: FAILED: {e}")
                        rc = 1
                    finally:
                        errs = td.unwind(mark)
                        if errs:
                            rec["error"] = (rec.get("error", "") + " teardown: " +
                                            "; ".join(errs)).strip()
                            rc = 1
                        if name not in commands:
                            commands[name] = runner.commands[first_cmd:]
                    rec["noisy"] = noisy_reason(rec, a)
                    if rec["noisy"]:
                        log(f"rep {rep}: {name}: noisy run ({rec['noisy']})" +
                            ("; running it again" if attempt < a.retry_noisy else ""))
                    if not rec["noisy"] or not rec["ok"]:
                        break
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); tearing down")
        notes.append(f"Run interrupted ({e}); results are partial.")
        rc = 130
    finally:
        td.unwind(0)

    finished = datetime.datetime.now().isoformat(timespec="seconds")
    report = build_report(a, peers_report, runs, notes, commands, machine, versions,
                          cfg_example, started, finished, drop)
    (out / "report.md").write_text(report + "\n")
    (out / "results.json").write_text(json.dumps(
        {"args": vars(a), "runs": runs, "notes": notes, "machine": machine,
         "versions": versions, "commands": commands}, indent=2, default=str) + "\n")
    print(report)
    log(f"report, results.json and raw postmark outputs in {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())

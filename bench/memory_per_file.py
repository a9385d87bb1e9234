#!/usr/bin/env python3
"""Memory per empty file: the rampart daemon's heap vs tmpfs's kernel memory.

For each peer (default: rampart, then tmpfs), on a fresh file system:
  1. mount (rampart: `rampart mkfs` + `rampart mount` of a store in /dev/shm; tmpfs:
     `mount -t tmpfs tmpfs MNT`), make the directories d000..d999 (before the baseline, so
     only files are in the delta);
  2. `sync; echo 3 > /proc/sys/vm/drop_caches`, wait, record memory ("before");
  3. create N empty files (default 1,000,000 = 1000 dirs x 1000 files, names f000000..f999999)
     with a small C helper compiled on the fly (open(O_CREAT|O_EXCL)+close, or mknod), several
     processes in parallel;
  4. record memory ("after, caches warm"), then drop caches again and record ("after").
     The headline uses "after" for both peers: what the files themselves keep, with the
     kernel's reclaimable dentry/inode caches of the FUSE mount released.

What is counted:
  rampart  the daemon's /proc/PID/smaps_rollup: Anonymous (its heap; headline), Private_Dirty,
           Rss; PID from `rampart status MNT --json` key `pid`. Also rampart's own
           `memory_used_bytes`, the kernel slab delta while caches are warm (FUSE inodes and
           dentries: reclaimable, released by the drop), and the store's size in /dev/shm.
  tmpfs    kernel memory from /proc/meminfo: delta of Slab (SReclaimable + SUnreclaim) plus
           Shmem (the headline; for empty files Shmem stays ~0), with a per-cache breakdown
           from /proc/slabinfo and the MemFree delta as a cross-check. tmpfs dentries and
           inodes are pinned, so the drop does not release them.

The box's other activity adds noise to the kernel figures (they are machine-wide).
Progress on stderr; Markdown report on stdout and in --out/report.md (+ results.json).
Run as root. Quick run: python3 bench/memory_per_file.py --files 20000
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchlib import (  # noqa: E402
    CommandError, RampartMount, REPO, Runner, Teardown, cpu_busy,
    find_rampart, human_bytes, install_signal_handlers, loadavg, log,
    machine_info, md_kv_table, meminfo, mount_options, proc_memory,
    rampart_status, rmdir_if_unmounted, slabinfo, snapshot_binary,
    tool_versions, wait_idle)

ALL_PEERS = ("rampart", "tmpfs")

HELPER_C = r"""
/* mkfiles ROOT TOTAL PER_DIR WORKER NWORKERS open|mknod
   creates ROOT/dDDD/fNNNNNN for the directories d = WORKER, WORKER+NWORKERS, ... */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 7) { fprintf(stderr, "usage: mkfiles ROOT TOTAL PER_DIR W NW open|mknod\n"); return 2; }
    const char *root = argv[1];
    long total = atol(argv[2]), per = atol(argv[3]);
    int w = atoi(argv[4]), nw = atoi(argv[5]);
    int use_mknod = strcmp(argv[6], "mknod") == 0;
    long ndirs = (total + per - 1) / per;
    char path[4096], name[64];
    for (long d = w; d < ndirs; d += nw) {
        snprintf(path, sizeof path, "%s/d%03ld", root, d);
        int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) { perror(path); return 1; }
        for (long i = d * per; i < (d + 1) * per && i < total; i++) {
            snprintf(name, sizeof name, "f%06ld", i);
            if (use_mknod) {
                if (mknodat(dfd, name, S_IFREG | 0644, 0) != 0) {
                    fprintf(stderr, "%s/%s: %s\n", path, name, strerror(errno)); return 1;
                }
            } else {
                int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (fd < 0) { fprintf(stderr, "%s/%s: %s\n", path, name, strerror(errno)); return 1; }
                if (close(fd) != 0) { fprintf(stderr, "close %s/%s: %s\n", path, name, strerror(errno)); return 1; }
            }
        }
        close(dfd);
    }
    return 0;
}
"""


def build_helper() -> str | None:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        return None
    h = hashlib.sha256(HELPER_C.encode()).hexdigest()[:12]
    exe = f"/tmp/rampart-bench-mkfiles-{h}"
    if os.access(exe, os.X_OK):
        return exe
    src = exe + ".c"
    Path(src).write_text(HELPER_C)
    cp = subprocess.run([gcc, "-O2", "-o", exe + ".tmp", src], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
    os.unlink(src)
    if cp.returncode != 0:
        log(f"gcc failed, using the Python creator: {cp.stdout.strip()}")
        return None
    os.replace(exe + ".tmp", exe)
    return exe


def _py_worker(job):
    root, total, per, w, nw, method = job
    ndirs = (total + per - 1) // per
    for d in range(w, ndirs, nw):
        dfd = os.open(f"{root}/d{d:03d}", os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(d * per, min((d + 1) * per, total)):
                name = f"f{i:06d}"
                if method == "mknod":
                    os.mknod(name, 0o100644, dir_fd=dfd)
                else:
                    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644,
                                     dir_fd=dfd))
        finally:
            os.close(dfd)
    return 0


def create_files(helper, root, total, per, procs, method, td: Teardown) -> float:
    """Returns seconds taken."""
    t0 = time.monotonic()
    if helper:
        ps = []
        mark = td.mark()

        def kill_all():
            for p in ps:
                if p.poll() is None:
                    p.kill()
                p.wait()
        td.push("kill file creators", kill_all)
        try:
            for w in range(procs):
                ps.append(subprocess.Popen([helper, root, str(total), str(per), str(w),
                                            str(procs), method], stdin=subprocess.DEVNULL,
                                           start_new_session=True))
            rcs = [p.wait() for p in ps]
        finally:
            td.unwind(mark)
        if any(rcs):
            raise CommandError(f"file creator exit codes {rcs}")
    else:
        with Pool(procs) as pool:
            pool.map(_py_worker, [(root, total, per, w, procs, method) for w in range(procs)])
    return time.monotonic() - t0


def du_bytes(path) -> int:
    n = 0
    for dp, dns, fns in os.walk(path):
        for f in fns:
            try:
                n += os.lstat(os.path.join(dp, f)).st_blocks * 512
            except OSError:
                pass
    return n


def used_inodes(path) -> int:
    st = os.statvfs(path)
    return st.f_files - st.f_ffree


def snapshot(pid=None, runner=None, rbin=None, mnt=None) -> dict:
    s = {"time": time.time(), "meminfo": meminfo(), "slabinfo": slabinfo(),
         "loadavg": loadavg()}
    if pid:
        s["proc"] = proc_memory(pid)
    if rbin:
        try:
            s["status"] = rampart_status(runner, rbin, mnt)
        except Exception as e:
            s["status"] = {"error": str(e)}
    return s


def settle(runner: Runner, seconds: float, drop: bool = True) -> None:
    if drop:
        runner.drop_caches()
    time.sleep(seconds)


def kernel_delta(before: dict, after: dict) -> dict:
    mb, ma = before["meminfo"], after["meminfo"]
    d = {k: ma.get(k, 0) - mb.get(k, 0) for k in ("Slab", "SReclaimable", "SUnreclaim",
                                                  "Shmem", "MemFree", "Percpu",
                                                  "KernelStack", "PageTables")}
    d["Slab+Shmem"] = d["Slab"] + d["Shmem"]
    sb, sa = before["slabinfo"], after["slabinfo"]
    caches = []
    for name in set(sa) | set(sb):
        b = sb.get(name, {"bytes": 0, "active_objs": 0, "objsize": 0})
        a = sa.get(name, {"bytes": 0, "active_objs": 0, "objsize": 0})
        db = a["bytes"] - b["bytes"]
        if db:
            caches.append((name, db, a["active_objs"] - b["active_objs"],
                           a["objsize"] or b["objsize"]))
    caches.sort(key=lambda c: -abs(c[1]))
    d["caches"] = caches[:10]
    return d


def measure_peer(name, a, runner, td, helper, rbin, shm_base, mnt_base) -> dict:
    res: dict = {"peer": name, "ok": False}
    mark = td.mark()
    first_cmd = len(runner.commands)
    try:
        mnt = os.path.join(mnt_base, name)
        os.mkdir(mnt)
        td.push(f"rmdir {mnt}", lambda: rmdir_if_unmounted(mnt))
        rm = None
        if name == "tmpfs":
            runner.run(["mount", "-t", "tmpfs", "tmpfs", mnt])
            td.push(f"umount {mnt}", lambda: runner.run(["umount", mnt], timeout=600))
        else:
            store = os.path.join(shm_base, "rampart-store")
            rm = RampartMount(runner, td, rbin, store, mnt, shlex.split(a.rampart_opts))
            rm.setup()
            if not rm.pid:
                raise CommandError("could not find the rampart daemon's pid")
            res["pid"], res["pid source"] = rm.pid, rm.pid_source
        res["mount"] = mount_options(mnt)
        ndirs = math.ceil(a.files / a.per_dir)
        runner.note(f"mkdir {mnt}/d000 .. {mnt}/d{ndirs - 1:03d}   # {ndirs} directories, "
                    "made before the baseline")
        for d in range(ndirs):
            os.mkdir(os.path.join(mnt, f"d{d:03d}"))
        inodes0 = used_inodes(mnt)
        if a.wait_idle > 0:
            wait_idle(a.wait_idle, a.idle_threshold)
        settle(runner, a.settle)
        pid = rm.pid if rm else None
        kw = dict(pid=pid, runner=runner, rbin=rbin if rm else None, mnt=mnt)
        before = snapshot(**kw)
        res["busy_before"] = cpu_busy(0.5)
        log(f"{name}: creating {a.files:,} empty files ({ndirs} dirs x {a.per_dir}, "
            f"{a.procs} processes, {a.method})")
        runner.note(f"{helper or 'python creator'} {mnt} {a.files} {a.per_dir} W {a.procs} "
                    f"{a.method}   # for W in 0..{a.procs - 1}, in parallel")
        secs = create_files(helper, mnt, a.files, a.per_dir, a.procs, a.method, td)
        res["create_seconds"] = secs
        res["creates_per_s"] = a.files / secs if secs > 0 else None
        log(f"{name}: created in {secs:.1f}s ({a.files / secs:,.0f}/s)")
        time.sleep(a.settle)
        warm = snapshot(**kw)
        res["busy_after"] = cpu_busy(0.5)
        settle(runner, a.settle)
        after = snapshot(**kw)
        res["inodes_created"] = used_inodes(mnt) - inodes0
        if rm:
            res["store_bytes"] = du_bytes(rm.store)
            st = after.get("status", {})
            res["status_files"] = st.get("files")
        res["before"], res["warm"], res["after"] = before, warm, after
        res["kernel_warm"] = kernel_delta(before, warm)
        res["kernel_after"] = kernel_delta(before, after)
        if pid:
            for tag, snap in (("warm", warm), ("after", after)):
                res[f"proc_{tag}"] = {k: snap["proc"].get(k, 0) - before["proc"].get(k, 0)
                                      for k in before["proc"]}
            for tag, snap in (("warm", warm), ("after", after)):
                b = before.get("status", {}).get("memory_used_bytes")
                x = snap.get("status", {}).get("memory_used_bytes")
                res[f"status_used_{tag}"] = (x - b) if isinstance(b, int) and \
                    isinstance(x, int) else None
        n_seen = res.get("status_files") if rm else res["inodes_created"]
        if n_seen is not None and n_seen != a.files:
            res["warning"] = f"expected {a.files} files, the file system reports {n_seen}"
            log(res["warning"])
        res["ok"] = True
    except KeyboardInterrupt:
        res["error"] = "interrupted"
        raise
    except (CommandError, OSError, ValueError) as e:
        res["error"] = str(e)
        log(f"{name}: FAILED: {e}")
    finally:
        log(f"{name}: tearing down (1M-file teardown takes a while)")
        errs = td.unwind(mark)
        if errs:
            res["error"] = (res.get("error", "") + " teardown: " + "; ".join(errs)).strip()
        res["commands"] = runner.commands[first_cmd:]
    return res


def per_file(x, n):
    return None if x is None else x / n


def fb(x):
    return "n/a" if x is None else f"{x:,.0f}"


def build_report(a, results, notes, machine, versions, started, finished, helper) -> str:
    n = a.files
    L = ["# Memory per empty file: rampart daemon vs tmpfs", ""]
    L.append(f"Started {started}, finished {finished}. {n:,} empty files in "
             f"{math.ceil(n / a.per_dir)} directories of up to {a.per_dir}, created with "
             f"{'open(O_CREAT|O_EXCL)+close' if a.method == 'open' else 'mknod'} by "
             f"{a.procs} processes.")
    L.append("")
    for x in notes:
        L.append(f"- **{x}**")
    if notes:
        L.append("")
    r = {x["peer"]: x for x in results}
    L.append("## Bytes per file")
    L.append("")
    L.append("| peer | what is counted | Δ total | bytes per file |")
    L.append("|---|---|---|---|")
    if "rampart" in r and r["rampart"].get("ok"):
        p = r["rampart"]
        pa, pw = p["proc_after"], p["proc_warm"]
        for label, key in (("daemon heap: smaps_rollup Anonymous", "Anonymous"),
                           ("daemon smaps_rollup Private_Dirty", "Private_Dirty"),
                           ("daemon smaps_rollup Rss", "Rss")):
            L.append(f"| rampart | {label} | {human_bytes(pa.get(key, 0))} | "
                     f"{'**' if key == 'Anonymous' else ''}{fb(per_file(pa.get(key), n))}"
                     f"{'**' if key == 'Anonymous' else ''} |")
        L.append(f"| rampart | daemon Anonymous before the drop (caches warm) | "
                 f"{human_bytes(pw.get('Anonymous', 0))} | {fb(per_file(pw.get('Anonymous'), n))} |")
        su = p.get("status_used_after")
        L.append(f"| rampart | `status --json` memory_used_bytes (rampart's own accounting) | "
                 f"{human_bytes(su) if su is not None else 'n/a'} | {fb(per_file(su, n))} |")
        kw = p["kernel_warm"]["Slab+Shmem"]
        L.append(f"| rampart | kernel Slab+Shmem while caches warm (FUSE inodes, dentries; "
                 f"reclaimable) | {human_bytes(kw)} | {fb(per_file(kw, n))} |")
        ka = p["kernel_after"]["Slab+Shmem"]
        L.append(f"| rampart | kernel Slab+Shmem after the drop (includes store growth "
                 f"in /dev/shm as Shmem) | {human_bytes(ka)} | {fb(per_file(ka, n))} |")
        if p.get("store_bytes") is not None:
            L.append(f"| rampart | store folder in /dev/shm (du) | "
                     f"{human_bytes(p['store_bytes'])} | {fb(per_file(p['store_bytes'], n))} |")
    elif "rampart" in r:
        L.append(f"| rampart | not measured: {r['rampart'].get('error', '')} | | |")
    if "tmpfs" in r and r["tmpfs"].get("ok"):
        k, kw = r["tmpfs"]["kernel_after"], r["tmpfs"]["kernel_warm"]
        L.append(f"| tmpfs | kernel: Δ(Slab + Shmem) from /proc/meminfo | "
                 f"{human_bytes(k['Slab+Shmem'])} | **{fb(per_file(k['Slab+Shmem'], n))}** |")
        for key in ("SUnreclaim", "SReclaimable", "Shmem"):
            L.append(f"| tmpfs | of which {key} | {human_bytes(k[key])} | "
                     f"{fb(per_file(k[key], n))} |")
        L.append(f"| tmpfs | cross-check only: −ΔMemFree (machine-wide, noisy) | "
                 f"{human_bytes(-k['MemFree'])} | "
                 f"{fb(per_file(-k['MemFree'], n))} |")
        L.append(f"| tmpfs | Δ(Slab + Shmem) before the drop | {human_bytes(kw['Slab+Shmem'])} "
                 f"| {fb(per_file(kw['Slab+Shmem'], n))} |")
    elif "tmpfs" in r:
        L.append(f"| tmpfs | not measured: {r['tmpfs'].get('error', '')} | | |")
    L.append("")
    if "rampart" in r and r["rampart"].get("ok") and "tmpfs" in r and r["tmpfs"].get("ok"):
        ra = r["rampart"]["proc_after"].get("Anonymous", 0) / n
        tk = r["tmpfs"]["kernel_after"]["Slab+Shmem"] / n
        if tk > 0:
            L.append(f"Side by side: rampart daemon heap {ra:,.0f} B/file vs tmpfs kernel "
                     f"{tk:,.0f} B/file (ratio {ra / tk:.2f}).")
            L.append("")
    L.append("## Details")
    L.append("")
    for x in results:
        L.append(f"### {x['peer']}")
        L.append("")
        if x.get("error"):
            L.append(f"Error: {x['error']}")
            L.append("")
        if x.get("warning"):
            L.append(f"Warning: {x['warning']}")
            L.append("")
        if not x.get("before"):
            continue
        L.append(f"- mount: {x.get('mount', '')}")
        L.append(f"- creation: {x.get('create_seconds', 0):.2f} s, "
                 f"{fb(x.get('creates_per_s'))} files/s; inodes counted by statfs: "
                 f"{x.get('inodes_created')}" +
                 (f"; `status` files: {x.get('status_files')}" if x["peer"] == "rampart"
                  else ""))
        L.append(f"- loadavg before/after: {x['before']['loadavg']} / {x['after']['loadavg']};"
                 f" machine busy just before/after creation: {x.get('busy_before', 0):.0%} / "
                 f"{x.get('busy_after', 0):.0%}")
        if x.get("pid"):
            L.append(f"- daemon pid {x['pid']} (from {x.get('pid source')})")
            L.append("")
            L.append("| daemon memory | before | after, caches warm | after drop_caches | "
                     "Δ per file (after drop) |")
            L.append("|---|---|---|---|---|")
            for k in x["before"]["proc"]:
                b, w, af = (x[s]["proc"].get(k, 0) for s in ("before", "warm", "after"))
                if k == "Threads":
                    L.append(f"| {k} | {b} | {w} | {af} | |")
                else:
                    L.append(f"| {k} | {human_bytes(b)} | {human_bytes(w)} | {human_bytes(af)} "
                             f"| {(af - b) / n:,.1f} |")
            sb, sa = x["before"].get("status", {}), x["after"].get("status", {})
            L.append("")
            L.append(f"- `status --json` before: `{json.dumps(sb)}`")
            L.append(f"- `status --json` after: `{json.dumps(sa)}`")
        L.append("")
        for tag in ("kernel_warm", "kernel_after"):
            k = x[tag]
            L.append(f"Kernel, {'caches warm' if tag == 'kernel_warm' else 'after drop_caches'}:"
                     f" ΔSlab {human_bytes(k['Slab'])} (SReclaimable "
                     f"{human_bytes(k['SReclaimable'])}, SUnreclaim {human_bytes(k['SUnreclaim'])}),"
                     f" ΔShmem {human_bytes(k['Shmem'])}, ΔMemFree {human_bytes(k['MemFree'])}. "
                     "Largest slab-cache changes: " + ", ".join(
                         f"{c[0]} {human_bytes(c[1])} ({c[2]:+,} objs × {c[3]} B)"
                         for c in k["caches"][:6]) + ".")
            L.append("")
    L.append("## Method")
    L.append("")
    L.append(f"- Baseline and final readings each follow `sync; echo 3 > "
             f"/proc/sys/vm/drop_caches` and a {a.settle:g}-second pause; the directories "
             "exist before the baseline.")
    L.append("- rampart: the daemon's heap is smaps_rollup `Anonymous`; its growth includes "
             "whatever the allocator keeps, so this is what the process really costs.")
    L.append("- tmpfs: kernel memory counted = Δ(Slab + Shmem) from /proc/meminfo, i.e. "
             "SReclaimable + SUnreclaim (inodes, dentries, directory-index nodes...) + "
             "shared-memory pages (none for empty files). Machine-wide figures: other activity "
             "on the box shows up as noise.")
    L.append(f"- File creator: {helper or 'Python multiprocessing (gcc not available)'}.")
    L.append("")
    L.append("### Exact commands")
    L.append("")
    for x in results:
        L.append(f"{x['peer']}:")
        L.append("```")
        L.extend(x.get("commands", []))
        L.append("```")
    L.append("")
    L.append("Helper source: in bench/memory_per_file.py (HELPER_C), compiled with "
             "`gcc -O2`.")
    L.append("")
    L.append("### Machine")
    L.append("")
    L.extend(md_kv_table({**machine, **versions}))
    L.append("")
    return "\n".join(L)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--per-dir", type=int, default=1000, help="files per directory")
    ap.add_argument("--peers", default=",".join(ALL_PEERS))
    ap.add_argument("--method", choices=("open", "mknod"), default="open")
    ap.add_argument("--procs", type=int, default=max(2, 2 * (os.cpu_count() or 1)),
                    help="parallel creator processes")
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds to wait before each reading")
    ap.add_argument("--wait-idle", type=float, default=300,
                    help="wait up to this many seconds for the machine to be idle before the "
                         "baseline (others' builds add noise); 0 = don't wait")
    ap.add_argument("--idle-threshold", type=float, default=0.10)
    ap.add_argument("--rampart-opts", default="")
    ap.add_argument("--rampart-bin", default=None)
    ap.add_argument("--shm-dir", default="/dev/shm")
    ap.add_argument("--mnt-dir", default="/tmp")
    ap.add_argument("--out", default=None,
                    help="results folder (default bench/results/memory-TIMESTAMP)")
    a = ap.parse_args()
    peers = [p.strip() for p in a.peers.split(",") if p.strip()]
    if not peers or any(p not in ALL_PEERS for p in peers):
        ap.error(f"--peers: choose from {','.join(ALL_PEERS)}")
    if a.files < 1 or a.per_dir < 1:
        ap.error("--files and --per-dir must be positive")
    if math.ceil(a.files / a.per_dir) > 1000 or a.files > 1_000_000:
        ap.error("at most 1000 directories and 1,000,000 files (names are d%03d/f%06d)")
    if os.geteuid() != 0:
        ap.error("must run as root (mount, drop_caches)")

    install_signal_handlers()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(a.out or REPO / "bench" / "results" / f"memory-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    rbin = None
    if "rampart" in peers:
        rbin, where = find_rampart(a.rampart_bin)
        if not rbin:
            notes.append(f"rampart was NOT measured: no executable at {where}.")
            log(notes[-1])
    helper = build_helper()
    machine, versions = machine_info(), tool_versions(None)
    runner, td = Runner(), Teardown()
    results: list[dict] = []
    rc = 0
    try:
        shm_base = tempfile.mkdtemp(prefix="rampart-bench-", dir=a.shm_dir)
        td.push(f"rm -rf {shm_base}", lambda: shutil.rmtree(shm_base, ignore_errors=True))
        if rbin:
            orig, rbin = rbin, snapshot_binary(rbin, shm_base)
            versions = tool_versions(rbin, snapshot_of=orig)
        mnt_base = tempfile.mkdtemp(prefix="rampart-bench-mnt-", dir=a.mnt_dir)
        td.push(f"rmdir {mnt_base}", lambda: rmdir_if_unmounted(mnt_base))
        for p in peers:
            if p == "rampart" and not rbin:
                results.append({"peer": p, "ok": False, "error": "binary not found"})
                continue
            res = measure_peer(p, a, runner, td, helper, rbin, shm_base, mnt_base)
            results.append(res)
            if not res.get("ok"):
                rc = 1
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); tearing down")
        notes.append(f"Run interrupted ({e}); results are partial.")
        rc = 130
    finally:
        td.unwind(0)
    finished = datetime.datetime.now().isoformat(timespec="seconds")
    report = build_report(a, results, notes, machine, versions, started, finished, helper)
    (out / "report.md").write_text(report + "\n")
    (out / "results.json").write_text(json.dumps(
        {"args": vars(a), "results": results, "notes": notes, "machine": machine,
         "versions": versions}, indent=2, default=str) + "\n")
    print(report)
    log(f"report and results.json in {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())

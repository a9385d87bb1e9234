"""The power-cut rig: a rampart store on LazyFS, writers, the cut, and the checker.

LazyFS (vendor/lazyfs, built by scripts/lazyfs-build) keeps every write in its own cache and
writes it to the folder beneath only on fsync; `lazyfs::clear-cache` drops what was not synced,
and a crash fault kills LazyFS itself at an exact system call. A power cut here is: the daemon
SIGKILLed (nothing more reaches the store), then the unsynced data dropped, then LazyFS
unmounted and mounted again, so the store holds exactly what was synced. docs/TESTING.md says
what this models and what it does not.
"""

import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))

from e2e_helpers import (RAMPART_BIN, REPO, Mount, in_mount_table, pid_alive, run,  # noqa: E402
                         wait_until)
from workload import Writer, apply_step, mixed_ok  # noqa: E402

LAZYFS_BIN = os.environ.get("LAZYFS_BIN") or str(REPO / "target" / "lazyfs" / "lazyfs")
EXIT_WAIT_S = 30
HEADER_BYTES = 64
BATCH_HEADER_BYTES = 32

LAZYFS_CONFIG = """[faults]
fifo_path="{fifo}"
fifo_path_completed="{done}"
[cache]
apply_eviction=false
[cache.simple]
custom_size="2gb"
blocks_per_page=1
[filesystem]
log_all_operations=false
logfile="{log}"
"""


class LazyFS:
    """One LazyFS mount at `mnt` over the host folder `backing`, run in the foreground by us."""

    def __init__(self, base):
        self.base = Path(base)
        self.backing = self.base / "backing"
        self.mnt = self.base / "lazy"
        self.fifo = self.base / "faults.fifo"
        self.done = self.base / "faults-done.fifo"
        self.config = self.base / "lazyfs.toml"
        self.log = self.base / "lazyfs.log"
        self.proc = None
        self.done_fd = None
        self.starts = 0

    def start(self):
        self.backing.mkdir(exist_ok=True)
        self.mnt.mkdir(exist_ok=True)
        for f in (self.fifo, self.done):
            if not f.exists():
                os.mkfifo(f, 0o600)
        self.config.write_text(LAZYFS_CONFIG.format(fifo=self.fifo, done=self.done, log=self.log))
        # LazyFS opens the completion FIFO for writing at start: a reader must be there first,
        # and stay for as long as it runs.
        self.done_fd = os.open(self.done, os.O_RDONLY | os.O_NONBLOCK)
        out = open(self.base / f"lazyfs-{self.starts}.out", "w")
        self.starts += 1
        self.proc = subprocess.Popen(
            [LAZYFS_BIN, str(self.mnt), "--config-path", str(self.config), "-o", "allow_other",
             "-o", "modules=subdir", "-o", f"subdir={self.backing}", "-f"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        if not wait_until(lambda: in_mount_table(self.mnt) or self.proc.poll() is not None, 20):
            raise AssertionError("LazyFS did not mount within 20 s")
        assert self.proc.poll() is None, f"LazyFS exited {self.proc.returncode}: {self.output()}"

    def output(self):
        try:
            return (self.base / f"lazyfs-{self.starts - 1}.out").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def command(self, line):
        fd = os.open(self.fifo, os.O_WRONLY)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def clear_cache(self):
        """Drops every byte not yet fsynced, and waits until it is done."""
        self.command("lazyfs::clear-cache")
        got = b""
        deadline = time.monotonic() + EXIT_WAIT_S
        while b"finished::clear-cache" not in got:
            left = deadline - time.monotonic()
            assert left > 0, f"LazyFS did not confirm clear-cache: {self.output()}"
            select.select([self.done_fd], [], [], left)
            try:
                got += os.read(self.done_fd, 100)
            except BlockingIOError:
                pass

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """Unmounts (lazily if it is dead) and waits for our process to end."""
        if in_mount_table(self.mnt):
            run(["fusermount3", "-u", self.mnt], timeout=60)
            if in_mount_table(self.mnt):
                run(["fusermount3", "-u", "-z", self.mnt], timeout=60)
        if self.proc is not None:
            try:
                self.proc.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(EXIT_WAIT_S)
            self.proc = None
        if self.done_fd is not None:
            os.close(self.done_fd)
            self.done_fd = None


class Rig:
    """A store on LazyFS, rampart mounted over it, writers on the mount, and power cuts."""

    def __init__(self, base, opts=(), writers=3):
        self.base = Path(base)
        self.lazy = LazyFS(self.base)
        self.env = dict(os.environ, RAMPART_HOME=str(self.base / "home"))
        self.fs = Mount(self.base, "r", opts=opts, env=self.env)
        self.fs.store = self.lazy.mnt / "store"
        self.fs.path = self.base / "mnt"
        self.n_writers = writers
        self.procs = []
        self.cycle = 0
        self.logs = {}  # wid -> log path, of the current cycle
        self.settled = {}  # relpath -> content, of the writers of earlier cycles, as recovered
        self.history = []  # one line per cut, for the report
        self.cut_at = None  # CLOCK_MONOTONIC of the last cut

    @property
    def store_backing(self):
        return self.lazy.backing / "store"

    def start(self):
        self.lazy.start()
        self.fs.mount()
        assert self.fs.pid, f"no daemon pid ({self.fs.pid_source})"

    def start_writers(self, seed):
        self.logs = {}
        self.procs = []
        for i in range(self.n_writers):
            wid = self.cycle * 10 + i
            log = self.base / f"writer-{wid}.log"
            self.logs[wid] = log
            out = open(self.base / f"writer-{wid}.out", "w")
            self.procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "workload.py"), str(self.fs.path), str(wid),
                 str(seed * 1000 + wid), str(log)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT))
            out.close()

    def stop_writers(self):
        for p in self.procs:
            try:
                p.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(EXIT_WAIT_S)
        self.procs = []

    def pause_writers(self):
        """Stops the writers without a cut (SIGKILL: a step may be left started, never done)."""
        for p in self.procs:
            p.kill()
        self.stop_writers()

    # -- the cut ----------------------------------------------------------------------------
    def _kill_daemon(self):
        pid = self.fs.pid
        os.kill(pid, signal.SIGKILL)
        # A dead (zombie) daemon has no system call left in flight: each FUSE request it made
        # to LazyFS has been answered.
        assert wait_until(lambda: not pid_alive(pid), EXIT_WAIT_S), f"daemon {pid} survived SIGKILL"
        # The writers go before the mount does: after the lazy unmount their paths name the
        # empty folder under it, where their steps (and fsyncs) would succeed on the host's
        # file system and be taken for acknowledgements of the store (seen under load: 18,000
        # steps in the 30 s the unmount took).
        for p in self.procs:
            p.kill()
        self.stop_writers()
        run(["fusermount3", "-u", "-z", self.fs.path], timeout=60)
        assert wait_until(lambda: not in_mount_table(self.fs.path), EXIT_WAIT_S)
        self.fs.mounted = False

    def cut_now(self, what):
        """The power cut at this instant: the daemon stops, and what was not synced is gone."""
        t = self.cut_at = time.monotonic()
        self._kill_daemon()
        self.lazy.clear_cache()
        self.stop_writers()
        self.lazy.stop()
        self.history.append(f"cycle {self.cycle}: {what} at {t:.3f}")

    def cut_by_lazyfs(self, fault, what, timeout=15):
        """Arms a LazyFS crash fault (`lazyfs::crash::...`): LazyFS kills itself at that exact
        system call, losing what it had not synced; then the daemon is killed. Under the load,
        the daemon reaches each of these calls within a second or so: one that never comes
        is a failure (and a long wait would fill LazyFS's cache, past which it writes
        through to the disk and stops losing anything)."""
        self.cut_at = time.monotonic()  # no writer may fail before the fault is armed
        self.lazy.command(fault)
        fired = wait_until(lambda: not self.lazy.alive(), timeout, interval=0.01)
        if not fired:
            self.cut_now(f"{what}: never reached")
            raise AssertionError(f"under load, the daemon did not reach the sync point "
                                 f"'{what}' within {timeout} s (LazyFS fault {fault!r})")
        self._kill_daemon()
        self.stop_writers()
        self.lazy.stop()
        self.history.append(f"cycle {self.cycle}: {what}")
        return True

    def recover(self, damaged=False):
        """LazyFS mounted again over what survived; fsck must call the store clean (or, when
        the test `damaged` the store on purpose, report it and repair it with --repair);
        rampart mounted again. Returns the (first) fsck report."""
        self.lazy.start()
        r = run([RAMPART_BIN, "fsck", "--json", self.fs.store], env=self.env, timeout=300)
        try:
            report = json.loads(r.stdout)
        except ValueError:
            report = {"unparsed": r.stdout}
        if damaged:
            assert r.returncode != 0, f"fsck called a damaged store clean:\n{json.dumps(report, indent=1)}"
            r = run([RAMPART_BIN, "fsck", "--repair", self.fs.store], env=self.env, timeout=300)
        assert r.returncode == 0, (
            f"fsck after the power cut exited {r.returncode}:\n{json.dumps(report, indent=1)}\n{r.stderr}")
        self.fs.mount(mkfs=False)
        assert self.fs.pid, f"no daemon pid ({self.fs.pid_source})"
        return report

    def close(self):
        """Teardown, also after a failure: writers, rampart, LazyFS, in that order."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        self.stop_writers()
        if self.fs.mounted or in_mount_table(self.fs.path):
            if self.fs.alive():
                r = self.fs.umount()
                if r.returncode != 0 or in_mount_table(self.fs.path):
                    self.fs.force_cleanup()
            else:
                self.fs.force_cleanup()
        if self.fs.pid and pid_alive(self.fs.pid):
            wait_until(lambda: not pid_alive(self.fs.pid), 10)
        self.lazy.stop()

    # -- checking ---------------------------------------------------------------------------
    def check(self):
        """After `recover`: every writer of this cycle is at a prefix of its steps no shorter
        than what was acknowledged, and everything of earlier cycles is as it was recovered."""
        logs = {wid: read_log(path) for wid, path in self.logs.items()}
        tree = read_tree(self.fs.path)
        problems = []
        for rel, want in self.settled.items():
            if tree.get(rel, "absent") != want:
                problems.append(f"{rel}: recovered after an earlier cut, now "
                                f"{describe(tree.get(rel, 'absent'))} instead of {describe(want)}")
        for wid, log in logs.items():
            if log["error"] and log["error"]["t"] < self.cut_at:
                problems.append(f"writer {wid} failed before the power cut: {log['error']}")
        ack_starts = [a["t0"] for log in logs.values() for a in log["acks"]]
        for wid, log in logs.items():
            mine = {p: v for p, v in tree.items() if p == f"w{wid}" or p.startswith(f"w{wid}/")}
            problems += check_writer(wid, log, mine, ack_starts)
        known = {f"w{wid}" for wid in logs} | {p.split("/")[0] for p in self.settled}
        for top in sorted({p.split("/")[0] for p in tree} - known):
            problems.append(f"{top}: in the recovered file system, written by no one")
        assert not problems, "after the power cut:\n  " + "\n  ".join(problems[:80])
        self.settled = dict(tree)
        return {wid: (len(log["steps"]), max([a["k"] for a in log["acks"]], default=-1))
                for wid, log in logs.items()}


def describe(v):
    if v == "absent":
        return "absent"
    if v is None:
        return "a directory"
    return f"{len(v)} bytes"


def read_log(path):
    steps, done, acks, error = [], {}, [], None
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        lines = []
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:
                break  # the writer was killed while writing this line
            raise
        if "op" in rec:
            assert rec["k"] == len(steps), f"{path}: step {rec['k']} out of order"
            steps.append(rec)
        elif "done" in rec:
            done[rec["done"]] = rec["t1"]
        elif "ack" in rec:
            acks.append({"k": rec["ack"], "t0": rec["t0"], "t1": rec["t1"]})
        elif "error" in rec:
            error = rec
    return {"steps": steps, "done": done, "acks": acks, "error": error}


def read_tree(root):
    """relpath -> None (directory) or the file's bytes, for everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel, d))] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.normpath(os.path.join(rel, f))] = fh.read()
    return out


def check_writer(wid, log, got, ack_starts):
    """Problems (empty if none) with one writer's recovered files `got`: they must equal its
    model after some prefix of its steps (the last one may be a data write seen in part), no
    shorter than the last step acknowledged by its own fsync, nor than the last step it had
    finished before any writer's fsync began (an fsync makes every change before it durable,
    docs/FORMAT.md)."""
    steps, done = log["steps"], log["done"]
    lower = max([a["k"] for a in log["acks"]], default=-1)
    why = "its own fsync" if lower >= 0 else "nothing"
    for t0 in ack_starts:
        before = [k for k, t1 in done.items() if t1 < t0]
        if before and max(before) > lower:
            lower, why = max(before), "another writer's fsync"
    model = {}
    best = None
    for k in range(-1, len(steps)):
        if k >= 0:
            apply_step(model, steps[k], wid)
        if k < lower:
            continue
        if model == got:
            return []
        nxt = steps[k + 1] if k + 1 < len(steps) else None
        if nxt is not None and nxt["op"] == "write":
            after = dict(model)
            apply_step(after, nxt, wid)
            p = nxt["path"]
            if ({q: v for q, v in model.items() if q != p} == {q: v for q, v in got.items() if q != p}
                    and mixed_ok(model.get(p), after.get(p), got.get(p))):
                return []
        diff = sorted(set(model) | set(got))
        diff = [q for q in diff if model.get(q, "absent") != got.get(q, "absent")]
        if best is None or len(diff) < len(best[1]):
            best = (k, diff, dict(model))
    if best is None:
        return [f"writer {wid}: fewer steps logged ({len(steps)}) than acknowledged ({lower})"]
    k, diff, model = best
    lines = [f"writer {wid}: the recovered files match no state after step {lower} or later "
             f"(acknowledged as durable by {why}; {len(steps)} steps started); nearest: after "
             f"step {k}, differing in:"]
    for q in diff[:8]:
        lines.append(f"    {q}: recovered {describe(got.get(q, 'absent'))}, "
                     f"expected {describe(model.get(q, 'absent'))}")
    if lower >= 0 and lower < len(steps):
        lines.append(f"    the acknowledged step {lower}: {steps[lower]}")
    return lines


def journal_batches(data):
    """[(offset, end, first_seq, op_count)] of a journal's bytes (FORMAT.md), no CRC check."""
    out = []
    at = HEADER_BYTES
    while at + BATCH_HEADER_BYTES <= len(data):
        magic, body_len, _crc, first_seq, op_count = struct.unpack_from("<4sIIQI", data, at)
        end = at + BATCH_HEADER_BYTES + body_len
        if magic != b"RPJB" or end > len(data):
            break
        out.append((at, end, first_seq, op_count))
        at = end
    return out


def seeded(seed):
    return random.Random(seed)

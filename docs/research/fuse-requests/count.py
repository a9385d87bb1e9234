#!/usr/bin/env python3
"""Counts the FUSE requests small workloads make on a rampart mount, by opcode.

Request counts do not depend on the machine's load, so they can be measured on a busy
machine and compared between builds (issue 15 item 2). For each workload the script reads
`rampart status --json` (fuse_requests) before and after, and prints the difference per
item (file, name, ...). With --trace it also records, through the kernel's
fuse:fuse_request_send tracepoint (a tracefs instance of its own, filtered to this mount's
connection), the kernel stack that sent each request of the workload's first items: why
the kernel asked. Each workload runs --rounds times on a fresh mount and the run with the
fewest requests is kept: on a shared machine another program's `echo 3 > drop_caches` empties
the kernel's caches now and then, which can only add requests.

    sudo python3 docs/research/fuse-requests/count.py [--bin target/release/rampart]
        [--items 200] [--trace] [--only create,unlink] [--json out.json] [-- MOUNT OPTIONS]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
DATA = b"x" * 4096


def sh(*args, **kw):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, **kw)


class Mount:
    def __init__(self, binary, base, options):
        self.bin = binary
        self.store = base / "store"
        self.path = base / "mnt"
        self.options = options
        self.path.mkdir(parents=True)
        sh(self.bin, "mkfs", self.store)

    def mount(self):
        sh(self.bin, "mount", self.store, self.path, *self.options)

    def umount(self):
        sh(self.bin, "umount", self.path)

    def requests(self):
        out = sh(self.bin, "status", self.path, "--json").stdout
        return Counter(json.loads(out)["fuse_requests"])

    def connection(self):
        # The tracepoint's `connection` is the mount's dev_t in the kernel's encoding
        # (major << 20 | minor); FUSE mounts have major 0.
        st = os.stat(self.path)
        return (os.major(st.st_dev) << 20) | os.minor(st.st_dev)


class Tracer:
    """fuse_request_send with kernel stacks, in a tracefs instance of its own."""

    def __init__(self, connection):
        self.dir = TRACEFS / "instances" / f"rampart-reqs-{os.getpid()}"
        self.dir.mkdir()
        ev = self.dir / "events/fuse/fuse_request_send"
        (ev / "filter").write_text(f"connection == {connection}\n")
        (self.dir / "options/stacktrace").write_text("1\n")
        (self.dir / "buffer_size_kb").write_text("8192\n")
        self.ev = ev

    def __enter__(self):
        (self.dir / "trace").write_text("")
        (self.ev / "enable").write_text("1\n")
        return self

    def __exit__(self, *exc):
        (self.ev / "enable").write_text("0\n")
        self.text = (self.dir / "trace").read_text()
        return False

    def close(self):
        (self.dir / "options/stacktrace").write_text("0\n")
        self.dir.rmdir()

    def stacks(self):
        """(opcode name, [caller frames]) per request, from the trace text."""
        out, cur = [], None
        for line in self.text.splitlines():
            if line.startswith("#"):
                continue
            if "fuse_request_send:" in line:
                cur = [line.split("(")[1].split(")")[0], []]
                out.append(cur)
            elif line.strip().startswith("=> ") and cur is not None:
                frame = line.strip()[3:].split("+")[0]
                cur[1].append(frame)
        return out


# -- workloads: (name, per-item description, setup(d, n), run(d, n)) ----------------------------


def ws_create(d, n):
    os.mkdir(d / "c")


def wr_create(d, n):
    for i in range(n):
        fd = os.open(d / "c" / f"f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, DATA)
        os.close(fd)


def ws_files(sub):
    def setup(d, n):
        os.mkdir(d / sub)
        for i in range(n):
            (d / sub / f"f{i}").write_bytes(DATA)
        os.sync()
        # Past the creates' coarse-clock tick, so appends move the times.
        time.sleep(0.05)

    return setup


def wr_stat(d, n):
    for i in range(n):
        os.stat(d / "s" / f"f{i}")


def wr_unlink(d, n):
    for i in range(n):
        os.unlink(d / "u" / f"f{i}")


def wr_append(d, n):
    for i in range(n):
        fd = os.open(d / "a" / f"f{i}", os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"y" * 512)
        os.close(fd)


def wr_read(d, n):
    for i in range(n):
        with open(d / "r" / f"f{i}", "rb") as f:
            f.read()


def wr_missing_twice(d, n):
    os.makedirs(d / "m", exist_ok=True)
    for i in range(n):
        for _ in range(2):
            try:
                os.open(d / "m" / f"nothing{i}", os.O_RDONLY)
            except FileNotFoundError:
                pass
            else:
                raise AssertionError("a missing name opened")


def wr_create_after_missing(d, n):
    """Open of a missing name, then its create (a program checking before creating)."""
    os.makedirs(d / "cm", exist_ok=True)
    for i in range(n):
        p = d / "cm" / f"f{i}"
        assert not os.path.exists(p)
        fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.close(fd)


def wr_mkdir(d, n):
    os.makedirs(d / "k", exist_ok=True)
    for i in range(n):
        os.mkdir(d / "k" / f"d{i}")


def wr_rename(d, n):
    for i in range(n):
        os.rename(d / "n" / f"f{i}", d / "n" / f"g{i}")


def ws_big_dir(d, n):
    os.mkdir(d / "big")
    for i in range(1000):
        (d / "big" / f"entry-{i:04}").write_bytes(b"")


def wr_ls_l(d, n):
    # A listing with every entry's attributes, as `ls -l` does; the entries are not in the
    # kernel's caches (the mount was remounted after the setup).
    sh("ls", "-l", d / "big")


def wr_ls(d, n):
    sh("ls", d / "big")


def wr_find(d, n):
    sh("find", d / "big", "-type", "f")


def wr_rm_r(d, n):
    sh("rm", "-r", d / "big")


def wr_du(d, n):
    sh("du", "-s", d / "big")


def wr_chmod(d, n):
    for i in range(n):
        os.chmod(d / "h" / f"f{i}", 0o600)


def wr_fsync_write(d, n):
    os.makedirs(d / "w", exist_ok=True)
    for i in range(n):
        fd = os.open(d / "w" / f"f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, DATA)
        os.fsync(fd)
        os.close(fd)


WORKLOADS = {
    # name: (setup, run, remount between setup and run, items (None: --items))
    "create": (ws_create, wr_create, False, None),
    "create-fsync": (None, wr_fsync_write, False, None),
    "stat": (ws_files("s"), wr_stat, False, None),
    "stat-cold": (ws_files("s"), wr_stat, True, None),
    "read": (ws_files("r"), wr_read, False, None),
    "append": (ws_files("a"), wr_append, False, None),
    "unlink": (ws_files("u"), wr_unlink, False, None),
    "rename": (ws_files("n"), wr_rename, False, None),
    "chmod": (ws_files("h"), wr_chmod, False, None),
    "mkdir": (None, wr_mkdir, False, None),
    "missing-twice": (None, wr_missing_twice, False, None),
    "create-after-missing": (None, wr_create_after_missing, False, None),
    "ls-l-1000": (ws_big_dir, wr_ls_l, True, 1),
    "ls-1000": (ws_big_dir, wr_ls, True, 1),
    "find-1000": (ws_big_dir, wr_find, True, 1),
    "du-1000": (ws_big_dir, wr_du, True, 1),
    "rm-r-1000": (ws_big_dir, wr_rm_r, True, 1),
}


def run_workload(args, name, base):
    setup, work, remount, items = WORKLOADS[name]
    n = items or args.items
    m = Mount(args.bin, base / name, args.mount_options)
    m.mount()
    try:
        d = m.path
        if setup:
            setup(d, n)
        if remount:
            m.umount()
            m.mount()
        # Settle: background writeback of the setup's pages, FORGETs of its inodes.
        os.sync()
        time.sleep(0.2)
        before = m.requests()
        tracer = Tracer(m.connection()) if args.trace else None
        try:
            if tracer:
                with tracer:
                    work(d, n)
            else:
                work(d, n)
            # FORGETs follow the evictions, and writeback may come late: wait a little.
            time.sleep(0.3)
            after = m.requests()
            stacks = tracer.stacks() if tracer else []
        finally:
            if tracer:
                tracer.close()
        diff = {k: after[k] - before[k] for k in after if after[k] != before[k]}
        return n, diff, stacks
    finally:
        m.umount()


def explain(stacks, limit):
    """The distinct kernel call chains behind each opcode, most frequent first."""
    chains = Counter()
    for op, frames in stacks:
        # The frames below fuse_request_send's own machinery: skip fuse_simple_request & co.
        keep = [f for f in frames if not f.startswith(("fuse_simple_request", "__fuse_simple_request",
                                                      "fuse_request_", "__fuse_request", "fuse_uring",
                                                      "trace_", "__traceiter", "fuse_send_"))]
        chains[(op, " < ".join(keep[:limit]))] += 1
    return chains


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/rampart")
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of each workload; the one with the fewest requests is kept (another "
                         "program's drop_caches can only add requests)")
    ap.add_argument("--only", default="")
    ap.add_argument("--trace", action="store_true", help="kernel stacks of every request (tracefs)")
    ap.add_argument("--frames", type=int, default=8, help="stack frames shown with --trace")
    ap.add_argument("--json", help="write the counts here")
    ap.add_argument("mount_options", nargs="*")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    names = [n for n in args.only.split(",") if n] or list(WORKLOADS)
    base = Path(tempfile.mkdtemp(prefix="rampart-reqs-"))
    results = {}
    try:
        for name in names:
            runs = [run_workload(args, name, base / f"r{r}") for r in range(args.rounds)]
            n, diff, stacks = min(runs, key=lambda r: sum(r[1].values()))
            per_item = {k: round(v / n, 3) for k, v in sorted(diff.items())}
            waited = sum(v for k, v in diff.items() if k != "forget") / n
            results[name] = {"items": n, "per_item": per_item, "waited_per_item": round(waited, 3)}
            print(f"{name:22} items {n:4}  waited/item {waited:6.2f}  " +
                  "  ".join(f"{k} {v:g}" for k, v in per_item.items()))
            if stacks:
                for (op, chain), c in sorted(explain(stacks, args.frames).items(), key=lambda x: -x[1]):
                    print(f"    {c:5} {op:18} {chain}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Persistence benchmarks (issue: journal, checkpoint, recovery).

1. Durable small writes: N threads each create a file, write 4 KiB, fsync, close, repeatedly.
   Peers: ext4 on a loop file on the real disk, and rampart with its store on that same disk.
   Group commit should let rampart's 8 writers share fdatasyncs.
2. Mount (recovery) time with many files: after a clean unmount (checkpoint only) and after a
   kill -9 (checkpoint + journal replay); the checkpoint's bytes per file and the writers'
   pause while it was encoded (from the daemon's log).

Usage: bench/persistence.py [--rampart BIN] [--ops N] [--files N] [--dir /var/tmp/...]
Prints a Markdown report. Tears everything down on failure or Ctrl-C.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

C_WRITER = r"""
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static const char *dir; static int ops; static char buf[4096];
static void *work(void *arg) {
    long t = (long)arg; char path[4096];
    for (int i = 0; i < ops; i++) {
        snprintf(path, sizeof path, "%s/t%ld-%d", dir, t, i);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) { perror(path); exit(1); }
        if (write(fd, buf, sizeof buf) != sizeof buf) { perror("write"); exit(1); }
        if (fsync(fd)) { perror("fsync"); exit(1); }
        if (close(fd)) { perror("close"); exit(1); }
    }
    return 0;
}
int main(int argc, char **argv) {
    dir = argv[1]; int threads = atoi(argv[2]); ops = atoi(argv[3]);
    memset(buf, 'x', sizeof buf);
    pthread_t th[64]; struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long t = 0; t < threads; t++) pthread_create(&th[t], 0, work, (void *)t);
    for (int t = 0; t < threads; t++) pthread_join(th[t], 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
"""

C_CREATOR = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    const char *root = argv[1]; long dirs = atol(argv[2]), per = atol(argv[3]);
    char path[4096];
    for (long d = 0; d < dirs; d++) {
        snprintf(path, sizeof path, "%s/d%04ld", root, d);
        if (mkdir(path, 0755) && access(path, F_OK)) { perror(path); return 1; }
        for (long f = 0; f < per; f++) {
            snprintf(path, sizeof path, "%s/d%04ld/f%07ld", root, d, f);
            int fd = open(path, O_CREAT | O_WRONLY, 0644);
            if (fd < 0) { perror(path); return 1; }
            close(fd);
        }
    }
    return 0;
}
"""


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    kw.setdefault("check", True)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def build(src, name, work):
    c = os.path.join(work, name + ".c")
    exe = os.path.join(work, name)
    with open(c, "w") as f:
        f.write(src)
    run(["gcc", "-O2", "-pthread", "-o", exe, c])
    return exe


class Teardown:
    def __init__(self):
        self.steps = []

    def add(self, fn):
        self.steps.append(fn)

    def run(self):
        while self.steps:
            try:
                self.steps.pop()()
            except Exception as e:  # keep tearing down
                log(f"teardown step failed: {e}")


def drop_caches():
    run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def rampart_mount(rbin, store, mnt, extra=()):
    t0 = time.monotonic()
    run([rbin, "mount", store, mnt, *extra])
    return time.monotonic() - t0


def rampart_pid(rbin, mnt):
    out = run([rbin, "status", mnt, "--json"]).stdout
    return json.loads(out)["pid"]


def durable_writes(args, td, writer, base):
    results = {}
    img = os.path.join(base, "ext4.img")
    ext4_mnt = os.path.join(base, "ext4-mnt")
    os.makedirs(ext4_mnt)
    run(["truncate", "-s", "4G", img])
    loop = run(["losetup", "--find", "--show", img]).stdout.strip()
    td.add(lambda: run(["losetup", "-d", loop], check=False))
    run(["mkfs.ext4", "-q", "-F", loop])
    run(["mount", loop, ext4_mnt])
    td.add(lambda: run(["umount", ext4_mnt], check=False))
    store = os.path.join(base, "store")
    rmnt = os.path.join(base, "rampart-mnt")
    os.makedirs(rmnt)
    run([args.rampart, "mkfs", store])
    rampart_mount(args.rampart, store, rmnt)
    td.add(lambda: run([args.rampart, "umount", rmnt], check=False))
    for threads in (1, 8):
        ops = max(1, args.ops // threads)
        for peer, mnt in (("ext4 (real disk)", ext4_mnt), ("rampart (store on the same disk)", rmnt)):
            d = os.path.join(mnt, f"w{threads}")
            os.mkdir(d)
            drop_caches()
            secs = float(run([writer, d, str(threads), str(ops)]).stdout)
            rate = threads * ops / secs
            results[(peer, threads)] = rate
            log(f"{peer}, {threads} threads: {rate:,.0f} durable writes/s")
    st = json.loads(run([args.rampart, "status", rmnt, "--json"]).stdout)
    results["rampart_persistence"] = st["persistence"]
    return results, {"loop": loop, "image": img}


def mount_time(args, td, creator, base):
    store = os.path.join(base, "mstore")
    mnt = os.path.join(base, "mmnt")
    os.makedirs(mnt)
    run([args.rampart, "mkfs", store])
    rampart_mount(args.rampart, store, mnt)
    td.add(lambda: run(["fusermount3", "-u", "-z", mnt], check=False))
    per = 1000
    dirs = max(1, args.files // per)
    log(f"creating {dirs * per:,} empty files")
    t0 = time.monotonic()
    run([creator, mnt, str(dirs), str(per)])
    create_s = time.monotonic() - t0
    run([args.rampart, "umount", mnt])
    logtext = open(os.path.join(store, "rampart.log")).read()
    pauses = [float(x) for x in re.findall(r"writers paused ([0-9.]+) ms", logtext)]
    ckpt_bytes = os.path.getsize(os.path.join(store, "checkpoint"))
    drop_caches()
    clean_s = rampart_mount(args.rampart, store, mnt)
    # Now a journal to replay: 100,000 more files, fsync'd, then kill -9.
    extra_dirs = max(1, dirs // 10)
    extra_root = os.path.join(mnt, "more")
    os.mkdir(extra_root)
    run([creator, extra_root, str(extra_dirs), str(per)])
    fd = os.open(extra_root, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    pid = rampart_pid(args.rampart, mnt)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    run(["fusermount3", "-u", "-z", mnt], check=False)
    journal_bytes = os.path.getsize(os.path.join(store, "journal"))
    drop_caches()
    crash_s = rampart_mount(args.rampart, store, mnt)
    recovered = re.findall(r"recovered .*", open(os.path.join(store, "rampart.log")).read())[-1]
    run([args.rampart, "umount", mnt])
    return {
        "files": dirs * per,
        "create_s": create_s,
        "checkpoint_bytes": ckpt_bytes,
        "checkpoint_pause_ms": pauses[-1] if pauses else None,
        "clean_mount_s": clean_s,
        "crash_files_added": extra_dirs * per,
        "journal_bytes": journal_bytes,
        "crash_mount_s": crash_s,
        "recovered_line": recovered,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", default=os.path.join(REPO, "target/release/rampart"))
    ap.add_argument("--ops", type=int, default=4000, help="durable writes per peer and thread count")
    ap.add_argument("--files", type=int, default=1_000_000, help="files for the mount-time test")
    ap.add_argument("--dir", default="/var/tmp", help="a folder on the real disk")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (loop devices, mounts, drop_caches)")
    td = Teardown()
    base = tempfile.mkdtemp(prefix="rampart-persist-bench-", dir=args.dir)
    tools = tempfile.mkdtemp(prefix="rampart-persist-tools-")
    td.add(lambda: shutil.rmtree(base, ignore_errors=True))
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        writer = build(C_WRITER, "durable_writer", tools)
        creator = build(C_CREATOR, "creator", tools)
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        dw, _ = durable_writes(args, td, writer, base)
        td.run()
        td = Teardown()
        base = tempfile.mkdtemp(prefix="rampart-persist-bench-", dir=args.dir)
        td.add(lambda: shutil.rmtree(base, ignore_errors=True))
        mt = mount_time(args, td, creator, base)
    finally:
        td.run()
        shutil.rmtree(tools, ignore_errors=True)
    disk = run(["df", "--output=source,fstype", args.dir]).stdout.splitlines()[-1]
    print(f"# Persistence benchmarks\n\nRun {started} on {os.uname().release}, {os.cpu_count()} cores; "
          f"disk under {args.dir}: {disk}.\nCommand: `{' '.join(sys.argv)}`\n")
    print("## Durable small writes (create, write 4 KiB, fsync, close)\n")
    print("| threads | ext4 on the real disk (writes/s) | rampart, store on the same disk (writes/s) | rampart / ext4 |")
    print("|---|---|---|---|")
    for t in (1, 8):
        e = dw[("ext4 (real disk)", t)]
        r = dw[("rampart (store on the same disk)", t)]
        print(f"| {t} | {e:,.0f} | {r:,.0f} | {r / e:.2f}× |")
    p = dw["rampart_persistence"]
    print(f"\nrampart journal after the run: {p['commits']} commits for "
          f"{(args.ops // 8) * 8 + args.ops} fsync'd files (group commit).\n")
    print(f"## Mount time with {mt['files']:,} empty files\n")
    print("| | |\n|---|---|")
    print(f"| creating them through the mount | {mt['create_s']:.1f} s |")
    print(f"| checkpoint at unmount | {mt['checkpoint_bytes']:,} bytes = {mt['checkpoint_bytes'] / mt['files']:.1f} bytes per file (names included) |")
    if mt["checkpoint_pause_ms"] is not None:
        print(f"| writers paused while it was encoded | {mt['checkpoint_pause_ms']:.0f} ms |")
    print(f"| mount after a clean unmount (checkpoint only) | {mt['clean_mount_s']:.2f} s |")
    print(f"| mount after kill -9 with {mt['crash_files_added']:,} more files in a {mt['journal_bytes']:,}-byte journal | {mt['crash_mount_s']:.2f} s |")
    print(f"\nDaemon's recovery line: `{mt['recovered_line']}`")


if __name__ == "__main__":
    main()

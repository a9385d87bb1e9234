#!/usr/bin/env python3
"""Mount time of a rampart store holding 50 GiB of large files against an empty one (issue 13).

`rampart bench --full`'s `disk-mount-time` fallocates its 50 GiB, which needs 50 GiB free on
the disk under the store. This script needs only a few: the large files are **sparse** (each
gets a written head that moves it to the disk tier, then is extended with ftruncate, so its
host file is a hole of that size), and `--written-gib` of them are written in full. What a
mount reads does not depend on whether a host file's blocks are allocated: the checkpoint and
the journal name host files, they do not hold them (Conquest §3; issue 13 item 7).

Run as root: python3 bench/disk_mount_time.py [--rampart-bin B] [--dir D] [--files 50]
[--size-gib 1] [--written-gib 2] [--repetitions 5]. Prints a Markdown table; tears down
(unmount, remove the stores) on success and on failure.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
GIB = 1 << 30


def sh(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed_mount(binary, store, mnt):
    """Unmounted, caches dropped: seconds from `rampart mount` until the root can be listed."""
    drop_caches()
    started = time.monotonic()
    sh(binary, "mount", store, mnt)
    while True:
        try:
            os.listdir(mnt)
            break
        except OSError:
            time.sleep(0.001)
    return time.monotonic() - started


def fill(mnt, files, size_bytes, written_bytes):
    """`files` large files of `size_bytes`, the first `written_bytes` of them written."""
    head = os.urandom(2 * MIB)
    chunk = os.urandom(MIB)
    left = written_bytes
    for i in range(files):
        path = os.path.join(mnt, f"large-{i:03}")
        with open(path, "wb") as f:
            f.write(head)  # past the 1 MiB threshold: on the disk tier from here
            if left >= size_bytes:
                for _ in range((size_bytes - len(head)) // MIB):
                    f.write(chunk)
                left -= size_bytes
            f.truncate(size_bytes)
            f.flush()
            os.fsync(f.fileno())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rampart-bin", default=os.environ.get("RAMPART_BIN", "target/release/rampart"))
    ap.add_argument("--dir", default="/var/tmp", help="a folder on the real disk for the stores")
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--size-gib", type=int, default=1)
    ap.add_argument("--written-gib", type=int, default=2)
    ap.add_argument("--repetitions", type=int, default=5)
    a = ap.parse_args()
    binary = shutil.copy(a.rampart_bin, tempfile.mkdtemp(prefix="rampart-bin-", dir="/dev/shm"))
    work = tempfile.mkdtemp(prefix="rampart-mount-time-", dir=a.dir)
    mounts = []
    try:
        stores = {}
        for name, large in (("empty", False), ("large", True)):
            store, mnt = os.path.join(work, f"{name}-store"), os.path.join(work, f"{name}-mnt")
            os.mkdir(mnt)
            sh(binary, "mkfs", store)
            sh(binary, "mount", store, mnt)
            mounts.append(mnt)
            if large:
                fill(mnt, a.files, a.size_gib * GIB, a.written_gib * GIB)
            else:
                os.mkdir(os.path.join(mnt, "empty"))
            size = sum(e.stat().st_size for e in os.scandir(mnt) if e.is_file())
            status = subprocess.run([binary, "status", mnt], capture_output=True, text=True).stdout
            tiers = next((l for l in status.splitlines() if l.startswith("tiers:")), "tiers: ?")
            sh("umount", mnt)
            du = subprocess.run(["du", "-sh", store], capture_output=True, text=True).stdout.split()[0]
            what = f"{size / GIB:.1f} GiB in files; {tiers} (bytes written); store on disk {du}"
            stores[name] = (store, mnt, what)
        # Alternated, so that drift and the machine's noise fall on both alike.
        times = {name: ([], what) for name, (_, _, what) in stores.items()}
        for _ in range(a.repetitions):
            for name, (store, mnt, _) in stores.items():
                times[name][0].append(timed_mount(binary, store, mnt))
                sh("umount", mnt)
        print(f"rampart mount time, {a.repetitions} mounts each after drop_caches "
              f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f})\n")
        print("| store | median s | min s | max s | contents |")
        print("|---|--:|--:|--:|---|")
        for name, (ts, what) in times.items():
            print(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} | {max(ts):.3f} | {what} |")
        ratio = statistics.median(times["large"][0]) / statistics.median(times["empty"][0])
        print(f"\nlarge / empty: {ratio:.2f}×")
    finally:
        for mnt in mounts:
            subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(os.path.dirname(binary), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

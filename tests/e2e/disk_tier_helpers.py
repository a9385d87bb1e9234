"""Helpers of the disk-tier tests (test_disk_tier.py, test_disk_tier_crash.py).

The disk tier (issue 13; docs/FORMAT.md, the data folder) keeps the contents of each large
regular file in one host file `STORE/data/{ino:016x}-{generation:08x}` (ino = st_ino), sparse,
mode 0600. These helpers find those host files, compare a file in the mount with a reference
copy on the host file system (bytes and holes), and measure the space the data folder takes."""

import os
import re
import subprocess

from e2e_helpers import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, fallocate, read_file, wait_until

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

HOST_NAME = re.compile(r"^([0-9a-f]{16})-([0-9a-f]{8})$")
# Bounded waits for what the daemon does after an operation returns (a host file removed once
# the unlink is durable, a migration): hang guards only, never a speed requirement.
SETTLE_S = 60
# The memory tier keeps contents in 64 KiB chunks; a hole that covers whole chunks stays a hole
# in the host file when the file migrates (docs/decisions/0024).
HOLE_UNIT = 64 * KiB


def data_dir(m):
    return m.store / "data"


def host_files(m):
    """{ino: [host file names]} of STORE/data. Every entry must be named as the contract says."""
    d = data_dir(m)
    out = {}
    for name in os.listdir(d):
        mt = HOST_NAME.match(name)
        assert mt, f"{d} holds {name!r}, which is not named {{ino:016x}}-{{generation:08x}}"
        out.setdefault(int(mt.group(1), 16), []).append(name)
    return out


def host_path(m, path=None, ino=None):
    """The host file of a file in the mount (by path or st_ino), or None if it has none."""
    if ino is None:
        ino = os.stat(path).st_ino
    names = host_files(m).get(ino, [])
    assert len(names) <= 1, f"inode {ino} has {len(names)} host files: {names}"
    return data_dir(m) / names[0] if names else None


def on_disk(m, path):
    return host_path(m, path) is not None


def wait_tier(m, path, disk, why=""):
    """Wait (bounded) until `path` is on the disk tier (disk=True) or in memory (False)."""
    ok = wait_until(lambda: on_disk(m, path) == disk, timeout=SETTLE_S, interval=0.1)
    where = "on the disk tier (a host file in data/)" if disk else "in memory (no host file in data/)"
    assert ok, f"{path} ({os.path.getsize(path)} bytes) is not {where} {why}; data/: {sorted(host_files(m))}"


def wait_host_file_gone(m, ino, why=""):
    ok = wait_until(lambda: ino not in host_files(m), timeout=SETTLE_S, interval=0.1)
    assert ok, f"the host file of inode {ino} is still in data/ {why}: {host_files(m).get(ino)}"


def live_inos(root):
    """st_ino of every regular file under a mount point."""
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        for n in files:
            st = os.lstat(os.path.join(dirpath, n))
            out.add(st.st_ino)
    return out


def assert_no_orphan_host_files(m):
    """Every host file belongs to a file that is still in the mount."""
    orphans = set(host_files(m)) - live_inos(m.path)
    assert not orphans, f"host files in data/ whose inode is gone: {sorted(orphans)}"


def du_apparent(path):
    """`du -sb`: apparent size in bytes."""
    r = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(r.stdout.split()[0])


def du_allocated(path):
    """`du -s -B1`: bytes of blocks allocated."""
    r = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True, check=True)
    return int(r.stdout.split()[0])


def data_map(path):
    """[(start, end)] of the data regions SEEK_DATA/SEEK_HOLE report."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        out = []
        off = 0
        while off < size:
            try:
                start = os.lseek(fd, off, os.SEEK_DATA)
            except OSError as e:
                if e.errno == 6:  # ENXIO: no data after off
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            assert end > start, f"{path}: SEEK_HOLE({start}) = {end}"
            out.append((start, end))
            off = end
        return out
    finally:
        os.close(fd)


def holes_of(data_regions, size):
    out = []
    at = 0
    for s, e in data_regions:
        if s > at:
            out.append((at, s))
        at = e
    if at < size:
        out.append((at, size))
    return out


def pwrite_all(fd, data, off):
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, off)
        view = view[n:]
        off += n


class Twin:
    """A file in the mount and its reference copy on the host file system (ext4 under /tmp):
    every change is made to both, and check() compares them."""

    def __init__(self, path, ref, mode=0o644):
        self.path = str(path)
        self.ref = str(ref)
        for p in (self.path, self.ref):
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode))

    def _each(self, fn):
        for p in (self.path, self.ref):
            fd = os.open(p, os.O_WRONLY)
            try:
                fn(fd)
            finally:
                os.close(fd)

    def pwrite(self, data, off):
        self._each(lambda fd: pwrite_all(fd, data, off))

    def truncate(self, size):
        # truncate(2) by path: no descriptor is open, so a file truncated far below the
        # threshold may come back to memory (never while it is open for passthrough)
        for p in (self.path, self.ref):
            os.truncate(p, size)

    def punch(self, off, length):
        self._each(lambda fd: fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, length))

    def fsync(self):
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def expected(self):
        return read_file(self.ref)

    def check(self, m=None, when=""):
        """The bytes read through the mount are the reference's; what SEEK_DATA/SEEK_HOLE say
        through the mount is true (a reported hole reads as zeros); and if the file is on the
        disk tier, its host file has the reference's size, its bytes, and a hole wherever the
        reference has one covering whole 64 KiB units (holes stay holes: they are not written as
        zeros)."""
        want = self.expected()
        got = read_file(self.path)
        assert len(got) == len(want), f"{self.path} {when}: {len(got)} bytes, the reference has {len(want)}"
        if got != want:
            first = next(i for i in range(len(want)) if got[i] != want[i])
            raise AssertionError(f"{self.path} {when}: bytes differ from the reference from offset {first}")
        for s, e in holes_of(data_map(self.path), len(want)):
            assert not any(want[s:e]), (f"{self.path} {when}: SEEK_HOLE reports a hole at [{s}, {e}) where the "
                                        "file holds data")
        if m is not None:
            host = host_path(m, self.path)
            if host is not None:
                assert os.path.getsize(host) == len(want), (
                    f"{self.path} {when}: host file {host.name} holds {os.path.getsize(host)} bytes, the file "
                    f"{len(want)}")
                host_regions = data_map(host)
                for s, e in holes_of(data_map(self.ref), len(want)):
                    # The memory tier's unit is a 64 KiB chunk: zeros inside a written chunk may be
                    # copied as data when the file migrates; whole chunks of hole may not.
                    s_in, e_in = -(-s // HOLE_UNIT) * HOLE_UNIT, e // HOLE_UNIT * HOLE_UNIT
                    for hs, he in host_regions:
                        assert not (hs < e_in and he > s_in), (
                            f"{self.path} {when}: host file {host.name} holds data at [{max(hs, s_in)}, "
                            f"{min(he, e_in)}) where the file has a hole (holes must stay holes); host data "
                            f"{host_regions}, reference data {data_map(self.ref)}")
                assert read_file(host) == want, f"{self.path} {when}: host file {host.name} holds other bytes"
        return want

"""The disk tier on real mounts (issue 13, Acceptance; the team's contract in docs/FORMAT.md and
docs/decisions/0056-0060): files that pass the large-file threshold keep their contents in one
sparse host file `STORE/data/{ino:016x}-{generation:08x}`, and come back to memory when
truncated far below it. Each test compares what the mount shows with a reference copy on the
host file system and looks at the host files themselves: bytes and holes across migrations,
mmap, O_DIRECT, programs run from the disk tier, a 4 GiB file under a 256 MiB memory cap, hard
links and renames, space given back to the host by truncate / punch / unlink, memory pressure,
remounts and `kill -9`, damaged host files, an immutable data folder, a full host file system,
and `rampart status`. The kill -9 under load is in test_disk_tier_crash.py."""

import errno
import hashlib
import json
import mmap
import os
import random
import shutil
import stat

import pytest

from disk_tier_helpers import (GiB, KiB, MiB, Twin, assert_no_orphan_host_files, data_dir, du_allocated, du_apparent,
                               host_files, host_path, on_disk, pwrite_all, wait_host_file_gone, wait_tier)
from e2e_helpers import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, REPO, RAMPART_BIN,
                         RENAME_EXCHANGE, Mount, assert_no_panic, expect_errno, fallocate, in_mount_table, read_file,
                         renameat2, run,
                         wait_until, write_file)
from test_full_disk import small_ext4  # noqa: F401 (a fixture)
from test_persistence import (assert_fsck_clean_after_crash, crash, fsck, fsck_json, fsync_path, journal_len, remount,
                              unmount, write_synced)

pytestmark = pytest.mark.rampart_only("tests rampart's disk tier: host files under STORE/data")

THRESHOLD = 64 * KiB
SMALL = ("--large-file-threshold", "64K")


def rnd(n, seed):
    return random.Random(seed).randbytes(n)


@pytest.fixture
def ref_dir(test_base):
    """A folder on the host file system (ext4 under /tmp) for reference copies."""
    d = os.path.join(test_base, "ref")
    os.mkdir(d)
    return d


@pytest.fixture
def dmnt(mount_factory):
    """A mount whose large-file threshold is 64 KiB (most tests' files then cost little)."""
    return mount_factory(*SMALL, name="disk")


def cycle(m, how):
    """A clean unmount and mount, or a kill -9 (after the caller's fsyncs) and mount."""
    if how == "clean":
        unmount(m)
    else:
        crash(m)
        assert_fsck_clean_after_crash(m)
    remount(m)


def fsync_tree(root):
    for dirpath, dirs, files in os.walk(root):
        for n in files:
            fsync_path(os.path.join(dirpath, n))
        fsync_path(dirpath)


# ---- layout and threshold ----------------------------------------------------------------------

def test_a_new_store_has_a_private_data_folder_and_host_files_are_private(dmnt):
    d = data_dir(dmnt)
    assert d.is_dir(), "rampart mkfs made no data/ folder in the store"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, oct(os.stat(d).st_mode)
    assert host_files(dmnt) == {}
    p = os.path.join(dmnt.path, "big")
    write_file(p, rnd(200 * KiB, 1), mode=0o644)
    wait_tier(dmnt, p, True, "after a 200 KiB write with a 64 KiB threshold")
    host = host_path(dmnt, p)
    st = os.stat(host)
    assert stat.S_IMODE(st.st_mode) == 0o600, f"host file {host.name} has mode {oct(st.st_mode)}"
    assert st.st_uid == 0
    # The file itself keeps its own mode: the host file's is the store's business.
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o644


def test_the_default_threshold_is_1_mib(mount_factory):
    m = mount_factory()
    below = os.path.join(m.path, "below")
    above = os.path.join(m.path, "above")
    write_synced(below, rnd(MiB - 4 * KiB, 2))
    write_synced(above, rnd(MiB + 4 * KiB, 3))
    wait_tier(m, above, True, "(1 MiB + 4 KiB, default threshold 1 MiB)")
    assert not on_disk(m, below), "a file of 1 MiB - 4 KiB went to disk under the default 1 MiB threshold"
    assert read_file(below) == rnd(MiB - 4 * KiB, 2)
    assert read_file(above) == rnd(MiB + 4 * KiB, 3)


def test_the_threshold_is_set_at_mkfs_and_overridden_at_mount(test_base, rampart_env, cleanup_mounts):
    # mkfs --large-file-threshold 256K, mounted without an option: the store's threshold holds.
    m = Mount(test_base, "mk256", env=rampart_env)
    cleanup_mounts.append(m)
    r = m.cli("mkfs", "--large-file-threshold", "256K", m.store)
    assert r.returncode == 0, r.stderr
    m.mount(mkfs=False)
    write_synced(os.path.join(m.path, "200k"), rnd(200 * KiB, 4))
    write_synced(os.path.join(m.path, "300k"), rnd(300 * KiB, 5))
    wait_tier(m, os.path.join(m.path, "300k"), True, "(threshold 256K from mkfs)")
    assert not on_disk(m, os.path.join(m.path, "200k"))
    unmount(m)
    # Mount overrides it: off keeps a 4 MiB file in memory.
    m.opts = ["--large-file-threshold", "off"]
    remount(m)
    write_synced(os.path.join(m.path, "4m"), rnd(4 * MiB, 6))
    assert not on_disk(m, os.path.join(m.path, "4m")), "--large-file-threshold off moved a file to disk"
    assert read_file(os.path.join(m.path, "300k")) == rnd(300 * KiB, 5)
    unmount(m)
    # The -o form of the mount(8) helper.
    m.opts = ["-o", "large_file_threshold=64K"]
    remount(m)
    write_synced(os.path.join(m.path, "100k"), rnd(100 * KiB, 7))
    wait_tier(m, os.path.join(m.path, "100k"), True, "(-o large_file_threshold=64K)")
    unmount(m)
    # mkfs ... off: nothing goes to disk.
    off = Mount(test_base, "mkoff", env=rampart_env)
    cleanup_mounts.append(off)
    r = off.cli("mkfs", "--large-file-threshold", "off", off.store)
    assert r.returncode == 0, r.stderr
    off.mount(mkfs=False)
    write_synced(os.path.join(off.path, "4m"), rnd(4 * MiB, 8))
    assert not on_disk(off, os.path.join(off.path, "4m")), "a store made with threshold off moved a file to disk"
    unmount(off)


@pytest.mark.parametrize("value", ["1000", "0", "banana", "64X"])
def test_a_bad_threshold_is_refused_with_a_clear_error(test_base, rampart_env, value):
    store = os.path.join(test_base, "bad-store")
    r = run([RAMPART_BIN, "mkfs", "--large-file-threshold", value, store], env=rampart_env)
    assert r.returncode != 0, f"mkfs accepted --large-file-threshold {value}"
    assert "threshold" in (r.stderr + r.stdout).lower(), r.stderr
    assert not os.path.exists(os.path.join(store, "superblock")), "a refused mkfs left a store"
    r = run([RAMPART_BIN, "mkfs", store], env=rampart_env, check=True)
    mp = os.path.join(test_base, "bad-mnt")
    os.mkdir(mp)
    r = run([RAMPART_BIN, "mount", store, mp, "--large-file-threshold", value], env=rampart_env)
    assert r.returncode != 0, f"mount accepted --large-file-threshold {value}"
    assert not in_mount_table(mp)
    assert "threshold" in (r.stderr + r.stdout).lower(), r.stderr


# ---- bytes and holes across the threshold ---------------------------------------------------------

@pytest.mark.parametrize("how", ["clean", "kill-9"])
def test_a_file_crossing_the_threshold_both_ways_keeps_its_bytes_and_holes(dmnt, ref_dir, how):
    m = dmnt
    t = Twin(os.path.join(m.path, "sparse"), os.path.join(ref_dir, "sparse"))
    # In memory: data, then a hole of a whole 64 KiB chunk.
    t.pwrite(rnd(60 * KiB, 10), 0)
    t.check(m, "small, in memory")
    assert not on_disk(m, t.path)
    t.pwrite(rnd(32 * KiB, 11), 128 * KiB)  # size 160 KiB > threshold: migrates, hole [64K,128K)
    wait_tier(m, t.path, True, "after growing to 160 KiB")
    t.check(m, "just migrated")
    # On disk: writes into the hole and far past the end (a 5 MiB hole), a punched hole, an
    # extension by truncate (a trailing hole).
    t.pwrite(rnd(5000, 12), 70 * KiB + 123)
    t.pwrite(rnd(300 * KiB, 13), 6 * MiB)
    t.punch(6 * MiB + 64 * KiB, 128 * KiB)
    t.truncate(9 * MiB)
    t.check(m, "on disk, sparse")
    host = host_path(m, t.path)
    assert os.stat(host).st_blocks * 512 < MiB, "the host file is not sparse: holes were written as zeros"
    t.fsync()
    cycle(m, how)
    t.check(m, f"on disk, after {how}")
    # Truncated to 1 MiB: still above threshold/4, stays on disk.
    t.truncate(MiB)
    t.check(m, "truncated to 1 MiB")
    assert on_disk(m, t.path), "a file of 1 MiB (threshold 64 KiB) left the disk tier"
    # Truncated below threshold/4 (16 KiB) with no open file: back to memory, host file removed.
    ino = os.stat(t.path).st_ino
    t.truncate(10 * KiB + 7)
    wait_host_file_gone(m, ino, "after a truncate to 10 KiB (threshold/4 = 16 KiB)")
    t.check(m, "back in memory")
    t.pwrite(rnd(3000, 14), 12 * KiB)
    t.check(m, "written in memory")
    t.fsync()
    cycle(m, how)
    t.check(m, f"in memory, after {how}")
    assert not on_disk(m, t.path)
    # And up once more: a second migration of the same inode.
    t.pwrite(rnd(200 * KiB, 15), 256 * KiB)
    wait_tier(m, t.path, True, "after growing again")
    t.check(m, "migrated again")
    t.fsync()
    cycle(m, how)
    t.check(m, f"migrated again, after {how}")
    assert_no_orphan_host_files(m)


def test_a_file_just_below_a_quarter_of_the_threshold_stays_on_disk_between(dmnt, ref_dir):
    """Hysteresis: between threshold/4 and the threshold a disk-tier file stays on disk, so a
    file hovering about the threshold is not copied back and forth."""
    m = dmnt
    t = Twin(os.path.join(m.path, "hover"), os.path.join(ref_dir, "hover"))
    t.pwrite(rnd(100 * KiB, 20), 0)
    wait_tier(m, t.path, True)
    for size in (60 * KiB, 40 * KiB, 20 * KiB, 70 * KiB, 30 * KiB):
        t.truncate(size)
        t.check(m, f"truncated to {size}")
        assert on_disk(m, t.path), f"truncated to {size} B (above threshold/4): left the disk tier"


# ---- mmap ----------------------------------------------------------------------------------------

def test_mmap_reads_and_writes_of_a_disk_tier_file(dmnt, ref_dir):
    m = dmnt
    p = os.path.join(m.path, "mapped")
    size = 2 * MiB
    data = bytearray(rnd(size, 30))
    write_synced(p, bytes(data))
    wait_tier(m, p, True)
    fd = os.open(p, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            assert mm[:] == bytes(data), "an mmap read of a disk-tier file differs from what was written"
            for off, n, seed in ((0, 100, 31), (4096, 4096, 32), (MiB - 10, 20, 33), (size - 5000, 5000, 34)):
                new = rnd(n, seed)
                mm[off:off + n] = new
                data[off:off + n] = new
            mm.flush()  # msync(MS_SYNC)
            # read(2) through another descriptor sees the mapping's bytes
            rfd = os.open(p, os.O_RDONLY)
            try:
                assert os.pread(rfd, size, 0) == bytes(data)
            finally:
                os.close(rfd)
        finally:
            mm.close()
    finally:
        os.close(fd)
    assert read_file(p) == bytes(data)
    # msync'd bytes have reached the host file
    assert read_file(host_path(m, p)) == bytes(data), "msync'd bytes are not in the host file"
    # A mapping written and dropped without msync: a clean unmount still keeps it.
    q = os.path.join(m.path, "mapped-nosync")
    qdata = bytearray(rnd(512 * KiB, 35))
    write_file(q, bytes(qdata))
    wait_tier(m, q, True)
    fd = os.open(q, os.O_RDWR)
    mm = mmap.mmap(fd, len(qdata))
    mm[1000:3000] = b"m" * 2000
    qdata[1000:3000] = b"m" * 2000
    mm.close()
    os.close(fd)
    unmount(m)
    remount(m)
    assert read_file(p) == bytes(data), "msync'd mmap writes lost over a remount"
    assert read_file(q) == bytes(qdata), "mmap writes lost over a clean unmount"
    # mmap read after the remount (page cache of the mount is cold)
    with open(p, "rb") as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            assert mm[:] == bytes(data)
            assert hashlib.sha256(mm).digest() == hashlib.sha256(data).digest()


def test_mmap_write_then_kill_9_after_msync_and_fsync(mount_factory):
    m = mount_factory(*SMALL, name="mmapcrash")
    p = os.path.join(m.path, "mapped")
    data = bytearray(rnd(MiB, 36))
    write_synced(p, bytes(data))
    wait_tier(m, p, True)
    fd = os.open(p, os.O_RDWR)
    mm = mmap.mmap(fd, MiB)
    mm[200_000:300_000] = rnd(100_000, 37)
    data[200_000:300_000] = rnd(100_000, 37)
    mm.flush()
    os.fsync(fd)
    mm.close()
    os.close(fd)
    crash(m)
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(p) == bytes(data), "msync + fsync'd mmap writes lost by kill -9"


# ---- O_DIRECT -------------------------------------------------------------------------------------

def aligned(data):
    """An anonymous mapping (page-aligned) holding data: a buffer O_DIRECT accepts."""
    buf = mmap.mmap(-1, len(data))
    buf[:] = data
    return buf


def direct_pread(fd, n, off):
    buf = mmap.mmap(-1, n)
    try:
        got = os.preadv(fd, [buf], off)
        return buf[:got]
    finally:
        buf.close()


def test_o_direct_reads_and_writes(dmnt, ref_dir):
    m = dmnt
    p = os.path.join(m.path, "direct")
    t = Twin(p, os.path.join(ref_dir, "direct"))
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    try:
        # 1 MiB in one write: the file passes the threshold during it
        blk = rnd(MiB, 40)
        assert os.pwrite(fd, aligned(blk), 0) == MiB
        for off, n, seed in ((4 * MiB, 64 * KiB, 41), (MiB, 4096, 42), (8192, 8192, 43)):
            d = rnd(n, seed)
            assert os.pwrite(fd, aligned(d), off) == n
        assert direct_pread(fd, 4096, MiB) == rnd(4096, 42)
        assert direct_pread(fd, 64 * KiB, 4 * MiB) == rnd(64 * KiB, 41)
        os.fsync(fd)
    finally:
        os.close(fd)
    ref = os.open(t.ref, os.O_WRONLY)
    for off, n, seed in ((0, MiB, 40), (4 * MiB, 64 * KiB, 41), (MiB, 4096, 42), (8192, 8192, 43)):
        pwrite_all(ref, rnd(n, seed), off)
    os.close(ref)
    wait_tier(m, p, True)
    t.check(m, "written with O_DIRECT")
    # A buffered write then an O_DIRECT read of it (the page cache is written back first).
    t.pwrite(rnd(12 * KiB, 44), 2 * MiB)
    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    try:
        assert direct_pread(fd, 16 * KiB, 2 * MiB) == rnd(12 * KiB, 44) + bytes(4 * KiB)
        whole = b"".join(direct_pread(fd, MiB, off) for off in range(0, os.fstat(fd).st_size, MiB))
    finally:
        os.close(fd)
    assert whole == t.expected(), "an O_DIRECT read of the whole file differs from the reference"
    unmount(m)
    remount(m)
    t.check(m, "O_DIRECT writes after a remount")
    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    try:
        assert direct_pread(fd, MiB, 0) == t.expected()[:MiB]
    finally:
        os.close(fd)


def test_o_direct_write_then_kill_9(mount_factory):
    m = mount_factory(*SMALL, name="directcrash")
    p = os.path.join(m.path, "direct")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    try:
        for i in range(8):
            assert os.pwrite(fd, aligned(rnd(256 * KiB, 50 + i)), i * 256 * KiB) == 256 * KiB
        os.fsync(fd)
    finally:
        os.close(fd)
    crash(m)
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(p) == b"".join(rnd(256 * KiB, 50 + i) for i in range(8)), "fsync'd O_DIRECT writes lost"
    assert on_disk(m, p)


# ---- programs on the disk tier ----------------------------------------------------------------------

PADDED_C = r"""
#include <stdio.h>
/* 3 MiB of initialized read-only data: the executable is far past the 1 MiB threshold, and
   the loader maps it from the disk tier. */
static const char pad[3 * 1024 * 1024] = { 7, [3 * 1024 * 1024 - 1] = 35 };
int main(int argc, char **argv) {
    volatile const char *p = pad;
    printf("ran from the disk tier: %d %d\n", p[0], p[sizeof pad - 1]);
    return argc > 1 ? 3 : 0;
}
"""


def test_a_program_stored_on_the_disk_tier_runs(mount_factory):
    m = mount_factory(name="exec")  # the default 1 MiB threshold
    src = os.path.join(m.path, "prog.c")
    exe = os.path.join(m.path, "prog")
    write_file(src, PADDED_C)
    run(["gcc", "-O1", "-o", exe, src], check=True, cwd=m.path)
    assert os.path.getsize(exe) > 3 * MiB
    wait_tier(m, exe, True, "(a 3 MiB executable built by gcc in the mount)")
    r = run([exe])
    assert r.returncode == 0 and r.stdout == "ran from the disk tier: 7 35\n", (r.returncode, r.stdout, r.stderr)
    assert run([exe, "x"]).returncode == 3
    # A copy of a system program, with the threshold low enough for it to be on disk.
    unmount(m)
    m.opts = list(SMALL)
    remount(m)
    ls = shutil.which("ls")
    assert os.path.getsize(ls) > THRESHOLD
    copy = os.path.join(m.path, "ls-copy")
    shutil.copy2(ls, copy)
    wait_tier(m, copy, True)
    want = run([ls, "--help"], check=True).stdout
    r = run([copy, "--help"])
    # (the usage line names the program by its path)
    assert r.returncode == 0 and r.stdout.replace(copy, ls) == want, r.stderr
    # Both still run after a remount (nothing of them in the mount's page cache).
    unmount(m)
    remount(m)
    assert run([exe]).stdout == "ran from the disk tier: 7 35\n"
    assert run([copy, "--help"]).stdout.replace(copy, ls) == want


# ---- a 4 GiB file on a mount with a 256 MiB memory cap ---------------------------------------------

def test_a_4_gib_file_on_a_mount_with_a_256_mib_memory_cap(mount_factory):
    m = mount_factory("--memory-cap", "256M", name="huge")
    p = os.path.join(m.path, "huge")
    base = rnd(MiB, 60)
    blocks = 4 * GiB // MiB
    sha = hashlib.sha256()
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in range(blocks):
            # each MiB tagged with its index: a block written at the wrong place shows
            block = i.to_bytes(8, "little") * 2 + base[16:]
            pwrite_all(fd, block, i * MiB)
            sha.update(block)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert os.path.getsize(p) == 4 * GiB
    st = m.status()
    assert st["memory_used_bytes"] <= 256 * MiB, st["memory_used_bytes"]
    host = host_path(m, p)
    assert host is not None, "a 4 GiB file is not on the disk tier"
    assert os.stat(host).st_blocks * 512 >= 4 * GiB, "the host file does not hold 4 GiB of real bytes"
    unmount(m)
    remount(m)
    r = run(["sha256sum", p], timeout=1800)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == sha.hexdigest(), "the 4 GiB file reads back other bytes"
    fd = os.open(p, os.O_RDONLY)
    try:
        for i in random.Random(61).sample(range(blocks), 20):
            assert os.pread(fd, MiB, i * MiB) == i.to_bytes(8, "little") * 2 + base[16:], f"MiB {i}"
    finally:
        os.close(fd)
    tiers = m.status().get("tiers")
    assert tiers and tiers["disk"] == {"files": 1, "bytes": 4 * GiB}, f"status tiers: {tiers}"
    os.unlink(p)
    ino_gone = wait_until(lambda: host_files(m) == {}, timeout=120)
    assert ino_gone, f"the 4 GiB host file is still there after unlink: {host_files(m)}"


# ---- hard links and renames -----------------------------------------------------------------------

def test_hard_links_and_renames_of_disk_tier_files(dmnt, ref_dir):
    m = dmnt
    a = os.path.join(m.path, "a")
    b = os.path.join(m.path, "b")
    os.mkdir(a)
    os.mkdir(b)
    f = os.path.join(a, "f")
    data = bytearray(rnd(300 * KiB, 70))
    write_file(f, bytes(data))
    wait_tier(m, f, True)
    ino = os.stat(f).st_ino
    g = os.path.join(b, "g")
    os.link(f, g)
    assert os.stat(g).st_ino == ino and os.stat(f).st_nlink == 2
    # written through one name, read through the other
    fd = os.open(g, os.O_WRONLY)
    os.pwrite(fd, b"through g" * 100, 100 * KiB)
    os.close(fd)
    data[100 * KiB:100 * KiB + 900] = b"through g" * 100
    assert read_file(f) == bytes(data)
    # renamed across directories
    h = os.path.join(b, "h")
    os.rename(f, h)
    assert read_file(h) == bytes(data) and read_file(g) == bytes(data)
    assert host_path(m, ino=ino) is not None, "the host file went away with a rename"
    # renamed over another disk-tier file: the replaced file's host file goes
    victim = os.path.join(b, "victim")
    write_file(victim, rnd(200 * KiB, 71))
    wait_tier(m, victim, True)
    victim_ino = os.stat(victim).st_ino
    os.rename(h, victim)
    wait_host_file_gone(m, victim_ino, "after the file was replaced by a rename")
    # exchanged with a memory-tier file: each keeps its own contents and tier
    small = os.path.join(a, "small")
    write_file(small, b"small file")
    renameat2(victim, small, RENAME_EXCHANGE)
    assert read_file(small) == bytes(data) and read_file(victim) == b"small file"
    assert os.stat(small).st_ino == ino and on_disk(m, small) and not on_disk(m, victim)
    fsync_tree(m.path)
    for how in ("clean", "kill-9"):
        cycle(m, how)
        assert read_file(small) == bytes(data), f"lost through the exchanged name after {how}"
        assert read_file(g) == bytes(data), f"lost through the hard link after {how}"
        assert read_file(victim) == b"small file"
        assert os.stat(g).st_nlink == 2 and os.stat(small).st_ino == os.stat(g).st_ino
        assert host_path(m, ino=os.stat(g).st_ino) is not None
    ino = os.stat(g).st_ino
    os.unlink(small)
    assert read_file(g) == bytes(data)
    assert host_path(m, ino=ino) is not None, "unlinking one of two names removed the host file"
    unmount(m)
    remount(m)
    assert read_file(g) == bytes(data)
    os.unlink(g)
    wait_host_file_gone(m, ino, "after its last name was unlinked")
    assert_no_orphan_host_files(m)


# ---- space returned to the host ---------------------------------------------------------------------

def test_truncate_punch_and_unlink_give_the_space_back_to_the_host(dmnt):
    m = dmnt
    d = data_dir(m)
    p = os.path.join(m.path, "space")
    data = rnd(16 * MiB, 80)
    write_synced(p, data)
    wait_tier(m, p, True)
    assert du_apparent(d) >= 16 * MiB and du_allocated(d) >= 16 * MiB, (du_apparent(d), du_allocated(d))
    # truncate: the host file shrinks
    os.truncate(p, 4 * MiB)
    assert wait_until(lambda: du_apparent(d) <= 4 * MiB + 64 * KiB, timeout=30), (
        f"du -sb data/ is {du_apparent(d)} after truncating 16 MiB to 4 MiB")
    assert du_allocated(d) <= 4 * MiB + 64 * KiB, du_allocated(d)
    assert read_file(p) == data[:4 * MiB]
    # punch a hole: blocks given back, size kept
    fd = os.open(p, os.O_RDWR)
    try:
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, MiB, 2 * MiB)
    finally:
        os.close(fd)
    assert wait_until(lambda: du_allocated(d) <= 2 * MiB + 64 * KiB, timeout=30), (
        f"{du_allocated(d)} bytes allocated under data/ after punching 2 MiB out of 4 MiB")
    expect = data[:MiB] + bytes(2 * MiB) + data[3 * MiB:4 * MiB]
    assert read_file(p) == expect
    assert os.path.getsize(p) == 4 * MiB
    # zero a range: reads as zeros (its space is the host's business: ZERO_RANGE may keep it)
    fd = os.open(p, os.O_RDWR)
    try:
        fallocate(fd, FALLOC_FL_ZERO_RANGE, 3 * MiB, 512 * KiB)
    finally:
        os.close(fd)
    expect = expect[:3 * MiB] + bytes(512 * KiB) + expect[3 * MiB + 512 * KiB:]
    assert read_file(p) == expect
    assert read_file(host_path(m, p)) == expect
    # unlink of an open file: the host file lives until the last close, then goes
    ino = os.stat(p).st_ino
    fd = os.open(p, os.O_RDONLY)
    try:
        os.unlink(p)
        assert os.pread(fd, 4 * MiB, 0) == expect, "an unlinked open file no longer reads its bytes"
    finally:
        os.close(fd)
    wait_host_file_gone(m, ino, "after unlink and close")
    assert wait_until(lambda: du_apparent(d) <= 64 * KiB, timeout=30), f"du -sb data/ = {du_apparent(d)}"
    # and after a remount, nothing came back
    unmount(m)
    remount(m)
    assert not os.path.exists(p)
    assert host_files(m) == {}


@pytest.mark.parametrize("how", ["clean", "crash"])
def test_fallocated_room_of_a_disk_tier_file_counts_in_st_blocks(dmnt, how):
    """xfstests generic/701 in small: fallocate 5 GiB, truncate to 4 GiB, st_blocks must say
    4 GiB. The host file holds the room (decision 0136), so st_blocks counts it (0145)."""
    m = dmnt
    p = os.path.join(m.path, "prealloc")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fallocate(fd, 0, 0, 40 * MiB)
        os.fsync(fd)
    finally:
        os.close(fd)
    wait_tier(m, p, True, "after a 40 MiB fallocate")
    assert os.stat(p).st_blocks * 512 >= 40 * MiB, f"st_blocks {os.stat(p).st_blocks} after a 40 MiB fallocate"
    os.truncate(p, 32 * MiB)
    fsync_path(p)

    def allocated():
        return os.stat(p).st_blocks * 512

    assert 32 * MiB <= allocated() <= 32 * MiB + 64 * KiB, f"{allocated()} bytes allocated after truncating to 32 MiB"
    cycle(m, how)
    assert 32 * MiB <= allocated() <= 32 * MiB + 64 * KiB, f"{allocated()} bytes allocated after a {how} remount"
    assert read_file(p) == bytes(32 * MiB)


def test_many_deletes_return_all_space(dmnt):
    m = dmnt
    d = data_dir(m)
    for i in range(40):
        write_file(os.path.join(m.path, f"f{i}"), rnd(256 * KiB, 90 + i))
    fsync_path(m.path)
    assert wait_until(lambda: len(host_files(m)) == 40, timeout=60), len(host_files(m))
    assert du_allocated(d) >= 40 * 256 * KiB
    run(["rm", "-rf", *[os.path.join(m.path, f"f{i}") for i in range(40)]], check=True)
    assert wait_until(lambda: host_files(m) == {}, timeout=60), f"host files left: {host_files(m)}"
    assert du_allocated(d) <= 64 * KiB


# ---- memory pressure ------------------------------------------------------------------------------

def test_memory_pressure_moves_cold_files_to_disk_before_enospc(mount_factory):
    """--memory-cap 64M, default threshold 1 MiB and eviction minimum 64 KiB: 100 files of
    1000 KiB (each in memory by size) and 50 files of 10 KiB do not fit in memory; the coldest
    large ones go to disk and no write fails."""
    m = mount_factory("--memory-cap", "64M", name="pressure")
    small = [os.path.join(m.path, f"s{i:03}") for i in range(50)]
    large = [os.path.join(m.path, f"l{i:03}") for i in range(100)]
    for i, p in enumerate(small):
        write_file(p, rnd(10 * KiB, 1000 + i))
    for i, p in enumerate(large):
        write_file(p, rnd(1000 * KiB, 2000 + i))  # raises ENOSPC if nothing is evicted
    fsync_path(m.path)
    for i, p in enumerate(large):
        assert read_file(p) == rnd(1000 * KiB, 2000 + i), p
    for i, p in enumerate(small):
        assert read_file(p) == rnd(10 * KiB, 1000 + i), p
    st = m.status()
    assert st["memory_used_bytes"] <= 64 * MiB
    assert on_disk(m, large[0]), "the coldest large file was not moved to disk"
    assert not on_disk(m, large[-1]), "the file written last (the hottest) was moved to disk"
    assert not any(on_disk(m, p) for p in small), "a file below --evict-min-size was moved to disk"
    evicted = sum(on_disk(m, p) for p in large)
    assert evicted >= 100 - 64, f"only {evicted} files moved to disk"
    tiers = st.get("tiers")
    assert tiers and tiers["disk"]["files"] == evicted, f"status tiers: {tiers}, {evicted} host files"
    unmount(m)
    remount(m)
    for i, p in enumerate(large):
        assert read_file(p) == rnd(1000 * KiB, 2000 + i), p


def test_memory_pressure_makes_room_for_creates_links_renames_and_xattrs(mount_factory):
    """Memory filled to the cap by files of 1000 KiB (which may move to disk), then a store
    opened again with a smaller cap: creating files, directories, symlinks, links, longer
    names and xattrs needs memory too, and moves cold files to disk instead of answering
    ENOSPC (decision 0141)."""
    m = mount_factory("--memory-cap", "64M", "--large-file-threshold", "off", name="createroom")
    for i in range(40):
        write_file(os.path.join(m.path, f"l{i:03}"), rnd(1000 * KiB, 4000 + i))
    unmount(m)
    # The threshold back to the store's (1 MiB) and a cap below what memory holds already.
    m.opts = ["--memory-cap", "16M"]
    remount(m)
    assert m.status()["memory_used_bytes"] > 16 * MiB
    for i in range(200):
        d = os.path.join(m.path, f"d{i:03}")
        os.mkdir(d)
        write_file(os.path.join(d, "f"), b"x" * 100)
        os.symlink("f", os.path.join(d, "link-to-f"))
        os.link(os.path.join(d, "f"), os.path.join(d, "hard-link"))
        os.rename(os.path.join(d, "f"), os.path.join(d, "a-much-longer-name-than-before" * 4))
        os.setxattr(d, "user.note", b"n" * 200)
    assert host_files(m), "nothing moved to the disk tier"
    assert m.status()["memory_used_bytes"] <= 16 * MiB
    for i in range(40):
        assert read_file(os.path.join(m.path, f"l{i:03}")) == rnd(1000 * KiB, 4000 + i)
    unmount(m)
    remount(m)
    assert len(os.listdir(os.path.join(m.path, "d199"))) == 3
    assert os.getxattr(os.path.join(m.path, "d199"), "user.note") == b"n" * 200


def test_evict_min_size_is_an_option(mount_factory):
    """With --evict-min-size 2M no file of 1000 KiB may be evicted: a full memory answers ENOSPC."""
    m = mount_factory("--memory-cap", "64M", "--evict-min-size", "2M", name="noevict")
    failed = None
    for i in range(100):
        try:
            write_file(os.path.join(m.path, f"l{i:03}"), rnd(1000 * KiB, 3000 + i))
        except OSError as e:
            failed = e
            break
    assert failed is not None and failed.errno == errno.ENOSPC, f"memory filled without ENOSPC: {failed!r}"
    assert host_files(m) == {}, "files smaller than --evict-min-size went to disk"


# ---- everything survives a clean unmount and a kill -9 after fsync ----------------------------------

@pytest.mark.parametrize("how", ["clean", "kill-9"])
def test_every_kind_of_disk_tier_change_survives(mount_factory, ref_dir, how):
    m = mount_factory(*SMALL, name=f"survive-{how}")
    twins = {}

    def twin(name):
        t = Twin(os.path.join(m.path, name), os.path.join(ref_dir, name))
        twins[name] = t
        return t

    t = twin("sparse")
    t.pwrite(rnd(100 * KiB, 100), 0)
    t.pwrite(rnd(50 * KiB, 101), 3 * MiB)
    t.truncate(5 * MiB)
    t = twin("punched")
    t.pwrite(rnd(MiB, 102), 0)
    t.punch(256 * KiB, 256 * KiB)
    t = twin("shrunk")
    t.pwrite(rnd(2 * MiB, 103), 0)
    t.truncate(300 * KiB + 1)
    t = twin("back-to-memory")
    t.pwrite(rnd(200 * KiB, 104), 0)
    wait_tier(m, t.path, True)
    t.truncate(5 * KiB)
    t = twin("overwritten")
    t.pwrite(rnd(MiB, 105), 0)
    wait_tier(m, t.path, True)
    t.pwrite(rnd(MiB, 106), 0)
    t.pwrite(rnd(1000, 107), 999)
    t = twin("appended")
    t.pwrite(rnd(60 * KiB, 108), 0)
    fd = os.open(t.path, os.O_WRONLY | os.O_APPEND)
    rfd = os.open(t.ref, os.O_WRONLY | os.O_APPEND)
    for i in range(20):
        chunk = rnd(10 * KiB, 200 + i)
        os.write(fd, chunk)
        os.write(rfd, chunk)
    os.close(fd)
    os.close(rfd)
    t = twin("linked")
    t.pwrite(rnd(400 * KiB, 109), 0)
    os.link(t.path, os.path.join(m.path, "linked-2"))
    t = twin("to-rename")
    t.pwrite(rnd(400 * KiB, 110), 0)
    os.rename(t.path, os.path.join(m.path, "renamed"))
    t.path = os.path.join(m.path, "renamed")
    t = twin("mmapped")
    t.pwrite(rnd(MiB, 111), 0)
    fd = os.open(t.path, os.O_RDWR)
    mm = mmap.mmap(fd, MiB)
    mm[5000:9000] = b"M" * 4000
    mm.flush()
    mm.close()
    os.close(fd)
    rfd = os.open(t.ref, os.O_WRONLY)
    os.pwrite(rfd, b"M" * 4000, 5000)
    os.close(rfd)
    t = twin("direct")
    fd = os.open(t.path, os.O_WRONLY | os.O_DIRECT)
    os.pwrite(fd, aligned(rnd(512 * KiB, 112)), 64 * KiB)
    os.close(fd)
    rfd = os.open(t.ref, os.O_WRONLY)
    pwrite_all(rfd, rnd(512 * KiB, 112), 64 * KiB)
    os.close(rfd)
    unlinked = os.path.join(m.path, "unlinked")
    write_file(unlinked, rnd(300 * KiB, 113))
    wait_tier(m, unlinked, True)
    unlinked_ino = os.stat(unlinked).st_ino
    os.unlink(unlinked)
    fsync_tree(m.path)
    for name, t in twins.items():
        t.check(m, "before the remount")
    cycle(m, how)
    for name, t in twins.items():
        t.check(m, f"after {how}")
    assert read_file(os.path.join(m.path, "linked-2")) == twins["linked"].expected()
    assert not on_disk(m, twins["back-to-memory"].path)
    for name in ("sparse", "punched", "shrunk", "overwritten", "appended", "linked", "to-rename", "mmapped", "direct"):
        assert on_disk(m, twins[name].path), f"{name} is no longer on the disk tier after {how}"
    assert unlinked_ino not in host_files(m), "an unlinked file's host file came back"
    assert_no_orphan_host_files(m)
    # a second cycle, the other way
    cycle(m, "kill-9" if how == "clean" else "clean")
    for name, t in twins.items():
        t.check(m, "after a second remount")
    unmount(m)
    r = fsck(m)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- bad input: host files damaged behind rampart's back -----------------------------------------------

def _damaged_store(mount_factory, name):
    """A store with a disk-tier victim, a disk-tier bystander and a memory-tier file, cleanly
    unmounted. Returns (mount, {name: bytes}, victim ino, victim host file)."""
    m = mount_factory(*SMALL, name=name)
    files = {"victim-file": rnd(300 * KiB, 120), "bystander": rnd(200 * KiB, 121), "small": rnd(5000, 122)}
    for n, data in files.items():
        write_synced(os.path.join(m.path, n), data)
    victim = os.path.join(m.path, "victim-file")
    wait_tier(m, victim, True)
    wait_tier(m, os.path.join(m.path, "bystander"), True)
    ino = os.stat(victim).st_ino
    host = host_path(m, victim)
    unmount(m)
    return m, files, ino, host


def _names_victim(text, ino, host):
    return host.name in text or "victim-file" in text or f"inode {ino}" in text or f"#{ino}" in text or \
        f"ino {ino}" in text


def _bystanders_intact(m, files):
    for n in ("bystander", "small"):
        assert read_file(os.path.join(m.path, n)) == files[n], f"{n} was damaged by another file's repair"


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_host_file_damaged_behind_rampart_gives_eio_and_fsck_repairs_it(mount_factory, damage):
    m, files, ino, host = _damaged_store(mount_factory, f"damaged-{damage}")
    kept = 0 if damage == "deleted" else 100_000
    if damage == "deleted":
        os.unlink(host)
    else:
        os.truncate(host, kept)
    # the mount works; reads of the missing part give EIO, not zeros or garbage
    remount(m)
    victim = os.path.join(m.path, "victim-file")
    assert os.path.getsize(victim) == len(files["victim-file"])
    try:
        fd = os.open(victim, os.O_RDONLY)
    except OSError as e:
        # Through passthrough the host file is opened at OPEN: a missing one fails there.
        assert e.errno == errno.EIO and not kept, f"opening a file whose host file is {damage}: {e!r}"
        fd = None
    if fd is not None:
        try:
            if kept:
                assert os.pread(fd, 50_000, 0) == files["victim-file"][:50_000], "the intact part does not read back"
            expect_errno(errno.EIO, os.pread, fd, 4096, 200 * KiB)
        finally:
            os.close(fd)
    expect_errno(errno.EIO, read_file, victim)
    _bystanders_intact(m, files)
    log = (m.store / "rampart.log").read_text(errors="replace")
    assert _names_victim(log, ino, host), "the daemon's log does not mention the damaged host file"
    assert f"/victim-file (inode {ino}" in log, "the daemon's log does not give the damaged file's path"
    assert m.alive()
    unmount(m)
    # fsck finds it and names it (the mount changed nothing of it)
    r, report = fsck_json(m)
    assert r.returncode == 1 and not report["clean"], f"fsck called a store with a {damage} host file clean: {r.stdout}"
    text = fsck(m).stdout
    assert _names_victim(text, ino, host), f"fsck does not name the damaged file:\n{text}"
    # by its path in the file system, as the user knows it (the hunt of 2026-11-27)
    assert f"/victim-file (inode {ino})" in text, f"fsck does not give the file's path:\n{text}"
    # --repair truncates the file to what its host file holds, and says so
    r = fsck(m, "--repair")
    assert r.returncode == 0, f"fsck --repair: {r.stdout}{r.stderr}"
    repairs = r.stdout[r.stdout.find("repairs"):]
    assert _names_victim(repairs, ino, host), f"the repair does not say which file lost bytes:\n{r.stdout}"
    assert f"/victim-file (inode {ino})" in repairs, f"the repair does not give the file's path:\n{r.stdout}"
    lost = len(files["victim-file"]) - kept
    assert str(lost) in repairs or "lost" in repairs.lower(), f"the repair does not say what was lost:\n{r.stdout}"
    r = fsck(m)
    assert r.returncode == 0, f"fsck after --repair is not clean: {r.stdout}"
    remount(m)
    assert read_file(victim) == files["victim-file"][:kept], "the repaired file does not hold what the host file held"
    _bystanders_intact(m, files)
    # the repaired file is usable again
    write_synced(victim, rnd(150 * KiB, 123))
    assert read_file(victim) == rnd(150 * KiB, 123)
    unmount(m)
    assert fsck(m).returncode == 0


def test_a_host_file_without_an_inode_is_removed_and_one_too_long_is_trimmed(mount_factory):
    m, files, ino, host = _damaged_store(mount_factory, "orphan")
    stray = data_dir(m) / f"{0xdead_beef:016x}-00000001"
    stray.write_bytes(b"stray" * 10_000)
    os.chmod(stray, 0o600)
    with open(host, "ab") as f:
        f.write(b"garbage beyond the end" * 1000)
    remount(m)
    assert not stray.exists(), "a host file with no inode survived the mount's recovery"
    log = (m.store / "rampart.log").read_text(errors="replace")
    assert stray.name in log, "the mount's recovery did not log the stray host file it removed"
    victim = os.path.join(m.path, "victim-file")
    assert read_file(victim) == files["victim-file"], "bytes past the file's end showed up"
    assert os.path.getsize(host_path(m, victim)) == len(files["victim-file"]), "the too-long host file was not trimmed"
    # growing the file must not reveal the old garbage
    with open(victim, "r+b") as f:
        f.truncate(len(files["victim-file"]) + 30_000)
    assert read_file(victim) == files["victim-file"] + bytes(30_000), "an extension revealed stale host bytes"
    _bystanders_intact(m, files)
    unmount(m)
    assert fsck(m).returncode == 0
    # fsck reports a stray host file too (what a crash leaves: not a problem, docs/CLI.md), and
    # --repair removes it
    stray.write_bytes(b"stray" * 10_000)
    r = fsck(m)
    assert r.returncode == 0 and "1 host files unused" in r.stdout, f"fsck does not report the stray:\n{r.stdout}"
    r, report = fsck_json(m)
    assert report["data"]["orphans"] == [f"data/{stray.name}"], report["data"]
    r = fsck(m, "--repair")
    assert r.returncode == 0 and not stray.exists(), f"fsck --repair left the stray host file:\n{r.stdout}"
    assert fsck(m).returncode == 0


def test_entries_of_the_data_folder_that_are_not_rampart_s_are_left_alone(mount_factory):
    """A file or folder someone put into the store's data folder is not deleted by the mount's
    recovery, and a folder named like a host file does not refuse the mount: both are left
    alone and reported by fsck."""
    m, files, ino, host = _damaged_store(mount_factory, "foreign")
    notes = data_dir(m) / "notes.txt"
    notes.write_bytes(b"someone else's")
    folder = data_dir(m) / "subdir"
    folder.mkdir()
    (folder / "inside").write_bytes(b"x")
    lookalike = data_dir(m) / f"{0xdead_beef:016x}-00000002"
    lookalike.mkdir()
    remount(m)
    _bystanders_intact(m, files)
    assert notes.read_bytes() == b"someone else's", "the mount deleted a file rampart did not make"
    assert (folder / "inside").exists() and lookalike.is_dir()
    log = (m.store / "rampart.log").read_text(errors="replace")
    assert "leaving data/notes.txt alone" in log, log[-2000:]
    unmount(m)
    r = fsck(m)
    assert r.returncode == 0 and "2 host files with names rampart does not make" in r.stdout, r.stdout
    r, report = fsck_json(m)
    assert report["data"]["foreign"] == ["data/notes.txt", "data/subdir"], report["data"]
    r = fsck(m, "--repair")
    assert r.returncode == 0 and notes.exists() and folder.exists(), r.stdout
    assert_no_panic(m)


def test_an_immutable_data_folder_gives_a_clear_error_and_the_daemon_lives(mount_factory):
    m = mount_factory(*SMALL, name="immutable")
    d = data_dir(m)
    old = os.path.join(m.path, "old")
    write_synced(old, rnd(200 * KiB, 130))
    wait_tier(m, old, True)
    old_ino = os.stat(old).st_ino
    keep = os.path.join(m.path, "keep")
    write_synced(keep, b"keep me")
    run(["chattr", "+i", d], check=True)
    try:
        grow = os.path.join(m.path, "grow")
        payload = rnd(300 * KiB, 131)
        outcome = None
        try:
            write_synced(grow, payload)
        except OSError as e:
            outcome = e.errno
        assert outcome in (None, errno.EIO, errno.ENOSPC), f"a growing file met {errno.errorcode.get(outcome)}"
        assert m.alive(), "the daemon died when the data folder was not writable"
        if outcome is None:
            # the contract's other answer: the file stays in memory, whole
            assert not on_disk(m, grow)
            assert read_file(grow) == payload
        # the disk-tier file already there is still read and written
        assert read_file(old) == rnd(200 * KiB, 130)
        # unlinking a disk-tier file works even if its host file cannot be removed now
        os.unlink(old)
        assert read_file(keep) == b"keep me"
        st = m.status()
        assert st["files"] >= 1
    finally:
        run(["chattr", "-i", d], check=True)
    unmount(m)
    remount(m)
    assert m.alive()
    assert not os.path.exists(old)
    assert old_ino not in host_files(m), "the unlinked file's host file was not removed once the folder was writable"
    if outcome is None:
        assert read_file(grow) == payload
    assert read_file(keep) == b"keep me"
    assert_no_orphan_host_files(m)
    unmount(m)
    assert fsck(m).returncode == 0


def test_a_data_folder_immutable_before_the_mount(test_base, rampart_env, cleanup_mounts):
    m = Mount(test_base, "immmount", opts=SMALL, env=rampart_env)
    cleanup_mounts.append(m)
    m.mkfs()
    d = data_dir(m)
    run(["chattr", "+i", d], check=True)
    try:
        m.path.mkdir(mode=0o755, exist_ok=True)
        r = m.cli("mount", m.store, m.path, *SMALL)
        if r.returncode != 0:
            assert "data" in r.stderr, f"a refused mount does not name the data folder: {r.stderr}"
            assert not in_mount_table(m.path)
            return
        m.mounted = True
        m.pid = m.find_daemon_pid()
        p = os.path.join(m.path, "f")
        try:
            write_synced(p, rnd(300 * KiB, 140))
            assert read_file(p) == rnd(300 * KiB, 140) and not on_disk(m, p)
        except OSError as e:
            assert e.errno in (errno.EIO, errno.ENOSPC), repr(e)
        assert m.alive()
    finally:
        run(["chattr", "-i", d], check=True)
    unmount(m)


def test_a_full_host_file_system_during_migration_loses_nothing(test_base, rampart_env, cleanup_mounts, small_ext4):
    from pathlib import Path
    m = Mount(test_base, "fullmig", opts=("--large-file-threshold", "1M", "--commit-interval", "200ms"),
              env=rampart_env)
    m.store = Path(small_ext4) / "store"
    cleanup_mounts.append(m)
    m.mount()
    grow = os.path.join(m.path, "grow")
    base = rnd(MiB - 64 * KiB, 150)
    write_synced(grow, base)
    write_synced(os.path.join(m.path, "other"), b"other")
    # fill the host file system
    filler = os.path.join(small_ext4, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        free = os.statvfs(small_ext4).f_bavail * os.statvfs(small_ext4).f_frsize
        try:
            os.posix_fallocate(fd, 0, max(free - 16 * KiB, 4096))
        except OSError:
            pass
        try:
            while True:
                os.write(fd, b"\xff" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        # grow past the threshold: the migration cannot get its space
        ext = rnd(256 * KiB, 151)
        written = 0
        result = None
        try:
            fd = os.open(grow, os.O_WRONLY)
            try:
                written = os.pwrite(fd, ext, len(base))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            result = e.errno
        assert result in (None, errno.ENOSPC), f"a full host file system answered {errno.errorcode.get(result)}"
        assert m.alive(), "the daemon died on a full host file system"
        got = read_file(grow)
        assert got[:len(base)] == base, "the file's bytes before the failed migration changed"
        assert got[len(base):] == ext[:len(got) - len(base)], "bytes never written appeared"
        assert read_file(os.path.join(m.path, "other")) == b"other"
        assert m.status() is not None
    finally:
        os.unlink(filler)
    # with room again: persistence resumes, the file can grow and migrate
    assert wait_until(lambda: m.status()["persistence"]["error"] is None, timeout=120), m.status()["persistence"]
    fd = os.open(grow, os.O_WRONLY)
    try:
        pwrite_all(fd, ext, len(base))
        os.fsync(fd)
    finally:
        os.close(fd)
    want = base + ext
    assert read_file(grow) == want
    wait_tier(m, grow, True, "after room was made on the host file system")
    unmount(m)
    remount(m)
    assert read_file(grow) == want
    assert read_file(os.path.join(m.path, "other")) == b"other"
    assert_no_orphan_host_files(m)
    unmount(m)
    assert fsck(m).returncode == 0


# ---- status and statfs --------------------------------------------------------------------------------

def test_status_json_counts_files_and_bytes_per_tier(mount_factory):
    m = mount_factory(name="tiers")  # threshold 1 MiB
    mem = {"m1": 64 * KiB, "m2": 128 * KiB, "m3": 192 * KiB}
    disk = {"d1": 2 * MiB, "d2": 3 * MiB}
    for i, (n, size) in enumerate({**mem, **disk}.items()):
        write_synced(os.path.join(m.path, n), rnd(size, 160 + i))
    for n in disk:
        wait_tier(m, os.path.join(m.path, n), True)
    os.mkdir(os.path.join(m.path, "dir"))
    os.symlink("m1", os.path.join(m.path, "link"))

    def tiers():
        st = m.status()
        assert "tiers" in st, f"status --json has no tiers: {sorted(st)}"
        assert st.get("data_path") in ("passthrough", "daemon"), st.get("data_path")
        schema = json.loads((REPO / "docs" / "status-schema.json").read_text())
        if "tiers" in schema.get("properties", {}):
            import jsonschema
            jsonschema.validate(st, schema, cls=jsonschema.Draft202012Validator)
        return st["tiers"]

    t = tiers()
    assert t["memory"] == {"files": 3, "bytes": sum(mem.values())}, t
    assert t["disk"] == {"files": 2, "bytes": sum(disk.values())}, t
    # d1 truncated below a quarter of the threshold: back in memory
    os.truncate(os.path.join(m.path, "d1"), 128 * KiB)
    wait_tier(m, os.path.join(m.path, "d1"), False)
    t = tiers()
    assert t["memory"] == {"files": 4, "bytes": sum(mem.values()) + 128 * KiB}, t
    assert t["disk"] == {"files": 1, "bytes": 3 * MiB}, t
    os.unlink(os.path.join(m.path, "d2"))
    t = tiers()
    assert t["disk"] == {"files": 0, "bytes": 0}, t
    human = m.cli("status", m.path)
    assert human.returncode == 0 and "disk" in human.stdout.lower(), human.stdout


def test_statfs_adds_the_host_file_system_to_the_memory_cap(mount_factory):
    m = mount_factory("--memory-cap", "256M", name="statfs")
    mine = os.statvfs(m.path)
    host = os.statvfs(m.store)
    total = mine.f_blocks * mine.f_frsize
    host_total = host.f_blocks * host.f_frsize
    assert abs(total - (256 * MiB + host_total)) <= 2 * MiB, (
        f"statfs reports {total} bytes; memory cap 256 MiB + host {host_total}")
    free = mine.f_bavail * mine.f_frsize
    assert free > host.f_bavail * host.f_frsize // 2, "statfs free space ignores the host file system"
    # df shows it too
    r = run(["df", "-B1", "--output=size", m.path], check=True)
    assert int(r.stdout.split()[-1]) == total


# ---- the journal and the checkpoint do not carry disk-tier bytes ------------------------------------

def test_disk_tier_bytes_stay_out_of_the_journal_and_the_checkpoint(mount_factory):
    m = mount_factory(*SMALL, name="nojournal")
    journal = m.store / "journal"
    p = os.path.join(m.path, "big")
    write_synced(p, rnd(128 * KiB, 170))  # past the threshold: on disk from here
    wait_tier(m, p, True)
    before = journal_len(m)
    fd = os.open(p, os.O_WRONLY)
    try:
        for i in range(32):
            pwrite_all(fd, rnd(MiB, 171 + i), 128 * KiB + i * MiB)
            os.fsync(fd)
    finally:
        os.close(fd)
    grown = journal_len(m) - before
    assert grown < 2 * MiB, f"the journal grew by {grown} bytes for 32 MiB written to a disk-tier file"
    unmount(m)
    ckpt = os.path.getsize(m.store / "checkpoint")
    assert ckpt < 2 * MiB, f"the checkpoint holds {ckpt} bytes with 32 MiB on the disk tier"
    assert os.path.getsize(journal) < 4 * MiB
    remount(m)
    fd = os.open(p, os.O_RDONLY)
    try:
        for i in (0, 17, 31):
            assert os.pread(fd, MiB, 128 * KiB + i * MiB) == rnd(MiB, 171 + i)
    finally:
        os.close(fd)


def test_cold_reads_from_many_threads_give_the_right_bytes(mount_factory):
    """Reads that miss the host's page cache are served by the daemon's reading threads
    (decision 0073), many at once: 16 threads reading 8 cold disk-tier files at once, in random
    4 KiB reads, whole-file sequential reads and O_DIRECT reads, each get the file's bytes;
    and the mount's readahead is INIT's 1 MiB (decision 0074), not the kernel's 128 KiB."""
    import threading
    m = mount_factory(name="coldreads")
    size = 4 * MiB
    files = {}
    for i in range(8):
        p = os.path.join(m.path, f"f{i}")
        files[p] = rnd(size, 600 + i)
        write_file(p, files[p])
        fsync_path(p)
    for p in files:
        wait_tier(m, p, True)
    dev = os.stat(m.path).st_dev
    with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb") as f:
        assert f.read().strip() == "1024"
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    errors = []

    def reader(k):
        try:
            r = random.Random(k)
            p = list(files)[k % len(files)]
            want = files[p]
            if k % 4 == 0:
                assert read_file(p) == want, f"{p}: sequential read"
            elif k % 4 == 1:
                fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
                try:
                    for off in range(0, size, 256 * KiB):
                        assert direct_pread(fd, 256 * KiB, off) == want[off:off + 256 * KiB], f"{p}@{off} O_DIRECT"
                finally:
                    os.close(fd)
            else:
                fd = os.open(p, os.O_RDONLY)
                try:
                    for _ in range(200):
                        off = r.randrange(size // 4096) * 4096
                        assert os.pread(fd, 4096, off) == want[off:off + 4096], f"{p}@{off}"
                finally:
                    os.close(fd)
        except Exception as e:  # collected: an assert in a thread would be lost
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # The misses went to the reading threads.
    status = m.cli("status", m.path).stdout
    pid = next(int(l.split()[1]) for l in status.splitlines() if l.startswith("pid:"))
    names = [open(f"/proc/{pid}/task/{t}/comm").read().strip() for t in os.listdir(f"/proc/{pid}/task")]
    assert any(n.startswith("disk-read-") for n in names), names
    # The daemon lives and answers.
    assert read_file(list(files)[0])[:4096] == files[list(files)[0]][:4096]

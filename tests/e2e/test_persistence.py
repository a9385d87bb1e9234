"""Persistence on real mounts: what a clean unmount keeps, what fsync makes durable across a
`kill -9` of the daemon (group commit, renames, O_SYNC/O_DSYNC), and how damaged store files
are handled (torn journal tail, damaged checkpoint, unknown superblock version, damaged
journal repaired by `rampart fsck --repair`). docs/FORMAT.md describes the files.

Every test drives its own mounts by hand (Mount + cleanup_mounts), as test_cli.py does.
The helpers at the top (CRC-32C, journal parsing, crash and remount) are shared with
test_fsck.py."""

import hashlib
import json
import os
import random
import socket
import stat
import struct
import subprocess
import sys
import time

import pytest

from e2e_helpers import (EXIT_WAIT, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, MiB, Mount,
                         assert_fsck_clean_after_crash, assert_no_panic, cli, crash, fallocate, fsck,
                         fsck_json, fsync_path, in_mount_table, lock_released, new_mount, pid_alive,
                         read_file, remount, run, unmount, wait_until, write_file, write_synced)

pytestmark = pytest.mark.rampart_only("tests the rampart store: journal, checkpoint, recovery")

HEADER_BYTES = 64
# Zeros the daemon keeps after the journal's last batch (limits::JOURNAL_ZEROS_AHEAD_BYTES_MIN).
ZEROS_AHEAD_BYTES = 4096
BATCH_HEADER_BYTES = 32
STORE_FILES = ("superblock", "checkpoint", "journal")

# ---- helpers (also used by test_fsck.py) ------------------------------------------------------


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as the store's files use."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "CRC-32C check value"


def journal_batches(data):
    """The batches of a journal's bytes: [(offset, end, first_seq, op_count)], up to the first
    one that does not parse (no checksum check: these are the batches the daemon wrote)."""
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


def batch_ending_at(data, end):
    """The batch of a journal that ends at byte `end` (a length the journal had once)."""
    for b in journal_batches(data):
        if b[1] == end:
            return b
    raise AssertionError(f"no journal batch ends at byte {end}: {journal_batches(data)}")


def store_bytes(m):
    """The store's data files, to check that something left them untouched."""
    out = {}
    for name in STORE_FILES:
        p = m.store / name
        out[name] = p.read_bytes() if p.exists() else None
    return out


























def journal_len(m):
    """The journal's committed length: where its last batch ends (zeros reserved ahead of the
    writer may follow it, docs/FORMAT.md)."""
    data = read_file(m.store / "journal")
    batches = journal_batches(data)
    end = batches[-1][1] if batches else HEADER_BYTES
    assert not any(data[end:]), "the journal's bytes after its last batch are not all zeros"
    return end


def files_by_batch(test_base, env, cleanup, name, n=3):
    """A store whose journal holds n files, each written and fsynced in turn, then a crash:
    returns (mount, [(path, content, journal length once its fsync returned)])."""
    m = new_mount(test_base, env, name, cleanup)
    files = []
    for i in range(n):
        p = os.path.join(m.path, f"file{i}")
        content = bytes([65 + i]) * (1000 + 100 * i)
        write_synced(p, content)
        files.append((p, content, journal_len(m)))
    lens = [f[2] for f in files]
    assert lens == sorted(set(lens)), f"every fsync should have appended a batch: journal lengths {lens}"
    crash(m)
    return m, files


# ---- a clean unmount keeps everything --------------------------------------------------------

T0 = 1_600_000_000_123_456_789  # mtimes with every nanosecond digit used


def _build_tree(t):
    rng = random.Random(7)
    os.mkdir(t)
    os.mkdir(os.path.join(t, "dir1"), 0o750)
    os.mkdir(os.path.join(t, "dir1", "sub"))
    os.chmod(os.path.join(t, "dir1", "sub"), 0o1777)
    os.mkdir(os.path.join(t, "dir2"))
    os.chmod(os.path.join(t, "dir2"), 0o2775)
    os.mkdir(os.path.join(t, "empty-dir"))
    files = {
        "empty": b"",
        "small": b"hello\n",
        "page": rng.randbytes(4096),
        "chunk": rng.randbytes(64 * 1024),
        "chunk+1": rng.randbytes(64 * 1024 + 1),
        "dir1/big": rng.randbytes(3 * MiB + 17),
        "dir1/sub/text": b"line\n" * 10000,
        "dir2/name with spaces \u00e9": b"unicode name",
    }
    for rel, data in files.items():
        write_file(os.path.join(t, rel), data)
    # sparse: data, a hole of 5 MiB, data
    fd = os.open(os.path.join(t, "sparse"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, b"head", 0)
    os.pwrite(fd, rng.randbytes(70_000), 5 * MiB + 3)
    os.close(fd)
    # sparse, ending in a hole (truncate extends it)
    fd = os.open(os.path.join(t, "dir1", "sparse-end"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, rng.randbytes(100 * 1024), 200 * 1024)
    os.ftruncate(fd, 10 * MiB)
    os.close(fd)
    # a hole punched into data, and space kept past the end
    fd = os.open(os.path.join(t, "punched"), os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, rng.randbytes(300 * 1024))
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 64 * 1024, 128 * 1024)
    os.close(fd)
    # hard links (3 names in 3 directories)
    os.link(os.path.join(t, "small"), os.path.join(t, "dir1", "small.link1"))
    os.link(os.path.join(t, "small"), os.path.join(t, "dir2", "small.link2"))
    # symlinks
    os.symlink("small", os.path.join(t, "rel-link"))
    os.symlink("/etc/hostname", os.path.join(t, "abs-link"))
    os.symlink("no/such/target", os.path.join(t, "dir1", "dangling"))
    os.symlink("x" * 1000, os.path.join(t, "long-link"))
    # special files
    os.mkfifo(os.path.join(t, "fifo"), 0o640)
    os.mknod(os.path.join(t, "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(t, "sock"))
    s.close()
    # xattrs
    os.setxattr(os.path.join(t, "small"), "user.a", b"1")
    os.setxattr(os.path.join(t, "small"), "user.big", rng.randbytes(3000))
    os.setxattr(os.path.join(t, "small"), "trusted.t", b"trusted value")
    os.setxattr(os.path.join(t, "dir1"), "user.d", b"on a directory")
    os.setxattr(os.path.join(t, "dir1", "big"), "user.empty", b"")
    # owners, then modes (chown clears setuid)
    os.chown(os.path.join(t, "page"), 1234, 5678)
    os.chown(os.path.join(t, "dir2"), 65534, 65534)
    os.lchown(os.path.join(t, "rel-link"), 42, 43)
    os.chown(os.path.join(t, "fifo"), 7, 8)
    os.chmod(os.path.join(t, "page"), 0o4755)
    os.chmod(os.path.join(t, "chunk"), 0o600)
    os.chmod(os.path.join(t, "dir1", "big"), 0o2741)
    # nanosecond times, deepest first so that creating entries does not change them after
    paths = []
    for dirpath, dirnames, filenames in os.walk(t, topdown=False):
        for n in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            paths.append(os.path.join(dirpath, n))
        paths.append(dirpath)
    for i, p in enumerate(paths):
        mtime = T0 + i * 1_000_003
        os.utime(p, ns=(mtime - 987_654_321, mtime), follow_symlinks=False)


def _snapshot(root):
    """Everything but atime (and st_dev) of every inode under root, by relative path."""
    out = {}

    def visit(p, rel):
        st = os.lstat(p)
        entry = {k: getattr(st, k) for k in ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size",
                                               "st_blocks", "st_mtime_ns", "st_ctime_ns", "st_rdev")}
        entry["xattrs"] = {n: os.getxattr(p, n, follow_symlinks=False)
                           for n in sorted(os.listxattr(p, follow_symlinks=False))}
        if stat.S_ISREG(st.st_mode):
            data = read_file(p)
            entry["content"] = (len(data), hashlib.sha256(data).hexdigest())
        elif stat.S_ISLNK(st.st_mode):
            entry["target"] = os.readlink(p)
        elif stat.S_ISDIR(st.st_mode):
            entry["entries"] = sorted(os.listdir(p))
            for n in entry["entries"]:
                visit(os.path.join(p, n), os.path.join(rel, n))
        out[rel] = entry

    visit(root, ".")
    return out


def _diff(before, after):
    lines = []
    for rel in sorted(set(before) | set(after)):
        a, b = before.get(rel), after.get(rel)
        if a is None or b is None:
            lines.append(f"{rel}: {'missing after remount' if b is None else 'new after remount'}")
            continue
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                lines.append(f"{rel}: {k} {a.get(k)!r} -> {b.get(k)!r}")
    return lines


def test_clean_unmount_keeps_everything(test_base, rampart_env, cleanup_mounts):
    m = new_mount(test_base, rampart_env, "clean", cleanup_mounts)
    _build_tree(os.path.join(m.path, "tree"))
    before = _snapshot(m.path)
    unmount(m)
    # a clean unmount ends with a final checkpoint and an empty journal: nothing to replay
    assert os.path.getsize(m.store / "journal") == HEADER_BYTES + ZEROS_AHEAD_BYTES, (
        "the journal holds batches after a clean unmount")
    # The tree's bytes: in the checkpoint, or (files past the large-file threshold) in their
    # host files of the data folder, which the checkpoint refers to.
    host_bytes = sum(os.path.getsize(p) for p in (m.store / "data").iterdir())
    assert os.path.getsize(m.store / "checkpoint") + host_bytes > 3 * MiB
    r = fsck(m)
    assert r.returncode == 0, f"fsck after a clean unmount: {r.stdout}{r.stderr}"
    remount(m)
    after = _snapshot(m.path)
    assert not _diff(before, after), "after remounting:\n" + "\n".join(_diff(before, after))
    assert len(before) >= 25
    # and once more, from the checkpoint written by this (unchanged) mount
    unmount(m)
    remount(m)
    again = _snapshot(m.path)
    assert not _diff(before, again), "after a second remount:\n" + "\n".join(_diff(before, again))
    unmount(m)
    assert_no_panic(m)


# ---- kill -9 under load: every fsync'd file survives ------------------------------------------

_WORKER = r"""
import hashlib, json, os, random, sys, time
root, wid, seed, log_path, deadline = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
rng = random.Random(seed)
log = open(log_path, "a", buffering=1)
live = []  # files never fsync'd: they may still be appended to, renamed, deleted
n = 0
try:
    while time.time() < deadline:
        n += 1
        op = rng.random()
        if op < 0.45 or not live:
            rel = f"s{rng.randrange(4)}/w{wid}_{n}"
            size = rng.choice([0, 1, 100, 4096, 50_000, 65_536, 70_000, 300_000])
            data = rng.randbytes(size)
            fd = os.open(os.path.join(root, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            at = 0
            while at < size:  # appends of various sizes
                step = rng.choice([1000, 4096, 65536])
                os.write(fd, data[at:at + step])
                at += step
            if rng.random() < 0.4:
                os.fsync(fd)
                os.close(fd)
                # written once, fsync'd, never touched again: it must survive exactly
                log.write(json.dumps({"path": rel, "size": size, "sha": hashlib.sha256(data).hexdigest()}) + "\n")
            else:
                os.close(fd)
                live.append(rel)
        elif op < 0.62:
            os.unlink(os.path.join(root, live.pop(rng.randrange(len(live)))))
        elif op < 0.77:
            fd = os.open(os.path.join(root, rng.choice(live)), os.O_WRONLY | os.O_APPEND)
            os.write(fd, rng.randbytes(rng.choice([10, 5000, 70_000])))
            os.close(fd)
        elif op < 0.92:
            i = rng.randrange(len(live))
            new = f"s{rng.randrange(4)}/w{wid}_{n}r"
            os.rename(os.path.join(root, live[i]), os.path.join(root, new))
            live[i] = new
        else:
            with open(os.path.join(root, rng.choice(live)), "rb") as f:
                f.read()
except OSError as e:
    log.write(json.dumps({"stopped": repr(e)}) + "\n")
"""


@pytest.mark.parametrize("writeback,checkpoint_after", [("on", "256M"), ("off", "256M"), ("on", "64K")],
                         ids=["writeback-cache", "no-writeback-cache", "background-checkpoints"])
def test_kill9_under_load_keeps_every_fsynced_file(test_base, rampart_env, cleanup_mounts, writeback,
                                                   checkpoint_after):
    # With --checkpoint-after 64K a checkpoint runs in the background every few commits, so the
    # kill lands before, during or after one.
    m = new_mount(test_base, rampart_env, f"load-{writeback}-{checkpoint_after}", cleanup_mounts,
                  opts=("--writeback-cache", writeback, "--checkpoint-after", checkpoint_after))
    root = os.path.join(m.path, "pm")
    os.mkdir(root)
    for i in range(4):
        os.mkdir(os.path.join(root, f"s{i}"))
    fsync_path(root)
    logs = [os.path.join(test_base, f"worker{i}.log") for i in range(4)]
    deadline = time.time() + 60
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, root, str(i), str(1000 + i), logs[i], str(deadline)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in range(4)]
    try:
        # let them work, until enough files were fsync'd (bounded)
        def synced():
            return sum(sum(1 for line in open(p) if '"sha"' in line) for p in logs if os.path.exists(p))
        time.sleep(1.5)
        wait_until(lambda: synced() >= 20, timeout=20, interval=0.1)
        if checkpoint_after == "64K":
            def checkpoints():
                r = cli("status", "--json", m.path, env=m.env)
                return json.loads(r.stdout)["persistence"]["checkpoints"] if r.returncode == 0 else 0
            assert wait_until(lambda: checkpoints() >= 3, timeout=20, interval=0.1), \
                "no background checkpoints ran under the load"
        crash(m)
        for w in workers:
            w.wait(timeout=EXIT_WAIT)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    for w in workers:
        err = w.stderr.read().decode(errors="replace")
        assert "Traceback" not in err, f"a worker failed: {err}"
    records = []
    stops = []
    for p in logs:
        for line in open(p):
            rec = json.loads(line)
            (records if "sha" in rec else stops).append(rec)
    assert len(records) >= 5, f"only {len(records)} files were fsync'd before the kill; stops: {stops}"
    assert stops, "the workers should have been stopped by the dead mount"
    # fsck while unmounted, before remounting: clean (a torn tail is benign)
    assert_fsck_clean_after_crash(m)
    remount(m)
    missing, wrong = [], []
    for rec in records:
        p = os.path.join(root, rec["path"])
        if not os.path.exists(p):
            missing.append(rec["path"])
            continue
        data = read_file(p)
        if len(data) != rec["size"] or hashlib.sha256(data).hexdigest() != rec["sha"]:
            wrong.append(f"{rec['path']}: {len(data)} bytes, expected {rec['size']}")
    assert not missing and not wrong, (f"of {len(records)} fsync'd files, missing: {missing[:10]}, "
                                      f"wrong content: {wrong[:10]}")
    # the recovered tree is whole: everything in it can be listed, read and stat'ed
    for dirpath, dirnames, filenames in os.walk(m.path):
        for n in filenames:
            read_file(os.path.join(dirpath, n))
    unmount(m)
    r = fsck(m)
    assert r.returncode == 0, f"fsck after the remount's clean unmount:\n{r.stdout}{r.stderr}"
    assert_no_panic(m)


# ---- group commit, renames, O_SYNC ---------------------------------------------------------------

def test_fsync_of_one_file_makes_earlier_changes_durable(test_base, rampart_env, cleanup_mounts):
    m = new_mount(test_base, rampart_env, "group", cleanup_mounts)
    a = os.path.join(m.path, "A")
    b = os.path.join(m.path, "B")
    os.mkdir(os.path.join(m.path, "dirA"))
    write_file(a, b"written before B, never fsync'd itself")
    write_synced(b, b"B")
    crash(m)
    remount(m)
    assert os.path.isdir(os.path.join(m.path, "dirA")), "a directory made before fsync(B) was lost"
    assert os.path.exists(a), "A, created before fsync(B), was lost: group commit should have made it durable"
    assert read_file(a) == b"written before B, never fsync'd itself"
    assert read_file(b) == b"B"
    unmount(m)
    assert_no_panic(m)


def test_bytes_written_to_a_file_kept_open_are_durable_within_the_commit_interval(test_base, rampart_env,
                                                                                 cleanup_mounts):
    """Under the writeback cache the kernel holds written pages until it writes them back (up
    to 30 s); the daemon's page flusher sends them so the commit interval holds (decision 0026).
    Interval 1 s, crash 6 s after the write, file never closed nor fsync'd."""
    m = new_mount(test_base, rampart_env, "openlog", cleanup_mounts, opts=("--commit-interval", "1s"))
    p = os.path.join(m.path, "log")
    data = os.urandom(12345)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
        time.sleep(6)
        crash(m)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    remount(m)
    assert read_file(p) == data, "bytes written 6 s before the crash were lost (commit interval 1 s)"
    unmount(m)
    assert_no_panic(m)


def test_flushing_later_does_not_change_the_times(test_base, rampart_env, cleanup_mounts):
    """The kernel stamps mtime and ctime at write(2) under the writeback cache; the WRITE that
    carries the pages may come seconds later, and its time must not replace the kernel's."""
    m = new_mount(test_base, rampart_env, "flushtimes", cleanup_mounts)
    p = os.path.join(m.path, "f")
    write_file(p, b"a")
    fd = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(fd, b"b", 1)
        time.sleep(2.5)  # the WRITE comes with the page flusher's syncfs or the close, seconds later
    finally:
        os.close(fd)
    st = os.stat(p)
    unmount(m)
    remount(m)
    again = os.stat(p)
    assert (again.st_mtime_ns, again.st_ctime_ns) == (st.st_mtime_ns, st.st_ctime_ns), \
        f"times moved across a remount: {st.st_mtime_ns, st.st_ctime_ns} -> {again.st_mtime_ns, again.st_ctime_ns}"
    assert read_file(p) == b"ab"
    unmount(m)
    assert_no_panic(m)


def test_times_before_the_epoch_survive_a_remount(test_base, rampart_env, cleanup_mounts):
    """A time before 1970 with a fraction of a second reaches the store as set: the kernel
    sends it as floored seconds and nanoseconds counted forwards (-315619200 s + 0.25 s), and
    the daemon once read it 0.5 s early; the writeback cache hid that until a remount."""
    m = new_mount(test_base, rampart_env, "pre-epoch", cleanup_mounts)
    p = os.path.join(m.path, "f")
    write_file(p, b"")
    t = -315_619_200 * 10**9 + 250_000_000  # 1960-01-01 00:00:00.25
    early = -1 * 10**9 + 1  # 1969-12-31 23:59:59.000000001
    os.utime(p, ns=(early, t))
    os.mkdir(os.path.join(m.path, "d"))
    os.utime(os.path.join(m.path, "d"), ns=(t, early))
    unmount(m)
    remount(m)
    st = os.stat(p)
    assert (st.st_atime_ns, st.st_mtime_ns) == (early, t)
    st = os.stat(os.path.join(m.path, "d"))
    assert (st.st_atime_ns, st.st_mtime_ns) == (t, early)
    unmount(m)
    assert_no_panic(m)


@pytest.mark.parametrize("replace", [False, True], ids=["new-name", "replacing"])
@pytest.mark.parametrize("how", ["fsync-file", "fsyncdir", "fsyncdir-old-parent"])
def test_rename_durability(test_base, rampart_env, cleanup_mounts, how, replace):
    m = new_mount(test_base, rampart_env, f"rename-{how}-{replace}", cleanup_mounts)
    d1 = os.path.join(m.path, "d1")
    d2 = os.path.join(m.path, "d2")
    os.mkdir(d1)
    os.mkdir(d2)
    write_synced(os.path.join(d1, "old"), b"the renamed content")
    if replace:
        write_synced(os.path.join(d2, "target"), b"the replaced content")
    write_synced(os.path.join(d1, "plain"), b"moved within its directory")
    # a rename across directories (replacing a file, or to a new name), and one within a directory
    os.rename(os.path.join(d1, "old"), os.path.join(d2, "target"))
    os.rename(os.path.join(d1, "plain"), os.path.join(d1, "plain2"))
    if how == "fsync-file":
        fsync_path(os.path.join(d2, "target"))
    elif how == "fsyncdir":
        fsync_path(d2)
    else:
        fsync_path(d1)
    crash(m)
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert sorted(os.listdir(d1)) == ["plain2"], f"d1 holds {os.listdir(d1)}"
    assert sorted(os.listdir(d2)) == ["target"], f"d2 holds {os.listdir(d2)}"
    assert read_file(os.path.join(d2, "target")) == b"the renamed content"
    assert read_file(os.path.join(d1, "plain2")) == b"moved within its directory"
    assert os.stat(os.path.join(d2, "target")).st_nlink == 1
    unmount(m)
    assert_no_panic(m)


@pytest.mark.parametrize("how", ["unlink", "rename-over", "unlinked-open-file"])
def test_changes_to_inodes_without_names_replay(test_base, rampart_env, cleanup_mounts, how):
    """Ops the kernel sends for an inode after its last name went away (it still holds the
    inode: with the writeback cache, a SETATTR of its times after an unlink or a rename over
    it; a write to an unlinked open file) must not keep the journal from replaying. They apply
    live, but replay frees the inode at its unlink (recovery holds no kernel references): if
    they were journaled, replay would fail with ENOENT and the store would not mount."""
    m = new_mount(test_base, rampart_env, f"orphan-{how}", cleanup_mounts)
    x = os.path.join(m.path, "x")
    write_file(x, b"a" * 5000)
    if how == "unlink":
        os.unlink(x)
    elif how == "rename-over":
        write_file(os.path.join(m.path, "y"), b"the new x")
        os.rename(os.path.join(m.path, "y"), x)
    else:
        fd = os.open(x, os.O_RDWR)
        os.unlink(x)
        os.pwrite(fd, b"written after the unlink", 100)
        os.fsync(fd)
        os.close(fd)
    write_synced(os.path.join(m.path, "kept"), b"fsync'd after it")
    crash(m)
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(os.path.join(m.path, "kept")) == b"fsync'd after it"
    if how == "rename-over":
        assert read_file(x) == b"the new x"
        assert not os.path.exists(os.path.join(m.path, "y"))
    else:
        assert not os.path.exists(x)
    unmount(m)
    assert_no_panic(m)


@pytest.mark.parametrize("flag", ["O_SYNC", "O_DSYNC"])
def test_sync_writes_are_durable_when_write_returns(test_base, rampart_env, cleanup_mounts, flag):
    m = new_mount(test_base, rampart_env, f"osync-{flag}", cleanup_mounts)
    p = os.path.join(m.path, "synced")
    data = random.Random(3).randbytes(100_000)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | getattr(os, flag), 0o644)
    try:
        assert os.write(fd, data[:40_000]) == 40_000
        assert os.write(fd, data[40_000:]) == 60_000
        crash(m)  # with the file still open: no close, no flush
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    remount(m)
    assert os.path.exists(p), f"a file written with {flag} was lost"
    assert read_file(p) == data, f"{flag} write: {os.path.getsize(p)} bytes survived of {len(data)}"
    unmount(m)
    assert_no_panic(m)


# ---- damaged store files -----------------------------------------------------------------------

def test_torn_journal_tail_mounts_with_earlier_batches(test_base, rampart_env, cleanup_mounts):
    m, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "torn", n=3)
    journal = m.store / "journal"
    data = journal.read_bytes()
    # tear the batch that holds the last file's write in the middle, as a crash during its
    # write over the zeros kept ahead would (its second half never written; the file keeps
    # its length, docs/decisions/0038): everything from there on is a torn tail
    last_path, last_content, last_end = files[-1]
    start, end, _, _ = batch_ending_at(data, last_end)
    torn = bytearray(data)
    torn[start + (end - start) // 2:end] = bytes(end - (start + (end - start) // 2))
    journal.write_bytes(bytes(torn))
    r = fsck(m)
    assert r.returncode == 0, f"a torn tail alone is clean:\n{r.stdout}{r.stderr}"
    assert "torn" in r.stdout, r.stdout
    remount(m)
    for p, content, _ in files[:-1]:
        assert read_file(p) == content, f"{p}: an earlier batch was not recovered"
    assert not (os.path.exists(last_path) and read_file(last_path) == last_content), \
        "the torn batch's write was applied"
    # the mount goes on appending after the valid prefix
    write_synced(os.path.join(m.path, "after"), b"after the torn tail")
    crash(m)
    r = fsck(m)
    assert r.returncode == 0, r.stdout + r.stderr
    remount(m)
    assert read_file(os.path.join(m.path, "after")) == b"after the torn tail"
    assert read_file(files[0][0]) == files[0][1]
    unmount(m)
    assert_no_panic(m)


def test_journal_reserves_zeros_ahead_and_a_write_torn_into_them_recovers(test_base, rampart_env, cleanup_mounts):
    """Commits write over zeros reserved after the journal's last batch (docs/FORMAT.md): the
    zeros are a clean end, and a batch torn into them is a torn tail like any other."""
    m, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "reserve", n=3)
    journal = m.store / "journal"
    data = journal.read_bytes()
    end = files[-1][2]
    assert len(data) - end >= MiB, f"no zeros reserved after the last batch: {len(data)} bytes, batches end at {end}"
    r, rep = fsck_json(m)
    assert r.returncode == 0 and rep["clean"], rep
    j = rep["journal"]
    assert j["tail"] == {"state": "clean"} and j["valid_bytes"] == end and j["reserved_bytes"] == len(data) - end, j
    assert "reserved ahead" in fsck(m).stdout
    # A fourth batch cut by a crash, its first half written over the zeros.
    start, _, _, _ = batch_ending_at(data, end)
    torn = data[start:start + (end - start) // 2]
    with open(journal, "r+b") as f:
        f.seek(end)
        f.write(torn)
    r, rep = fsck_json(m)
    assert r.returncode == 0 and rep["journal"]["tail"]["state"] == "torn", rep["journal"]
    remount(m)
    for p, content, _ in files:
        assert read_file(p) == content
    # The mount cut the journal back to its batches; what it writes next is followed by zeros.
    write_synced(os.path.join(m.path, "after"), b"after")
    assert journal_len(m) > end
    crash(m)
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(os.path.join(m.path, "after")) == b"after"
    unmount(m)
    assert_no_panic(m)


def _refused(m, *words):
    """Mounting m is refused with a message containing every word; nothing is mounted and the
    store's files are left untouched."""
    before = store_bytes(m)
    r = m.cli("mount", m.store, m.path)
    assert r.returncode == 1, f"mount exited {r.returncode}: {r.stdout}{r.stderr}"
    for w in words:
        assert w in r.stderr, f"the refusal does not mention {w!r}: {r.stderr!r}"
    assert not in_mount_table(m.path)
    assert store_bytes(m) == before, "a refused mount changed the store's files"
    return r.stderr


def _clean_store_with_files(test_base, env, cleanup, name):
    m = new_mount(test_base, env, name, cleanup)
    for i in range(50):
        write_file(os.path.join(m.path, f"f{i:02}"), os.urandom(2000))
    unmount(m)
    return m


def test_damaged_checkpoint_refused(test_base, rampart_env, cleanup_mounts):
    m = _clean_store_with_files(test_base, rampart_env, cleanup_mounts, "badckpt")
    p = m.store / "checkpoint"
    data = bytearray(p.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 16] = b"\xde\xad\xbe\xef" * 4
    p.write_bytes(bytes(data))
    err = _refused(m, "checkpoint")
    assert "damaged" in err or "checksum" in err, err


def test_superblock_of_unknown_version_refused(test_base, rampart_env, cleanup_mounts):
    m = _clean_store_with_files(test_base, rampart_env, cleanup_mounts, "v99")
    p = m.store / "superblock"
    data = bytearray(p.read_bytes())
    assert len(data) == 64 and crc32c(data[:60]) == struct.unpack_from("<I", data, 60)[0]
    assert struct.unpack_from("<I", data, 8)[0] == 1
    struct.pack_into("<I", data, 8, 99)
    struct.pack_into("<I", data, 60, crc32c(data[:60]))
    p.write_bytes(bytes(data))
    err = _refused(m, "99", "version 1", str(m.store))


def test_damaged_journal_refused_then_repaired_by_fsck(test_base, rampart_env, cleanup_mounts):
    m, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "badjournal", n=3)
    journal = m.store / "journal"
    data = bytearray(journal.read_bytes())
    # a flipped bit in the batch of the second file: durable batches (the third file's) follow
    start, end, _, _ = batch_ending_at(data, files[1][2])
    assert end < len(data)
    data[start + BATCH_HEADER_BYTES + (end - start - BATCH_HEADER_BYTES) // 2] ^= 0x08
    journal.write_bytes(bytes(data))
    err = _refused(m, "journal", "fsck --repair")
    assert "damaged" in err, err
    r = fsck(m)
    assert r.returncode == 1, f"fsck of a damaged journal exited {r.returncode}: {r.stdout}{r.stderr}"
    r = fsck(m, "--repair")
    assert r.returncode == 0, f"fsck --repair exited {r.returncode}:\n{r.stdout}{r.stderr}"
    r = fsck(m)
    assert r.returncode == 0, f"fsck after the repair is not clean:\n{r.stdout}{r.stderr}"
    remount(m)
    assert read_file(files[0][0]) == files[0][1], "the batches before the damage were lost"
    # the file system works on: write, unmount, mount
    write_file(os.path.join(m.path, "new"), b"after the repair")
    unmount(m)
    remount(m)
    assert read_file(os.path.join(m.path, "new")) == b"after the repair"
    unmount(m)
    assert fsck(m).returncode == 0
    assert_no_panic(m)


# ---- a full disk under the store: umount says what was not saved ----------------------------

def test_umount_reports_a_final_checkpoint_that_failed(test_base, rampart_env, cleanup_mounts):
    """The store on a small file system that fills up: fsync then fails with EIO, and the
    final checkpoint at unmount fails too. `rampart umount` must say so (exit 1), not report a
    clean unmount; what was fsync'd before the disk filled is there at the next mount."""
    image, disk = os.path.join(test_base, "disk.img"), os.path.join(test_base, "disk")
    os.mkdir(disk)
    run(["truncate", "-s", "48M", image], check=True, timeout=60)
    run(["mkfs.ext4", "-q", "-F", image], check=True, timeout=120)
    r = run(["mount", "-o", "loop", image, disk], timeout=60)
    if r.returncode != 0:
        pytest.skip(f"cannot loop-mount a file system here: {r.stderr.strip()}")
    try:
        m = Mount(disk, "full", env=rampart_env)
        cleanup_mounts.append(m)
        m.mount()
        synced = {}
        chunk = os.urandom(MiB)
        for i in range(200):
            path = os.path.join(m.path, f"f{i}")
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                os.write(fd, chunk)
                os.fsync(fd)
            except OSError:
                break
            finally:
                os.close(fd)
            synced[f"f{i}"] = hashlib.sha256(chunk).hexdigest()
        else:
            pytest.fail("200 MiB fitted on a 48 MiB disk: the store is not on it")
        assert synced, "not even the first fsync fitted"
        write_file(os.path.join(m.path, "unsaved"), os.urandom(2 * MiB))
        assert m.alive(), "the daemon died when its disk filled"
        r = m.umount()
        assert r.returncode == 1, f"umount exit {r.returncode}, stderr {r.stderr!r}"
        assert "shutdown failed" in r.stderr and "final checkpoint failed" in r.stderr, r.stderr
        m.mounted = False
        assert wait_until(lambda: not m.pid or not pid_alive(m.pid), EXIT_WAIT)
        # Room again (what was never durable is gone; what was fsync'd must not be).
        run(["rm", "-rf", os.path.join(disk, "lost+found")], timeout=60)
        m.mount(mkfs=False)
        for name, digest in synced.items():
            assert hashlib.sha256(read_file(os.path.join(m.path, name))).hexdigest() == digest, name
        r = m.umount()
        assert r.returncode == 0, r.stderr
        r = fsck(m)
        assert r.returncode == 0, f"fsck:\n{r.stdout}\n{r.stderr}"
    finally:
        if in_mount_table(os.path.join(disk, "full-mnt")):
            run(["fusermount3", "-u", "-z", os.path.join(disk, "full-mnt")], timeout=60)
        run(["umount", "-l", disk], timeout=60)


def _missing_journal_refused_then_repaired(m):
    """The mount refuses a store whose journal is missing, fsck reports it (exit 1),
    `fsck --repair` accepts the loss (exit 0), and the store mounts again."""
    _refused(m, "journal is missing", "fsck --repair")
    r = fsck(m)
    assert r.returncode == 1 and "missing" in r.stdout, f"fsck exit {r.returncode}:\n{r.stdout}{r.stderr}"
    r = fsck(m, "--repair")
    assert r.returncode == 0, f"fsck --repair exit {r.returncode}:\n{r.stdout}{r.stderr}"
    remount(m)


def test_a_missing_journal_is_refused_not_silently_skipped(test_base, rampart_env, cleanup_mounts):
    """A checkpoint without its journal means the journal was deleted, and the fsync'd changes
    after the checkpoint with it: mount refuses, fsck reports it, `fsck --repair` accepts the
    loss and the checkpoint's state mounts."""
    m = new_mount(test_base, rampart_env, "nojournal", cleanup_mounts)
    write_file(os.path.join(m.path, "in-checkpoint"), b"A")
    unmount(m)  # a checkpoint
    remount(m)
    write_synced(os.path.join(m.path, "in-journal"), b"B")
    crash(m)
    os.unlink(m.store / "journal")
    _missing_journal_refused_then_repaired(m)
    assert read_file(os.path.join(m.path, "in-checkpoint")) == b"A"
    assert not os.path.exists(os.path.join(m.path, "in-journal"))
    unmount(m)
    assert_no_panic(m)


def test_a_missing_journal_before_any_checkpoint_is_refused_not_an_empty_mount(test_base, rampart_env,
                                                                               cleanup_mounts):
    """Mounted, fsync'd, crashed before any checkpoint, then the journal deleted: the journal
    held every change, so the mount must not show an empty file system (it did, and fsck said
    clean); the store's `reserve` file says it was mounted (decision 0107)."""
    m = new_mount(test_base, rampart_env, "nojournal0", cleanup_mounts)
    write_synced(os.path.join(m.path, "in-journal"), b"B")
    crash(m)
    assert not (m.store / "checkpoint").exists() and (m.store / "reserve").exists()
    os.unlink(m.store / "journal")
    _missing_journal_refused_then_repaired(m)
    assert os.listdir(m.path) == []
    unmount(m)
    assert_no_panic(m)

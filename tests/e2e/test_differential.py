"""Differential tests: the same random sequence of system calls on a rampart mount and on a
tmpfs beside it. Every call must give the same result (success or the same errno), the two
trees must be equal (types, modes, owners, link counts, sizes, bytes, symlink targets, user
xattrs, which names are hard links of one file), and they must stay equal across `rampart
sync` + `kill -9` + remount and across a clean remount.

The crash test goes further: with the kernel's writeback cache off every call reaches the
daemon in the order it was made, so after a `kill -9` at a random call (no sync) the
recovered tree must be the tree after *some prefix* of the calls (the journal is applied in
order: nothing later without everything earlier), and no shorter than the last `rampart
sync`. On the disk tier the bytes of a file are not part of that order, as on ext4 with
data=ordered: an overwrite reaches the host file before its record is journaled (decision
0057), and a passthrough write never passes the daemon (its size is logged at close, 0058),
so a crash can keep newer bytes than the names around them. There only the namespace
(names, types, modes, links, symlink targets, xattrs) must be a prefix.

Names are drawn from five letters at depth 1-3, so calls collide often: renames over
existing files and directories, into their own subtrees, links to directories, rmdir of
non-empty directories. File sizes reach 3 MB, so with a 64 KiB large-file threshold files
cross into the disk tier and back."""

import errno
import hashlib
import os
import random
import stat
import subprocess

import pytest

from e2e_helpers import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, Mount, cli, crash, fallocate,
                         remount, renameat2, run, unmount)

pytestmark = pytest.mark.rampart_only("compares a rampart mount with tmpfs")

XATTR_NAMES = ("user.x", "user.y")
# Added to every seed: RAMPART_E2E_DIFF_SEED=N runs other sequences (a longer hunt).
SEED_OFFSET = int(os.environ.get("RAMPART_E2E_DIFF_SEED", "0"))


def snapshot(root):
    """Everything a program can see of the tree that two equal file systems must agree on
    (no inode numbers or times), plus the groups of names that are one file."""
    entries, by_ino = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            entry = [stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_nlink, st.st_uid, st.st_gid]
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    entry += [st.st_size, hashlib.sha256(f.read()).hexdigest()]
                by_ino.setdefault(st.st_ino, []).append(rel)
            elif stat.S_ISLNK(st.st_mode):
                entry.append(os.readlink(path))
            names = sorted(n for n in os.listxattr(path, follow_symlinks=False) if n.startswith("user."))
            entry += [(n, os.getxattr(path, n, follow_symlinks=False)) for n in names]
            entries[rel] = tuple(entry)
    links = sorted(tuple(sorted(names)) for names in by_ino.values() if len(names) > 1)
    return entries, links


def namespace_only(snap):
    """A snapshot without the sizes and bytes of regular files."""
    entries, links = snap
    return {k: (v[:5] + v[7:] if v[0] == stat.S_IFREG else v) for k, v in entries.items()}, links


def describe_difference(want, got):
    keys = sorted(set(want[0]) | set(got[0]))
    diff = [(k, want[0].get(k), got[0].get(k)) for k in keys if want[0].get(k) != got[0].get(k)]
    return f"{len(diff)} names differ (tmpfs, rampart), first: {diff[:4]}; hard links equal: {want[1] == got[1]}"


class Calls:
    """A seeded stream of system calls on short colliding names."""

    KINDS = (["mkdir"] * 3 + ["rmdir"] * 2 + ["create"] * 4 + ["write"] * 5 + ["truncate"] * 2
             + ["unlink"] * 3 + ["rename"] * 4 + ["renameat2"] * 2 + ["link"] * 2 + ["symlink", "chmod",
             "setxattr", "removexattr", "fallocate", "mkfifo", "append", "copy_file_range",
             "tmpfile", "write_unlinked"])

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def name(self):
        return "/".join(self.rng.choice("abcde") for _ in range(self.rng.randint(1, 3)))

    def next(self):
        r = self.rng
        kind = r.choice(self.KINDS)
        a, b = self.name(), self.name()
        if kind == "write":
            offset = r.choice([0, r.randint(0, 70_000), r.randint(0, 3_000_000)])
            return (kind, a, offset, r.randint(1, 20_000), r.randint(0, 255))
        if kind == "truncate":
            return (kind, a, r.choice([0, r.randint(0, 100_000), r.randint(0, 3_000_000)]))
        if kind == "renameat2":
            return (kind, a, b, r.choice([1, 2]))  # RENAME_NOREPLACE, RENAME_EXCHANGE
        if kind == "chmod":
            return (kind, a, r.choice([0o644, 0o600, 0o755, 0o4755, 0o1777]))
        if kind == "setxattr":
            return (kind, a, r.choice(XATTR_NAMES), bytes([r.randint(0, 255)]) * r.randint(0, 300))
        if kind == "removexattr":
            return (kind, a, r.choice(XATTR_NAMES))
        if kind in ("append", "write_unlinked", "tmpfile"):
            return (kind, a, b, r.randint(1, 5_000), r.randint(0, 255))
        if kind == "copy_file_range":
            return (kind, a, b, r.randint(0, 100_000), r.randint(0, 100_000), r.randint(1, 200_000))
        if kind == "fallocate":
            mode = r.choice([0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE])
            return (kind, a, mode, r.randint(0, 200_000), r.randint(1, 100_000))
        return (kind, a, b)


def call(root, c):
    """Makes call `c` under `root`; its errno, 0 on success."""
    kind = c[0]
    # O_NONBLOCK: opening a FIFO for writing fails (ENXIO) instead of waiting for a reader.
    nb = os.O_NONBLOCK
    p = lambda rel: os.path.join(root, rel)  # noqa: E731
    try:
        if kind == "mkdir":
            os.mkdir(p(c[1]))
        elif kind == "rmdir":
            os.rmdir(p(c[1]))
        elif kind == "create":
            os.close(os.open(p(c[1]), os.O_CREAT | os.O_EXCL | os.O_WRONLY | nb, 0o644))
        elif kind in ("write", "fallocate"):
            fd = os.open(p(c[1]), os.O_WRONLY | nb)
            try:
                if kind == "write":
                    os.pwrite(fd, bytes([c[4]]) * c[3], c[2])
                else:
                    fallocate(fd, c[2], c[3], c[4])
            finally:
                os.close(fd)
        elif kind == "truncate":
            os.truncate(p(c[1]), c[2])
        elif kind == "unlink":
            os.unlink(p(c[1]))
        elif kind == "rename":
            os.rename(p(c[1]), p(c[2]))
        elif kind == "renameat2":
            renameat2(p(c[1]), p(c[2]), c[3])
        elif kind == "link":
            os.link(p(c[1]), p(c[2]))
        elif kind == "symlink":
            os.symlink(c[2], p(c[1]))
        elif kind == "mkfifo":
            os.mkfifo(p(c[1]), 0o640)
        elif kind == "append":
            fd = os.open(p(c[1]), os.O_WRONLY | os.O_APPEND | nb)
            try:
                os.write(fd, bytes([c[4]]) * c[3])
            finally:
                os.close(fd)
        elif kind == "copy_file_range":
            src = os.open(p(c[1]), os.O_RDONLY | nb)
            try:
                dst = os.open(p(c[2]), os.O_WRONLY | nb)
                try:
                    os.copy_file_range(src, dst, c[5], c[3], c[4])
                finally:
                    os.close(dst)
            finally:
                os.close(src)
        elif kind == "write_unlinked":
            # A file written after its last name is gone: nothing of it may remain.
            fd = os.open(p(c[1]), os.O_RDWR | nb)
            try:
                os.unlink(p(c[1]))
                os.write(fd, bytes([c[4]]) * c[3])
            finally:
                os.close(fd)
        elif kind == "tmpfile":
            # An unnamed file in directory c[1], written, then given the name c[2].
            fd = os.open(p(c[1]), os.O_TMPFILE | os.O_RDWR, 0o600)
            try:
                os.write(fd, bytes([c[4]]) * c[3])
                os.link(f"/proc/self/fd/{fd}", p(c[2]), follow_symlinks=True)
            finally:
                os.close(fd)
        elif kind == "chmod":
            os.chmod(p(c[1]), c[2])  # follows a symlink, as chmod(2) does
        elif kind == "setxattr":
            os.setxattr(p(c[1]), c[2], c[3], follow_symlinks=False)
        elif kind == "removexattr":
            os.removexattr(p(c[1]), c[2], follow_symlinks=False)
        return 0
    except OSError as e:
        return e.errno


def _name(e):
    return errno.errorcode.get(e, str(e)) if e else "ok"


@pytest.fixture
def pair(test_base, rampart_env, cleanup_mounts):
    """make(opts) -> (tmpfs path, rampart Mount)."""
    tmpfs = []

    def make(*opts):
        ref = os.path.join(test_base, "tmpfs")
        os.mkdir(ref)
        run(["mount", "-t", "tmpfs", "-o", "mode=0755", "rampart-diff", ref], check=True)
        tmpfs.append(ref)
        m = Mount(test_base, "r", opts=opts, env=rampart_env)
        cleanup_mounts.append(m)
        m.mount()
        assert m.pid, f"no daemon pid ({m.pid_source})"
        return ref, m

    yield make
    for ref in tmpfs:
        subprocess.run(["umount", ref])


def _assert_fsck_clean(m):
    r = cli("fsck", m.store, env=m.env)
    assert r.returncode == 0, f"fsck after the run: exit {r.returncode}: {r.stdout} {r.stderr}"


@pytest.mark.parametrize("seed,opts", [
    (1, ()),
    (2, ("--large-file-threshold", "64K", "--checkpoint-after", "64K")),
    (3, ("--writeback-cache", "off", "--memory-cap", "8M")),
    (4, ("--passthrough", "on", "--large-file-threshold", "64K")),
], ids=["default", "disk-tier-checkpoints", "no-writeback-8M-cap", "passthrough-disk-tier"])
def test_same_calls_same_results_and_tree_across_crash_and_remount(pair, seed, opts):
    ref, m = pair(*opts)
    seed += SEED_OFFSET
    calls = Calls(seed)
    for i in range(1000):
        c = calls.next()
        want, got = call(ref, c), call(str(m.path), c)
        assert want == got, f"call {i} {c[:3]}: tmpfs {_name(want)}, rampart {_name(got)}"
        if i % 250 == 249:
            a, b = snapshot(ref), snapshot(m.path)
            assert a == b, f"after call {i}: {describe_difference(a, b)}"
    want = snapshot(ref)
    assert cli("sync", m.path, env=m.env).returncode == 0
    crash(m)
    remount(m)
    got = snapshot(m.path)
    assert got == want, f"after rampart sync + kill -9: {describe_difference(want, got)}"
    unmount(m)
    remount(m)
    got = snapshot(m.path)
    assert got == want, f"after a clean remount: {describe_difference(want, got)}"
    unmount(m)
    _assert_fsck_clean(m)


@pytest.mark.parametrize("seed,opts,view", [
    (11, ("--commit-interval", "20ms", "--checkpoint-after", "64K", "--large-file-threshold", "off"), None),
    (12, ("--commit-interval", "200ms", "--large-file-threshold", "off"), None),
    (13, ("--commit-interval", "20ms", "--large-file-threshold", "64K", "--checkpoint-after", "128K"),
     namespace_only),
    (14, ("--commit-interval", "20ms", "--passthrough", "on", "--large-file-threshold", "64K"), namespace_only),
], ids=["checkpoints", "slower-commits", "disk-tier-namespace", "passthrough-namespace"])
def test_a_crash_recovers_a_prefix_of_the_calls_no_older_than_the_last_sync(pair, seed, opts, view):
    view = view or (lambda snap: snap)
    ref, m = pair("--writeback-cache", "off", *opts)
    seed += SEED_OFFSET
    calls, rng = Calls(seed), random.Random(seed * 7 + 1)
    snapshots = [view(snapshot(ref))]
    synced = 0
    crash_after = rng.randint(250, 500)
    for i in range(crash_after):
        c = calls.next()
        want, got = call(ref, c), call(str(m.path), c)
        assert want == got, f"call {i} {c[:3]}: tmpfs {_name(want)}, rampart {_name(got)}"
        snapshots.append(view(snapshot(ref)))
        if rng.random() < 0.01:
            assert cli("sync", m.path, env=m.env).returncode == 0
            synced = len(snapshots) - 1
    crash(m)
    remount(m)
    got = view(snapshot(m.path))
    prefixes = [k for k, s in enumerate(snapshots) if s == got]
    if not prefixes:
        nearest = min(range(len(snapshots)),
                      key=lambda k: len(set(snapshots[k][0].items()) ^ set(got[0].items())))
        pytest.fail(f"crash after {crash_after} calls: the recovered tree is no prefix's; nearest is "
                    f"after {nearest} calls: {describe_difference(snapshots[nearest], got)}")
    assert max(prefixes) >= synced, (
        f"recovered the tree after {max(prefixes)} calls, older than the `rampart sync` after {synced}")
    unmount(m)
    _assert_fsck_clean(m)

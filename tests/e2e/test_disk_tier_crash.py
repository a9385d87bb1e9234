"""`kill -9` of the daemon while small and large files are written (issue 13, Acceptance: crash
tests), then a remount: `rampart fsck` clean, every fsync'd byte present, and no file holding
bytes never written to it.

Writer processes own their files and write whole 4 KiB blocks made of 64-byte records that say
which file, which block and which version they are (`F<file> B<block> V<version>`). Each writer
logs every write before it makes it and every fsync after it returns. The checker then knows,
for every block of every file, which versions were ever written there (any of them, or zeros if
the block was never acknowledged, may be found) and which version an fsync acknowledged (that
one or a later one must be found). Files grow past the 64 KiB threshold while the load runs, so
the kill lands before, during and after migrations; some files are deleted."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from disk_tier_helpers import KiB, MiB, assert_no_orphan_host_files, host_files, host_path
from e2e_helpers import EXTRA_MOUNT_OPTS, RAMPART_BIN, read_file, run, wait_until
from test_persistence import assert_fsck_clean_after_crash, crash, fsck, remount, unmount

pytestmark = pytest.mark.rampart_only("kill -9 of the rampart daemon with disk-tier files")


def _has_passthrough_option():
    r = run([RAMPART_BIN, "mount", "--help"], timeout=60)
    return "--passthrough" in r.stdout


# The kernel writes a passthrough file's host file behind the daemon: the same checks with it
# (given once: RAMPART_E2E_MOUNT_OPTS may ask for it already).
PASSTHROUGH = pytest.param(
    () if "--passthrough" in EXTRA_MOUNT_OPTS else ("--passthrough", "on"),
    marks=pytest.mark.skipif(not _has_passthrough_option(),
                             reason="this rampart binary has no --passthrough (branch passthru not merged)"),
    id="passthrough")
DAEMON_PATH = pytest.param((), id="daemon-path")

BLOCK = 4096
RECORD = 64
RECORD_RE = re.compile(rb"^F(\d{6})B(\d{8})V(\d{8})\.+\n$")
ROUNDS = 3
WORKERS = 3
EXIT_WAIT = 60

# The writer (a process). argv: root, worker id, first file id, log path, seed, deadline.
_WRITER = r"""
import json, os, random, sys, time
root, wid, fid0, log_path, seed, deadline = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
BLOCK, RECORD = 4096, 64
rng = random.Random(seed)
log = open(log_path, "a", buffering=1)
files = {}   # fid -> {"path", "kind", "ver", "blocks"}
next_fid = fid0
def block(fid, blk, ver):
    rec = ("F%06dB%08dV%08d" % (fid, blk, ver)).encode()
    rec = rec + b"." * (RECORD - 1 - len(rec)) + b"\n"
    return rec * (BLOCK // RECORD)
def say(**kw):
    log.write(json.dumps(kw) + "\n")
try:
    while time.time() < deadline:
        op = rng.random()
        if op < 0.12 or not files:
            fid = next_fid; next_fid += 1
            kind = "large" if rng.random() < 0.4 else "small"
            path = os.path.join(root, "w%d-f%06d" % (wid, fid))
            say(create=fid, path=path, kind=kind)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.close(fd)
            files[fid] = {"path": path, "kind": kind, "ver": 0, "blocks": 0}
        elif op < 0.16 and len(files) > 3:
            fid = rng.choice(sorted(files))
            f = files.pop(fid)
            say(unlink=fid)
            os.unlink(f["path"])
            dfd = os.open(root, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
            say(unlinked=fid)
        elif op < 0.22 and any(f["blocks"] for f in files.values()):
            # truncate by path (no descriptor open: a large file cut below 16 KiB may come back
            # to memory), to a whole number of blocks
            fid = rng.choice(sorted(k for k, f in files.items() if f["blocks"]))
            f = files[fid]
            new = rng.randrange(f["blocks"]) if rng.random() < 0.5 else rng.randrange(min(f["blocks"], 4))
            f["ver"] += 1
            ver = f["ver"]
            say(truncate=fid, blocks=new, ver=ver)
            os.truncate(f["path"], new * BLOCK)
            f["blocks"] = new
            if rng.random() < 0.5:
                fd = os.open(f["path"], os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                say(synced=fid, ver=ver)
        else:
            fid = rng.choice(sorted(files))
            f = files[fid]
            # small files stay below 32 KiB (threshold 64 KiB); large ones reach 3 MiB, sparse
            nblocks = 8 if f["kind"] == "small" else 768
            first = rng.randrange(nblocks)
            count = min(rng.randint(1, 4 if f["kind"] == "small" else 48), nblocks - first)
            f["ver"] += 1
            ver = f["ver"]
            say(write=fid, first=first, count=count, ver=ver)
            f["blocks"] = max(f["blocks"], first + count)
            data = b"".join(block(fid, first + i, ver) for i in range(count))
            fd = os.open(f["path"], os.O_WRONLY)
            try:
                view = memoryview(data)
                off = first * BLOCK
                while view:
                    n = os.pwrite(fd, view, off)
                    view = view[n:]
                    off += n
                if rng.random() < 0.5:
                    os.fsync(fd)
                    say(synced=fid, ver=ver)
            finally:
                os.close(fd)
except OSError as e:
    say(stopped=repr(e))
"""


class Model:
    """What the writers' logs say about each file."""

    def __init__(self):
        # fid -> {"path", "kind", "writes": [(first, count, ver)], "truncates": [(blocks, ver)], "synced_ver",
        #         "unlink": None|"try"|"done"}
        self.files = {}

    def load(self, log_path):
        stops = []
        with open(log_path) as f:
            for line in f:
                rec = json.loads(line)
                if "create" in rec:
                    self.files[rec["create"]] = {"path": rec["path"], "kind": rec["kind"], "writes": [],
                                                 "truncates": [], "synced_ver": 0, "unlink": None}
                elif "write" in rec:
                    self.files[rec["write"]]["writes"].append((rec["first"], rec["count"], rec["ver"]))
                elif "truncate" in rec:
                    self.files[rec["truncate"]]["truncates"].append((rec["blocks"], rec["ver"]))
                elif "synced" in rec:
                    f_ = self.files[rec["synced"]]
                    f_["synced_ver"] = max(f_["synced_ver"], rec["ver"])
                elif "unlink" in rec:
                    self.files[rec["unlink"]]["unlink"] = "try"
                elif "unlinked" in rec:
                    self.files[rec["unlinked"]]["unlink"] = "done"
                elif "stopped" in rec:
                    stops.append(rec["stopped"])
        return stops

    def synced_count(self):
        return sum(1 for f in self.files.values() if f["synced_ver"] > 0)

    def check(self, when):
        """Compare every file with what was written to it; returns the problems (at most a few
        per file), and the number of fsync'd blocks verified."""
        problems = []
        verified = 0
        for fid, f in sorted(self.files.items()):
            path = f["path"]
            exists = os.path.exists(path)
            if f["unlink"] == "done":
                if exists:
                    problems.append(f"{path}: unlinked and its directory fsync'd, but it is back {when}")
                continue
            # A file with an acknowledged write must exist (its creation came before the fsync).
            if not exists:
                if f["synced_ver"] and f["unlink"] is None:
                    problems.append(f"{path}: fsync'd (version {f['synced_ver']}) but missing {when}")
                continue
            synced = f["synced_ver"]
            written = {}  # block -> set of versions written there
            for first, count, ver in f["writes"]:
                for b in range(first, first + count):
                    written.setdefault(b, set()).add(ver)

            def acked_op(b):
                """(version, is_truncate) of the last fsync'd op that set block b, or (0, False)."""
                best = (0, False)
                for first, count, ver in f["writes"]:
                    if first <= b < first + count and ver <= synced and ver > best[0]:
                        best = (ver, False)
                for blocks, ver in f["truncates"]:
                    if blocks <= b and ver <= synced and ver > best[0]:
                        best = (ver, True)
                return best

            def cut_after(b, ver):
                """A truncate later than version ver cut block b (it may or may not have landed)."""
                return any(blocks <= b and v > ver for blocks, v in f["truncates"])

            data = read_file(path)
            max_end = (max(written) + 1) * BLOCK if written else 0
            # the fsync'd blocks no later truncate may have cut must be inside the file
            need_end = 0
            for b in written:
                ver, is_trunc = acked_op(b)
                if ver and not is_trunc and not cut_after(b, ver):
                    need_end = max(need_end, (b + 1) * BLOCK)
            if len(data) > max_end:
                problems.append(f"{path}: {len(data)} bytes, but nothing was written past {max_end} {when}")
            if len(data) < need_end:
                problems.append(f"{path}: {len(data)} bytes, but fsync'd blocks reach {need_end} {when}")
            if len(data) % BLOCK:
                problems.append(f"{path}: {len(data)} bytes, not a whole number of the blocks written {when}")
            bad = 0
            for b in range(len(data) // BLOCK):
                chunk = data[b * BLOCK:(b + 1) * BLOCK]
                ack_ver, ack_trunc = acked_op(b)
                allowed = {v for v in written.get(b, ()) if v >= ack_ver}
                zero_ok = ack_ver == 0 or ack_trunc or cut_after(b, ack_ver)
                for r in range(0, BLOCK, RECORD):
                    rec = chunk[r:r + RECORD]
                    if not any(rec):
                        if not zero_ok:
                            problems.append(f"{path}: block {b} fsync'd at version {ack_ver} reads zeros {when}")
                            bad += 1
                            break
                        continue
                    mt = RECORD_RE.match(rec)
                    if mt is None:
                        problems.append(f"{path}: block {b} record {r // RECORD} holds bytes never written "
                                        f"to this file: {rec[:40]!r} {when}")
                        bad += 1
                        break
                    rfid, rblk, rver = (int(x) for x in mt.groups())
                    if rfid != fid or rblk != b or rver not in written.get(b, ()):
                        problems.append(f"{path}: block {b} holds file {rfid} block {rblk} version {rver}, never "
                                        f"written there (versions written: {sorted(written.get(b, ()))}) {when}")
                        bad += 1
                        break
                    if rver not in allowed:
                        what = "truncated away" if ack_trunc else "overwritten"
                        problems.append(f"{path}: block {b} holds version {rver}, {what} by fsync'd version "
                                        f"{ack_ver} {when}")
                        bad += 1
                        break
                if ack_ver and not bad:
                    verified += 1
                if bad >= 3:
                    break
        return problems, verified


def _run_round(m, root, test_base, rnd, model, seed_base):
    logs = [os.path.join(test_base, f"round{rnd}-w{w}.log") for w in range(WORKERS)]
    deadline = time.time() + 90
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, root, str(w), str(100_000 * (rnd + 1) + 10_000 * w),
                               logs[w], str(seed_base + 31 * rnd + w), str(deadline)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for w in range(WORKERS)]
    try:
        def progress():
            probe = Model()
            n_sync = 0
            migrated = 0
            for p in logs:
                if os.path.exists(p):
                    try:
                        probe.load(p)
                    except (ValueError, KeyError):
                        pass  # a line being written
            n_sync = probe.synced_count()
            migrated = sum(1 for f in probe.files.values() if f["kind"] == "large" and f["synced_ver"])
            return n_sync >= 25 and migrated >= 4
        assert wait_until(progress, timeout=80, interval=0.2), "the writers made too little progress"
        time.sleep(0.5 + (rnd % 3) * 0.7)  # vary where the kill lands in the commit interval
        crash(m)
        for p in procs:
            p.wait(timeout=EXIT_WAIT)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p in procs:
        err = p.stderr.read().decode(errors="replace")
        assert "Traceback" not in err, f"a writer failed: {err}"
    stops = []
    for p in logs:
        stops += model.load(p)
    assert len(stops) == WORKERS, f"every writer should have been stopped by the dead mount: {stops}"


@pytest.mark.parametrize("opts", [pytest.param((), id="default-commit"),
                                  pytest.param(("--commit-interval", "200ms", "--checkpoint-after", "64K"),
                                               id="fast-commit-and-checkpoints"),
                                  PASSTHROUGH])
def test_kill_9_during_a_mixed_load_of_small_and_large_files(mount_factory, test_base, opts):
    m = mount_factory("--large-file-threshold", "64K", *opts, name="mixed")
    root = os.path.join(m.path, "load")
    os.mkdir(root)
    fd = os.open(m.path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    model = Model()
    total_verified = 0
    for rnd in range(ROUNDS):
        _run_round(m, root, test_base, rnd, model, seed_base=7 + len(opts))
        # fsck while unmounted, before the remount: clean (a torn tail is benign)
        assert_fsck_clean_after_crash(m)
        remount(m)
        problems, verified = model.check(f"after kill -9 in round {rnd}")
        assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:30])
        assert verified > 0, "no fsync'd block was verified"
        total_verified = verified
        # large files are on the disk tier, small ones are not
        on = {f["kind"]: 0 for f in model.files.values()}
        for f in model.files.values():
            if os.path.exists(f["path"]) and host_path(m, f["path"]) is not None:
                on[f["kind"]] += 1
        assert on.get("large", 0) > 0, "no large file reached the disk tier"
        assert on.get("small", 0) == 0, "a small file (< 32 KiB) is on the disk tier"
        assert_no_orphan_host_files(m)
    unmount(m)
    r = fsck(m)
    assert r.returncode == 0, f"fsck after the last clean unmount:\n{r.stdout}{r.stderr}"
    remount(m)
    problems, verified = model.check("after a clean remount")
    assert not problems, "\n".join(problems[:30])
    assert verified == total_verified


@pytest.mark.parametrize("opts", [DAEMON_PATH, PASSTHROUGH])
def test_disk_tier_bytes_are_durable_within_the_commit_interval_without_fsync(mount_factory, opts):
    """The deadline holds for disk-tier data too, also for bytes the kernel writes to the host
    file behind the daemon (passthrough): commit interval 1 s, the kill 6 s after the writes,
    the file still open and never fsync'd."""
    m = mount_factory("--large-file-threshold", "64K", "--commit-interval", "1s", *opts, name="deadline")
    p = os.path.join(m.path, "open-large")
    data = os.urandom(3 * MiB + 12345)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        n = 0
        while n < len(data):
            n += os.write(fd, data[n:n + MiB])
        time.sleep(6)
        crash(m)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(p) == data, "disk-tier bytes written 6 s before the crash were lost (commit interval 1 s)"
    assert host_path(m, p) is not None
    unmount(m)


def test_a_crash_right_after_unlinks_and_truncates_of_disk_tier_files(mount_factory):
    """fsync'd unlinks and truncates of disk-tier files, then kill -9: the files stay gone,
    the truncated ones keep their prefix and no host file is left over."""
    m = mount_factory("--large-file-threshold", "64K", name="trimcrash")
    keep = {}
    for i in range(12):
        p = os.path.join(m.path, f"f{i}")
        data = os.urandom(200 * KiB + i * 4096)
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        keep[p] = data
    assert wait_until(lambda: len(host_files(m)) == 12, timeout=60), host_files(m)
    for i in range(0, 12, 3):
        p = os.path.join(m.path, f"f{i}")
        os.unlink(p)
        del keep[p]
    for i in range(1, 12, 3):
        p = os.path.join(m.path, f"f{i}")
        os.truncate(p, 70 * KiB + 5)
        keep[p] = keep[p][:70 * KiB + 5]
    for i in range(2, 12, 3):
        p = os.path.join(m.path, f"f{i}")
        os.truncate(p, 3 * KiB)  # below threshold/4: may come back to memory
        keep[p] = keep[p][:3 * KiB]
    # a disk-tier file unlinked while open, still written: gone after the restart, host file too
    ghost = os.path.join(m.path, "ghost")
    gfd = os.open(ghost, os.O_CREAT | os.O_RDWR, 0o644)
    os.write(gfd, os.urandom(300 * KiB))
    os.fsync(gfd)
    os.unlink(ghost)
    os.pwrite(gfd, os.urandom(100 * KiB), 400 * KiB)
    fd = os.open(m.path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    try:
        crash(m)
    finally:
        try:
            os.close(gfd)
        except OSError:
            pass
    assert_fsck_clean_after_crash(m)
    remount(m)
    names = sorted(os.listdir(m.path))
    assert names == sorted(os.path.basename(p) for p in keep), names
    for p, data in keep.items():
        assert read_file(p) == data, p
    assert_no_orphan_host_files(m)
    for p, data in keep.items():
        host = host_path(m, p)
        if host is not None:
            assert os.path.getsize(host) == len(data), f"{p}: host file not trimmed after the crash"
    unmount(m)
    assert fsck(m).returncode == 0

"""Round-trip budgets: how many FUSE requests the kernel sends for common operations. Each
request is a round trip through the kernel, and on small files they, not the engine, set the
pace (docs/BENCHMARKS.md). These tests count the requests (`rampart status`, fuse_requests),
so a change that adds one fails here rather than only showing in a benchmark."""

import os
import subprocess
import time

import pytest

from e2e_helpers import wait_until

pytestmark = pytest.mark.rampart_only("counts requests to the rampart daemon")

FILES = 300
CLOCK_REALTIME_COARSE = 5  # linux/time.h; the time module does not name it


def _requests(m):
    return m.status()["fuse_requests"]


def _per_file(before, after):
    return {k: (after.get(k, 0) - before.get(k, 0)) / FILES for k in after if after.get(k, 0) != before.get(k, 0)}


def test_durable_small_write_takes_six_round_trips_and_a_forget(mnt):
    """create, write 4 KiB, fsync, close: LOOKUP, CREATE, GETATTR of the directory, GETXATTR
    of security.capability, the writeback WRITE and FSYNC (the RELEASE that follows is
    answered but not counted, decision 0058), and the FORGET of the file when it arrives
    before the count is read. No SETATTR of the times when the write leaves
    them as the create stamped them: inodes are stamped with the kernel's coarse clock, so a
    write in the same tick as the create leaves the kernel nothing to update
    (docs/decisions/0020). No FLUSH: on a store whose configuration and files need no
    `until_close` category (EDITED), --no-flush auto refuses the first with ENOSYS and the
    kernel sends no more (docs/decisions/0063); the suite's stores have no rampart.toml.

    Whether a write lands in the create's tick is timing (a tick passes now and then, and
    other programs on the machine move the kernel's multigrain floor), so the SETATTRs are not
    counted against a rate: each file's times are read from the kernel's cache (no request)
    after the create and after the fsync, and there must be exactly one SETATTR per file whose
    times the write changed, and none for the others. The create's stamp must be the coarse
    clock's reading whenever that did not move across the create (the engine stamping finer
    times would cost a SETATTR on every file)."""
    data = os.urandom(4096)
    d = os.path.join(mnt.path, "d")
    os.mkdir(d)
    moved = 0
    coarse_stamps = 0
    before = _requests(mnt)
    for i in range(FILES):
        coarse_before = time.clock_gettime_ns(CLOCK_REALTIME_COARSE)
        fd = os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            coarse_after = time.clock_gettime_ns(CLOCK_REALTIME_COARSE)
            created = os.fstat(fd)
            if coarse_before == coarse_after:
                assert created.st_mtime_ns == coarse_before, (
                    f"f{i} was stamped {created.st_mtime_ns}, not the coarse clock's {coarse_before}")
                coarse_stamps += 1
            assert os.write(fd, data) == len(data)
            os.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        times = lambda st: (st.st_mtime_ns, st.st_ctime_ns)  # noqa: E731
        moved += times(written) != times(created)
    per_file = _per_file(before, _requests(mnt))
    assert coarse_stamps > 0, "the coarse clock moved across every create: nothing checked the stamps"
    assert per_file.get("fsync", 0) == 1, per_file
    assert mnt.status()["kernel_flush"] == "no-flush"
    assert per_file.get("flush", 0) <= 0.01, per_file
    assert per_file.get("open", 0) <= 0.01, "CREATE opens the file: no OPEN"
    # FORGETs (one by one or batched) are not round trips: the kernel does not wait for them.
    not_waited = per_file.get("forget", 0) + per_file.get("batch_forget", 0)
    # STATFS comes from other programs on the machine (`df` walks every mount), not from
    # these writes. The budget: six per file, and room for the first FLUSH the mount refuses.
    others = per_file.get("statfs", 0)
    waited = sum(per_file.values()) - per_file.get("setattr", 0) - not_waited - others
    assert waited <= 6.01 + 1e-9, per_file
    assert per_file.get("forget", 0) <= 1.01, per_file
    assert round(per_file.get("setattr", 0) * FILES) == moved, (
        f"{moved} of {FILES} writes changed the times, but the kernel sent "
        f"{per_file.get('setattr', 0) * FILES:.0f} SETATTRs: {per_file}")
    for i in (0, FILES - 1):
        with open(os.path.join(d, f"f{i}"), "rb") as f:
            assert f.read() == data


def test_cached_reopen_takes_no_open_and_no_flush(mnt):
    """Opening, reading and closing a cached small file sends nothing at all on a store that
    needs neither OPEN nor FLUSH (--no-open auto, --no-flush auto; decision 0063): the memory
    tier's whole point."""
    d = os.path.join(mnt.path, "r")
    os.mkdir(d)
    for i in range(FILES):
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(b"x" * 4096)
    os.sync()  # no write-back while counting
    for i in range(FILES):  # the kernel caches pages and attributes
        with open(os.path.join(d, f"f{i}"), "rb") as f:
            f.read()
    s = mnt.status()
    assert (s["kernel_open"], s["kernel_flush"]) == ("no-open", "no-flush")
    before = _requests(mnt)
    for i in range(FILES):
        # One read of the size: reading on to the end would have the kernel check the size
        # (GETATTR), whatever OPEN and FLUSH do.
        fd = os.open(os.path.join(d, f"f{i}"), os.O_RDONLY)
        try:
            assert len(os.read(fd, 4096)) == 4096
        finally:
            os.close(fd)
    per_file = _per_file(before, _requests(mnt))
    assert per_file.get("open", 0) <= 0.01 and per_file.get("flush", 0) <= 0.01, per_file
    assert sum(per_file.values()) <= 0.05, per_file


def test_write_after_a_tick_still_moves_mtime(mnt):
    """The coarse clock must not freeze times: a write some ticks after the create moves the
    file's mtime, and the kernel's SETATTR of it reaches the engine (it survives a remount)."""
    p = os.path.join(mnt.path, "f")
    with open(p, "wb") as f:
        f.write(b"a")
        os.fsync(f.fileno())
    created = os.stat(p).st_mtime_ns
    time.sleep(0.05)  # several ticks (1-10 ms each)
    with open(p, "ab") as f:
        f.write(b"b")
        os.fsync(f.fileno())
    moved = os.stat(p).st_mtime_ns
    assert moved > created
    mnt.umount()
    mnt.mount(mkfs=False)
    assert os.stat(p).st_mtime_ns == moved


def test_ls_l_takes_no_lookup_per_entry_and_references_balance(mnt):
    """`ls -l` of a directory the kernel has not cached: the listing carries every entry's
    attributes (READDIRPLUS, decision 0080), so no LOOKUP per entry, and what it shows is
    what was written. Every entry it handed the kernel is a kernel reference the engine
    counted: listed twice and then removed, every file is freed once the kernel forgets it (a
    reference counted too often would keep unlinked inodes for ever; too rarely, free one
    the kernel still uses, and the second listing or the removal would fail)."""
    d = os.path.join(mnt.path, "big")
    os.mkdir(d)
    inodes_empty = mnt.status()["inodes"]
    for i in range(FILES):
        with open(os.path.join(d, f"e{i:04}"), "wb") as f:
            f.write(b"x" * i)
    mnt.umount()
    mnt.mount(mkfs=False)  # nothing of the directory in the kernel's caches
    listings = []
    for _ in range(2):
        before = _requests(mnt)
        out = subprocess.run(["ls", "-ln", d], capture_output=True, text=True, check=True).stdout
        listings.append(_per_file(before, _requests(mnt)))
        sizes = {f[-1]: int(f[4]) for f in (line.split() for line in out.splitlines()[1:])}
        assert sizes == {f"e{i:04}": i for i in range(FILES)}
    first = listings[0]
    assert first.get("readdirplus", 0) > 0, first
    assert first.get("lookup", 0) <= 0.01, f"a LOOKUP per entry: {first}"
    for i in range(FILES):
        os.unlink(os.path.join(d, f"e{i:04}"))
    assert wait_until(lambda: mnt.status()["inodes"] == inodes_empty), (
        f"{mnt.status()['inodes']} inodes left after removing every file, {inodes_empty} before")

"""A full disk under the store, a checkpoint that cannot be written, and a journal cut short
(issue 16, items 2-4; docs/decisions/0036-0038; docs/FORMAT.md "What survives a full disk and
a failed checkpoint"): each ends with a clear answer and nothing acknowledged lost."""

import errno
import os
import subprocess

import pytest

from e2e_helpers import MiB, Mount, in_mount_table, read_file, run, wait_until
from test_persistence import crash, fsck, remount, unmount, write_synced

pytestmark = pytest.mark.rampart_only("tests the store of a rampart mount")


@pytest.fixture
def small_ext4(test_base):
    """A 64 MiB ext4 on a loop device, mounted at TEST_BASE/disk; always taken down."""
    yield from _loop_ext4(test_base, root_reserved_percent=0)


@pytest.fixture
def small_ext4_root_reserved(test_base):
    """As `small_ext4`, with ext4's default 5 % of blocks kept for root."""
    yield from _loop_ext4(test_base, root_reserved_percent=5)


def _loop_ext4(test_base, root_reserved_percent):
    image = os.path.join(test_base, "disk.img")
    where = os.path.join(test_base, "disk")
    os.mkdir(where)
    with open(image, "wb") as f:
        f.truncate(64 * MiB)
    run(["mkfs.ext4", "-q", "-F", "-m", str(root_reserved_percent), image], check=True, timeout=120)
    loop = run(["losetup", "-f", "--show", image], check=True, timeout=60).stdout.strip()
    try:
        run(["mount", loop, where], check=True, timeout=60)
        try:
            yield where
        finally:
            if in_mount_table(where):
                run(["umount", where], timeout=60)
            if in_mount_table(where):
                run(["umount", "-l", where], timeout=60)
    finally:
        run(["losetup", "-d", loop], timeout=60)


def _mount_on(test_base, env, cleanup, store, name, opts=()):
    m = Mount(test_base, name, opts=opts, env=env)
    m.store = store
    cleanup.append(m)
    m.mount()
    assert m.pid, f"could not find the daemon's pid ({m.pid_source})"
    return m


def test_a_full_disk_answers_enospc_and_deleting_files_lets_the_mount_recover(
        test_base, rampart_env, cleanup_mounts, small_ext4):
    from pathlib import Path
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(small_ext4) / "store", "full",
                  opts=("--commit-interval", "200ms"))
    try:
        written = []
        failure = None
        for i in range(200):
            path = os.path.join(m.path, f"f{i}")
            try:
                write_synced(path, bytes([i % 251]) * MiB)
            except OSError as e:
                failure = e
                break
            written.append(i)
        assert failure is not None, "the 64 MiB disk never filled up"
        assert failure.errno == errno.ENOSPC, f"a full disk answered {failure!r}, not ENOSPC"
        assert len(written) >= 5, f"only {len(written)} MiB fit"
        # Delete all but two: the mount frees the journal's space by itself.
        kept = written[:2]
        for i in written[2:]:
            os.unlink(os.path.join(m.path, f"f{i}"))
        try:
            os.unlink(os.path.join(m.path, f"f{len(written)}"))
        except FileNotFoundError:
            pass
        assert wait_until(lambda: m.status()["persistence"]["error"] is None, timeout=60), (
            f"persistence never resumed: {m.status()['persistence']}")
        write_synced(os.path.join(m.path, "after"), b"x" * MiB)
        r = m.umount()
        assert r.returncode == 0, f"umount after recovery: {r.stdout}{r.stderr}"
        remount(m)
        names = sorted(os.listdir(m.path))
        assert names == sorted([f"f{i}" for i in kept] + ["after"]), names
        for i in kept:
            assert read_file(os.path.join(m.path, f"f{i}")) == bytes([i % 251]) * MiB
        assert os.path.getsize(m.store / "journal") < 8 * MiB
        unmount(m)
        assert fsck(m).returncode == 0
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()


def test_commits_go_on_while_checkpoints_fail_on_an_immutable_store_folder(
        test_base, rampart_env, cleanup_mounts):
    from pathlib import Path
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(test_base) / "imm-store", "imm",
                  opts=("--checkpoint-after", "1M"))
    run(["chattr", "+i", m.store], check=True, timeout=60)
    try:
        for i in range(12):
            # Each fsync must succeed: the journal is writable, only checkpoints fail.
            write_synced(os.path.join(m.path, f"f{i}"), bytes([i]) * (512 * 1024))
        assert wait_until(lambda: m.status()["persistence"]["checkpoint_error"] is not None, timeout=30), (
            f"the failing checkpoint is not reported: {m.status()['persistence']}")
        p = m.status()["persistence"]
        assert p["error"] is None, p
        human = m.cli("status", m.path)
        assert "checkpoint failing" in human.stdout, human.stdout
        write_synced(os.path.join(m.path, "later"), b"l" * 1000)
    finally:
        run(["chattr", "-i", m.store], timeout=60)
    unmount(m)
    remount(m)
    for i in range(12):
        assert read_file(os.path.join(m.path, f"f{i}")) == bytes([i]) * (512 * 1024)
    assert read_file(os.path.join(m.path, "later")) == b"l" * 1000
    unmount(m)


def test_a_journal_cut_in_the_middle_refuses_the_mount_and_repair_keeps_the_prefix(
        test_base, rampart_env, cleanup_mounts):
    from pathlib import Path
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(test_base) / "cut-store", "cut")
    for i in range(100):
        write_synced(os.path.join(m.path, f"f{i:03}"), bytes([i]) * 20_000)
    crash(m)
    journal = m.store / "journal"
    size = os.path.getsize(journal)
    assert size > 1_000_000, size
    os.truncate(journal, size // 3)
    r = m.cli("mount", m.store, m.path)
    assert r.returncode != 0, "a journal cut in the middle was mounted"
    assert "cut short" in r.stderr and "rampart fsck --repair" in r.stderr, r.stderr
    assert not in_mount_table(m.path)
    r = fsck(m)
    assert r.returncode != 0, f"fsck called a cut journal clean: {r.stdout}"
    assert "CUT SHORT" in r.stdout and "--repair" in r.stdout, r.stdout
    r = fsck(m, "--repair")
    assert r.returncode == 0, f"fsck --repair: {r.stdout}{r.stderr}"
    assert "accepted the loss" in r.stdout, r.stdout
    assert fsck(m).returncode == 0
    remount(m)
    names = sorted(os.listdir(m.path))
    assert 0 < len(names) < 100, f"{len(names)} files after the repair"
    # The prefix: the first files, whole.
    assert names == [f"f{i:03}" for i in range(len(names))], names
    for i in range(len(names)):
        assert read_file(os.path.join(m.path, f"f{i:03}")) == bytes([i]) * 20_000
    unmount(m)


def _write_all_synced(path, data):
    """Writes `data` to a new file in pieces (a FUSE write may be short) and fsyncs it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[:MiB]):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _host_free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _fill_with_small_files(m, size):
    """Small (memory-tier) files, each fsync'd, until an fsync answers ENOSPC; returns the
    names acknowledged."""
    acked = []
    for i in range(400):
        name = f"s{i:03}"
        try:
            write_synced(os.path.join(m.path, name), bytes([i % 251]) * size)
        except OSError as e:
            assert e.errno == errno.ENOSPC, f"a full disk answered {e!r}, not ENOSPC"
            # The checkpoint tried at once has ended (it gave up the reserve and failed):
            # the host's free room is settled.
            assert wait_until(lambda: m.status()["persistence"]["checkpoint_error"] is not None,
                              timeout=60), m.status()["persistence"]
            return acked
        acked.append(name)
    raise AssertionError("the 64 MiB disk never filled up")


def _check_small_files(m, acked, size):
    for name in acked:
        i = int(name[1:])
        assert read_file(os.path.join(m.path, name)) == bytes([i % 251]) * size, name


def test_deleting_a_large_file_on_a_full_disk_gives_its_room_back(
        test_base, rampart_env, cleanup_mounts, small_ext4):
    """Decision 0119: the journal stopped on a full disk, `rm` of a disk-tier file frees its
    host file at once; persistence resumes and the deletion survives a crash."""
    from pathlib import Path
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(small_ext4) / "store", "rm-big",
                  opts=("--commit-interval", "200ms"))
    try:
        big = os.path.join(m.path, "big")
        _write_all_synced(big, b"B" * (30 * MiB))
        acked = _fill_with_small_files(m, 256 * 1024)
        assert m.status()["persistence"]["error"] is not None, m.status()["persistence"]
        free_before = _host_free_bytes(small_ext4)
        os.unlink(big)
        # Its room is free on the host, but for what the store takes back as its reserve
        # (as long as the new checkpoint) once persistence resumes.
        def room_back():
            reserve = m.store / "reserve"
            kept = os.path.getsize(reserve) if reserve.exists() else 0
            return _host_free_bytes(small_ext4) + kept - free_before
        assert wait_until(lambda: room_back() > 25 * MiB, timeout=60), (
            f"deleting a 30 MB file freed {room_back() >> 20} MiB on the host: "
            f"{os.listdir(m.store)} {os.listdir(m.store / 'data')}")
        assert wait_until(lambda: m.status()["persistence"]["error"] is None, timeout=60), (
            f"persistence never resumed: {m.status()['persistence']}")
        write_synced(os.path.join(m.path, "after"), b"a" * (256 * 1024))
        crash(m)
        r = fsck(m)
        assert r.returncode == 0, f"fsck after the crash: {r.stdout}{r.stderr}"
        remount(m)
        names = set(os.listdir(m.path))
        assert "big" not in names, "the deleted file came back after a crash"
        assert set(acked) | {"after"} <= names, sorted(set(acked) - names)
        _check_small_files(m, acked, 256 * 1024)
        assert read_file(os.path.join(m.path, "after")) == b"a" * (256 * 1024)
        assert not os.path.exists(m.store / "freed"), "the freed note outlived a checkpoint"
        unmount(m)
        assert fsck(m).returncode == 0
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()


def test_a_crash_after_a_full_disk_freed_a_deleted_file_keeps_the_deletion(
        test_base, rampart_env, cleanup_mounts, small_ext4):
    """Decision 0119: the deleted file's room is given back while no checkpoint fits yet (the
    journal still holds the file); a crash then: fsck is clean, the mount keeps the file
    deleted, journals that and removes the `freed` note; every acknowledged file is whole."""
    from pathlib import Path
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(small_ext4) / "store", "rm-crash",
                  opts=("--commit-interval", "200ms"))
    try:
        big = os.path.join(m.path, "big")
        _write_all_synced(big, b"B" * (4 * MiB))
        acked = _fill_with_small_files(m, 512 * 1024)
        free_before = _host_free_bytes(small_ext4)
        os.unlink(big)
        assert wait_until(lambda: not os.listdir(m.store / "data"), timeout=60), (
            f"the deleted file's host file is still there: {os.listdir(m.store / 'data')}")
        assert wait_until(lambda: _host_free_bytes(small_ext4) > free_before + 3 * MiB, timeout=60), (
            f"deleting a 4 MiB file freed {(_host_free_bytes(small_ext4) - free_before) >> 10} KiB "
            f"on the host: {os.listdir(m.store)} {os.listdir(m.store / 'data')}")
        # Too much in memory for a checkpoint to fit: the journal stays stopped, the note stays.
        assert m.status()["persistence"]["error"] is not None, m.status()["persistence"]
        assert os.path.exists(m.store / "freed"), os.listdir(m.store)
        crash(m)
        r = fsck(m)
        assert r.returncode == 0, f"fsck with the freed note: {r.stdout}{r.stderr}"
        assert "1 file deleted while the disk was full kept deleted" in r.stdout, r.stdout
        remount(m)
        names = set(os.listdir(m.path))
        assert "big" not in names, "the deleted file came back after a crash"
        assert set(acked) <= names, sorted(set(acked) - names)
        _check_small_files(m, acked, 512 * 1024)
        assert not os.path.exists(m.store / "freed"), "the note stayed after its deletions were journaled"
        crash(m)
        remount(m)
        assert "big" not in os.listdir(m.path), "the journaled deletion did not hold"
        unmount(m)
        r = fsck(m)
        assert r.returncode == 0, f"{r.stdout}{r.stderr}"
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()


def test_df_of_the_mount_counts_the_hosts_root_blocks_as_free_not_available(
        test_base, rampart_env, cleanup_mounts, small_ext4_root_reserved):
    """Decision 0120: statfs adds the host's free blocks (f_bfree) apart from its available
    ones (f_bavail), so `df` of the mount does not show root's blocks as used. Decision 0144:
    available is the host's alone; the memory tier's room is free, not available."""
    from pathlib import Path
    host_path = small_ext4_root_reserved
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(host_path) / "store", "df",
                  opts=("--memory-cap", "64M"))
    try:
        _write_all_synced(os.path.join(m.path, "big"), b"D" * (8 * MiB))
        mine, host = os.statvfs(m.path), os.statvfs(host_path)
        root_only_host = (host.f_bfree - host.f_bavail) * host.f_frsize
        memory_free = m.status()["memory_cap_bytes"] - m.status()["memory_used_bytes"]
        not_avail_mine = (mine.f_bfree - mine.f_bavail) * mine.f_frsize
        assert root_only_host > MiB, f"mkfs -m 5 kept {root_only_host} bytes for root"
        assert abs(not_avail_mine - (root_only_host + memory_free + 2 * MiB)) <= MiB, (
            f"the mount keeps {not_avail_mine} bytes unavailable; the host keeps "
            f"{root_only_host} for root, the memory tier has {memory_free} free")
        # The host's, less the 2 MiB the journal takes next.
        assert abs(mine.f_bavail * mine.f_frsize - host.f_bavail * host.f_frsize + 2 * MiB) <= MiB, (
            "the mount's available room is not the host's")
        # What the mount calls used is the host's used room plus the memory tier's.
        used_mine = (mine.f_blocks - mine.f_bfree) * mine.f_frsize
        used_host = (host.f_blocks - host.f_bfree) * host.f_frsize
        memory_used = m.status()["memory_used_bytes"]
        assert abs(used_mine - (used_host + memory_used)) <= MiB, (
            f"mount used {used_mine}, host used {used_host} + memory {memory_used}")
        # And `df` says so.
        df = run(["df", "-B1", "--output=used,avail", m.path, host_path], check=True).stdout.split()
        (df_used_mine, df_avail_mine, df_used_host, df_avail_host) = map(int, df[-4:])
        assert abs(df_used_mine - (df_used_host + memory_used)) <= MiB, df
        assert abs(df_avail_mine - df_avail_host + 2 * MiB) <= MiB, df
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()


def test_a_rename_over_a_large_file_on_a_full_disk_keeps_the_target_after_a_crash(
        test_base, rampart_env, cleanup_mounts, small_ext4):
    """Decision 0119: `mv new big` over a disk-tier file while the journal is stopped does not
    free big's host file early (recovery would drop big's inode with its name, the rename
    not being durable); a file deleted meanwhile is freed. After a crash, big and new are
    as they were durable, or both renamed: never big gone."""
    from pathlib import Path
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(small_ext4) / "store", "mv-crash",
                  opts=("--commit-interval", "200ms"))
    try:
        big = os.path.join(m.path, "big")
        new = os.path.join(m.path, "new")
        doomed = os.path.join(m.path, "doomed")
        _write_all_synced(big, b"B" * (4 * MiB))
        _write_all_synced(doomed, b"D" * (4 * MiB))
        write_synced(new, b"new contents")
        assert len(os.listdir(m.store / "data")) == 2, os.listdir(m.store / "data")
        acked = _fill_with_small_files(m, 512 * 1024)
        os.rename(new, big)
        os.unlink(doomed)
        assert wait_until(lambda: len(os.listdir(m.store / "data")) <= 1, timeout=60), (
            f"the deleted file's host file is still there: {os.listdir(m.store / 'data')}")
        assert m.status()["persistence"]["error"] is not None, m.status()["persistence"]
        crash(m)
        r = fsck(m)
        assert r.returncode == 0, f"fsck after the crash: {r.stdout}{r.stderr}"
        remount(m)
        names = set(os.listdir(m.path))
        assert "big" in names, f"the rename's target lost its name: {sorted(names)}"
        assert "doomed" not in names, "the deleted file came back after a crash"
        if "new" in names:
            assert read_file(big) == b"B" * (4 * MiB), "big changed without the rename"
        else:
            assert read_file(big) == b"new contents"
        _check_small_files(m, acked, 512 * 1024)
        unmount(m)
        assert fsck(m).returncode == 0
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()


def test_fallocate_takes_the_room_on_the_host_so_writes_into_it_never_fail(
        test_base, rampart_env, cleanup_mounts, small_ext4):
    """Decision 0136 (found by xfstests generic/213): fallocate of a disk-tier file took no
    room on the host (the host file only grew as a hole), so fallocate of twice the free space
    succeeded, and a write into an fallocated range failed with ENOSPC once the disk filled.
    Now: more than the free room is refused with ENOSPC, and an fallocated range (mode 0 and
    KEEP_SIZE past the end) is written in full on a disk filled meanwhile."""
    from pathlib import Path
    from e2e_helpers import fallocate
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(small_ext4) / "store", "falloc",
                  opts=("--commit-interval", "200ms"))
    try:
        too_big = os.path.join(m.path, "too-big")
        fd = os.open(too_big, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            with pytest.raises(OSError) as e:
                fallocate(fd, 0, 0, 2 * _host_free_bytes(small_ext4))
            assert e.value.errno == errno.ENOSPC, e.value
        finally:
            os.close(fd)
        assert os.path.getsize(too_big) == 0, "a refused fallocate changed the size"
        os.unlink(too_big)
        reserved = os.path.join(m.path, "reserved")
        fd = os.open(reserved, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fallocate(fd, 0, 0, 8 * MiB)
            fallocate(fd, 0x01, 8 * MiB, 4 * MiB)  # FALLOC_FL_KEEP_SIZE, past the end
            os.fsync(fd)
            assert os.fstat(fd).st_size == 8 * MiB
            # Fill the disk with another large file, until the host says it is full.
            filler = os.open(os.path.join(m.path, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                full = None
                for _ in range(200):
                    try:
                        os.write(filler, b"f" * MiB)
                        os.fsync(filler)
                    except OSError as err:
                        full = err
                        break
                assert full is not None and full.errno == errno.ENOSPC, full
            finally:
                try:
                    os.close(filler)
                except OSError:
                    pass
            data = bytes(range(256)) * (12 * MiB // 256)
            view = memoryview(data)
            at = 0
            while at < len(data):
                at += os.pwrite(fd, view[at:at + MiB], at)
            os.fsync(fd)
        finally:
            os.close(fd)
        assert read_file(reserved) == data
        unmount(m)
        remount(m)
        assert read_file(reserved) == data
        unmount(m)
        assert fsck(m).returncode == 0
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()


def test_one_file_can_take_all_the_room_statfs_calls_available(
        test_base, rampart_env, cleanup_mounts, small_ext4):
    """Decision 0144 (xfstests generic/103): fallocate of the available room less 512 KiB in
    one file succeeds. statfs used to add the memory tier's free room to what was available,
    but a file that large lives on the disk tier, where only the host's room is."""
    from pathlib import Path
    from e2e_helpers import fallocate
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(small_ext4) / "store", "avail",
                  opts=("--memory-cap", "64M"))
    try:
        path = os.path.join(m.path, "all")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            st = os.statvfs(m.path)
            avail = st.f_bavail * st.f_frsize
            assert avail > 8 * MiB, f"only {avail} bytes available on a fresh 64 MiB host"
            fallocate(fd, 0, 0, avail - 512 * 1024)
            os.fsync(fd)
        finally:
            os.close(fd)
        assert os.path.getsize(path) == avail - 512 * 1024
        # Small files still fit in memory although nothing more is "available".
        for i in range(16):
            write_synced(os.path.join(m.path, f"small{i}"), b"s" * 4096)
        os.unlink(path)
        unmount(m)
        r = fsck(m)
        assert r.returncode == 0, f"{r.stdout}{r.stderr}"
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()


def _fill_until_persistence_stops(small_ext4, f):
    """Fills the host file system under the store (beside it, not through the mount), then
    changes metadata until a commit fails: persistence stops, nothing more is durable."""
    try:
        with open(os.path.join(small_ext4, "filler"), "wb") as h:
            for _ in range(200):
                h.write(bytes(MiB))
                h.flush()
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    for _ in range(20000):
        os.setxattr(f, "user.x", os.urandom(2000))
        try:
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            assert e.errno in (errno.ENOSPC, errno.EIO), e
            return
    pytest.fail("the journal never filled the disk")


@pytest.mark.parametrize("mode", ["punch", "zero"])
def test_a_hole_punched_while_nothing_can_be_made_durable_reads_zeros(
        test_base, rampart_env, cleanup_mounts, small_ext4, mode):
    """Decision 0147: PUNCH_HOLE and ZERO_RANGE of a disk-tier file punch its host file after
    their commit; when the commit failed (the disk is full) the punch waited, and the range
    read the old bytes for the rest of the mount although the call had succeeded. Now the
    range is punched anyway and reads zeros; the file keeps its size, and fsck finds nothing
    lost after the unmount."""
    from pathlib import Path
    from e2e_helpers import fallocate
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(small_ext4) / "store", "punch",
                  opts=("--memory-cap", str(16 * MiB)))
    try:
        f = os.path.join(m.path, "f")
        write_synced(f, b"A" * (4 * MiB))
        _fill_until_persistence_stops(small_ext4, f)
        flags = 0x02 | 0x01 if mode == "punch" else 0x10  # PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE
        fd = os.open(f, os.O_RDWR)
        try:
            fallocate(fd, flags, MiB, MiB)
        finally:
            os.close(fd)
        assert os.path.getsize(f) == 4 * MiB
        data = read_file(f)
        assert data[MiB:2 * MiB] == bytes(MiB), "the punched range shows the old bytes"
        assert data[:MiB] == b"A" * MiB and data[2 * MiB:] == b"A" * (2 * MiB)
        unmount(m)
        r = fsck(m)
        assert "are lost" not in r.stdout, r.stdout
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()


@pytest.mark.parametrize("grow", ["truncate", "fallocate"])
def test_a_growth_after_a_shrink_that_could_not_be_made_durable_reads_zeros(
        test_base, rampart_env, cleanup_mounts, small_ext4, grow):
    """Decision 0146 (found by fsstress to ENOSPC, docs/research/xfstests-2026-11-27.md): once
    the journal cannot be written (the disk is full), a shrinking truncate of a disk-tier file
    leaves its host file long (the trim waits for durability); a truncate up or fallocate then
    grew the size over the old bytes, which read back instead of zeros, and the host file was cut below
    the durable size (fsck: bytes lost). Now the growth makes the shrink durable first or is
    refused, and the grown range reads as zeros."""
    from pathlib import Path
    from e2e_helpers import fallocate
    m = _mount_on(test_base, rampart_env, cleanup_mounts, Path(small_ext4) / "store", "regrow",
                  opts=("--memory-cap", str(16 * MiB)))
    try:
        f = os.path.join(m.path, "f")
        write_synced(f, b"A" * (4 * MiB))
        _fill_until_persistence_stops(small_ext4, f)
        os.truncate(f, MiB)
        try:
            if grow == "truncate":
                os.truncate(f, 2 * MiB)
            else:
                fd = os.open(f, os.O_RDWR)
                try:
                    fallocate(fd, 0, MiB, MiB)
                finally:
                    os.close(fd)
        except OSError as e:
            # Refused: the shrink cannot be made durable; the file keeps its 1 MiB.
            assert e.errno in (errno.ENOSPC, errno.EIO), e
            assert read_file(f) == b"A" * MiB
        else:
            assert read_file(f) == b"A" * MiB + bytes(MiB), "the grown range shows the old bytes"
        unmount(m)
        r = fsck(m)
        assert "are lost" not in r.stdout, r.stdout
    finally:
        if m.mounted or in_mount_table(m.path):
            m.force_cleanup()

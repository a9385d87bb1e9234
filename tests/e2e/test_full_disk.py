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
    image = os.path.join(test_base, "disk.img")
    where = os.path.join(test_base, "disk")
    os.mkdir(where)
    with open(image, "wb") as f:
        f.truncate(64 * MiB)
    run(["mkfs.ext4", "-q", "-F", "-m", "0", image], check=True, timeout=120)
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

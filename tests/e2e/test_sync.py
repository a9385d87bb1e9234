"""`rampart sync MOUNTPOINT` (decision 0122): what sync(1) cannot ask of a FUSE file system.

The mounts use a five-minute commit interval, so nothing reaches the store by the clock during
a test: what is there after kill -9 is there because `rampart sync` put it there."""

import os

import pytest

from e2e_helpers import (assert_fsck_clean_after_crash, assert_no_panic, configured_mount, crash,
                         read_file, remount, unmount)

pytestmark = pytest.mark.rampart_only("rampart sync is rampart's")

LONG = ("--commit-interval", "300s")
MARKER = b"rampart-sync-temporary-marker-51c9"
CONFIG = """
[[rules]]
glob = "*.ev"
category = "EVENTUAL"

[[rules]]
glob = "*.tmp"
category = "TEMPORARY"
"""


def store_holds(store, needle):
    for root, _dirs, files in os.walk(store):
        for name in files:
            p = os.path.join(root, name)
            if name != "rampart.log" and os.path.isfile(p) and needle in read_file(p):
                return True
    return False


def test_sync_commits_what_is_pending_and_makes_held_files_present(test_base, rampart_env,
                                                                   cleanup_mounts):
    m = configured_mount(test_base, rampart_env, "sync", cleanup_mounts, CONFIG, LONG)
    p = m.path
    # Left open and unflushed: the kernel's writeback cache may still hold it.
    fd = os.open(p / "open-soon", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"written, not closed")
    (p / "held.ev").write_bytes(b"an EVENTUAL file")
    (p / "scratch.tmp").write_bytes(MARKER * 10)

    # --commit-only: what is pending is committed, the EVENTUAL file stays held.
    r = m.cli("sync", "--commit-only", p)
    assert r.returncode == 0, r.stderr
    os.close(fd)
    crash(m)
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(p / "open-soon") == b"written, not closed"
    assert not (p / "held.ev").exists()
    assert not (p / "scratch.tmp").exists()

    # Plain sync: the held file is made present too; TEMPORARY stays out of the store.
    (p / "held.ev").write_bytes(b"an EVENTUAL file")
    (p / "scratch.tmp").write_bytes(MARKER * 10)
    r = m.cli("sync", p)
    assert r.returncode == 0, r.stderr
    assert "1 held files made present" in r.stdout, r.stdout
    crash(m)
    assert not store_holds(m.store, MARKER)
    remount(m)
    assert read_file(p / "held.ev") == b"an EVENTUAL file"
    assert not (p / "scratch.tmp").exists()
    unmount(m)
    assert_no_panic(m)


def test_sync_of_a_folder_that_is_not_a_rampart_mount_is_refused(mnt, tmp_path):
    r = mnt.cli("sync", tmp_path)
    assert r.returncode == 1
    assert "is not a rampart mount" in r.stderr, r.stderr

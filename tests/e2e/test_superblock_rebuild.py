"""A store whose superblock is missing or garbage while its checkpoint and journal are intact
(issue 16, item 5): mount, fsck and mkfs say what can be done (`rampart fsck --repair`, not
`rampart mkfs`), and `fsck --repair` rebuilds the superblock from the store id in the
checkpoint's and the journal's headers, refusing when they disagree or neither is readable."""

import os
import shutil

import pytest

from e2e_helpers import in_mount_table, read_file
from test_persistence import (assert_no_panic, cli, crash, fsck, fsck_json, new_mount, remount, unmount,
                              write_synced)

pytestmark = pytest.mark.rampart_only("tests the rampart store's superblock")

ADVICE = "rampart fsck --repair"


def _store_with_checkpoint_and_journal(test_base, env, cleanup, name):
    """A = in the checkpoint (clean unmount), B = only in the journal (fsync'd, then kill -9).
    Returns (mount, store id)."""
    m = new_mount(test_base, env, name, cleanup)
    write_synced(os.path.join(m.path, "A"), b"in the checkpoint")
    unmount(m)
    remount(m)
    write_synced(os.path.join(m.path, "B"), b"only in the journal")
    crash(m)
    _, report = fsck_json(m)
    assert report["clean"], report
    return m, report["superblock"]["store_id"]


def _damage(m, how):
    sb = m.store / "superblock"
    if how == "missing":
        sb.unlink()
    else:
        sb.write_bytes(os.urandom(64))


def _assert_advice(r, what):
    assert r.returncode != 0, f"{what} succeeded: {r.stdout}"
    assert ADVICE in r.stderr, f"{what}: {r.stderr}"
    assert "create one with `rampart mkfs`" not in r.stderr, f"{what}: {r.stderr}"


@pytest.mark.parametrize("how", ["missing", "garbage"])
def test_a_lost_superblock_is_rebuilt_by_fsck_repair(test_base, rampart_env, cleanup_mounts, how):
    m, store_id = _store_with_checkpoint_and_journal(test_base, rampart_env, cleanup_mounts, how)
    _damage(m, how)
    damaged = read_file(m.store / "superblock") if how == "garbage" else None
    mp = m.path
    r = cli("mount", m.store, mp, env=rampart_env)
    _assert_advice(r, "mount")
    assert not in_mount_table(mp)
    _assert_advice(fsck(m), "fsck")
    r = cli("mkfs", m.store, env=rampart_env)
    _assert_advice(r, "mkfs")
    # Nothing above wrote a superblock.
    assert os.path.exists(m.store / "superblock") == (how == "garbage")

    r = fsck(m, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rebuilt" in r.stdout and store_id in r.stdout, r.stdout
    _, report = fsck_json(m)
    assert report["clean"] and report["superblock"]["store_id"] == store_id, report
    if damaged is not None:
        assert read_file(m.store / "superblock.damaged") == damaged, "the damaged superblock was not kept"
    remount(m)
    assert read_file(os.path.join(m.path, "A")) == b"in the checkpoint"
    assert read_file(os.path.join(m.path, "B")) == b"only in the journal"
    unmount(m)
    assert_no_panic(m)


def test_headers_of_different_stores_are_refused(test_base, rampart_env, cleanup_mounts):
    m, _ = _store_with_checkpoint_and_journal(test_base, rampart_env, cleanup_mounts, "mine")
    other, _ = _store_with_checkpoint_and_journal(test_base, rampart_env, cleanup_mounts, "other")
    shutil.copy(other.store / "journal", m.store / "journal")
    _damage(m, "missing")
    r = fsck(m, "--repair")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cannot rebuild the superblock" in r.stderr and "different stores" in r.stderr, r.stderr
    assert not os.path.exists(m.store / "superblock"), "a superblock was written for an unknown store id"


def test_no_readable_header_is_refused(test_base, rampart_env, cleanup_mounts):
    m, _ = _store_with_checkpoint_and_journal(test_base, rampart_env, cleanup_mounts, "none")
    _damage(m, "missing")
    os.unlink(m.store / "checkpoint")
    (m.store / "journal").write_bytes(b"\0" * 4096)
    r = fsck(m, "--repair")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "none of the checkpoint, the journal and their backups" in r.stderr, r.stderr
    assert not os.path.exists(m.store / "superblock")

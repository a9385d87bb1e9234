"""A damaged checkpoint no longer loses the store (decision 0123): each checkpoint keeps the one
it replaces as `checkpoint.prev` and its journal as `journal.prev`. With a byte flipped in the
middle of `checkpoint`, after `kill -9` or after a clean unmount, the mount recovers every
file from the backup pair and the journal, says so in its log and in `rampart status`, and
writes a new checkpoint; `rampart fsck` reports the damage as repairable, and `--repair`
writes the new checkpoint itself."""

import os

import pytest

from e2e_helpers import read_file
from test_persistence import crash, fsck, fsck_json, new_mount, remount, unmount, write_synced

pytestmark = pytest.mark.rampart_only("tests rampart's store files")

BIG_BYTES = 3 << 20  # past the 1 MiB threshold: a disk-tier file


def _write_files(m, tag, count, files):
    for i in range(count):
        path = os.path.join(m.path, f"{tag}-{i:03d}")
        data = f"{tag} {i}\n".encode() * (20 + i)
        write_synced(path, data)
        files[path] = data


def _store_with_backup(test_base, env, cleanup, name):
    """A mounted store that has taken background checkpoints (so it holds a backup pair), with
    small files and one disk-tier file, and more fsynced files after the last checkpoint."""
    # fsync'd writes commit on the writers' threads; the committer, which starts background
    # checkpoints, looks at the journal's growth when it wakes (each commit interval): a short
    # interval, or a fast machine writes all the rounds before it wakes once.
    opts = ("--checkpoint-after", "64K", "--commit-interval", "200ms")
    m = new_mount(test_base, env, name, cleanup, opts=opts)
    files = {}
    big = os.path.join(m.path, "big")
    data = os.urandom(BIG_BYTES)
    write_synced(big, data)
    files[big] = data
    round_ = 0
    while m.status()["persistence"]["checkpoints"] < 2 or not (m.store / "journal.prev").exists():
        _write_files(m, f"r{round_}", 40, files)
        round_ += 1
        assert round_ < 200, "no background checkpoint ran"
    _write_files(m, "after", 10, files)
    assert m.status()["tiers"]["disk"]["files"] >= 1
    return m, files


def _flip_middle_byte(path):
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0x20]))


def _assert_files(m, files):
    for path, data in files.items():
        assert read_file(path) == data, f"{path} differs after the recovery"


def _recovers_from_backup(m, files):
    log = m.store / "rampart.log"
    log_before = log.stat().st_size if log.exists() else 0
    remount(m)
    _assert_files(m, files)
    with open(log, errors="replace") as f:
        f.seek(log_before)
        text = f.read()
    assert "recovered from the backup pair" in text, text[-3000:]
    why = m.status().get("recovered_from_backup")
    assert why and "checksum" in why, why
    # The mount replaced the damaged checkpoint: a clean store again, with a backup.
    unmount(m)
    r, report = fsck_json(m)
    assert r.returncode == 0, report
    assert report["clean"] and not report["problems"], report
    remount(m)
    _assert_files(m, files)
    assert m.status().get("recovered_from_backup") is None


def test_a_flipped_byte_in_the_checkpoint_after_kill_9_recovers_every_file(test_base, rampart_env, cleanup_mounts):
    m, files = _store_with_backup(test_base, rampart_env, cleanup_mounts, "ckbackup-crash")
    crash(m)
    _flip_middle_byte(m.store / "checkpoint")
    r, report = fsck_json(m)
    assert r.returncode == 1, report
    assert report["backup"]["usable"] and report["backup"]["used"], report["backup"]
    assert report["unrepairable"] is None, report["unrepairable"]
    assert any("rebuild the store" in p for p in report["problems"]), report["problems"]
    _recovers_from_backup(m, files)


def test_a_flipped_byte_in_the_checkpoint_after_a_clean_unmount_recovers_every_file(test_base, rampart_env, cleanup_mounts):
    m, files = _store_with_backup(test_base, rampart_env, cleanup_mounts, "ckbackup-clean")
    unmount(m)
    _flip_middle_byte(m.store / "checkpoint")
    _recovers_from_backup(m, files)


def test_fsck_repair_writes_a_new_checkpoint_from_the_backup(test_base, rampart_env, cleanup_mounts):
    m, files = _store_with_backup(test_base, rampart_env, cleanup_mounts, "ckbackup-fsck")
    crash(m)
    _flip_middle_byte(m.store / "checkpoint")
    r = fsck(m)
    assert r.returncode == 1, r.stdout
    assert "backup" in r.stdout and "USED" in r.stdout, r.stdout
    assert "not repairable" not in r.stdout, r.stdout
    r, report = fsck_json(m, "--repair")
    assert r.returncode == 0, report
    assert report["repaired"], report
    r, report = fsck_json(m)
    assert r.returncode == 0 and report["clean"], report
    remount(m)
    _assert_files(m, files)
    assert m.status().get("recovered_from_backup") is None


def test_a_damaged_backup_is_a_warning_not_a_problem(test_base, rampart_env, cleanup_mounts):
    m, files = _store_with_backup(test_base, rampart_env, cleanup_mounts, "ckbackup-warn")
    unmount(m)
    _flip_middle_byte(m.store / "checkpoint.prev")
    r, report = fsck_json(m)
    assert r.returncode == 0, report
    assert report["clean"], report
    assert report["backup"]["present"] and not report["backup"]["usable"], report["backup"]
    assert any("checkpoint.prev" in w for w in report["warnings"]), report["warnings"]
    remount(m)
    _assert_files(m, files)

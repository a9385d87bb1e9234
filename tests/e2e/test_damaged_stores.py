"""Stores that lost files (docs/research/damaged-stores.md, decisions 0132 and 0133): a real
mount refuses what it cannot recover whole, with a message that says what to do, and
`rampart fsck --repair` keeps every byte the remaining files hold (bytes compared).
The engine-level matrix of every combination is crates/rampart-core/tests/damaged_stores.rs."""
import os

import pytest

from e2e_helpers import in_mount_table, read_file
from test_persistence import (_clean_store_with_files, assert_no_panic, crash, fsck, new_mount, remount, unmount,
                              write_synced)

pytestmark = pytest.mark.rampart_only("damages rampart stores")

BIG = 3 * 1024 * 1024 + 321  # past the 1 MiB threshold: on the disk tier


def _refused_untouched(m, *words):
    """The mount is refused with every word in its message, and removes no host file."""
    hosts = {n: (m.store / "data" / n).read_bytes() for n in os.listdir(m.store / "data")}
    r = m.cli("mount", m.store, m.path)
    assert r.returncode == 1, f"mount exited {r.returncode}: {r.stdout}{r.stderr}"
    for w in words:
        assert w in r.stderr, f"the refusal does not mention {w!r}: {r.stderr!r}"
    assert not in_mount_table(m.path)
    after = {n: (m.store / "data" / n).read_bytes() for n in os.listdir(m.store / "data")}
    assert after == hosts, "a refused mount changed the data folder"


def _adopted(m):
    """The bytes of the files in /lost+found, sorted."""
    found = os.path.join(m.path, "lost+found")
    return sorted(read_file(os.path.join(found, n)) for n in os.listdir(found) if n.startswith("#host-"))


def test_host_files_alone_refuse_the_mount_and_a_repair_adopts_them(test_base, rampart_env, cleanup_mounts):
    """Journal, checkpoint and reserve gone, the data folder's host files left: not a new store
    (decision 0132). The mount refuses, fsck reports, --repair links the files into /lost+found."""
    m = new_mount(test_base, rampart_env, "hostsonly", cleanup_mounts)
    big = [os.urandom(BIG), os.urandom(BIG + 1)]
    for i, data in enumerate(big):
        write_synced(os.path.join(m.path, f"big{i}"), data)
    crash(m)
    for name in ("journal", "checkpoint", "reserve", "checkpoint.prev", "journal.prev"):
        if (m.store / name).exists():
            os.remove(m.store / name)
    assert len(os.listdir(m.store / "data")) == 2
    _refused_untouched(m, "journal is missing", "host files", "fsck --repair")
    r = fsck(m)
    assert r.returncode == 1 and "host files" in r.stdout, r.stdout + r.stderr
    assert len(os.listdir(m.store / "data")) == 2, "fsck without --repair changed the data folder"
    r = fsck(m, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("as /lost+found/#host-") == 2, r.stdout
    assert fsck(m).returncode == 0
    remount(m)
    assert _adopted(m) == sorted(big), "the adopted files do not hold the bytes written"
    unmount(m)
    assert_no_panic(m)


def test_the_backup_pair_alone_rebuilds_superblock_and_state(test_base, rampart_env, cleanup_mounts):
    """Superblock, checkpoint and journal gone, the backup pair and a host file left: --repair
    rebuilds the superblock from the pair's headers, the state from the pair, and adopts the
    file written after it (decisions 0123, 0133)."""
    m = _clean_store_with_files(test_base, rampart_env, cleanup_mounts, "paironly")
    remount(m)  # the second checkpoint (at unmount) keeps the first as the backup pair
    kept = {n: read_file(os.path.join(m.path, n)) for n in ("f00", "f49")}
    unmount(m)
    assert (m.store / "checkpoint.prev").exists() and (m.store / "journal.prev").exists()
    remount(m)
    big = os.urandom(BIG)
    write_synced(os.path.join(m.path, "big"), big)
    crash(m)
    for name in ("superblock", "checkpoint", "journal"):
        os.remove(m.store / name)
    r = m.cli("mount", m.store, m.path)
    assert r.returncode == 1 and "fsck --repair" in r.stderr, r.stdout + r.stderr
    assert not in_mount_table(m.path)
    r = fsck(m, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rebuilt from the store id" in r.stdout and "checkpoint.prev" in r.stdout, r.stdout
    assert r.stdout.count("as /lost+found/#host-") == 1, r.stdout
    assert fsck(m).returncode == 0
    remount(m)
    for name, data in kept.items():
        assert read_file(os.path.join(m.path, name)) == data, f"{name} was lost"
    assert _adopted(m) == [big], "the file written after the backup lost its bytes"
    unmount(m)
    assert_no_panic(m)



def test_a_folder_left_with_host_files_only_is_not_called_a_new_store(test_base, rampart_env, cleanup_mounts):
    """Superblock and every headed file gone: no store id is left, but the host files hold
    bytes. Mount and fsck refuse without advising mkfs, and leave them (decision 0132)."""
    m = new_mount(test_base, rampart_env, "hostsnoid", cleanup_mounts)
    write_synced(os.path.join(m.path, "big"), os.urandom(BIG))
    crash(m)
    for name in ("superblock", "journal", "checkpoint", "checkpoint.prev", "journal.prev"):
        if (m.store / name).exists():
            os.remove(m.store / name)
    _refused_untouched(m, "1 host files", "copy the host files out", "do not run `rampart mkfs`")
    for args in ((), ("--repair",)):
        r = fsck(m, *args)
        assert r.returncode != 0 and "do not run `rampart mkfs`" in r.stderr, r.stdout + r.stderr
        assert "create one with" not in r.stderr, r.stderr
    assert len(os.listdir(m.store / "data")) == 1, "the host file was removed"
    assert_no_panic(m)

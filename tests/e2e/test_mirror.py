"""DA2, the store's mirror, on real mounts (decisions 0076-0078): `rampart mkfs --mirror`,
PARANOID writes on both copies before write(2) returns, `kill -9` then the loss of the main
copy (the mirror mounts alone, `rampart mirror add` makes a new second copy), the mirror
removed while mounted (status degraded, PARANOID write and fsync EIO, the daemon serves on),
fsck comparing the copies, and host files mirrored with passthrough off."""

import errno
import json
import os
import shutil

import pytest

from e2e_helpers import Mount, crash, read_file
from test_status import scrape

pytestmark = pytest.mark.rampart_only("tests the store's second copy (DA2)")

# PARANOID by a rule, so that `--no-open auto` answers OPEN (decision 0063).
CONFIG = '[[rules]]\nglob = "*.paranoid"\ncategory = "PARANOID"\n'


def mirrored(test_base, env, cleanup, name="mir", opts=()):
    m = Mount(test_base, name, opts=opts, env=env)
    cleanup.append(m)
    mirror = m.base / f"{name}-mirror"
    r = m.cli("mkfs", "--mirror", mirror, m.store)
    assert r.returncode == 0, r.stderr
    assert "with its mirror" in r.stdout
    assert oct(os.stat(mirror).st_mode & 0o777) == "0o700"
    (m.store / "rampart.toml").write_text(CONFIG)
    m.mount(mkfs=False)
    return m, mirror


def write_durably(path, data, fsync=True):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def category(path):
    return os.getxattr(path, "user.rampart.category").decode()


def test_mkfs_mirror_refuses_a_folder_that_is_not_empty(test_base, rampart_env):
    m = Mount(test_base, "full", env=rampart_env)
    full = m.base / "full-mirror"
    full.mkdir()
    (full / "keep").write_text("mine")
    r = m.cli("mkfs", "--mirror", full, m.store)
    assert r.returncode != 0
    assert "not empty" in r.stderr
    assert not m.store.exists()
    assert (full / "keep").read_text() == "mine"


def test_kill9_then_the_mirror_alone_has_every_durable_file(test_base, rampart_env, cleanup_mounts):
    m, mirror = mirrored(test_base, rampart_env, cleanup_mounts)
    assert m.status()["mirror"] == {"path": str(mirror), "state": "ok"}
    mp = str(m.path)
    write_durably(os.path.join(mp, "soon.txt"), b"fsynced")
    # PARANOID: on both copies before write(2) returns; no fsync.
    write_durably(os.path.join(mp, "p.paranoid"), b"paranoid bytes", fsync=False)
    assert category(os.path.join(mp, "p.paranoid")) == "PARANOID"
    os.mkdir(os.path.join(mp, "dir"))
    write_durably(os.path.join(mp, "dir", "big"), os.urandom(3 << 20))  # the disk tier
    big = read_file(os.path.join(mp, "dir", "big"))
    crash(m)
    shutil.rmtree(m.store)

    alone = Mount(test_base, "alone", env=rampart_env)
    cleanup_mounts.append(alone)
    alone.store = mirror
    alone.mount(mkfs=False)
    ap = str(alone.path)
    assert read_file(os.path.join(ap, "soon.txt")) == b"fsynced"
    assert read_file(os.path.join(ap, "p.paranoid")) == b"paranoid bytes"
    assert read_file(os.path.join(ap, "dir", "big")) == big
    st = alone.status()["mirror"]
    assert st["state"] == "degraded" and "is missing" in st["reason"], st
    assert alone.umount().returncode == 0

    r = alone.cli("mirror", "add", mirror, m.store)
    assert r.returncode == 0, r.stderr
    m.mount(mkfs=False)
    assert m.status()["mirror"] == {"path": str(mirror), "state": "ok"}
    assert read_file(os.path.join(mp, "p.paranoid")) == b"paranoid bytes"
    assert read_file(os.path.join(mp, "dir", "big")) == big
    assert m.umount().returncode == 0


def test_mirror_removed_while_mounted(test_base, rampart_env, cleanup_mounts):
    m, mirror = mirrored(test_base, rampart_env, cleanup_mounts)
    mp = str(m.path)
    p = os.path.join(mp, "p.paranoid")
    write_durably(p, b"one")
    shutil.rmtree(mirror)
    # The contract of a PARANOID file cannot be kept: fsync says so.
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        # write(2) of a PARANOID file returns once on both copies: with one, EIO (the bytes
        # are on the store); fsync says so again.
        with pytest.raises(OSError) as e:
            os.write(fd, b" two")
        assert e.value.errno == errno.EIO
        with pytest.raises(OSError) as e:
            os.fsync(fd)
        assert e.value.errno == errno.EIO
    finally:
        os.close(fd)
    # A SOON file needs the store alone.
    write_durably(os.path.join(mp, "soon.txt"), b"still fine")
    st = m.status()["mirror"]
    assert st["state"] == "degraded" and "removed" in st["reason"], st
    assert m.alive()
    assert read_file(p) == b"one two"
    r = m.cli("status", m.path)
    assert "mirror: " in r.stdout and "degraded" in r.stdout
    assert m.umount().returncode == 0
    # Everything is on the store, which mounts without its mirror and says so.
    m.mount(mkfs=False)
    assert read_file(p) == b"one two"
    assert read_file(os.path.join(mp, "soon.txt")) == b"still fine"
    assert m.status()["mirror"]["state"] == "degraded"
    assert m.umount().returncode == 0


def test_fsck_compares_the_copies_and_mount_brings_the_damaged_one_in_line(
        test_base, rampart_env, cleanup_mounts):
    m, mirror = mirrored(test_base, rampart_env, cleanup_mounts)
    write_durably(os.path.join(str(m.path), "f"), b"data")
    assert m.umount().returncode == 0
    r = m.cli("fsck", "--json", m.store)
    report = json.loads(r.stdout)
    assert r.returncode == 0 and report["clean"], r.stdout
    assert report["mirror"]["differs"] == [] and report["mirror"]["clean"]
    # Damage the mirror's checkpoint.
    cp = mirror / "checkpoint"
    data = bytearray(cp.read_bytes())
    data[len(data) // 2] ^= 0x40
    cp.write_bytes(bytes(data))
    r = m.cli("fsck", "--json", m.store)
    report = json.loads(r.stdout)
    assert r.returncode == 1 and not report["clean"], r.stdout
    assert "checkpoint" in report["mirror"]["differs"]
    # The mount uses the store and brings the mirror back in line; the log says so.
    m.mount(mkfs=False)
    assert read_file(os.path.join(str(m.path), "f")) == b"data"
    assert m.status()["mirror"]["state"] == "ok"
    assert m.umount().returncode == 0
    log = (m.store / "rampart.log").read_text()
    assert "cannot be used" in log and "brought it back in line" in log
    r = m.cli("fsck", "--json", m.store)
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["mirror"]["clean"]


def test_a_mirrored_store_is_served_without_passthrough(test_base, rampart_env, cleanup_mounts):
    m, mirror = mirrored(test_base, rampart_env, cleanup_mounts)
    assert m.status()["data_path"] == "daemon"
    # A disk-tier file written through the daemon reaches the mirror's host file too.
    data = os.urandom(2 << 20)
    write_durably(os.path.join(str(m.path), "big"), data)
    assert m.umount().returncode == 0
    hosts = sorted(os.listdir(mirror / "data"))
    assert hosts == sorted(os.listdir(m.store / "data")) and hosts
    assert any((mirror / "data" / h).read_bytes()[:len(data)] == data for h in hosts)
    r = m.cli("mount", "--passthrough", "on", m.store, m.path)
    assert r.returncode != 0
    assert "mirrored store is served without FUSE passthrough" in r.stderr


def test_the_mirror_ok_metric_follows_the_mirror(test_base, rampart_env, cleanup_mounts):
    sock = os.path.join(test_base, "mirror-metrics.sock")
    m, mirror = mirrored(test_base, rampart_env, cleanup_mounts, opts=("--metrics-socket", sock))
    assert scrape(sock)[("rampart_mirror_ok", "")] == 1
    shutil.rmtree(mirror)
    # A SOON file's fsync makes a commit, which the mirror no longer gets.
    write_durably(os.path.join(str(m.path), "soon.txt"), b"synced")
    assert m.status()["mirror"]["state"] == "degraded"
    assert scrape(sock)[("rampart_mirror_ok", "")] == 0
    assert m.umount().returncode == 0

"""`rampart fsck STORE [--repair] [--json]` (docs/CLI.md): checks of clean, crashed, torn,
damaged and inconsistent stores, the report's keys, exit codes, and repairs that leave a store
that fsck finds clean and that mounts with the data before the damage."""

import json
import os
import pty
import struct
import subprocess
import threading

import pytest

from e2e_helpers import RAMPART_BIN, in_mount_table, read_file, write_file
from test_persistence import (BATCH_HEADER_BYTES, HEADER_BYTES, _clean_store_with_files, assert_no_panic,
                              batch_ending_at, cli, crash,
                              crc32c, files_by_batch, fsck, fsck_json, journal_batches, new_mount, remount,
                              store_bytes, unmount, write_synced, ZEROS_AHEAD_BYTES)

pytestmark = pytest.mark.rampart_only("tests rampart fsck on rampart stores")

REPORT_KEYS = {"store", "clean", "repaired", "superblock", "checkpoint", "journal", "backup", "warnings", "replay", "invariants",
               "data", "filesystem", "problems", "repairs", "unrepairable", "duration_ms"}
SECTION_KEYS = {
    "superblock": {"ok", "format_version", "store_id", "error"},
    "checkpoint": {"present", "ok", "bytes", "seq", "error", "problems"},
    "journal": {"present", "ok", "bytes", "base_seq", "batches", "ops", "valid_bytes", "reserved_bytes", "next_seq", "tail", "error"},
    "backup": {"present", "usable", "used", "error"},
    "replay": {"done", "batches", "ops_applied", "ops_skipped", "failed", "ops_not_replayed", "volatile_dropped"},
    "invariants": {"checked", "problems"},
    "data": {"checked", "files", "bytes", "orphans", "foreign", "long", "missing", "short"},
    "filesystem": {"inodes", "files", "directories", "symlinks", "other", "data_bytes"},
}


def _populated_store(test_base, env, cleanup, name):
    """A store with 3 files, 2 directories, a symlink and a fifo, cleanly unmounted."""
    m = new_mount(test_base, env, name, cleanup)
    os.mkdir(os.path.join(m.path, "d"))
    os.mkdir(os.path.join(m.path, "d", "e"))
    write_file(os.path.join(m.path, "a"), b"a" * 100)
    write_file(os.path.join(m.path, "d", "b"), b"b" * 70_000)
    write_file(os.path.join(m.path, "d", "e", "c"), b"")
    os.symlink("a", os.path.join(m.path, "s"))
    os.mkfifo(os.path.join(m.path, "p"))
    unmount(m)
    return m


# ---- clean stores, usage ---------------------------------------------------------------------

def test_fsck_of_a_new_store_is_clean(test_base, rampart_env):
    store = os.path.join(test_base, "store")
    assert cli("mkfs", store, env=rampart_env).returncode == 0
    r = cli("fsck", store, env=rampart_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "clean" in r.stdout.splitlines()[-1], r.stdout
    assert r.stderr == "", f"no progress bar or message on a stderr that is not a terminal: {r.stderr!r}"


def test_fsck_of_a_clean_store_exits_0_and_changes_nothing(test_base, rampart_env, cleanup_mounts):
    m = _populated_store(test_base, rampart_env, cleanup_mounts, "clean")
    before = store_bytes(m)
    r = fsck(m)
    assert r.returncode == 0, r.stdout + r.stderr
    for word in ("superblock", "checkpoint", "journal", "replay", "invariants"):
        assert word in r.stdout, f"the report has no {word} line: {r.stdout}"
    assert r.stdout.splitlines()[-1].startswith("clean"), r.stdout
    r = fsck(m, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert store_bytes(m) == before, "fsck (even --repair) of a clean store changed its files"


def test_fsck_json_report(test_base, rampart_env, cleanup_mounts):
    m = _populated_store(test_base, rampart_env, cleanup_mounts, "json")
    r, rep = fsck_json(m)
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(rep) >= REPORT_KEYS, f"missing keys: {REPORT_KEYS - set(rep)}"
    for section, keys in SECTION_KEYS.items():
        assert set(rep[section]) >= keys, f"{section} lacks {keys - set(rep[section])}"
    assert rep["store"] == str(m.store)
    assert rep["clean"] is True and rep["repaired"] is False
    assert rep["problems"] == [] and rep["repairs"] == [] and rep["unrepairable"] is None
    assert rep["superblock"]["ok"] and rep["superblock"]["format_version"] == 1
    assert len(rep["superblock"]["store_id"]) == 32
    assert rep["checkpoint"]["present"] and rep["checkpoint"]["ok"]
    assert rep["checkpoint"]["bytes"] == os.path.getsize(m.store / "checkpoint")
    # after a clean unmount: an empty journal, nothing to replay
    j = rep["journal"]
    assert j["present"] and j["ok"] and j["batches"] == 0 and j["ops"] == 0
    assert j["valid_bytes"] == HEADER_BYTES and j["bytes"] == HEADER_BYTES + ZEROS_AHEAD_BYTES
    assert j["tail"] == {"state": "clean"}
    assert j["base_seq"] == j["next_seq"] == rep["checkpoint"]["seq"]
    assert rep["replay"]["ops_applied"] == 0 and rep["replay"]["failed"] is None
    assert rep["invariants"] == {"checked": True, "problems": []}
    fs = rep["filesystem"]
    assert (fs["files"], fs["directories"], fs["symlinks"], fs["other"]) == (3, 3, 1, 1), fs
    assert fs["inodes"] == 8 and fs["data_bytes"] == 70_100


def test_fsck_replays_the_journal_of_a_crashed_store(test_base, rampart_env, cleanup_mounts):
    m, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "crashed", n=3)
    r, rep = fsck_json(m)
    assert r.returncode == 0, json.dumps(rep, indent=1)
    j = rep["journal"]
    assert j["batches"] == len(journal_batches(read_file(m.store / "journal"))) >= 3
    assert j["ops"] >= 6 and j["tail"]["state"] == "clean"
    assert rep["checkpoint"]["present"] is False  # never unmounted: no checkpoint yet
    assert rep["replay"]["done"] and rep["replay"]["ops_applied"] == j["ops"]
    assert rep["filesystem"]["files"] == 3 and rep["filesystem"]["data_bytes"] == sum(len(c) for _, c, _ in files)


def test_fsck_refuses_a_mounted_store(mnt):
    write_file(os.path.join(mnt.path, "f"), b"x")
    before = store_bytes(mnt)
    for args in ((), ("--repair",), ("--json",)):
        r = fsck(mnt, *args)
        assert r.returncode == 1, f"fsck {args} of a mounted store exited {r.returncode}: {r.stdout}{r.stderr}"
        assert "already mounted" in r.stderr and str(mnt.store) in r.stderr, r.stderr
    assert store_bytes(mnt) == before
    assert mnt.alive()


def test_fsck_usage_and_bad_stores(test_base, rampart_env):
    assert cli("fsck", env=rampart_env).returncode == 2, "fsck without a store is bad usage"
    assert cli("fsck", "--no-such-option", test_base, env=rampart_env).returncode == 2
    missing = os.path.join(test_base, "no-store")
    r = cli("fsck", missing, env=rampart_env)
    assert r.returncode == 1 and missing in r.stderr, r.stderr
    assert not os.path.exists(missing), "fsck created a store"
    plain = os.path.join(test_base, "plain")
    os.mkdir(plain)
    r = cli("fsck", plain, env=rampart_env)
    assert r.returncode == 1 and plain in r.stderr and "not a rampart store" in r.stderr, r.stderr
    assert os.listdir(plain) == []


def test_fsck_damaged_superblock(test_base, rampart_env):
    store = os.path.join(test_base, "store")
    assert cli("mkfs", store, env=rampart_env).returncode == 0
    sb = os.path.join(store, "superblock")
    data = bytearray(read_file(sb))
    data[20] ^= 0xFF
    with open(sb, "wb") as f:
        f.write(data)
    r = cli("fsck", store, "--json", env=rampart_env)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["superblock"]["ok"] is False and "checksum" in rep["superblock"]["error"]
    assert rep["unrepairable"] and rep["clean"] is False
    r = cli("fsck", store, "--repair", env=rampart_env)
    assert r.returncode == 1 and "superblock" in r.stdout, r.stdout
    assert read_file(sb) == bytes(data), "fsck --repair rewrote a damaged superblock"


def test_fsck_progress_bar_on_a_terminal(test_base, rampart_env, cleanup_mounts):
    """With stderr on a terminal the progress bar is drawn, and the report is unchanged."""
    m, _ = files_by_batch(test_base, rampart_env, cleanup_mounts, "tty", n=2)
    master, slave = pty.openpty()
    p = subprocess.Popen([RAMPART_BIN, "fsck", str(m.store)], stdout=subprocess.PIPE, stderr=slave,
                         stdin=subprocess.DEVNULL, env=rampart_env)
    os.close(slave)
    chunks = []

    def drain():  # the terminal must be read while fsck runs, or its writes could block
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out, _ = p.communicate(timeout=120)
    reader.join(timeout=10)
    os.close(master)
    tty = b"".join(chunks)
    assert p.returncode == 0, out.decode() + tty.decode(errors="replace")
    assert out.decode().splitlines()[-1].startswith("clean")
    assert b"panicked" not in tty


# ---- torn and damaged journals -------------------------------------------------------------------

def test_fsck_torn_tail_is_reported_but_clean(test_base, rampart_env, cleanup_mounts):
    m, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "torn", n=3)
    journal = m.store / "journal"
    data = journal.read_bytes()
    start, end, _, _ = batch_ending_at(data, files[-1][2])
    # its last 5 bytes never written over the zeros kept ahead (a crash keeps the length)
    journal.write_bytes(data[:end - 5] + bytes(5) + data[end:])
    before = store_bytes(m)
    r = fsck(m)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torn tail" in r.stdout and "benign" in r.stdout, r.stdout
    r, rep = fsck_json(m)
    assert r.returncode == 0 and rep["clean"] and not rep["problems"]
    tail = rep["journal"]["tail"]
    assert tail["state"] == "torn" and tail["offset"] == start and tail["bytes"] == end - 5 - start, tail
    assert rep["journal"]["valid_bytes"] == start
    assert store_bytes(m) == before, "fsck changed a store whose only flaw is a torn tail"
    remount(m)
    for p, content, _ in files[:-1]:
        assert read_file(p) == content
    unmount(m)
    assert fsck(m).returncode == 0


def _damage_middle_batch(m, files):
    """Flips a bit in the batch of files[1] (valid batches follow); returns its offset and
    where the journal's batches end (reserved zeros follow, and are not counted as dropped)."""
    journal = m.store / "journal"
    data = bytearray(journal.read_bytes())
    start, end, _, _ = batch_ending_at(data, files[1][2])
    data[start + BATCH_HEADER_BYTES + 3] ^= 0x01
    journal.write_bytes(bytes(data))
    return start, files[-1][2]


def test_fsck_repairs_a_damaged_journal(test_base, rampart_env, cleanup_mounts):
    m, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "damaged", n=4)
    offset, length = _damage_middle_batch(m, files)
    before = store_bytes(m)
    r = fsck(m)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "damaged" in r.stdout.lower() and f"byte {offset}" in r.stdout, r.stdout
    assert "--repair" in r.stdout, "the report should say how to repair"
    r, rep = fsck_json(m)
    assert r.returncode == 1 and rep["clean"] is False and rep["unrepairable"] is None
    tail = rep["journal"]["tail"]
    assert tail["state"] == "damaged" and tail["offset"] == offset
    assert tail["dropped_bytes"] == length - offset
    assert tail["dropped_batches"] >= 2 and tail["dropped_ops"] >= 2, tail
    assert store_bytes(m) == before, "fsck without --repair changed the store"
    r = fsck(m, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"byte {offset}" in r.stdout and f"dropped {length - offset} bytes" in r.stdout, r.stdout
    assert "repaired" in r.stdout.splitlines()[-1]
    r, rep = fsck_json(m)
    assert r.returncode == 0 and rep["clean"], json.dumps(rep, indent=1)
    assert os.path.getsize(m.store / "journal") == HEADER_BYTES + ZEROS_AHEAD_BYTES
    remount(m)
    assert read_file(files[0][0]) == files[0][1]
    assert not os.path.exists(files[-1][0]), "a file whose batch followed the damage came back"
    unmount(m)
    assert_no_panic(m)


def _renumbered(batch_bytes, first_seq):
    """A copy of a journal batch with another first sequence number (and its checksum)."""
    b = bytearray(batch_bytes)
    struct.pack_into("<Q", b, 12, first_seq)
    struct.pack_into("<I", b, 8, crc32c(b[12:]))
    return bytes(b)


def test_fsck_stops_the_replay_at_an_op_that_does_not_apply(test_base, rampart_env, cleanup_mounts):
    m, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "replay", n=2)
    journal = m.store / "journal"
    data = journal.read_bytes()
    batches = journal_batches(data)
    next_seq = batches[-1][2] + batches[-1][3]
    # journal again, with new sequence numbers, everything up to the first file's fsync: its
    # creation does not apply a second time
    extra = b""
    for start, end, first_seq, op_count in batches:
        if end > files[0][2]:
            break
        extra += _renumbered(data[start:end], next_seq)
        next_seq += op_count
    # written where the daemon would have: at the end of the batches, over the reserved zeros
    end = files[-1][2]
    journal.write_bytes(data[:end] + extra + data[end + len(extra):])
    r, rep = fsck_json(m)
    assert r.returncode == 1, json.dumps(rep, indent=1)
    failed = rep["replay"]["failed"]
    assert failed and failed["seq"] >= batches[-1][2] + batches[-1][3], rep["replay"]
    assert "file0" in failed["op"] and failed["error"], failed
    assert rep["journal"]["ok"] and rep["journal"]["tail"]["state"] == "clean"
    r = m.cli("mount", m.store, m.path)
    assert r.returncode == 1 and "does not apply" in r.stderr, r.stderr
    r = fsck(m, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"op {failed['seq']}" in r.stdout and "stopped the replay" in r.stdout, r.stdout
    assert fsck(m).returncode == 0
    remount(m)
    for p, content, _ in files:
        assert read_file(p) == content
    assert sorted(os.listdir(m.path)) == ["file0", "file1"]
    unmount(m)


# ---- checkpoints -------------------------------------------------------------------------------------

def test_fsck_damaged_checkpoint_cannot_be_repaired(test_base, rampart_env, cleanup_mounts):
    m = _populated_store(test_base, rampart_env, cleanup_mounts, "badckpt")
    p = m.store / "checkpoint"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x20
    p.write_bytes(bytes(data))
    before = store_bytes(m)
    for args in ((), ("--repair",)):
        r = fsck(m, *args)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "checkpoint" in r.stdout and "cannot be repaired" in r.stdout, r.stdout
        assert "backup" in r.stdout, "the message should say what to do"
    r, rep = fsck_json(m, "--repair")
    assert r.returncode == 1 and rep["repaired"] is False and rep["unrepairable"]
    assert "checksum" in rep["checkpoint"]["error"]
    assert store_bytes(m) == before, "fsck --repair changed a store with a damaged checkpoint"


def _varint(b, at):
    value, shift = 0, 0
    while True:
        byte = b[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _varint_bytes(v):
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _root_inode_fields(body):
    """Offsets in a checkpoint body of the root inode's (first inode's) nlink varint and of its
    directory entries: (nlink_at, entry_count_at, entries_at)."""
    at = 0
    _, at = _varint(body, at)  # next generation
    owners, at = _varint(body, at)
    for _ in range(owners):  # mode, uid, gid, then one durability byte
        for _ in range(3):
            _, at = _varint(body, at)
        at += 1
    _, at = _varint(body, at)  # inode count
    delta, at = _varint(body, at)
    assert delta == 1, "the first inode is the root"
    _, at = _varint(body, at)  # generation
    _, at = _varint(body, at)  # owner index
    nlink_at = at
    _, at = _varint(body, at)
    for _ in range(3):  # mtime, ctime, atime
        _, at = _varint(body, at)
    _, at = _varint(body, at)  # parent
    return nlink_at, at


def _write_checkpoint(path, header, body):
    header = bytearray(header)
    struct.pack_into("<Q", header, 48, len(body))
    struct.pack_into("<I", header, 60, crc32c(header[:60]))
    path.write_bytes(bytes(header) + bytes(body) + struct.pack("<I", crc32c(body)))


def test_fsck_repairs_an_inconsistent_checkpoint(test_base, rampart_env, cleanup_mounts):
    """A checkpoint that decodes but breaks invariants (the root's link count, and a file no
    entry names) is refused at mount, and repaired by fsck: link counts recomputed, the
    unreachable file linked into /lost+found with its data."""
    m = new_mount(test_base, rampart_env, "inconsistent", cleanup_mounts)
    os.mkdir(os.path.join(m.path, "dir"))
    write_file(os.path.join(m.path, "kept"), b"kept")
    write_file(os.path.join(m.path, "orphan"), b"the orphan's data")
    orphan_ino = os.stat(os.path.join(m.path, "orphan")).st_ino
    unmount(m)
    p = m.store / "checkpoint"
    data = p.read_bytes()
    header, body = data[:HEADER_BYTES], bytearray(data[HEADER_BYTES:-4])
    nlink_at, count_at = _root_inode_fields(body)
    assert body[nlink_at] == 3  # root: 2 + one subdirectory
    body[nlink_at] = 9
    # remove the root's entry "orphan"
    count, at = _varint(body, count_at)
    assert count == 3 and body[count_at] == 3
    for _ in range(count):
        entry_at = at
        _, at = _varint(body, at)
        name_len, at = _varint(body, at)
        name = bytes(body[at:at + name_len])
        at += name_len
        if name == b"orphan":
            del body[entry_at:at]
            break
    else:
        raise AssertionError("no entry 'orphan' in the root's checkpoint record")
    body[count_at] = 2
    _write_checkpoint(p, header, body)
    r = m.cli("mount", m.store, m.path)
    assert r.returncode == 1 and "inconsistent" in r.stderr, r.stderr
    assert not in_mount_table(m.path)
    r, rep = fsck_json(m)
    assert r.returncode == 1, json.dumps(rep, indent=1)
    text = " ".join(rep["problems"])
    assert "inode 1: nlink 9" in text and f"inode {orphan_ino}" in text, rep["problems"]
    assert rep["checkpoint"]["ok"] is False and rep["checkpoint"]["problems"]
    r = fsck(m, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lost+found" in r.stdout and "link count" in r.stdout, r.stdout
    r = fsck(m)
    assert r.returncode == 0, r.stdout + r.stderr
    remount(m)
    assert sorted(os.listdir(m.path)) == ["dir", "kept", "lost+found"]
    assert read_file(os.path.join(m.path, "lost+found", f"#{orphan_ino}")) == b"the orphan's data"
    assert read_file(os.path.join(m.path, "kept")) == b"kept"
    assert os.stat(m.path).st_nlink == 4  # 2 + dir + lost+found
    unmount(m)
    assert fsck(m).returncode == 0
    assert_no_panic(m)


def test_fsck_journal_of_another_store_is_discarded_by_repair(test_base, rampart_env, cleanup_mounts):
    a = _populated_store(test_base, rampart_env, cleanup_mounts, "store-a")
    b, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "store-b", n=1)
    os.replace(b.store / "journal", a.store / "journal")
    r, rep = fsck_json(a)
    assert r.returncode == 1 and any("another store" in p for p in rep["problems"]), rep["problems"]
    r = fsck(a, "--repair")
    assert r.returncode == 0 and "another store" in r.stdout, r.stdout + r.stderr
    assert fsck(a).returncode == 0
    remount(a)
    assert read_file(os.path.join(a.path, "a")) == b"a" * 100
    assert not os.path.exists(os.path.join(a.path, "file0"))
    unmount(a)


def test_fsck_missing_checkpoint_is_not_guessed_at(test_base, rampart_env, cleanup_mounts):
    """A journal that continues a checkpoint which is gone cannot be replayed; fsck says how to
    go on and --repair changes nothing."""
    m = _populated_store(test_base, rampart_env, cleanup_mounts, "gap")
    remount(m)
    write_synced(os.path.join(m.path, "later"), b"after the checkpoint")
    crash(m)
    (m.store / "checkpoint").unlink()
    before = store_bytes(m)
    for args in ((), ("--repair",)):
        r, rep = fsck_json(m, *args)
        assert r.returncode == 1, json.dumps(rep, indent=1)
        assert rep["unrepairable"] and "journal" in rep["unrepairable"], rep["unrepairable"]
        assert any("no checkpoint" in p for p in rep["problems"]), rep["problems"]
    assert store_bytes(m) == before
    r = m.cli("mount", m.store, m.path)
    assert r.returncode == 1 and "missing" in r.stderr, r.stderr


# ---- any damage: no panic, and a repair that ends clean or a refusal that changes nothing ------------

def _mutate(rng, store):
    """One random damage to a copy of a store's checkpoint or journal; returns what it did."""
    name = rng.choice(["checkpoint", "journal"])
    p = store / name
    data = bytearray(p.read_bytes())
    kind = rng.choice(["flip", "flip", "truncate", "garbage", "append", "zero", "delete"])
    if kind == "flip":
        bit = rng.randrange(len(data) * 8)
        data[bit // 8] ^= 1 << (bit % 8)
        what = f"bit {bit}"
    elif kind == "truncate":
        n = rng.randrange(len(data))
        del data[n:]
        what = f"to {n} bytes"
    elif kind == "garbage":
        at = rng.randrange(len(data))
        n = rng.randrange(1, 64)
        data[at:at + n] = rng.randbytes(n)
        what = f"{n} bytes at {at}"
    elif kind == "append":
        data += rng.randbytes(rng.randrange(1, 200))
        what = "random bytes"
    elif kind == "zero":
        data = bytearray()
        what = "emptied"
    else:
        p.unlink()
        return f"{name}: deleted"
    p.write_bytes(bytes(data))
    return f"{name}: {kind} {what}"


def test_fsck_survives_any_damage(test_base, rampart_env, cleanup_mounts):
    import random
    import shutil
    m = new_mount(test_base, rampart_env, "fuzz", cleanup_mounts)
    for i in range(20):
        write_file(os.path.join(m.path, f"f{i}"), os.urandom(300 * i))
    os.mkdir(os.path.join(m.path, "d"))
    unmount(m)
    remount(m)
    for i in range(10):
        write_synced(os.path.join(m.path, "d", f"g{i}"), b"g" * (100 * i))
        os.rename(os.path.join(m.path, f"f{i}"), os.path.join(m.path, "d", f"moved{i}"))
    write_synced(os.path.join(m.path, "last"), b"last")
    crash(m)
    rng = random.Random(20261121)
    outcomes = {}
    for round_ in range(60):
        store = m.base / f"fuzz-{round_}"
        shutil.copytree(m.store, store, ignore=shutil.ignore_patterns("lock", "rampart.log", "control.sock"))
        what = _mutate(rng, store)
        r = cli("fsck", store, "--json", env=rampart_env)
        assert r.returncode in (0, 1), f"{what}: exit {r.returncode}: {r.stderr}"
        assert "internal error" not in r.stderr and "panicked" not in r.stderr, f"{what}: {r.stderr}"
        rep = json.loads(r.stdout)
        if r.returncode == 0:
            outcomes["clean"] = outcomes.get("clean", 0) + 1
        elif rep.get("unrepairable") or rep.get("error"):
            outcomes["refused"] = outcomes.get("refused", 0) + 1
            before = {n: (store / n).read_bytes() for n in ("checkpoint", "journal") if (store / n).exists()}
            r = cli("fsck", store, "--repair", env=rampart_env)
            assert r.returncode == 1, f"{what}: an unrepairable store 'repaired': {r.stdout}"
            after = {n: (store / n).read_bytes() for n in ("checkpoint", "journal") if (store / n).exists()}
            assert before == after, f"{what}: a refused repair changed the store"
        else:
            outcomes["repaired"] = outcomes.get("repaired", 0) + 1
            r = cli("fsck", store, "--repair", env=rampart_env)
            assert r.returncode == 0, f"{what}: --repair exited {r.returncode}:\n{r.stdout}{r.stderr}"
            r = cli("fsck", store, env=rampart_env)
            assert r.returncode == 0, f"{what}: not clean after the repair:\n{r.stdout}{r.stderr}"
        shutil.rmtree(store)
    # the damage is varied enough to reach every outcome
    assert set(outcomes) == {"clean", "refused", "repaired"}, outcomes


# ---- read-only stores ----------------------------------------------------------------------------

def _read_only_bind(test_base, source, name):
    """A read-only bind mount of the folder `source`; returns its path (unmounted by the caller)."""
    target = os.path.join(test_base, name)
    os.mkdir(target)
    subprocess.run(["mount", "--bind", str(source), target], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)
    except subprocess.CalledProcessError:
        subprocess.run(["umount", target], check=False)
        raise
    return target


def test_fsck_checks_a_read_only_store_and_writes_nothing(test_base, rampart_env, cleanup_mounts):
    m, files = files_by_batch(test_base, rampart_env, cleanup_mounts, "readonly", n=3)
    # A copy that was never mounted (no lock file): a check must not make one.
    import shutil
    copy = os.path.join(test_base, "readonly-copy")
    shutil.copytree(m.store, copy, ignore=shutil.ignore_patterns("lock", "rampart.log", "control.sock"))
    before = store_bytes(m)
    ro = _read_only_bind(test_base, m.store, "readonly-ro")
    try:
        r = cli("fsck", ro, "--json", env=rampart_env)
        assert r.returncode == 0, r.stdout + r.stderr
        rep = json.loads(r.stdout)
        assert rep["clean"] and rep["replay"]["done"] and rep["filesystem"]["files"] == 3, rep
        r = cli("fsck", ro, env=rampart_env)
        assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("clean"), r.stdout + r.stderr
        # A repair needs to write: it says so, and the store stays as it was.
        r = cli("fsck", ro, "--repair", env=rampart_env)
        assert r.returncode == 1 and ro in r.stderr, r.stdout + r.stderr
        assert "Read-only file system" in r.stderr, r.stderr
    finally:
        subprocess.run(["umount", ro], check=True)
    assert store_bytes(m) == before
    r = cli("fsck", copy, env=rampart_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not os.path.exists(os.path.join(copy, "lock")), "fsck without --repair made a lock file"
    # The copy's files, made read-only for everyone but root, are still read (root reads them).
    for name in os.listdir(copy):
        os.chmod(os.path.join(copy, name), 0o400)
    os.chmod(copy, 0o500)
    try:
        assert cli("fsck", copy, env=rampart_env).returncode == 0
    finally:
        os.chmod(copy, 0o700)


def test_fsck_repair_of_a_lost_journal_links_disk_tier_files_into_lost_and_found(test_base, rampart_env,
                                                                                 cleanup_mounts):
    """A large file written and fsync'd after the last checkpoint has its bytes in its host file,
    not in the journal: when the journal is lost, --repair keeps them in /lost+found (decision
    0127) instead of removing the host file as a crash's leftover."""
    m = _clean_store_with_files(test_base, rampart_env, cleanup_mounts, "lostjournal")
    remount(m)
    big = os.urandom(3 * 1024 * 1024 + 123)  # past the 1 MiB threshold: on the disk tier
    write_synced(os.path.join(m.path, "big"), big)
    crash(m)
    hosts = os.listdir(m.store / "data")
    assert len(hosts) == 1, hosts
    os.remove(m.store / "journal")
    r = fsck(m)
    assert r.returncode == 1, r.stdout + r.stderr
    r = fsck(m, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "as /lost+found/#host-" in r.stdout and hosts[0] in r.stdout, r.stdout
    assert fsck(m).returncode == 0
    remount(m)
    found = os.listdir(os.path.join(m.path, "lost+found"))
    assert len(found) == 1 and found[0].startswith("#host-"), found
    adopted = os.path.join(m.path, "lost+found", found[0])
    assert read_file(adopted) == big, "the adopted file does not hold the bytes written"
    st = os.stat(adopted)
    assert st.st_uid == 0 and (st.st_mode & 0o777) == 0o600, oct(st.st_mode)
    assert read_file(os.path.join(m.path, "f00")), "the checkpoint's files were lost"
    unmount(m)
    assert fsck(m).returncode == 0
    assert_no_panic(m)

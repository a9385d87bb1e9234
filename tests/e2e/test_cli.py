"""The rampart command line (docs/CLI.md): mkfs, mount refusals, status, shutdown.
All rampart-specific, so skipped on the tmpfs target."""

import errno
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from e2e_helpers import (RAMPART_BIN, MiB, Mount, in_mount_table, mount_entries, pid_alive, read_file, run,
                         wait_until, write_file)

pytestmark = pytest.mark.rampart_only("tests the rampart binary, daemon and store")

# Generous bounds: these only keep a broken daemon from hanging the suite.
EXIT_WAIT = 30


def cli(*args, env=None, timeout=120):
    return run([RAMPART_BIN, *args], env=env, timeout=timeout)


# ---- mkfs ---------------------------------------------------------------------------

def test_mkfs_creates_store(test_base, rampart_env):
    store = os.path.join(test_base, "store")
    r = cli("mkfs", store, env=rampart_env)
    assert r.returncode == 0, r.stderr
    st = os.stat(store)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert os.path.isfile(os.path.join(store, "superblock"))


def test_mkfs_refuses_non_empty_folder(test_base, rampart_env):
    store = os.path.join(test_base, "full")
    os.mkdir(store)
    write_file(os.path.join(store, "precious"), b"do not touch")
    r = cli("mkfs", store, env=rampart_env)
    assert r.returncode == 1, f"exit {r.returncode}"
    assert store in r.stderr, f"message does not name the path: {r.stderr!r}"
    assert os.listdir(store) == ["precious"] and read_file(os.path.join(store, "precious")) == b"do not touch"


def test_bad_usage_exits_2(test_base, rampart_env):
    assert cli("no-such-command", env=rampart_env).returncode == 2
    assert cli("mount", "--no-such-option", env=rampart_env).returncode == 2
    store, mnt = os.path.join(test_base, "s"), os.path.join(test_base, "m")
    for bad in (["--threads", "0"], ["--threads", "100000"], ["--threads", "x"], ["--log-level", "bogus"]):
        r = cli("mount", *bad, store, mnt, env=rampart_env)
        assert r.returncode == 2, f"{bad}: exit {r.returncode}"
        assert bad[0] in r.stderr, f"{bad}: message does not name the option: {r.stderr!r}"
    assert not os.path.exists(store), "a refused mount created the store"
    assert cli("status", env=rampart_env).returncode == 2, "status without a mount point is bad usage"


# ---- mount refusals ---------------------------------------------------------------------

def test_mount_missing_mountpoint(test_base, rampart_env):
    store = os.path.join(test_base, "store")
    assert cli("mkfs", store, env=rampart_env).returncode == 0
    missing = os.path.join(test_base, "does", "not", "exist")
    r = cli("mount", store, missing, env=rampart_env)
    assert r.returncode == 1, f"exit {r.returncode}, stderr {r.stderr!r}"
    assert missing in r.stderr, f"message does not name the mount point: {r.stderr!r}"
    assert not os.path.exists(missing), "an explicit missing mount point must not be created"
    assert not in_mount_table(missing)


def test_mount_folder_that_is_not_a_store(test_base, rampart_env):
    notstore = os.path.join(test_base, "notastore")
    os.mkdir(notstore)
    write_file(os.path.join(notstore, "hello.txt"), b"hi")
    mp = os.path.join(test_base, "mp")
    os.mkdir(mp)
    r = cli("mount", notstore, mp, env=rampart_env)
    assert r.returncode == 1, f"exit {r.returncode}, stderr {r.stderr!r}"
    assert notstore in r.stderr, f"message does not name the store: {r.stderr!r}"
    assert "store" in r.stderr.lower(), f"message does not say what is wrong: {r.stderr!r}"
    assert os.listdir(notstore) == ["hello.txt"], "the folder was modified"
    assert not in_mount_table(mp)


def test_second_mount_of_same_store_refused(mnt, test_base):
    write_file(os.path.join(mnt.path, "before"), b"1")
    mp2 = os.path.join(test_base, "second")
    os.mkdir(mp2)
    r = mnt.cli("mount", mnt.store, mp2)
    assert r.returncode == 1, f"second mount exited {r.returncode}: {r.stderr!r}"
    assert "already mounted" in r.stderr, r.stderr
    assert not in_mount_table(mp2)
    # the same mount point again: also refused, and no second mount stacked on it
    r = mnt.cli("mount", mnt.store, mnt.path)
    assert r.returncode != 0, "mounting the same store on the same mount point again succeeded"
    assert len(mount_entries(mnt.path)) == 1
    # the first mount keeps working
    assert mnt.alive()
    write_file(os.path.join(mnt.path, "after"), b"2")
    assert read_file(os.path.join(mnt.path, "before")) == b"1"
    assert sorted(os.listdir(mnt.path)) == ["after", "before"]


def test_mount_returns_with_pipes_closed(test_base, rampart_env, cleanup_mounts):
    """`rampart mount` must return with stdout/stderr pipes closed by the daemon, or
    `rampart mount ... | cat` and scripts capturing the output would hang."""
    m = Mount(test_base, "pipes", env=rampart_env)
    cleanup_mounts.append(m)
    m.mkfs()
    os.mkdir(m.path)
    p = subprocess.Popen([RAMPART_BIN, "mount", str(m.store), str(m.path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=rampart_env)
    m.mounted = True
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("`rampart mount` with piped output did not finish: the daemon keeps the pipes open")
    assert p.returncode == 0, err
    assert os.path.ismount(m.path)
    m.pid = m.find_daemon_pid()
    r = m.umount()
    assert r.returncode == 0, r.stderr


def test_foreground_mode(test_base, rampart_env, cleanup_mounts):
    m = Mount(test_base, "fg", env=rampart_env)
    cleanup_mounts.append(m)
    m.mkfs()
    os.mkdir(m.path)
    p = subprocess.Popen([RAMPART_BIN, "mount", str(m.store), str(m.path), "--foreground"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=rampart_env)
    m.mounted = True
    m.pid = p.pid
    try:
        line = p.stdout.readline()
        assert line.strip() == b"ready", f"first line on stdout: {line!r}"
        assert os.path.ismount(m.path)
        write_file(os.path.join(m.path, "x"), b"x")
        r = m.umount()
        assert r.returncode == 0, r.stderr
        assert p.wait(timeout=EXIT_WAIT) == 0, "foreground daemon did not exit 0 after umount"
    finally:
        if p.poll() is None:
            m.force_cleanup()
            p.wait(timeout=EXIT_WAIT)


def test_umount_of_something_not_mounted(test_base, rampart_env):
    p = os.path.join(test_base, "plain")
    os.mkdir(p)
    r = cli("umount", p, env=rampart_env)
    assert r.returncode == 1, f"exit {r.returncode}"
    assert p in r.stderr


# ---- status ---------------------------------------------------------------------------------

KEYS = ("files", "directories", "symlinks", "other", "inodes", "data_bytes", "memory_used_bytes",
        "memory_cap_bytes")


def test_status_keys_and_plain_form(mnt):
    st = mnt.status()
    for k in KEYS:
        assert k in st and isinstance(st[k], int) and st[k] >= 0, f"status --json: {k} missing or not a count"
    assert st["memory_cap_bytes"] > 0
    r = mnt.cli("status", mnt.path)
    assert r.returncode == 0, r.stderr
    plain = {}
    for line in r.stdout.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            plain[k.strip()] = v.strip()
    for k in ("files", "directories", "symlinks", "other", "inodes", "data_bytes"):
        assert k in plain, f"plain status lacks {k}: {r.stdout!r}"
        assert plain[k].split()[0] == str(st[k]), f"plain {k}={plain[k]!r} vs json {st[k]}"


def test_status_output_errors_are_reported_not_panics(mnt):
    with open("/dev/full", "w") as full:
        r = subprocess.run([RAMPART_BIN, "status", str(mnt.path)], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    assert r.returncode == 1, f"exit {r.returncode}: {r.stderr!r}"
    assert "cannot write to standard output" in r.stderr and "panicked" not in r.stderr, r.stderr
    # A reader that has gone (`| head -1` after its line) ends the output quietly: the pipe is
    # closed before the status has been fetched from the daemon and written.
    p = subprocess.Popen([RAMPART_BIN, "status", "--json", str(mnt.path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert "panicked" not in err and p.returncode == 0, f"exit {p.returncode}: {err!r}"


def _populate(root):
    os.mkdir(root)
    os.mkdir(os.path.join(root, "sub1"))
    os.mkdir(os.path.join(root, "sub2"))
    sizes = [4096 * (i + 1) for i in range(7)]
    for i, size in enumerate(sizes):
        p = os.path.join(root if i % 2 else os.path.join(root, "sub1"), f"file{i}")
        fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, bytes([65 + i]) * size)
        os.fsync(fd)
        os.close(fd)
    os.symlink("file1", os.path.join(root, "link"))
    os.mkfifo(os.path.join(root, "fifo"))
    return sum(sizes)


COUNT_KEYS = ("files", "directories", "symlinks", "other", "inodes", "data_bytes")


def _settled_status(mnt, want):
    """The kernel's FORGET of deleted inodes is asynchronous: give it time to arrive."""
    back = {}

    def settled():
        back.update(mnt.status())
        return all(back[k] == want[k] for k in COUNT_KEYS)

    wait_until(settled, timeout=10, interval=0.2)
    return back


def test_status_counts(mnt):
    """7 files, 3 directories, a symlink and a fifo change the counts by exactly that."""
    before = mnt.status()
    root = os.path.join(mnt.path, "counted")
    data = _populate(root)
    after = mnt.status()
    delta = {k: after[k] - before[k] for k in COUNT_KEYS}
    assert delta == {"files": 7, "directories": 3, "symlinks": 1, "other": 1, "inodes": 12,
                     "data_bytes": data}, f"status changes {delta}"
    assert after["memory_used_bytes"] - before["memory_used_bytes"] >= data, \
        "the memory charge grew by less than the data written"
    run(["rm", "-rf", root], check=True)
    back = _settled_status(mnt, before)
    for k in COUNT_KEYS:
        assert back[k] == before[k], f"after deleting everything, {k} is {back[k]}, was {before[k]}"


def test_status_memory_given_back(mnt):
    """docs/decisions/0007: deletions give the memory back. Containers may keep some
    capacity, so: close to the start after one round, and no growth over more rounds."""
    before = mnt.status()
    rounds = []
    for i in range(3):
        root = os.path.join(mnt.path, "counted")
        _populate(root)
        run(["rm", "-rf", root], check=True)
        rounds.append(_settled_status(mnt, before)["memory_used_bytes"])
    assert rounds[0] - before["memory_used_bytes"] <= 16 * 1024, (before["memory_used_bytes"], rounds)
    assert rounds[2] == rounds[1] == rounds[0], f"memory charge grows per create/delete round: {rounds}"


def test_memory_cap_holds_for_many_directories(mount_factory):
    """Small inodes in great numbers: the cap (which counts the inode table too) stops them
    with ENOSPC before the memory used passes it, and deleting them gives the memory back."""
    cap = 4 << 20
    m = mount_factory("--memory-cap", str(cap), name="capdirs")
    base = m.status()["memory_used_bytes"]
    made = 0
    with pytest.raises(OSError) as full:
        while made < 200_000:
            os.mkdir(os.path.join(m.path, f"d{made}"))
            made += 1
    assert full.value.errno == errno.ENOSPC, full.value
    used = m.status()["memory_used_bytes"]
    assert used <= cap, f"{used} bytes used under a cap of {cap} after {made} directories"
    for i in range(made):
        os.rmdir(os.path.join(m.path, f"d{i}"))
    left = _settled_status(m, {k: 0 for k in COUNT_KEYS} | {"inodes": 1, "directories": 1})
    assert left["memory_used_bytes"] < base + 256 * 1024, \
        f"{left['memory_used_bytes']} bytes still used after deleting every directory ({base} at first)"
    write_file(os.path.join(m.path, "again"), os.urandom(1 << 20))


def test_posix_fallocate_reserves_memory(mount_factory):
    """posix_fallocate promises that writes into the range will not fail for want of space:
    the memory is taken at once, other files cannot have it, and the range takes its writes
    when the cap is otherwise full."""
    cap = 64 << 20
    m = mount_factory("--memory-cap", str(cap), "--large-file-threshold", "off", name="capfalloc")
    a = os.path.join(m.path, "a")
    fd = os.open(a, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.posix_fallocate(fd, 0, 32 << 20)
        assert m.status()["memory_used_bytes"] >= 32 << 20, "posix_fallocate reserved no memory"
        chunk = os.urandom(1 << 20)
        with pytest.raises(OSError) as full:
            fb = os.open(os.path.join(m.path, "b"), os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                for _ in range(64):
                    os.write(fb, chunk)
                os.fsync(fb)
            finally:
                os.close(fb)
        assert full.value.errno == errno.ENOSPC, full.value
        data = os.urandom(32 << 20)
        assert os.pwrite(fd, data, 0) == len(data)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert read_file(a) == data
    assert m.status()["memory_used_bytes"] <= cap


def test_status_memory_cap_option(mount_factory):
    m = mount_factory("--memory-cap", "64M", name="cap64")
    assert m.status()["memory_cap_bytes"] == 64 * 1024 * 1024
    m2 = mount_factory("--memory-cap", "123456789", name="capbytes")
    assert m2.status()["memory_cap_bytes"] == 123456789


def test_status_shows_when_the_next_checkpoint_is_due(mount_factory):
    """--checkpoint-after auto (the default) waits for 256 MiB of journal, or for the last
    checkpoint's size if larger (decision 0025); a size given waits for exactly that."""
    m = mount_factory(name="ckauto")
    p = m.status()["persistence"]
    assert p["checkpoint_due_at_journal_bytes"] == 256 * MiB, p
    # A mount holding more than 256 MiB in memory (small files: a large one would live on the
    # disk tier, outside the image): the next checkpoint waits for its image's size.
    block = os.urandom(MiB // 2)
    for i in range(520):
        with open(os.path.join(m.path, f"f{i}"), "wb") as f:
            f.write(block)
    assert m.umount().returncode == 0
    m.mount(mkfs=False)
    p = m.status()["persistence"]
    assert p["checkpoint_image_bytes"] > 260 * MiB, p
    assert p["checkpoint_due_at_journal_bytes"] >= p["checkpoint_image_bytes"], p
    m2 = mount_factory("--checkpoint-after", "64K", name="ck64k")
    assert m2.status()["persistence"]["checkpoint_due_at_journal_bytes"] == 64 * 1024
    m3 = mount_factory("--checkpoint-after", "auto", name="ckauto2")
    assert m3.status()["persistence"]["checkpoint_due_at_journal_bytes"] == 256 * MiB


# ---- shutdown ---------------------------------------------------------------------------------

def _fresh(test_base, env, name, cleanup):
    m = Mount(test_base, name, env=env)
    cleanup.append(m)
    m.mount()
    assert m.pid, f"could not find the daemon's pid ({m.pid_source})"
    assert pid_alive(m.pid)
    write_file(os.path.join(m.path, "f"), b"x")
    return m


def _assert_gone_and_remountable(m, how):
    assert wait_until(lambda: not in_mount_table(m.path), EXIT_WAIT), f"still mounted after {how}"
    m.mounted = False
    assert wait_until(lambda: not pid_alive(m.pid), EXIT_WAIT), f"daemon pid {m.pid} still running after {how}"
    # the store was released: it can be mounted again
    r = m.cli("mount", m.store, m.path)
    assert r.returncode == 0, f"remount after {how} failed: {r.stderr}"
    m.mounted = True
    m.pid = m.find_daemon_pid()
    assert m.alive()
    r = m.umount()
    assert r.returncode == 0, r.stderr
    assert wait_until(lambda: not m.pid or not pid_alive(m.pid), EXIT_WAIT)


def test_umount_ends_daemon(test_base, rampart_env, cleanup_mounts):
    m = _fresh(test_base, rampart_env, "um", cleanup_mounts)
    r = m.umount()
    assert r.returncode == 0, r.stderr
    _assert_gone_and_remountable(m, "rampart umount")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_unmounts_cleanly(test_base, rampart_env, cleanup_mounts, sig):
    m = _fresh(test_base, rampart_env, f"sig{int(sig)}", cleanup_mounts)
    os.kill(m.pid, sig)
    _assert_gone_and_remountable(m, sig.name)


def _fusermount_u(path):
    """A bare `fusermount3 -u`. The daemon's page flusher holds the mount for an instant every
    2.5 s (decision 0026): an unmount that meets it is told "busy", and a second try gets
    through."""
    for _ in range(5):
        r = run(["fusermount3", "-u", path], timeout=120)
        if r.returncode == 0 or "busy" not in r.stderr:
            return r
        time.sleep(0.05)
    return r


def test_fusermount_u_ends_daemon(test_base, rampart_env, cleanup_mounts):
    m = _fresh(test_base, rampart_env, "fu", cleanup_mounts)
    r = _fusermount_u(m.path)
    assert r.returncode == 0, r.stderr
    _assert_gone_and_remountable(m, "fusermount3 -u")


def test_old_daemon_leaves_a_new_mount_and_store_alone(test_base, rampart_env, cleanup_mounts):
    """`fusermount3 -u` returns before the daemon has written its final checkpoint. If the
    store is then deleted, made anew at the same path and mounted at the same place while the
    old daemon is still finishing, the old daemon must not unmount the new mount, remove its
    control socket or write its checkpoint into the new store."""
    m = _fresh(test_base, rampart_env, "replace", cleanup_mounts)
    old_pid = m.pid
    # Data enough that the final checkpoint takes a while (it is written and synced).
    chunk = os.urandom(1 << 20)
    for i in range(192):
        write_file(os.path.join(m.path, f"big{i}"), chunk)
    r = _fusermount_u(m.path)
    assert r.returncode == 0, r.stderr
    m.mounted = False
    run(["rm", "-rf", str(m.store)], check=True, timeout=120)
    m.mount()
    if not pid_alive(old_pid):
        pytest.skip("the old daemon finished before the new mount was up; nothing raced")
    write_file(os.path.join(m.path, "new"), b"new store")
    assert wait_until(lambda: not pid_alive(old_pid), EXIT_WAIT), f"old daemon {old_pid} still running"
    assert m.alive(), "the new mount is gone after the old daemon exited"
    assert read_file(os.path.join(m.path, "new")) == b"new store"
    assert m.status()["pid"] == m.pid, "the new daemon's control socket is gone"
    r = m.umount()
    assert r.returncode == 0, r.stderr
    r = m.cli("fsck", m.store)
    assert r.returncode == 0, f"fsck of the new store:\n{r.stdout}\n{r.stderr}"
    m.mount(mkfs=False)
    assert os.listdir(m.path) == ["new"], "the new store holds files of the old one"
    assert read_file(os.path.join(m.path, "new")) == b"new store"
    assert m.umount().returncode == 0


def _fusectl_abort_file(mountpoint):
    """/sys/fs/fuse/connections/<minor>/abort of the mount at `mountpoint` (fusectl mounted
    first if it is not), or None."""
    conns = "/sys/fs/fuse/connections"
    if not os.path.isdir(conns) or not os.listdir(conns):
        run(["mount", "-t", "fusectl", "fusectl", conns], timeout=60)
    entries = mount_entries(mountpoint)
    if not entries:
        return None
    minor = entries[-1].split()[2].split(":")[1]
    abort = os.path.join(conns, minor, "abort")
    return abort if os.path.exists(abort) else None


def test_aborted_connection_is_detached_and_store_survives(test_base, rampart_env, cleanup_mounts):
    """An aborted FUSE connection (fusectl) ends the daemon like an unmount: the dead mount is
    detached, and what was synced is there at the next mount."""
    m = _fresh(test_base, rampart_env, "abort", cleanup_mounts)
    fd = os.open(os.path.join(m.path, "synced"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"durable")
    os.fsync(fd)
    os.close(fd)
    abort = _fusectl_abort_file(m.path)
    if abort is None:
        pytest.skip("no fusectl abort file on this machine")
    with open(abort, "w") as f:
        f.write("1")
    assert wait_until(lambda: not pid_alive(m.pid), EXIT_WAIT), "daemon still running after the abort"
    assert wait_until(lambda: not in_mount_table(m.path), EXIT_WAIT), "the dead mount was left behind"
    m.mounted = False
    r = m.cli("fsck", m.store)
    assert r.returncode == 0, f"fsck after an abort:\n{r.stdout}\n{r.stderr}"
    m.mount(mkfs=False)
    assert read_file(os.path.join(m.path, "synced")) == b"durable"
    assert m.umount().returncode == 0


def test_store_usable_after_daemon_killed(test_base, rampart_env, cleanup_mounts):
    """After SIGKILL (a crash), the store must not stay locked as 'already mounted'
    forever: once the dead mount is cleaned away, the store mounts again."""
    m = _fresh(test_base, rampart_env, "kill", cleanup_mounts)
    os.kill(m.pid, signal.SIGKILL)
    assert wait_until(lambda: not pid_alive(m.pid), EXIT_WAIT)
    run(["fusermount3", "-u", "-z", m.path], timeout=60)
    assert wait_until(lambda: not in_mount_table(m.path), EXIT_WAIT)
    m.mounted = False
    r = m.cli("mount", m.store, m.path)
    assert r.returncode == 0, f"mount after a crash failed: {r.stderr}"
    m.mounted = True
    m.pid = m.find_daemon_pid()
    assert m.alive()
    assert m.umount().returncode == 0


# ---- defaults, options, store files -------------------------------------------------------------

def _meminfo_total():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def test_mount_defaults(test_base, cleanup_mounts):
    """No arguments: the store $RAMPART_HOME/store is created and mounted at ~/rampart."""
    home = os.path.join(test_base, "home")
    rhome = os.path.join(test_base, "rhome")
    os.mkdir(home)
    env = dict(os.environ, HOME=home, RAMPART_HOME=rhome)
    m = Mount(test_base, "defaults", env=env)
    m.store = Path(rhome) / "store"
    m.path = Path(home) / "rampart"
    cleanup_mounts.append(m)
    r = cli("mount", env=env)
    m.mounted = in_mount_table(m.path)
    assert r.returncode == 0, r.stderr
    assert m.mounted and os.path.ismount(m.path), "not mounted at $HOME/rampart"
    assert os.path.isfile(os.path.join(rhome, "store", "superblock"))
    write_file(os.path.join(m.path, "x"), b"x")
    m.pid = m.find_daemon_pid()
    assert m.umount().returncode == 0
    # a second run reuses the store (and the existing mount point)
    r = cli("mount", env=env)
    m.mounted = in_mount_table(m.path)
    assert r.returncode == 0, r.stderr
    m.pid = m.find_daemon_pid()
    assert m.umount().returncode == 0


def test_explicit_missing_store_is_not_created(test_base, rampart_env):
    store = os.path.join(test_base, "typo-store")
    mp = os.path.join(test_base, "mp")
    os.mkdir(mp)
    r = cli("mount", store, mp, env=rampart_env)
    assert r.returncode == 1, f"exit {r.returncode}"
    assert store in r.stderr
    assert not os.path.exists(store), "an explicitly named store must never be created implicitly"
    assert not in_mount_table(mp)


def test_damaged_superblock_refused(test_base, rampart_env):
    store = os.path.join(test_base, "store")
    assert cli("mkfs", store, env=rampart_env).returncode == 0
    sb = os.path.join(store, "superblock")
    data = bytearray(read_file(sb))
    data[20] ^= 0xFF  # inside store_id: the checksum no longer matches
    with open(sb, "wb") as f:
        f.write(data)
    mp = os.path.join(test_base, "mp")
    os.mkdir(mp)
    r = cli("mount", store, mp, env=rampart_env)
    assert r.returncode == 1, f"exit {r.returncode}: {r.stderr}"
    assert store in r.stderr, r.stderr
    assert not in_mount_table(mp)
    assert read_file(sb) == bytes(data), "a damaged superblock must not be rewritten"


def test_private_mount(mount_factory):
    from e2e_helpers import nobody_py
    m = mount_factory("--private", name="private")
    os.chmod(m.path, 0o755)
    write_file(os.path.join(m.path, "f"), b"x")
    os.chmod(os.path.join(m.path, "f"), 0o644)
    e, _ = nobody_py("os.stat(args[0])", os.path.join(m.path, "f"))
    assert e == 13, f"--private: another user could reach the mount (errno {e})"
    pub = mount_factory(name="public")
    write_file(os.path.join(pub.path, "f"), b"x")
    assert nobody_py("result = open(args[0]).read()", os.path.join(pub.path, "f")) == (0, "x")


def test_threads_and_log_level_options(mount_factory):
    m = mount_factory("--threads", "1", "--log-level", "debug", name="opts")
    for i in range(50):
        write_file(os.path.join(m.path, f"f{i}"), b"x" * i)
    assert len(os.listdir(m.path)) == 50
    assert m.status()["files"] >= 50


def test_memory_cap_forms(mount_factory):
    total = _meminfo_total()
    m = mount_factory(name="default-cap")
    assert abs(m.status()["memory_cap_bytes"] - total // 2) <= total // 50, "default cap is not 50% of RAM"
    m = mount_factory("--memory-cap", "10%", name="pct")
    assert abs(m.status()["memory_cap_bytes"] - total // 10) <= total // 100
    m = mount_factory("--memory-cap", "1G", name="gig")
    assert m.status()["memory_cap_bytes"] == 1 << 30
    m = mount_factory("--memory-cap", "512K", name="kib")
    assert m.status()["memory_cap_bytes"] == 512 << 10


@pytest.mark.parametrize("value", ["banana", "0", "0%", "16E"])
def test_bad_memory_cap_value(test_base, rampart_env, value):
    store = os.path.join(test_base, "store")
    assert cli("mkfs", store, env=rampart_env).returncode == 0
    mp = os.path.join(test_base, "mp")
    os.mkdir(mp)
    r = cli("mount", store, mp, "--memory-cap", value, env=rampart_env)
    assert r.returncode == 2, f"bad usage must exit 2, not {r.returncode}"
    assert value in r.stderr and "memory-cap" in r.stderr, r.stderr
    assert not in_mount_table(mp)


@pytest.mark.parametrize("value", ["1K", "50%", "2T", "banana"])
def test_bad_checkpoint_after_value(test_base, rampart_env, value):
    store = os.path.join(test_base, "store")
    assert cli("mkfs", store, env=rampart_env).returncode == 0
    mp = os.path.join(test_base, "mp")
    os.mkdir(mp)
    r = cli("mount", store, mp, "--checkpoint-after", value, env=rampart_env)
    assert r.returncode == 2, f"bad usage must exit 2, not {r.returncode}"
    assert value in r.stderr, r.stderr
    assert not in_mount_table(mp)


def _rss_bytes(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_memory_goes_back_to_the_system_after_deletes(mnt):
    """The daemon gives freed memory back (malloc_trim) once the file system has shrunk."""
    pid = mnt.status()["pid"]
    chunk = os.urandom(1 << 20)
    for i in range(256):  # 256 MiB of file data in memory
        with open(os.path.join(mnt.path, f"big{i}"), "wb") as f:
            f.write(chunk)
    full = _rss_bytes(pid)
    assert full > 256 << 20, f"the daemon holds only {full} bytes with 256 MiB of files"
    for i in range(256):
        os.unlink(os.path.join(mnt.path, f"big{i}"))
    assert wait_until(lambda: _rss_bytes(pid) < full - (192 << 20), timeout=30, interval=0.5), \
        f"resident memory stayed at {_rss_bytes(pid)} bytes (was {full}) after every file was deleted"


def test_store_files_while_mounted_and_after(mnt):
    """docs/FORMAT.md: `lock` holds the daemon's pid and `mounted`; control.sock goes away on exit."""
    st = mnt.status()
    lock_lines = read_file(os.path.join(mnt.store, "lock")).decode().splitlines()
    assert lock_lines == [str(st["pid"]), "mounted"] and st["pid"] == mnt.pid, lock_lines
    assert os.path.exists(os.path.join(mnt.store, "control.sock"))
    assert mnt.umount().returncode == 0
    assert not os.path.exists(os.path.join(mnt.store, "control.sock"))
    mnt.mount(mkfs=False)  # the fixture unmounts it again


def test_umount_of_a_mount_whose_store_was_deleted_says_so_and_unmounts(
        test_base, rampart_env, cleanup_mounts):
    """Decision 0121: not "not a rampart mount"; status says the mount still serves its files
    and how to unmount it, umount unmounts and says what went with the store."""
    import shutil
    m = _fresh(test_base, rampart_env, "gone", cleanup_mounts)
    pid = m.pid
    write_file(os.path.join(m.path, "f"), b"still served")
    shutil.rmtree(m.store)
    s = m.cli("status", m.path)
    assert s.returncode != 0
    assert "no longer at" in s.stderr and str(m.store) in s.stderr, s.stderr
    assert "deleted or moved while mounted" in s.stderr, s.stderr
    assert f"rampart umount {m.path}" in s.stderr, s.stderr
    assert read_file(os.path.join(m.path, "f")) == b"still served"
    r = m.cli("umount", m.path)
    assert r.returncode != 0, "an unmount that lost the mount's files reported success"
    assert "unmounted" in r.stderr and "deleted or moved while mounted" in r.stderr, r.stderr
    assert "nothing is left to recover" not in r.stderr, r.stderr
    assert "not a rampart mount" not in r.stderr, r.stderr
    assert not in_mount_table(m.path), "still mounted"
    m.mounted = False
    assert wait_until(lambda: not pid_alive(pid), EXIT_WAIT), f"daemon {pid} outlived its unmount"
    again = m.cli("umount", m.path)
    assert again.returncode != 0 and "not a rampart mount" in again.stderr, again.stderr


def test_the_mount_helper_remounts_read_only_and_back(test_base, rampart_env, cleanup_mounts):
    """`mount -o remount,ro` runs mount.fuse.rampart with `remount` and what /proc/mounts shows
    (user_id=, nosuid, ...): the kernel's flags change, no daemon starts, rampart's own options
    are ignored, said under -v (xfstests generic/294, 306, 452; decision 0138)."""
    m = Mount(test_base, "remount", env=rampart_env)
    cleanup_mounts.append(m)
    m.mount()
    helper = os.path.join(test_base, "mount.fuse.rampart")
    os.symlink(RAMPART_BIN, helper)
    pid = m.pid
    with open(os.path.join(m.path, "a"), "w") as f:
        f.write("kept")

    def remount(options, *flags):
        r = run([helper, str(m.store), str(m.path), *flags, "-o", options], timeout=60, env=rampart_env)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    def flags():
        return mount_entries(m.path)[-1].split()[5].split(",")

    remount("rw,nosuid,nodev,relatime,user_id=0,group_id=0,default_permissions,remount,ro")
    assert "ro" in flags() and "nosuid" in flags() and "nodev" in flags(), flags()
    with pytest.raises(OSError) as e:
        open(os.path.join(m.path, "b"), "w")
    assert e.value.errno == errno.EROFS
    assert read_file(os.path.join(m.path, "a")) == b"kept"
    r = remount("remount,ro,memory_cap=1G")
    assert r.stderr == "", r.stderr  # mount(8) and fstab repeat the options: no noise
    r = remount("remount,rw,memory_cap=1G", "-v")
    assert "ignored at remount" in r.stderr and "memory_cap=1G" in r.stderr, r.stderr
    assert "rw" in flags() and "nosuid" in flags(), flags()
    with open(os.path.join(m.path, "b"), "w") as f:
        f.write("after")
    assert m.find_daemon_pid() == pid, "a remount started another daemon"
    r = m.umount()
    assert r.returncode == 0, r.stderr


def test_umount_of_a_bind_mount_leaves_the_daemon_serving(test_base, rampart_env, cleanup_mounts):
    """`umount` of a bind mount of a file in a rampart mount (umount(8) runs
    umount.fuse.rampart, i.e. `rampart umount`): the daemon serves on for the other mount, so
    there is no shutdown to wait for. It waited for the daemon's exit, forever (xfstests
    generic/306; decision 0139)."""
    m = Mount(test_base, "bind", env=rampart_env)
    cleanup_mounts.append(m)
    m.mount()
    target = os.path.join(m.path, "target")
    with open(target, "w") as f:
        f.write("t")
    spot = os.path.join(test_base, "bindfile")
    open(spot, "w").close()
    run(["mount", "--bind", target, spot], check=True, timeout=60)
    try:
        r = run([RAMPART_BIN, "umount", spot], timeout=120, env=rampart_env)
    except subprocess.TimeoutExpired:
        run(["umount", "-l", spot], timeout=60)
        raise AssertionError("rampart umount of a bind mount waited for a daemon that serves on")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not in_mount_table(spot)
    assert m.alive() and read_file(target) == b"t"
    assert pid_alive(m.pid)
    r = m.umount()
    assert r.returncode == 0, r.stderr
    assert wait_until(lambda: not pid_alive(m.pid), 60)

"""Restarting rampart right after a crash, as a user or systemd does: `kill -9` of the daemon,
then at once (as soon as its pid has died, without waiting for its store lock) the mount
again. The dead daemon's leader is a zombie while its last threads exit and the kernel
releases its files (the io_uring ring's, the lock's); the new daemon must wait for that lock
briefly instead of refusing "already mounted" (issue 16, item 9)."""

import fcntl
import os
import signal
import subprocess
import threading
import time

import pytest

from e2e_helpers import Mount, in_mount_table, pid_alive, read_file, run, wait_until

pytestmark = pytest.mark.rampart_only("restarts the rampart daemon after kill -9")

ROUNDS = 10
EXIT_WAIT = 30


class Writers:
    """Threads writing and fsyncing small files until told to stop (or the mount dies);
    records every file whose fsync returned (acknowledged as durable)."""

    def __init__(self, root, tag, threads=3):
        self.root = root
        self.tag = tag
        self.acked = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)]

    def _run(self, t):
        i = 0
        while not self.stop.is_set():
            path = os.path.join(self.root, f"{self.tag}-w{t}-{i:05d}")
            data = f"{self.tag} {t} {i}\n".encode() * 50
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError:
                return  # the daemon was killed
            with self.lock:
                self.acked[path] = data
            i += 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in self.threads), "a writer hung"


def test_remount_at_once_after_kill_9_under_load(test_base, rampart_env, cleanup_mounts):
    m = Mount(test_base, "restart", env=rampart_env)
    cleanup_mounts.append(m)
    m.mount()
    acked = {}
    for round_ in range(ROUNDS):
        with Writers(m.path, f"r{round_}") as w:
            assert wait_until(lambda: len(w.acked) >= 20, 60), "the writers made no progress"
            pid = m.pid
            os.kill(pid, signal.SIGKILL)
            # What a user sees: the daemon is dead. Its store lock may not be released yet.
            assert wait_until(lambda: not pid_alive(pid), EXIT_WAIT), f"daemon {pid} survived SIGKILL"
        # The writers are stopped before the dead mount is detached: every call they made after
        # the kill failed on the dead connection (ENOTCONN), while after a lazy unmount their
        # next files would land in the folder beneath the mount point (and be hidden by the
        # next mount, looking lost).
        run(["fusermount3", "-u", "-z", m.path], timeout=60)
        assert wait_until(lambda: not in_mount_table(m.path), EXIT_WAIT), "dead mount still in the table"
        m.mounted = False
        assert os.listdir(m.path) == [], "a writer wrote beneath the mount point"
        acked.update(w.acked)
        started = time.monotonic()
        m.mount(mkfs=False)  # asserts that `rampart mount` succeeded
        assert m.alive()
        assert time.monotonic() - started < 60
        assert m.pid != pid, "the old daemon is still serving"
        for path, data in acked.items():
            assert read_file(path) == data, f"round {round_}: fsync'd {path} lost or changed"
    r = m.umount()
    assert r.returncode == 0, r.stderr


def test_a_lock_kept_by_a_dead_daemon_is_named(test_base, rampart_env, cleanup_mounts):
    """A lock that outlives its dead holder longer than the wait: the message says the previous
    daemon is still exiting (not "unmount it first"). The holder is simulated: a process that
    holds the lock's descriptor while the pid in the lock file is a zombie of ours."""
    m = Mount(test_base, "held", env=rampart_env)
    m.mkfs()
    lock_path = os.path.join(m.store, "lock")
    zombie = subprocess.Popen(["true"])
    assert wait_until(lambda: not pid_alive(zombie.pid), 30)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{zombie.pid}\n".encode(), 0)
        started = time.monotonic()
        r = m.cli("fsck", m.store)
        waited = time.monotonic() - started
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"daemon pid {zombie.pid}" in r.stderr and "still exiting" in r.stderr, r.stderr
        assert "unmount it first" not in r.stderr, r.stderr
        assert 5 <= waited < 60, f"gave up after {waited:.1f} s"
    finally:
        os.close(fd)
        zombie.wait()
    assert m.cli("fsck", m.store).returncode == 0


def test_mount_at_once_after_a_plain_umount(test_base, rampart_env, cleanup_mounts):
    """umount(8) run by root returns as soon as the kernel has detached the mount (libmount
    finds the type `fuse` by statfs and runs no umount.fuse.rampart helper), while the daemon
    still writes its final checkpoint. A mount right after must wait for it, not refuse
    "already mounted" (found by xfstests, whose every remount does this; decision 0135)."""
    m = Mount(test_base, "plain", env=rampart_env)
    cleanup_mounts.append(m)
    m.mount()
    # Enough in memory that the final checkpoint takes a while.
    blob = os.urandom(1 << 20)
    files = {}
    for i in range(120):
        path = os.path.join(m.path, f"f{i:03d}")
        data = blob[i:] + blob[:i]
        with open(path, "wb") as f:
            f.write(data[: 900 * 1024])
        files[path] = data[: 900 * 1024]
    for round_ in range(3):
        pid = m.pid
        r = run(["umount", m.path], timeout=60)
        assert r.returncode == 0, r.stderr
        m.mounted = False
        m.mount(mkfs=False)  # asserts that `rampart mount` succeeded
        assert m.pid != pid, f"round {round_}: the old daemon is still serving"
        assert wait_until(lambda: not pid_alive(pid), 30), f"round {round_}: the old daemon lives on"
        for path, data in files.items():
            assert read_file(path) == data, f"round {round_}: {path} lost or changed"
    r = m.umount()
    assert r.returncode == 0, r.stderr


def test_a_lock_held_by_an_unmounted_daemon_is_waited_for(test_base, rampart_env, cleanup_mounts):
    """The lock file of a daemon that has been unmounted and is finishing says `unmounted`
    (docs/FORMAT.md): a mount waits for its lock. The holder is simulated: this process holds
    the lock with its own (live) pid and that line, and lets go a moment later."""
    m = Mount(test_base, "finishing", env=rampart_env)
    cleanup_mounts.append(m)
    m.mkfs()
    fd = os.open(os.path.join(m.store, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    released = threading.Event()

    def let_go():
        time.sleep(1)
        released.set()
        os.close(fd)

    fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\nunmounted\n".encode(), 0)
    t = threading.Thread(target=let_go)
    t.start()
    try:
        m.mount(mkfs=False)
        assert released.is_set(), "mounted while the lock was still held"
    finally:
        t.join()
    with open(os.path.join(m.store, "lock")) as f:
        assert f.read() == f"{m.pid}\nmounted\n"
    r = m.umount()
    assert r.returncode == 0, r.stderr
    # A live holder without that line is refused at once, as before.
    fd = os.open(os.path.join(m.store, "lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        r = m.cli("mount", m.store, m.path)
        assert r.returncode != 0 and "unmount it first" in r.stderr, r.stdout + r.stderr
    finally:
        os.close(fd)

"""How requests reach the daemon: FUSE over io_uring when the kernel offers it, /dev/fuse
otherwise (docs/decisions/0019). The whole suite also runs under each transport
(scripts/test); these tests check the choice itself and the fallback."""

import os
import signal
import threading

import pytest

from e2e_helpers import EXTRA_MOUNT_OPTS, in_mount_table, pid_alive, read_file, run, wait_until, write_file

pytestmark = [
    pytest.mark.rampart_only("tests the rampart daemon's FUSE transport"),
    # These choose the transport themselves: once is enough (scripts/test runs the suite twice).
    pytest.mark.skipif("--fuse-io-uring" in EXTRA_MOUNT_OPTS, reason="the suite's mounts fix the transport"),
]

ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"
needs_uring_knob = pytest.mark.skipif(not os.path.exists(ENABLE_URING),
                                      reason="this kernel has no FUSE over io_uring")


class _EnableUring:
    """Sets fuse's enable_uring for the duration (it applies to new connections only)."""

    def __init__(self, value):
        self.value = value

    def __enter__(self):
        self.before = read_file(ENABLE_URING).decode().strip()
        with open(ENABLE_URING, "w") as f:
            f.write(self.value)

    def __exit__(self, *exc):
        with open(ENABLE_URING, "w") as f:
            f.write(self.before)


def _queue_threads(pid):
    names = [read_file(f"/proc/{pid}/task/{t}/comm").decode().strip() for t in os.listdir(f"/proc/{pid}/task")]
    return sorted(n for n in names if n.startswith("fuser-q"))


def _possible_cpus():
    text = read_file("/sys/devices/system/cpu/possible").decode().strip()
    return max(int(part.split("-")[-1]) for part in text.split(",")) + 1


def _exercise(root):
    """Creates, writes, fsyncs, reads, renames, lists and deletes, from several threads at once
    (so requests arrive on every CPU's queue), and checks every result."""
    errors = []

    def worker(i):
        try:
            d = os.path.join(root, f"w{i}")
            os.mkdir(d)
            for n in range(50):
                p = os.path.join(d, f"f{n}")
                data = os.urandom(n * 97 + 1)
                fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
                os.write(fd, data)
                os.fsync(fd)  # answered from the commit thread, not the queue thread
                os.close(fd)
                assert read_file(p) == data
                os.rename(p, p + ".r")
            assert sorted(os.listdir(d)) == sorted(f"f{n}.r" for n in range(50))
            for n in range(50):
                os.unlink(os.path.join(d, f"f{n}.r"))
            os.rmdir(d)
        except Exception as e:  # reported below
            errors.append(f"worker {i}: {e!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert os.listdir(root) == []


@needs_uring_knob
def test_io_uring_serves_requests_when_the_kernel_offers_it(mount_factory):
    with _EnableUring("Y"):
        m = mount_factory("--fuse-io-uring", "on", name="uring")
    st = m.status()
    assert st["fuse_transport"] == "io_uring", st
    assert _queue_threads(m.pid) == sorted(f"fuser-q{q}" for q in range(_possible_cpus()))
    before = st["fuse_requests"].get("create", 0)
    _exercise(m.path)
    st = m.status()
    assert st["fuse_requests"]["create"] - before == 200
    # A large write and read go through payloads of max_write.
    big = os.urandom(3 << 20)
    write_file(os.path.join(m.path, "big"), big)
    assert read_file(os.path.join(m.path, "big")) == big


@needs_uring_knob
def test_dev_fuse_when_io_uring_is_off_or_not_offered(mount_factory):
    with _EnableUring("Y"):
        off = mount_factory("--fuse-io-uring", "off", name="off")
    with _EnableUring("N"):
        not_offered = mount_factory("--fuse-io-uring", "on", name="not-offered")
    for m in (off, not_offered):
        assert m.status()["fuse_transport"] == "/dev/fuse"
        assert _queue_threads(m.pid) == []
        _exercise(m.path)


@needs_uring_knob
def test_kill9_over_io_uring_leaves_a_mount_that_can_be_detached_and_remounted(mount_factory):
    with _EnableUring("Y"):
        m = mount_factory("--fuse-io-uring", "on", name="uring-kill")
    assert m.status()["fuse_transport"] == "io_uring"
    p = os.path.join(m.path, "kept")
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"fsync'd before the kill")
    os.fsync(fd)
    os.close(fd)
    pid = m.pid
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not pid_alive(pid), 30), "the daemon survived SIGKILL"
    run(["fusermount3", "-u", "-z", m.path], timeout=60)
    assert wait_until(lambda: not in_mount_table(m.path), 30), "the dead mount stayed"
    m.mounted = False
    with _EnableUring("Y"):
        m.mount(mkfs=False)
    assert m.status()["fuse_transport"] == "io_uring"
    assert read_file(p) == b"fsync'd before the kill"

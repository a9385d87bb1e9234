"""FUSE passthrough for disk-tier files, and the daemon path without it (issue 13 item 4,
docs/decisions/0058-per-file-open-and-passthrough.md).

With passthrough the kernel reads, writes and maps a disk-tier file's host file itself: no READ
or WRITE request reaches the daemon (its per-operation counters in `rampart status --json`
stay still). `--passthrough off` has the daemon serve them. Contents are checked against a
reference copy both ways, and after a remount through the other path. On Linux 6.18
passthrough excludes the writeback cache and no-open, so `auto` (the default) takes it only on
a mount without them; these tests ask for it with `--passthrough on`.

The disk-tier tests need a binary with the disk tier (`--large-file-threshold`); the mounts use
a 64 KiB threshold so that small test files are disk-tier."""

import errno
import mmap
import os
import shutil
import signal
import subprocess

import pytest

from e2e_helpers import RAMPART_BIN, EXTRA_MOUNT_OPTS, in_mount_table, pid_alive, read_file, run, wait_until

pytestmark = [
    pytest.mark.rampart_only("tests rampart's data path for disk-tier files"),
    # These choose the data path themselves.
    pytest.mark.skipif("--passthrough" in EXTRA_MOUNT_OPTS, reason="the suite's mounts fix the data path"),
]

THRESHOLD = 64 * 1024
BIG = 1 << 20  # well past the threshold


def _has_disk_tier():
    r = run([RAMPART_BIN, "mount", "--help"], timeout=60)
    return "--large-file-threshold" in r.stdout


needs_disk_tier = pytest.mark.skipif(not _has_disk_tier(),
                                     reason="this rampart binary has no disk tier (--large-file-threshold)")


def _requests(m):
    s = m.status()
    return s["fuse_requests"], s


def _io_requests(m):
    reqs, _ = _requests(m)
    return reqs.get("read", 0), reqs.get("write", 0)


def _host_files(m):
    data = m.store / "data"
    return sorted(os.listdir(data)) if data.is_dir() else []


def _host_file_of(m, path):
    """The name of `path`'s host file in the store's data folder ({ino:016x}-{generation:08x})."""
    prefix = f"{os.stat(path).st_ino:016x}-"
    names = [n for n in _host_files(m) if n.startswith(prefix)]
    assert len(names) <= 1, names
    return names[0] if names else None


def _resident_bytes(path):
    """Bytes of `path` in the page cache (fincore)."""
    r = run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)], timeout=60)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def _disk_mount(mount_factory, *opts):
    return mount_factory("--large-file-threshold", "64K", *opts)


def _make_disk_file(m, name, size=BIG, seed=1):
    """A file past the threshold, written and closed; returns (path, reference bytes)."""
    p = os.path.join(m.path, name)
    data = bytes((i * 131 + seed * 7) % 251 for i in range(size))
    with open(p, "wb") as f:
        f.write(data)
    assert _host_file_of(m, p) is not None, f"{p} ({size} bytes) did not move to the disk tier"
    return p, bytearray(data)


def _crash_and_remount(m, *opts):
    pid = m.pid
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not pid_alive(pid), 60), f"daemon {pid} survived SIGKILL"
    run(["fusermount3", "-u", "-z", m.path], timeout=60)
    assert wait_until(lambda: not in_mount_table(m.path), 60)
    m.mounted = False
    _remount(m, *opts)


def _remount(m, *opts):
    if m.mounted:
        r = m.umount()
        assert r.returncode == 0, r.stderr
        m.mounted = False
    m.opts = ["--large-file-threshold", "64K", *opts]
    m.mount(mkfs=False)
    assert m.alive()


# -- the choice and its report (no disk tier needed) ------------------------------------------

def test_status_says_which_data_path(mount_factory):
    # auto (the default) keeps the writeback cache and no-open: the daemon path.
    m = mount_factory()
    s = m.status()
    assert s["data_path"] == "daemon", s["data_path"]
    assert s["fuse_passthrough_opens"] == 0
    r = m.cli("status", m.path)
    assert "data_path: daemon" in r.stdout, r.stdout
    # Without them passthrough costs nothing more: auto takes it (root may register backing files).
    free = mount_factory("--writeback-cache", "off", "--no-open", "off")
    assert free.status()["data_path"] == "passthrough"
    forced = mount_factory("--passthrough", "on")
    assert forced.status()["data_path"] == "passthrough"
    assert "FUSE passthrough in use" in (forced.store / "rampart.log").read_text()
    helper_form = mount_factory("-o", "passthrough=on")
    assert helper_form.status()["data_path"] == "passthrough"
    off = mount_factory("--writeback-cache", "off", "--no-open", "off", "--passthrough", "off")
    assert off.status()["data_path"] == "daemon"


def test_bad_passthrough_value_is_refused(rampart_env, test_base):
    mp = os.path.join(test_base, "mp")
    os.mkdir(mp)
    for args in (["--passthrough", "sometimes"], ["-o", "passthrough=sometimes"]):
        r = run([RAMPART_BIN, "mount", os.path.join(test_base, "store"), mp, *args], env=rampart_env, timeout=60)
        assert r.returncode != 0
        assert "passthrough" in r.stderr, r.stderr
        assert not in_mount_table(mp)


def test_memory_tier_files_are_opened_without_passthrough(mount_factory):
    """Under passthrough, small files are opened cached (page cache kept across opens): reading
    one again sends no READ, and no open of them is a passthrough open."""
    m = mount_factory("--passthrough", "on")
    p = os.path.join(m.path, "small")
    with open(p, "wb") as f:
        f.write(b"x" * 3000)
    assert read_file(p) == b"x" * 3000
    reads_before, _ = _io_requests(m)
    for _ in range(20):
        assert read_file(p) == b"x" * 3000
    reads_after, _ = _io_requests(m)
    assert reads_after == reads_before, "the page cache was dropped between opens"
    reqs, s = _requests(m)
    assert s["fuse_passthrough_opens"] == 0
    assert reqs.get("open", 0) >= 20  # OPEN is answered per file now
    assert reqs.get("flush", 0) == 0  # cached opens are FOPEN_NOFLUSH


# -- disk-tier files -----------------------------------------------------------------------

@needs_disk_tier
def test_disk_tier_reads_and_writes_bypass_the_daemon(mount_factory):
    m = _disk_mount(mount_factory, "--passthrough", "on")
    p, ref = _make_disk_file(m, "big")
    reads0, writes0 = _io_requests(m)
    opens0 = m.status()["fuse_passthrough_opens"]
    fd = os.open(p, os.O_RDWR)
    try:
        for off in (0, 4095, 300_000, BIG - 10):
            chunk = os.urandom(5000)
            os.pwrite(fd, chunk, off)
            end = off + len(chunk)
            if end > len(ref):
                ref.extend(b"\0" * (end - len(ref)))
            ref[off:end] = chunk
        assert os.pread(fd, len(ref) + 100, 0) == bytes(ref)
    finally:
        os.close(fd)
    reads1, writes1 = _io_requests(m)
    assert (reads1, writes1) == (reads0, writes0), "READ/WRITE reached the daemon for a passthrough file"
    assert m.status()["fuse_passthrough_opens"] > opens0
    # The size the kernel gave the file by writing past its end is the engine's too.
    assert os.stat(p).st_size == len(ref)
    assert read_file(p) == bytes(ref)
    # Through the daemon after a clean remount: the host file and the logged size agree.
    _remount(m, "--passthrough", "off")
    assert m.status()["data_path"] == "daemon"
    assert os.stat(p).st_size == len(ref)
    assert read_file(p) == bytes(ref)


@needs_disk_tier
def test_daemon_path_serves_disk_tier_files(mount_factory):
    m = _disk_mount(mount_factory, "--passthrough", "off")
    assert m.status()["data_path"] == "daemon"
    p, ref = _make_disk_file(m, "big")
    reads0, writes0 = _io_requests(m)
    fd = os.open(p, os.O_RDWR)
    try:
        os.pwrite(fd, b"D" * 10000, 123_456)
        ref[123_456:133_456] = b"D" * 10000
        os.fsync(fd)
    finally:
        os.close(fd)
    # Past the page cache, so that the daemon must answer.
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    assert read_file(p) == bytes(ref)
    reads1, writes1 = _io_requests(m)
    assert writes1 > writes0 and reads1 > reads0
    assert m.status()["fuse_passthrough_opens"] == 0
    _remount(m, "--passthrough", "on")
    assert m.status()["data_path"] == "passthrough"
    assert read_file(p) == bytes(ref)


@needs_disk_tier
@pytest.mark.parametrize("path", ["passthrough", "daemon"])
def test_mmap_of_a_disk_tier_file(mount_factory, path):
    m = _disk_mount(mount_factory, "--passthrough", "off" if path == "daemon" else "on")
    p, ref = _make_disk_file(m, "mapped")
    fd = os.open(p, os.O_RDWR)
    try:
        with mmap.mmap(fd, len(ref)) as mm:
            assert mm[:4096] == bytes(ref[:4096])
            assert mm[-4096:] == bytes(ref[-4096:])
            mm[70_000:70_005] = b"HELLO"
            mm[-3:] = b"END"
            mm.flush()
    finally:
        os.close(fd)
    ref[70_000:70_005] = b"HELLO"
    ref[-3:] = b"END"
    assert read_file(p) == bytes(ref)
    _remount(m, *(["--passthrough", "on"] if path == "daemon" else ["--passthrough", "off"]))
    assert read_file(p) == bytes(ref)


@needs_disk_tier
@pytest.mark.parametrize("path", ["passthrough", "daemon"])
def test_a_program_on_the_disk_tier_runs(mount_factory, path):
    m = _disk_mount(mount_factory, "--passthrough", "off" if path == "daemon" else "on")
    echo = shutil.which("echo", path="/bin:/usr/bin")
    prog = os.path.join(m.path, "echo")
    # Bytes after an ELF's last segment are ignored by the loader: padded past the threshold.
    with open(echo, "rb") as src, open(prog, "wb") as dst:
        dst.write(src.read())
        dst.write(b"\0" * (2 * THRESHOLD))
    os.chmod(prog, 0o755)
    assert _host_file_of(m, prog) is not None
    out = subprocess.run([prog, "from", "the", "disk", "tier"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"from the disk tier\n"
    if path == "passthrough":
        assert m.status()["fuse_passthrough_opens"] >= 1


@needs_disk_tier
@pytest.mark.parametrize("path", ["passthrough", "daemon"])
def test_o_direct_on_a_disk_tier_file(mount_factory, path):
    """O_DIRECT reaches the host file with no page cache in between, through the kernel
    (passthrough opens the backing file with the program's flags) or the daemon (an O_DIRECT
    descriptor of its own): the host file's pages stay out of memory."""
    m = _disk_mount(mount_factory, "--passthrough", "off" if path == "daemon" else "on")
    p, ref = _make_disk_file(m, "direct")
    host = m.store / "data" / _host_file_of(m, p)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    assert _resident_bytes(host) == 0
    reads0, writes0 = _io_requests(m)
    buf = mmap.mmap(-1, 8192)  # page-aligned
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    try:
        assert os.preadv(fd, [buf], 65536) == 8192
        assert buf[:] == bytes(ref[65536:65536 + 8192])
        buf[:] = b"Q" * 8192
        assert os.pwritev(fd, [buf], 131072) == 8192
        ref[131072:131072 + 8192] = b"Q" * 8192
        # Past the end: the file grows.
        assert os.pwritev(fd, [buf], BIG + 4096) == 8192
        ref.extend(b"\0" * 4096 + b"Q" * 8192)
        assert os.fstat(fd).st_size == len(ref)
        buf[:] = b"\0" * 8192
        assert os.preadv(fd, [buf], 131072) == 8192
        assert buf[:] == b"Q" * 8192
    finally:
        os.close(fd)
    assert _resident_bytes(host) == 0, "O_DIRECT went through the host's page cache"
    assert read_file(p) == bytes(ref)
    reads1, writes1 = _io_requests(m)
    if path == "passthrough":
        assert (reads1, writes1) == (reads0, writes0)
    else:
        assert writes1 > writes0


@needs_disk_tier
def test_open_while_a_cached_open_holds_the_file(mount_factory):
    """A file opened while small (a cached open) that grows onto the disk tier: a second open
    meanwhile must not ask the kernel for passthrough (it would fail the open with EIO)."""
    m = _disk_mount(mount_factory, "--passthrough", "on")
    p = os.path.join(m.path, "grows")
    ref = os.urandom(BIG)
    with open(p, "wb") as f:
        f.write(ref[:1000])
        f.flush()
        f.write(ref[1000:])
        f.flush()
        assert _host_file_of(m, p) is not None
        with open(p, "rb") as g:  # cached, like the writer's
            assert g.read() == ref
    # Both closed: the next open is a passthrough one.
    opens0 = m.status()["fuse_passthrough_opens"]
    assert read_file(p) == ref
    assert m.status()["fuse_passthrough_opens"] == opens0 + 1


@needs_disk_tier
def test_fsynced_passthrough_writes_survive_kill_9(mount_factory):
    m = _disk_mount(mount_factory, "--passthrough", "on")
    p, ref = _make_disk_file(m, "durable")
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"Z" * 3000, BIG + 5000)  # past the end: the size grows behind the engine
    ref.extend(b"\0" * 5000 + b"Z" * 3000)
    os.fsync(fd)
    # Killed with the file still open: no RELEASE ever tells the engine.
    _crash_and_remount(m, "--passthrough", "on")
    assert os.stat(p).st_size == len(ref)
    assert read_file(p) == bytes(ref)
    try:
        os.close(fd)  # it died with the old connection
    except OSError:
        pass


@needs_disk_tier
def test_truncate_of_a_passthrough_open_file(mount_factory):
    m = _disk_mount(mount_factory, "--passthrough", "on")
    p, ref = _make_disk_file(m, "trunc")
    fd = os.open(p, os.O_RDWR)
    try:
        os.pwrite(fd, b"T" * 100, BIG)  # grows it through the kernel
        os.ftruncate(fd, 200_000)
        assert os.fstat(fd).st_size == 200_000
        assert os.pread(fd, 300_000, 0) == bytes(ref[:200_000])
    finally:
        os.close(fd)
    assert read_file(p) == bytes(ref[:200_000])
    _remount(m, "--passthrough", "off")
    assert read_file(p) == bytes(ref[:200_000])


@needs_disk_tier
def test_a_host_file_cut_short_behind_rampart_reads_eio_not_an_early_end(mount_factory):
    """Through the kernel a short host file would read as an early end of file: such a file is
    not opened for passthrough, and the daemon answers EIO for the missing part."""
    m = _disk_mount(mount_factory, "--passthrough", "on")
    p, ref = _make_disk_file(m, "cut")
    host = m.store / "data" / _host_file_of(m, p)
    os.truncate(host, 512 * 1024)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    opens0 = m.status()["fuse_passthrough_opens"]
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == bytes(ref[:4096])
        with pytest.raises(OSError) as e:
            os.pread(fd, 4096, 900 * 1024)
        assert e.value.errno == errno.EIO
    finally:
        os.close(fd)
    assert m.status()["fuse_passthrough_opens"] == opens0
    assert "missing bytes" in (m.store / "rampart.log").read_text()


@needs_disk_tier
def test_passthrough_opens_keep_the_mtime_a_program_set(mount_factory):
    """cp -a: utimensat after the data; a later open that writes nothing keeps that mtime, one
    that writes stamps the time of its writes."""
    m = _disk_mount(mount_factory, "--passthrough", "on")
    p, ref = _make_disk_file(m, "kept")
    os.utime(p, ns=(1_000_000_000_123, 1_000_000_000_123))
    assert read_file(p) == bytes(ref)
    fd = os.open(p, os.O_RDWR)
    try:
        os.utime(fd, ns=(2_000_000_000_456, 2_000_000_000_456))  # while open for passthrough
        assert os.fstat(fd).st_mtime_ns == 2_000_000_000_456
    finally:
        os.close(fd)
    assert os.stat(p).st_mtime_ns == 2_000_000_000_456
    before = os.stat(p).st_mtime_ns
    fd = os.open(p, os.O_RDWR)
    try:
        os.pwrite(fd, b"new", 10)
    finally:
        os.close(fd)
    assert os.stat(p).st_mtime_ns > before
    written = os.stat(p).st_mtime_ns
    _remount(m, "--passthrough", "off")
    assert os.stat(p).st_mtime_ns == written

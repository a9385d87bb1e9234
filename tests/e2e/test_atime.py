"""Access times: a read that reaches the file system refreshes atime (relatime), and stat
sees it at once although the kernel caches attributes for long (the kernel drops its cached
atime after each READ and READDIR it sends)."""

import os
import time


def _drop_pages(path):
    """Drops the file's pages only; dropping all caches would evict the inode too, and a fresh
    lookup would hide a stale attribute cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_read_refreshes_atime_visibly(mnt):
    p = os.path.join(mnt.path, "f")
    with open(p, "wb") as f:
        f.write(b"x" * 10000)
    old = 1_000_000_000 * 10**9  # 2001: older than the file's mtime, so relatime refreshes it
    st = os.stat(p)
    os.utime(p, ns=(old, st.st_mtime_ns))
    assert os.stat(p).st_atime_ns == old
    _drop_pages(p)  # so that the read reaches the file system, not the page cache
    before = time.time_ns()
    with open(p, "rb") as f:
        assert f.read() == b"x" * 10000
    atime = os.stat(p).st_atime_ns
    assert atime != old, "atime not refreshed by a read (or the kernel kept a stale copy)"
    assert atime >= before - 2 * 10**9


def test_listing_refreshes_directory_atime(mnt):
    d = os.path.join(mnt.path, "d")
    os.mkdir(d)
    open(os.path.join(d, "a"), "w").close()
    old = 1_000_000_000 * 10**9
    os.utime(d, ns=(old, os.stat(d).st_mtime_ns))
    assert os.listdir(d) == ["a"]
    assert os.stat(d).st_atime_ns != old

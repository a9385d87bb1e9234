"""Access times: a read that reaches the file system refreshes atime (relatime), and stat
sees it at once although the kernel caches attributes for long."""

import os
import time


def _drop_page_cache():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def test_read_refreshes_atime_visibly(mnt):
    p = os.path.join(mnt.path, "f")
    with open(p, "wb") as f:
        f.write(b"x" * 10000)
    old = 1_000_000_000 * 10**9  # 2001: older than the file's mtime, so relatime refreshes it
    st = os.stat(p)
    os.utime(p, ns=(old, st.st_mtime_ns))
    assert os.stat(p).st_atime_ns == old
    _drop_page_cache()  # so that the read reaches the file system, not the page cache
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
    _drop_page_cache()
    assert os.listdir(d) == ["a"]
    assert os.stat(d).st_atime_ns != old

"""Bad input: errors must be the right ones, and the daemon must survive them."""

import errno
import os
import stat

import pytest

from e2e_helpers import (FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_PUNCH_HOLE, IS_TMPFS, RENAME_EXCHANGE,
                         RENAME_NOREPLACE, MiB, expect_errno, fallocate, read_file, renameat2, write_file)


def test_name_length_limit(d):
    ok, bad = "a" * 255, "b" * 256
    write_file(os.path.join(d, ok), b"255")
    assert read_file(os.path.join(d, ok)) == b"255"
    assert ok in os.listdir(d)
    p = os.path.join(d, bad)
    expect_errno(errno.ENAMETOOLONG, os.open, p, os.O_CREAT | os.O_WRONLY, 0o644)
    expect_errno(errno.ENAMETOOLONG, os.mkdir, p)
    expect_errno(errno.ENAMETOOLONG, os.symlink, "target", p)
    expect_errno(errno.ENAMETOOLONG, os.mkfifo, p)
    expect_errno(errno.ENAMETOOLONG, os.mknod, p, stat.S_IFREG | 0o644)
    expect_errno(errno.ENAMETOOLONG, os.link, os.path.join(d, ok), p)
    expect_errno(errno.ENAMETOOLONG, os.rename, os.path.join(d, ok), p)
    # a lookup of a too-long name fails; ENOENT is also what some file systems answer
    expect_errno((errno.ENAMETOOLONG, errno.ENOENT), os.stat, p)
    assert os.listdir(d) == [ok], "nothing with a 256-byte name may have been created"
    os.mkdir(os.path.join(d, "c" * 255))
    os.symlink("t", os.path.join(d, "s" * 255))
    assert len(os.listdir(d)) == 3


def test_name_length_counts_bytes_not_characters(d):
    ok = "é" * 127 + "x"  # 255 bytes in UTF-8
    bad = "é" * 128  # 128 characters, 256 bytes
    assert len(ok.encode()) == 255 and len(bad.encode()) == 256
    write_file(os.path.join(d, ok), b"")
    expect_errno(errno.ENAMETOOLONG, os.open, os.path.join(d, bad), os.O_CREAT | os.O_WRONLY, 0o644)
    assert os.listdir(d) == [ok]


def test_non_utf8_names(d):
    """Linux names are bytes: anything but '/' and NUL."""
    names = [b"latin1-\xe9t\xe9", b"\xff\xfe\xfd", b"tab\there", b"newline\nname", b" leading space",
             b"-dash", b"..dots", b"back\\slash", b"emoji-\xf0\x9f\x90\x8d"]
    bd = os.fsencode(d)
    for n in names:
        write_file(os.path.join(bd, n), n)
    assert sorted(os.listdir(bd)) == sorted(names)
    for n in names:
        assert read_file(os.path.join(bd, n)) == n
    os.rename(os.path.join(bd, names[1]), os.path.join(bd, b"\x80renamed"))
    assert b"\x80renamed" in os.listdir(bd) and names[1] not in os.listdir(bd)
    os.symlink(b"\xfe/target\x01", os.path.join(bd, b"link"))
    assert os.readlink(os.path.join(bd, b"link")) == b"\xfe/target\x01"
    os.setxattr(os.path.join(bd, names[0]), "user.\u00e9t\u00e9", b"\xff")
    assert os.getxattr(os.path.join(bd, names[0]), "user.\u00e9t\u00e9") == b"\xff"


def test_rename_into_own_subtree_einval(d):
    os.makedirs(os.path.join(d, "a", "b"))
    expect_errno(errno.EINVAL, os.rename, os.path.join(d, "a"), os.path.join(d, "a", "b", "a"))
    assert os.path.isdir(os.path.join(d, "a", "b"))


def test_rmdir_nonempty_enotempty(d):
    os.makedirs(os.path.join(d, "a", "b"))
    expect_errno(errno.ENOTEMPTY, os.rmdir, os.path.join(d, "a"))
    os.rmdir(os.path.join(d, "a", "b"))
    write_file(os.path.join(d, "a", "f"), b"")
    expect_errno(errno.ENOTEMPTY, os.rmdir, os.path.join(d, "a"))
    os.unlink(os.path.join(d, "a", "f"))
    os.symlink("x", os.path.join(d, "a", "l"))
    expect_errno(errno.ENOTEMPTY, os.rmdir, os.path.join(d, "a"))
    assert os.path.islink(os.path.join(d, "a", "l"))


def test_misc_vfs_errors(d):
    f = os.path.join(d, "f")
    write_file(f, b"data")
    expect_errno(errno.ENOTDIR, os.open, f, os.O_RDONLY | os.O_DIRECTORY)
    expect_errno(errno.ENOTDIR, os.listdir, f)
    expect_errno(errno.ENOTDIR, os.mkdir, os.path.join(f, "x"))
    expect_errno(errno.EEXIST, os.mkdir, f)
    expect_errno(errno.EEXIST, os.mkfifo, f)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        expect_errno(errno.EISDIR, os.read, fd, 10)
    finally:
        os.close(fd)
    fd = os.open(f, os.O_RDONLY)
    try:
        expect_errno(errno.EBADF, os.write, fd, b"x")
        expect_errno(errno.EINVAL, os.ftruncate, fd, -1)
    finally:
        os.close(fd)
    expect_errno(errno.EINVAL, os.truncate, f, -1)
    assert read_file(f) == b"data"


def test_daemon_survives_bad_requests(mnt):
    """A battery of invalid and extreme requests; afterwards the same mount is alive
    and fully usable (the fixture also checks it at teardown)."""
    d = os.path.join(mnt.path, "bad")
    os.mkdir(d)
    f = os.path.join(d, "f")
    write_file(f, b"keep me")
    long = os.path.join(d, "n" * 300)
    E = errno
    # (expected errno, call, arguments): what Linux answers (checked against tmpfs).
    for expected, fn, args in [
            (E.ENAMETOOLONG, os.open, (long, os.O_CREAT | os.O_WRONLY)), (E.ENAMETOOLONG, os.mkdir, (long,)),
            (E.ENAMETOOLONG, os.stat, (long,)), (E.ENAMETOOLONG, os.unlink, (long,)),
            (E.ENAMETOOLONG, os.rmdir, (long,)), (E.ENAMETOOLONG, os.rename, (f, long)),
            (E.ERANGE, os.setxattr, (f, "user." + "x" * 300, b"v")),
            (E.ERANGE, os.getxattr, (f, "user." + "x" * 300)),
            (E.E2BIG, os.setxattr, (f, "user.big", b"v" * 70000)), (E.ENODATA, os.getxattr, (f, "user.none")),
            (E.ENODATA, os.removexattr, (f, "user.none")), (E.EOPNOTSUPP, os.setxattr, (f, "nonamespace", b"v")),
            (E.EINVAL, os.setxattr, (f, "user.", b"v")),
            (E.EINVAL, os.rename, (d, os.path.join(d, "inside"))),
            (E.EINVAL, renameat2, (f, f + "2", RENAME_NOREPLACE | RENAME_EXCHANGE)),
            (E.ENOENT, renameat2, (f, os.path.join(d, "nope"), RENAME_EXCHANGE)),
            (E.EBUSY, os.rmdir, (mnt.path,)), (E.ENOTDIR, os.rmdir, (f,)), (E.EISDIR, os.unlink, (d,)),
            (E.EINVAL, os.readlink, (f,)), (E.EPERM, os.link, (d, os.path.join(d, "dl"))),
            (E.EINVAL, os.truncate, (f, -5)), (E.EINVAL, os.mknod, (os.path.join(d, "w"), 0o170000 | 0o777))]:
        expect_errno(expected, fn, *args)
    fd = os.open(f, os.O_RDWR)
    try:
        for expected, mode, off, ln in [(E.EOPNOTSUPP, FALLOC_FL_PUNCH_HOLE, 0, 10),
                                        (E.EOPNOTSUPP, FALLOC_FL_COLLAPSE_RANGE, 0, 4096),
                                        (E.EOPNOTSUPP, 0xFFFF, 0, 10), (E.EINVAL, 0, -1, 10), (E.EINVAL, 0, 0, 0),
                                        (E.EFBIG, 0, 2**63 - 2, 10)]:
            expect_errno(expected, fallocate, fd, mode, off, ln)
        for off in (2**63 - 2, 2**62, 2**40):
            try:
                os.pwrite(fd, b"far away", off)
            except OSError as e:
                assert e.errno in (errno.EFBIG, errno.EINVAL, errno.ENOSPC), f"pwrite at {off}: {e!r}"
        # a huge sparse size: succeeding (sparse) or refusing (EFBIG/ENOSPC) are both fine
        for size in (2**40, 2**62):
            try:
                os.ftruncate(fd, size)
                # anything written out there earlier was cut off by the previous, smaller size
                assert os.pread(fd, 16, size - 16) == b"\0" * 16, f"stale data below {size}"
            except OSError as e:
                assert e.errno in (errno.EFBIG, errno.EINVAL, errno.ENOSPC), f"ftruncate {size}: {e!r}"
        assert os.pread(fd, 7, 0) == b"keep me"
        os.ftruncate(fd, 7)
        assert os.pread(fd, 100, 0) == b"keep me"
    finally:
        os.close(fd)
    # still alive and usable
    assert mnt.alive()
    write_file(os.path.join(d, "after"), b"after the storm")
    assert read_file(os.path.join(d, "after")) == b"after the storm"
    assert sorted(os.listdir(d)) == ["after", "f"]
    os.statvfs(mnt.path)


def _write_until_error(root, limit, fsync):
    """Write 8 MiB files (fsync, if asked, and close each) until an error; returns
    (errno, bytes written, files fully written and closed, the 1 MiB chunk)."""
    chunk = os.urandom(MiB)
    total = 0
    done = []
    i = 0
    while total < limit:
        p = os.path.join(root, f"fill-{i:03d}")
        i += 1
        fd = None
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
            for _ in range(8):
                view = memoryview(chunk)
                while view:
                    n = os.write(fd, view)
                    total += n
                    view = view[n:]
            if fsync:
                os.fsync(fd)
            fd, fd2 = None, fd
            os.close(fd2)  # with a writeback cache, ENOSPC may only show up here
            done.append(p)
        except OSError as e:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
            return e.errno, total, done, chunk
    return None, total, done, chunk


@pytest.mark.parametrize("fsync", [True, False], ids=["fsync", "close-only"])
def test_memory_cap_enospc_and_recovery(capped, fsync):
    """Writing past --memory-cap 64M fails with ENOSPC (at write, fsync or close) before
    twice the cap is written; nothing that was reported written is lost; after deleting
    the files, the file system is usable again."""
    cap = 64 * MiB
    root = os.path.join(capped.path, "fill")
    os.mkdir(root)
    err, total, done, chunk = _write_until_error(root, 2 * cap, fsync)
    assert err is not None, f"wrote {total // MiB} MiB into a 64 MiB file system without an error"
    assert err == errno.ENOSPC, f"failed with {errno.errorcode.get(err)} instead of ENOSPC"
    assert total < 2 * cap
    assert done, "not even one 8 MiB file fitted under a 64 MiB cap"
    if not IS_TMPFS:
        st = capped.status()
        assert st["memory_used_bytes"] <= st["memory_cap_bytes"] == cap, f"charge above the cap: {st}"
    for p in done:  # files whose close succeeded are intact: no silent loss
        assert read_file(p) == chunk * 8, f"{p} is damaged"
    # creating small things may or may not work when full; must not crash anything
    for p in os.listdir(root):
        os.unlink(os.path.join(root, p))
    os.rmdir(root)
    # after deleting, writing and creating work again
    os.mkdir(os.path.join(capped.path, "again"))
    p = os.path.join(capped.path, "again", "f")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    for _ in range(16):
        os.write(fd, chunk)
    os.fsync(fd)
    os.close(fd)
    assert os.path.getsize(p) == 16 * MiB
    assert read_file(p) == chunk * 16
    if not IS_TMPFS:
        st = capped.status()
        assert st["memory_cap_bytes"] == cap, st


def test_statfs_reflects_usage_under_cap(capped):
    cap = 64 * MiB
    v = os.statvfs(capped.path)
    assert 0 < v.f_blocks * v.f_frsize <= cap, "statfs reports more space than the memory cap"
    p = os.path.join(capped.path, "f")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    for _ in range(16):
        os.write(fd, os.urandom(MiB))
    os.fsync(fd)
    os.close(fd)
    v2 = os.statvfs(capped.path)
    used = (v2.f_blocks - v2.f_bfree) * v2.f_frsize - (v.f_blocks - v.f_bfree) * v.f_frsize
    assert used >= 8 * MiB, f"statfs free space did not go down after writing 16 MiB (used delta {used})"
    os.unlink(p)

"""Extended attributes."""

import errno
import os
import stat

import pytest

from e2e_helpers import expect_errno, getxattr_raw, listxattr_raw, read_file, write_file


@pytest.fixture
def f(d):
    p = os.path.join(d, "f")
    write_file(p, b"content")
    return p


@pytest.mark.parametrize("ns", ["user", "trusted", "security"])
def test_set_get_list_remove(f, ns):
    name = f"{ns}.rampart.test"
    os.setxattr(f, name, b"value-1")
    assert os.getxattr(f, name) == b"value-1"
    assert name in os.listxattr(f)
    os.setxattr(f, name, b"v2")  # replace with a shorter value
    assert os.getxattr(f, name) == b"v2"
    os.setxattr(f, name, b"")  # empty values are values
    assert os.getxattr(f, name) == b""
    assert name in os.listxattr(f)
    os.removexattr(f, name)
    assert name not in os.listxattr(f)
    expect_errno(errno.ENODATA, os.getxattr, f, name)
    assert read_file(f) == b"content", "xattr changes touched the file data"


def test_many_attributes_and_binary_values(f):
    vals = {f"user.a{i}": bytes([i]) * i + b"\0\xff" for i in range(40)}
    for k, v in vals.items():
        os.setxattr(f, k, v)
    assert set(os.listxattr(f)) >= set(vals)
    for k, v in vals.items():
        assert os.getxattr(f, k) == v
    for k in list(vals)[::2]:
        os.removexattr(f, k)
    left = {k for k in os.listxattr(f) if k.startswith("user.a")}
    assert left == set(list(vals)[1::2])


def test_create_replace_flags(f):
    os.setxattr(f, "user.x", b"1", os.XATTR_CREATE)
    expect_errno(errno.EEXIST, os.setxattr, f, "user.x", b"2", os.XATTR_CREATE)
    assert os.getxattr(f, "user.x") == b"1"
    expect_errno(errno.ENODATA, os.setxattr, f, "user.y", b"2", os.XATTR_REPLACE)
    assert "user.y" not in os.listxattr(f)
    os.setxattr(f, "user.x", b"3", os.XATTR_REPLACE)
    assert os.getxattr(f, "user.x") == b"3"


def test_missing_attribute(f):
    expect_errno(errno.ENODATA, os.getxattr, f, "user.missing")
    expect_errno(errno.ENODATA, os.removexattr, f, "user.missing")
    assert [a for a in os.listxattr(f) if a.startswith("user.")] == []


def test_getxattr_small_buffer_erange(f):
    os.setxattr(f, "user.long", b"z" * 100)
    size, _ = getxattr_raw(f, "user.long", 0)
    assert size == 100, "getxattr with size 0 returns the value's size"
    expect_errno(errno.ERANGE, getxattr_raw, f, "user.long", 10)
    n, val = getxattr_raw(f, "user.long", 100)
    assert n == 100 and val == b"z" * 100


def test_listxattr_small_buffer_erange(f):
    os.setxattr(f, "user.first", b"1")
    os.setxattr(f, "user.second", b"2")
    size, _ = listxattr_raw(f, 0)
    n, raw = listxattr_raw(f, size)
    assert n == size
    names = [x for x in raw.split(b"\0") if x]
    assert b"user.first" in names and b"user.second" in names
    expect_errno(errno.ERANGE, listxattr_raw, f, 5)


def test_large_values(f):
    big = bytes(range(256)) * 256  # 64 KiB, the largest value the kernel passes
    os.setxattr(f, "user.big", big)
    assert os.getxattr(f, "user.big") == big
    expect_errno(errno.E2BIG, os.setxattr, f, "user.toobig", b"x" * (64 * 1024 + 1))
    expect_errno(errno.ENODATA, os.getxattr, f, "user.toobig")


def test_name_too_long(f):
    name255 = "user." + "n" * 250
    os.setxattr(f, name255, b"ok")
    assert os.getxattr(f, name255) == b"ok"
    expect_errno(errno.ERANGE, os.setxattr, f, "user." + "n" * 251, b"no")
    expect_errno(errno.ERANGE, os.getxattr, f, "user." + "n" * 251)


def test_user_xattr_on_symlink_and_fifo_eperm(d):
    """The kernel only allows user.* on regular files and directories."""
    os.symlink("target", os.path.join(d, "l"))
    os.mkfifo(os.path.join(d, "p"))
    expect_errno(errno.EPERM, os.setxattr, os.path.join(d, "l"), "user.x", b"1", follow_symlinks=False)
    expect_errno(errno.EPERM, os.setxattr, os.path.join(d, "p"), "user.x", b"1")
    expect_errno(errno.ENODATA, os.getxattr, os.path.join(d, "l"), "user.x", follow_symlinks=False)
    expect_errno(errno.ENODATA, os.getxattr, os.path.join(d, "p"), "user.x")
    # trusted.* on a symlink is allowed for root
    os.setxattr(os.path.join(d, "l"), "trusted.x", b"t", follow_symlinks=False)
    assert os.getxattr(os.path.join(d, "l"), "trusted.x", follow_symlinks=False) == b"t"


def test_xattr_on_directory_follows_renames_and_links(d):
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    os.setxattr(sub, "user.dir", b"D")
    os.rename(sub, os.path.join(d, "sub2"))
    assert os.getxattr(os.path.join(d, "sub2"), "user.dir") == b"D"
    f = os.path.join(d, "f")
    write_file(f, b"")
    os.setxattr(f, "user.file", b"F")
    os.link(f, os.path.join(d, "g"))
    assert os.getxattr(os.path.join(d, "g"), "user.file") == b"F"
    os.setxattr(os.path.join(d, "g"), "user.file", b"G")
    assert os.getxattr(f, "user.file") == b"G"
    # an fd works as well as a path
    fd = os.open(f, os.O_RDONLY)
    try:
        assert os.getxattr(fd, "user.file") == b"G"
        os.setxattr(fd, "user.fd", b"via fd")
    finally:
        os.close(fd)
    assert os.getxattr(f, "user.fd") == b"via fd"
    assert stat.S_ISREG(os.stat(f).st_mode)

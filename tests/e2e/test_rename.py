"""rename(2) and renameat2(2)."""

import errno
import os

from e2e_helpers import RENAME_EXCHANGE, RENAME_NOREPLACE, expect_errno, read_file, renameat2, write_file


def j(*a):
    return os.path.join(*a)


def test_rename_plain(d):
    write_file(j(d, "a"), b"A")
    ino = os.stat(j(d, "a")).st_ino
    os.rename(j(d, "a"), j(d, "b"))
    assert not os.path.lexists(j(d, "a"))
    assert read_file(j(d, "b")) == b"A" and os.stat(j(d, "b")).st_ino == ino
    os.mkdir(j(d, "sub"))
    os.rename(j(d, "b"), j(d, "sub", "c"))
    assert sorted(os.listdir(d)) == ["sub"] and os.listdir(j(d, "sub")) == ["c"]
    assert os.stat(j(d, "sub", "c")).st_ino == ino
    expect_errno(errno.ENOENT, os.rename, j(d, "nope"), j(d, "x"))
    expect_errno(errno.ENOENT, os.rename, j(d, "sub", "c"), j(d, "nodir", "c"))


def test_rename_keeps_open_fd(d):
    write_file(j(d, "a"), b"open")
    fd = os.open(j(d, "a"), os.O_RDWR)
    try:
        os.rename(j(d, "a"), j(d, "b"))
        os.pwrite(fd, b"O", 0)
        assert os.pread(fd, 10, 0) == b"Open"
    finally:
        os.close(fd)
    assert read_file(j(d, "b")) == b"Open"


def test_rename_over_existing_file(d):
    write_file(j(d, "a"), b"new")
    write_file(j(d, "b"), b"old old old")
    ino = os.stat(j(d, "a")).st_ino
    os.rename(j(d, "a"), j(d, "b"))
    assert os.listdir(d) == ["b"]
    assert read_file(j(d, "b")) == b"new" and os.stat(j(d, "b")).st_ino == ino
    assert os.stat(j(d, "b")).st_nlink == 1


def test_rename_over_file_that_is_open(d):
    write_file(j(d, "a"), b"new")
    write_file(j(d, "b"), b"old")
    fd = os.open(j(d, "b"), os.O_RDONLY)
    try:
        os.rename(j(d, "a"), j(d, "b"))
        assert os.pread(fd, 10, 0) == b"old", "the replaced file must live on while open"
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)
    assert read_file(j(d, "b")) == b"new"


def test_rename_hard_links_of_same_inode_is_noop(d):
    write_file(j(d, "a"), b"x")
    os.link(j(d, "a"), j(d, "b"))
    os.rename(j(d, "a"), j(d, "b"))
    assert sorted(os.listdir(d)) == ["a", "b"], "rename between links of one inode does nothing"
    assert os.stat(j(d, "a")).st_nlink == 2
    os.rename(j(d, "a"), j(d, "a"))
    assert sorted(os.listdir(d)) == ["a", "b"]


def test_rename_dir_over_empty_dir(d):
    os.mkdir(j(d, "src"))
    write_file(j(d, "src", "f"), b"f")
    os.mkdir(j(d, "dst"))
    os.mkdir(j(d, "other"))
    os.mkdir(j(d, "other", "empty"))
    assert os.stat(d).st_nlink == 5
    os.rename(j(d, "src"), j(d, "dst"))
    assert sorted(os.listdir(d)) == ["dst", "other"]
    assert read_file(j(d, "dst", "f")) == b"f"
    assert os.stat(d).st_nlink == 4
    os.rename(j(d, "dst"), j(d, "other", "empty"))
    assert os.stat(d).st_nlink == 3
    assert os.stat(j(d, "other")).st_nlink == 3
    assert read_file(j(d, "other", "empty", "f")) == b"f"
    assert os.stat(j(d, "other", "empty", "..")).st_ino == os.stat(j(d, "other")).st_ino


def test_rename_over_nonempty_dir(d):
    os.mkdir(j(d, "src"))
    os.mkdir(j(d, "dst"))
    write_file(j(d, "dst", "keep"), b"k")
    expect_errno(errno.ENOTEMPTY, os.rename, j(d, "src"), j(d, "dst"))
    assert read_file(j(d, "dst", "keep")) == b"k"
    assert os.path.isdir(j(d, "src"))


def test_rename_type_mismatch(d):
    os.mkdir(j(d, "dir"))
    write_file(j(d, "file"), b"")
    expect_errno(errno.EISDIR, os.rename, j(d, "file"), j(d, "dir"))
    expect_errno(errno.ENOTDIR, os.rename, j(d, "dir"), j(d, "file"))
    assert os.path.isdir(j(d, "dir")) and os.path.isfile(j(d, "file"))


def test_rename_dir_into_own_subtree(d):
    os.makedirs(j(d, "a", "b", "c"))
    expect_errno(errno.EINVAL, os.rename, j(d, "a"), j(d, "a", "x"))
    expect_errno(errno.EINVAL, os.rename, j(d, "a"), j(d, "a", "b", "c", "x"))
    expect_errno(errno.EINVAL, renameat2, j(d, "a"), j(d, "a", "b", "y"), RENAME_NOREPLACE)
    assert os.path.isdir(j(d, "a", "b", "c"))
    assert os.listdir(d) == ["a"]


def test_rename_noreplace(d):
    write_file(j(d, "a"), b"A")
    write_file(j(d, "b"), b"B")
    expect_errno(errno.EEXIST, renameat2, j(d, "a"), j(d, "b"), RENAME_NOREPLACE)
    assert read_file(j(d, "a")) == b"A" and read_file(j(d, "b")) == b"B"
    renameat2(j(d, "a"), j(d, "c"), RENAME_NOREPLACE)
    assert sorted(os.listdir(d)) == ["b", "c"]
    assert read_file(j(d, "c")) == b"A"


def test_rename_exchange_files_across_dirs(d):
    os.mkdir(j(d, "x"))
    os.mkdir(j(d, "y"))
    write_file(j(d, "x", "a"), b"AAA")
    write_file(j(d, "y", "b"), b"B")
    ia, ib = os.stat(j(d, "x", "a")).st_ino, os.stat(j(d, "y", "b")).st_ino
    renameat2(j(d, "x", "a"), j(d, "y", "b"), RENAME_EXCHANGE)
    assert read_file(j(d, "x", "a")) == b"B" and read_file(j(d, "y", "b")) == b"AAA"
    assert os.stat(j(d, "x", "a")).st_ino == ib and os.stat(j(d, "y", "b")).st_ino == ia
    assert os.listdir(j(d, "x")) == ["a"] and os.listdir(j(d, "y")) == ["b"]


def test_rename_exchange_dirs_across_dirs(d):
    os.mkdir(j(d, "x"))
    os.mkdir(j(d, "y"))
    os.mkdir(j(d, "x", "d1"))
    write_file(j(d, "x", "d1", "one"), b"1")
    os.mkdir(j(d, "y", "d2"))
    os.mkdir(j(d, "y", "d2", "sub"))
    renameat2(j(d, "x", "d1"), j(d, "y", "d2"), RENAME_EXCHANGE)
    assert sorted(os.listdir(j(d, "x", "d1"))) == ["sub"]
    assert sorted(os.listdir(j(d, "y", "d2"))) == ["one"]
    assert os.stat(j(d, "x")).st_nlink == 3 and os.stat(j(d, "y")).st_nlink == 3
    assert os.stat(j(d, "x", "d1", "..")).st_ino == os.stat(j(d, "x")).st_ino
    assert os.stat(j(d, "y", "d2", "..")).st_ino == os.stat(j(d, "y")).st_ino
    assert os.stat(j(d, "x", "d1", "sub", "..", "..")).st_ino == os.stat(j(d, "x")).st_ino


def test_rename_exchange_dir_with_file(d):
    """Exchanging a directory with a file moves a subdirectory link between parents."""
    os.mkdir(j(d, "x"))
    os.mkdir(j(d, "y"))
    os.mkdir(j(d, "x", "dd"))
    write_file(j(d, "y", "ff"), b"file")
    assert os.stat(j(d, "x")).st_nlink == 3 and os.stat(j(d, "y")).st_nlink == 2
    renameat2(j(d, "x", "dd"), j(d, "y", "ff"), RENAME_EXCHANGE)
    assert os.path.isfile(j(d, "x", "dd")) and read_file(j(d, "x", "dd")) == b"file"
    assert os.path.isdir(j(d, "y", "ff"))
    assert os.stat(j(d, "x")).st_nlink == 2, "x lost its subdirectory"
    assert os.stat(j(d, "y")).st_nlink == 3, "y gained a subdirectory"
    assert os.stat(j(d, "y", "ff", "..")).st_ino == os.stat(j(d, "y")).st_ino


def test_rename_exchange_missing_target(d):
    write_file(j(d, "a"), b"A")
    expect_errno(errno.ENOENT, renameat2, j(d, "a"), j(d, "missing"), RENAME_EXCHANGE)
    expect_errno(errno.ENOENT, renameat2, j(d, "missing"), j(d, "a"), RENAME_EXCHANGE)
    assert os.listdir(d) == ["a"] and read_file(j(d, "a")) == b"A"


def test_rename_exchange_into_own_subtree(d):
    os.makedirs(j(d, "a", "b"))
    expect_errno(errno.EINVAL, renameat2, j(d, "a"), j(d, "a", "b"), RENAME_EXCHANGE)
    assert os.path.isdir(j(d, "a", "b"))

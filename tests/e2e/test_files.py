"""Regular files, links, special files and attributes, through system calls."""

import errno
import hashlib
import mmap
import os
import random
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

from e2e_helpers import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, MiB, expect_errno, fallocate, read_file,
                         write_file)


# ---- create / open / read / write / close --------------------------------------------

def test_create_write_read_close(d):
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o640)
    assert os.write(fd, b"hello world") == 11
    os.lseek(fd, 0, os.SEEK_SET)
    assert os.read(fd, 100) == b"hello world"
    assert os.read(fd, 100) == b"", "read at EOF must return 0 bytes"
    os.close(fd)
    st = os.stat(p)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    assert st.st_size == 11 and st.st_nlink == 1
    assert read_file(p) == b"hello world"
    expect_errno(errno.EEXIST, os.open, p, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    expect_errno(errno.ENOENT, os.open, os.path.join(d, "missing"), os.O_RDONLY)
    expect_errno(errno.ENOTDIR, os.open, p + "/x", os.O_RDONLY)
    expect_errno(errno.EISDIR, os.open, d, os.O_WRONLY)


def test_pwrite_pread_overwrite(d):
    p = os.path.join(d, "f")
    write_file(p, b"0123456789" * 10)
    fd = os.open(p, os.O_RDWR)
    try:
        assert os.pwrite(fd, b"abc", 5) == 3
        assert os.pread(fd, 10, 0) == b"01234abc89"
        assert os.pread(fd, 10, 95) == b"56789"
        assert os.pread(fd, 10, 100) == b""
        assert os.pread(fd, 10, 10**9) == b""
    finally:
        os.close(fd)
    assert os.stat(p).st_size == 100


def test_two_fds_see_same_data(d):
    p = os.path.join(d, "f")
    a = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    b = os.open(p, os.O_RDWR)
    try:
        os.write(a, b"written through a")
        assert os.pread(b, 100, 0) == b"written through a"
        os.pwrite(b, b"B", 0)
        assert os.pread(a, 100, 0) == b"Britten through a"
    finally:
        os.close(a)
        os.close(b)


def test_large_file_roundtrip(d):
    p = os.path.join(d, "big")
    rng = random.Random(1)
    data = rng.randbytes(24 * MiB + 12345)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    pos = 0
    while pos < len(data):  # odd, unaligned chunk sizes
        n = os.write(fd, data[pos:pos + rng.choice((1, 4095, 65537, 1000003))])
        pos += n
    os.close(fd)
    assert os.stat(p).st_size == len(data)
    h = hashlib.sha256()
    fd = os.open(p, os.O_RDONLY)
    while True:
        b = os.read(fd, 777777)
        if not b:
            break
        h.update(b)
    os.close(fd)
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_random_io_against_model(d):
    """Random pwrite / ftruncate / pread, compared with an in-memory model."""
    p = os.path.join(d, "model")
    rng = random.Random(42)
    model = bytearray()
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for i in range(600):
            op = rng.random()
            if op < 0.55:
                off = rng.randrange(0, 3 * MiB)
                data = rng.randbytes(rng.choice((1, 7, 512, 4096, 5000, 70000)))
                assert os.pwrite(fd, data, off) == len(data)
                if off > len(model):
                    model.extend(b"\0" * (off - len(model)))
                model[off:off + len(data)] = data
            elif op < 0.65:
                size = rng.randrange(0, 3 * MiB)
                os.ftruncate(fd, size)
                if size < len(model):
                    del model[size:]
                else:
                    model.extend(b"\0" * (size - len(model)))
            else:
                off = rng.randrange(0, 3 * MiB + 10)
                n = rng.choice((1, 100, 4096, 10000, 300000))
                got = os.pread(fd, n, off)
                assert got == bytes(model[off:off + n]), f"step {i}: pread({n}, {off}) differs from model"
            if i % 50 == 0:
                assert os.fstat(fd).st_size == len(model), f"step {i}: size"
    finally:
        os.close(fd)
    assert read_file(p) == bytes(model)


def test_mmap_shared_write_and_read(d):
    """MAP_SHARED writes are visible to read() (git, linkers and databases use mmap)."""
    p = os.path.join(d, "m")
    write_file(p, b"\0" * 3 * 4096)
    fd = os.open(p, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 3 * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        mm[4096:4096 + 5] = b"mmapd"
        mm.flush()
        mm.close()
        assert os.pread(fd, 5, 4096) == b"mmapd"
    finally:
        os.close(fd)
    assert read_file(p)[4096:4101] == b"mmapd"
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, mmap.MAP_PRIVATE, mmap.PROT_READ)
        assert mm[4096:4101] == b"mmapd"
        mm.close()


# ---- holes, truncate, append --------------------------------------------------------

def test_holes_read_as_zeros(d):
    p = os.path.join(d, "sparse")
    off = 10 * MiB + 123
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"A")
        os.pwrite(fd, b"B", off)
        assert os.fstat(fd).st_size == off + 1
        got = os.pread(fd, off + 10, 0)
        assert len(got) == off + 1
        assert got[0:1] == b"A" and got[-1:] == b"B"
        assert got[1:-1].count(0) == off - 1, "the gap between the writes must read as zeros"
        assert os.pread(fd, 4096, 5 * MiB) == b"\0" * 4096
        # a hole made by seeking past EOF
        os.lseek(fd, off + 1 + 100000, os.SEEK_SET)
        os.write(fd, b"C")
        assert os.pread(fd, 100002, off) == b"B" + b"\0" * 100000 + b"C"
    finally:
        os.close(fd)
    assert os.stat(p).st_size == off + 1 + 100001


def test_sparse_file_does_not_allocate(d):
    """A 256 MiB file holding two bytes must not report 256 MiB of blocks (a memory file
    system that allocated holes would run out of RAM on ordinary sparse files)."""
    p = os.path.join(d, "sparse")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"x")
    os.pwrite(fd, b"y", 256 * MiB)
    os.fsync(fd)
    os.close(fd)
    st = os.stat(p)
    assert st.st_size == 256 * MiB + 1
    assert st.st_blocks * 512 < 16 * MiB, f"st_blocks={st.st_blocks} for a file of two written bytes"


def test_truncate_down_and_up(d):
    p = os.path.join(d, "t")
    write_file(p, b"x" * 100000)
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, 50000)
        assert os.fstat(fd).st_size == 50000
        assert os.pread(fd, 200000, 0) == b"x" * 50000
        os.ftruncate(fd, 200000)
        assert os.fstat(fd).st_size == 200000
        got = os.pread(fd, 300000, 0)
        assert got == b"x" * 50000 + b"\0" * 150000, "data cut by truncate must not come back"
        # inside one page: truncate to a non-aligned size and grow again
        os.pwrite(fd, b"y" * 8192, 0)
        os.ftruncate(fd, 100)
        os.ftruncate(fd, 8192)
        assert os.pread(fd, 8192, 0) == b"y" * 100 + b"\0" * 8092
    finally:
        os.close(fd)
    os.truncate(p, 10)
    assert os.stat(p).st_size == 10 and read_file(p) == b"y" * 10
    os.truncate(p, 0)
    assert os.stat(p).st_size == 0 and read_file(p) == b""


def test_o_trunc(d):
    p = os.path.join(d, "t")
    write_file(p, b"old content that is long")
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    assert os.fstat(fd).st_size == 0
    os.write(fd, b"new")
    os.close(fd)
    assert read_file(p) == b"new"
    fd = os.open(p, os.O_RDWR | os.O_TRUNC)
    os.close(fd)
    assert os.stat(p).st_size == 0


def test_o_append_two_fds(d):
    p = os.path.join(d, "log")
    write_file(p, b"start;")
    a = os.open(p, os.O_WRONLY | os.O_APPEND)
    b = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(a, b"a1;")
        os.write(b, b"b1;")
        os.write(a, b"a2;")
        os.lseek(b, 0, os.SEEK_SET)  # O_APPEND ignores the file offset
        os.write(b, b"b2;")
    finally:
        os.close(a)
        os.close(b)
    assert read_file(p) == b"start;a1;b1;a2;b2;"


_APPENDER = r"""
import os, sys
p, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(p, os.O_WRONLY | os.O_APPEND)
for i in range(n):
    rec = f"{tag}{i:06d}".ljust(99, ".") + "\n"
    assert os.write(fd, rec.encode()) == 100
os.close(fd)
"""


def test_o_append_two_processes(d):
    p = os.path.join(d, "log")
    write_file(p, b"")
    n = 1500
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, p, tag, str(n)]) for tag in ("A", "B")]
    for pr in procs:
        assert pr.wait(timeout=300) == 0
    data = read_file(p)
    assert len(data) == 2 * n * 100, "concurrent O_APPEND writes were lost or overwritten"
    recs = [data[i:i + 100] for i in range(0, len(data), 100)]
    for tag in (b"A", b"B"):
        seq = [int(r[1:7]) for r in recs if r[:1] == tag]
        assert seq == list(range(n)), f"records of {tag} are missing, torn or out of order"
    assert all(r.endswith(b"\n") and r[:1] in (b"A", b"B") for r in recs), "torn record"


# ---- unlink, open-unlinked ------------------------------------------------------------

def test_unlink(d):
    p = os.path.join(d, "f")
    write_file(p, b"data")
    os.unlink(p)
    assert not os.path.lexists(p)
    assert os.listdir(d) == []
    expect_errno(errno.ENOENT, os.unlink, p)
    expect_errno(errno.EISDIR, os.unlink, d)


def test_unlinked_file_stays_readable_while_open(d):
    p = os.path.join(d, "f")
    write_file(p, b"still here" * 1000)
    fd = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        assert not os.path.exists(p)
        assert os.fstat(fd).st_nlink == 0
        assert os.pread(fd, 10, 0) == b"still here"
        os.pwrite(fd, b"STILL", 0)
        assert os.pread(fd, 10, 0) == b"STILL here"
        assert os.fstat(fd).st_size == 10000
        # the name can be reused for an unrelated file meanwhile
        write_file(p, b"new")
        assert read_file(p) == b"new"
        assert os.pread(fd, 10, 0) == b"STILL here"
    finally:
        os.close(fd)
    assert read_file(p) == b"new"


# ---- symlinks -------------------------------------------------------------------------

def test_symlink_readlink(d):
    target = os.path.join(d, "target")
    write_file(target, b"T")
    link = os.path.join(d, "link")
    os.symlink("target", link)
    assert os.readlink(link) == "target"
    assert read_file(link) == b"T"
    lst = os.lstat(link)
    assert stat.S_ISLNK(lst.st_mode) and lst.st_size == len("target")
    assert os.stat(link).st_ino == os.stat(target).st_ino
    # dangling
    os.symlink("nowhere/at/all", os.path.join(d, "dangling"))
    assert os.readlink(os.path.join(d, "dangling")) == "nowhere/at/all"
    expect_errno(errno.ENOENT, os.stat, os.path.join(d, "dangling"))
    # symlink to a directory is traversed
    os.mkdir(os.path.join(d, "sub"))
    write_file(os.path.join(d, "sub", "inner"), b"I")
    os.symlink("sub", os.path.join(d, "sublink"))
    assert read_file(os.path.join(d, "sublink", "inner")) == b"I"
    # errors
    expect_errno(errno.EINVAL, os.readlink, target)
    expect_errno(errno.EINVAL, os.readlink, d)
    expect_errno(errno.EEXIST, os.symlink, "x", link)
    expect_errno(errno.ENOENT, os.readlink, os.path.join(d, "missing"))


@pytest.mark.parametrize("length", [255, 1000, 4095])
def test_symlink_long_target(d, length):
    target = ("abcdefghi/" * 410)[:length - 1] + "Z"
    assert len(target) == length
    link = os.path.join(d, "l")
    os.symlink(target, link)
    assert os.readlink(link) == target
    assert os.lstat(link).st_size == length
    assert os.readlink(os.fsencode(link)) == target.encode()


def test_symlink_target_too_long(d):
    expect_errno(errno.ENAMETOOLONG, os.symlink, "x" * 4096, os.path.join(d, "l"))


# ---- hard links ------------------------------------------------------------------------

def test_hard_links(d):
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    write_file(a, b"shared data")
    os.mkdir(os.path.join(d, "sub"))
    c = os.path.join(d, "sub", "c")
    os.link(a, b)
    os.link(b, c)
    sa, sb, sc = os.stat(a), os.stat(b), os.stat(c)
    assert sa.st_ino == sb.st_ino == sc.st_ino
    assert sa.st_nlink == sb.st_nlink == sc.st_nlink == 3
    with open(b, "ab") as f:
        f.write(b"+more")
    assert read_file(a) == read_file(c) == b"shared data+more"
    os.unlink(a)
    assert os.stat(b).st_nlink == 2
    assert read_file(b) == b"shared data+more"
    os.unlink(c)
    assert os.stat(b).st_nlink == 1
    assert read_file(b) == b"shared data+more"
    expect_errno(errno.EEXIST, os.link, b, b)
    expect_errno(errno.EPERM, os.link, os.path.join(d, "sub"), os.path.join(d, "dirlink"))
    expect_errno(errno.ENOENT, os.link, a, os.path.join(d, "x"))


def test_hard_link_to_symlink(d):
    os.symlink("somewhere", os.path.join(d, "s"))
    os.link(os.path.join(d, "s"), os.path.join(d, "s2"), follow_symlinks=False)
    assert os.readlink(os.path.join(d, "s2")) == "somewhere"
    assert os.lstat(os.path.join(d, "s")).st_nlink == 2


# ---- directories ----------------------------------------------------------------------

def test_mkdir_rmdir(d):
    p = os.path.join(d, "sub")
    os.mkdir(p, 0o750)
    st = os.stat(p)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o750
    assert os.listdir(p) == []
    expect_errno(errno.EEXIST, os.mkdir, p)
    write_file(os.path.join(p, "f"), b"")
    expect_errno(errno.ENOTEMPTY, os.rmdir, p)
    expect_errno(errno.ENOTDIR, os.rmdir, os.path.join(p, "f"))
    os.unlink(os.path.join(p, "f"))
    os.rmdir(p)
    assert not os.path.exists(p)
    expect_errno(errno.ENOENT, os.rmdir, p)
    expect_errno(errno.ENOENT, os.mkdir, os.path.join(d, "no", "such"))


def test_mkdir_umask(d):
    old = os.umask(0o027)
    try:
        os.mkdir(os.path.join(d, "u"), 0o777)
        fd = os.open(os.path.join(d, "uf"), os.O_CREAT | os.O_WRONLY, 0o666)
        os.close(fd)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(os.path.join(d, "u")).st_mode) == 0o750
    assert stat.S_IMODE(os.stat(os.path.join(d, "uf")).st_mode) == 0o640


def test_directory_nlink(d):
    assert os.stat(d).st_nlink == 2
    for n in ("a", "b", "c"):
        os.mkdir(os.path.join(d, n))
    write_file(os.path.join(d, "file"), b"")
    os.symlink("a", os.path.join(d, "sym"))
    assert os.stat(d).st_nlink == 5, "2 + three subdirectories (files and symlinks do not count)"
    os.mkdir(os.path.join(d, "a", "deep"))
    assert os.stat(os.path.join(d, "a")).st_nlink == 3
    assert os.stat(d).st_nlink == 5
    os.rmdir(os.path.join(d, "b"))
    assert os.stat(d).st_nlink == 4
    os.rename(os.path.join(d, "c"), os.path.join(d, "a", "c"))
    assert os.stat(d).st_nlink == 3
    assert os.stat(os.path.join(d, "a")).st_nlink == 4
    assert os.stat(os.path.join(d, "a", "c", "..")).st_ino == os.stat(os.path.join(d, "a")).st_ino


def test_directory_mtime_updates(d):
    """Creating, removing and renaming entries updates the directory's mtime/ctime."""
    old = 1_000_000_000 * 10**9  # 2001
    sub = os.path.join(d, "sub")
    other = os.path.join(d, "other")
    os.mkdir(sub)
    os.mkdir(other)

    def reset():
        os.utime(sub, ns=(old, old))
        os.utime(other, ns=(old, old))
        assert os.stat(sub).st_mtime_ns == old

    reset()
    write_file(os.path.join(sub, "f"), b"x")
    assert os.stat(sub).st_mtime_ns > old, "create did not update the parent's mtime"
    reset()
    os.rename(os.path.join(sub, "f"), os.path.join(other, "g"))
    assert os.stat(sub).st_mtime_ns > old, "rename did not update the source parent's mtime"
    assert os.stat(other).st_mtime_ns > old, "rename did not update the target parent's mtime"
    reset()
    os.unlink(os.path.join(other, "g"))
    assert os.stat(other).st_mtime_ns > old, "unlink did not update the parent's mtime"


# ---- special files --------------------------------------------------------------------

def test_fifo_is_a_pipe_between_processes(d):
    p = os.path.join(d, "fifo")
    os.mkfifo(p, 0o644)
    st = os.stat(p)
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdout.write(open(sys.argv[1]).read())", p],
        stdout=subprocess.PIPE)
    msg = "through the fifo %d\n"
    w = subprocess.run([sys.executable, "-c",
                        "import sys\nwith open(sys.argv[1], 'w') as f:\n"
                        "    for i in range(20000): f.write(sys.argv[2] % i)", p, msg], timeout=120)
    out, _ = reader.communicate(timeout=120)
    assert w.returncode == 0 and reader.returncode == 0
    assert out.decode() == "".join(msg % i for i in range(20000))
    assert os.stat(p).st_size == 0


def test_unix_socket_bind(d):
    p = os.path.join(d, "sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(p)
        srv.listen(1)
        assert stat.S_ISSOCK(os.stat(p).st_mode)
        got = []

        def serve():
            c, _ = srv.accept()
            with c:
                got.append(c.recv(100))
                c.sendall(b"pong")

        t = threading.Thread(target=serve)
        t.start()
        cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        cli.settimeout(60)
        cli.connect(p)
        cli.sendall(b"ping")
        assert cli.recv(100) == b"pong"
        cli.close()
        t.join(60)
        assert got == [b"ping"]
    finally:
        srv.close()
    os.unlink(p)
    assert not os.path.lexists(p)


def test_device_nodes(d):
    c = os.path.join(d, "null")
    b = os.path.join(d, "loop")
    os.mknod(c, stat.S_IFCHR | 0o640, os.makedev(1, 3))
    os.mknod(b, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    sc, sb = os.lstat(c), os.lstat(b)
    assert stat.S_ISCHR(sc.st_mode) and stat.S_IMODE(sc.st_mode) == 0o640
    assert sc.st_rdev == os.makedev(1, 3)
    assert stat.S_ISBLK(sb.st_mode) and sb.st_rdev == os.makedev(7, 200)
    assert (os.major(sb.st_rdev), os.minor(sb.st_rdev)) == (7, 200)
    os.mknod(os.path.join(d, "plain"), stat.S_IFREG | 0o600)
    assert stat.S_ISREG(os.stat(os.path.join(d, "plain")).st_mode)
    os.unlink(c)
    os.unlink(b)


# ---- attributes -------------------------------------------------------------------------

def test_chmod(d):
    p = os.path.join(d, "f")
    write_file(p, b"")
    for mode in (0o600, 0o4755, 0o2711, 0o1777, 0o000, 0o7777):
        os.chmod(p, mode)
        assert stat.S_IMODE(os.stat(p).st_mode) == mode
        assert stat.S_ISREG(os.stat(p).st_mode)
    os.chmod(d, 0o1777)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o1777


def test_chown(d):
    p = os.path.join(d, "f")
    write_file(p, b"")
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (0, 0), "files are owned by the creating user"
    os.chown(p, 1234, 5678)
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    os.chown(p, -1, 42)
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 42)
    # lchown changes the link, not its target
    os.symlink("f", os.path.join(d, "l"))
    os.lchown(os.path.join(d, "l"), 777, 888)
    assert (os.lstat(os.path.join(d, "l")).st_uid, os.lstat(os.path.join(d, "l")).st_gid) == (777, 888)
    assert os.stat(p).st_uid == 1234


def test_chown_clears_setuid(d):
    """Linux clears S_ISUID (and S_ISGID with group exec) when a file's owner changes."""
    p = os.path.join(d, "f")
    write_file(p, b"")
    os.chmod(p, 0o6755)
    os.chown(p, 1000, 1000)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o755


def test_utime_nanoseconds(d):
    p = os.path.join(d, "f")
    write_file(p, b"")
    at, mt = 1_234_567_890_123_456_789, 1_111_111_111_987_654_321
    os.utime(p, ns=(at, mt))
    st = os.stat(p)
    assert st.st_atime_ns == at and st.st_mtime_ns == mt
    # far future (after 2038)
    fut = 4_102_444_800 * 10**9 + 999_999_999
    os.utime(p, ns=(fut, fut))
    assert os.stat(p).st_mtime_ns == fut
    # on a symlink itself
    os.symlink("f", os.path.join(d, "l"))
    os.utime(os.path.join(d, "l"), ns=(at, 5 * 10**18 + 7), follow_symlinks=False)
    assert os.lstat(os.path.join(d, "l")).st_mtime_ns == 5 * 10**18 + 7
    assert os.stat(p).st_mtime_ns == fut
    # on a directory
    os.utime(d, ns=(at, mt))
    assert os.stat(d).st_mtime_ns == mt


def test_utime_before_epoch(d):
    p = os.path.join(d, "f")
    write_file(p, b"")
    t = -315_619_200 * 10**9 + 250_000_000  # 1960-01-01 00:00:00.25
    os.utime(p, ns=(t, t))
    assert os.stat(p).st_mtime_ns == t


def test_utime_now_and_write_updates_mtime(d):
    p = os.path.join(d, "f")
    write_file(p, b"abc")
    old = 10**18
    os.utime(p, ns=(old, old))
    before = time.time_ns()
    os.utime(p)  # UTIME_NOW
    after = time.time_ns()
    m = os.stat(p).st_mtime_ns
    assert before - 2 * 10**9 <= m <= after + 2 * 10**9, "utime(NULL) must set the current time"
    os.utime(p, ns=(old, old))
    with open(p, "ab") as f:
        f.write(b"more")
    st = os.stat(p)
    assert st.st_mtime_ns != old and st.st_mtime_ns > before - 2 * 10**9, "write did not update mtime"
    os.utime(p, ns=(old, old))
    os.truncate(p, 1)
    assert os.stat(p).st_mtime_ns != old, "truncate did not update mtime"


def test_stat_fields(d):
    f = os.path.join(d, "f")
    write_file(f, b"x" * (MiB + 1))
    empty = os.path.join(d, "empty")
    write_file(empty, b"")
    os.mkdir(os.path.join(d, "dir"))
    os.symlink("f", os.path.join(d, "sym"))
    os.mkfifo(os.path.join(d, "fifo"))
    kinds = {"f": stat.S_ISREG, "dir": stat.S_ISDIR, "sym": stat.S_ISLNK, "fifo": stat.S_ISFIFO}
    inos = set()
    dev = os.stat(d).st_dev
    for name, pred in kinds.items():
        st = os.lstat(os.path.join(d, name))
        assert pred(st.st_mode), f"{name}: wrong type bits {oct(st.st_mode)}"
        assert st.st_dev == dev
        assert st.st_blksize > 0
        inos.add(st.st_ino)
    assert len(inos) == len(kinds), "inode numbers must be distinct"
    assert os.stat(d).st_dev != os.stat(os.path.dirname(os.path.dirname(d))).st_dev, \
        "the mount must have its own st_dev"
    st = os.stat(f)
    assert st.st_size == MiB + 1
    assert MiB + 1 <= st.st_blocks * 512 <= MiB + 1 + MiB, f"implausible st_blocks {st.st_blocks}"
    assert os.stat(empty).st_blocks == 0


# ---- statfs, fallocate ------------------------------------------------------------------

def test_statfs(mnt):
    v = os.statvfs(mnt.path)
    assert v.f_bsize > 0 and v.f_frsize > 0
    assert v.f_blocks > 0
    assert v.f_namemax == 255
    assert 0 <= v.f_bavail <= v.f_blocks and 0 <= v.f_bfree <= v.f_blocks
    v2 = os.statvfs(os.path.join(mnt.path, "."))
    assert v2.f_blocks == v.f_blocks


def test_fallocate_mode0(d):
    p = os.path.join(d, "f")
    write_file(p, b"abc")
    fd = os.open(p, os.O_RDWR)
    try:
        fallocate(fd, 0, 0, 1 * MiB)
        assert os.fstat(fd).st_size == MiB
        assert os.pread(fd, MiB, 0) == b"abc" + b"\0" * (MiB - 3)
        fallocate(fd, 0, 100, 10)  # inside the file: nothing changes
        assert os.fstat(fd).st_size == MiB
        assert os.pread(fd, 3, 0) == b"abc"
        fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4 * MiB)
        assert os.fstat(fd).st_size == MiB, "KEEP_SIZE must not change the size"
    finally:
        os.close(fd)
    assert os.stat(p).st_size == MiB


def test_seek_data_and_hole_cover_unflushed_writes(d):
    """SEEK_DATA and SEEK_HOLE must never call written bytes a hole, also while they are still
    dirty in the kernel's writeback cache (FUSE_LSEEK does not flush it first): the whole file
    reads as data (decision 0024), so cp, tar and rsync copy every byte."""
    p = os.path.join(d, "sparse")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        data = os.urandom(4096)
        os.pwrite(fd, data, MiB)  # not flushed: only the page cache has it
        size = MiB + len(data)
        start = os.lseek(fd, 0, os.SEEK_DATA)
        assert start <= MiB, f"SEEK_DATA skipped written bytes: {start}"
        assert os.lseek(fd, start, os.SEEK_HOLE) >= size, "SEEK_HOLE inside written bytes"
        assert os.lseek(fd, MiB, os.SEEK_DATA) == MiB
        expect_errno(errno.ENXIO, os.lseek, fd, size, os.SEEK_DATA)
        os.fsync(fd)
        assert os.lseek(fd, MiB + 10, os.SEEK_DATA) == MiB + 10
    finally:
        os.close(fd)
    copy = os.path.join(d, "copy")
    subprocess.run(["cp", "--sparse=always", p, copy], check=True)
    assert read_file(copy) == b"\0" * MiB + data


def test_fallocate_punch_hole(d):
    p = os.path.join(d, "f")
    data = bytes(range(256)) * 4096 * 4  # 4 MiB
    write_file(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100000, 1500000)
        assert os.fstat(fd).st_size == len(data), "PUNCH_HOLE|KEEP_SIZE changed the size"
        got = os.pread(fd, len(data), 0)
    finally:
        os.close(fd)
    assert got[:100000] == data[:100000]
    assert got[100000:1600000] == b"\0" * 1500000
    assert got[1600000:] == data[1600000:]
    assert read_file(p) == got


# ---- more ---------------------------------------------------------------------------------

def test_offsets_beyond_4gib(d):
    """64-bit offsets end to end (no 32-bit truncation anywhere)."""
    p = os.path.join(d, "far")
    off = 5 * 1024 * MiB + 3
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"start")
        assert os.pwrite(fd, b"far data", off) == 8
        assert os.fstat(fd).st_size == off + 8
        assert os.pread(fd, 8, off) == b"far data"
        assert os.pread(fd, 5, 0) == b"start"
        assert os.pread(fd, 4096, 4 * 1024 * MiB) == b"\0" * 4096, "offset 4 GiB aliased onto 0?"
        assert os.pread(fd, 16, off - 8) == b"\0" * 8 + b"far data"
    finally:
        os.close(fd)
    assert os.stat(p).st_size == off + 8


def test_copy_file_range_and_sendfile(d):
    src = os.path.join(d, "src")
    data = os.urandom(3 * MiB + 17)
    write_file(src, data)
    dst = os.path.join(d, "dst")
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        done = 0
        while done < len(data):
            n = os.copy_file_range(fi, fo, len(data) - done, done, done)
            assert n > 0
            done += n
    finally:
        os.close(fi)
        os.close(fo)
    assert read_file(dst) == data
    dst2 = os.path.join(d, "dst2")
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(dst2, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        done = 0
        while done < len(data):
            n = os.sendfile(fo, fi, done, len(data) - done)
            assert n > 0
            done += n
    finally:
        os.close(fi)
        os.close(fo)
    assert read_file(dst2) == data


def test_setgid_directory_inheritance(d):
    """In a set-group-ID directory new entries take the directory's group, and new
    subdirectories inherit the bit (the file system, not the kernel, must do this
    for FUSE)."""
    sg = os.path.join(d, "sg")
    os.mkdir(sg)
    os.chown(sg, 0, 1234)
    os.chmod(sg, 0o2775)
    write_file(os.path.join(sg, "f"), b"")
    os.mkdir(os.path.join(sg, "sub"))
    os.symlink("f", os.path.join(sg, "l"))
    assert os.stat(os.path.join(sg, "f")).st_gid == 1234
    assert os.lstat(os.path.join(sg, "l")).st_gid == 1234
    st = os.stat(os.path.join(sg, "sub"))
    assert st.st_gid == 1234 and st.st_mode & stat.S_ISGID, f"subdirectory: gid {st.st_gid} mode {oct(st.st_mode)}"
    write_file(os.path.join(sg, "sub", "g"), b"")
    assert os.stat(os.path.join(sg, "sub", "g")).st_gid == 1234


def test_deep_tree(d):
    comp = "deep-directory-component-" + "x" * 20
    depth = 80  # a path of ~3,700 bytes
    p = d
    for _ in range(depth):
        p = os.path.join(p, comp)
        os.mkdir(p)
    write_file(os.path.join(p, "leaf"), b"leaf")
    assert read_file(os.path.join(p, "leaf")) == b"leaf"
    assert os.stat(os.path.join(p, "..")).st_ino == os.stat(os.path.dirname(p)).st_ino
    n = 0
    for _, dirs, _ in os.walk(d):
        n += len(dirs)
    assert n == depth
    subprocess.run(["rm", "-rf", os.path.join(d, comp)], check=True, timeout=300)
    assert os.listdir(d) == []


_LOCKER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
kind = sys.argv[2]
try:
    if kind == "lockf":
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("locked")
except OSError as e:
    print("busy", e.errno)
"""


@pytest.mark.parametrize("kind", ["lockf", "flock"])
def test_file_locks_between_processes(d, kind):
    """POSIX (fcntl) and BSD (flock) locks exclude other processes (sqlite, git, dpkg...)."""
    import fcntl
    p = os.path.join(d, "lockfile")
    write_file(p, b"")
    fd = os.open(p, os.O_RDWR)
    try:
        (fcntl.lockf if kind == "lockf" else fcntl.flock)(fd, fcntl.LOCK_EX)
        r = subprocess.run([sys.executable, "-c", _LOCKER, p, kind], capture_output=True, text=True, timeout=60)
        assert r.stdout.split()[0] == "busy", f"second process got the lock: {r.stdout} {r.stderr}"
        (fcntl.lockf if kind == "lockf" else fcntl.flock)(fd, fcntl.LOCK_UN)
        r = subprocess.run([sys.executable, "-c", _LOCKER, p, kind], capture_output=True, text=True, timeout=60)
        assert r.stdout.strip() == "locked", r.stdout + r.stderr
    finally:
        os.close(fd)

"""What writes, truncates and chowns do to setuid, setgid and file capabilities, as the
kernel does for local file systems (rampart handles it itself: FUSE_HANDLE_KILLPRIV_V2)."""

import errno
import os
import stat
import struct

from e2e_helpers import IS_TMPFS, nobody_py, run, run_as_nobody

# A valid struct vfs_cap_data, revision 2, no capabilities set.
CAPS = struct.pack("<5I", 0x02000000, 0, 0, 0, 0)


def _world_writable(mnt, name, mode):
    os.chmod(mnt.path, 0o755)
    p = os.path.join(mnt.path, name)
    with open(p, "wb") as f:
        f.write(b"#!/bin/sh\n")
    os.chmod(p, mode)
    return p


def test_unprivileged_write_clears_setuid_and_setgid(mnt):
    p = _world_writable(mnt, "f", 0o6777)
    err, _ = nobody_py("fd = os.open(args[0], os.O_WRONLY | os.O_APPEND); os.write(fd, b'x'); os.close(fd)", p)
    assert err == 0
    mode = stat.S_IMODE(os.stat(p).st_mode)
    assert mode & (stat.S_ISUID | stat.S_ISGID) == 0, oct(mode)
    assert mode & 0o777 == 0o777


def test_setgid_without_group_exec_goes_for_a_writer_outside_the_group(mnt):
    p = _world_writable(mnt, "f", 0o2666)  # nobody is not in the file's group (root)
    err, _ = nobody_py("fd = os.open(args[0], os.O_WRONLY | os.O_APPEND); os.write(fd, b'x'); os.close(fd)", p)
    assert err == 0
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666


def test_setgid_without_group_exec_stays_for_root(mnt):
    p = _world_writable(mnt, "f", 0o2666)
    with open(p, "ab") as f:
        f.write(b"x")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o2666


def test_root_write_keeps_setuid(mnt):
    p = _world_writable(mnt, "f", 0o4755)
    with open(p, "ab") as f:
        f.write(b"x")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o4755


def test_unprivileged_truncate_clears_setuid(mnt):
    p = _world_writable(mnt, "f", 0o4777)
    err, _ = nobody_py("os.truncate(args[0], 3)", p)
    assert err == 0
    st = os.stat(p)
    assert st.st_size == 3
    assert stat.S_IMODE(st.st_mode) == 0o777


def test_chown_clears_setuid_even_for_root(mnt):
    p = _world_writable(mnt, "f", 0o4755)
    os.chown(p, 1000, 1000)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o755


def test_write_drops_file_capabilities(mnt):
    p = _world_writable(mnt, "f", 0o755)
    os.setxattr(p, "security.capability", CAPS)
    assert os.getxattr(p, "security.capability") == CAPS
    with open(p, "ab") as f:
        f.write(b"x")
    assert "security.capability" not in os.listxattr(p)


def test_chown_drops_file_capabilities(mnt):
    p = _world_writable(mnt, "f", 0o755)
    os.setxattr(p, "security.capability", CAPS)
    os.chown(p, 1000, 1000)
    assert "security.capability" not in os.listxattr(p)


def _mode_only(p):
    """The mode as `stat -c %a` sees it: statx asking for STATX_MODE alone, which the kernel
    answers from its attribute cache unless the mode itself was invalidated (a write
    invalidates size, times and blocks, so os.stat's full request would refresh it)."""
    r = run(["stat", "-c", "%a", p], check=True)
    return int(r.stdout.strip(), 8)


def test_setuid_cleared_by_a_write_is_not_shown_from_the_kernels_cache(mnt):
    # The mode is in the kernel's attribute cache (stat after chmod) when nobody's write
    # clears setuid in the daemon; the next stat must not show the cached 4777 (issue 16).
    p = _world_writable(mnt, "f", 0o4777)
    assert _mode_only(p) == 0o4777
    r = run_as_nobody(["/bin/sh", "-c", 'echo x >> "$1"', "sh", p])
    assert r.returncode == 0, r.stderr
    assert _mode_only(p) == 0o777
    with open(p, "rb") as f:
        assert f.read() == b"#!/bin/sh\nx\n"


def test_capability_dropped_by_a_write_is_not_shown_from_the_kernels_cache(mnt):
    p = _world_writable(mnt, "f", 0o4777)
    os.setxattr(p, "security.capability", CAPS)
    assert _mode_only(p) == 0o4777
    err, _ = nobody_py("fd = os.open(args[0], os.O_WRONLY | os.O_APPEND); os.write(fd, b'x'); os.close(fd)", p)
    assert err == 0
    assert "security.capability" not in os.listxattr(p)
    assert _mode_only(p) == 0o777


def test_unprivileged_fallocate_clears_setuid_and_setgid(mnt):
    """xfstests generic/683-685: fallocate, punch and zero range by a user other than root
    clear setuid and setgid as a write does (decision 0137); root's keep them."""
    modes = {"alloc": 0, "punch": 0x01 | 0x02, "zero": 0x10}  # KEEP_SIZE|PUNCH_HOLE, ZERO_RANGE
    for name, flags in modes.items():
        p = _world_writable(mnt, name, 0o6666)
        with open(p, "r+b") as f:
            f.write(b"x" * 196608)
        os.stat(p)  # the kernel caches the mode; the fallocate's reply carries no attributes
        code = ("import ctypes\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "fd = os.open(args[0], os.O_RDWR)\n"
                f"rc = libc.fallocate(fd, {flags}, ctypes.c_long(65536), ctypes.c_long(65536))\n"
                "os.close(fd)\n"
                "if rc != 0:\n"
                "    raise OSError(ctypes.get_errno(), 'fallocate')\n")
        err, out = nobody_py(code, p)
        if IS_TMPFS and err == errno.EOPNOTSUPP:
            continue  # tmpfs has no ZERO_RANGE
        assert err == 0, (name, err, out)
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o666, (name, oct(os.stat(p).st_mode))
        os.chmod(p, 0o6776)
        fd = os.open(p, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, 4096)
        finally:
            os.close(fd)
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o6776, (name, "root", oct(os.stat(p).st_mode))

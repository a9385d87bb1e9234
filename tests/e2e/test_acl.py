"""POSIX ACLs (decision 0143): setfacl/getfacl on the mount, enforced by the kernel
(FUSE_POSIX_ACL with default_permissions), default ACLs inherited with the umask ignored, the
umask applied without one, chmod keeping the ACL mask in step, and ACLs surviving a crash.
Where a result is the kernel's arithmetic, the oracle is the same operations on a tmpfs mount
(tmpfs has POSIX ACLs)."""

import contextlib
import errno
import os
import shutil
import stat
import struct
import subprocess
import tempfile

import pytest

from e2e_helpers import (IS_TMPFS, NOBODY_GID, NOBODY_UID, assert_fsck_clean_after_crash,
                         assert_no_panic, crash, nobody_cmd, nobody_py, remount, run, unmount,
                         write_file)
from test_tmpfile import link_by_proc

pytestmark = pytest.mark.skipif(shutil.which("setfacl") is None,
                                reason="the acl package (setfacl, getfacl) is not installed")

READ = "result = open(args[0], 'rb').read().decode()"
ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"


@pytest.fixture
def tmpfs():
    """A tmpfs mount where anyone may enter: the oracle for what a local file system with
    ACLs does."""
    p = tempfile.mkdtemp(prefix="rampart-acl-tmpfs-", dir="/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16M,mode=0755", "tmpfs", p], check=True)
    try:
        yield p
    finally:
        subprocess.run(["umount", "-l", p], check=False)
        os.rmdir(p)


@pytest.fixture
def ad(mnt):
    """A world-traversable directory owned by root, in a fresh mount."""
    os.chmod(mnt.path, 0o755)
    p = os.path.join(mnt.path, "acl")
    os.mkdir(p, 0o755)
    return p


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def setfacl(*args, check=True):
    r = run(["setfacl", *map(str, args)])
    if check:
        assert r.returncode == 0, r.stderr
    return r


def getfacl(path):
    """The ACL as getfacl prints it (numeric ids, no header): the mode's entries when no
    ACL is stored."""
    r = run(["getfacl", "-cpn", str(path)])
    assert r.returncode == 0, r.stderr
    return r.stdout


def acl_xattr(entries):
    """posix_acl_xattr bytes: version 2, then (tag, perm, id) entries."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


U = 0xFFFFFFFF
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


def test_setfacl_getfacl_round_trip(ad, tmpfs):
    for top in (ad, tmpfs):
        p = os.path.join(top, "f")
        write_file(p, b"x", mode=0o640)
        os.chmod(p, 0o640)
        setfacl("-m", f"u:{NOBODY_UID}:rw,g:{NOBODY_GID}:r", p)
    got, want = getfacl(os.path.join(ad, "f")), getfacl(os.path.join(tmpfs, "f"))
    assert got == want
    assert f"user:{NOBODY_UID}:rw-" in got and "mask::rw-" in got, got
    # The mask shows as the group bits, as on any file system with ACLs.
    assert stat.S_IMODE(os.stat(os.path.join(ad, "f")).st_mode) == 0o660
    assert ACCESS in os.listxattr(os.path.join(ad, "f"))
    # setfacl -b sets the ACL of the mode (the owning group's entry, not the mask, gives the
    # group bits): stored as the mode alone.
    for top in (ad, tmpfs):
        setfacl("-b", os.path.join(top, "f"))
        assert ACCESS not in os.listxattr(os.path.join(top, "f"))
        assert stat.S_IMODE(os.stat(os.path.join(top, "f")).st_mode) == 0o640
    # Removing the xattr itself leaves the mode as it is.
    setfacl("-m", f"u:{NOBODY_UID}:rwx", os.path.join(ad, "f"))
    os.removexattr(os.path.join(ad, "f"), ACCESS)
    assert stat.S_IMODE(os.stat(os.path.join(ad, "f")).st_mode) == 0o670
    assert getfacl(os.path.join(ad, "f")) == "user::rw-\ngroup::rwx\nother::---\n\n"


def test_an_acl_equal_to_a_mode_is_stored_as_the_mode(ad, tmpfs):
    for top in (ad, tmpfs):
        p = os.path.join(top, "f")
        write_file(p, b"x")
        os.setxattr(p, ACCESS, acl_xattr([(USER_OBJ, 7, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)]))
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o740
        assert ACCESS not in os.listxattr(p)


def test_removing_an_acl_that_is_not_stored_succeeds(ad, tmpfs):
    """As on tmpfs and ext4 (`set_acl(NULL)`): `setfattr -x` of an absent ACL, or of one
    stored as the mode alone, succeeds and leaves the mode."""
    for top in (ad, tmpfs):
        f = os.path.join(top, "plain")
        write_file(f, b"x")
        os.chmod(f, 0o640)
        os.removexattr(f, ACCESS)
        os.setxattr(f, ACCESS, acl_xattr([(USER_OBJ, 6, U), (GROUP_OBJ, 0, U), (OTHER, 4, U)]))
        os.removexattr(f, ACCESS)
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o604, top
        d = os.path.join(top, "dir")
        os.mkdir(d)
        os.removexattr(d, DEFAULT)
        with pytest.raises(OSError) as e:
            os.removexattr(f, "user.absent")
        assert e.value.errno == errno.ENODATA, top


def test_acl_entries_are_enforced(ad):
    p = os.path.join(ad, "secret")
    write_file(p, b"secret", mode=0o600)
    os.chmod(p, 0o600)
    assert nobody_py(READ, p)[0] == errno.EACCES
    # Denied by the mode, allowed by a named-user entry.
    setfacl("-m", f"u:{NOBODY_UID}:r", p)
    assert nobody_py(READ, p) == (0, "secret")
    # The mask limits the named entry.
    setfacl("-m", "m::-", p)
    assert nobody_py(READ, p)[0] == errno.EACCES
    setfacl("-m", "m::r", p)
    assert nobody_py(READ, p) == (0, "secret")
    # Allowed by the mode (other r), denied by a named-user entry.
    q = os.path.join(ad, "public")
    write_file(q, b"public", mode=0o644)
    os.chmod(q, 0o644)
    assert nobody_py(READ, q) == (0, "public")
    setfacl("-m", f"u:{NOBODY_UID}:-", q)
    assert nobody_py(READ, q)[0] == errno.EACCES
    # A named group entry, for a caller in that group.
    r = os.path.join(ad, "group")
    write_file(r, b"group", mode=0o600)
    os.chmod(r, 0o600)
    setfacl("-m", f"g:{NOBODY_GID}:r", r)
    assert nobody_py(READ, r) == (0, "group")
    # A directory: search granted by an ACL entry.
    d = os.path.join(ad, "d")
    os.mkdir(d, 0o700)
    write_file(os.path.join(d, "in"), b"in", mode=0o644)
    os.chmod(os.path.join(d, "in"), 0o644)
    assert nobody_py(READ, os.path.join(d, "in"))[0] == errno.EACCES
    setfacl("-m", f"u:{NOBODY_UID}:x", d)
    assert nobody_py(READ, os.path.join(d, "in")) == (0, "in")


def make_everything(top, name):
    """A file, a directory, a fifo, an O_TMPFILE linked in and a symlink under `top`/`name`;
    returns their paths."""
    base = os.path.join(top, name)
    os.mkdir(base, 0o777)
    paths = {k: os.path.join(base, k) for k in ("file", "dir", "fifo", "tmpfile", "link")}
    fd = os.open(paths["file"], os.O_WRONLY | os.O_CREAT, 0o666)
    os.close(fd)
    os.mkdir(paths["dir"], 0o777)
    os.mkfifo(paths["fifo"], 0o666)
    fd = os.open(base, os.O_TMPFILE | os.O_WRONLY, 0o666)
    try:
        link_by_proc(fd, paths["tmpfile"])
    finally:
        os.close(fd)
    os.symlink("file", paths["link"])
    return base, paths


def describe(paths):
    out = {}
    for k, p in paths.items():
        st = os.lstat(p)
        out[k] = (oct(st.st_mode), None if k == "link" else getfacl(p))
    return out


def test_umask_applies_without_a_default_acl(ad, tmpfs):
    with umask(0o027):
        _, ours = make_everything(ad, "u")
        _, theirs = make_everything(tmpfs, "u")
    got, want = describe(ours), describe(theirs)
    assert got == want
    assert got["file"][0] == oct(stat.S_IFREG | 0o640)
    assert got["dir"][0] == oct(stat.S_IFDIR | 0o750)
    assert got["tmpfile"][0] == oct(stat.S_IFREG | 0o640)


def test_default_acl_is_inherited_and_the_umask_ignored(ad, tmpfs):
    results = []
    for top in (ad, tmpfs):
        base = os.path.join(top, "inherit")
        os.mkdir(base, 0o755)
        setfacl("-d", "-m", f"u::rwx,g::rx,o::-,u:{NOBODY_UID}:rwx,m::rwx", base)
        with umask(0o077):
            _, paths = make_everything(base, "sub")
            fd = os.open(os.path.join(base, "direct"), os.O_WRONLY | os.O_CREAT, 0o666)
            os.close(fd)
            os.mkdir(os.path.join(base, "directdir"), 0o777)
        paths["direct"] = os.path.join(base, "direct")
        paths["directdir"] = os.path.join(base, "directdir")
        paths["sub"] = os.path.join(base, "sub")
        results.append(describe(paths))
    got, want = results
    assert got == want
    # The umask (077) would have left no group or other bits; the default ACL gives them.
    assert got["direct"][0] == oct(stat.S_IFREG | 0o660), got["direct"]
    assert f"user:{NOBODY_UID}:rwx\t#effective:rw-" in got["direct"][1], got["direct"][1]
    assert f"default:user:{NOBODY_UID}:rwx" in got["directdir"][1], got["directdir"][1]
    # A file inherited from a default ACL is enforced too.
    write_file(os.path.join(ad, "inherit", "direct"), b"inherited")
    assert nobody_py(READ, os.path.join(ad, "inherit", "direct")) == (0, "inherited")


def test_chmod_updates_the_acl_mask(ad, tmpfs):
    results = []
    for top in (ad, tmpfs):
        p = os.path.join(top, "f")
        write_file(p, b"x", mode=0o644)
        setfacl("-m", f"u:{NOBODY_UID}:rwx", p)
        os.chmod(p, 0o700)
        first = getfacl(p)
        os.chmod(p, 0o754)
        results.append((first, getfacl(p), oct(os.stat(p).st_mode)))
    assert results[0] == results[1]
    assert "mask::---" in results[0][0], results[0][0]
    assert "mask::r-x" in results[0][1] and "other::r--" in results[0][1], results[0][1]
    p = os.path.join(ad, "f")
    write_file(p, b"x")
    os.chmod(p, 0o700)
    assert nobody_py(READ, p)[0] == errno.EACCES, "chmod 0700 masks the named entry"


def test_malformed_acl_bytes_are_refused(ad, tmpfs):
    bad = [
        b"\x02\x00\x00",  # shorter than the header
        acl_xattr([(USER_OBJ, 7, U), (GROUP_OBJ, 4, U)])[:-1],  # a cut entry
        acl_xattr([(USER_OBJ, 7, U), (GROUP_OBJ, 4, U)]),  # no other
        acl_xattr([(USER_OBJ, 7, U), (USER, 4, 5), (GROUP_OBJ, 4, U), (OTHER, 0, U)]),  # no mask
        acl_xattr([(GROUP_OBJ, 4, U), (USER_OBJ, 7, U), (OTHER, 0, U)]),  # out of order
        acl_xattr([(USER_OBJ, 7, U), (GROUP_OBJ, 4, U), (USER, 4, 5), (MASK, 4, U),
                   (OTHER, 0, U)]),  # a user after the group
        acl_xattr([(USER_OBJ, 7, U), (MASK, 4, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)]),  # mask first
        acl_xattr([(USER_OBJ, 8, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)]),  # a bad perm
    ]
    for top in (ad, tmpfs):
        p = os.path.join(top, "f")
        write_file(p, b"x", mode=0o644)
        os.chmod(p, 0o644)
        for value in bad:
            with pytest.raises(OSError) as e:
                os.setxattr(p, ACCESS, value)
            assert e.value.errno == errno.EINVAL, (top, value)
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
        assert ACCESS not in os.listxattr(p)
        # A default ACL only on a directory.
        with pytest.raises(OSError) as e:
            os.setxattr(p, DEFAULT, acl_xattr([(USER_OBJ, 7, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)]))
        assert e.value.errno == errno.EACCES


def test_setting_an_acl_outside_the_group_clears_setgid(ad, tmpfs):
    results = []
    for top in (ad, tmpfs):
        p = os.path.join(top, "sgid")
        write_file(p, b"x")
        os.chown(p, NOBODY_UID, 0)
        os.chmod(p, 0o2770)
        # nobody owns the file but is not in its group (0), nor privileged.
        r = run(nobody_cmd(["setfacl", "-m", "u:1000:r", p]))
        assert r.returncode == 0, r.stderr
        results.append(oct(os.stat(p).st_mode))
    assert results[0] == results[1]
    assert not int(results[0], 8) & stat.S_ISGID


def test_cp_a_keeps_acls(ad, tmpfs):
    src = os.path.join(tmpfs, "src")
    write_file(src, b"copied")
    setfacl("-m", f"u:{NOBODY_UID}:r,g:{NOBODY_GID}:rw", src)
    d = os.path.join(tmpfs, "srcdir")
    os.mkdir(d)
    setfacl("-d", "-m", f"u:{NOBODY_UID}:rwx", d)
    for what in (src, d):
        r = run(["cp", "-a", what, ad])
        assert r.returncode == 0, r.stderr
        copy = os.path.join(ad, os.path.basename(what))
        assert getfacl(copy) == getfacl(what)
    # And back out, from the mount to tmpfs.
    r = run(["cp", "-a", os.path.join(ad, "src"), os.path.join(tmpfs, "back")])
    assert r.returncode == 0, r.stderr
    assert getfacl(os.path.join(tmpfs, "back")) == getfacl(src)


@pytest.mark.rampart_only("a crash of the daemon")
def test_acls_survive_sync_and_a_crash(mnt):
    p = mnt.path
    os.chmod(p, 0o755)
    f, d = os.path.join(p, "f"), os.path.join(p, "d")
    write_file(f, b"x")
    setfacl("-m", f"u:{NOBODY_UID}:rw,m::r", f)
    os.mkdir(d)
    setfacl("-d", "-m", f"u:{NOBODY_UID}:rwx", d)
    with umask(0o077):
        write_file(os.path.join(d, "child"), b"y", mode=0o666)
    os.chmod(f, 0o750)
    before = {x: (getfacl(x), oct(os.stat(x).st_mode))
              for x in (f, d, os.path.join(d, "child"))}
    r = mnt.cli("sync", p)
    assert r.returncode == 0, r.stderr
    crash(mnt)
    assert_fsck_clean_after_crash(mnt)
    remount(mnt)
    after = {x: (getfacl(x), oct(os.stat(x).st_mode)) for x in before}
    assert after == before
    assert nobody_py(READ, os.path.join(d, "child")) == (0, "y")
    unmount(mnt)
    assert_no_panic(mnt)

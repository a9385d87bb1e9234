"""Permission checks as the unprivileged user nobody (65534). rampart mounts with
default_permissions (and allow_other when run as root), so the kernel enforces
the mode bits exactly as on any local file system."""

import errno
import os
import stat

import pytest

from e2e_helpers import NOBODY_GID, NOBODY_UID, nobody_py, read_file, run_as_nobody, write_file

READ = "result = open(args[0], 'rb').read().decode()"
WRITE = "fd = os.open(args[0], os.O_WRONLY); os.write(fd, b'nobody'); os.close(fd)"
CREATE = "fd = os.open(args[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644); os.close(fd)"


@pytest.fixture
def pd(mnt):
    """A world-traversable directory owned by root."""
    p = os.path.join(mnt.path, "perm")
    os.mkdir(p, 0o755)
    os.chmod(mnt.path, 0o755)
    return p


def test_nobody_can_enter_the_mount(pd):
    write_file(os.path.join(pd, "pub"), b"public")
    e, res = nobody_py(READ, os.path.join(pd, "pub"))
    assert (e, res) == (0, "public")


def test_read_permission(pd):
    write_file(os.path.join(pd, "secret"), b"secret", mode=0o600)
    os.chmod(os.path.join(pd, "secret"), 0o600)
    assert nobody_py(READ, os.path.join(pd, "secret"))[0] == errno.EACCES
    os.chmod(os.path.join(pd, "secret"), 0o604)
    assert nobody_py(READ, os.path.join(pd, "secret")) == (0, "secret")


def test_write_permission(pd):
    p = os.path.join(pd, "f")
    write_file(p, b"root's")
    os.chmod(p, 0o644)
    assert nobody_py(WRITE, p)[0] == errno.EACCES
    assert read_file(p) == b"root's"
    os.chmod(p, 0o646)
    assert nobody_py(WRITE, p)[0] == 0
    assert read_file(p) == b"nobody"
    assert nobody_py("os.truncate(args[0], 0)", p)[0] == 0
    os.chmod(p, 0o644)
    assert nobody_py("os.truncate(args[0], 0)", p)[0] == errno.EACCES


def test_create_in_directory_needs_write_permission(pd):
    assert nobody_py(CREATE, os.path.join(pd, "new"))[0] == errno.EACCES
    assert nobody_py("os.mkdir(args[0])", os.path.join(pd, "newdir"))[0] == errno.EACCES
    assert not os.path.lexists(os.path.join(pd, "new"))
    os.chmod(pd, 0o777)
    assert nobody_py(CREATE, os.path.join(pd, "new"))[0] == 0
    st = os.stat(os.path.join(pd, "new"))
    assert (st.st_uid, st.st_gid) == (NOBODY_UID, NOBODY_GID), "new files belong to their creator"
    assert nobody_py("os.mkdir(args[0])", os.path.join(pd, "newdir"))[0] == 0
    st = os.stat(os.path.join(pd, "newdir"))
    assert (st.st_uid, st.st_gid) == (NOBODY_UID, NOBODY_GID)


def test_directory_search_and_list_permission(pd):
    priv = os.path.join(pd, "private")
    os.mkdir(priv, 0o700)
    write_file(os.path.join(priv, "inside"), b"x")
    os.chmod(os.path.join(priv, "inside"), 0o644)
    assert nobody_py("os.listdir(args[0])", priv)[0] == errno.EACCES
    assert nobody_py("os.stat(args[0])", os.path.join(priv, "inside"))[0] == errno.EACCES
    os.chmod(priv, 0o711)  # search but not read
    assert nobody_py("os.listdir(args[0])", priv)[0] == errno.EACCES
    assert nobody_py(READ, os.path.join(priv, "inside")) == (0, "x")
    os.chmod(priv, 0o755)
    assert nobody_py("result = os.listdir(args[0])", priv) == (0, ["inside"])


def test_sticky_directory(pd):
    tmp = os.path.join(pd, "tmp")
    os.mkdir(tmp)
    os.chmod(tmp, 0o1777)
    write_file(os.path.join(tmp, "roots"), b"r")
    os.chmod(os.path.join(tmp, "roots"), 0o666)
    assert nobody_py("os.unlink(args[0])", os.path.join(tmp, "roots"))[0] == errno.EPERM
    assert nobody_py("os.rename(args[0], args[1])", os.path.join(tmp, "roots"),
                     os.path.join(tmp, "stolen"))[0] == errno.EPERM
    assert os.path.exists(os.path.join(tmp, "roots"))
    assert nobody_py(CREATE, os.path.join(tmp, "mine"))[0] == 0
    assert nobody_py("os.unlink(args[0])", os.path.join(tmp, "mine"))[0] == 0
    assert not os.path.exists(os.path.join(tmp, "mine"))


def test_owner_only_operations(pd):
    p = os.path.join(pd, "f")
    write_file(p, b"")
    os.chmod(p, 0o666)
    assert nobody_py("os.chmod(args[0], 0o777)", p)[0] == errno.EPERM
    assert nobody_py("os.chown(args[0], 65534, 65534)", p)[0] == errno.EPERM
    assert nobody_py("os.utime(args[0], ns=(10**18, 10**18))", p)[0] == errno.EPERM
    # with write permission, setting the time to "now" is allowed
    assert nobody_py("os.utime(args[0])", p)[0] == 0
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 and os.stat(p).st_uid == 0
    # the owner may chmod, but not give the file away
    os.chown(p, NOBODY_UID, NOBODY_GID)
    assert nobody_py("os.chmod(args[0], 0o600)", p)[0] == 0
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    assert nobody_py("os.chown(args[0], 0, 0)", p)[0] == errno.EPERM


def test_root_overrides_mode_bits(pd):
    p = os.path.join(pd, "ro")
    os.chmod(pd, 0o777)
    assert nobody_py(CREATE, p)[0] == 0
    os.chmod(p, 0o400)
    assert nobody_py(WRITE, p)[0] == errno.EACCES, "the owner has no write bit"
    write_file(p, b"root wrote")  # CAP_DAC_OVERRIDE
    assert read_file(p) == b"root wrote"


def test_exec_permission(pd):
    p = os.path.join(pd, "script")
    write_file(p, b"#!/bin/sh\necho ran as $(id -u)\n")
    os.chmod(p, 0o744)
    # exec through a shell: the shell's execve is done with nobody's credentials
    r = run_as_nobody(["/bin/sh", "-c", 'exec "$0"', p])
    assert r.returncode == 126 and "ermission denied" in r.stderr
    os.chmod(p, 0o755)
    r = run_as_nobody(["/bin/sh", "-c", 'exec "$0"', p])
    assert r.returncode == 0 and r.stdout.strip() == f"ran as {NOBODY_UID}"


def test_xattr_permissions(pd):
    p = os.path.join(pd, "f")
    write_file(p, b"")
    os.chmod(p, 0o644)
    os.setxattr(p, "user.root", b"r")
    assert nobody_py("result = os.getxattr(args[0], 'user.root').decode()", p) == (0, "r")
    assert nobody_py("os.setxattr(args[0], 'user.nobody', b'n')", p)[0] == errno.EACCES
    os.chmod(p, 0o666)
    assert nobody_py("os.setxattr(args[0], 'user.nobody', b'n')", p)[0] == 0
    assert os.getxattr(p, "user.nobody") == b"n"
    assert nobody_py("os.setxattr(args[0], 'trusted.x', b'n')", p)[0] == errno.EPERM


def test_trusted_xattrs_hidden_from_users(pd):
    p = os.path.join(pd, "f")
    write_file(p, b"")
    os.chmod(p, 0o644)
    os.setxattr(p, "trusted.secret", b"s")
    os.setxattr(p, "user.visible", b"v")
    assert "trusted.secret" in os.listxattr(p)
    e, names = nobody_py("result = os.listxattr(args[0])", p)
    assert e == 0 and "user.visible" in names
    assert "trusted.secret" not in names, "trusted.* names are listed only to privileged users"
    assert nobody_py("os.getxattr(args[0], 'trusted.secret')", p)[0] == errno.ENODATA


def test_setgid_directory_for_unprivileged_creator(pd):
    sg = os.path.join(pd, "sg")
    os.mkdir(sg)
    os.chown(sg, 0, 4321)
    os.chmod(sg, 0o2777)
    assert nobody_py(CREATE, os.path.join(sg, "f"))[0] == 0
    st = os.stat(os.path.join(sg, "f"))
    assert (st.st_uid, st.st_gid) == (NOBODY_UID, 4321)

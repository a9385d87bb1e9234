"""O_TMPFILE: unnamed files, and linkat giving them a name (docs/decisions/0051).

The kernel sends FUSE_TMPFILE (Linux 6.1+); before rampart answered it, open(dir, O_TMPFILE)
failed with EOPNOTSUPP and programs fell back to a named temporary file. Checked against
tmpfs with RAMPART_E2E_TARGET=tmpfs; the store tests are rampart's alone."""

import ctypes
import errno
import os
import stat
import tempfile

import pytest

from e2e_helpers import IS_TMPFS, NOBODY_UID, nobody_py, read_file, write_file
from test_categories import LONG, configured
from test_persistence import (assert_fsck_clean_after_crash, assert_no_panic, crash, journal_len,
                              new_mount, remount, unmount)

_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_FOLLOW = 0x400
AT_EMPTY_PATH = 0x1000


def _linkat(olddirfd, oldpath, newpath, flags):
    # Not os.link: on Linux it calls link(2), which does not follow /proc/self/fd/N.
    if _libc.linkat(olddirfd, os.fsencode(oldpath), AT_FDCWD, os.fsencode(newpath), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), newpath)


def linkat_empty_path(fd, new_path):
    """linkat(fd, "", AT_FDCWD, new_path, AT_EMPTY_PATH): names an open file (root only)."""
    _linkat(fd, "", new_path, AT_EMPTY_PATH)


def link_by_proc(fd, new_path):
    """linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, new_path, AT_SYMLINK_FOLLOW)."""
    _linkat(AT_FDCWD, f"/proc/self/fd/{fd}", new_path, AT_SYMLINK_FOLLOW)


LINKERS = {"AT_EMPTY_PATH": linkat_empty_path, "proc-fd": link_by_proc}


def tmpfile(directory, flags=0, mode=0o600):
    return os.open(directory, os.O_TMPFILE | os.O_RDWR | flags, mode)


def test_an_unnamed_file_is_written_read_and_gone_at_close(d):
    data = os.urandom(300_000)
    fd = tmpfile(d, mode=0o640)
    try:
        assert os.pwrite(fd, data, 0) == len(data)
        assert os.pread(fd, len(data) + 10, 0) == data
        st = os.fstat(fd)
        assert stat.S_ISREG(st.st_mode)
        assert st.st_nlink == 0
        assert st.st_size == len(data)
        assert stat.S_IMODE(st.st_mode) == 0o640 & ~_umask()
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
        assert os.listdir(d) == []
        os.ftruncate(fd, 10)
        assert os.fstat(fd).st_size == 10
    finally:
        os.close(fd)
    assert os.listdir(d) == []


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("how", sorted(LINKERS))
def test_linkat_names_an_unnamed_file(d, how):
    data = b"made unnamed, then named " * 1000
    fd = tmpfile(d)
    try:
        os.write(fd, data)
        path = os.path.join(d, "named")
        LINKERS[how](fd, path)
        assert os.listdir(d) == ["named"]
        assert read_file(path) == data
        assert os.stat(path).st_ino == os.fstat(fd).st_ino
        assert os.fstat(fd).st_nlink == 1
        # Written through the descriptor after it got its name: seen under the name.
        os.pwrite(fd, b"LATER", 0)
        assert read_file(path)[:5] == b"LATER"
        # A second name is an ordinary hard link.
        LINKERS[how](fd, os.path.join(d, "second"))
        assert os.fstat(fd).st_nlink == 2
    finally:
        os.close(fd)
    assert sorted(os.listdir(d)) == ["named", "second"]


def test_linkat_onto_an_existing_name_is_refused(d):
    write_file(os.path.join(d, "taken"), b"old")
    fd = tmpfile(d)
    try:
        with pytest.raises(FileExistsError):
            link_by_proc(fd, os.path.join(d, "taken"))
        # Still unnamed, still linkable.
        assert os.fstat(fd).st_nlink == 0
        link_by_proc(fd, os.path.join(d, "free"))
    finally:
        os.close(fd)
    assert read_file(os.path.join(d, "taken")) == b"old"


@pytest.mark.parametrize("how", sorted(LINKERS))
def test_an_exclusive_unnamed_file_can_never_be_named(d, how):
    fd = tmpfile(d, os.O_EXCL)
    try:
        os.write(fd, b"private")
        with pytest.raises(OSError) as e:
            LINKERS[how](fd, os.path.join(d, "x"))
        assert e.value.errno == errno.ENOENT  # as ext4 and tmpfs (the VFS: no I_LINKABLE)
    finally:
        os.close(fd)
    assert os.listdir(d) == []


def test_a_named_then_unlinked_unnamed_file_cannot_be_named_again(d):
    fd = tmpfile(d)
    try:
        path = os.path.join(d, "once")
        link_by_proc(fd, path)
        os.unlink(path)
        with pytest.raises(FileNotFoundError):
            link_by_proc(fd, os.path.join(d, "twice"))
    finally:
        os.close(fd)
    assert os.listdir(d) == []


def test_an_unnamed_file_needs_write_access_to_its_directory(mnt):
    locked = os.path.join(mnt.path, "locked")
    os.mkdir(locked, 0o755)
    opened = os.path.join(mnt.path, "open")
    os.mkdir(opened, 0o777)
    os.chmod(opened, 0o777)
    code = ("fd = os.open(args[0], os.O_TMPFILE | os.O_RDWR, 0o600); "
            "result = os.fstat(fd).st_uid; os.close(fd)")
    assert nobody_py(code, locked)[0] == errno.EACCES
    assert nobody_py(code, opened) == (0, NOBODY_UID)
    assert os.listdir(locked) == [] and os.listdir(opened) == []


def test_python_tempfile_uses_o_tmpfile_without_fallback(d, monkeypatch):
    """tempfile.TemporaryFile tries O_TMPFILE first and falls back to a named file on any
    OSError (EOPNOTSUPP here before FUSE_TMPFILE): record which it used."""
    calls = []
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):
        try:
            fd = real_open(path, flags, *args, **kwargs)
        except OSError as e:
            calls.append((flags & os.O_TMPFILE == os.O_TMPFILE, e.errno))
            raise
        calls.append((flags & os.O_TMPFILE == os.O_TMPFILE, 0))
        return fd

    monkeypatch.setattr(tempfile, "_O_TMPFILE_WORKS", True)
    monkeypatch.setattr(tempfile._os, "open", recording_open)
    with tempfile.TemporaryFile(dir=d) as f:
        f.write(b"scratch")
        f.seek(0)
        assert f.read() == b"scratch"
    assert calls == [(True, 0)], f"os.open calls (O_TMPFILE?, errno): {calls}"
    assert os.listdir(d) == []


# ---- the store: nothing of an unnamed file, all of a named one -----------------------------

MARKER = b"unnamed-file-marker-7f3a9c"
NAME_MARKER = "unnamed-name-marker-40b1"


def _store_holds(m, needle):
    found = []
    for root, _dirs, files in os.walk(m.store):
        for name in files:
            p = os.path.join(root, name)
            if name == "rampart.log" or not os.path.isfile(p):
                continue
            with open(p, "rb") as f:
                if needle in f.read():
                    found.append(p)
    return found


@pytest.mark.rampart_only("reads the store")
def test_an_unnamed_file_leaves_nothing_in_the_store(test_base, rampart_env, cleanup_mounts):
    m = new_mount(test_base, rampart_env, "unnamed-gone", cleanup_mounts)
    fd = tmpfile(m.path)
    try:
        os.write(fd, MARKER * 20_000)
        os.fchmod(fd, 0o644)
        os.fsync(fd)
    finally:
        os.close(fd)
    write_file(os.path.join(m.path, "kept"), b"a named file")
    unmount(m)
    assert _store_holds(m, MARKER) == []
    remount(m)
    assert os.listdir(m.path) == ["kept"]
    st = os.statvfs(m.path)
    assert st.f_files - st.f_ffree == 2, "inodes other than the root and kept"
    unmount(m)
    assert_no_panic(m)


@pytest.mark.rampart_only("remounts and kills the daemon")
@pytest.mark.parametrize("writeback", ["on", "off"], ids=["writeback-cache", "no-writeback-cache"])
@pytest.mark.parametrize("end", ["remount", "kill-9"])
def test_a_named_unnamed_file_is_durable(test_base, rampart_env, cleanup_mounts, end, writeback):
    m = new_mount(test_base, rampart_env, f"unnamed-named-{end}-{writeback}", cleanup_mounts,
                  opts=("--writeback-cache", writeback))
    sub = os.path.join(m.path, "sub")
    os.mkdir(sub)
    data = os.urandom(400_000)
    fd = tmpfile(sub)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o640)
        os.setxattr(f"/proc/self/fd/{fd}", "user.origin", b"tmpfile")
        link_by_proc(fd, os.path.join(sub, "kept"))
        os.pwrite(fd, b"AFTER", len(data))  # journaled as any file's write
        os.fsync(fd)
        before = os.fstat(fd)
    finally:
        os.close(fd)
    if end == "kill-9":
        crash(m)
        assert_fsck_clean_after_crash(m)
    else:
        unmount(m)
    remount(m)
    path = os.path.join(sub, "kept")
    assert read_file(path) == data + b"AFTER"
    st = os.stat(path)
    assert (st.st_nlink, stat.S_IMODE(st.st_mode), st.st_size) == (1, 0o640, len(data) + 5)
    assert (st.st_uid, st.st_gid, st.st_mtime_ns) == (before.st_uid, before.st_gid, before.st_mtime_ns)
    assert os.getxattr(path, "user.origin") == b"tmpfile"
    assert os.listdir(sub) == ["kept"]
    unmount(m)
    assert_no_panic(m)


# ---- categories: an unnamed file gets its directory's (decision 0091) ------------------------


def _category_of_fd(fd):
    return os.getxattr(f"/proc/self/fd/{fd}", "user.rampart.category").decode()


@pytest.mark.rampart_only("categories are rampart's")
@pytest.mark.parametrize("writeback", ["on", "off"], ids=["writeback-cache", "no-writeback-cache"])
def test_an_unnamed_file_in_a_safe_directory_is_durable_when_write_returns(
        test_base, rampart_env, cleanup_mounts, writeback):
    # rampart.toml names SAFE, so OPEN is answered; nothing commits within five minutes.
    m = configured(test_base, rampart_env, f"unnamed-safe-{writeback}", cleanup_mounts,
                   opts=LONG + ("--writeback-cache", writeback))
    safe = m.path / "safe"
    os.mkdir(safe)
    os.setxattr(safe, "user.rampart.category", b"SAFE")
    first, second = os.urandom(200_000), os.urandom(100_000)
    fd = tmpfile(safe)
    assert _category_of_fd(fd) == "SAFE"
    os.write(fd, first)
    link_by_proc(fd, safe / "kept")
    assert os.pwrite(fd, second, len(first)) == len(second)
    crash(m)  # no fsync, no close: the writes returned
    assert_fsck_clean_after_crash(m)
    try:
        os.close(fd)
    except OSError:
        pass  # the connection is gone
    remount(m)
    assert read_file(safe / "kept") == first + second
    assert os.getxattr(safe / "kept", "user.rampart.category") == b"SAFE"
    unmount(m)
    assert_no_panic(m)


@pytest.mark.rampart_only("reads the store")
def test_an_unnamed_file_in_a_temporary_directory_leaves_nothing_in_the_journal(
        test_base, rampart_env, cleanup_mounts):
    m = configured(test_base, rampart_env, "unnamed-temporary", cleanup_mounts)
    tmp = m.path / "tmp"
    os.mkdir(tmp)
    os.setxattr(tmp, "user.rampart.category", b"TEMPORARY")
    os.sync()
    journal_before = journal_len(m)
    fd = tmpfile(tmp)
    try:
        assert _category_of_fd(fd) == "TEMPORARY"
        os.write(fd, MARKER * 20_000)
        link_by_proc(fd, tmp / NAME_MARKER)  # named: still unknown to the store (0066)
        os.write(fd, MARKER)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert os.getxattr(tmp / NAME_MARKER, "user.rampart.category") == b"TEMPORARY"
    os.sync()
    assert journal_len(m) == journal_before
    assert _store_holds(m, MARKER) == []
    assert _store_holds(m, NAME_MARKER.encode()) == []
    unmount(m)
    assert _store_holds(m, NAME_MARKER.encode()) == []
    remount(m)
    assert os.listdir(tmp) == []
    unmount(m)
    assert_no_panic(m)


@pytest.mark.skipif(IS_TMPFS, reason="tmpfs has no daemon")
def test_the_mount_answers_o_tmpfile(mnt):
    """Not EOPNOTSUPP: the kernel's FUSE_TMPFILE is answered (a daemon without it makes the
    kernel give up on O_TMPFILE for the whole mount)."""
    for _ in range(3):
        os.close(tmpfile(mnt.path))

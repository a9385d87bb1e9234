"""File handles that outlive the kernel's caches (NFS export, open_by_handle_at; decision 0142).

name_to_handle_at gives a handle (FUSE: node id and generation); open_by_handle_at opens the
file by it later. When the kernel no longer caches that inode (caches dropped, a remount, a
daemon restarted after kill -9) it asks the daemon: LOOKUP of "." under the handle's node id,
and of ".." for a directory's parent (FUSE_EXPORT_SUPPORT). A handle to a file that is gone,
or whose inode number now names another file (a different generation), gives ESTALE.
open_by_handle_at needs CAP_DAC_READ_SEARCH: these tests run as root."""

import ctypes
import errno
import os

import pytest

from e2e_helpers import crash, libc, read_file, remount, run, unmount, write_file

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="open_by_handle_at needs CAP_DAC_READ_SEARCH")

HANDLE_BYTES_MAX = 128  # MAX_HANDLE_SZ


class FileHandle(ctypes.Structure):
    _fields_ = [
        ("handle_bytes", ctypes.c_uint),
        ("handle_type", ctypes.c_int),
        ("f_handle", ctypes.c_ubyte * HANDLE_BYTES_MAX),
    ]


libc.name_to_handle_at.argtypes = [
    ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(FileHandle), ctypes.POINTER(ctypes.c_int), ctypes.c_int,
]
libc.name_to_handle_at.restype = ctypes.c_int
libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.POINTER(FileHandle), ctypes.c_int]
libc.open_by_handle_at.restype = ctypes.c_int


def handle_of(path):
    h = FileHandle(handle_bytes=HANDLE_BYTES_MAX)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, os.fsencode(path), ctypes.byref(h), ctypes.byref(mount_id), 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"name_to_handle_at: {os.strerror(e)}", path)
    return h


def open_by_handle(mount_path, h, flags=os.O_RDONLY):
    """An fd for handle `h` on the file system mounted at `mount_path`."""
    mount_fd = os.open(mount_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = libc.open_by_handle_at(mount_fd, ctypes.byref(h), flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"open_by_handle_at: {os.strerror(e)}")
        return fd
    finally:
        os.close(mount_fd)


def drop_caches():
    """Drops the kernel's dentries and inodes (the daemon gets their FORGETs)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_fd(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 1 << 16)


def assert_opens(mount_path, h, data):
    fd = open_by_handle(mount_path, h)
    try:
        assert read_fd(fd) == data
    finally:
        os.close(fd)


def assert_dir_opens(mount_path, h, path, names):
    """The directory opens by its handle, lists `names`, and the kernel found its place in
    the tree (its parents by ".." and its name in each): /proc shows its path."""
    fd = open_by_handle(mount_path, h, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert sorted(os.listdir(fd)) == sorted(names)
        assert os.readlink(f"/proc/self/fd/{fd}") == str(path)
    finally:
        os.close(fd)


def assert_stale(mount_path, h):
    with pytest.raises(OSError) as e:
        os.close(open_by_handle(mount_path, h))
    assert e.value.errno == errno.ESTALE, e.value


def test_handles_of_a_file_and_a_directory_open_after_the_caches_are_dropped(mnt):
    deep = os.path.join(mnt.path, "a", "b", "c")
    os.makedirs(deep)
    f = os.path.join(deep, "f")
    write_file(f, b"by handle\n")
    file_handle, dir_handle = handle_of(f), handle_of(deep)
    assert_opens(mnt.path, file_handle, b"by handle\n")
    drop_caches()
    assert_opens(mnt.path, file_handle, b"by handle\n")
    drop_caches()
    assert_dir_opens(mnt.path, dir_handle, deep, ["f"])
    # The root's own handle: its ".." is itself.
    drop_caches()
    assert_dir_opens(mnt.path, handle_of(mnt.path), mnt.path, ["a"])
    # Lookups by handle changed nothing a path sees.
    assert read_file(f) == b"by handle\n"
    assert os.listdir(os.path.join(mnt.path, "a")) == ["b"]


@pytest.mark.rampart_only("a tmpfs remount loses its files")
def test_handles_open_the_same_files_after_a_clean_remount(mnt):
    d = os.path.join(mnt.path, "d")
    os.mkdir(d)
    f = os.path.join(d, "f")
    write_file(f, b"kept\n")
    file_handle, dir_handle = handle_of(f), handle_of(d)
    unmount(mnt)
    remount(mnt)
    drop_caches()  # the remount listed the root: READDIRPLUS cached its entries
    assert_opens(mnt.path, file_handle, b"kept\n")
    assert_dir_opens(mnt.path, dir_handle, d, ["f"])


@pytest.mark.rampart_only("kill -9 of the rampart daemon")
def test_handles_open_the_same_files_after_kill_9_and_a_remount(mnt):
    d = os.path.join(mnt.path, "d")
    os.mkdir(d)
    f = os.path.join(d, "f")
    write_file(f, b"synced\n")
    file_handle, dir_handle = handle_of(f), handle_of(d)
    r = mnt.cli("sync", mnt.path)
    assert r.returncode == 0, r.stderr
    crash(mnt)
    remount(mnt)
    drop_caches()  # the remount listed the root: READDIRPLUS cached its entries
    assert_opens(mnt.path, file_handle, b"synced\n")
    assert_dir_opens(mnt.path, dir_handle, d, ["f"])


def test_a_deleted_files_handle_is_stale(mnt):
    f = os.path.join(mnt.path, "gone")
    write_file(f, b"x")
    h = handle_of(f)
    os.unlink(f)
    drop_caches()
    assert_stale(mnt.path, h)
    d = os.path.join(mnt.path, "gone-dir")
    os.mkdir(d)
    h = handle_of(d)
    os.rmdir(d)
    drop_caches()
    assert_stale(mnt.path, h)


@pytest.mark.rampart_only("a tmpfs remount loses its files")
def test_a_handle_whose_inode_number_was_reused_is_stale(mnt):
    old = os.path.join(mnt.path, "old")
    write_file(old, b"old\n")
    old_ino, old_handle = os.stat(old).st_ino, handle_of(old)
    os.unlink(old)
    drop_caches()  # the daemon frees the inode once the kernel forgets it
    new = os.path.join(mnt.path, "new")
    write_file(new, b"new\n")
    assert os.stat(new).st_ino == old_ino, "the freed inode number was not reused"
    new_handle = handle_of(new)
    # Cached (the kernel compares the generations) and not (the daemon's lookup answers).
    assert_stale(mnt.path, old_handle)
    assert_opens(mnt.path, new_handle, b"new\n")
    drop_caches()
    assert_stale(mnt.path, old_handle)
    assert_opens(mnt.path, new_handle, b"new\n")
    # And after a remount: the generation is the persisted one.
    unmount(mnt)
    remount(mnt)
    drop_caches()  # the remount listed the root: READDIRPLUS cached its entries
    assert_stale(mnt.path, old_handle)
    assert_opens(mnt.path, new_handle, b"new\n")



@pytest.mark.rampart_only("restarts the rampart daemon")
@pytest.mark.parametrize("restart", ["clean remount", "kill -9"])
def test_an_inode_number_reused_after_a_restart_gets_a_new_generation(mnt, restart):
    """The next generation is recovered too: a number freed and reused after the restart does
    not hand out the old file's generation again."""
    old = os.path.join(mnt.path, "old")
    write_file(old, b"old\n")
    old_ino, old_handle = os.stat(old).st_ino, handle_of(old)
    if restart == "kill -9":
        r = mnt.cli("sync", mnt.path)
        assert r.returncode == 0, r.stderr
        crash(mnt)
    else:
        unmount(mnt)
    remount(mnt)
    drop_caches()  # the remount listed the root: READDIRPLUS cached its entries
    assert_opens(mnt.path, old_handle, b"old\n")
    os.unlink(old)
    drop_caches()
    new = os.path.join(mnt.path, "new")
    write_file(new, b"new\n")
    assert os.stat(new).st_ino == old_ino, "the freed inode number was not reused"
    assert_stale(mnt.path, old_handle)
    drop_caches()
    assert_stale(mnt.path, old_handle)
    assert_opens(mnt.path, handle_of(new), b"new\n")

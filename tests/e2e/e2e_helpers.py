"""Shared helpers for the rampart end-to-end tests.

Imported by conftest.py and by the test modules (pytest puts this directory on
sys.path because tests/e2e has no __init__.py).  Also runnable as a script:
`python3 e2e_helpers.py worker ...` is the process side of the concurrency test.
"""

import ctypes
import ctypes.util
import errno
import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

RAMPART_BIN = os.environ.get("RAMPART_BIN") or str(REPO / "target" / "release" / "rampart")
# Options added to every `rampart mount` of the suite, e.g. RAMPART_E2E_MOUNT_OPTS="--fuse-io-uring on"
# to run it over FUSE-over-io_uring (scripts/test does both).
EXTRA_MOUNT_OPTS = tuple(os.environ.get("RAMPART_E2E_MOUNT_OPTS", "").split())
TARGET = os.environ.get("RAMPART_E2E_TARGET", "rampart").strip().lower() or "rampart"
if TARGET not in ("rampart", "tmpfs"):
    raise RuntimeError(f"RAMPART_E2E_TARGET must be 'rampart' or 'tmpfs', not {TARGET!r}")
IS_TMPFS = TARGET == "tmpfs"

NOBODY_UID = 65534
NOBODY_GID = 65534
# The unprivileged user cannot enter /root, so it needs a system python.
NOBODY_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

MiB = 1024 * 1024

# --------------------------------------------------------------------------------------
# libc via ctypes
# --------------------------------------------------------------------------------------

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_COLLAPSE_RANGE = 0x08
FALLOC_FL_ZERO_RANGE = 0x10

libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
libc.renameat2.restype = ctypes.c_int
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.fallocate.restype = ctypes.c_int
for _fn in ("getxattr", "lgetxattr"):
    getattr(libc, _fn).argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    getattr(libc, _fn).restype = ctypes.c_ssize_t
libc.listxattr.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
libc.listxattr.restype = ctypes.c_ssize_t


class Dirent64(ctypes.Structure):
    _fields_ = [
        ("d_ino", ctypes.c_uint64),
        ("d_off", ctypes.c_int64),
        ("d_reclen", ctypes.c_ushort),
        ("d_type", ctypes.c_ubyte),
        ("d_name", ctypes.c_char * 256),
    ]


libc.opendir.argtypes = [ctypes.c_char_p]
libc.opendir.restype = ctypes.c_void_p
libc.readdir64.argtypes = [ctypes.c_void_p]
libc.readdir64.restype = ctypes.POINTER(Dirent64)
libc.closedir.argtypes = [ctypes.c_void_p]
libc.closedir.restype = ctypes.c_int

DT_UNKNOWN, DT_FIFO, DT_CHR, DT_DIR, DT_BLK, DT_REG, DT_LNK, DT_SOCK = 0, 1, 2, 4, 6, 8, 10, 12


def _b(path):
    return os.fsencode(path)


def _raise_errno(what, path=None):
    e = ctypes.get_errno()
    raise OSError(e, os.strerror(e), path if path is None else str(path)) from None


def renameat2(old, new, flags=0):
    if libc.renameat2(AT_FDCWD, _b(old), AT_FDCWD, _b(new), flags) != 0:
        _raise_errno("renameat2", old)


def fallocate(fd, mode, offset, length):
    if libc.fallocate(fd, mode, offset, length) != 0:
        _raise_errno("fallocate")


def getxattr_raw(path, name, size, follow_symlinks=True):
    """getxattr(2) with a caller-chosen buffer size; returns (ret, bytes)."""
    buf = ctypes.create_string_buffer(max(size, 1))
    fn = libc.getxattr if follow_symlinks else libc.lgetxattr
    ret = fn(_b(path), _b(name), buf if size else None, size)
    if ret < 0:
        _raise_errno("getxattr", path)
    return ret, buf.raw[: min(ret, size)] if size else b""


def listxattr_raw(path, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    ret = libc.listxattr(_b(path), buf if size else None, size)
    if ret < 0:
        _raise_errno("listxattr", path)
    return ret, buf.raw[: min(ret, size)] if size else b""


def raw_readdir(path):
    """Every entry of a directory as (name: bytes, d_type, d_ino), '.' and '..' excluded.

    Unlike os.scandir this exposes d_type itself (os.DirEntry silently falls back to
    lstat when d_type is DT_UNKNOWN, which would hide a file system returning it)."""
    d = libc.opendir(_b(path))
    if not d:
        _raise_errno("opendir", path)
    out = []
    try:
        while True:
            ctypes.set_errno(0)
            ent = libc.readdir64(d)
            if not ent:
                if ctypes.get_errno():
                    _raise_errno("readdir", path)
                break
            name = ent.contents.d_name
            if name in (b".", b".."):
                continue
            out.append((name, ent.contents.d_type, ent.contents.d_ino))
    finally:
        libc.closedir(d)
    return out


def expect_errno(expected, fn, *args, **kwargs):
    """Call fn, assert it fails with one of the expected errno values; returns the errno."""
    if isinstance(expected, int):
        expected = (expected,)
    try:
        fn(*args, **kwargs)
    except OSError as e:
        assert e.errno in expected, (
            f"{getattr(fn, '__name__', fn)}{args!r} failed with {errno.errorcode.get(e.errno, e.errno)}"
            f" ({e}), expected {'/'.join(errno.errorcode[x] for x in expected)}"
        )
        return e.errno
    raise AssertionError(
        f"{getattr(fn, '__name__', fn)}{args!r} succeeded, expected {'/'.join(errno.errorcode[x] for x in expected)}"
    )


def write_file(path, data, mode=0o644):
    if isinstance(data, str):
        data = data.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def wait_until(pred, timeout=30.0, interval=0.05):
    """Poll pred() until true or until a generous bound; returns the last value.
    Used only as a hang guard around things that must eventually happen."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


# --------------------------------------------------------------------------------------
# processes, mounts
# --------------------------------------------------------------------------------------


def run(args, timeout=300, check=False, env=None, cwd=None, input=None):
    """Run a command with stdout/stderr going to temporary files, not pipes: a daemon
    that inherits the pipes would otherwise make us wait forever for EOF."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.run(
            [str(a) for a in args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL if input is None else None,
            input=input,
            timeout=timeout,
            env=env,
            cwd=cwd,
        )
        out.seek(0)
        err.seek(0)
        res = subprocess.CompletedProcess(p.args, p.returncode, out.read().decode(errors="replace"),
                                          err.read().decode(errors="replace"))
    if check and res.returncode != 0:
        raise AssertionError(
            f"command {' '.join(map(str, args))} exited {res.returncode}\nstdout: {res.stdout}\nstderr: {res.stderr}"
        )
    return res


def nobody_cmd(args):
    return ["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_GID}", "--clear-groups", "--", *map(str, args)]


def run_as_nobody(args, **kw):
    """Run a command as the unprivileged user nobody (uid/gid 65534, no groups)."""
    return run(nobody_cmd(args), **kw)


_NOBODY_RUNNER = r"""
import json, os, sys
ns = {"os": os, "sys": sys, "args": sys.argv[2:], "result": None}
try:
    exec(sys.argv[1], ns)
    print(json.dumps({"errno": 0, "result": ns["result"], "uid": os.getuid()}))
except OSError as e:
    print(json.dumps({"errno": e.errno, "result": str(e), "uid": os.getuid()}))
"""


def nobody_py(code, *args):
    """Execute python `code` as nobody. `args` is available as a list; the code may
    assign `result` (JSON-serialisable). Returns (errno, result): errno 0 on success,
    else the errno of the OSError the code raised."""
    r = run_as_nobody([NOBODY_PYTHON, "-c", _NOBODY_RUNNER, code, *map(str, args)], timeout=120)
    assert r.returncode == 0, f"nobody runner failed: {r.stderr}"
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["uid"] == NOBODY_UID
    return d["errno"], d["result"]


def _unescape_mountinfo(s):
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_entries(path):
    """mountinfo lines whose mount point is exactly `path`."""
    path = os.path.realpath(path) if os.path.exists(path) else os.path.abspath(path)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if _unescape_mountinfo(fields[4]) == path:
                out.append(line.rstrip("\n"))
    return out


def in_mount_table(path):
    return bool(mount_entries(path))


def pid_alive(pid):
    """True if pid exists and is not a zombie (pid 1 here may not reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = data.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _holds_dev_fuse(pid):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/fuse":
                    return True
            except OSError:
                pass
    except OSError:
        pass
    return False


class Mount:
    """One file system under test: a rampart store mounted with `rampart mount`, or
    (RAMPART_E2E_TARGET=tmpfs) a plain tmpfs mount at the same place."""

    def __init__(self, base, name, opts=(), tmpfs_opts=None, env=None):
        self.base = Path(base)
        self.store = self.base / f"{name}-store"
        self.path = self.base / f"{name}-mnt"
        self.opts = [str(o) for o in opts]
        self.tmpfs_opts = tmpfs_opts
        self.env = env
        self.mounted = False
        self.pid = None
        self.pid_source = None

    # -- commands -----------------------------------------------------------------------
    def cli(self, *args, timeout=120):
        return run([RAMPART_BIN, *args], timeout=timeout, env=self.env)

    def mkfs(self):
        if IS_TMPFS:
            return
        r = self.cli("mkfs", self.store)
        assert r.returncode == 0, f"rampart mkfs {self.store} exited {r.returncode}: {r.stderr}"

    def mount(self, mkfs=True):
        self.path.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.path, 0o755)
        if IS_TMPFS:
            o = "mode=0755"
            if self.tmpfs_opts:
                o += "," + self.tmpfs_opts
            run(["mount", "-t", "tmpfs", "-o", o, "rampart-e2e", self.path], check=True, timeout=60)
        else:
            if mkfs and not self.store.exists():
                self.mkfs()
            r = self.cli("mount", self.store, self.path, *EXTRA_MOUNT_OPTS, *self.opts)
            assert r.returncode == 0, (
                f"rampart mount {self.store} {self.path} {' '.join(self.opts)} exited {r.returncode}: {r.stderr}"
            )
        self.mounted = True
        assert os.path.ismount(self.path), f"{self.path} is not a mount point right after mount returned"
        if not IS_TMPFS:
            self.pid = self.find_daemon_pid()
        return self

    def status(self):
        r = self.cli("status", self.path, "--json")
        assert r.returncode == 0, f"rampart status {self.path} --json exited {r.returncode}: {r.stderr}"
        return json.loads(r.stdout)

    def find_daemon_pid(self):
        """The daemon's pid: `status --json` key `pid` if present, else the process
        holding /dev/fuse whose command line names this mount point or store."""
        try:
            st = self.status()
        except Exception:
            st = {}
        if isinstance(st.get("pid"), int):
            self.pid_source = "status --json pid"
            return st["pid"]
        mp, store = str(self.path), str(self.store)
        candidates = []
        for ent in os.listdir("/proc"):
            if not ent.isdigit() or int(ent) == os.getpid():
                continue
            argv = _cmdline(ent)
            if not argv or not any("rampart" in a for a in argv[:2]):
                continue
            if any(a in (mp, store) or a.rstrip("/") in (mp, store) for a in argv) and _holds_dev_fuse(ent):
                candidates.append(int(ent))
        if len(candidates) == 1:
            self.pid_source = "/proc scan (status --json has no pid)"
            return candidates[0]
        self.pid_source = f"not found ({len(candidates)} candidates)"
        return None

    # -- state ----------------------------------------------------------------------------
    def alive(self):
        """Mounted and answering: a dead FUSE daemon makes stat fail with ENOTCONN."""
        try:
            if not os.path.ismount(self.path):
                return False
            os.stat(self.path)
            os.listdir(self.path)
            return True
        except OSError:
            return False

    def umount(self):
        """Unmount the normal way; returns the CompletedProcess."""
        if IS_TMPFS:
            r = run(["umount", self.path], timeout=60)
        else:
            r = self.cli("umount", self.path, timeout=120)
        if r.returncode == 0:
            self.mounted = False
        return r

    def force_cleanup(self):
        """Last resort after a failure: lazy unmount, then stop our own daemon by pid."""
        if in_mount_table(self.path):
            if not IS_TMPFS:
                run(["fusermount3", "-u", "-z", self.path], timeout=60)
            if in_mount_table(self.path):
                run(["umount", "-l", self.path], timeout=60)
        self.mounted = False
        if self.pid and pid_alive(self.pid) and any("rampart" in a for a in _cmdline(self.pid)[:2]):
            if not wait_until(lambda: not pid_alive(self.pid), timeout=10):
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


# --------------------------------------------------------------------------------------
# mounts driven by hand: kill -9, remount, unmount, fsck (test_persistence.py, the crash
# and category tests)
# --------------------------------------------------------------------------------------

# How long a killed daemon may take to exit and release the store's lock.
EXIT_WAIT = 30


def cli(*args, env=None, timeout=120):
    return run([RAMPART_BIN, *map(str, args)], env=env, timeout=timeout)


def fsck(m, *args):
    return cli("fsck", m.store, *args, env=m.env)


def fsck_json(m, *args):
    r = fsck(m, "--json", *args)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"fsck --json printed no JSON (exit {r.returncode}): {r.stdout!r} {r.stderr!r}")
    return r, report


def new_mount(test_base, env, name, cleanup, opts=()):
    m = Mount(test_base, name, opts=opts, env=env)
    cleanup.append(m)
    m.mount()
    assert m.pid, f"could not find the daemon's pid ({m.pid_source})"
    return m


def lock_released(store):
    """True if no process holds the store's lock (docs/FORMAT.md, Lock)."""
    try:
        f = open(store / "lock", "rb")
    except FileNotFoundError:
        return True
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def crash(m):
    """kill -9 the daemon, then detach the dead mount (fusermount3 -u -z)."""
    pid = m.pid
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not pid_alive(pid), EXIT_WAIT), f"daemon {pid} survived SIGKILL"
    # Its leader may be a zombie while its last threads still exit, holding the store's lock.
    assert wait_until(lambda: lock_released(m.store), EXIT_WAIT), f"daemon {pid} still holds the lock"
    run(["fusermount3", "-u", "-z", m.path], timeout=60)
    assert wait_until(lambda: not in_mount_table(m.path), EXIT_WAIT), "dead mount still in the mount table"
    m.mounted = False


def remount(m):
    m.mount(mkfs=False)
    assert m.alive()
    return m


def unmount(m):
    r = m.umount()
    assert r.returncode == 0, f"umount: {r.stderr}"
    assert not in_mount_table(m.path)


def assert_no_panic(m):
    log = m.store / "rampart.log"
    if log.is_file():
        text = log.read_text(errors="replace")
        assert "panicked" not in text, f"{log}: the daemon panicked: {text[-2000:]}"


def write_synced(path, data, mode=0o644):
    """Writes a new file and fsyncs it; returns once it is durable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def assert_fsck_clean_after_crash(m):
    """`rampart fsck` of a crashed store, run while it is unmounted, is clean (a torn tail is
    benign)."""
    r, report = fsck_json(m)
    assert r.returncode == 0, f"fsck after kill -9 exited {r.returncode}:\n{json.dumps(report, indent=1)}\n{r.stderr}"
    return report


def configured_mount(test_base, env, name, cleanup, config, opts=()):
    """A new store whose rampart.toml is `config`, mounted with `opts`."""
    m = Mount(test_base, name, opts=opts, env=env)
    cleanup.append(m)
    m.mkfs()
    (m.store / "rampart.toml").write_text(config)
    m.mount(mkfs=False)
    assert m.pid, f"could not find the daemon's pid ({m.pid_source})"
    return m


# --------------------------------------------------------------------------------------
# concurrency worker (used by test_concurrency.py, in threads and as a script)
# --------------------------------------------------------------------------------------

N_SHARED = 4


def concurrency_worker(root, wid, nops, seed):
    """Create, rename (in and across the shared directories), link, unlink, mkdir,
    move and rmdir directories. Every name a worker uses starts with w<wid>_ and is used
    once only, so workers never conflict on a name although they share directories; the
    final state of each worker is therefore exactly its bookkeeping. It also keeps
    replacing the contested name shared/target by rename.

    Returns {"files": {relpath: [group, content]}, "dirs": [relpath], "published": [..],
    "errors": [..]} where files with the same group are hard links of one inode."""
    rng = random.Random(seed)
    shared = [f"d{i}" for i in range(N_SHARED)]
    names = {}  # relpath -> group id
    groups = {}  # group id -> content
    dirs = []  # relpaths of own directories (always directly in a shared dir)
    published = []
    errors = []
    counter = 0

    def p(rel):
        return os.path.join(root, rel)

    def fresh(prefix):
        nonlocal counter
        counter += 1
        return f"w{wid}_{prefix}{counter}"

    def where():
        # a shared directory, or one of our own directories
        if dirs and rng.random() < 0.4:
            return rng.choice(dirs)
        return rng.choice(shared)

    for _ in range(nops):
        op = rng.random()
        try:
            if op < 0.30 or not names:
                rel = os.path.join(where(), fresh("f"))
                g = rel
                content = f"{wid}:{counter}:{rel}".encode()
                fd = os.open(p(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, content)
                os.close(fd)
                names[rel] = g
                groups[g] = content
            elif op < 0.50:
                old = rng.choice(sorted(names))
                new = os.path.join(where(), fresh("f"))
                os.rename(p(old), p(new))
                names[new] = names.pop(old)
            elif op < 0.62:
                old = rng.choice(sorted(names))
                os.unlink(p(old))
                g = names.pop(old)
                if g not in names.values():
                    del groups[g]
            elif op < 0.70:
                old = rng.choice(sorted(names))
                new = os.path.join(where(), fresh("l"))
                os.link(p(old), p(new))
                names[new] = names[old]
            elif op < 0.78:
                rel = os.path.join(rng.choice(shared), fresh("D"))
                os.mkdir(p(rel))
                dirs.append(rel)
            elif op < 0.86 and dirs:
                old = rng.choice(dirs)
                new = os.path.join(rng.choice(shared), fresh("D"))
                os.rename(p(old), p(new))
                dirs[dirs.index(old)] = new
                for k in [k for k in names if k.startswith(old + "/")]:
                    names[new + k[len(old):]] = names.pop(k)
            elif op < 0.92 and dirs:
                empty = [d for d in dirs if not any(k.startswith(d + "/") for k in names)]
                if empty:
                    d = rng.choice(empty)
                    os.rmdir(p(d))
                    dirs.remove(d)
            else:
                tmp = os.path.join("shared", fresh("tmp"))
                content = f"published {wid}:{counter}".encode()
                fd = os.open(p(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, content)
                os.close(fd)
                os.rename(p(tmp), p("shared/target"))
                published.append(content.decode())
        except OSError as e:
            errors.append(f"{e!r}")
            if len(errors) > 20:
                break
    return {
        "files": {k: [g, groups[g].decode()] for k, g in names.items()},
        "dirs": dirs,
        "published": published,
        "errors": errors,
    }


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "worker":
        res = concurrency_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        print(json.dumps(res))
    else:
        print("usage: e2e_helpers.py worker ROOT WID NOPS SEED", file=sys.stderr)
        sys.exit(2)

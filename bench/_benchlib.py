"""Shared helpers for the rampart benchmark scripts in bench/ (standard library only).

Not a benchmark by itself. Provides:
  * Runner      - runs commands, records each one (for the "exact commands" section)
  * Teardown    - a LIFO stack of undo actions, unwound on success, failure, Ctrl-C or SIGTERM
  * signal handling that turns SIGTERM/SIGHUP into KeyboardInterrupt and shields teardown
  * machine information, /proc/meminfo, /proc/slabinfo, /proc/PID/smaps_rollup readers
  * rampart helpers (locate the binary, mkfs, mount, status --json, umount with fallbacks)
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RAMPART_BIN = REPO / "target" / "release" / "rampart"


def log(msg: str) -> None:
    """Progress messages go to stderr so stdout stays a clean Markdown report."""
    print(f"[{datetime.datetime.now().strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fmt_cmd(cmd) -> str:
    if isinstance(cmd, str):
        return cmd
    return shlex.join(str(c) for c in cmd)


class CommandError(RuntimeError):
    pass


class Runner:
    """Runs commands in their own session (so a terminal Ctrl-C reaches only this script,
    which then tears down in order) and records them."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def note(self, text: str) -> None:
        self.commands.append(text)

    def run(self, cmd, *, check=True, timeout=120, record=True, cwd=None,
            env=None) -> subprocess.CompletedProcess:
        cmd = [str(c) for c in cmd]
        if record:
            self.commands.append(fmt_cmd(cmd))
        try:
            cp = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, timeout=timeout,
                                cwd=cwd, env=env, start_new_session=True)
        except subprocess.TimeoutExpired as e:
            raise CommandError(f"timed out after {timeout}s: {fmt_cmd(cmd)}") from e
        except FileNotFoundError as e:
            raise CommandError(f"not found: {cmd[0]}") from e
        if check and cp.returncode != 0:
            raise CommandError(
                f"exit {cp.returncode}: {fmt_cmd(cmd)}\n  stdout: {cp.stdout.strip()}\n"
                f"  stderr: {cp.stderr.strip()}")
        return cp

    def drop_caches(self, record=True) -> None:
        """sync; echo 3 > /proc/sys/vm/drop_caches"""
        if record:
            self.commands.append("sync; echo 3 > /proc/sys/vm/drop_caches")
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")


# ---------------------------------------------------------------------------
# teardown and signals

class Teardown:
    """LIFO stack of (description, function). unwind(mark) runs everything pushed since mark.
    Every action runs even if an earlier one failed; signals are deferred while unwinding."""

    def __init__(self) -> None:
        self.stack: list[tuple[str, object]] = []
        self.errors: list[str] = []

    def push(self, desc: str, fn) -> None:
        self.stack.append((desc, fn))

    def mark(self) -> int:
        return len(self.stack)

    def unwind(self, mark: int = 0) -> list[str]:
        errors = []
        with deferred_signals():
            while len(self.stack) > mark:
                desc, fn = self.stack.pop()
                try:
                    fn()
                except Exception as e:  # keep going: every resource gets its chance
                    msg = f"teardown step failed ({desc}): {e}"
                    log(msg)
                    errors.append(msg)
        self.errors.extend(errors)
        return errors


_pending_signal: list[int] = []
_deferring = [0]


def _handler(signum, frame):
    if _deferring[0]:
        _pending_signal.append(signum)
        log(f"got {signal.Signals(signum).name} during teardown; finishing teardown first")
        return
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


def install_signal_handlers() -> None:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _handler)


class deferred_signals:
    def __enter__(self):
        _deferring[0] += 1

    def __exit__(self, *exc):
        _deferring[0] -= 1
        if _deferring[0] == 0 and _pending_signal and exc[0] is None:
            s = _pending_signal.pop()
            _pending_signal.clear()
            raise KeyboardInterrupt(f"received {signal.Signals(s).name}")
        return False


# ---------------------------------------------------------------------------
# /proc readers

def parse_kv_kb(path: str) -> dict[str, int]:
    """Parse 'Key:   123 kB' files (meminfo, smaps_rollup, status) into bytes."""
    out: dict[str, int] = {}
    with open(path) as f:
        for line in f:
            if ":" not in line:
                continue
            k, v = line.split(":", 1)
            parts = v.split()
            if not parts:
                continue
            try:
                n = int(parts[0])
            except ValueError:
                continue
            if len(parts) > 1 and parts[1] == "kB":
                n *= 1024
            out[k.strip()] = n
    return out


def meminfo() -> dict[str, int]:
    return parse_kv_kb("/proc/meminfo")


def slabinfo() -> dict[str, dict[str, int]]:
    """name -> {objs, active_objs, objsize, bytes} where bytes = num_slabs*pagesperslab*page."""
    page = os.sysconf("SC_PAGE_SIZE")
    out = {}
    try:
        with open("/proc/slabinfo") as f:
            lines = f.readlines()[2:]
    except OSError:
        return out
    for line in lines:
        p = line.split()
        try:
            name = p[0]
            active, num, objsize, _, pagesper = map(int, p[1:6])
            num_slabs = int(p[p.index("slabdata") + 2])
        except (ValueError, IndexError):
            continue
        out[name] = {"active_objs": active, "objs": num, "objsize": objsize,
                     "bytes": num_slabs * pagesper * page}
    return out


def proc_memory(pid: int) -> dict[str, int]:
    """smaps_rollup (Rss, Pss, Private_Dirty, Anonymous, ...) + status (VmRSS, RssAnon, VmHWM...)."""
    d = {}
    r = parse_kv_kb(f"/proc/{pid}/smaps_rollup")
    for k in ("Rss", "Pss", "Pss_Anon", "Private_Clean", "Private_Dirty", "Shared_Clean",
              "Shared_Dirty", "Anonymous", "Swap"):
        if k in r:
            d[k] = r[k]
    s = parse_kv_kb(f"/proc/{pid}/status")
    for k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM", "VmData", "Threads"):
        if k in s:
            d[k] = s[k]
    return d


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def mount_fstype(path) -> str | None:
    """fstype if `path` is a mount point (per /proc/self/mountinfo), else None."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mp = left.split()[4].encode().decode("unicode_escape")
            if mp == path:
                found = right.split()[0]
    return found


def mount_options(path) -> str:
    path = os.path.realpath(path)
    opts = ""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            l = left.split()
            if l[4].encode().decode("unicode_escape") == path:
                r = right.split()
                opts = f"type {r[0]}, source {r[1]}, options {l[5]}" + (
                    f", superblock options {r[2]}" if len(r) > 2 else "")
    return opts


def rmdir_if_unmounted(path) -> None:
    """rmdir a mount point, refusing (rather than reaching into) a still-mounted one."""
    if mount_fstype(path):
        raise CommandError(f"not removing {path}: still mounted")
    os.rmdir(path)


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return sum(v[:8]), idle


def cpu_busy(interval: float = 1.0) -> float:
    """Fraction of all CPUs busy over `interval` seconds (machine-wide)."""
    t0, i0 = _cpu_times()
    time.sleep(interval)
    t1, i1 = _cpu_times()
    return 0.0 if t1 == t0 else 1.0 - (i1 - i0) / (t1 - t0)


def wait_idle(max_wait: float, threshold: float = 0.10) -> float:
    """Wait (up to max_wait seconds) until the machine is less than `threshold` busy;
    returns the last busy fraction seen. Other people's builds share these cores."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy(1.0)
    warned = False
    while busy > threshold and time.monotonic() < deadline:
        if not warned:
            log(f"machine is {busy:.0%} busy (others' work); waiting up to "
                f"{max_wait:.0f}s for it to go idle")
            warned = True
        busy = cpu_busy(2.0)
    return busy


def userspace_cpu_table() -> dict[tuple[int, str], int]:
    """(pid, starttime) -> utime+stime ticks of every user-space process (kernel threads are
    left out: their work - writeback, loop I/O - belongs to the benchmark). Children's
    cutime is left out too: a parent reaping a long-lived child (init reaping a previous
    run's daemon, cargo reaping rustc) would count the child's whole life."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            if int(rest[6]) & 0x00200000:  # PF_KTHREAD
                continue
            out[(int(d), rest[19])] = int(rest[11]) + int(rest[12])
        except (OSError, IndexError, ValueError):
            continue
    return out


class OthersCpu:
    """CPU used by user-space processes other than `exclude`, from repeated snapshots
    (sample() every fraction of a second, so short-lived processes are mostly caught)."""

    def __init__(self, exclude: set[int]):
        self.exclude = exclude
        self.base = userspace_cpu_table()
        self.last = dict(self.base)

    def sample(self) -> None:
        self.last.update(userspace_cpu_table())

    def seconds(self) -> float:
        ticks = sum(max(0, t - self.base.get(k, 0)) for k, t in self.last.items()
                    if k[0] not in self.exclude)
        return ticks / os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---------------------------------------------------------------------------
# machine information

def _first_line(cmd) -> str:
    try:
        cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=10, stdin=subprocess.DEVNULL)
        return (cp.stdout.strip().splitlines() or [""])[0]
    except Exception:
        return "unavailable"


def machine_info() -> dict[str, str]:
    info: dict[str, str] = {}
    u = os.uname()
    info["kernel"] = f"{u.sysname} {u.release} {u.version} {u.machine}"
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cpu model"] = model
    info["cores (online / usable by this process)"] = (
        f"{os.cpu_count()} / {len(os.sched_getaffinity(0))}")
    mi = meminfo()
    info["RAM (MemTotal)"] = f"{mi.get('MemTotal', 0) / 2**30:.1f} GiB"
    virt = _first_line(["systemd-detect-virt"]) if shutil.which("systemd-detect-virt") else ""
    if virt:
        info["virtualization (systemd-detect-virt)"] = virt
    info["python"] = platform.python_version()
    return info


def tool_versions(with_rampart: str | None, snapshot_of: str | None = None) -> dict[str, str]:
    v = {}
    if shutil.which("dpkg-query"):
        v["postmark package"] = _first_line(["dpkg-query", "-W", "-f", "${Version}", "postmark"])
    v["mkfs.ext4"] = _first_line(["mkfs.ext4", "-V"])
    v["fusermount3"] = _first_line(["fusermount3", "-V"])
    if with_rampart:
        v["rampart binary"] = with_rampart + (
            f" (a copy of {snapshot_of}, taken at the start)" if snapshot_of else "")
        v["rampart --version"] = _first_line([with_rampart, "--version"])
        try:
            st = os.stat(with_rampart)
            h = hashlib.sha256(Path(with_rampart).read_bytes()).hexdigest()[:16]
            v["rampart binary mtime / sha256[:16]"] = (
                f"{datetime.datetime.fromtimestamp(st.st_mtime).isoformat(timespec='seconds')}"
                f" / {h}")
        except OSError:
            pass
    head = _first_line(["git", "-C", str(REPO), "rev-parse", "--short", "--verify", "-q",
                        "HEAD"]) or "no commit yet"
    try:
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               timeout=20).stdout.strip().splitlines()
        head += f" ({len(dirty)} uncommitted paths in the work tree)" if dirty else " (clean)"
    except Exception:
        pass
    v["repo HEAD"] = head
    return v


def md_kv_table(d: dict[str, str], k="item", v="value") -> list[str]:
    lines = [f"| {k} | {v} |", "|---|---|"]
    for a, b in d.items():
        lines.append(f"| {a} | {str(b).replace('|', '/')} |")
    return lines


# ---------------------------------------------------------------------------
# rampart

def find_rampart(arg: str | None) -> tuple[str | None, str]:
    """(path or None, where we looked)."""
    cand = arg or os.environ.get("RAMPART_BIN") or str(DEFAULT_RAMPART_BIN)
    src = "--rampart-bin" if arg else ("$RAMPART_BIN" if os.environ.get("RAMPART_BIN")
                                       else "default path")
    if os.path.isfile(cand) and os.access(cand, os.X_OK):
        return cand, f"{cand} ({src})"
    return None, f"{cand} ({src})"


def snapshot_binary(src: str, dest_dir: str) -> str:
    """Copy the rampart binary to dest_dir and return the copy's path, so that a rebuild of
    target/release/rampart during the benchmark (others are compiling) cannot mix builds."""
    dst = os.path.join(dest_dir, "rampart")
    shutil.copy2(src, dst)
    os.chmod(dst, 0o755)
    return dst


def rampart_status(runner: Runner, rbin: str, mnt, record=False) -> dict:
    cp = runner.run([rbin, "status", mnt, "--json"], timeout=60, record=record)
    return json.loads(cp.stdout)


def find_daemon_pid(rbin: str, mnt) -> int | None:
    """Fallback when `status --json` has no `pid`: a process whose argv names rampart,
    `mount` and the mount point."""
    mnt = os.path.realpath(mnt)
    name = os.path.basename(rbin)
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in argv if a]
        if argv and os.path.basename(argv[0]) == name and "mount" in argv and any(
                os.path.realpath(a) == mnt for a in argv[1:] if a.startswith("/")):
            return int(d)
    return None


class RampartMount:
    """mkfs + mount of a fresh store; pushes its undo steps onto a Teardown."""

    def __init__(self, runner: Runner, td: Teardown, rbin: str, store: str, mnt: str,
                 opts: list[str]):
        self.runner, self.td, self.rbin = runner, td, rbin
        self.store, self.mnt, self.opts = store, mnt, opts
        self.pid: int | None = None
        self.pid_source = ""

    def setup(self) -> None:
        r = self.runner
        os.makedirs(os.path.dirname(self.store), exist_ok=True)
        self.td.push(f"rm -rf {self.store}", lambda: shutil.rmtree(self.store, ignore_errors=True))
        r.run([self.rbin, "mkfs", self.store], timeout=60)
        self.td.push(f"umount {self.mnt}", self.teardown_mount)
        r.run([self.rbin, "mount", self.store, self.mnt, *self.opts], timeout=120)
        fstype = mount_fstype(self.mnt)
        if not fstype or not fstype.startswith("fuse"):
            raise CommandError(f"`rampart mount` returned but {self.mnt} is not a FUSE mount "
                               f"(fstype {fstype})")
        st = rampart_status(r, self.rbin, self.mnt, record=True)
        if isinstance(st.get("pid"), int):
            self.pid, self.pid_source = st["pid"], "`rampart status --json` key pid"
        else:
            self.pid = find_daemon_pid(self.rbin, self.mnt)
            self.pid_source = ("/proc scan (status --json has no `pid` key)" if self.pid
                               else "not found")

    def teardown_mount(self) -> None:
        r = self.runner
        if mount_fstype(self.mnt):
            cp = r.run([self.rbin, "umount", self.mnt], check=False, timeout=120)
            if cp.returncode != 0 or mount_fstype(self.mnt):
                log(f"rampart umount failed (exit {cp.returncode}: {cp.stderr.strip()}); "
                    f"trying fusermount3 -u, then umount -l")
                r.run(["fusermount3", "-u", self.mnt], check=False, timeout=60)
                if mount_fstype(self.mnt):
                    r.run(["umount", "-l", self.mnt], check=False, timeout=60)
        if self.pid:  # the daemon we started: wait for it, then end it by pid
            deadline = time.monotonic() + 30
            while pid_alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if pid_alive(self.pid):
                    log(f"rampart daemon {self.pid} still alive after unmount; sending {sig.name}")
                    try:
                        os.kill(self.pid, sig)
                    except ProcessLookupError:
                        break
                    time.sleep(2)
        if mount_fstype(self.mnt):
            raise CommandError(f"{self.mnt} is still mounted")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return str(n)

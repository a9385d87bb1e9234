"""Status for machines and people (docs/CLI.md): `status --json` against its schema
(docs/status-schema.json), the Prometheus metrics endpoint (a Unix socket or a loopback port)
against a known workload, and `status --watch` under a terminal."""

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import jsonschema
import pytest

from e2e_helpers import EXTRA_MOUNT_OPTS, REPO, RAMPART_BIN, run, wait_until, write_file

pytestmark = pytest.mark.rampart_only("tests the rampart daemon's status and metrics")

SCHEMA = json.loads((REPO / "docs" / "status-schema.json").read_text())


# ---- status --json -------------------------------------------------------------------------

def test_status_json_matches_its_schema(mnt):
    write_file(os.path.join(mnt.path, "f"), b"x" * 5000)
    fd = os.open(os.path.join(mnt.path, "f"), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    st = mnt.status()
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(st, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert st["schema_version"] == 1
    assert st["schema_minor_version"] == 6
    assert "SOON" in st["categories"], st["categories"]
    # The latencies are there for what the workload did, and add up.
    assert st["fuse_latency"]["create"]["count"] >= 1, st["fuse_latency"]
    assert st["fuse_latency"]["fsync"]["sum_seconds"] > 0, st["fuse_latency"]
    p = st["persistence"]
    assert p["commit_latency"]["count"] >= 1 and p["commit_latency"]["sum_seconds"] > 0, p
    # The validator is not vacuous: what the schema forbids is refused.
    for broken in ({k: v for k, v in st.items() if k != "schema_version"},
                   dict(st, schema_version=2),
                   dict(st, files=-1),
                   dict(st, fuse_requests={"nonsense": 1}),
                   dict(st, undocumented=1)):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA, cls=jsonschema.Draft202012Validator)


def store_written(m):
    """persistence.store_written_bytes and journal_bytes once nothing is pending."""
    assert wait_until(lambda: m.status()["persistence"]["ops_pending"] == 0, timeout=30)
    p = m.status()["persistence"]
    return p["store_written_bytes"], p["journal_bytes"]


def test_store_written_bytes_counts_what_the_daemon_writes(mnt):
    """The daemon counts the bytes it writes to store files itself (issue 15): /proc/PID/io
    write_bytes counted ~30x too much for fdatasync'd small writes."""
    p = mnt.path
    os.mkdir(os.path.join(p, "tmp"))
    os.setxattr(os.path.join(p, "tmp"), "user.rampart.category", b"TEMPORARY")
    os.mkdir(os.path.join(p, "d"))
    dfd = os.open(os.path.join(p, "d"), os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    before, _ = store_written(mnt)
    assert before > 0, "the mount wrote its journal"

    # TEMPORARY files never reach the store, fsync'd or not: nothing is written.
    n = 50
    block = os.urandom(4096)
    for i in range(n):
        fd = os.open(os.path.join(p, "tmp", f"t{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, block)
        os.fsync(fd)
        os.close(fd)
    after_temporary, journal_before = store_written(mnt)
    assert after_temporary == before

    # N durable 4 KiB writes (create, write, fsync, close): at least their data, and at most
    # the journal's growth twice (each batch, and the zeros written ahead of it once: decision
    # 0021) plus one extension of those zeros, the journal's growth being the data and at
    # most 512 bytes of records and framing per file.
    n = 200
    for i in range(n):
        fd = os.open(os.path.join(p, "d", f"f{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, block)
        os.fsync(fd)
        os.close(fd)
    after, journal_after = store_written(mnt)
    grown = journal_after - journal_before
    written = after - after_temporary
    assert n * 4096 <= grown <= n * (4096 + 512), (grown, n)
    reserve_bytes = 2 << 20  # limits::JOURNAL_RESERVE_BYTES
    assert n * 4096 <= written <= 2 * grown + reserve_bytes + 4096, (written, grown)


# ---- the text form ---------------------------------------------------------------------

def kernel_line(m):
    r = m.cli("status", m.path)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("kernel: ")]
    assert len(lines) == 1, r.stdout
    return lines[0]


def kernel_line_of(st):
    """The kernel line docs/CLI.md describes, from `status --json`."""
    said = lambda figure, yes, yes_words, no_words: yes_words if figure == yes else no_words
    return ("kernel: "
            f"writeback cache {said(st['writeback_cache'], 'on', 'on', 'off')}, "
            f"OPEN {said(st['kernel_open'], 'answered', 'answered', 'not sent')}, "
            f"FLUSH {said(st['kernel_flush'], 'answered', 'answered', 'not sent')}, "
            f"passthrough {said(st['data_path'], 'passthrough', 'on', 'off')}")


def test_status_text_says_what_the_kernel_does(mount_factory):
    default = mount_factory()
    line = kernel_line(default)
    assert line == kernel_line_of(default.status())
    if not EXTRA_MOUNT_OPTS:
        # The defaults (docs/CLI.md): the writeback cache, and a store that needs neither OPEN
        # nor FLUSH (no SAFE, DISPOSABLE or EDITED category) has the kernel send neither.
        assert line == "kernel: writeback cache on, OPEN not sent, FLUSH not sent, passthrough off"
    off = mount_factory("--writeback-cache", "off")
    line = kernel_line(off)
    assert line == kernel_line_of(off.status())
    assert line.startswith("kernel: writeback cache off, "), line


# ---- the metrics endpoint ----------------------------------------------------------------

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def http_get_unix(path, target="/metrics", method="GET"):
    """(status, headers, body) of one HTTP/1.1 request over a Unix socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(f"{method} {target} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:])
    if method != "HEAD":
        assert int(headers["Content-Length"]) == len(body), "Content-Length must match the body"
    return status, headers, body.decode()


def parse_metrics(text):
    """{(name, labels): value} of a Prometheus text exposition, checking its shape: every
    sample belongs to a family announced by HELP and TYPE lines."""
    families, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            families[name] = kind
            continue
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in families or (base in families and families[base] == "histogram"), \
            f"{name} has no TYPE line"
        samples[(name, labels)] = float(value)
    return samples


def scrape(sock):
    status, headers, body = http_get_unix(sock)
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
    return parse_metrics(body)


def requests(m, op):
    return m[("rampart_fuse_requests_total", f'{{op="{op}"}}')]


def latency_count(m, op):
    return m.get(("rampart_fuse_request_duration_seconds_count", f'{{op="{op}"}}'), 0)


def test_metrics_over_a_unix_socket_count_a_known_workload(mount_factory, test_base):
    sock = os.path.join(test_base, "metrics.sock")
    mnt = mount_factory("--metrics-socket", sock)
    assert os.stat(sock).st_mode & 0o777 == 0o600, "the socket is private to the mount's owner"
    before = scrape(sock)
    assert [v for (name, _), v in before.items() if name == "rampart_info"] == [1]
    n = 40
    d = os.path.join(mnt.path, "d")
    os.mkdir(d)
    for i in range(n):
        write_file(os.path.join(d, f"f{i}"), b"y" * 100)
    after = scrape(sock)
    assert requests(after, "create") - requests(before, "create") >= n
    assert requests(after, "mkdir") - requests(before, "mkdir") >= 1
    # A latency is recorded just after the answer: wait for the last one.
    assert wait_until(lambda: latency_count(scrape(sock), "create") - latency_count(before, "create") >= n,
                      timeout=10), "every create's latency is recorded"
    m = scrape(sock)
    buckets = sorted((float(re.search(r'le="([^"]+)"', labels).group(1).replace("+Inf", "inf")), v)
                     for (name, labels), v in m.items()
                     if name == "rampart_fuse_request_duration_seconds_bucket" and 'op="create"' in labels)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets), "buckets are cumulative"
    assert buckets[-1] == (float("inf"), latency_count(m, "create"))

    # An fsync makes a commit, whose latency is recorded before the fsync returns.
    commits = m[("rampart_persist_commits_total", "")]
    commit_count = m[("rampart_persist_commit_duration_seconds_count", "")]
    fd = os.open(os.path.join(d, "f0"), os.O_WRONLY)
    try:
        os.write(fd, b"z")
        os.fsync(fd)
    finally:
        os.close(fd)
    m = scrape(sock)
    assert m[("rampart_persist_commits_total", "")] > commits
    assert m[("rampart_persist_commit_duration_seconds_count", "")] > commit_count
    assert m[("rampart_persist_commit_duration_seconds_sum", "")] > 0
    assert requests(m, "fsync") >= 1
    assert m[("rampart_persist_journal_lag_ops", "")] >= 0
    assert m[("rampart_inodes", '{kind="file"}')] == n
    assert m[("rampart_data_bytes", '{tier="memory"}')] >= n * 100
    assert m[("rampart_persist_stopped", "")] == 0
    # The daemon's own count of what it wrote to the store: the fsync committed a batch.
    assert m[("rampart_store_written_bytes_total", "")] > 0
    assert m[("rampart_host_sync_failures_total", "")] == 0, "a healthy disk failed no host file sync"
    assert not [k for k in m if k[0] == "rampart_mirror_ok"], "no mirror, no series"
    # Other paths and methods are refused; HEAD has no body.
    assert http_get_unix(sock, "/")[0] == 404
    assert http_get_unix(sock, method="POST")[0] == 405
    status, headers, body = http_get_unix(sock, method="HEAD")
    assert status == 200 and body == "" and int(headers["Content-Length"]) > 0

    r = mnt.umount()
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(sock), "the unmount removes the metrics socket"


def test_errors_are_counted_by_operation_and_errno(mount_factory, test_base):
    sock = os.path.join(test_base, "metrics-errors.sock")
    mnt = mount_factory("--metrics-socket", sock)

    def errors(m, op, name):
        return m.get(("rampart_fuse_errors_total", f'{{op="{op}",errno="{name}"}}'), 0)

    before = scrape(sock)
    d = os.path.join(mnt.path, "full")
    os.mkdir(d)
    write_file(os.path.join(d, "f"), b"x")
    k = 3
    for _ in range(k):
        # Errors only the daemon can know (the kernel answers a mkdir over a cached name itself).
        with pytest.raises(OSError) as e:
            os.removexattr(os.path.join(d, "f"), "user.absent")
        assert e.value.errno == 61  # ENODATA
        with pytest.raises(OSError) as e:
            os.rmdir(d)
        assert e.value.errno == 39  # ENOTEMPTY
    after = scrape(sock)
    assert errors(after, "removexattr", "ENODATA") - errors(before, "removexattr", "ENODATA") == k
    assert errors(after, "rmdir", "ENOTEMPTY") - errors(before, "rmdir", "ENOTEMPTY") == k
    # The same figures in status --json, and a line for people.
    st = mnt.status()
    assert st["fuse_errors"]["rmdir"]["ENOTEMPTY"] == errors(after, "rmdir", "ENOTEMPTY")
    jsonschema.validate(st, SCHEMA, cls=jsonschema.Draft202012Validator)
    text = run([str(RAMPART_BIN), "status", mnt.path])
    assert "ENOTEMPTY" in text.stdout, text.stdout


def test_metrics_endpoint_bounds_what_it_reads(mount_factory, test_base):
    sock = os.path.join(test_base, "metrics.sock")
    mount_factory("--metrics-socket", sock)
    # A request head past the bound is refused; a client that sends nothing is let go.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(sock)
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
        except BrokenPipeError:
            pass
        assert s.recv(100).startswith(b"HTTP/1.1 431")
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.connect(sock)
    try:
        started = time.monotonic()
        # Served once the idle client's time is up.
        assert http_get_unix(sock)[0] == 200
        assert time.monotonic() - started < 8
    finally:
        idle.close()


def free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_on_a_loopback_port(mount_factory):
    port = free_loopback_port()
    mnt = mount_factory("--metrics-listen", f"127.0.0.1:{port}")
    os.mkdir(os.path.join(mnt.path, "x"))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        m = parse_metrics(r.read().decode())
    assert requests(m, "mkdir") >= 1
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    assert e.value.code == 404


def test_metrics_refuse_other_addresses(test_base, rampart_env):
    store, mp = os.path.join(test_base, "store"), os.path.join(test_base, "mnt")
    os.mkdir(mp)
    assert run([RAMPART_BIN, "mkfs", store], env=rampart_env).returncode == 0
    for addr in ("0.0.0.0:9750", "192.0.2.1:9750", "[::]:9750"):
        r = run([RAMPART_BIN, "mount", store, mp, "--metrics-listen", addr], env=rampart_env)
        assert r.returncode == 2, (addr, r.stderr)
        assert "loopback" in r.stderr, r.stderr
    assert not os.path.ismount(mp)


# ---- status --watch ----------------------------------------------------------------------

CLEAR = b"\x1b[H\x1b[2J"


def test_watch_redraws_under_a_terminal_and_ends_on_sigint(mnt):
    os.mkdir(os.path.join(mnt.path, "w"))
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execv(RAMPART_BIN, [RAMPART_BIN, "status", "--watch", "--interval", "200ms", str(mnt.path)])
        finally:
            os._exit(127)
    out = b""
    try:
        # The view writes each frame at once, but the pty hands it to us in pieces as it
        # pleases: a frame is known to be whole only once the next one's clear has come.
        # So wait for four clears, and check the three whole frames between them.
        deadline = time.monotonic() + 20
        while out.count(CLEAR) < 4 and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1)
            if ready:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    break
        assert out.count(CLEAR) >= 4, f"three whole frames expected: {out[-2000:]!r}"
        assert out.startswith(CLEAR), f"the first frame clears the screen: {out[:200]!r}"
        frames = [f.decode(errors="replace") for f in out.split(CLEAR)[1:-1]]
        for frame in frames:
            assert str(mnt.path) in frame and "per second" in frame, frame
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 10
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            try:
                select.select([fd], [], [], 0.1) and os.read(fd, 65536)
            except OSError:
                pass
        assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
            f"--watch ends cleanly on SIGINT (wait status {status})"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def test_watch_ends_when_the_mount_goes_away(mnt):
    p = subprocess.Popen([RAMPART_BIN, "status", "--watch", "--interval", "100ms", str(mnt.path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=mnt.env)
    try:
        # Into a pipe: frames one after another, without terminal codes.
        first = p.stdout.readline()
        assert first.startswith(b"rampart ") and CLEAR not in first, first
        r = mnt.umount()
        assert r.returncode == 0, r.stderr
        _, err = p.communicate(timeout=20)
        assert p.returncode == 0, err
        assert b"no longer mounted" in err, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_watch_refuses_what_is_not_a_mount(test_base):
    r = run([RAMPART_BIN, "status", "--watch", test_base])
    assert r.returncode == 1 and "not a rampart mount" in r.stderr, r.stderr
    r = run([RAMPART_BIN, "status", "--watch", "--json", test_base])
    assert r.returncode == 2, "--watch and --json do not go together"

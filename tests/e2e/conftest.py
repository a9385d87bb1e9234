"""Fixtures of the rampart end-to-end suite. See README.md."""

import itertools
import os
import shutil
import tempfile

import pytest

from e2e_helpers import IS_TMPFS, RAMPART_BIN, Mount, in_mount_table

_counter = itertools.count(1)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "rampart_only(reason): test of rampart itself (daemon, store, CLI); skipped on tmpfs"
    )


def pytest_report_header(config):
    if IS_TMPFS:
        return "rampart e2e target: tmpfs (validating the tests against the kernel's own file system)"
    return f"rampart e2e target: rampart ({RAMPART_BIN})"


def pytest_collection_modifyitems(config, items):
    for item in items:
        m = item.get_closest_marker("rampart_only")
        if m and IS_TMPFS:
            reason = m.args[0] if m.args else "rampart-specific"
            item.add_marker(pytest.mark.skip(reason=f"tmpfs target: {reason}"))


@pytest.fixture(scope="session", autouse=True)
def _session_setup():
    os.umask(0o022)
    if not IS_TMPFS and not os.access(RAMPART_BIN, os.X_OK):
        pytest.exit(
            f"rampart binary not found at {RAMPART_BIN} (set RAMPART_BIN, or RAMPART_E2E_TARGET=tmpfs)",
            returncode=4,
        )
    yield


@pytest.fixture(scope="session")
def e2e_base():
    """A 0755 directory under /tmp: the pytest tmp_path is 0700, which would keep the
    unprivileged user out of the mount points."""
    d = tempfile.mkdtemp(prefix="rampart-e2e-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    if os.environ.get("RAMPART_E2E_KEEP"):
        print(f"\nrampart e2e: kept {d}")
        return
    # never rm -rf through something still mounted
    with open("/proc/self/mountinfo") as f:
        busy = [line for line in f if f" {d}/" in line]
    if not busy:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def test_base(e2e_base):
    d = os.path.join(e2e_base, f"t{next(_counter):04d}")
    os.mkdir(d, 0o755)
    os.chmod(d, 0o755)
    yield d
    if os.environ.get("RAMPART_E2E_KEEP"):
        return
    if not any(in_mount_table(os.path.join(d, e)) for e in os.listdir(d)):
        shutil.rmtree(d, ignore_errors=True)


def _finish(mounts):
    """Teardown of every mount a test made: it must still be alive (the daemon did
    not die during the test), and the normal unmount must succeed."""
    problems = []
    for m in mounts:
        if not m.mounted:
            continue
        alive = m.alive()
        if not alive:
            problems.append(f"{m.path}: file system not alive at teardown (daemon died or mount lost)")
            m.force_cleanup()
            continue
        try:
            r = m.umount()
        except Exception as e:  # timeout etc.
            problems.append(f"{m.path}: unmount raised {e!r}")
            m.force_cleanup()
            continue
        if r.returncode != 0:
            problems.append(f"{m.path}: unmount exited {r.returncode}: {r.stderr.strip()}")
            m.force_cleanup()
        elif in_mount_table(m.path):
            problems.append(f"{m.path}: still in the mount table after a successful unmount")
            m.force_cleanup()
    for m in mounts:
        # the daemon writes STORE/rampart.log: a panic in a worker thread that did not
        # bring the daemon down is still a bug
        log = m.store / "rampart.log"
        if not IS_TMPFS and log.is_file():
            text = log.read_text(errors="replace")
            if "panicked" in text:
                i = text.index("panicked")
                problems.append(f"{log}: the daemon panicked: {text[max(0, i - 200):i + 300]!r}")
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture
def mount_factory(test_base):
    """mount_factory(*rampart_options, tmpfs_opts=None, name=...) -> mounted Mount.
    tmpfs_opts is what the tmpfs target uses instead (e.g. "size=64M")."""
    mounts = []

    def make(*opts, tmpfs_opts=None, name=None):
        m = Mount(test_base, name or f"m{len(mounts)}", opts=opts, tmpfs_opts=tmpfs_opts,
                  env=dict(os.environ, RAMPART_HOME=os.path.join(test_base, "home")))
        mounts.append(m)
        try:
            m.mount()
        except BaseException:
            m.force_cleanup()
            raise
        return m

    yield make
    try:
        _finish(mounts)
    finally:
        for m in mounts:
            if m.mounted or in_mount_table(m.path):
                m.force_cleanup()


@pytest.fixture
def mnt(mount_factory):
    """A fresh file system per test; yields the Mount (use mnt.path)."""
    return mount_factory()


@pytest.fixture
def d(mnt):
    """A fresh directory (str) inside a fresh mount."""
    p = os.path.join(mnt.path, "work")
    os.mkdir(p)
    return p


@pytest.fixture
def capped(mount_factory):
    """A mount with --memory-cap 64M and no disk tier (--large-file-threshold off): a file
    system of 64 MiB, as tmpfs size=64M."""
    return mount_factory("--memory-cap", "64M", "--large-file-threshold", "off",
                         tmpfs_opts="size=64M", name="capped")


@pytest.fixture
def rampart_env(test_base):
    return dict(os.environ, RAMPART_HOME=os.path.join(test_base, "home"))


@pytest.fixture
def cleanup_mounts():
    """For tests that manage Mount objects themselves (shutdown tests): whatever is
    registered here is force-cleaned at teardown if still mounted."""
    mounts = []
    yield mounts
    for m in mounts:
        if in_mount_table(m.path) or m.mounted:
            m.force_cleanup()

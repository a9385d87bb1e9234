"""Fixtures of the power-cut suite (README.md): a temporary folder per test, and rigs that are
always taken down (writers, rampart, LazyFS) even when the test fails."""

import os
import random
import shutil
import tempfile

import pytest

from powercut_lib import LAZYFS_BIN, RAMPART_BIN, Rig
from e2e_helpers import in_mount_table


def pytest_report_header(config):
    return f"rampart power-cut suite: rampart {RAMPART_BIN}, LazyFS {LAZYFS_BIN}"


@pytest.fixture(scope="session", autouse=True)
def _requirements():
    missing = []
    if not os.access(RAMPART_BIN, os.X_OK):
        missing.append(f"no rampart binary at {RAMPART_BIN} (cargo build --release, or set RAMPART_BIN)")
    if not os.access(LAZYFS_BIN, os.X_OK):
        missing.append(f"no LazyFS at {LAZYFS_BIN} (scripts/lazyfs-build)")
    if os.geteuid() != 0:
        missing.append("not root (LazyFS and rampart mount with allow_other)")
    if not os.path.exists("/dev/fuse"):
        missing.append("no /dev/fuse")
    if missing:
        pytest.skip("power-cut suite skipped: " + "; ".join(missing), allow_module_level=True)
    os.umask(0o022)


@pytest.fixture(scope="session")
def seed():
    s = int(os.environ.get("RAMPART_POWERCUT_SEED") or random.randrange(1 << 30))
    print(f"\npower-cut suite seed {s} (RAMPART_POWERCUT_SEED={s} repeats it)")
    return s


@pytest.fixture
def rig_factory(request):
    base = tempfile.mkdtemp(prefix="rampart-powercut-", dir="/tmp")
    os.chmod(base, 0o755)
    rigs = []

    def make(*opts, writers=3):
        d = os.path.join(base, f"rig{len(rigs)}")
        os.mkdir(d, 0o755)
        rig = Rig(d, opts=("--commit-interval", "500ms", *opts), writers=writers)
        rigs.append(rig)
        rig.start()
        return rig

    yield make
    for rig in rigs:
        rig.close()
    for rig in rigs:
        if rig.history:
            print(f"\n{request.node.name}: " + "\n  ".join(rig.history))
    keep = os.environ.get("RAMPART_POWERCUT_KEEP") or (
        os.environ.get("RAMPART_POWERCUT_KEEP_FAILED") and request.node.rep_call.failed)
    with open("/proc/self/mountinfo") as f:
        busy = [line for line in f if f" {base}/" in line]
    if keep or busy:
        print(f"\npower-cut suite: kept {base}" + (" (still mounted!)" if busy else ""))
    else:
        shutil.rmtree(base, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)

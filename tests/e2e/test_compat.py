"""Stores written by an earlier release mount with this one, with every byte, name and
attribute they held.

fixtures/store-db675d4.tar.gz was made by the release at commit db675d4 (the last before the
engine was split into modules): files, a hole-filled 10 MiB file, a hard link, a symlink, a
FIFO, xattrs, a setuid file and an old mtime, then a clean unmount (a checkpoint), then more
changes (a directory, a rename, a rewrite, a chmod, an xattr) made durable by fsync, then
`kill -9` (so the journal holds them). The manifest beside it is what that mount showed
before the kill (`os.lstat`, contents' sha256, link targets, xattrs)."""

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from e2e_helpers import RAMPART_BIN, Mount

pytestmark = pytest.mark.rampart_only("reads stores of rampart's format")

FIXTURES = Path(__file__).parent / "fixtures"


def _tree(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            e = {"mode": st.st_mode, "nlink": st.st_nlink, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    e["sha256"] = hashlib.sha256(f.read()).hexdigest()
            if stat.S_ISLNK(st.st_mode):
                e["target"] = os.readlink(p)
            e["xattrs"] = {k: os.getxattr(p, k, follow_symlinks=False).decode()
                           for k in os.listxattr(p, follow_symlinks=False)}
            out[os.path.relpath(p, root)] = e
    return out


@pytest.mark.parametrize("release", ["db675d4"])
def test_a_store_of_an_earlier_release_mounts_with_its_contents(test_base, rampart_env, cleanup_mounts, release):
    m = Mount(test_base, "old", env=rampart_env)
    cleanup_mounts.append(m)
    subprocess.run(["tar", "xzf", FIXTURES / f"store-{release}.tar.gz", "-C", test_base], check=True)
    os.rename(os.path.join(test_base, "store"), m.store)
    expected = json.loads((FIXTURES / f"store-{release}.manifest.json").read_text())

    r = subprocess.run([RAMPART_BIN, "fsck", m.store], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 batch, 10 ops" in r.stdout, "the fixture's journal holds the changes after its checkpoint"

    m.mount(mkfs=False)
    assert _tree(m.path) == expected
    # It goes on working: a change, a clean unmount, and the store is still clean and complete.
    with open(os.path.join(m.path, "after", "new"), "wb") as f:
        f.write(b"written by this release")
    assert m.umount().returncode == 0
    r = subprocess.run([RAMPART_BIN, "fsck", m.store], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    m.mount(mkfs=False)
    expected["after/new"] = _tree(m.path)["after/new"]
    expected["after"] = _tree(m.path)["after"]
    assert _tree(m.path) == expected
    assert m.umount().returncode == 0

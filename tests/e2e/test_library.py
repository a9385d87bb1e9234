"""The embeddable library (rampart_core::fs) and the mount on the same store: what a program
writes through the library is read through the mount and the other way round, and a store is
opened by one of them at a time (the store's lock). The program is the crate's example
(crates/rampart-core/examples/library.rs), built here if target/ lacks it."""

import os
import subprocess
from pathlib import Path

import pytest

from e2e_helpers import REPO, RAMPART_BIN, Mount, in_mount_table, run

pytestmark = pytest.mark.rampart_only("tests the rampart store through the library")


@pytest.fixture(scope="module")
def library():
    """The example program, next to the rampart binary under test (built if missing)."""
    exe = Path(RAMPART_BIN).parent / "examples" / "library"
    if not exe.exists():
        r = subprocess.run(["cargo", "build", "--release", "-p", "rampart-core", "--example", "library"],
                           cwd=REPO, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, f"building the example failed: {r.stderr[-2000:]}"
        exe = REPO / "target" / "release" / "examples" / "library"
    assert exe.exists(), f"{exe} is missing after the build"
    return str(exe)


def lib(exe, store, *args):
    return run([exe, str(store), *args], timeout=120)


def new_mount(test_base, rampart_env, name, cleanup):
    m = Mount(test_base, name, env=rampart_env)
    cleanup.append(m)
    return m


def test_a_store_written_by_the_library_mounts_and_back(library, test_base, rampart_env, cleanup_mounts):
    m = new_mount(test_base, rampart_env, "lib", cleanup_mounts)
    m.mkfs()
    r = lib(library, m.store, "put", "/docs/from-library.txt", "written by a program\n")
    assert r.returncode == 0, f"library put: {r.stderr}"
    r = lib(library, m.store, "put", "/docs/deep/er/file", "x" * 100_000)
    assert r.returncode == 0, f"library put: {r.stderr}"

    m.mount(mkfs=False)
    docs = Path(m.path) / "docs"
    assert (docs / "from-library.txt").read_text() == "written by a program\n"
    assert (docs / "deep" / "er" / "file").read_bytes() == b"x" * 100_000
    assert sorted(os.listdir(docs)) == ["deep", "from-library.txt"]

    # While mounted, the library is refused with the reason, and changes nothing.
    r = lib(library, m.store, "put", "/docs/while-mounted", "no")
    assert r.returncode != 0, "the library opened a mounted store"
    assert "already mounted" in r.stderr, r.stderr
    assert not (docs / "while-mounted").exists()

    # Written through the mount, read through the library.
    (docs / "from-mount.txt").write_text("written through FUSE\n")
    os.mkdir(docs / "made-by-mount")
    os.symlink("from-mount.txt", docs / "link")
    r = m.umount()
    assert r.returncode == 0, f"umount: {r.stderr}"
    assert not in_mount_table(m.path)

    r = lib(library, m.store, "cat", "/docs/link")
    assert r.returncode == 0, f"library cat: {r.stderr}"
    assert r.stdout == "written through FUSE\n"
    r = lib(library, m.store, "ls", "/docs")
    assert r.returncode == 0, f"library ls: {r.stderr}"
    names = sorted(line.split("\t")[2] for line in r.stdout.splitlines())
    assert names == ["deep", "from-library.txt", "from-mount.txt", "link", "made-by-mount"], r.stdout

    # Removed by the library, gone at the next mount.
    r = lib(library, m.store, "rm", "/docs/deep")
    assert r.returncode == 0, f"library rm: {r.stderr}"
    m.mount(mkfs=False)
    assert not (docs / "deep").exists()
    assert (docs / "from-library.txt").exists()
    r = m.umount()
    assert r.returncode == 0, f"umount: {r.stderr}"
    r = m.cli("fsck", m.store)
    assert r.returncode == 0, f"fsck after library and mount: {r.stdout}{r.stderr}"


def test_a_store_open_in_the_library_cannot_be_mounted(library, test_base, rampart_env, cleanup_mounts):
    """A program holding the store open (the example's `hold` keeps it open until a line arrives on a FIFO) keeps `rampart mount` out, with the reason; once it closes, the mount works."""
    m = new_mount(test_base, rampart_env, "held", cleanup_mounts)
    m.mkfs()
    fifo = Path(test_base) / "held-fifo"
    os.mkfifo(fifo)
    r = lib(library, m.store, "put", "/before", "1")
    assert r.returncode == 0, r.stderr
    proc = subprocess.Popen([library, str(m.store), "hold", str(fifo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # "hold" prints "open" once the store is open, then waits for the FIFO.
        line = proc.stdout.readline()
        assert line.strip() == "open", f"the example did not open the store: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        m.path.mkdir(exist_ok=True)
        r = m.cli("mount", m.store, m.path)
        assert r.returncode != 0, "mounted a store that a program holds open"
        assert "already mounted" in r.stderr, r.stderr
        assert not in_mount_table(m.path)
        with open(fifo, "w") as f:
            f.write("done\n")
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    m.mount(mkfs=False)
    assert (Path(m.path) / "before").read_text() == "1"
    r = m.umount()
    assert r.returncode == 0, f"umount: {r.stderr}"

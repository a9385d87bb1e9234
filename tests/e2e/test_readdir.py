"""Directory listing: completeness, d_type, large directories, listing under change."""

import collections
import os
import socket
import stat
import subprocess
import threading

from e2e_helpers import (DT_BLK, DT_CHR, DT_DIR, DT_FIFO, DT_LNK, DT_REG, DT_SOCK, libc, raw_readdir, run,
                         write_file)


def test_listing_and_d_type(d):
    write_file(os.path.join(d, "file"), b"x")
    os.mkdir(os.path.join(d, "dir"))
    os.symlink("file", os.path.join(d, "link"))
    os.mkfifo(os.path.join(d, "fifo"))
    os.mknod(os.path.join(d, "chr"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.mknod(os.path.join(d, "blk"), stat.S_IFBLK | 0o600, os.makedev(7, 0))
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(d, "sock"))
    s.close()
    expected = {b"file": DT_REG, b"dir": DT_DIR, b"link": DT_LNK, b"fifo": DT_FIFO, b"chr": DT_CHR,
                b"blk": DT_BLK, b"sock": DT_SOCK}
    ents = raw_readdir(d)
    names = [n for n, _, _ in ents]
    assert len(names) == len(set(names)), f"duplicate entries: {names}"
    assert {n: t for n, t, _ in ents} == expected, "wrong names or d_type values"
    for n, _, ino in ents:
        assert ino == os.lstat(os.path.join(os.fsencode(d), n)).st_ino, f"d_ino of {n} differs from st_ino"
    # os.scandir agrees
    with os.scandir(d) as it:
        sc = {e.name: (e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False),
                       e.is_symlink()) for e in it}
    assert sc["dir"] == (True, False, False) and sc["file"] == (False, True, False)
    assert sc["link"] == (False, False, True)
    # '.' and '..' are returned by readdir too
    dd = libc_names_with_dots(d)
    assert dd.count(b".") == 1 and dd.count(b"..") == 1


def libc_names_with_dots(path):
    h = libc.opendir(os.fsencode(path))
    out = []
    try:
        while True:
            e = libc.readdir64(h)
            if not e:
                break
            out.append(e.contents.d_name)
    finally:
        libc.closedir(h)
    return out


def test_empty_dir_listing(d):
    assert os.listdir(d) == []
    assert raw_readdir(d) == []


def test_large_directory_20000(d):
    n = 20000
    big = os.path.join(d, "big")
    os.mkdir(big)
    for i in range(n):
        p = os.path.join(big, f"entry-{i:05d}-{'x' * (i % 37)}")
        if i % 1000 == 0:
            os.mkdir(p)
        else:
            os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
    ents = raw_readdir(big)
    names = [e[0] for e in ents]
    dup = [k for k, c in collections.Counter(names).items() if c > 1]
    assert not dup, f"{len(dup)} names listed twice, e.g. {dup[:3]}"
    assert len(names) == n, f"listed {len(names)} of {n} entries"
    for name, typ, _ in ents:
        i = int(name[6:11])
        assert typ == (DT_DIR if i % 1000 == 0 else DT_REG), f"{name}: d_type {typ}"
    assert set(os.listdir(big)) == {os.fsdecode(x) for x in names}
    assert os.stat(big).st_nlink == 2 + n // 1000
    for name in names[::7]:
        assert os.path.lexists(os.path.join(big, os.fsdecode(name)))
    run(["rm", "-rf", big], check=True)
    assert os.listdir(d) == []


def test_rm_rf_while_listing(d):
    victim = os.path.join(d, "victim")
    os.mkdir(victim)
    original = set()
    for i in range(40):
        sub = f"sub{i:02d}"
        os.mkdir(os.path.join(victim, sub))
        original.add(sub)
        for k in range(20):
            write_file(os.path.join(victim, sub, f"f{k}"), b"x")
    for i in range(3000):
        name = f"file-{i:05d}"
        os.close(os.open(os.path.join(victim, name), os.O_CREAT | os.O_WRONLY, 0o644))
        original.add(name)

    problems = []
    listings = []
    first_done = threading.Event()
    stop = threading.Event()

    def lister():
        while not stop.is_set():
            try:
                names = os.listdir(victim)
            except FileNotFoundError:
                first_done.set()
                if not os.path.exists(victim):
                    return
                continue
            except OSError as e:
                problems.append(f"listdir: {e!r}")
                first_done.set()
                return
            listings.append(len(names))
            if len(names) != len(set(names)):
                problems.append("duplicate names in one listing")
            if not set(names) <= original:
                problems.append(f"unknown names: {sorted(set(names) - original)[:5]}")
            first_done.set()

    # also hold a directory stream open across the removal
    held = os.scandir(victim)
    held_names = [next(held).name for _ in range(10)]
    t = threading.Thread(target=lister)
    t.start()
    assert first_done.wait(120)
    r = subprocess.run(["rm", "-rf", victim], capture_output=True, timeout=300)
    stop.set()
    t.join(120)
    try:
        for e in held:
            held_names.append(e.name)
    except FileNotFoundError:
        pass  # reading a removed directory may fail with ENOENT
    finally:
        held.close()
    assert r.returncode == 0, f"rm -rf failed: {r.stderr.decode()}"
    assert not os.path.exists(victim)
    assert os.listdir(d) == []
    assert not problems, problems[:5]
    assert listings, "the lister never completed a listing"
    assert len(held_names) == len(set(held_names)) and set(held_names) <= original


def test_readdir_continuation_under_churn(d):
    """Iterate slowly with os.scandir while creating and deleting other entries (also
    ones that come before the cursor): every entry that exists throughout is returned
    exactly once, and nothing that never existed is returned."""
    work = os.path.join(d, "churn")
    os.mkdir(work)
    stable = set()
    churn = []
    for i in range(3000):
        s = f"stable-{i:05d}-{'s' * (i % 23)}"
        write_file(os.path.join(work, s), b"")
        stable.add(s)
        c = f"churn-{i:05d}"
        write_file(os.path.join(work, c), b"")
        churn.append(c)
    ever = set(stable) | set(churn)
    seen = []
    k = 0
    with os.scandir(work) as it:
        for e in it:
            seen.append(e.name)
            # between two entries: delete an old churn entry, create a new one. Entries
            # created during the listing may legitimately be returned too, so the churn
            # is bounded, or the listing could chase its own tail forever.
            if churn:
                os.unlink(os.path.join(work, churn.pop(0)))
                new = f"new-{k:05d}"
                write_file(os.path.join(work, new), b"")
                ever.add(new)
                k += 1
            assert len(seen) <= 2 * len(ever), "the listing does not end"
    counts = collections.Counter(seen)
    dup = [n for n, c in counts.items() if c > 1]
    assert not dup, f"{len(dup)} entries returned twice, e.g. {dup[:5]}"
    missing = stable - set(seen)
    assert not missing, f"{len(missing)} stable entries never returned, e.g. {sorted(missing)[:5]}"
    assert set(seen) <= ever, f"returned names that never existed: {sorted(set(seen) - ever)[:5]}"


def test_telldir_seekdir(d):
    """A position from telldir() leads back to the same remaining entries (NFS and
    Samba exports, and `find` on huge directories, resume listings like this)."""
    import ctypes
    for i in range(2000):
        write_file(os.path.join(d, f"e{i:04d}-{'t' * (i % 29)}"), b"")
    libc.telldir.argtypes = [ctypes.c_void_p]
    libc.telldir.restype = ctypes.c_long
    libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
    libc.seekdir.restype = None
    libc.rewinddir.argtypes = [ctypes.c_void_p]
    libc.rewinddir.restype = None
    h = libc.opendir(os.fsencode(d))
    assert h

    def read_rest():
        out = []
        while True:
            e = libc.readdir64(h)
            if not e:
                return out
            out.append(e.contents.d_name)

    try:
        first = []
        while len(first) < 777:
            first.append(libc.readdir64(h).contents.d_name)
        pos = libc.telldir(h)
        rest1 = read_rest()
        libc.seekdir(h, pos)
        rest2 = read_rest()
        libc.rewinddir(h)
        again = read_rest()
    finally:
        libc.closedir(h)
    assert rest1 == rest2, "seekdir(telldir()) did not resume at the same place"
    names = [n for n in first + rest1 if n not in (b".", b"..")]
    assert len(names) == 2000 and len(set(names)) == 2000
    assert again == first + rest1, "rewinddir did not restart the same listing"

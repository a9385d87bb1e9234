"""Threads and processes changing the same directories at once, then a full
consistency walk compared with what every worker says survived."""

import collections
import json
import os
import stat
import subprocess
import sys
import threading

from e2e_helpers import HERE, N_SHARED, concurrency_worker, read_file

N_THREADS = 3
N_PROCS = 3
N_OPS = 1500


def walk_check(root):
    """Full consistency walk. Returns (files: relpath -> (ino, content), dirs: set)."""
    problems = []
    files = {}
    dirs = set()
    names_of_ino = collections.defaultdict(list)
    nlink_of_ino = {}

    def visit(path, rel, parent_ino):
        st = os.lstat(path)
        if os.stat(os.path.join(path, "..")).st_ino != parent_ino:
            problems.append(f"{rel}/.. is not its parent")
        with os.scandir(path) as it:
            entries = list(it)
        names = [e.name for e in entries]
        if len(names) != len(set(names)):
            problems.append(f"{rel}: duplicate names {[n for n, c in collections.Counter(names).items() if c > 1][:5]}")
        subdirs = 0
        for e in entries:
            p = os.path.join(path, e.name)
            r = os.path.join(rel, e.name) if rel else e.name
            est = os.lstat(p)
            if e.is_dir(follow_symlinks=False) != stat.S_ISDIR(est.st_mode):
                problems.append(f"{r}: d_type disagrees with lstat")
            if stat.S_ISDIR(est.st_mode):
                subdirs += 1
                dirs.add(r)
                visit(p, r, st.st_ino)
            else:
                names_of_ino[est.st_ino].append(r)
                nlink_of_ino[est.st_ino] = est.st_nlink
                files[r] = (est.st_ino, read_file(p).decode())
        if st.st_nlink != 2 + subdirs:
            problems.append(f"{rel or '.'}: st_nlink {st.st_nlink} != 2 + {subdirs} subdirectories")

    visit(root, "", os.stat(os.path.dirname(root)).st_ino)
    for ino, names in names_of_ino.items():
        if nlink_of_ino[ino] != len(names):
            problems.append(f"inode {ino} has st_nlink {nlink_of_ino[ino]} but {len(names)} names: {names[:4]}")
    return files, dirs, problems


def test_concurrent_namespace_changes(mnt):
    root = os.path.join(mnt.path, "conc")
    os.mkdir(root)
    for i in range(N_SHARED):
        os.mkdir(os.path.join(root, f"d{i}"))
    os.mkdir(os.path.join(root, "shared"))

    results = {}
    errors = []

    def thread_worker(wid):
        try:
            results[wid] = concurrency_worker(root, wid, N_OPS, 1000 + wid)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"thread {wid}: {e!r}")

    # a reader listing the shared directories all along: no name may appear twice
    stop = threading.Event()
    lister_problems = []
    listings = [0]

    def lister():
        while not stop.is_set():
            for i in range(N_SHARED):
                try:
                    names = os.listdir(os.path.join(root, f"d{i}"))
                except OSError as e:
                    lister_problems.append(repr(e))
                    return
                listings[0] += 1
                if len(names) != len(set(names)):
                    lister_problems.append(f"d{i}: a listing returned a name twice")

    procs = {}
    for k in range(N_PROCS):
        wid = N_THREADS + k
        procs[wid] = subprocess.Popen(
            [sys.executable, str(HERE / "e2e_helpers.py"), "worker", root, str(wid), str(N_OPS), str(1000 + wid)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    threads = [threading.Thread(target=thread_worker, args=(w,)) for w in range(N_THREADS)]
    lt = threading.Thread(target=lister)
    lt.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for wid, p in procs.items():
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"worker process {wid} failed: {err.decode()[-2000:]}"
        results[wid] = json.loads(out)
    stop.set()
    lt.join(120)

    assert not errors, errors
    assert len(results) == N_THREADS + N_PROCS
    werr = {w: r["errors"] for w, r in results.items() if r["errors"]}
    assert not werr, f"operations failed in workers (they never conflict, so none may fail): {werr}"
    assert not lister_problems, lister_problems[:5]
    assert listings[0] > 0

    files, dirs, problems = walk_check(root)
    assert not problems, problems[:10]

    expected_files = {"shared/target"}
    expected_dirs = {f"d{i}" for i in range(N_SHARED)} | {"shared"}
    for r in results.values():
        expected_files |= set(r["files"])
        expected_dirs |= set(r["dirs"])
    assert dirs == expected_dirs, (f"directories differ: missing {sorted(expected_dirs - dirs)[:5]}, "
                                   f"unexpected {sorted(dirs - expected_dirs)[:5]}")
    assert set(files) == expected_files, (f"files differ: missing {sorted(expected_files - set(files))[:5]}, "
                                          f"unexpected {sorted(set(files) - expected_files)[:5]}")
    # contents and hard-link groups
    for wid, r in results.items():
        groups = collections.defaultdict(set)
        for rel, (group, content) in r["files"].items():
            assert files[rel][1] == content, f"{rel}: content {files[rel][1]!r} != {content!r}"
            groups[group].add(files[rel][0])
        for g, inos in groups.items():
            assert len(inos) == 1, f"worker {wid}: names of one file have different inodes"
    # the contested name holds the last value some worker published
    lasts = {r["published"][-1] for r in results.values() if r["published"]}
    assert files["shared/target"][1] in lasts
    total_ops_files = sum(len(r["files"]) for r in results.values())
    assert total_ops_files > 100, "the workload did not leave enough files to be meaningful"

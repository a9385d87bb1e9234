"""Ordinary programs working on the mount: cp, tar, diff, git, make + cc, rustc, rm."""

import os
import shutil
import stat
import sys
import sysconfig
import textwrap

import pytest

from e2e_helpers import read_file, run, write_file

STDLIB = sysconfig.get_paths()["stdlib"]
SKIP_DIRS = {"site-packages", "test", "dist-packages"}


@pytest.fixture(scope="module")
def source_tree(e2e_base):
    """A real source tree on the local disk: the python standard library (a few
    thousand files) plus a few extras cp -a must preserve (symlinks, a hard link, an
    empty directory, odd modes, nanosecond and old mtimes, an xattr)."""
    src = os.path.join(e2e_base, "source-tree")
    os.mkdir(src)
    entries = [e for e in sorted(os.listdir(STDLIB)) if e not in SKIP_DIRS]
    run(["cp", "-a", *[os.path.join(STDLIB, e) for e in entries], src], check=True, timeout=600)
    x = os.path.join(src, "zz-extras")
    os.mkdir(x)
    write_file(os.path.join(x, "plain"), b"plain\n")
    os.link(os.path.join(x, "plain"), os.path.join(x, "hardlink"))
    os.symlink("plain", os.path.join(x, "symlink"))
    os.symlink("../json", os.path.join(x, "dirlink"))
    os.mkdir(os.path.join(x, "empty-dir"))
    write_file(os.path.join(x, "secret"), b"s")
    os.chmod(os.path.join(x, "secret"), 0o600)
    write_file(os.path.join(x, "setuid"), b"#!/bin/sh\n")
    os.chmod(os.path.join(x, "setuid"), 0o4755)
    write_file(os.path.join(x, "owned"), b"o")
    os.chown(os.path.join(x, "owned"), 1234, 4321)
    write_file(os.path.join(x, "old"), b"old")
    os.utime(os.path.join(x, "old"), ns=(123456789012345678, 234567890123456789))
    write_file(os.path.join(x, "with-xattr"), b"x")
    os.setxattr(os.path.join(x, "with-xattr"), "user.origin", b"rampart-e2e")
    write_file(os.path.join(x, "empty-file"), b"")
    write_file(os.path.join(x, "sparse"), b"")
    os.truncate(os.path.join(x, "sparse"), 5 * 1024 * 1024)
    nfiles = sum(len(fs) for _, _, fs in os.walk(src))
    assert nfiles > 1000
    yield src
    shutil.rmtree(src, ignore_errors=True)


def tree_stats(root):
    """relpath -> (type+mode, uid, gid, size, mtime_ns, nlink, symlink target)"""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            link = os.readlink(p) if stat.S_ISLNK(st.st_mode) else None
            mtime = st.st_mtime_ns if not stat.S_ISDIR(st.st_mode) else None  # dirs: cp sets them last
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_uid, st.st_gid,
                                             st.st_size if not stat.S_ISDIR(st.st_mode) else None,
                                             mtime, st.st_nlink if not stat.S_ISDIR(st.st_mode) else None, link)
    return out


def diff_r(a, b):
    r = run(["diff", "-r", "--no-dereference", a, b], timeout=600)
    assert r.returncode == 0, f"diff -r {a} {b}:\n{r.stdout[:3000]}{r.stderr[:2000]}"


def compare_stats(a, b):
    sa, sb = tree_stats(a), tree_stats(b)
    assert sa.keys() == sb.keys(), f"entries differ: {sorted(sa.keys() ^ sb.keys())[:10]}"
    bad = [k for k in sa if sa[k] != sb[k]]
    assert not bad, f"{len(bad)} entries differ in mode/owner/size/mtime/nlink, e.g. " + \
        "; ".join(f"{k}: {sa[k]} vs {sb[k]}" for k in bad[:3])


def test_cp_a_in_and_out(mnt, source_tree, test_base):
    inside = os.path.join(mnt.path, "tree")
    run(["cp", "-a", source_tree, inside], check=True, timeout=600)
    diff_r(source_tree, inside)
    compare_stats(source_tree, inside)
    x = os.path.join(inside, "zz-extras")
    assert os.getxattr(os.path.join(x, "with-xattr"), "user.origin") == b"rampart-e2e"
    assert os.stat(os.path.join(x, "plain")).st_ino == os.stat(os.path.join(x, "hardlink")).st_ino
    out = os.path.join(test_base, "out")
    run(["cp", "-a", inside, out], check=True, timeout=600)
    diff_r(source_tree, out)
    compare_stats(source_tree, out)
    assert os.getxattr(os.path.join(out, "zz-extras", "with-xattr"), "user.origin") == b"rampart-e2e"
    shutil.rmtree(out)


def test_tar_roundtrip(mnt, source_tree, test_base):
    tarball = os.path.join(mnt.path, "tree.tar")
    run(["tar", "cf", tarball, "-C", source_tree, "."], check=True, timeout=600)
    assert os.path.getsize(tarball) > 10 * 1024 * 1024
    ex = os.path.join(mnt.path, "extracted")
    os.mkdir(ex)
    run(["tar", "xf", tarball, "-C", ex], check=True, timeout=600)
    diff_r(source_tree, ex)
    # and from the mount back to the local disk
    back = os.path.join(test_base, "back.tar")
    run(["tar", "cf", back, "-C", ex, "."], check=True, timeout=600)
    out = os.path.join(test_base, "out")
    os.mkdir(out)
    run(["tar", "xf", back, "-C", out], check=True, timeout=600)
    diff_r(source_tree, out)
    shutil.rmtree(out)
    os.unlink(back)


def git(repo, *args, check=True):
    env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="E2E", GIT_AUTHOR_EMAIL="e2e@example.invalid",
               GIT_COMMITTER_NAME="E2E", GIT_COMMITTER_EMAIL="e2e@example.invalid")
    r = run(["git", "-C", repo, *args], env=env, timeout=600)
    if check:
        assert r.returncode == 0, f"git {' '.join(args)} exited {r.returncode}: {r.stderr}"
    return r


def test_git_workflow(mnt):
    repo = os.path.join(mnt.path, "repo")
    os.mkdir(repo)
    git(repo, "init", "-q", "-b", "main")
    run(["cp", "-a", os.path.join(STDLIB, "json"), os.path.join(STDLIB, "email"), repo], check=True)
    write_file(os.path.join(repo, "README"), "version 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    v1 = {p: read_file(os.path.join(repo, p)) for p in ("README", "json/decoder.py", "email/utils.py")}

    git(repo, "checkout", "-q", "-b", "feature")
    write_file(os.path.join(repo, "README"), "version 2\n")
    write_file(os.path.join(repo, "NEW"), "new file\n")
    git(repo, "rm", "-q", "email/utils.py")
    git(repo, "mv", "json/decoder.py", "json/decoder2.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "second")

    git(repo, "checkout", "-q", "main")
    assert read_file(os.path.join(repo, "README")) == v1["README"]
    assert read_file(os.path.join(repo, "json/decoder.py")) == v1["json/decoder.py"]
    assert read_file(os.path.join(repo, "email/utils.py")) == v1["email/utils.py"]
    assert not os.path.exists(os.path.join(repo, "NEW"))
    assert not os.path.exists(os.path.join(repo, "json/decoder2.py"))
    assert git(repo, "status", "--porcelain").stdout == ""

    git(repo, "checkout", "-q", "feature")
    assert read_file(os.path.join(repo, "README")) == b"version 2\n"
    assert read_file(os.path.join(repo, "json/decoder2.py")) == v1["json/decoder.py"]
    assert not os.path.exists(os.path.join(repo, "email/utils.py"))
    assert git(repo, "status", "--porcelain").stdout == ""
    assert git(repo, "log", "--format=%s").stdout.split() == ["second", "first"]

    git(repo, "gc", "-q")
    git(repo, "fsck", "--full", "--strict")
    # a local clone hard-links the objects
    clone = os.path.join(mnt.path, "clone")
    git(mnt.path, "clone", "-q", repo, clone)
    git(clone, "fsck", "--full")
    assert read_file(os.path.join(clone, "README")) == b"version 2\n"
    diff = git(clone, "diff", "origin/main", "origin/feature", "--stat").stdout
    assert "README" in diff and "NEW" in diff


C_FILES = {
    "util.h": "int sum_to(int n);\nconst char *greeting(void);\n",
    "util.c": textwrap.dedent("""\
        #include "util.h"
        int sum_to(int n) { int s = 0; for (int i = 1; i <= n; i++) s += i; return s; }
        const char *greeting(void) { return "hello from rampart"; }
        """),
    "main.c": textwrap.dedent("""\
        #include <stdio.h>
        #include "util.h"
        int main(void) { printf("%s, sum=%d\\n", greeting(), sum_to(100)); return 0; }
        """),
    "Makefile": textwrap.dedent("""\
        CFLAGS = -O1 -Wall
        prog: main.o util.o
        \t$(CC) -o $@ main.o util.o
        %.o: %.c util.h
        \t$(CC) $(CFLAGS) -c -o $@ $<
        clean:
        \trm -f prog *.o
        .PHONY: clean
        """),
}


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None, reason="no cc/make")
def test_make_and_run_c_program(mnt):
    proj = os.path.join(mnt.path, "proj")
    os.mkdir(proj)
    for n, text in C_FILES.items():
        write_file(os.path.join(proj, n), text)
    run(["make", "-C", proj], check=True)
    r = run([os.path.join(proj, "prog")], check=True)
    assert r.stdout == "hello from rampart, sum=5050\n"
    assert run(["make", "-q", "-C", proj]).returncode == 0, "make thinks the fresh build is out of date"
    # change a source; make its mtime clearly newer than the program's (no reliance on clocks)
    write_file(os.path.join(proj, "util.c"), C_FILES["util.c"].replace("hello from rampart", "rebuilt"))
    t = os.stat(os.path.join(proj, "prog")).st_mtime_ns + 2 * 10**9
    os.utime(os.path.join(proj, "util.c"), ns=(t, t))
    assert run(["make", "-q", "-C", proj]).returncode == 1, "make did not notice the newer source"
    run(["make", "-C", proj], check=True)
    assert run([os.path.join(proj, "prog")], check=True).stdout == "rebuilt, sum=5050\n"
    run(["make", "-C", proj, "clean"], check=True)
    assert sorted(os.listdir(proj)) == sorted(C_FILES)


@pytest.mark.skipif(shutil.which("rustc") is None, reason="rustc not available")
def test_rustc_program(mnt):
    proj = os.path.join(mnt.path, "rs")
    os.mkdir(proj)
    write_file(os.path.join(proj, "main.rs"), textwrap.dedent("""\
        use std::collections::BTreeMap;
        fn main() {
            let mut m = BTreeMap::new();
            for w in "the quick brown fox jumps over the lazy dog the end".split(' ') {
                *m.entry(w).or_insert(0) += 1;
            }
            println!("the={} words={}", m["the"], m.len());
        }
        """))
    run(["rustc", "-o", os.path.join(proj, "hello"), os.path.join(proj, "main.rs")], check=True, cwd=proj,
        timeout=600)
    r = run([os.path.join(proj, "hello")], check=True)
    assert r.stdout == "the=3 words=9\n"


def test_sqlite_database(mnt):
    """sqlite: fcntl locks, pread/pwrite, fsync, a journal created and deleted per
    transaction, and a second connection from another process."""
    import sqlite3
    db = os.path.join(mnt.path, "test.db")
    con = sqlite3.connect(db)
    con.execute("create table t (id integer primary key, v text)")
    for chunk in range(20):
        with con:
            con.executemany("insert into t (v) values (?)", [(f"row {chunk}-{i} " * 5,) for i in range(500)])
    with con:
        con.execute("delete from t where id % 3 = 0")
    con.execute("vacuum")
    assert con.execute("select count(*) from t").fetchone()[0] == 10000 - 10000 // 3
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
    # while this connection holds a write transaction, another process cannot write
    con.execute("begin immediate")
    r = run([sys.executable, "-c",
             "import sqlite3, sys\n"
             "c = sqlite3.connect(sys.argv[1], timeout=0)\n"
             "try:\n    c.execute('insert into t (v) values (1)'); c.commit(); print('wrote')\n"
             "except sqlite3.OperationalError as e:\n    print('locked' if 'locked' in str(e) else e)\n", db])
    con.execute("rollback")
    assert r.stdout.strip() == "locked", r.stdout + r.stderr
    con.close()
    r = run([sys.executable, "-c",
             "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n"
             "print(c.execute('select count(*) from t').fetchone()[0], c.execute('pragma integrity_check').fetchone()[0])",
             db], check=True)
    assert r.stdout.split() == [str(10000 - 10000 // 3), "ok"]
    assert [n for n in os.listdir(mnt.path) if n.startswith("test.db")] == ["test.db"], "journal left behind"


def test_rm_rf_10000_files(mnt):
    tree = os.path.join(mnt.path, "tree")
    os.mkdir(tree)
    for i in range(100):
        sub = os.path.join(tree, f"d{i:03d}")
        os.mkdir(sub)
        if i % 10 == 0:
            os.mkdir(os.path.join(sub, "nested"))
            write_file(os.path.join(sub, "nested", "n"), b"n")
        for k in range(100):
            fd = os.open(os.path.join(sub, f"file-{k:03d}"), os.O_CREAT | os.O_WRONLY, 0o644)
            if k % 10 == 0:
                os.write(fd, b"some data " * 100)
            os.close(fd)
    assert sum(len(fs) for _, _, fs in os.walk(tree)) == 10010
    assert os.stat(mnt.path).st_nlink == 3
    r = run(["rm", "-rf", tree], timeout=600)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert not os.path.lexists(tree)
    assert os.listdir(mnt.path) == []
    assert os.stat(mnt.path).st_nlink == 2

"""Per-file persistence categories (docs/CATEGORIES.md, issue 14): the store's rampart.toml,
filename rules, directory inheritance, user.rampart.category / user.rampart.spec, and each
category's contract through the mount, checked with kill -9 and a remount.

The mounts use a five-minute commit interval (the longest that GENERATED's five minutes
allow), so nothing reaches the store by the clock during a test: what is there after kill -9
is there because its category put it there."""

import errno
import json
import os

import pytest

from e2e_helpers import Mount, read_file, run, run_as_nobody, wait_until
from test_persistence import (assert_fsck_clean_after_crash, assert_no_panic, crash, journal_len,
                              remount, unmount)

pytestmark = pytest.mark.rampart_only("categories are rampart's")

CONFIG = """\
[categories]
SCRATCH = "lm=never"

[[rules]]
glob = "*.safe"
category = "SAFE"

[[rules]]
glob = "*.null"
category = "DISPOSABLE"

[[rules]]
glob = "*.o"
category = "GENERATED"

[[rules]]
glob = "*.tex"
category = "EDITED"
"""

MARKER = b"temporary-category-marker-51c2"
# In the names of TEMPORARY files: no store file may hold it either (decision 0066).
NAME_MARKER = "tmpname-8e03"
LONG = ("--commit-interval", "300s")


def configured(test_base, env, name, cleanup, config=CONFIG, opts=LONG):
    m = Mount(test_base, name, opts=opts, env=env)
    cleanup.append(m)
    m.mkfs()
    (m.store / "rampart.toml").write_text(config)
    m.mount(mkfs=False)
    assert m.pid
    return m


def category(path):
    return os.getxattr(path, "user.rampart.category").decode()


def store_holds(m, needle):
    found = []
    for root, _dirs, files in os.walk(m.store):
        for name in files:
            p = os.path.join(root, name)
            if name != "rampart.log" and os.path.isfile(p) and needle in read_file(p):
                found.append(p)
    return found


def kernel_requests(m):
    s = m.status()
    return s["kernel_open"], s["kernel_flush"]


def test_a_store_that_names_safe_and_edited_has_open_and_flush_answered(test_base, rampart_env,
                                                                       cleanup_mounts):
    """--no-open auto and --no-flush auto (the defaults) answer OPEN and FLUSH when the
    store's rampart.toml can give a file SAFE (or DISPOSABLE) and EDITED (decision 0063)."""
    m = configured(test_base, rampart_env, "auto-answered", cleanup_mounts)
    assert kernel_requests(m) == ("answered", "answered")
    log = (m.store / "rampart.log").read_text()
    assert "OPEN answered (--no-open auto): rule 1 of rampart.toml gives SAFE" in log, log
    assert "FLUSH answered (--no-flush auto): rule 4 of rampart.toml gives EDITED" in log, log
    unmount(m)
    # Each alone: a category defined under [categories] counts, as does the default.
    (m.store / "rampart.toml").write_text('[categories]\nSURE = "lm=before_write"\n')
    remount(m)
    assert kernel_requests(m) == ("answered", "no-flush")
    unmount(m)
    (m.store / "rampart.toml").write_text('default = "EDITED"\n')
    remount(m)
    assert kernel_requests(m) == ("no-open", "answered")
    unmount(m)
    assert_no_panic(m)


def test_a_plain_store_skips_open_and_flush_and_refuses_what_needs_them(test_base, rampart_env,
                                                                       cleanup_mounts):
    """On a store whose configuration and files need neither, the kernel is told to send no
    OPEN and no FLUSH (small files keep their speed), and a category set later that needs one
    is refused with EOPNOTSUPP and a log line naming the file, never accepted and weakened.
    Set with --no-open off --no-flush off, it is kept, and auto then answers both."""
    m = configured(test_base, rampart_env, "auto-plain", cleanup_mounts, config="")
    p = m.path
    assert kernel_requests(m) == ("no-open", "no-flush")
    (p / "f").write_bytes(b"plain")
    os.mkdir(p / "d")
    for target, name, value in [("f", "user.rampart.category", b"SAFE"),
                                ("f", "user.rampart.category", b"disposable"),
                                ("f", "user.rampart.category", b"EDITED"),
                                ("f", "user.rampart.spec", b"lm=before_write"),
                                ("f", "user.rampart.spec", b"lm=until_close"),
                                ("d", "user.rampart.category", b"SAFE"),
                                ("d", "user.rampart.category", b"EDITED")]:
        with pytest.raises(OSError) as e:
            os.setxattr(p / target, name, value)
        assert e.value.errno == errno.EOPNOTSUPP, (target, value)
    assert category(p / "f") == "SOON" and category(p / "d") == "SOON"
    r = run(["setfattr", "-n", "user.rampart.category", "-v", "SAFE", str(p / "f")])
    assert r.returncode != 0 and "Operation not supported" in r.stderr, r.stderr
    log = (m.store / "rampart.log").read_text()
    assert ("/f: category SAFE needs the kernel to send OPEN" in log
            and "--no-open off" in log), log
    assert "/d: category EDITED needs the kernel to send FLUSH" in log and "--no-flush off" in log
    # What needs neither is set as before.
    os.setxattr(p / "d", "user.rampart.category", b"TEMPORARY")
    os.setxattr(p / "f", "user.rampart.category", b"SOMETIME")
    assert category(p / "f") == "SOMETIME"
    unmount(m)
    # Mounted with both answered, SAFE and EDITED are accepted...
    m.opts = list(LONG) + ["--no-open", "off", "--no-flush", "off"]
    remount(m)
    assert kernel_requests(m) == ("answered", "answered")
    os.setxattr(p / "f", "user.rampart.category", b"SAFE")
    os.mkdir(p / "e")
    os.setxattr(p / "e", "user.rampart.category", b"EDITED")
    unmount(m)
    # ...and, since files have them, auto answers both from then on: the contracts hold for
    # a file opened again and across kill -9.
    m.opts = list(LONG)
    remount(m)
    assert kernel_requests(m) == ("answered", "answered")
    log = (m.store / "rampart.log").read_text()
    assert "has the category SAFE" in log and "has the category EDITED" in log, log
    fd = os.open(p / "f", os.O_WRONLY)
    os.pwrite(fd, b"acknowledged", 0)
    with open(p / "e" / "notes", "wb") as f:
        f.write(b"closed")
    (p / "soon").write_bytes(b"lost")
    crash(m)  # f still open
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(p / "f") == b"acknowledged"
    assert read_file(p / "e" / "notes") == b"closed"
    assert not (p / "soon").exists(), "a SOON file was durable without a sync"
    unmount(m)
    assert_no_panic(m)


def test_a_config_that_is_wrong_refuses_the_mount_naming_the_line(test_base, rampart_env,
                                                                   cleanup_mounts):
    m = Mount(test_base, "bad-config", env=rampart_env)
    cleanup_mounts.append(m)
    m.mkfs()
    m.path.mkdir(mode=0o755)
    for config, line, why in [
        ('[categories]\nX = "lm=5"\n', 2, "malformed spec"),
        ('\n[[rules]]\nglob = "*.o"\ncategory = "FAST"\n', 4, 'unknown category "FAST"'),
        ('default = "ROBUST"\n', 1, "needs a second copy (DA2): this store has no mirror"),
        ('[[rules]]\nglob = "*.o"\n', 1, "missing field"),
        ("[categories\n", 1, ""),
    ]:
        (m.store / "rampart.toml").write_text(config)
        r = m.cli("mount", m.store, m.path)
        assert r.returncode != 0, f"mounted with {config!r}"
        assert f"rampart.toml:{line}: " in r.stderr and why in r.stderr, r.stderr
        assert not os.path.ismount(m.path)
    (m.store / "rampart.toml").write_text(CONFIG)
    m.mount(mkfs=False)
    unmount(m)


def test_rules_directories_and_attributes_give_the_category(test_base, rampart_env,
                                                            cleanup_mounts):
    m = configured(test_base, rampart_env, "where-from", cleanup_mounts)
    p = m.path
    (p / "a.c").write_bytes(b"int x;\n")
    (p / "a.o").write_bytes(b"\x7fELF")
    (p / "k.safe").write_bytes(b"safe")
    assert [category(p / n) for n in ("a.c", "a.o", "k.safe")] == ["SOON", "GENERATED", "SAFE"]
    assert os.getxattr(p / "k.safe", "user.rampart.spec") == b"lm=before_write"
    # getfattr shows it; -d lists it only where it was set.
    r = run(["getfattr", "-n", "user.rampart.category", "--only-values", str(p / "a.o")])
    assert r.stdout == "GENERATED"
    assert "user.rampart.category" not in os.listxattr(p / "a.c")
    assert "user.rampart.category" in os.listxattr(p / "a.o")
    # A directory's category goes to what is created in it, below rules.
    os.mkdir(p / "scratch")
    r = run(["setfattr", "-n", "user.rampart.category", "-v", "scratch", str(p / "scratch")])
    assert r.returncode == 0, r.stderr
    os.makedirs(p / "scratch" / "sub")
    (p / "scratch" / "sub" / "t").write_bytes(b"t")
    (p / "scratch" / "sub" / "x.safe").write_bytes(b"x")
    assert category(p / "scratch" / "sub" / "t") == "SCRATCH"
    assert category(p / "scratch" / "sub" / "x.safe") == "SAFE"
    # The attribute wins over a rule; removing it gives the store default.
    os.setxattr(p / "a.o", "user.rampart.spec", b"lm=10min")
    assert category(p / "a.o") == "spec:lm=10min"
    os.removexattr(p / "a.o", "user.rampart.spec")
    assert category(p / "a.o") == "SOON"
    # Bad names are refused and change nothing.
    for bad in (b"FAST", b"ROBUST", b"PARANOID"):
        with pytest.raises(OSError) as e:
            os.setxattr(p / "k.safe", "user.rampart.category", bad)
        assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError):
        os.setxattr(p / "k.safe", "user.rampart.spec", b"lm=before_write,da1=5s")
    assert category(p / "k.safe") == "SAFE"
    with pytest.raises(OSError) as e:
        os.setxattr(p / "k.safe", "trusted.rampart.category", b"api TEMPORARY")
    assert e.value.errno == errno.EPERM
    # Permission checks are those of user attributes: another user may not change it.
    os.chmod(p / "a.c", 0o644)
    r = run_as_nobody(["setfattr", "-n", "user.rampart.category", "-v", "TEMPORARY",
                       str(p / "a.c")])
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr
    assert category(p / "a.c") == "SOON"
    # Categories survive a remount.
    unmount(m)
    remount(m)
    assert category(p / "scratch" / "sub") == "SCRATCH"
    assert os.listdir(p / "scratch" / "sub") == ["x.safe"], "SCRATCH files are gone"
    assert category(p / "k.safe") == "SAFE"
    unmount(m)
    assert_no_panic(m)


@pytest.mark.parametrize("writeback", ["on", "off"], ids=["writeback-cache", "no-writeback-cache"])
def test_a_safe_write_is_durable_when_write_returns(test_base, rampart_env, cleanup_mounts,
                                                   writeback):
    m = configured(test_base, rampart_env, f"safe-{writeback}", cleanup_mounts,
                   opts=LONG + ("--writeback-cache", writeback))
    p = m.path
    # Created SAFE by a rule, and one made SAFE by its attribute and opened again.
    created = os.open(p / "new.safe", os.O_WRONLY | os.O_CREAT, 0o644)
    (p / "later").write_bytes(b"")
    assert kernel_requests(m)[0] == "answered"  # rampart.toml names SAFE
    os.setxattr(p / "later", "user.rampart.category", b"SAFE")
    reopened = os.open(p / "later", os.O_WRONLY)
    os.write(created, b"written before the crash, never closed")
    os.pwrite(reopened, b"also acknowledged", 0)
    # A SOON file written after them: nothing commits it within five minutes.
    (p / "soon").write_bytes(b"lost")
    crash(m)  # both SAFE files still open
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(p / "new.safe") == b"written before the crash, never closed"
    assert read_file(p / "later") == b"also acknowledged"
    assert not (p / "soon").exists(), "a SOON file was durable without a sync"
    unmount(m)
    assert_no_panic(m)


@pytest.mark.parametrize("writeback", ["on", "off"], ids=["writeback-cache", "no-writeback-cache"])
def test_an_edited_file_is_durable_when_close_returns(test_base, rampart_env, cleanup_mounts,
                                                     writeback):
    m = configured(test_base, rampart_env, f"edited-{writeback}", cleanup_mounts,
                   opts=LONG + ("--writeback-cache", writeback))
    p = m.path
    assert kernel_requests(m) == ("answered", "answered")  # rampart.toml names EDITED
    os.mkdir(p / "docs")
    os.setxattr(p / "docs", "user.rampart.category", b"edited")
    data = os.urandom(300_000)
    with open(p / "docs" / "paper.tex", "wb") as f:
        f.write(data)
    assert category(p / "docs" / "paper.tex") == "EDITED"
    crash(m)
    assert_fsck_clean_after_crash(m)
    remount(m)
    assert read_file(p / "docs" / "paper.tex") == data
    unmount(m)
    assert_no_panic(m)


@pytest.mark.parametrize("end", ["remount", "kill-9"])
def test_temporary_files_leave_no_data_in_the_store_and_are_gone(test_base, rampart_env,
                                                                  cleanup_mounts, end):
    m = configured(test_base, rampart_env, f"temporary-{end}", cleanup_mounts)
    p = m.path
    os.mkdir(p / "tmp")
    os.setxattr(p / "tmp", "user.rampart.category", b"TEMPORARY")
    (p / "kept").write_bytes(b"kept")
    os.sync()
    journal_before = journal_len(m)
    names = [f"{NAME_MARKER}-{i}" for i in range(20)]
    for name in names:
        fd = os.open(p / "tmp" / name, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, MARKER * 3000)
        os.fsync(fd)  # answered at once: nothing of it is kept (decision 0065)
        os.close(fd)
    assert category(p / "tmp" / names[0]) == "TEMPORARY"
    os.makedirs(p / "tmp" / "a" / "b")
    os.symlink(names[0], p / "tmp" / "a" / "b" / "link")
    os.rename(p / "tmp" / names[1], p / "tmp" / "a" / names[1])
    os.unlink(p / "tmp" / names[2])
    os.sync()
    assert store_holds(m, MARKER) == []
    assert store_holds(m, NAME_MARKER.encode()) == []
    # Nothing at all: not their names either (decision 0066).
    assert journal_len(m) == journal_before
    if end == "kill-9":
        os.fsync(os.open(p / "kept", os.O_RDONLY))
        crash(m)
        assert_fsck_clean_after_crash(m)
    else:
        unmount(m)
    assert store_holds(m, MARKER) == []
    assert store_holds(m, NAME_MARKER.encode()) == []
    remount(m)
    assert os.listdir(p / "tmp") == []
    assert category(p / "tmp") == "TEMPORARY"
    # A SAFE file in a temporary tree makes its directories durable before write returns.
    os.makedirs(p / "tmp" / "x" / "y")
    (p / "tmp" / "x" / "y" / f"{NAME_MARKER}-scratch").write_bytes(MARKER)
    fd = os.open(p / "tmp" / "x" / "y" / "kept.safe", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"safe in a temporary tree")
    crash(m)
    remount(m)
    assert read_file(p / "tmp" / "x" / "y" / "kept.safe") == b"safe in a temporary tree"
    assert os.listdir(p / "tmp" / "x" / "y") == ["kept.safe"]
    assert read_file(p / "kept") == b"kept"
    unmount(m)
    # Not even in the final checkpoint of the clean unmount.
    assert store_holds(m, MARKER) == []
    assert store_holds(m, NAME_MARKER.encode()) == []
    assert_no_panic(m)


@pytest.mark.parametrize("end", ["remount", "kill-9"])
def test_disposable_files_hold_nothing(test_base, rampart_env, cleanup_mounts, end):
    m = configured(test_base, rampart_env, f"disposable-{end}", cleanup_mounts)
    p = m.path
    with open(p / "out.null", "wb") as f:
        assert f.write(MARKER * 1000) == len(MARKER) * 1000
    assert read_file(p / "out.null") == b""
    r = run(["sh", "-c", f"echo hello > {p}/log.null && cat {p}/log.null"])
    assert r.returncode == 0 and r.stdout == ""
    if end == "kill-9":
        crash(m)
        assert_fsck_clean_after_crash(m)
    else:
        unmount(m)
    assert store_holds(m, MARKER) == []
    remount(m)
    assert not (p / "out.null").exists()
    unmount(m)
    assert_no_panic(m)


BUILD_CONFIG = """\
[[rules]]
glob = "*.[ch]"
category = "EDITED"

[[rules]]
glob = "*.o"
category = "GENERATED"

[[rules]]
glob = "build/**"
category = "GENERATED"
"""

MAKEFILE = """\
build/hello: build/main.o build/util.o
\tcc -o $@ $^
build/%.o: src/%.c src/util.h
\tmkdir -p build
\tcc -c -o $@ $<
"""


def rampart_stat(m, *paths):
    r = m.cli("stat", "--json", *paths)
    assert r.returncode == 0, r.stderr
    return {os.path.relpath(f["path"], m.path): f for f in json.loads(r.stdout)}


def test_a_c_build_gets_generated_outputs_and_edited_sources(test_base, rampart_env,
                                                             cleanup_mounts):
    m = configured(test_base, rampart_env, "build", cleanup_mounts, config=BUILD_CONFIG)
    p = m.path / "proj"
    os.makedirs(p / "src")
    (p / "src" / "util.h").write_text("int twice(int);\n")
    (p / "src" / "util.c").write_text('#include "util.h"\nint twice(int x) { return 2 * x; }\n')
    (p / "src" / "main.c").write_text(
        '#include <stdio.h>\n#include "util.h"\nint main(void) { printf("%d\\n", twice(21)); }\n')
    (p / "Makefile").write_text(MAKEFILE)
    r = run(["make", "-C", str(p)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert run([str(p / "build" / "hello")]).stdout == "42\n"
    files = ["proj/src/main.c", "proj/src/util.h", "proj/build/main.o", "proj/build/hello",
             "proj/Makefile"]
    stat = rampart_stat(m, *(str(m.path / f) for f in files))
    got = {f: (stat[f]["category"], stat[f]["origin"]) for f in files}
    assert got == {
        "proj/src/main.c": ("EDITED", "rule1"),
        "proj/src/util.h": ("EDITED", "rule1"),
        "proj/build/main.o": ("GENERATED", "rule2"),
        "proj/build/hello": ("GENERATED", "rule3"),
        "proj/Makefile": ("SOON", "default"),
    }
    assert stat["proj/build/main.o"]["rule"]["pattern"] == "*.o"
    assert stat["proj/build/main.o"]["rule"]["line"] == 6
    assert stat["proj/src/main.c"]["spec"] == "lm=until_close"
    # rampart rules says which rule a path matches, and why.
    r = m.cli("rules", str(p / "src" / "new.c"), str(p / "build" / "hello"), str(p / "README"))
    assert r.returncode == 0, r.stderr
    assert "1. glob \"*.[ch]\" on the name → EDITED  (line 2)" in r.stdout, r.stdout
    assert "a file created here would be EDITED (rule 1" in r.stdout, r.stdout
    assert "rule 3 matches (glob \"build/**\") and gave it GENERATED" in r.stdout, r.stdout
    assert "no rule matches" in r.stdout, r.stdout
    # The sources were closed, so they are durable (EDITED); a kill -9 keeps them.
    sources = {f: read_file(m.path / f) for f in files[:2]}
    crash(m)
    remount(m)
    for f, data in sources.items():
        assert read_file(m.path / f) == data
    unmount(m)
    assert_no_panic(m)


def test_stat_and_rules_say_what_is_wrong(mnt):
    r = mnt.cli("stat", "/proc/self")
    assert r.returncode != 0 and "is not on a rampart mount" in r.stderr
    r = mnt.cli("stat", str(mnt.path / "missing"))
    assert r.returncode != 0 and "missing" in r.stderr and "No such file" in r.stderr
    os.symlink("x", mnt.path / "link")
    r = mnt.cli("stat", str(mnt.path / "link"))
    assert r.returncode != 0 and "link" in r.stderr


DEADLINE_CATEGORIES = ["SOON", "SOMETIME", "EVENTUAL", "GENERATED", "MULTIMEDIA", "COLLECTION",
                       "DATABASE"]


def test_data_older_than_its_deadline_survives_kill_9(test_base, rampart_env, cleanup_mounts):
    """Without fsync or close: once the commit that meets the deadline has run (the persister
    meets every deadline at its commit interval, docs/CATEGORIES.md), kill -9 keeps it."""
    m = configured(test_base, rampart_env, "deadlines", cleanup_mounts, config="",
                   opts=("--commit-interval", "1s"))
    p = m.path
    data = {}
    fds = []
    for name in DEADLINE_CATEGORIES:
        path = p / name.lower()
        path.write_bytes(b"")
        os.setxattr(path, "user.rampart.category", name.encode())
        fd = os.open(path, os.O_WRONLY)
        data[name] = os.urandom(10_000)
        os.write(fd, data[name])
        fds.append(fd)  # kept open: no close, no fsync
    # The page flusher hands the kernel's dirty pages to the daemon within half an interval
    # (decision 0026); then the next commit makes them durable.
    total = sum(len(d) for d in data.values())

    def committed():
        s = m.status()
        return s["data_bytes"] >= total and s["persistence"]["ops_pending"] == 0

    assert wait_until(committed, 60), m.status()
    crash(m)
    assert_fsck_clean_after_crash(m)
    remount(m)
    for name in DEADLINE_CATEGORIES:
        assert read_file(p / name.lower()) == data[name], name
        assert category(p / name.lower()) == name
    unmount(m)
    assert_no_panic(m)


HELD_CONFIG = """\
[categories]
OBJECT = "lm=10min"

[[rules]]
glob = "*.o"
category = "OBJECT"
"""
HELD_MARKER = b"held-object-marker-7d21"


@pytest.mark.parametrize("end", ["umount", "kill-9"])
def test_held_files_reach_the_store_only_if_they_live_long_enough(test_base, rampart_env,
                                                                    cleanup_mounts, end):
    """Files whose category allows ten minutes are held out of the store (decision 0090): one
    created and deleted meanwhile costs the store nothing; fsync, a rename over a known file
    and a clean unmount make them present; kill -9 before their deadline loses the others."""
    m = configured(test_base, rampart_env, f"held-{end}", cleanup_mounts, config=HELD_CONFIG)
    p = m.path
    os.mkdir(p / "build")
    main = p / "main.c"
    main.write_bytes(b"int main(void) { return 0; }\n")
    sync_point = os.open(main, os.O_RDONLY)
    os.fsync(sync_point)  # SOON: durable now, with everything before it
    journal_before = journal_len(m)
    # A build's temporary object: written, closed, deleted within its deadline.
    with open(p / "build" / "x.o", "wb") as f:
        f.write(HELD_MARKER * 1000)
    assert category(p / "build" / "x.o") == "OBJECT"
    status = m.status()
    assert (status["held_files"], status["categories"]["OBJECT"]["held_files"]) == (1, 1), status
    assert status["categories"]["SOON"]["held_files"] == 0, status["categories"]
    os.unlink(p / "build" / "x.o")
    status = m.status()
    assert (status["held_files"], status["categories"]["OBJECT"]["held_files"]) == (0, 0), status
    os.fsync(sync_point)
    assert journal_len(m) == journal_before, "a deleted held file reached the journal"
    assert store_holds(m, HELD_MARKER) == []
    # Kept, not synced: held until its deadline (five minutes away at least).
    (p / "build" / "y.o").write_bytes(b"kept object " * 100)
    # fsync'd: present at once.
    with open(p / "build" / "z.o", "wb") as f:
        f.write(b"synced object")
        f.flush()
        os.fsync(f.fileno())
    # The atomic-replace pattern over a file the store knows: never both lost.
    with open(p / "build" / "lib.o", "wb") as f:
        f.write(b"old library")
        f.flush()
        os.fsync(f.fileno())
    (p / "build" / "lib.o.new.o").write_bytes(b"new library")
    os.replace(p / "build" / "lib.o.new.o", p / "build" / "lib.o")
    os.fsync(sync_point)
    stat = rampart_stat(m, str(p / "build" / "y.o"), str(p / "build" / "z.o"))
    held = stat["build/y.o"]
    assert held["held_for_ms"] is not None and held["held_until"].endswith("UTC"), held
    assert held["bytes_not_in_store"] == 1200, held
    assert stat["build/z.o"]["held_for_ms"] is None, stat["build/z.o"]
    text = m.cli("stat", str(p / "build" / "y.o"))
    assert "held:      out of the store until" in text.stdout, text.stdout
    status = m.status()
    assert status["categories"]["OBJECT"]["bytes_at_risk"] >= 1200, status["categories"]
    # y.o only: z.o was synced, lib.o.new.o made present by its rename over a known file.
    assert status["categories"]["OBJECT"]["held_files"] == 1, status["categories"]
    assert "held_files: 1 " in m.cli("status", str(p)).stdout
    os.close(sync_point)
    if end == "kill-9":
        crash(m)
        assert_fsck_clean_after_crash(m)
    else:
        unmount(m)
    remount(m)
    assert read_file(main) == b"int main(void) { return 0; }\n"
    assert read_file(p / "build" / "z.o") == b"synced object"
    assert read_file(p / "build" / "lib.o") == b"new library"
    assert not (p / "build" / "x.o").exists()
    if end == "kill-9":
        assert not (p / "build" / "y.o").exists(), "a held file survived kill -9"
    else:
        assert read_file(p / "build" / "y.o") == b"kept object " * 100
        assert category(p / "build" / "y.o") == "OBJECT"
    assert store_holds(m, HELD_MARKER) == []
    unmount(m)
    assert_no_panic(m)


def test_a_held_file_larger_than_a_journal_batch_is_made_present_whole(test_base, rampart_env,
                                                                       cleanup_mounts):
    """A held file on the memory tier larger than one journal batch (80 MiB; the disk tier
    off) is made present as one group of records over several batches, each but the last
    flagged as continued (decision 0103): fsync'd, it is there whole after kill -9, and fsck
    of the crashed store is clean; unsynced, it is simply absent."""
    opts = LONG + ("--large-file-threshold", "off")
    m = configured(test_base, rampart_env, "held-large", cleanup_mounts, config=HELD_CONFIG,
                   opts=opts)
    p = m.path
    size = 80 << 20
    data = bytes(range(256)) * (size // 256)
    journal_before = journal_len(m)
    with open(p / "big.o", "wb") as f:
        f.write(data)
        f.flush()
        assert m.status()["held_files"] == 1
        os.fsync(f.fileno())
    assert m.status()["held_files"] == 0
    assert journal_len(m) - journal_before > size, "the file's bytes are not in the journal"
    (p / "kept.o").write_bytes(b"held, never synced")
    crash(m)
    report = assert_fsck_clean_after_crash(m)
    assert report["clean"], report
    remount(m)
    assert os.path.getsize(p / "big.o") == size
    assert read_file(p / "big.o") == data
    assert not (p / "kept.o").exists(), "a held file survived kill -9"
    unmount(m)
    assert_no_panic(m)

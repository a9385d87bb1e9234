#!/usr/bin/env python3
"""Medians (and ranges) over rounds.sh's runs, per label: µs per transaction of postmark's
wall, postmark's CPU, each daemon thread group's CPU and run-queue wait, and minor faults.
Usage: median.py OUTDIR TRANSACTIONS"""
import collections, glob, os, re, statistics, sys
out, tx = sys.argv[1], int(sys.argv[2])
rows = collections.defaultdict(lambda: collections.defaultdict(list))
loads = collections.defaultdict(list)
for d in sorted(glob.glob(f"{out}/*.*")):
    label = os.path.basename(d).rsplit(".", 1)[0]
    try:
        wall = float(open(f"{d}/time.txt").read().split()[-1].split("_")[0])
    except (FileNotFoundError, IndexError):
        continue
    r = rows[label]
    r["wall"].append(wall * 1e6 / tx)
    s = open(f"{d}/postmark-stat.txt").read()
    m = re.search(r"([\d.,]+)\s+msec\s+task-clock", s)
    r["postmark cpu"].append(float(m.group(1).replace(",", "")) * 1e3 / tx)
    loads[label].append(float(open(f"{d}/load.txt").read().split("average:")[1].split(",")[0]))
    def load(name):
        return {l.split()[0]: (l.split()[1], *map(int, l.split()[2:])) for l in open(f"{d}/{name}")}
    before, after = load("threads-before.txt"), load("threads-after.txt")
    g = collections.defaultdict(lambda: [0, 0, 0])
    for tid, (comm, run, wait, _sl, minflt, *_rest) in after.items():
        b = before.get(tid, (comm, 0, 0, 0, 0))
        k = re.sub(r"\d+$", "N", comm)
        g[k][0] += run - b[1]; g[k][1] += wait - b[2]; g[k][2] += minflt - b[4]
    for k in ("fuser-qN", "fuser-N", "committer", "checkpointer", "memory-trim", "page-flusher"):
        if k in g or k == "fuser-qN":
            r[f"{k} cpu"].append(g[k][0] / 1e3 / tx)
            r[f"{k} runq-wait"].append(g[k][1] / 1e3 / tx)
    r["daemon minor faults"].append(sum(v[2] for v in g.values()) / tx)
    r["critical-path cpu (postmark + fuser-qN)"].append(r["postmark cpu"][-1] + g["fuser-qN"][0] / 1e3 / tx)
labels = list(rows)
keys = []
for l in labels:
    for k in rows[l]:
        if k not in keys: keys.append(k)
print("| µs per transaction (median, range) | " + " | ".join(f"{l} (n={len(rows[l]['wall'])})" for l in labels) + " |")
print("|---|" + "--:|" * len(labels))
for k in keys:
    cells = []
    for l in labels:
        v = rows[l].get(k)
        cells.append(f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})" if v else "—")
    print(f"| {k} | " + " | ".join(cells) + " |")
print("| load average (1 min) | " + " | ".join(f"{min(loads[l]):.1f}–{max(loads[l]):.1f}" for l in labels) + " |")

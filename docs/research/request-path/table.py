#!/usr/bin/env python3
"""table.py OUTBASE: medians over the runs of each binary (profile_rounds.sh's output) of
daemon task-clock per 10,000 requests and of samples per 10,000 requests by category."""
import glob, os, re, statistics, sys
from collections import defaultdict

base = sys.argv[1]
by_bin = defaultdict(lambda: defaultdict(list))
for d in sorted(glob.glob(f"{base}/*/")):
    name = os.path.basename(d.rstrip("/")).rsplit("-", 1)[0]
    stat = open(f"{d}/perf-stat.txt").read()
    ms = float(re.search(r"([\d,.]+)\s+msec task-clock", stat).group(1).replace(",", ""))
    cs = int(re.search(r"([\d,]+)\s+context-switches", stat).group(1).replace(",", ""))
    summary = open(d.rstrip("/") + ".summary").read()
    n = int(re.search(r"^requests (\d+)", summary, re.M).group(1))
    by_bin[name]["task-clock ms per 10,000 requests"].append(ms * 10000 / n)
    by_bin[name]["context switches per request"].append(cs / n)
    for line in open(f"{d}/classified.txt"):
        m = re.match(r"\s*[\d.]+ %\s+(.*?)\s+(\d+) samples per 10,000", line)
        if m:
            by_bin[name][m.group(1)].append(int(m.group(2)))
rows = []
for b in by_bin.values():
    for k in b:
        if k not in rows:
            rows.append(k)
names = list(by_bin)
print("| | " + " | ".join(names) + " |")
print("|---|" + "--:|" * len(names))
for r in rows:
    cells = []
    for nm in names:
        v = by_bin[nm].get(r, [])
        if not v:
            cells.append("")
            continue
        med = statistics.median(v)
        fmt = "{:.2f}" if med < 10 else "{:.0f}"
        cells.append(fmt.format(med) + " (" + "–".join(fmt.format(x) for x in (min(v), max(v))) + ")")
    print(f"| {r} | " + " | ".join(cells) + " |")

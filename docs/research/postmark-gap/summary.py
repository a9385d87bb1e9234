#!/usr/bin/env python3
"""Summary of one run.sh output directory: µs per transaction of postmark's wall, user and sys
time, and each daemon thread group's CPU and run-queue wait (from schedstat)."""
import re, sys, collections
out, tx = sys.argv[1], int(sys.argv[2])
def load(name):
    d = {}
    for line in open(f"{out}/{name}"):
        tid, comm, *nums = line.split()
        d[tid] = (comm, *map(int, nums))
    return d
before, after = load("threads-before.txt"), load("threads-after.txt")
groups = collections.defaultdict(lambda: [0] * 10)
for tid, (comm, *nums) in after.items():
    b = before.get(tid, (comm, *[0] * len(nums)))[1:]
    g = groups[re.sub(r"\d+$", "N", comm)]
    for i, v in enumerate(nums):
        g[i] += v - b[i]
    g[9] += 1
wall, user, sys_ = (float(x) for x in open(f"{out}/time.txt").read().split()[-1].split("_"))
pm = open(f"{out}/postmark.txt").read()
m = re.search(r"(\d+) seconds of transactions", pm)
print(f"{out}: postmark wall {wall*1e6/tx:.1f} user {user*1e6/tx:.1f} sys {sys_*1e6/tx:.1f} µs/tx (whole run / tx); load {open(out+'/load.txt').read().split('average:')[1].strip()}")
for comm, (run, wait, sl, minflt, majflt, ut, st, vol, invol, n) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
    if run == 0: continue
    share = f"user {100*ut/max(ut+st,1):3.0f} %" if ut + st else "user   - "
    print(f"  {comm:12} x{n}: cpu {run/1e3/tx:6.2f} µs/tx ({share})  runq-wait {wait/1e3/tx:6.2f} µs/tx"
          f"  switches {vol/tx:4.2f}+{invol/tx:4.2f} invol /tx  minor faults {minflt/tx:5.2f}/tx")
s = open(f"{out}/postmark-stat.txt").read() if __import__("os").path.exists(f"{out}/postmark-stat.txt") else ""
def ev(name):
    m = re.search(r"([\d.,]+)\s+(?:msec\s+)?" + name, s)
    return float(m.group(1).replace(",", "")) if m else float("nan")
if s:
    print(f"  postmark: cpu {ev('task-clock')*1e3/tx:6.2f} µs/tx  switches {ev('context-switches')/tx:4.2f}/tx"
          f"  migrations {ev('cpu-migrations')/tx:5.3f}/tx  page faults {ev('page-faults')/tx:4.2f}/tx")

#!/usr/bin/env python3
"""Where postmark's wall time went, from `perf sched timehist` (run.sh with PERF_SCHED=1):
postmark running; postmark woken but waiting for its CPU (and who ran instead); postmark
asleep (waiting for the FUSE reply: the daemon's queue threads running, woken but waiting
for a CPU, and who ran instead). Usage: critical.py OUTDIR"""
import collections, re, subprocess, sys
out = sys.argv[1]
txt = subprocess.run(["perf", "sched", "timehist", "-i", f"{out}/sched.data"],
                     capture_output=True, text=True).stdout
line_re = re.compile(r"^\s*(\d+\.\d+)\s+\[(\d+)\]\s+(.+?)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s*$")
slices = []  # (cpu, start, end, task) for every run slice
pm = None
for l in txt.splitlines():
    m = line_re.match(l)
    if not m:
        continue
    t, cpu, task, wait, delay, run = m.groups()
    t, wait, delay, run = float(t) * 1e3, float(wait), float(delay), float(run)  # ms
    slices.append((int(cpu), t - run, t, task.strip(), wait, delay))
    if task.strip().startswith("postmark[") and pm is None:
        pass
runs = collections.Counter(s[3] for s in slices if s[3].startswith("postmark["))
pm = max(runs, key=lambda k: sum(s[2] - s[1] for s in slices if s[3] == k))
def group(task):
    name = re.sub(r"\[.*", "", task)
    if task == pm: return "postmark"
    if task.startswith("<idle>"): return "idle"
    return name
# daemon: the tgid whose fuser-q threads ran most
daemon = collections.Counter(re.search(r"/(\d+)\]", s[3]).group(1) for s in slices
                             if s[3].startswith("fuser-q") and "/" in s[3]).most_common(1)[0][0]
def who(task):
    if task == pm: return "postmark"
    if f"/{daemon}]" in task:
        return "daemon " + re.sub(r"\d+\[.*", "N", task) if not task.startswith("fuser-q") else "daemon fuser-q"
    if task.startswith("<idle>"): return "idle"
    return "other: " + re.sub(r"\[.*", "", task)
pm_slices = sorted((s for s in slices if s[3] == pm), key=lambda s: s[1])
first, last = pm_slices[0][1], pm_slices[-1][2]
# Per CPU, the slices in time order, to find who ran in an interval.
by_cpu = collections.defaultdict(list)
for s in slices:
    by_cpu[s[0]].append(s)
for c in by_cpu: by_cpu[c].sort(key=lambda s: s[1])
import bisect
starts = {c: [s[1] for s in v] for c, v in by_cpu.items()}
def ran_in(cpu, a, b, acc):
    v = by_cpu[cpu]; i = max(bisect.bisect_left(starts[cpu], a) - 1, 0)
    covered = 0.0
    while i < len(v) and v[i][1] < b:
        lo, hi = max(a, v[i][1]), min(b, v[i][2])
        if hi > lo:
            acc[who(v[i][3])] += hi - lo; covered += hi - lo
        i += 1
    if b - a > covered: acc["idle or untraced"] += b - a - covered
acc_run = sum(s[2] - s[1] for s in pm_slices)
delay = collections.Counter(); asleep = collections.Counter()
prev_end = None
for s in pm_slices:
    cpu, start, end, task, wait, dly = s
    if prev_end is not None:
        wake = start - dly
        # asleep from prev_end to wake: what ran on every CPU then (the reply is being made)
        if wake > prev_end:
            for c in by_cpu: ran_in(c, prev_end, wake, asleep)
        ran_in(cpu, max(wake, prev_end), start, delay)
    prev_end = end
# The daemon's queue threads: woken (by postmark's request) but waiting for a CPU, and who
# ran instead.
q_delay = collections.Counter(); q_n = 0
for s in slices:
    cpu, start, end, task, wait, dly = s
    if task.startswith("fuser-q") and f"/{daemon}]" in task and dly > 0:
        ran_in(cpu, start - dly, start, q_delay); q_n += 1
wall = last - first
print(f"{out}: postmark {pm}, wall {wall:.0f} ms (first to last slice)")
print(f"  postmark running                         {acc_run:8.1f} ms")
print(f"  postmark woken, waiting for its CPU      {sum(delay.values()):8.1f} ms, which ran instead:")
for k, v in delay.most_common(8): print(f"      {k:34} {v:8.1f} ms")
print(f"  daemon queue threads woken, waiting for their CPU {sum(q_delay.values()):8.1f} ms over {q_n} wake-ups; which ran instead:")
for k, v in q_delay.most_common(8): print(f"      {k:34} {v:8.1f} ms")
tot = sum(asleep.values())
print(f"  postmark asleep (both CPUs' time summed) {tot:8.1f} ms CPU-time over {tot/len(by_cpu):.1f} ms wall; what ran:")
for k, v in asleep.most_common(10): print(f"      {k:34} {v:8.1f} ms")

# The whole wall time on postmark's CPU (it does not migrate: perf stat counts 0-1
# migrations, and its requests go to that CPU's queue thread), by who had the CPU.
cpus = collections.Counter(s[0] for s in pm_slices)
home = cpus.most_common(1)[0][0]
on_home = collections.Counter()
ran_in(home, first, last, on_home)
print(f"  postmark's CPU {home} ({100 * cpus[home] / len(pm_slices):.0f} % of its slices there), "
      f"{last - first:.0f} ms, by who ran on it:")
for k, v in on_home.most_common(10):
    print(f"      {k:34} {v:8.1f} ms")

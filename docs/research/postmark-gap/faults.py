#!/usr/bin/env python3
"""Splits the daemon's page faults (run.sh with PERF_FAULTS=1: OUT/faults.data) by call site.
Each fault is keyed by its thread group, what touched the page (the innermost frame: memcpy,
memset, malloc's own bookkeeping, ...) and the first frames of rampart's or fuser's code above
the allocator and the standard library. With the faulting addresses (perf record -d) it also
counts the distinct pages of each site, and how many faults were on a page that had faulted
before (memory given back to the kernel and touched again).
Usage: faults.py OUT [TX] [depth]"""
import collections, re, subprocess, sys
out = sys.argv[1]
tx = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
depth = int(sys.argv[3]) if len(sys.argv) > 3 else 2
text = subprocess.run(["perf", "script", "-i", f"{out}/faults.data", "-F", "comm,addr,ip,sym"],
                      capture_output=True, text=True).stdout
OURS = re.compile(r"^(<)?(rampart_|fuser::|<rampart_|<fuser)")
NOISE = re.compile(r"(core::ptr|alloc::|core::slice|core::iter|<alloc::|<core::|std::|core::ops|"
                   r"core::panic|hashbrown|::fmt::)")
def name(line):
    parts = line.split(None, 1)
    sym = parts[1] if len(parts) > 1 else "?"
    sym = re.sub(r"\+0x[0-9a-f]+.*$", "", sym)
    sym = re.sub(r" \(inlined\)$", "", sym.strip())
    return re.sub(r"<impl [^>]*>::", "", sym)
counts, pages, again = collections.Counter(), collections.defaultdict(set), collections.Counter()
seen = set()
total = repeated = 0
for sample in text.split("\n\n"):
    lines = [l for l in sample.strip().split("\n") if l.strip()]
    if not lines:
        continue
    head = lines[0].split()
    comm = re.sub(r"\d+$", "N", head[0])
    page = int(head[1], 16) >> 12 if len(head) > 1 else None
    frames = [name(l.strip()) for l in lines[1:]]
    total += 1
    toucher = frames[0] if frames else "(no stack)"
    site = [f for f in frames if OURS.search(f) and not NOISE.match(f)][:depth]
    key = (comm, toucher, " < ".join(site))
    counts[key] += 1
    if page is not None:
        pages[key].add(page)
        if page in seen:
            again[key] += 1
            repeated += 1
        seen.add(page)
print(f"{out}: {total} faults, {total/tx:.2f} per transaction; {len(seen)} distinct pages "
      f"({len(seen)*4/1024:.1f} MiB); {repeated} faults on a page that had faulted before")
print(f"{'faults':>7} {'share':>7} {'per tx':>7} {'pages':>7} {'again':>6}  thread     toucher / site")
for key, n in counts.most_common(25):
    comm, toucher, site = key
    print(f"{n:7} {100*n/total:6.1f}% {n/tx:7.3f} {len(pages[key]):7} {again[key]:6}  {comm:10} "
          f"{toucher[:34]:34} {site[:150]}")

#!/bin/bash
# Where rampart's daemon CPU goes on a fixed PostMark (Conquest) load: perf stat task-clock of the
# daemon per 10,000 FUSE requests, and (with PERF_RECORD=1) a call-graph profile.
# Usage: [FLOOR=1] [PERF_RECORD=1] measure.sh BIN OUTDIR [transactions]   (root; fuse)
set -eu
BIN=${1:?rampart binary}; OUT=${2:?output dir}; TX=${3:-20000}
mkdir -p "$OUT"
W=$(mktemp -d /var/tmp/lean.XXXX)
mkdir -p "$W/mnt"
if [ "${FLOOR:-0}" = 1 ]; then
  # The do-nothing FUSE server with rampart's settings (decision 0070).
  "$BIN" bench-floor "$W/mnt" > "$W/floor.log" 2>&1 &
  PID=$!
  until grep -q ready "$W/floor.log"; do sleep 0.1; done
else
  "$BIN" mkfs "$W/store" >/dev/null
  "$BIN" mount "$W/store" "$W/mnt" ${RAMPART_OPTS:-}
  PID=$("$BIN" status --json "$W/mnt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
fi
counts() {
  if [ "${FLOOR:-0}" = 1 ]; then
    getfattr --only-values -n user.rampart.floor.requests "$W/mnt" | python3 -c 'import json,sys; print(json.dumps({"fuse_requests": json.load(sys.stdin)}))'
  else
    "$BIN" status --json "$W/mnt"
  fi
}
cat > "$W/pm.cfg" <<CFG
set size 512 16384
set number 1000
set seed 42
set transactions $TX
set subdirectories 31
set read 512
set write 512
set buffering false
set bias read 8
set bias create 5
set location $W/mnt
run
quit
CFG
counts > "$OUT/status-before.json"
if [ "${PERF_SCHED:-0}" = 1 ]; then
  # Every CPU's scheduler events: how long each thread waited for a CPU once woken.
  perf sched record -o "$OUT/sched.data" -- postmark "$W/pm.cfg" > "$OUT/postmark.txt" 2>&1
elif [ "${PERF_RECORD:-0}" = 1 ]; then
  perf stat ${PER_THREAD:+--per-thread} -e task-clock,context-switches,cpu-migrations -p "$PID" -o "$OUT/perf-stat.txt" -- \
    perf record -q -c ${PERF_PERIOD_NS:-50000} --call-graph dwarf,8192 -p "$PID" -o "$OUT/perf.data" -- \
    postmark "$W/pm.cfg" > "$OUT/postmark.txt" 2>&1
else
  # The daemon's CPU, and PostMark's own (user and kernel: the kernel's FUSE work runs in it).
  perf stat ${PER_THREAD:+--per-thread} -e task-clock,context-switches,cpu-migrations -p "$PID" -o "$OUT/perf-stat.txt" -- \
    perf stat -e task-clock,context-switches,cpu-migrations -o "$OUT/postmark-stat.txt" -- \
    postmark "$W/pm.cfg" > "$OUT/postmark.txt" 2>&1
fi
counts > "$OUT/status-after.json"
uptime > "$OUT/load.txt"
if [ "${FLOOR:-0}" = 1 ]; then umount "$W/mnt"; wait "$PID" || true; else "$BIN" umount "$W/mnt" || umount "$W/mnt"; fi
rm -rf "$W"
python3 - "$OUT" <<'PY'
import json, sys, re, os
out = sys.argv[1]
b = json.load(open(f"{out}/status-before.json")); a = json.load(open(f"{out}/status-after.json"))
def reqs(s):
    r = s.get("fuse_requests", {})
    return {k: v for k, v in r.items()} if isinstance(r, dict) else {}
rb, ra = reqs(b), reqs(a)
n = sum((ra.get(k, 0) - rb.get(k, 0)) for k in ra if isinstance(ra[k], int))
print("requests", n)
lb, la = b.get("fuse_latency", {}), a.get("fuse_latency", {})
for k in sorted(ra, key=lambda k: -(ra[k] - rb.get(k, 0))):
    c = ra[k] - rb.get(k, 0)
    if c <= 0: continue
    t = la.get(k, {}).get("sum_seconds", 0) - lb.get(k, {}).get("sum_seconds", 0)
    tc = la.get(k, {}).get("count", 0) - lb.get(k, {}).get("count", 0)
    print(f"  {k:12} {c:8}  daemon {t*1e6/max(tc,1):7.1f} us each")
st = f"{out}/perf-stat.txt"
if os.path.exists(st):
    for line in open(st):
        m = re.match(r"\s*([\d,.]+)\s+msec task-clock", line)
        if m:
            ms = float(m.group(1).replace(",", ""))
            print(f"task-clock {ms:.0f} ms, {ms*1000/n*10000/1000:.1f} ms per 10,000 requests")
pst = f"{out}/postmark-stat.txt"
if os.path.exists(pst):
    text = open(pst).read()
    m = re.search(r"([\d,.]+)\s+msec task-clock", text)
    e = re.search(r"([\d.]+) seconds time elapsed", text)
    if m and e:
        ms = float(m.group(1).replace(",", ""))
        print(f"postmark task-clock {ms:.0f} ms, {ms*10000/n:.1f} ms per 10,000 requests; "
              f"elapsed {float(e.group(1))*1000*10000/n:.1f} ms per 10,000 requests")
print(open(f"{out}/load.txt").read().strip())
PY

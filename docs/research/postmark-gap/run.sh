#!/bin/bash
# One PostMark run through a FUSE mount (rampart or the floor), with where the time went:
# postmark's wall, user and sys time; each daemon thread's CPU and run-queue wait
# (/proc/PID/task/TID/schedstat before and after); postmark's CPU, switches and migrations
# (perf stat).
# Usage: run.sh rampart|floor BIN OUTDIR [transactions] [files] [-- mount args...]
#   SLICE_NS=N    set the queue threads' EEVDF slice (sched_setattr runtime) first (setslice.c)
#   NICE=N        daemon threads and postmark at nice N (other users' load out of the way)
#   COMMITTER_POLICY=--idle  the committer thread under chrt's policy
#   PERF_SCHED=1  also `perf sched record` every CPU (wake-up latencies; adds overhead)
#   PERF_FAULTS=1 also `perf record -e page-faults --call-graph dwarf` of the daemon during
#                 postmark, into OUTDIR/faults.data (faults.py splits it by call site)
set -eu
KIND=${1:?rampart|floor}; BIN=${2:?binary}; OUT=${3:?outdir}; TX=${4:-10000}; FILES=${5:-1000}
shift $(( $# < 5 ? $# : 5 )); [ "${1:-}" = "--" ] && shift
mkdir -p "$OUT"
W=$(mktemp -d /var/tmp/pmgap.XXXX); mkdir -p "$W/mnt"
if [ "$KIND" = floor ]; then
  # FLOOR_SETSID=1: the floor in its own session, hence its own scheduler autogroup, as
  # rampart's daemon is (it calls setsid); otherwise it shares postmark's.
  if [ "${FLOOR_SETSID:-0}" = 1 ]; then
    setsid "$BIN" bench-floor "$W/mnt" "$@" > "$W/floor.log" 2>&1 &
    until grep -q ready "$W/floor.log"; do sleep 0.1; done
    PID=$(pgrep -n -f "bench-floor $W/mnt")
  else
    "$BIN" bench-floor "$W/mnt" "$@" > "$W/floor.log" 2>&1 & PID=$!
    until grep -q ready "$W/floor.log"; do sleep 0.1; done
  fi
else
  "$BIN" mkfs "$W/store" >/dev/null
  "$BIN" mount "$W/store" "$W/mnt" "$@"
  PID=$("$BIN" status --json "$W/mnt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
fi
# tid comm run_ns runq_wait_ns slices minflt majflt utime stime (ticks) vol_switches invol_switches
threads() { for t in /proc/$PID/task/*; do
  echo "$(basename $t) $(tr ' ' _ < $t/comm) $(cat $t/schedstat) $(sed 's/.*) //' $t/stat | awk '{print $8, $10, $12, $13}') $(awk '/^voluntary/{v=$2} /^nonvoluntary/{n=$2} END{print v, n}' $t/status)"; done; }
cat > "$W/pm.cfg" <<CFG
set size 512 16384
set number $FILES
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
if [ -n "${SLICE_NS:-}" ]; then
  # An EEVDF slice request for the queue threads, set from outside (setslice.c).
  "$(dirname "$0")/setslice" "$SLICE_NS" $(grep -l '^fuser-q' /proc/$PID/task/*/comm | cut -d/ -f5)
fi
if [ -n "${NICE:-}" ]; then
  # Daemon and postmark both at this nice value: other users' CPU load out of the picture.
  for t in /proc/$PID/task/*; do renice -n "$NICE" -p "$(basename $t)" >/dev/null; done
fi
if [ -n "${COMMITTER_POLICY:-}" ]; then
  # e.g. --idle or --batch: the committer thread under another scheduling policy.
  for t in $(grep -l '^committer' /proc/$PID/task/*/comm | cut -d/ -f5); do chrt $COMMITTER_POLICY -p 0 $t; done
fi
if [ "${PERF_FAULTS:-0}" = 1 ]; then
  # Every page fault of the daemon with its call graph (a sample per fault).
  perf record -q -m 8192 -d -e page-faults -c 1 --call-graph dwarf,8192 -p "$PID" -o "$OUT/faults.data" \
    > "$OUT/perf-record.log" 2>&1 & PERF_PID=$!
  sleep 1
fi
threads > "$OUT/threads-before.txt"
PM="nice -n ${NICE:-0} /usr/bin/time -f %e_%U_%S -o $OUT/time.txt postmark $W/pm.cfg"
if [ "${PERF_SCHED:-0}" = 1 ]; then
  perf sched record -q -o "$OUT/sched.data" -- $PM > "$OUT/postmark.txt" 2>&1
else
  perf stat -e task-clock,context-switches,cpu-migrations,page-faults -o "$OUT/postmark-stat.txt" -- \
    $PM > "$OUT/postmark.txt" 2>&1
fi
threads > "$OUT/threads-after.txt"
grep -E "^(VmHWM|VmRSS)" /proc/$PID/status > "$OUT/memory.txt"  # the daemon's peak and resident memory
if [ "${PERF_FAULTS:-0}" = 1 ]; then kill -INT "$PERF_PID"; wait "$PERF_PID" || true; fi
uptime > "$OUT/load.txt"
if [ "$KIND" = floor ]; then umount "$W/mnt"; wait "$PID" 2>/dev/null || true; else "$BIN" umount "$W/mnt" || umount "$W/mnt"; fi
rm -rf "$W"
python3 "$(dirname "$0")/summary.py" "$OUT" "$TX"

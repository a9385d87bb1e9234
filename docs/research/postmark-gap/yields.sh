#!/bin/bash
# sched_yield calls by the daemon's threads during one PostMark run (10,000 transactions):
# parking_lot's locks yield the CPU while they spin for a lock another thread holds.
# Usage: yields.sh BIN [transactions]    prints yields by thread name
set -eu
BIN=$1; TX=${2:-10000}; HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /var/tmp/pmgap.XXXX); mkdir -p "$W/mnt"
"$BIN" mkfs "$W/store" >/dev/null; "$BIN" mount "$W/store" "$W/mnt" >/dev/null
PID=$("$BIN" status --json "$W/mnt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
sed "s#^set location .*#set location $W/mnt#; s/^set transactions .*/set transactions $TX/" "$HERE/pm-quick.cfg" > "$W/pm.cfg"
perf record -q -e syscalls:sys_enter_sched_yield -p "$PID" -o "$W/y.data" -- postmark "$W/pm.cfg" >/dev/null 2>&1
perf script -i "$W/y.data" -F comm 2>/dev/null | sed 's/[0-9]*$/N/' | sort | uniq -c | sort -rn | tr '\n' ' '; echo
"$BIN" umount "$W/mnt" >/dev/null; rm -rf "$W"

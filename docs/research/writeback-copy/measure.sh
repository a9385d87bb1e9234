#!/bin/bash
# The MBFS-like copy loop on a fresh rampart mount (or the floor), with the daemon's CPU per copy.
# Usage: measure.sh BIN [floor] [copies]   (root; fuse; gcc). Prints the loop's line and CPU/copy.
set -eu
BIN=${1:?rampart binary}; MODE=${2:-rampart}; N=${3:-30}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /var/tmp/wbcopy.XXXX); mkdir -p "$W/mnt"
gcc -O2 -o "$W/copyloop" "$HERE/copyloop.c"
if [ "$MODE" = floor ]; then
  "$BIN" bench-floor "$W/mnt" > "$W/floor.log" 2>&1 &
  PID=$!
  until grep -q ready "$W/floor.log"; do sleep 0.1; done
else
  "$BIN" mkfs "$W/store" --large-file-threshold 1M >/dev/null
  "$BIN" mount "$W/store" "$W/mnt"
  PID=$("$BIN" status --json "$W/mnt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
fi
head -c $((10 << 20)) /dev/urandom > "$W/mnt/src"; sync; cat "$W/mnt/src" > /dev/null
perf stat -e task-clock -p "$PID" -o "$W/daemon.txt" -- "$W/copyloop" "$W/mnt/src" "$W/mnt" "$N"
awk -v n="$N" '/task-clock/ {gsub(",", "", $1); printf "daemon CPU %.2f ms per copy\n", $1 / n}' "$W/daemon.txt"
umount "$W/mnt"; if [ "$MODE" = floor ]; then wait "$PID" || true; fi
rm -rf "$W"

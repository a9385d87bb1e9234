#!/bin/bash
# The bench's PostMark Conquest quick run (1,000 files, 2,500 transactions) on a fresh rampart
# mount or the floor, timed from postmark's markers, without (STATUS=0) and with (STATUS=1)
# the bench's `rampart status --json` reads at the markers.
# Usage: [MOUNT_ARGS=...] [MNT_BASE=/dev/shm] bench_method.sh rampart|floor BIN [transactions]
set -eu
KIND=$1; BIN=$2; TX=${3:-2500}; HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /var/tmp/pmgap.XXXX); M=$(mktemp -d ${MNT_BASE:-/var/tmp}/pmgap-mnt.XXXX)
if [ "$KIND" = floor ]; then
  "$BIN" bench-floor "$M" > "$W/floor.log" 2>&1 & PID=$!
  until grep -q ready "$W/floor.log"; do sleep 0.1; done
else
  "$BIN" mkfs "$W/store" >/dev/null; "$BIN" mount "$W/store" "$M" ${MOUNT_ARGS:-} >/dev/null
fi
sed "s#^set location .*#set location $M#; s/^set transactions .*/set transactions $TX/" \
  "$HERE/pm-quick.cfg" > "$W/pm.cfg"
python3 "$HERE/phases.py" "$W/pm.cfg" "$BIN" "$M"
if [ "$KIND" = floor ]; then umount "$M"; wait "$PID" || true; else "$BIN" umount "$M" >/dev/null; fi
rm -rf "$W"; rmdir "$M"

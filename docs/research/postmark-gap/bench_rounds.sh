#!/bin/bash
# The bench's method against a plain timing, interleaved: the transaction phase of the quick
# PostMark (1,000 files, 2,500 transactions) from postmark's markers, without and with the
# bench's stop-postmark-and-read-`rampart status --json` at the markers, and the floor.
# Usage: bench_rounds.sh ROUNDS BIN
N=$1; BIN=$2; HERE=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "$N"); do
  echo "rampart plain:  $(MNT_BASE=/dev/shm MOUNT_ARGS='--large-file-threshold 1M' "$HERE/bench_method.sh" rampart "$BIN")"
  echo "rampart status: $(STATUS=1 MNT_BASE=/dev/shm MOUNT_ARGS='--large-file-threshold 1M' "$HERE/bench_method.sh" rampart "$BIN")"
  echo "floor plain:    $(MNT_BASE=/dev/shm "$HERE/bench_method.sh" floor "$BIN")"
done
uptime

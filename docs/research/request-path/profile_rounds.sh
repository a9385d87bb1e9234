#!/bin/bash
# profile_rounds.sh ROUNDS OUTBASE BIN...: interleaved profiled runs (measure.sh with
# PERF_RECORD=1, 100 µs period), then classify.py on each; one directory per run.
set -eu
ROUNDS=$1; BASE=$2; shift 2
DIR=$(dirname "$(readlink -f "$0")")
for i in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    out="$BASE/$(basename "$bin")-$i"
    PERF_PERIOD_NS=100000 PERF_RECORD=1 bash "$DIR/measure.sh" "$bin" "$out" 20000 > "$out.summary" 2>&1 || true
  done
done
for d in "$BASE"/*/; do
  ( perf script -i "$d/perf.data" -F comm,ip,sym,dso 2>/dev/null > "$d/stacks.txt"
    n=$(grep ^requests "${d%/}.summary" | awk '{print $2}')
    PERIOD_NS=100000 python3 "$DIR/classify.py" "$n" < "$d/stacks.txt" > "$d/classified.txt"
    rm -f "$d/stacks.txt" ) &
  while [ "$(jobs -r | wc -l)" -ge 2 ]; do sleep 1; done
done
wait

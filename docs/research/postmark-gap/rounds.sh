#!/bin/bash
# Interleaved rounds of run.sh: every label in turn, ROUNDS times; then the medians (median.py).
# Usage: rounds.sh ROUNDS OUTDIR LABEL=KIND:BIN[:ENV] ...  e.g. main=rampart:/tmp/rampart.main
#   floor=floor:/tmp/rampart.main  tun=rampart:/tmp/rampart.main:GLIBC_TUNABLES=...
set -eu
N=$1; OUT=$2; shift 2; HERE=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "$N"); do
  for spec in "$@"; do
    label=${spec%%=*}; rest=${spec#*=}; kind=${rest%%:*}; rest=${rest#*:}
    bin=${rest%%:*}; envs=""; [ "$rest" != "$bin" ] && envs=${rest#*:}
    env $envs "$HERE/run.sh" "$kind" "$bin" "$OUT/$label.$r" ${TX:-10000} > /dev/null 2>&1 || echo "run $label.$r failed"
  done
done
python3 "$HERE/median.py" "$OUT" ${TX:-10000}

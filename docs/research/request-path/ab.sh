#!/bin/bash
# Interleaved A/B of daemon CPU per 10,000 requests: ab.sh N BIN_A BIN_B ... (each run 20,000
# PostMark transactions, measure.sh); prints one line per run and the medians.
set -eu
N=$1; shift
DIR=$(dirname "$0")
declare -A results
for i in $(seq "$N"); do
  for bin in "$@"; do
    line=$(bash "$DIR/measure.sh" "$bin" "/tmp/ab.$$" 20000 | grep "task-clock")
    v=$(echo "$line" | sed -E 's/.*, ([0-9.]+) ms per 10,000.*/\1/')
    echo "$(basename "$bin") run $i: $v ms per 10,000 requests (load $(cut -d, -f3- /tmp/ab.$$/load.txt | sed 's/.*average: //'))"
    results[$bin]="${results[$bin]:-} $v"
  done
done
for bin in "$@"; do
  echo "$(basename "$bin") median: $(echo ${results[$bin]} | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') of ${results[$bin]}"
done
rm -rf "/tmp/ab.$$"

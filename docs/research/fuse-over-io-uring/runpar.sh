#!/bin/bash
# two concurrent clients, pinned to cpu0 and cpu1: usage runpar.sh LABEL MODE [env...]
set -u
cd "$(dirname "$0")"
LABEL=$1; MODE=$2; shift 2; N=${N:-100000}
env "$@" ./fsrv mnt $MODE 2>srv-$LABEL.log &
PID=$!
for i in $(seq 50); do mountpoint -q mnt && stat mnt/f >/dev/null 2>&1 && break; sleep 0.1; done
echo "== $LABEL: server='./fsrv mnt $MODE' env='$*' clients='taskset -c 0 ./bench mnt/f fstat $N' & 'taskset -c 1 ./bench mnt/f fstat $N'"
for r in 1 2 3; do
  ./waitidle.sh >/dev/null
  taskset -c 0 ./bench mnt/f fstat $N > par0.out & A=$!
  taskset -c 1 ./bench mnt/f fstat $N > par1.out & B=$!
  wait $A $B
  tag=""; { pgrep -x rustc || pgrep -x cargo || pgrep -x cc1 || pgrep -x ld; } >/dev/null && tag=" [other-load]"
  echo "$LABEL cpu0: $(cat par0.out)$tag"; echo "$LABEL cpu1: $(cat par1.out)$tag"
done
umount mnt; sleep 0.3; kill $PID 2>/dev/null; wait $PID 2>/dev/null

#!/bin/bash
# usage: run.sh LABEL "SERVER_PREFIX" MODE "CLIENT_PREFIX" [env assignments...]
# e.g.   run.sh classic-cross "taskset -c 1" classic "taskset -c 0"
# Waits for an idle machine before each client run; tags a run "[other-load]" if a
# rustc/cc1/ld process existed right after it (the VM is shared with a Rust build).
set -u
cd "$(dirname "$0")"
LABEL=$1; SP=$2; MODE=$3; CP=$4; shift 4
N=${N:-100000}; RUNS=${RUNS:-5}; PRUNS=${PRUNS:-3}
env "$@" $SP ./fsrv mnt $MODE 2>srv-$LABEL.log &
PID=$!
for i in $(seq 50); do mountpoint -q mnt && stat mnt/f >/dev/null 2>&1 && break; sleep 0.1; done
echo "== $LABEL: server='$SP ./fsrv mnt $MODE' env='$*' client='$CP ./bench mnt/f fstat|pread $N'"
one() {
  ./waitidle.sh >/dev/null
  out=$(timeout 120 $CP ./bench mnt/f $1 $N)
  tag=""; { pgrep -x rustc || pgrep -x cargo || pgrep -x cc1 || pgrep -x ld; } >/dev/null && tag=" [other-load]"
  echo "$LABEL $out$tag"
}
for i in $(seq $RUNS); do one fstat; done
for i in $(seq $PRUNS); do one pread; done
umount mnt; sleep 0.3; kill $PID 2>/dev/null; wait $PID 2>/dev/null
cat srv-$LABEL.log

#!/bin/bash
# usage: trace-many.sh BIN T N [STORE_BASE]; then timeline.py /tmp/tr-many.txt and counts.py /tmp/tr-many.txt T*N
BIN=$1; T=$2; N=$3; B=${4:-/var/tmp}
S=$B/dur-many-store; M=/tmp/dur-many-mnt
rm -rf $S; mkdir -p $M
$BIN mkfs $S >/dev/null; $BIN mount $S $M >/dev/null 2>&1; sleep 0.5; mkdir $M/w; sync
PID=$($BIN status --json $M | python3 -c 'import json,sys;print(json.load(sys.stdin)["pid"])')
perf trace -p $PID -e pwrite64,fdatasync,futex,write,io_uring_enter -o /tmp/tr-many.txt 2>/dev/null & TP=$!
sleep 1.5
"$(dirname "$0")"/dw $M/w $T $N
sleep 0.5; kill -INT $TP; wait $TP 2>/dev/null
$BIN umount $M >/dev/null 2>&1; rm -rf $S

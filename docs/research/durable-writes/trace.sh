#!/bin/bash
# trace.sh BIN LABEL T N : perf trace of the daemon's syscalls during T writers x N writes
BIN=$1; L=$2; T=$3; N=$4
S=/var/tmp/dur-tr-store; M=/tmp/dur-tr-mnt
rm -rf $S; mkdir -p $M
$BIN mkfs $S >/dev/null; $BIN mount $S $M >/dev/null 2>&1; sleep 0.5; mkdir $M/w; sync
PID=$($BIN status --json $M | python3 -c 'import json,sys;print(json.load(sys.stdin)["pid"])')
perf trace -p $PID -e pwrite64,fdatasync,futex,write,io_uring_enter -o /tmp/tr-$L.txt 2>/dev/null & TP=$!
sleep 1.5
"$(dirname "$0")"/dw $M/w $T $N
sleep 0.5; kill -INT $TP; wait $TP 2>/dev/null
$BIN umount $M >/dev/null 2>&1; rm -rf $S
python3 "$(dirname "$0")"/split.py /tmp/tr-$L.txt

#!/bin/bash
# sc.sh BIN T N [BASE]: per-syscall time of the writers (perf trace -s of dw) on a fresh mount;
# BIN=host runs dw on a folder of BASE directly.
BIN=$1; T=$2; N=$3; B=${4:-/var/tmp}
if [ "$BIN" = host ]; then D=$B/dur-sc-host; rm -rf $D; mkdir -p $D/w; sync; W=$D/w
else S=$B/dur-sc-store; M=/tmp/dur-sc-mnt; rm -rf $S; mkdir -p $M
  $BIN mkfs $S >/dev/null; $BIN mount $S $M >/dev/null 2>&1; sleep 0.5; mkdir $M/w; sync; W=$M/w; fi
perf trace -s -o /tmp/dw-syscalls.txt -- "$(dirname "$0")"/dw $W $T $N
[ "$BIN" = host ] && rm -rf $D || { $BIN umount $M >/dev/null 2>&1; rm -rf $S; }
python3 - <<'PY'
import re,collections
tot=collections.defaultdict(lambda:[0,0.0])
for l in open('/tmp/dw-syscalls.txt'):
    m=re.match(r'\s+(\w+)\s+(\d+)\s+\d+\s+([\d.]+)\s+[\d.]+\s+([\d.]+)',l)
    if m and m.group(1) in('openat','write','fsync','close'):
        tot[m.group(1)][0]+=int(m.group(2)); tot[m.group(1)][1]+=float(m.group(3))
print(' '.join(f"{k} {v[1]/v[0]*1000:.0f}us" for k,v in sorted(tot.items())))
PY

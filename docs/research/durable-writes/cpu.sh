#!/bin/bash
# m2.sh BIN T N [BASE]: dw on a fresh mount; per write: the daemon's CPU µs and context
# switches per thread group (fuser-q*, committer, other), commits per write.
BIN=$1; T=$2; N=$3; B=${4:-/var/tmp}
S=$B/dur-cpu-store; M=/tmp/dur-cpu-mnt
rm -rf $S; mkdir -p $M
$BIN mkfs $S >/dev/null || exit 1
$BIN mount $S $M >/dev/null 2>&1 || exit 1
sleep 0.5; mkdir $M/w; sync
PID=$($BIN status --json $M | python3 -c 'import json,sys;print(json.load(sys.stdin)["pid"])')
snap() { for t in /proc/$PID/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat) $(grep -E '^(voluntary|nonvoluntary)_ctxt' $t/status | awk '{printf "%s ",$2}')"; done; }
$BIN status --json $M > /tmp/dw-cpu-b.json; snap > /tmp/dw-cpu-b.txt
R=$("$(dirname "$0")"/dw $M/w $T $N)
snap > /tmp/dw-cpu-a.txt; $BIN status --json $M > /tmp/dw-cpu-a.json
$BIN umount $M >/dev/null 2>&1; rm -rf $S
python3 - $((T*N)) "$R" <<'PY'
import sys,json,collections,os
n=int(sys.argv[1]); hz=os.sysconf('SC_CLK_TCK')
def rd(p):
    d=collections.defaultdict(lambda:[0,0,0])
    for l in open(p):
        c,t,v,nv=l.split()
        g='fuser-q' if c.startswith('fuser-q') else ('committer' if c=='committer' else 'other')
        d[g][0]+=int(t); d[g][1]+=int(v); d[g][2]+=int(nv)
    return d
b=rd('/tmp/dw-cpu-b.txt'); a=rd('/tmp/dw-cpu-a.txt')
out=[]; cpu=0
for g in sorted(a):
    dt=(a[g][0]-b[g][0])/hz*1e6/n; cpu+=dt
    out.append(f"{g}: cpu {dt:.0f}us cs {(a[g][1]-b[g][1])/n:.2f}+{(a[g][2]-b[g][2])/n:.2f}")
ja=json.load(open('/tmp/dw-cpu-a.json'));jb=json.load(open('/tmp/dw-cpu-b.json'))
cm=ja["persistence"]["commits"]-jb["persistence"]["commits"]
r=sys.argv[2].split(': ',1)[1]
print(f"{r} | daemon cpu {cpu:.0f}us/w | "+" | ".join(out)+f" | commits {cm/n:.2f}/w")
PY

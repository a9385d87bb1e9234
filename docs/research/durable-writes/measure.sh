#!/bin/bash
# usage: measure.sh BIN LABEL THREADS PER
BIN=$1; L=$2; T=$3; N=$4
S=${STORE_BASE:-/var/tmp}/dur-$L-store; M=/tmp/dur-$L-mnt
rm -rf $S; mkdir -p $M
$BIN mkfs $S >/dev/null || exit 1
$BIN mount $S $M >/dev/null 2>&1 || exit 1
sleep 0.5
mkdir $M/w; sync
$BIN status --json $M > /tmp/dw-$L-before.json
"$(dirname "$0")"/dw $M/w $T $N
$BIN status --json $M > /tmp/dw-$L-after.json
$BIN umount $M >/dev/null 2>&1
python3 - /tmp/dw-$L-before.json /tmp/dw-$L-after.json $((T*N)) <<'PY'
import json,sys
b=json.load(open(sys.argv[1]));a=json.load(open(sys.argv[2]));n=int(sys.argv[3])
rq=lambda s:s["fuse_requests"]; lt=lambda s:s["fuse_latency"]
out=[]
for k in sorted(rq(a)):
    d=rq(a)[k]-rq(b).get(k,0)
    if d==0: continue
    la=lt(a).get(k,{"count":0,"sum_seconds":0}); lb=lt(b).get(k,{"count":0,"sum_seconds":0})
    c=la["count"]-lb["count"]; us=(la["sum_seconds"]-lb["sum_seconds"])/c*1e6 if c else 0
    out.append(f"{k}={d/n:.2f}/w ({us:.0f}us)")
pa,pb=a["persistence"],b["persistence"]
cm=pa["commits"]-pb["commits"]; cl=(pa["commit_latency"]["sum_seconds"]-pb["commit_latency"]["sum_seconds"])/max(cm,1)*1e6
sw=pa.get("store_written_bytes",0)-pb.get("store_written_bytes",0)
print(" ".join(out), f"| commits {cm/n:.2f}/w {cl:.0f}us each | store_written {sw/n:.0f} B/w")
PY
rm -rf $S

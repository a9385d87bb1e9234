"""Bytes the daemon writes to its store for a burst of writes (decision 0025).

usage: python3 amp.py CHECKPOINT_AFTER ROUNDS FILES   (run as root, from the repository)
  e.g. python3 amp.py 256M 10 2048; python3 amp.py auto 10 2048
FILES files of 256 KiB are written, then the first 1,024 overwritten ROUNDS times.
"""
import os, sys, subprocess, json
R = os.path.abspath("target/release/rampart"); S = "/var/tmp/amp-store"; M = "/tmp/amp-mnt"
ck=sys.argv[1]; ROUNDS=int(sys.argv[2]); FILES=int(sys.argv[3])
subprocess.run(["rm","-rf",S]); os.makedirs(M, exist_ok=True)
subprocess.run([R,"mkfs",S],check=True,stdout=subprocess.DEVNULL)
d=subprocess.Popen([R,"mount","-f",S,M,"--checkpoint-after",ck],stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True)
assert "ready" in d.stdout.readline()
blob=os.urandom(256<<10)
for i in range(FILES):
    with open(f"{M}/f{i}","wb") as f: f.write(blob)
for r in range(ROUNDS):
    for i in range(1024):
        with open(f"{M}/f{i}","r+b") as f: f.write(blob[::-1] if r%2==0 else blob)
p=json.loads(subprocess.run([R,"status",M,"--json"],capture_output=True,text=True).stdout)["persistence"]
subprocess.run([R,"umount",M],check=True)
_,status,ru=os.wait4(d.pid,0)
print(f"{ck}: checkpoints before unmount {p['checkpoints']}, daemon wrote {ru.ru_oublock*512>>20} MiB to the store for {FILES//4+ROUNDS*256} MiB written by the program")
subprocess.run(["rm","-rf",S])

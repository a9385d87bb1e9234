#!/usr/bin/env python3
"""Runs postmark on a mounted peer and times its phases from its flushed progress markers, as
`rampart bench` does. With STATUS=1, at the "Performing transactions" and "Deleting files..."
markers it stops postmark, runs `rampart status --json` and continues it, as the bench does,
and takes the pause out of the phase (also as the bench does).
Usage: phases.py CONFIG [RAMPART_BIN MOUNTPOINT]   prints µs per transaction of the phase."""
import os, re, signal, subprocess, sys, time
cfg = sys.argv[1]
bin_, mnt = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else (None, None)
tx = int(re.search(r"set transactions (\d+)", open(cfg).read()).group(1))
p = subprocess.Popen(["postmark", cfg], stdout=subprocess.PIPE, bufsize=0)
marks, buf, paused = {}, b"", 0.0
names = [b"Creating files...", b"Performing transactions", b"Deleting files..."]
while True:
    chunk = os.read(p.stdout.fileno(), 4096)
    if not chunk:
        break
    at = time.monotonic()
    buf += chunk
    for n in names:
        if n not in marks and n in buf:
            marks[n] = at
            if bin_ and os.environ.get("STATUS") == "1" and n != names[0]:
                t0 = time.monotonic()
                os.kill(p.pid, signal.SIGSTOP)
                subprocess.run([bin_, "status", "--json", mnt], stdout=subprocess.DEVNULL)
                os.kill(p.pid, signal.SIGCONT)
                if n == names[1]:
                    # The pause falls in the transaction phase: taken out, as the bench does.
                    paused = time.monotonic() - t0
p.wait()
phase = marks[names[2]] - marks[names[1]] - paused
create = marks[names[1]] - marks[names[0]]
print(f"create {create*1e6/1000:.1f} µs/file  transactions {phase*1e6/tx:.1f} µs/tx")

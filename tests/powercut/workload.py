"""One writer of the power-cut suite, and the model its log is checked against.

`python3 workload.py ROOT WID SEED LOG` works inside ROOT/w<WID>/ (which it creates) until a
call fails (the power cut: the daemon is gone), then exits. Every step is written to LOG, one
JSON object a line, BEFORE it is tried ({"k": .., "op": .., ...}), and again once it returned
({"done": k, "t1": ..}); an fsync that returned adds {"ack": k, "t0": .., "t1": ..}: every step
up to k is acknowledged as durable. Times are CLOCK_MONOTONIC (the same clock in every process).
LOG lives on the host file system, which the power cut does not touch.

A step is one change applied by the daemon as a whole (a create, a rename, a data write whose
file is closed, or fsynced, before the step returns), so the writer's state after a crash
must be its state after some prefix of its steps (`apply_step` replays them). The one step
that may be seen half done is the last one started, when its data took several FUSE writes
(large files): `mixed_ok` tells what it may look like.
"""

import json
import os
import random
import sys
import time

PAGE = 4096
NAMES = [f"f{i}" for i in range(12)]
SUBDIRS_MAX = 4


def content(wid, k, length):
    """The bytes step k of writer wid writes: random, so a byte never written is noticed."""
    return random.Random(f"{wid}:{k}").randbytes(length)


def apply_step(model, step, wid):
    """The model (relpath -> None for a directory, bytes for a file) after `step`."""
    op = step["op"]
    if op == "mkdir":
        model[step["path"]] = None
    elif op == "rmdir":
        del model[step["path"]]
    elif op == "create":
        model[step["path"]] = b""
    elif op == "truncate":
        model[step["path"]] = b""
    elif op == "write":
        old = model[step["path"]]
        off, data = step["off"], content(wid, step["k"], step["len"])
        if len(old) < off:
            old = old + bytes(off - len(old))
        model[step["path"]] = old[:off] + data + old[off + len(data):]
    elif op == "rename":
        src, dst = step["src"], step["dst"]
        moved = {p: v for p, v in model.items() if p == src or p.startswith(src + "/")}
        for p in moved:
            del model[p]
        for p, v in moved.items():
            model[dst + p[len(src):]] = v
    elif op == "unlink":
        del model[step["path"]]
    elif op == "fsync":
        pass
    else:
        raise ValueError(f"unknown step {step!r}")


def mixed_ok(old, new, got):
    """Whether `got` may be a file whose data write from `old` to `new` was cut part way: the
    kernel sends a large write as several requests, in any order, each one op; so every page
    is the old one or the new one (zeros where neither reached yet), and the size is between."""
    if got is None or old is None or new is None:
        return False
    lo, hi = min(len(old), len(new)), max(len(old), len(new))
    if not lo <= len(got) <= hi:
        return False
    n = len(got)
    old_p = old[:n].ljust(n, b"\0")
    new_p = new[:n].ljust(n, b"\0")
    for at in range(0, n, PAGE):
        g = got[at:at + PAGE]
        if g != old_p[at:at + PAGE] and g != new_p[at:at + PAGE]:
            return False
    return True


class Writer:
    def __init__(self, root, wid, seed, log_path):
        self.root = root
        self.wid = wid
        self.rng = random.Random(seed)
        self.log = open(log_path, "a", buffering=1)
        self.k = 0
        self.model = {}
        self.base = f"w{wid}"

    def p(self, rel):
        return os.path.join(self.root, rel)

    def record(self, obj):
        self.log.write(json.dumps(obj) + "\n")

    def step(self, op, **kw):
        """Logs the step, runs it (the caller's `act`), logs its end and applies it to the model."""
        act = kw.pop("act")
        st = dict(k=self.k, op=op, t0=time.monotonic(), **kw)
        self.record(st)
        synced = act()
        self.record({"done": self.k, "t1": time.monotonic()})
        if synced is not None:
            self.record({"ack": self.k, "t0": synced, "t1": time.monotonic()})
        apply_step(self.model, st, self.wid)
        self.k += 1

    # -- the step kinds ----------------------------------------------------------------------
    def dirs(self):
        return [p for p, v in self.model.items() if v is None]

    def files(self):
        return sorted(p for p, v in self.model.items() if v is not None)

    def do_mkdir(self, rel):
        self.step("mkdir", path=rel, act=lambda: os.mkdir(self.p(rel)))

    def do_create(self, rel):
        def act():
            os.close(os.open(self.p(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        self.step("create", path=rel, act=act)

    def do_write(self, rel, off, length, sync):
        data = content(self.wid, self.k, length)

        def act():
            fd = os.open(self.p(rel), os.O_WRONLY)
            try:
                view, at = memoryview(data), off
                while view:
                    n = os.pwrite(fd, view[:1 << 20], at)
                    view, at = view[n:], at + n
                if sync:
                    t0 = time.monotonic()
                    os.fsync(fd)
                    return t0
            finally:
                os.close(fd)
        self.step("write", path=rel, off=off, len=length, act=act)

    def do_fsync(self, rel):
        def act():
            fd = os.open(self.p(rel), os.O_RDONLY)
            try:
                t0 = time.monotonic()
                os.fsync(fd)
                return t0
            finally:
                os.close(fd)
        self.step("fsync", path=rel, act=act)

    def one(self):
        r = self.rng.random()
        dirs = self.dirs()
        files = self.files()
        if r < 0.30 or not files:
            # a new small file, written, often fsynced, then renamed over a name (replace)
            d = self.rng.choice(dirs)
            tmp = f"{d}/tmp{self.k}"
            self.do_create(tmp)
            self.do_write(tmp, 0, self.rng.randint(1, PAGE), self.rng.random() < 0.6)
            dst = f"{d}/{self.rng.choice(NAMES)}"
            if self.model.get(dst, b"") is None:
                return
            self.step("rename", src=tmp, dst=dst, act=lambda: os.rename(self.p(tmp), self.p(dst)))
        elif r < 0.45:
            f = self.rng.choice(files)  # overwrite in place or append, small
            size = len(self.model[f])
            off = size if self.rng.random() < 0.5 else self.rng.randint(0, size)
            self.do_write(f, off, self.rng.randint(1, PAGE), self.rng.random() < 0.5)
        elif r < 0.52:
            f = self.rng.choice(files)
            self.step("truncate", path=f,
                      act=lambda: os.close(os.open(self.p(f), os.O_WRONLY | os.O_TRUNC)))
        elif r < 0.62:
            f = self.rng.choice(files)
            self.step("unlink", path=f, act=lambda: os.unlink(self.p(f)))
        elif r < 0.70:
            f = self.rng.choice(files)  # rename to another directory
            dst = f"{self.rng.choice(dirs)}/{self.rng.choice(NAMES)}"
            if dst == f or self.model.get(dst, b"") is None:
                return
            self.step("rename", src=f, dst=dst, act=lambda: os.rename(self.p(f), self.p(dst)))
        elif r < 0.76 and len(dirs) < SUBDIRS_MAX + 1:
            self.do_mkdir(f"{self.base}/d{self.k}")
        elif r < 0.80 and len(dirs) > 1:
            d = self.rng.choice([x for x in dirs if x != self.base])
            if any(p.startswith(d + "/") for p in self.model):
                dst = f"{self.base}/d{self.k}"  # a directory with files in it moves whole
                self.step("rename", src=d, dst=dst, act=lambda: os.rename(self.p(d), self.p(dst)))
            else:
                self.step("rmdir", path=d, act=lambda: os.rmdir(self.p(d)))
        elif r < 0.84:
            # a larger file: several FUSE writes, fsynced, then renamed into place
            d = self.rng.choice(dirs)
            tmp = f"{d}/big{self.k}"
            self.do_create(tmp)
            self.do_write(tmp, 0, self.rng.randint(64 << 10, 1 << 20), True)
            dst = f"{d}/big"
            if self.model.get(dst, b"") is None:
                return
            self.step("rename", src=tmp, dst=dst, act=lambda: os.rename(self.p(tmp), self.p(dst)))
        else:
            self.do_fsync(self.rng.choice(files + dirs))

    def run(self):
        self.do_mkdir(self.base)
        while True:
            self.one()


def main():
    root, wid, seed, log_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    w = Writer(root, wid, seed, log_path)
    try:
        w.run()
    except OSError as e:
        # the power cut; the last logged step may or may not have happened
        w.record({"error": repr(e), "k": w.k, "t": time.monotonic()})


if __name__ == "__main__":
    main()

"""rampart as the system expects a file system (issue 17): mount(8) and fstab with -o options,
the type fuse.rampart, umount(8) waiting for the daemon, sd_notify, mounts by a user other
than root through fusermount3, and the manual pages and completions."""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from e2e_helpers import (
    EXTRA_MOUNT_OPTS,
    NOBODY_GID,
    NOBODY_UID,
    RAMPART_BIN,
    REPO,
    Mount,
    in_mount_table,
    nobody_py,
    pid_alive,
    run,
    run_as_nobody,
    wait_until,
)

pytestmark = pytest.mark.rampart_only("mount(8), fstab, systemd and manuals of rampart")

HELPERS = ("/sbin/mount.fuse.rampart", "/sbin/umount.fuse.rampart")


def extra_o_options():
    """RAMPART_E2E_MOUNT_OPTS (`--fuse-io-uring off`) in -o spelling (`fuse_io_uring=off`)."""
    out, args = [], list(EXTRA_MOUNT_OPTS)
    while args:
        a = args.pop(0)
        name, _, value = a[2:].partition("=")
        if not value and args and not args[0].startswith("--"):
            value = args.pop(0)
        out.append(name.replace("-", "_") + (f"={value}" if value else ""))
    return out


@pytest.fixture
def mount_helpers():
    """/sbin/mount.fuse.rampart and /sbin/umount.fuse.rampart, links to the binary under test
    (mount(8) looks for helpers only in /sbin), for the test's duration; whatever was there
    before is put back."""
    saved = {}
    for h in HELPERS:
        if os.path.lexists(h):
            saved[h] = h + ".e2e-saved"
            os.rename(h, saved[h])
        os.symlink(RAMPART_BIN, h)
    yield
    for h in HELPERS:
        if os.path.lexists(h):
            os.unlink(h)
        if h in saved:
            os.rename(saved[h], h)


@pytest.fixture
def place(test_base):
    """A store and a mount point; unmounts whatever is left at teardown."""
    m = Mount(test_base, "sys")
    m.mkfs()
    m.path.mkdir(mode=0o755)
    yield m
    if in_mount_table(m.path):
        m.pid = m.pid or m.find_daemon_pid()
        m.force_cleanup()


def findmnt(path):
    """findmnt's record of the fuse.rampart mount at `path`, or None."""
    r = run(["findmnt", "-J", "-t", "fuse.rampart", "-M", path, "-o", "TARGET,SOURCE,FSTYPE,OPTIONS"])
    if r.returncode != 0:
        return None
    (fs,) = json.loads(r.stdout)["filesystems"]
    return fs


def umount_waits_for_the_daemon(m):
    """umount(8) runs umount.fuse.rampart, which returns only once the daemon is gone."""
    pid = m.status()["pid"]
    r = run(["umount", m.path], timeout=120)
    assert r.returncode == 0, r.stderr
    assert not pid_alive(pid), "umount returned before the daemon finished its final checkpoint"
    assert not in_mount_table(m.path)


def test_fstab_line_mounts_with_mount_a_and_mount_mountpoint(place, mount_helpers, test_base):
    m = place
    options = ",".join(["defaults", "memory_cap=1G", "commit_interval=1s", "threads=3", "nofail",
                        "_netdev", "noauto", "x-systemd.requires=local-fs.target", *extra_o_options()])
    fstab = Path(test_base) / "fstab"  # a temporary fstab: /etc/fstab is never touched
    # mount -a skips noauto lines: that one goes only in the second fstab.
    fstab.write_text(f"{m.store} {m.path} fuse.rampart {options.replace(',noauto', '')} 0 0\n")
    r = run(["mount", "-a", "-T", fstab], timeout=120)
    assert r.returncode == 0, r.stderr
    fs = findmnt(m.path)
    assert fs and fs["fstype"] == "fuse.rampart" and fs["source"] == str(m.store), fs
    status = m.status()
    assert status["memory_cap_bytes"] == 1 << 30
    assert status["persistence"]["commit_interval_ms"] == 1000
    (m.path / "kept").write_bytes(b"through fstab")
    umount_waits_for_the_daemon(m)

    fstab.write_text(f"{m.store} {m.path} fuse.rampart {options} 0 0\n")
    r = run(["mount", "-T", fstab, m.path], timeout=120)
    assert r.returncode == 0, r.stderr
    assert findmnt(m.path), "mount MOUNTPOINT did not mount the fstab line"
    assert (m.path / "kept").read_bytes() == b"through fstab"
    umount_waits_for_the_daemon(m)


def test_mount_t_fuse_rampart_with_options(place, mount_helpers):
    m = place
    opts = ",".join(["memory_cap=512M", "noexec", "nofail", "x-systemd.automount", "owner_only", *extra_o_options()])
    r = run(["mount", "-t", "fuse.rampart", "-o", opts, m.store, m.path], timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "", "the helper is quiet unless -v"
    fs = findmnt(m.path)
    assert fs, run(["findmnt", m.path]).stdout
    kernel_options = fs["options"].split(",")
    assert "noexec" in kernel_options and "allow_other" not in kernel_options, fs
    assert m.status()["memory_cap_bytes"] == 512 << 20
    script = m.path / "x.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    with pytest.raises(PermissionError):
        subprocess.run([script], check=True)
    umount_waits_for_the_daemon(m)


def test_unknown_option_is_refused_with_what_is_accepted(place, mount_helpers):
    m = place
    r = run(["mount", "-t", "fuse.rampart", "-o", "memory_cap=1G,memroy_cap=2G", m.store, m.path])
    assert r.returncode != 0
    assert 'unknown mount option "memroy_cap=2G"' in r.stderr and "memory_cap=" in r.stderr, r.stderr
    assert not in_mount_table(m.path)
    r = run([RAMPART_BIN, "mount", "-o", "threads=0", m.store, m.path])
    assert r.returncode == 2 and "threads=0" in r.stderr, r.stderr
    assert not in_mount_table(m.path)


def test_the_call_mount_fuse3_makes(place):
    """mount.fuse3 runs `rampart STORE MOUNTPOINT -o OPTIONS` for a fuse.rampart line when no
    mount.fuse.rampart is installed."""
    m = place
    r = run([RAMPART_BIN, m.store, m.path, "-o", ",".join(["rw", "dev", "suid", "threads=2", *extra_o_options()])],
            timeout=120)
    assert r.returncode == 0, r.stderr
    fs = findmnt(m.path)
    assert fs and "nosuid" not in fs["options"].split(","), fs
    r = run([RAMPART_BIN, "umount", m.path], timeout=120)
    assert r.returncode == 0, r.stderr


def test_sd_notify_ready_status_stopping(place, test_base):
    m = place
    sock_path = os.path.join(test_base, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(60)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path)
    with tempfile.TemporaryFile() as out:
        daemon = subprocess.Popen([RAMPART_BIN, "mount", "--foreground", *EXTRA_MOUNT_OPTS, m.store, m.path],
                                  stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env)
        try:
            ready = dict(line.split("=", 1) for line in sock.recv(4096).decode().splitlines())
            assert ready["READY"] == "1" and int(ready["MAINPID"]) == daemon.pid, ready
            assert ready["STATUS"].startswith(f"serving {m.store} at {m.path}"), ready
            assert in_mount_table(m.path), "READY=1 before the mount was made"
            daemon.send_signal(signal.SIGTERM)
            stopping = sock.recv(4096).decode()
            assert stopping.startswith("STOPPING=1\n"), stopping
            stopped = sock.recv(4096).decode()
            assert stopped == "STATUS=stopped: Clean", stopped
            assert daemon.wait(timeout=120) == 0
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            sock.close()


@pytest.fixture
def dev_fuse_mode():
    """Sets /dev/fuse's mode for the test; puts the original back after."""
    original = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    yield lambda mode: os.chmod("/dev/fuse", mode)
    os.chmod("/dev/fuse", original)


@pytest.fixture
def nobody_place(test_base):
    """A folder owned by nobody with a store and a mount point of nobody's."""
    home = Path(test_base) / "nobody"
    home.mkdir(mode=0o755)
    os.chown(home, NOBODY_UID, NOBODY_GID)
    m = Mount(home, "u", env=dict(os.environ, HOME=str(home), RAMPART_HOME=str(home)))
    yield m
    if in_mount_table(m.path):
        m.pid = m.pid or m.find_daemon_pid()
        m.force_cleanup()


def test_a_user_mounts_a_store_they_own_through_fusermount3(nobody_place, dev_fuse_mode):
    m = nobody_place
    env = m.env
    assert run_as_nobody([RAMPART_BIN, "mkfs", m.store], env=env).returncode == 0
    assert run_as_nobody(["mkdir", m.path], env=env).returncode == 0

    dev_fuse_mode(0o600)
    r = run_as_nobody([RAMPART_BIN, "mount", *EXTRA_MOUNT_OPTS, m.store, m.path], env=env, timeout=120)
    assert r.returncode == 1 and not in_mount_table(m.path)
    assert "/dev/fuse" in r.stderr and "chmod 0666 /dev/fuse" in r.stderr, r.stderr

    dev_fuse_mode(0o666)
    if "user_allow_other" not in Path("/etc/fuse.conf").read_text(errors="replace").replace("#user_allow_other", ""):
        r = run_as_nobody([RAMPART_BIN, "mount", "-o", "allow_other", *EXTRA_MOUNT_OPTS, m.store, m.path],
                          env=env, timeout=120)
        assert r.returncode == 1 and "user_allow_other" in r.stderr and "/etc/fuse.conf" in r.stderr, r.stderr

    r = run_as_nobody([RAMPART_BIN, "mount", *EXTRA_MOUNT_OPTS, m.store, m.path], env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    m.mounted = True
    fs = findmnt(m.path)
    assert fs and f"user_id={NOBODY_UID}" in fs["options"], fs
    err, _ = nobody_py("open(args[0], 'w').write('mine')", m.path / "f")
    assert err == 0
    pid = m.status()["pid"]
    r = run_as_nobody(["fusermount3", "-u", m.path], timeout=60)
    assert r.returncode == 0, r.stderr
    assert wait_until(lambda: not pid_alive(pid), timeout=120), "the daemon did not exit after fusermount3 -u"

    r = run_as_nobody([RAMPART_BIN, "mount", *EXTRA_MOUNT_OPTS, m.store, m.path], env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    err, text = nobody_py("result = open(args[0]).read()", m.path / "f")
    assert (err, text) == (0, "mine")
    r = run_as_nobody([RAMPART_BIN, "umount", m.path], env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    m.mounted = False


def test_manuals_render_and_completions_parse(test_base):
    out = Path(test_base) / "generated"
    r = run([RAMPART_BIN, "generate-manuals", out])
    assert r.returncode == 0, r.stderr
    pages = sorted(p.name for p in (out / "man1").iterdir())
    for sub in ("", "-mkfs", "-mount", "-umount", "-status", "-fsck", "-bench"):
        assert f"rampart{sub}.1" in pages, pages
    assert "rampart-generate-manuals.1" not in pages
    r = run(["man", "-l", out / "man1" / "rampart-mount.1"], env=dict(os.environ, MANPAGER="cat", MANWIDTH="100"))
    assert r.returncode == 0, r.stderr
    assert "rampart-mount" in r.stdout and "--memory-cap" in r.stdout and "memory_cap=4G" in r.stdout, r.stdout[:2000]
    r = run(["bash", "-n", out / "completions" / "rampart.bash"])
    assert r.returncode == 0, r.stderr
    for shell, name in (("zsh", "_rampart"), ("fish", "rampart.fish")):
        assert (out / "completions" / name).stat().st_size > 0
        if shutil.which(shell):
            r = run([shell, "-n", out / "completions" / name])
            assert r.returncode == 0, r.stderr


def test_install_script_installs_under_a_prefix(test_base):
    root = Path(test_base) / "root"
    r = run([REPO / "scripts" / "install", "--bin", RAMPART_BIN, "--prefix", root / "usr/local",
             "--sbindir", root / "sbin", "--unitdir", root / "etc/systemd/system"], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    binary = root / "usr/local/bin/rampart"
    assert os.access(binary, os.X_OK)
    for helper in ("mount.fuse.rampart", "umount.fuse.rampart"):
        assert os.path.realpath(root / "sbin" / helper) == str(binary), helper
    assert (root / "usr/local/share/man/man1/rampart-mount.1").is_file()
    assert (root / "usr/local/share/bash-completion/completions/rampart").is_file()
    assert (root / "usr/local/share/zsh/site-functions/_rampart").is_file()
    assert (root / "usr/local/share/fish/vendor_completions.d/rampart.fish").is_file()
    service = (root / "etc/systemd/system/rampart@.service").read_text()
    assert f"ExecStart={binary} mount --foreground" in service and "Type=notify" in service
    mount_unit = (root / "etc/systemd/system/mnt-rampart.mount").read_text()
    assert "Type=fuse.rampart" in mount_unit
    if shutil.which("systemd-analyze"):
        # Offline checks of the unit files (systemd need not be running).
        instance = root / "rampart@e2e.service"
        instance.write_text(service)
        r = run(["systemd-analyze", "verify", "--man=no", instance, root / "etc/systemd/system/mnt-rampart.mount"],
                timeout=120)
        assert r.returncode == 0 and "rampart" not in r.stderr, r.stderr

"""One writer at a time: the flock on <root>/var/lib/tfprov/lock.

What the machine looks like: a root where another "run" holds the lock. The test
takes the same advisory lock with fcntl.flock and writes a holder line, as a
tfprov run does ("pid N on HOST since TIME").
What is run: apply / destroy / rollback (writers) and plan / status / verify
(readers) with and without --lock-timeout.
What must hold: writers wait up to --lock-timeout, then exit 4 naming the holder;
they proceed as soon as the lock is released (or its holder dies); readers never
wait.
"""
import fcntl
import os
import subprocess
import sys
import time

HOLDER = "pid 4242 on testhost since 2026-01-01T00:00:00Z"

BASE = """schema: 1
stack:
  name: demo-env
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
driver:
  policy: skip
env:
  vars:
    TF_CPP_MIN_LOG_LEVEL: "{level}"
"""
PROFILE = "/opt/tfprov/stacks/demo-env/activate.sh"


def manifest(tmp_path, level="1"):
    p = tmp_path / f"m{level}.yaml"
    p.write_text(BASE.format(level=level))
    return str(p)


def lock_path(tfprov):
    d = tfprov.path("/var/lib/tfprov")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, "lock")


def hold(tfprov, holder=HOLDER):
    fd = os.open(lock_path(tfprov), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, (holder + "\n").encode(), 0)
    return fd


def test_waits_then_exits_4_naming_holder(tfprov, tmp_path):
    m = manifest(tmp_path)
    fd = hold(tfprov)
    try:
        t0 = time.monotonic()
        p = tfprov.run("--lock-timeout", "1.5", "apply", "-y", m, timeout=30)
        dt = time.monotonic() - t0
    finally:
        os.close(fd)
    assert p.returncode == 4, p.stdout + p.stderr
    assert 1.4 <= dt < 5, f"waited {dt:.2f} s for --lock-timeout 1.5"
    assert "locked by another tfprov run" in p.stderr
    assert "pid 4242" in p.stderr and "since 2026-01-01T00:00:00Z" in p.stderr, p.stderr
    assert not os.path.exists(tfprov.path(PROFILE)), "a locked-out apply changed the root"


def test_default_timeout_is_immediate(tfprov, tmp_path):
    fd = hold(tfprov)
    try:
        t0 = time.monotonic()
        tfprov.run("apply", "-y", manifest(tmp_path), check=4)
        assert time.monotonic() - t0 < 2
    finally:
        os.close(fd)


def test_proceeds_when_released_during_wait(tfprov, tmp_path):
    m = manifest(tmp_path)
    fd = hold(tfprov)
    proc = subprocess.Popen([tfprov.bin, "--root", tfprov.root, "--lock-timeout", "20",
                             "apply", "-y", m], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        time.sleep(1.0)
        assert proc.poll() is None, "apply did not wait"
        assert not os.path.exists(tfprov.path(PROFILE))
    finally:
        os.close(fd)  # releases the flock
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, out + err
    assert os.path.exists(tfprov.path(PROFILE))
    # The lock file now names the run that held it last.
    assert open(lock_path(tfprov)).read().startswith(f"pid {proc.pid} on ")


def test_dead_holder_releases_the_lock(tfprov, tmp_path):
    """The kernel drops a flock when its holder dies: no stale-lock cleanup needed."""
    path = lock_path(tfprov)
    code = ("import fcntl,os,sys,time\n"
            f"fd=os.open({path!r},os.O_RDWR|os.O_CREAT)\n"
            "fcntl.flock(fd,fcntl.LOCK_EX)\n"
            "os.pwrite(fd,b'pid %d on x since y\\n'%os.getpid(),0)\n"
            "print('held',flush=True)\ntime.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        p = tfprov.run("apply", "-y", manifest(tmp_path), check=4)
        assert f"pid {holder.pid}" in p.stderr
    finally:
        holder.kill()
        holder.wait()
    tfprov.run("apply", "-y", manifest(tmp_path), check=0)


def test_other_writers_are_locked_too(tfprov, tmp_path):
    m1, m2 = manifest(tmp_path, "1"), manifest(tmp_path, "2")
    tfprov.run("apply", "-y", m1, check=0)
    tfprov.run("apply", "-y", m2, check=0)
    fd = hold(tfprov)
    try:
        tfprov.run("destroy", "-y", "demo-env", check=4)
        tfprov.run("rollback", "-y", "demo-env", check=4)
        tfprov.run("apply", "-y", m1, check=4)
        # Readers do not wait for the writer lock.
        tfprov.run("plan", m2, "--detailed-exitcode", check=0)
        tfprov.run("status", check=0)
        tfprov.run("verify", check=0)
        tfprov.run("validate", m1, check=0)
    finally:
        os.close(fd)
    assert "'2'" in open(tfprov.path(PROFILE)).read()
    tfprov.run("destroy", "-y", "demo-env", check=0)


def test_two_real_applies_one_wins_other_waits(tfprov, tmp_path):
    """Two tfprov applies started together on a fresh root with --lock-timeout:
    both succeed (one after the other), the state is consistent and the stack
    ends at one of the two manifests."""
    ms = [manifest(tmp_path, "1"), manifest(tmp_path, "2")]
    procs = [subprocess.Popen([tfprov.bin, "--root", tfprov.root, "--lock-timeout", "20",
                               "apply", "-y", m], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for m in ms]
    outs = [p.communicate(timeout=30) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    text = open(tfprov.path(PROFILE)).read()
    assert ("'1'" in text) != ("'2'" in text)
    tfprov.run("verify", "--deep", check=0)
    winner = ms[0] if "'1'" in text else ms[1]
    tfprov.run("plan", "--detailed-exitcode", winner, check=0)

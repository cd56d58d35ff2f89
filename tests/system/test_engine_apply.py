"""apply / plan / status / verify / destroy / rollback through the real binary, and
the exit-code contract of README.md ("Exit codes") as far as the engine can produce it.

What the machine looks like: a fresh --root sandbox, no GPU, the env-only stack
(driver skipped + the env step's activate.sh/deactivate.sh), variants of it written into tmp.
What is run: the tfprov subcommands against that root.
What must hold: the files on disk, the state db and the exit codes below.
"""
import fcntl
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest

BASE = """schema: 1
stack:
  name: demo-env
  platform: linux-x86_64
prefix: /opt/tfprov
versions:
  tensorflow: 2.15.1
  python: "3.10"
driver:
  policy: {policy}
env:
  vars:
    TF_CPP_MIN_LOG_LEVEL: "{level}"
"""
PROFILE = "/opt/tfprov/stacks/demo-env/activate.sh"
DEACTIVATE = "/opt/tfprov/stacks/demo-env/deactivate.sh"
LOGIN = "/etc/profile.d/tfprov.sh"


def manifest(tmp_path, level="1", policy="skip", name="m.yaml"):
    p = tmp_path / name
    p.write_text(BASE.format(level=level, policy=policy))
    return str(p)


def tree_digest(root, exclude=()):
    """{relative path: (sha256, mode, size, mtime_ns)} of every file and dir under root."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            full = os.path.join(d, n)
            rel = os.path.relpath(full, root)
            if rel in exclude:
                continue
            st = os.lstat(full)
            h = None
            if os.path.isfile(full) and not os.path.islink(full):
                with open(full, "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
            out[rel] = (h, st.st_mode, st.st_size if h else 0, st.st_mtime_ns if h else 0)
    return out


def db_rows(tfprov, sql):
    c = sqlite3.connect(tfprov.state_db)
    try:
        return c.execute(sql).fetchall()
    finally:
        c.close()


# ------------------------------------------------------------ idempotent apply


def test_apply_then_no_changes(tfprov, tmp_path):
    m = manifest(tmp_path)
    p = tfprov.run("plan", "--detailed-exitcode", m, check=2)
    assert "+ env" in p.stdout
    p = tfprov.run("apply", "-y", m, check=0)
    assert "Apply complete: 1 added" in p.stdout
    prof = tfprov.path(PROFILE)
    text = open(prof).read()
    assert "export TF_CPP_MIN_LOG_LEVEL='1'\n" in text
    assert "export TF_FORCE_GPU_ALLOW_GROWTH='true'\n" in text
    st = os.stat(prof)
    p = tfprov.run("apply", "-y", m, check=0)
    assert "No changes." in p.stdout
    assert "applying" not in p.stdout
    assert os.stat(prof).st_mtime_ns == st.st_mtime_ns, "a no-op apply rewrote the file"
    tfprov.run("plan", "--detailed-exitcode", m, check=0)
    # Recorded: one file with its real size and digest.
    rows = db_rows(tfprov, "SELECT path, size, sha256, mode FROM files ORDER BY path")
    deact = tfprov.path(DEACTIVATE)
    assert rows == [(PROFILE, st.st_size, hashlib.sha256(open(prof, "rb").read()).hexdigest(),
                     0o644),
                    (DEACTIVATE, os.path.getsize(deact),
                     hashlib.sha256(open(deact, "rb").read()).hexdigest(), 0o644)]
    # The first stack on the machine is the default: the one login script enters it.
    assert PROFILE in open(tfprov.path(LOGIN)).read()
    assert db_rows(tfprov, "SELECT count(*), min(result) FROM generations") == [(1, "ok")]
    assert db_rows(tfprov, "PRAGMA user_version")[0][0] >= 1
    assert db_rows(tfprov, "PRAGMA journal_mode")[0][0] == "wal"


def test_env_change_is_an_update(tfprov, tmp_path):
    m1 = manifest(tmp_path, level="1", name="m1.yaml")
    m2 = manifest(tmp_path, level="3", name="m2.yaml")
    tfprov.run("apply", "-y", m1, check=0)
    p = tfprov.run("plan", "--detailed-exitcode", m2, check=2)
    assert "~ env" in p.stdout and "the manifest changed" in p.stdout
    assert "Plan: 0 to add, 1 to change, 0 to destroy" in p.stdout
    p = tfprov.run("apply", "-y", m2, check=0)
    assert "1 changed" in p.stdout
    assert "export TF_CPP_MIN_LOG_LEVEL='3'\n" in open(tfprov.path(PROFILE)).read()
    tfprov.run("plan", "--detailed-exitcode", m2, check=0)
    # Nothing left behind next to the scripts; one login script.
    assert sorted(os.listdir(tfprov.path("/opt/tfprov/stacks/demo-env"))) == [
        "activate.sh", "deactivate.sh"]
    assert os.listdir(tfprov.path("/etc/profile.d")) == ["tfprov.sh"]


# ------------------------------------------------------------ drift and repair


def test_deleted_file_is_drift_and_apply_repairs(tfprov, tmp_path):
    m = manifest(tmp_path)
    tfprov.run("apply", "-y", m, check=0)
    good = open(tfprov.path(PROFILE)).read()
    os.unlink(tfprov.path(PROFILE))
    p = tfprov.run("status", check=2)
    assert "DRIFT: 1 missing" in p.stdout + p.stderr
    p = tfprov.run("verify", check=2)  # drift: 2, as status says
    assert f"X {PROFILE}" in p.stderr
    p = tfprov.run("plan", "--detailed-exitcode", m, check=2)
    assert "~ env" in p.stdout and "1 missing" in p.stdout
    tfprov.run("apply", "-y", m, check=0)
    assert open(tfprov.path(PROFILE)).read() == good
    tfprov.run("status", check=0)
    tfprov.run("verify", check=0)


def test_content_change_detected_and_repaired(tfprov, tmp_path):
    m = manifest(tmp_path)
    tfprov.run("apply", "-y", m, check=0)
    prof = tfprov.path(PROFILE)
    good = open(prof).read()
    with open(prof, "a") as f:
        f.write("export EVIL=1\n")
    p = tfprov.run("verify", check=2)
    assert f"U {PROFILE}" in p.stderr
    tfprov.run("status", check=2)
    tfprov.run("apply", "-y", m, check=0)
    assert open(prof).read() == good
    tfprov.run("verify", "--deep", check=0)


def test_deep_verify_sees_same_size_same_mtime_edit(tfprov, tmp_path):
    m = manifest(tmp_path)
    tfprov.run("apply", "-y", m, check=0)
    prof = tfprov.path(PROFILE)
    st = os.stat(prof)
    data = open(prof).read().replace("'1'", "'9'")
    with open(prof, "w") as f:
        f.write(data)
    os.utime(prof, ns=(st.st_atime_ns, st.st_mtime_ns))
    tfprov.run("verify", check=0)  # the fast check cannot see it: by design
    p = tfprov.run("verify", "--deep", check=2)
    assert f"U {PROFILE}" in p.stderr and f"M {PROFILE}" not in p.stderr
    # apply compares size, time and mode only: verify says so and what to do,
    # and doing it restores the file.
    assert "kept their size, time and mode" in p.stderr, p.stderr
    assert "remove it and run `tfprov apply`" in p.stderr, p.stderr
    os.unlink(prof)
    tfprov.run("apply", "-y", m, check=0)
    assert "'1'" in open(prof).read()
    tfprov.run("verify", "--deep", check=0)


def test_mode_change_detected_and_repaired(tfprov, tmp_path):
    m = manifest(tmp_path)
    tfprov.run("apply", "-y", m, check=0)
    prof = tfprov.path(PROFILE)
    os.chmod(prof, 0o600)
    p = tfprov.run("verify", "--deep", check=2)
    assert f"M {PROFILE}" in p.stderr and f"U {PROFILE}" not in p.stderr
    # The mode is in the same stat() the fast drift check already makes: plan and
    # apply must see it and put 0644 back.
    p = tfprov.run("plan", "--detailed-exitcode", m)
    assert p.returncode == 2, p.stdout + p.stderr
    tfprov.run("apply", "-y", m, check=0)
    assert os.stat(prof).st_mode & 0o7777 == 0o644
    tfprov.run("verify", "--deep", check=0)


# ------------------------------------------------------------ destroy, rollback


def test_destroy_removes_file_and_stack(tfprov, tmp_path):
    m = manifest(tmp_path)
    tfprov.run("apply", "-y", m, check=0)
    p = tfprov.run("destroy", "-y", "demo-env", check=0)
    assert "Destroyed stack demo-env" in p.stdout
    assert not os.path.exists(tfprov.path(PROFILE))
    assert os.listdir(tfprov.path("/etc/profile.d")) == []
    assert db_rows(tfprov, "SELECT count(*) FROM stacks")[0][0] == 0
    assert db_rows(tfprov, "SELECT count(*) FROM files")[0][0] == 0
    assert db_rows(tfprov, "SELECT count(*) FROM resources")[0][0] == 0
    assert "No stacks" in tfprov.run("status", check=0).stdout
    tfprov.run("destroy", "-y", "demo-env", check=1)
    tfprov.run("plan", "--detailed-exitcode", m, check=2)


def test_rollback_restores_earlier_profile(tfprov, tmp_path):
    m1 = manifest(tmp_path, level="1", name="m1.yaml")
    m2 = manifest(tmp_path, level="2", name="m2.yaml")
    m3 = manifest(tmp_path, level="3", name="m3.yaml")
    for m in (m1, m2, m3):
        tfprov.run("apply", "-y", m, check=0)
    prof = tfprov.path(PROFILE)
    assert "'3'" in open(prof).read()
    # Default: the last good generation before the current one.
    tfprov.run("rollback", "-y", "demo-env", check=0)
    assert "export TF_CPP_MIN_LOG_LEVEL='2'\n" in open(prof).read()
    tfprov.run("rollback", "-y", "demo-env", "--generation", "1", check=0)
    assert "export TF_CPP_MIN_LOG_LEVEL='1'\n" in open(prof).read()
    tfprov.run("verify", "--deep", check=0)
    # After a rollback to generation 1, m1 is what the stack matches.
    tfprov.run("plan", "--detailed-exitcode", m1, check=0)
    tfprov.run("rollback", "-y", "demo-env", "--generation", "99", check=1)


# ------------------------------------------------------------ --json


def test_json_one_object_per_line(tfprov, tmp_path):
    m = manifest(tmp_path)
    for run, changed in ((1, True), (2, False)):
        p = tfprov.run("--json", "apply", "-y", m, check=0)
        lines = [ln for ln in p.stdout.split("\n") if ln]
        assert lines, p.stderr
        objs = [json.loads(ln) for ln in lines]  # each line alone is one JSON object
        assert all(isinstance(o, dict) and "type" in o for o in objs)
        res = objs[-1]
        assert res["type"] == "result" and res["exit_code"] == 0 and res["failed"] is False
        done = [o for o in objs if o["type"] == "apply_complete"]
        if changed:
            assert [(o["step"], o["changed"], o["failed"]) for o in done] == [("env", True, False)]
        else:
            assert done == []
            plan = [o for o in objs if o["type"] == "planned_change" and o["step"] == "env"]
            assert plan and plan[0]["action"] == "noop"
        # Ansible's shape: the result says whether anything changed.
        assert res["changed"] is changed, res
    # Diagnostics in JSON mode are JSON too, and stdout has nothing else.
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 2\n")
    p = tfprov.run("--json", "validate", str(bad), check=3)
    for ln in p.stdout.splitlines():
        json.loads(ln)


# ------------------------------------------------------------ exit codes


def test_exit_1_error(tfprov, tmp_path):
    tfprov.run("apply", "-y", manifest(tmp_path), check=0)
    p = tfprov.run("destroy", "-y", "no-such-stack", check=1)
    assert "no stack named 'no-such-stack'" in p.stderr


def test_exit_64_usage(tfprov, tmp_path):
    tfprov.run("frobnicate", check=64)
    tfprov.run("--no-such-option", "status", check=64)
    tfprov.run("apply", check=64)  # no manifest
    tfprov.run("--jobs", "0", "status", check=64)
    tfprov.run("--lock-timeout", "soon", "status", check=64)
    tfprov.run(check=64)


def test_exit_6_leaves_root_and_state_unchanged(tfprov, tmp_path):
    skip = manifest(tmp_path, level="1", policy="skip", name="skip.yaml")
    req = manifest(tmp_path, level="2", policy="require", name="req.yaml")
    tfprov.run("apply", "-y", skip, check=0)
    # The lock file's holder line is rewritten by every writer; it is not state.
    lock = os.path.join("var", "lib", "tfprov", "lock")
    before = tree_digest(tfprov.root, exclude=(lock,))
    p = tfprov.run("apply", "-y", req)
    assert p.returncode == 6, p.stdout + p.stderr
    assert "no NVIDIA driver found" in p.stdout + p.stderr
    after = tree_digest(tfprov.root, exclude=(lock,))
    assert after == before


def test_exit_6_on_fresh_root_creates_nothing(tfprov, tmp_path):
    req = manifest(tmp_path, policy="require")
    p = tfprov.run("apply", "-y", req)
    assert p.returncode == 6, p.stdout + p.stderr
    created = sorted(tree_digest(tfprov.root))
    # Precondition failed before anything changed: no file outside the state dir,
    # and no stack or generation recorded.
    assert [c for c in created if not c.startswith("var")] == []
    if os.path.exists(tfprov.state_db):
        assert db_rows(tfprov, "SELECT count(*) FROM stacks")[0][0] == 0
        assert db_rows(tfprov, "SELECT count(*) FROM generations")[0][0] == 0


def hold_lock(tfprov, holder="pid 4242 on testhost since 2026-01-01T00:00:00Z"):
    d = tfprov.path("/var/lib/tfprov")
    os.makedirs(d, exist_ok=True)
    fd = os.open(os.path.join(d, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, (holder + "\n").encode(), 0)
    return fd


def test_exit_4_locked(tfprov, tmp_path):
    m = manifest(tmp_path)
    fd = hold_lock(tfprov)
    try:
        p = tfprov.run("apply", "-y", m, check=4)
        assert "pid 4242" in p.stderr
    finally:
        os.close(fd)
    tfprov.run("apply", "-y", m, check=0)


def test_exit_130_sigint_during_lock_wait(tfprov, tmp_path):
    m = manifest(tmp_path)
    tfprov.run("apply", "-y", m, check=0)
    fd = hold_lock(tfprov)
    try:
        proc = subprocess.Popen([tfprov.bin, "--root", tfprov.root, "--lock-timeout", "30",
                                 "apply", "-y", manifest(tmp_path, level="5", name="m5.yaml")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Waiting once it holds the lock file open (its flock then blocks), not
        # after a fixed delay that a loaded machine may not have given it.
        lock = os.path.realpath(tfprov.path("/var/lib/tfprov/lock"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and lock not in [
                os.path.realpath(f"/proc/{proc.pid}/fd/{n}")
                for n in os.listdir(f"/proc/{proc.pid}/fd")]:
            time.sleep(0.01)
        time.sleep(0.3)
        assert proc.poll() is None, "apply did not wait for the lock"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=5)
        dt = time.monotonic() - t0
    finally:
        os.close(fd)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert dt < 2
    # Interrupted before anything changed.
    assert "'1'" in open(tfprov.path(PROFILE)).read()
    tfprov.run("plan", "--detailed-exitcode", m, check=0)


def test_exit_2_verify_drift_as_status(tfprov, tmp_path):
    """Drift is one exit code everywhere: 2 from verify as from status (8 is kept
    for what does not work: a library that does not load, a failed GPU probe)."""
    tfprov.run("apply", "-y", manifest(tmp_path), check=0)
    os.unlink(tfprov.path(PROFILE))
    tfprov.run("status", check=2)
    p = tfprov.run("verify", "demo-env", check=2)
    assert f"X {PROFILE}" in p.stderr


def test_exit_2_and_0_status(tfprov, tmp_path):
    tfprov.run("status", check=0)  # nothing applied yet
    tfprov.run("apply", "-y", manifest(tmp_path), check=0)
    tfprov.run("status", check=0)


def test_exit_3_manifest_invalid_for_apply(tfprov, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE.format(level="1", policy="sometimes"))
    p = tfprov.run("apply", "-y", str(bad), check=3)
    assert f"{bad}:10:11: error: " in p.stderr, p.stderr
    assert not os.path.exists(tfprov.path(PROFILE))

"""A failed syncfs fails the step and commits nothing.

txn_commit makes every staged byte and rename durable with one syncfs per
filesystem before the records say they exist (ARCHITECTURE.md section 4). A
disk that reports a write-back error there (EIO) must not be papered over: the
step fails naming the path and the errno, nothing is recorded, and the
journal undoes what the step placed.

STAND-IN: the failing disk is a preloaded shared object, built here, whose
syncfs() returns -1 with errno EIO: the same libc entry point tfprov calls;
SQLite's own fsync calls are not affected.
"""
import os
import subprocess

import pytest

from lib_provision import db_rows, no_stub_env, out, temp_leftovers

MANIFEST = """schema: 1
stack:
  name: durable
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
driver:
  policy: skip
env:
  profile_dir: /etc/profile.d
  vars:
    ITERATION: "{i}"
"""

SHIM = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <unistd.h>
int syncfs(int fd)
{
	(void)fd;
	errno = EIO;
	return -1;
}
"""


@pytest.fixture(scope="module")
def failing_syncfs(tmp_path_factory):
    d = tmp_path_factory.mktemp("shim")
    (d / "shim.c").write_text(SHIM)
    so = d / "libfailsync.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(d / "shim.c")], check=True,
                   capture_output=True, timeout=60)
    return str(so)


def test_syncfs_failure_fails_the_step_and_records_nothing(tfprov, tmp_path, failing_syncfs):
    m0 = tmp_path / "m0.yaml"
    m0.write_text(MANIFEST.format(i=0))
    p = tfprov.run("apply", "-y", str(m0), env=no_stub_env())
    assert p.returncode == 0, out(p)
    profile = tfprov.path("/opt/tfprov/stacks/durable/activate.sh")
    old = open(profile, "rb").read()
    files = db_rows(tfprov, "SELECT path, sha256 FROM files ORDER BY path")
    desired = db_rows(tfprov, "SELECT addr, desired FROM resources ORDER BY addr")

    m1 = tmp_path / "m1.yaml"
    m1.write_text(MANIFEST.format(i=1))
    # An ASan build (the sanitizer pass) accepts the shim loaded before it.
    asan = (os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    p = tfprov.run("apply", "-y", str(m1),
                   env=no_stub_env(LD_PRELOAD=failing_syncfs, ASAN_OPTIONS=asan))
    text = out(p)
    assert p.returncode == 1, text
    assert "syncfs" in text and "Input/output error" in text, text
    assert tfprov.root in text, text  # the path that could not be made durable
    # Nothing committed: the old profile back, the same records, no journal.
    assert open(profile, "rb").read() == old
    assert db_rows(tfprov, "SELECT path, sha256 FROM files ORDER BY path") == files
    assert db_rows(tfprov, "SELECT addr, desired FROM resources ORDER BY addr") == desired
    assert db_rows(tfprov, "SELECT op, path FROM journal") == []
    assert temp_leftovers(tfprov.root) == []
    # With a working disk the same manifest applies.
    p = tfprov.run("apply", "-y", str(m1), env=no_stub_env())
    assert p.returncode == 0, out(p)
    assert b"ITERATION='1'" in open(profile, "rb").read()


def test_writer_sweeps_cache_name_temps_of_dead_runs(tfprov, tmp_path):
    """A run killed inside fs_write_atomic leaves names/<hex>.tfprov-tmp.<pid> in the
    download cache (found by test_power_loss's conda variants): the next writer
    removes those whose process is gone, and keeps one whose writer still runs."""
    m = tmp_path / "m.yaml"
    m.write_text(MANIFEST.format(i=1))
    tfprov.run("apply", "-y", m, check=0, env=no_stub_env())
    names = tfprov.path("/var/cache/tfprov/names")
    os.makedirs(names, exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no process holds now
    gone = os.path.join(names, "a" * 64 + ".tfprov-tmp.%d" % dead.pid)
    live = os.path.join(names, "b" * 64 + ".tfprov-tmp.%d" % os.getpid())
    kept = os.path.join(names, "c" * 64)
    for p in (gone, live, kept):
        with open(p, "w") as f:
            f.write("x.whl\n")
    p = tfprov.run("destroy", "-y", "no-such-stack", env=no_stub_env())
    assert not os.path.exists(gone), out(p)
    assert os.path.exists(live) and os.path.exists(kept), os.listdir(names)
    # A reader (status) takes no writer lock and removes nothing.
    os.unlink(live)
    with open(gone, "w") as f:
        f.write("x.whl\n")
    tfprov.run("status", env=no_stub_env())
    assert os.path.exists(gone)


def test_recovery_killed_after_it_restored_an_env_runs_again(tfprov, tmp_path):
    """Recovery is itself killed and runs again. Generation B replaces a conda env
    (a 'tree' row whose backup is A's env) and then puts the env step's hook into
    the new env (a 'put' without backup, 'mkdir' rows for etc/conda/activate.d).
    Killed right after that hook's rename, the recovery undoes the hook, puts A's
    env back, and is killed right after that restore: the next recovery must not
    undo the hook again, which would now delete A's own hook (found by
    test_power_loss.py's conda-replace variant as a second power loss). The kills
    land on operations of the run itself (lib_killpoint, an LD_PRELOAD shim); the
    conda packages are lib_conda.py's, served by a loopback mirror."""
    from test_power_loss import conda_fixtures

    import lib_killpoint
    from lib_provision import Mirror

    env = dict(os.environ, **no_stub_env())
    hook = tfprov.path("/opt/tfprov/envs/tf/etc/conda/activate.d/tfprov-demo.sh")
    with Mirror(tmp_path / "www") as mirror:
        man_a, man_b, _ = conda_fixtures(tmp_path, mirror, "conda-replace")
        tfprov.run("apply", "-y", man_a, check=0, env=env, timeout=300)
        hook_a = open(hook, "rb").read()
        k = lib_killpoint.Killer(tmp_path / "kp", skip=[lib_killpoint.scratch(tfprov.root)])
        apply_b = [tfprov.bin, "--root", str(tfprov.root), "-y", "apply", str(man_b)]
        saved = lib_killpoint.saved_root(tfprov.root, tmp_path / "saved-a")
        p, ref = k.points(apply_b, env)
        assert p.returncode == 0, p.stdout + p.stderr
        main = [e for e in ref if e.role == "tfprov#1"]
        at = next(i for i, e in enumerate(main)
                  if e.op == "rename" and "/envs/tf/etc/conda/activate.d/.tfprov-tmp" in e.arg)
        saved()
        rc, hit = k.run_to(apply_b, env, main[at + 1].point)
        assert hit is not None and rc != 0, "the apply was not killed after the hook's rename"
        assert os.path.exists(hook), "the kill came before the hook was in place"
    recover = [tfprov.bin, "--root", str(tfprov.root), "destroy", "-y", "no-such-stack"]
    saved = lib_killpoint.saved_root(tfprov.root, tmp_path / "saved-crash")
    p, ref = k.points(recover, env)  # recovers, then: no such stack (exit 1)
    assert p.returncode == 1 and "recovered from an interrupted run" in p.stderr, p.stderr
    main = [e for e in ref if e.role == "tfprov#1"]
    at = next(i for i, e in enumerate(main) if e.op == "rename" and "/envs/.tfprov-bak-" in e.arg)
    saved()
    rc, hit = k.run_to(recover, env, main[at + 1].point)
    assert hit is not None and rc != 0, "the recovery was not killed after the env's restore"
    p = tfprov.run("destroy", "-y", "no-such-stack", env=env)
    assert p.returncode == 1 and "no stack named" in p.stderr, out(p)
    assert os.path.exists(hook) and open(hook, "rb").read() == hook_a, \
        "the second recovery undid the hook again: " + out(p)
    assert db_rows(tfprov, "SELECT op, path FROM journal") == []
    p = tfprov.run("verify", "--deep", env=env)
    assert p.returncode == 0, out(p)

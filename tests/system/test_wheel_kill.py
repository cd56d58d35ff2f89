"""kill -9 during the wheel install, native or by pip: the env is as it was, then converges.

pip changes an env in place; tfprov snapshots it (hard links) into the txn's
journaled work directory first, so the recovery of a killed run swaps the
snapshot back (place.h: txn_snapshot_dir). The native installer builds a copy
and replaces the env through the journal.

What the machine looks like: one --root with a real venv (manager: venv) and
two complete locks of the same three distributions in different versions (A
and B; the big one has 1,500 modules so that unpacking, compileall and the
swap take a while), served by a PEP 503 index on 127.0.0.1. Going from A to B
uninstalls A's versions from RECORD and installs B's, and back.
What is run: apply A, apply B (uninterrupted: the reference listings LA and
LB). Then, alternately towards A and B: `tfprov apply` killed with SIGKILL
after a random delay (uniform over the measured duration of the A-to-B apply), then a
command that takes the writer lock and so runs recovery (`destroy` of a stack
that does not exist), then the apply again.
What must hold: after recovery the env is exactly the listing it had before
the killed apply, or exactly the target listing (the kill came after the
commit); the journal is empty and no .tfprov-* entry is left under the root;
after the next apply the env is exactly the target listing and pip check is
clean. Set TFPROV_KILL_SEED to replay; TFPROV_KILL_ITERS to run longer.
"""
import os
import random
import re
import signal
import sqlite3
import subprocess
import time

import pytest

import lib_pyindex
from lib_provision import missing_recorded, no_stub_env, out, temp_leftovers
from test_python_env import ENV_PREFIX, manifest, venv_yaml
from test_wheel_native import PIP_ENV, listing, make_wheel, pip_yaml

ITERS = int(os.environ.get("TFPROV_KILL_ITERS", "6"))


def locks(d):
    sets = {}
    for tag, ver in (("A", "1.0"), ("B", "2.0")):
        pins = []
        big = {f"tfprov_big/m{i:04d}.py": f"V = {ver!r}\nI = {i}\n" + "# pad\n" * 40
               for i in range(1500)}
        big["tfprov_big/__init__.py"] = f"VERSION = {ver!r}\n"
        _, h = make_wheel(d, "tfprov-big", ver, big, console={"tfprov-big": "tfprov_big:main"})
        pins.append(("tfprov-big", ver, h))
        _, h = make_wheel(d, "tfprov-small", ver, {"tfprov_small.py": f"V = {ver!r}\n"},
                          requires=["tfprov-big"])
        pins.append(("tfprov-small", ver, h))
        dd = f"tfprov_data-{ver}.data"
        _, h = make_wheel(d, "tfprov-data", ver,
                          {"tfprov_data/__init__.py": "", f"{dd}/data/share/tfprov/{ver}": ver,
                           f"{dd}/scripts/tfprov-data": "#!python\nprint(1)\n"})
        pins.append(("tfprov-data", ver, h))
        sets[tag] = pins
    return sets


def journal_rows(tfprov):
    con = sqlite3.connect(f"file:{tfprov.state_db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT op, path FROM journal").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("installer", [None, "pip"])
def test_kill_9_during_install(tfprov, tmp_path, installer):
    seed = int(os.environ.get("TFPROV_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    wheels = tmp_path / "wheels"
    sets = locks(str(wheels))
    idx = lib_pyindex.Index(str(wheels))
    env = tfprov.path(ENV_PREFIX)
    try:
        mans = {t: manifest(tmp_path / f"{t}.yaml", venv_yaml(),
                            pip_yaml(idx.url, sets[t], installer))
                for t in sets}
        ref, took = {}, []
        for t in ("A", "B"):
            t0 = time.monotonic()
            p = tfprov.run("apply", "-y", mans[t], env=no_stub_env(), timeout=600)
            took.append(time.monotonic() - t0)
            assert p.returncode == 0, out(p)
            assert bool(re.search(r"pip: \d+ wheels installed natively", out(p))) == \
                (installer is None), out(p)
            ref[t] = listing(env)
        assert ref["A"] != ref["B"]
        cur, landed = "B", {"before": 0, "after": 0}
        # The switch between A and B (took[-1]) is what is killed; the first
        # apply also created the venv and is longer. A kill that landed after
        # the commit makes the next one aim earlier (under a loaded machine
        # took[-1] can be far longer than the switch it is meant to measure).
        hi = took[-1]
        for it in range(ITERS if installer is None else max(1, ITERS - 2)):
            target = "A" if cur == "B" else "B"
            delay = rng.uniform(0.2, hi)
            proc = subprocess.Popen(
                [tfprov.bin, "--root", tfprov.root, "apply", "-y", mans[target]],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, **no_stub_env()})
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            r = tfprov.run("destroy", "no-such-stack", env=no_stub_env())
            assert r.returncode != 0, out(r)  # it only recovered
            now = listing(env)
            ctx = f"seed {seed} iteration {it} delay {delay:.2f}s"
            assert now in (ref[cur], ref[target]), ctx
            landed["before" if now == ref[cur] else "after"] += 1
            if now != ref[cur]:
                hi = max(0.3, delay)
            assert journal_rows(tfprov) == [], ctx
            assert temp_leftovers(tfprov.root) == [], ctx
            p = tfprov.run("apply", "-y", mans[target], env=no_stub_env(), timeout=600)
            assert p.returncode == 0, ctx + out(p)
            assert listing(env) == ref[target], ctx
            chk = subprocess.run([os.path.join(env, "bin", "python"), "-m", "pip", "check"],
                                 capture_output=True, text=True, env=PIP_ENV)
            assert chk.returncode == 0, ctx + chk.stdout + chk.stderr
            cur = target
        print(f"seed {seed}: kills left the env as before {landed['before']}x, "
              f"as after {landed['after']}x")
        assert landed["before"] > 0, "no kill landed before the commit; the test proves nothing"
    finally:
        idx.close()


def test_kill_9_while_the_venv_is_created_with_its_wheels(tfprov, tmp_path):
    """The venv itself being created (python -m venv at its final path, then
    lock A installed natively), and removed again, alternately, each apply
    killed with SIGKILL at a random moment: after the recovery the env is
    absent, the bare venv (between the pyenv and the pip step, each its own
    transaction) or exactly A's listing (never a half-created venv), and every
    recorded file is on disk; the journal is
    empty and no .tfprov-* path is left; the next apply converges."""
    seed = int(os.environ.get("TFPROV_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    wheels = tmp_path / "wheels"
    sets = locks(str(wheels))
    idx = lib_pyindex.Index(str(wheels))
    env = tfprov.path(ENV_PREFIX)

    def now():
        return listing(env) if os.path.lexists(env) else {}
    try:
        mans = {"A": manifest(tmp_path / "A.yaml", venv_yaml(), pip_yaml(idx.url, sets["A"])),
                "V": manifest(tmp_path / "V.yaml", venv_yaml()),
                None: manifest(tmp_path / "none.yaml", "")}
        ref, took = {}, {}
        for t in ("V", "A", None):
            t0 = time.monotonic()
            p = tfprov.run("apply", "-y", mans[t], env=no_stub_env(), timeout=600)
            took[t] = time.monotonic() - t0
            assert p.returncode == 0, out(p)
            ref[t] = now()
        assert ref["A"] and ref[None] == {}
        cur, killed, landed = None, 0, {"before": 0, "after": 0}
        for it in range(max(2, ITERS - 2)):
            target = "A" if cur is None else None
            delay = rng.uniform(0.1, 0.9 * took[target])
            proc = subprocess.Popen(
                [tfprov.bin, "--root", tfprov.root, "apply", "-y", mans[target]],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, **no_stub_env()})
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed += proc.returncode == -signal.SIGKILL
            ctx = f"seed {seed} iteration {it} {cur}->{target} delay {delay:.2f}s"
            r = tfprov.run("destroy", "no-such-stack", env=no_stub_env())
            assert r.returncode != 0, out(r)  # it only recovered
            got = now()
            # pyenv and pip are two steps, each its own transaction: between them
            # the env is the bare venv (pip's wheels removed, or not yet installed).
            assert got in (ref[cur], ref["V"], ref[target]), ctx
            landed["before" if got == ref[cur] else "after"] += 1
            assert missing_recorded(tfprov) == [], ctx
            assert journal_rows(tfprov) == [], ctx
            assert temp_leftovers(tfprov.root) == [], ctx
            p = tfprov.run("apply", "-y", mans[target], env=no_stub_env(), timeout=600)
            assert p.returncode == 0, ctx + out(p)
            assert now() == ref[target], ctx
            assert temp_leftovers(tfprov.root) == [], ctx
            cur = target
        print(f"seed {seed}: {killed} killed; the env was left as before {landed['before']}x, "
              f"as the target {landed['after']}x")
        assert killed > 0
    finally:
        idx.close()

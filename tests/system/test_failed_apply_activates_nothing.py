"""A failed apply activates nothing: the login environment (the machine's
login script <profile_dir>/tfprov.sh and the stack's activate.sh and
deactivate.sh it sources) changes only when the whole generation commits.

Scenario: a venv stack (env, pyenv, pip) whose pip step fails: the lock pins a
wheel whose file does not match its RECORD (exit 5, at the pip step, after the
env step would have run in dependency order). The manifest also changes the
env step (an extra variable), so an env step applied before pip would rewrite
activate.sh.
Real: the binary, a real venv, wheels from a --mirror directory; no GPU needed
(driver.policy: skip).
What must hold: on a fresh root nothing of the login environment appears; on
a root whose default stack is this stack the login environment is byte for
byte what it was, and stays so after a kill -9 of the failing apply in its pip
step and a later writer's recovery.
Takes about 30 s (three venvs).
"""
import os
import signal
import subprocess
import time

from lib_provision import no_stub_env, out, temp_leftovers
from test_python_env import manifest, venv_yaml
from test_wheel_native import make_wheel, pip_yaml

DEAD_INDEX = "http://127.0.0.1:9/simple/"


def login_env(tfprov):
    """Every file a login shell reads from tfprov: path -> (mode, bytes)."""
    seen = {}
    for top in ("/etc/profile.d", "/opt/tfprov/stacks"):
        for dp, _, fns in os.walk(tfprov.path(top)):
            for f in fns:
                p = os.path.join(dp, f)
                st = os.lstat(p)
                with open(p, "rb") as fh:
                    seen[os.path.relpath(p, tfprov.root)] = (st.st_mode, fh.read())
    return seen


def _world(tmp_path):
    wheels = str(tmp_path / "wheels")
    _, good = make_wheel(wheels, "tfprov-good", "1.0", {"tfprov_good/__init__.py": "G = 1\n"})
    _, evil = make_wheel(wheels, "tfprov-evil", "1.0", {"tfprov_evil/__init__.py": "E = 1\n"},
                         corrupt="tfprov_evil/__init__.py")
    env_v = lambda v: f"env:\n  vars:\n    TFPROV_GENERATION: \"{v}\"\n"  # noqa: E731
    good_m = manifest(tmp_path / "good.yaml", env_v("one") + venv_yaml(),
                      pip_yaml(DEAD_INDEX, [("tfprov-good", "1.0", good)]))
    bad_m = manifest(tmp_path / "bad.yaml", env_v("two") + venv_yaml(),
                     pip_yaml(DEAD_INDEX, [("tfprov-good", "1.0", good),
                                           ("tfprov-evil", "1.0", evil)]))
    return wheels, good_m, bad_m


def _apply(tfprov, wheels, m):
    return tfprov.run("--mirror", wheels, "apply", "-y", m, env=no_stub_env(), timeout=300)


def _failed_at_pip(p):
    assert p.returncode == 5, out(p)
    assert "does not match the wheel's RECORD hash" in out(p), out(p)


def test_first_apply_failing_at_pip_activates_nothing(tfprov, tmp_path):
    wheels, _, bad_m = _world(tmp_path)
    _failed_at_pip(_apply(tfprov, wheels, bad_m))
    assert login_env(tfprov) == {}
    assert "env: applying" not in out(_apply(tfprov, wheels, bad_m))


def test_update_of_the_default_stack_failing_at_pip_keeps_login_shells(tfprov, tmp_path):
    wheels, good_m, bad_m = _world(tmp_path)
    p = _apply(tfprov, wheels, good_m)
    assert p.returncode == 0, out(p)
    before = login_env(tfprov)
    assert "etc/profile.d/tfprov.sh" in before, sorted(before)
    act = before["opt/tfprov/stacks/py/activate.sh"][1]
    assert b"TFPROV_GENERATION" in act and b"one" in act, act
    p = _apply(tfprov, wheels, bad_m)
    _failed_at_pip(p)
    assert login_env(tfprov) == before
    # The env step is still pending: the next plan shows it.
    p = tfprov.run("plan", bad_m, env=no_stub_env())
    assert "~ env" in out(p) or "env:" in out(p), out(p)

    # Killed (-9) in its pip step: login shells unchanged, and after the next
    # writer's recovery too.
    argv = [tfprov.bin, "--root", tfprov.root, "--mirror", wheels, "apply", "-y", bad_m]
    k = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, **no_stub_env()), start_new_session=True)
    seen = ""
    t0 = time.monotonic()
    for line in k.stdout:
        seen += line
        if "pip: applying" in line:
            os.killpg(k.pid, signal.SIGKILL)
            break
        assert time.monotonic() - t0 < 120, seen
    k.wait(timeout=60)
    assert "pip: applying" in seen and "env: applying" not in seen, seen
    assert login_env(tfprov) == before
    p = _apply(tfprov, wheels, good_m)  # recovery, then the good generation again
    assert p.returncode == 0, out(p)
    assert login_env(tfprov) == before
    assert temp_leftovers(tfprov.root) == []

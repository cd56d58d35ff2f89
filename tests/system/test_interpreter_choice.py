"""The interpreter every user can run: with python.interpreter unset, the venv
of a stack for all users is made of the system's python3.X, resolved to the
real file (never a shim), and one that other users cannot run is refused at
plan with the reason.

STAND-INS: a fake pyenv-style shim, a shell script that execs a copy of the
system's python3.X, both under a 0700 "home" directory; the system
directories tfprov looks in first are replaced by an empty one through
TFPROV_SYSTEM_PYTHON_DIRS (a test seam) so that only the shim offers it.
Real: the binary, the system's Python, plan and init as a user runs them.
Takes about 3 s.
"""
import os
import shutil
import tempfile

from pathlib import Path

import pytest
import yaml

from lib_provision import no_stub_env, out
from test_python_env import PYVER, manifest, venv_yaml

SYSTEM = "/usr/bin/python" + PYVER


@pytest.fixture
def top():
    """A 0755 directory (pytest's own tmp tree is 0700: every user is shut out of it)."""
    d = tempfile.mkdtemp(prefix="tfprov-interp-")
    os.chmod(d, 0o755)
    yield Path(d)
    shutil.rmtree(d)


def _shim_home(top, mode):
    """<home>/shims/python3.X execs <home>/versions/bin/python3.X (a copy of the system's)."""
    home = top / "home"
    (home / "shims").mkdir(parents=True)
    (home / "versions" / "bin").mkdir(parents=True)
    real = home / "versions" / "bin" / ("python" + PYVER)
    shutil.copy2(SYSTEM, real)
    shim = home / "shims" / ("python" + PYVER)
    shim.write_text('#!/bin/sh\nexec "%s" "$@"\n' % real)
    shim.chmod(0o755)
    home.chmod(mode)
    return home, str(real)


def _env(home):
    return no_stub_env(PATH="%s/shims:%s" % (home, os.environ.get("PATH", "/usr/bin:/bin")),
                       TFPROV_SYSTEM_PYTHON_DIRS=str(home / "nowhere"))


@pytest.fixture
def system_python():
    if not os.access(SYSTEM, os.X_OK):
        pytest.skip(SYSTEM + " is not installed")


def test_a_shim_under_a_0700_home_is_refused_at_plan(tfprov, tmp_path, top, system_python):
    home, real = _shim_home(top, 0o700)
    m = manifest(tmp_path / "v.yaml", venv_yaml())
    p = tfprov.run("plan", m, env=_env(home))
    assert p.returncode == 6, out(p)
    o = out(p)
    assert "no Python %s that every user can run" % PYVER in o, o
    assert "%s/shims/python%s, which runs %s: other users cannot run it (%s is mode 0700)" % (
        home, PYVER, real, home) in o, o
    assert "apply would stop here, before any change (exit 6)" in o, o


def test_a_shim_everyone_can_use_resolves_to_its_real_file(tfprov, tmp_path, top, system_python):
    home, real = _shim_home(top, 0o755)
    m = manifest(tmp_path / "v.yaml", venv_yaml())
    p = tfprov.run("plan", m, env=_env(home))
    assert p.returncode == 0, out(p)
    assert "venv /opt/tfprov/envs/tf with Python %s: %s\n" % (PYVER, real) in out(p), out(p)


def test_the_system_interpreter_is_preferred_to_path(tfprov, tmp_path, top, system_python):
    """A shim first on PATH (a 0755 home): the system's python3.X is chosen all the same."""
    home, _ = _shim_home(top, 0o755)
    env = no_stub_env(PATH="%s/shims:%s" % (home, os.environ.get("PATH", "/usr/bin:/bin")))
    p = tfprov.run("plan", manifest(tmp_path / "v.yaml", venv_yaml()), env=env)
    assert p.returncode == 0, out(p)
    assert "with Python %s: %s\n" % (PYVER, os.path.realpath(SYSTEM)) in out(p), out(p)


def test_init_writes_the_interpreter_it_chose(tfprov, tmp_path, top, system_python):
    """A venv stack from init (no conda lock in the catalog for this Python) names
    its interpreter; where only a 0700 shim offers one, init says so and writes none."""
    o = tmp_path / "i.yaml"
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "--python", PYVER, "-o", o)
    assert r.returncode == 0, out(r)
    doc = yaml.safe_load(o.read_text())
    if doc["python"]["manager"] != "venv":
        pytest.skip("the catalog has a conda lock for Python " + PYVER)
    assert doc["python"]["interpreter"] == os.path.realpath(SYSTEM), doc["python"]
    home, _ = _shim_home(top, 0o700)
    o2 = tmp_path / "j.yaml"
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "--python", PYVER, "-o", o2,
                   env=_env(home))
    assert r.returncode == 0, out(r)
    assert "interpreter" not in yaml.safe_load(o2.read_text())["python"]
    assert "other users cannot run it" in o2.read_text() + out(r), out(r)

"""The Python env is checked and repaired like every other step (issue 30, items 1 and 4).

Scenario: a venv stack of three pinned wheels installed by the native installer.
Then, behind tfprov's back, one pinned distribution is uninstalled, one is
replaced by another version, a file of a third is patched in place, and an
unpinned one is added: `status` and `plan --detailed-exitcode` exit 2 naming
each; `apply` reinstalls exactly those (the added one kept and named), after
which `status` and `verify --deep` exit 0. Two wheels shipping one path: shared
when the bytes are equal, refused before any change naming both when they
differ; dropping one of two sharing wheels from the lock keeps the shared file.
"""
import json
import os
import re

import pytest

from lib_provision import no_stub_env, out
from test_python_env import ENV_PREFIX, PYVER, manifest, venv_yaml
import lib_killpoint
from test_wheel_native import make_wheel, pip, pip_yaml


def site(tfprov):
    return os.path.join(tfprov.path(ENV_PREFIX), "lib", f"python{PYVER}", "site-packages")


def small_set(d):
    pins = []
    for nm, ver, files in (("tfprov-core", "1.0", {"tfprov_core/__init__.py": "V = 1\n"}),
                           ("tfprov-tool", "2.0", {"tfprov_tool/__init__.py": "",
                                                   "tfprov_tool/cli.py": "X = 2\n"}),
                           ("Tfprov.Mixed_Name", "0.1", {"tfprov_mixed/__init__.py": ""})):
        _, h = make_wheel(d, nm, ver, files)
        pins.append((nm, ver, h))
    return pins


def drifted(tfprov, tmp_path):
    """A venv stack applied, then changed four ways behind tfprov's back; returns
    (manifest, wheel dir, patched file, its bytes as installed)."""
    d = str(tmp_path / "w")
    m = manifest(tmp_path / "m.yaml", venv_yaml(),
                 pip_yaml("http://127.0.0.1:9/simple/", small_set(d)))
    p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    env, sp = tfprov.path(ENV_PREFIX), site(tfprov)
    other = tmp_path / "other"
    core11, _ = make_wheel(str(other), "tfprov-core", "1.1", {"tfprov_core/__init__.py": "V=1.1\n"})
    extra, _ = make_wheel(str(other), "user-extra", "0.3", {"user_extra.py": "X = 1\n"})
    pip(env, "uninstall", "-y", "Tfprov.Mixed-Name")
    pip(env, "install", "--no-deps", "--no-index", core11)
    pip(env, "install", "--no-deps", "--no-index", extra)
    cli = os.path.join(sp, "tfprov_tool", "cli.py")
    orig = open(cli).read()
    with open(cli, "a") as f:
        f.write("PATCHED = 1\n")
    return m, d, cli, orig


def repaired(tfprov, cli, orig):
    """What holds after the repair: the pins as locked, the added one kept."""
    env = tfprov.path(ENV_PREFIX)
    assert open(cli).read() == orig
    names = {re.sub(r"[-_.]+", "-", d["name"]).lower(): d["version"] for d in
             json.loads(pip(env, "list", "--format=json").stdout)}
    assert names["tfprov-core"] == "1.0" and names["tfprov-mixed-name"] == "0.1", names
    assert names["user-extra"] == "0.3", names
    st = tfprov.run("status")
    assert st.returncode == 0, out(st)
    v = tfprov.run("verify", "--deep", env=no_stub_env())
    assert v.returncode == 0, out(v)


def test_drift_of_the_env_is_seen_and_repaired(tfprov, tmp_path):
    m, d, cli, orig = drifted(tfprov, tmp_path)
    env, sp = tfprov.path(ENV_PREFIX), site(tfprov)
    st = tfprov.run("status")
    assert st.returncode == 2, out(st)
    for word in ("tfprov-mixed-name 0.1 removed", "tfprov-core 1.0 replaced by 1.1",
                 "tfprov-tool 2.0: files changed in place", "user-extra 0.3 added"):
        assert word in out(st), (word, out(st))
    pl = tfprov.run("--mirror", d, "plan", "--detailed-exitcode", m, env=no_stub_env())
    assert pl.returncode == 2, out(pl)
    assert "tfprov-tool 2.0: files changed in place" in out(pl), out(pl)
    p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    assert "user-extra 0.3 is not pinned by the lock: kept" in out(p), out(p)
    repaired(tfprov, cli, orig)
    # --remove-unpinned: the added one goes, the pinned ones stay.
    p = tfprov.run("--mirror", d, "apply", "--remove-unpinned", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    assert "user-extra 0.3 is not pinned: --remove-unpinned uninstalls it" in out(p), out(p)
    assert not os.path.exists(os.path.join(sp, "user_extra.py"))
    assert os.path.exists(os.path.join(sp, "tfprov_tool", "cli.py"))
    assert tfprov.run("status").returncode == 0


def nvidia_pair(d, same=True):
    pins = []
    for i, nm in enumerate(("nvidia-a-cu12", "nvidia-b-cu12")):
        init = "" if same else f"# {nm}\n"
        _, h = make_wheel(d, nm, "1.0", {"nvidia/__init__.py": init,
                                         f"nvidia/{nm[7]}/lib/lib{nm[7]}.so": b"x" * (i + 1)})
        pins.append((nm, "1.0", h))
    return pins


def test_two_wheels_one_path_different_bytes_refused(tfprov, tmp_path):
    d = str(tmp_path / "w")
    pins = nvidia_pair(d, same=False)
    m = manifest(tmp_path / "n.yaml", venv_yaml(),
                 pip_yaml("http://127.0.0.1:9/simple/", pins))
    p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 1, out(p)
    assert "nvidia-a-cu12 1.0 and nvidia-b-cu12 1.0 both install" in out(p), out(p)
    assert "nvidia/__init__.py with different contents" in out(p), out(p)
    assert not os.path.exists(os.path.join(site(tfprov), "nvidia"))


def test_two_wheels_one_path_same_bytes_shared(tfprov, tmp_path):
    d = str(tmp_path / "w")
    pins = nvidia_pair(d, same=True)
    m = manifest(tmp_path / "n.yaml", venv_yaml(),
                 pip_yaml("http://127.0.0.1:9/simple/", pins))
    p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    init = os.path.join(site(tfprov), "nvidia", "__init__.py")
    assert os.path.exists(init)
    assert tfprov.run("verify", "--deep", env=no_stub_env()).returncode == 0
    # An update that drops one of the two keeps the file the other ships.
    m2 = manifest(tmp_path / "n2.yaml", venv_yaml(),
                  pip_yaml("http://127.0.0.1:9/simple/", pins[1:]))
    p = tfprov.run("--mirror", d, "apply", "-y", m2, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    assert not os.path.exists(os.path.join(site(tfprov), "nvidia", "a"))
    assert os.path.exists(init)
    v = tfprov.run("verify", "--deep", env=no_stub_env())
    assert v.returncode == 0, out(v)


def test_kill_9_in_the_middle_of_the_repair_converges(tfprov, tmp_path):
    """The repair killed at points spread over its operations (lib_killpoint):
    the next apply finishes it, and what holds after an unkilled repair holds."""
    m, d, cli, orig = drifted(tfprov, tmp_path)
    kp = lib_killpoint.Killer(tmp_path / "kp", skip=[lib_killpoint.scratch(tfprov.root)])
    restore = lib_killpoint.saved_root(tfprov.root, tmp_path / "saved")
    argv = [tfprov.bin, "--root", tfprov.root, "--jobs", "1", "--mirror", d, "apply", "-y", m]
    env = dict(os.environ, **no_stub_env())
    p, ev = kp.points(argv, env)
    assert p.returncode == 0, out(p)
    mine = [e for e in ev if e.role == "tfprov#1"]
    assert len(mine) > 10, ev
    for e in (mine[len(mine) // 4], mine[len(mine) // 2], mine[3 * len(mine) // 4]):
        restore()
        rc, hit = kp.run_to(argv, env, e.point)
        assert hit is not None, (e, rc)
        p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
        assert p.returncode == 0, (e, out(p))
        repaired(tfprov, cli, orig)

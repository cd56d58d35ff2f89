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
import shutil

import pytest

from lib_provision import no_stub_env, out
from test_python_env import ENV_PREFIX, PYVER, manifest, venv_yaml
import lib_conda
import lib_killpoint
from lib_http import HttpServer
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
    assert "nvidia-a-cu12==1.0" in out(p) and "nvidia-b-cu12==1.0" in out(p), out(p)
    assert "both install site-packages/nvidia/__init__.py" in out(p), out(p)
    assert "with different contents" in out(p), out(p)
    # Refused after the downloads, before any step: not even the venv was made.
    assert not os.path.exists(tfprov.path(ENV_PREFIX)), os.listdir(tfprov.path("/opt/tfprov"))


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


@pytest.fixture(scope="module")
def conda_lock(tmp_path_factory):
    """The demo conda env (lib_conda: a stand-in python, a program, a noarch package)."""
    d = tmp_path_factory.mktemp("conda")
    pyver = PYVER
    # A stand-in conda python that is the env's own interpreter as far as Python
    # can tell (argv[0] in the env, a pyvenv.cfg at its root): its scheme is the
    # env's lib/pythonX.Y/site-packages, as a real conda python's is.
    py = lib_conda.build_package(str(d / "pkgs"), "python", pyver + ".0", "0_stand", {
        f"bin/python{pyver}": lib_conda.File(
            f'#!/bin/bash\nexec -a "$0" /usr/bin/python{pyver} "$@"\n', 0o755),
        "bin/python": lib_conda.File(symlink=f"python{pyver}"),
        "pyvenv.cfg": lib_conda.File("home = /usr/bin\ninclude-system-site-packages = true\n"),
        f"lib/python{pyver}/site-packages/.keep": lib_conda.File(""),
    })
    pkgs = [py]
    srv = HttpServer(root=str(d / "pkgs")).start()
    lines = ["# platform: linux-64", "@EXPLICIT"]
    lines += [f"{srv.url('/' + os.path.basename(p))}#sha256:{sha}" for p, sha, _, _ in pkgs]
    body = "".join("    " + ln + "\n" for ln in lines)
    yield (f"python:\n  manager: conda\n  name: tf\n  version: \"{pyver}\"\n"
           f"  lock: |\n{body}"), pyver
    srv.stop()


def dist_info(sp, name, ver, files):
    """A distribution as an installer leaves it (what a user's pip would add)."""
    di = os.path.join(sp, f"{name.replace('-', '_')}-{ver}.dist-info")
    os.makedirs(di)
    rows = []
    for rel, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(sp, rel)), exist_ok=True)
        with open(os.path.join(sp, rel), "w") as f:
            f.write(text)
        rows.append(f"{rel},,")
    open(os.path.join(di, "METADATA"), "w").write(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")
    rows.append(f"{os.path.basename(di)}/METADATA,,")
    rows.append(f"{os.path.basename(di)}/RECORD,,")
    open(os.path.join(di, "RECORD"), "w").write("\n".join(rows) + "\n")


def test_conda_env_drift_is_seen_and_repaired(tfprov, tmp_path, conda_lock):
    """The same four changes in a conda env (its stand-in python has no pip: the
    changes are made as pip would make them, on the files)."""
    body, pyver = conda_lock
    d = str(tmp_path / "w")
    m = manifest(tmp_path / "c.yaml", body, pip_yaml("http://127.0.0.1:9/simple/", small_set(d)))
    text = open(m).read().replace(f'python: "{PYVER}"\n', f'python: "{pyver}"\n', 1)
    open(m, "w").write(text)
    p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    sp = os.path.join(tfprov.path(ENV_PREFIX), "lib", f"python{pyver}", "site-packages")
    shutil.rmtree(os.path.join(sp, "tfprov_mixed"))
    shutil.rmtree(os.path.join(sp, "Tfprov_Mixed_Name-0.1.dist-info"))
    shutil.rmtree(os.path.join(sp, "tfprov_core"))
    shutil.rmtree(os.path.join(sp, "tfprov_core-1.0.dist-info"))
    dist_info(sp, "tfprov-core", "1.1", {"tfprov_core/__init__.py": "V = 11\n"})
    dist_info(sp, "user-extra", "0.3", {"user_extra.py": "X = 1\n"})
    cli = os.path.join(sp, "tfprov_tool", "cli.py")
    orig = open(cli).read()
    with open(cli, "a") as f:
        f.write("PATCHED = 1\n")
    st = tfprov.run("status")
    assert st.returncode == 2, out(st)
    for word in ("tfprov-mixed-name 0.1 removed", "tfprov-core 1.0 replaced by 1.1",
                 "tfprov-tool 2.0: files changed in place", "user-extra 0.3 added"):
        assert word in out(st), (word, out(st))
    pl = tfprov.run("--mirror", d, "plan", "--detailed-exitcode", m, env=no_stub_env())
    assert pl.returncode == 2 and "user-extra 0.3 added" in out(pl), out(pl)
    p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    assert "user-extra 0.3 is not pinned by the lock: kept" in out(p), out(p)
    assert open(cli).read() == orig
    assert open(os.path.join(sp, "tfprov_core", "__init__.py")).read() == "V = 1\n"
    assert os.path.isdir(os.path.join(sp, "Tfprov_Mixed_Name-0.1.dist-info"))
    assert os.path.exists(os.path.join(sp, "user_extra.py"))
    assert not os.path.exists(os.path.join(sp, "tfprov_core-1.1.dist-info"))
    st = tfprov.run("status")
    assert st.returncode == 0, out(st)
    v = tfprov.run("verify", "--deep", env=no_stub_env())
    assert v.returncode == 0, out(v)


def test_an_unpinned_distribution_that_overwrote_a_pinned_file_is_uninstalled(tfprov, tmp_path):
    d = str(tmp_path / "w")
    m = manifest(tmp_path / "m.yaml", venv_yaml(),
                 pip_yaml("http://127.0.0.1:9/simple/", small_set(d)))
    assert tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(),
                      timeout=600).returncode == 0
    sp = site(tfprov)
    cli = os.path.join(sp, "tfprov_tool", "cli.py")
    orig = open(cli).read()
    dist_info(sp, "user-clash", "0.1", {"tfprov_tool/cli.py": "CLASH = 1\n"})
    st = tfprov.run("status")
    assert st.returncode == 2 and "user-clash 0.1 added" in out(st), out(st)
    p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    assert "user-clash 0.1 is not pinned and overwrote" in out(p), out(p)
    assert open(cli).read() == orig
    assert not os.path.exists(os.path.join(sp, "user_clash-0.1.dist-info"))
    assert tfprov.run("status").returncode == 0
    v = tfprov.run("verify", "--deep", env=no_stub_env())
    assert v.returncode == 0, out(v)


def test_a_wheel_that_would_overwrite_a_kept_distribution_is_refused(tfprov, tmp_path):
    d = str(tmp_path / "w")
    pins = small_set(d)
    m = manifest(tmp_path / "m.yaml", venv_yaml(), pip_yaml("http://127.0.0.1:9/simple/", pins))
    assert tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(),
                      timeout=600).returncode == 0
    sp = site(tfprov)
    dist_info(sp, "user-extra", "0.3", {"extra_mod.py": "MINE = 1\n"})
    assert tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(),
                      timeout=600).returncode == 0
    _, h = make_wheel(d, "new-dist", "1.0", {"extra_mod.py": "THEIRS = 1\n"})
    m2 = manifest(tmp_path / "m2.yaml", venv_yaml(),
                  pip_yaml("http://127.0.0.1:9/simple/", pins + [("new-dist", "1.0", h)]))
    p = tfprov.run("--mirror", d, "apply", "-y", m2, env=no_stub_env(), timeout=600)
    assert p.returncode == 1, out(p)
    assert "new-dist 1.0 and user-extra 0.3 both install" in out(p), out(p)
    assert open(os.path.join(sp, "extra_mod.py")).read() == "MINE = 1\n"
    assert not os.path.exists(os.path.join(sp, "new_dist-1.0.dist-info"))


def test_pip_installer_repairs_a_patched_file_too(tfprov, tmp_path):
    """pip.installer: pip cannot reinstall one pin of a requirements file: the
    repair reinstalls every pin (--force-reinstall), and the file is restored."""
    d = str(tmp_path / "w")
    m = manifest(tmp_path / "m.yaml", venv_yaml(),
                 pip_yaml("http://127.0.0.1:9/simple/", small_set(d), installer="pip"))
    p = tfprov.run("--mirror", d, "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    cli = os.path.join(site(tfprov), "tfprov_tool", "cli.py")
    orig = open(cli).read()
    with open(cli, "a") as f:
        f.write("PATCHED = 1\n")
    st = tfprov.run("status")
    assert st.returncode == 2 and "tfprov-tool 2.0: files changed in place" in out(st), out(st)
    p = tfprov.run("--mirror", d, "-v", "apply", "-y", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    assert open(cli).read() == orig
    assert tfprov.run("status").returncode == 0
    v = tfprov.run("verify", "--deep", env=no_stub_env())
    assert v.returncode == 0, out(v)

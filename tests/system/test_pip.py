"""pip through tfprov's library: a real venv, the real pip, a loopback index.

Scenario: one venv per module (creating one costs seconds); wheels built at
test time and served by a PEP 503 index on 127.0.0.1. The environment that
runs the driver carries a bogus PIP_INDEX_URL / PIP_FIND_LINKS /
PYTHONPATH, as a user's shell may: tfprov must ignore them.
"""
import json
import os
import subprocess

import pytest

from lib_pyindex import Index, build_wheel, tree_listing

BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(os.getcwd(), "build"))
TOOL = os.path.join(BUILD, "py_tool")
SYS_PYTHON = "/usr/bin/python3"


def sys_python_version():
    out = subprocess.run([SYS_PYTHON, "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def hostile_env(tmp):
    env = dict(os.environ)
    env["PIP_INDEX_URL"] = "http://127.0.0.1:1/bogus-index/"
    env["PIP_FIND_LINKS"] = os.path.join(str(tmp), "bogus-links")
    env["PIP_NO_DEPS"] = "0"
    env["PIP_REQUIRE_HASHES"] = "0"
    env["PYTHONPATH"] = os.path.join(str(tmp), "bogus-pythonpath")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def tool(env, *args, timeout=240):
    return subprocess.run([TOOL, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("pip")
    wheels = base / "wheels"
    w = {}
    w["alpha1"] = build_wheel(str(wheels), "alpha", "1.0")
    w["alpha2"] = build_wheel(str(wheels), "alpha", "2.0")
    w["beta"] = build_wheel(str(wheels), "beta", "2.0", requires=["alpha"],
                            entry_points={"beta-hello": "beta:main"},
                            files={"beta/__init__.py": "def main():\n    print('hello')\n"})
    w["gamma"] = build_wheel(str(wheels), "gamma", "1.0")
    w["delta"] = build_wheel(str(wheels), "delta", "1.0")
    # zeta installs a *file* named clash; eta then wants clash/ as a directory:
    # pip fails half-way through its install phase, after zeta went in.
    w["zeta"] = build_wheel(str(wheels), "zeta", "1.0",
                            files={"zeta/__init__.py": "", "clash": "file\n"})
    w["eta"] = build_wheel(str(wheels), "eta", "1.0",
                           files={"eta/__init__.py": "", "clash/inner.py": "x = 1\n"})
    idx = Index(str(wheels))
    env = hostile_env(base)
    venv = base / "venv"
    r = tool(env, "venv", sys_python_version(), str(venv), SYS_PYTHON)
    assert r.returncode == 0, r.stderr
    yield {"base": base, "wheels": w, "index": idx, "env": env, "venv": venv}
    idx.close()


def reqfile(path, lines):
    path.write_text("".join(f"{spec} --hash=sha256:{h}\n" for spec, h in lines))
    return str(path)


def pip_list(world):
    r = tool(world["env"], "pip-list", str(world["venv"]))
    assert r.returncode == 0, r.stderr
    return {d["name"]: d["version"] for d in json.loads(r.stdout)}


def test_venv_reused_when_version_matches(world):
    r = tool(world["env"], "venv", sys_python_version(), str(world["venv"]), SYS_PYTHON)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["created"] is False


def test_venv_for_missing_python_version_is_a_clear_error(world, tmp_path):
    r = tool(world["env"], "venv", "3.2", str(tmp_path / "v"))
    assert r.returncode == 6, r.stderr  # precondition failed
    assert "Python 3.2" in r.stderr
    assert "apt install python3.2" in r.stderr and "conda" in r.stderr
    assert not (tmp_path / "v").exists()


def test_install_with_hashes_ignores_users_pip_environment(world, tmp_path):
    w, idx = world["wheels"], world["index"]
    before = len(idx.requests)
    req = reqfile(tmp_path / "r.txt", [("alpha==1.0", w["alpha1"][1]), ("beta==2.0", w["beta"][1])])
    r = tool(world["env"], "pip-install", str(world["venv"]), req, "--index-url", idx.url,
             "--complete")
    assert r.returncode == 0, r.stderr
    got = {d["name"]: d for d in json.loads(r.stdout)["installed"]}
    assert got["alpha"]["version"] == "1.0" and got["alpha"]["sha256"] == w["alpha1"][1]
    assert got["beta"]["sha256"] == w["beta"][1]
    # Our index was used, the bogus PIP_INDEX_URL/PIP_FIND_LINKS were not (they
    # point nowhere: pip would have failed).
    assert any(p.startswith("/files/alpha-1.0") for p in idx.requests[before:])
    assert (world["venv"] / "bin" / "beta-hello").exists()


def real_pip_list(venv):
    env = {"PATH": os.environ["PATH"], "PIP_CONFIG_FILE": "/dev/null"}
    r = subprocess.run([str(venv / "bin" / "python"), "-I", "-m", "pip", "list", "--isolated",
                        "--disable-pip-version-check", "--format=json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    norm = lambda n: __import__("re").sub(r"[-_.]+", "-", n).lower()
    return {norm(d["name"]): d["version"] for d in json.loads(r.stdout)}


def test_native_listing_is_what_pip_list_says(world, tmp_path):
    """tfprov lists an env's distributions by reading their metadata, not by
    starting pip (0.35-0.6 s a run); the reference is the env's own pip list,
    here with the unusual shapes: a name whose METADATA spelling differs from
    its dist-info directory, and legacy .egg-info as a directory and as a file."""
    site = next((world["venv"] / "lib").glob("python*/site-packages"))
    planted = [site / "Legacy_Dir-0.3.egg-info", site / "legacy.file-1.2.egg-info",
               site / "odd_spelling-4.0.dist-info"]
    planted[0].mkdir()
    (planted[0] / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: Legacy_Dir\n"
                                         "Version: 0.3\n\nVersion: 9\n")
    planted[1].write_text("Metadata-Version: 1.1\nName: legacy.file\nVersion: 1.2\n")
    planted[2].mkdir()
    (planted[2] / "METADATA").write_text("Metadata-Version: 2.1\nName: Odd.Spelling\n"
                                         "Version: 4.0\n")
    try:
        r = tool(world["env"], "pip-list", str(world["venv"]))
        assert r.returncode == 0, r.stderr
        native = {d["name"]: d["version"] for d in json.loads(r.stdout)}
        assert native == real_pip_list(world["venv"])
        assert native["legacy-dir"] == "0.3" and native["odd-spelling"] == "4.0"
        assert {"pip", "legacy-file"} <= native.keys()
    finally:
        for p in planted:
            subprocess.run(["rm", "-rf", str(p)], check=True)


def test_native_listing_of_a_dir_without_site_packages_is_an_error(world, tmp_path):
    (tmp_path / "lib").mkdir()
    r = tool(world["env"], "pip-list", str(tmp_path))
    assert r.returncode == 1, r.stderr
    assert "site-packages" in r.stderr


def test_pip_itself_checks_every_hash_before_installing(world, tmp_path):
    """The claim tfprov's design leans on, checked with the env's pip directly."""
    w, idx = world["wheels"], world["index"]
    req = reqfile(tmp_path / "r.txt", [("gamma==1.0", w["gamma"][1]), ("delta==1.0", "0" * 64)])
    env = {"PATH": os.environ["PATH"], "PIP_CONFIG_FILE": "/dev/null"}
    r = subprocess.run([str(world["venv"] / "bin" / "python"), "-m", "pip", "install",
                        "--isolated", "--require-hashes", "--no-deps", "--index-url", idx.url,
                        "-r", req], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    assert "DO NOT MATCH THE HASHES" in r.stderr
    assert "gamma" not in pip_list(world)


def test_wrong_hash_is_integrity_error_and_env_unchanged(world, tmp_path):
    w, idx = world["wheels"], world["index"]
    before = tree_listing(str(world["venv"]))
    req = reqfile(tmp_path / "r.txt", [("gamma==1.0", w["gamma"][1]), ("delta==1.0", "ab" * 32)])
    r = tool(world["env"], "pip-install", str(world["venv"]), req, "--index-url", idx.url,
             "--complete")
    assert r.returncode == 5, r.stderr
    assert "delta==1.0" in r.stderr and "hash mismatch" in r.stderr
    assert tree_listing(str(world["venv"])) == before


def test_missing_wheel_is_integrity_error_and_env_unchanged(world, tmp_path):
    w, idx = world["wheels"], world["index"]
    before = tree_listing(str(world["venv"]))
    req = reqfile(tmp_path / "r.txt", [("gamma==1.0", w["gamma"][1]), ("epsilon==9.9", "cd" * 32)])
    r = tool(world["env"], "pip-install", str(world["venv"]), req, "--index-url", idx.url,
             "--complete")
    assert r.returncode == 5, r.stderr
    assert "epsilon==9.9" in r.stderr and "missing wheel" in r.stderr
    assert tree_listing(str(world["venv"])) == before


def test_failure_during_install_phase_restores_snapshot(world, tmp_path):
    w, idx = world["wheels"], world["index"]
    before = tree_listing(str(world["venv"]))
    req = reqfile(tmp_path / "r.txt", [("zeta==1.0", w["zeta"][1]), ("eta==1.0", w["eta"][1]),
                                       ("alpha==2.0", w["alpha2"][1])])
    r = tool(world["env"], "pip-install", str(world["venv"]), req, "--index-url", idx.url,
             "--complete")
    assert r.returncode != 0
    assert "pip install" in r.stderr  # the download phase passed, the install phase failed
    assert tree_listing(str(world["venv"])) == before
    assert pip_list(world)["alpha"] == "1.0"
    leftovers = [p for p in os.listdir(world["base"]) if ".tfprov-" in p]
    assert leftovers == []


def test_lock_completes_closure_with_hashes(world, tmp_path):
    w, idx = world["wheels"], world["index"]
    (tmp_path / "in.txt").write_text("beta==2.0\n")
    r = tool(world["env"], "pip-lock", str(world["venv"]), str(tmp_path / "in.txt"),
             "--index-url", idx.url)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    # beta depends on alpha: the resolver picks the newest alpha, with its hash.
    assert f"alpha==2.0 \\\n    --hash=sha256:{w['alpha2'][1]}" in text
    assert f"beta==2.0 \\\n    --hash=sha256:{w['beta'][1]}" in text
    # The lock did not install anything.
    assert pip_list(world)["alpha"] == "1.0"

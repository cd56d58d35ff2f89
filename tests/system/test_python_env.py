"""The Python env and pip steps through the real binary: a native conda env
from an explicit lock served on loopback, a real venv with real pip against a
loopback PEP 503 index, integrity, idempotence without any package manager
run, a missing interpreter, and isolation from the user's pip settings.

STAND-INS: the conda packages are real-format packages built at test time
(lib_conda.demo_packages: a "python" package that wraps the system
interpreter, a compiled program carrying the prefix placeholder, a noarch
package with an entry point); the wheels are tiny ones built here
(lib_pyindex). No GPU is involved (driver.policy: skip).
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import lib_conda
from lib_conda import File
import lib_pyindex
from lib_http import HttpServer
from lib_provision import (db_rows, no_stub_env, out, recorded_files, temp_leftovers,
                           tree_hashes)

PYVER = "%d.%d" % sys.version_info[:2] if sys.executable == "/usr/bin/python3" else \
    subprocess.run(["/usr/bin/python3", "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                   capture_output=True, text=True, check=True).stdout.strip()
ENV_PREFIX = "/opt/tfprov/envs/tf"


def manifest(path, python_yaml, pip_yaml=""):
    path.write_text(
        "schema: 1\nstack:\n  name: py\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
        f"versions:\n  tensorflow: 2.15.1\n  python: \"{PYVER}\"\n"
        "driver:\n  policy: skip\n" + python_yaml + pip_yaml)
    return str(path)


def venv_yaml(version=PYVER, interpreter=None):
    y = f"python:\n  manager: venv\n  name: tf\n  version: \"{version}\"\n"
    if interpreter:
        y += f"  interpreter: {interpreter}\n"
    return y


def pip_yaml(index, pins, complete=True):
    req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins)
    return (f"pip:\n  index_url: {index}\n  complete: {'true' if complete else 'false'}\n"
            f"  requirements: |\n{req}")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheels")
    pins = {}
    for name, ver in (("tfprov-alpha", "1.0.0"), ("tfprov-beta", "2.1.0"),
                      ("tfprov-gamma", "0.3.0")):
        path, sha = lib_pyindex.build_wheel(str(d), name, ver)
        pins[name] = (name, ver, sha)
    idx = lib_pyindex.Index(str(d))
    idx.pins = pins
    yield idx
    idx.close()


def _env_listing(tfprov):
    return lib_pyindex.tree_listing(tfprov.path(ENV_PREFIX))


# ---------------------------------------------------------------- (a) conda

@pytest.fixture(scope="module")
def conda_world(tmp_path_factory):
    d = tmp_path_factory.mktemp("conda")
    pkgdir = d / "pkgs"
    pkgs, pyver = lib_conda.demo_packages(str(pkgdir), str(d))
    srv = HttpServer(root=str(pkgdir)).start()
    lines = ["# platform: linux-64", "@EXPLICIT"]
    for p, sha, _, _ in pkgs:
        lines.append(f"{srv.url('/' + os.path.basename(p))}#sha256:{sha}")
    yield srv, "\n".join(lines) + "\n", pkgs, pyver
    srv.stop()


def test_conda_env_program_reports_real_prefix(tfprov, conda_world, tmp_path):
    """manager: conda with an inline explicit lock served over loopback: apply
    installs it natively; the compiled program and the text script inside print
    the env's real prefix (placeholder replaced, binary padded); conda-meta
    holds one valid JSON record per package with the fields conda reads, and a
    history file; a second apply changes nothing and fetches nothing."""
    srv, lock, pkgs, pyver = conda_world
    lock_yaml = "".join("    " + ln + "\n" for ln in lock.splitlines())
    m = manifest(tmp_path / "conda.yaml",
                 f"python:\n  manager: conda\n  name: tf\n  version: \"{pyver}\"\n"
                 f"  lock: |\n{lock_yaml}")
    p = tfprov.run("apply", "-y", m, env=no_stub_env())
    assert p.returncode == 0, out(p)
    host = tfprov.path(ENV_PREFIX)
    r = subprocess.run([os.path.join(host, "bin", "hello")], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert f"prefix={ENV_PREFIX}\n" in r.stdout, r.stdout
    assert f"data={ENV_PREFIX}/share/hello/data.txt" in r.stdout
    r2 = subprocess.run([os.path.join(host, "bin", "hello-sh")], capture_output=True,
                        text=True, timeout=30)
    assert r2.stdout.strip() == f"prefix={ENV_PREFIX}"
    assert lib_conda.PLACEHOLDER.encode() not in open(os.path.join(host, "bin", "hello"),
                                                       "rb").read()
    meta = os.path.join(host, "conda-meta")
    recs = sorted(f for f in os.listdir(meta) if f.endswith(".json"))
    assert recs == sorted(f"{n}.json" for n in ("python-%s.0-0_fake" % pyver,
                                                 "hello-1.0-h0_0", "greet-0.1-pyh0_0"))
    for f in recs:
        with open(os.path.join(meta, f)) as fh:
            rec = json.load(fh)
        for k in ("name", "version", "build", "build_number", "channel", "url", "fn",
                  "depends", "files", "paths_data", "sha256", "subdir"):
            assert k in rec, f"{f} lacks {k}"
        assert f == f"{rec['name']}-{rec['version']}-{rec['build']}.json"
        assert rec["url"].startswith(srv.url("/"))
        for path in rec["files"]:
            assert os.path.lexists(os.path.join(host, path)), path
    assert os.path.isfile(os.path.join(meta, "history"))
    # noarch: python relocated into lib/pythonX.Y/site-packages, entry point made.
    assert os.path.isfile(os.path.join(host, f"lib/python{pyver}/site-packages/greet/__init__.py"))
    assert os.access(os.path.join(host, "bin", "greet"), os.X_OK)
    n0 = len(srv.requests)
    p2 = tfprov.run("apply", "-y", m, env=no_stub_env())
    assert p2.returncode == 0 and "No changes" in p2.stdout, out(p2)
    assert len(srv.requests) == n0
    assert temp_leftovers(tfprov.root) == []


def test_conda_activation_scripts_run_by_env_named_by_run(tfprov, conda_world, tmp_path):
    """A conda package that ships etc/conda/activate.d and deactivate.d scripts (as
    compilers' and Java's packages do): no conda binary is needed to enter the env.
    `tfprov env` sources the activate script after setting the stack's variables
    (CONDA_PREFIX first, as conda does) and `env --unset` its deactivate script
    before restoring them; `tfprov run` cannot run a shell script, so it names it
    as not run on stderr, never skipping it silently."""
    srv, lock, pkgs, pyver = conda_world
    extra = lib_conda.build_package(srv_dir(srv), "actpkg", "1.0", "h0_0", {
        "etc/conda/activate.d/actpkg.sh": File(
            'export ACTPKG_HOME="$CONDA_PREFIX/share/actpkg"\n'),
        "etc/conda/deactivate.d/actpkg.sh": File("unset ACTPKG_HOME\n"),
    })
    lock += f"{srv.url('/' + os.path.basename(extra[0]))}#sha256:{extra[1]}\n"
    lock_yaml = "".join("    " + ln + "\n" for ln in lock.splitlines())
    m = manifest(tmp_path / "conda-act.yaml",
                 f"python:\n  manager: conda\n  name: tf\n  version: \"{pyver}\"\n"
                 f"  lock: |\n{lock_yaml}")
    p = tfprov.run("apply", "-y", m, env=no_stub_env())
    assert p.returncode == 0, out(p)
    host = tfprov.path(ENV_PREFIX)
    tf = f"{tfprov.bin} --root {tfprov.root}"
    base = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
    r = subprocess.run(["bash", "-c", f'eval "$({tf} env py --shell bash)"; '
                        'echo "$CONDA_PREFIX|${ACTPKG_HOME-unset}"; '
                        f'eval "$({tf} env --unset --shell bash)"; '
                        'echo "${CONDA_PREFIX-unset}|${ACTPKG_HOME-unset}"'],
                       capture_output=True, text=True, env=base, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{host}|{host}/share/actpkg", "unset|unset"], r.stdout
    r = tfprov.run("run", "py", "--", "sh", "-c", "echo ${ACTPKG_HOME-unset}", env=base)
    assert r.returncode == 0 and r.stdout.strip() == "unset", out(r)
    assert f"not run: {host}/etc/conda/activate.d/actpkg.sh" in r.stderr, r.stderr
    # tfprov's own hooks are there for `conda activate`, and are not named.
    assert os.path.isfile(os.path.join(host, "etc/conda/activate.d/tfprov-py.sh"))
    assert "tfprov-py.sh" not in r.stderr


def srv_dir(srv):
    return srv.root


# ---------------------------------------------------------------- (b) pip integrity

def test_pip_wrong_hash_exit5_env_unchanged(tfprov, index, tmp_path):
    """A venv with two pins applied; then a third pin with a wrong hash: exit 5,
    the message names the package, and the env's file listing (paths and
    sha256) is identical before and after; state keeps the old pip record."""
    pins = index.pins
    good = [pins["tfprov-alpha"], pins["tfprov-beta"]]
    m = manifest(tmp_path / "a.yaml", venv_yaml(), pip_yaml(index.url, good))
    p = tfprov.run("apply", "-y", m, env=no_stub_env())
    assert p.returncode == 0, out(p)
    before = _env_listing(tfprov)
    attrs = db_rows(tfprov, "SELECT attrs, desired FROM resources WHERE addr = 'pip'")
    n, v, _ = pins["tfprov-gamma"]
    bad = good + [(n, v, "0" * 64)]
    m2 = manifest(tmp_path / "b.yaml", venv_yaml(), pip_yaml(index.url, bad))
    p2 = tfprov.run("apply", "-y", m2, env=no_stub_env())
    assert p2.returncode == 5, out(p2)
    assert "tfprov-gamma" in out(p2), out(p2)
    assert _env_listing(tfprov) == before
    assert db_rows(tfprov, "SELECT attrs, desired FROM resources WHERE addr = 'pip'") == attrs
    assert temp_leftovers(tfprov.root) == []


# ---------------------------------------------------------------- (c) no pip on no-op

SHIM = """#!/bin/sh
echo "$0 $*" >> {log}
exec /usr/bin/python{ver} "$@"
"""


def test_second_apply_runs_no_package_manager(tfprov, index, tmp_path):
    """Second apply of a venv + pip stack: "No changes", and provably no package
    manager ran: (1) the index saw no request; (2) a python{X.Y} shim on PATH
    (how pyenv_find_python finds the interpreter when none is pinned and the
    system has none) was not run; (3) a .pth hook planted in the venv's site-packages, which logs
    every start of the venv's interpreter (and so of its pip), logged nothing;
    (4) no file of the env changed (paths, hashes and mtimes)."""
    bindir = tmp_path / "shimbin"
    bindir.mkdir()
    shimlog = tmp_path / "shim.log"
    shim = bindir / f"python{PYVER}"
    shim.write_text(SHIM.format(log=shimlog, ver=PYVER))
    shim.chmod(0o755)
    # The system's python3.X is looked for first: out of the way, so the shim is found.
    env = no_stub_env(PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                      TFPROV_SYSTEM_PYTHON_DIRS=str(tmp_path / "nowhere"))
    pins = [index.pins["tfprov-alpha"], index.pins["tfprov-beta"]]
    m = manifest(tmp_path / "c.yaml", venv_yaml(), pip_yaml(index.url, pins))
    p = tfprov.run("apply", "-y", m, env=env)
    assert p.returncode == 0, out(p)
    assert shimlog.exists() and shimlog.read_text(), "the PATH shim was not used: test is void"
    assert any("/files/" in r for r in index.requests)
    host = tfprov.path(ENV_PREFIX)
    sp = [os.path.join(dp, "site-packages") for dp, dns, _ in os.walk(os.path.join(host, "lib"))
          if "site-packages" in dns][0]
    pylog = tmp_path / "venv-python.log"
    with open(os.path.join(sp, "zz_tfprov_test_probe.pth"), "w") as f:
        f.write(f"import sys; open({str(pylog)!r}, 'a').write(' '.join(sys.argv) + '\\n')\n")
    # The hook works: running the venv's python logs.
    subprocess.run([os.path.join(host, "bin", "python"), "-c", "pass"], check=True)
    assert pylog.read_text().strip() != ""
    pylog.unlink()

    def stamp():
        res = {}
        for dp, dns, fns in os.walk(host):
            for n in dns + fns:
                q = os.path.join(dp, n)
                st = os.lstat(q)
                res[q] = (st.st_mtime_ns, st.st_size, st.st_ino)
        return res
    shim_before = shimlog.read_text()
    n0 = len(index.requests)
    s0 = stamp()
    p2 = tfprov.run("apply", "-y", m, env=env)
    assert p2.returncode == 0, out(p2)
    assert "No changes" in p2.stdout, p2.stdout
    assert len(index.requests) == n0, index.requests[n0:]
    assert shimlog.read_text() == shim_before, "an interpreter was probed or run"
    assert not pylog.exists(), "the venv's python (pip) ran: " + pylog.read_text()
    assert stamp() == s0


# ---------------------------------------------------------------- (d) missing python

def _absent_python():
    for v in ("3.9", "3.10", "3.11"):
        if not any(os.path.exists(os.path.join(d, "python" + v))
                   for d in ("/usr/bin", "/bin", "/usr/local/bin")):
            return v
    return None


def test_venv_python_that_does_not_exist(tfprov, tmp_path):
    """manager: venv with a Python inside TF 2.15's range (3.9-3.11) that this
    machine does not have: a clear error naming the version and how to get it
    (apt / pyenv / conda); nothing placed (no env, no profile script), no
    resource recorded. (A version outside TF's range, e.g. "3.99", is already
    refused by validate: exit 3 naming it.)"""
    ver = _absent_python()
    if ver is None:
        pytest.skip("every Python 3.9-3.11 is installed here")
    m = manifest(tmp_path / "d.yaml", venv_yaml(ver))
    text = open(m).read().replace(f'python: "{PYVER}"\ndriver', f'python: "{ver}"\ndriver')
    open(m, "w").write(text)
    # PATH without pyenv shims: the machine's system interpreters only.
    p = tfprov.run("apply", "-y", m, env=no_stub_env(PATH="/usr/bin:/bin"))
    text = out(p)
    assert p.returncode == 6, text  # a precondition, found before any change
    assert f"Python {ver}" in text and f"python{ver}" in text, text
    assert "conda" in text and ("apt install" in text or "pyenv install" in text), text
    assert not os.path.exists(tfprov.path(ENV_PREFIX))
    files = {k for k in tree_hashes(tfprov.root) if k != "var" and not k.startswith("var/")}
    assert files == set(), f"changed before failing: {sorted(files)}"
    assert recorded_files(tfprov) == []
    m99 = manifest(tmp_path / "d99.yaml", venv_yaml("3.99"))
    t99 = open(m99).read().replace(f'python: "{PYVER}"\ndriver', 'python: "3.99"\ndriver')
    open(m99, "w").write(t99)
    p99 = tfprov.run("apply", "-y", m99, env=no_stub_env())
    assert p99.returncode == 3 and "3.99" in out(p99), out(p99)


# ---------------------------------------------------------------- (e) user pip settings

def test_users_pip_settings_are_ignored(tfprov, index, tmp_path):
    """PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX,
    PIP_REQUIRE_VIRTUALENV and a PIP_CONFIG_FILE (and ~/.config/pip/pip.conf)
    pointing at bogus places: tfprov's pip uses the manifest's index only, and
    the apply succeeds."""
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    bogus = "[global]\nindex-url = http://127.0.0.1:1/bogus/simple\nno-index = true\n" \
            "find-links = /nonexistent/links\n"
    (home / ".config" / "pip" / "pip.conf").write_text(bogus)
    conf = tmp_path / "pip.conf"
    conf.write_text(bogus)
    env = no_stub_env(HOME=str(home), PIP_INDEX_URL="http://127.0.0.1:1/simple",
                      PIP_EXTRA_INDEX_URL="http://127.0.0.1:1/extra",
                      PIP_FIND_LINKS="/nonexistent/wheels", PIP_NO_INDEX="1",
                      PIP_CONFIG_FILE=str(conf), PIP_REQUIRE_VIRTUALENV="0",
                      PYTHONPATH="/nonexistent/pythonpath")
    pins = [index.pins["tfprov-gamma"]]
    m = manifest(tmp_path / "e.yaml", venv_yaml(interpreter=f"/usr/bin/python{PYVER}"),
                 pip_yaml(index.url, pins))
    n0 = len(index.requests)
    p = tfprov.run("apply", "-y", m, env=env)
    assert p.returncode == 0, out(p)
    assert any("tfprov-gamma" in r for r in index.requests[n0:]), index.requests[n0:]
    host = tfprov.path(ENV_PREFIX)
    r = subprocess.run([os.path.join(host, "bin", "python"), "-c",
                        "import tfprov_gamma; print(tfprov_gamma.__version__)"],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert r.stdout.strip() == "0.3.0", r.stderr


def test_venv_activate_hook_is_a_placed_file(tfprov, index, tmp_path):
    """A venv stack with an env section: bin/activate ends with the line that
    sources the stack's activate.sh (and its deactivate function starts with the
    one that sources deactivate.sh), written once, recorded with its final
    hash (status and verify clean), the old file left as nothing behind; a
    second apply changes nothing and keeps one line."""
    env = "env:\n  profile_dir: /etc/profile.d\n  vars:\n    TFPROV_HOOK_TEST: \"yes\"\n"
    m = manifest(tmp_path / "a.yaml", venv_yaml() + env,
                 pip_yaml(index.url, [index.pins["tfprov-alpha"]]))
    p = tfprov.run("apply", "-y", m, env=no_stub_env())
    assert p.returncode == 0, out(p)
    activate = tfprov.path(ENV_PREFIX + "/bin/activate")
    text = open(activate).read()
    act = "/opt/tfprov/stacks/py/activate.sh"
    line = f"if [ -r '{act}' ]; then . '{act}'; fi  # tfprov stack env\n"
    assert text.endswith(line) and text.count("# tfprov stack env") == 2
    deact = "/opt/tfprov/stacks/py/deactivate.sh"
    assert (f"deactivate () {{\n    if [ \"${{TFPROV_STACK-}}\" = 'py' ] && [ -r '{deact}' ]; "
            f"then . '{deact}'; fi  # tfprov stack env\n") in text
    rows = db_rows(tfprov, "SELECT sha256 FROM files WHERE path = ?", (ENV_PREFIX + "/bin/activate",))
    assert rows == [(hashlib.sha256(text.encode()).hexdigest(),)]
    assert temp_leftovers(tfprov.root) == []
    v = tfprov.run("verify", "py", env=no_stub_env())
    assert v.returncode == 0, out(v)
    p2 = tfprov.run("apply", "-y", m, env=no_stub_env())
    assert p2.returncode == 0 and "No changes" in out(p2), out(p2)
    assert open(activate).read() == text

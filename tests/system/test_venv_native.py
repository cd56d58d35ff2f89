"""The stack's venv without ensurepip's pip run: `python -m venv --without-pip`,
then the wheels the interpreter's ensurepip would install (pip; setuptools
before 3.12), found by asking ensurepip which it hands to pip, installed by
tfprov's native installer (byte-compiled, entry points as pip writes them).

Reference: a venv made by the same interpreter the plain way (`python -m
venv`, ensurepip running pip). Everything is real: the binary, the
interpreter (/usr/bin/python3), its bundled wheels. The one stand-in is the
fallback test's interpreter: a wrapper script around /usr/bin/python3 that
refuses to name its bundled wheels, as an interpreter whose ensurepip
differs would; said there.
"""
import json
import os
import re
import subprocess

from lib_provision import no_stub_env, out, recorded_files
from test_python_env import ENV_PREFIX, PYVER, manifest, venv_yaml

SYS_PYTHON = "/usr/bin/python3"


def listing(env):
    """Every path of the env with what must agree: file contents with the env's
    own path written as <ENV>, except what names the installer or holds the
    compiled code (a .pyc names its source's path: kept by presence)."""
    got = {}
    for d, dirs, files in os.walk(env):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, env)
            if os.path.islink(p):
                got[rel] = "link:" + os.readlink(p)
            elif os.path.isdir(p):
                got[rel] = "dir"
            elif n.endswith(".pyc") or n in ("INSTALLER", "RECORD"):
                got[rel] = "file"
            else:
                with open(p, "rb") as f:
                    data = f.read().replace(env.encode(), b"<ENV>")
                if rel == os.path.join("bin", "activate"):
                    # tfprov's two marked hook lines (pyenv.c's venv_hook) are its
                    # own; the rest is the venv module's.
                    data = b"".join(ln for ln in data.splitlines(keepends=True)
                                    if b"# tfprov stack env" not in ln)
                got[rel] = data
    return got


def env_pip(env, *args):
    e = {"PATH": os.environ["PATH"], "PIP_CONFIG_FILE": "/dev/null"}
    return subprocess.run([os.path.join(env, "bin", "python"), "-I", "-m", "pip", *args,
                           "--disable-pip-version-check"], capture_output=True, text=True,
                          env=e, timeout=120)


def test_the_venv_is_the_one_ensurepip_makes(tfprov, tmp_path):
    m = manifest(tmp_path / "v.yaml", venv_yaml(interpreter=SYS_PYTHON))
    p = tfprov.run("-v", "apply", "-y", m, env=no_stub_env(), timeout=300)
    assert p.returncode == 0, out(p)
    assert re.search(r"venv: \d+ bundled wheels of \S+ installed natively", out(p)), out(p)
    # Unpacked and byte-compiled during the prefetch; the step only moved them.
    assert re.search(r"venv: 2 bundled wheels of \S+ into the download cache", out(p)) or \
        re.search(r"venv: 1 bundled wheels of \S+ into the download cache", out(p)), out(p)
    ahead = re.search(r"byte-compiled ahead: (\d+) of (\d+) files", out(p))
    assert ahead and ahead.group(1) == ahead.group(2) and int(ahead.group(1)) > 100, out(p)
    assert f"; {ahead.group(1)} .pyc files compiled ahead" in out(p), out(p)
    assert "run: " + str(tfprov.path(ENV_PREFIX)) + "/bin/python -I -c <byte-compiler>" \
        not in out(p), out(p)
    assert "-m ensurepip" not in out(p) and "def _setup_pip" in out(p), out(p)
    env = tfprov.path(ENV_PREFIX)
    # The reference at the same host path, so that every file naming the env agrees.
    ref_root = tmp_path / "ref"
    ref = str(ref_root) + ENV_PREFIX
    os.makedirs(os.path.dirname(ref))
    subprocess.run([SYS_PYTHON, "-I", "-m", "venv", ref], check=True, timeout=300)
    mine, theirs = listing(env), listing(ref)
    diff = {k: (k in mine, k in theirs) for k in set(mine) | set(theirs)
            if mine.get(k) != theirs.get(k)}
    assert diff == {}, sorted(diff.items())[:20]
    # The installer is named truthfully; pip works and lists what ensurepip installs.
    site = os.path.join(env, "lib", f"python{PYVER}", "site-packages")
    pip_info = [d for d in os.listdir(site) if d.startswith("pip-") and d.endswith(".dist-info")]
    assert open(os.path.join(site, pip_info[0], "INSTALLER")).read() == "tfprov\n"
    a, b = env_pip(env, "list", "--format=json"), env_pip(ref, "list", "--format=json")
    assert a.returncode == 0, a.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout)
    assert env_pip(env, "check").returncode == 0
    # Every installed file is recorded in the state; nothing of the work is left.
    files = {row[0] for row in recorded_files(tfprov)}
    assert os.path.join(ENV_PREFIX, "bin", "pip") in files
    assert not [n for n in os.listdir(env) if n.startswith(".tfprov")], os.listdir(env)


STANDIN_PTH = ("import ensurepip; ensurepip._bootstrap = (lambda b, r: lambda **k: b(**k) "
               "if __import__('ensurepip')._run_pip is r else "
               "(_ for _ in ()).throw(SystemExit(3)))(ensurepip._bootstrap, ensurepip._run_pip)\n")


def test_an_interpreter_that_does_not_name_its_wheels_gets_ensurepip(tfprov, tmp_path):
    """STAND-IN interpreter: a wrapper around /usr/bin/python3 whose venvs carry a
    .pth that makes ensurepip refuse to hand its wheels to anything but pip (as
    an ensurepip whose internals differ would); the venv's own ensurepip run,
    as `python -m venv` runs it, then installs pip."""
    wrapper = tmp_path / "python-wrapper"
    (tmp_path / "standin.pth").write_text(STANDIN_PTH)
    wrapper.write_text("#!/bin/sh\n"
                       f"{SYS_PYTHON} \"$@\" || exit $?\n"
                       "case \"$*\" in *EnvBuilder*)\n"
                       "  for last; do :; done\n"
                       f"  cp {tmp_path}/standin.pth \"$last\"/lib/python*/site-packages/;;\n"
                       "esac\n")
    wrapper.chmod(0o755)
    m = manifest(tmp_path / "v.yaml", venv_yaml(interpreter=str(wrapper)))
    p = tfprov.run("-v", "apply", "-y", m, env=no_stub_env(), timeout=300)
    assert p.returncode == 0, out(p)
    assert "does not name its bundled wheels" in out(p), out(p)
    assert "-m ensurepip --upgrade --default-pip" in out(p), out(p)
    env = tfprov.path(ENV_PREFIX)
    r = env_pip(env, "--version")
    assert r.returncode == 0 and r.stdout.startswith("pip "), r.stdout + r.stderr
    site = os.path.join(env, "lib", f"python{PYVER}", "site-packages")
    pip_info = [d for d in os.listdir(site) if d.startswith("pip-") and d.endswith(".dist-info")]
    assert open(os.path.join(site, pip_info[0], "INSTALLER")).read() == "pip\n"


def test_a_killed_runs_bundled_copy_is_swept(tfprov, tmp_path):
    """The bundled wheels are copied into the download cache's partial/ for a
    moment; what a killed run left there (an hour old) is removed by the next
    run that makes a venv, a fresh one (another run's, right now) is not."""
    partial = tfprov.path("/var/cache/tfprov/partial")
    os.makedirs(partial)
    stale, fresh = os.path.join(partial, "bundled-dead01"), os.path.join(partial, "bundled-live01")
    for d in (stale, fresh):
        os.makedirs(d)
        open(os.path.join(d, "pip-0-py3-none-any.whl"), "w").write("partial")
    old = os.stat(stale).st_mtime - 7200
    os.utime(stale, (old, old))
    m = manifest(tmp_path / "v.yaml", venv_yaml(interpreter=SYS_PYTHON))
    p = tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300)
    assert p.returncode == 0, out(p)
    assert not os.path.exists(stale)
    assert os.path.exists(os.path.join(fresh, "pip-0-py3-none-any.whl"))

"""The native wheel installer against pip itself, through the real binary.

Scenario: wheels built here (lib_pyindex's format plus what real wheels carry:
a platlib wheel with an executable file, console and GUI entry points,
.data/scripts with a #!python shebang and a shell script, .data/headers,
.data/data, .data/purelib, a dependency between two wheels, a name that needs
PEP 503 normalisation), served by a PEP 503 index on 127.0.0.1. tfprov
installs them into a real venv (manager: venv, complete lock: the native
installer is the default); the reference is a second real venv where the
env's own pip installs the same wheels (--no-deps --require-hashes).
What must hold: pip list is equal; the installed trees are equal file for
file (paths, modes, contents with the env path substituted; RECORD lists the
same paths; only INSTALLER says tfprov instead of pip); pip check is clean;
the scripts run; pip uninstall removes what pip's own uninstall removes; a
wheel whose file does not match its RECORD fails with exit 5 and leaves the
env as it was; `pip.installer: pip` keeps pip.
"""
import base64
import hashlib
import json
import os
import re
import subprocess
import zipfile

import pytest

import lib_pyindex
from lib_provision import no_stub_env, out, temp_leftovers, tree_hashes
from test_python_env import ENV_PREFIX, PYVER, manifest, venv_yaml

PIP_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}


def _rh(data):
    return "sha256=" + base64.urlsafe_b64encode(
        hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(outdir, name, version, files, purelib=True, console=None, gui=None,
               requires=(), modes=None, corrupt=None, wheel_version="1.0"):
    """A wheel as bdist_wheel writes one; files maps archive paths to bytes/str.
    modes: {path: unix mode}; corrupt: a path whose RECORD hash is wrong."""
    dist = name.replace("-", "_").replace(".", "_")
    di = f"{dist}-{version}.dist-info"
    content = dict(files)
    content[f"{di}/METADATA"] = "".join(
        [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"] +
        [f"Requires-Dist: {r}\n" for r in requires])
    content[f"{di}/WHEEL"] = (f"Wheel-Version: {wheel_version}\nGenerator: tfprov-tests\n"
                              f"Root-Is-Purelib: {'true' if purelib else 'false'}\n"
                              f"Tag: py3-none-any\n")
    ep = ""
    if console:
        ep += "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in console.items())
    if gui:
        ep += "[gui_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in gui.items())
    if ep:
        content[f"{di}/entry_points.txt"] = ep
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, f"{dist}-{version}-py3-none-any.whl")
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, data in content.items():
            b = data.encode() if isinstance(data, str) else data
            zi = zipfile.ZipInfo(p, date_time=(2024, 1, 2, 3, 4, 6))
            zi.external_attr = (0o100000 | (modes or {}).get(p, 0o644)) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, b)
            h = _rh(b + b"x") if p == corrupt else _rh(b)
            record.append(f"{p},{h},{len(b)}")
        record.append(f"{di}/RECORD,,")
        z.writestr(f"{di}/RECORD", "\n".join(record) + "\n")
    with open(path, "rb") as f:
        return path, hashlib.sha256(f.read()).hexdigest()


def wheel_set(d):
    """The wheels and their pins [(requirement name, version, sha256)]."""
    pins = []
    mods = {f"tfprov_core/m{i}.py": f"X = {i}\n" for i in range(20)}
    mods["tfprov_core/__init__.py"] = "VERSION = '1.0'\n"
    mods["tfprov_core/broken.py"] = "def broken(:\n"  # no .pyc, from pip or tfprov
    mods["tfprov_core/_native.so"] = b"\x7fELF not really\n" * 64
    mods["tfprov_core/sub/deep/data.json"] = '{"a": 1}\n'
    _, h = make_wheel(d, "tfprov-core", "1.0", mods, purelib=False,
                      modes={"tfprov_core/_native.so": 0o755})
    pins.append(("tfprov-core", "1.0", h))
    dd = "tfprov_tool-2.0.data"
    _, h = make_wheel(
        d, "tfprov-tool", "2.0",
        {"tfprov_tool/__init__.py": "",
         "tfprov_tool/cli.py": "def main():\n    print('hello from tool')\n\n"
                               "def gui():\n    print('gui')\n",
         f"{dd}/scripts/tfprov-raw": "#!python\nimport sys\nprint('raw ok', sys.prefix)\n",
         f"{dd}/scripts/tfprov-sh": "#!/bin/sh\necho sh ok\n",
         f"{dd}/scripts/tfprov-hello": "#!python\nprint('shadowed by the entry point')\n",
         f"{dd}/headers/tool.h": "#define TFPROV_TOOL 1\n",
         f"{dd}/data/share/tfprov-tool/notes.txt": "notes\n",
         f"{dd}/purelib/tfprov_tool_extra.py": "EXTRA = True\n"},
        console={"tfprov-hello": "tfprov_tool.cli:main"},
        gui={"tfprov-gui": "tfprov_tool.cli:gui"},
        requires=["tfprov-core (>=1.0)"],
        modes={f"{dd}/scripts/tfprov-sh": 0o755, f"{dd}/scripts/tfprov-raw": 0o755})
    pins.append(("tfprov-tool", "2.0", h))
    _, h = make_wheel(d, "Tfprov.Mixed_Name", "0.1",
                      {"tfprov_mixed/__init__.py": "import tfprov_core\n"},
                      requires=["tfprov_core"])
    pins.append(("Tfprov.Mixed-Name", "0.1", h))
    return pins


def pip_yaml(index, pins, installer=None):
    req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins)
    y = f"pip:\n  index_url: {index}\n  complete: true\n"
    if installer:
        y += f"  installer: {installer}\n"
    return y + f"  requirements: |\n{req}"


def pip(env_dir, *args, check=True):
    p = subprocess.run([os.path.join(env_dir, "bin", "python"), "-m", "pip", *args,
                        "--disable-pip-version-check", "--isolated"],
                       capture_output=True, text=True, env=PIP_ENV, timeout=300)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def listing(env_dir, sub_from=None, sub_to=None):
    """tree_hashes of an env, contents with the env path substituted; RECORD as the
    set of paths it lists; INSTALLER and .pyc (they embed source mtimes) by name."""
    res = {}
    for rel, (kind, val, mode) in tree_hashes(env_dir).items():
        if rel.startswith("bin/activate"):
            continue  # the venv's own prompt, and tfprov's stack hook
        p = os.path.join(env_dir, rel)
        if kind == "file" and rel.endswith(".dist-info/RECORD"):
            with open(p, newline="") as f:
                val = sorted(line.split(",")[0] for line in f.read().splitlines())
        elif kind == "file" and (rel.endswith(".dist-info/INSTALLER") or rel.endswith(".pyc")):
            val = ""
        elif kind == "file" and sub_from:
            with open(p, "rb") as f:
                data = f.read().replace(sub_from.encode(), sub_to.encode())
            val = hashlib.sha256(data).hexdigest()
        res[rel] = (kind, val, mode)
    return res


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("native")
    wheels = str(base / "wheels")
    pins = wheel_set(wheels)
    idx = lib_pyindex.Index(wheels)
    yield {"base": base, "wheels": wheels, "pins": pins, "index": idx}
    idx.close()


def reference(world, env):
    """The reference: a venv of the interpreter tfprov chose for env, where that
    interpreter's own pip installs the same wheels."""
    ref = str(world["base"] / "ref")
    if not os.path.exists(ref):
        cfg = dict(line.split(" = ", 1) for line in
                   open(os.path.join(env, "pyvenv.cfg")).read().splitlines() if " = " in line)
        python = cfg.get("executable") or os.path.join(cfg["home"], f"python{PYVER}")
        subprocess.run([python, "-m", "venv", ref], check=True, env=PIP_ENV)
        reqs = world["base"] / "reqs.txt"
        reqs.write_text("".join(f"{n}=={v} --hash=sha256:{h}\n" for n, v, h in world["pins"]))
        pip(ref, "install", "--no-deps", "--require-hashes", "--no-index",
            f"--find-links={world['wheels']}", "--no-warn-script-location", "-r", str(reqs))
    return ref


def apply_native(tfprov, tmp_path, world, name="m.yaml", pins=None, installer=None):
    m = manifest(tmp_path / name, venv_yaml(),
                 pip_yaml(world["index"].url, pins or world["pins"], installer))
    return tfprov.run("apply", "-y", "-v", m, env=no_stub_env(), timeout=600)


def test_native_install_equals_pip(tfprov, tmp_path, world):
    p = apply_native(tfprov, tmp_path, world)
    assert p.returncode == 0, out(p)
    assert re.search(r"pip: \d+ wheels installed natively", out(p)), out(p)
    env = tfprov.path(ENV_PREFIX)
    ref = reference(world, env)
    # pip sees exactly what pip installed.
    assert json.loads(pip(env, "list", "--format=json").stdout) == \
        json.loads(pip(ref, "list", "--format=json").stdout)
    chk = pip(env, "check")
    assert "No broken requirements found." in chk.stdout
    # File for file the same tree (the venv's own files included).
    mine, theirs = listing(env), listing(ref, ref, env)
    assert sorted(set(mine) ^ set(theirs)) == []
    diff = {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
    assert diff == {}, sorted(diff)
    # Only INSTALLER tells them apart.
    di = os.path.join(env, "lib", f"python{PYVER}", "site-packages",
                      "tfprov_tool-2.0.dist-info")
    assert open(os.path.join(di, "INSTALLER")).read() == "tfprov\n"
    # RECORD carries the installed files' hashes, scripts and .pyc included.
    rows = {r.split(",")[0]: r.split(",")[1] for r in
            open(os.path.join(di, "RECORD"), newline="").read().split("\r\n") if r}
    hello = os.path.join(env, "bin", "tfprov-hello")
    assert rows["../../../bin/tfprov-hello"] == _rh(open(hello, "rb").read())
    assert any(k.endswith(f".{'cpython-' + PYVER.replace('.', '')}.pyc") and v
               for k, v in rows.items())
    # The scripts run with the env's interpreter.
    r = subprocess.run([hello], capture_output=True, text=True, env=PIP_ENV)
    assert r.stdout == "hello from tool\n", r.stdout + r.stderr
    r = subprocess.run([os.path.join(env, "bin", "tfprov-raw")], capture_output=True,
                       text=True, env=PIP_ENV)
    assert r.stdout.strip() == f"raw ok {env}", r.stdout + r.stderr
    assert temp_leftovers(tfprov.root) == []
    # A second apply changes nothing and runs no installer.
    p2 = apply_native(tfprov, tmp_path, world)
    assert p2.returncode == 0 and "No changes" in p2.stdout, out(p2)


def test_pip_uninstall_after_native_install(tfprov, tmp_path, world):
    p = apply_native(tfprov, tmp_path, world)
    assert p.returncode == 0, out(p)
    env = tfprov.path(ENV_PREFIX)
    orig = reference(world, env)
    ref = str(world["base"] / "ref-uninstall")
    subprocess.run(["cp", "-a", orig, ref], check=True)
    # The copied reference still names the original path in its scripts.
    for d in (env, ref):
        pip(d, "uninstall", "-y", "tfprov-tool", "tfprov-core")
    mine, theirs = listing(env), listing(ref, orig, env)
    assert sorted(set(mine) ^ set(theirs)) == []
    assert not os.path.exists(os.path.join(env, "bin", "tfprov-hello"))
    assert not os.path.exists(os.path.join(env, "include", "site", f"python{PYVER}",
                                           "tfprov-tool"))
    names = {d["name"] for d in json.loads(pip(env, "list", "--format=json").stdout)}
    assert "tfprov-tool" not in names and "Tfprov.Mixed_Name" in names, names


def test_record_mismatch_is_exit_5_and_env_unchanged(tfprov, tmp_path, world):
    base = tmp_path / "bad"
    _, h = make_wheel(str(base), "tfprov-evil", "1.0",
                      {"tfprov_evil/__init__.py": "ok = 1\n"},
                      corrupt="tfprov_evil/__init__.py")
    idx = lib_pyindex.Index(str(base))
    try:
        m = manifest(tmp_path / "a.yaml", venv_yaml())
        assert tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300).returncode == 0
        before = tree_hashes(tfprov.path(ENV_PREFIX))
        m2 = manifest(tmp_path / "b.yaml", venv_yaml(),
                      pip_yaml(idx.url, [("tfprov-evil", "1.0", h)]))
        p = tfprov.run("apply", "-y", m2, env=no_stub_env(), timeout=300)
        assert p.returncode == 5, out(p)
        assert "tfprov_evil/__init__.py does not match the wheel's RECORD hash" in out(p)
        assert tree_hashes(tfprov.path(ENV_PREFIX)) == before
        assert temp_leftovers(tfprov.root) == []
    finally:
        idx.close()


@pytest.mark.parametrize("files,console,message", [
    ({"tfprov_odd/__init__.py": ""}, {"tfprov-odd": "tfprov_odd"},
     "invalid script entry point tfprov-odd (a module:callable is required)"),
    ({"tfprov_odd-1.0.data/lib/x.py": ""}, None,
     "unknown scheme key in tfprov_odd-1.0.data/lib/x.py"),
], ids=["entry-point-without-callable", "unknown-data-scheme"])
def test_wheel_pip_would_refuse_fails_env_unchanged(tfprov, tmp_path, world, files, console,
                                                    message):
    """Wheels that pip downloads but refuses to install: the same refusal, exit 1,
    the env as it was, nothing left behind."""
    base = tmp_path / "odd"
    _, h = make_wheel(str(base), "tfprov-odd", "1.0", files, console=console)
    idx = lib_pyindex.Index(str(base))
    try:
        m = manifest(tmp_path / "a.yaml", venv_yaml())
        assert tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300).returncode == 0
        before = tree_hashes(tfprov.path(ENV_PREFIX))
        m2 = manifest(tmp_path / "b.yaml", venv_yaml(),
                      pip_yaml(idx.url, [("tfprov-odd", "1.0", h)]))
        p = tfprov.run("apply", "-y", m2, env=no_stub_env(), timeout=300)
        assert p.returncode == 1, out(p)
        assert message in out(p), out(p)
        assert tree_hashes(tfprov.path(ENV_PREFIX)) == before
        assert temp_leftovers(tfprov.root) == []
    finally:
        idx.close()


def test_installer_pip_keeps_pip(tfprov, tmp_path, world):
    p = apply_native(tfprov, tmp_path, world, installer="pip")
    assert p.returncode == 0, out(p)
    assert not re.search(r"pip: \d+ wheels installed natively", out(p)), out(p)
    di = os.path.join(tfprov.path(ENV_PREFIX), "lib", f"python{PYVER}", "site-packages",
                      "tfprov_tool-2.0.dist-info")
    assert open(os.path.join(di, "INSTALLER")).read() == "pip\n"


def test_unknown_installer_is_a_manifest_error(tfprov, tmp_path, world):
    p = apply_native(tfprov, tmp_path, world, installer="poetry")
    assert p.returncode == 3, out(p)
    assert "pip.installer 'poetry' is not a valid value" in out(p), out(p)
    assert "one of: native pip" in out(p), out(p)


def apply_from_dir(tfprov, tmp_path, wheels, pins, name="d.yaml"):
    """apply with --mirror DIR (find-links only); -vv names every child run."""
    m = manifest(tmp_path / name, venv_yaml(), pip_yaml("http://127.0.0.1:9/simple/", pins))
    return tfprov.run("--mirror", wheels, "-vv", "apply", "-y", m, env=no_stub_env(),
                      timeout=600)


def test_wheel_directory_fills_the_wheelhouse_without_pip(tfprov, tmp_path, world):
    """A complete lock from a local wheel directory: each pinned wheel copied and
    hashed by tfprov (no `pip download` process), then installed natively; the
    result is still exactly pip's (the index URL in the manifest is a dead port:
    nothing is fetched from it)."""
    p = apply_from_dir(tfprov, tmp_path, world["wheels"], world["pins"])
    assert p.returncode == 0, out(p)
    # The wheels were verified from the directory into the cache before any step
    # ran; the wheelhouse is filled from those verified files.
    assert re.search(r"3 verified wheels linked from \S+", out(p)), out(p)
    assert "-m pip download" not in out(p), out(p)
    assert re.search(r"pip: \d+ wheels installed natively", out(p)), out(p)
    env = tfprov.path(ENV_PREFIX)
    ref = reference(world, env)
    assert json.loads(pip(env, "list", "--format=json").stdout) == \
        json.loads(pip(ref, "list", "--format=json").stdout)
    mine, theirs = listing(env), listing(ref, ref, env)
    assert {k: (mine.get(k), theirs.get(k)) for k in set(mine) | set(theirs)
            if mine.get(k) != theirs.get(k)} == {}
    # The .pyc files are exactly pip's: none for the module that does not compile,
    # one for .data/purelib's module (compiled after the unpack, not during it).
    sp = os.path.join(env, "lib", f"python{PYVER}", "site-packages")
    tag = "cpython-" + PYVER.replace(".", "")
    assert not os.path.exists(os.path.join(sp, "tfprov_core", "__pycache__",
                                           f"broken.{tag}.pyc"))
    assert os.path.exists(os.path.join(sp, "__pycache__", f"tfprov_tool_extra.{tag}.pyc"))
    assert os.path.exists(os.path.join(sp, "tfprov_core", "__pycache__", f"m7.{tag}.pyc"))
    # The .pyc names the installed source, not the staging copy it was built in.
    r = subprocess.run([os.path.join(env, "bin", "python"), "-c",
                        "import tfprov_core.m7 as m; print(m.__spec__.cached); "
                        "print(m.__loader__.get_code('tfprov_core.m7').co_filename)"],
                       capture_output=True, text=True, env=PIP_ENV)
    cached, filename = r.stdout.split()
    assert filename == os.path.join(sp, "tfprov_core", "m7.py"), r.stdout + r.stderr
    assert ".tfprov-stage" not in open(cached, "rb").read().decode("latin-1")
    assert pip(env, "check").returncode == 0
    assert temp_leftovers(tfprov.root) == []


def test_wheel_directory_file_with_other_bytes_is_exit_5(tfprov, tmp_path, world):
    """The directory holds a wheel of the pinned name and version whose bytes are
    not the pinned ones: exit 5 naming the package and the hash, env unchanged."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    _, h = make_wheel(str(good), "tfprov-swap", "1.0", {"tfprov_swap/__init__.py": "A = 1\n"})
    make_wheel(str(bad), "tfprov-swap", "1.0", {"tfprov_swap/__init__.py": "A = 2\n"})
    m = manifest(tmp_path / "a.yaml", venv_yaml())
    assert tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300).returncode == 0
    before = tree_hashes(tfprov.path(ENV_PREFIX))
    p = apply_from_dir(tfprov, tmp_path, str(bad), [("tfprov-swap", "1.0", h)])
    assert p.returncode == 5, out(p)
    # Refused when the directory's file is verified, before any step ran.
    assert re.search(r"tfprov-swap==1\.0 \(tfprov_swap-1\.0-\S+\.whl\): sha256 mismatch .*"
                     "expected " + h, out(p)), out(p)
    assert "nothing was changed" in out(p), out(p)
    assert tree_hashes(tfprov.path(ENV_PREFIX)) == before
    assert temp_leftovers(tfprov.root) == []


def test_wheel_directory_with_two_candidates_lets_pip_choose(tfprov, tmp_path, world):
    """Two files of one pin that the env could both install (py3 and pyXY, both in
    pip's list of the env's tags): tfprov does not guess, pip downloads and picks
    (both hashes pinned)."""
    d = tmp_path / "two"
    path, h1 = make_wheel(str(d), "tfprov-two", "1.0", {"tfprov_two/__init__.py": "A = 1\n"})
    py = "py" + PYVER.replace(".", "")
    other = os.path.join(str(d), f"tfprov_two-1.0-{py}-none-any.whl")
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(other, "w") as zout:
        zout.comment = b"the same files, another build"
        for item in zin.infolist():
            zout.writestr(item, zin.read(item.filename))
    h2 = hashlib.sha256(open(other, "rb").read()).hexdigest()
    assert h1 != h2
    p = apply_from_dir(tfprov, tmp_path, str(d), [("tfprov-two", "1.0", f"{h1} \\\n"
                                                   f"        --hash=sha256:{h2}")])
    assert p.returncode == 0, out(p)
    assert "-m pip download" in out(p) and "no pip download" not in out(p), out(p)
    names = [x["name"] for x in json.loads(pip(tfprov.path(ENV_PREFIX), "list",
                                               "--format=json").stdout)]
    assert names.count("tfprov-two") == 1, names


def test_wheel_directory_with_no_wheel_for_this_python_is_refused(tfprov, tmp_path, world):
    """Only a wheel for another interpreter (cp27): not taken natively; pip finds no
    distribution and the apply fails with the env as it was."""
    d = tmp_path / "old"
    path, _ = make_wheel(str(d), "tfprov-old", "1.0", {"tfprov_old/__init__.py": ""})
    other = os.path.join(str(d), "tfprov_old-1.0-cp27-cp27mu-manylinux1_x86_64.whl")
    os.rename(path, other)
    h = hashlib.sha256(open(other, "rb").read()).hexdigest()
    m = manifest(tmp_path / "a.yaml", venv_yaml())
    assert tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300).returncode == 0
    before = tree_hashes(tfprov.path(ENV_PREFIX))
    p = apply_from_dir(tfprov, tmp_path, str(d), [("tfprov-old", "1.0", h)])
    assert p.returncode != 0, out(p)
    assert "no pip download" not in out(p) and "-m pip download" in out(p), out(p)
    assert "tfprov-old" in out(p)
    assert tree_hashes(tfprov.path(ENV_PREFIX)) == before
    assert temp_leftovers(tfprov.root) == []

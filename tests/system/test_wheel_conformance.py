"""Conformance of the native wheel installer with pip, on odd but valid wheels.

Scenario: a set of wheels that PEP 427 / the binary distribution format allow
but that the common bdist_wheel output never shows: Wheel-Version 0.1 and 1.9
(an installer must accept any major version it reads, and pip warns for a
newer minor), a build tag in the file name, every .data scheme (scripts,
headers, data, purelib, platlib), setuptools' entry-point wrappers in
.data/scripts (EP, EP.exe, EP-script.py, EP.pya, which pip leaves out, beside
EP-script.pyw and EP.EXE of another case, which pip installs), #!python
shebangs with CRLF and #!pythonw, a script in a subdirectory, PEP 420
namespace packages split over two wheels plus a legacy -nspkg.pth, console
and GUI entry points, upper-case distribution names, stored (uncompressed)
entries, explicit directory entries, an empty file, a non-ASCII file name,
executable files in the lib dir and .dist-info/licenses/.
The same wheels go into two real venvs of the same interpreter: one by
tfprov's native installer (the real binary, wheels from a PEP 503 index on
127.0.0.1), one by that interpreter's own pip. What must hold: the trees are
equal file by file (paths, modes, bytes with the env path substituted, so
script shebangs too), RECORD rows are equal (path, hash, size; only the .pyc
rows, whose bytes embed the source mtime, and INSTALLER differ in hash), and
pip check is clean. Wheel-Versions pip refuses (2.0, a missing one, one that
is not numbers) are refused by tfprov too, with exit 1 and the env unchanged.
"""
import base64
import hashlib
import os
import re
import subprocess
import zipfile

import pytest

import lib_pyindex
from lib_provision import no_stub_env, out, temp_leftovers, tree_hashes
from test_python_env import ENV_PREFIX, PYVER, manifest, venv_yaml
from test_wheel_native import PIP_ENV, apply_from_dir, pip, pip_yaml

STAMP = (2023, 5, 6, 7, 8, 10)


def _rh(data):
    return "sha256=" + base64.urlsafe_b64encode(
        hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(outdir, dist, version, files, *, wheel_version="1.0", purelib=True,
          build_tag=None, entry_points="", modes=None, stored=(), dirs=(), meta_name=None):
    """Writes a wheel by hand (zipfile); returns (file name, sha256 hex).
    files: {archive path: str|bytes}; modes: {path: mode}; stored: paths kept
    uncompressed; dirs: explicit directory entries."""
    di = f"{dist}-{version}.dist-info"
    content = dict(files)
    content[f"{di}/METADATA"] = (f"Metadata-Version: 2.1\nName: {meta_name or dist}\n"
                                 f"Version: {version}\n")
    content[f"{di}/WHEEL"] = (f"Wheel-Version: {wheel_version}\nGenerator: tfprov-tests\n"
                              f"Root-Is-Purelib: {'true' if purelib else 'false'}\n"
                              f"Tag: py3-none-any\n" if wheel_version is not None else
                              "Generator: tfprov-tests\nRoot-Is-Purelib: true\n")
    if build_tag:
        content[f"{di}/WHEEL"] += f"Build: {build_tag}\n"
    if entry_points:
        content[f"{di}/entry_points.txt"] = entry_points
    parts = [dist, version] + ([build_tag] if build_tag else []) + ["py3-none-any"]
    name = "-".join(parts) + ".whl"
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name)
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for d in dirs:
            zi = zipfile.ZipInfo(d.rstrip("/") + "/", date_time=STAMP)
            zi.external_attr = (0o40755 << 16) | 0x10
            z.writestr(zi, b"")
        for p, data in content.items():
            b = data.encode() if isinstance(data, str) else data
            zi = zipfile.ZipInfo(p, date_time=STAMP)
            zi.external_attr = (0o100000 | (modes or {}).get(p, 0o644)) << 16
            zi.compress_type = zipfile.ZIP_STORED if p in stored else zipfile.ZIP_DEFLATED
            z.writestr(zi, b)
            record.append(f"{p},{_rh(b)},{len(b)}")
        record.append(f"{di}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{di}/RECORD", date_time=STAMP), "\n".join(record) + "\n")
    with open(path, "rb") as f:
        return name, hashlib.sha256(f.read()).hexdigest()


def odd_wheels(d):
    """The wheels; returns [(requirement name, version, sha256)]."""
    pins = []
    _, h = build(d, "oldver", "0.3", {"oldver/__init__.py": "V = 'zero point one'\n"},
                 wheel_version="0.1")
    pins.append(("oldver", "0.3", h))
    _, h = build(d, "newminor", "1.0", {"newminor.py": "V = 19\n"}, wheel_version="1.9")
    pins.append(("newminor", "1.0", h))
    _, h = build(d, "buildtag", "2.1", {"buildtag/__init__.py": "B = 7\n"}, build_tag="7a")
    pins.append(("buildtag", "2.1", h))
    ud = "Upper_Case-2.0.data"
    _, h = build(d, "Upper_Case", "2.0", {
        "Upper_Case/__init__.py": "from . import Inner\n",
        "Upper_Case/Inner.py": "X = 'upper'\n",
        "Upper_Case/_speed.so": b"\x7fELF pretend\x00" * 50,
        f"{ud}/headers/upper.h": "#define UPPER 1\n",
        f"{ud}/headers/sub/deeper.h": "#define DEEPER 1\n",
        f"{ud}/data/share/upper/README": "data scheme\n",
        f"{ud}/data/etc/upper.conf": "k = v\n",
        f"{ud}/purelib/upper_pure.py": "P = 1\n",
        f"{ud}/platlib/upper_plat.py": "Q = 2\n",
    }, purelib=False, modes={"Upper_Case/_speed.so": 0o755})
    pins.append(("Upper-Case", "2.0", h))
    ed = "epwrap-1.1.data/scripts"
    eps = ("[console_scripts]\nepw-cli = epwrap.cli:main\n  spaced-name   =  epwrap.cli:main\n"
           "# a comment\n[gui_scripts]\nepw-gui = epwrap.cli:gui [extra]\n"
           "[other.group]\nnot-a-script = epwrap.cli:main\n")
    _, h = build(d, "epwrap", "1.1", {
        "epwrap/__init__.py": "",
        "epwrap/cli.py": "def main():\n    print('cli')\n\ndef gui():\n    print('gui')\n",
        f"{ed}/epw-cli": "#!python\nfrom epwrap.cli import main\nmain()\n",
        f"{ed}/epw-cli.exe": b"MZ\x90\x00 setuptools launcher stand-in",
        f"{ed}/epw-cli-script.py": "#!python\nimport epwrap.cli\n",
        f"{ed}/epw-cli.pya": "#!python\nimport epwrap.cli\n",
        f"{ed}/epw-gui.exe": b"MZ\x90\x00 gui launcher stand-in",
        f"{ed}/epw-gui-script.pyw": "#!pythonw\nimport epwrap.cli\n",
        f"{ed}/EPW-CLI.EXE": b"MZ other case, not a wrapper of epw-cli",
        f"{ed}/spaced-name-script.py": "#!python\n# wrapper of an entry point written spaced\n",
        f"{ed}/epw-tool": "#!python\r\nimport sys\r\nprint(sys.prefix)\r\n",
        f"{ed}/epw-pythonw": "#!pythonw -E\nprint('w')\n",
        f"{ed}/epw-sh": "#!/bin/sh\necho sh\n",
        f"{ed}/sub/nested-tool": "#!python\nprint('nested')\n",
    }, entry_points=eps, modes={f"{ed}/epw-tool": 0o755, f"{ed}/epw-cli": 0o755,
                                f"{ed}/sub/nested-tool": 0o755})
    pins.append(("epwrap", "1.1", h))
    for part in ("a", "b"):
        files = {f"tfns/{part}/__init__.py": f"PART = {part!r}\n"}
        if part == "a":
            files[f"ns{part}-1.0-py3.11-nspkg.pth"] = "import sys; pass\n"
        _, h = build(d, f"ns{part}", "1.0", files)
        pins.append((f"ns{part}", "1.0", h))
    _, h = build(d, "stored", "3.0", {
        "stored/__init__.py": "S = 1\n",
        "stored/empty.txt": "",
        "stored/tool.sh": "#!/bin/sh\necho tool\n",
        "stored/donn\u00e9es.txt": "non-ascii name\n",
        "stored-3.0.dist-info/licenses/LICENSE": "MIT, for the test\n",
        "stored-3.0.dist-info/top_level.txt": "stored\n",
    }, stored=("stored/__init__.py", "stored/empty.txt", "stored/tool.sh"),
        dirs=("stored", "stored/nothing-inside"), modes={"stored/tool.sh": 0o755})
    pins.append(("stored", "3.0", h))
    return pins


def record_rows(path, sub_from=None, sub_to=None):
    """RECORD's rows (path, hash, size). A row whose file names the env's path
    (a script's shebang) is checked against the file, then given the hash and
    size of the file with sub_from replaced by sub_to."""
    with open(path, newline="") as f:
        rows = [line.split(",") for line in f.read().splitlines() if line]
    lib = os.path.dirname(os.path.dirname(path))
    out_rows = []
    for r in rows:
        p = ",".join(r[:-2]) if len(r) > 3 else r[0]  # no path here has a comma
        h, s = r[-2], r[-1]
        if p.endswith(".pyc") or p.endswith(".dist-info/INSTALLER"):
            h = s = "(varies)"  # .pyc embeds the source mtime; INSTALLER names the installer
        elif sub_from and h:
            f = os.path.normpath(os.path.join(lib, p))
            data = open(f, "rb").read() if os.path.isfile(f) else b""
            if sub_from.encode() in data and _rh(data) == h and str(len(data)) == s:
                data = data.replace(sub_from.encode(), sub_to.encode())
                h, s = _rh(data), str(len(data))
        out_rows.append((p, h, s))
    return sorted(out_rows)


def listing(env_dir, sub_from=None, sub_to=None):
    res = {}
    for rel, (kind, val, mode) in tree_hashes(env_dir).items():
        if rel.startswith("bin/activate"):
            continue
        p = os.path.join(env_dir, rel)
        if kind == "file" and rel.endswith(".dist-info/RECORD"):
            val = record_rows(p, sub_from, sub_to)
        elif kind == "file" and (rel.endswith(".dist-info/INSTALLER") or rel.endswith(".pyc")):
            val = ""
        elif kind == "file" and sub_from:
            with open(p, "rb") as f:
                data = f.read().replace(sub_from.encode(), sub_to.encode())
            val = hashlib.sha256(data).hexdigest()
        res[rel] = (kind, val, mode)
    return res


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    base = tmp_path_factory.mktemp("conformance")
    wheels = str(base / "wheels")
    pins = odd_wheels(wheels)
    idx = lib_pyindex.Index(wheels)
    yield {"base": base, "wheels": wheels, "pins": pins, "index": idx}
    idx.close()


def pip_reference(base, env, wheels, pins):
    ref = str(base / "ref")
    cfg = dict(line.split(" = ", 1) for line in
               open(os.path.join(env, "pyvenv.cfg")).read().splitlines() if " = " in line)
    python = cfg.get("executable") or os.path.join(cfg["home"], f"python{PYVER}")
    subprocess.run([python, "-m", "venv", ref], check=True, env=PIP_ENV)
    reqs = base / "reqs.txt"
    reqs.write_text("".join(f"{n}=={v} --hash=sha256:{h}\n" for n, v, h in pins))
    p = pip(ref, "install", "--no-deps", "--require-hashes", "--no-index",
            f"--find-links={wheels}", "--no-warn-script-location", "-r", str(reqs))
    return ref, p


def test_odd_wheels_install_as_pip_installs_them(tfprov, tmp_path, odd):
    m = manifest(tmp_path / "m.yaml", venv_yaml(), pip_yaml(odd["index"].url, odd["pins"]))
    p = tfprov.run("apply", "-y", "-v", m, env=no_stub_env(), timeout=600)
    assert p.returncode == 0, out(p)
    assert re.search(r"pip: \d+ wheels installed natively", out(p)), out(p)
    env = tfprov.path(ENV_PREFIX)
    ref, pp = pip_reference(tmp_path, env, odd["wheels"], odd["pins"])
    assert "newer Wheel-Version (1.9)" in pp.stdout + pp.stderr  # pip warns, installs
    assert "No broken requirements found." in pip(env, "check").stdout
    mine, theirs = listing(env, env, env), listing(ref, ref, env)
    assert sorted(set(mine) - set(theirs)) == [], "only in tfprov's env"
    assert sorted(set(theirs) - set(mine)) == [], "only in pip's env"
    diff = {}
    for k in mine:
        if mine[k] == theirs[k]:
            continue
        if k.endswith("RECORD") and mine[k][0] == "file":  # the rows that differ
            a, b = set(mine[k][1]), set(theirs[k][1])
            diff[k] = {"tfprov": sorted(a - b), "pip": sorted(b - a), "modes": (
                mine[k][2], theirs[k][2])}
        else:
            diff[k] = (mine[k], theirs[k])
    assert diff == {}, diff
    # The comparison saw what it is about (a listing that lost them would pass).
    bin_ = {k for k in mine if k.startswith("bin/")}
    for kept in ("bin/epw-cli", "bin/epw-gui", "bin/spaced-name", "bin/epw-gui-script.pyw",
                 "bin/EPW-CLI.EXE", "bin/epw-tool", "bin/epw-pythonw", "bin/epw-sh",
                 "bin/sub/nested-tool"):
        assert kept in bin_, (kept, sorted(bin_))
    for dropped in ("bin/epw-cli.exe", "bin/epw-cli-script.py", "bin/epw-cli.pya",
                    "bin/epw-gui.exe", "bin/spaced-name-script.py", "bin/not-a-script"):
        assert dropped not in bin_, dropped
    assert open(os.path.join(env, "bin", "epw-tool"), "rb").read().startswith(
        b"#!" + os.path.join(env, "bin", "python").encode() + b"\n")
    sp = os.path.join("lib", f"python{PYVER}", "site-packages")
    for rel in ("oldver/__init__.py", "newminor.py", "buildtag/__init__.py",
                "tfns/a/__init__.py", "tfns/b/__init__.py", "upper_pure.py", "upper_plat.py",
                "stored/donn\u00e9es.txt", "stored-3.0.dist-info/licenses/LICENSE"):
        assert os.path.join(sp, rel) in mine, rel
    assert mine[os.path.join(sp, "stored", "tool.sh")][2] == 0o755
    r = subprocess.run([os.path.join(env, "bin", "python"), "-c",
                        "import tfns.a, tfns.b, oldver, Upper_Case;"
                        "print(tfns.a.PART, tfns.b.PART, oldver.V, Upper_Case.Inner.X)"],
                       capture_output=True, text=True, env=PIP_ENV)
    assert r.stdout == "a b zero point one upper\n", r.stdout + r.stderr
    assert temp_leftovers(tfprov.root) == []


@pytest.mark.parametrize("wheel_version,message", [
    ("2.0", "unsupported Wheel-Version 2.0 (this installer reads 0.x and 1.x, PEP 427)"),
    ("1.x", "unsupported Wheel-Version 1.x"),
    (None, "WHEEL has no Wheel-Version"),
], ids=["major-2", "not-numbers", "missing"])
def test_wheel_version_pip_refuses_is_refused(tfprov, tmp_path, wheel_version, message):
    """From a local wheel directory (--mirror: no `pip download`, which would
    refuse the wheel first), so the native installer's own check is what runs."""
    base = tmp_path / "w"
    _, h = build(str(base), "futurewheel", "1.0", {"futurewheel.py": "F = 1\n"},
                 wheel_version=wheel_version)
    # pip refuses it as well: the reference for what "refused" means.
    ref = str(tmp_path / "ref")
    subprocess.run(["/usr/bin/python3", "-m", "venv", ref], check=True, env=PIP_ENV)
    pp = pip(ref, "install", "--no-deps", "--no-index", f"--find-links={base}",
             "futurewheel==1.0", check=False)
    assert pp.returncode != 0, pp.stdout
    m = manifest(tmp_path / "a.yaml", venv_yaml())
    assert tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300).returncode == 0
    before = tree_hashes(tfprov.path(ENV_PREFIX))
    p = apply_from_dir(tfprov, tmp_path, str(base), [("futurewheel", "1.0", h)])
    assert p.returncode == 1, out(p)
    assert message in out(p), out(p)
    assert "-m pip download" not in out(p), out(p)
    assert tree_hashes(tfprov.path(ENV_PREFIX)) == before
    assert temp_leftovers(tfprov.root) == []

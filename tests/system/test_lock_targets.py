"""`tfprov lock` for the target, not for the machine it runs on.

- A conda stack is resolved with its own interpreter: the explicit conda lock is
  installed natively into a throwaway prefix and pip's resolver runs there. The
  machine's python3 is Debian's 3.11 (PATH is cut down to /usr/bin:/bin, so no
  python3.10 can be found); the stack wants 3.10, and environment markers in the
  fixture wheels show which interpreter resolved.
- A venv stack whose Python is not on the machine fails with a message naming the
  version it needs.
- Every hash of the chosen version's files for the target goes on its line (a
  manylinux and a pure wheel of the same version), not a Windows-only file.
- The knowledge base's setuptools<82 cap for TensorBoard before 2.21 is applied,
  and a cap on TensorFlow's version (numpy<2) when TF is pinned as tensorflow-gpu.

STAND-INS: the conda "python" package is a wrapper around a real CPython 3.10
binary found on this machine (pyenv's, as on the team's machines; the test is
skipped, saying so, where none exists); the wheels are tiny ones built here.
"""
import glob
import os
import subprocess

import pytest
import yaml

import lib_conda
from lib_http import HttpServer
from lib_provision import out
from lib_pyindex import Index, build_wheel

CUT_PATH = "/usr/bin:/bin"


def real_python(series):
    """A CPython binary of series ("3.10"; not a pyenv shim) with pip, or None."""
    cands = glob.glob(os.path.expanduser(f"~/.pyenv/versions/{series}.*/bin/python{series}"))
    cands += [f"/usr/local/bin/python{series}", f"/opt/python{series}/bin/python{series}"]
    want = "(%s)" % ", ".join(series.split("."))
    for c in cands:
        if os.path.isfile(c) and "shims" not in os.path.realpath(c):
            r = subprocess.run([c, "-I", "-c", "import sys, pip; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() == want:
                return c
    return None


def real_python310():
    """A CPython 3.10 binary (not a pyenv shim) with pip, or None."""
    return real_python("3.10")


def write_manifest(path, python_yaml, index, tf_sha, python="3.10"):
    path.write_text(
        "schema: 1\nstack:\n  name: cross\n  platform: linux-x86_64\n"
        f"versions:\n  tensorflow: 2.15.1\n  python: \"{python}\"\n"
        "driver:\n  policy: skip\n" + python_yaml +
        f"pip:\n  index_url: {index}\n  complete: false\n  requirements: |\n"
        f"    tensorflow==2.15.1 \\\n        --hash=sha256:{tf_sha}\n")
    return str(path)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheels")
    w = {
        "tensorflow": build_wheel(str(d), "tensorflow", "2.15.1", requires=["tfprov-alpha"]),
        "alpha": build_wheel(str(d), "tfprov-alpha", "1.0", requires=[
            'tfprov-old; python_version < "3.11"', 'tfprov-new; python_version >= "3.11"',
            "tfprov-multi"]),
        "old": build_wheel(str(d), "tfprov-old", "1.0"),
        "new": build_wheel(str(d), "tfprov-new", "1.0"),
        # One version, three files: two install on linux x86_64, one only on Windows.
        "multi-any": build_wheel(str(d), "tfprov-multi", "2.0"),
        "multi-linux": build_wheel(str(d), "tfprov-multi", "2.0",
                                   tag="py3-none-manylinux_2_17_x86_64"),
        "multi-win": build_wheel(str(d), "tfprov-multi", "2.0", tag="py3-none-win_amd64"),
        "multi-old": build_wheel(str(d), "tfprov-multi", "1.0"),
    }
    idx = Index(str(d))
    yield idx, w
    idx.close()


def lock_block(m):
    with open(m) as f:
        doc = yaml.safe_load(f)
    text = doc["pip"]["requirements"].replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        toks = line.split()
        if toks and not toks[0].startswith("#"):
            name, ver = toks[0].split("==")
            pins[name] = (ver, {t.split(":", 1)[1] for t in toks[1:]})
    return doc, pins


def test_conda_stack_locks_with_its_own_python(tfprov, tmp_path, index):
    idx, w = index
    py310 = real_python310()
    if py310 is None:
        pytest.skip("no real CPython 3.10 binary on this machine to package as the fixture "
                    "conda python")
    host = subprocess.run(["python3", "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                          capture_output=True, text=True, env={"PATH": CUT_PATH}).stdout.strip()
    assert host == "3.11", f"the machine's python3 under PATH={CUT_PATH} is {host}"
    pkgdir = tmp_path / "conda"
    wrapper = (f"#!/bin/sh\n# stand-in for conda-forge python 3.10: runs {py310}\n"
               f'exec {py310} "$@"\n')
    pkg = lib_conda.build_package(str(pkgdir), "python", "3.10.13", "0_fake", {
        "bin/python3.10": lib_conda.File(wrapper, 0o755),
        "bin/python": lib_conda.File(symlink="python3.10"),
    })
    with HttpServer(root=str(pkgdir)) as srv:
        lock = ("python:\n  manager: conda\n  name: cross\n  version: \"3.10\"\n  lock: |\n"
                "    @EXPLICIT\n"
                f"    {srv.url('/' + os.path.basename(pkg[0]))}#sha256:{pkg[1]}\n")
        m = write_manifest(tmp_path / "conda.yaml", lock, idx.url, w["tensorflow"][1])
        p = tfprov.run("lock", m, timeout=300, env={"PATH": CUT_PATH})
    assert p.returncode == 0, out(p)
    assert "installing the conda lock (1 packages)" in p.stdout, out(p)
    doc, pins = lock_block(m)
    assert doc["pip"]["complete"] is True
    # Resolved by the 3.10 interpreter: the < 3.11 branch of alpha's markers.
    assert "tfprov-old" in pins and "tfprov-new" not in pins, pins
    assert pins["tensorflow"] == ("2.15.1", {w["tensorflow"][1]})
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 0, out(p)


def test_venv_stack_without_its_python_names_it(tfprov, tmp_path, index):
    """The same stack as a venv: no python3.10 on the cut-down PATH, so lock fails
    (exit 6, file untouched) naming the Python it needs and the conda alternative."""
    idx, w = index
    m = write_manifest(tmp_path / "venv.yaml",
                       "python:\n  manager: venv\n  name: cross\n  version: \"3.10\"\n",
                       idx.url, w["tensorflow"][1])
    before = open(m).read()
    p = tfprov.run("lock", m, timeout=120, env={"PATH": CUT_PATH})
    assert p.returncode == 6, out(p)
    assert "needs a Python 3.10 here" in p.stderr and "manager: conda" in p.stderr, out(p)
    assert open(m).read() == before


def test_lock_records_every_hash_of_the_version(tfprov, tmp_path, index):
    """tfprov-multi 2.0 has a pure wheel and a manylinux wheel (both install here) and a
    Windows wheel: the lock line carries exactly the first two hashes."""
    idx, w = index
    py = subprocess.run(["/usr/bin/python3", "-c",
                         "import sys;print('%d.%d'%sys.version_info[:2])"],
                        capture_output=True, text=True).stdout.strip()
    m = tmp_path / "all.yaml"
    write_manifest(m, f"python:\n  manager: venv\n  name: all\n  version: \"{py}\"\n"
                   "  interpreter: /usr/bin/python3\n", idx.url, w["tensorflow"][1], python=py)
    p = tfprov.run("lock", m, timeout=300)
    assert p.returncode == 0, out(p)
    _, pins = lock_block(m)
    assert pins["tfprov-multi"] == ("2.0", {w["multi-any"][1], w["multi-linux"][1]}), pins
    assert pins["tfprov-new"] == ("1.0", {w["new"][1]})


def test_lock_caps_setuptools_for_old_tensorboard(tfprov, tmp_path):
    """The index offers setuptools 82.0.0 and 81.0.0; tensorboard 2.15.2 accepts both
    (setuptools>=41, as its metadata says). Lock picks 81.0.0 because of the knowledge
    base's cap, says so with the source, and the result passes lock --check."""
    d = tmp_path / "wheels"
    tf = build_wheel(str(d), "tensorflow", "2.15.1", requires=["tensorboard>=2.15,<2.16"])
    build_wheel(str(d), "tensorboard", "2.15.2", requires=["setuptools>=41.0.0"])
    build_wheel(str(d), "setuptools", "82.0.0")
    st81 = build_wheel(str(d), "setuptools", "81.0.0")
    idx = Index(str(d))
    try:
        m = write_manifest(tmp_path / "cap.yaml",
                           "python:\n  manager: venv\n  name: cap\n  version: \"3.11\"\n"
                           "  interpreter: /usr/bin/python3\n", idx.url, tf[1], python="3.11")
        p = tfprov.run("lock", m, timeout=300)
    finally:
        idx.close()
    assert p.returncode == 0, out(p)
    assert "setuptools 82.0.0 with tensorboard 2.15.2 breaks a cap" in p.stdout, out(p)
    assert "pypa/setuptools" in p.stdout
    _, pins = lock_block(m)
    assert pins["setuptools"] == ("81.0.0", {st81[1]}), pins
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 0, out(p)


def test_lock_caps_numpy_for_tensorflow_gpu(tfprov, tmp_path):
    """tensorflow-gpu 2.11.0 (the last real one on Linux; `tfprov init` also writes TF
    1.x as tensorflow-gpu) requires numpy with no upper bound; the index offers numpy
    2.0.0 and 1.26.4. The knowledge base's caps name TensorFlow (numpy<2 below TF
    2.18, h5py<3 below TF 2): lock reads tensorflow-gpu as that TensorFlow, says so
    with the source, and pins 1.26.4, so validate has no known-bad diagnostic.
    TF 2.11 wants Python <= 3.10: a real CPython 3.10 (pyenv's) resolves; skipped where
    none. (TF 1.15 itself cannot be locked here: Python 3.7's bundled pip 22.0.4 has no
    --dry-run.)"""
    py310 = real_python310()
    if py310 is None:
        pytest.skip("no CPython 3.10 with pip on this machine (TF 2.11 needs Python <= 3.10)")
    d = tmp_path / "wheels"
    tf = build_wheel(str(d), "tensorflow-gpu", "2.11.0", requires=["numpy>=1.20"])
    build_wheel(str(d), "numpy", "2.0.0")
    np1 = build_wheel(str(d), "numpy", "1.26.4")
    idx = Index(str(d))
    m = tmp_path / "gpu.yaml"
    try:
        m.write_text(
            "schema: 1\nstack:\n  name: gpu\n  platform: linux-x86_64\n"
            "versions:\n  tensorflow: 2.11.0\n  python: \"3.10\"\n"
            "driver:\n  policy: skip\n"
            "python:\n  manager: venv\n  name: gpu\n  version: \"3.10\"\n"
            f"  interpreter: {py310}\n"
            f"pip:\n  index_url: {idx.url}\n  complete: false\n  requirements: |\n"
            f"    tensorflow-gpu==2.11.0 \\\n        --hash=sha256:{tf[1]}\n")
        p = tfprov.run("lock", str(m), timeout=300)
    finally:
        idx.close()
    assert "numpy 2.0.0 with tensorflow 2.11.0 breaks a cap" in p.stdout, out(p)
    assert "tensorflow/tensorflow#102743" in p.stdout, out(p)
    assert "resolving again with numpy<2" in p.stdout, out(p)
    assert p.returncode == 0, out(p)
    _, pins = lock_block(str(m))
    assert pins["numpy"] == ("1.26.4", {np1[1]}), pins
    p = tfprov.run("validate", str(m), root=False)
    assert "compat.pip-known-bad" not in p.stderr, out(p)


def test_lock_takes_the_companion_line_made_for_the_tf(tfprov, tmp_path):
    """A project pinned beside TF 2.15.1 requires tensorflow-io with no bound (io's own
    TF requirement is an extra, so pip never sees it); the index offers 0.37.1 (built
    for TF 2.16) and 0.36.0 (for 2.15). pip picks 0.37.1; lock says why that is wrong
    (companion_packages of the knowledge base), resolves again with
    tensorflow-io==0.36.*, and the result validates and passes lock --check."""
    d = tmp_path / "wheels"
    tf = build_wheel(str(d), "tensorflow", "2.15.1")
    app = build_wheel(str(d), "tfprov-app", "1.0", requires=["tensorflow-io"])
    build_wheel(str(d), "tensorflow-io", "0.37.1")
    io36 = build_wheel(str(d), "tensorflow-io", "0.36.0")
    idx = Index(str(d))
    m = tmp_path / "io.yaml"
    try:
        write_manifest(m, "python:\n  manager: venv\n  name: io\n  version: \"3.11\"\n"
                       "  interpreter: /usr/bin/python3\n", idx.url, tf[1], python="3.11")
        m.write_text(m.read_text() + f"    tfprov-app==1.0 \\\n        --hash=sha256:{app[1]}\n")
        p = tfprov.run("lock", str(m), timeout=300)
    finally:
        idx.close()
    assert p.returncode == 0, out(p)
    assert "tensorflow-io 0.37.1 is not made for tensorflow 2.15.1" in p.stdout, out(p)
    assert "its release line is for tensorflow>=2.16,<2.17; source: " \
        "https://github.com/tensorflow/io/blob/" in p.stdout, out(p)
    assert "resolving again with tensorflow-io==0.36.*" in p.stdout, out(p)
    _, pins = lock_block(str(m))
    assert pins["tensorflow-io"] == ("0.36.0", {io36[1]}), pins
    p = tfprov.run("lock", "--check", str(m), root=False)
    assert p.returncode == 0, out(p)
    p = tfprov.run("validate", str(m), root=False)
    assert "compat.companion" not in p.stdout + p.stderr, out(p)

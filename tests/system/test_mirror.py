"""`tfprov mirror build DIR MANIFEST...`: an air-gapped bundle.

Scenario: an NVIDIA-layout origin (make_stack.py, redist form, stand-in
libraries) and a PEP 503 index of wheels built here, both on loopback. The
mirror is built from them; then the origin is stopped and a fresh root applies
with `--offline --mirror DIR`: every byte must come from DIR.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import Tfprov
from lib_http import HttpServer
from lib_pyindex import Index, build_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAKE_STACK = os.path.join(REPO, "tests", "fixtures", "make_stack.py")
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
STUBS = os.path.join(BUILD, "stubs", "cuda12")
PYVER = "%d.%d" % sys.version_info[:2]


def listing(d):
    out = {}
    for dp, _, fns in os.walk(d):
        for n in fns:
            p = os.path.join(dp, n)
            st = os.stat(p)
            out[os.path.relpath(p, d)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


@pytest.fixture
def origin(tmp_path):
    if not os.path.isdir(STUBS):
        pytest.skip("stub libraries not built (%s)" % STUBS)
    out = tmp_path / "origin"
    srv = HttpServer(root=str(out)).start()
    m = tmp_path / "stack.yaml"
    subprocess.run(["/usr/bin/python3", MAKE_STACK, "--stubs", STUBS, "--cuda", "12.3.2",
                    "--cudnn", "8.9.7.29", "--out", str(out), "--url-base", srv.url(""),
                    "--manifest", str(m), "--form", "redist", "--driver-policy", "skip"],
                   check=True, capture_output=True, timeout=120)
    yield {"srv": srv, "manifest": m, "out": out}
    srv.stop()


def test_mirror_build_then_offline_apply_from_it(origin, tfprov, tmp_path):
    d = tmp_path / "bundle"
    r = tfprov.run("mirror", "build", d, origin["manifest"], check=0)
    assert "11 files" in r.stdout  # 2 redist JSONs, 8 CUDA components, cuDNN
    index = json.loads((d / "index.json").read_text())["files"]
    kinds = sorted(f["kind"] for f in index)
    assert kinds.count("redist-json") == 2 and kinds.count("cudnn") == 1
    assert kinds.count("cuda") == 8
    for f in index:
        p = d / "sha256" / f["sha256"]
        assert p.is_file() and p.stat().st_size == f["size"]
        assert (d / f["file"]).read_bytes() == p.read_bytes()
        assert f["url"].startswith(origin["srv"].url("/"))

    # A second run copies nothing and leaves DIR as it was.
    before = listing(d)
    r = tfprov.run("mirror", "build", d, origin["manifest"], check=0)
    assert "nothing copied" in r.stdout
    assert listing(d) == before

    # The origin goes away; a fresh machine installs from the bundle alone.
    origin["srv"].stop()
    n_requests = len(origin["srv"].requests)
    fresh = Tfprov(tmp_path / "fresh")
    os.makedirs(fresh.root)
    fresh.run("--offline", "--mirror", d, "--no-gpu", "apply", "-y", origin["manifest"],
              check=0)
    assert os.path.exists(fresh.path("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))
    assert len(origin["srv"].requests) == n_requests


def test_mirror_build_offline_from_cache(origin, tfprov, tmp_path):
    tfprov.run("mirror", "build", tmp_path / "a", origin["manifest"], check=0)
    origin["srv"].stop()
    r = tfprov.run("--offline", "mirror", "build", tmp_path / "b", origin["manifest"], check=0)
    assert "11 files" in r.stdout
    assert sorted(os.listdir(tmp_path / "b" / "sha256")) == sorted(
        os.listdir(tmp_path / "a" / "sha256"))
    # Nothing cached, offline: it says what is missing.
    other = Tfprov(tmp_path / "other")
    os.makedirs(other.root)
    r = other.run("--offline", "mirror", "build", tmp_path / "c", origin["manifest"], check=1)
    assert "--offline" in r.stderr and "redistrib" in r.stderr


def test_mirror_usage(tfprov, tmp_path):
    tfprov.run("mirror", "pack", tmp_path, check=64)
    tfprov.run("mirror", "build", tmp_path, check=64)


PIP_MANIFEST = """\
schema: 1
stack:
  name: wheels
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
  python: "{py}"
driver:
  policy: skip
python:
  manager: venv
  version: "{py}"
pip:
  index_url: {index}
  complete: true
  requirements: |
    tensorflow==2.15.1 --hash=sha256:{tf}
    alpha==1.0 --hash=sha256:{alpha}
bench:
  enabled: false
"""


def test_mirror_pip_wheels_then_offline_install(tfprov, tmp_path):
    wheels = tmp_path / "wheels"
    tf = build_wheel(str(wheels), "tensorflow", "2.15.1", requires=["alpha"])
    alpha = build_wheel(str(wheels), "alpha", "1.0")
    build_wheel(str(wheels), "alpha", "2.0")
    idx = Index(str(wheels))
    try:
        m = tmp_path / "pip.yaml"
        m.write_text(PIP_MANIFEST.format(py=PYVER, index=idx.url, tf=tf[1], alpha=alpha[1]))
        d = tmp_path / "bundle"
        tfprov.run("mirror", "build", d, m, timeout=240, check=0)
        for path, sha in (tf, alpha):
            name = os.path.basename(path)
            assert (d / name).read_bytes() == open(path, "rb").read()
            assert (d / "sha256" / sha).is_file()
        assert "alpha-2.0-py3-none-any.whl" not in os.listdir(d)
        # Idempotent without asking pip again.
        n = len(idx.requests)
        r = tfprov.run("mirror", "build", d, m, timeout=240, check=0)
        assert "nothing copied" in r.stdout and len(idx.requests) == n
    finally:
        idx.close()
    fresh = Tfprov(tmp_path / "fresh")
    os.makedirs(fresh.root)
    fresh.run("--offline", "--mirror", d, "--no-gpu", "apply", "-y", m, timeout=300, check=0)

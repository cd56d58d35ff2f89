"""`tfprov lock`: redist JSONs become inline artifacts; partial pip pins become
the full closure through pip's own resolver.

Scenario: an NVIDIA-layout mirror built by tests/fixtures/make_stack.py (stand-in
libraries, real layout and redist JSONs) served on loopback; a PEP 503 index of
wheels built here (tensorflow -> a -> b -> c). The real binary, a --root
sandbox per test, real venv and pip.
"""
import hashlib
import os
import re
import subprocess
import sys

import pytest
import yaml

from lib_http import HttpServer, dead_url
from lib_pyindex import Index, build_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAKE_STACK = os.path.join(REPO, "tests", "fixtures", "make_stack.py")
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
STUBS = os.path.join(BUILD, "stubs", "cuda12")
PYVER = "%d.%d" % sys.version_info[:2]

COMMENTED = "# reviewer: CUDA pinned for the 2.15 line\ncuda:  # do not bump without a ticket\n"


def make_stack(out, url, manifest, form):
    subprocess.run(["/usr/bin/python3", MAKE_STACK, "--stubs", STUBS, "--cuda", "12.3.2",
                    "--cudnn", "8.9.7.29", "--out", str(out), "--url-base", url,
                    "--manifest", str(manifest), "--form", form, "--driver-policy", "skip"],
                   check=True, capture_output=True, timeout=120)


def artifacts(doc):
    cuda = [(a["name"], a["url"], a["sha256"], a["size"], a["strip"])
            for a in doc["cuda"]["artifacts"]]
    a = doc["cudnn"]["artifact"]
    return cuda, (a["url"], a["sha256"], a["size"], a["strip"])


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if not os.path.isdir(STUBS):
        pytest.skip("stub libraries not built (%s)" % STUBS)
    base = tmp_path_factory.mktemp("lock")
    out = base / "mirror"
    with HttpServer(root=str(out)) as srv:
        url = srv.url("")
        make_stack(out, url, base / "inline.yaml", "inline")
        make_stack(out, url, base / "redist.yaml", "redist")
        text = (base / "redist.yaml").read_text()
        assert "cuda:\n" in text
        (base / "redist.yaml").write_text(text.replace("cuda:\n", COMMENTED, 1) +
                                          "# trailing note kept by lock\n")
        yield {"base": base, "srv": srv, "inline": base / "inline.yaml",
               "redist": base / "redist.yaml"}


def copy(src, dst):
    dst.write_bytes(src.read_bytes())
    return dst


def test_lock_redist_matches_inline_form_and_keeps_comments(stack, tfprov, tmp_path):
    m = copy(stack["redist"], tmp_path / "stack.yaml")
    before = m.read_text()
    r = tfprov.run("lock", m, check=0)
    assert "locked cuda: 8 components" in r.stdout
    after = m.read_text()
    # Comments and the untouched sections survive byte for byte.
    assert COMMENTED in after
    assert after.endswith("# trailing note kept by lock\n")
    assert after.split("cuda:")[0] == before.split("cuda:")[0]
    assert after.split("\nenv:")[1] == before.split("\nenv:")[1]
    assert "redist:" not in after
    assert "redistrib_12.3.2.json" in after and "redistrib_8.9.7.29.json" in after  # provenance
    got = artifacts(yaml.safe_load(after))
    want = artifacts(yaml.safe_load(stack["inline"].read_text()))
    assert got == want
    # The result validates and applies (stand-in libraries, no GPU).
    tfprov.run("validate", m, check=0)
    tfprov.run("--no-gpu", "apply", "-y", m, check=0)
    assert os.path.exists(tfprov.path("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))
    # A locked file is already a full lockfile.
    r = tfprov.run("lock", m, check=0)
    assert "nothing to do" in r.stdout
    assert m.read_text() == after


def test_lock_to_stdout_and_output_file(stack, tfprov, tmp_path):
    m = copy(stack["redist"], tmp_path / "stack.yaml")
    before = m.read_bytes()
    r = tfprov.run("lock", m, "-o", "-", check=0)
    assert artifacts(yaml.safe_load(r.stdout)) == artifacts(
        yaml.safe_load(stack["inline"].read_text()))
    out = tmp_path / "locked.yaml"
    tfprov.run("lock", m, "-o", out, check=0)
    assert out.read_text() == r.stdout
    assert m.read_bytes() == before


def test_lock_wrong_redist_hash_is_integrity_failure(stack, tfprov, tmp_path):
    m = tmp_path / "stack.yaml"
    text = stack["redist"].read_text()
    sha = re.search(r"redistrib_12\.3\.2\.json\n    sha256: ([0-9a-f]{64})", text).group(1)
    m.write_text(text.replace(sha, hashlib.sha256(b"not it").hexdigest()))
    before = m.read_bytes()
    r = tfprov.run("lock", m, check=5)
    assert "sha256 mismatch" in r.stderr
    assert "untouched" in r.stderr
    assert m.read_bytes() == before
    assert [p for p in os.listdir(tmp_path) if "tfprov-lock" in p] == []


def test_lock_offline_names_what_is_missing(stack, tfprov, tmp_path):
    m = copy(stack["redist"], tmp_path / "stack.yaml")
    before = m.read_bytes()
    r = tfprov.run("--offline", "lock", m, check=1)
    assert "redistrib JSON" in r.stderr and "--offline" in r.stderr
    assert "untouched" in r.stderr
    assert m.read_bytes() == before


# --- pip -------------------------------------------------------------------

PIP_MANIFEST = """\
# A partial pin set: TF and nothing else; lock completes it.
schema: 1
stack:
  name: piplock
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
  index_url: {index}   # the team's index
  complete: false
  requirements: |
    # direct pins, reviewed
    tensorflow==2.15.1 \\
        --hash=sha256:{tf}
missing:
  - "pip: the transitive closure of tensorflow (run tfprov lock)"
bench:
  enabled: false
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    wheels = tmp_path_factory.mktemp("wheels")
    w = {
        "tensorflow": build_wheel(str(wheels), "tensorflow", "2.15.1", requires=["alpha>=1"]),
        "alpha": build_wheel(str(wheels), "alpha", "1.0", requires=["beta"]),
        "beta": build_wheel(str(wheels), "beta", "2.0", requires=["gamma<2"]),
        "gamma": build_wheel(str(wheels), "gamma", "1.5"),
        "gamma2": build_wheel(str(wheels), "gamma", "2.0"),
    }
    idx = Index(str(wheels))
    yield idx, w
    idx.close()


def pip_manifest(path, index_url, tf_hash):
    path.write_text(PIP_MANIFEST.format(py=PYVER, index=index_url, tf=tf_hash))
    return path


def test_lock_completes_pip_closure_with_pips_resolver(index, tfprov, tmp_path):
    idx, w = index
    m = pip_manifest(tmp_path / "pip.yaml", idx.url, w["tensorflow"][1])
    before = m.read_text()
    r = tfprov.run("lock", m, timeout=240, check=0)
    after = m.read_text()
    doc = yaml.safe_load(after)
    assert doc["pip"]["complete"] is True
    req = doc["pip"]["requirements"]
    for name, ver, key in [("alpha", "1.0", "alpha"), ("beta", "2.0", "beta"),
                           ("gamma", "1.5", "gamma"), ("tensorflow", "2.15.1", "tensorflow")]:
        assert f"{name}=={ver} \\\n    --hash=sha256:{w[key][1]}" in req, req
    assert "gamma==2.0" not in req  # beta wants gamma<2: pip's resolver, not ours
    # Everything outside the pip block is as it was, comments included.
    assert after.split("pip:")[0] == before.split("pip:")[0]
    assert "index_url: " + idx.url + "   # the team's index" in after
    assert after.split("missing:")[1] == before.split("missing:")[1]
    # The declared gap is kept, and reported as closed.
    assert "gap closed by this lock" in r.stdout
    assert "pip: the transitive closure" in after
    tfprov.run("validate", m, check=0)
    # Each pin's own Requires-Dist, from its wheel's METADATA through pip's report,
    # is recorded for the static check of the whole lock.
    assert doc["pip"]["requires"] == {"tensorflow": ["alpha>=1"], "alpha": ["beta"],
                                      "beta": ["gamma<2"], "gamma": []}, after
    tfprov.run("lock", "--check", m, check=0)
    # The check reads what was recorded: a requirement the lock does not meet is
    # named at the requiring package's line.
    bad = tmp_path / "bad.yaml"
    bad.write_text(after.replace("- 'gamma<2'", "- 'gamma<1.5'"))
    p = tfprov.run("validate", bad, check=3)
    line = [i + 1 for i, l in enumerate(after.splitlines()) if l.strip().startswith("beta==")][0]
    assert f"{bad}:{line}:5: error: beta 2.0 requires gamma<1.5, but the lock pins gamma 1.5" \
        in p.stdout + p.stderr, p.stdout + p.stderr


def test_lock_pip_hash_not_matching_pins_is_integrity_failure(index, tfprov, tmp_path):
    idx, w = index
    m = pip_manifest(tmp_path / "pip.yaml", idx.url, hashlib.sha256(b"x").hexdigest())
    before = m.read_bytes()
    r = tfprov.run("lock", m, timeout=240, check=5)
    assert "tensorflow" in r.stderr and "not among the manifest's pinned hashes" in r.stderr
    assert m.read_bytes() == before


def test_lock_pip_without_network_fails_cleanly(index, tfprov, tmp_path):
    idx, w = index
    m = pip_manifest(tmp_path / "pip.yaml", dead_url("/simple/"), w["tensorflow"][1])
    before = m.read_bytes()
    r = tfprov.run("lock", m, timeout=240, check=1)
    assert "not resolved: tensorflow==2.15.1" in r.stderr
    assert "untouched" in r.stderr
    assert m.read_bytes() == before
    r = tfprov.run("--offline", "lock", m, timeout=60, check=1)
    assert "offline" in r.stderr and "not resolved: tensorflow==2.15.1" in r.stderr
    assert m.read_bytes() == before


def _renamed_wheel(outdir, file_name, file_version, meta_name, meta_version, requires=()):
    """A wheel whose file name and .dist-info directory say FILE_NAME-FILE_VERSION but
    whose METADATA says META_NAME META_VERSION; returns (path, sha256)."""
    import zipfile
    di = "%s-%s.dist-info" % (file_name, file_version)
    meta = ["Metadata-Version: 2.1", "Name: " + meta_name, "Version: " + meta_version]
    meta += ["Requires-Dist: " + r for r in requires]
    content = {file_name + "/__init__.py": "",
               di + "/METADATA": "\n".join(meta) + "\n",
               di + "/WHEEL": "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    dst = os.path.join(outdir, "%s-%s-py3-none-any.whl" % (file_name, file_version))
    record = []
    with zipfile.ZipFile(dst, "w") as z:
        for name, text in content.items():
            b = text.encode()
            z.writestr(name, b)
            d = hashlib.sha256(b).digest()
            import base64
            record.append("%s,sha256=%s,%d" % (
                name, base64.urlsafe_b64encode(d).rstrip(b"=").decode(), len(b)))
        z.writestr(di + "/RECORD", "\n".join(record + [di + "/RECORD,,"]) + "\n")
    return dst, hashlib.sha256(open(dst, "rb").read()).hexdigest()


@pytest.mark.parametrize("which", ["requested", "transitive", "version"])
def test_lock_refuses_a_file_whose_metadata_names_another_project(tfprov, tmp_path, which):
    """pip's report trusts the METADATA inside a file; lock checks it against the
    requirement the file was fetched for (its file name on that project's index page):
    a tensorflow wheel that says `Name: requests`, a dependency alpha that says it is
    beta, or a version that differs, is refused naming the file, the requirement and
    the metadata, and the manifest is left as it was."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    if which == "requested":
        _, tf = _renamed_wheel(str(wheels), "tensorflow", "2.15.1", "requests", "2.15.1")
        bad, want, got = "tensorflow-2.15.1-py3-none-any.whl", "tensorflow 2.15.1", \
            "requests 2.15.1"
    else:
        _, tf = build_wheel(str(wheels), "tensorflow", "2.15.1", requires=["alpha>=1"])
        if which == "transitive":
            _renamed_wheel(str(wheels), "alpha", "1.0", "beta", "1.0")
            bad, want, got = "alpha-1.0-py3-none-any.whl", "alpha 1.0", "beta 1.0"
        else:
            _renamed_wheel(str(wheels), "alpha", "1.0", "alpha", "1.1")
            bad = None  # pip's resolver itself discards a file whose version differs
    idx = Index(str(wheels))
    try:
        m = pip_manifest(tmp_path / "pip.yaml", idx.url, tf)
        before = m.read_bytes()
        r = tfprov.run("lock", m, timeout=240)
    finally:
        idx.close()
    assert m.read_bytes() == before
    if bad is None:
        assert r.returncode == 1 and "alpha>=1: no matching distribution" in r.stderr, r.stderr
        return
    assert r.returncode == 5, r.stdout + r.stderr
    assert bad in r.stderr and want in r.stderr and got in r.stderr, r.stderr


def test_lock_names_every_redirect_of_an_index_page(tfprov, tmp_path):
    """The index answers each project page with a redirect to another host name:
    lock prints each chain with the host that served it and keeps it as comments of
    the requirements block (validate and lock --check still pass)."""
    wheels = tmp_path / "wheels"
    _, tf = build_wheel(str(wheels), "tensorflow", "2.15.1", requires=["alpha>=1"])
    build_wheel(str(wheels), "alpha", "1.0")
    idx = Index(str(wheels), moved=True)
    try:
        m = pip_manifest(tmp_path / "pip.yaml", idx.url, tf)
        r = tfprov.run("lock", m, timeout=240, check=0)
    finally:
        idx.close()
    port = idx.url.split(":")[2].split("/")[0]
    for name in ("tensorflow", "alpha"):
        hops = "%s%s/ -> http://localhost:%s/moved/simple/%s/ (served by host localhost:%s)" % (
            idx.url, name, port, name, port)
        assert "index page redirected: " + hops in r.stderr, r.stderr
        assert "# index page redirected: " + hops in m.read_text(), m.read_text()
    tfprov.run("lock", "--check", m, check=0)


def test_lock_writes_min_glibc_and_requires_python(tfprov, tmp_path):
    """lock writes pip.min_glibc from the files it locked (per distribution the
    lowest manylinux floor among its files, a pure-Python file needing none; the
    highest over the lock) and each pin's Requires-Python from its METADATA;
    validate and lock --check judge the latter against the stack's Python at the
    pin's line."""
    wheels = tmp_path / "wheels"
    _, tf = build_wheel(str(wheels), "tensorflow", "2.15.1", requires=["alpha", "beta"],
                        tag="py3-none-manylinux_2_17_x86_64",
                        metadata=["Requires-Python: >=3.8, !=3.0.*"])
    build_wheel(str(wheels), "alpha", "1.0", tag="py3-none-manylinux_2_24_x86_64",
                metadata=["Requires-Python: >=3"])
    build_wheel(str(wheels), "alpha", "1.0", tag="py3-none-manylinux_2_28_x86_64",
                metadata=["Requires-Python: >=3"])
    build_wheel(str(wheels), "beta", "2.0", tag="py3-none-manylinux_2_31_x86_64")
    build_wheel(str(wheels), "beta", "2.0")  # pure Python: beta needs no glibc
    idx = Index(str(wheels))
    try:
        m = pip_manifest(tmp_path / "pip.yaml", idx.url, tf)
        tfprov.run("lock", m, timeout=240, check=0)
    finally:
        idx.close()
    text = m.read_text()
    doc = yaml.safe_load(text)
    assert doc["pip"]["min_glibc"] == "2.24", text  # alpha's lowest; beta has a pure file
    assert doc["pip"]["requires_python"] == {"tensorflow": ">=3.8, !=3.0.*",
                                             "alpha": ">=3"}, text
    assert len(re.findall(r"--hash=sha256:", text.split("alpha==")[1].split("beta==")[0])) == 2
    tfprov.run("validate", m, check=0)
    tfprov.run("lock", "--check", m, check=0)
    # A Requires-Python the stack's Python does not meet: an error at the pin's line.
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("tensorflow: '>=3.8, !=3.0.*'", "tensorflow: '>=3.8,<%s'" % PYVER))
    line = [i + 1 for i, l in enumerate(text.splitlines())
            if l.strip().startswith("tensorflow==")][0]
    want = (f"{bad}:{line}:5: error: tensorflow 2.15.1 requires Python >=3.8,<{PYVER}, but the "
            f"stack's Python is {PYVER} (no {PYVER}.z release meets it) "
            "[compat.pip-requires-python]")
    for cmd in (("validate", bad), ("lock", "--check", bad)):
        p = tfprov.run(*cmd, check=3)
        assert want in p.stdout + p.stderr, p.stdout + p.stderr
    # One that is not PEP 440 cannot be judged: a warning at its value, nothing refused.
    odd = tmp_path / "odd.yaml"
    odd.write_text(text.replace("alpha: '>=3'", "alpha: '>=3.x'"))
    p = tfprov.run("validate", odd, check=0)
    assert "warning: alpha's Requires-Python '>=3.x' cannot be judged" in p.stdout + p.stderr

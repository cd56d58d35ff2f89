"""Complete pip locks only: apply and plan refuse a `complete: false` pip section
before any step changes anything (exit 3, file:line and the command that
completes it); --allow-incomplete-lock lets pip resolve the rest, names what it
installed without a pinned hash and records it in the state.

Real parts: a real venv (Debian's /usr/bin/python3) and real pip against a
loopback PEP 503 index of tiny wheels built here (lib_pyindex). No GPU is
involved (driver.policy: skip).
"""
import hashlib
import json
import os
import re
import shutil
import subprocess

import pytest

import lib_pyindex
from lib_http import HttpServer
from lib_provision import db_rows, no_stub_env, out, tree_hashes
from test_python_env import ENV_PREFIX, manifest, pip_yaml, venv_yaml


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheels")
    pins = {}
    # alpha depends on beta: an incomplete lock pins alpha only.
    for name, ver, req in (("tfprov-alpha", "1.0.0", ["tfprov-beta>=2"]),
                           ("tfprov-beta", "2.1.0", []), ("tfprov-gamma", "0.3.0", [])):
        _, sha = lib_pyindex.build_wheel(str(d), name, ver, requires=req)
        pins[name] = (name, ver, sha)
    idx = lib_pyindex.Index(str(d))
    idx.pins = pins
    yield idx
    idx.close()


LOCKFILE = ("var/lib/tfprov/lock",)


def env_yaml(value):
    return f"env:\n  vars:\n    TFPROV_TEST_MARK: \"{value}\"\n"


def test_incomplete_lock_refused_root_byte_identical(tfprov, index, tmp_path):
    """A first apply (complete lock) leaves a stack and a state; then the same stack
    with a changed env var and `complete: false`: plan shows the blocker, apply exits 3
    naming FILE:LINE and `tfprov lock FILE`, and every file under the root, state.db
    included, is byte-identical afterwards (the env step that comes first did not run)."""
    g = index.pins["tfprov-gamma"]
    m1 = manifest(tmp_path / "a.yaml", venv_yaml() + env_yaml("one"), pip_yaml(index.url, [g]))
    tfprov.run("apply", "-y", m1, env=no_stub_env(), timeout=300, check=0)
    # The writer-lock file holds the pid of the last writer (every run that takes the
    # lock rewrites it); everything else, state.db included, is compared.
    before = tree_hashes(tfprov.root, exclude=LOCKFILE)
    assert "var/lib/tfprov/state.db" in before

    a = index.pins["tfprov-alpha"]
    m2 = manifest(tmp_path / "b.yaml", venv_yaml() + env_yaml("two"),
                  pip_yaml(index.url, [a], complete=False))
    line = next(i for i, l in enumerate(open(m2).read().splitlines(), 1)
                if l.strip() == "complete: false")
    n0 = len(index.requests)

    p = tfprov.run("plan", m2, env=no_stub_env())
    assert p.returncode == 3, out(p)  # plan fails as apply would (README, exit codes)
    assert "apply would stop here, before any change (exit 3)" in out(p), out(p)
    assert f"{m2}:{line}:" in out(p), out(p)

    p = tfprov.run("apply", "-y", m2, env=no_stub_env(), timeout=300)
    assert p.returncode == 3, out(p)
    assert f"{m2}:{line}:" in out(p), out(p)
    assert f"tfprov lock {m2}" in out(p), out(p)
    assert "--allow-incomplete-lock" in out(p), out(p)
    assert tree_hashes(tfprov.root, exclude=LOCKFILE) == before
    assert len(index.requests) == n0, "pip ran against the index"


def test_allow_incomplete_lock_names_and_records_unhashed(tfprov, index, tmp_path):
    """With --allow-incomplete-lock pip resolves alpha's dependency beta: the output
    names tfprov-beta==2.1.0 as installed without a pinned hash, and the pip resource's
    state record lists it under `unhashed` (and not the pinned alpha)."""
    a = index.pins["tfprov-alpha"]
    m = manifest(tmp_path / "c.yaml", venv_yaml(), pip_yaml(index.url, [a], complete=False))
    p = tfprov.run("apply", "-y", "--allow-incomplete-lock", m, env=no_stub_env(), timeout=300)
    assert p.returncode == 0, out(p)
    assert re.search(r"1 package installed without a pinned hash: tfprov-beta==2\.1\.0", out(p)), \
        out(p)
    rows = db_rows(tfprov, "SELECT attrs FROM resources WHERE kind = 'pip'")
    assert len(rows) == 1
    attrs = json.loads(rows[0][0])
    assert attrs["unhashed"] == ["tfprov-beta==2.1.0"]
    inst = {d["name"]: d for d in attrs["installed"]}
    assert inst["tfprov-alpha"]["sha256"] == a[2]
    assert "sha256" not in inst["tfprov-beta"]


def test_complete_lock_applies_without_flag(tfprov, index, tmp_path):
    """The same pins as a complete lock (alpha and beta with hashes) need no flag and
    record nothing as unhashed; a second apply says No changes."""
    pins = [index.pins["tfprov-alpha"], index.pins["tfprov-beta"]]
    m = manifest(tmp_path / "d.yaml", venv_yaml(), pip_yaml(index.url, pins))
    p = tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300)
    assert p.returncode == 0, out(p)
    attrs = json.loads(db_rows(tfprov, "SELECT attrs FROM resources WHERE kind = 'pip'")[0][0])
    assert "unhashed" not in attrs
    assert sorted(d["name"] for d in attrs["installed"] if "sha256" in d) == \
        ["tfprov-alpha", "tfprov-beta"]
    p2 = tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300)
    assert p2.returncode == 0 and "No changes" in p2.stdout, out(p2)


# ------------------------------------------------ a shipped-style lock through a mirror

DEBIAN_WHEELS = "/usr/share/python-wheels"  # python3-setuptools-whl, python3-wheel-whl


def debian_wheel(name):
    """The real setuptools/wheel wheel Debian ships (scripts/install-deps.sh installs it)."""
    hits = [f for f in os.listdir(DEBIAN_WHEELS) if f.startswith(name + "-")]
    assert len(hits) == 1, f"{DEBIAN_WHEELS}: want one {name} wheel, have {hits}"
    path = os.path.join(DEBIAN_WHEELS, hits[0])
    with open(path, "rb") as f:
        return hits[0], hashlib.sha256(f.read()).hexdigest()


def test_complete_lock_with_sdist_through_mirror_pep503(tfprov, tmp_path):
    """A shipped-style complete lock (a TF-like package, its dependency, an sdist-only
    package depending on a third wheel, and real setuptools and wheel, as in
    stable-2.9) from an origin index; `mirror build` copies it all and writes PEP 503
    pages; the origin is stopped; apply through `--mirror http://loopback/DIR/` builds
    the sdist offline (--no-build-isolation) and installs every pin; a second apply
    says No changes and asks the mirror for nothing."""
    origin_dir = tmp_path / "origin"
    tf = lib_pyindex.build_wheel(str(origin_dir), "tfprov-tf", "2.15.1",
                                 requires=["tfprov-dep>=1"])
    dep = lib_pyindex.build_wheel(str(origin_dir), "tfprov-dep", "1.2.0")
    lib_pyindex.build_wheel(str(origin_dir), "tfprov-dep", "9.9.9")  # never chosen
    sd = lib_pyindex.build_sdist(str(origin_dir), "tfprovsd", "1.1.0", requires=["tfprov-leaf"])
    leaf = lib_pyindex.build_wheel(str(origin_dir), "tfprov-leaf", "0.1.0")
    backends = {}
    for n in ("setuptools", "wheel"):
        fname, sha = debian_wheel(n)
        shutil.copy(os.path.join(DEBIAN_WHEELS, fname), origin_dir / fname)
        backends[n] = (n, fname.split("-")[1], sha)
    pins = [("tfprov-tf", "2.15.1", tf[1]), ("tfprov-dep", "1.2.0", dep[1]),
            ("tfprovsd", "1.1.0", sd[1]), ("tfprov-leaf", "0.1.0", leaf[1]),
            backends["setuptools"], backends["wheel"]]
    origin = lib_pyindex.Index(str(origin_dir))
    # Debian's setuptools wheel carries Debian's install-layout patch: the venv is
    # made with Debian's own interpreter, which that setuptools is built for.
    m = manifest(tmp_path / "shipped.yaml", venv_yaml(interpreter="/usr/bin/python3"),
                 pip_yaml(origin.url, pins))
    bundle = tmp_path / "bundle"
    try:
        r = tfprov.run("mirror", "build", bundle, m, timeout=300)
        assert r.returncode == 0, out(r)
    finally:
        origin.close()
    # PEP 503 pages: one per project, each link to the file with its sha256.
    simple = bundle / "simple"
    top = (simple / "index.html").read_text()
    for name, ver, sha in pins:
        proj = lib_pyindex.normalize(name)
        assert f'href="{proj}/"' in top, top
        page = (simple / proj / "index.html").read_text()
        links = re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page)
        assert len(links) == 1 and links[0][1] == sha, page
        target = (simple / proj / links[0][0]).resolve()
        assert hashlib.sha256(target.read_bytes()).hexdigest() == sha
    assert "9.9.9" not in (simple / "tfprov-dep" / "index.html").read_text()

    with HttpServer(root=str(bundle)) as srv:
        p = tfprov.run("--mirror", srv.url("/"), "apply", "-y", m, env=no_stub_env(),
                       timeout=600)
        assert p.returncode == 0, out(p)
        env_py = tfprov.path(ENV_PREFIX + "/bin/python")
        r = subprocess.run([env_py, "-c", "import tfprovsd, tfprov_tf, tfprov_dep, tfprov_leaf;"
                            "print(tfprovsd.__version__)"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "1.1.0", r.stderr
        attrs = json.loads(db_rows(tfprov, "SELECT attrs FROM resources WHERE kind = 'pip'")[0][0])
        got = {d["name"]: d.get("sha256") for d in attrs["installed"]}
        for name, ver, sha in pins:
            assert got[lib_pyindex.normalize(name)] == sha, (name, got)
        assert any(path.startswith("/simple/tfprovsd/") for _, path, _, _ in srv.requests)
        # No isolated build env: setuptools' page was read once, for the pinned wheel
        # installed first; a build with isolation would have asked for it again.
        assert srv.count("/simple/setuptools/") == 1, srv.requests
        n = len(srv.requests)
        p2 = tfprov.run("--mirror", srv.url("/"), "apply", "-y", m, env=no_stub_env(),
                        timeout=300)
        assert p2.returncode == 0 and "No changes" in p2.stdout, out(p2)
        assert len(srv.requests) == n


def test_plan_says_what_is_resolved_at_apply(tfprov, tmp_path):
    """Higher-level forms are named at plan with the pinned document they resolve from:
    a cuda.redist reference (the JSON's URL and sha256, and its components), a
    cudnn.redist reference (URL, sha256, variant) and an incomplete pip lock (pip
    resolves the rest at apply, unhashed; a blocker)."""
    sha = hashlib.sha256(b"redistrib").hexdigest()
    dsha = hashlib.sha256(b"cudnn-redistrib").hexdigest()
    pin = hashlib.sha256(b"tf").hexdigest()
    m = tmp_path / "redist.yaml"
    # Every component whose libraries TF 2.15's CUDA 12 loads (compat.cuda-libs-missing).
    COMPONENTS = ("cuda_cudart, libcublas, libcufft, libcurand, libcusolver, libcusparse, "
                  "libnvjitlink")
    m.write_text(
        "schema: 1\nstack:\n  name: r\n  platform: linux-x86_64\n"
        "versions:\n  tensorflow: 2.15.1\n  cuda: 12.3.2\n  python: \"3.11\"\n"
        "driver:\n  policy: skip\n"
        "cuda:\n  version: 12.3.2\n  redist:\n"
        "    url: https://x.invalid/redistrib_12.3.2.json\n"
        f"    sha256: {sha}\n    size: 100\n    components: [{COMPONENTS}]\n"
        "cudnn:\n  version: 8.9.7.29\n  placement: merge\n  redist:\n"
        "    url: https://x.invalid/redistrib_8.9.7.29.json\n"
        f"    sha256: {dsha}\n    size: 100\n    variant: cuda12\n"
        "python:\n  manager: venv\n  name: r\n  interpreter: /usr/bin/python3\n"
        "pip:\n  complete: false\n  requirements: |\n"
        f"    tensorflow==2.15.1 --hash=sha256:{pin}\n")
    p = tfprov.run("plan", str(m), env=no_stub_env())
    assert p.returncode == 3, out(p)  # the pip blocker: plan fails as apply would
    assert (f"https://x.invalid/redistrib_12.3.2.json (sha256 {sha[:12]}...), then the "
            "archives it pins, resolved at apply: " + COMPONENTS) in p.stdout, out(p)
    assert (f"https://x.invalid/redistrib_8.9.7.29.json (sha256 {dsha[:12]}...), then the "
            "archive it pins for variant cuda12, resolved at apply") in p.stdout, out(p)
    assert "incomplete lock: the rest is resolved at apply by pip, unhashed" in p.stdout
    assert "apply would stop here, before any change (exit 3)" in p.stdout

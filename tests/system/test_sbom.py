"""`tfprov sbom`: a stack's CycloneDX 1.6 bill of materials, from the state.

Scenario: two applied roots, each made once per module. The demo stack is
CUDA 12.3.2 + cuDNN 8.9.7 from redist JSONs (make_stack.py, served on
loopback) with a venv and three wheels (lib_pyindex) whose METADATA give a
License-Expression, a License and only a classifier, and a lock recording
pip.requires. The conda stack is lib_conda's demo env plus a package whose
index.json has no license. What must hold: each document validates against
the official schema (tests/fixtures/cyclonedx, offline); every artifact the
state records is a component with the sha256 of the bytes served; licenses
are the recorded ones or said unknown; the lock's edges are dependencies;
two runs give the same bytes under SOURCE_DATE_EPOCH; bad input is refused
with its exit code.

STAND-INS: the NVIDIA archives hold stub libraries (no GPU: --no-gpu,
driver.policy: skip); the wheels and conda packages are built here. Runs in
about 25 s, most of it the venv's ensurepip.
"""
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import urllib.parse

import pytest

import lib_conda
import lib_cyclonedx
import lib_pyindex
from conftest import Tfprov
from lib_http import HttpServer
from lib_provision import Mirror, no_stub_env, out

PYVER = subprocess.run(["/usr/bin/python3", "-c",
                        "import sys;print('%d.%d'%sys.version_info[:2])"],
                       capture_output=True, text=True, check=True).stdout.strip()
EPOCH = {"SOURCE_DATE_EPOCH": "1700000000"}
WHEELS = (  # name, version, requires, METADATA lines, the licenses the SBOM must carry
    ("tfprov-alpha", "1.0.0", ("tfprov-beta>=2",), ("License-Expression: Apache-2.0",),
     [{"expression": "Apache-2.0"}]),
    ("tfprov-beta", "2.1.0", (), ("License: BSD-3-Clause",),
     [{"license": {"name": "BSD-3-Clause"}}]),
    ("tfprov-gamma", "0.3.0", (), ("Classifier: License :: OSI Approved :: MIT License",),
     [{"license": {"name": "OSI Approved :: MIT License"}}]),
)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def sbom(t, *args, env=None, rc=0):
    p = t.run("sbom", *args, env={**EPOCH, **(env or {})})
    assert p.returncode == rc, out(p)
    return p


def by_name(doc):
    return {c["name"]: c for c in doc["components"] if c["type"] != "file"}


def sha(c):
    """The component's sha256; None for what the state holds no hash of (the venv's pip)."""
    return next((h["content"] for h in c.get("hashes", []) if h["alg"] == "SHA-256"), None)


def unknown_license(c):
    return "licenses" not in c and {"name": "tfprov:license", "value": "unknown"} in \
        c["properties"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("sbom-demo")
    wd = str(d / "wheels")
    pins, requires = [], []
    for name, ver, req, meta, _ in WHEELS:
        _, h = lib_pyindex.build_wheel(wd, name, ver, requires=req, metadata=meta)
        pins.append((name, ver, h))
        requires.append(f"    {name}: [{', '.join(repr(r) for r in req)}]\n")
    idx = lib_pyindex.Index(wd)
    req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins)
    extra = (f"python:\n  manager: venv\n  name: tf\n  version: \"{PYVER}\"\n"
             f"pip:\n  index_url: {idx.url}\n  complete: true\n  requirements: |\n{req}"
             "  requires:\n" + "".join(requires))
    root = d / "root"
    root.mkdir()
    t = Tfprov(root)
    with Mirror(d / "www") as m:
        man = m.stack(d / "demo.yaml", python=PYVER, form="redist", driver_policy="skip",
                      extra_yaml=extra)
        p = t.run("--no-gpu", "apply", "-y", man, env=no_stub_env(), timeout=300)
        assert p.returncode == 0, out(p)
        t.www = m.dir
    idx.close()
    t.wheels = {n: h for n, _, h in pins}
    yield t


def served_file(t, url):
    """The mirror's file behind a download URL."""
    return os.path.join(t.www, urllib.parse.urlparse(url).path.lstrip("/"))


def test_demo_stack_sbom_is_valid_cyclonedx_with_every_placed_artifact(demo):
    """The demo stack's document validates against the CycloneDX 1.6 schema; each
    archive the cuda step records, the cuDNN archive, both redist JSONs and each
    wheel are components whose sha256 is that of the bytes served (the download
    URL's file), with NVIDIA's license field, the wheels' own licenses, purls
    and the lock's pip.requires as dependency edges."""
    doc = json.loads(sbom(demo, "demo").stdout)
    assert lib_cyclonedx.errors(doc) == []
    assert doc["specVersion"] == "1.6" and doc["bomFormat"] == "CycloneDX"
    assert doc["metadata"]["component"]["name"] == "demo"
    assert doc["metadata"]["timestamp"] == "2023-11-14T22:13:20Z"
    comps = by_name(doc)
    con = sqlite3.connect(demo.state_db)
    attrs = dict(con.execute("select kind, attrs from resources").fetchall())
    con.close()
    placed = json.loads(attrs["cuda"])["archives"]
    hashes = {sha(c) for c in comps.values()}
    assert set(placed.values()) <= hashes, "a placed CUDA archive is missing"
    for c in comps.values():
        if c["purl"].startswith("pkg:generic/"):
            url = [r["url"] for r in c["externalReferences"] if r["type"] == "distribution"][0]
            assert sha(c) == sha256(served_file(demo, url)), c["name"]
            assert c["supplier"]["name"] == "NVIDIA Corporation"
            q = urllib.parse.parse_qs(urllib.parse.urlparse(c["purl"]).query)
            assert q["checksum"] == ["sha256:" + sha(c)] and q["download_url"] == [url]
    for name in ("cuda_cudart", "libcublas", "cuda_nvcc"):
        assert comps[name]["licenses"] == [{"license": {"name": "CUDA Toolkit"}}]
    assert comps["cudnn"]["version"] == "8.9.7.29"
    assert unknown_license(comps["cudnn"])  # the fixture's cuDNN JSON gives none
    assert {"redistrib_12.3.2.json", "redistrib_8.9.7.29.json"} <= set(comps)
    for name, ver, _, _, lic in WHEELS:
        c = comps[name]
        assert sha(c) == demo.wheels[name] and c["version"] == ver
        assert c["purl"] == f"pkg:pypi/{name}@{ver}"
        assert c["licenses"] == lic, name
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert deps["pkg:pypi/tfprov-alpha@1.0.0"] == ["pkg:pypi/tfprov-beta@2.1.0"]
    assert deps["pkg:pypi/tfprov-beta@2.1.0"] == []
    assert set(deps["tfprov-stack:demo"]) == {c["bom-ref"] for c in doc["components"]}


def test_sbom_is_deterministic_and_files_lists_what_was_placed(demo, tmp_path):
    """Two runs under one SOURCE_DATE_EPOCH give the same bytes; another epoch
    changes the timestamp only (the serial number names the content); -o writes
    the same bytes; --files adds every recorded file with the state's sha256 and
    still validates; --all is the array of each stack's document."""
    a, b = sbom(demo, "demo").stdout, sbom(demo, "demo").stdout
    assert a == b
    c = sbom(demo, "demo", env={"SOURCE_DATE_EPOCH": "1800000000"}).stdout
    assert c != a and c.replace("2027-01-15T08:00:00Z", "2023-11-14T22:13:20Z") == a
    sbom(demo, "demo", "-o", tmp_path / "bom.json")
    assert (tmp_path / "bom.json").read_text() == a
    doc = json.loads(sbom(demo, "demo", "--files").stdout)
    assert lib_cyclonedx.errors(doc) == []
    files = {c["name"]: sha(c) for c in doc["components"] if c["type"] == "file"}
    con = sqlite3.connect(demo.state_db)
    rec = dict(con.execute("select path, sha256 from files where type = 'f'").fetchall())
    con.close()
    assert files == rec and len(files) > 50
    allv = json.loads(sbom(demo, "--all").stdout)
    assert allv == [json.loads(a)]


def test_sbom_bad_input(demo, tmp_path):
    """Unknown stack, a root with no state, an unknown --format, a bad
    SOURCE_DATE_EPOCH, an -o that cannot be written, STACK with --all, none:
    each named, with its exit code."""
    p = sbom(demo, "nosuch", rc=1)
    assert "no stack named 'nosuch'" in p.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    p = sbom(Tfprov(empty), "demo", rc=1)
    assert "no state under" in p.stderr and "nothing was applied" in p.stderr
    p = sbom(demo, "demo", "--format", "spdx-json", rc=64)
    assert "unknown --format 'spdx-json'" in p.stderr
    p = sbom(demo, "demo", env={"SOURCE_DATE_EPOCH": "yesterday"}, rc=64)
    assert "SOURCE_DATE_EPOCH 'yesterday'" in p.stderr
    p = sbom(demo, "demo", "-o", tmp_path / "no" / "such" / "dir" / "bom.json", rc=1)
    assert "cannot write" in p.stderr and not (tmp_path / "no").exists()
    for args in (("demo", "--all"), ()):
        p = sbom(demo, *args, rc=64)
        assert "usage: tfprov sbom" in p.stderr
    assert p.stdout == ""


def test_conda_stack_sbom(tfprov, tmp_path):
    """A conda stack: each conda-meta package is a component with the sha256 of
    the package served, its index.json license (or said unknown), a pkg:conda
    purl, and its depends as dependency edges; the document validates."""
    pkgdir = tmp_path / "pkgs"
    pkgs, pyver = lib_conda.demo_packages(str(pkgdir), str(tmp_path))
    pkgs.append(lib_conda.build_package(str(pkgdir), "nolic", "1.0", "0",
                                        {"share/nolic/x.txt": lib_conda.File("x\n")},
                                        depends=["hello >=1.0"], license=None))
    srv = HttpServer(root=str(pkgdir)).start()
    try:
        lock = "".join(f"    {srv.url('/' + os.path.basename(p))}#sha256:{h}\n"
                       for p, h, _, _ in pkgs)
        m = tmp_path / "conda.yaml"
        m.write_text(
            "schema: 1\nstack:\n  name: cpy\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
            f"versions:\n  tensorflow: 2.15.1\n  python: \"{pyver}\"\n"
            "driver:\n  policy: skip\n"
            f"python:\n  manager: conda\n  name: tf\n  version: \"{pyver}\"\n"
            "  lock: |\n    # platform: linux-64\n    @EXPLICIT\n" + lock)
        p = tfprov.run("apply", "-y", m, env=no_stub_env())
        assert p.returncode == 0, out(p)
    finally:
        srv.stop()
    doc = json.loads(sbom(tfprov, "cpy").stdout)
    assert lib_cyclonedx.errors(doc) == []
    comps = by_name(doc)
    assert set(comps) == {"python", "hello", "greet", "nolic"}
    for path, h, _, _ in pkgs:
        name = os.path.basename(path).split("-")[0]
        assert sha(comps[name]) == h, name
    assert comps["hello"]["licenses"] == [{"license": {"name": "MIT"}}]
    assert unknown_license(comps["nolic"])
    assert comps["hello"]["purl"] == "pkg:conda/hello@1.0?build=h0_0&subdir=linux-64&type=tar.bz2"
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert deps[comps["nolic"]["bom-ref"]] == [comps["hello"]["bom-ref"]]
    assert deps[comps["hello"]["bom-ref"]] == [comps["python"]["bom-ref"]]


def test_archives_stay_listed_when_the_cached_redist_json_is_gone(demo):
    """gc may prune a redist JSON: each archive the cuda step records is still a
    component, named and hashed as the state records it, its license unknown
    (not carried over from a file no longer there); the document validates."""
    con = sqlite3.connect(demo.state_db)
    attrs = json.loads(con.execute("select attrs from resources where kind = 'cuda'")
                       .fetchone()[0])
    con.close()
    rj = attrs["archives"]["redistrib_12.3.2.json"]
    cached = demo.path(f"/var/cache/tfprov/sha256/{rj}")
    os.rename(cached, cached + ".away")
    try:
        doc = json.loads(sbom(demo, "demo").stdout)
    finally:
        os.rename(cached + ".away", cached)
    assert lib_cyclonedx.errors(doc) == []
    comps = {sha(c): c for c in doc["components"]}
    for name, h in attrs["archives"].items():
        assert h in comps, name
        if h != rj:
            assert unknown_license(comps[h])
            assert {"name": "tfprov:described-by", "value": "state"} in comps[h]["properties"]
            assert name.startswith(comps[h]["name"] + "-linux-x86_64-" + comps[h]["version"])


def test_json_output_is_one_sbom_event(demo):
    """--json: stdout stays one JSON object per line; the document is the data
    of the one `sbom` event, the same as without --json."""
    p = sbom(demo, "--json", "demo")
    evs = [json.loads(ln) for ln in p.stdout.splitlines()]
    docs = [e["data"] for e in evs if e["type"] == "sbom"]
    assert docs == [json.loads(sbom(demo, "demo").stdout)]

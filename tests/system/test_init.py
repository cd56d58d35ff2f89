"""`tfprov init` and locking from nothing (issue 18).

Scenarios, each with the real binary:
  * a stack the catalog (manifests/data) holds every pin of is written with no
    network at all, validates and passes `lock --check`, and every hash in it is
    one of the catalog's;
  * combinations the knowledge base rules out, and input it does not know, are
    refused with the fact, its source and the right exit code, and nothing is
    written;
  * a combination outside the catalog (a catalog copy without the CUDA 12.5.1
    redist JSON, and Python 3.N of /usr/bin/python3, for which it has no lock)
    becomes a manifest that `tfprov lock` completes against a loopback HTTPS
    server standing in for NVIDIA's redist (the JSON pinned on first use) and a
    loopback PEP 503 index (pip's resolver hashes the closure);
  * `lock` pins a hand-written `redist:` that has no sha256 and says so.
"""
import hashlib
import json
import os
import re
import shutil
import sys

import pytest
import yaml

from lib_http import HttpServer, make_tls
from lib_pyindex import Index, build_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(REPO, "manifests", "data")
PYVER = "%d.%d" % sys.version_info[:2]
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/redist/"
COMPONENTS = ["cuda_cudart", "cuda_cupti", "cuda_nvcc", "cuda_nvrtc", "libcublas", "libcufft",
              "libcurand", "libcusolver", "libcusparse", "libnvjitlink"]
# Any network use fails: proxies that lead nowhere.
NO_NET = {"https_proxy": "http://127.0.0.1:1", "http_proxy": "http://127.0.0.1:1",
          "HTTPS_PROXY": "http://127.0.0.1:1", "HTTP_PROXY": "http://127.0.0.1:1"}


def catalog_hashes():
    """Every sha256 the catalog's files hold (hex in TSVs, conda locks, JSONs)."""
    found = set()
    for d, _, files in os.walk(DATA):
        for f in files:
            with open(os.path.join(d, f), errors="replace") as fh:
                found.update(re.findall(r"\b[0-9a-f]{64}\b", fh.read()))
    return found


def listing(d):
    return sorted(os.listdir(d))


# --- a stack the catalog holds completely --------------------------------------


def test_init_2_20_py312_offline_is_a_complete_lock(tfprov, tmp_path):
    out = tmp_path / "x.yaml"
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "--python", "3.12", "-o", out,
                   env=NO_NET, check=0)
    assert "a complete lock from the catalog" in r.stdout
    text = out.read_text()
    doc = yaml.safe_load(text)
    assert doc["versions"] == {"tensorflow": "2.20.0", "cuda": "12.5.1", "cudnn": "9.3.0.75",
                               "python": "3.12"}
    assert [a["name"] for a in doc["cuda"]["artifacts"]] == COMPONENTS
    assert doc["cudnn"]["artifact"]["url"].endswith("cudnn-linux-x86_64-9.3.0.75_cuda12-archive.tar.xz")
    assert doc["python"]["manager"] == "conda" and "@EXPLICIT" in doc["python"]["lock"]
    assert doc["pip"]["complete"] is True
    assert "tensorflow==2.20.0 \\" in doc["pip"]["requirements"]
    # setuptools and wheel come from the conda lock (setuptools 72.2.0 < 82, which the
    # closure's 82.0.1 is not: TensorBoard 2.20 imports pkg_resources).
    assert "setuptools==" not in doc["pip"]["requirements"]
    assert "missing" not in doc
    # Every hash is copied from the catalog; none is made up.
    hashes = set(re.findall(r"\b[0-9a-f]{64}\b", text))
    assert len(hashes) > 60
    assert hashes <= catalog_hashes()
    v = tfprov.run("--offline", "validate", out, env=NO_NET, check=0)
    assert "error" not in v.stderr
    tfprov.run("--offline", "lock", "--check", out, env=NO_NET, check=0)
    # The same manifest on stdout when no -o is given.
    s = tfprov.run("--offline", "init", "--tensorflow", "2.20", "--python", "3.12",
                   env=NO_NET, check=0)
    assert yaml.safe_load(s.stdout)["pip"] == doc["pip"]


def test_init_picks_the_python_the_catalog_serves(tfprov, tmp_path):
    out = tmp_path / "s.yaml"
    tfprov.run("--offline", "init", "--tensorflow", "2.12", "-o", out, check=0)
    doc = yaml.safe_load(out.read_text())
    assert doc["versions"]["python"] == "3.9"      # conda lock + cp39 closure in the catalog
    assert doc["versions"]["cuda"] == "11.8.0"
    assert "libnvjitlink" not in [a["name"] for a in doc["cuda"]["artifacts"]]  # CUDA 12 only
    tfprov.run("--offline", "lock", "--check", out, check=0)


def test_init_cuda_from_pip_takes_the_wheels_cuda(tfprov, tmp_path):
    """--cuda-from pip takes the wheels of TF's tested CUDA and cuDNN (12.5 / 9.3 for 2.21:
    the lower bounds of 2.20's [and-cuda] ranges, the newest recorded extra with the same
    tested build), not the newest ones of the catalog's closure (CUDA 12.9, cuDNN 9.23):
    pins for `tfprov lock`, since the catalog has no hashes of those wheels."""
    out = tmp_path / "p.yaml"
    r = tfprov.run("--offline", "init", "--tensorflow", "2.21", "--cuda-from", "pip", "-o", out,
                   check=0)
    assert "carries CUDA 12.9.79 and cuDNN 9.23.2.1, not TensorFlow 2.21's tested CUDA 12.5" \
        in r.stderr, r.stderr
    doc = yaml.safe_load(out.read_text())
    assert "cuda" not in doc and "cudnn" not in doc
    req = doc["pip"]["requirements"]
    assert doc["pip"]["complete"] is False
    assert "nvidia-cuda-runtime-cu12==12.5.82\n" in req and "nvidia-cudnn-cu12==9.3.0.75\n" in req
    assert str(doc["versions"]["cuda"]) == "12.5" and doc["versions"]["cudnn"] == "9.3.0.75"
    assert any("not the tested CUDA 12.5 ones" in m for m in doc["missing"])
    v = tfprov.run("validate", out, root=False, check=0)
    assert "compat." not in v.stderr, v.stderr
    tfprov.run("--offline", "lock", "--check", out, check=3)  # lock.incomplete until `lock`


def test_init_gpu_name_and_stand_in_nvml(tfprov, tmp_path, build_dir):
    out = tmp_path / "g.yaml"
    tfprov.run("--offline", "init", "--tensorflow", "2.20", "--gpu", "NVIDIA GeForce RTX 4090",
               "-o", out, check=0)
    assert yaml.safe_load(out.read_text())["driver"]["gpus"] == ["8.9"]
    # --gpu auto asks the driver through NVML: a STAND-IN libnvidia-ml.so.1 (same
    # dlopen as production) reports driver 545.23.08, below CUDA 12.5.1's 555.42.06,
    # and a Kepler GPU TF 2.20 has no kernels for. Both are warnings: the manifest
    # is for the machines that will apply it.
    stubs = os.path.join(build_dir, "stubs", "driver")
    if not os.path.isdir(stubs):
        pytest.skip("stand-in NVML not built")
    env = {"LD_LIBRARY_PATH": stubs, "TFPROV_STUB_DRIVER": "545.23.08",
           "TFPROV_STUB_CUDA": "12030", "TFPROV_STUB_GPUS": "Tesla K80:3.7;NVIDIA L4:8.9"}
    auto = tmp_path / "auto.yaml"
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "--gpu", "auto", "-o", auto,
                   env=env, check=0)
    assert "driver 545.23.08 is below CUDA 12.5.1's minimum 555.42.06" in r.stderr, r.stderr
    assert "minor-version compatibility (>= 525.60.13" in r.stderr
    # the rule validate applies to driver.gpus, in the same words
    assert ("Tesla K80 (compute capability 3.7): TensorFlow 2.20 has no kernels for compute "
            "capability 3.7 (Kepler)") in r.stderr, r.stderr
    assert "[compat.gpu-no-kernels]" in r.stderr
    assert yaml.safe_load(auto.read_text())["driver"]["gpus"] == ["8.9"]


NAMES = [("NVIDIA A100-SXM4-80GB", "8.0"), ("RTX 4070 Ti", "8.9"), ("H200", "9.0"),
         ("Tesla T4", "7.5"), ("RTX 6000 Ada", "8.9"), ("RTX A6000", "8.6"), ("L40S", "8.9"),
         ("P40", "6.1"), ("8.6", "8.6")]


@pytest.mark.parametrize("name,cc", NAMES, ids=[n for n, _ in NAMES])
def test_init_gpu_names_from_the_knowledge_base(tfprov, name, cc):
    """Names are matched against the examples of data/compat.yaml's compute
    capability rows (the most specific example wins: RTX 6000 Ada, not RTX A6000)."""
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "--gpu", name, check=0)
    assert yaml.safe_load(r.stdout)["driver"]["gpus"] == [cc]


# --- refusals and bad input: nothing written ------------------------------------

BAD = [
    # (arguments, exit code, words the message must hold)
    (["--tensorflow", "2.15", "--python", "3.12"], 3,
     ["TensorFlow 2.15 supports Python 3.9-3.11", "tensorflow/docs site/en/install/source.md"]),
    (["--tensorflow", "2.20", "--python", "3.8"], 3, ["Python 3.9-3.13, not 3.8"]),
    (["--tensorflow", "2.12", "--platform", "windows-x86_64"], 3,
     ["native Windows GPU support ended with TF 2.10", "source_windows.md"]),
    (["--tensorflow", "2.12", "--cuda-from", "pip"], 3, ["no tensorflow[and-cuda] extra", "#61993"]),
    (["--tensorflow", "2.20", "--gpu", "3.5"], 3,
     ["no kernels for compute capability 3.5 (Kepler)", "[compat.gpu-no-kernels]", ".bazelrc"]),
    (["--tensorflow", "2.99"], 64, ["unknown TensorFlow version", "1.15.0 to 2.21.0"]),
    (["--tensorflow", "two"], 64, ["not a TensorFlow version"]),
    (["--tensorflow", "2.20", "--gpu", "Voodoo 5 6000"], 64, ["unknown GPU name"]),
    (["--tensorflow", "2.20", "--gpu", "4.2"], 64, ["no GPU has compute capability 4.2"]),
    (["--tensorflow", "2.20", "--python", "3"], 64, ["give a Python 3 series"]),
    (["--tensorflow", "2.20", "--cuda-from", "conda"], 64, ["redist", "pip"]),
    (["--python", "3.12"], 64, ["needs --tensorflow"]),
]


@pytest.mark.parametrize("args,code,words", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_init_bad_input_writes_nothing(tfprov, tmp_path, args, code, words):
    d = tmp_path / "out"
    d.mkdir()
    r = tfprov.run("--offline", "init", *args, "-o", d / "x.yaml", check=code)
    for w in words:
        assert w in r.stderr, r.stderr
    assert listing(d) == []
    assert r.stdout == ""


def test_init_never_replaces_a_file_without_force(tfprov, tmp_path):
    out = tmp_path / "mine.yaml"
    out.write_text("# my own work\n")
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "-o", out, check=64)
    assert "exists" in r.stderr and "--force" in r.stderr
    assert out.read_text() == "# my own work\n"
    assert listing(tmp_path) == ["mine.yaml", "root"]
    tfprov.run("--offline", "init", "--tensorflow", "2.20", "-o", out, "--force", check=0)
    assert yaml.safe_load(out.read_text())["stack"]["name"] == "mine"


def test_init_unwritable_output_and_missing_catalog(tfprov, tmp_path):
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "-o",
                   tmp_path / "no" / "such" / "dir.yaml", check=1)
    assert "cannot write" in r.stderr
    assert not (tmp_path / "no").exists()
    # A catalog that is not there: said, and everything is left to lock.
    out = tmp_path / "n.yaml"
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "-o", out,
                   env={"TFPROV_CATALOG": str(tmp_path / "gone")}, check=0)
    assert "the catalog" in r.stderr and "cannot be read" in r.stderr
    doc = yaml.safe_load(out.read_text())
    assert "sha256" not in doc["cuda"]["redist"] and doc["pip"]["complete"] is False
    assert any(m.startswith("cudnn:") for m in doc["missing"])


def test_help_init_lists_its_options(tfprov):
    r = tfprov.run("help", "init", root=False, check=0)
    for opt in ("--tensorflow", "--python", "--cuda-from", "--gpu", "--platform", "--force",
                "--output"):
        assert opt in r.stdout


# --- outside the catalog: lock completes it ---------------------------------------


def redist_json(label):
    """A redistrib JSON in NVIDIA's format (components -> platform -> file)."""
    doc = {"release_date": "2024-07-01", "release_label": label, "release_product": "cuda"}
    for c in COMPONENTS:
        rel = f"{c}/linux-x86_64/{c}-linux-x86_64-12.5.82-archive.tar.xz"
        doc[c] = {"name": c, "license": "CUDA Toolkit", "version": "12.5.82",
                  "linux-x86_64": {"relative_path": rel,
                                   "sha256": hashlib.sha256(rel.encode()).hexdigest(),
                                   "md5": hashlib.md5(rel.encode()).hexdigest(),
                                   "size": "1000"}}
    return json.dumps(doc, indent=4).encode()


@pytest.fixture
def servers(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    w = {"tensorflow": build_wheel(str(wheels), "tensorflow", "2.20.0", requires=["alpha>=1"]),
         "alpha": build_wheel(str(wheels), "alpha", "1.0")}
    idx = Index(str(wheels))
    tls = make_tls(str(tmp_path / "tls"))
    with HttpServer(tls=tls) as srv:
        data = redist_json("12.5.1")
        srv.add("/cuda/redist/redistrib_12.5.1.json", data)
        yield {"idx": idx, "wheels": w, "srv": srv, "tls": tls, "json": data}
    idx.close()


def test_outside_the_catalog_init_then_lock(tfprov, tmp_path, servers):
    # A catalog without the CUDA 12.5.1 JSON; no conda lock or closure for this Python.
    cat = tmp_path / "catalog"
    shutil.copytree(DATA, cat)
    os.unlink(cat / "nvidia-redist" / "cuda-redistrib_12.5.1.json")
    env = {"TFPROV_CATALOG": str(cat)}
    out = tmp_path / "mine.yaml"
    r = tfprov.run("--offline", "init", "--tensorflow", "2.20", "--python", PYVER, "-o", out,
                   env=env, check=0)
    assert "run `tfprov lock` next" in r.stdout
    text = out.read_text()
    doc = yaml.safe_load(text)
    assert doc["cuda"]["redist"] == {"url": NVIDIA + "redistrib_12.5.1.json",
                                     "components": COMPONENTS}
    assert "sha256" not in doc["cuda"]["redist"]
    assert doc["cudnn"]["version"] == "9.3.0.75"          # still from the catalog
    # The interpreter plan would choose is written down: the system's, every user's.
    assert doc["python"] == {"manager": "venv", "version": PYVER,
                             "interpreter": "/usr/bin/python" + PYVER}
    assert doc["pip"]["complete"] is False
    assert doc["pip"]["requirements"].split() == ["tensorflow==2.20.0"]
    assert any(m.startswith("pip:") for m in doc["missing"])
    tfprov.run("validate", out, check=0)
    c = tfprov.run("lock", "--check", out, check=3)
    assert "lock.unresolved" in c.stderr and "lock.incomplete" in c.stderr
    # plan and mirror build refuse what only lock can use.
    p = tfprov.run("--no-gpu", "plan", out, check=3)
    assert "has no sha256 yet" in p.stdout + p.stderr
    p = tfprov.run("mirror", "build", tmp_path / "mirror", out, check=3)
    assert "not pinned by hash yet; run `tfprov lock" in p.stderr
    assert not (tmp_path / "mirror").exists()
    # The user points the manifest at their mirrors (here: loopback servers standing
    # in for NVIDIA's redist and for PyPI), then locks.
    srv, idx = servers["srv"], servers["idx"]
    out.write_text(text.replace(NVIDIA, srv.url("/cuda/redist/"))
                   .replace("https://pypi.org/simple", idx.url))
    r = tfprov.run("--ca-bundle", servers["tls"]["ca"], "lock", out, timeout=300, check=0)
    sha = hashlib.sha256(servers["json"]).hexdigest()
    assert "trusted on first use" in r.stderr + r.stdout
    assert sha in r.stderr + r.stdout
    locked = out.read_text()
    assert f"(sha256 {sha}, trusted on first use" in locked
    ldoc = yaml.safe_load(locked)
    assert [a["name"] for a in ldoc["cuda"]["artifacts"]] == COMPONENTS
    assert ldoc["pip"]["complete"] is True
    req = ldoc["pip"]["requirements"]
    assert f"tensorflow==2.20.0 \\\n    --hash=sha256:{servers['wheels']['tensorflow'][1]}" in req
    assert f"alpha==1.0 \\\n    --hash=sha256:{servers['wheels']['alpha'][1]}" in req
    tfprov.run("lock", "--check", out, check=0)


TOFU = """\
schema: 1
stack:
  name: tofu
  platform: linux-x86_64
versions:
  tensorflow: 2.20.0
  cuda: 12.5.1
driver:
  policy: skip
cuda:
  version: 12.5.1
  redist:
    url: {url}
    components: [cuda_cudart, libcublas, libcufft, libcurand, libcusolver, libcusparse,
                 libnvjitlink]
"""


def test_lock_pins_a_redist_json_on_first_use(tfprov, tmp_path, servers):
    srv = servers["srv"]
    m = tmp_path / "t.yaml"
    m.write_text(TOFU.format(url=srv.url("/cuda/redist/redistrib_12.5.1.json")))
    v = tfprov.run("validate", m, check=0)
    assert "redist.unpinned" in v.stderr
    # Offline: refused, untouched.
    before = m.read_bytes()
    r = tfprov.run("--offline", "lock", m, check=1)
    assert "--offline" in r.stderr and m.read_bytes() == before
    # An untrusted certificate: refused, untouched (TLS is what vouches for it).
    r = tfprov.run("--ca-bundle", servers["tls"]["other_ca"], "lock", m, check=1)
    assert "untouched" in r.stderr and m.read_bytes() == before
    r = tfprov.run("--ca-bundle", servers["tls"]["ca"], "lock", m, check=0)
    sha = hashlib.sha256(servers["json"]).hexdigest()
    out = r.stdout + r.stderr
    assert "had no sha256: trusted on first use" in out and sha in out
    doc = yaml.safe_load(m.read_text())
    assert [a["name"] for a in doc["cuda"]["artifacts"]] == [
        "cuda_cudart", "libcublas", "libcufft", "libcurand", "libcusolver", "libcusparse",
        "libnvjitlink"]
    assert "trusted on first use" in m.read_text()
    # A size the manifest gives must match what was served.
    m2 = tmp_path / "sized.yaml"
    m2.write_text(TOFU.format(url=srv.url("/cuda/redist/redistrib_12.5.1.json")) +
                  "    size: 5\n")
    before2 = m2.read_bytes()
    r = tfprov.run("--ca-bundle", servers["tls"]["ca"], "lock", m2, check=5)
    assert "bytes served, the manifest says 5" in r.stderr and m2.read_bytes() == before2
    # The download left nothing behind in the cache's scratch.
    assert not any(p.endswith(".json") for p in os.listdir(tfprov.path("/"))) 


def test_tofu_provenance_names_every_redirect_and_the_final_host(tfprov, tmp_path, servers):
    """The redist JSON's URL redirects twice, to another host name: the warning and the
    pin's provenance comment name every URL of the chain and the host that served it."""
    srv = servers["srv"]
    first = srv.url("/moved/redistrib_12.5.1.json")  # https://localhost:PORT/...
    mid = "https://127.0.0.1:%d/mid/redistrib_12.5.1.json" % srv.port
    final = "https://127.0.0.1:%d/cuda/redist/redistrib_12.5.1.json" % srv.port
    srv.redirect("/moved/redistrib_12.5.1.json", mid, 301)
    srv.redirect("/mid/redistrib_12.5.1.json", final, 302)
    m = tmp_path / "t.yaml"
    m.write_text(TOFU.format(url=first))
    r = tfprov.run("--ca-bundle", servers["tls"]["ca"], "lock", m, check=0)
    out = r.stdout + r.stderr
    host = "127.0.0.1:%d" % srv.port
    assert "redirected: %s -> %s -> %s" % (first, mid, final) in out, out
    assert "certificate of %s vouches" % host in out, out
    text = m.read_text()
    assert "redistrib JSON %s\n" % first in text, text
    assert "#   redirected to %s\n" % mid in text and "#   redirected to %s\n" % final in text
    assert "#   served by host %s." % host in text, text
    tfprov.run("lock", "--check", m, check=0)


@pytest.mark.parametrize("defect", ["syntax", "huge-number", "bad-relative-path", "too-large"])
def test_tofu_json_that_is_no_redist_document_exits_3(tfprov, tmp_path, servers, defect):
    """Whatever makes the JSON no valid redist document (it does not parse, a number
    too large for any size, a relative_path leaving its directory, a body past the
    64 MiB cap), lock says so with exit 3 and the manifest is left as it was."""
    srv = servers["srv"]
    good = servers["json"].decode()
    rel = "cuda_cudart/linux-x86_64/cuda_cudart-linux-x86_64-12.5.82-archive.tar.xz"
    body = {"syntax": good[:-20],
            "huge-number": good.replace('"size": "1000"', '"size": 1' + "0" * 40, 1),
            "bad-relative-path": good.replace(rel, "../../etc/passwd", 1),
            "too-large": good + " " * (64 << 20)}[defect]
    srv.add("/bad/redistrib_12.5.1.json", body.encode())
    m = tmp_path / "t.yaml"
    m.write_text(TOFU.format(url=srv.url("/bad/redistrib_12.5.1.json")))
    before = m.read_bytes()
    r = tfprov.run("--ca-bundle", servers["tls"]["ca"], "lock", m, timeout=120, check=3)
    why = {"syntax": "not a valid redist manifest", "huge-number": "not a valid redist manifest",
           "bad-relative-path": "bad relative_path", "too-large": "not a redistrib JSON"}
    assert why[defect] in r.stderr, r.stderr
    assert m.read_bytes() == before


def test_lock_refuses_tofu_over_plain_http(tfprov, tmp_path):
    with HttpServer() as plain:
        plain.add("/redistrib_12.5.1.json", redist_json("12.5.1"))
        m = tmp_path / "t.yaml"
        m.write_text(TOFU.format(url=plain.url("/redistrib_12.5.1.json")))
        before = m.read_bytes()
        r = tfprov.run("validate", m, check=3)
        assert "artifact.no-sha256" in r.stderr and "trust on first use needs TLS" in r.stderr
        r = tfprov.run("lock", m, check=3)
        assert m.read_bytes() == before
        assert plain.count("/redistrib_12.5.1.json") == 0


# --- an unhashed pin of a lock input, applied with --allow-incomplete-lock -------


def test_unhashed_pin_is_left_to_pip_and_named(tfprov, tmp_path):
    """A `complete: false` section may carry pins without hashes (lock input). Apply
    refuses it like any incomplete lock; with --allow-incomplete-lock the hashed pins
    are verified and installed first, and pip resolves the unhashed one itself: the
    output and the state name it as installed without a pinned hash."""
    import lib_pyindex
    from lib_provision import db_rows, no_stub_env, out
    from test_python_env import manifest, venv_yaml
    d = tmp_path / "wheels"
    d.mkdir()
    _, alpha = lib_pyindex.build_wheel(str(d), "tfprov-alpha", "1.0.0")
    lib_pyindex.build_wheel(str(d), "tfprov-gamma", "0.3.0")
    idx = lib_pyindex.Index(str(d))
    try:
        pip = (f"pip:\n  index_url: {idx.url}\n  complete: false\n  requirements: |\n"
               f"    tfprov-alpha==1.0.0 --hash=sha256:{alpha}\n    tfprov-gamma==0.3.0\n")
        m = manifest(tmp_path / "u.yaml", venv_yaml(), pip)
        v = tfprov.run("validate", m, check=0)
        assert "pip.lock-input" in v.stderr
        p = tfprov.run("apply", "-y", m, env=no_stub_env(), timeout=300)
        assert p.returncode == 3, out(p)
        p = tfprov.run("apply", "-y", "--allow-incomplete-lock", m, env=no_stub_env(),
                       timeout=300)
        assert p.returncode == 0, out(p)
        assert "installed without a pinned hash: tfprov-gamma==0.3.0" in out(p), out(p)
        attrs = json.loads(db_rows(tfprov, "SELECT attrs FROM resources WHERE kind = 'pip'")[0][0])
        assert attrs["unhashed"] == ["tfprov-gamma==0.3.0"]
        inst = {x["name"]: x for x in attrs["installed"]}
        assert inst["tfprov-alpha"]["sha256"] == alpha
    finally:
        idx.close()


# --- an installed (relocated) binary finds the catalog ---------------------------


from test_install import relocated  # noqa: E402,F401  (the fixture: cmake --install, moved)


def test_installed_binary_finds_the_catalog(relocated, tmp_path):  # noqa: F811
    """What the .deb installs (manifests/ whole, under share/tfprov) is the catalog:
    a relocated install writes the complete 2.20 stack with no source tree around."""
    import subprocess
    env = {k: v for k, v in os.environ.items()
           if k not in ("TFPROV_DATADIR", "TFPROV_COMPAT", "TFPROV_CATALOG")}
    env.update(NO_NET)
    binary = str(relocated / "bin" / "tfprov")
    assert os.path.isfile(relocated / "share" / "tfprov" / "manifests" / "data" / "nvidia-redist"
                          / "cuda-redistrib_12.5.1.json")
    out = tmp_path / "x.yaml"
    for args in (["init", "--tensorflow", "2.20", "--python", "3.12", "-o", str(out)],
                 ["validate", str(out)], ["lock", "--check", str(out)]):
        p = subprocess.run([binary, "--offline"] + args, capture_output=True, text=True,
                           env=env, cwd="/", timeout=120)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    assert yaml.safe_load(out.read_text())["pip"]["complete"] is True


def _kb_series():
    """Every TF minor of the knowledge base's Linux tested builds, 1.15 to 2.21."""
    kb = yaml.safe_load(open(os.path.join(REPO, "data", "compat.yaml")))
    rows = kb["tensorflow"]["linux_gpu"]["builds"]
    out = {".".join(str(r["version"]).split(".")[:2]) for r in rows}
    return sorted(out, key=lambda s: tuple(int(x) for x in s.split(".")))


def test_init_output_has_no_compat_diagnostic_for_every_minor(tfprov, tmp_path):
    """init's file for every TF minor 1.15..2.21, NVIDIA's archives and (2.14 on, the first
    [and-cuda] extra) the pip wheels: validate says nothing of the knowledge base about it
    (no compat.* diagnostic, no error). What the catalog lacks stays a pins.missing /
    pip.lock-input warning for `tfprov lock`."""
    series = _kb_series()
    assert series[0] == "1.15" and "2.21" in series and len(series) >= 23
    bad = []
    for s in series:
        forms = ["redist"] + (["pip"] if tuple(map(int, s.split("."))) >= (2, 14) else [])
        for cf in forms:
            out = tmp_path / ("%s-%s.yaml" % (s, cf))
            r = tfprov.run("--offline", "-q", "init", "--tensorflow", s, "--cuda-from", cf,
                           "-o", out)
            if r.returncode != 0:
                bad.append((s, cf, "init exit %d" % r.returncode, r.stderr[-300:]))
                continue
            v = tfprov.run("validate", out, root=False)
            diags = [l for l in v.stderr.splitlines() if "[compat." in l or ": error:" in l]
            if v.returncode != 0 or diags:
                bad.append((s, cf, v.returncode, diags))
    assert bad == []

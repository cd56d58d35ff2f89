"""Decode-ahead for the Python steps: wheels and conda packages unpacked into
the cache's scratch while the CUDA and cuDNN archives download and decode,
taken over by the pip and pyenv steps; a scratch tree that is gone or was
changed is not used.

What the machine looks like: a stack of CUDA 12.3.2 + cuDNN (make_stack.py's
NVIDIA-layout archives) + an env profile + a Python env (a venv of
/usr/bin/python3 with three wheels of a complete lock, installed by the native
installer; or a conda env from an explicit lock) served on 127.0.0.1 (a plain
HTTP server, a PEP 503 index, a conda channel directory). The download cache
is outside the root (--cache-dir) on the same filesystem, as decode-ahead
needs.
What is run: apply --json -v, cold; in the second test with the cuDNN archive
served slowly (2 KB/s), so that the run is still downloading while the
Python artifacts are already decoded; the test then removes one Python
artifact's tree from the scratch, or rewrites one of its files with other
bytes of the same size, and lets the run finish; or kills it (-9) there and
applies again.
What must hold: (1) every wheel / conda package is unpacked (its progress
events) before the first step starts, none while a step runs, and its step
says it took the tree from the scratch; (2) a removed or changed tree is
named in a warning, the step unpacks the verified file again, the env is
file for file what an undisturbed run installs (the changed bytes are not
in it), and the scratch is gone at the end; (3) after the kill the root
holds only the writer lock, and the next apply removes the dead run's
scratch and installs the env.

STAND-INS: the CUDA/cuDNN archives hold stub libraries with NVIDIA's sonames
(make_stack.py; applies run with --no-gpu); the conda packages are
real-format packages built at test time (lib_conda), the wheels tiny ones
(lib_pyindex).
"""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

import lib_conda
import lib_pyindex
from lib_http import HttpServer
from conftest import Tfprov
from lib_provision import Mirror, no_stub_env, out

PYVER = subprocess.run(["/usr/bin/python3", "-c",
                        "import sys;print('%d.%d'%sys.version_info[:2])"],
                       capture_output=True, text=True, check=True).stdout.strip()
ENV = no_stub_env()
# The venv's pip and setuptools, from the interpreter's bundled wheels, are
# decoded ahead and taken too (pyenv.c): not the artifacts these tests count.
BUNDLED = re.compile(r"(pip|setuptools)-[^ :]*\.whl: ")
PREFIX = "/opt/tfprov/envs/tf"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("pyahead")
    wheels = d / "wheels"
    pins = []
    for name, ver in (("tfprov-alpha", "1.0.0"), ("tfprov-beta", "2.1.0"),
                      ("tfprov-gamma", "0.3.0")):
        path, sha = lib_pyindex.build_wheel(str(wheels), name, ver)
        pins.append((name, ver, sha, os.path.basename(path)))
    idx = lib_pyindex.Index(str(wheels))
    pkgdir = d / "pkgs"
    pkgs, pyver = lib_conda.demo_packages(str(pkgdir), str(d))
    csrv = HttpServer(root=str(pkgdir)).start()
    with Mirror(d / "www") as m:
        base = m.stack(d / "base.yaml", name="demo")
        w = type("World", (), {})()
        w.base = re.sub(r'python: "[0-9.]+"', f'python: "{PYVER}"', open(base).read())
        w.mirror, w.idx, w.pins, w.csrv, w.pkgs, w.conda_pyver = m, idx, pins, csrv, pkgs, pyver
        yield w
    csrv.stop()
    idx.close()


def manifest(w, path, kind):
    text = w.base
    if kind == "wheel":
        text += f"python:\n  manager: venv\n  name: tf\n  version: \"{PYVER}\"\n"
        req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h, _ in w.pins)
        text += (f"pip:\n  index_url: {w.idx.url}\n  complete: true\n"
                 f"  requirements: |\n{req}")
    else:
        text = text.replace(f'python: "{PYVER}"', f'python: "{w.conda_pyver}"')
        lock = ["# platform: linux-64", "@EXPLICIT"]
        lock += [f"{w.csrv.url('/' + os.path.basename(p))}#sha256:{sha}"
                 for p, sha, _, _ in w.pkgs]
        body = "".join("    " + ln + "\n" for ln in lock)
        text += (f"python:\n  manager: conda\n  name: tf\n  version: \"{w.conda_pyver}\"\n"
                 f"  lock: |\n{body}")
    path.write_text(text)
    return str(path)


def artifacts(w, kind):
    """{sha256: file name} of the Python downloads."""
    if kind == "wheel":
        return {sha: fn for _, _, sha, fn in w.pins}
    return {sha: os.path.basename(p) for p, sha, _, _ in w.pkgs}


def argv(t, cache, m):
    return [t.bin, "--root", t.root, "--cache-dir", str(cache), "--json", "-v", "--no-gpu",
            "apply", "-y", m]


def events(text):
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]


def scratch(cache):
    d = os.path.join(str(cache), "unpack")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def env_files(t, kind):
    """{path: (mode, bytes)} of the env's files (a venv's: its site-packages, the
    rest names the root), byte-code and RECORD aside (a .pyc carries its
    source's mtime; RECORD lists the .pyc hashes)."""
    root = t.path(PREFIX + (f"/lib/python{PYVER}/site-packages" if kind == "wheel" else ""))
    res = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for n in files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if n == "RECORD" or rel.startswith("conda-meta/"):
                continue
            st = os.lstat(p)
            res[rel] = (st.st_mode, os.readlink(p) if os.path.islink(p)
                        else open(p, "rb").read())
    return res


@pytest.mark.parametrize("kind", ["wheel", "conda"])
def test_python_artifacts_are_decoded_while_cuda_decodes(tfprov, world, tmp_path, kind):
    m = manifest(world, tmp_path / "m.yaml", kind)
    cache = tmp_path / "cache"
    p = subprocess.run(argv(tfprov, cache, m), capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **ENV))
    assert p.returncode == 0, out(p)
    evs = events(p.stdout)
    names = set(artifacts(world, kind).values())
    start = next(k for k, e in enumerate(evs) if e["type"] == "apply_start")
    unpacked = {e["item"] for e in evs[:start]
                if e["type"] == "progress" and e.get("step") == "unpack"}
    # Decoded during the prefetch, beside CUDA's and cuDNN's archives.
    assert names <= unpacked, (names, unpacked)
    assert any(i.startswith("cudnn") for i in unpacked), unpacked
    late = [e for e in evs[start:] if e["type"] == "progress" and e.get("step") == "unpack"
            and e.get("item") in names]
    assert late == [], late
    # ... and taken over by the Python step, one tree per artifact.
    msgs = [e.get("@message", "") for e in evs[start:] if e["type"] == "log"]
    # (A venv's bundled pip and setuptools are taken the same way: not counted.)
    taken = [x for x in msgs if "unpacked ahead, taken from the scratch" in x and
             not BUNDLED.match(x)]
    assert len(taken) == len(names), msgs
    assert not [x for x in msgs if "unpacking it again" in x], msgs
    assert scratch(cache) == [], scratch(cache)
    if kind == "wheel":
        site = tfprov.path(f"{PREFIX}/lib/python{PYVER}/site-packages")
        for n, v, _, _ in world.pins:
            mod = os.path.join(site, n.replace("-", "_"), "__init__.py")
            assert open(mod).read() == f"__version__ = {v!r}\n"
        chk = subprocess.run([tfprov.path(PREFIX + "/bin/python"), "-m", "pip", "check"],
                             capture_output=True, text=True, env=dict(os.environ, **ENV))
        assert chk.returncode == 0, chk.stdout + chk.stderr
    else:
        assert open(tfprov.path(PREFIX + "/share/hello/data.txt")).read() == "data\n"


def slow_cudnn(w, rate=2000):
    for d, _, fs in os.walk(w.mirror.dir):
        for f in fs:
            if f.startswith("cudnn-") and f.endswith(".tar.xz"):
                # ~10 KB at 2 KB/s (above the 1 KiB/s stall limit): the run is
                # still downloading when the Python artifacts are decoded.
                w.mirror.srv.rate["/" + os.path.relpath(os.path.join(d, f), w.mirror.dir)] = rate


def wait_decoded(proc, cache, sha, name):
    """The run's scratch tree of the artifact with this sha256, once complete (the
    decoder's hard link to the verified file, named `name`, is gone)."""
    unpack = os.path.join(str(cache), "unpack")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        for r in [r for r in scratch(cache) if not r.endswith(".lock")]:
            tree = os.path.join(unpack, r, sha)
            if os.path.isdir(tree) and not os.path.exists(os.path.join(unpack, r, name)):
                return tree
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(("not decoded ahead", proc.communicate()))


@pytest.mark.parametrize("kind", ["wheel", "conda"])
@pytest.mark.parametrize("damage", ["removed", "changed"])
def test_a_scratch_tree_gone_or_changed_is_decoded_again(tfprov, world, tmp_path, kind,
                                                         damage):
    m = manifest(world, tmp_path / "m.yaml", kind)
    # The reference: the same stack, undisturbed.
    (tmp_path / "ref").mkdir()
    ref = Tfprov(tmp_path / "ref")
    p = subprocess.run(argv(ref, tmp_path / "ref-cache", m), capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, **ENV))
    assert p.returncode == 0, out(p)
    if kind == "wheel":
        sha, name = next((h, fn) for n, _, h, fn in world.pins if n == "tfprov-alpha")
        victim, was = "tfprov_alpha/__init__.py", b"__version__ = '1.0.0'\n"
        now = b"__version__ = '6.6.6'\n"
    else:
        p0 = next(x for x in world.pkgs if os.path.basename(x[0]).startswith("hello-"))
        sha, name = p0[1], os.path.basename(p0[0])
        victim, was, now = "share/hello/data.txt", b"data\n", b"DATA\n"
    cache = tmp_path / "cache"
    slow_cudnn(world)
    try:
        proc = subprocess.Popen(argv(tfprov, cache, m), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, **ENV))
        tree = wait_decoded(proc, cache, sha, name)
        if damage == "removed":
            shutil.rmtree(tree)
        else:
            f = os.path.join(tree, victim)
            assert open(f, "rb").read() == was
            mode = os.stat(f).st_mode
            os.chmod(f, 0o644)
            with open(f, "r+b") as fh:  # same size, other bytes
                fh.write(now)
            os.chmod(f, mode & 0o7777)
        o, e = proc.communicate(timeout=600)
    finally:
        world.mirror.srv.rate.clear()
    assert proc.returncode == 0, (o, e)
    # The cuDNN download was still running: the damage was done before any step.
    evs = events(o)
    msgs = [x.get("@message", "") for x in evs if x["type"] == "log"]
    warned = [x for x in msgs if name.split("-")[0].replace("_", "-") in x.replace("_", "-")
              and "unpacking it again" in x]
    assert len(warned) == 1, msgs
    assert ("was changed" in warned[0]) == (damage == "changed"), warned
    # The other artifacts were still taken from the scratch.
    taken = [x for x in msgs if "unpacked ahead, taken from the scratch" in x and
             not BUNDLED.match(x)]
    assert len(taken) == len(artifacts(world, kind)) - 1, msgs
    assert scratch(cache) == [], scratch(cache)
    mine, theirs = env_files(tfprov, kind), env_files(ref, kind)
    assert mine == theirs, sorted(set(mine.items()) ^ set(theirs.items()))[:6]
    installed = tfprov.path(PREFIX + ("/lib/python%s/site-packages/" % PYVER
                                      if kind == "wheel" else "/") + victim)
    assert open(installed, "rb").read() == was


@pytest.mark.parametrize("kind", ["wheel", "conda"])
def test_kill_with_python_trees_in_the_scratch_is_recoverable(tfprov, world, tmp_path, kind):
    """kill -9 while Python artifacts sit decoded in the scratch (the cuDNN
    download still running): nothing in the root but the writer lock, and the
    next apply removes the dead run's scratch and installs the env."""
    m = manifest(world, tmp_path / "m.yaml", kind)
    cache = tmp_path / "cache"
    sha, name = next(iter(artifacts(world, kind).items()))
    # cuDNN at 20 B/s with the stall limit out of reach: the run cannot leave
    # prefetch before the kill, however slowly a loaded machine decodes (at
    # 2 KB/s the download ended first under CI's load and the cuda step had
    # begun placing when the kill came).
    slow_cudnn(world, rate=20)
    try:
        proc = subprocess.Popen(argv(tfprov, cache, m), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, **ENV, TFPROV_FETCH_STALL_S="600"))
        tree = wait_decoded(proc, cache, sha, name)
        proc.kill()
        proc.communicate(timeout=60)
    finally:
        world.mirror.srv.rate.clear()
    assert os.path.isdir(tree)
    left = [os.path.relpath(os.path.join(d, f), tfprov.root)
            for d, _, fs in os.walk(tfprov.root) for f in fs]
    assert left == ["var/lib/tfprov/lock"], left
    p = subprocess.run(argv(tfprov, cache, m), capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **ENV))
    assert p.returncode == 0, out(p)
    assert scratch(cache) == [], scratch(cache)
    if kind == "wheel":
        mod = tfprov.path(f"{PREFIX}/lib/python{PYVER}/site-packages/tfprov_alpha/__init__.py")
        assert open(mod).read() == "__version__ = '1.0.0'\n"
    else:
        assert open(tfprov.path(PREFIX + "/share/hello/data.txt")).read() == "data\n"


def test_wheels_are_byte_compiled_ahead_and_their_pyc_is_pips(tfprov, world, tmp_path):
    """Each module of a wheel decoded ahead is byte-compiled in the scratch while
    the CUDA archives still download (pycahead.c), and the pip step moves the
    .pyc with its source: it must be byte for byte what compiling the installed
    source in place gives (pip's compileall: same interpreter, the source's
    final path in the code objects, its mtime and size in the header)."""
    import importlib.util
    import py_compile
    slow_cudnn(world)
    m = manifest(world, tmp_path / "m.yaml", "wheel")
    cache = tmp_path / "cache"
    try:
        p = subprocess.run(argv(tfprov, cache, m), capture_output=True, text=True,
                           timeout=600, env=dict(os.environ, **ENV))
    finally:
        world.mirror.srv.rate.clear()
    assert p.returncode == 0, out(p)
    evs = events(p.stdout)
    start = next(k for k, e in enumerate(evs) if e["type"] == "apply_start")
    pre = [e.get("@message", "") for e in evs[:start] if e["type"] == "log"]
    n = len(world.pins)
    # The pins' modules, and the venv's bundled pip and setuptools (2 wheels).
    ahead = [re.fullmatch(r"byte-compiled ahead: (\d+) of (\d+) files in (\d+) wheels", x)
             for x in pre]
    ahead = [a for a in ahead if a]
    assert len(ahead) == 1 and ahead[0].group(1) == ahead[0].group(2), pre
    assert int(ahead[0].group(3)) == n + 2 and int(ahead[0].group(1)) > n, pre
    msgs = [e.get("@message", "") for e in evs[start:] if e["type"] == "log"]
    assert any(f"; {n} .pyc files compiled ahead" in x for x in msgs), msgs
    site = tfprov.path(f"{PREFIX}/lib/python{PYVER}/site-packages")
    for name, _, _, _ in world.pins:
        src = os.path.join(site, name.replace("-", "_"), "__init__.py")
        pyc = importlib.util.cache_from_source(src)
        ref = str(tmp_path / "ref.pyc")
        py_compile.compile(src, cfile=ref, dfile=src, doraise=True)
        assert open(pyc, "rb").read() == open(ref, "rb").read(), name
    # RECORD lists the moved .pyc with its hash, as pip does.
    rec = open(next(os.path.join(site, d, "RECORD") for d in os.listdir(site)
                    if d.startswith("tfprov_alpha-"))).read()
    assert re.search(r"tfprov_alpha/__pycache__/__init__\.cpython-\d+\.pyc,sha256=", rec), rec

"""Verify before change, every step: the Python steps' downloads (conda
packages, the wheels of a complete pip lock) are fetched and verified with the
CUDA and cuDNN archives before the first step changes anything.

What the machine looks like: a stack of CUDA 12.3.2 + cuDNN (merged) + an env
profile + a Python env (a venv of /usr/bin/python3, or a conda env from an
explicit lock) + pip, its archives, conda packages and wheels served on
127.0.0.1 (a plain HTTP server and a PEP 503 index). The download cache is
outside the root (--cache-dir), so the root holds only what apply placed and
the state database.
What is run: apply of a manifest with one Python download pinned by a wrong
hash (a wheel; a conda package), on a fresh root and on a root where a
previous generation was applied; apply --offline with one wheel missing from
the cache.
What must hold: exit 5 (a wrong hash) naming the download, before any step
ran: every file of the root, state.db included, byte-identical (a fresh root
stays empty), nothing fetched into the cache proper under the bad hash; the
offline run fails with one error that names the missing wheel and nothing
else, root byte-identical.

STAND-INS: the CUDA/cuDNN archives hold stub libraries with NVIDIA's sonames
(make_stack.py; applies run with --no-gpu); the conda packages are
real-format packages built at test time (lib_conda), the wheels tiny ones
(lib_pyindex).
"""
import hashlib
import os
import re
import subprocess

import pytest

import lib_conda
import lib_pyindex
from lib_http import HttpServer
from lib_provision import Mirror, no_stub_env, out, temp_leftovers, tree_hashes

PYVER = subprocess.run(["/usr/bin/python3", "-c",
                        "import sys;print('%d.%d'%sys.version_info[:2])"],
                       capture_output=True, text=True, check=True).stdout.strip()
ENV = no_stub_env()
# The writer lock's holder note (pid, host, start), rewritten by every run
# that takes the lock: not state (as in test_gpu_stack, test_pip_complete_lock).
LOCKFILE = ("var/lib/tfprov/lock",)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("pyart")
    wheels = d / "wheels"
    pins = {}
    for name, ver in (("tfprov-alpha", "1.0.0"), ("tfprov-beta", "2.1.0"),
                      ("tfprov-gamma", "0.3.0")):
        _, sha = lib_pyindex.build_wheel(str(wheels), name, ver)
        pins[name] = (name, ver, sha)
    idx = lib_pyindex.Index(str(wheels))
    pkgdir = d / "pkgs"
    pkgs, pyver = lib_conda.demo_packages(str(pkgdir), str(d))
    csrv = HttpServer(root=str(pkgdir)).start()
    with Mirror(d / "www") as m:
        base = m.stack(d / "base.yaml", name="demo")
        w = type("World", (), {})()
        w.base = re.sub(r'python: "[0-9.]+"', f'python: "{PYVER}"', open(base).read())
        w.idx, w.pins, w.csrv, w.pkgs, w.conda_pyver, w.dir = idx, pins, csrv, pkgs, pyver, d
        yield w
    csrv.stop()
    idx.close()


def stack(w, path, env_value="1", python=None, pins=None, index_url=None):
    text = w.base.replace('TF_CPP_MIN_LOG_LEVEL: "1"', f'TF_CPP_MIN_LOG_LEVEL: "{env_value}"')
    assert text != w.base or env_value == "1"
    if python == "venv":
        text += f"python:\n  manager: venv\n  name: tf\n  version: \"{PYVER}\"\n"
    elif python is not None:  # a conda explicit lock
        text = text.replace(f'python: "{PYVER}"', f'python: "{w.conda_pyver}"')
        body = "".join("    " + ln + "\n" for ln in python.splitlines())
        text += (f"python:\n  manager: conda\n  name: tf\n  version: \"{w.conda_pyver}\"\n"
                 f"  lock: |\n{body}")
    if pins:
        req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins)
        text += (f"pip:\n  index_url: {index_url or w.idx.url}\n  complete: true\n"
                 f"  requirements: |\n{req}")
    path.write_text(text)
    return str(path)


def conda_lock(w, bad=None):
    lines = ["# platform: linux-64", "@EXPLICIT"]
    for p, sha, _, _ in w.pkgs:
        name = os.path.basename(p)
        lines.append(f"{w.csrv.url('/' + name)}#sha256:{'0' * 64 if name == bad else sha}")
    return "\n".join(lines) + "\n"


def apply(tfprov, cache, manifest, *extra):
    return tfprov.run("--no-gpu", "--cache-dir", str(cache), "apply", "-y", *extra, manifest,
                      env=ENV, timeout=600)


def apply_on_second_root(tfprov, tmp_path, cache, manifest):
    """apply on a fresh root (tmp_path/root2) that shares the download cache."""
    other = tmp_path / "root2"
    other.mkdir()
    return tfprov.run("--root", str(other), "--no-gpu", "--cache-dir", str(cache), "apply",
                      "-y", manifest, root=False, env=ENV, timeout=600)


def cache_proper(cache):
    d = os.path.join(str(cache), "sha256")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def wrong_wheel(w):
    n, v, _ = w.pins["tfprov-gamma"]
    return [w.pins["tfprov-alpha"], w.pins["tfprov-beta"], (n, v, "0" * 64)]


@pytest.mark.parametrize("kind", ["wheel", "conda"])
def test_wrong_python_hash_on_a_fresh_root_changes_nothing(tfprov, world, tmp_path, kind):
    """CUDA, cuDNN, env, a Python env and pip all to be created; one Python
    download has a wrong hash: exit 5 naming it, the root stays empty (no CUDA
    placed, no state created), and the bad bytes are not in the cache."""
    cache = tmp_path / "cache"
    if kind == "wheel":
        m = stack(world, tmp_path / "m.yaml", python="venv", pins=wrong_wheel(world))
        name = "tfprov-gamma==0.3.0"
    else:
        bad = os.path.basename(world.pkgs[1][0])
        m = stack(world, tmp_path / "m.yaml", python=conda_lock(world, bad))
        name = bad[:-len(".tar.bz2")]
    p = apply(tfprov, cache, m)
    assert p.returncode == 5, out(p)
    assert name in out(p) and "0" * 64 in out(p), out(p)
    assert "nothing was changed" in out(p), out(p)
    assert os.listdir(tfprov.root) == []
    assert "0" * 64 not in cache_proper(cache)
    # Every download was tried before the refusal: the CUDA archives are verified.
    assert len(cache_proper(cache)) >= 9


@pytest.mark.parametrize("kind", ["wheel", "conda"])
def test_wrong_python_hash_on_an_applied_root_is_byte_identical(tfprov, world, tmp_path,
                                                                kind):
    """A root with CUDA, cuDNN and the env applied; a new manifest changes the
    env profile and adds a Python env whose one download has a wrong hash:
    exit 5 before the env step ran: every file of the root, state.db and its
    WAL included, byte-identical (the lock's holder note aside)."""
    cache = tmp_path / "cache"
    p = apply(tfprov, cache, stack(world, tmp_path / "a.yaml"))
    assert p.returncode == 0, out(p)
    before = tree_hashes(tfprov.root, exclude=LOCKFILE)
    assert "var/lib/tfprov/state.db" in before
    if kind == "wheel":
        m = stack(world, tmp_path / "b.yaml", env_value="2", python="venv",
                  pins=wrong_wheel(world))
        name = "tfprov-gamma==0.3.0"
    else:
        bad = os.path.basename(world.pkgs[2][0])
        m = stack(world, tmp_path / "b.yaml", env_value="2",
                  python=conda_lock(world, bad))
        name = bad[:-len(".tar.bz2")]
    p = apply(tfprov, cache, m)
    assert p.returncode == 5, out(p)
    assert name in out(p), out(p)
    assert tree_hashes(tfprov.root, exclude=LOCKFILE) == before
    assert temp_leftovers(tfprov.root) == []


def test_offline_names_the_one_missing_wheel(tfprov, world, tmp_path):
    """A venv with two wheels applied online (into the cache); then --offline
    with a third pin whose wheel was never fetched: one error naming it and
    not the two cached ones, root byte-identical."""
    cache = tmp_path / "cache"
    good = [world.pins["tfprov-alpha"], world.pins["tfprov-beta"]]
    p = apply(tfprov, cache, stack(world, tmp_path / "a.yaml", python="venv", pins=good))
    assert p.returncode == 0, out(p)
    before = tree_hashes(tfprov.root, exclude=LOCKFILE)
    n0 = len(world.idx.requests)
    m = stack(world, tmp_path / "b.yaml", python="venv",
              pins=good + [world.pins["tfprov-gamma"]])
    p = apply(tfprov, cache, m, "--offline")
    text = out(p)
    assert p.returncode not in (0, 5), text
    errors = [ln for ln in text.splitlines() if "--offline" in ln and "not in the cache" in ln]
    assert len(errors) == 1, text
    assert "1 artifact" in errors[0] and "tfprov-gamma==0.3.0" in errors[0], text
    assert "tfprov-alpha" not in text and "tfprov-beta" not in text, text
    assert len(world.idx.requests) == n0  # offline: the index was not asked
    assert tree_hashes(tfprov.root, exclude=LOCKFILE) == before
    # Online again, the same manifest applies from the index and the cache.
    p = apply(tfprov, cache, m)
    assert p.returncode == 0, out(p)


def test_pip_installs_from_the_verified_cache(tfprov, world, tmp_path):
    """The wheels are fetched once, verified, into the cache: the index serves
    each wheel file once, and a second root sharing the cache needs only the
    index pages, never a wheel file."""
    cache = tmp_path / "cache"
    good = [world.pins["tfprov-alpha"], world.pins["tfprov-beta"]]
    m = stack(world, tmp_path / "a.yaml", python="venv", pins=good)
    n0 = len(world.idx.requests)
    p = apply(tfprov, cache, m)
    assert p.returncode == 0, out(p)
    files = [r for r in world.idx.requests[n0:] if r.startswith("/files/")]
    assert sorted(files) == sorted(set(files)) and len(files) == 2, world.idx.requests[n0:]
    for _, _, sha in good:
        assert sha in cache_proper(cache)
    n1 = len(world.idx.requests)
    p2 = apply_on_second_root(tfprov, tmp_path, cache, m)
    assert p2.returncode == 0, out(p2)
    assert [r for r in world.idx.requests[n1:] if r.startswith("/files/")] == []


def test_a_torn_cached_wheel_is_fetched_again_from_where_the_index_listed_it(
        tfprov, world, tmp_path):
    """A power cut can leave a cache entry whose name reached the disk and
    whose bytes did not (test_power_loss.py found it: the next apply failed
    with a 404 from a URL guessed as <index>/<name>/<file>, where this index
    does not serve files). The cached copy of beta is emptied as that cut
    leaves it; its memo says where the index listed it, so the next apply,
    on a second root sharing the cache, fetches it from there without asking
    the index. alpha's copy is torn too and its memo is one a former tfprov
    wrote (the file name only): its index page is asked again."""
    cache = tmp_path / "cache"
    pins = [world.pins["tfprov-alpha"], world.pins["tfprov-beta"]]
    m = stack(world, tmp_path / "a.yaml", python="venv", pins=pins)
    p = apply(tfprov, cache, m)
    assert p.returncode == 0, out(p)
    (_, _, alpha), (_, _, beta) = pins
    memo = cache / "names" / alpha
    lines = memo.read_text().splitlines()
    assert len(lines) == 3 and lines[1].endswith("/files/" + lines[0]) and \
        lines[2] == world.idx.url, lines
    memo.write_text(lines[0] + "\n")
    for sha in (alpha, beta):
        entry = cache / "sha256" / sha
        os.chmod(entry, 0o644)
        open(entry, "w").close()
    n0 = len(world.idx.requests)
    p2 = apply_on_second_root(tfprov, tmp_path, cache, m)
    assert p2.returncode == 0, out(p2)
    assert p2.stderr.count("did not match its sha256") == 2, out(p2)
    asked = world.idx.requests[n0:]
    assert sorted(r for r in asked if r.startswith("/files/")) == sorted(
        f"/files/{f}" for f in (memo.read_text().splitlines()[0],
                                (cache / "names" / beta).read_text().splitlines()[0])), asked
    assert [r for r in asked if not r.startswith("/files/")] == ["/simple/tfprov-alpha/"], asked
    assert len(memo.read_text().splitlines()) == 3  # the memo says where again
    for sha in (alpha, beta):
        with open(cache / "sha256" / sha, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == sha


def test_index_pages_are_asked_at_once(tfprov, world, tmp_path):
    """An index whose every project page takes 0.6 s to answer (a far one):
    the three pins' pages are asked at once, not one after another (40 pins
    behind a 50 ms round trip left the link idle for seconds)."""
    far = lib_pyindex.Index(str(world.dir / "wheels"), page_delay=0.6)
    try:
        pins = [world.pins[n] for n in ("tfprov-alpha", "tfprov-beta", "tfprov-gamma")]
        m = stack(world, tmp_path / "m.yaml", python="venv", pins=pins, index_url=far.url)
        p = apply(tfprov, tmp_path / "cache", m)
        assert p.returncode == 0, out(p)
        pages = [r for r in far.requests if r.startswith("/simple/")]
        assert sorted(pages) == [f"/simple/{n}/" for n, _, _ in sorted(pins)], far.requests
        assert far.max_pages_at_once == 3, far.requests
    finally:
        far.close()


@pytest.mark.parametrize("kind", ["unknown", "down"])
def test_an_index_page_that_cannot_be_read_changes_nothing(tfprov, world, tmp_path, kind):
    """A pin the index does not know (its page is a 404), or an index that
    is not there (nothing listens on its port): apply names the pin and the
    page, and the fresh root stays empty."""
    pins = [world.pins["tfprov-alpha"], world.pins["tfprov-beta"]]
    url = world.idx.url
    if kind == "unknown":
        pins.append(("tfprov-nosuch", "1.0", "1" * 64))
        page = f"{url}tfprov-nosuch/"
    else:
        import socket
        with socket.socket() as s:  # a loopback port nothing listens on
            s.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{s.getsockname()[1]}/simple/"
        page = f"{url}tfprov-alpha/"
    m = stack(world, tmp_path / "m.yaml", python="venv", pins=pins, index_url=url)
    p = apply(tfprov, tmp_path / "cache", m)
    # exit 5: the index said no (integrity: no such file); 1: the network failed
    assert p.returncode == (5 if kind == "unknown" else 1), out(p)
    want = "tfprov-nosuch==1.0" if kind == "unknown" else "tfprov-alpha==1.0.0"
    assert f"{want}: cannot read the index page {page}" in out(p), out(p)
    assert ("(HTTP 404)" if kind == "unknown" else "onnect") in out(p), out(p)
    assert os.listdir(tfprov.root) == [], out(p)

"""Decoding before verification is bounded: a decompression bomb served by a
mirror in place of a pinned archive.

STAND-INS: the CUDA 12.3.2 / cuDNN 8.9.7.29 archives hold stub libraries with
NVIDIA's sonames (make_stack.py); no GPU here, so applies run with --no-gpu.
Real: the binary, two HTTP mirrors on loopback (lib_http), a real tar.xz bomb
(40 MiB of zeros in 6 KiB, built with Python's tarfile + lzma), SQLite.

What the machine looks like: a fresh root; the manifest's origin URLs are dead,
so the --mirror given is the only source. The bomb mirror serves every archive
as published except cuda_cudart, replaced by the bomb padded to the pinned size
and served slowly.
What must hold: exit 5; `apply` verifies every download before it unpacks
or changes anything, so nothing of the bomb is ever decoded there (no bytes
under R/opt while it runs); nothing placed; the cache holds only verified
bytes, the bomb only in quarantine (owner-only); a later apply from a good
mirror succeeds. Where an archive is decoded while it downloads (the
pipeline's artset_fetch_unpack, driven here through pipeline_tool), the bytes
decoded never exceed the budget (the lock's unpacked_size, else 20x the
pinned size).
"""
import hashlib
import io
import lzma
import os
import re
import subprocess
import tarfile
import time

import pytest

from lib_http import HttpServer, dead_url
from lib_provision import Mirror, no_stub_env, out

ENV = dict(no_stub_env(), TFPROV_FETCH_RETRIES="0")
PREFIX = "/opt/tfprov/cuda/12.3.2"
RATIO = 20
BOMB_BYTES = 40 << 20


class _Zeros(io.RawIOBase):
    def __init__(self, n):
        self.n = n

    def readable(self):
        return True

    def readinto(self, b):
        k = min(len(b), self.n)
        b[:k] = bytes(k)
        self.n -= k
        return k


def _bomb(size):
    """A tar.xz of one 40 MiB file of zeros, padded with random bytes to `size`."""
    bio = io.BytesIO()
    with lzma.open(bio, "wb", preset=9 | lzma.PRESET_EXTREME) as z:
        with tarfile.open(fileobj=z, mode="w|") as tf:
            ti = tarfile.TarInfo("cuda_cudart-linux-x86_64-12.3.101-archive/lib/libbomb.so")
            ti.size = BOMB_BYTES
            tf.addfile(ti, io.BufferedReader(_Zeros(BOMB_BYTES)))
    data = bio.getvalue()
    assert len(data) <= size
    return data + os.urandom(size - len(data))


def _unpacked(data):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tf:
        return sum(m.size for m in tf.getmembers() if m.isfile())


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    d = tmp_path_factory.mktemp("bomb")
    with Mirror(d / "www") as m:
        man = m.stack(d / "demo.yaml", name="demo")
        text = open(man).read()
    arts = {}
    for name, url, sha, size in re.findall(
            r"(?:name: (\S+)\n\s+)?url: (\S+)\n\s+sha256: (\S+)\n\s+size: (\d+)", text):
        name = name or "cudnn"
        path = url.split("/", 3)[3]
        with open(os.path.join(str(d / "www"), path), "rb") as f:
            arts[name] = dict(url=url, sha=sha, size=int(size), data=f.read(),
                              base=url.rsplit("/", 1)[1])
    # Origins are dead: the mirror given is the only source.
    origin = re.match(r"(http://[^/]+)/", arts["cuda_cudart"]["url"]).group(1)
    text = text.replace(origin, dead_url("").rstrip("/"))
    return dict(dir=d, text=text, arts=arts)


def _mirror_server(stack, replace=None):
    """A --mirror serving every archive by its basename; `replace` swaps cudart."""
    srv = HttpServer()
    for name, a in stack["arts"].items():
        srv.add("/" + a["base"], replace if (replace and name == "cuda_cudart") else a["data"])
    return srv


def _write_manifest(stack, tmp_path, unpacked=None):
    text = stack["text"]
    if unpacked is not None:
        a = stack["arts"]["cuda_cudart"]
        text = text.replace("sha256: %s\n      size: %d\n" % (a["sha"], a["size"]),
                            "sha256: %s\n      size: %d\n      unpacked_size: %d\n"
                            % (a["sha"], a["size"], unpacked), 1)
        assert "unpacked_size" in text
    p = tmp_path / "demo.yaml"
    p.write_text(text)
    return str(p)


def _staged_bytes(root):
    n = 0
    for dp, _, fns in os.walk(os.path.join(root, "opt")):
        for f in fns:
            try:
                st = os.lstat(os.path.join(dp, f))
            except FileNotFoundError:
                continue
            n += st.st_size
    return n


def _apply_watching(tfprov, manifest, mirror_url):
    """Runs apply, sampling the bytes under R/opt until it exits; (proc, peak)."""
    argv = [tfprov.bin, "--root", tfprov.root, "--mirror", mirror_url, "--no-gpu", "-v",
            "apply", "-y", manifest]
    env = dict(os.environ, **ENV)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    peak = 0
    deadline = time.monotonic() + 240
    while p.poll() is None and time.monotonic() < deadline:
        peak = max(peak, _staged_bytes(tfprov.root))
        time.sleep(0.002)
    so, se = p.communicate(timeout=60)
    p.stdout_text = so + se
    return p, peak


def _check_cache_clean(tfprov, bomb):
    cache = tfprov.path("/var/cache/tfprov")
    bad = hashlib.sha256(bomb).hexdigest()
    for f in os.listdir(os.path.join(cache, "sha256")):
        with open(os.path.join(cache, "sha256", f), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == f, "unverified bytes in the cache"
    q = os.path.join(cache, "quarantine")
    kept = [os.path.join(q, f) for f in os.listdir(q)]
    assert kept, "the bomb is kept as evidence"
    for k in kept:
        with open(k, "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == bad
        assert os.stat(k).st_mode & 0o077 == 0, oct(os.stat(k).st_mode)


@pytest.mark.parametrize("pinned", [False, True], ids=["ratio", "unpacked_size"])
def test_bomb_from_mirror_is_bounded(tfprov, stack, tmp_path, pinned):
    a = stack["arts"]["cuda_cudart"]
    real = _unpacked(a["data"])
    man = _write_manifest(stack, tmp_path, unpacked=real if pinned else None)
    budget = real if pinned else RATIO * a["size"]
    bomb = _bomb(a["size"])
    with _mirror_server(stack, replace=bomb) as bad:
        bad.fault("/" + a["base"], "drip:1500")  # ~4.6 s
        p, peak = _apply_watching(tfprov, man, bad.url(""))
    text = p.stdout_text
    assert p.returncode == 5, text
    assert a["sha"] in text and "sha256 mismatch" in text, text
    assert peak <= budget, (peak, budget)
    # Every download is verified before the first change: the bomb is never decoded.
    assert peak == 0 and "nothing was changed" in text, (peak, text)
    assert not os.path.exists(tfprov.path(PREFIX))
    assert not any(".tfprov-" in n for _, dns, fns in os.walk(tfprov.root) for n in dns + fns)
    _check_cache_clean(tfprov, bomb)
    with _mirror_server(stack) as good:
        p = tfprov.run("--mirror", good.url(""), "--no-gpu", "apply", "-y", man, env=ENV,
                       timeout=300)
    assert p.returncode == 0, out(p)
    assert os.path.isfile(tfprov.path(PREFIX + "/lib64/libcudart.so.12"))


def test_recorded_unpacked_size_is_enforced(tfprov, stack, tmp_path):
    """The genuine archive with an unpacked_size one byte too small: exit 5
    naming unpacked_size; nothing placed."""
    a = stack["arts"]["cuda_cudart"]
    man = _write_manifest(stack, tmp_path, unpacked=_unpacked(a["data"]) - 1)
    with _mirror_server(stack) as good:
        p = tfprov.run("--mirror", good.url(""), "--no-gpu", "apply", "-y", man, env=ENV,
                       timeout=300)
    assert p.returncode == 5, out(p)
    assert "unpacked_size" in out(p) and "cuda_cudart" in out(p), out(p)
    assert not os.path.exists(tfprov.path(PREFIX))


def test_compressible_genuine_archive_over_ratio_is_placed(tfprov, stack, tmp_path):
    """A genuine archive that unpacks to far more than 20x its size: the
    verified file is unpacked whole (the ratio budget is for unverified bytes
    only): exit 0, the file placed whole."""
    a = stack["arts"]["cuda_cudart"]
    src = tarfile.open(fileobj=io.BytesIO(a["data"]), mode="r:xz")
    bio = io.BytesIO()
    with lzma.open(bio, "wb", preset=9) as z:
        with tarfile.open(fileobj=z, mode="w|") as tf:
            for m in src.getmembers():
                tf.addfile(m, src.extractfile(m) if m.isfile() else None)
            ti = tarfile.TarInfo("cuda_cudart-linux-x86_64-12.3.101-archive/share/zeros")
            ti.size = 4 << 20
            tf.addfile(ti, io.BufferedReader(_Zeros(ti.size)))
    data = bio.getvalue()
    assert _unpacked(data) > RATIO * len(data)
    sha = hashlib.sha256(data).hexdigest()
    text = stack["text"].replace(a["sha"], sha).replace(
        "size: %d\n" % a["size"], "size: %d\n" % len(data), 1)
    man = tmp_path / "demo.yaml"
    man.write_text(text)
    with _mirror_server(stack, replace=data) as srv:
        srv.fault("/" + a["base"], "drip:4000")
        p = tfprov.run("--mirror", srv.url(""), "--no-gpu", "-v", "apply", "-y", str(man),
                       env=ENV, timeout=300)
    assert p.returncode == 0, out(p)
    assert os.path.getsize(tfprov.path(PREFIX + "/share/zeros")) == 4 << 20


def _compressible(a):
    """cudart's archive plus a 4 MiB file of zeros: far more than 20x its size unpacked."""
    src = tarfile.open(fileobj=io.BytesIO(a["data"]), mode="r:xz")
    bio = io.BytesIO()
    with lzma.open(bio, "wb", preset=9) as z:
        with tarfile.open(fileobj=z, mode="w|") as tf:
            for m in src.getmembers():
                tf.addfile(m, src.extractfile(m) if m.isfile() else None)
            ti = tarfile.TarInfo("cuda_cudart-linux-x86_64-12.3.101-archive/share/zeros")
            ti.size = 4 << 20
            tf.addfile(ti, io.BufferedReader(_Zeros(ti.size)))
    return bio.getvalue()


def _install_watching(url, sha, size, cache, stage):
    """pipeline_tool install (artset_fetch_unpack: decodes while it downloads),
    sampling the bytes under stage's parent until it exits; (proc, peak)."""
    import lib_pipeline
    argv = [lib_pipeline.tool_path(), "install", url, sha, str(size), stage, "--cache", cache,
            "--strip", "1", "-v"]
    env = dict(os.environ, TFPROV_FETCH_RETRIES="0")
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    peak = 0
    deadline = time.monotonic() + 120
    parent = os.path.dirname(stage)
    while p.poll() is None and time.monotonic() < deadline:
        n = 0
        for dp, _, fns in os.walk(parent):
            for f in fns:
                try:
                    n += os.lstat(os.path.join(dp, f)).st_size
                except FileNotFoundError:
                    pass
        peak = max(peak, n)
        time.sleep(0.002)
    so, se = p.communicate(timeout=60)
    p.text = so + se
    return p, peak


def test_streamed_bomb_decoding_stops_at_the_budget(stack, tmp_path):
    """Decoding while downloading (the pipeline): the bomb, served slowly in place
    of cudart, is decoded only up to 20x its pinned size, then refused by its hash."""
    a = stack["arts"]["cuda_cudart"]
    bomb = _bomb(a["size"])
    (tmp_path / "out").mkdir()
    with HttpServer() as srv:
        srv.add("/" + a["base"], bomb)
        srv.fault("/" + a["base"], "drip:1500")  # ~4.6 s: decoding overlaps the download
        p, peak = _install_watching(srv.url("/" + a["base"]), a["sha"], a["size"],
                                    str(tmp_path / "cache"), str(tmp_path / "out" / "stage"))
    assert p.returncode == 5, p.text
    assert "sha256 mismatch" in p.text and "decoding stopped" in p.text, p.text
    assert peak <= RATIO * a["size"], (peak, RATIO * a["size"])


def test_streamed_genuine_archive_over_ratio_is_unpacked_whole(stack, tmp_path):
    """A genuine archive far above 20x: decoding stops at the budget while it
    downloads, and the verified file is unpacked whole afterwards."""
    data = _compressible(stack["arts"]["cuda_cudart"])
    (tmp_path / "out").mkdir()
    with HttpServer() as srv:
        srv.add("/c.tar.xz", data)
        srv.fault("/c.tar.xz", "drip:4000")
        stage = str(tmp_path / "out" / "stage")
        p, _ = _install_watching(srv.url("/c.tar.xz"), hashlib.sha256(data).hexdigest(),
                                 len(data), str(tmp_path / "cache"), stage)
    assert p.returncode == 0, p.text
    assert "decoding stopped" in p.text, p.text
    assert os.path.getsize(os.path.join(stage, "share", "zeros")) == 4 << 20

"""Unpacking is bounded: a pinned decompression bomb, tar or wheel, is refused
with exit 5 within its bound, and nothing of it is placed or left behind.

A pinned hash proves who made an archive, not that it is sane: these bombs are
pinned by the manifest (the publisher or the manifest is hostile), so every
download verifies and only the unpack bound stops them. The bound
(engine/artifact/artifact.h, unpack_bound) is the declared unpacked_size, else
UNPACK_BOMB_RATIO (100) times the archive's size, never less than
UNPACK_BOMB_FLOOR (64 MiB); a zip whose own directory declares more is refused
before a byte is written.

STAND-INS: the CUDA/cuDNN archives of make_stack.py (stub libraries); no GPU
(--no-gpu). Real: the binary, loopback HTTP mirrors, a real venv, bombs built
here without writing their expanded size anywhere: a tar.gz of one 2 GiB file
of zeros as 2,049 concatenated gzip members (2.1 MB, 1000:1), and a wheel whose
one 2 GiB entry is a raw deflate stream of one 1 MiB full-flush block repeated
(2.1 MB), with a correct CRC-32 and RECORD line, so that without the bound it
would install.
Takes about 15 s (most of it the venv of the wheel case).
"""
import base64
import gzip
import hashlib
import json
import os
import re
import struct
import subprocess
import tarfile
import time
import zlib

import pytest

from lib_provision import no_stub_env, out, temp_leftovers
from test_python_env import ENV_PREFIX, manifest, venv_yaml
from test_unverified_decode import PREFIX, _mirror_server, stack  # noqa: F401 (fixture)
from test_wheel_native import pip_yaml

GIB2 = 2 << 30
RATIO, FLOOR = 100, 64 << 20
# sha256 and CRC-32 of 2 GiB of zeros (hashlib / zlib.crc32 over 2,048 MiB).
ZEROS_SHA = "a7c744c13cc101ed66c29f672f92455547889cc586ce6d44fe76ae824958ea51"
ZEROS_CRC = 0x4DBDF21C


def bound(size):
    return max(RATIO * size, FLOOR)


def tar_bomb(top):
    ti = tarfile.TarInfo(top + "/lib/libbomb.so")
    ti.size = GIB2
    member = gzip.compress(bytes(1 << 20), 9)
    return (gzip.compress(ti.tobuf(format=tarfile.GNU_FORMAT), 9) + member * (GIB2 >> 20) +
            gzip.compress(bytes(1024), 9))


def _zip(entries):
    """A zip written by hand: entries are (name, method, crc, usize, data)."""
    local, central, off = b"", b"", 0
    for name, method, crc, usize, data in entries:
        n = name.encode()
        hdr = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data),
                          usize, len(n), 0) + n
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0, method, 0,
                               0x21, crc, len(data), usize, len(n), 0, 0, 0, 0,
                               0o100644 << 16, off) + n
        local += hdr + data
        off += len(hdr) + len(data)
    return local + central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries),
                                         len(entries), len(central), off, 0)


def wheel_bomb():
    """tfprov_bomb-1.0: METADATA, WHEEL, RECORD and a 2 GiB file of zeros."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    deflated = block * (GIB2 >> 20) + c.flush(zlib.Z_FINISH)
    di = "tfprov_bomb-1.0.dist-info"
    files = {di + "/METADATA": b"Metadata-Version: 2.1\nName: tfprov-bomb\nVersion: 1.0\n",
             di + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                            b"Tag: py3-none-any\n"}
    def b64(digest):
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    record = "".join("%s,sha256=%s,%d\n" % (k, b64(hashlib.sha256(v).digest()), len(v))
                     for k, v in files.items())
    record += "tfprov_bomb/zeros.bin,sha256=%s,%d\n%s/RECORD,,\n" % (
        b64(bytes.fromhex(ZEROS_SHA)), GIB2, di)
    files[di + "/RECORD"] = record.encode()
    entries = [("tfprov_bomb/zeros.bin", 8, ZEROS_CRC, GIB2, deflated)]
    entries += [(k, 0, zlib.crc32(v), len(v), v) for k, v in files.items()]
    return _zip(entries)


def _bytes_under(top, skip=()):
    n = 0
    for dp, dns, fns in os.walk(top):
        dns[:] = [d for d in dns if os.path.join(dp, d) not in skip]
        for f in fns:
            try:
                n += os.lstat(os.path.join(dp, f)).st_size
            except FileNotFoundError:
                pass
    return n


def _run_watching(tfprov, args, watch, skip=()):
    """Runs tfprov, sampling the bytes under `watch` until it exits; (proc, peak, secs)."""
    argv = [tfprov.bin, "--root", tfprov.root, *map(str, args)]
    env = dict(os.environ, **no_stub_env(TFPROV_FETCH_RETRIES="0"))
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, stdin=subprocess.DEVNULL)
    peak = 0
    while p.poll() is None and time.monotonic() - t0 < 300:
        peak = max(peak, _bytes_under(watch, skip))
        time.sleep(0.005)
    so, se = p.communicate(timeout=60)
    p.stdout, p.stderr = so, se
    return p, peak, time.monotonic() - t0


def _no_scratch(tfprov):
    """Nothing left of decode-ahead's scratch (<cache>/unpack/run-*)."""
    u = tfprov.path("/var/cache/tfprov/unpack")
    return [] if not os.path.isdir(u) else os.listdir(u)


def test_pinned_tar_bomb_is_exit_5_within_its_bound(tfprov, stack, tmp_path):  # noqa: F811
    """cudart replaced by a 2 GiB tar.gz bomb of 2.1 MB whose sha256 and size
    the manifest pins: the download verifies; decoding stops at the bound
    (100x its size), exit 5 naming the bomb; nothing placed under the prefix,
    nothing left in decode-ahead's scratch, no more bytes written than the bound."""
    a = stack["arts"]["cuda_cudart"]
    bomb = tar_bomb("cuda_cudart-linux-x86_64-12.3.101-archive")
    text = stack["text"].replace(a["sha"], hashlib.sha256(bomb).hexdigest()).replace(
        "size: %d\n" % a["size"], "size: %d\n" % len(bomb), 1)
    man = tmp_path / "bomb.yaml"
    man.write_text(text)
    cache = tfprov.path("/var/cache/tfprov")
    with _mirror_server(stack, replace=bomb) as srv:
        p, peak, secs = _run_watching(
            tfprov, ["--mirror", srv.url(""), "--no-gpu", "apply", "-y", str(man)],
            tfprov.root, skip={os.path.join(cache, "sha256"), os.path.join(cache, "partial")})
    assert p.returncode == 5, out(p)
    assert "decompression bomb" in out(p) and "cuda_cudart" in out(p), out(p)
    assert re.search(r"more than %d bytes, 100x its %d bytes" % (bound(len(bomb)), len(bomb)),
                     out(p)), out(p)
    assert peak <= bound(len(bomb)) + (1 << 20), (peak, bound(len(bomb)))
    assert not os.path.exists(tfprov.path(PREFIX))
    assert _no_scratch(tfprov) == []
    assert temp_leftovers(tfprov.root) == []
    print("tar bomb: %d bytes, refused after %.1f s, peak %d bytes written" %
          (len(bomb), secs, peak))


def test_pinned_zip_bomb_in_a_wheel_is_exit_5_before_a_byte(tfprov, tmp_path):
    """A 2.1 MB wheel whose one entry is 2 GiB of zeros, pinned by the lock and
    served from a --mirror directory: its directory declares more than its
    bound, so the unpack is refused before a byte of it is written: exit 5
    naming it; the env keeps no trace of the wheel; no scratch left."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    data = wheel_bomb()
    (wheels / "tfprov_bomb-1.0-py3-none-any.whl").write_bytes(data)
    pins = [("tfprov-bomb", "1.0", hashlib.sha256(data).hexdigest())]
    m = manifest(tmp_path / "w.yaml", venv_yaml(),
                 pip_yaml("http://127.0.0.1:9/simple/", pins))
    env_dir = tfprov.path(ENV_PREFIX)
    p, peak, secs = _run_watching(tfprov, ["--mirror", wheels, "apply", "-y", m],
                                  tfprov.root,
                                  skip={tfprov.path("/var/cache/tfprov/sha256")})
    assert p.returncode == 5, out(p)
    m = re.search(r"tfprov_bomb-1\.0-py3-none-any\.whl: .*declares (\d+) bytes unpacked, "
                  r"more than %d " % bound(len(data)), out(p))
    assert m and int(m.group(1)) > GIB2, out(p)
    assert "decompression bomb" in out(p), out(p)
    # The venv itself is some MiB; the bomb never wrote a byte of its 2 GiB.
    assert peak < FLOOR, peak
    sp = [os.path.join(dp, d) for dp, dns, _ in os.walk(tfprov.root) for d in dns
          if d.startswith("tfprov_bomb")]
    assert sp == [], sp
    assert _no_scratch(tfprov) == []
    assert temp_leftovers(tfprov.root) == []
    assert not os.path.exists(os.path.join(env_dir, "lib")) or \
        "tfprov_bomb" not in json.dumps(sorted(os.listdir(env_dir)))
    print("wheel bomb: %d bytes, refused after %.1f s" % (len(data), secs))


def test_no_room_for_the_declared_size_is_refused_before_unpacking(tfprov, stack, tmp_path):  # noqa: F811,E501
    """An unpacked_size larger than the free space under the target (1 TiB here):
    refused before the first byte is unpacked, naming what it needs and what is
    free; nothing placed."""
    a = stack["arts"]["cuda_cudart"]
    text = stack["text"].replace("sha256: %s\n      size: %d\n" % (a["sha"], a["size"]),
                                 "sha256: %s\n      size: %d\n      unpacked_size: %d\n"
                                 % (a["sha"], a["size"], 1 << 40), 1)
    st = os.statvfs(tfprov.root)
    if st.f_bavail * st.f_frsize >= 1 << 40:
        pytest.skip("more than 1 TiB free here")
    man = tmp_path / "room.yaml"
    man.write_text(text)
    with _mirror_server(stack) as srv:
        p = tfprov.run("--mirror", srv.url(""), "--no-gpu", "apply", "-y", str(man),
                       env=no_stub_env(TFPROV_FETCH_RETRIES="0"), timeout=300)
    assert p.returncode == 1, out(p)
    assert re.search(r"needs %d bytes unpacked and \S+ has \d+ bytes free; nothing was "
                     r"unpacked" % (1 << 40), out(p)), out(p)
    assert not os.path.exists(tfprov.path(PREFIX))
    assert _no_scratch(tfprov) == []


def test_the_bound_holds_for_every_shipped_archive(repo):
    """The rule against the data the shipped stacks are pinned from: every
    archive of manifests/data (the redist JSONs' sizes, the pip closures', the
    conda locks') has a bound of at least 3x the largest ratio measured over
    1,548 real archives (32.5x, scripts/unpack-ratios.py) times its size, and the
    shipped manifests' unpacked_size, where given, is at most that bound's
    ratio over their size (a declared size is trusted, but one above the ratio
    would be a manifest worth a second look)."""
    measured = 32.5
    sizes = []
    for dp, _, fns in os.walk(os.path.join(repo, "manifests", "data")):
        for f in fns:
            p = os.path.join(dp, f)
            if f.endswith(".json"):
                for k, v in json.load(open(p)).items():
                    for plat in (v.values() if isinstance(v, dict) else ()):
                        if isinstance(plat, dict) and "size" in plat and \
                                "relative_path" in plat:
                            sizes.append((f + ":" + k, int(plat["size"])))
            elif f.endswith(".tsv"):
                rows = open(p).read().splitlines()
                head = rows[0].split("\t")
                if "size" in head:
                    i = head.index("size")
                    for r in rows[1:]:
                        c = r.split("\t")
                        if len(c) > i and c[i].isdigit():
                            sizes.append((f + ":" + c[0], int(c[i])))
    assert len(sizes) > 500, len(sizes)
    for name, size in sizes:
        assert bound(size) >= 3 * measured * size, name
    for m in os.listdir(os.path.join(repo, "manifests")):
        if m.endswith(".yaml"):
            text = open(os.path.join(repo, "manifests", m)).read()
            for size, unpacked in re.findall(r"size: (\d+)\n\s+unpacked_size: (\d+)", text):
                assert int(unpacked) <= bound(int(size)), (m, size, unpacked)

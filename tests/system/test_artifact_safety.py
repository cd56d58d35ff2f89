"""Artifact safety through the real binary: tampered bytes, truncation,
malicious archives, kill -9 during placement.

STAND-INS: the CUDA 12.3.2 / cuDNN 8.9.7.29 archives hold stub libraries with
NVIDIA's sonames (make_stack.py); no GPU here, so applies run with --no-gpu.
The faults are real: lib_http serves flipped or short bytes on loopback, the
malicious archives are real tar.xz files built with Python's tarfile and pinned
by their real sha256, and the kill is a real SIGKILL of the tfprov process, at a
point named by its own operations (lib_killpoint.py).
"""
import hashlib
import io
import os
import re
import signal
import tarfile

import pytest

import lib_killpoint
from lib_provision import (SIDE_FILES, Mirror, db_rows, missing_recorded, no_stub_env, out,
                           recorded_files, temp_leftovers, tree_hashes)

ENV = no_stub_env()
PREFIX = "/opt/tfprov/cuda/12.3.2"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("safety")
    with Mirror(d / "www") as m:
        m.manifest = m.stack(d / "demo.yaml", name="demo")
        m.text = open(m.manifest).read()
        m.tmp = d
        yield m


def _cudart(mirror):
    """(served path, url, sha256, size) of the cuda_cudart artifact of the manifest."""
    m = re.search(r"- name: cuda_cudart\n\s+url: (\S+)\n\s+sha256: (\S+)\n\s+size: (\d+)",
                  mirror.text)
    url, sha, size = m.group(1), m.group(2), int(m.group(3))
    return url[len(mirror.url):], url, sha, size


def _snapshot(tfprov):
    """The root outside var/ (state and cache), the recorded resources and files."""
    return ({k: v for k, v in tree_hashes(tfprov.root).items()
             if k != "var" and not k.startswith("var/")},
            db_rows(tfprov, "SELECT stack_id, addr, desired FROM resources"),
            recorded_files(tfprov))


def _apply(tfprov, manifest, env=None, **kw):
    return tfprov.run("--no-gpu", "apply", "-y", manifest, env=env or ENV, **kw)


def test_wrong_bytes_exit5_quarantined(tfprov, mirror):
    """The server flips one byte of cuda_cudart (same size): exit 5 naming
    expected and actual sha256, size and URL; nothing under the prefix; state
    unchanged; the bad bytes quarantined in the cache, not in the cache proper."""
    path, url, sha, size = _cudart(mirror)
    with open(os.path.join(mirror.dir, path.lstrip("/")), "rb") as f:
        data = bytearray(f.read())
    data[size // 2] ^= 0xFF
    bad_sha = hashlib.sha256(bytes(data)).hexdigest()
    before = _snapshot(tfprov)
    mirror.srv.fault(path, "wrong")
    try:
        p = _apply(tfprov, mirror.manifest)
    finally:
        mirror.srv.faults.pop(path, None)
    text = out(p)
    assert p.returncode == 5, text
    assert sha in text and bad_sha in text, text
    assert url in text and str(size) in text, text
    assert not os.path.exists(tfprov.path(PREFIX))
    assert _snapshot(tfprov) == before
    # A failed attempt may be kept as history, but only as a failed generation.
    assert {r for (r,) in db_rows(tfprov, "SELECT result FROM generations")} <= {"failed"}
    q = tfprov.path("/var/cache/tfprov/quarantine")
    qfiles = os.listdir(q)
    assert any(f.startswith(sha) for f in qfiles), qfiles
    qf = [os.path.join(q, f) for f in qfiles if f.startswith(sha)][0]
    with open(qf, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == bad_sha
    for dp, _, fs in os.walk(tfprov.path("/var/cache/tfprov")):
        if "quarantine" in dp:
            continue
        for fn in fs:
            with open(os.path.join(dp, fn), "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() != bad_sha, fn
    assert temp_leftovers(tfprov.root) == []
    # The server is fixed: the next apply converges.
    assert _apply(tfprov, mirror.manifest).returncode == 0


def test_modified_file_old_hash_exit5(tfprov, mirror, tmp_path):
    """A mirror file replaced by different bytes of a different size, while the
    manifest keeps the old hash and size: exit 5, a size mismatch naming the URL
    and the expected sha256; nothing placed."""
    path, url, sha, size = _cudart(mirror)
    other = tmp_path / "www"
    other.mkdir()
    with Mirror(other) as m2:
        rel = path.lstrip("/")
        os.makedirs(os.path.join(m2.dir, os.path.dirname(rel)))
        with open(os.path.join(m2.dir, rel), "wb") as f:
            f.write(b"not the archive NVIDIA published\n" * 100)
        man = tmp_path / "m.yaml"
        man.write_text(mirror.text.replace(url, m2.url + path))
        p = _apply(tfprov, man)
    assert p.returncode == 5, out(p)
    assert sha in out(p) and (m2.url + path) in out(p) and str(size) in out(p)
    assert not os.path.exists(tfprov.path(PREFIX))
    assert db_rows(tfprov, "SELECT count(*) FROM files") in ([], [(0,)])


def test_truncated_download_is_truncation_not_tampering(tfprov, mirror):
    """The server sends half the archive with a Content-Length of half (looks
    complete): exit 5 reported as a size mismatch / truncation, not as a content
    (sha256) mismatch; nothing placed."""
    path, url, sha, size = _cudart(mirror)
    mirror.srv.fault(path, "short")
    try:
        p = _apply(tfprov, mirror.manifest)
    finally:
        mirror.srv.faults.pop(path, None)
    text = out(p)
    assert p.returncode == 5, text
    assert "truncated" in text and str(size // 2) in text and str(size) in text, text
    assert "sha256 mismatch" not in text and "content differs" not in text, text
    assert not os.path.exists(tfprov.path(PREFIX))


def test_connection_cut_every_time_is_not_integrity(tfprov, mirror):
    """The server closes every response half-way (full Content-Length): a
    network failure after retries, not exit 5 and never "tampering"; nothing
    placed."""
    path, url, sha, size = _cudart(mirror)
    mirror.srv.fault(path, "truncate")
    try:
        p = _apply(tfprov, mirror.manifest, env=dict(ENV, TFPROV_FETCH_RETRIES="1"))
    finally:
        mirror.srv.faults.pop(path, None)
    assert p.returncode not in (0, 5), out(p)
    assert "sha256 mismatch" not in out(p)
    assert not os.path.exists(tfprov.path(PREFIX))


def _evil_archive(kind):
    buf = io.BytesIO()
    top = "cuda_cudart-linux-x86_64-12.3.101-archive"
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        def add(name, data=b"x\n", **attrs):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            for k, v in attrs.items():
                setattr(ti, k, v)
            t.addfile(ti, io.BytesIO(data) if ti.type == tarfile.REGTYPE else None)
        d = tarfile.TarInfo(top)
        d.type = tarfile.DIRTYPE
        d.mode = 0o755
        t.addfile(d)
        add(f"{top}/LICENSE")
        if kind == "absolute":
            add("/tmp/tfprov-evil-absolute")
        elif kind == "dotdot":
            add(f"{top}/../../../../../../tmp/tfprov-evil-dotdot")
        elif kind == "symlink":
            add(f"{top}/lib", type=tarfile.SYMTYPE, linkname="../../../../../../../../tmp")
            add(f"{top}/lib/tfprov-evil-symlink")
        elif kind == "abs-symlink":
            add(f"{top}/esc", type=tarfile.SYMTYPE, linkname="/etc")
            add(f"{top}/esc/tfprov-evil-abs-symlink")
        elif kind == "device":
            add(f"{top}/lib/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3, size=0)
        elif kind == "hardlink":
            add(f"{top}/shadow", type=tarfile.LNKTYPE, linkname="/etc/shadow", size=0)
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink", "abs-symlink", "device",
                                  "hardlink"])
def test_malicious_archive_refused(tfprov, mirror, tmp_path, kind):
    """A cuda archive pinned with its real hash but holding a hostile entry
    (absolute path, '..', a symlink escaping the target, a device node, a hard
    link out): exit 5, nothing placed under the prefix or outside the root."""
    data = _evil_archive(kind)
    sha, size = hashlib.sha256(data).hexdigest(), len(data)
    path, url, old_sha, old_size = _cudart(mirror)
    evil_path = f"/evil/{kind}.tar.xz"
    mirror.srv.add(evil_path, data)
    text = (mirror.text.replace(url, mirror.url + evil_path).replace(old_sha, sha)
            .replace(f"size: {old_size}\n", f"size: {size}\n", 1))
    man = tmp_path / "evil.yaml"
    man.write_text(text)
    for n in ("absolute", "dotdot", "symlink"):
        assert not os.path.exists(f"/tmp/tfprov-evil-{n}")
    p = _apply(tfprov, man)
    assert p.returncode == 5, out(p)
    assert "cuda_cudart" in out(p) and "sha256 mismatch" not in out(p), out(p)
    assert re.search(r"refus|unsafe|outside|absolute|device|\.\.", out(p)), out(p)
    assert not os.path.exists(tfprov.path(PREFIX))
    for n in ("absolute", "dotdot", "symlink"):
        assert not os.path.exists(f"/tmp/tfprov-evil-{n}"), "escaped the target!"
    assert not os.path.exists("/etc/tfprov-evil-abs-symlink")
    assert temp_leftovers(tfprov.root) == []
    assert db_rows(tfprov, "SELECT count(*) FROM files") in ([], [(0,)])


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    with Mirror(d / "www") as m:
        m.manifest = m.stack(d / "big.yaml", name="big", extra_files=3000)
        yield m


@pytest.mark.parametrize("where", [0.0, 0.5, 0.98])
def test_kill9_during_placement_converges(tfprov, big, where, tmp_path):
    """SIGKILL of tfprov at a point of its own operations on the CUDA prefix
    (lib_killpoint: the first, the middle or near the last of the reference
    run's, with --jobs 1 so that the main thread's operations come in one
    order), i.e. while the 3000-file CUDA archive is unpacked or placed: the
    next apply converges, no .tfprov-* temp/stage dirs are left, every
    recorded file exists, verify passes, and a third apply has nothing to do."""
    # Warm the cache so the kill lands in unpack/placement, not the download.
    warm = tfprov.run("--no-gpu", "apply", "-y", big.manifest, env=ENV)
    assert warm.returncode == 0, out(warm)
    d = tfprov.run("destroy", "big", "-y", env=ENV)
    assert d.returncode == 0, out(d)
    argv = [tfprov.bin, "--root", tfprov.root, "--no-gpu", "--jobs", "1", "apply", "-y",
            big.manifest]
    e = dict(os.environ, **ENV)
    kp = lib_killpoint.Killer(tmp_path / "kp", skip=[lib_killpoint.scratch(tfprov.root)])
    restore = lib_killpoint.saved_root(tfprov.root, tmp_path / "saved-root")
    ref, events = kp.points(argv, e)
    assert ref.returncode == 0, out(ref)
    restore()
    cuda = [i for i, ev in enumerate(events)
            if ev.role == "tfprov#1" and "/opt/tfprov/cuda" in ev.arg]
    assert len(cuda) > 3000, len(cuda)
    want = events[cuda[0] + int(where * (cuda[-1] - cuda[0]))]
    rc, hit = kp.run_to(argv, e, want.point)
    assert hit is not None and hit.op == want.op and rc == -signal.SIGKILL, (rc, hit, want)
    p = tfprov.run("--no-gpu", "apply", "-y", big.manifest, env=ENV)
    assert p.returncode == 0, out(p)
    assert temp_leftovers(tfprov.root) == []
    assert missing_recorded(tfprov) == []
    n = len([f for f in recorded_files(tfprov, "big") if "/include/extra/" in f[0]])
    assert n >= 3000
    v = tfprov.run("--no-gpu", "verify", "big", env=ENV)
    assert v.returncode == 0, out(v)
    again = tfprov.run("--no-gpu", "apply", "-y", big.manifest, env=ENV)
    assert again.returncode == 0 and "No changes" in again.stdout, out(again)

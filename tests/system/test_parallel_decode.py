"""Archives decoded on several threads (--jobs) and verify --deep on all cores.

What the machine looks like: a fresh --root sandbox, no GPU; a loopback
HttpServer serving make_stack.py's NVIDIA-layout CUDA archives (stand-in
libraries with the real sonames, several components) and a cuDNN archive.
What is run: tfprov apply with --jobs 1 and with the default (one decoder per
core), verify --deep with --jobs 1 and 2.
What must hold: the same files, modes and state whatever the number of
decoders; one archive that does not verify fails the step with nothing
placed; verify --deep reports the same findings in the same order however
many threads hash.
"""
import os
import sqlite3

import pytest

from lib_http import HttpServer
from lib_stack import make_stack, out, real_no_gpu_env
from conftest import Tfprov

CUDA = "/opt/tfprov/cuda/12.3.2"


@pytest.fixture
def mirror(tmp_path):
    d = tmp_path / "mirror"
    d.mkdir()
    with HttpServer(root=str(d)) as srv:
        yield srv


def stack(tmp_path, srv):
    return make_stack(srv.root, srv, tmp_path / "stack.yaml", policy="skip")


def tree(root):
    """{relative path: (kind, mode, sha-ish content)} of everything under root."""
    res = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if os.path.islink(p):
                v = ("l", os.readlink(p))
            elif os.path.isdir(p):
                v = ("d", st.st_mode)
            else:
                v = ("f", st.st_mode, st.st_size, st.st_mtime_ns, open(p, "rb").read())
            res[os.path.relpath(p, root)] = v
    return res


def files_table(t):
    db = sqlite3.connect(t.state_db)
    try:
        return sorted(db.execute("SELECT path, type, mode, size, sha256, link FROM files"))
    finally:
        db.close()


def test_jobs_1_and_default_place_the_same(tmp_path, mirror):
    m = stack(tmp_path, mirror)
    roots = []
    for name, jobs in (("one", ["--jobs", "1"]), ("all", []), ("many", ["--jobs", "8"])):
        (tmp_path / name).mkdir()
        t = Tfprov(tmp_path / name)
        p = t.run(*jobs, "--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), timeout=300)
        assert p.returncode == 0, out(p)
        t.run("--no-gpu", "verify", "--deep", env=real_no_gpu_env(), check=0)
        roots.append(t)
    first = tree(roots[0].path(CUDA))
    assert any(k.startswith("lib/libcublas") for k in first), sorted(first)[:20]
    for t in roots[1:]:
        assert tree(t.path(CUDA)) == first
        assert files_table(t) == files_table(roots[0])


def test_one_archive_that_does_not_verify_places_nothing(tmp_path, mirror):
    """The largest archive is decoded first and the others at the same time; one
    archive whose bytes differ from the lock fails the step (exit 5) and nothing
    of any archive reaches the prefix or the state."""
    m = stack(tmp_path, mirror)
    arcs = []
    for d, _, fs in os.walk(mirror.root):
        arcs += [os.path.join(d, f) for f in fs if f.endswith(".tar.xz") and "cublas" in f]
    assert arcs
    data = bytearray(open(arcs[0], "rb").read())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    open(arcs[0], "wb").write(bytes(data))
    for jobs in (["--jobs", "1"], ["--jobs", "4"]):
        root = tmp_path / ("r" + "".join(jobs))
        root.mkdir()
        t = Tfprov(root)
        p = t.run(*jobs, "--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), timeout=300)
        assert p.returncode == 5, out(p)
        assert "sha256 mismatch" in out(p) or "content differs" in out(p), out(p)
        assert not os.path.exists(t.path(CUDA)), os.listdir(t.path("/opt/tfprov"))
        if os.path.exists(t.state_db):
            assert files_table(t) == []


def test_deep_verify_same_findings_on_any_number_of_threads(tfprov, tmp_path, mirror):
    m = stack(tmp_path, mirror)
    tfprov.run("--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), timeout=300, check=0)
    libdir = tfprov.path(CUDA + "/lib")
    regular = sorted(f for f in os.listdir(libdir)
                     if not os.path.islink(os.path.join(libdir, f)))
    assert len(regular) >= 4, regular
    changed = regular[:3]
    for f in changed:  # same size, same mtime: only a rehash sees it
        p = os.path.join(libdir, f)
        st = os.stat(p)
        data = bytearray(open(p, "rb").read())
        data[-1] ^= 0x01
        open(p, "wb").write(bytes(data))
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    # A directory where a file was: cannot be read as a file, still a finding.
    gone = os.path.join(libdir, regular[3])
    os.unlink(gone)
    os.mkdir(gone, 0o755)
    tfprov.run("--no-gpu", "verify", env=real_no_gpu_env(), check=8)
    lines = {}
    for jobs in ("1", "2", "16"):
        p = tfprov.run("--jobs", jobs, "--no-gpu", "verify", "--deep", env=real_no_gpu_env(),
                       check=8)
        lines[jobs] = [ln for ln in p.stderr.splitlines() if " U " in f" {ln} "
                       or ln.lstrip().startswith(("U ", "M "))]
    assert lines["1"] == lines["2"] == lines["16"], lines
    text = "\n".join(lines["1"])
    for f in changed + [regular[3]]:
        assert f"U {CUDA}/lib/{f}" in text, (f, text)
    # apply's fast (stat) check repairs the directory; edits with the recorded
    # size and mtime stay invisible to it by design, and --deep still names them
    # (drift alone, the libraries load again: exit 2).
    tfprov.run("--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), timeout=300, check=0)
    assert os.path.isfile(gone)
    for jobs in ("1", "2"):
        p = tfprov.run("--jobs", jobs, "--no-gpu", "verify", "--deep", env=real_no_gpu_env(),
                       check=2)
        assert sorted(ln.split()[-1] for ln in p.stderr.splitlines() if ": U /" in ln) == \
            [f"{CUDA}/lib/{f}" for f in changed], p.stderr

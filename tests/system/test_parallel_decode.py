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
import fcntl
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time

import pytest

from lib_stack import make_stack, out, real_no_gpu_env
from conftest import Tfprov

CUDA = "/opt/tfprov/cuda/12.3.2"


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
        assert sorted(ln.split(": U ")[1].split()[0] for ln in p.stderr.splitlines()
                      if ": U /" in ln) == \
            [f"{CUDA}/lib/{f}" for f in changed], p.stderr


# ------------------------------------------------- decode-ahead during prefetch
# Every archive of every changing step (CUDA's and cuDNN's) is decoded while it
# downloads, by one pool, into a scratch directory in the cache
# (<cache>/unpack/run-XXXXXX/<sha256>, held by run-XXXXXX.lock); the steps then
# rename the trees into their stage. Nothing reaches the root before every
# download verified.


def events(p):
    return [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]


def first(evs, pred):
    return next((k for k, e in enumerate(evs) if pred(e)), None)


def scratch(cache):
    d = os.path.join(cache, "unpack")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def snapshot(root):
    """Everything under root, byte for byte (paths, kinds, modes, contents)."""
    res = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            res[os.path.relpath(p, root)] = (
                st.st_mode, os.readlink(p) if os.path.islink(p) else
                None if os.path.isdir(p) else open(p, "rb").read())
    return res


def test_cudnn_decodes_before_cuda_is_placed_same_result(tmp_path, mirror):
    """cuDNN's archive is decoded alongside CUDA's, before the cuda step places
    anything (one pool over both steps), and the result is what --jobs 1 makes."""
    m = stack(tmp_path, mirror)
    roots = []
    for name, jobs in (("one", ["--jobs", "1"]), ("two", ["--jobs", "2"])):
        (tmp_path / name).mkdir()
        t = Tfprov(tmp_path / name)
        cache = str(tmp_path / (name + "-cache"))
        p = t.run(*jobs, "--cache-dir", cache, "--json", "--no-gpu", "apply", "-y", m,
                  env=real_no_gpu_env(), timeout=300)
        assert p.returncode == 0, out(p)
        evs = events(p)
        cudnn_unpack = first(evs, lambda e: e["type"] == "progress" and e.get("step") == "unpack"
                             and e.get("item", "").startswith("cudnn"))
        cuda_start = first(evs, lambda e: e["type"] == "apply_start" and e.get("step") == "cuda")
        cuda_done = first(evs, lambda e: e["type"] == "apply_complete" and e.get("step") == "cuda")
        assert cudnn_unpack is not None and cuda_done is not None, evs
        assert cudnn_unpack < cuda_start < cuda_done, (cudnn_unpack, cuda_start, cuda_done)
        # Every archive was decoded once, in prefetch: none while a step ran.
        step_start = first(evs, lambda e: e["type"] == "apply_start")
        late = [e for e in evs[step_start:]
                if e["type"] == "progress" and e.get("step") == "unpack"]
        assert late == [], late
        # The scratch was taken over or removed: nothing left in the cache.
        assert scratch(cache) == [], scratch(cache)
        roots.append(t)
    for prefix in (CUDA, "/opt/tfprov"):
        # stacks/: the env step's scripts, written (not decoded) at each apply's own
        # time; the files table below compares their contents.
        def decoded(t):
            return {k: v for k, v in tree(t.path(prefix)).items()
                    if not k.startswith("stacks")}
        assert decoded(roots[1]) == decoded(roots[0])
    assert files_table(roots[1]) == files_table(roots[0])
    assert any(r[0].endswith("include/cudnn.h") for r in files_table(roots[0]))


def test_bad_cudnn_hash_after_cuda_decoded_changes_nothing(tmp_path, mirror):
    """The cuDNN archive does not verify while CUDA's archives were already
    decoded (into the cache's scratch): exit 5, the root exactly as before (no
    state db, no prefix), and no scratch left in the cache."""
    m = stack(tmp_path, mirror)
    arcs = []
    for d, _, fs in os.walk(mirror.root):
        arcs += [os.path.join(d, f) for f in fs if f.endswith(".tar.xz") and "cudnn-" in f]
    assert len(arcs) == 1, arcs
    data = bytearray(open(arcs[0], "rb").read())
    data[-100] ^= 0xFF  # same size, other content, noticed at the end of the download
    open(arcs[0], "wb").write(bytes(data))
    for jobs in (["--jobs", "1"], ["--jobs", "4"]):
        root = tmp_path / ("r" + "".join(jobs))
        root.mkdir()
        (root / "etc").mkdir()
        (root / "etc" / "keep").write_text("untouched\n")
        before = snapshot(str(root))
        cache = str(tmp_path / ("cache" + "".join(jobs)))
        t = Tfprov(root)
        p = t.run(*jobs, "--cache-dir", cache, "--json", "--no-gpu", "apply", "-y", m,
                  env=real_no_gpu_env(), timeout=300)
        assert p.returncode == 5, out(p)
        assert "sha256 mismatch" in out(p) or "content differs" in out(p), out(p)
        evs = events(p)
        decoded = [e["item"] for e in evs if e["type"] == "progress" and e.get("step") == "unpack"
                   and e["total"] and e["done"] == e["total"]]
        assert any(i.startswith(("libcublas", "cuda_")) for i in decoded), decoded
        assert not [e for e in evs if e["type"] == "apply_start"], evs
        assert snapshot(str(root)) == before
        assert not os.path.exists(t.state_db)
        assert scratch(cache) == [], scratch(cache)


def test_stale_scratch_of_a_killed_run_is_removed(tmp_path, mirror):
    """A killed run's scratch (its lock held by nobody), or a run directory whose
    lock is gone, is removed by the next apply; a live run's (lock held) is not."""
    m = stack(tmp_path, mirror)
    cache = tmp_path / "cache"
    unpack = cache / "unpack"
    unpack.mkdir(parents=True)
    for name in ("run-killed", "run-orphan", "run-live"):
        (unpack / name / ("0" * 64) / "lib").mkdir(parents=True)
        (unpack / name / ("0" * 64) / "lib" / "libx.so").write_bytes(b"x" * 4096)
    (unpack / "run-killed.lock").write_bytes(b"")
    (unpack / "run-live.lock").write_bytes(b"")
    with open(unpack / "run-live.lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        (tmp_path / "root").mkdir()
        t = Tfprov(tmp_path / "root")
        p = t.run("--cache-dir", str(cache), "--no-gpu", "apply", "-y", m,
                  env=real_no_gpu_env(), timeout=300)
        assert p.returncode == 0, out(p)
        assert scratch(str(cache)) == ["run-live", "run-live.lock"], scratch(str(cache))


def test_cache_on_another_filesystem_than_the_root(tmp_path, mirror):
    """A cache on another filesystem than the root: its trees could not be renamed
    into a stage, so nothing is decoded ahead; the steps unpack as before, with
    the same result."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or os.stat(shm).st_dev == os.stat(str(tmp_path)).st_dev:
        pytest.skip("no second filesystem for the cache")
    m = stack(tmp_path, mirror)
    cache = tempfile.mkdtemp(prefix="tfprov-xdev-", dir=shm)
    try:
        roots = []
        for name, c in (("same", str(tmp_path / "cache")), ("xdev", cache)):
            (tmp_path / name).mkdir()
            t = Tfprov(tmp_path / name)
            p = t.run("-v", "--cache-dir", c, "--no-gpu", "apply", "-y", m,
                      env=real_no_gpu_env(), timeout=300)
            assert p.returncode == 0, out(p)
            ahead = "unpacked ahead, moved into" in out(p)
            assert ahead == (name == "same"), out(p)
            assert ("another filesystem than the root" in out(p)) == (name == "xdev"), out(p)
            assert scratch(c) == [], scratch(c)
            roots.append(t)
        assert tree(roots[1].path(CUDA)) == tree(roots[0].path(CUDA))
        assert files_table(roots[1]) == files_table(roots[0])
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_prefix_on_another_filesystem_decodes_again(tmp_path, mirror):
    """The root and the cache on one filesystem, /opt in the root on another (a
    tmpfs mounted in a private mount namespace): renaming a tree decoded ahead
    into the stage fails (EXDEV), and the step unpacks the verified cache file
    again, with the same result."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespaces here")
    m = stack(tmp_path, mirror)
    (tmp_path / "ref").mkdir()
    ref = Tfprov(tmp_path / "ref")
    ref.run("--cache-dir", str(tmp_path / "ref-cache"), "--no-gpu", "apply", "-y", m,
            env=real_no_gpu_env(), timeout=300, check=0)
    (tmp_path / "x" / "opt").mkdir(parents=True)
    t = Tfprov(tmp_path / "x")
    cache = str(tmp_path / "x-cache")
    copy = tmp_path / "x-opt"
    argv = [t.bin, "--root", t.root, "-v", "--cache-dir", cache, "--no-gpu", "apply", "-y", m]
    script = ('mount -t tmpfs tfprov-test "$1" && shift && "$@"; rc=$?; '
              f'cp -a "{t.root}/opt" "{copy}"; exit $rc')
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", t.path("/opt"), *argv],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **real_no_gpu_env()))
    assert p.returncode == 0, out(p)
    assert "unpacking it again" in out(p), out(p)
    assert "unpacked ahead, moved into" not in out(p), out(p)
    assert scratch(cache) == [], scratch(cache)
    assert tree(str(copy) + CUDA[len("/opt"):]) == tree(ref.path(CUDA))
    assert files_table(t) == files_table(ref)


def run_until_decoded_ahead(t, m, cache, mirror):
    """Starts an apply whose cuDNN download is slow; returns (proc, run dir) once a
    CUDA archive has been decoded ahead into the cache's scratch."""
    for d, _, fs in os.walk(mirror.root):
        for f in fs:
            if f.startswith("cudnn-") and f.endswith(".tar.xz"):
                # ~10 KB at 2 KB/s (above the 1 KiB/s stall limit): the download
                # outlasts the decoding of CUDA's stand-ins.
                mirror.rate["/" + os.path.relpath(os.path.join(d, f), mirror.root)] = 2000
    proc = subprocess.Popen([t.bin, "--root", t.root, "--cache-dir", cache, "--no-gpu",
                             "apply", "-y", m], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, **real_no_gpu_env()))
    unpack = os.path.join(cache, "unpack")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        runs = [r for r in scratch(cache) if not r.endswith(".lock")]
        if runs and len(os.listdir(os.path.join(unpack, runs[0]))) >= 2:
            return proc, os.path.join(unpack, runs[0])
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(("nothing decoded ahead", proc.communicate()))


def test_sigint_during_decode_ahead_changes_nothing(tmp_path, mirror):
    m = stack(tmp_path, mirror)
    (tmp_path / "root").mkdir()
    t = Tfprov(tmp_path / "root")
    cache = str(tmp_path / "cache")
    proc, run = run_until_decoded_ahead(t, m, cache, mirror)
    proc.send_signal(signal.SIGINT)
    o, e = proc.communicate(timeout=30)
    assert proc.returncode == 130, (proc.returncode, o, e)
    assert os.listdir(t.root) == [], os.listdir(t.root)  # no state, no prefix
    assert scratch(cache) == [], scratch(cache)


def test_scratch_of_a_killed_run_is_removed_by_the_next(tmp_path, mirror):
    m = stack(tmp_path, mirror)
    (tmp_path / "root").mkdir()
    t = Tfprov(tmp_path / "root")
    cache = str(tmp_path / "cache")
    proc, run = run_until_decoded_ahead(t, m, cache, mirror)
    proc.kill()
    proc.communicate(timeout=30)
    assert os.path.isdir(run) and os.path.exists(run + ".lock")
    # No state, no prefix: only the writer lock that a kill -9 gave no chance to
    # remove (its flock died with the process; ARCHITECTURE.md section 6).
    left = [os.path.relpath(os.path.join(d, f), t.root) for d, _, fs in os.walk(t.root)
            for f in fs]
    assert left == ["var/lib/tfprov/lock"], left
    mirror.rate.clear()
    p = t.run("--cache-dir", cache, "--no-gpu", "apply", "-y", m, env=real_no_gpu_env(),
              timeout=300)
    assert p.returncode == 0, out(p)
    assert scratch(cache) == [], scratch(cache)
    assert os.path.isfile(t.path(CUDA + "/include/cudnn.h"))

"""Concurrent runs: one writer per root from its first fetch; one writer per artifact per cache.

What the machine looks like: a loopback HTTP mirror serving the CUDA 12.3.2 +
cuDNN 8.9.7.29 stack of make_stack.py (STAND-IN libraries with NVIDIA's
sonames, driver policy skip, --no-gpu), throttled per request so that a
download takes a few seconds and a second run surely starts while the first
is fetching.
What is run and what must hold:
  - two `apply` of one manifest on a fresh root, a moment apart: the second
    exits 4 while the first is still fetching, naming the first (its pid, host
    and start time), and fetches nothing; `destroy --lock-timeout 2` meanwhile
    also exits 4 (not 0); the first then succeeds and each archive was
    requested once;
  - a writer stopped before it created any state (here: a lock held by another
    run, then a fresh root whose downloads all fail) leaves no lock file and
    no directory it made for it;
  - two `apply` into two roots sharing one --cache-dir, started together: both
    succeed, each archive was requested once (one process downloads it, the
    other waits for it and reads the verified result), and nothing is left in
    the cache's partial/ directory.
"""
import os
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lib_provision import Mirror, missing_recorded, no_stub_env, out, temp_leftovers

RATE = 4000  # bytes/s per request: the 10 KB cuDNN archive takes 2.5 s


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("mirror")
    with Mirror(d / "www") as m:
        m.manifest = m.stack(d / "demo.yaml", name="demo", driver_policy="skip")
        m.archives = sorted("/" + os.path.relpath(os.path.join(dp, f), m.dir)
                            for dp, _, fs in os.walk(m.dir) for f in fs
                            if f.endswith(".tar.xz"))
        yield m


def _slow(mirror):
    mirror.srv.requests.clear()
    mirror.srv.default_rate = RATE


def _start(tfprov, *args, cache=None):
    argv = [tfprov.bin, "--root", tfprov.root]
    if cache:
        argv += ["--cache-dir", cache]
    env = dict(os.environ, **no_stub_env())
    return subprocess.Popen(argv + ["--no-gpu", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_first_request(mirror, proc):
    deadline = time.monotonic() + 30
    while not mirror.srv.requests:
        assert proc.poll() is None, "the first apply ended before fetching: " + \
            "".join(proc.communicate())
        assert time.monotonic() < deadline, "the first apply never fetched"
        time.sleep(0.02)


def test_second_apply_on_fresh_root_exits_4_naming_the_first(tfprov, mirror):
    _slow(mirror)
    first = _start(tfprov, "apply", "-y", mirror.manifest)
    try:
        _wait_for_first_request(mirror, first)
        second = tfprov.run("--no-gpu", "apply", "-y", mirror.manifest, env=no_stub_env())
        destroy = tfprov.run("--lock-timeout", "2", "destroy", "-y", "demo", env=no_stub_env())
        # status, a reader, says an apply is running rather than "No stacks"
        status = tfprov.run("status")
        assert first.poll() is None, "the first apply finished too early to prove anything"
    finally:
        o, e = first.communicate(timeout=120)
    assert second.returncode == 4, out(second)
    assert "locked by another tfprov run" in second.stderr, second.stderr
    assert f"pid {first.pid} on " in second.stderr and " since " in second.stderr, second.stderr
    assert destroy.returncode == 4, out(destroy)
    assert f"pid {first.pid} on " in destroy.stderr, destroy.stderr
    assert status.returncode == 0, out(status)
    assert f"An apply is running under {tfprov.root} (pid {first.pid} on " in status.stdout, \
        out(status)
    assert "No stacks" not in status.stdout and "No stack is recorded yet" in status.stdout
    assert first.returncode == 0, o + e
    p = tfprov.run("status")  # finished: no word of a running apply
    assert "is running" not in p.stdout and "demo" in p.stdout, out(p)
    # Only the first fetched: every archive requested once, whole.
    for a in mirror.archives:
        assert mirror.srv.count(a) == 1, (a, mirror.srv.requests)
    assert missing_recorded(tfprov) == []
    assert temp_leftovers(tfprov.root) == []
    tfprov.run("verify", "--deep", check=0)
    # The lock file now names the run that held it last: the first apply.
    with open(tfprov.path("/var/lib/tfprov/lock")) as f:
        assert f.read().startswith(f"pid {first.pid} on ")


def test_writer_without_state_leaves_no_lock_behind(tfprov, tmp_path):
    """A fresh root whose every download fails (a dead origin): exit 1 before any
    state exists, and the root holds nothing of the lock, only the cache the
    attempt used (given outside the root here, so the root stays empty)."""
    m = tmp_path / "dead.yaml"
    # The CUDA archives of the shipped stable-2.15 (TF loads every one of them,
    # so validate passes), each at a dead origin.
    import yaml
    with open(os.path.join(REPO, "manifests", "stable-2.15.yaml")) as f:
        shipped = yaml.safe_load(f)
    arts = [dict(a, url="http://127.0.0.1:1/" + a["url"].rsplit("/", 1)[1])
            for a in shipped["cuda"]["artifacts"]]
    m.write_text(yaml.safe_dump({
        "schema": 1,
        "stack": {"name": "dead", "platform": "linux-x86_64"},
        "versions": {"tensorflow": "2.15.1", "cuda": "12.3.2"},
        "driver": {"policy": "skip"},
        "cuda": {"version": "12.3.2", "artifacts": arts},
    }, sort_keys=False))
    env = no_stub_env(TFPROV_FETCH_RETRIES=0, TFPROV_FETCH_BACKOFF_MS=1)
    p = tfprov.run("--no-gpu", "--cache-dir", str(tmp_path / "cache"), "apply", "-y", str(m),
                   env=env)
    assert p.returncode not in (0, 4), out(p)
    assert "cannot download" in out(p), out(p)
    assert os.listdir(tfprov.root) == [], "a run that created no state left its lock behind"
    # destroy on a fresh root: no such stack, and no trace either.
    tfprov.run("destroy", "-y", "dead", check=1)
    assert os.listdir(tfprov.root) == []


def test_two_roots_one_cache_each_artifact_fetched_once(tmp_path, mirror):
    from conftest import Tfprov
    _slow(mirror)
    cache = str(tmp_path / "shared-cache")
    roots = []
    for n in ("a", "b"):
        (tmp_path / n).mkdir()
        roots.append(Tfprov(tmp_path / n))
    procs = [_start(r, "apply", "-y", mirror.manifest, cache=cache) for r in roots]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for a in mirror.archives:
        assert mirror.srv.count(a) == 1, (a, mirror.srv.requests)
    waited = [o + e for o, e in outs if "another tfprov run is downloading" in o + e]
    assert waited, "neither run waited for the other's download: the test proved nothing"
    for r in roots:
        assert missing_recorded(r) == []
        r.run("verify", "--deep", check=0)
    assert os.listdir(os.path.join(cache, "partial")) == []
    assert len(os.listdir(os.path.join(cache, "sha256"))) == len(mirror.archives)


def test_cache_entry_emptied_by_a_power_cut_is_fetched_again(tmp_path, mirror):
    """A download enters sha256/ by rename without an fdatasync; after a power cut
    the name can be there with its bytes lost (test_power_loss.py found it: an
    empty file). The next run quarantines it and downloads it again, rather than
    failing with exit 5 as if the manifest's size were wrong."""
    from conftest import Tfprov
    mirror.srv.default_rate = 0
    cache = str(tmp_path / "cache")
    (tmp_path / "r1").mkdir()
    (tmp_path / "r2").mkdir()
    Tfprov(tmp_path / "r1").run("--no-gpu", "--cache-dir", cache, "apply", "-y",
                                mirror.manifest, env=no_stub_env(), check=0)
    victim = max(os.listdir(os.path.join(cache, "sha256")),
                 key=lambda n: os.path.getsize(os.path.join(cache, "sha256", n)))
    path = os.path.join(cache, "sha256", victim)
    os.chmod(path, 0o644)
    open(path, "wb").close()  # what the disk kept: the name, not the bytes
    os.chmod(path, 0o444)
    mirror.srv.requests.clear()
    p = Tfprov(tmp_path / "r2").run("--no-gpu", "--cache-dir", cache, "apply", "-y",
                                    mirror.manifest, env=no_stub_env(), check=0)
    assert "did not match its sha256" in out(p), out(p)
    fetched = [r[1] for r in mirror.srv.requests if r[0] == "GET"]
    assert len(fetched) == 1, fetched
    assert os.path.getsize(path) > 0
    q = os.listdir(os.path.join(cache, "quarantine"))
    assert len(q) == 1 and q[0].startswith(victim), q

"""`tfprov plan` and `apply` of the shipped stable-2.15 manifest on this machine:
no GPU, no network. Real binary, real manifest (real NVIDIA/conda-forge URLs
and hashes); the driver probe meets this machine's real NVML (Debian's
libnvidia-ml1, Driver Not Loaded) or none at all. No stand-ins are used.

Network: every proxy variable points at a loopback listener that counts
connections, so any attempt to fetch through libcurl would be seen; direct
connections to developer.download.nvidia.com cannot succeed here either.
"""
import os
import re
import socket
import threading
import time

import pytest

from lib_provision import db_rows, no_stub_env, out

MANIFEST = "manifests/stable-2.15.yaml"


class CountingProxy:
    """Accepts TCP connections on loopback and counts them (then closes)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.count = 0
        self.stop = False
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.sock.getsockname()[1]

    def _loop(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.count += 1
            c.close()

    def close(self):
        self.stop = True
        self.t.join()
        self.sock.close()


@pytest.fixture
def offline(tmp_path):
    proxy = CountingProxy()
    home = tmp_path / "home"
    tmp = tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = no_stub_env()
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
              "all_proxy", "ftp_proxy"):
        env[k] = proxy.url
    env.update({"NO_PROXY": "", "no_proxy": "", "HOME": str(home), "TMPDIR": str(tmp),
                "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".state")})
    yield env, proxy, home, tmp
    proxy.close()


def manifest_urls(repo):
    """Every URL the manifest pins: artifact `url:` fields and conda lock lines."""
    text = open(os.path.join(repo, MANIFEST)).read()
    urls = []
    for line in text.splitlines():
        s = line.split("#", 1)[0] if line.lstrip().startswith("#") else line
        m = re.match(r"\s*(?:-\s*)?url:\s*(\S+)", s)
        if m:
            urls.append(m.group(1))
            continue
        m = re.match(r"\s*(https://\S+?)#(?:sha256:)?[0-9a-f]{32,64}\s*$", line)
        if m:
            urls.append(m.group(1))
    return urls


def _all_files(d):
    return sorted(os.path.relpath(os.path.join(dp, f), d)
                  for dp, _, fs in os.walk(d) for f in fs)


def test_plan_shows_every_step_url_and_driver_blocker(tfprov, repo, offline):
    """Every step and every pinned URL of stable-2.15 is in the plan, with the
    driver precondition that would stop apply; exit 6 as apply would, also with
    --detailed-exitcode (never 2 or 0 for a plan apply cannot carry out); no network (no proxy connection, fast); nothing written
    to HOME, TMPDIR or even the sandbox root (plan is read-only)."""
    env, proxy, home, tmp = offline
    urls = manifest_urls(repo)
    assert len(urls) >= 30, urls  # 10 CUDA + 1 cuDNN + 23 conda packages
    t0 = time.monotonic()
    p = tfprov.run("plan", MANIFEST, env=env, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 6, out(p)
    assert took < 20, f"plan took {took:.1f}s: waiting on the network?"
    for step in ("<= driver", "+ cuda", "+ cudnn", "+ env", "+ pyenv", "+ pip"):
        assert step in p.stdout, f"{step!r} missing:\n{p.stdout}"
    missing = [u for u in urls if "fetch " + u not in p.stdout]
    assert missing == [], missing
    drv = p.stdout[p.stdout.index("<= driver"):p.stdout.index("+ cuda")]
    assert "apply would stop here" in drv and "exit 6" in drv, drv
    assert "no NVIDIA driver found" in drv or "too old" in drv, drv
    assert re.search(r"Plan: \d+ to add, 0 to change, 0 to destroy", p.stdout), p.stdout
    d = tfprov.run("plan", "--detailed-exitcode", MANIFEST, env=env, timeout=60)
    assert d.returncode == 6, out(d)
    assert proxy.count == 0, "plan opened a network connection"
    assert _all_files(home) == [] and _all_files(tmp) == []
    assert _all_files(tfprov.root) == [], "plan wrote into the root"


def test_apply_stops_at_driver_without_network(tfprov, repo, offline):
    """apply of stable-2.15 here: exit 6 at the driver precondition, before any
    download (no proxy connection) and before any change: no CUDA prefix, no
    profile, no cache, no env, no stack or generation recorded."""
    env, proxy, home, tmp = offline
    t0 = time.monotonic()
    p = tfprov.run("apply", "-y", MANIFEST, env=env, timeout=60)
    assert p.returncode == 6, out(p)
    assert time.monotonic() - t0 < 20
    assert "driver" in out(p) and ("no NVIDIA driver found" in out(p) or "too old" in out(p))
    assert proxy.count == 0, "apply went to the network before its precondition"
    files = _all_files(tfprov.root)
    # Only the state db and its lock may exist (see test_gpu_stack's xfail).
    assert all(f.startswith("var/lib/tfprov/") for f in files), files
    assert not os.path.exists(tfprov.path("/opt")) and not os.path.exists(tfprov.path("/etc"))
    assert not os.path.exists(tfprov.path("/var/cache"))
    assert db_rows(tfprov, "SELECT count(*) FROM stacks") in ([], [(0,)])
    assert db_rows(tfprov, "SELECT count(*) FROM generations") in ([], [(0,)])
    assert _all_files(home) == [] and _all_files(tmp) == []


def test_apply_no_gpu_offline_fails_without_network(tfprov, offline):
    """With --no-gpu the precondition passes, so apply reaches the downloads:
    --offline must then fail (not exit 0) without any connection, and leave no
    CUDA prefix behind."""
    env, proxy, _, _ = offline
    p = tfprov.run("--no-gpu", "--offline", "apply", "-y", MANIFEST, env=env, timeout=60)
    assert p.returncode not in (0, 6), out(p)
    assert proxy.count == 0
    assert not os.path.exists(tfprov.path("/opt/tfprov/cuda/12.3.2"))

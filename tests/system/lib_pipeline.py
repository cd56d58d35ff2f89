"""Helpers for the artifact pipeline system tests: find and run pipeline_tool."""

import hashlib
import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool_path():
    cands = []
    if os.environ.get("PIPELINE_TOOL"):
        cands.append(os.environ["PIPELINE_TOOL"])
    if os.environ.get("TFPROV_BUILD_DIR"):
        cands.append(os.path.join(os.environ["TFPROV_BUILD_DIR"], "pipeline_tool"))
    for d in ("build-pipe", "build"):
        cands.append(os.path.join(ROOT, d, "pipeline_tool"))
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    raise RuntimeError("pipeline_tool not built (looked in %s)" % cands)


def sha(data):
    return hashlib.sha256(data).hexdigest()


class Result:
    def __init__(self, p, secs):
        self.rc = p.returncode
        self.out = p.stdout
        self.err = p.stderr
        self.secs = secs

    def __repr__(self):
        return "rc=%d %.2fs\nstdout:%s\nstderr:%s" % (self.rc, self.secs, self.out, self.err)


def run(*args, env=None, timeout=60):
    e = dict(os.environ)
    # Fast retries and stall detection so every fault test stays in seconds.
    e.setdefault("TFPROV_FETCH_BACKOFF_MS", "50")
    e.setdefault("TFPROV_FETCH_STALL_S", "2")
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        e.pop(k, None)
    if env:
        e.update(env)
    t0 = time.monotonic()
    p = subprocess.run([tool_path(), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=e)
    return Result(p, time.monotonic() - t0)


def fetch(cache, *items, extra=(), env=None, timeout=60):
    """items: (url, data_or_sha, size)."""
    args = ["fetch"]
    for url, d, size in items:
        args += [url, d if isinstance(d, str) else sha(d), size]
    args += ["--cache", cache, *extra]
    return run(*args, env=env, timeout=timeout)


def tree(d):
    """{relpath: ('f', bytes) | ('l', target) | ('d', None)} of a directory."""
    out = {}
    for base, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(base, n)
            rel = os.path.relpath(p, d)
            if os.path.islink(p):
                out[rel] = ("l", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("d", None)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("f", f.read())
    return out

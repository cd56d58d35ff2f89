"""Crash points named by the run's own operations (tests/fixtures/killpoint.c).

A kill test that sleeps a random delay and then sends SIGKILL lands on a
different operation on every machine and under every load, so its seed does
not replay a failure. Here the point is "role#k:n", the n-th operation that
changes a file system or starts a process in the main thread of one process
of the run (role#k: tfprov#1, py-pip-install#1, ...): the LD_PRELOAD shim
counts them and, at the chosen one, SIGKILLs tfprov and then itself before
the operation happens. A reference run lists every point with what it does
(points()); run_to() replays one, and says which operation it stopped at.

The shim is built here with the system compiler, once per test session, into
a temporary directory (as test_power_loss.py builds its own shim): it is a
test fixture, never linked into tfprov.
"""
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "fixtures", "killpoint.c")
_built = {}


def shim():
    """The shim's path, built once per session (keyed by its source's hash)."""
    with open(SRC, "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:16]
    if key not in _built:
        d = tempfile.mkdtemp(prefix="tfprov-killpoint-")
        so = os.path.join(d, "killpoint.so")
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", so,
                        SRC, "-ldl"], check=True, capture_output=True)
        _built[key] = so
    return _built[key]


class Event:
    __slots__ = ("role", "n", "op", "arg")

    def __init__(self, role, n, op, arg):
        self.role, self.n, self.op, self.arg = role, int(n), op, arg

    @property
    def point(self):
        return f"{self.role}:{self.n}"

    def __repr__(self):
        return f"{self.point} {self.op} {self.arg}"


def parse_log(path):
    """(events, killed): every counted operation in order, and the KILL line's event."""
    events, killed = [], None
    if not os.path.exists(path):
        return events, killed
    with open(path, errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "KILL" and len(parts) >= 5:
                killed = Event(*parts[1:5])
            elif len(parts) >= 4:
                events.append(Event(*parts[:4]))
    return events, killed


class Killer:
    """Runs argv (tfprov and what it starts) under the shim, in a work dir of its own."""

    def __init__(self, work, skip=()):
        """skip: directories whose operations are not counted (TFPROV_KP_SKIP)."""
        self.work = str(work)
        os.makedirs(self.work, exist_ok=True)
        self.so = shim()
        self.runs = 0
        self.skip = ":".join(os.path.realpath(str(d)) for d in skip)

    def _env(self, base, at, log):
        d = os.path.join(self.work, f"run{self.runs}")
        self.runs += 1
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        e = dict(base)
        e.pop("TFPROV_KP_ROOT", None)
        e["LD_PRELOAD"] = self.so
        e["TFPROV_KP_DIR"] = d
        e["TFPROV_KP_LOG"] = log
        if at:
            e["TFPROV_KP_AT"] = at
        if self.skip:
            e["TFPROV_KP_SKIP"] = self.skip
        # An ASan build of tfprov is fine with the shim loaded first.
        e["ASAN_OPTIONS"] = (e.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
        return e

    def points(self, argv, env, timeout=600):
        """A run without a kill: (CompletedProcess, [Event, ...] in order)."""
        log = os.path.join(self.work, f"ref{self.runs}.log")
        if os.path.exists(log):
            os.unlink(log)
        p = subprocess.run(argv, env=self._env(env, None, log), capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        return p, parse_log(log)[0]

    def run_to(self, argv, env, point, timeout=600):
        """Runs argv until `point` ("role#k:n"): (returncode, the Event killed at or None)."""
        rc, hit, _ = self.run_to_logged(argv, env, point, timeout)
        return rc, hit

    def run_to_logged(self, argv, env, point, timeout=600):
        """run_to, with every operation the run counted before the kill as well."""
        log = os.path.join(self.work, f"kill{self.runs}.log")
        if os.path.exists(log):
            os.unlink(log)
        p = subprocess.run(argv, env=self._env(env, point, log), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=timeout, stdin=subprocess.DEVNULL)
        events, hit = parse_log(log)
        return p.returncode, hit, events


def divergence(got, ref):
    """Where a replay's operations first differ from the reference's, per process
    (role): "role:n op arg (reference: op arg)", or None. Numbers of three digits or
    more in paths (pids) and mkstemp names (a lock's, a scratch's run-XXXXXX) are not
    compared."""
    def norm(e):
        return (e.op, re.sub(r"[0-9]{3,}|XXXXXX|[A-Za-z0-9]{6}(?=\.lock)|(?<=run-)[A-Za-z0-9]{6}",
                             "N", e.arg))
    by_role = {}
    for e in ref:
        by_role.setdefault(e.role, {})[e.n] = e
    for e in got:
        r = by_role.get(e.role, {}).get(e.n)
        if r is None or norm(r) != norm(e):
            return f"{e.point} {e.op} {e.arg} (reference: {r.op + ' ' + r.arg if r else 'none'})"
    return None


def saved_root(root, dst):
    """Saves the tree at root (cp -a: modes, links, hard links) to dst; returns
    the function that puts it back, so that every replay starts where the
    reference run started (the venv's paths are absolute: it goes back to the
    same path)."""
    shutil.rmtree(dst, ignore_errors=True)
    subprocess.run(["cp", "-a", str(root), str(dst)], check=True)

    def restore():
        shutil.rmtree(root)
        subprocess.run(["cp", "-a", str(dst), str(root)], check=True)
    return restore


def scratch(root):
    """The decode-ahead scratch of a root's default cache: the main thread
    shares its work with the download thread as bytes arrive, so which of its
    operations come when is a race (artifacts.c: decode_fetch)."""
    return os.path.join(str(root), "var", "cache", "tfprov", "unpack")

"""Power loss during `apply`: every write that was not made durable is lost.

What the machine looks like: --root is the mount point of lib_lazyfs.py, a FUSE
filesystem that keeps what processes write in memory and, at a chosen crash
point, keeps only what was made durable (fsync of a file: its bytes; fsync of a
directory: its names; syncfs: everything; see lib_lazyfs.py for the model).
Everything tfprov writes lives there: the placed trees, the download cache and
the state (state.db, its -wal and -shm), so SQLite's files are subject to the
same loss. A small LD_PRELOAD shim (tests/fixtures/lazyfs_sync.c) tells the
daemon about syncfs(2), which FUSE does not forward.
Generation A (applied and unmounted cleanly): the env step, a venv (manager:
venv, the real `python -m venv`) and two wheels at version 1.0 from a loopback
PEP 503 index. Generation B: CUDA 12.3.2 + cuDNN 8.9.7.29 (make_stack.py's
archives of STAND-IN libraries with NVIDIA's sonames, from a loopback HTTP
mirror), the env step with another value, the same venv, the wheels at 2.0.
What is run: apply B once without a crash (the reference B, and the list of
durability events: fsync, fdatasync, directory fsync, syncfs, rename). Then, for
each crash point of a fixed set (every syncfs, the state's commit after each,
events spread over the run; plus torn crashes before seeded random
operations), apply B on the image of A until the crash point, power off (the
image is what was durable), power on (mount that image), and:
  - `tfprov status` answers (exit 0, or 2 naming the interrupted apply);
  - a writer that changes nothing (`destroy` of a stack that does not exist)
    runs recovery; then the journal is empty, no .tfprov-* path is left, and
    every file the state records is on disk with its recorded size and sha256
    (checked here from state.db, and by `tfprov verify --deep`, exit 0);
  - each step is old or new, never between: the CUDA prefix is absent (A) or
    exactly B's (with or without cuDNN's files, as the state records cuDNN);
    the profile is A's or B's; the env's listing is A's or B's; each the side
    the state records for its step;
  - `tfprov apply B` then exits 0 and the whole root is B's reference.
The first crash points inside a step (at a rename) lose power a second time,
during the recovery (at one of its renames or syncs), before the checks.
TFPROV_POWERLOSS_POINTS (default 11 event points), TFPROV_POWERLOSS_RANDOM
(default 3 torn points) and TFPROV_POWERLOSS_DOUBLE (default 2) size the run;
TFPROV_POWERLOSS_SEED replays it. It prints how many points it explored and
what each found. Measured on the shared 2-core machine: the 14 default points
in 182 s (load 3-8; 22 s for generations A and B, 7-20 s a point) and in 273 s
(load 10-14).
The conda variants (issue 35, item 4) do the same for a manager: conda env
installed natively from an explicit lock of packages built by lib_conda.py
(served by the loopback mirror): `conda-create`, A has no Python env and B creates
it; `conda-replace`, A's env (lock 1) is replaced by B's (lock 2: another python
build, a package at another version, one dropped, one added). They explore 5
event points each (TFPROV_POWERLOSS_CONDA_POINTS: the last three of the steps'
syncfs and commits, two renames under the env's prefix), 1 torn and 1 double;
measured on the shared 2-core machine: both variants in 55 s at load 10-11, one in
10 s at a lower load.
Skips (saying why) when FUSE cannot be mounted here (no /dev/fuse, no fusepy).
"""
import hashlib
import os
import random
import signal
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

import lib_conda
import lib_pyindex
from lib_provision import Mirror, no_stub_env, out, temp_leftovers
from test_python_env import PYVER
from test_wheel_native import make_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LAZYFS = os.path.join(HERE, "lib_lazyfs.py")
SHIM_SRC = os.path.join(REPO, "tests", "fixtures", "lazyfs_sync.c")
POINTS = int(os.environ.get("TFPROV_POWERLOSS_POINTS", "11"))
RANDOM_POINTS = int(os.environ.get("TFPROV_POWERLOSS_RANDOM", "3"))
DOUBLE_POINTS = int(os.environ.get("TFPROV_POWERLOSS_DOUBLE", "2"))
ENV_PREFIX = "/opt/tfprov/envs/tf"
CUDA_PREFIX = "opt/tfprov/cuda"
STACKS_DIR = "opt/tfprov/stacks"  # the env step: activate.sh, deactivate.sh

# Known failures owned elsewhere: a FAIL
# message containing a key is reported as KNOWN with the value's reason, and the
# test is marked xfail (not passed) while any is found. Empty: none known.
KNOWN = {}


def fuse_usable():
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount") is None:
        return "no /dev/fuse or fusermount (apt install fuse3)"
    r = subprocess.run(["/usr/bin/python3", "-c", "import fusepy"], capture_output=True)
    if r.returncode != 0:
        return "no fusepy for /usr/bin/python3 (apt install python3-fusepy)"
    return None


pytestmark = pytest.mark.skipif(fuse_usable() is not None, reason=str(fuse_usable()))


class Disk:
    """One mount of lib_lazyfs.py at a fixed mount point (paths in the env embed it)."""

    def __init__(self, mnt, image_in=None, image_out=None, crash_event=0, crash_op=0, seed=0,
                 events=None, save_on_exit=False):
        self.mnt = mnt
        argv = ["/usr/bin/python3", LAZYFS, mnt, "--seed", str(seed)]
        if image_in:
            argv += ["--image-in", image_in]
        if image_out:
            argv += ["--image-out", image_out]
        if crash_event:
            argv += ["--crash-event", str(crash_event)]
        if crash_op:
            argv += ["--crash-op", str(crash_op)]
        if events:
            argv += ["--events", events]
        if save_on_exit:
            argv += ["--save-on-exit"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        deadline = time.monotonic() + 30
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None:
                raise RuntimeError("lazyfs did not mount: " + self.proc.stderr.read())
            assert time.monotonic() < deadline, "lazyfs did not mount in 30 s"
            time.sleep(0.02)

    def unmount(self):
        subprocess.run(["fusermount", "-u", "-z", self.mnt], capture_output=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = self.proc.stderr.read()
        assert "Traceback" not in err, "lazyfs failed:\n" + err


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def area_listing(root, rel):
    """{path: content sha | link target} of the files under root/rel; .pyc, INSTALLER,
    RECORD and conda-meta/history (they embed times, or list .pyc files) by name only."""
    res = {}
    base = os.path.join(root, rel)
    if not os.path.lexists(base):
        return res
    for dp, dns, fns in os.walk(base):
        for n in dns + fns:
            p = os.path.join(dp, n)
            r = os.path.relpath(p, root)
            if "__pycache__" in r:
                continue
            if os.path.islink(p):
                res[r] = "-> " + os.readlink(p)
            elif os.path.isdir(p):
                continue  # directories: their files say it all
            elif n.endswith((".pyc", "INSTALLER", "RECORD")) or r.endswith("conda-meta/history"):
                res[r] = "file"
            else:
                res[r] = sha(p)
    return res


AREAS = {"cuda": CUDA_PREFIX, "env": STACKS_DIR, "pyenv": ENV_PREFIX.lstrip("/")}


def listings(root):
    return {k: area_listing(root, rel) for k, rel in AREAS.items()}


def state_rows(root, sql):
    db = os.path.join(root, "var/lib/tfprov/state.db")
    if not os.path.exists(db):
        return []
    con = sqlite3.connect(db, timeout=10)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def recorded_mismatches(root):
    """Recorded files whose bytes are not on disk as recorded."""
    bad = []
    for path, typ, digest, size in state_rows(
            root, "SELECT path, type, sha256, size FROM files"):
        p = os.path.join(root, path.lstrip("/"))
        if typ == "file" or typ == "f":
            if not os.path.isfile(p) or os.path.islink(p):
                bad.append((path, "missing"))
            elif size is not None and os.path.getsize(p) != size:
                bad.append((path, f"size {os.path.getsize(p)} != recorded {size}"))
            elif digest and sha(p) != digest:
                bad.append((path, "sha256 differs from the recorded one"))
        elif not os.path.lexists(p):
            bad.append((path, "missing"))
    return bad


def resources(root):
    return dict(state_rows(root, "SELECT addr, desired FROM resources"))


CONDA_POINTS = int(os.environ.get("TFPROV_POWERLOSS_CONDA_POINTS", "5"))


def conda_yaml(tmp_path, mirror, gen):
    """The python section of a conda env from an explicit lock served by the mirror:
    generation 1 or 2 (another python build, data 1.0 -> 2.0, old dropped, new added)."""
    d = tmp_path / "www"
    F = lib_conda.File
    py = lib_conda.build_package(str(d), "python", PYVER + ".0", f"{gen}_stand", {
        f"bin/python{PYVER}": F(f'#!/bin/bash\nexec -a "$0" /usr/bin/python{PYVER} "$@"\n',
                               0o755),
        "bin/python": F(symlink=f"python{PYVER}"),
        "pyvenv.cfg": F(f"home = /usr/bin\ninclude-system-site-packages = true\n# {gen}\n"),
        f"lib/python{PYVER}/site-packages/.keep": F(""),
    })
    ver = f"{gen}.0"
    data = lib_conda.build_package(str(d), "pl-data", ver, "h0", {
        **{f"share/pl/f{i:03d}.txt": F(f"{ver} {i}\n" * 50) for i in range(40)},
        "bin/pl-tool": F(f"#!/bin/sh\necho {lib_conda.PLACEHOLDER} {ver}\n", 0o755,
                         placeholder=lib_conda.PLACEHOLDER),
    }, depends=["python"])
    only = lib_conda.build_package(str(d), "pl-old" if gen == 1 else "pl-new", "1.0", "h0", {
        f"share/pl-{gen}/only.txt": F(f"only in generation {gen}\n"),
    })
    lines = ["# platform: linux-64", "@EXPLICIT"]
    lines += [f"{mirror.url}/{os.path.basename(p)}#sha256:{sha}" for p, sha, _, _ in (py, data, only)]
    body = "".join("    " + ln + "\n" for ln in lines)
    return (f"python:\n  manager: conda\n  name: tf\n  version: \"{PYVER}\"\n"
            f"  lock: |\n{body}")


def conda_fixtures(tmp_path, mirror, variant):
    """A and B of a conda variant; A has no Python env when B creates it."""
    py_a = conda_yaml(tmp_path, mirror, 1) if variant == "conda-replace" else ""
    py_b = conda_yaml(tmp_path, mirror, 2)
    a = tmp_path / "A.yaml"
    a.write_text("schema: 1\nstack:\n  name: demo\n  platform: linux-x86_64\n"
                 f"prefix: /opt/tfprov\nversions:\n  tensorflow: 2.15.1\n  python: \"{PYVER}\"\n"
                 "driver:\n  policy: skip\nenv:\n  vars:\n    TF_CPP_MIN_LOG_LEVEL: \"1\"\n"
                 + py_a)
    b = mirror.stack(tmp_path / "B.yaml", name="demo", driver_policy="skip", python=PYVER,
                     extra_yaml=py_b)
    text = open(b).read().replace('TF_CPP_MIN_LOG_LEVEL: "1"', 'TF_CPP_MIN_LOG_LEVEL: "2"')
    assert 'TF_CPP_MIN_LOG_LEVEL: "2"' in text
    with open(b, "w") as f:
        f.write(text)
    return str(a), str(b), None


def fixtures(tmp_path, mirror):
    wheels = str(tmp_path / "wheels")
    pins = {}
    for ver in ("1.0", "2.0"):
        p = []
        mods = {f"tfprov_pl/m{i:03d}.py": f"V = {ver!r}\nI = {i}\n" for i in range(40)}
        mods["tfprov_pl/__init__.py"] = f"VERSION = {ver!r}\n"
        _, h = make_wheel(wheels, "tfprov-pl", ver, mods)
        p.append(("tfprov-pl", ver, h))
        _, h = make_wheel(wheels, "tfprov-pl-small", ver,
                          {"tfprov_pl_small.py": f"V = {ver!r}\n"}, requires=["tfprov-pl"])
        p.append(("tfprov-pl-small", ver, h))
        pins[ver] = p
    idx = lib_pyindex.Index(wheels)

    def py_yaml(ver):
        req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins[ver])
        return (f"python:\n  manager: venv\n  name: tf\n  version: \"{PYVER}\"\n"
                f"pip:\n  index_url: {idx.url}\n  complete: true\n  requirements: |\n{req}")

    a = tmp_path / "A.yaml"
    a.write_text("schema: 1\nstack:\n  name: demo\n  platform: linux-x86_64\n"
                 f"prefix: /opt/tfprov\nversions:\n  tensorflow: 2.15.1\n  python: \"{PYVER}\"\n"
                 "driver:\n  policy: skip\nenv:\n  vars:\n    TF_CPP_MIN_LOG_LEVEL: \"1\"\n"
                 + py_yaml("1.0"))
    b = mirror.stack(tmp_path / "B.yaml", name="demo", driver_policy="skip", python=PYVER,
                     extra_yaml=py_yaml("2.0"))
    text = open(b).read().replace('TF_CPP_MIN_LOG_LEVEL: "1"', 'TF_CPP_MIN_LOG_LEVEL: "2"')
    assert 'TF_CPP_MIN_LOG_LEVEL: "2"' in text
    with open(b, "w") as f:
        f.write(text)
    return str(a), str(b), idx


class Runner:
    def __init__(self, tmp_path, mnt):
        self.mnt = mnt
        shim = str(tmp_path / "lazyfs_sync.so")
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", shim, SHIM_SRC, "-ldl"],
                       check=True, capture_output=True)
        self.env = dict(os.environ, **no_stub_env())
        self.env.pop("NO_COLOR", None)
        self.env["LD_PRELOAD"] = shim
        # An ASan build is fine with the shim loaded first.
        self.env["ASAN_OPTIONS"] = (self.env.get("ASAN_OPTIONS", "") +
                                    ":verify_asan_link_order=0").lstrip(":")
        self.bin = os.environ.get("TFPROV_BIN") or os.path.join(REPO, "build", "tfprov")

    def argv(self, *args):
        return [self.bin, "--root", self.mnt, "--no-gpu", *args]

    def run(self, *args, check=None, timeout=300):
        p = subprocess.run(self.argv(*args), capture_output=True, text=True, env=self.env,
                           timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL)
        if check is not None:
            assert p.returncode == check, f"{args} exited {p.returncode}:\n{out(p)}"
        return p

    def start(self, *args):
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env, cwd=REPO,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def read_events(path):
    events, total = [], None
    with open(path) as f:
        for line in f:
            w = line.split()
            if w[0] == "total":
                total = (int(w[1]), int(w[2]))
            else:
                events.append((int(w[0]), w[1], w[2], int(w[3])))
    return events, total


def desc_of(events, n):
    return next(f"{e[1]} {e[2]}" for e in events if e[0] == n)


def choose_points(events, n, focus=None):
    """n event numbers: every syncfs (a step's pre-commit sync) and the first sync of
    the state's WAL after it (the step's commit), then events spread evenly. With
    focus (a path), the last steps' pairs and two renames under focus instead."""
    chosen = []
    for i, e in enumerate(events):
        if e[1] == "syncfs":
            chosen.append(e[0])
            nxt = [f[0] for f in events[i + 1:] if f[2].endswith("state.db-wal")]
            if nxt:
                chosen.append(nxt[0])
    chosen = list(dict.fromkeys(chosen))
    if focus is not None:
        mine = [e[0] for e in events if e[1] == "rename" and e[2].startswith(focus)]
        mine = [mine[len(mine) // 3], mine[-1]] if mine else []
        chosen = chosen[-(n - len(mine)):] + mine
    chosen = chosen[:n]
    rest = [e[0] for e in events if e[0] not in chosen]
    k = n - len(chosen)
    if k > 0 and rest:
        step = len(rest) / k
        chosen += [rest[min(len(rest) - 1, int(i * step + step / 2))] for i in range(k)]
    return sorted(set(chosen))


def side(listing, ref_a, ref_b):
    if listing == ref_b:
        return "B"
    if listing == ref_a:
        return "A"
    return None


def diff_keys(x, y):
    ks = sorted(set(x) ^ set(y)) + sorted(k for k in set(x) & set(y) if x[k] != y[k])
    return ks[:8]


@pytest.mark.parametrize("variant", ["venv", "conda-create", "conda-replace"])
def test_power_loss_during_apply(tmp_path, capsys, variant):
    seed = int(os.environ.get("TFPROV_POWERLOSS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    conda = variant != "venv"
    n_points = CONDA_POINTS if conda else POINTS
    n_random = min(RANDOM_POINTS, 1) if conda else RANDOM_POINTS
    n_double = min(DOUBLE_POINTS, 1) if conda else DOUBLE_POINTS
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    img_a, img_ref = str(tmp_path / "A.img"), str(tmp_path / "Bref.img")
    with Mirror(tmp_path / "www") as mirror:
        man_a, man_b, idx = (conda_fixtures(tmp_path, mirror, variant) if conda
                             else fixtures(tmp_path, mirror))
        try:
            r = Runner(tmp_path, mnt)
            t0 = time.monotonic()
            # Generation A, then a clean shutdown: everything is durable.
            d = Disk(mnt, image_out=img_a, save_on_exit=True)
            try:
                r.run("apply", "-y", man_a, check=0)
                ref_a = listings(mnt)
                res_a = resources(mnt)
            finally:
                _save_clean(d, img_a)
            t_a = time.monotonic() - t0
            # Generation B without a crash: the list of events, and the operation
            # count of the apply alone (the torn points are drawn from it: what the
            # checks below write must not count), then the reference B.
            ev = str(tmp_path / "events")
            d = Disk(mnt, image_in=img_a, events=ev, image_out=img_ref, save_on_exit=True)
            t1 = time.monotonic()
            try:
                r.run("apply", "-y", man_b, check=0)
                t_b = time.monotonic() - t1
            finally:
                _save_clean(d, img_ref)
            d = Disk(mnt, image_in=img_ref)
            try:
                ref_b = listings(mnt)
                res_b = resources(mnt)
                cudnn_paths = {p.lstrip("/") for (p,) in state_rows(
                    mnt, "SELECT f.path FROM files f JOIN resources r ON r.id = f.resource_id "
                    "WHERE r.addr = 'cudnn'")}
                r.run("verify", "--deep", check=0)
            finally:
                d.unmount()
            events, total = read_events(ev)
            assert total and events, "the reference apply saw no durability event"
            assert ref_a["cuda"] == {} and ref_b["cuda"], "B must place CUDA, A must not"
            for k in ("env", "pyenv"):
                assert ref_a[k] != ref_b[k], f"A and B must differ in {k}"
            if conda:
                assert any("conda-meta/pl-data-2.0-h0.json" in k for k in ref_b["pyenv"])
                assert (variant == "conda-create") == (ref_a["pyenv"] == {}), ref_a["pyenv"]
            focus = ENV_PREFIX if conda else None
            points = [("event", e, rng.randrange(1 << 30))
                      for e in choose_points(events, n_points, focus)]
            points += [("op", rng.randrange(1, total[0] + 1), rng.randrange(1 << 30))
                       for _ in range(n_random)]
            # The first crash points inside a step (a rename in a stage) crash again
            # during their recovery.
            doubles = {e for e in choose_points(events, n_points, focus)
                       if desc_of(events, e).startswith("rename")}
            doubles = set(sorted(doubles)[:n_double])
            found = []
            for kind, n, s in points:
                t = time.monotonic()
                what = explore(r, mnt, tmp_path, man_b, img_a, kind, n, s, ref_a, ref_b,
                               res_a, res_b, cudnn_paths,
                               double=kind == "event" and n in doubles)
                found.append((kind, n, what, time.monotonic() - t))
        finally:
            if idx is not None:
                idx.close()
    desc = {e[0]: f"{e[1]} {e[2]}" for e in events}
    lines = [f"power loss ({variant}): generation A applied in {t_a:.1f} s, B in {t_b:.1f} s on lazyfs; "
             f"B made {total[1]} durability events in {total[0]} operations; seed {seed}"]
    for kind, n, what, dt in found:
        where = f"after event {n} ({desc.get(n, '?')})" if kind == "event" else \
            f"torn, before operation {n}"
        lines.append(f"  {where}: {what} [{dt:.1f} s]")
    lines.append(f"power loss: explored {len(found)} crash points "
                 f"({sum(1 for f in found if f[0] == 'event')} after events, "
                 f"{sum(1 for f in found if f[0] == 'op')} torn), "
                 f"{sum(1 for f in found if f[2].startswith('ok'))} recovered")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    bad = [f for f in found if f[2].startswith("FAIL")]
    assert not bad, "\n".join(f"{k} {n}: {w}" for k, n, w, _ in bad)
    known = [f for f in found if f[2].startswith("KNOWN")]
    if known:
        pytest.xfail("known failures owned elsewhere: " +
                     "; ".join(f"{k} {n}: {w}" for k, n, w, _ in known))


def _save_clean(disk, image_out):
    """A clean unmount: the saved image is the whole tree."""
    disk.unmount()
    assert os.path.exists(image_out), "lazyfs wrote no image"


def explore(r, mnt, tmp_path, man_b, img_a, kind, n, seed, ref_a, ref_b, res_a, res_b,
            cudnn_paths, double=False):
    """One crash point: returns 'ok: ...' or 'FAIL: ...' (or 'KNOWN: ...')."""
    img = str(tmp_path / f"crash-{kind}-{n}.img")
    d = Disk(mnt, image_in=img_a, image_out=img,
             crash_event=n if kind == "event" else 0, crash_op=n if kind == "op" else 0,
             seed=seed)
    try:
        p = r.start("apply", "-y", man_b)
        while p.poll() is None and not os.path.exists(img):
            time.sleep(0.01)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)  # the power is off: tfprov and its children
        p.communicate()
    finally:
        d.unmount()
    if not os.path.exists(img):
        return "FAIL: the crash point was never reached"
    second = ""
    if double:
        # The power fails again during the recovery: list the recovery's events
        # on the first image, then crash it at one of them (seeded).
        ev = img + ".events"
        d = Disk(mnt, image_in=img, events=ev)
        try:
            r.run("destroy", "-y", "no-such-stack")
        finally:
            d.unmount()
        rec, _ = read_events(ev)
        # The recovery's commit (the first sync of the WAL after its syncfs),
        # else one of its renames or syncs.
        after = [rec[i + 1 + j][0] for i, e in enumerate(rec) if e[1] == "syncfs"
                 for j, f in enumerate(rec[i + 1:]) if f[2].endswith("state.db-wal")]
        work = after[:1] or [e[0] for e in rec if e[1] in ("rename", "syncfs")]
        if work:
            k = random.Random(seed).choice(work)
            img2 = img + ".2"
            d = Disk(mnt, image_in=img, image_out=img2, crash_event=k, seed=seed)
            try:
                p = r.start("destroy", "-y", "no-such-stack")
                while p.poll() is None and not os.path.exists(img2):
                    time.sleep(0.01)
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
            finally:
                d.unmount()
            if not os.path.exists(img2):
                return "FAIL: the recovery's crash point was never reached"
            os.replace(img2, img)
            desc = {e[0]: f"{e[1]} {e[2]}" for e in rec}
            second = f"power lost again in recovery after its event {k} ({desc[k]}); "
        else:
            second = "(no recovery work to crash); "
    d = Disk(mnt, image_in=img)
    try:
        what = check_after_crash(r, mnt, man_b, ref_a, ref_b, res_a, res_b, cudnn_paths)
        if what.startswith("ok"):
            what = "ok: " + second + what[4:]
        elif second:
            what = "FAIL: " + second + what[6:]
        for needle, why in KNOWN.items():
            if what.startswith("FAIL") and needle in what:
                return f"KNOWN ({why}): {what[6:]}"
        return what
    finally:
        d.unmount()
        os.unlink(img)


def check_after_crash(r, mnt, man_b, ref_a, ref_b, res_a, res_b, cudnn_paths):
    p = r.run("status")
    if p.returncode not in (0, 2):  # 2: an interrupted apply is pending
        return f"FAIL: status exited {p.returncode}: {out(p)[-400:]}"
    r.run("destroy", "-y", "no-such-stack")  # a writer: recovery, nothing else
    journal = state_rows(mnt, "SELECT op, path FROM journal")
    if journal:
        return f"FAIL: journal not empty after recovery: {journal[:4]}"
    left = temp_leftovers(mnt)
    if left:
        return f"FAIL: left after recovery: {left[:4]}"
    bad = recorded_mismatches(mnt)
    if bad:
        return f"FAIL: the state records files whose bytes are not on disk: {bad[:4]}"
    p = r.run("verify", "--deep")
    if p.returncode != 0:
        return f"FAIL: verify --deep exited {p.returncode}: {out(p)[-400:]}"
    res = resources(mnt)
    sides = {}
    for addr in set(res_a) | set(res_b):
        if addr not in res:
            if addr in res_a:
                return f"FAIL: the step {addr} of generation A is no longer recorded"
            sides[addr] = "A"  # not applied yet: absent, as in A
        elif res[addr] == res_b.get(addr) == res_a.get(addr):
            sides[addr] = "same"
        elif res[addr] == res_b.get(addr):
            sides[addr] = "B"
        elif res[addr] == res_a.get(addr):
            sides[addr] = "A"
        else:
            return f"FAIL: {addr} records a desired digest of neither A nor B"
    # What each area must hold, given the side the state records for its steps.
    # The env's files follow its last step: pip in a venv stack, pyenv in a conda one.
    last = "pip" if "pip" in sides else "pyenv"
    want = {"env": (ref_a, ref_b)[sides["env"] == "B"]["env"],
            "pyenv": (ref_a, ref_b)[sides[last] == "B"]["pyenv"]}
    if sides["cuda"] == "B":
        want["cuda"] = {k: v for k, v in ref_b["cuda"].items()
                        if sides["cudnn"] == "B" or k not in cudnn_paths}
    elif sides["cudnn"] == "B":
        return "FAIL: cudnn is recorded as applied into a CUDA prefix that is not"
    else:
        want["cuda"] = {}
    now = listings(mnt)
    for area in AREAS:
        if now[area] != want[area]:
            return (f"FAIL: {area} is not what the state records ({sides}): "
                    f"{diff_keys(now[area], want[area])}")
    p = r.run("apply", "-y", man_b)
    if p.returncode != 0:
        return f"FAIL: apply after the crash exited {p.returncode}: {out(p)[-600:]}"
    final = listings(mnt)
    if final != ref_b:
        return f"FAIL: after apply the root is not B's: " \
               f"{ {a: diff_keys(final[a], ref_b[a]) for a in AREAS if final[a] != ref_b[a]} }"
    p = r.run("verify", "--deep")
    if p.returncode != 0:
        return f"FAIL: verify --deep after apply exited {p.returncode}: {out(p)[-400:]}"
    return "ok: recovered to " + ",".join(f"{a}={sides[a]}" for a in sorted(sides)) + \
        ", then converged to B"

"""kill -9 of apply at random moments, in a loop.

What the machine looks like: one --root; a sequence of manifests of the env-only
stack, each different from the last (a new variable value; every third one moves
the profile to another directory, so the step removes one path and writes
another). The cuda step (fetch + unpack) has not landed, so the env step is the
only writer: one file per apply, changed every iteration.
What is run: `tfprov apply` killed with SIGKILL after a random delay, then the
checks, then `tfprov apply` of the same manifest (recovery + converge), then once
more (must say "No changes").
What must hold after every kill:
  - the state db opens and PRAGMA integrity_check is "ok";
  - every file the `files` table records is on disk with its recorded size, or
    the journal holds an operation on that path (the next run undoes or finishes
    it) -- never a recorded file that nothing accounts for;
after the next apply:
  - exit 0; every recorded file on disk with recorded size and sha256; the
    journal empty; no generation left 'running'; no .tfprov-* (tmp, bak, del,
    stage) left anywhere under the root; the profile has the manifest's value;
  - a further apply prints "No changes".
The delay: half the iterations 0-30 ms (start-up, recovery, planning), the other
half uniform over the measured duration of a whole apply (the median of the
converging applies so far; here an apply takes 0.1-0.6 s, dominated by syncfs and
SQLite's fsyncs), so kills land in the write and commit phases too.
Set TFPROV_KILL_SEED to replay a run; TFPROV_KILL_ITERS to run longer.
"""
import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import time

BASE = """schema: 1
stack:
  name: demo-kill
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
driver:
  policy: skip
env:
  profile_dir: {pdir}
  vars:
    ITERATION: "{i}"
    PAYLOAD: "{payload}"
"""

ITERS = int(os.environ.get("TFPROV_KILL_ITERS", "30"))


def write_manifest(tmp_path, i):
    pdir = "/etc/profile.d" if (i // 3) % 2 == 0 else "/etc/tfprov-alt.d"
    # Sizes vary so that a half-written or stale file has a different size.
    payload = "x" * (i * 37 % 400)
    p = tmp_path / f"m{i}.yaml"
    p.write_text(BASE.format(i=i, pdir=pdir, payload=payload))
    return str(p), os.path.join(pdir, "tfprov-demo-kill.sh")


def connect(db):
    c = sqlite3.connect(db, timeout=5)
    return c


def leftovers(root):
    out = []
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            if n.startswith(".tfprov-"):
                out.append(os.path.relpath(os.path.join(d, n), root))
    return out


def check_after_kill(tfprov, it, notes):
    db = tfprov.state_db
    if not os.path.exists(db):
        return
    c = connect(db)
    try:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok", f"iteration {it}"
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "files" not in tables:
            # Killed while the first run created the database: its schema
            # transaction never committed, so the database records nothing
            # (schema version 0; the next run migrates it from scratch).
            assert tables == set(), f"iteration {it}: a half-made schema {sorted(tables)}"
            assert c.execute("PRAGMA user_version").fetchone()[0] == 0, f"iteration {it}"
            return
        files = c.execute("SELECT path, type, size FROM files").fetchall()
        journal = {r[0] for r in c.execute("SELECT path FROM journal")}
    finally:
        c.close()
    for path, typ, size in files:
        host = tfprov.path(path)
        if os.path.lexists(host) and (typ != "f" or os.lstat(host).st_size == size):
            continue
        # Not at its final path (or not its recorded size): only acceptable while
        # the journal says an operation on it is in flight.
        assert path in journal, (
            f"iteration {it}: {path} is recorded (size {size}) but "
            f"{'missing' if not os.path.lexists(host) else 'has size %d' % os.lstat(host).st_size}"
            f" and no journal row covers it")
        notes.append(f"{it}: {path} in flight")


def check_converged(tfprov, it, want_path, i):
    c = connect(tfprov.state_db)
    try:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        files = c.execute("SELECT path, type, size, sha256 FROM files").fetchall()
        assert c.execute("SELECT count(*) FROM journal").fetchone()[0] == 0, f"iteration {it}"
        assert c.execute(
            "SELECT count(*) FROM generations WHERE result = 'running'").fetchone()[0] == 0
    finally:
        c.close()
    assert [f[0] for f in files] == [want_path], (it, files)
    for path, typ, size, sha in files:
        data = open(tfprov.path(path), "rb").read()
        assert len(data) == size, (it, path, len(data), size)
        assert hashlib.sha256(data).hexdigest() == sha, (it, path)
    text = open(tfprov.path(want_path)).read()
    assert f"export ITERATION='{i}'\n" in text, (it, text)
    left = leftovers(tfprov.root)
    assert left == [], f"iteration {it}: left behind: {left}"


def test_kill_9_at_random_moments(tfprov, tmp_path):
    seed = int(os.environ.get("TFPROV_KILL_SEED", str(time.time_ns() % 100000)))
    rnd = random.Random(seed)
    print(f"seed {seed}")
    notes, exits, durations = [], [], [0.2]
    t_start = time.monotonic()
    for it in range(ITERS):
        m, path = write_manifest(tmp_path, it)
        full = sorted(durations)[len(durations) // 2]
        delay = rnd.uniform(0, 0.030) if it % 2 == 0 else rnd.uniform(0, 1.1 * full)
        proc = subprocess.Popen([tfprov.bin, "--root", tfprov.root, "apply", "-y", m],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        exits.append(proc.returncode)
        check_after_kill(tfprov, it, notes)
        t0 = time.monotonic()
        p = tfprov.run("apply", "-y", m, timeout=30)
        durations.append(time.monotonic() - t0)
        assert p.returncode == 0, (f"seed {seed} iteration {it}: the apply after the kill "
                                   f"exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        check_converged(tfprov, it, path, it)
        p = tfprov.run("apply", "-y", m, timeout=30)
        assert p.returncode == 0 and "No changes." in p.stdout, (it, p.stdout, p.stderr)
    killed = sum(1 for e in exits if e == -signal.SIGKILL)
    print(f"{ITERS} iterations, {killed} killed mid-run, {len(notes)} kills with a file "
          f"in flight, {time.monotonic() - t_start:.1f} s; in flight: {notes}")
    # The loop must really have interrupted runs, not only raced past finished ones.
    assert killed >= ITERS // 3, exits


def test_kill_between_rename_and_commit_is_undone(tfprov, tmp_path):
    """Deterministic version of the worst instant. An update of the profile moves
    the old file aside (.tfprov-del-*), renames the new one into place, then
    commits (syncfs + one SQLite transaction). Kill apply when both the backup
    and the new file are on disk, i.e. after the rename and before the commit.
    The next writer must undo that uncommitted change (old content back at the
    path, matching its record) and leave no backup behind."""
    m0, path = write_manifest(tmp_path, 0)
    tfprov.run("apply", "-y", m0, check=0)
    old = open(tfprov.path(path), "rb").read()
    d = os.path.dirname(tfprov.path(path))
    final = os.path.basename(path)
    caught = False
    for attempt in range(100):
        m1, _ = write_manifest(tmp_path, 1 + attempt % 2)
        proc = subprocess.Popen([tfprov.bin, "--root", tfprov.root, "apply", "-y", m1],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            names = os.listdir(d)
            if final in names and any(n.startswith(".tfprov-del-") for n in names):
                proc.send_signal(signal.SIGKILL)
                caught = True
                break
        proc.wait()
        if caught and proc.returncode == -signal.SIGKILL:
            break
        caught = False
        tfprov.run("apply", "-y", m0, check=0)  # back to the old content, try again
    if not caught:
        import pytest
        pytest.skip("never caught apply between its rename and its commit")
    # A reader sees the recorded file; `status` must not crash on the half state.
    tfprov.run("status")
    # The next writer recovers. Use a plan-only writer first? There is none:
    # recovery runs under the lock, at the start of apply/destroy/rollback.
    p = tfprov.run("apply", "-y", m0, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "recovered from an interrupted run" in p.stderr, p.stderr
    assert leftovers(tfprov.root) == [], leftovers(tfprov.root)
    assert open(tfprov.path(path), "rb").read() == old
    tfprov.run("verify", "--deep", check=0)


# ------------------------------------------------ a Python env being created or replaced

PY_ITERS = int(os.environ.get("TFPROV_KILL_ITERS_PY", "6"))
PYENV = "/opt/tfprov/envs/tf"


def py_manifests(tmp_path, kind):
    """{target: manifest}: the Python env the pyenv step builds, replaces or
    removes going from one to the next (None: the stack has no Python env).
    conda: two explicit locks served on loopback (a package of 1,500 files in
    two versions, so linking and the replace take a while); venv: a real
    `python -m venv` of /usr/bin/python3 (with pip)."""
    import lib_conda
    from lib_http import HttpServer
    head = BASE.format(i=0, pdir="/etc/profile.d", payload="") + "prefix: /opt/tfprov\n"
    pyver = subprocess.run(["/usr/bin/python3", "-c",
                            "import sys;print('%d.%d'%sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    mans, srv = {}, None
    if kind == "conda":
        pkgdir = tmp_path / "pkgs"
        pkgs, pyver = lib_conda.demo_packages(str(pkgdir), str(tmp_path))
        for v in ("1.0", "2.0"):
            files = {f"share/bulk/f{i:04d}.txt": lib_conda.File(f"{v} {i}\n" + "pad\n" * 30)
                     for i in range(1500)}
            pkgs.append(lib_conda.build_package(str(pkgdir), "bulk", v, "0", files))
        srv = HttpServer(root=str(pkgdir)).start()

        for tag, sel in (("L1", pkgs[:3] + [pkgs[3]]), ("L2", pkgs[:2] + [pkgs[4]])):
            body = "    # platform: linux-64\n    @EXPLICIT\n" + "".join(
                f"    {srv.url('/' + os.path.basename(p))}#sha256:{sha}\n"
                for p, sha, _, _ in sel)
            text = (head + f"python:\n  manager: conda\n  name: tf\n  version: \"{pyver}\"\n"
                    f"  lock: |\n{body}")
            (tmp_path / f"{tag}.yaml").write_text(text)
            mans[tag] = str(tmp_path / f"{tag}.yaml")
    else:
        text = head + f"python:\n  manager: venv\n  name: tf\n  version: \"{pyver}\"\n"
        (tmp_path / "V.yaml").write_text(text)
        mans["V"] = str(tmp_path / "V.yaml")
    (tmp_path / "none.yaml").write_text(head)
    mans[None] = str(tmp_path / "none.yaml")
    return mans, srv


def py_listing(tfprov):
    import lib_pyindex
    host = tfprov.path(PYENV)
    got = lib_pyindex.tree_listing(host) if os.path.lexists(host) else {}
    if "conda-meta/history" in got:  # it holds the time of the install
        got["conda-meta/history"] = ("file", "(dated)")
    return got


import pytest  # noqa: E402


@pytest.mark.parametrize("kind", ["conda", "venv"])
def test_kill_9_while_a_python_env_is_built(tfprov, tmp_path, kind):
    """kill -9 of apply while the pyenv step creates, replaces or removes a
    conda env or a venv, at a random moment, then a run that only recovers
    (`destroy` of a stack that does not exist takes the lock): the env is
    exactly as before the killed apply or exactly the target (never a mix,
    never a half-built env); the journal is empty; no .tfprov-* path is left
    anywhere under the root. The next apply converges to the target and a
    further one has no changes."""
    seed = int(os.environ.get("TFPROV_KILL_SEED", str(time.time_ns() % 100000)))
    rnd = random.Random(seed)
    mans, srv = py_manifests(tmp_path, kind)
    cycle = ["L1", "L2", None] if kind == "conda" else ["V", None]
    try:
        ref, took = {}, {}
        # Uninterrupted, twice: the reference listings, and the durations of
        # the second pass (the first also fills the download cache, which the
        # killed applies find full: drawn from it, most kills landed late).
        for _ in range(2):
            for target in cycle:
                t0 = time.monotonic()
                tfprov.run("apply", "-y", mans[target], timeout=300, check=0)
                took[target] = time.monotonic() - t0
                ref[target] = py_listing(tfprov)
        assert ref[cycle[0]] and ref[None] == {} and ref[cycle[0]] != ref[cycle[1]]
        cur, landed, killed = None, {"before": 0, "after": 0}, 0
        for it in range(PY_ITERS):
            target = cycle[(cycle.index(cur) + 1) % len(cycle)]
            delay = rnd.uniform(0.02, 0.9 * took[target])
            proc = subprocess.Popen([tfprov.bin, "--root", tfprov.root, "apply", "-y",
                                     mans[target]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            killed += proc.returncode == -signal.SIGKILL
            ctx = f"{kind} seed {seed} iteration {it} {cur}->{target} delay {delay:.2f}s"
            r = tfprov.run("destroy", "no-such-stack", timeout=120)
            assert r.returncode != 0, ctx + r.stdout + r.stderr  # it only recovered
            now = py_listing(tfprov)
            assert now in (ref[cur], ref[target]), ctx + " differs from the target in " + str(
                sorted(set(now.items()) ^ set(ref[target].items()))[:10])
            landed["before" if now == ref[cur] and now != ref[target] else "after"] += 1
            c = connect(tfprov.state_db)
            try:
                assert c.execute("SELECT op, path FROM journal").fetchall() == [], ctx
                assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok", ctx
            finally:
                c.close()
            assert leftovers(tfprov.root) == [], ctx
            p = tfprov.run("apply", "-y", mans[target], timeout=300)
            assert p.returncode == 0, ctx + p.stdout + p.stderr
            assert py_listing(tfprov) == ref[target], ctx
            assert leftovers(tfprov.root) == [], ctx
            p = tfprov.run("apply", "-y", mans[target], timeout=120)
            assert p.returncode == 0 and "No changes." in p.stdout, ctx + p.stdout + p.stderr
            cur = target
        print(f"{kind} seed {seed}: {killed} of {PY_ITERS} applies killed; the env was left "
              f"as before {landed['before']}x, as the target {landed['after']}x")
        assert killed >= PY_ITERS // 2
    finally:
        if srv:
            srv.stop()

"""kill -9 of apply at seeded crash points, in a loop.

What the machine looks like: one --root; a sequence of manifests of the env-only
stack, each different from the last (a new variable value; every third one moves
the stack to another prefix and the login script to another profile directory, so
the env step removes two paths and writes two others, and the login script moves).
The env step is the only writer of the journal: its activate.sh changes every
iteration.
What is run, each iteration: the root is saved; a reference apply of the next
manifest under lib_killpoint's shim lists its crash points (every operation
of tfprov that changes a file system: its mkdirs, writing opens, renames,
unlinks, fsyncs, syncfs, so every journal intent and every commit); the root
is put back and the apply is replayed, SIGKILLed just before one point drawn
by the seed (half of them among the first 30: start-up, recovery, planning);
then the checks, then `tfprov apply` of the same manifest (recovery +
converge), then once more (must say "No changes").
What must hold after every kill:
  - the point was reached, at the operation the reference made there;
  - the state db opens and PRAGMA integrity_check is "ok";
  - every file the `files` table records is on disk with its recorded size, or
    the journal holds an operation on that path (the next run undoes or finishes
    it) -- never a recorded file that nothing accounts for;
after the next apply:
  - exit 0; every recorded file on disk with recorded size and sha256; the
    journal empty; no generation left 'running'; no .tfprov-* (tmp, bak, del,
    stage) left anywhere under the root; activate.sh has the manifest's value;
    exactly one login script, in the manifest's profile dir, entering the stack;
  - a further apply prints "No changes".
A failure names the seed, the iteration and the point with its operation;
TFPROV_KILL_SEED replays the run, TFPROV_KILL_ITERS runs it longer.
"""
import hashlib
import json
import os
import random
import signal
import sqlite3
import time

import lib_killpoint

BASE = """schema: 1
stack:
  name: demo-kill
  platform: linux-x86_64
prefix: {prefix}
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

ITERS = int(os.environ.get("TFPROV_KILL_ITERS", "90"))


def write_manifest(tmp_path, i):
    moved = (i // 3) % 2 == 1
    pdir = "/etc/tfprov-alt.d" if moved else "/etc/profile.d"
    prefix = "/opt/tfprov-alt" if moved else "/opt/tfprov"
    # Sizes vary so that a half-written or stale file has a different size.
    payload = "x" * (i * 37 % 400)
    p = tmp_path / f"m{i}.yaml"
    p.write_text(BASE.format(i=i, pdir=pdir, prefix=prefix, payload=payload))
    return str(p), os.path.join(prefix, "stacks/demo-kill/activate.sh")


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


def check_converged(tfprov, it, want_path, i, manifest=None):
    c = connect(tfprov.state_db)
    try:
        if manifest:
            # The stack's recorded manifest is the one placed (run and env read it).
            cur = c.execute("SELECT g.manifest_path, g.result FROM stacks s JOIN generations g "
                            "ON g.id = s.current_gen").fetchall()
            assert cur == [(manifest, "ok")], (it, cur)
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        files = c.execute("SELECT path, type, size, sha256 FROM files").fetchall()
        assert c.execute("SELECT count(*) FROM journal").fetchone()[0] == 0, f"iteration {it}"
        assert c.execute(
            "SELECT count(*) FROM generations WHERE result = 'running'").fetchone()[0] == 0
    finally:
        c.close()
    deact = os.path.join(os.path.dirname(want_path), "deactivate.sh")
    assert sorted(f[0] for f in files) == sorted([want_path, deact]), (it, files)
    for path, typ, size, sha in files:
        data = open(tfprov.path(path), "rb").read()
        assert len(data) == size, (it, path, len(data), size)
        assert hashlib.sha256(data).hexdigest() == sha, (it, path)
    text = open(tfprov.path(want_path)).read()
    assert f"export ITERATION='{i}'\n" in text, (it, text)
    pdir = "/etc/tfprov-alt.d" if "-alt" in want_path else "/etc/profile.d"
    logins = [d for d in ("/etc/profile.d", "/etc/tfprov-alt.d")
              if os.path.exists(tfprov.path(d + "/tfprov.sh"))]
    assert logins == [pdir], (it, logins)
    assert want_path in open(tfprov.path(pdir + "/tfprov.sh")).read(), it
    left = leftovers(tfprov.root)
    assert left == [], f"iteration {it}: left behind: {left}"


def test_kill_9_at_seeded_points(tfprov, tmp_path):
    seed = int(os.environ.get("TFPROV_KILL_SEED", str(time.time_ns() % 100000)))
    rnd = random.Random(seed)
    print(f"seed {seed}")
    kp = lib_killpoint.Killer(tmp_path / "kp")
    notes, where = [], []
    t_start = time.monotonic()
    for it in range(ITERS):
        m, path = write_manifest(tmp_path, it)
        argv = [tfprov.bin, "--root", tfprov.root, "apply", "-y", m]
        restore = lib_killpoint.saved_root(tfprov.root, tmp_path / "saved-root")
        ref, events = kp.points(argv, dict(os.environ))
        assert ref.returncode == 0, ref.stdout + ref.stderr
        restore()
        pick = rnd.randrange(min(30, len(events))) if it % 2 == 0 else rnd.randrange(len(events))
        want = events[pick]
        rc, hit = kp.run_to(argv, dict(os.environ), want.point)
        ctx = f"seed {seed} iteration {it}: killed at {hit} (reference: {want})"
        assert hit is not None and hit.op == want.op and rc == -signal.SIGKILL, ctx
        where.append(f"{hit.n}/{len(events)} {hit.op}")
        check_after_kill(tfprov, ctx, notes)
        p = tfprov.run("apply", "-y", m, timeout=30)
        assert p.returncode == 0, (f"{ctx}: the apply after the kill "
                                   f"exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        check_converged(tfprov, ctx, path, it, m)
        p = tfprov.run("apply", "-y", m, timeout=30)
        assert p.returncode == 0 and "No changes." in p.stdout, (ctx, p.stdout, p.stderr)
    print(f"{ITERS} iterations, {len(notes)} kills with a file in flight, "
          f"{time.monotonic() - t_start:.1f} s; killed at: {where}; in flight: {notes}")


def test_kill_between_rename_and_commit_is_undone(tfprov, tmp_path):
    """The worst instant, by its operation. An update of activate.sh moves the
    old file aside (.tfprov-del-*), renames the new one into place, then
    commits (syncfs + one SQLite transaction). Kill apply at the operation
    after that rename (the commit's syncfs), when both the backup and the new
    file are on disk. The next writer must undo that uncommitted change (old
    content back at the path, matching its record) and leave no backup
    behind."""
    m0, path = write_manifest(tmp_path, 0)
    tfprov.run("apply", "-y", m0, check=0)
    old = open(tfprov.path(path), "rb").read()
    m1, _ = write_manifest(tmp_path, 1)
    argv = [tfprov.bin, "--root", tfprov.root, "apply", "-y", m1]
    kp = lib_killpoint.Killer(tmp_path / "kp")
    restore = lib_killpoint.saved_root(tfprov.root, tmp_path / "saved-root")
    _, events = kp.points(argv, dict(os.environ))
    restore()
    final = os.path.basename(path)
    into = [i for i, e in enumerate(events)
            if e.op == "rename" and os.path.basename(e.arg).startswith(".tfprov-tmp-")
            and e.arg.endswith(final) and not e.arg.endswith("de" + final)]
    assert len(into) == 1, events
    after = events[into[0] + 1]
    assert after.op == "syncfs", events[into[0]:into[0] + 3]
    rc, hit = kp.run_to(argv, dict(os.environ), after.point)
    assert hit is not None and hit.op == "syncfs" and rc == -signal.SIGKILL, (rc, hit)
    d = os.path.dirname(tfprov.path(path))
    names = os.listdir(d)
    assert final in names and any(n.startswith(".tfprov-del-") for n in names), names
    assert open(tfprov.path(path), "rb").read() != old
    # A reader sees the recorded file; `status` must not crash on the half state.
    tfprov.run("status")
    # The next writer recovers (recovery runs under the lock, at the start of
    # apply/destroy/rollback).
    p = tfprov.run("--json", "apply", "-y", m0, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    # Said as a typed event (docs/json-events.md), phrased by the front end.
    rec = [e for e in map(json.loads, p.stdout.splitlines()) if e["type"] == "recovered"]
    assert len(rec) == 1 and rec[0]["@level"] == "warn", rec
    assert 1 <= rec[0]["undone"] <= rec[0]["leftovers"], rec
    assert rec[0]["@message"] == ("recovered from an interrupted run: undid %d unfinished "
                                  "operation%s" % (rec[0]["undone"],
                                                   "" if rec[0]["undone"] == 1 else "s"))
    assert leftovers(tfprov.root) == [], leftovers(tfprov.root)
    assert open(tfprov.path(path), "rb").read() == old

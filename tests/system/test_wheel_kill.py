"""kill -9 during the wheel install, native or by pip: the env is as it was, then converges.

pip changes an env in place; tfprov snapshots it (hard links) beside it first,
journaled, so that the recovery of a killed run swaps the snapshot back and
the commit deletes it (place.h: txn_snapshot_dir). The native installer
builds a copy and replaces the env through the journal.

Kill points are the run's own operations (lib_killpoint.py): a reference run
under the LD_PRELOAD shim lists every operation that changes a file system
or starts a process, in the main thread of tfprov and of each program it
starts (pip's own renames and unlinks included), as "role#k:n"; a killed run
replays the same start state and is SIGKILLed just before operation n of that
process. So a point names one operation on any machine and under any load,
and a failure prints the seed of the sample and the point with the operation
it stopped at; TFPROV_KILL_POINT=<direction>@<point> (as printed) replays one.

What the machine looks like: one --root with a real venv (manager: venv) and
two complete locks of the same three distributions in different versions (A
and B; the big one has TFPROV_KILL_MODULES modules, default 200, with their
__pycache__), served by a PEP 503 index on 127.0.0.1. Going from A to B
uninstalls A's versions from RECORD and installs B's, and back.
What is run: apply A, B, A (every wheel cached), saving the root at A and at
B; a reference run of each switch (A->B, B->A) under the shim. Then, for each
point of a deterministic sample (TFPROV_KILL_SEED; TFPROV_KILL_SAMPLE points a
switch, default 8, "all" for every point, spread over the phases: before
pip starts, inside pip's process, after it ends; "python+N" for every point
inside the Python processes and N elsewhere): the root put back to the
switch's start, the switch killed at the point, then a command that takes the
writer lock and so runs recovery (`destroy` of a stack that does not exist).
What must hold: the point was reached, at the operation the reference run
made there (a replay that diverged is replayed once more, and said; two in a
row fail, naming the first operation that differed); after recovery the env is byte for byte (every file's content and
mode, the .pyc files too) the tree it had before, or the target listing (the
kill came after the commit); every recorded file is on disk; the journal is
empty and no .tfprov-* entry is left under the root; every third point
(TFPROV_KILL_CONVERGE_EVERY), and the last, the next apply converges to exactly the target listing and pip check
is clean. It prints how many points it ran and where the env was left.
"""
import os
import random
import shutil
import sqlite3
import subprocess
import time

import pytest

import lib_killpoint
import lib_pyindex
from lib_provision import missing_recorded, no_stub_env, out, temp_leftovers, tree_hashes
from test_python_env import ENV_PREFIX, manifest, venv_yaml
from test_wheel_native import PIP_ENV, listing, make_wheel, pip_yaml

MODULES = int(os.environ.get("TFPROV_KILL_MODULES", "200"))
SAMPLE = os.environ.get("TFPROV_KILL_SAMPLE", "8")
ONE = os.environ.get("TFPROV_KILL_POINT")  # "A->B@py-pip-install#1:812"
EVERY = int(os.environ.get("TFPROV_KILL_CONVERGE_EVERY", "3"))


def locks(d, modules=MODULES):
    sets = {}
    for tag, ver in (("A", "1.0"), ("B", "2.0")):
        pins = []
        big = {f"tfprov_big/m{i:04d}.py": f"V = {ver!r}\nI = {i}\n" + "# pad\n" * 40
               for i in range(modules)}
        big["tfprov_big/__init__.py"] = f"VERSION = {ver!r}\n"
        _, h = make_wheel(d, "tfprov-big", ver, big, console={"tfprov-big": "tfprov_big:main"})
        pins.append(("tfprov-big", ver, h))
        _, h = make_wheel(d, "tfprov-small", ver, {"tfprov_small.py": f"V = {ver!r}\n"},
                          requires=["tfprov-big"])
        pins.append(("tfprov-small", ver, h))
        dd = f"tfprov_data-{ver}.data"
        _, h = make_wheel(d, "tfprov-data", ver,
                          {"tfprov_data/__init__.py": "", f"{dd}/data/share/tfprov/{ver}": ver,
                           f"{dd}/scripts/tfprov-data": "#!python\nprint(1)\n"})
        pins.append(("tfprov-data", ver, h))
        sets[tag] = pins
    return sets


def journal_rows(tfprov):
    con = sqlite3.connect(f"file:{tfprov.state_db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT op, path FROM journal").fetchall()
    finally:
        con.close()


def exact(env):
    """Every entry of the env with its content's sha256 and mode (.pyc and RECORD too)."""
    if not os.path.lexists(env):
        return {}
    return {k: v for k, v in tree_hashes(env).items() if not k.startswith("bin/activate")}


def loose(env):
    return listing(env) if os.path.lexists(env) else {}


def phases(events):
    """Indexes of events by phase: tfprov's before the last Python child started
    (planning, fetching, the snapshot), every Python child's own, tfprov's after
    the last one's last operation (the commit, the snapshot's removal)."""
    py = [i for i, e in enumerate(events) if e.role.startswith("py-")]
    if not py:
        return [i for i, e in enumerate(events) if e.role.startswith("tfprov#")], [], []
    last = events[py[-1]].role
    start = next(i for i in py if events[i].role == last)
    tf = [i for i, e in enumerate(events) if e.role.startswith("tfprov#")]
    return [i for i in tf if i < start], py, [i for i in tf if i > py[-1]]


def choose(events, rng, k):
    """A deterministic sample of k points a switch, spread over the phases: the
    first and last of each phase and, in proportion, drawn by rng."""
    if k == "all":
        return list(range(len(events)))
    out = set()
    if k.startswith("python+"):  # every point of the Python phase, k more elsewhere
        out.update(phases(events)[1])
        k = k[len("python+"):]
    k = int(k)
    groups = [g for g in phases(events) if g]
    for g in groups:
        out.update((g[0], g[-1]))
    for g, share in zip(groups, (0.3, 0.4, 0.3)):
        pool = [i for i in g if i not in out]
        out.update(rng.sample(pool, min(len(pool), max(1, round(k * share)))))
    return sorted(out)


class Switches:
    """The root saved at each generation, and killed switches replayed from it."""

    def __init__(self, tfprov, tmp_path, mans, env):
        self.t, self.mans, self.env = tfprov, mans, env
        self.saved = tmp_path / "saved"
        self.saved.mkdir()
        self.kp = lib_killpoint.Killer(tmp_path / "kp",
                                       skip=[lib_killpoint.scratch(tfprov.root)])
        self.ref, self.refx, self.events, self.restores = {}, {}, {}, {}
        self.notes = []

    def save(self, tag):
        self.restores[tag] = lib_killpoint.saved_root(self.t.root, self.saved / str(tag))
        envp = self.t.path(ENV_PREFIX)
        self.ref[tag], self.refx[tag] = loose(envp), exact(envp)

    def restore(self, tag):
        self.restores[tag]()

    def argv(self, target):
        # --jobs 1: the work-sharing pools (pool.c) run on the main thread alone,
        # so its operations come in one order (with more, which items the main
        # thread takes is a race, and its n-th operation is not one operation);
        # the decode-ahead scratch is not counted (lib_killpoint.scratch).
        return [self.t.bin, "--root", self.t.root, "--jobs", "1", "apply", "-y",
                self.mans[target]]

    def reference(self, cur, target):
        """Every point of cur->target (the root left at target, as saved)."""
        self.restore(cur)
        p, ev = self.kp.points(self.argv(target), self.env)
        assert p.returncode == 0, out(p)
        assert loose(self.t.path(ENV_PREFIX)) == self.ref[target]
        assert ev, "the shim counted nothing: is it loaded?"
        self.events[(cur, target)] = ev
        return ev

    def kill(self, cur, target, point, middle=()):
        """Replays cur->target killed at point, recovers, checks; returns 'before'/'after'.

        A replay that reaches the point at another operation than the reference
        did (its main thread's operations diverged before it) is replayed once
        more from the same saved root, and the divergence is noted: one of
        some 30 replays under a load of 7 diverged once (seven operations more
        before the env's snapshot), and none of 27 replays of that point did.
        Two divergences in a row fail, naming the first differing operation."""
        ref = {e.point: e for e in self.events[(cur, target)]}.get(point)
        ctx = f"replay: TFPROV_KILL_POINT='{cur}->{target}@{point}' (reference: {ref})"
        seen = []
        for attempt in (1, 2):
            self.restore(cur)
            rc, hit, ops = self.kp.run_to_logged(self.argv(target), self.env, point)
            if hit is not None and ref is not None and hit.op == ref.op:
                break
            seen.append(f"attempt {attempt}: killed at {hit} (exit {rc}), first divergence "
                        f"{lib_killpoint.divergence(ops, self.events[(cur, target)])}")
        assert hit is not None and ref is not None and hit.op == ref.op, f"{ctx}; {seen}"
        if seen:
            self.notes.append(f"{ctx}: replayed after {seen[0]}")
        ctx = f"killed at {hit.point} {hit.op} {hit.arg}; {ctx}"
        r = self.t.run("destroy", "no-such-stack", env=self.env)
        assert r.returncode != 0, ctx + out(r)  # it only recovered
        envp = self.t.path(ENV_PREFIX)
        got = exact(envp)
        if got == self.refx[cur]:
            landed = "before"
        else:
            now = loose(envp)
            wanted = [self.ref[target]] + [self.ref[m] for m in middle]
            assert now in wanted, ctx + diff(self.refx[cur], got)
            landed = "after" if now == self.ref[target] else "middle"
        assert missing_recorded(self.t) == [], ctx
        assert journal_rows(self.t) == [], ctx
        assert temp_leftovers(self.t.root) == [], ctx
        return landed, ctx

    def converge(self, target, ctx, pip_check=True):
        p = self.t.run("apply", "-y", self.mans[target], env=self.env, timeout=600)
        assert p.returncode == 0, ctx + out(p)
        envp = self.t.path(ENV_PREFIX)
        assert loose(envp) == self.ref[target], ctx
        assert temp_leftovers(self.t.root) == [], ctx
        if pip_check and os.path.lexists(envp):
            chk = subprocess.run([os.path.join(envp, "bin", "python"), "-m", "pip", "check"],
                                 capture_output=True, text=True, env=PIP_ENV)
            assert chk.returncode == 0, ctx + chk.stdout + chk.stderr


def diff(old, new):
    miss = sorted(set(old) - set(new))
    extra = sorted(set(new) - set(old))
    changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    return (f"\nnot the old tree: {len(miss)} missing {miss[:8]}, {len(extra)} extra "
            f"{extra[:8]}, {len(changed)} changed {changed[:8]}")


def sweep(sw, directions, seed, middle=(), pip_check=True):
    """Runs the sample of every direction; prints and returns what it found."""
    rng = random.Random(seed)
    plan = []
    for cur, target in directions:
        ev = sw.reference(cur, target)
        if ONE:
            d, _, p = ONE.partition("@")
            if d == f"{cur}->{target}":
                plan.append((cur, target, p))
            continue
        print(f"{cur}->{target}: {len(ev)} points; phases "
              f"{[len(g) for g in phases(ev)]} (tfprov before, Python, tfprov after)")
        plan += [(cur, target, ev[i].point) for i in choose(ev, rng, SAMPLE)]
    found = {"before": 0, "after": 0, "middle": 0}
    t0 = time.monotonic()
    for n, (cur, target, point) in enumerate(plan):
        landed, ctx = sw.kill(cur, target, point, middle)
        found[landed] += 1
        if n % EVERY == EVERY - 1 or n == len(plan) - 1:
            sw.converge(target, f"seed {seed}; {ctx}", pip_check)
    print(f"seed {seed}: {len(plan)} points in {time.monotonic() - t0:.0f} s; the env was "
          f"left as before {found['before']}x, as the target {found['after']}x"
          + (f", between {found['middle']}x" if middle else ""))
    for note in sw.notes:
        print(f"NOTE (a replay diverged once): {note}")
    return plan, found


@pytest.mark.parametrize("installer", [None, "pip"])
def test_kill_9_during_install(tfprov, tmp_path, installer):
    seed = int(os.environ.get("TFPROV_KILL_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (TFPROV_KILL_SEED replays the sample)")
    wheels = tmp_path / "wheels"
    sets = locks(str(wheels))
    idx = lib_pyindex.Index(str(wheels))
    env = {**os.environ, **no_stub_env()}
    try:
        mans = {t: manifest(tmp_path / f"{t}.yaml", venv_yaml(),
                            pip_yaml(idx.url, sets[t], installer))
                for t in sets}
        sw = Switches(tfprov, tmp_path, mans, env)
        for t in ("A", "B"):
            p = tfprov.run("apply", "-y", mans[t], env=env, timeout=600)
            assert p.returncode == 0, out(p)
            assert ("wheels installed natively" in out(p)) == (installer is None), out(p)
            sw.save(t)
        assert sw.ref["A"] != sw.ref["B"]
        plan, found = sweep(sw, [("A", "B"), ("B", "A")], seed)
        if not ONE:
            assert found["before"] > 0 and found["after"] > 0, found
    finally:
        idx.close()


def test_kill_9_while_the_venv_is_created_with_its_wheels(tfprov, tmp_path):
    """The venv itself being created (python -m venv at its final path, then
    lock A installed natively), and removed again, each apply killed at a
    point of its own operations: after the recovery the env is absent, the
    bare venv (between the pyenv and the pip step, each its own transaction)
    or exactly A's listing (never a half-created venv), and every recorded
    file is on disk; the journal is empty and no .tfprov-* path is left; the
    next apply converges."""
    seed = int(os.environ.get("TFPROV_KILL_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (TFPROV_KILL_SEED replays the sample)")
    wheels = tmp_path / "wheels"
    sets = locks(str(wheels))
    idx = lib_pyindex.Index(str(wheels))
    env = {**os.environ, **no_stub_env()}
    try:
        mans = {"A": manifest(tmp_path / "A.yaml", venv_yaml(), pip_yaml(idx.url, sets["A"])),
                "V": manifest(tmp_path / "V.yaml", venv_yaml()),
                "none": manifest(tmp_path / "none.yaml", "")}
        sw = Switches(tfprov, tmp_path, mans, env)
        for t in ("V", "A", "none"):
            p = tfprov.run("apply", "-y", mans[t], env=env, timeout=600)
            assert p.returncode == 0, out(p)
            sw.save(t)
        assert sw.ref["A"] and sw.ref["none"] == {}
        plan, found = sweep(sw, [("none", "A"), ("A", "none")], seed, middle=("V",),
                            pip_check=False)
        if not ONE:
            assert found["before"] > 0, found
    finally:
        idx.close()


def test_a_recovery_killed_while_it_puts_the_snapshot_back_is_finished_by_the_next(
        tfprov, tmp_path):
    """Killed twice: a pip-installer switch killed inside pip (the env half
    changed, its snapshot journaled), then the recovery that puts the
    snapshot back killed too, at its own operations: at the exchange of the
    two trees, just after it, in the middle of removing what pip left, and at
    the removal of the snapshot's marker (place.c: snap_restore). The next
    recovery finishes the job: the env is byte for byte the tree before the
    switch, the journal is empty and no .tfprov-* entry is left."""
    wheels = tmp_path / "wheels"
    sets = locks(str(wheels), modules=40)
    idx = lib_pyindex.Index(str(wheels))
    env = {**os.environ, **no_stub_env()}
    try:
        mans = {t: manifest(tmp_path / f"{t}.yaml", venv_yaml(),
                            pip_yaml(idx.url, sets[t], "pip")) for t in sets}
        sw = Switches(tfprov, tmp_path, mans, env)
        for t in ("B", "A"):
            p = tfprov.run("apply", "-y", mans[t], env=env, timeout=600)
            assert p.returncode == 0, out(p)
            sw.save(t)
        ev = sw.reference("A", "B")
        inside = phases(ev)[1]
        pip_mid = ev[inside[len(inside) // 2]]
        assert pip_mid.role.startswith("py-pip-install"), pip_mid
        sw.restore("A")
        rc, hit = sw.kp.run_to(sw.argv("B"), env, pip_mid.point)
        assert hit is not None and hit.op == pip_mid.op, (rc, hit, pip_mid)
        assert exact(tfprov.path(ENV_PREFIX)) != sw.refx["A"]  # pip had changed it
        assert ("snap", ENV_PREFIX) in journal_rows(tfprov)
        sw.save("killed")
        recover = [tfprov.bin, "--root", tfprov.root, "destroy", "no-such-stack"]
        p, rev = sw.kp.points(recover, env)
        assert p.returncode != 0, out(p)
        assert exact(tfprov.path(ENV_PREFIX)) == sw.refx["A"]
        swap = next(i for i, e in enumerate(rev)
                    if e.op == "rename" and ".tfprov-snap-" in e.arg)
        mark = next(i for i, e in enumerate(rev) if i > swap and e.op == "unlink"
                    and e.arg.endswith("/.tfprov-snapshot"))
        assert mark - swap > 10, rev[swap:mark + 1]
        for i in (swap, swap + 1, (swap + mark) // 2, mark):
            sw.restore("killed")
            rc, hit = sw.kp.run_to(recover, env, rev[i].point)
            ctx = f"recovery killed at {hit} (reference: {rev[i]})"
            assert hit is not None and hit.op == rev[i].op, ctx
            r = tfprov.run("destroy", "no-such-stack", env=env)
            assert r.returncode != 0, ctx + out(r)
            assert exact(tfprov.path(ENV_PREFIX)) == sw.refx["A"], ctx + diff(
                sw.refx["A"], exact(tfprov.path(ENV_PREFIX)))
            assert journal_rows(tfprov) == [], ctx
            assert temp_leftovers(tfprov.root) == [], ctx
            assert missing_recorded(tfprov) == [], ctx
        sw.converge("B", "after the double kills")
    finally:
        idx.close()


def test_no_room_for_the_snapshot_changes_nothing(tfprov, tmp_path):
    """The env's snapshot cannot be made (the filesystem has no inode left for
    its directories: the root is a tmpfs, in a private mount namespace,
    remounted with nr_inodes 40 above what generation A uses): the pip
    step fails before pip changes the env, says why ("cannot snapshot ...: No space
    left on device", exit 1), and the env is byte for byte A's; the journal
    is empty and no .tfprov-* entry is left (the partial snapshot goes with
    the abort)."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespaces here")
    wheels = tmp_path / "wheels"
    sets = locks(str(wheels), modules=40)
    idx = lib_pyindex.Index(str(wheels))
    env = {**os.environ, **no_stub_env()}
    out_dir = tmp_path / "after"
    try:
        mans = {t: manifest(tmp_path / f"{t}.yaml", venv_yaml(),
                            pip_yaml(idx.url, sets[t], "pip")) for t in sets}
        ref = tmp_path / "ref"
        ref.mkdir()
        # Inside the namespace: apply A, B, A (every wheel cached; the reference
        # copied out), squeeze the inodes, apply B (its output and exit code
        # kept), copy the root out.
        tf = [tfprov.bin, "--root", tfprov.root]
        script = f"""set -u
mount -t tmpfs -o size=512m tfprov-snap "{tfprov.root}" || exit 90
for g in A B A; do
  {' '.join(tf)} apply -y "{tmp_path}/$g.yaml" >"{tmp_path}/a.log" 2>&1 || exit 91
done
cp -a "{tfprov.root}/." "{ref}/" || exit 92
used=$(df --output=iused "{tfprov.root}" | tail -n 1)
mount -o remount,nr_inodes=$((used + 40)) "{tfprov.root}" || exit 93
{' '.join(tf)} apply -y "{mans['B']}" >"{tmp_path}/b.log" 2>&1
echo $? >"{tmp_path}/b.rc"
cp -a "{tfprov.root}/." "{out_dir}/" || exit 94
"""
        out_dir.mkdir()
        p = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                           text=True, timeout=600, env=env)
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr,
                                   (tmp_path / "a.log").read_text()
                                   if (tmp_path / "a.log").exists() else "")
        log = (tmp_path / "b.log").read_text()
        assert (tmp_path / "b.rc").read_text().strip() == "1", log
        assert "cannot snapshot /opt/tfprov/envs/tf: No space left on device" in log, log
        assert exact(str(out_dir) + ENV_PREFIX) == exact(str(ref) + ENV_PREFIX)
        assert temp_leftovers(out_dir) == []
        con = sqlite3.connect(f"file:{out_dir}/var/lib/tfprov/state.db?mode=ro", uri=True)
        try:
            assert con.execute("SELECT count(*) FROM journal").fetchone()[0] == 0
        finally:
            con.close()
    finally:
        idx.close()

"""Fleet rollout with Ansible: the tfprov.gpu collection over 20 simulated hosts.

Real parts: OpenSSH (one sshd per host on its own 127.0.0.x address, each in
its own mount namespace, see lib_fleet.py), Debian's ansible-core driving the
collection in ansible/, the Debian package built from this build tree with
cpack and installed with apt-get (purged at the end), the fleet mirror built
once by `tfprov mirror build` and served by Debian's nginx, and a counting
loopback origin (lib_http). Stand-ins: the NVML each host loads (per-host
driver and GPUs, see lib_fleet.py) and the libraries inside the archives
(make_stack.py), since these machines have no GPU.

The scenarios run in order on one fleet; each asserts the state of every host
from that host's own state database and files:
  1. rollout to all hosts, then a no-op rollout;  6. the mirror;
  5. check mode;  2. old drivers vs canary policy;  3. kill -9 mid-apply;
  4. a bad manifest revision and rollback.yml;  then report.yml;
  7b, 7c. a second stack side by side: a failing gate keeps every host on the
  old default; then the default switched batch by batch and the old stack
  removed;  8. signed roll-outs: keys and a policy that requires signatures.
"""
import fcntl
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from lib_fleet import Fleet, Nginx
from lib_http import HttpServer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
TFPROV = os.environ.get("TFPROV_BIN", os.path.join(BUILD, "tfprov"))
MAKE_STACK = os.path.join(REPO, "tests", "fixtures", "make_stack.py")
COLLECTIONS = os.path.join(REPO, "ansible")
N = 20
OLD_DRIVER = ("470.57.02", "11040")  # fine for CUDA 11.8, too old for CUDA 12.3
OLD_HOSTS = {2: OLD_DRIVER, 10: OLD_DRIVER, 15: OLD_DRIVER}
GPU_HOSTS = {19: "NVIDIA GeForce RTX 4070 Ti:8.9"}

def sanitized_build():
    """The ASan/UBSan pass (scripts/test.sh) skips the fleet: the package is
    built from the tested build, and an ASan binary on 20 hosts under ansible
    costs the CI minutes this test already spends in the normal pass."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            return "TFPROV_SANITIZE:BOOL=ON" in f.read()
    except OSError:
        return False


pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(os.path.exists(p) for p in (
        "/usr/sbin/sshd", "/usr/sbin/nginx", "/usr/bin/ansible-playbook", "/usr/bin/unshare",
        "/usr/bin/strace")),
    reason="needs root, openssh-server, nginx, ansible-core, strace (scripts/install-deps.sh)")
skip_sanitized = pytest.mark.skipif(sanitized_build(), reason="normal pass only (see sanitized_build)")
pytestmark = [pytestmark, skip_sanitized]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class World:
    pass


def make_stack(out, url, manifest, stubs, cuda, tf):
    subprocess.run(["/usr/bin/python3", MAKE_STACK, "--stubs", os.path.join(BUILD, "stubs", stubs),
                    "--cuda", cuda, "--cudnn", "8.9.7.29", "--out", str(out), "--url-base", url,
                    "--manifest", str(manifest), "--name", "fleet", "--tensorflow", tf],
                   check=True, capture_output=True, timeout=120)


def build_deb(out):
    p = subprocess.run(["cpack", "-G", "DEB", "-B", str(out)], cwd=BUILD, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    debs = [f for f in os.listdir(out) if re.match(r"tfprov_[0-9.]+_amd64\.deb$", f)]
    assert len(debs) == 1, os.listdir(out)
    return os.path.join(out, debs[0])


def dpkg_installed():
    p = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", "tfprov"],
                       capture_output=True, text=True)
    return p.stdout if p.returncode == 0 and "install ok installed" in p.stdout else None


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    t0 = time.time()
    def mark(what):
        print("fleet fixture: %s at %.1fs" % (what, time.time() - t0), file=sys.stderr)
    w = World()
    base = tmp_path_factory.mktemp("fleet")
    w.base = base
    w.origin = HttpServer(root=str(base / "origin")).start()
    os.makedirs(base / "origin")
    w.v1, w.v2, w.v3 = (str(base / ("v%d.yaml" % i)) for i in (1, 2, 3))
    make_stack(base / "origin", w.origin.url(""), w.v1, "cuda11", "11.8.0", "2.13.0")
    make_stack(base / "origin", w.origin.url(""), w.v2, "cuda12", "12.3.2", "2.15.1")
    # v3: v1 with one wrong hash (the cuDNN archive's): a bad revision whose
    # CUDA step differs from v2 and is placed before the bad hash is found.
    text = open(w.v1).read()
    good = re.findall(r"sha256: ([0-9a-f]{64})", text)[-1]
    with open(w.v3, "w") as f:
        f.write(text.replace(good, ("0" if good[0] != "0" else "1") + good[1:]))

    mark("stacks made")
    # The Debian package of this build, installed with apt-get.
    w.deb = build_deb(base / "deb")
    mark("deb built")
    w.preinstalled = dpkg_installed()
    p = subprocess.run(["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=300",
                        w.deb], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        mark("deb installed")
        # The fleet mirror, built once on the controller and served by nginx.
        w.mirror_dir = base / "mirror"
        os.makedirs(base / "ctl")  # --root must exist
        p = subprocess.run([TFPROV, "--root", str(base / "ctl"), "mirror", "build",
                            str(w.mirror_dir), w.v1, w.v2], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        w.mirror_build_requests = list(w.origin.requests)
        shutil.copy(w.deb, w.mirror_dir)
        w.nginx = Nginx(base / "nginx", w.mirror_dir).start()
        drivers = dict(OLD_HOSTS)
        w.fleet = Fleet(base / "fleet", N, os.path.join(BUILD, "stubs", "driver"),
                        drivers=drivers, gpus=GPU_HOSTS)
        w.fleet.start()
        mark("fleet started")
        try:
            yield w
        finally:
            w.fleet.stop()
            w.nginx.stop()
            assert not w.fleet.leftovers(), w.fleet.leftovers()
    finally:
        w.origin.stop()
        if not w.preinstalled:
            subprocess.run(["apt-get", "purge", "-y", "-q", "-o", "DPkg::Lock::Timeout=300",
                            "tfprov"], capture_output=True, timeout=600,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def ansible_env(w):
    return dict(os.environ, ANSIBLE_CONFIG=w.fleet.cfg, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
                ANSIBLE_STDOUT_CALLBACK="tfprov_json", ANSIBLE_NOCOLOR="1",
                ANSIBLE_CALLBACK_PLUGINS=os.path.join(HERE, "ansible_callbacks"),
                ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")


def run_own_group(argv, env, cwd, timeout=900):
    """subprocess.run in a session of its own; whatever ansible left running
    in it (a worker that outlived ansible-playbook) is killed afterwards."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def play(w, playbook, *args, expect_rc=None):
    """Runs ansible-playbook with the json callback; returns (rc, per-host results)."""
    argv = ["ansible-playbook", playbook] + list(args)
    t0 = time.time()
    p = run_own_group(argv, ansible_env(w), str(w.base))
    print("fleet: %s %s: rc %d in %.1fs" % (os.path.basename(playbook), " ".join(args)[-80:],
                                            p.returncode, time.time() - t0), file=sys.stderr)
    try:
        out = json.loads(p.stdout[p.stdout.index("{"):])
    except ValueError:
        raise AssertionError("no JSON from %s (rc %d):\n%s\n%s" % (argv, p.returncode,
                                                                  p.stdout[-3000:], p.stderr[-3000:]))
    w.nplays = getattr(w, "nplays", 0) + 1
    with open(os.path.join(str(w.base), "play-%02d.json" % w.nplays), "w") as f:
        json.dump(dict(argv=argv, rc=p.returncode, out=out, stderr=p.stderr[-5000:]), f)
    if expect_rc is not None:
        assert p.returncode == expect_rc, (p.returncode, json.dumps(out["stats"]), p.stderr[-2000:])
    results = {}
    for pl in out["plays"]:
        for t in pl["tasks"]:
            for h, r in t["hosts"].items():
                results.setdefault(h, []).append((t["task"]["name"], r))
    return p.returncode, results, out["stats"]


def task(results, host, name):
    """The result of the task named name on host (the last one of that name)."""
    rs = [r for n, r in results.get(host, []) if n == name or n.endswith(" : " + name)]
    assert rs, "%s did not run %r: %s" % (host, name, [n for n, _ in results.get(host, [])])
    return rs[-1]


def gens(host):
    """[(result, manifest sha256)] of the host's stack 'fleet', and its current number."""
    db = host.path("/var/lib/tfprov/state.db")
    if not os.path.exists(db):
        return [], None
    c = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        rows = c.execute("SELECT g.id, g.result, g.manifest_sha256 FROM generations g "
                         "JOIN stacks s ON s.id = g.stack_id WHERE s.name = 'fleet' "
                         "ORDER BY g.id").fetchall()
        cur = c.execute("SELECT current_gen FROM stacks WHERE name = 'fleet'").fetchone()
    finally:
        c.close()
    ids = [r[0] for r in rows]
    return [(r[1], r[2]) for r in rows], (ids.index(cur[0]) + 1 if cur and cur[0] in ids else None)


def login_stack(host):
    """The stack a login shell on the host enters: TFPROV_STACK after sh -l
    (its /etc/profile sources /etc/profile.d/tfprov.sh), '' for none."""
    rc, out = host.ssh("env -u TFPROV_STACK sh -lc 'printf \"%s\" \"${TFPROV_STACK-}\"'")
    assert rc == 0, (host.name, rc, out)
    return out


def stacks_of(host):
    """The names of the host's stacks and its default stack (None when none), from its
    state database."""
    c = sqlite3.connect("file:%s?mode=ro" % host.path("/var/lib/tfprov/state.db"), uri=True)
    try:
        names = sorted(r[0] for r in c.execute("SELECT name FROM stacks"))
        row = c.execute("SELECT value FROM settings WHERE key = 'default_stack'").fetchone()
    finally:
        c.close()
    return names, (row[0] or None) if row else None


def current_sha(host):
    g, cur = gens(host)
    return g[cur - 1][1] if cur else None


def tree(host):
    """Every placed path of the host with size and mtime: what 'unchanged' means."""
    out = {}
    for top in ("/opt/tfprov", "/etc/profile.d"):
        d = host.path(top)
        for dp, dns, fns in os.walk(d):
            for n in fns + dns:
                p = os.path.join(dp, n)
                st = os.lstat(p)
                out[os.path.relpath(p, d) + "@" + top] = (st.st_size, st.st_mtime_ns)
    return out


def rollout(w, manifest, *extra):
    return play(w, "tfprov.gpu.rollout", "-e", "tfprov_stack=fleet",
                "-e", "tfprov_manifest_src=" + manifest, *extra)


def test_0_node_role_installs_and_points_at_mirror(world):
    w = world
    site = w.base / "site.yml"
    site.write_text("- hosts: fleet\n  gather_facts: false\n  roles: [tfprov.gpu.node]\n")
    args = ["-e", "tfprov_deb_url=" + w.nginx.url(os.path.basename(w.deb)),
            "-e", json.dumps({"tfprov_mirror": [w.nginx.url("")]})]
    for attempt in range(2):
        rc, res, stats = play(w, str(site), *args, expect_rc=0)
        for h in w.fleet.hosts:
            assert stats[h.name]["failures"] == 0 and stats[h.name]["unreachable"] == 0
            cfg = json.load(open(h.path("/etc/tfprov/fleet.json")))
            assert cfg == {"mirror": [w.nginx.url("")]}
            # apt-get installed the package above: the role finds it installed.
            assert task(res, h.name, "Install tfprov from the Debian package (URL)")["changed"] \
                is False
            if attempt == 1:
                assert stats[h.name]["changed"] == 0, (h.name, stats[h.name])
    version = re.match(r"tfprov_([0-9.]+)_amd64\.deb$", os.path.basename(w.deb)).group(1)
    assert dpkg_installed().endswith(" " + version) or w.preinstalled
    assert os.path.exists("/usr/share/tfprov/data/compat.yaml")
    assert os.path.exists("/usr/share/man/man1/tfprov.1.gz")


def test_1_rollout_then_noop(world):
    w = world
    rc, res, stats = rollout(w, w.v1)
    assert rc == 0, stats
    v1 = sha(w.v1)
    for h in w.fleet.hosts:
        r = task(res, h.name, "Apply the stack, verify, bench where a GPU exists")
        assert r["changed"] is True and r["rc"] == 0 and r["generation"] == 1, (h.name, r)
        assert r["verify"]["ok"] is True, (h.name, r)
        assert gens(h) == ([("ok", v1)], 1), h.name
        assert os.path.exists(h.path("/opt/tfprov/cuda/11.8.0/lib/libcudart.so.11.0"))
        assert os.path.exists(h.path("/opt/tfprov/stacks/fleet/activate.sh"))
        assert login_stack(h) == "fleet", h.name
        assert ("bench" in r) == (h.name == "h19"), (h.name, r)
    assert task(res, "h19", "Apply the stack, verify, bench where a GPU exists")["bench"]
    before = {h.name: tree(h) for h in w.fleet.hosts}

    rc, res, stats = rollout(w, w.v1)
    assert rc == 0, stats
    for h in w.fleet.hosts:
        r = task(res, h.name, "Apply the stack, verify, bench where a GPU exists")
        assert r["changed"] is False and r["verify"]["ok"] is True, (h.name, r)
        assert stats[h.name]["changed"] == 0, (h.name, stats[h.name])
        assert gens(h) == ([("ok", v1)], 1) and tree(h) == before[h.name], h.name


def test_6_origin_once_per_artifact_hosts_fill_from_mirror(world):
    w = world
    index = json.load(open(w.mirror_dir / "index.json"))["files"]
    origin_paths = [r[1] for r in w.origin.requests if r[0] == "GET"]
    assert w.origin.requests == w.mirror_build_requests, "hosts went to the origin"
    for f in index:
        path = "/" + f["url"].split("/", 3)[3]
        assert origin_paths.count(path) == 1, (path, origin_paths.count(path))
    v1_files = [f for f in index if f["url"] in open(w.v1).read()]
    assert len(v1_files) == 8  # 7 CUDA 11.8 components and cuDNN
    served = w.nginx.gets()
    for f in v1_files:
        # A URL mirror is asked for the artifact's file name (engine/artifact/fetch.c).
        assert served.count("/" + f["file"]) == N, (f["file"], served.count("/" + f["file"]))
        for h in w.fleet.hosts:
            assert os.path.exists(h.path("/var/cache/tfprov/sha256/" + f["sha256"])), h.name


def test_5_check_mode_plans_and_changes_nothing(world):
    w = world
    before = {h.name: (gens(h), tree(h)) for h in w.fleet.hosts}
    rc, res, stats = rollout(w, w.v2, "--check", "--diff", "-e", "tfprov_max_fail_percentage=100")
    for h in w.fleet.hosts:
        r = task(res, h.name, "Apply the stack, verify, bench where a GPU exists")
        assert "CUDA 12.3.2" in r["plan"], (h.name, r)
        assert (gens(h), tree(h)) == before[h.name], h.name
        if h.name not in ("h02", "h10", "h15"):
            assert r["changed"] is True and r["rc"] == 2, (h.name, r)
            assert any(s["step"] == "cuda" for s in r["steps"])
            assert "CUDA 12.3.2" in r["diff"]["prepared"]
        assert not os.path.exists(h.path("/opt/tfprov/cuda/12.3.2"))
        assert not os.path.exists(h.path("/var/lib/tfprov/manifests/v2.yaml"))


def test_2_old_drivers_stop_the_canary_policy(world):
    w = world
    v1, v2 = sha(w.v1), sha(w.v2)
    # Batches: [h00], [h01 h02], [h03..h19]. h02 fails (driver 470): 1 of 2 is
    # more than 20%: the batch is rolled back and the rollout stops.
    rc, res, stats = rollout(w, w.v2, "-e", "tfprov_max_fail_percentage=20")
    assert rc != 0
    r = task(res, "h02", "Apply the stack, verify, bench where a GPU exists")
    assert r["failed"] and r["rc"] == 6, r
    assert "precondition failed" in r["msg"] and "470.57.02 is too old" in r["msg"], r["msg"]
    h00, h01, h02 = (w.fleet.host(n) for n in ("h00", "h01", "h02"))
    assert gens(h00) == ([("ok", v1), ("ok", v2)], 2)
    assert os.path.exists(h00.path("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))
    # h01 applied v2, then went back to generation 1's manifest.
    g, cur = gens(h01)
    assert g[:2] == [("ok", v1), ("ok", v2)] and g[-1] == ("ok", v1) and cur == len(g), g
    assert task(res, "h01", "Return to the previous generation")["changed"] is True
    assert gens(h02) == ([("ok", v1)], 1)
    for h in w.fleet.hosts[3:]:
        assert gens(h) == ([("ok", v1)], 1), h.name
        assert h.name not in res, "%s was reached after the batch failed" % h.name

    # With 50%, [h01 h02] passes; h10 and h15 fail alone in the last batch
    # (2 of 17): every other host ends on v2, the three old drivers stay on v1.
    rc, res, stats = rollout(w, w.v2, "-e", "tfprov_max_fail_percentage=50")
    assert rc != 0  # three hosts failed
    for h in w.fleet.hosts:
        if h.name in ("h02", "h10", "h15"):
            r = task(res, h.name, "Apply the stack, verify, bench where a GPU exists")
            assert r["rc"] == 6 and "precondition failed" in r["msg"], r
            assert gens(h) == ([("ok", v1)], 1), h.name
            assert stats[h.name]["failures"] == 1
        else:
            assert current_sha(h) == v2 and gens(h)[0][-1] == ("ok", v2), h.name
            assert stats[h.name]["failures"] == 0, (h.name, stats[h.name])
            assert os.path.exists(h.path("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))


def test_3_kill_9_mid_apply_then_converge(world, tmp_path):
    """h05 (on v2) is sent v1; tfprov is killed with SIGKILL on that host while
    it places the CUDA step. apply fetches and verifies every download before
    its first change, and placing this stand-in stack takes milliseconds, so
    the kill is made to land there: cuDNN trickles from a slow mirror (tfprov
    is still downloading when it is found), strace attaches to it and holds
    each mkdir(2) for a second on its way out (a test instrument: nothing else
    is changed), and the SIGKILL is sent once the CUDA step's staging
    directory exists. The host is then recoverable and untouched where it
    counts (still on v2, v2's files intact, lock free); running the rollout
    again recovers and converges on v1."""
    w = world
    h = w.fleet.host("h05")
    v1, v2 = sha(w.v1), sha(w.v2)
    g0, cur0 = gens(h)
    assert g0[cur0 - 1] == ("ok", v2), g0
    before = tree(h)
    shutil.rmtree(h.path("/var/cache/tfprov/sha256"))
    cudnn = [f for f in json.load(open(w.mirror_dir / "index.json"))["files"]
             if f["kind"] == "cudnn" and f["url"] in open(w.v1).read()][0]
    cuda_dir = h.path("/opt/tfprov/cuda")

    def staging():
        return [n for n in os.listdir(cuda_dir) if n.startswith(".tfprov-")]

    slow = HttpServer(root=str(w.mirror_dir)).start()
    tracer, out, err = None, "", ""
    try:
        slow.rate["/" + cudnn["file"]] = 2000
        argv = ["ansible", "h05", "-m", "tfprov.gpu.stack", "-a",
                json.dumps({"src": w.v1, "name": "fleet", "mirror": [slow.url("")]})]
        env = ansible_env(w)
        env["ANSIBLE_STDOUT_CALLBACK"] = "minimal"
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=str(w.base), start_new_session=True)
        pid = killed = None
        deadline = time.time() + 120
        while time.time() < deadline and killed is None and proc.poll() is None:
            if pid is None and slow.count("/" + cudnn["file"]) > 0:
                for p in h.pids():
                    try:
                        cmd = open("/proc/%d/cmdline" % p, "rb").read().split(b"\0")
                    except OSError:
                        continue
                    if cmd and os.path.basename(cmd[0]) == b"tfprov" and b"apply" in cmd:
                        pid = p
                        tracer = subprocess.Popen(
                            ["strace", "-qq", "-f", "-o", "/dev/null", "-p", str(pid),
                             "-e", "trace=mkdir", "-e", "inject=mkdir:delay_exit=1000000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                        break
            if pid is not None and staging():
                # Placement is under way: downloads done, generation opened.
                g, cur = gens(h)
                assert g[-1] == ("running", v1), g
                os.kill(pid, 9)
                killed = pid
            time.sleep(0.05)
        try:
            out = proc.communicate(timeout=120)[0]
        finally:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
    finally:
        slow.stop()
        if tracer is not None:
            try:
                err = tracer.communicate(timeout=30)[1]
            finally:
                if tracer.poll() is None:
                    tracer.kill()
                    tracer.wait()
    assert killed, "tfprov apply on h05 not killed during placement (pid %s): %s %s" % (
        pid, out, err)
    assert "FAILED" in out and "exit -9" in out, out
    # Killed mid-placement: the generation stays 'running' until the next run
    # recovers it; h05 still runs v2 with v2's files as they were; the
    # staging directory and its journal rows are what the next run undoes;
    # the lock died with the process.
    g, cur = gens(h)
    assert g[:-1] == g0 and g[-1] == ("running", v1) and cur == cur0, g
    after = tree(h)
    for p, v in before.items():
        if p != "cuda@/opt/tfprov":  # the staging directory's parent
            assert after.get(p) == v, p
    new = [p for p in after if p not in before]
    assert new and all(p.startswith("cuda/.tfprov-stage-") for p in new), new
    c = sqlite3.connect("file:%s?mode=ro" % h.path("/var/lib/tfprov/state.db"), uri=True)
    try:
        assert c.execute("SELECT count(*) FROM journal WHERE op = 'stage'").fetchone()[0] >= 1
    finally:
        c.close()
    with open(h.path("/var/lib/tfprov/lock"), "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
        fcntl.flock(f, fcntl.LOCK_UN)

    # The next run (the same rollout again) recovers and finishes: a new good
    # generation of v1, verified, nothing left of the killed run. (Rolling
    # out v2 instead would be a no-op that leaves generation 3 'interrupted'
    # as the last one, which `tfprov status` reports with exit 2.)
    rc, res, stats = rollout(w, w.v1, "--limit", "h05")
    assert rc == 0, stats
    r = task(res, "h05", "Apply the stack, verify, bench where a GPU exists")
    assert r["changed"] is True and r["verify"]["ok"] is True, r
    g, cur = gens(h)
    assert g == g0 + [("interrupted", v1), ("ok", v1)] and cur == len(g), g
    assert os.path.exists(h.path("/opt/tfprov/cuda/11.8.0/lib/libcudart.so.11.0"))
    assert not [p for p in tree(h) if "/.tfprov-" in "/" + p], sorted(tree(h))
    assert not os.listdir(h.path("/var/cache/tfprov/partial"))
    c = sqlite3.connect("file:%s?mode=ro" % h.path("/var/lib/tfprov/state.db"), uri=True)
    try:
        # 'gc' rows are backups kept for a later collection, not unfinished work.
        assert c.execute("SELECT count(*) FROM journal WHERE op != 'gc'").fetchone()[0] == 0
    finally:
        c.close()
    for other in w.fleet.hosts:
        if other is not h:
            assert other.name not in res, other.name


def test_4_bad_revision_canary_exit_5_then_rollback(world):
    """v3 (one wrong hash) is rolled out: the canary h00 fails with exit 5
    before it changes anything (apply verifies every download before its
    first change), and no other host is reached. rollback.yml is then shown on
    a real change: a good revision (v1) rolled out to the canary alone, and
    rollback.yml returns it to its previous generation (v2's manifest)."""
    w = world
    v1, v2 = sha(w.v1), sha(w.v2)
    before = {h.name: (gens(h), tree(h)) for h in w.fleet.hosts}
    rc, res, stats = rollout(w, w.v3, "-e", "tfprov_auto_rollback=false")
    assert rc != 0
    r = task(res, "h00", "Apply the stack, verify, bench where a GPU exists")
    assert r["rc"] == 5 and "integrity failure" in r["msg"] and "sha256" in r["msg"], r
    assert stats["h00"]["failures"] == 1, stats["h00"]
    for h in w.fleet.hosts[1:]:
        assert h.name not in res, "%s was reached after the canary failed" % h.name
    # Nothing changed anywhere, the canary included: no generation was opened.
    for h in w.fleet.hosts:
        assert (gens(h), tree(h)) == before[h.name], h.name
    h00 = w.fleet.host("h00")
    g0, cur0 = gens(h00)
    assert g0[cur0 - 1] == ("ok", v2) and cur0 == len(g0), g0

    # A good revision to the canary only.
    rc, res, stats = rollout(w, w.v1, "--limit", "h00")
    assert rc == 0, stats
    g, cur = gens(h00)
    assert g == g0 + [("ok", v1)] and cur == len(g), g
    assert os.path.exists(h00.path("/opt/tfprov/cuda/11.8.0/lib/libcudart.so.11.0"))

    rc, res, stats = play(w, "tfprov.gpu.rollback", "-e", "tfprov_stack=fleet", "--limit", "h00")
    assert rc == 0, stats
    r = task(res, "h00", "Roll back")
    assert r["changed"] is True and r["previous_generation"] == cur, r
    g, cur = gens(h00)
    # tfprov rollback records a new generation with generation cur0's manifest.
    assert g[:-1] == g0 + [("ok", v1)] and g[-1] == ("ok", v2) and cur == len(g), g
    assert os.path.exists(h00.path("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))
    # Rolling back again to that generation changes nothing: h00 already runs
    # its manifest. (Without tfprov_generation, rollback.yml's "previous" is
    # the last good generation with another manifest, v1's: it would flip.)
    rc, res, stats = play(w, "tfprov.gpu.rollback", "-e", "tfprov_stack=fleet", "-e",
                          "tfprov_generation=%d" % cur0, "--limit", "h00", expect_rc=0)
    assert task(res, "h00", "Roll back")["changed"] is False
    assert gens(h00) == (g, cur)
    for h in w.fleet.hosts[1:]:
        assert (gens(h), tree(h)) == before[h.name], h.name


def test_7_report(world):
    w = world
    rc, res, stats = play(w, "tfprov.gpu.report", "-e", "tfprov_report_dir=" + str(w.base / "rep"))
    assert rc == 0, stats
    rows = json.load(open(w.base / "rep" / "report.json"))
    assert sorted(r["host"] for r in rows) == sorted(h.name for h in w.fleet.hosts)
    by = {r["host"]: r for r in rows}
    for h in w.fleet.hosts:
        r = by[h.name]
        assert r["stack"] == "fleet" and r["generation"] == gens(h)[1], r
        assert r["driver"] == h.driver and r["drift"] is False, r
    assert by["h19"]["gpu"] == "NVIDIA GeForce RTX 4070 Ti (8.9)" and by["h19"]["fp32_ms"] > 0
    md = open(w.base / "rep" / "report.md").read()
    assert len(re.findall(r"^\| h\d\d \|", md, re.M)) == N and "FP32 ms/step" in md
    # Each host's `tfprov sbom --all`: one CycloneDX document, for its stack fleet.
    for h in w.fleet.hosts:
        boms = json.load(open(w.base / "rep" / "sbom" / f"{h.name}.json"))
        assert [b["metadata"]["component"]["name"] for b in boms] == ["fleet"], h.name
        assert boms[0]["specVersion"] == "1.6" and boms[0]["components"], h.name


NEXT = "fleet-next"


def next_manifest(w, src, name):
    """src as the stack fleet-next under its own prefix, /opt/tfprov/next, so that
    it lies beside the stack fleet (/opt/tfprov) with nothing in common but the
    download cache."""
    path = str(w.base / name)
    text = open(src).read()
    assert text.count("  name: fleet\n") == 1 and text.count("prefix: /opt/tfprov\n") == 1
    with open(path, "w") as f:
        f.write(text.replace("  name: fleet\n", "  name: %s\n" % NEXT)
                .replace("prefix: /opt/tfprov\n", "prefix: /opt/tfprov/next\n"))
    return path


def side_by_side(w, manifest, *extra):
    return play(w, "tfprov.gpu.rollout", "-e", "tfprov_side_by_side=true",
                "-e", "tfprov_stack=" + NEXT, "-e", "tfprov_old_stack=fleet",
                "-e", "tfprov_manifest_src=" + manifest, *extra)


def outside_next(t):
    """tree() less what lies under /opt/tfprov/next."""
    return {p: v for p, v in t.items() if not p.startswith("next")}


APPLY_NEXT = "Apply the new stack (not the default), verify, bench where a GPU exists"


def test_7b_side_by_side_failing_gate_keeps_every_host_on_the_old_default(world):
    """A new stack, fleet-next, is rolled out beside fleet with
    tfprov_side_by_side: it needs CUDA 12.3.2, and the three hosts with driver
    470 fail its health gate (exit 6, the gate of test_2). 17 hosts passed it,
    but no host's default changes: every host still logs in to fleet, fleet's
    generations and files are untouched, fleet-next is removed again where it
    had been placed, and no host reaches the default switch."""
    w = world
    bad = next_manifest(w, w.v2, "next-cuda12.yaml")
    before = {h.name: (gens(h), outside_next(tree(h)), stacks_of(h)) for h in w.fleet.hosts}
    for h in w.fleet.hosts:
        assert before[h.name][2] == (["fleet"], "fleet"), (h.name, before[h.name][2])
    rc, res, stats = side_by_side(w, bad)
    assert rc != 0
    for h in w.fleet.hosts:
        r = task(res, h.name, APPLY_NEXT)
        if h.name in ("h02", "h10", "h15"):
            assert r["failed"] and r["rc"] == 6 and "470.57.02 is too old" in r["msg"], r
        else:
            assert r["changed"] is True and r["verify"]["ok"] is True, (h.name, r)
            assert r["default_stack"] == "fleet", (h.name, r)
            removed = task(res, h.name, "Remove the new stack where it did not exist before")
            assert removed["changed"] is True, (h.name, removed)
        stop = task(res, h.name, "Stop on every host when the gate failed on any (each keeps "
                                 "its default)")
        assert stop["failed"], (h.name, stop)
        if h.name not in ("h02", "h10", "h15"):
            assert "failed on h02, h10, h15" in stop["msg"] and "stays fleet" in stop["msg"], stop
        assert stats[h.name]["failures"] == 1, (h.name, stats[h.name])
        assert not [n for n, _ in res[h.name] if n == "Make the new stack the default"], h.name
        assert (gens(h), outside_next(tree(h)), stacks_of(h)) == before[h.name], h.name
        left = h.path("/opt/tfprov/next")
        assert not [os.path.join(dp, f) for dp, _, fs in os.walk(left) for f in fs], h.name
        assert login_stack(h) == "fleet", h.name


def test_7c_side_by_side_switches_default_in_batches_then_removes_old(world):
    """fleet-next (CUDA 11.8, fine on every driver) side by side: check mode on
    two hosts plans every phase and changes nothing; the rollout puts it beside
    fleet on all 20 hosts, gates it, switches the default in the canary batches
    and only then destroys fleet. Afterwards each host has fleet-next alone, as
    its default, and a login shell enters it; the same rollout again changes
    nothing."""
    w = world
    good = next_manifest(w, w.v1, "next-cuda11.yaml")
    before = {h.name: (gens(h), tree(h), stacks_of(h)) for h in w.fleet.hosts}

    rc, res, stats = side_by_side(w, good, "--check", "--diff", "--limit", "h03,h04")
    assert rc == 0, stats
    for n in ("h03", "h04"):
        h = w.fleet.host(n)
        r = task(res, n, APPLY_NEXT)
        assert r["changed"] is True and r["rc"] == 2 and "CUDA 11.8.0" in r["plan"], r
        assert r["default_stack"] == "fleet" and r["diff"]["before"] == r["diff"]["after"], r
        assert task(res, n, "Make the new stack the default").get("skipped"), n
        assert task(res, n, "Remove the old stack")["changed"] is True, n
        assert (gens(h), tree(h), stacks_of(h)) == before[n], n

    rc, res, stats = side_by_side(w, good)
    assert rc == 0, (stats, {h: [n for n, r in rs if r.get("failed")] for h, rs in res.items()})
    for h in w.fleet.hosts:
        r = task(res, h.name, APPLY_NEXT)
        assert r["changed"] is True and r["verify"]["ok"] is True, (h.name, r)
        assert r["default_stack"] == "fleet", (h.name, r)  # not switched in phase 1
        assert ("bench" in r) == (h.name == "h19"), (h.name, r)
        d = task(res, h.name, "Make the new stack the default")
        assert d["changed"] is True and d["previous_default_stack"] == "fleet", (h.name, d)
        assert d["default_stack"] == NEXT, (h.name, d)
        assert task(res, h.name, "Ask a login shell which stack it enters")["stdout"] == NEXT
        assert task(res, h.name, "Remove the old stack")["changed"] is True, h.name
        assert stats[h.name]["failures"] == 0, (h.name, stats[h.name])
        assert stacks_of(h) == ([NEXT], NEXT), (h.name, stacks_of(h))
        assert os.path.exists(h.path("/opt/tfprov/next/cuda/11.8.0/lib/libcudart.so.11.0"))
        assert os.path.exists(h.path("/opt/tfprov/next/stacks/%s/activate.sh" % NEXT))
        assert not [p for p in tree(h) if p.startswith(("cuda/", "stacks/fleet/"))], h.name
        assert "/opt/tfprov/next/stacks/%s/activate.sh" % NEXT in \
            open(h.path("/etc/profile.d/tfprov.sh")).read(), h.name
        assert login_stack(h) == NEXT, h.name

    # Done is done: phase 1 applies nothing, the default is already the new
    # stack, the old one is gone.
    after = {n: (tree(w.fleet.host(n)), stacks_of(w.fleet.host(n))) for n in ("h03", "h04")}
    rc, res, stats = side_by_side(w, good, "--limit", "h03,h04")
    assert rc == 0, stats
    for n in ("h03", "h04"):
        assert stats[n]["changed"] == 0, (n, stats[n])
        assert (tree(w.fleet.host(n)), stacks_of(w.fleet.host(n))) == after[n], n


def test_8_signed_rollout_policy_requires_signatures(world):
    """The node role places a trusted key in /etc/tfprov/trusted-keys.d and a
    policy that requires signatures. An unsigned manifest and a tampered
    signed one are refused on the canary with exit 5 and no host changes
    (no generation opened, no file touched); the signed manifest, carried with
    its .minisig by tfprov.gpu.stack's src, rolls out to every host."""
    w = world
    keys = w.base / "keys"
    keys.mkdir()
    p = subprocess.run([TFPROV, "keygen", "--key", str(keys / "fleet.key")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    site = w.base / "site-signed.yml"
    site.write_text("- hosts: fleet\n  gather_facts: false\n  roles: [tfprov.gpu.node]\n")
    rc, res, stats = play(w, str(site), "-e", "tfprov_deb_url=" + w.nginx.url(os.path.basename(w.deb)),
                          "-e", json.dumps({"tfprov_mirror": [w.nginx.url("")],
                                            "tfprov_trusted_keys": [str(keys / "fleet.pub")],
                                            "tfprov_require_signature": True}), expect_rc=0)
    # With signatures required, a URL mirror's index must be signed too (README,
    # "Signed manifests"): the fleet mirror is signed by the same key.
    p = subprocess.run([TFPROV, "--root", str(w.base / "ctl"), "mirror", "build",
                        str(w.mirror_dir), w.v1, w.v2, "--key", str(keys / "fleet.key")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.path.exists(w.mirror_dir / "index.json.minisig")
    pub = open(keys / "fleet.pub").read()
    for h in w.fleet.hosts:
        assert open(h.path("/etc/tfprov/trusted-keys.d/fleet.pub")).read() == pub, h.name
        assert open(h.path("/etc/tfprov/policy.yaml")).read() == "require_signature: true\n"
        assert not os.path.exists(h.path("/etc/tfprov/keys")), h.name

    signed = w.base / "signed"
    signed.mkdir()
    good = signed / "fleet-v1.yaml"
    shutil.copy(w.v1, good)
    p = subprocess.run([TFPROV, "sign", "--key", str(keys / "fleet.key"), str(good)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.path.exists(str(good) + ".minisig")
    unsigned = w.base / "unsigned" / "fleet-v1.yaml"
    unsigned.parent.mkdir()
    shutil.copy(w.v1, unsigned)
    tampered = w.base / "tampered" / "fleet-v1.yaml"
    tampered.parent.mkdir()
    tampered.write_text(open(good).read().replace("name: fleet", "name: fleet  # edited", 1))
    assert tampered.read_text() != good.read_text()
    shutil.copy(str(good) + ".minisig", str(tampered) + ".minisig")

    for bad in (unsigned, tampered):
        before = {h.name: (gens(h), tree(h)) for h in w.fleet.hosts}
        rc, res, stats = rollout(w, str(bad), "-e", "tfprov_auto_rollback=false")
        assert rc != 0
        r = task(res, "h00", "Apply the stack, verify, bench where a GPU exists")
        assert r["failed"] and r["rc"] == 5, (bad, r)
        assert "integrity failure" in r["msg"] and "fleet-v1.yaml" in r["msg"], r["msg"]
        assert ("is not signed" in r["msg"]) == (bad is unsigned), r["msg"]
        assert "mirror" not in r["msg"], r["msg"]
        for h in w.fleet.hosts[1:]:
            assert h.name not in res, "%s was reached after the canary failed" % h.name
        for h in w.fleet.hosts:
            assert (gens(h), tree(h)) == before[h.name], (bad, h.name)

    rc, res, stats = rollout(w, str(good))
    assert rc == 0, stats
    v1 = sha(w.v1)
    for h in w.fleet.hosts:
        r = task(res, h.name, "Apply the stack, verify, bench where a GPU exists")
        assert r["rc"] == 0 and r["verify"]["ok"] is True, (h.name, r)
        assert current_sha(h) == v1, h.name
        placed = h.path("/var/lib/tfprov/manifests/fleet-v1.yaml.minisig")
        assert open(placed).read() == open(str(good) + ".minisig").read(), h.name
        assert os.path.exists(h.path("/opt/tfprov/cuda/11.8.0/lib/libcudart.so.11.0"))

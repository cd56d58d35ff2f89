#!/usr/bin/python3
"""Fleet rollout wall time: tfprov.gpu.stack against an Ansible role doing the
same work with Ansible's own modules, over the same simulated hosts.

    sudo /usr/bin/python3 bench/fleet.py [--hosts 20] [--runs 3] [--role-runs 1] [--build build]

Hosts: tests/system/lib_fleet.py (one real sshd per host on 127.0.0.x, each in
its own mount namespace with private /opt/tfprov, /etc/profile.d,
/var/lib/tfprov, /var/cache/tfprov). The stack: make_stack.py's CUDA 11.8.0 +
cuDNN 8.9.7.29 stand-in (9 xz archives of stub libraries) pinned by a
manifest, served by Debian's nginx from a mirror that `tfprov mirror build`
made once. Both sides fetch from that nginx, with the same ansible.cfg (forks
= hosts, pipelining, ssh ControlPersist) in the same run. Before every timed
play an untimed `ansible -m ping` warms the ssh control masters, so no side
pays for connection setup.

tfprov side: one play, one task: tfprov.gpu.stack (src: the manifest; apply
-y, then verify), binary: this build's tfprov (the build-tree marker finds its
data), and the canary playbook tfprov.gpu.rollout (serial [1, 10%, 100%]) for
the first rollout and the no-op.
Ansible side (bench/fleet_role): file (prefix and cache dirs), get_url with
checksum=sha256 for each archive, unarchive (remote_src, strip 1) into the
same layout, template for the profile.d script. pip is not part of it: this
stand-in stack has no Python environment (see bench/README.md).

"First" = every host empty (private dirs wiped); "no-op" = the same play again.
Prints a Markdown table; --json FILE writes the raw times.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "system"))

from lib_fleet import SHARED_MOUNTS, Fleet, Nginx  # noqa: E402
from lib_http import HttpServer  # noqa: E402

ROLE_DIR = os.path.join(HERE, "fleet_role")


def sh(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3, help="no-op runs per side (median)")
    ap.add_argument("--role-runs", type=int, default=1,
                    help="no-op runs of the Ansible role (minutes each)")
    ap.add_argument("--firsts", type=int, default=1, help="first rollouts per side")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--json", help="write the raw times here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/fleet.py: needs root (mount namespaces, sshd)")
    build = os.path.abspath(a.build)
    tfprov = os.path.join(build, "tfprov")
    base = tempfile.mkdtemp(prefix="tfprov-fleet-bench-")
    origin = nginx = fleet = None
    times = {}
    try:
        os.makedirs(os.path.join(base, "origin"))
        origin = HttpServer(root=os.path.join(base, "origin")).start()
        manifest = os.path.join(base, "fleet.yaml")
        sh(["/usr/bin/python3", os.path.join(REPO, "tests", "fixtures", "make_stack.py"),
            "--stubs", os.path.join(build, "stubs", "cuda11"), "--cuda", "11.8.0",
            "--cudnn", "8.9.7.29", "--out", os.path.join(base, "origin"),
            "--url-base", origin.url(""), "--manifest", manifest, "--name", "fleet",
            "--tensorflow", "2.13.0"], timeout=120)
        mirror = os.path.join(base, "mirror")
        os.makedirs(os.path.join(base, "ctl"))  # --root must exist
        sh([tfprov, "--root", os.path.join(base, "ctl"), "mirror", "build", mirror, manifest],
           timeout=300)
        nginx = Nginx(os.path.join(base, "nginx"), mirror).start()
        fleet = Fleet(os.path.join(base, "fleet"), a.hosts,
                      os.path.join(build, "stubs", "driver")).start()

        # The archives as the role sees them: name, mirror URL, sha256.
        import yaml
        m = yaml.safe_load(open(manifest))
        arts = [dict(name=x["name"], sha256=x["sha256"]) for x in m["cuda"]["artifacts"]]
        arts.append(dict(name="cudnn", sha256=m["cudnn"]["artifact"]["sha256"]))
        prefix = "/opt/tfprov/ansible/cuda/%s" % m["versions"]["cuda"]
        ext = {"tfprov_bench_mirror": nginx.url(""), "tfprov_bench_artifacts": arts,
               "tfprov_bench_prefix": prefix, "tfprov_bench_env": m["env"]["vars"]}
        extra = os.path.join(base, "role-vars.json")
        with open(extra, "w") as f:
            json.dump(ext, f)
        plays = {
            "tfprov": os.path.join(base, "tfprov.yml"),
            "role": os.path.join(base, "role.yml"),
        }
        with open(plays["tfprov"], "w") as f:
            f.write("""- hosts: fleet
  gather_facts: false
  tasks:
    - name: Apply and verify with tfprov
      tfprov.gpu.stack:
        src: %s
        name: fleet
        binary: %s
        mirror: ["%s"]
        verify_no_gpu: true
""" % (manifest, tfprov, nginx.url("")))
        with open(plays["role"], "w") as f:
            f.write("- hosts: fleet\n  gather_facts: false\n  roles: [tfstack]\n")
        env = dict(os.environ, ANSIBLE_CONFIG=fleet.cfg,
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "ansible"),
                   ANSIBLE_ROLES_PATH=ROLE_DIR, ANSIBLE_NOCOLOR="1",
                   ANSIBLE_STDOUT_CALLBACK="minimal")

        def warm():
            sh(["ansible", "fleet", "-m", "ping"], env=env, cwd=base, timeout=300)

        def timed(argv):
            warm()
            t0 = time.monotonic()
            # Its own session: interrupted, ansible-playbook and its forks go together.
            p = subprocess.Popen(argv, env=env, cwd=base, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                out, err = p.communicate(timeout=1200)
            except BaseException:
                os.killpg(p.pid, 9)
                p.wait()
                raise
            dt = time.monotonic() - t0
            if p.returncode != 0:
                raise SystemExit("failed: %s\n%s\n%s" % (argv, out[-4000:], err[-2000:]))
            changed = sum(1 for line in out.splitlines() if "| CHANGED" in line)
            return dt, changed

        def wipe():
            for h in fleet.hosts:
                for mnt in SHARED_MOUNTS:
                    if mnt in ("/etc/tfprov", "/root"):
                        continue
                    d = h.path(mnt)
                    for n in os.listdir(d):
                        p = os.path.join(d, n)
                        if os.path.isdir(p) and not os.path.islink(p):
                            shutil.rmtree(p)
                        else:
                            os.unlink(p)

        sides = {
            "tfprov.gpu.stack (one task)": ["ansible-playbook", plays["tfprov"]],
            "tfprov.gpu.rollout (canary 1, 10%, 100%)": [
                "ansible-playbook", "tfprov.gpu.rollout", "-e", "tfprov_stack=fleet",
                "-e", "tfprov_manifest_src=" + manifest, "-e", "tfprov_binary=" + tfprov,
                "-e", json.dumps({"tfprov_mirror": [nginx.url("")]})],
            "Ansible role (get_url, unarchive, template)": [
                "ansible-playbook", plays["role"], "-e", "@" + extra],
        }
        for name, argv in sides.items():
            t = times.setdefault(name, {"first": [], "noop": []})
            for _ in range(a.firsts):
                wipe()
                dt, ch = timed(argv)
                t["first"].append(dt)
                print("%s: first %.1f s" % (name, dt), file=sys.stderr)
            for _ in range(a.role_runs if name.startswith("Ansible") else a.runs):
                dt, ch = timed(argv)
                if ch:
                    raise SystemExit("%s: the no-op run changed %d hosts" % (name, ch))
                t["noop"].append(dt)
                print("%s: no-op %.1f s" % (name, dt), file=sys.stderr)
        wipe()
    finally:
        if fleet:
            fleet.stop()
        if nginx:
            nginx.stop()
        if origin:
            origin.stop()
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)

    role = statistics.median(times["Ansible role (get_url, unarchive, template)"]["noop"])
    print("| %d hosts, forks %d | first rollout | no-op (median) | role no-op / this no-op |"
          % (a.hosts, a.hosts))
    print("|---|---|---|---|")
    for name, t in times.items():
        noop = statistics.median(t["noop"])
        print("| %s | %.1f s | %.1f s | %.2fx |" % (name, statistics.median(t["first"]), noop,
                                                   role / noop))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(hosts=a.hosts, times=times), f, indent=1)


if __name__ == "__main__":
    main()

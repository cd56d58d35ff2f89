#!/usr/bin/python3
"""`tfprov image build` from a warm cache, against the floor and the naive route.

The stack: tests/fixtures/make_stack.py's CUDA 12.3.2 + cuDNN 8.9.7.29 stub
archives (with --filler headers in the CUDA archive), a venv of /usr/bin/python3
and one wheel of --wheel-mb MiB of random (incompressible) data in --wheel-files
files, served on loopback. The base: a one-layer stand-in rootfs
(tests/system/test_image.py's make_base) or --base (an OCI layout, e.g. the
bookworm base test_image_podman.py caches). Every contender writes its output
to the same filesystem (--work), fresh each run:

  tfprov    `tfprov image build MANIFEST --base BASE -o OUT` (an OCI layout),
            the cache warm (one build before the timed ones): with a tfprov
            that has the image cache, the stack's layers copied from it (each
            hashed against its digest), the config, manifest and index; and,
            as `--no-cache`, the apply into a private root, the relocation, the
            layers (one per step), the blobs (a tfprov without the image cache
            always does this);
  floor     the stack's placed tree (the image's stack layers unpacked, once)
            written as one tar: `tar -cf - -C TREE . | cat > /dev/null` (GNU tar
            skips reading the files when the archive itself is /dev/null, hence
            the pipe);
  podman    `podman build --no-cache` of a Containerfile `FROM base` /
            `COPY tree/ /` of the same tree, the base pulled from its layout,
            into a private store (root, runc, cgroupfs, as test_image_podman.py);
            skipped when podman is not installed or cannot build here.

Then the image size (its stack layers and the whole image) and the bytes two
images share: a second stack with the same CUDA and another cuDNN, built on the
same base, through `tfprov --json image inspect A B`.

    /usr/bin/python3 bench/image_build.py --tfprov build/tfprov [--runs 3] [--json]

TIMELINE=1 adds one `-v` build whose lines are printed with the seconds since
its start (where the time goes); KEEP=1 keeps the work directory.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "system"))

import lib_pyindex  # noqa: E402
from lib_provision import Mirror, no_stub_env  # noqa: E402
from test_image import make_base, read_image  # noqa: E402


def sh(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def timed(argv, **kw):
    t = time.monotonic()
    p = sh(argv, **kw)
    dt = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit("failed: %s\n%s%s" % (" ".join(argv), p.stdout[-2000:], p.stderr[-2000:]))
    return dt


def tree_size(root):
    n = files = 0
    for dp, _, fns in os.walk(root):
        for f in fns:
            p = os.path.join(dp, f)
            if not os.path.islink(p):
                n += os.lstat(p).st_size
                files += 1
    return n, files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tfprov", default=os.path.join(REPO, "build", "tfprov"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default=None,
                    help="a directory for every output (default: a temp dir)")
    ap.add_argument("--base", default=None, help="an OCI layout (default: a stand-in rootfs)")
    ap.add_argument("--filler", type=int, default=4000, help="filler headers in the CUDA archive")
    ap.add_argument("--wheel-mb", type=int, default=96)
    ap.add_argument("--wheel-files", type=int, default=48)
    ap.add_argument("--no-podman", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tfprov = os.path.realpath(a.tfprov)
    work = tempfile.mkdtemp(prefix="tfprov-imgbench-", dir=a.work)
    env = no_stub_env()
    res = {"runs": a.runs, "loadavg_start": os.getloadavg()}
    try:
        base = a.base or make_base(os.path.join(work, "base"))
        wheels = os.path.join(work, "wheels")
        per = a.wheel_mb * (1 << 20) // a.wheel_files
        files = {"bigwheel/__init__.py": "__version__ = '1.0.0'\n"}
        for i in range(a.wheel_files):
            files["bigwheel/data%03d.bin" % i] = os.urandom(per)
        _, sha = lib_pyindex.build_wheel(wheels, "bigwheel", "1.0.0", files=files)
        idx = lib_pyindex.Index(wheels)
        pyver = sh(["/usr/bin/python3", "-c",
                    "import sys;print('%d.%d'%sys.version_info[:2])"]).stdout.strip()
        venv = (f"python:\n  manager: venv\n  name: tf\n  version: \"{pyver}\"\n"
                "  interpreter: /usr/bin/python3\n"
                f"pip:\n  index_url: {idx.url}\n  complete: true\n  requirements: |\n"
                f"    bigwheel==1.0.0 \\\n        --hash=sha256:{sha}\n")
        cache = os.path.join(work, "cache")
        with Mirror(os.path.join(work, "www")) as m:
            one = m.stack(os.path.join(work, "one.yaml"), name="one", python=pyver,
                          extra_yaml=venv, extra_files=a.filler)
            two = m.stack(os.path.join(work, "two.yaml"), name="two", python=pyver,
                          cudnn="8.9.6.50", cudnn_variant="cuda12", extra_yaml=venv,
                          extra_files=a.filler)

            def build(manifest, out, *extra):
                shutil.rmtree(out, ignore_errors=True)
                return timed([tfprov, "--cache-dir", cache, "-q", "image", "build", manifest,
                              "--base", base, "-o", out, *extra], env={**os.environ, **env},
                             timeout=1800)

            img = os.path.join(work, "img-one")
            res["tfprov_cold_s"] = build(one, img)  # fills the cache
            res["tfprov_s"] = [build(one, img) for _ in range(a.runs)]
            if "--no-cache" in sh([tfprov, "help", "image"]).stdout:
                res["tfprov_nocache_s"] = [build(one, img, "--no-cache") for _ in range(a.runs)]
            if os.environ.get("TIMELINE"):
                shutil.rmtree(img, ignore_errors=True)
                t0 = time.monotonic()
                pr = subprocess.Popen([tfprov, "--cache-dir", cache, "-v", "image", "build", one,
                                       "--base", base, "-o", img], env={**os.environ, **env},
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for line in pr.stdout:
                    print("%7.2f %s" % (time.monotonic() - t0, line.rstrip()))
                pr.wait()
            img2 = os.path.join(work, "img-two")
            build(two, img2)
        idx.close()

        # The placed tree: the image's stack layers (not the base's) unpacked.
        _, man, cfg = read_image(img)
        nbase = len(man["layers"]) - sum(
            1 for h in cfg["history"] if h.get("comment", "").startswith("tfprov image build"))
        tree = os.path.join(work, "ctx", "tree")
        os.makedirs(tree)
        for layer in man["layers"][nbase:]:
            with tarfile.open(os.path.join(img, "blobs", "sha256",
                                           layer["digest"].split(":")[1])) as t:
                t.extractall(tree, numeric_owner=True)
        res["tree_bytes"], res["tree_files"] = tree_size(tree)
        res["floor_s"] = [timed(["sh", "-c", 'tar -cf - -C "$0" . | cat > /dev/null', tree])
                          for _ in range(a.runs)]

        ins = sh([tfprov, "--json", "image", "inspect", img, img2])
        data = [json.loads(line) for line in ins.stdout.splitlines() if '"image_inspect"' in line]
        d = data[0].get("data", data[0])
        res["image_bytes"] = d["size"]
        res["stack_layer_bytes"] = sum(layer["size"] for layer in d["layers"][nbase:])
        res["shared_bytes_with_two"] = d["shared_bytes"]
        res["layers"] = [(layer["step"], layer["size"], layer.get("shared"))
                         for layer in d["layers"]]

        if not a.no_podman and shutil.which("podman") and os.geteuid() == 0:
            res["podman_s"] = podman_build(work, base, a.runs)
        res["loadavg_end"] = os.getloadavg()
    finally:
        if os.environ.get("KEEP"):
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(res, a.json)


def podman_build(work, base, runs):
    d = tempfile.mkdtemp(prefix="tfprov-podman-", dir="/tmp")  # runroot: <= 50 characters
    conf = os.path.join(d, "containers.conf")
    with open(conf, "w") as f:
        f.write("[containers]\ndefault_ulimits = []\n")
    pm = ["podman", "--root", d + "/storage", "--runroot", d + "/run", "--runtime", "runc",
          "--cgroup-manager=cgroupfs", "--events-backend=file"]
    penv = {**os.environ, "CONTAINERS_CONF": conf}
    ctx = os.path.join(work, "ctx")
    with open(os.path.join(ctx, "Containerfile"), "w") as f:
        f.write("FROM localhost/bench-base:1\nCOPY tree/ /\n")
    # podman names an oci: image after its path, and refuses a name that is not a
    # valid reference (mkdtemp's names may end in "_"): pulled through a link named
    # only with [a-z0-9-].
    clean = "/tmp/tfprov-podman-base-%d" % os.getpid()
    os.symlink(os.path.abspath(base), clean)
    try:
        p = sh(pm + ["pull", "oci:" + clean + ":", ], env=penv, timeout=600)
        if p.returncode == 0:
            p = sh(pm + ["tag", p.stdout.split()[-1], "localhost/bench-base:1"], env=penv)
        if p.returncode != 0:
            return "skipped: " + (p.stderr or p.stdout)[-300:]
        out = []
        for i in range(runs):
            out.append(timed(pm + ["build", "--no-cache", "-q", "-t", "bench:%d" % i, "-f",
                                   os.path.join(ctx, "Containerfile"), ctx], env=penv,
                             timeout=1800))
        return out
    finally:
        sh(pm + ["rmi", "-a", "-f"], env=penv, timeout=300)
        sh(["umount", "-R", d + "/storage/overlay"])
        shutil.rmtree(d, ignore_errors=True)
        os.unlink(clean)


def report(res, as_json):
    if as_json:
        print(json.dumps(res, indent=1))
        return

    def med(v):
        return "%.2f s (min %.2f, max %.2f)" % (statistics.median(v), min(v), max(v)) \
            if isinstance(v, list) else str(v)
    mb = 1 << 20
    print("load average at start/end: %s / %s" % (
        " ".join("%.1f" % x for x in res["loadavg_start"]),
        " ".join("%.1f" % x for x in res.get("loadavg_end", ()))))
    print("placed tree: %.1f MiB in %d files" % (res["tree_bytes"] / mb, res["tree_files"]))
    print("tfprov image build, cold cache: %.2f s" % res["tfprov_cold_s"])
    print("tfprov image build, warm cache: %s" % med(res["tfprov_s"]))
    if "tfprov_nocache_s" in res:
        print("  the same, --no-cache:         %s" % med(res["tfprov_nocache_s"]))
    print("floor, tar of the tree:         %s" % med(res["floor_s"]))
    if "podman_s" in res:
        print("podman build --no-cache COPY:   %s" % med(res["podman_s"]))
    print("image: %.1f MiB (stack layers %.1f MiB); shared with the second stack: %.1f MiB" % (
        res["image_bytes"] / mb, res["stack_layer_bytes"] / mb,
        res["shared_bytes_with_two"] / mb))
    for step, size, shared in res["layers"]:
        print("  %-12s %10.1f MiB%s" % (step or "-", size / mb, "  shared" if shared else ""))


if __name__ == "__main__":
    main()

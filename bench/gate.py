#!/usr/bin/python3
"""The speed gate: two tfprov builds, alternating, on every shape a speed change may touch.

    /usr/bin/python3 bench/gate.py OLD NEW [--runs 3] [--shapes LIST] [--scale 0.1]

OLD and NEW are each a tfprov binary or a git revision of this repository; a
revision is exported (`git archive`) and built once, Release, tests off, into
--builds (default /tmp/tfprov-gate/<commit>/). Every change that claims or may
cost speed runs this against the commit before it and puts the table in its
commit message or bench/README.md.

Shapes (--shapes, comma-separated; default all):
  cuda       NVIDIA's real CUDA 11.8 libraries (Debian's non-free packages
             repackaged as redist archives, cold_apply.py part 1: 8 archives,
             xz): a cold `apply` of the cuda step from a loopback server into a
             fresh root and cache on tmpfs; a fast link, CPU-bound.
  stack1g    current_stack.py's stable-2.20-shaped stack (CUDA 12.5 redist
             archives, cuDNN, a venv, the wheels) at --scale, over a 1 Gbit/s
             token-bucket link: a cold `apply`.
  stack100m  the same over 100 Mbit/s (decoders that wait on the network).
  wheels     the same wheels alone, `--mirror DIR apply` into a venv an
             earlier apply made (the native installer: inflate + compile).
  noop100k   a no-op `apply` of a stack with 100,000 recorded files
             (recorded_tree.py; on disk), each run the median of 5 calls.
  status100k `status` of the same.
Each shape: one warm-up pair (discarded), then --runs pairs, the order
alternating (OLD NEW, NEW OLD, ...), the same inputs for both. Printed per
shape: each binary's median, min and max wall time and peak RSS (the largest
process of tfprov's tree, GNU time's %M), NEW/OLD of the medians, and the min and max
of the per-pair ratios (the spread: on this shared machine a ratio whose
range straddles 1 is noise, not a result). The load average is printed
before and after every shape.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "system"))
import cold_apply  # noqa: E402
import current_stack  # noqa: E402
import lib_http  # noqa: E402
import recorded_tree  # noqa: E402

SHAPES = ["cuda", "stack1g", "stack100m", "wheels", "noop100k", "status100k"]


def loadavg():
    return open("/proc/loadavg").read().split()[0:3]


def run(argv, **kw):
    """Runs argv; returns (wall seconds, the process, its stdout, its stderr)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    out, err = p.communicate()
    return time.monotonic() - t0, p, out, err


# current_stack.py's archives carry filler shared objects, not NVIDIA's sonames, so
# the apply's last step (verify) reports libcudart.so.12 and the rest missing and the
# run exits 8 ("applied and recorded, but not proven"): every step before it ran.
UNPROVEN = (8, b"is applied and recorded, but it is not proven to work here")


def run_rss(argv, unproven_ok=False, **kw):
    """Runs argv, which must succeed (or, with unproven_ok, end in exit 8 with
    every step applied); returns (wall seconds, the peak RSS in MiB of the
    largest process of its tree). GNU time forks it and reads wait4's
    ru_maxrss: a child forked or vforked by this script itself would carry
    this script's own high-water mark across its exec (the kernel keeps the
    larger of the two), which read 270 MiB for a stack whose largest process
    is 89 MiB once current_stack's mirror had been built in this process."""
    t0 = time.monotonic()
    p = subprocess.Popen(["/usr/bin/time", "-f", "GATE-RSS %M", *argv],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    err = p.stderr.read()
    p.wait()
    wall = time.monotonic() - t0
    lines = err.decode(errors="replace").rstrip("\n").split("\n")
    rss = int(lines[-1].split()[-1]) / 1024 if lines[-1].startswith("GATE-RSS ") else 0.0
    err = "\n".join(l for l in lines if not l.startswith(("GATE-RSS ", "Command exited")))
    if unproven_ok and p.returncode == UNPROVEN[0] and UNPROVEN[1] in err.encode():
        return wall, rss
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {p.returncode}\n{err}")
    return wall, rss


def binary(spec, builds):
    if os.path.isfile(spec) and os.access(spec, os.X_OK):
        return os.path.abspath(spec)
    sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", spec + "^{commit}"],
                         capture_output=True, text=True)
    if sha.returncode != 0:
        raise SystemExit(f"{spec}: neither an executable nor a revision of {REPO}")
    sha = sha.stdout.strip()
    out = os.path.join(builds, sha[:12])
    exe = os.path.join(out, "build", "tfprov")
    if os.path.exists(exe):
        return exe
    src = os.path.join(out, "src")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(src)
    subprocess.run(f"git -C {REPO} archive {sha} | tar -x -C {src}", shell=True, check=True)
    subprocess.run(["cmake", "-S", src, "-B", os.path.join(out, "build"),
                    "-DCMAKE_BUILD_TYPE=Release", "-DTFPROV_TESTS=OFF"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", os.path.join(out, "build"), "-j",
                    str(os.cpu_count() or 1), "--target", "tfprov"], check=True,
                   stdout=subprocess.DEVNULL)
    return exe


class Shape:
    """setup() once; once(binary, n) one timed run: (seconds, peak RSS MiB); close()."""

    def __init__(self, args):
        self.args = args
        self.work = os.path.join(args.work, type(self).__name__)
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)

    def close(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def fresh(self, n):
        d = os.path.join(self.work, f"r{n}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    unproven_ok = False

    def once(self, exe, n):
        """A cold `apply -y` of self.man into a fresh root (the cuda and stack shapes)."""
        d = self.fresh(n)
        r = run_rss([exe, "--root", d, "-q", "apply", "-y", self.man],
                    unproven_ok=self.unproven_ok)
        shutil.rmtree(d, ignore_errors=True)
        return r


class Cuda(Shape):
    def setup(self):
        mirror, json_path = cold_apply.build_mirror(self.args.cold_cache, 6)
        self.srv = lib_http.HttpServer(root=mirror).start()
        self.man = os.path.join(self.work, "cuda.yaml")
        cold_apply.cuda_manifest(self.man, self.srv.url("/compute/cuda/redist/redistrib_11.8.0.json"),
                                 json_path)

    def close(self):
        self.srv.stop()
        super().close()


class Stack(Shape):
    mbit = 1000
    unproven_ok = True  # UNPROVEN above

    def setup(self):
        a = self.args
        mirror = current_stack.build_mirror(a.current_cache, a.scale)
        self.srv, base = current_stack.serve(mirror, current_stack.Link(self.mbit * 1e6 / 8))
        self.man = os.path.join(self.work, "stack.yaml")
        current_stack.manifest(self.man, base, mirror, a.scale, a.pyver, current_stack.INTERP)

    def close(self):
        self.srv.shutdown()
        super().close()


class Stack100m(Stack):
    mbit = 100


class Wheels(Shape):
    def setup(self):
        a = self.args
        mirror = current_stack.build_mirror(a.current_cache, a.scale)
        self.wdir = os.path.join(mirror, "wheels")
        self.m_env, self.m_pip, _, _ = current_stack.wheel_manifests(self.work, mirror, a.scale,
                                                                    a.pyver)

    def once(self, exe, n):
        d = self.fresh(n)
        run_rss([exe, "--root", d, "-q", "apply", "-y", self.m_env])
        r = run_rss([exe, "--root", d, "--mirror", self.wdir, "-q", "apply", "-y", self.m_pip])
        shutil.rmtree(d, ignore_errors=True)
        return r




class Noop(Shape):
    """On disk (args.disk), made once with OLD; both binaries read the same state."""
    cmd = "apply"

    def setup(self):
        self.root = os.path.join(self.args.disk, f"noop-root-{self.args.noop_files}")
        self.man = os.path.join(self.args.disk, "noop.yaml")
        if not os.path.exists(os.path.join(self.root, ".made")):
            shutil.rmtree(self.root, ignore_errors=True)
            os.makedirs(self.root)
            open(self.man, "w").write(recorded_tree.MANIFEST)
            subprocess.run([self.args.old, "--root", self.root, "-q", "apply", "-y", self.man],
                           check=True, capture_output=True)
            recorded_tree.add(self.root, self.args.noop_files)
            open(os.path.join(self.root, ".made"), "w").close()
        for exe in (self.args.old, self.args.new):
            _, p, out, err = run([exe, "--root", self.root, "apply", self.man])
            if p.returncode != 0 or b"No changes" not in out + err:
                raise SystemExit(f"{exe}: not a no-op:\n{(out + err).decode()}")

    def argv(self, exe):
        if self.cmd == "status":
            return [exe, "--root", self.root, "-q", "status"]
        return [exe, "--root", self.root, "-q", "apply", self.man]

    def once(self, exe, n):
        v = [run_rss(self.argv(exe)) for _ in range(5)]
        return statistics.median(w for w, _ in v), max(r for _, r in v)

    def close(self):
        super().close()  # the tree stays for the next shape and run (--disk)


class NoopStatus(Noop):
    cmd = "status"


CLASSES = {"cuda": Cuda, "stack1g": Stack, "stack100m": Stack100m, "wheels": Wheels,
           "noop100k": Noop, "status100k": NoopStatus}


def fmt(v, unit):
    if unit == "s":
        return f"{statistics.median(v):.2f} s ({min(v):.2f}-{max(v):.2f})"
    return f"{statistics.median(v) * 1000:.0f} ms ({min(v) * 1000:.0f}-{max(v) * 1000:.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--noop-files", type=int, default=100000)
    ap.add_argument("--builds", default="/tmp/tfprov-gate")
    ap.add_argument("--cold-cache", default="/tmp/tfprov-cold")
    ap.add_argument("--current-cache", default="/tmp/tfprov-current")
    ap.add_argument("--work", default="/dev/shm/tfprov-gate")
    ap.add_argument("--disk", default="/tmp/tfprov-gate-disk")
    args = ap.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if s not in CLASSES:
            raise SystemExit(f"unknown shape {s} (known: {', '.join(SHAPES)})")
    args.old = binary(args.old, args.builds)
    args.new = binary(args.new, args.builds)
    args.pyver = subprocess.run([current_stack.INTERP, "-c",
                                 "import sys;print('%d.%d'%sys.version_info[:2])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.disk, exist_ok=True)
    print(f"OLD {args.old}\nNEW {args.new}\n{os.cpu_count()} cores, load {' '.join(loadavg())}",
          flush=True)
    rows = []
    for name in shapes:
        sh = CLASSES[name](args)
        sh.setup()
        load0 = loadavg()[0]
        res = {"old": [], "new": []}
        try:
            for k in range(args.runs + 1):
                order = ("old", "new") if k % 2 == 0 else ("new", "old")
                for who in order:
                    wall, rss = sh.once(getattr(args, who), f"{k}{who}")
                    tag = " (warm-up)" if k == 0 else ""
                    print(f"  {name} run {k} {who}: {wall:.3f} s, peak RSS {rss:.0f} MiB, "
                          f"load {loadavg()[0]}{tag}", flush=True)
                    if k > 0:
                        res[who].append((wall, rss))
        finally:
            sh.close()
        o = [w for w, _ in res["old"]]
        n = [w for w, _ in res["new"]]
        pair = [b / a for a, b in zip(o, n)]
        unit = "s" if statistics.median(o) >= 1 else "ms"
        rows.append((name, fmt(o, unit), fmt(n, unit),
                     f"{statistics.median(n) / statistics.median(o):.3f}",
                     f"{min(pair):.3f}-{max(pair):.3f}",
                     f"{max(r for _, r in res['old']):.0f} / {max(r for _, r in res['new']):.0f}",
                     f"{load0}-{loadavg()[0]}"))
    print(f"\n| shape | OLD median (min-max) | NEW median (min-max) | NEW/OLD | per-pair "
          f"ratios | peak RSS MiB OLD / NEW | load |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\n{args.runs} pairs a shape after a warm-up pair, alternating; "
          f"load at the end {' '.join(loadavg())}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Two tfprov binaries, alternating, on the shapes a process-level change touches.

    /usr/bin/python3 bench/ab.py OLD_BIN NEW_BIN [--runs N]

For a change to how tfprov starts or what it loads (engine/base/lazylibs.c
was the first), each of these is timed for OLD and NEW in turn, ABAB..., N
times, and the medians are printed side by side with NEW/OLD:
  start      `tfprov --version` (process start and library loading);
  run        `tfprov run small -- true` on an env-only stack;
  noop       a no-op `tfprov apply` of a CUDA-layout stack (make_stack.py,
             CUDA 12.3.2 + cuDNN stand-in archives, 2,000 extra headers);
  cold       a cold `tfprov --no-gpu apply` of that stack into a fresh root
             with an empty cache, from a loopback HTTP server (downloads,
             verification, decoding, placement: where libcurl and libarchive
             are first needed).
Each binary gets its own roots; the cold roots are fresh every run. Stand-in
libraries: build/stubs (the test build's); no GPU is needed.
Follows bench/README.md: alternating runs, medians, nothing else running.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "system"))
from lib_http import HttpServer  # noqa: E402

SMALL = """schema: 1
stack:
  name: small
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
driver:
  policy: skip
"""


def timed(argv, env=None):
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{argv} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tfprov-ab-")
    env = dict(os.environ, LD_LIBRARY_PATH="", TFPROV_WSL_LIB_DIR="/nonexistent",
               TFPROV_PROC_VERSION="/nonexistent")
    try:
        www = os.path.join(work, "www")
        os.makedirs(www)
        srv = HttpServer(root=www)
        srv.start()
        manifest = os.path.join(work, "cuda.yaml")
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "make_stack.py"),
                        "--stubs", os.path.join(a.build, "stubs", "cuda12"), "--cuda", "12.3.2",
                        "--cudnn", "8.9.7.29", "--cudnn-variant", "cuda12", "--out", www,
                        "--url-base", srv.url(""), "--manifest", manifest, "--name", "ab",
                        "--extra-files", "2000"], check=True, capture_output=True)
        small = os.path.join(work, "small.yaml")
        open(small, "w").write(SMALL)
        bins = {"old": a.old, "new": a.new}
        for k, b in bins.items():
            r = os.path.join(work, k + "-root")
            timed([b, "--root", r, "--no-gpu", "apply", "-y", manifest], env)
            timed([b, "--root", r, "apply", "-y", small], env)
        # A binary from before `tfprov run` existed is not timed on that shape.
        has_run = all(subprocess.run([b, "help", "run"], capture_output=True).returncode == 0
                      for b in bins.values())
        shapes = ("start", "run", "noop", "cold") if has_run else ("start", "noop", "cold")
        times = {(s, k): [] for s in shapes for k in bins}
        for i in range(a.runs):
            for k in (("old", "new") if i % 2 == 0 else ("new", "old")):
                b, r = bins[k], os.path.join(work, k + "-root")
                times[("start", k)].append(timed([b, "--version"], env))
                if has_run:
                    times[("run", k)].append(
                        timed([b, "--root", r, "run", "small", "--", "true"], env))
                times[("noop", k)].append(
                    timed([b, "--root", r, "--no-gpu", "-q", "apply", "-y", manifest], env))
                cold = os.path.join(work, f"cold-{k}-{i}")
                times[("cold", k)].append(
                    timed([b, "--root", cold, "--no-gpu", "-q", "apply", "-y", manifest], env))
                shutil.rmtree(cold)
        srv.stop()
        print(f"{a.runs} runs each, alternating; old={a.old} new={a.new}")
        print("| shape | old median | new median | new/old |")
        print("|---|---|---|---|")
        for s in shapes:
            o = statistics.median(times[(s, "old")]) * 1e3
            n = statistics.median(times[(s, "new")]) * 1e3
            print(f"| {s} | {o:.1f} ms | {n:.1f} ms | {n / o:.3f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

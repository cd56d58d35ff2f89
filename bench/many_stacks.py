#!/usr/bin/python3
"""Many stacks as fast as one: the no-op apply and `status` of one stack beside 0, 4 or 19 others.

    /usr/bin/python3 bench/many_stacks.py [--tfprov build/tfprov] [--counts 1,5,20]
                                          [--files 10000] [--runs 5]

The stacks: the stable-2.15 shape as the stand-ins make it here (CUDA 12.3.2
and cuDNN 8.9.7 redist archives of tests/fixtures/make_stack.py with the
stand-in libraries, --files filler headers in NVIDIA's include/ layout, and a
venv of /usr/bin/python3; no wheels), each under its own prefix so that no
two share a file (about 10,000 recorded files a stack), installed by tfprov
itself from a loopback server. One root per count (1, 5, 20 stacks), each
built once. Then, round after round, for each root in turn: the no-op
`apply` of stack s0, `status s0`, and `status` of every stack, each the
median of --runs calls (whole processes, warm cache). Printed: medians over
the rounds and the ratio to the one-stack root. The target (issue 31): the
no-op and `status s0` within 1.2x of one stack at 5 and 20.
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
sys.path.insert(0, os.path.join(REPO, "tests", "system"))
import lib_http  # noqa: E402

PY = "%d.%d" % sys.version_info[:2]
UNPROVEN = "is applied and recorded, but it is not proven to work here"


def timed(argv, ok=(0,)):
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True)
    w = time.monotonic() - t0
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return w, p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tfprov", default=os.path.join(REPO, "build", "tfprov"))
    ap.add_argument("--counts", default="1,5,20")
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/tfprov-many")
    ap.add_argument("--keep", action="store_true", help="keep the roots (for a profiler)")
    args = ap.parse_args()
    exe = os.path.abspath(args.tfprov)
    counts = [int(x) for x in args.counts.split(",")]
    stubs = os.path.join(os.path.dirname(exe), "stubs", "cuda12")
    if not os.path.isdir(stubs):
        stubs = os.path.join(REPO, "build", "stubs", "cuda12")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    mirror = os.path.join(args.work, "mirror")
    os.makedirs(mirror)
    srv = lib_http.HttpServer(root=mirror).start()
    try:
        tmpl = os.path.join(args.work, "tmpl.yaml")
        venv = (f"python:\n  manager: venv\n  name: tf\n  version: \"{PY}\"\n"
                f"  interpreter: /usr/bin/python{PY}\n")
        subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tests/fixtures/make_stack.py"),
                        "--stubs", stubs, "--cuda", "12.3.2", "--cudnn", "8.9.7.29",
                        "--out", mirror, "--url-base", srv.url(""), "--manifest", tmpl,
                        "--name", "s0", "--prefix", "/opt/s0", "--python", PY,
                        "--driver-policy", "skip", "--extra-files", str(args.files),
                        "--extra-yaml", venv], check=True, capture_output=True)
        text = open(tmpl).read()
        mans = []
        for k in range(max(counts)):
            m = os.path.join(args.work, f"s{k}.yaml")
            open(m, "w").write(text.replace("name: s0", f"name: s{k}", 1)
                               .replace("prefix: /opt/s0", f"prefix: /opt/s{k}", 1))
            mans.append(m)
        roots = {}
        for n in counts:
            r = os.path.join(args.work, f"root{n}")
            os.makedirs(r)
            t0 = time.monotonic()
            for m in mans[:n]:
                # Exit 8 (applied, not proven): the apply's verify looks for the
                # libraries where the stand-ins are not (no GPU here); every step
                # before it ran, and the no-op below checks the stack is whole.
                _, p = timed([exe, "--root", r, "--no-gpu", "-q", "apply", "-y", m], ok=(0, 8))
                assert p.returncode == 0 or UNPROVEN in p.stderr, p.stderr
            w, p = timed([exe, "--root", r, "--no-gpu", "apply", mans[0]])
            assert "No changes" in p.stdout + p.stderr, p.stdout + p.stderr
            rec = subprocess.run(["sqlite3", os.path.join(r, "var/lib/tfprov/state.db"),
                                  "SELECT count(*) FROM files"], capture_output=True,
                                 text=True).stdout.strip()
            print(f"root with {n} stacks: {rec} recorded files, built in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
            roots[n] = r
    finally:
        srv.stop()
    load0 = open("/proc/loadavg").read().split()[0]
    what = {"noop": lambda r: [exe, "--root", r, "--no-gpu", "-q", "apply", mans[0]],
            "status s0": lambda r: [exe, "--root", r, "-q", "status", "s0"],
            "status (all)": lambda r: [exe, "--root", r, "-q", "status"]}
    res = {(n, w): [] for n in counts for w in what}
    for rnd in range(args.rounds + 1):
        order = counts if rnd % 2 == 0 else counts[::-1]
        for n in order:
            for w, argv in what.items():
                v = [timed(argv(roots[n]))[0] for _ in range(args.runs)]
                if rnd > 0:  # round 0 warms the page cache
                    res[(n, w)].append(statistics.median(v))
    print(f"\nload {load0} -> {open('/proc/loadavg').read().split()[0]}; medians of "
          f"{args.rounds} rounds (each the median of {args.runs} calls), {exe}\n")
    print("| stacks | " + " | ".join(f"{w} | / 1 stack" for w in what) + " |")
    print("|---|" + "---|---|" * len(what))
    for n in counts:
        cells = []
        for w in what:
            m = statistics.median(res[(n, w)])
            base = statistics.median(res[(counts[0], w)])
            cells += [f"{m * 1000:.0f} ms", f"{m / base:.2f}"]
        print(f"| {n} | " + " | ".join(cells) + " |")
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()

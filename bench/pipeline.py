#!/usr/bin/python3
"""Artifact pipeline benchmark: download + verify + unpack against the shell.

1. Download + verify + unpack of a ~500 MiB, ~10k-file corpus from a loopback
   server, as .tar.xz, .tar.gz and .tar.zst, whole process, median of runs, side
   by side with
     (a) curl -o f && sha256sum f && tar -xf f
     (b) curl | tee >(sha256sum) | tar -x   (GNU tar, decompressor as its own process)
   plus the decode floor `xz -dc f >/dev/null` and peak RSS (/usr/bin/time).
2. Four 200 MB artifacts from four rate-limited loopback servers in parallel,
   against the slowest one alone.

The corpus is built once from local system files and cached in /tmp/tfprov-bench
(creating the .tar.xz takes minutes). Every run extracts into a fresh directory and
nothing is deleted until the end (bench/README.md, "Measuring on this machine", trap 1); the first run of
each command is a discarded warm-up (trap 2).

    /usr/bin/python3 bench/pipeline.py [--tool build/pipeline_tool] [--runs 3] [--skip-parallel]
"""

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "system"))
import lib_http  # noqa: E402

CACHE = "/tmp/tfprov-bench"
SOURCES = ["/usr/lib/gcc", "/usr/lib/python3.11", "/usr/share/cmake-3.25", "/usr/share/perl",
           "/usr/share/vim", "/usr/lib/llvm-14", "/usr/lib/llvm-15", "/usr/share/doc",
           "/usr/include", "/usr/lib/x86_64-linux-gnu"]
TARGET = 500 << 20


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, executable="/bin/bash", **kw)


def sha_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def build_corpus():
    os.makedirs(CACHE, exist_ok=True)
    tar = os.path.join(CACHE, "corpus.tar")
    if not os.path.exists(tar):
        lst = os.path.join(CACHE, "files.txt")
        total, n = 0, 0
        with open(lst, "w") as out:
            for src in SOURCES:
                for base, dirs, files in os.walk(src):
                    dirs.sort()
                    for f in sorted(files):
                        p = os.path.join(base, f)
                        try:
                            st = os.lstat(p)
                        except OSError:
                            continue
                        if not (os.path.islink(p) or os.path.isfile(p)) or not os.access(p, os.R_OK):
                            continue
                        if total + st.st_size > TARGET or n >= 10500:
                            continue
                        total += st.st_size if os.path.isfile(p) and not os.path.islink(p) else 0
                        n += 1
                        out.write(p + "\n")
        sh("tar -cf %s.tmp --no-recursion -P --transform 's,^/,corpus/,' -T %s" % (tar, lst))
        os.rename(tar + ".tmp", tar)
    # xz -T2 gives a multi-block file in half the creation time; libarchive (and
    # GNU tar's xz) still decode it on one thread, so it behaves as a single block.
    for ext, cmd in ((".tar.gz", "gzip -6 -c"), (".tar.zst", "zstd -q -6 -T2 -c"),
                     (".tar.xz", "xz -6 -T2 -c")):
        out = os.path.join(CACHE, "corpus" + ext)
        if not os.path.exists(out):
            print("creating", out, "(once)", flush=True)
            sh("%s %s > %s.tmp && mv %s.tmp %s" % (cmd, tar, out, out, out))
    return tar


def timed(cmd):
    """Runs under /usr/bin/time; returns (seconds, peak RSS in MiB)."""
    fd, tf = tempfile.mkstemp()
    os.close(fd)
    t0 = time.monotonic()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf, "/bin/bash", "-c", cmd], check=True,
                   stdout=subprocess.DEVNULL)
    secs = time.monotonic() - t0
    with open(tf) as f:
        rss = int(f.read().strip().splitlines()[-1]) / 1024
    os.unlink(tf)
    return secs, rss


def bench_formats(tool, runs, work, only=None):
    tar = build_corpus()
    nfiles = int(subprocess.check_output("tar -tf %s | wc -l" % tar, shell=True))
    print("corpus: %d entries, tar stream %.1f MiB" % (nfiles, os.path.getsize(tar) / 2**20))
    srv = lib_http.HttpServer(root=CACHE).start()
    rows = []
    n = 0
    try:
        for ext, zflag in ((".tar.xz", "-J"), (".tar.gz", "-z"), (".tar.zst", "--zstd")):
            if only and ext != only:
                continue
            f = os.path.join(CACHE, "corpus" + ext)
            url = srv.url("/corpus" + ext)
            digest, size = sha_file(f), os.path.getsize(f)
            dec = {".tar.xz": "xz -dc", ".tar.gz": "gzip -dc", ".tar.zst": "zstd -dc"}[ext]
            cmds = {
                "tfprov engine": lambda d: "%s install %s %s %d %s/x --cache %s/c --strip 0" % (
                    tool, url, digest, size, d, d),
                "(a) curl -o; sha256sum; tar -x": lambda d: (
                    "mkdir %s/x && curl -s -o %s/f %s && sha256sum %s/f >/dev/null && "
                    "tar -x %s -f %s/f -C %s/x" % (d, d, url, d, zflag, d, d)),
                "(b) curl | tee >(sha256sum) | tar -x": lambda d: (
                    "mkdir %s/x && curl -s %s | tee >(sha256sum >/dev/null) | tar -x %s -C %s/x"
                    % (d, url, zflag, d)),
                "floor: %s f >/dev/null" % dec: lambda d: "%s %s >/dev/null" % (dec, f),
            }
            for name, mk in cmds.items():
                times, rsss = [], []
                for i in range(runs + 1):
                    n += 1
                    d = os.path.join(work, "r%04d" % n)
                    os.makedirs(d)
                    s, rss = timed(mk(d))
                    if i > 0:  # the first run is a warm-up
                        times.append(s)
                        rsss.append(rss)
                rows.append((ext, name, statistics.median(times), min(times), max(times),
                             max(rsss)))
                print("%-9s %-40s median %6.2f s  (%.2f-%.2f, n=%d)  peak RSS %6.1f MiB" % (
                    ext, name, rows[-1][2], rows[-1][3], rows[-1][4], runs, rows[-1][5]),
                    flush=True)
    finally:
        srv.stop()
    return rows


def bench_parallel(tool, work, size=200 * 10**6, rate=50 * 10**6):
    files = []
    for i in range(4):
        p = os.path.join(CACHE, "par%d.bin" % i)
        if not os.path.exists(p) or os.path.getsize(p) != size:
            sh("head -c %d /dev/urandom > %s" % (size, p))
        files.append(p)
    servers = [lib_http.HttpServer(root=CACHE, rate=rate).start() for _ in range(4)]
    try:
        items = []
        for i, p in enumerate(files):
            items.append("%s %s %d" % (servers[i].url("/par%d.bin" % i), sha_file(p), size))
        res = {}
        for name, its, jobs in (("slowest alone", items[:1], 1), ("4 in parallel", items, 4),
                                ("4 one after another (--jobs 1)", items, 1)):
            d = tempfile.mkdtemp(dir=work)
            s, rss = timed("%s fetch %s --cache %s/c --jobs %d" % (tool, " ".join(its), d, jobs))
            res[name] = s
            print("4x200MB @ %d MB/s per server: %-32s %6.2f s  peak RSS %5.1f MiB" % (
                rate // 10**6, name, s, rss), flush=True)
    finally:
        for s in servers:
            s.stop()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "pipeline_tool"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/tfprov-bench/work")
    ap.add_argument("--skip-parallel", action="store_true")
    ap.add_argument("--skip-formats", action="store_true")
    ap.add_argument("--only", choices=[".tar.xz", ".tar.gz", ".tar.zst"], default=None,
                    help="measure one format only")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    work = tempfile.mkdtemp(dir=a.work)
    print("work dir %s (deleted at the end, after all measurements)" % work)
    try:
        if not a.skip_formats:
            bench_formats(a.tool, a.runs, work, a.only)
        if not a.skip_parallel:
            bench_parallel(a.tool, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

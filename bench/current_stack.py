#!/usr/bin/python3
"""A whole current stack (stable-2.20-shaped), cold, against the best shell + pip.

The stack: the CUDA 12.5.1 components TensorFlow 2.20 loads (cudart, cupti,
nvcc, nvrtc, nvjitlink, cublas, cufft, curand, cusolver, cusparse, cccl) with
their real archive names and sizes from manifests/data/nvidia-redist/
cuda-redistrib_12.5.1.json, cuDNN 9.3.0 for CUDA 12 (cudnn-redistrib_9.3.0.json),
a venv, and TensorFlow 2.20.0's pip closure for CPython 3.12 (one file per
package, names and sizes from manifests/data/pypi-closure-tf2.20.0-cp312.tsv).
Sizes are multiplied by --scale (1.0: about 3 GB compressed, as the real stack;
0.03 runs in minutes on 2 cores). File counts are not in the reference data:
they are estimates, stated in bench/README.md (CUDA archives: headers plus up
to 4 shared objects; the tensorflow wheel: 20,000 files at scale 1, as the
earlier TF-sized bench; other wheels: one module per 8 KB). Content is cut from
real files of this machine (shared objects from /usr/lib, Python modules,
C headers), so it compresses as real binaries and sources do. CUDA and cuDNN
are .tar.xz (xz -6, one stream, as NVIDIA's), wheels are zip (deflate -6).
Deviation from stable-2.20: Python comes from `python3 -m venv` (the
interpreter this machine has), not from conda packages.

Everything is served from one loopback HTTP server whose total rate is
limited (a shared token bucket: one link), at each --rates value in Mbit/s.
--rtt MS makes it a far server: each connection and each request waits MS
first (a TCP handshake's and a request's round trip; 0 by default).

Contenders, alternating, each into a fresh tmpfs root, run 0 discarded:
- tfprov: `tfprov --root R apply -y stack.yaml` (every step, cold cache).
- shell+pip: `xargs -P<cores>` of `curl | tee >(sha256sum) | tar -xJ` over
  the archives, concurrently with `python3 -m venv V && V/bin/pip install
  --no-deps --require-hashes -r reqs.txt --index-url <loopback>` (byte-
  compiling, as by default); the sha256 of every archive is checked after.
- decode floor: every archive and wheel decoded at once on every core,
  largest first, nothing written (`xz -dc -T1`, `unzip -p`; files in cache).
- decode + compile floor: the same, while `compileall -j<cores>` byte-compiles
  every module of the wheels and of the venv's own pip and setuptools (put in
  place beforehand, untimed): the CPU work every installer of the stack does,
  `python -m venv` + pip included, on every core.
- download floor: all bytes / the link rate (formula), and measured: every
  file fetched by `curl -o /dev/null`, 8 at a time.
tfprov's CPU time (user + sys, children included) and peak RSS (GNU time's
%M: the largest process of the tree) are printed beside its wall time.

    /usr/bin/python3 bench/current_stack.py --tfprov build/tfprov --scale 0.03 --runs 2
    /usr/bin/python3 bench/current_stack.py --tfprov build/tfprov --scale 1 --runs 3   # quiet machine
    /usr/bin/python3 bench/current_stack.py --tfprov build/tfprov --scale 0.1 --wheels-only
"""

import argparse
import hashlib
import http.server
import io
import json
import os
import random
import shutil
import socketserver
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(REPO, "manifests", "data")
NCPU = os.cpu_count() or 1
CUDA_COMPONENTS = ["cuda_cudart", "cuda_cupti", "cuda_nvcc", "cuda_nvrtc", "libnvjitlink",
                   "libcublas", "libcufft", "libcurand", "libcusolver", "libcusparse",
                   "cuda_cccl"]
CPU = []
# The interpreter every contender's venv is made of: the shell's `python3 -m
# venv` and pip run /usr/bin/python3, and tfprov's manifest names the same one
# (python.interpreter), not the first python3.X on PATH (here a pyenv shim).
INTERP = os.path.realpath("/usr/bin/python3")


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, executable="/bin/bash", **kw)


def sha_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


UNPROVEN = "is applied and recorded, but it is not proven to work here"


def timed(argv, **kw):
    t0 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "TIME %M %U %S", *argv], capture_output=True,
                       text=True, **kw)
    wall = time.monotonic() - t0
    rss, cpu = 0, 0.0
    for line in p.stderr.splitlines():
        if line.startswith("TIME "):
            f = line.split()
            rss, cpu = int(f[1]), float(f[2]) + float(f[3])
    CPU.append(cpu)
    return wall, rss, p


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


# ------------------------------------------------------------ content

class Pool:
    """Bytes cut from real files of one kind, never the same bytes twice in a row."""

    def __init__(self, files, rng):
        self.files = [f for f in files if os.path.isfile(f) and os.path.getsize(f) > 0]
        assert self.files, "no source files"
        self.rng = rng
        self.i, self.off = 0, 0

    def take_files(self, n):
        """Whole files until n bytes (modules that compile, as real ones do)."""
        out = []
        got = 0
        while got < n or not out:
            f = self.files[self.i % len(self.files)]
            self.i += 1
            b = open(f, "rb").read()
            out.append(b)
            got += len(b)
        return out

    def take(self, n):
        out = io.BytesIO()
        while out.tell() < n:
            f = self.files[self.i % len(self.files)]
            size = os.path.getsize(f)
            with open(f, "rb") as fh:
                fh.seek(self.off)
                b = fh.read(min(n - out.tell(), 8 << 20))
            if not b:
                self.i += 1
                self.off = 0
                continue
            out.write(b)
            self.off += len(b)
            if self.off >= size:
                self.i += 1
                self.off = 0
        return out.getvalue()


def pools(rng):
    so = sorted((os.path.join(d, f) for d in ("/usr/lib/x86_64-linux-gnu",)
                 for f in os.listdir(d) if ".so" in f), key=lambda p: p)
    so = [p for p in so if not os.path.islink(p) and os.path.getsize(p) > (256 << 10)]
    rng.shuffle(so)
    py = []
    for dp, _, fns in os.walk("/usr/lib/python3.11"):
        py += [os.path.join(dp, f) for f in fns if f.endswith(".py")]
    hd = []
    for dp, _, fns in os.walk("/usr/include"):
        hd += [os.path.join(dp, f) for f in fns if f.endswith(".h")]
    py = [p for p in sorted(py) if "test" not in p and "lib2to3" not in p]
    hd.sort()
    return Pool(so, rng), Pool(py, rng), Pool(hd, rng)


# Compressed/raw ratios measured on the pools (xz -6 and deflate -6), used to
# size the raw content so that the archive lands near its scaled real size.
XZ_RATIO = {"so": 0.30, "py": 0.22, "h": 0.18}
ZIP_RATIO = {"so": 0.42, "py": 0.28, "h": 0.24}


def cuda_set(scale):
    nv = json.load(open(os.path.join(DATA, "nvidia-redist", "cuda-redistrib_12.5.1.json")))
    cd = json.load(open(os.path.join(DATA, "nvidia-redist", "cudnn-redistrib_9.3.0.json")))
    out = []
    for c in CUDA_COMPONENTS:
        e = nv[c]["linux-x86_64"]
        out.append((c, e["relative_path"], int(e["size"])))
    e = cd["cudnn"]["linux-x86_64"]["cuda12"]
    out.append(("cudnn", e["relative_path"], int(e["size"])))
    return [(c, rel, size, max(20000, int(size * scale))) for c, rel, size in out]


def wheel_set(scale):
    """(name, version, file name, real size, scaled size) per package. The
    CPython tag cp312 of the real file names becomes this machine's Python
    (cp311 on Debian 12): same names and sizes, installable here."""
    tag = "cp%d%d" % sys.version_info[:2] if sys.executable == "/usr/bin/python3" else \
        "cp" + subprocess.run(["/usr/bin/python3", "-c",
                               "import sys;print('%d%d'%sys.version_info[:2])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    rows, seen = [], set()
    with open(os.path.join(DATA, "pypi-closure-tf2.20.0-cp312.tsv")) as f:
        head = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(head, line.rstrip("\n").split("\t")))
            if r["name"] in seen or r["name"] in ("setuptools", "wheel"):
                # one file per package, as pip picks one; setuptools and wheel
                # omitted as the shipped manifests omit them (the Python
                # install supplies them: closure-to-requirements.py --omit)
                continue
            seen.add(r["name"])
            rows.append((r["name"], r["version"], r["filename"].replace("cp312", tag),
                         int(r["size"]),
                         max(4000, int(int(r["size"]) * scale))))
    return rows


def make_tar_xz(path, top, target, so, py, hd):
    """A NVIDIA-layout archive (top/{include,lib}) of about `target` bytes of xz."""
    raw_so = int(target * 0.9 / XZ_RATIO["so"])
    raw_h = int(target * 0.1 / XZ_RATIO["h"])
    nlib = max(1, min(4, raw_so // (4 << 20)))
    nh = max(2, min(2000, raw_h // 6000))
    tmp = path + ".tar"
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as t:
        def add(name, data, mode=0o644):
            ti = tarfile.TarInfo(f"{top}/{name}")
            ti.size, ti.mode, ti.mtime = len(data), mode, 1717000000
            t.addfile(ti, io.BytesIO(data))
        for k in range(nlib):
            share = raw_so // 2 if k == 0 else raw_so // (2 * max(1, nlib - 1))
            add(f"lib/lib{os.path.basename(top).split('-linux')[0]}{k}.so.12", so.take(share),
                0o755)
        comp = os.path.basename(top).split("-linux")[0]
        for k in range(nh):  # merged into one prefix: names unique per component
            add(f"include/{comp}/h{k // 200}/hdr{k}.h", hd.take(max(200, raw_h // nh)))
        add("LICENSE", b"stand-in content cut from this machine's files\n")
    # -T0: blocks of 24 MiB (3 x the xz -6 dictionary), decoded as one stream by
    # libarchive and xz -dc -T1 at the same speed as NVIDIA's single block.
    sh(f"xz -6 -T0 -c '{tmp}' > '{path}.tmp' && mv '{path}.tmp' '{path}' && rm '{tmp}'")


def make_wheel(path, name, version, target, so, py, hd, rng, scale, big=False):
    dist = name.replace("-", "_")
    di = f"{dist}-{version}.dist-info"
    files = []
    if big:  # tensorflow: shared objects, modules, headers; 20,000 files at scale 1
        count = max(60, int(20000 * scale))
        raw_so = int(target * 0.85 / ZIP_RATIO["so"])
        raw_py = int(target * 0.10 / ZIP_RATIO["py"])
        raw_h = int(target * 0.05 / ZIP_RATIO["h"])
        nso = max(2, min(40, count // 500))
        npy = int(count * 0.4)
        nh = count - nso - npy
        files.append((f"{dist}/libtensorflow_cc.so.2", so.take(raw_so // 2)))
        for k in range(nso - 1):
            files.append((f"{dist}/python/_lib{k}.so", so.take(raw_so // 2 // (nso - 1))))
        for k in range(npy):  # real modules, whole (they compile)
            files.append((f"{dist}/python/ops/g{k // 300}/mod{k}.py",
                          py.take_files(raw_py // npy)[0]))
        for k in range(nh):
            files.append((f"{dist}/include/tf/h{k // 400}/hdr{k}.h", hd.take(raw_h // nh)))
    else:
        binary = "manylinux" in path or "linux" in path
        raw = int(target / (ZIP_RATIO["so"] if binary else ZIP_RATIO["py"]))
        if binary:
            files.append((f"{dist}/_native.so", so.take(int(raw * 0.8))))
            raw = int(raw * 0.2)
        for k, b in enumerate(py.take_files(raw)):
            files.append((f"{dist}/m{k}.py", b))
        files.append((f"{dist}/__init__.py", b""))
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files += [(f"{di}/METADATA", meta.encode()),
              (f"{di}/WHEEL", b"Wheel-Version: 1.0\nGenerator: tfprov-bench\n"
                              b"Root-Is-Purelib: false\nTag: py3-none-any\n")]
    record = []
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        for arc, data in files:
            zi = zipfile.ZipInfo(arc, date_time=(2025, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100755 if ".so" in arc else 0o100644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data, compresslevel=6)
            d = hashlib.sha256(data).digest()
            import base64
            record.append(f"{arc},sha256={base64.urlsafe_b64encode(d).rstrip(b'=').decode()},"
                          f"{len(data)}")
        record.append(f"{di}/RECORD,,")
        z.writestr(f"{di}/RECORD", "\n".join(record) + "\n")
    os.rename(path + ".tmp", path)


def build_mirror(cache, scale, wheels_only=False):
    """The archives and the wheels of one scale, each part made once (markers)."""
    mirror = os.path.join(cache, f"scale-{scale}")
    redist_done = os.path.join(mirror, ".redist-v2")  # v2: header names unique per component
    wheels_done = os.path.join(mirror, ".wheels-v3")  # v3: whole real modules (they compile)
    os.makedirs(mirror, exist_ok=True)
    rng = random.Random(2020)
    so = py = hd = None
    if not wheels_only and not os.path.exists(redist_done):
        so, py, hd = pools(rng)
        shutil.rmtree(os.path.join(mirror, "redist"), ignore_errors=True)
        build_redist(mirror, scale, so, py, hd)
        open(redist_done, "w").close()
    if not os.path.exists(wheels_done):
        if so is None:
            so, py, hd = pools(rng)
        for d in ("wheels", "simple"):
            shutil.rmtree(os.path.join(mirror, d), ignore_errors=True)
        build_wheels(mirror, scale, so, py, hd, rng)
        open(wheels_done, "w").close()
    return mirror


def build_redist(mirror, scale, so, py, hd):
    for comp, rel, real, target in cuda_set(scale):
        dst = os.path.join(mirror, "redist", rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        top = os.path.basename(rel)[:-len(".tar.xz")]
        print(f"  {os.path.basename(rel)}: {target / 1e6:.1f} MB (real {real / 1e6:.0f} MB)",
              flush=True)
        make_tar_xz(dst, top, target, so, py, hd)


def build_wheels(mirror, scale, so, py, hd, rng):
    wdir = os.path.join(mirror, "wheels")
    os.makedirs(wdir)
    for name, ver, fn, real, target in wheel_set(scale):
        make_wheel(os.path.join(wdir, fn), name, ver, target, so, py, hd, rng, scale,
                   big=name == "tensorflow")
    # A PEP 503 index over the wheels, with their hashes.
    for fn in os.listdir(wdir):
        name = fn.split("-")[0].replace("_", "-").lower()
        d = os.path.join(mirror, "simple", name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "index.html"), "a") as f:
            f.write(f'<a href="/wheels/{fn}#sha256={sha_file(os.path.join(wdir, fn))}">{fn}</a>\n')


# ------------------------------------------------------------ the link

class Link:
    """One shared token bucket: every response draws from the same rate."""

    def __init__(self, bps):
        self.bps = bps
        self.lock = threading.Lock()
        self.next = time.monotonic()

    def wait(self, n):
        if not self.bps:
            return
        with self.lock:
            now = time.monotonic()
            self.next = max(self.next, now) + n / self.bps
            until = self.next
        d = until - time.monotonic()
        if d > 0:
            time.sleep(d)


def serve(root, link, rtt=0.0):
    """rtt (seconds): a far server; every connection and every request first
    waits that long, as a TCP handshake and a request's round trip would."""
    class H(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=root, **kw)

        def setup(self):
            time.sleep(rtt)
            super().setup()

        def do_GET(self):
            time.sleep(rtt)
            super().do_GET()

        def log_message(self, *a):
            pass

        def copyfile(self, src, dst):
            while True:
                b = src.read(64 << 10)
                if not b:
                    return
                link.wait(len(b))
                dst.write(b)

    class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        request_queue_size = 64

    srv = S(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


# ------------------------------------------------------------ contenders

def manifest(path, base, mirror, scale, ver, interp=None):
    lines = ["schema: 1", "stack:", "  name: current", "  platform: linux-x86_64",
             "prefix: /opt/tfprov", "versions:", "  tensorflow: 2.20.0", "  cuda: 12.5.1",
             "  cudnn: 9.3.0.75", f'  python: "{ver}"', "driver:", "  policy: skip",
             "cuda:", "  version: 12.5.1", "  artifacts:"]
    for comp, rel, real, target in cuda_set(scale):
        if comp == "cudnn":
            continue
        p = os.path.join(mirror, "redist", rel)
        lines += [f"    - name: {comp}", f"      url: {base}/redist/{rel}",
                  f"      sha256: {sha_file(p)}", f"      size: {os.path.getsize(p)}",
                  "      strip: 1"]
    comp, rel, real, target = [c for c in cuda_set(scale) if c[0] == "cudnn"][0]
    p = os.path.join(mirror, "redist", rel)
    lines += ["cudnn:", "  version: 9.3.0.75", "  placement: merge", "  artifact:",
              f"    url: {base}/redist/{rel}", f"    sha256: {sha_file(p)}",
              f"    size: {os.path.getsize(p)}", "    strip: 1",
              "python:", "  manager: venv", "  name: tf", f'  version: "{ver}"']
    if interp:
        lines += [f"  interpreter: {interp}"]
    lines += ["pip:", f"  index_url: {base}/simple/", "  complete: true", "  requirements: |"]
    for n, v, fn, _, _ in wheel_set(scale):
        h = sha_file(os.path.join(mirror, "wheels", fn))
        lines += [f"    {n}=={v} \\", f"        --hash=sha256:{h}"]
    open(path, "w").write("\n".join(lines) + "\n")


def shell_script(base, mirror, scale, d, reqs):
    arcs = sorted(cuda_set(scale), key=lambda c: -c[3])
    lines = "".join(f"{base}/redist/{rel} {d}/{comp}\n" for comp, rel, _, _ in arcs)
    open(os.path.join(d, "list"), "w").write(lines)
    one = ('mkdir -p "$2" && curl -sf "$1" | tee >(sha256sum > "$2.sha") | '
           'tar -xJ --strip-components=1 -C "$2"')
    return (f"set -e\n"
            f"xargs -P{NCPU} -n2 bash -c '{one}' _ < {d}/list &\n"
            f"cuda=$!\n"
            f"/usr/bin/python3 -m venv {d}/venv\n"
            f"{d}/venv/bin/python -m pip install -q --isolated --disable-pip-version-check "
            f"--no-deps --require-hashes --no-warn-script-location --index-url {base}/simple/ "
            f"-r {reqs}\n"
            f"wait $cuda\n")


def floors(mirror, scale, link_bps, base):
    items = [(os.path.join(mirror, "redist", rel), "xz") for _, rel, _, _ in cuda_set(scale)]
    items += [(os.path.join(mirror, "wheels", fn), "zip") for _, _, fn, _, _ in wheel_set(scale)]
    items.sort(key=lambda i: -os.path.getsize(i[0]))
    for p, _ in items:
        sh(f"cat '{p}' > /dev/null")
    cmds = "".join((f"xz -dc -T1 '{p}'" if k == "xz" else f"unzip -p '{p}'") + " > /dev/null\n"
                   for p, k in items)
    t0 = time.monotonic()
    subprocess.run(["xargs", f"-P{NCPU}", "-d", "\n", "-n1", "bash", "-c"], input=cmds,
                   text=True, check=True)
    decode = time.monotonic() - t0
    total = sum(os.path.getsize(p) for p, _ in items)
    return decode, total / link_bps if link_bps else 0.0, total


def work_floor(mirror, scale, work, stack=True):
    """The decode floor's commands and, at the same time, byte-compiling every
    module of the wheels (`compileall -j<cores>` with the venv's interpreter, as
    pip compiles them): the work any installer of the stack does, on every
    core. The modules are unpacked first, untimed; the .pyc files are written
    (pip and tfprov write them too). stack=False: the wheels alone (no CUDA
    archives, no venv's pip)."""
    src = os.path.join(work, "floor-modules")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    if stack:
        # The venv's own pip (and setuptools before 3.12), which `python -m
        # venv` installs and byte-compiles too: its modules, from a venv made once.
        venv = os.path.join(work, "floor-venv")
        if not os.path.isdir(venv):
            subprocess.run([INTERP, "-m", "venv", venv], check=True)
        site = [dp for dp, _, _ in os.walk(venv) if dp.endswith("site-packages")][0]
        shutil.copytree(site, os.path.join(src, "venv"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    nmod = sum(1 for _, _, fs in os.walk(src) for f in fs if f.endswith(".py"))
    for _, _, fn, _, _ in wheel_set(scale):
        with zipfile.ZipFile(os.path.join(mirror, "wheels", fn)) as z:
            for n in z.namelist():
                if n.endswith(".py") and ".dist-info/" not in n:
                    z.extract(n, src)
                    nmod += 1
    items = [(os.path.join(mirror, "redist", rel), "xz")
             for _, rel, _, _ in (cuda_set(scale) if stack else [])]
    items += [(os.path.join(mirror, "wheels", fn), "zip") for _, _, fn, _, _ in wheel_set(scale)]
    items.sort(key=lambda i: -os.path.getsize(i[0]))
    cmds = "".join((f"xz -dc -T1 '{p}'" if k == "xz" else f"unzip -p '{p}'") + " > /dev/null\n"
                   for p, k in items)
    for p, _ in items:
        sh(f"cat '{p}' > /dev/null")
    t0 = time.monotonic()
    comp = subprocess.Popen([INTERP, "-m", "compileall", "-q", f"-j{NCPU}", src])
    subprocess.run(["xargs", f"-P{NCPU}", "-d", "\n", "-n1", "bash", "-c"], input=cmds,
                   text=True, check=True)
    assert comp.wait() == 0
    wall = time.monotonic() - t0
    shutil.rmtree(src, ignore_errors=True)
    return wall, nmod


def measured_download(base, mirror, scale):
    urls = [f"{base}/redist/{rel}" for _, rel, _, _ in cuda_set(scale)]
    urls += [f"{base}/wheels/{fn}" for _, _, fn, _, _ in wheel_set(scale)]
    t0 = time.monotonic()
    subprocess.run(["xargs", "-P8", "-n1", "curl", "-sf", "-o", "/dev/null"],
                   input="\n".join(urls) + "\n", text=True, check=True)
    return time.monotonic() - t0


def run_stack(args, mirror, ver):
    total = None
    for mbit in args.rates:
        link = Link(mbit * 1e6 / 8)
        srv, base = serve(mirror, link, args.rtt / 1000)
        man = os.path.join(args.work, "stack.yaml")
        manifest(man, base, mirror, args.scale, ver, INTERP)
        reqs = os.path.join(args.work, "reqs.txt")
        with open(reqs, "w") as f:
            for n, v, fn, _, _ in wheel_set(args.scale):
                f.write(f"{n}=={v} --hash=sha256:{sha_file(os.path.join(mirror, 'wheels', fn))}\n")
        res = {"tfprov": [], "shell": [], "decode": [], "work": [], "download": []}
        print(f"\n== link {mbit} Mbit/s, round trip {args.rtt:g} ms, load {' '.join(loadavg())}",
              flush=True)
        try:
            for run in range(args.runs + 1):
                order = ["tfprov", "shell", "decode", "work", "download"]
                order = order[run % 5:] + order[:run % 5]
                for who in order:
                    d = os.path.join(args.work, f"{who}-{run}")
                    os.makedirs(d)
                    cpu = rss = 0
                    if who == "tfprov":
                        wall, rss, p = timed([args.tfprov, "--root", d, "apply", "-y", man])
                        # Exit 8: applied, but verify finds no libcudart.so.12 and
                        # the rest (the archives carry filler shared objects, not
                        # NVIDIA's sonames); every step before verify ran.
                        assert p.returncode == 0 or (p.returncode == 8 and UNPROVEN in p.stderr), \
                            p.stdout + p.stderr
                        cpu = CPU[-1]
                    elif who == "shell":
                        wall, rss, p = timed(["bash", "-c", shell_script(
                            base, mirror, args.scale, d, reqs)])
                        assert p.returncode == 0, p.stdout + p.stderr
                        cpu = CPU[-1]
                        for comp, rel, _, _ in cuda_set(args.scale):
                            got = open(f"{d}/{comp}.sha").read().split()[0]
                            assert got == sha_file(os.path.join(mirror, "redist", rel)), comp
                    elif who == "decode":
                        wall, _, total = floors(mirror, args.scale, link.bps, base)
                    elif who == "work":
                        wall, nmod = work_floor(mirror, args.scale, args.work)
                    else:
                        wall = measured_download(base, mirror, args.scale)
                    shutil.rmtree(d, ignore_errors=True)
                    tag = " (warm-up, discarded)" if run == 0 else ""
                    print(f"  run {run} {who}: {wall:.2f} s" +
                          (f", CPU {cpu:.1f} s, peak RSS {rss / 1024:.1f} MiB" if cpu else "") +
                          f", load {loadavg()[0]}{tag}", flush=True)
                    if run > 0:
                        res[who].append((wall, cpu, rss))
        finally:
            srv.shutdown()
        med = {k: statistics.median(w for w, _, _ in v) for k, v in res.items()}
        formula = total / link.bps
        floor = max(med["decode"], formula)
        print(f"\n| {mbit} Mbit/s, scale {args.scale} ({total / 1e6:.0f} MB) | median wall | "
              f"CPU | peak RSS |\n|---|---|---|---|")
        t = res["tfprov"]
        print(f"| tfprov cold apply | {med['tfprov']:.2f} s | "
              f"{statistics.median(c for _, c, _ in t):.1f} s | "
              f"{max(r for _, _, r in t) / 1024:.1f} MiB |")
        s = res["shell"]
        print(f"| shell + pip (parallel curl\\|tar, venv + pip --require-hashes) | "
              f"{med['shell']:.2f} s | {statistics.median(c for _, c, _ in s):.1f} s | "
              f"{max(r for _, _, r in s) / 1024:.1f} MiB |")
        print(f"| decode floor (all cores, nothing written) | {med['decode']:.2f} s | | |")
        print(f"| decode + compile floor (the same, and compileall -j{NCPU} of the {nmod} "
              f"modules of the wheels and the venv's pip) | {med['work']:.2f} s | | |")
        print(f"| download floor: bytes / link (measured: 8 x curl) | {formula:.2f} s "
              f"({med['download']:.2f} s) | | |")
        print(f"\ntfprov / max(decode floor, download floor) = {med['tfprov'] / floor:.2f}; "
              f"tfprov / max(decode + compile floor, download floor) = "
              f"{med['tfprov'] / max(med['work'], formula):.2f}; "
              f"tfprov / shell+pip = {med['tfprov'] / med['shell']:.2f}; "
              f"load at the end {' '.join(loadavg())}", flush=True)


def wheel_manifests(work, mirror, scale, ver):
    """The wheels-alone contenders' inputs: an env-only manifest (a venv), the same
    with the complete pip lock, pip's requirements file, and the pins."""
    wdir = os.path.join(mirror, "wheels")
    reqs = os.path.join(work, "wreqs.txt")
    pins = [(n, v, sha_file(os.path.join(wdir, fn))) for n, v, fn, _, _ in wheel_set(scale)]
    open(reqs, "w").write("".join(f"{n}=={v} --hash=sha256:{h}\n" for n, v, h in pins))
    base = ("schema: 1\nstack:\n  name: wheels\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
            f"versions:\n  tensorflow: 2.20.0\n  python: \"{ver}\"\ndriver:\n  policy: skip\n"
            f"python:\n  manager: venv\n  name: tf\n  version: \"{ver}\"\n"
            f"  interpreter: {INTERP}\n")
    m_env, m_pip = os.path.join(work, "env.yaml"), os.path.join(work, "pip.yaml")
    open(m_env, "w").write(base)
    open(m_pip, "w").write(base + "pip:\n  complete: true\n  requirements: |\n" + "".join(
        f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins))
    return m_env, m_pip, reqs, pins


def run_wheels(args, mirror, ver):
    """pip against tfprov's pip step alone (both byte-compiling), and --jobs 1."""
    wdir = os.path.join(mirror, "wheels")
    m_env, m_pip, reqs, pins = wheel_manifests(args.work, mirror, args.scale, ver)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    res = {"pip": [], "tfprov": [], "tfprov --jobs 1": [], "floor": []}
    print(f"\n== wheels: {len(pins)}, {sum(os.path.getsize(os.path.join(wdir, f)) for f in os.listdir(wdir)) / 1e6:.0f} MB, load {' '.join(loadavg())}", flush=True)
    for run in range(args.runs + 1):
        order = ["tfprov", "pip", "tfprov --jobs 1", "floor"]
        order = order[run % 4:] + order[:run % 4]
        for who in order:
            d = os.path.join(args.work, f"w{run}-{who.replace(' ', '')}")
            os.makedirs(d)
            if who == "floor":
                wall, nmod = work_floor(mirror, args.scale, args.work, stack=False)
                tag = " (warm-up, discarded)" if run == 0 else ""
                print(f"  run {run} floor: {wall:.2f} s, load {loadavg()[0]}{tag}", flush=True)
                if run > 0:
                    res[who].append((wall, 0, 0))
                continue
            if who.startswith("tfprov"):
                p = subprocess.run([args.tfprov, "--root", d, "apply", "-y", m_env],
                                   capture_output=True, text=True)
                assert p.returncode == 0, p.stdout + p.stderr
                jobs = ["--jobs", "1"] if who.endswith("1") else []
                wall, rss, p = timed([args.tfprov, "--root", d, "--mirror", wdir, *jobs,
                                      "apply", "-y", m_pip])
            else:
                subprocess.run([INTERP, "-m", "venv", f"{d}/v"], check=True, env=env)
                wall, rss, p = timed([f"{d}/v/bin/python", "-m", "pip", "install", "-q",
                                      "--isolated", "--disable-pip-version-check", "--no-deps",
                                      "--require-hashes", "--no-index", f"--find-links={wdir}",
                                      "--no-warn-script-location", "-r", reqs], env=env)
            assert p.returncode == 0, p.stdout + p.stderr
            shutil.rmtree(d, ignore_errors=True)
            tag = " (warm-up, discarded)" if run == 0 else ""
            print(f"  run {run} {who}: {wall:.2f} s, CPU {CPU[-1]:.1f} s, peak RSS "
                  f"{rss / 1024:.1f} MiB, load {loadavg()[0]}{tag}", flush=True)
            if run > 0:
                res[who].append((wall, CPU[-1], rss))
    med = {k: statistics.median(w for w, _, _ in v) for k, v in res.items()}
    print("\n| wheels | median wall | CPU | peak RSS |\n|---|---|---|---|")
    for k, v in res.items():
        if k == "floor":
            print(f"| floor: unzip -p of every wheel while compileall -j{NCPU} compiles "
                  f"their {nmod} modules | {med[k]:.2f} s | | |")
            continue
        print(f"| {k} | {med[k]:.2f} s | {statistics.median(c for _, c, _ in v):.1f} s | "
              f"{max(r for _, _, r in v) / 1024:.1f} MiB |")
    print(f"\npip / tfprov = {med['pip'] / med['tfprov']:.2f}; pip / floor = "
          f"{med['pip'] / med['floor']:.2f} (no installer can do better here); "
          f"tfprov / floor = {med['tfprov'] / med['floor']:.2f}; tfprov --jobs 1 / default = "
          f"{med['tfprov --jobs 1'] / med['tfprov']:.2f}; load {' '.join(loadavg())}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tfprov", default=os.path.join(REPO, "build", "tfprov"))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rates", type=lambda v: [int(x) for x in v.split(",")],
                    default=[1000, 100], help="link rates in Mbit/s")
    ap.add_argument("--rtt", type=float, default=0.0,
                    help="ms every connection and request waits (a far server)")
    ap.add_argument("--cache", default="/tmp/tfprov-current")
    ap.add_argument("--work", default="/dev/shm/tfprov-current")
    ap.add_argument("--wheels-only", action="store_true")
    ap.add_argument("--skip-wheels", action="store_true")
    args = ap.parse_args()
    args.tfprov = os.path.abspath(args.tfprov)
    ver = subprocess.run(["/usr/bin/python3", "-c",
                          "import sys;print('%d.%d'%sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    print(f"machine: {NCPU} cores, {os.uname().release}; load {' '.join(loadavg())}; "
          f"scale {args.scale}", flush=True)
    t0 = time.monotonic()
    mirror = build_mirror(args.cache, args.scale, args.wheels_only)
    print(f"mirror ready in {time.monotonic() - t0:.0f} s: {mirror}", flush=True)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    try:
        if not args.skip_wheels:
            run_wheels(args, mirror, ver)
        if not args.wheels_only:
            run_stack(args, mirror, ver)
    finally:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Cold apply at real scale: NVIDIA's real CUDA 11.8 libraries and a TF-sized wheel set.

Part 1, the cuda step. The mirror is built from Debian's non-free packages of
NVIDIA's CUDA 11.8 runtime libraries (`apt-get download` of libcudart11.0
libcublas11 libcublaslt11 libcufft10 libcurand10 libcusolver11 libcusparse11
libnvrtc11.2 libcupti11.8), repackaged into NVIDIA's redist layout
(<component>-linux-x86_64-<version>-archive/lib/..., .tar.xz, component
names and versions from NVIDIA's redistrib_11.8.0.json in
manifests/data/nvidia-redist/) with a redistrib_11.8.0.json written here
(sizes and sha256 of the repackaged archives), served by a loopback HTTP
server. Side by side, in one invocation, alternating, each on a fresh
directory:
  tfprov    `tfprov --root R apply` of a stack whose cuda step names that
            JSON (empty root, empty cache): fetch + verify + unpack + place +
            one syncfs + the state db;
  shell     the best shell pipeline: every archive at once,
            `xargs -P$(nproc)` of `curl | tee >(sha256sum) | tar -xJ`;
  pfloor    the measured decode floor, in every run: `xargs -P$(nproc)`
            of `xz -dc -T1 > /dev/null`, largest first (decoding alone);
  floor     at the start and at the end: max(the largest archive's
            `xz -dc -T1`, the sum of all archives' `xz -dc -T1` / cores):
            decoding alone, perfectly spread;
peak RSS of each (GNU time's %M: for the shell, the largest single process).

Part 2, wheels. One ~600 MB wheel with ~20k files (8,000 modules, 12,000
headers, real NVIDIA shared objects as its binaries) and 40 small wheels
(the big one requires them all) in a local find-links directory:
  pip       a fresh venv of the same interpreter, `pip install --no-deps
            --require-hashes --no-index --find-links DIR -r reqs` (pip
            byte-compiles, as it does by default);
  tfprov    `tfprov --mirror DIR apply` of the same pins (complete lock)
            into a venv the previous apply created (the wheels copied and
            hashed into a journaled wheelhouse, then the native installer);
then `pip check` in tfprov's env and `pip list` of both, which must be equal;
once each for scale: pip --no-compile and tfprov --jobs 1.

Every root and extraction directory is on tmpfs (--work, default
/dev/shm/tfprov-cold), fresh per run, so the slow inode allocation after
deletions on this ext4 (research on the build machine: minutes after an rm
-rf) does not distort any contender; the mirror is cached in --cache.

    /usr/bin/python3 bench/cold_apply.py --tfprov build/tfprov [--runs 3] [--skip-wheels]
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "system"))
import lib_http  # noqa: E402

PACKAGES = {  # redist component -> Debian packages holding its libraries
    "cuda_cudart": ["libcudart11.0"],
    "libcublas": ["libcublas11", "libcublaslt11"],
    "libcufft": ["libcufft10"],
    "libcurand": ["libcurand10"],
    "libcusolver": ["libcusolver11"],
    "libcusparse": ["libcusparse11"],
    "cuda_nvrtc": ["libnvrtc11.2"],
    "cuda_cupti": ["libcupti11.8"],
}
NVIDIA_JSON = os.path.join(REPO, "manifests", "data", "nvidia-redist",
                           "cuda-redistrib_11.8.0.json")
LIBDIR = "usr/lib/x86_64-linux-gnu"
NCPU = os.cpu_count() or 1


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, executable="/bin/bash", **kw)


def sha_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


CPU = []  # user + system seconds of each timed() command, in order


def timed(argv, **kw):
    """(wall seconds, peak RSS KiB, CompletedProcess) of argv under GNU time; its
    CPU seconds (user + system, children included) are appended to CPU."""
    t0 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "TIME %M %U %S", *argv], capture_output=True,
                       text=True, **kw)
    wall = time.monotonic() - t0
    rss = 0
    for line in p.stderr.splitlines():
        if line.startswith("TIME "):
            f = line.split()
            rss = int(f[1])
            CPU.append(float(f[2]) + float(f[3]))
    return wall, rss, p


# ------------------------------------------------------------------ part 1: the mirror

def build_mirror(cache, preset):
    debs = os.path.join(cache, "debs")
    mirror = os.path.join(cache, "mirror")
    redist = os.path.join(mirror, "compute", "cuda", "redist")
    out_json = os.path.join(redist, "redistrib_11.8.0.json")
    if os.path.exists(out_json):
        return mirror, out_json
    os.makedirs(debs, exist_ok=True)
    want = [p for ps in PACKAGES.values() for p in ps]
    have = os.listdir(debs)
    missing = [p for p in want if not any(f.startswith(p + "_") for f in have)]
    if missing:
        print("apt-get download", *missing, flush=True)
        subprocess.run(["apt-get", "download", *missing], cwd=debs, check=True)
    nv = json.load(open(NVIDIA_JSON))
    stage = os.path.join(cache, "stage")
    shutil.rmtree(stage, ignore_errors=True)
    jobs = []
    for comp, pkgs in PACKAGES.items():
        ver = nv[comp]["version"]
        top = f"{comp}-linux-x86_64-{ver}-archive"
        root = os.path.join(stage, comp)
        libout = os.path.join(root, top, "lib")
        os.makedirs(libout)
        for pkg in pkgs:
            deb = next(os.path.join(debs, f) for f in sorted(os.listdir(debs))
                       if f.startswith(pkg + "_"))
            x = os.path.join(cache, "x-" + pkg)  # kept: the big wheel reuses the libraries
            if not os.path.exists(x):
                subprocess.run(["dpkg-deb", "-x", deb, x + ".tmp"], check=True)
                os.rename(x + ".tmp", x)
            src = os.path.join(x, LIBDIR)
            for f in sorted(os.listdir(src)):
                p = os.path.join(src, f)
                if os.path.islink(p):
                    os.symlink(os.readlink(p), os.path.join(libout, f))
                elif os.path.isfile(p):
                    shutil.copy2(p, os.path.join(libout, f))
            # NVIDIA's archives carry the unversioned dev link too.
            for f in sorted(os.listdir(libout)):
                if ".so." in f and not os.path.islink(os.path.join(libout, f)):
                    dev = f.split(".so.")[0] + ".so"
                    if not os.path.lexists(os.path.join(libout, dev)):
                        os.symlink(f, os.path.join(libout, dev))
            lic = os.path.join(x, "usr", "share", "doc", pkg, "copyright")
            if os.path.exists(lic):
                shutil.copy(lic, os.path.join(root, top, "LICENSE"))
        rel = f"{comp}/linux-x86_64/{top}.tar.xz"
        dst = os.path.join(redist, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        jobs.append((comp, ver, root, top, rel, dst))
    # One xz stream per archive (as NVIDIA's), the archives compressed in parallel.
    procs = []
    for comp, ver, root, top, rel, dst in jobs:
        print(f"xz -{preset} {os.path.basename(dst)}", flush=True)
        procs.append(subprocess.Popen(
            f"tar -C '{root}' --owner=0 --group=0 --numeric-owner -cf - '{top}' | "
            f"xz -{preset} -T1 > '{dst}.tmp' && mv '{dst}.tmp' '{dst}'",
            shell=True, executable="/bin/bash"))
        while sum(p.poll() is None for p in procs) >= NCPU:
            time.sleep(0.5)
    for p in procs:
        assert p.wait() == 0
    doc = {"release_date": nv["release_date"]}
    for comp, ver, root, top, rel, dst in jobs:
        data = open(dst, "rb").read()
        doc[comp] = {"name": nv[comp]["name"], "license": nv[comp]["license"], "version": ver,
                     "linux-x86_64": {"relative_path": rel,
                                      "sha256": hashlib.sha256(data).hexdigest(),
                                      "md5": hashlib.md5(data).hexdigest(),
                                      "size": str(len(data))}}
    with open(out_json, "w") as f:
        json.dump(doc, f, indent=4)
    shutil.rmtree(stage)
    return mirror, out_json


def archives(json_path):
    doc = json.load(open(json_path))
    base = os.path.dirname(json_path)
    res = []
    for comp in PACKAGES:
        e = doc[comp]["linux-x86_64"]
        res.append((comp, e["relative_path"], e["sha256"], int(e["size"]),
                    os.path.join(base, e["relative_path"])))
    return res


def cuda_manifest(path, url, json_path):
    data = open(json_path, "rb").read()
    with open(path, "w") as f:
        f.write(f"""schema: 1
stack:
  name: cold
  platform: linux-x86_64
prefix: /opt/tfprov
versions:
  tensorflow: 2.14.1
  cuda: 11.8.0
driver:
  policy: skip
cuda:
  version: 11.8.0
  redist:
    url: {url}
    sha256: {hashlib.sha256(data).hexdigest()}
    size: {len(data)}
    components: [{", ".join(PACKAGES)}]
""")


def formula_floor(arcs):
    """Each archive's `xz -dc -T1` time, and max(the largest, their sum / cores)."""
    dec = {}
    for a in arcs:
        t0 = time.monotonic()
        sh(f"xz -dc -T1 '{a[4]}' > /dev/null")
        dec[a[0]] = time.monotonic() - t0
    return dec, max(max(dec.values()), sum(dec.values()) / NCPU)


def run_cuda(args, work):
    mirror, json_path = build_mirror(args.cache, args.xz_preset)
    arcs = archives(json_path)
    total = sum(a[3] for a in arcs)
    print(f"\nmirror: {len(arcs)} archives, {total / 1e6:.0f} MB; largest "
          f"{max(arcs, key=lambda a: a[3])[0]} {max(a[3] for a in arcs) / 1e6:.0f} MB", flush=True)
    # The floor: every archive's xz -dc once (warm cache), single-threaded.
    for a in arcs:
        sh(f"cat '{a[4]}' > /dev/null")
    dec, floor = formula_floor(arcs)
    print("xz -dc -T1: " + ", ".join(f"{k} {v:.2f}s" for k, v in dec.items()) +
          f"; sum {sum(dec.values()):.2f}s; floor {floor:.2f}s", flush=True)
    srv = lib_http.HttpServer(root=mirror).start()
    url = srv.url("/compute/cuda/redist/redistrib_11.8.0.json")
    man = os.path.join(work, "cuda.yaml")
    cuda_manifest(man, url, json_path)
    res = {"tfprov": [], "shell": [], "pfloor": []}
    by_size = sorted(arcs, key=lambda a: -a[3])
    order = [("tfprov", "shell", "pfloor"), ("shell", "pfloor", "tfprov"),
             ("pfloor", "tfprov", "shell")]
    try:
        for run in range(args.runs + 1):  # run 0: warm-up, discarded
            for who in order[run % 3]:
                d = os.path.join(work, f"{who}-{run}")
                os.makedirs(d)
                if who == "tfprov":
                    wall, rss, p = timed([args.tfprov, "--root", d, "apply", "-y", man])
                    assert p.returncode == 0, p.stdout + p.stderr
                elif who == "shell":
                    lines = "".join(f"{srv.url('/compute/cuda/redist/' + a[1])} {d}/{a[0]}\n"
                                    for a in by_size)
                    script = ('mkdir -p "$2" && curl -sf "$1" | tee >(sha256sum > "$2.sha") | '
                              'tar -xJ -C "$2"')
                    wall, rss, p = timed(
                        ["bash", "-c", f"xargs -P{NCPU} -n2 bash -c '{script}' _"],
                        input=lines)
                    assert p.returncode == 0, p.stderr
                    for a in arcs:
                        got = open(f"{d}/{a[0]}.sha").read().split()[0]
                        assert got == a[2], (a[0], got)
                else:  # decoding alone, every core, largest first, nothing written
                    wall, rss, p = timed(
                        ["bash", "-c", f"xargs -P{NCPU} -n1 sh -c 'xz -dc -T1 \"$1\" > /dev/null' _"],
                        input="".join(f"{a[4]}\n" for a in by_size))
                    assert p.returncode == 0, p.stderr
                shutil.rmtree(d, ignore_errors=True)  # tmpfs: memory, not trap 1
                if run > 0:
                    res[who].append((wall, rss))
                print(f"  run {run} {who}: {wall:.2f} s, CPU {CPU[-1]:.1f} s, "
                      f"peak RSS {rss / 1024:.1f} MiB" + (" (warm-up)" if run == 0 else ""),
                      flush=True)
    finally:
        srv.stop()
    # The formula floor again at the end: the machine's speed drifts (a shared host).
    _, floor2 = formula_floor(arcs)
    med = {k: statistics.median(w for w, _ in v) for k, v in res.items()}
    rng = {k: (min(w for w, _ in v), max(w for w, _ in v)) for k, v in res.items()}
    rss = {k: max(r for _, r in v) / 1024 for k, v in res.items()}
    ratio_shell = statistics.median(t[0] / s_[0] for t, s_ in zip(res["tfprov"], res["shell"]))
    ratio_pf = statistics.median(t[0] / f[0] for t, f in zip(res["tfprov"], res["pfloor"]))
    print("\n| what | median | min-max | peak RSS |\n|---|---|---|---|")
    print(f"| tfprov cold apply (cuda step, {len(arcs)} archives) | {med['tfprov']:.2f} s | "
          f"{rng['tfprov'][0]:.2f}-{rng['tfprov'][1]:.2f} | {rss['tfprov']:.1f} MiB |")
    print(f"| shell: xargs -P{NCPU} curl \\| tee >(sha256sum) \\| tar -xJ | {med['shell']:.2f} s | "
          f"{rng['shell'][0]:.2f}-{rng['shell'][1]:.2f} | {rss['shell']:.1f} MiB |")
    print(f"| measured decode floor: xargs -P{NCPU} xz -dc > /dev/null, largest first | "
          f"{med['pfloor']:.2f} s | {rng['pfloor'][0]:.2f}-{rng['pfloor'][1]:.2f} | |")
    print(f"| formula floor: max(largest xz -dc, sum/{NCPU}), at start / at end | "
          f"{floor:.2f} / {floor2:.2f} s | | |")
    print(f"\ntfprov / shell = {med['tfprov'] / med['shell']:.2f} (median of per-run ratios "
          f"{ratio_shell:.2f}); tfprov / measured floor = {med['tfprov'] / med['pfloor']:.2f} "
          f"(per run {ratio_pf:.2f}); tfprov / formula floor = "
          f"{med['tfprov'] / floor:.2f} (start), {med['tfprov'] / floor2:.2f} (end)", flush=True)
    if args.rss_jobs:
        rss_per_decoder(args, work, man, srv_root=mirror)


def rss_per_decoder(args, work, man, srv_root):
    """Peak RSS of the same cold apply with --jobs 1, 2, ...: what each extra
    decoder costs (one run each, after the runs above warmed everything)."""
    srv = lib_http.HttpServer(root=srv_root).start()
    try:
        url = srv.url("/compute/cuda/redist/redistrib_11.8.0.json")
        cuda_manifest(man, url, os.path.join(srv_root, "compute/cuda/redist/redistrib_11.8.0.json"))
        rows = []
        for j in args.rss_jobs:
            d = os.path.join(work, f"rss-{j}")
            os.makedirs(d)
            wall, rss, p = timed([args.tfprov, "--root", d, "--jobs", str(j), "apply", "-y", man])
            assert p.returncode == 0, p.stdout + p.stderr
            shutil.rmtree(d, ignore_errors=True)
            rows.append((j, wall, rss / 1024))
            print(f"  --jobs {j}: {wall:.2f} s, peak RSS {rss / 1024:.1f} MiB", flush=True)
    finally:
        srv.stop()
    print("\n| --jobs | wall | peak RSS | per extra decoder |\n|---|---|---|---|")
    base = rows[0]
    for j, wall, rss in rows:
        per = f"{(rss - base[2]) / (j - base[0]):.1f} MiB" if j != base[0] else ""
        print(f"| {j} | {wall:.2f} s | {rss:.1f} MiB | {per} |")


# ------------------------------------------------------------------ part 2: wheels

def _rh(data):
    import base64
    return "sha256=" + base64.urlsafe_b64encode(
        hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(outdir, name, version, files, requires=(), console=None, purelib=True,
                level=6):
    """files: list of (archive path, bytes | host path to read)."""
    dist = name.replace("-", "_")
    di = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = list(files) + [(f"{di}/METADATA", meta.encode()),
                           (f"{di}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: tfprov-bench\n"
                                            f"Root-Is-Purelib: {str(purelib).lower()}\n"
                                            f"Tag: py3-none-any\n").encode())]
    if console:
        files.append((f"{di}/entry_points.txt", ("[console_scripts]\n" + "".join(
            f"{k} = {v}\n" for k, v in console.items())).encode()))
    path = os.path.join(outdir, f"{dist}-{version}-py3-none-any.whl")
    record = []
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED, compresslevel=level) as z:
        for arc, data in files:
            if isinstance(data, str):
                data = open(data, "rb").read()
            zi = zipfile.ZipInfo(arc, date_time=(2024, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100755 if arc.endswith(".so") else 0o100644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data, compresslevel=level)
            record.append(f"{arc},{_rh(data)},{len(data)}")
        record.append(f"{di}/RECORD,,")
        z.writestr(f"{di}/RECORD", "\n".join(record) + "\n")
    os.rename(path + ".tmp", path)
    return path


def module_text(rng, i):
    fns = []
    for k in range(rng.randint(3, 25)):
        body = "\n".join(f"    v{j} = a * {rng.randint(1, 999)} + {j}" for j in
                         range(rng.randint(2, 12)))
        fns.append(f"def f_{i}_{k}(a, b=None):\n    \"\"\"Step {k} of module {i}.\"\"\"\n"
                   f"{body}\n    return a\n")
    return (f"# module {i}\nimport os\nimport sys\n\n" + "\n\n".join(fns)).encode()


def build_wheels(cache, debs_root):
    out = os.path.join(cache, "wheels")
    done = os.path.join(out, ".done")
    if os.path.exists(done):
        return out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    rng = random.Random(2024)
    deps = []
    for i in range(40):
        name = f"tfbench-dep{i:02d}"
        files = [(f"tfbench_dep{i:02d}/__init__.py", f"ID = {i}\n".encode())]
        files += [(f"tfbench_dep{i:02d}/m{k}.py", module_text(rng, 1000 * i + k))
                  for k in range(rng.randint(5, 150))]
        console = {f"tfbench-tool{i:02d}": f"tfbench_dep{i:02d}:main"} if i % 8 == 0 else None
        write_wheel(out, name, "1.0", files, console=console)
        deps.append(name)
    # The big one: TensorFlow's shape. 8,000 modules, 12,000 headers and real
    # NVIDIA shared objects until the wheel is ~475 MB.
    files = [("tfbench/__init__.py", b"VERSION = '2.15.1'\n")]
    files += [(f"tfbench/python/ops/g{k // 400}/mod{k}.py", module_text(rng, k))
              for k in range(8000)]
    files += [(f"tfbench/include/tf/core/h{k // 500}/hdr{k}.h",
               (f"// header {k}\n#pragma once\n" + "".join(
                   f"int tfbench_fn_{k}_{j}(int a, int b);\n"
                   for j in range(rng.randint(5, 60)))).encode()) for k in range(12000)]
    sos = []
    for dp, _, fns in os.walk(debs_root):
        if "/x-" not in dp + "/":
            continue
        for f in fns:
            p = os.path.join(dp, f)
            if ".so." in f and not os.path.islink(p):
                sos.append(p)
    sos.sort(key=os.path.getsize)
    budget, used = 1350 << 20, 0  # raw bytes; deflate brings them to ~440 MB
    for p in sos:
        if used + os.path.getsize(p) > budget:
            continue
        files.append((f"tfbench/lib/{os.path.basename(p)}", p))
        used += os.path.getsize(p)
    print(f"big wheel: {len(files)} files, {used / 1e6:.0f} MB of shared objects", flush=True)
    write_wheel(out, "tfbench", "2.15.1", files, requires=deps, purelib=False,
                console={"tfbench-cli": "tfbench:main"})
    open(done, "w").close()
    return out


def wheel_pins(wdir):
    pins = []
    for f in sorted(os.listdir(wdir)):
        if f.endswith(".whl"):
            name, ver = f.split("-")[:2]
            pins.append((name.replace("_", "-"), ver, sha_file(os.path.join(wdir, f))))
    return pins


def pip_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}


def pip_json(env, *args):
    p = subprocess.run([os.path.join(env, "bin", "python"), "-m", "pip", *args,
                        "--disable-pip-version-check", "--isolated"], capture_output=True,
                       text=True, env=pip_env())
    return p


def run_wheels(args, work):
    build_mirror(args.cache, args.xz_preset)
    wdir = build_wheels(args.cache, args.cache)
    pins = wheel_pins(wdir)
    total = sum(os.path.getsize(os.path.join(wdir, f)) for f in os.listdir(wdir)
                if f.endswith(".whl"))
    big = max(os.listdir(wdir), key=lambda f: os.path.getsize(os.path.join(wdir, f)))
    with zipfile.ZipFile(os.path.join(wdir, big)) as z:
        nbig = len(z.namelist())
    print(f"\nwheels: {len(pins)}, {total / 1e6:.0f} MB; the largest {big}: "
          f"{os.path.getsize(os.path.join(wdir, big)) / 1e6:.0f} MB, {nbig} files", flush=True)
    for f in os.listdir(wdir):
        sh(f"cat '{os.path.join(wdir, f)}' > /dev/null")
    ver = subprocess.run(["/usr/bin/python3", "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins)
    base = ("schema: 1\nstack:\n  name: wheels\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
            f"versions:\n  tensorflow: 2.15.1\n  python: \"{ver}\"\ndriver:\n  policy: skip\n"
            f"python:\n  manager: venv\n  name: tf\n  version: \"{ver}\"\n"
            # Debian's interpreter, which pip's venv below then runs too (it
            # is made of the one tfprov's env runs; bench/README.md, trap 6:
            # the first python3.X on PATH is a pyenv build)
            f"  interpreter: {os.path.realpath('/usr/bin/python3')}\n")
    m_env = os.path.join(work, "env.yaml")
    m_pip = os.path.join(work, "pip.yaml")
    open(m_env, "w").write(base)
    open(m_pip, "w").write(base + "pip:\n  complete: true\n  requirements: |\n" + req)
    reqs = os.path.join(work, "reqs.txt")
    open(reqs, "w").write("".join(f"{n}=={v} --hash=sha256:{h}\n" for n, v, h in pins))
    res = {"tfprov": [], "pip": [], "pip --no-compile": [], "tfprov --jobs 1": []}
    lists = {}
    plan = []
    for run in range(args.wheel_runs):
        plan += [("tfprov", "pip") if run % 2 == 0 else ("pip", "tfprov")]
    if args.wheel_extras:
        plan += [("pip --no-compile", "tfprov --jobs 1")]
    for run, pair in enumerate(plan):
        for who in pair:
            d = os.path.join(work, f"w-{who.replace(' ', '')}-{run}")
            os.makedirs(d)
            if who.startswith("tfprov"):
                p = subprocess.run([args.tfprov, "--root", d, "apply", "-y", m_env],
                                   capture_output=True, text=True)
                assert p.returncode == 0, p.stdout + p.stderr
                env = os.path.join(d, "opt/tfprov/envs/tf")
                jobs = ["--jobs", "1"] if who.endswith("1") else []
                wall, rss, p = timed([args.tfprov, "--root", d, "--mirror", wdir, "-v", *jobs,
                                      "apply", "-y", m_pip])
                assert p.returncode == 0, p.stdout + p.stderr
                detail = [ln.strip() for ln in (p.stdout + p.stderr).splitlines()
                          if "wheels: copy" in ln or "installed natively" in ln
                          or "no pip download" in ln]
            else:
                src = next(os.path.join(work, x) for x in sorted(os.listdir(work))
                           if x.startswith("w-tfprov"))
                cfg = dict(ln.split(" = ", 1) for ln in open(os.path.join(
                    src, "opt/tfprov/envs/tf/pyvenv.cfg")).read().splitlines() if " = " in ln)
                python = cfg.get("executable") or os.path.join(cfg["home"], f"python{ver}")
                env = os.path.join(d, "venv")
                subprocess.run([python, "-m", "venv", env], check=True, env=pip_env())
                extra = ["--no-compile"] if "no-compile" in who else []
                wall, rss, p = timed([os.path.join(env, "bin", "python"), "-m", "pip",
                                      "install", "--isolated", "--disable-pip-version-check",
                                      "--no-deps", "--require-hashes", "--no-index",
                                      f"--find-links={wdir}", "--no-warn-script-location",
                                      *extra, "-q", "-r", reqs], env=pip_env())
                assert p.returncode == 0, p.stdout + p.stderr
                detail = []
            res[who].append((wall, rss, CPU[-1]))
            if who in ("tfprov", "pip"):
                lists[who] = json.loads(pip_json(env, "list", "--format=json").stdout)
            if who == "tfprov":
                chk = pip_json(env, "check")
                assert chk.returncode == 0, chk.stdout + chk.stderr
                print("  pip check (tfprov's env): " + chk.stdout.strip(), flush=True)
            print(f"  run {run} {who}: {wall:.2f} s, CPU {CPU[-1]:.1f} s, peak RSS "
                  f"{rss / 1024:.1f} MiB " + " ".join(detail), flush=True)
            if not who.startswith("tfprov") or run > 0:
                shutil.rmtree(d, ignore_errors=True)
    assert lists["tfprov"] == lists["pip"], "pip list differs"
    print(f"  pip list: equal ({len(lists['pip'])} distributions)")
    print("\n| what | median wall | CPU (user + sys) | runs | peak RSS |\n|---|---|---|---|---|")
    label = {"pip": "pip install (same wheels, find-links, no deps, byte-compiled)",
             "tfprov": "tfprov apply, pip step, native installer (default --jobs)",
             "pip --no-compile": "pip install --no-compile (the same, not byte-compiled)",
             "tfprov --jobs 1": "tfprov apply --jobs 1 (one decoder, one compile worker)"}
    med = {}
    for k, v in res.items():
        if not v:
            continue
        med[k] = statistics.median(w for w, _, _ in v)
        print(f"| {label[k]} | {med[k]:.2f} s | {statistics.median(c for _, _, c in v):.1f} s "
              f"| {len(v)} | {max(r for _, r, _ in v) / 1024:.1f} MiB |")
    print(f"\npip / tfprov = {med['pip'] / med['tfprov']:.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tfprov", default=os.path.join(REPO, "build", "tfprov"))
    ap.add_argument("--cache", default="/tmp/tfprov-cold")
    ap.add_argument("--work", default="/dev/shm/tfprov-cold")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wheel-runs", type=int, default=1)
    ap.add_argument("--xz-preset", type=int, default=6)
    ap.add_argument("--rss-jobs", type=lambda v: [int(x) for x in v.split(",")], default=[],
                    help="also apply with --jobs N for each N (e.g. 1,2,4,8): peak RSS per decoder")
    ap.add_argument("--skip-cuda", action="store_true")
    ap.add_argument("--skip-wheels", action="store_true")
    ap.add_argument("--no-wheel-extras", dest="wheel_extras", action="store_false",
                    help="skip the one run each of pip --no-compile and tfprov --jobs 1")
    args = ap.parse_args()
    args.tfprov = os.path.abspath(args.tfprov)
    print(f"machine: {NCPU} cores; {open('/proc/loadavg').read().strip()} (load average)",
          flush=True)
    work = os.path.join(args.work, str(os.getpid()))
    os.makedirs(work)
    try:
        if not args.skip_cuda:
            run_cuda(args, work)
        if not args.skip_wheels:
            run_wheels(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        print(f"load average at the end: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()

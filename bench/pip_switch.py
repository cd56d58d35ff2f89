#!/usr/bin/python3
"""pip_switch.py: a pip-installer switch of one env between two locks, two tfprov binaries alternating.

What it measures: the whole `tfprov -y -q apply` process that switches a venv
(manager: venv, /usr/bin/python3) from lock A to lock B or back with
`pip.installer: pip`: plan, the verified wheelhouse from the cache, the env's
hard-link snapshot (journaled, durable before its row), `pip install` of the
three wheels (uninstalling the other versions), the commit, and the removal of
the snapshot. Every wheel is cached (warm), so the network is out of it.
The stack: tfprov-big with --modules modules (default 1500), tfprov-small and
tfprov-data, as tests/system/test_wheel_kill.py builds them, served by a
static PEP 503 index on 127.0.0.1.

Each binary has its own --root; the rounds alternate which binary goes first,
and each round times one switch of each (A->B, then B->A on the next round).

    bench/pip_switch.py --tfprov build/tfprov --baseline /tmp/base/build/tfprov
    bench/pip_switch.py --rounds 10 --modules 1500

Prints the median, min and max of each binary and the ratio of the medians.
"""
import argparse
import base64
import functools
import hashlib
import http.server
import io
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"


def _rh(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(outdir, name, version, files, requires=(), console=None):
    """A py3-none-any wheel as bdist_wheel writes one; returns its sha256."""
    dist = name.replace("-", "_")
    di = f"{dist}-{version}.dist-info"
    content = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}
    content[f"{di}/METADATA"] = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode()
    content[f"{di}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: tfprov-bench\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    if console:
        content[f"{di}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{k} = {v}\n" for k, v in console.items())).encode()
    record = "".join(f"{p},{_rh(d)},{len(d)}\n" for p, d in content.items()) + f"{di}/RECORD,,\n"
    content[f"{di}/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in content.items():
            z.writestr(zipfile.ZipInfo(p, (2024, 1, 1, 0, 0, 0)), d)
    fn = f"{dist}-{version}-py3-none-any.whl"
    data = buf.getvalue()
    pkg = os.path.join(outdir, "simple", name)
    os.makedirs(pkg, exist_ok=True)
    with open(os.path.join(pkg, fn), "wb") as f:
        f.write(data)
    sha = hashlib.sha256(data).hexdigest()
    with open(os.path.join(pkg, "index.html"), "a") as f:
        f.write(f'<a href="{fn}#sha256={sha}">{fn}</a>\n')
    return sha


def locks(www, modules):
    sets = {}
    for tag, ver in (("A", "1.0"), ("B", "2.0")):
        big = {f"tfprov_big/m{i:04d}.py": f"V = {ver!r}\nI = {i}\n" + "# pad\n" * 40
               for i in range(modules)}
        big["tfprov_big/__init__.py"] = f"VERSION = {ver!r}\n"
        dd = f"tfprov_data-{ver}.data"
        sets[tag] = [
            ("tfprov-big", ver, wheel(www, "tfprov-big", ver, big,
                                      console={"tfprov-big": "tfprov_big:main"})),
            ("tfprov-small", ver, wheel(www, "tfprov-small", ver,
                                        {"tfprov_small.py": f"V = {ver!r}\n"},
                                        requires=["tfprov-big"])),
            ("tfprov-data", ver, wheel(www, "tfprov-data", ver, {
                "tfprov_data/__init__.py": "", f"{dd}/data/share/tfprov/{ver}": ver,
                f"{dd}/scripts/tfprov-data": "#!python\nprint(1)\n"})),
        ]
    return sets


def manifest(path, index, pins):
    pyver = subprocess.run([PY, "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins)
    with open(path, "w") as f:
        f.write("schema: 1\nstack:\n  name: py\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
                f"versions:\n  tensorflow: 2.15.1\n  python: \"{pyver}\"\n"
                "driver:\n  policy: skip\n"
                f"python:\n  manager: venv\n  name: tf\n  version: \"{pyver}\"\n"
                f"  interpreter: {PY}\n"
                f"pip:\n  index_url: {index}\n  complete: true\n  installer: pip\n"
                f"  requirements: |\n{req}")
    return path


def apply(binary, root, man):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    t0 = time.monotonic()
    p = subprocess.run([binary, "--root", root, "-q", "apply", "-y", man], env=env,
                       capture_output=True, text=True)
    took = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{binary}: apply {man} exited {p.returncode}\n{p.stdout}{p.stderr}")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tfprov", default=os.path.join(REPO, "build", "tfprov"))
    ap.add_argument("--baseline", required=True, help="the binary of the commit before")
    ap.add_argument("--modules", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--work", default="/tmp/tfprov-pip-switch")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    www = os.path.join(a.work, "www")
    os.makedirs(www)
    sets = locks(www, a.modules)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    handler = functools.partial(Quiet, directory=www)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    index = f"http://127.0.0.1:{srv.server_address[1]}/simple"
    mans = {t: manifest(os.path.join(a.work, f"{t}.yaml"), index, sets[t]) for t in sets}
    bins = {"tfprov": a.tfprov, "baseline": a.baseline}
    roots, at = {}, {}
    for k, b in bins.items():
        roots[k] = os.path.join(a.work, "root-" + k)
        os.makedirs(roots[k])
        apply(b, roots[k], mans["A"])  # the venv, the cache
        apply(b, roots[k], mans["B"])
        apply(b, roots[k], mans["A"])
        at[k] = "A"
    times = {k: [] for k in bins}
    for r in range(a.rounds):
        order = list(bins) if r % 2 == 0 else list(bins)[::-1]
        for k in order:
            to = "B" if at[k] == "A" else "A"
            times[k].append(apply(bins[k], roots[k], mans[to]))
            at[k] = to
    srv.shutdown()
    print(f"pip-installer switch, {a.modules} modules + 2 small wheels, warm cache, "
          f"{a.rounds} rounds alternating")
    print("| binary | median | min | max |")
    print("|---|---|---|---|")
    for k, b in bins.items():
        v = times[k]
        print(f"| {k} ({b}) | {statistics.median(v):.2f} s | {min(v):.2f} s | {max(v):.2f} s |")
    print(f"tfprov / baseline (medians): "
          f"{statistics.median(times['tfprov']) / statistics.median(times['baseline']):.3f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Print a complete pip lock (pip-compile style) from a pypi-closure-*.tsv file.

Usage: scripts/closure-to-requirements.py CLOSURE.tsv [--omit NAME,...] [--indent N] [--glibc]

The TSV (columns name, version, filename, sha256, url, size, requires, source)
has one row per installable file of the target. Every hash of a package goes on
its requirement line, as pip-compile --generate-hashes does, so pip can pick any
of them. Nothing is computed: the hashes are copied from the file. --omit leaves
out packages another part of the stack supplies (e.g. setuptools and wheel from
a conda lock). The output is what the shipped manifests' `pip.requirements`
blocks hold; tests/system/test_shipped_manifests.py checks them against the data.
Lines starting with '#' before the header (source notes) are skipped.

--glibc prints, instead, the glibc the set needs on Linux: for each package the
lowest manylinux floor among its files (pip picks any file it can install; a
pure-Python file needs none), then the highest of those over the set. The floor
of a tag is PEP 600's manylinux_X_Y = glibc X.Y, with the legacy aliases
manylinux1 = 2.5 (PEP 513), manylinux2010 = 2.12 (PEP 571), manylinux2014 = 2.17
(PEP 599). The manifests' `pip.min_glibc` holds this value.
"""
import argparse
import csv
import re
import sys


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def file_floor(filename):
    """The lowest glibc any platform tag of a wheel name allows; None for pure/sdist."""
    if not filename.endswith(".whl"):
        return None
    plat = filename[:-4].split("-")[-1]
    floors = []
    for tag in plat.split("."):
        m = re.match(r"manylinux_(\d+)_(\d+)_", tag)
        if m:
            floors.append((int(m.group(1)), int(m.group(2))))
        else:
            base = tag.split("_")[0]
            if base in LEGACY:
                floors.append(LEGACY[base])
    return min(floors) if floors else None


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if not l.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("closure")
    ap.add_argument("--omit", default="", help="comma-separated package names to leave out")
    ap.add_argument("--indent", type=int, default=4)
    ap.add_argument("--glibc", action="store_true", help="print the glibc floor of the set")
    a = ap.parse_args(argv)
    omit = {normalize(n) for n in a.omit.split(",") if n.strip()}
    pkgs = {}
    floors = {}
    if True:
        for r in rows(a.closure):
            name = normalize(r["name"])
            if name in omit:
                continue
            ver, hashes = pkgs.setdefault(name, (r["version"], []))
            if ver != r["version"]:
                sys.exit(f"{a.closure}: {name} has two versions ({ver}, {r['version']})")
            if r["sha256"] not in hashes:
                hashes.append(r["sha256"])
            fl = file_floor(r["filename"])
            old = floors.get(name, "unset")
            floors[name] = fl if old == "unset" else (
                None if fl is None or old is None else min(old, fl))
    if a.glibc:
        need = max((f for f in floors.values() if f is not None), default=None)
        print("" if need is None else "%d.%d" % need)
        return
    pad = " " * a.indent
    for name in sorted(pkgs):
        ver, hashes = pkgs[name]
        lines = [f"{pad}{name}=={ver}"] + [f"{pad}    --hash=sha256:{h}" for h in sorted(hashes)]
        print(" \\\n".join(lines))


if __name__ == "__main__":
    main()

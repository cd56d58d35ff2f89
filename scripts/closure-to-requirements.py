#!/usr/bin/env python3
"""Print a complete pip lock (pip-compile style) from a pypi-closure-*.tsv file.

Usage: scripts/closure-to-requirements.py CLOSURE.tsv [--omit NAME,...] [--indent N]

The TSV (columns name, version, filename, sha256, url, size, requires, source)
has one row per installable file of the target. Every hash of a package goes on
its requirement line, as pip-compile --generate-hashes does, so pip can pick any
of them. Nothing is computed: the hashes are copied from the file. --omit leaves
out packages another part of the stack supplies (e.g. setuptools and wheel from
a conda lock). The output is what the shipped manifests' `pip.requirements`
blocks hold; tests/system/test_shipped_manifests.py checks them against the data.
"""
import argparse
import csv
import re
import sys


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("closure")
    ap.add_argument("--omit", default="", help="comma-separated package names to leave out")
    ap.add_argument("--indent", type=int, default=4)
    a = ap.parse_args(argv)
    omit = {normalize(n) for n in a.omit.split(",") if n.strip()}
    pkgs = {}
    with open(a.closure, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            name = normalize(r["name"])
            if name in omit:
                continue
            ver, hashes = pkgs.setdefault(name, (r["version"], []))
            if ver != r["version"]:
                sys.exit(f"{a.closure}: {name} has two versions ({ver}, {r['version']})")
            if r["sha256"] not in hashes:
                hashes.append(r["sha256"])
    pad = " " * a.indent
    for name in sorted(pkgs):
        ver, hashes = pkgs[name]
        lines = [f"{pad}{name}=={ver}"] + [f"{pad}    --hash=sha256:{h}" for h in sorted(hashes)]
        print(" \\\n".join(lines))


if __name__ == "__main__":
    main()

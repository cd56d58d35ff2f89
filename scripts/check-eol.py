#!/usr/bin/env python3
"""Fails when a library tfprov carries is of a release line with no support.

    check-eol.py [--table data/support-lines.tsv] [--date YYYY-MM-DD] LISTING
    check-eol.py [--table ...] [--date ...] --binary PATH

LISTING is what `tfprov --version --verbose` prints (a file, or - for stdin);
--binary runs that command itself. Each library line of the listing ("  NAME
VERSION  how") is judged against the table (data/support-lines.tsv: library,
line, end, source) twice over:

- by its upstream line, where the table has rows for the library: its line is
  the longest row whose line is the version or a prefix of it up to a
  component boundary ("3.0" for "3.0.19", "1.1.1" for "1.1.1w"); it fails when
  that line ended before --date (default: today, UTC), or when the table has
  rows for the library but none for its line (a line nobody vouched for).
  libssl and libcrypto are judged by OpenSSL's rows;
- by the Debian release its source came from, where the listing says so ("...,
  built from Debian 12 source zlib 1:1.2.13.dfsg-1", as the portable binary's
  listing does): the table's "debian" rows give the day each release's
  security support (LTS included) ends; it fails when that day is past, or
  when the table has no row for that release.

A library the listing calls "a Debian 12 package" (a build on Debian, as the
.deb: the system's library) is judged by that release alone: Debian's
security team patches its packages past their upstream line's end (OpenSSL
3.0 in Debian 12), so the upstream line does not decide there.

A library judged neither way is named as not judged. Exit 0: every judged
library is supported; 1: one is not (each named with its line, end and
source); 2: usage, or a listing with no library lines.
"""
import argparse
import datetime
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(os.path.dirname(HERE), "data", "support-lines.tsv")
ALIASES = {"libssl": "openssl", "libcrypto": "openssl"}
# "built from Debian 12 source zlib 1:1.2.13.dfsg-1" in a listing line's how.
DEBIAN_SOURCE = re.compile(r"\bDebian (\d+) source\b")
# "a Debian 12 package": the system's library on a build made on Debian.
DEBIAN_PACKAGE = re.compile(r"\bDebian (\d+) package\b")


def load_table(path):
    rows = {}
    with open(path) as f:
        lines = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#")]
    if not lines or lines[0].split("\t") != ["library", "line", "end", "source"]:
        sys.exit(f"{path}: the header must be: library, line, end, source (tab-separated)")
    for n, ln in enumerate(lines[1:], 2):
        f = ln.split("\t")
        if len(f) != 4 or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", f[2]) or not f[3].startswith(
                "http"):
            sys.exit(f"{path}: row {n}: want library, line, YYYY-MM-DD, source URL: {ln!r}")
        rows.setdefault(f[0], []).append((f[1], datetime.date.fromisoformat(f[2]), f[3]))
    return rows


def parse_listing(text):
    """[(name, version, how)] of the library lines after the 'libraries' header."""
    libs, on = [], False
    for ln in text.splitlines():
        if ln.startswith("libraries"):
            on = True
        elif on and ln.startswith("  "):
            w = ln.split(None, 2)
            if len(w) >= 2:
                libs.append((w[0], w[1], w[2] if len(w) > 2 else ""))
        elif on:
            break
    return libs


def line_of(version, lines):
    best = None
    for row in lines:
        line = row[0]
        if version == line or (version.startswith(line) and not version[len(line)].isdigit()):
            if best is None or len(line) > len(best[0]):
                best = row
    return best


def judge(row, date, unknown, ended, until):
    """(ok, text) for a table row (line, end, source) or None on date."""
    if row is None:
        return False, unknown
    if row[1] < date:
        return False, f"{ended} {row[1].isoformat()} ({row[2]})"
    return True, f"{until} {row[1].isoformat()} ({row[2]})"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("listing", nargs="?")
    ap.add_argument("--binary")
    ap.add_argument("--table", default=TABLE)
    ap.add_argument("--date", type=datetime.date.fromisoformat,
                    default=datetime.datetime.now(datetime.timezone.utc).date())
    a = ap.parse_args(argv)
    if (a.listing is None) == (a.binary is None):
        ap.error("give a LISTING or --binary PATH")
    if a.binary:
        text = subprocess.run([a.binary, "--version", "--verbose"], capture_output=True,
                              text=True, check=True).stdout
    elif a.listing == "-":
        text = sys.stdin.read()
    else:
        with open(a.listing) as f:
            text = f.read()
    table = load_table(a.table)
    libs = parse_listing(text)
    if not libs:
        print("check-eol: the listing names no library (want `tfprov --version --verbose`)",
              file=sys.stderr)
        return 2
    bad = 0
    for name, version, how in libs:
        key = ALIASES.get(name, name)
        verdicts = []  # (ok, text) of each way this library is judged
        pkg = DEBIAN_PACKAGE.search(how)
        if key in table and not pkg:
            row = line_of(version, table[key])
            verdicts.append(judge(
                row, a.date, f"a line {a.table} does not know; add its row with the date its "
                "support ends and the source", f"line {row and row[0]} has had no support since",
                f"line {row and row[0]} supported until"))
        m = DEBIAN_SOURCE.search(how) or pkg
        if m:
            release = m.group(1)
            what = f"a Debian {release} package" if pkg else f"built from Debian {release} source"
            verdicts.append(judge(
                line_of(release, table.get("debian", [])), a.date,
                f"{what}, a release {a.table} does not know; add its row with the date its "
                "security support ends and the source",
                f"{what}, which has had no security support since",
                f"{what}, security support until"))
        if not verdicts:
            print(f"not judged  {name} {version}: no support lines in the table")
            continue
        bad += not all(ok for ok, _ in verdicts)
        for ok, text in verdicts:
            print(f"{'ok   ' if ok else 'FAIL '} {name} {version}: {text}")
    print(f"check-eol: {len(libs)} libraries, {bad} of a line without support on "
          f"{a.date.isoformat()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

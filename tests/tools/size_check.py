#!/usr/bin/env python3
"""The size rule (STYLE.md, issue 34): no source file of engine/, cli/,
modules/ or state/ over 1,200 lines, no function over 100 lines, unless
tests/size_exceptions.tsv names it with its reason.

A function is measured from the line of its opening brace to the line of its
closing brace, both counted. clang-format (.clang-format, BreakBeforeBraces:
Linux) puts the braces of a top-level function definition alone at column 0,
and only those: a struct, union, enum or initializer keeps its brace on its
own line's end. So a line that is exactly "{" opens a function and the next
line that is exactly "}" closes it; the function's name is the identifier
before the first "(" of the lines above the brace, back to the previous
blank line, "}" or comment end.

Usage: size_check.py [SRC]   (prints each finding, exit 1 when there is one)
"""
import os
import re
import sys

PARTS = ("engine", "cli", "modules", "state")
MAX_FILE, MAX_FUNC = 1200, 100
EXCEPTIONS = os.path.join("tests", "size_exceptions.tsv")


def sources(src):
    for part in PARTS:
        for dirpath, _, names in os.walk(os.path.join(src, part)):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, n), src)


def functions(text):
    """(name, first line, length in lines) of each top-level function."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i] != "{":
            i += 1
            continue
        head = []
        j = i - 1
        while j >= 0 and lines[j].strip() and lines[j] not in ("}", "};") \
                and not lines[j].rstrip().endswith("*/"):
            head.insert(0, lines[j])
            j -= 1
        m = re.search(r"([A-Za-z_]\w*)\s*\(", " ".join(head))
        name = m.group(1) if m else "?"
        k = i + 1
        while k < len(lines) and lines[k] != "}":
            k += 1
        out.append((name, i + 1, k - i + 1))
        i = k + 1
    return out


def load_exceptions(src):
    """{(path, function or ''): reason}; a function entry is "path:function"."""
    ex = {}
    with open(os.path.join(src, EXCEPTIONS), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            what, _, reason = line.rstrip("\n").partition("\t")
            if not reason.strip():
                raise SystemExit(f"{EXCEPTIONS}:{n}: an exception without its reason")
            path, _, func = what.partition(":")
            ex[(path, func)] = reason.strip()
    return ex


def findings(src, read=None):
    """Every file or function over the limit: (path, function or '', lines, where)."""
    out = []
    for p in sources(src):
        text = read(p) if read else open(os.path.join(src, p), encoding="utf-8").read()
        n = text.count("\n")
        if n > MAX_FILE:
            out.append((p, "", n, f"{p}: {n} lines (limit {MAX_FILE})"))
        if p.endswith(".c"):
            for name, line, length in functions(text):
                if length > MAX_FUNC:
                    out.append((p, name, length,
                                f"{p}:{line}: {name}() is {length} lines (limit {MAX_FUNC})"))
    return out


def check(src):
    """(findings not excepted, exceptions that no longer find anything)."""
    ex = load_exceptions(src)
    found = findings(src)
    bad = [f[3] for f in found if (f[0], f[1]) not in ex]
    used = {(f[0], f[1]) for f in found}
    stale = [f"{p}{':' + fn if fn else ''}" for (p, fn) in ex if (p, fn) not in used]
    return bad, stale


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    bad, stale = check(src)
    for b in bad:
        print(b)
    for s in stale:
        print(f"{EXCEPTIONS}: {s} is within the limits now: remove its entry")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main())

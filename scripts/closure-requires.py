#!/usr/bin/python3
"""Write a manifest's pip.requires block from a closure file's `requires` column.

Usage: scripts/closure-requires.py CLOSURE.tsv [--omit NAME,...] [--indent N]

The closure files in manifests/data record each package's dependency edges
as their sources gave them (a lock file's metadata, a setup.py), in a few
notations: "name>=1,<2", "name>=1 [python_version < '3.8']", "name (py<3.11)",
"[and-cuda] a>=1, b>=2" (requirements of an extra), "edges per lock: a, b" (the
lock's own dependency edges, names only), "python >=3.8" (Requires-Python, not a
requirement), "none". Only what states a
requirement is written, as a PEP 508 string with its marker; prose the column
adds in parentheses is left out, and an entry this script cannot read (a
Poetry "||" union) is left out and printed on stderr, never guessed.
"""
import re
import sys

PY_PAREN = re.compile(r"^py\s*(<=|>=|<|>|==)\s*([0-9.]+)$")


def expand_ranges(spec):
    # "!=4.21.0-4.21.5" (the column's shorthand) -> each excluded patch release
    def one(m):
        a, b = m.group(1), m.group(2)
        pa, pb = a.split("."), b.split(".")
        if pa[:-1] != pb[:-1]:
            raise ValueError(m.group(0))
        return ",".join("!=%s.%d" % (".".join(pa[:-1]), i)
                        for i in range(int(pa[-1]), int(pb[-1]) + 1))
    return re.sub(r"!=([0-9.]+)-([0-9.]+)", one, spec)


def convert(entry, extra=None):
    """One entry of the column -> a PEP 508 string, or None to skip; raises ValueError."""
    e = entry.strip()
    if not e or e.startswith("none") or re.match(r"^python\s*[<>=!~]", e):
        return None
    if "||" in e or ":" in re.sub(r"\([^)]*\)", "", e):
        raise ValueError(e)
    marker = None
    m = re.search(r"\[([^\]]*)\]", e)
    if m:
        marker = m.group(1).strip()
        e = (e[:m.start()] + e[m.end():]).strip()
    for paren in re.findall(r"\(([^)]*)\)", e):
        p = PY_PAREN.match(paren.strip())
        if p:
            marker = "python_version %s '%s'" % (p.group(1), p.group(2))
        elif paren.strip() == "CPython only":
            marker = "platform_python_implementation == 'CPython'"
        elif paren.strip() == "implementation_name != PyPy":
            marker = "implementation_name != 'pypy'"
    e = re.sub(r"\([^)]*\)", "", e).strip()
    m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$", e)
    if not m:
        raise ValueError(entry)
    name, spec = m.group(1), m.group(2).replace(" ", "")
    if spec and not re.match(r"^(===|==|!=|<=|>=|~=|<|>)", spec):
        raise ValueError(entry)
    spec = expand_ranges(spec)
    out = name + spec
    if extra and marker:
        marker = "(%s) and extra == '%s'" % (marker, extra)
    elif extra:
        marker = "extra == '%s'" % extra
    if marker:
        out += "; " + marker.replace('"', "'")
    return out


def split_top(col, seps):
    """Splits at seps ("; ", or ", " before a name), never inside ( ) or [ ]."""
    out, cur, depth = [], "", 0
    i = 0
    while i < len(col):
        c = col[i]
        depth += c in "([" and 1 or 0
        depth -= c in ")]" and 1 or 0
        if depth == 0 and (("; " in seps and col.startswith("; ", i)) or
                           (", " in seps and col.startswith(", ", i) and
                            re.match(r"[A-Za-z][A-Za-z0-9._-]*\s*(\(|\[|$|[<>=!~;,])",
                                     col[i + 2:]))):
            out.append(cur)
            cur = ""
            i += 2
            continue
        cur += c
        i += 1
    out.append(cur)
    return out


def split_entries(col):
    """(entry, extra) pairs: "[and-cuda] a>=1, b>=2" puts a and b under that extra;
    "edges per lock: a, b" lists the lock's dependency edges (names only)."""
    out = []
    for chunk in split_top(col, ("; ",)):
        chunk = chunk.strip()
        extra = None
        m = re.match(r"^\[([A-Za-z0-9._-]+)\]\s+(.*)$", chunk)
        if m:
            extra, chunk = m.group(1), m.group(2)
        m = re.match(r"^edges per lock:\s*(.*)$", chunk)
        if m:
            out += [(n.strip(), None) for n in m.group(1).split(",") if n.strip()]
            continue
        out += [(e, extra) for e in split_top(chunk, (", ",))]
    return out


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    path, omit, indent = argv[0], set(), 2
    i = 1
    while i < len(argv):
        if argv[i] == "--omit":
            omit = set(argv[i + 1].split(","))
            i += 2
        elif argv[i] == "--indent":
            indent = int(argv[i + 1])
            i += 2
        else:
            sys.exit("unknown argument " + argv[i])
    rows = {}
    with open(path) as f:
        head = None
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            if head is None:
                head = cols
                continue
            r = dict(zip(head, cols))
            if r["name"] in omit or r["name"] in rows:
                continue
            rows[r["name"]] = r.get("requires", "")
    pad = " " * indent
    print(pad + "requires:   # Requires-Dist of each pin, from the closure's requires column")
    for name in sorted(rows):
        reqs = []
        for entry, extra in split_entries(rows[name]):
            try:
                r = convert(entry, extra)
            except ValueError:
                print("%s: left out: %s" % (name, entry), file=sys.stderr)
                continue
            if r:
                reqs.append(r)
        if not reqs:
            print("%s  %s: []" % (pad, name))
            continue
        print("%s  %s:" % (pad, name))
        for r in reqs:
            print("%s    - '%s'" % (pad, r.replace("'", "''")))


if __name__ == "__main__":
    main(sys.argv[1:])

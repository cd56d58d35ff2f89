#!/usr/bin/python3
"""Adds N recorded files to an applied stack's env resource (the no-op benches).

    /usr/bin/python3 bench/recorded_tree.py ROOT N [STACK]
    /usr/bin/python3 bench/recorded_tree.py --manifest    # the env-only manifest to apply first

Creates N files under ROOT/opt/tfprov/big/ in the shape of a large
site-packages (files of 0.8-3.2 KiB, 20 x 20 directories) and INSERTs one
`files` row per file for STACK's `env` resource (default bench-100k), with
the size, mode and mtime the no-op check compares. The stack must have been
applied (an env-only manifest is enough). Used by noop_100k.sh and gate.py.
"""
import hashlib
import os
import sqlite3
import sys

MANIFEST = """schema: 1
stack:
  name: bench-100k
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
driver:
  policy: skip
env:
  vars:
    TF_CPP_MIN_LOG_LEVEL: "1"
"""


def add(root, n, stack="bench-100k"):
    db = sqlite3.connect(os.path.join(root, "var/lib/tfprov/state.db"))
    rid = db.execute("SELECT r.id FROM resources r JOIN stacks s ON s.id = r.stack_id "
                     "WHERE s.name = ? AND r.addr = 'env'", (stack,)).fetchone()[0]
    rows = []
    for i in range(n):
        rel = "/opt/tfprov/big/pkg%02d/sub%03d/m%06d.py" % (i % 20, i // 20 % 20, i)
        host = root + rel
        os.makedirs(os.path.dirname(host), exist_ok=True)
        data = (b"# %d\n" % i) * (200 + i % 600)
        with open(host, "wb") as f:
            f.write(data)
        os.chmod(host, 0o644)
        st = os.stat(host)
        rows.append((rel, rid, "f", hashlib.sha256(data).hexdigest(), st.st_size, 0o644,
                     st.st_mtime_ns))
    with db:
        db.executemany("INSERT INTO files(path, resource_id, type, sha256, size, mode, mtime_ns) "
                       "VALUES (?,?,?,?,?,?,?)", rows)
    db.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["--manifest"]:
        sys.stdout.write(MANIFEST)
    else:
        add(sys.argv[1], int(sys.argv[2]), *(sys.argv[3:4]))

"""The architecture's call rules, checked on the source tree (ARCHITECTURE.md,
"Parts and who may call whom"):

- the store (state/) is the only part that includes <sqlite3.h> or calls sqlite3_*,
  the only one that writes SQL, and the only one that includes state_private.h;
- the core (engine/, modules/, state/) never prints: stdout/stderr belong to the
  front end (cli/); the one exception is tf_fatal() in engine/error.c, which
  writes a last message before abort() when no event handler can run;
- steps (modules/) write only through the placement API: no O_APPEND, rename()
  or renameat() of their own;
- includes point one way: the core includes no front-end header, the engine and
  the store include no step header, steps include no store header.

Each rule is checked by reading the files, so a new violation fails this test
with the file and line.
"""
import os
import re

import pytest

SRC = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
FRONT, ENGINE, STEPS, STORE = "cli", "engine", "modules", "state"
CORE = (ENGINE, STEPS, STORE)


def sources(*parts):
    for part in parts:
        for dirpath, _, names in os.walk(os.path.join(SRC, part)):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, n), SRC)


def headers_of(part):
    return {os.path.basename(p) for p in sources(part) if p.endswith(".h")}


def code_lines(path):
    """Lines with comments and string literals blanked, numbered from 1."""
    text = open(os.path.join(SRC, path), encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    for i, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("#include"):
            yield i, line
        else:
            yield i, re.sub(r'"(\\.|[^"\\])*"', '""', line)


def violations(paths, pattern, allow=lambda path, line: False):
    rx = re.compile(pattern)
    out = []
    for p in paths:
        for n, line in code_lines(p):
            if rx.search(line) and not allow(p, line):
                out.append(f"{p}:{n}: {line.strip()}")
    return out


def test_the_layout_exists():
    for part in (FRONT,) + CORE:
        assert any(True for _ in sources(part)), f"{part}/ holds no sources"
    assert os.path.exists(os.path.join(SRC, FRONT, "main.c"))


def test_only_the_store_speaks_sqlite():
    others = list(sources(FRONT, ENGINE, STEPS))
    assert violations(others, r"\bsqlite3_|<sqlite3\.h>|\bsqlite3\b") == []


SQL = r"SELECT|INSERT|UPDATE|DELETE"  # issue 23's grep, word parts and comments included


def sql_lines(paths):
    """Lines that name an SQL statement, in code, strings or comments."""
    rx = re.compile(SQL)
    out = []
    for p in paths:
        with open(os.path.join(SRC, p), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if rx.search(line):
                    out.append(f"{p}:{n}: {line.strip()}")
    return out


def test_sql_pattern_finds_a_query_anywhere(tmp_path):
    """The check below can fail: it finds a query in a string and a keyword in a
    name or a comment, and passes lowercase prose."""
    planted = tmp_path / "planted.c"
    planted.write_text('state_prepare(st, "DELETE FROM files WHERE path = ?", &s);\n'
                       "s->action = ACT_UPDATE;\n"
                       "/* an unconditional SELECT */\n"
                       "/* the update is selected, inserted, deleted */\n")
    found = sql_lines([str(planted)])
    assert [f.split(":")[1] for f in found] == ["1", "2", "3"], found


def test_only_the_store_writes_sql():
    """Every query is a named function of the store (state.h); the statement
    API and the SQLite handle are state_private.h's, included by state/ only."""
    others = list(sources(FRONT, ENGINE, STEPS))
    assert sql_lines(others) == []
    assert violations(others, r'#include\s+"state_private\.h"') == []


PRINTS = (r"\b(printf|puts|putchar|perror|vprintf)\s*\(|"
          r"\b(fprintf|vfprintf|fputs|fputc|fwrite|fflush)\s*\([^;]*\b(stdout|stderr)\b|"
          r"\bdprintf\s*\(\s*[12]\b|\bwrite\s*\(\s*(1|2|STDOUT_FILENO|STDERR_FILENO)\b")


def test_the_core_never_prints():
    def fatal(path, line):
        return path == os.path.join(ENGINE, "error.c") and "STDERR_FILENO" in line
    assert violations(list(sources(*CORE)), PRINTS, fatal) == []


def test_steps_write_only_through_placement():
    assert violations(list(sources(STEPS)), r"\bO_APPEND\b|\brename(at2?)?\s*\(") == []


@pytest.mark.parametrize("who,forbidden", [
    (CORE, (FRONT,)),
    ((ENGINE, STORE), (STEPS,)),
    ((STEPS,), (STORE,)),
])
def test_includes_point_one_way(who, forbidden):
    names = set()
    for part in forbidden:
        names |= headers_of(part)
    inc = r'#include\s+"(%s)"' % "|".join(re.escape(n) for n in sorted(names))
    assert violations(list(sources(*who)), inc) == []


UNCHECKED_SYNC = r"^\s*(\(void\)\s*)?(syncfs|fsync|fdatasync)\s*\("


def test_unchecked_sync_pattern_finds_a_discarded_result():
    """The pattern below tells a discarded result from a checked one."""
    rx = re.compile(UNCHECKED_SYNC)
    for bad in ("\tsyncfs(fd);", "  (void)fsync(fd);", "fdatasync(x->fd);"):
        assert rx.search(bad), bad
    for good in ("\tif (syncfs(fd) != 0)", "\trc = fsync(fd);",
                 "\tif (fchmod(fd, m) != 0 || fsync(fd) != 0) {",
                 "\tif (sfd < 0 || syncfs(sfd) != 0) {"):
        assert not rx.search(good), good


def test_every_sync_result_is_checked():
    """Durability (ARCHITECTURE.md section 4): a syncfs/fsync/fdatasync whose
    result is dropped would let a step commit records of bytes that are not on
    disk. Every call in the core is part of a condition or an assignment."""
    assert violations(sources(*CORE), UNCHECKED_SYNC) == []

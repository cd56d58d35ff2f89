"""The architecture's rules that a compiler cannot see, checked on the source
tree (ARCHITECTURE.md, "Rooms and who may call whom"), and the ones it can,
proved by planting a violation into the real build's compile commands:

- folders: each folder of engine/ (and state/, modules/) is its own static
  library; its private headers (<folder>/private/) are reachable only from it,
  and it reaches only the public headers of the folders it links. A planted
  include of another folder's private header, an include against the
  layering, and a call without the folder's header all fail to compile with
  the flags CMake gives that folder (compile_commands.json);
- includes name headers, not paths ("artifact.h", never "../artifact/x.h" or
  "private/x.h"), so the include directories above are the whole story;
- the includes among engine's folders have no cycle;
- the store (state/) is the only part that includes <sqlite3.h>, calls
  sqlite3_* or holds SQL text;
- nothing returns a bare -1: a function fails with a negative TF_E* or -errno
  (engine/base/error.h);
- the core (engine/, modules/, state/) never prints: stdout/stderr belong to the
  front end (cli/); the one exception is tf_fatal() in engine/base/error.c,
  which writes a last message before abort() when no event handler can run;
- steps (modules/) write only through the placement API: no O_APPEND, rename()
  or renameat() of their own;
- every fsync/syncfs/fdatasync result is checked.

Each check is run once on the tree (no finding) and once on a planted
violation (a finding), so none of them can pass vacuously.
"""
import json
import os
import re
import shlex
import subprocess

import pytest

SRC = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(SRC, "build"))
FRONT, ENGINE, STEPS, STORE = "cli", "engine", "modules", "state"
CORE = (ENGINE, STEPS, STORE)


def sources(*parts):
    for part in parts:
        for dirpath, _, names in os.walk(os.path.join(SRC, part)):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, n), SRC)


def code_lines(path, text=None):
    """Lines with comments and string literals blanked (include lines keep
    their names), numbered from 1."""
    if text is None:
        text = open(os.path.join(SRC, path), encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    for i, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("#include"):
            yield i, line
        else:
            yield i, re.sub(r'"(\\.|[^"\\])*"', '""', line)


def string_lines(path, text=None):
    """Only the string literals of each line (comments dropped)."""
    if text is None:
        text = open(os.path.join(SRC, path), encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    for i, line in enumerate(text.split("\n"), 1):
        if not line.lstrip().startswith("#include"):
            yield i, " ".join(m.group(0) for m in re.finditer(r'"(\\.|[^"\\])*"', line))


def violations(paths, pattern, allow=lambda path, line: False, lines=code_lines, text=None):
    rx = re.compile(pattern)
    out = []
    for p in paths:
        for n, line in lines(p, text):
            if rx.search(line) and not allow(p, line):
                out.append(f"{p}:{n}: {line.strip()}")
    return out


def planted(path, text, pattern, **kw):
    """The same check, on a made-up file: it must find the violation."""
    return violations([path], pattern, text=text, **kw)


def test_the_layout_exists():
    for part in (FRONT,) + CORE:
        assert any(True for _ in sources(part)), f"{part}/ holds no sources"
    assert os.path.exists(os.path.join(SRC, FRONT, "main.c"))
    rooms = {d for d in os.listdir(os.path.join(SRC, ENGINE))
             if os.path.isdir(os.path.join(SRC, ENGINE, d))}
    assert {"base", "core", "artifact", "python", "gpu", "kb", "run"} <= rooms
    loose = [n for n in os.listdir(os.path.join(SRC, ENGINE)) if n.endswith((".c", ".h"))]
    assert loose == [], f"engine/ files outside a folder: {loose}"


SQLITE = r"\bsqlite3_|<sqlite3\.h>|\bsqlite3\b"
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


def fatal(path, line):
    return path == os.path.join(ENGINE, "base", "error.c") and "STDERR_FILENO" in line


def test_the_core_never_prints():
    assert violations(list(sources(*CORE)), PRINTS, fatal) == []
    for bad in ('\tprintf("x");\n', '\tfprintf(stderr, "%s", m);\n', "\twrite(2, b, n);\n"):
        assert planted("engine/core/x.c", bad, PRINTS, allow=fatal), bad
    assert not planted("engine/core/x.c", '\tfprintf(f, "%s", m);\n', PRINTS, allow=fatal)


STEP_WRITES = r"\bO_APPEND\b|\brename(at2?)?\s*\("


def test_steps_write_only_through_placement():
    assert violations(list(sources(STEPS)), STEP_WRITES) == []
    assert planted("modules/x.c", "\trename(a, b);\n", STEP_WRITES)
    assert planted("modules/x.c", "\tfd = open(p, O_WRONLY | O_APPEND);\n", STEP_WRITES)


PATH_INCLUDE = r'#include\s+"[^"]*/'


def test_includes_name_headers_not_paths():
    """A path in an include would walk around the include directories that
    keep a folder's private headers private."""
    assert violations(list(sources(FRONT, *CORE)), PATH_INCLUDE) == []
    assert planted("engine/gpu/x.c", '#include "../artifact/private/cabundle.h"\n', PATH_INCLUDE)
    assert planted("engine/gpu/x.c", '#include "private/isolate.h"\n', PATH_INCLUDE)


def folder_of(path):
    parts = path.split(os.sep)
    return parts[1] if parts[0] == ENGINE and len(parts) > 2 else parts[0]


def folder_graph():
    """Folder -> folders whose headers it includes (engine's folders, state, modules)."""
    owner = {}
    for p in sources(*CORE):
        if p.endswith(".h"):
            owner.setdefault(os.path.basename(p), folder_of(p))
    graph = {}
    for p in sources(*CORE):
        me = folder_of(p)
        graph.setdefault(me, set())
        for _, line in code_lines(p):
            m = re.match(r'\s*#include\s+"([^"]+)"', line)
            if m and owner.get(m.group(1), me) != me:
                graph[me].add(owner[m.group(1)])
    return graph


def find_cycle(graph):
    """A cycle as a list of nodes, or None (depth-first search)."""
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def test_no_include_cycle_among_folders():
    graph = folder_graph()
    assert {"base", "core", "artifact", "python", "gpu", "kb", "run"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    # The lowest folder includes no other; the walk sees real edges.
    assert graph["base"] == set(), graph["base"]
    assert "artifact" in graph["python"]
    # Planted: the placement core including a Python header closes a circle
    # (core -> python -> core), the one issue 23 found.
    bent = {k: set(v) for k, v in graph.items()}
    bent["core"].add("python")
    assert find_cycle(bent) is not None


def compile_command(source):
    """The exact command the build compiles `source` (relative) with."""
    db = os.path.join(BUILD, "compile_commands.json")
    if not os.path.exists(db):
        pytest.fail(f"{db} is missing: configure the build first (CMAKE_EXPORT_COMPILE_COMMANDS)")
    for e in json.load(open(db)):
        if os.path.normpath(e["file"]) == os.path.join(SRC, source):
            args = e.get("arguments") or shlex.split(e["command"])
            return args, e["directory"]
    pytest.fail(f"{source} is not in {db}")


def try_compile(tmp_path, folder_source, text, syntax_only=False):
    """Compiles `text` as if it were a file of folder_source's library (with
    syntax_only, -fsyntax-only: every include and declaration, no object)."""
    args, cwd = compile_command(folder_source)
    src = tmp_path / "planted.c"
    src.write_text(text)
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            out += ["-o", str(tmp_path / "planted.o")]
            skip = True
        elif a.endswith(".c") and os.path.normpath(os.path.join(cwd, a)) == os.path.join(SRC, folder_source):
            out.append(str(src))
        elif a.startswith("-o") and len(a) > 2:
            out.append("-o" + str(tmp_path / "planted.o"))
        else:
            out.append(a)
    if "-c" not in out:
        out.append("-c")
    if syntax_only:
        out.append("-fsyntax-only")
    return subprocess.run(out, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("where,text,what", [
    # The control: a folder reaches the public header of a folder it links.
    ("engine/python/pyenv.c", '#include "artifact.h"\nint planted;\n', None),
    ("engine/python/pyenv.c", '#include "cabundle.h"\nint planted;\n', "cabundle.h"),
    ("engine/gpu/gpu_probe.c", '#include "manifest.h"\nint planted;\n', "manifest.h"),
    ("engine/core/place.c", '#include "python.h"\nint planted;\n', "python.h"),
    ("engine/base/fs.c", '#include "state.h"\nint planted;\n', "state.h"),
    ("cli/main.c", '#include "state_private.h"\nint planted;\n', "state_private.h"),
    ("modules/pip.c", '#include "wheel.h"\nint planted;\n', "wheel.h"),
    ("engine/artifact/fetch.c", '#include "kb.h"\nint planted;\n', "kb.h"),
    ("engine/gpu/gpu_probe.c",
     "int planted(void)\n{\n\tmanifest_free(0);\n\treturn 0;\n}\n", "manifest_free"),
])
def test_a_forbidden_include_or_call_fails_to_build(tmp_path, where, text, what):
    r = try_compile(tmp_path, where, text)
    if what is None:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0, f"{where}'s library compiled a planted {what}"
        assert what in r.stderr, r.stderr


# Every wall between the folders, planted: for each folder, a file of its
# library (whose compile command the planted source borrows) and its public
# header; REACH is what each folder may include (ARCHITECTURE.md §2: the
# folders it links, and what their public headers need). Every other
# folder's public header must fail to build there, and each one in REACH
# must build, so the build's links and this table agree both ways.
FOLDERS = {
    "base": ("engine/base/fs.c", "util.h"),
    "state": ("state/state.c", "state.h"),
    "core": ("engine/core/place.c", "manifest.h"),
    "artifact": ("engine/artifact/fetch.c", "artifact.h"),
    "gpu": ("engine/gpu/gpu_probe.c", "gpu.h"),
    "image": ("engine/image/oci.c", "image.h"),
    "python": ("engine/python/pyenv.c", "python.h"),
    "kb": ("engine/kb/catalog.c", "kb.h"),
    "modules": ("modules/pip.c", None),  # no public header: reached through module.h's table
    "run": ("engine/run/plan.c", "plan.h"),
    "cli": ("cli/main.c", "cli.h"),
}
REACH = {
    "base": set(),
    "state": {"base"},
    "core": {"base", "state"},
    "artifact": {"base"},
    "gpu": {"base"},
    "image": {"base"},
    "python": {"base", "core", "state", "artifact"},
    "kb": {"base", "core", "artifact", "python"},
    "modules": {"base", "core", "artifact", "gpu", "python", "kb"},
    "run": {"base", "core", "state", "artifact", "gpu", "python", "kb"},
    "cli": {"base", "core", "state", "artifact", "gpu", "image", "python", "kb", "run"},
}
PRIVATE = {"artifact": "cabundle.h", "gpu": "isolate.h", "image": "oci_int.h", "kb": "pep508.h",
           "python": "wheel.h", "state": "state_private.h"}


def wall_cases():
    for me, (where, _) in FOLDERS.items():
        for other, (_, header) in FOLDERS.items():
            if other != me and header is not None:
                yield pytest.param(where, header, other in REACH[me], id=f"{me}-includes-{other}")
        for other, header in PRIVATE.items():
            if other != me:
                yield pytest.param(where, header, False, id=f"{me}-includes-{other}-private")


@pytest.mark.parametrize("where,header,allowed", list(wall_cases()))
def test_every_wall_between_folders_is_held_by_the_build(tmp_path, where, header, allowed):
    r = try_compile(tmp_path, where, f'#include "{header}"\nint planted;\n', syntax_only=True)
    if allowed:
        assert r.returncode == 0, f"{where}'s library cannot include {header}:\n{r.stderr}"
    else:
        assert r.returncode != 0, f"{where}'s library compiled a planted {header}"
        assert header in r.stderr, r.stderr


SQLITE_WALL = "only state/ speaks SQLite"


@pytest.mark.parametrize("where", [w for w, _ in FOLDERS.values()])
def test_only_the_store_reaches_sqlite(tmp_path, where):
    """The SQLite wall of the build (cmake/walls/sqlite3.h first on the include
    path of every folder but state/): an include fails there, a call without
    it fails as an implicit declaration; the store's own file builds both."""
    inc = "#include <sqlite3.h>\nint planted(void)\n{\n\treturn sqlite3_libversion_number();\n}\n"
    call = "int planted(void)\n{\n\treturn sqlite3_libversion_number();\n}\n"
    r = try_compile(tmp_path, where, inc, syntax_only=True)
    if where.startswith("state/"):
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode != 0 and SQLITE_WALL in r.stderr, r.stderr
    r = try_compile(tmp_path, where, call, syntax_only=True)
    assert r.returncode != 0 and "sqlite3_libversion_number" in r.stderr, r.stderr


def test_only_the_store_speaks_sqlite():
    """The same rule on the text, for what the compiler cannot see (a
    prototype declared by hand): no sqlite3 name outside state/."""
    assert violations(list(sources(FRONT, ENGINE, STEPS)), SQLITE) == []
    assert planted("engine/python/x.c", "int sqlite3_open(const char *, void **);\n", SQLITE)
    assert planted("cli/x.c", "#include <sqlite3.h>\n", SQLITE)
    assert not planted("cli/x.c", 'row("sqlite", state_sqlite_version(), "linked in");\n', SQLITE)


def rooms_table(kind):
    """Test file name -> labels, from tests/rooms.cmake's list for kind."""
    text = open(os.path.join(SRC, "tests", "rooms.cmake"), encoding="utf-8").read()
    body = text[text.index(f"set(TFPROV_{kind.upper()}_ROOMS"):]
    body = body[:body.index('")') + 1]
    return {row.split()[0]: row.split()[1:] for row in re.findall(r'"([^"]+)"', body)}


def unfiled(table, names):
    return sorted(n for n in names if not table.get(n))


def test_every_test_has_a_room():
    """Tests by room (tests/rooms.cmake, `ctest -L engine-python`): every test
    file is filed under at least one room, and no row names a test that is gone."""
    labels = set()
    for kind, ext in (("unit", ".c"), ("system", ".py")):
        table = rooms_table(kind)
        names = [p[5:-len(ext)] for p in os.listdir(os.path.join(SRC, "tests", kind))
                 if p.startswith("test_") and p.endswith(ext)]
        assert unfiled(table, names) == [], f"tests/rooms.cmake files no room for these {kind} tests"
        assert sorted(set(table) - set(names)) == [], f"tests/rooms.cmake names {kind} tests that do not exist"
        labels |= {lab for labs in table.values() for lab in labs}
    rooms = {"engine-" + f for f in FOLDERS if f not in ("state", "modules", "cli")}
    assert rooms | {"state", "modules"} <= labels, sorted(rooms - labels)
    assert unfiled(table, names + ["planted_new_test"]) == ["planted_new_test"]


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


def named_in(doc, path):
    """Whether ARCHITECTURE.md names `path`: as a whole (`engine/base/fs.c`),
    or by its name within the folder in a paragraph that names that folder's
    files (`engine/base/fs.c`/`fs.h`, `engine/gpu/isolate.c`/`private/isolate.h`)."""
    folder = path.split(os.sep)[0] if path.split(os.sep)[0] != ENGINE else \
        os.path.join(*path.split(os.sep)[:2])
    rel = os.path.relpath(path, folder)
    for para in re.split(r"\n\s*\n|\n- ", doc):
        ticks = set(re.findall(r"`([^`]+)`", para))
        if path in ticks:
            return True
        if rel in ticks and any(t.startswith(folder + "/") for t in ticks):
            return True
    return False


def test_the_map_names_every_source_file():
    """ARCHITECTURE.md is a newcomer's map: every source file of engine/,
    modules/ and state/ is named there (cli/ is one file per command)."""
    doc = open(os.path.join(SRC, "ARCHITECTURE.md"), encoding="utf-8").read()
    missing = [p for p in sources(*CORE) if not named_in(doc, p)]
    assert missing == [], f"ARCHITECTURE.md does not name {missing}"
    # Planted: a file the map has never heard of, and a short name outside
    # its folder's paragraph, are not named.
    assert not named_in(doc, os.path.join(ENGINE, "base", "planted.c"))
    assert not named_in("`engine/gpu/x.c`\n\n`fs.h`\n", os.path.join(ENGINE, "base", "fs.h"))
    assert named_in("`engine/base/fs.c`/`fs.h`\n", os.path.join(ENGINE, "base", "fs.h"))
MINUS_ONE = r"\breturn\s*\(?\s*-\s*1\s*\)?\s*;"


def test_minus_one_pattern_finds_a_bare_minus_one():
    """The pattern below tells a bare -1 from the codes that replace it."""
    rx = re.compile(MINUS_ONE)
    for bad in ("\treturn -1;", "\t\treturn (-1);", "return - 1 ;"):
        assert rx.search(bad), bad
    for good in ("\treturn -ENOENT;", "\treturn TF_EFAIL;", "\treturn -10;",
                 "\treturn x - 1;", "\treturn VERSION_NOT_NUMERIC;"):
        assert not rx.search(good), good


def test_no_function_fails_with_minus_one():
    """One way to fail (engine/base/error.h): 0 or a negative TF_E* / -errno, never
    a bare -1 that no table names."""
    assert violations(list(sources(FRONT, *CORE)), MINUS_ONE) == []


EXIT_CODES = r"\bTF_EXIT_[A-Z]+\b"


def test_only_main_speaks_exit_codes():
    """Commands and the core return TF_E* codes; tf_exit_code() (engine/base/error.c) maps
    them and main() is the one place that holds an exit code."""
    def mapper(path, line):
        return path in (os.path.join(ENGINE, "base", "error.c"), os.path.join(ENGINE, "base", "error.h"),
                        os.path.join(FRONT, "main.c"))
    assert violations(list(sources(FRONT, *CORE)), EXIT_CODES, mapper) == []


def test_exit_code_pattern_finds_an_exit_code():
    rx = re.compile(EXIT_CODES)
    assert rx.search("\trc = drifted ? TF_EXIT_CHANGES : 0;")
    assert not rx.search("\trc = drifted ? TF_ECHANGES : 0;")


# One message carrier (engine/base/error.h): the words of a failure travel in a
# struct why, never in a char ** out-parameter (an allocated `char **errmsg` or
# a static `const char **why`), and no caller chooses between two carriers
# (`err ? err : tf_strerror(rc)`: the callee's why holds its code).
MESSAGE_OUT_PARAM = r"\bchar\s*\*\s*\*\s*(errmsg|err|msg|error|why|reason)\s*[,)]"
CARRIER_GLUE = r"(^\s*|\?[^;]*):\s*tf_strerror\s*\("


def test_carrier_patterns_find_a_message_out_parameter_and_a_glue():
    """The patterns below find what the carrier replaced, in a planted file."""
    text = ("static int f(const char *p, char **errmsg)\n"
            "int g(struct ctx *c, char **err);\n"
            "\tev_log(c, EV_ERROR, \"%s\", err ? err : tf_strerror(rc));\n"
            "\tstep_fail(s, \"%s\", txn_error(t) ? txn_error(t)\n"
            "\t                                  : tf_strerror(rc));\n"
            "int h(struct ctx *c, struct why *why);\n"
            "\tev_log(c, EV_ERROR, \"%s\", why_text(&w));\n"
            "int pep508_parse(const char *text, struct pep508_req *out, const char **err);\n"
            "\tconst char *s = tf_strerror(rc);\n"
            "static int split(const char *s, size_t *n, const char **why)\n"
            "int ms_verify(const struct ms_sig *sig, const char ** reason);\n"
            "const char *compat_manifest_min_glibc(const struct manifest *m, const char **source,\n"
            "                                      const char **tf);\n"
            "static int split_lines(const char *text, const char **line, size_t *llen,\n")
    params = planted("engine/base/planted.c", text, MESSAGE_OUT_PARAM)
    glue = planted("engine/base/planted.c", text, CARRIER_GLUE)
    # A static reason (const char **) is a second carrier too; a value handed
    # back through a const char ** (a source, a TF version, a line) is not.
    assert [v.split(":")[1] for v in params] == ["1", "2", "8", "10", "11"], params
    assert [v.split(":")[1] for v in glue] == ["3", "5"], glue


def test_one_message_carrier():
    """No `char **errmsg` or `const char **why` out-parameter and no
    `? ... : tf_strerror(` glue in the front end or the core; why_text() in
    error.c is the one place that falls back from the words to the code's
    message."""
    def why_text(path, line):
        return path == os.path.join(ENGINE, "base", "error.c")
    paths = list(sources(FRONT, *CORE))
    assert violations(paths, MESSAGE_OUT_PARAM) == []
    assert violations(paths, CARRIER_GLUE, why_text) == []


# The level of an ev_log call: its second argument, over as many lines as it takes.
LOG_LEVEL = r"\bev_log\s*\(\s*[^,()]*,\s*([^,]*)"


def error_logs(paths, text=None):
    """The ev_log calls whose level can be EV_ERROR, as path:line."""
    out = []
    for p in paths:
        code = "\n".join(line for _, line in code_lines(p, text))
        for m in re.finditer(LOG_LEVEL, code):
            if "EV_ERROR" in m.group(1):
                out.append(f"{p}:{code.count(chr(10), 0, m.start()) + 1}")
    return out


def test_the_library_logs_no_error():
    """The engine, the steps and the store never decide how a failure reads: it
    goes back to the caller in a struct why (plan_apply, place_open_state), or
    out as a typed event the front end phrases (download_failed,
    artifact_mismatch, offline_missing, a failed step's apply_complete). No
    library ev_log at error level, a conditional one included; the front end's
    are its own."""
    text = ("\tev_log(c, EV_ERROR, \"cannot: %s\", why_text(&w));\n"
            "\tev_log(d->c, rc == TF_EINTEGRITY ? EV_ERROR\n"
            "\t                                 : EV_INFO, \"%s\", m);\n"
            "\tev_log(c, EV_WARN, \"EV_ERROR, in words\");\n"
            "\tev_emit(c, &(struct event){.kind = EV_OFFLINE, .level = EV_ERROR});\n")
    assert error_logs(["engine/base/planted.c"], text) == [
        "engine/base/planted.c:1", "engine/base/planted.c:2"]
    assert error_logs(list(sources(*CORE))) == []
    assert len(error_logs(list(sources(FRONT)))) > 50  # the check sees multi-line calls

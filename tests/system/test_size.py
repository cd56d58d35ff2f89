"""The size rule: no source file of engine/, cli/, modules/ or state/ over
1,200 lines and no function over 100, but for the named exceptions of
tests/size_exceptions.tsv, each with its reason (tests/tools/size_check.py
says how a function is measured). Each check also runs on a planted tree, so
it can fail."""
import os
import sys

SRC = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "tools"))
import size_check  # noqa: E402


def test_the_tree_keeps_the_size_rule():
    bad, stale = size_check.check(SRC)
    assert bad == [], "over the size rule, and not in tests/size_exceptions.tsv:\n" + "\n".join(bad)
    assert stale == [], "exceptions that no longer find anything:\n" + "\n".join(stale)


def long_function(name, body_lines):
    return f"static int {name}(int a,\n                 int b)\n{{\n" + "\ta++;\n" * body_lines + "\treturn a;\n}\n"


def planted(tmp_path, files, exceptions=""):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "size_exceptions.tsv").write_text("# none\n" + exceptions)
    return size_check.check(str(tmp_path))


def test_a_long_file_and_a_long_function_are_found(tmp_path):
    struct = "static const struct x t[] = {\n" + "\t{1},\n" * 150 + "};\n"
    bad, stale = planted(tmp_path, {
        "engine/x/big.c": "/* c */\n" * 1201,
        "engine/x/fine.c": "int f(void)\n{\n" + "\t;\n" * 97 + "}\n" + struct,  # 100 lines: allowed
        "modules/long.c": "/* a comment */\n" + long_function("too_long", 98),     # 101 lines
        "cli/ok.h": "/* h */\n" * 1200,
    })
    assert stale == []
    assert bad == ["engine/x/big.c: 1201 lines (limit 1200)",
                   "modules/long.c:4: too_long() is 101 lines (limit 100)"], bad


def test_an_exception_needs_its_reason_and_must_still_apply(tmp_path):
    files = {"state/long.c": long_function("too_long", 120)}
    bad, stale = planted(tmp_path, files, "state/long.c:too_long\tbeing cut\n")
    assert bad == [] and stale == []
    bad, stale = planted(tmp_path, files, "state/long.c:too_long\tbeing cut\nstate/gone.c\tcut\n")
    assert stale == ["state/gone.c"]
    try:
        planted(tmp_path, files, "state/long.c:too_long\n")
    except SystemExit as e:
        assert "without its reason" in str(e)
    else:
        raise AssertionError("an exception without a reason was accepted")

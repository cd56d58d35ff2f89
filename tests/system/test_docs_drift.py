"""The man page and the bash completion against `tfprov help`.

Both are generated at build time from the binary's help (scripts/gen-docs.py,
packaging/packaging.cmake); this test reads `tfprov help` and `tfprov help
COMMAND` on its own, and fails when the built man page or completion lacks a
command or an option that the help lists. The completion is then run in a
real bash (without bash-completion's helpers, as on a minimal system): it
offers every command, a command's own options, and the stack names that
`tfprov status --json` reports under the --root given on the command line.
"""
import os
import re
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
TFPROV = os.environ.get("TFPROV_BIN", os.path.join(BUILD, "tfprov"))
MAN = os.path.join(BUILD, "packaging", "tfprov.1")
COMPLETION = os.path.join(BUILD, "packaging", "tfprov.bash-completion")
OPT = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)")


def help_text(*args):
    return subprocess.run([TFPROV, "help"] + list(args), capture_output=True, text=True,
                          check=True).stdout


def listed():
    """(commands, options, options per command) as `tfprov help` lists them."""
    top = help_text()
    cmds = []
    body = top.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    for line in body.splitlines():
        name = line.split()[0]
        if name not in cmds:
            cmds.append(name)
    opts = set(OPT.findall(top.split("\noptions:\n", 1)[1]))
    per = {}
    for c in cmds:
        text = help_text(c).split("\nglobal options:\n")[0]
        own = text.split("\noptions:\n", 1)[1] if "\noptions:\n" in text else ""
        per[c] = {o for line in own.splitlines() for o in OPT.findall(line.split("  ")[1]
                                                                       if line.startswith("  -")
                                                                       else "")}
        opts |= per[c]
    return cmds, opts, per


def test_help_lists_the_table():
    cmds, opts, per = listed()
    for c in ("validate", "plan", "apply", "diff", "sign", "keygen", "lock", "destroy", "gc"):
        assert c in cmds, cmds
    for o in ("--check", "--require-signature", "--trusted-key", "--allow-incomplete-lock",
              "--all", "--key", "--root"):
        assert o in opts, sorted(opts)
    assert "--output" not in per["plan"] and "-o" not in per["plan"]
    assert "--output" in per["lock"]


@pytest.mark.parametrize("path", [MAN, COMPLETION], ids=["man", "completion"])
def test_generated_docs_have_every_command_and_option(path):
    cmds, opts, _ = listed()
    text = open(path).read()
    if path == MAN:
        text = text.replace("\\-", "-")
    missing = [c for c in cmds if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(c), text)]
    missing += [o for o in sorted(opts) if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o),
                                                         text)]
    assert not missing, "%s lacks %s" % (path, missing)


def test_man_page_lists_each_commands_own_options_under_it():
    _, _, per = listed()
    text = open(MAN).read().replace("\\-", "-")
    sections = re.split(r"\n\.TP\n\.B ", text.split(".SH COMMANDS", 1)[1].split(".SH OPTIONS")[0])
    for cmd, own in per.items():
        block = "\n".join(s for s in sections if s.split()[0] == cmd or s.startswith("-"))
        for o in own:
            assert o in block, (cmd, o)


def complete(words, cword=None):
    """COMPREPLY of the generated completion for the given words, in a real bash."""
    script = ("source %s\nCOMP_WORDS=(%s)\nCOMP_CWORD=%d\n_tfprov\nprintf '%%s\\n' "
              "\"${COMPREPLY[@]}\"\n" % (
                  COMPLETION, " ".join("'%s'" % w for w in words),
                  len(words) - 1 if cword is None else cword))
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return set(p.stdout.split())


def test_completion_offers_commands_options_and_stacks(tmp_path):
    cmds, opts, per = listed()
    assert set(cmds) <= complete([TFPROV, ""])
    assert {"default", "destroy", "diff", "doctor"} == complete([TFPROV, "d"])
    assert per["destroy"] <= complete([TFPROV, "destroy", "--"]) | complete([TFPROV, "destroy", "-"])
    assert "--all" in complete([TFPROV, "destroy", "--a"])
    assert "--all" not in complete([TFPROV, "apply", "--a"])  # not an option of apply
    root = tmp_path / "root"
    for name in ("alpha", "beta"):
        m = tmp_path / ("%s.yaml" % name)
        m.write_text("schema: 1\nstack:\n  name: %s\n  platform: linux-x86_64\n"
                     "prefix: /opt/tfprov\nversions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\n"
                     "driver:\n  policy: skip\nenv:\n  vars:\n    X: \"1\"\n" % name)
        subprocess.run([TFPROV, "--root", str(root), "apply", "-y", str(m)], check=True,
                       capture_output=True, stdin=subprocess.DEVNULL)
    assert complete([TFPROV, "--root", str(root), "show", ""]) == {"alpha", "beta"}
    assert complete([TFPROV, "--root", str(root), "destroy", "b"]) == {"beta"}
    for cmd in ("run", "env", "shell", "default"):
        assert complete([TFPROV, "--root", str(root), cmd, ""]) == {"alpha", "beta"}, cmd
    # no state under that root: no names, and no error
    assert complete([TFPROV, "--root", str(tmp_path / "none"), "show", ""]) == set()

#!/usr/bin/env python3
"""Writes the man page and the bash completion from the built binary's own help.

`tfprov help` and `tfprov help COMMAND` print cli/main.c's command table (every
command, its usage and description, its own options) and the global options;
this script turns that into the COMMANDS and OPTIONS sections of tfprov(1)
(packaging/tfprov.1.in, markers @COMMANDS@ @OPTIONS@ @VERSION@) and the word
lists of the bash completion (packaging/tfprov.bash-completion.in), so
neither can drift from the code: a command or option added to the table is in
both at the next build. tests/system/test_docs_drift.py checks the result.

    gen-docs.py TFPROV SRC_DIR OUT_DIR
"""
import re
import subprocess
import sys


def run(tfprov, *args):
    p = subprocess.run([tfprov] + list(args), capture_output=True, text=True, check=True,
                       env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "LC_ALL": "C"})
    return p.stdout


def section(text, title, end=None):
    """Lines of a help section: after `title:` up to a blank line (or `end:`)."""
    out, on = [], False
    for line in text.splitlines():
        if line == title + ":":
            on = True
            continue
        if on and (line == "" or (end and line == end + ":")):
            break
        if on:
            out.append(line)
    return out


def entries(lines):
    """'  SPEC  description' rows with continuation lines: [(spec, description)]."""
    rows = []
    for line in lines:
        m = re.match(r"^  (\S.*?)(?:  +(\S.*))?$", line)
        if line.startswith("   ") and rows:  # continuation of the description
            rows[-1] = (rows[-1][0], (rows[-1][1] + " " + line.strip()).strip())
        elif m:
            rows.append((m.group(1), m.group(2) or ""))
    return rows


def option_names(spec):
    """'-y, --yes, --auto-approve' -> ['-y', '--yes', '--auto-approve'];
    '--root DIR' -> ['--root'] (the argument apart)."""
    return re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", spec)


def option_arg(spec):
    m = re.search(r"--?[a-z][a-z-]* ([A-Z][A-Z|/._]*)", spec)
    return m.group(1) if m else None


def parse(tfprov):
    top = run(tfprov, "help")
    commands = {}
    for spec, desc in entries(section(top, "commands")):
        name = spec.split()[0]
        c = commands.setdefault(name, {"usages": [], "desc": desc, "opts": []})
        c["usages"].append((spec, desc))
    for name, c in commands.items():
        text = run(tfprov, "help", name)
        c["opts"] = entries(section(text, "options", end="global options"))
    globals_ = entries(section(top, "options"))
    version = run(tfprov, "--version").split()[1]
    return commands, globals_, version


def roff(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return s.replace("`", "\\(oq").replace("'", "\\(aq")


def man_commands(commands):
    out = []
    for name, c in commands.items():
        for spec, desc in c["usages"]:
            out += [".TP", ".B " + roff(spec), roff(desc[:1].upper() + desc[1:]) + "."]
        if c["opts"]:
            out += [".RS", ".PD 0"]
            for spec, desc in c["opts"]:
                out += [".TP", ".B " + roff(spec), roff(desc)]
            out += [".PD", ".RE"]
    return "\n".join(out)


def man_options(globals_):
    out = []
    for spec, desc in globals_:
        out += [".TP", ".B " + roff(spec), roff(desc[:1].upper() + desc[1:]) + "."]
    return "\n".join(out)


def completion(commands, globals_):
    gl = sorted({n for spec, _ in globals_ for n in option_names(spec)} | {"--help", "-h"})
    with_arg = sorted({n for spec, _ in globals_ if option_arg(spec) for n in option_names(spec)}
                      | {n for c in commands.values() for spec, _ in c["opts"]
                         if option_arg(spec) for n in option_names(spec)})
    cases = []
    for name, c in commands.items():
        names = sorted({n for spec, _ in c["opts"] for n in option_names(spec)})
        cases.append("\t%s) echo \"%s\" ;;" % (name, " ".join(names)))
    stack_cmds = [n for n, c in commands.items() if any("STACK" in u for u, _ in c["usages"])]
    manifest_cmds = [n for n, c in commands.items() if n not in stack_cmds and n != "mirror"
                     and any("MANIFEST" in u for u, _ in c["usages"])]
    return {
        "@COMMANDS@": " ".join(list(commands) + ["help"]),
        "@GLOBAL_OPTIONS@": " ".join(gl),
        "@ARG_OPTIONS@": " | ".join(with_arg),
        "@COMMAND_OPTIONS@": "\n".join(cases),
        "@STACK_COMMANDS@": " | ".join(stack_cmds) or "__none__",
        "@MANIFEST_COMMANDS@": " | ".join(manifest_cmds) or "__none__",
    }


def main():
    tfprov, src, out = sys.argv[1:4]
    commands, globals_, version = parse(tfprov)
    with open(src + "/packaging/tfprov.1.in") as f:
        man = f.read()
    man = man.replace("@VERSION@", version).replace("@COMMANDS@", man_commands(commands))
    man = man.replace("@OPTIONS@", man_options(globals_))
    with open(out + "/tfprov.1", "w") as f:
        f.write(man)
    with open(src + "/packaging/tfprov.bash-completion.in") as f:
        comp = f.read()
    for k, v in completion(commands, globals_).items():
        comp = comp.replace(k, v)
    left = re.findall(r"@[A-Z_]+@", man + comp)
    if left:
        sys.exit("gen-docs: unreplaced markers %s" % left)
    with open(out + "/tfprov.bash-completion", "w") as f:
        f.write(comp)


if __name__ == "__main__":
    main()

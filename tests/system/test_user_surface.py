"""What a person touches: destroy that keeps what tfprov did not place, the
question before a change, a deep verify that passes on a clean env and names
the package of a changed file, one exit code per meaning, per-command options
and help, the version.

What the machine looks like: a --root sandbox; a real venv of the system
python with real pip installing tiny wheels from a PEP 503 index on
127.0.0.1 (lib_pyindex); a CUDA-layout stack from a loopback mirror
(lib_stack: STAND-IN libraries with the real sonames, no GPU); files a user
added by hand.
What is run: the real binary; questions are answered through a
pseudo-terminal on stdin (python's pty), never a fake.
What must hold: the files on disk, the exit codes, the messages below.
"""
import os
import pty
import re
import sqlite3
import subprocess
import sys

import pytest

import lib_pyindex
from lib_http import HttpServer
from lib_provision import no_stub_env, out, temp_leftovers
from lib_stack import applied_stack

PYVER = subprocess.run(["/usr/bin/python3", "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                       capture_output=True, text=True, check=True).stdout.strip()
ENV = "/opt/tfprov/envs/tf"


def py_manifest(path, index, pins, name="py"):
    req = "".join(f"    {n}=={v} \\\n        --hash=sha256:{h}\n" for n, v, h in pins)
    path.write_text(
        f"schema: 1\nstack:\n  name: {name}\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
        f"versions:\n  tensorflow: 2.15.1\n  python: \"{PYVER}\"\n"
        "driver:\n  policy: skip\n"
        f"python:\n  manager: venv\n  name: tf\n  version: \"{PYVER}\"\n"
        f"pip:\n  index_url: {index}\n  complete: true\n  requirements: |\n{req}")
    return str(path)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheels")
    pins = []
    for name, ver in (("tfprov-alpha", "1.0.0"), ("tfprov-beta", "2.1.0")):
        _, sha = lib_pyindex.build_wheel(str(d), name, ver)
        pins.append((name, ver, sha))
    idx = lib_pyindex.Index(str(d))
    idx.pins = pins
    yield idx
    idx.close()


def site_packages(tfprov):
    lib = tfprov.path(ENV + "/lib")
    return os.path.join(lib, [d for d in os.listdir(lib) if d.startswith("python")][0],
                        "site-packages")


def with_tty(tfprov, args, answer, env=None):
    """Runs tfprov with a pseudo-terminal on stdin, types `answer`; (rc, stdout+stderr)."""
    master, slave = pty.openpty()
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen([tfprov.bin, "--root", tfprov.root, *args], stdin=slave,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e, text=True)
    os.close(slave)
    os.write(master, (answer + "\n").encode())
    text, _ = p.communicate(timeout=120)
    os.close(master)
    return p.returncode, text


# ------------------------------------------------------------ (1) destroy keeps foreign files


def test_destroy_keeps_what_tfprov_did_not_place(tfprov, index, tmp_path):
    m = py_manifest(tmp_path / "m.yaml", index.url, index.pins)
    tfprov.run("apply", "-y", m, env=no_stub_env(), check=0, timeout=300)
    sp = site_packages(tfprov)
    alpha = os.path.join(sp, "tfprov_alpha", "__init__.py")
    assert os.path.isfile(alpha)
    mine = {tfprov.path(ENV + "/mynotes.txt"): "notes\n",
            tfprov.path(ENV + "/samples/keep.txt"): "keep\n",
            os.path.join(sp, "tfprov_alpha", "mine.py"): "x = 1\n"}
    for p, text in mine.items():
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)

    # Not a terminal and no -y: nothing is asked and nothing changes.
    p = tfprov.run("destroy", "py", check=1)
    assert "cannot ask" in p.stderr and "-y" in p.stderr, out(p)
    assert os.path.isfile(alpha) and os.path.isfile(tfprov.path(ENV + "/bin/python"))
    # The plan names what will be kept, before the question.
    for rel in ("/mynotes.txt", "/samples/", "/tfprov_alpha/mine.py"):
        assert any(rel in line and "will keep" in line for line in p.stderr.splitlines()), \
            out(p)

    p = tfprov.run("destroy", "-y", "py", check=0)
    for path, text in mine.items():
        assert open(path).read() == text, f"{path} was not kept"
    assert not os.path.exists(alpha), "a file pip installed for tfprov is still there"
    assert not os.path.lexists(tfprov.path(ENV + "/bin/python"))
    assert not os.path.exists(os.path.join(sp, "tfprov_beta")), "an emptied dir stayed"
    assert "kept " + ENV + "/mynotes.txt" in p.stderr, out(p)
    # What is left is exactly the user's files and the directories holding them.
    left = sorted(os.path.relpath(os.path.join(d, n), tfprov.path(ENV))
                  for d, ds, fs in os.walk(tfprov.path(ENV)) for n in fs)
    assert left == sorted(os.path.relpath(p, tfprov.path(ENV)) for p in mine), left
    assert temp_leftovers(tfprov.root) == []
    assert "No stacks" in tfprov.run("status", check=0).stdout


def test_destroy_cuda_tree_keeps_a_users_header(tfprov, tmp_path, mirror):
    applied_stack(tfprov, tmp_path, mirror)
    prefix = tfprov.path("/opt/tfprov/cuda/12.3.2")
    mine = os.path.join(prefix, "include", "mine.h")
    with open(mine, "w") as f:
        f.write("#define MINE 1\n")
    p = tfprov.run("destroy", "-y", "demo", check=0)
    assert open(mine).read() == "#define MINE 1\n"
    assert sorted(os.listdir(prefix)) == ["include"], os.listdir(prefix)
    assert os.listdir(os.path.join(prefix, "include")) == ["mine.h"]
    assert "kept /opt/tfprov/cuda/12.3.2/include/mine.h" in p.stderr, out(p)


def test_destroy_and_rollback_ask_on_a_terminal(tfprov, tmp_path):
    prof = tfprov.path("/opt/tfprov/stacks/q/activate.sh")
    base = ("schema: 1\nstack:\n  name: q\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
            "versions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\ndriver:\n  policy: skip\n"
            "env:\n  vars:\n    LEVEL: \"{}\"\n")
    m1, m2 = tmp_path / "1.yaml", tmp_path / "2.yaml"
    m1.write_text(base.format(1))
    m2.write_text(base.format(2))
    tfprov.run("apply", "-y", m1, check=0)
    tfprov.run("apply", "-y", m2, check=0)
    # rollback: "no" changes nothing, "yes" goes back.
    rc, text = with_tty(tfprov, ["rollback", "q"], "no")
    assert rc == 1 and "Only 'yes' will be accepted" in text, text
    assert "LEVEL='2'" in open(prof).read() or "LEVEL=2" in open(prof).read()
    rc, text = with_tty(tfprov, ["rollback", "q"], "yes")
    assert rc == 0, text
    assert "2" not in re.findall(r"LEVEL=\W?(\d)", open(prof).read())
    # rollback without a terminal and without -y refuses.
    tfprov.run("rollback", "q", "--generation", "2", check=1)
    # destroy: "y" is not "yes".
    rc, text = with_tty(tfprov, ["destroy", "q"], "y")
    assert rc == 1 and "destroy cancelled" in text and os.path.exists(prof), text
    rc, text = with_tty(tfprov, ["destroy", "q"], "yes")
    assert rc == 0 and not os.path.exists(prof), text


def test_apply_without_a_terminal_refuses_unless_approved(tfprov, tmp_path):
    """Terraform's convention: nobody can answer, so apply needs -y (or
    --auto-approve); --json cannot ask either. A run with nothing to change
    needs no approval."""
    m = tmp_path / "m.yaml"
    m.write_text("schema: 1\nstack:\n  name: a\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
                 "versions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\ndriver:\n  policy: skip\n"
                 "env:\n  vars:\n    X: \"1\"\n")
    p = tfprov.run("apply", m, check=1)
    assert "stdin is not a terminal" in p.stderr and "--auto-approve" in p.stderr
    assert not os.path.exists(tfprov.state_db) or \
        sqlite3.connect(tfprov.state_db).execute("SELECT count(*) FROM stacks").fetchone()[0] == 0
    tfprov.run("--json", "apply", m, check=1)
    tfprov.run("apply", "--auto-approve", m, check=0)
    assert "No changes" in tfprov.run("apply", m, check=0).stdout


# ------------------------------------------------------------ (2) verify --deep on a pip env


def test_deep_verify_clean_pip_env_passes_and_names_the_package(tfprov, index, tmp_path):
    m = py_manifest(tmp_path / "m.yaml", index.url, index.pins)
    tfprov.run("apply", "-y", m, env=no_stub_env(), check=0, timeout=300)
    p = tfprov.run("verify", "--deep", env=no_stub_env(), check=0)
    assert "files: all placed files are intact" in p.stdout, out(p)
    assert re.search(r"warning: [AMUX] /", p.stderr) is None, out(p)
    # status and show count pip's step the same way: the distributions it recorded.
    st = tfprov.run("status", check=0).stdout
    sh = tfprov.run("show", "py", check=0).stdout
    n = re.search(r"pip\s+ok, (\d+) distributions recorded in the env", st)
    assert n and int(n.group(1)) >= 2, st
    assert re.search(r"pip\s+%s distributions recorded in the env, " % n.group(1), sh), sh
    sp = site_packages(tfprov)
    init = os.path.join(sp, "tfprov_alpha", "__init__.py")
    with open(init, "a") as f:
        f.write("# changed\n")
    os.unlink(os.path.join(sp, "tfprov_beta", "__init__.py"))
    p = tfprov.run("verify", "--deep", env=no_stub_env(), check=2)
    assert re.search(r"warning: U \S+/tfprov_alpha/__init__.py .*package tfprov_alpha 1\.0\.0",
                     p.stderr), out(p)
    assert re.search(r"warning: X \S+/tfprov_beta/__init__.py .*package tfprov_beta 2\.1\.0",
                     p.stderr), out(p)
    # A file nobody installed inside a package's directory is an A.
    with open(os.path.join(sp, "tfprov_alpha", "extra.py"), "w") as f:
        f.write("")
    p = tfprov.run("verify", "--deep", env=no_stub_env(), check=2)
    assert re.search(r"warning: A \S+/tfprov_alpha/extra.py", p.stderr), out(p)


def test_counts_read_in_english(tfprov, index, tmp_path):
    """One of a thing is singular: "1 pin", "1 wheel", "1 path differs"."""
    m = py_manifest(tmp_path / "m.yaml", index.url, index.pins[:1])
    p = tfprov.run("apply", "-y", m, env=no_stub_env(), check=0, timeout=300)
    text = out(p)
    assert "pip: 1 pin installed; the env holds" in text, text
    assert re.search(r"pip: 1 wheel installed natively \(\d+ files\)", text), text
    assert "1 pins" not in text and "1 wheels" not in text, text
    init = os.path.join(site_packages(tfprov), "tfprov_alpha", "__init__.py")
    with open(init, "a") as f:
        f.write("# changed\n")
    p = tfprov.run("verify", "--deep", env=no_stub_env(), check=2)
    assert "files: 1 path differs from what was placed" in out(p), out(p)


# ------------------------------------------------------------ (5) options, help, version


def test_version_and_per_command_help(tfprov):
    p = tfprov.run("--version", root=False, check=0)
    v = re.fullmatch(r"tfprov \d+\.\d+\.\d+ \(commit ([0-9a-f]{7,})?(-dirty|unknown)?\)\n",
                     p.stdout)
    assert v, p.stdout
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if v.group(1) and os.path.exists(os.path.join(src, ".git")):
        # The commit the binary was built from, asked of git at build time: one of
        # this repository's commits (an older configure's commit would be stale).
        subprocess.run(["git", "-C", src, "cat-file", "-e", v.group(1) + "^{commit}"],
                       check=True)
    a = tfprov.run("help", "apply", root=False, check=0).stdout
    b = tfprov.run("apply", "--help", root=False, check=0).stdout
    assert a == b and a.startswith("usage: tfprov [options] apply MANIFEST")
    assert "--auto-approve" in a and "--deep" not in a
    assert "--deep" in tfprov.run("help", "verify", root=False, check=0).stdout
    tfprov.run("help", "nosuch", root=False, check=64)


@pytest.mark.parametrize("args", [
    ["apply", "--deep", "m.yaml"],
    ["apply", "--history", "m.yaml"],
    ["apply", "--generation", "3", "m.yaml"],
    ["status", "--deep"],
    ["status", "one", "two"],  # status takes one STACK at most
    ["show"],
    ["verify", "--detailed-exitcode"],
    ["bogus"],
    ["apply", "--no-such-option", "m.yaml"],
])
def test_usage_errors_are_short(tfprov, args):
    p = tfprov.run(*args, check=64)
    lines = p.stderr.strip().splitlines()
    assert len(lines) <= 3 and lines[-1].startswith("usage: tfprov"), p.stderr


@pytest.mark.parametrize("typed,meant", [("aply", "apply"), ("stauts", "status"),
                                         ("help rollbak", "rollback"), ("bogus", None)])
def test_mistyped_command_gets_did_you_mean(tfprov, typed, meant):
    """As a mistyped manifest key does: the nearest command, or nothing when none is near."""
    p = tfprov.run(*typed.split(), check=64)
    word = typed.split()[-1]
    if meant:
        assert "unknown command '%s' (did you mean '%s'?)" % (word, meant) in p.stderr, p.stderr
    else:
        assert "unknown command '%s'\n" % word in p.stderr, p.stderr


def test_plan_saved_plan_is_refused(tfprov, tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text("schema: 1\nstack:\n  name: a\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
                 "versions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\ndriver:\n  policy: skip\n")
    p = tfprov.run("plan", "-o", tmp_path / "saved.plan", m, check=64)
    assert "--output is not an option of this command" in p.stderr, p.stderr
    assert not (tmp_path / "saved.plan").exists()
    # and `help plan` does not advertise it
    h = tfprov.run("help", "plan", root=False, check=0).stdout
    assert "-o" not in h.split("global options:")[0], h


def test_read_only_command_does_not_create_a_mistyped_root(tmp_path):
    from conftest import Tfprov
    t = Tfprov(tmp_path / "typo")
    for cmd in (["status"], ["show", "x"], ["verify"]):
        # a refusal at run time (exit 1), not a usage error (64)
        p = t.run(*cmd, check=1)
        assert "is not a directory" in p.stderr
    assert not (tmp_path / "typo").exists()


# ------------------------------------------------------------ (6) one meaning per exit code

ENV_ONLY = ("schema: 1\nstack:\n  name: {name}\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
            "versions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\ndriver:\n  policy: {policy}\n"
            "env:\n  vars:\n    X: \"1\"\n")


def test_plan_fails_as_apply_would(tfprov, tmp_path):
    """driver.policy: require on this machine (no driver reachable): apply stops with 6
    before any change, so plan says 6 too, with or without --detailed-exitcode."""
    m = tmp_path / "req.yaml"
    m.write_text(ENV_ONLY.format(name="req", policy="require"))
    env = no_stub_env(TFPROV_PROC_DRIVER_NVIDIA="/nonexistent/proc/driver/nvidia")
    tfprov.run("apply", "-y", m, env=env, check=6)
    p = tfprov.run("plan", "--detailed-exitcode", m, env=env, check=6)
    assert "apply would stop" in out(p)
    tfprov.run("plan", m, env=env, check=6)


def test_status_after_a_failed_apply_is_not_ok(tfprov, tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text(ENV_ONLY.format(name="f", policy="skip"))
    # A file where the stacks' script directory must be: the env step fails after
    # the generation was opened.
    os.makedirs(tfprov.path("/opt/tfprov"))
    with open(tfprov.path("/opt/tfprov/stacks"), "w") as f:
        f.write("not a directory\n")
    p = tfprov.run("apply", "-y", m)
    assert p.returncode not in (0, 2), out(p)
    p = tfprov.run("status", check=2)
    assert f"the last apply (generation 1, of {m}) failed" in out(p), out(p)
    # The hint names the manifest whose run did not finish: applying another one
    # (the stack's current manifest) would be a no-op that does not finish it.
    assert f"`tfprov apply {m}` finishes it" in out(p), out(p)
    os.unlink(tfprov.path("/opt/tfprov/stacks"))
    tfprov.run("apply", "-y", m, check=0)
    tfprov.run("status", check=0)


def test_destroy_of_a_failed_stack_says_what_it_removes(tfprov, tmp_path):
    """A stack whose only apply failed before a step committed has nothing placed:
    destroy says so and removes its record, never "No changes. The stack matches"."""
    m = tmp_path / "m.yaml"
    m.write_text(ENV_ONLY.format(name="f", policy="skip"))
    os.makedirs(tfprov.path("/opt/tfprov"))
    with open(tfprov.path("/opt/tfprov/stacks"), "w") as f:
        f.write("not a directory\n")
    p = tfprov.run("apply", "-y", m)
    assert p.returncode not in (0, 2), out(p)
    p = tfprov.run("destroy", "-y", "f", check=0)
    assert "No changes" not in out(p) and "matches the manifest" not in out(p), out(p)
    assert "Stack f has nothing placed" in p.stdout, out(p)
    p = tfprov.run("status", check=0)
    assert "No stacks" in p.stdout, out(p)


def test_status_on_a_broken_state_is_an_error(tfprov, tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text(ENV_ONLY.format(name="b", policy="skip"))
    tfprov.run("apply", "-y", m, check=0)
    db = sqlite3.connect(tfprov.state_db)
    db.execute("ALTER TABLE generations RENAME TO generations_gone")
    db.commit()
    db.close()
    for cmd in (["status"], ["show", "b"]):
        p = tfprov.run(*cmd, check=1)
        assert "No stacks" not in p.stdout
        assert "no such table: generations" in p.stderr, out(p)


def test_status_and_show_agree_and_status_shows_versions(tfprov, tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text(ENV_ONLY.format(name="v", policy="skip"))
    tfprov.run("apply", "-y", m, check=0)
    st = tfprov.run("status", check=0).stdout
    sh = tfprov.run("show", "v", check=0).stdout
    assert "TensorFlow 2.15.1" in st and "Python 3.10" in st, st
    n_status = re.search(r"env\s+ok, (\d+) paths", st).group(1)
    n_show = re.search(r"env\s+(\d+) paths", sh).group(1)
    assert n_status == n_show
    applied = re.search(r"applied (\S+?),", st).group(1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", applied)
    assert f"finished {applied}" in sh, (st, sh)


# ------------------------------------------------------------ (3) progress and --json

RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"


def test_progress_off_a_terminal_one_line_per_item(tfprov, tmp_path, mirror):
    from lib_stack import make_stack, real_no_gpu_env
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    p = tfprov.run("--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), check=0, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if re.match(RFC3339 + " (fetch|unpack) ", ln)]
    assert lines, p.stderr
    started = [ln for ln in lines if ln.endswith(")") and ": started (" in ln]
    done = [ln for ln in lines if ": done, " in ln]
    for kind in ("fetch", "unpack"):
        names = [re.match(RFC3339 + f" {kind} (.+?): started", ln) for ln in started]
        names = [n.group(2) for n in names if n]
        ends = [re.match(RFC3339 + f" {kind} (.+?): done", ln) for ln in done]
        ends = [n.group(2) for n in ends if n]
        # Every item: a start line and an end line (an unpack that overlapped the
        # download and was redone from the verified file counts twice).
        assert names and sorted(ends) == sorted(names), (kind, lines)
    assert not any(re.search(r"[0-9a-f]{64}", ln) for ln in lines), lines
    assert any("cuda_cudart" in ln for ln in lines), lines
    # An artifact without a name is named by its file, never by a whole URL.
    assert not any("://" in ln for ln in lines), lines


def test_progress_off_a_terminal_has_a_heartbeat(tfprov, tmp_path, mirror):
    """A slow mirror (downloads take seconds): off a terminal, an item still
    running gets a timestamped line with its name, bytes and percentage every 5 s
    between its start and end lines, never a line per progress event."""
    from lib_stack import make_stack, real_no_gpu_env
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    mirror.default_rate = 1500  # bytes per second per download
    p = tfprov.run("--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), check=0, timeout=300)
    beats = [ln for ln in p.stderr.splitlines()
             if re.match(RFC3339 + r" fetch \S+: [\d.]+ [kMG]B of [\d.]+ [kMG]B \(\d+%\)$", ln)]
    assert beats, p.stderr
    per_item = {}
    for ln in beats:
        per_item.setdefault(ln.split()[2], []).append(ln)
    # At most one heartbeat per item every 5 s: a download of a few seconds has few.
    assert all(len(v) <= 60 for v in per_item.values()), per_item
    assert not any(re.search(r"[0-9a-f]{64}", ln) for ln in beats), beats


def test_json_events_are_versioned_and_structured(tfprov, tmp_path, mirror):
    import json
    from lib_stack import make_stack, real_no_gpu_env
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    p = tfprov.run("--json", "--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), check=0,
                   timeout=300)
    ev = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert ev[0]["type"] == "version" and ev[0]["data"]["ui"] == "1.6"
    assert all(re.fullmatch(RFC3339, e["@timestamp"]) for e in ev)
    prog = [e for e in ev if e["type"] == "progress"]
    assert {e["step"] for e in prog} >= {"fetch", "unpack"}
    assert all(e["done"] <= e["total"] for e in prog if e["total"]), \
        [e for e in prog if e["done"] > e["total"]]
    st = [json.loads(ln) for ln in tfprov.run("--json", "status", check=0).stdout.splitlines()]
    data = [e["data"] for e in st if e["type"] == "stack_status"]
    assert data and data[0]["name"] == "demo" and data[0]["versions"]["cuda"] == "12.3.2"
    assert {r["step"] for r in data[0]["resources"]} >= {"cuda", "cudnn", "env"}
    sh = [json.loads(ln) for ln in tfprov.run("--json", "show", "demo", check=0).stdout.splitlines()]
    assert [e for e in sh if e["type"] == "stack_show"][0]["data"]["generations"][0]["result"] == "ok"
    bad = tmp_path / "bad.yaml"
    bad.write_text("bogus_key: 1\n" + open(m).read())
    v = [json.loads(ln) for ln in tfprov.run("--json", "validate", bad, check=3).stdout.splitlines()]
    diags = [e["data"] for e in v if e["type"] == "diagnostic"]
    assert diags and set(diags[0]) >= {"file", "line", "col", "severity", "code", "message",
                                       "hint"}, diags
    assert any(d["severity"] == "error" and d["line"] == 1 and d["col"] == 1 and
               d["code"] == "schema.unknown-key" for d in diags), diags


def test_board_in_an_80_column_terminal(tfprov, tmp_path, mirror):
    """The progress board in a real terminal (tmux, 80x24): the bars advance, no
    line wraps, and when the run ends nothing of the board is left on screen or
    in the scrollback. The mirror is throttled so that downloads take seconds."""
    import shlex
    import shutil
    import time
    from lib_stack import make_stack, real_no_gpu_env
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed (scripts/install-deps.sh installs it)"
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    mirror.default_rate = 1500  # bytes per second per download
    env = real_no_gpu_env()
    script = tmp_path / "run.sh"
    script.write_text("".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in env.items()) +
                      f"unset NO_COLOR\n{shlex.quote(tfprov.bin)} --root {shlex.quote(tfprov.root)}"
                      f" --no-gpu apply -y {shlex.quote(m)}\necho EXIT=$?\nsleep 120\n")
    sock = f"tfprov-test-{os.getpid()}"
    base = [tmux, "-L", sock, "-f", "/dev/null"]
    subprocess.run(base + ["new-session", "-d", "-x", "80", "-y", "24", "-s", "t", "sh",
                           str(script)], check=True)
    frames = []
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 240:
            frames.append(subprocess.run(base + ["capture-pane", "-p", "-J", "-t", "t"],
                                         capture_output=True, text=True).stdout)
            if "EXIT=" in frames[-1]:
                break
            time.sleep(0.15)
        final = subprocess.run(base + ["capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t",
                                       "t"], capture_output=True, text=True).stdout
    finally:
        subprocess.run(base + ["kill-server"], capture_output=True)
    assert "EXIT=0" in final, final
    bar = re.compile(r"^\s+(fetch|unpack)\s+(\S+)\s+\[([#.]+)\]\s+(\d+)%")
    seen = {}
    for f in frames:
        for ln in f.splitlines():
            b = bar.match(ln)
            if b:
                seen.setdefault((b.group(1), b.group(2)), set()).add(int(b.group(4)))
    assert seen, "no progress bar was ever drawn:\n" + "\n---\n".join(frames[-3:])
    advanced = [k for k, v in seen.items() if len(v) >= 2 and any(0 < p < 100 for p in v)]
    assert advanced, f"no bar advanced: {seen}"
    # -J joins wrapped lines: a board line longer than the terminal has wrapped.
    board = [ln for f in frames for ln in f.splitlines() if bar.match(ln) or "ETA" in ln]
    assert board and max(len(ln) for ln in board) < 80, board
    stale = [ln for ln in final.splitlines() if bar.match(ln) or "ETA" in ln]
    assert stale == [], "board lines left behind:\n" + "\n".join(stale)
    assert "Apply complete" in final


# ------------------------------------------------------------ (7) the smaller items


def test_every_download_is_verified_before_the_first_change(tfprov, tmp_path, mirror):
    """cuDNN's archive on the mirror has wrong bytes (same size): apply stops with 5
    before the cuda step placed anything; nothing of the stack is on disk or in state.
    It also shows the manifest's lint warnings, as plan does."""
    from lib_stack import make_stack, real_no_gpu_env
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    arch = [os.path.join(d, f) for d, _, fs in os.walk(mirror.root) for f in fs
            if f.startswith("cudnn-") and f.endswith(".tar.xz")][0]
    data = bytearray(open(arch, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(arch, "wb").write(bytes(data))
    p = tfprov.run("--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), check=5, timeout=300)
    assert "compat.cuda-untested" in p.stderr, out(p)  # the lint warning, as in plan
    assert "nothing was changed" in p.stderr, out(p)
    assert not os.path.exists(tfprov.path("/opt/tfprov/cuda")), "cuda was placed first"
    assert not os.path.exists(tfprov.state_db) or sqlite3.connect(tfprov.state_db).execute(
        "SELECT count(*) FROM generations").fetchone()[0] == 0


def test_offline_names_every_missing_artifact_once(tfprov, tmp_path, mirror):
    from lib_stack import make_stack, real_no_gpu_env
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    p = tfprov.run("--offline", "--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), check=1)
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, p.stderr
    assert "9 artifacts are not in the cache" in errors[0], errors
    for name in ("cuda_cudart", "libcublas", "cuda_nvcc"):
        assert name in errors[0]
    # The decoders that followed the downloads say nothing more without -v.
    assert "decoding stopped" not in p.stdout + p.stderr, p.stdout
    assert mirror.requests == []
    assert not os.path.exists(tfprov.path("/opt/tfprov"))


def test_lock_without_a_root_uses_the_users_cache(tmp_path):
    """`lock` has no state: without --root it must not create /var/cache/tfprov on
    the host (which needs root); the redistrib JSONs land in the user's cache."""
    from conftest import Tfprov
    from lib_gpu import STUBS
    make = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "fixtures", "make_stack.py")
    system_cache_existed = os.path.exists("/var/cache/tfprov")
    home = tmp_path / "home"
    home.mkdir()
    with HttpServer(root=str(tmp_path / "mirror")) as srv:
        (tmp_path / "mirror").mkdir(exist_ok=True)
        subprocess.run(["/usr/bin/python3", make, "--stubs", os.path.join(STUBS, "cuda12"),
                        "--cuda", "12.3.2", "--cudnn", "8.9.7.29", "--out",
                        str(tmp_path / "mirror"), "--url-base", srv.url(""), "--manifest",
                        str(tmp_path / "m.yaml"), "--form", "redist", "--driver-policy",
                        "skip"], check=True, capture_output=True, timeout=120)
        t = Tfprov(tmp_path / "unused")
        p = t.run("lock", tmp_path / "m.yaml", "-o", tmp_path / "locked.yaml", root=False,
                  env={"HOME": str(home), "XDG_CACHE_HOME": ""}, check=0)
    assert "redist:" not in (tmp_path / "locked.yaml").read_text(), out(p)
    cached = os.listdir(home / ".cache" / "tfprov" / "sha256")
    assert len(cached) == 2, cached  # the CUDA and the cuDNN redistrib JSONs
    if not system_cache_existed:
        assert not os.path.exists("/var/cache/tfprov")


def test_replacing_a_tree_with_a_users_file_in_it_refuses(tfprov, tmp_path, mirror):
    """An update that replaces the CUDA tree (a component dropped), then a rollback
    to it: a file tfprov did not place inside the tree is named and kept, and the
    step stops before it changes anything."""
    from lib_stack import make_stack, real_no_gpu_env
    m1 = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    text = open(m1).read()
    nvcc = re.search(r"    - name: cuda_nvcc\n(      .*\n)+", text).group(0)
    m2 = tmp_path / "less.yaml"
    m2.write_text(text.replace(nvcc, ""))
    env = real_no_gpu_env()
    tfprov.run("--no-gpu", "apply", "-y", m1, env=env, check=0, timeout=300)
    mine = tfprov.path("/opt/tfprov/cuda/12.3.2/include/mine.h")
    with open(mine, "w") as f:
        f.write("#define MINE 1\n")
    p = tfprov.run("--no-gpu", "apply", "-y", m2, env=env, check=1, timeout=300)
    assert "/opt/tfprov/cuda/12.3.2/include/mine.h" in p.stdout + p.stderr, out(p)
    assert open(mine).read() == "#define MINE 1\n"
    assert os.path.exists(tfprov.path("/opt/tfprov/cuda/12.3.2/bin/nvcc")) or \
        os.path.exists(tfprov.path("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))
    os.rename(mine, tmp_path / "mine.h")
    tfprov.run("--no-gpu", "apply", "-y", m2, env=env, check=0, timeout=300)
    os.rename(tmp_path / "mine.h", mine)
    p = tfprov.run("--no-gpu", "rollback", "-y", "demo", env=env, check=1, timeout=300)
    assert "include/mine.h" in out(p) and open(mine).read() == "#define MINE 1\n"


def test_deep_verify_conda_env_names_the_conda_package(tfprov, tmp_path):
    """A native conda env (real-format packages built by lib_conda, served on
    loopback): --deep passes on the clean env; a changed file of the "hello"
    package is reported with that package's name from conda-meta."""
    import lib_conda
    pkgdir = tmp_path / "pkgs"
    pkgs, pyver = lib_conda.demo_packages(str(pkgdir), str(tmp_path))
    with HttpServer(root=str(pkgdir)) as srv:
        lock = "".join(f"    {srv.url('/' + os.path.basename(p))}#sha256:{sha}\n"
                       for p, sha, _, _ in pkgs)
        m = tmp_path / "conda.yaml"
        m.write_text(
            "schema: 1\nstack:\n  name: c\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
            f"versions:\n  tensorflow: 2.15.1\n  python: \"{pyver}\"\n"
            "driver:\n  policy: skip\n"
            f"python:\n  manager: conda\n  name: tf\n  version: \"{pyver}\"\n"
            f"  lock: |\n    # platform: linux-64\n    @EXPLICIT\n{lock}")
        tfprov.run("apply", "-y", m, env=no_stub_env(), check=0, timeout=300)
    tfprov.run("verify", "--deep", env=no_stub_env(), check=0)
    data = tfprov.path(ENV + "/share/hello/data.txt")
    with open(data, "a") as f:
        f.write("changed\n")
    p = tfprov.run("verify", "--deep", env=no_stub_env(), check=2)
    assert re.search(r"warning: U \S+/share/hello/data.txt .*package hello 1\.0", p.stderr), \
        out(p)

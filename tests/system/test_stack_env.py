"""Several stacks on one machine, each one command away: `tfprov run`, `tfprov env`,
`tfprov shell`, `tfprov default`, the login script and the venv hook, through the
real binary.

What the machine looks like: one --root holding two stacks of different CUDA majors
(A: CUDA 11.8 + cuDNN 8.6, B: CUDA 12.3 + cuDNN 8.9), each with a real venv of the
system's Python 3.11, and a small env-only stack for the in-use test.
STAND-INS, said plainly: the CUDA/cuDNN archives hold stub libraries with NVIDIA's
sonames (tests/fixtures/make_stack.py, build/stubs/cuda11 and cuda12); no GPU, so
applies run with --no-gpu. The loader, HTTP on loopback, SQLite and venv are real.
Scripts written for the inside of the root (the login script, activate.sh, the
venv's bin/activate) are run in a private mount namespace where the root's
/opt/tfprov is bind-mounted at /opt/tfprov (unshare -m; nothing on the host changes).
What must hold: each consumer gets exactly its own stack's environment; leaving a
stack restores what was there before, variable by variable; `run` exits with the
command's status; a stack in use is not destroyed under the command.
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import Tfprov  # noqa: E402
from lib_provision import Mirror, dlprobe, no_stub_env, out  # noqa: E402

PY = "3.11"
VENV = f"python:\n  manager: venv\n  name: {{env}}\n  version: \"{PY}\"\n" \
       f"  interpreter: /usr/bin/python{PY}\n"
DEMO = """schema: 1
stack:
  name: small
  platform: linux-x86_64
prefix: /opt/tfprov
versions:
  tensorflow: 2.15.1
  python: "3.10"
driver:
  policy: skip
"""
ENV = no_stub_env()


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    d = tmp_path_factory.mktemp("stackenv")
    root = d / "root"
    root.mkdir()
    t = Tfprov(root)
    with Mirror(d / "www") as m:
        a = m.stack(d / "a.yaml", name="a", stubs="cuda11", cuda="11.8.0", cudnn="8.6.0.163",
                    cudnn_variant="cuda11", tensorflow="2.12.0", python=PY,
                    extra_yaml=VENV.format(env="tfa"))
        b = m.stack(d / "b.yaml", name="b", stubs="cuda12", cuda="12.3.2", cudnn="8.9.7.29",
                    cudnn_variant="cuda12", python=PY, extra_yaml=VENV.format(env="tfb"))
        for mf in (a, b):
            p = t.run("--no-gpu", "apply", "-y", mf, env=ENV, timeout=300)
            assert p.returncode == 0, out(p)
    small = d / "small.yaml"
    small.write_text(DEMO)
    t.a, t.b, t.small, t.probe = a, b, str(small), dlprobe(d)
    t.dir = d
    return t


def clean_env(**extra):
    """A user's environment with earlier values of what a stack sets."""
    e = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
         "LANG": "C.UTF-8", "LD_LIBRARY_PATH": "/usr/local/mine/lib",
         "CUDA_HOME": "/usr/local/cuda-old", "TFPROV_BIN": os.environ.get("TFPROV_BIN", "")}
    e.update(extra)
    return e


def shell_env(script, shell="bash", env=None):
    """Runs script in shell and returns the environment it ends with, as a dict."""
    p = subprocess.run([shell, "-c", script + "\nenv -0"], capture_output=True, env=env,
                       timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    pairs = [x.split("=", 1) for x in p.stdout.decode().split("\0") if "=" in x]
    d = dict(pairs)
    for k in ("_", "SHLVL", "PWD", "OLDPWD"):
        d.pop(k, None)
    return d


def tf(machine):
    return f"{machine.bin} --root {machine.root}"


def in_root_namespace(machine, script, env=None):
    """Runs a POSIX sh script with the root's /opt/tfprov at /opt/tfprov, in a private
    mount namespace (a tmpfs over /opt there, so the host's /opt is untouched)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    setup = (f"mount -t tmpfs none /opt && mkdir /opt/tfprov && "
             f"mount --bind '{machine.path('/opt/tfprov')}' /opt/tfprov && ")
    p = subprocess.run(["unshare", "-m", "sh", "-c", setup + script], capture_output=True,
                       env=env if env is not None else clean_env(), timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def env_of_output(text):
    d = dict(x.split("=", 1) for x in text.split("\0") if "=" in x)
    for k in ("_", "SHLVL", "PWD", "OLDPWD"):
        d.pop(k, None)
    return d


# ------------------------------------------------------------------ run


def test_run_loads_only_its_own_stacks_libraries(machine):
    """dlopen of libcudnn.so.8 and libcudart through `tfprov run A` and `tfprov run B`:
    each finds only its own stack's copy, even from a shell that entered the other
    stack first (its LD_LIBRARY_PATH entries are removed, not just shadowed)."""
    r = machine.path
    a_cuda, b_cuda = r("/opt/tfprov/cuda/11.8.0"), r("/opt/tfprov/cuda/12.3.2")
    for stack, mine, other, cudart in (("a", a_cuda, b_cuda, "libcudart.so.11.0"),
                                       ("b", b_cuda, a_cuda, "libcudart.so.12")):
        first = "b" if stack == "a" else "a"
        script = (f'eval "$({tf(machine)} env {first})" && '
                  f'exec {tf(machine)} run {stack} -- {machine.probe} libcudnn.so.8 {cudart}')
        p = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                           env=clean_env(), timeout=60)
        assert p.returncode == 0, p.stderr
        found = dict(line.split(" ", 1) for line in p.stdout.splitlines())
        assert found["libcudnn.so.8"].startswith(mine + "/"), (stack, found)
        assert found[cudart].startswith(mine + "/"), (stack, found)
        assert other not in p.stdout
        # The env's own interpreter comes first on PATH; the other stack's is gone.
        q = subprocess.run(["bash", "-c", f'eval "$({tf(machine)} env {first})" && exec '
                            f'{tf(machine)} run {stack} -- sh -c '
                            '\'command -v python; echo "$LD_LIBRARY_PATH|$TFPROV_STACK"\''],
                           capture_output=True, text=True, env=clean_env(), timeout=60)
        assert q.returncode == 0, q.stderr
        python, ld = q.stdout.splitlines()
        assert python == r(f"/opt/tfprov/envs/tf{stack}/bin/python")
        dirs, marker = ld.split("|")
        assert marker == stack
        assert dirs.split(":")[0] == mine + "/lib64"
        assert other not in dirs and dirs.endswith(":/usr/local/mine/lib")


def test_run_exit_status_is_the_commands(machine, tmp_path):
    """3 -> 3; killed by SIGTERM -> 143 as a shell reports it; not found -> 127; a file
    that is not executable -> 126. run replaces itself (the pid is the command's)."""
    t = machine
    assert t.run("run", "a", "--", "sh", "-c", "exit 3", env=ENV).returncode == 3
    p = subprocess.run(["bash", "-c", f"{tf(t)} run a -- sh -c 'kill -TERM $$'; echo $?"],
                       capture_output=True, text=True, env=clean_env(), timeout=60)
    assert p.stdout.strip() == "143", p.stderr
    p = t.run("run", "a", "--", "no-such-command-xyz", env=ENV)
    assert p.returncode == 127 and "no-such-command-xyz: command not found" in p.stderr
    f = tmp_path / "plain"
    f.write_text("echo hi\n")
    f.chmod(0o644)
    p = t.run("run", "a", "--", str(f), env=ENV)
    assert p.returncode == 126, out(p)
    # No process in between: the command's parent is the caller.
    p = subprocess.run(["bash", "-c", f"{tf(t)} run a -- sh -c 'echo $PPID'; echo $$"],
                       capture_output=True, text=True, env=clean_env(), timeout=60)
    child_ppid, shell_pid = p.stdout.split()
    assert child_ppid == shell_pid
    # Options after `--` are the command's, not tfprov's.
    p = t.run("run", "a", "--", "python", "-c", "import sys; print(sys.prefix)", env=ENV)
    assert p.returncode == 0 and p.stdout.strip() == t.path("/opt/tfprov/envs/tfa"), out(p)


def test_run_and_env_bad_input(machine):
    """Unknown stack, no command, several stacks and none named, an unsupported shell,
    default of an unknown stack: one clear line, the right code, nothing changed."""
    t = machine
    before = t.run("default", env=ENV, check=0).stdout
    p = t.run("run", "nope", "--", "true", env=ENV)
    assert p.returncode == 125 and "no stack named 'nope'" in p.stderr and "a, b" in p.stderr
    p = t.run("run", "a", env=ENV)
    assert p.returncode == 125 and "no command given" in p.stderr
    p = t.run("run", "--", "true", env=ENV)
    assert p.returncode == 125 and "several stacks: name one" in p.stderr
    p = t.run("run", "a", "b", "--", "true", env=ENV)
    assert p.returncode == 125 and "one STACK before `--`" in p.stderr
    p = t.run("env", "a", "--shell", "csh", env=ENV)
    assert p.returncode == 64 and "--shell csh is not supported" in p.stderr
    assert p.stdout == ""
    p = t.run("default", "nope", env=ENV)
    assert p.returncode == 1 and "no stack named 'nope'" in p.stderr
    assert t.run("default", env=ENV, check=0).stdout == before


def test_status_of_one_stack(machine):
    """`status a` checks stack a alone: a changed file of b does not reach it, while
    `status` (every stack) and `status b` report it (exit 2); an unknown name is exit 1."""
    t = machine
    heads = sorted(glob.glob(os.path.join(str(t.root), "opt/tfprov/cuda/12.3*/include/*.h")))
    assert heads, "stack b's CUDA headers"
    hdr = heads[0]
    st = os.stat(hdr)
    data = open(hdr, "rb").read()
    try:
        with open(hdr, "ab") as f:
            f.write(b"/* changed by hand */\n")
        p = t.run("status", "a", env=ENV)
        assert p.returncode == 0, out(p)
        assert "stack a:" in out(p) and "stack b:" not in out(p)
        p = t.run("status", "b", env=ENV)
        assert p.returncode == 2 and "stack b:" in out(p) and "stack a:" not in out(p), out(p)
        p = t.run("status", env=ENV)
        assert p.returncode == 2 and "stack a:" in out(p) and "stack b:" in out(p), out(p)
    finally:
        with open(hdr, "wb") as f:
            f.write(data)
        os.utime(hdr, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert t.run("status", env=ENV).returncode == 0
    p = t.run("status", "nope", env=ENV)
    assert p.returncode == 1 and "no stack named 'nope'" in p.stderr


# ------------------------------------------------------------------ env


def test_env_enter_switch_unset_restores_variable_by_variable(machine):
    """eval "$(tfprov env a)", then b, then --unset: b replaced a completely, and
    leaving returns to the environment before a, variable by variable (earlier
    CUDA_HOME and LD_LIBRARY_PATH values restored, unset ones unset again)."""
    t = machine
    for shell in ("bash", "zsh", "dash"):
        if shutil.which(shell) is None:
            continue
        sh = "sh" if shell == "dash" else shell
        before = shell_env(":", shell, clean_env())
        in_a = shell_env(f'eval "$({tf(t)} env a --shell {sh})"', shell, clean_env())
        in_b = shell_env(f'eval "$({tf(t)} env a --shell {sh})"; '
                         f'eval "$({tf(t)} env b --shell {sh})"', shell, clean_env())
        left = shell_env(f'eval "$({tf(t)} env a --shell {sh})"; '
                         f'eval "$({tf(t)} env b --shell {sh})"; '
                         f'eval "$({tf(t)} env --unset --shell {sh})"', shell, clean_env())
        assert in_a["TFPROV_STACK"] == "a" and in_b["TFPROV_STACK"] == "b"
        assert in_a["CUDA_HOME"] == t.path("/opt/tfprov/cuda/11.8.0")
        assert in_b["CUDA_HOME"] == t.path("/opt/tfprov/cuda/12.3.2")
        assert "11.8.0" not in in_b["LD_LIBRARY_PATH"] and "tfa" not in in_b["PATH"]
        assert in_b["VIRTUAL_ENV"] == t.path("/opt/tfprov/envs/tfb")
        assert left == before, (shell, set(left.items()) ^ set(before.items()))


def test_env_twice_does_not_pile_up_and_fish_pwsh_json(machine):
    """Entering the same stack twice gives the same environment; fish gets the same
    values; pwsh and --json say the same changes."""
    t = machine
    once = shell_env(f'eval "$({tf(t)} env a)"', "bash", clean_env())
    twice = shell_env(f'eval "$({tf(t)} env a)"; eval "$({tf(t)} env a)"', "bash", clean_env())
    assert once == twice
    if shutil.which("fish"):
        p = subprocess.run(["fish", "-c", f"{tf(t)} env a --shell fish | source; env -0"],
                           capture_output=True, env=clean_env(), timeout=60)
        assert p.returncode == 0, p.stderr
        fish = env_of_output(p.stdout.decode())
        for k in ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "XLA_FLAGS", "VIRTUAL_ENV",
                  "TFPROV_STACK", "_TFPROV_ADD_PATH"):
            assert fish[k] == once[k], k
    p = t.run("env", "a", "--shell", "pwsh", env=clean_env())
    assert f"$env:CUDA_HOME = '{once['CUDA_HOME']}'" in p.stdout
    import json
    p = t.run("--json", "env", "a", env=clean_env(), check=0)
    ev = [json.loads(x) for x in p.stdout.splitlines()]
    data = [e["data"] for e in ev if e.get("type") == "stack_env"][0]
    assert data["stack"] == "a" and data["set"]["CUDA_HOME"] == once["CUDA_HOME"]


def test_activate_script_and_tfprov_env_agree(machine):
    """The stack's activate.sh (what the login script and venv hook source) gives
    what `tfprov env` gives, paths seen from inside the root; deactivate.sh restores
    the environment before, and sourcing b's activate.sh from a replaces a."""
    t = machine
    host = shell_env(f'eval "$({tf(t)} env a --shell sh)"', "dash", clean_env())
    inside = env_of_output(in_root_namespace(
        t, ". /opt/tfprov/stacks/a/activate.sh && env -0"))
    root = t.root
    norm = {k: v.replace(root, "") for k, v in host.items()}
    for k in ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "XLA_FLAGS", "VIRTUAL_ENV",
              "TFPROV_STACK", "_TFPROV_ADD_PATH", "_TFPROV_OLD_CUDA_HOME",
              "TF_FORCE_GPU_ALLOW_GROWTH"):
        assert inside[k] == norm[k], k
    before = env_of_output(in_root_namespace(t, "env -0"))
    after = env_of_output(in_root_namespace(
        t, ". /opt/tfprov/stacks/a/activate.sh && . /opt/tfprov/stacks/b/activate.sh && "
        "[ \"$TFPROV_STACK\" = b ] && case $LD_LIBRARY_PATH in *11.8.0*) exit 9;; esac && "
        ". /opt/tfprov/stacks/b/deactivate.sh && env -0"))
    assert after == before, set(after.items()) ^ set(before.items())


def test_venv_activate_enters_and_deactivate_leaves(machine):
    """The venv's own bin/activate enters the stack (CUDA_HOME, the marker) and its
    deactivate leaves it completely; activating twice does not append again."""
    t = machine
    before = env_of_output(in_root_namespace(t, "env -0"))
    twice = env_of_output(in_root_namespace(
        t, ". /opt/tfprov/envs/tfb/bin/activate && . /opt/tfprov/envs/tfb/bin/activate && "
        "env -0"))
    once = env_of_output(in_root_namespace(t, ". /opt/tfprov/envs/tfb/bin/activate && env -0"))
    assert once["TFPROV_STACK"] == "b" and once["CUDA_HOME"] == "/opt/tfprov/cuda/12.3.2"
    assert twice["LD_LIBRARY_PATH"] == once["LD_LIBRARY_PATH"]
    left = env_of_output(in_root_namespace(
        t, ". /opt/tfprov/envs/tfb/bin/activate && deactivate && env -0"))
    # PS1: the venv's own prompt handling exports one a non-interactive sh had not.
    left.pop("PS1", None)
    assert left == before, set(left.items()) ^ set(before.items())


# ------------------------------------------------------------------ default, login


def login_env(t):
    """A login shell's view: every script of the root's /etc/profile.d sourced."""
    pd = t.path("/etc/profile.d")
    return env_of_output(in_root_namespace(
        t, f"for f in '{pd}'/*.sh; do if [ -r \"$f\" ]; then . \"$f\"; fi; done; env -0",
        env={"PATH": "/usr/bin:/bin", "HOME": "/root"}))


def test_login_shells_get_only_the_default_stack(machine):
    """The first stack applied became the default; a login shell gets exactly it (one
    tfprov script in profile.d); `tfprov default b` switches it atomically; --none
    leaves login shells without a stack; status says which."""
    t = machine
    assert [f for f in os.listdir(t.path("/etc/profile.d")) if "tfprov" in f] == ["tfprov.sh"]
    assert t.run("default", env=ENV, check=0).stdout.strip() == "a"
    e = login_env(t)
    assert e["TFPROV_STACK"] == "a" and e["LD_LIBRARY_PATH"].split(":") == [
        "/opt/tfprov/cuda/11.8.0/lib64"]
    assert e["PATH"].split(":")[:2] == ["/opt/tfprov/envs/tfa/bin", "/opt/tfprov/cuda/11.8.0/bin"]
    try:
        p = t.run("default", "b", env=ENV, check=0)
        assert "Login shells now enter stack b (it was a)" in p.stdout
        e = login_env(t)
        assert e["TFPROV_STACK"] == "b" and "11.8.0" not in e["LD_LIBRARY_PATH"]
        assert "Default stack (login shells): b" in t.run("status", env=ENV).stdout
        t.run("default", "--none", env=ENV, check=0)
        assert not os.path.exists(t.path("/etc/profile.d/tfprov.sh"))
        assert "TFPROV_STACK" not in login_env(t)
        # A later apply does not take the default back once it was chosen (none).
        p = t.run("--no-gpu", "apply", "-y", t.b, env=ENV, check=0)
        assert not os.path.exists(t.path("/etc/profile.d/tfprov.sh"))
        p = t.run("--no-gpu", "apply", "-y", "--default", t.b, env=ENV, check=0)
        assert "Login shells now enter stack b" in p.stdout
        assert login_env(t)["TFPROV_STACK"] == "b"
    finally:
        t.run("default", "a", env=ENV, check=0)


# ------------------------------------------------------------------ in use


def test_destroy_of_a_stack_in_use_exits_4_naming_the_pid(machine):
    """`tfprov run small -- sleep` holds the stack: destroy exits 4 naming the pid and
    changes nothing; with --lock-timeout it waits for the command to end, then goes."""
    t = machine
    t.run("apply", "-y", t.small, env=ENV, check=0)
    act = t.path("/opt/tfprov/stacks/small/activate.sh")
    proc = subprocess.Popen([t.bin, "--root", t.root, "run", "small", "--", "sleep", "60"],
                            env=clean_env())
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            with open(f"/proc/{proc.pid}/comm") as f:
                if f.read().strip() == "sleep":
                    break
            time.sleep(0.05)
        p = t.run("destroy", "small", "-y", env=ENV)
        assert p.returncode == 4, out(p)
        assert f"in use by {proc.pid} (sleep)" in p.stderr
        assert os.path.exists(act)
        assert "small" in t.run("status", env=ENV).stdout
        # Waits: the command ends 1 s into a 20 s --lock-timeout.
        killer = subprocess.Popen(["sh", "-c", f"sleep 1; kill {proc.pid}"])
        p = t.run("destroy", "small", "-y", "--lock-timeout", "20", env=ENV)
        killer.wait()
        assert p.returncode == 0, out(p)
        assert not os.path.exists(act)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGTERM


# ------------------------------------------------------------------ shell


def test_shell_starts_the_users_shell_in_the_stack(machine):
    """`tfprov shell b` replaces itself with $SHELL in b's environment; what the shell
    exits with is what tfprov shell exits with; an unknown stack is 125."""
    t = machine
    p = subprocess.run([t.bin, "--root", t.root, "shell", "b"], input="echo \"$TFPROV_STACK "
                       "$CUDA_HOME\"; command -v python; exit 5\n", capture_output=True,
                       text=True, env=clean_env(SHELL="/bin/sh"), timeout=60)
    assert p.returncode == 5, p.stderr
    marker, cuda = p.stdout.splitlines()[0].split()
    assert marker == "b" and cuda == t.path("/opt/tfprov/cuda/12.3.2")
    assert p.stdout.splitlines()[1] == t.path("/opt/tfprov/envs/tfb/bin/python")
    assert "entering stack b" in p.stderr
    p = t.run("shell", "nope", env=clean_env(SHELL="/bin/sh"))
    assert p.returncode == 125 and "no stack named 'nope'" in p.stderr


# ------------------------------------------------------------------ upgrade


def test_an_older_tfprovs_profile_script_goes_on_the_next_apply(tfprov, tmp_path):
    """The state an older tfprov left: the env step's resource recorded
    /etc/profile.d/tfprov-<stack>.sh (read by every login shell) and its desired
    digest was that script's. The next apply updates the step: the old script is
    removed through the journal, the stack's activate.sh placed, one login script
    written; nothing else is left in profile.d."""
    import hashlib
    import sqlite3
    m = tmp_path / "small.yaml"
    m.write_text(DEMO)
    tfprov.run("apply", "-y", str(m), env=ENV, check=0)
    old = "/etc/profile.d/tfprov-small.sh"
    text = b"# Environment of the tfprov stack 'small'. Generated by tfprov; do not edit:\n"
    with open(tfprov.path(old), "wb") as f:
        f.write(text)
    st = os.stat(tfprov.path(old))
    db = sqlite3.connect(tfprov.state_db)
    with db:
        rid = db.execute("SELECT id FROM resources WHERE addr = 'env'").fetchone()[0]
        db.execute("DELETE FROM files WHERE resource_id = ?", (rid,))
        db.execute("INSERT INTO files(path, resource_id, type, sha256, size, mode, mtime_ns) "
                   "VALUES (?, ?, 'f', ?, ?, 420, ?)",
                   (old, rid, hashlib.sha256(text).hexdigest(), st.st_size, st.st_mtime_ns))
        db.execute("UPDATE resources SET desired = 'from an older tfprov' WHERE id = ?", (rid,))
    db.close()
    for f in ("activate.sh", "deactivate.sh"):
        os.unlink(tfprov.path("/opt/tfprov/stacks/small/" + f))
    p = tfprov.run("plan", "--detailed-exitcode", str(m), env=ENV, check=2)
    assert "~ env" in p.stdout
    tfprov.run("apply", "-y", str(m), env=ENV, check=0)
    assert sorted(os.listdir(tfprov.path("/etc/profile.d"))) == ["tfprov.sh"]
    assert os.path.isfile(tfprov.path("/opt/tfprov/stacks/small/activate.sh"))
    tfprov.run("verify", env=ENV, check=0)
    assert "No changes" in tfprov.run("apply", "-y", str(m), env=ENV, check=0).stdout

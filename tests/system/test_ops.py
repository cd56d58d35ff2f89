"""The first hour of an operator and the last: refusals before any change,
generation numbers per stack, planning into a root that does not exist yet,
destroy --all, and gc pruning the download cache to what recorded
generations need.

What the machine looks like: a --root sandbox per test; env-only stacks
(activation scripts) and a CUDA-layout stack from a loopback HTTP server
(lib_stack: STAND-IN libraries with the real sonames, no GPU).
What is run: the real binary, as root and, for the refusals, as `nobody`
(setpriv).
What must hold: exit codes, messages, the files on disk and in the cache.
"""
import os
import re
import shutil
import sqlite3
import subprocess

import pytest

from lib_provision import out
from lib_gpu import STUBS
from lib_stack import MAKE_STACK, applied_stack, real_no_gpu_env

ENV_ONLY = ("schema: 1\nstack:\n  name: {name}\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
            "versions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\ndriver:\n  policy: skip\n"
            "env:\n  vars:\n    X: \"{x}\"\n")


def env_manifest(tmp_path, name, x="1"):
    m = tmp_path / ("%s.yaml" % name)
    m.write_text(ENV_ONLY.format(name=name, x=x))
    return str(m)


def tree(root):
    out = []
    for dp, dns, fns in os.walk(root):
        for n in fns + dns:
            out.append(os.path.relpath(os.path.join(dp, n), root))
    return sorted(out)


# ------------------------------------------------------------ refusals before the plan

@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to run tfprov as another user (setpriv)")
@pytest.mark.parametrize("args", [["apply", "-y", "M"], ["destroy", "-y", "x"],
                                  ["destroy", "--all", "-y"], ["rollback", "-y", "x"],
                                  ["gc", "-y"]])
def test_non_root_writer_on_slash_refuses_before_the_plan(tfprov, tmp_path, args):
    m = env_manifest(tmp_path, "nr")
    os.chmod(tmp_path, 0o755)
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", tfprov.bin]
    argv += [m if a == "M" else a for a in args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, cwd="/")
    assert p.returncode == 6, out(p)
    assert "run as root, or use --root DIR" in p.stderr, out(p)
    assert "Plan:" not in p.stdout, out(p)  # refused before planning
    assert not os.path.exists("/opt/tfprov/stacks/nr")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to run tfprov as another user (setpriv)")
def test_non_root_with_its_own_root_applies():
    import tempfile
    base = tempfile.mkdtemp(prefix="tfprov-nonroot-")  # pytest's tmp is 0700 root
    try:
        os.chmod(base, 0o777)
        m = env_manifest(__import__("pathlib").Path(base), "mine")
        os.chmod(m, 0o644)
        root = os.path.join(base, "r")
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            os.environ.get("TFPROV_BIN") or os.path.join(
                                os.environ.get("TFPROV_BUILD_DIR", "build"), "tfprov"),
                            "--root", root, "apply", "-y", m],
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, out(p)
        assert os.path.exists(os.path.join(root, "opt/tfprov/stacks/mine/activate.sh"))
        assert os.path.exists(os.path.join(root, "etc/profile.d/tfprov.sh"))
    finally:
        shutil.rmtree(base)


# ------------------------------------------------------------ plan into a fresh root

def test_plan_into_a_root_that_does_not_exist_yet(tmp_path):
    from conftest import Tfprov
    t = Tfprov(tmp_path / "fresh" / "root")
    m = env_manifest(tmp_path, "fresh")
    p = t.run("plan", "--detailed-exitcode", m, check=2)
    assert "does not exist yet: planning for an empty root" in out(p), out(p)
    assert "+ env: stack environment /opt/tfprov/stacks/fresh/activate.sh" in p.stdout, out(p)
    assert not (tmp_path / "fresh").exists()
    # a root that is a file is still an error, not an empty root
    (tmp_path / "afile").write_text("x")
    p = Tfprov(tmp_path / "afile").run("plan", m, check=1)
    assert "is not a directory" in p.stderr, out(p)


# ------------------------------------------------------------ generation numbers

def test_generations_are_numbered_per_stack(tfprov, tmp_path):
    a = env_manifest(tmp_path, "a")
    b = env_manifest(tmp_path, "b")
    tfprov.run("apply", "-y", a, check=0)
    tfprov.run("apply", "-y", b, check=0)
    env_manifest(tmp_path, "b", x="2")
    tfprov.run("apply", "-y", b, check=0)
    p = tfprov.run("status", check=0)
    assert "stack a: generation 1 of 1," in p.stdout, p.stdout
    assert "stack b: generation 2 of 2," in p.stdout, p.stdout
    p = tfprov.run("show", "b", check=0)
    nums = [l.split()[0] for l in p.stdout.splitlines() if "started" in l]
    assert nums == ["1", "2"], p.stdout
    # b's generation 1 is its own first apply (X=1), not a's.
    p = tfprov.run("diff", "--generation", "1", "b", b, check=0)
    assert "X" in p.stdout, out(p)
    tfprov.run("rollback", "-y", "b", "--generation", "1", check=0)
    assert "X='1'" in open(tfprov.path("/opt/tfprov/stacks/b/activate.sh")).read()
    p = tfprov.run("status", check=0)
    assert "stack b: generation 3 of 3," in p.stdout, p.stdout
    p = tfprov.run("rollback", "-y", "b", "--generation", "4", check=1)
    assert "no successful generation with that number" in p.stderr, out(p)


# ------------------------------------------------------------ destroy --all

def test_destroy_all_removes_every_stack_and_its_profile_script(tfprov, tmp_path):
    for n in ("a", "b"):
        tfprov.run("apply", "-y", env_manifest(tmp_path, n), check=0)
    before = tree(tfprov.root)
    p = tfprov.run("destroy", "--all", check=1)  # no terminal, no -y: nothing changes
    assert "pass -y" in p.stderr and "Nothing was changed" in p.stderr, out(p)
    assert tree(tfprov.root) == before
    p = tfprov.run("destroy", "--all", "-y", check=0)
    assert "Destroyed stack a." in p.stdout and "Destroyed stack b." in p.stdout, out(p)
    assert os.listdir(tfprov.path("/etc/profile.d")) == []
    p = tfprov.run("status", check=0)
    assert "No stacks" in p.stdout, out(p)
    p = tfprov.run("destroy", "--all", "-y", check=0)
    assert "nothing to destroy" in p.stdout, out(p)


@pytest.mark.parametrize("args", [["destroy"], ["destroy", "--all", "x"]])
def test_destroy_needs_a_stack_or_all(tfprov, args):
    p = tfprov.run(*args)
    assert p.returncode == 64, out(p)
    assert "destroy --all" in p.stderr, out(p)


def test_destroy_keeps_a_layout_directory_that_is_not_empty(tfprov, tmp_path, mirror):
    applied_stack(tfprov, tmp_path, mirror)
    mine = tfprov.path("/opt/tfprov/cuda/notes.txt")
    with open(mine, "w") as f:
        f.write("mine\n")
    tfprov.run("destroy", "-y", "demo", check=0)
    assert os.listdir(tfprov.path("/opt/tfprov")) == ["cuda"]
    assert os.listdir(tfprov.path("/opt/tfprov/cuda")) == ["notes.txt"]


def test_destroy_unknown_stack(tfprov, tmp_path):
    tfprov.run("apply", "-y", env_manifest(tmp_path, "a"), check=0)
    p = tfprov.run("destroy", "-y", "nope", check=1)
    assert "no stack named 'nope'" in p.stderr, out(p)


# ------------------------------------------------------------ gc

def cached(tfprov):
    d = tfprov.path("/var/cache/tfprov/sha256")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_gc_keeps_what_generations_need_and_removes_the_rest(tfprov, tmp_path, mirror):
    applied_stack(tfprov, tmp_path, mirror)
    needed = cached(tfprov)
    assert len(needed) >= 2, needed
    cache = tfprov.path("/var/cache/tfprov")
    # an artifact nothing pins, a partial download, a quarantined file
    stray = os.path.join(cache, "sha256", "ab" * 32)
    with open(stray, "w") as f:
        f.write("stray\n")
    part = os.path.join(cache, "partial", "cd" * 32 + ".part")
    with open(part, "w") as f:
        f.write("half\n")
    os.makedirs(os.path.join(cache, "quarantine"), exist_ok=True)
    quar = os.path.join(cache, "quarantine", "ef" * 32 + ".1764550000")
    with open(quar, "w") as f:
        f.write("bad\n")

    # Without -y and a terminal: a dry run that lists, removes nothing, exit 1.
    p = tfprov.run("gc", check=1)
    for f in (stray, part, quar):
        assert os.path.exists(f), out(p)
    # No name recorded for these: the file under its hash, its size, said plainly.
    assert "  - %s (6 bytes, name unknown)" % ("ab" * 32) in p.stdout, out(p)
    assert "  - partial download of %s.part (5 bytes, name unknown)" % ("cd" * 32) in p.stdout
    assert "  - quarantined %s.1764550000 (4 bytes" % ("ef" * 32) in p.stdout, out(p)
    assert "1 unused artifact, 1 partial download, 1 quarantined file" in p.stdout, out(p)
    p = tfprov.run("-v", "gc", check=1)
    assert stray in p.stdout, out(p)  # the path, when asked
    for h in needed:
        assert h not in p.stdout, out(p)

    p = tfprov.run("gc", "-y", check=0)
    assert "Removed 3 files" in p.stdout, out(p)
    assert cached(tfprov) == needed
    assert not os.path.exists(part) and not os.path.exists(quar)
    p = tfprov.run("gc", "-y", check=0)
    assert "holds only what recorded generations need" in p.stdout, out(p)

    tfprov.run("destroy", "-y", "demo", check=0)
    # the prefix's layout directories went once empty; a user's file keeps them
    assert not os.path.exists(tfprov.path("/opt/tfprov")), os.listdir(tfprov.path("/opt"))
    # destroy forgets the stack and its generations: now nothing is needed, and gc
    # names each artifact by the file name it was downloaded as, with its size.
    p = tfprov.run("gc", check=1)
    assert re.search(r"  - cuda_cudart-linux-x86_64-12\.3\.101-archive\.tar\.xz "
                     r"\([0-9.]+ (bytes|KiB|MiB), sha256 [0-9a-f]{12}\.\.\.\)", p.stdout), out(p)
    assert "sha256/" not in p.stdout, out(p)
    p = tfprov.run("gc", "-y", check=0)
    assert cached(tfprov) == [], out(p)
    assert os.listdir(tfprov.path("/var/cache/tfprov/names")) == []


def test_gc_needs_enough_for_an_offline_rollback(tfprov, tmp_path, mirror):
    """After gc, every recorded generation can still be re-applied offline."""
    applied_stack(tfprov, tmp_path, mirror)
    m2 = str(tmp_path / "v2.yaml")
    subprocess.run(["/usr/bin/python3", MAKE_STACK, "--stubs", os.path.join(STUBS, "cuda11"),
                    "--cuda", "11.8.0", "--cudnn", "8.9.7.29", "--out", mirror.root,
                    "--url-base", mirror.url(""), "--manifest", m2, "--name", "demo",
                    "--driver-policy", "require", "--tensorflow", "2.13.0"],
                   check=True, capture_output=True, timeout=120)
    tfprov.run("--no-gpu", "apply", "-y", m2, env=real_no_gpu_env(), check=0, timeout=300)
    tfprov.run("gc", "-y", check=0)
    tfprov.run("--no-gpu", "--offline", "rollback", "-y", "demo", "--generation", "1",
               env=real_no_gpu_env(), check=0, timeout=300)
    assert os.path.exists(tfprov.path("/opt/tfprov/cuda/12.3.2"))


def test_gc_stops_when_a_generation_no_longer_loads(tfprov, tmp_path, mirror):
    applied_stack(tfprov, tmp_path, mirror)
    stray = tfprov.path("/var/cache/tfprov/sha256/" + "ab" * 32)
    with open(stray, "w") as f:
        f.write("stray\n")
    c = sqlite3.connect(tfprov.state_db)
    try:
        c.execute("UPDATE generations SET manifest_text = 'schema: [' ")
        c.commit()
    finally:
        c.close()
    p = tfprov.run("gc", "-y", check=1)
    assert "cannot tell what stack demo generation 1" in p.stderr, out(p)
    assert "nothing was removed" in p.stderr and os.path.exists(stray), out(p)


def test_gc_without_a_cache(tfprov):
    p = tfprov.run("gc", "-y", check=0)
    assert "nothing to collect" in p.stdout, out(p)


@pytest.mark.parametrize("days", ["x", "-1", "1.5", ""])
def test_gc_refuses_a_bad_image_days_before_touching_the_root(tfprov, days):
    """--image-days is checked with the options: exit 64 naming it, and the root
    is left as it was (no lock file, no state, no cache created)."""
    p = tfprov.run("gc", "-y", "--image-days", days, check=64)
    assert "--image-days wants a number of days, 0 or more: " + days in p.stderr, p.stderr
    assert os.listdir(tfprov.root) == []

"""Two stacks side by side under one root, through the real binary.

STAND-INS: the CUDA 11.8 / cuDNN 8.6 and CUDA 12.3 / cuDNN 8.9 archives hold
stub libraries with NVIDIA's sonames (make_stack.py with build/stubs/cuda11 and
build/stubs/cuda12); no GPU here, so every apply runs with --no-gpu (GPU
checks reported as skipped). HTTP, SQLite and placement are real.
"""
import os
import random
import signal
import sqlite3
import time

import pytest

import lib_killpoint
from lib_provision import (SIDE_FILES, STUBS, Mirror, db_rows, dlprobe, missing_recorded,
                           no_stub_env, out, recorded_files, temp_leftovers, tree_hashes)

ENV = no_stub_env()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("two")
    with Mirror(d / "www") as m:
        m.old = m.stack(d / "tf212.yaml", name="tf212", stubs="cuda11", cuda="11.8.0",
                        cudnn="8.6.0.163", cudnn_variant="cuda11", tensorflow="2.12.0",
                        python="3.9")
        m.new = m.stack(d / "tf215.yaml", name="tf215", stubs="cuda12", cuda="12.3.2",
                        cudnn="8.9.7.29", cudnn_variant="cuda12")
        # Same CUDA 12.3.2 prefix, a different cuDNN (8.9.6) merged into it.
        m.other_merge = m.stack(d / "other-merge.yaml", name="other", stubs="cuda12",
                                cuda="12.3.2", cudnn="8.9.6.50", cudnn_variant="cuda12")
        m.other_sep = m.stack(d / "other-sep.yaml", name="other", stubs="cuda12",
                              cuda="12.3.2", cudnn="8.9.6.50", cudnn_variant="cuda12",
                              placement="separate")
        # The shipped 2.15 shape and a 2.17 shape (with nvcc and CUPTI) on one CUDA.
        libs = "cuda_cudart,libcublas,libcufft,libcurand,libcusolver,libcusparse,libnvjitlink"
        m.s215 = m.stack(d / "s215.yaml", name="tf215", stubs="cuda12", cuda="12.3.2",
                         cudnn="8.9.7.29", cudnn_variant="cuda12", components=libs)
        m.s217 = m.stack(d / "s217.yaml", name="tf217", stubs="cuda12", cuda="12.3.2",
                         cudnn="8.9.7.29", cudnn_variant="cuda12", tensorflow="2.17.0",
                         components=libs + ",cuda_nvcc,cuda_cupti")
        # The 2.20 shape under the 2.15 stack's name: an upgrade.
        m.up = m.stack(d / "up.yaml", name="tf215", stubs="cuda12", cuda="12.5.1",
                       cudnn="9.3.0.75", cudnn_variant="cuda12", tensorflow="2.20.0",
                       cudnn_stubs=os.path.join(STUBS, "cudnn9"))
        yield m


def _apply(tfprov, manifest, rc=0):
    p = tfprov.run("--no-gpu", "apply", "-y", manifest, env=ENV)
    assert p.returncode == rc, out(p)
    return p


def test_side_by_side_then_destroy_one(tfprov, mirror):
    """CUDA 11.8 + cuDNN 8.6 and CUDA 12.3 + cuDNN 8.9 under one root: both apply,
    both verify; destroying one removes exactly its files and leaves the other
    byte-for-byte intact, verified, with every recorded file present."""
    _apply(tfprov, mirror.old)
    _apply(tfprov, mirror.new)
    r = tfprov.path
    assert os.path.exists(r("/opt/tfprov/cuda/11.8.0/lib64/libcudart.so.11.0"))
    assert os.path.exists(r("/opt/tfprov/cuda/11.8.0/lib/libcudnn.so.8"))
    assert os.path.exists(r("/opt/tfprov/cuda/12.3.2/lib64/libcudart.so.12"))
    assert os.path.exists(r("/opt/tfprov/cuda/12.3.2/lib/libcudnn.so.8"))
    real86 = os.path.realpath(r("/opt/tfprov/cuda/11.8.0/lib/libcudnn.so.8"))
    real89 = os.path.realpath(r("/opt/tfprov/cuda/12.3.2/lib/libcudnn.so.8"))
    assert real86.endswith("libcudnn.so.8.6.0") and real89.endswith("libcudnn.so.8.9.7")
    for s in ("tf212", "tf215"):
        v = tfprov.run("--no-gpu", "verify", s, env=ENV)
        assert v.returncode == 0, out(v)
        assert missing_recorded(tfprov, s) == []
    old_files = {f[0] for f in recorded_files(tfprov, "tf212")}
    new_files = {f[0] for f in recorded_files(tfprov, "tf215")}
    assert old_files and new_files and not old_files & new_files
    # Everything of tf215 (its prefix and profile) before the destroy.
    keep = {k: v for k, v in tree_hashes(tfprov.root, exclude=SIDE_FILES).items()
            if "12.3.2" in k or "tfprov-tf215" in k}
    d = tfprov.run("destroy", "tf212", "-y", env=ENV)
    assert d.returncode == 0, out(d)
    for p in old_files:
        assert not os.path.lexists(r(p)), f"{p} of the destroyed stack is still there"
    after = {k: v for k, v in tree_hashes(tfprov.root, exclude=SIDE_FILES).items()
             if "12.3.2" in k or "tfprov-tf215" in k}
    assert after == keep
    v = tfprov.run("--no-gpu", "verify", "tf215", env=ENV)
    assert v.returncode == 0, out(v)
    assert missing_recorded(tfprov) == []
    assert {f[5] for f in recorded_files(tfprov)} == {"tf215"}
    assert db_rows(tfprov, "SELECT name FROM stacks") == [("tf215",)]
    assert temp_leftovers(tfprov.root) == []
    # The survivor is still converged: nothing to do.
    p = _apply(tfprov, mirror.new)
    assert "No changes" in p.stdout


def test_separate_placement_next_to_merged_stack(tfprov, mirror):
    """The same pair with the second stack's cuDNN placed separately: works, and
    both stacks verify; the first stack's merged cuDNN is untouched."""
    _apply(tfprov, mirror.new)
    merged = tree_hashes(tfprov.path("/opt/tfprov/cuda/12.3.2"))
    p = tfprov.run("--no-gpu", "apply", "-y", mirror.other_sep, env=ENV)
    assert p.returncode == 0, out(p)
    assert tree_hashes(tfprov.path("/opt/tfprov/cuda/12.3.2")) == merged
    for s in ("tf215", "other"):
        v = tfprov.run("--no-gpu", "verify", s, env=ENV)
        assert v.returncode == 0, out(v)
    assert missing_recorded(tfprov) == []


def _cuda_records(tfprov, prefix="/opt/tfprov/cuda/12.3.2"):
    """{stack: {path under prefix recorded by its cuda or cudnn step}}."""
    got = {}
    for path, _t, _h, _n, _addr, stack in recorded_files(tfprov):
        if path == prefix or path.startswith(prefix + "/"):
            got.setdefault(stack, set()).add(path)
    return got


def _verify_all(tfprov, *stacks):
    for s in stacks:
        v = tfprov.run("--no-gpu", "verify", s, env=ENV)
        assert v.returncode == 0, (s, out(v))
    assert missing_recorded(tfprov) == []
    assert temp_leftovers(tfprov.root) == []


def test_same_cuda_version_is_shared(tfprov, mirror):
    """The shipped 2.15 shape and a 2.17 shape (both CUDA 12.3.2 + cuDNN 8.9.7, the
    2.17 one with nvcc and CUPTI as well) in one root: the second shares the first's
    prefix (plan says so), every file placed once and recorded by each stack that needs
    it; both verify; destroy of either leaves the other verifying, with the files only
    the destroyed one needed gone and everything else byte for byte as it was."""
    r = tfprov.path
    prefix = "/opt/tfprov/cuda/12.3.2"
    _apply(tfprov, mirror.s215)
    alone = tree_hashes(r(prefix))
    p = tfprov.run("--no-gpu", "plan", mirror.s217, env=ENV)
    assert p.returncode == 0, out(p)
    assert f"CUDA 12.3.2 into {prefix} (9 archives), shared with stack 'tf215'" in p.stdout, \
        p.stdout
    assert f"merged into {prefix}, shared with stack 'tf215'" in p.stdout, p.stdout
    _apply(tfprov, mirror.s217)
    both = tree_hashes(r(prefix))
    # The 2.17 stack added only what it needs beyond the 2.15 one.
    assert {k: v for k, v in both.items() if k in alone} == alone
    assert "bin/ptxas" in set(both) - set(alone)
    rec = _cuda_records(tfprov)
    assert rec["tf215"] < rec["tf217"], "every file of tf215 is recorded for tf217 too"
    assert f"{prefix}/bin/ptxas" in rec["tf217"] - rec["tf215"]
    assert not os.path.exists(r("/opt/tfprov/cudnn")), "the same cuDNN is merged once"
    _verify_all(tfprov, "tf215", "tf217")
    assert "No changes" in _apply(tfprov, mirror.s215).stdout
    assert "No changes" in _apply(tfprov, mirror.s217).stdout

    d = tfprov.run("destroy", "tf217", "-y", env=ENV)
    assert d.returncode == 0, out(d)
    assert "still used by stack 'tf215'" in out(d), out(d)
    assert tree_hashes(r(prefix)) == alone, "what only tf217 used went, the rest stayed"
    _verify_all(tfprov, "tf215")
    assert "No changes" in _apply(tfprov, mirror.s215).stdout

    _apply(tfprov, mirror.s217)
    d = tfprov.run("destroy", "tf215", "-y", env=ENV)
    assert d.returncode == 0, out(d)
    assert tree_hashes(r(prefix)) == both, "nothing tf217 uses went with tf215"
    _verify_all(tfprov, "tf217")
    assert db_rows(tfprov, "SELECT name FROM stacks") == [("tf217",)]
    assert "No changes" in _apply(tfprov, mirror.s217).stdout
    d = tfprov.run("destroy", "tf217", "-y", env=ENV)
    assert d.returncode == 0, out(d)
    assert not os.path.lexists(r(prefix)), "the last owner removes the prefix"


def test_another_cudnn_is_placed_beside_the_shared_prefix(tfprov, mirror, tmp_path):
    """A second stack on CUDA 12.3.2 asking to merge cuDNN 8.9.6 where the first merged
    8.9.7: the plan says it goes separately and why; the shared prefix (with the
    first's cuDNN) is untouched; a program run in each stack loads its own cuDNN
    (the separate directory comes before the shared lib64); destroy of the first
    takes its merged cuDNN and leaves the second working."""
    r = tfprov.path
    prefix = "/opt/tfprov/cuda/12.3.2"
    _apply(tfprov, mirror.new)
    merged = tree_hashes(r(prefix))
    p = tfprov.run("--no-gpu", "plan", mirror.other_merge, env=ENV)
    assert p.returncode == 0, out(p)
    sep = "/opt/tfprov/cudnn/8.9.6.50-cuda12.3.2"
    assert (f"separate in {sep} (not merged: stack 'tf215' merged another cuDNN into the "
            f"shared {prefix})") in p.stdout, p.stdout
    _apply(tfprov, mirror.other_merge)
    assert tree_hashes(r(prefix)) == merged
    _verify_all(tfprov, "tf215", "other")
    probe = dlprobe(tmp_path)
    for stack, want in (("tf215", r(prefix) + "/lib/libcudnn.so.8.9.7"),
                        ("other", r(sep) + "/lib/libcudnn.so.8.9.6")):
        q = tfprov.run("run", stack, "--", probe, "libcudnn.so.8", env=ENV)
        assert q.returncode == 0, out(q)
        assert q.stdout.split() == ["libcudnn.so.8", want], (stack, q.stdout)
    # Stable: nothing to do for either; the choice is kept.
    assert "No changes" in _apply(tfprov, mirror.other_merge).stdout
    assert "No changes" in _apply(tfprov, mirror.new).stdout
    d = tfprov.run("destroy", "tf215", "-y", env=ENV)
    assert d.returncode == 0, out(d)
    assert not os.path.lexists(r(prefix + "/lib/libcudnn.so.8.9.7"))
    assert os.path.exists(r(prefix + "/lib/libcudart.so.12"))
    _verify_all(tfprov, "other")


def test_another_build_of_the_same_cuda_is_refused_before_any_change(tfprov, mirror, tmp_path):
    """A second stack on CUDA 12.3.2 whose archives are other builds (same file names,
    other bytes; its libcufft.so.11 differs) cannot share the prefix: plan says apply
    would stop, naming the other stack, the file and the fix; apply refuses before
    anything is fetched or changed. When the sharer's record names no archives (an
    older tfprov's), the cuda step finds the differing library itself, before any
    write. The first stack still verifies."""
    _apply(tfprov, mirror.s215)
    before = tree_hashes(tfprov.root, exclude=SIDE_FILES)
    gens = db_rows(tfprov, "SELECT id, result FROM generations")
    with Mirror(tmp_path / "www2") as m2:
        # Its libcufft.so.11 is another build: stubs/broken holds a different one.
        other = m2.stack(tmp_path / "rebuilt.yaml", name="rebuilt", stubs="broken",
                         cuda="12.3.2", cudnn="8.9.7.29", cudnn_variant="cuda12")
        p = tfprov.run("--no-gpu", "plan", other, env=ENV)
        assert "apply would stop here" in out(p), out(p)
        p = tfprov.run("--no-gpu", "apply", "-y", other, env=ENV)
        assert p.returncode == 1, out(p)
        text = out(p)
        assert ("stack 'tf215' placed cuda_cudart-linux-x86_64-12.3.101-archive.tar.xz into "
                "/opt/tfprov/cuda/12.3.2 from a file with sha256") in text, text
        assert "another `prefix:`" in text, text
        assert m2.srv.requests == [], "nothing is fetched before the refusal"
        assert "download" not in p.stdout.lower(), p.stdout
        assert tree_hashes(tfprov.root, exclude=SIDE_FILES) == before
        assert db_rows(tfprov, "SELECT id, result FROM generations") == gens
        # A sharer recorded by an older tfprov names no archives: the files
        # themselves are compared when the step places them, before any write.
        con = sqlite3.connect(tfprov.state_db)
        con.execute("UPDATE resources SET attrs = NULL WHERE addr = 'cuda'")
        con.commit()
        con.close()
        p = tfprov.run("--no-gpu", "apply", "-y", other, env=ENV)
        assert p.returncode == 1, out(p)
        assert ("/opt/tfprov/cuda/12.3.2/lib/libcufft.so.11.0.12.1 belongs to stack 'tf215' "
                "with other content") in out(p), out(p)
        assert "nothing was changed" in out(p), out(p)
    now = tree_hashes(tfprov.root, exclude=SIDE_FILES)
    assert {k: v for k, v in now.items() if not k.startswith("var/")} == \
        {k: v for k, v in before.items() if not k.startswith("var/")}
    _verify_all(tfprov, "tf215")


def test_upgrade_under_one_name_leaves_no_old_prefix(tfprov, mirror):
    """The 2.15 shape (CUDA 12.3.2, cuDNN 8.9.7 merged), then the 2.20 shape (CUDA
    12.5.1, cuDNN 9.3) under the same stack name: the apply that stops using the 12.3
    prefix removes it; the stack verifies; nothing of the old one stays recorded."""
    _apply(tfprov, mirror.new)
    assert os.path.exists(tfprov.path("/opt/tfprov/cuda/12.3.2/lib/libcudnn.so.8"))
    _apply(tfprov, mirror.up)
    assert not os.path.lexists(tfprov.path("/opt/tfprov/cuda/12.3.2"))
    assert os.path.exists(tfprov.path("/opt/tfprov/cuda/12.5.1/lib/libcudnn.so.9"))
    assert not [f for f in recorded_files(tfprov) if "12.3.2" in f[0]]
    _verify_all(tfprov, "tf215")
    assert "No changes" in _apply(tfprov, mirror.up).stdout


def test_upgrade_keeps_the_old_prefix_another_stack_uses(tfprov, mirror):
    """Two stacks share CUDA 12.3.2; one moves to 12.5.1: the 12.3.2 files stay for the
    other (which still verifies), and are no longer recorded for the one that moved."""
    _apply(tfprov, mirror.s217)
    _apply(tfprov, mirror.new)
    before = tree_hashes(tfprov.path("/opt/tfprov/cuda/12.3.2"))
    _apply(tfprov, mirror.up)
    assert tree_hashes(tfprov.path("/opt/tfprov/cuda/12.3.2")) == before
    assert set(_cuda_records(tfprov)) == {"tf217"}
    _verify_all(tfprov, "tf215", "tf217")


def test_kill_9_during_the_second_stacks_apply_converges(tfprov, mirror, tmp_path):
    """kill -9 of the 2.17 stack's apply beside the 2.15 stack on the same CUDA prefix,
    at seeded points of its own operations (lib_killpoint; every other one among those
    in the shared prefix): after each kill every recorded file is on disk and the 2.15
    stack still verifies; the next apply converges (both verify, no leftovers, a
    further apply changes nothing). TFPROV_KILL_SEED replays a run."""
    seed = int(os.environ.get("TFPROV_KILL_SEED", str(time.time_ns() % 100000)))
    rnd = random.Random(seed)
    print(f"seed {seed}")
    _apply(tfprov, mirror.s215)
    # The cuda_nvcc and cuda_cupti archives are not in the cache yet: the decoder
    # follows their downloads into the scratch, and how often it starts over there
    # depends on when the download thread's bytes arrive (under load in CI, a replay
    # ran behind its reference from that point). Those operations are not counted:
    # the kill points are the run's own on the root (lib_killpoint.scratch).
    kp = lib_killpoint.Killer(tmp_path / "kp", skip=[lib_killpoint.scratch(tfprov.root)])
    argv = [tfprov.bin, "--root", tfprov.root, "--no-gpu", "--jobs", "1", "apply", "-y",
            mirror.s217]
    env = dict(os.environ, **ENV)
    restore = lib_killpoint.saved_root(tfprov.root, tmp_path / "saved-root")
    ref, events = kp.points(argv, env)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    restore()
    inside = [i for i, e in enumerate(events) if "/cuda/12.3.2" in (e.arg or "")]
    assert inside, events
    for it in range(int(os.environ.get("TFPROV_KILL_ITERS", "6"))):
        pick = rnd.choice(inside) if it % 2 == 0 else rnd.randrange(len(events))
        want = events[pick]
        rc, hit, ops = kp.run_to_logged(argv, env, want.point)
        ctx = (f"seed {seed} iteration {it}: killed at {hit} (reference: {want}); first "
               f"divergence: {lib_killpoint.divergence(ops, events)}")
        assert hit is not None and hit.op == want.op and rc == -signal.SIGKILL, ctx
        assert missing_recorded(tfprov, "tf215") == [], ctx
        v = tfprov.run("--no-gpu", "verify", "tf215", env=ENV)
        assert v.returncode == 0, (ctx, out(v))
        p = tfprov.run("--no-gpu", "apply", "-y", mirror.s217, env=ENV)
        assert p.returncode == 0, (ctx, out(p))
        _verify_all(tfprov, "tf215", "tf217")
        assert "No changes" in _apply(tfprov, mirror.s217).stdout, ctx
        restore()


VENV = """schema: 1
stack:
  name: {name}
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
  python: "3.11"
driver:
  policy: skip
python:
  manager: venv
  name: tf
  version: "3.11"
  interpreter: /usr/bin/python3.11
"""


def test_env_name_of_another_stack_refused_before_any_change(tfprov, tmp_path):
    """Two stacks naming the same Python env (python.name, so one <prefix>/envs/tf):
    the second is refused by plan and apply before any change, naming the other
    stack and the fix; the first's env is untouched."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(VENV.format(name="first"))
    b.write_text(VENV.format(name="second"))
    _apply(tfprov, a)
    before = tree_hashes(tfprov.root, exclude=SIDE_FILES)
    p = tfprov.run("plan", b, env=ENV)
    assert "apply would stop here" in out(p) and "stack 'first'" in out(p), out(p)
    p = tfprov.run("apply", "-y", b, env=ENV)
    assert p.returncode == 1, out(p)
    assert "/opt/tfprov/envs/tf belongs to stack 'first'" in out(p)
    assert "give this stack's python.name another name" in out(p)
    assert tree_hashes(tfprov.root, exclude=SIDE_FILES) == before
    assert db_rows(tfprov, "SELECT name FROM stacks") == [("first",)]

"""Two stacks side by side under one root, through the real binary.

STAND-INS: the CUDA 11.8 / cuDNN 8.6 and CUDA 12.3 / cuDNN 8.9 archives hold
stub libraries with NVIDIA's sonames (make_stack.py with build/stubs/cuda11 and
build/stubs/cuda12); no GPU here, so every apply runs with --no-gpu (GPU
checks reported as skipped). HTTP, SQLite and placement are real.
"""
import os

import pytest

from lib_provision import (SIDE_FILES, Mirror, db_rows, missing_recorded, no_stub_env, out,
                           recorded_files, temp_leftovers, tree_hashes)

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


def test_two_merges_into_one_cuda_prefix_conflict(tfprov, mirror):
    """Two stacks with the same CUDA 12.3.2 prefix, both placement: merge, with
    different cuDNN (8.9.7 vs 8.9.6): the second fails before changing anything,
    naming the conflict (the other stack and the prefix)."""
    _apply(tfprov, mirror.new)
    before = tree_hashes(tfprov.root, exclude=SIDE_FILES)
    gens = db_rows(tfprov, "SELECT id, result FROM generations")
    p = tfprov.run("--no-gpu", "apply", "-y", mirror.other_merge, env=ENV)
    assert p.returncode != 0, out(p)
    text = out(p)
    assert "tf215" in text and "/opt/tfprov/cuda/12.3.2" in text, text
    assert "another `prefix:`" in text  # says how to resolve it
    assert tree_hashes(tfprov.root, exclude=SIDE_FILES) == before
    assert db_rows(tfprov, "SELECT id, result FROM generations") == gens
    assert tfprov.run("--no-gpu", "verify", "tf215", env=ENV).returncode == 0


def test_merge_conflict_shown_by_plan(tfprov, mirror):
    """plan of the conflicting second stack already says apply would stop."""
    _apply(tfprov, mirror.new)
    p = tfprov.run("--no-gpu", "plan", mirror.other_merge, env=ENV)
    assert "tf215" in out(p) and "merge" in out(p), out(p)


@pytest.mark.xfail(strict=True, reason=(
    "NOT YET (issue 29, item 5): a CUDA prefix can belong to one stack only (files.path "
    "is the state's primary key), so a second stack with the same CUDA version is "
    "refused, now by plan and apply before any change "
    "(test_same_cuda_version_refused_before_any_change). Needs shared ownership of an "
    "identical CUDA tree"))
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


def test_same_cuda_version_refused_before_any_change(tfprov, mirror):
    """Until two stacks can share a CUDA prefix: the second stack on the same CUDA
    version, even with its cuDNN placed separately, is refused by plan (which says
    apply would stop) and by apply before anything is fetched or changed, naming the
    other stack, the prefix and the fix; the first stack still verifies."""
    _apply(tfprov, mirror.new)
    before = tree_hashes(tfprov.root, exclude=SIDE_FILES)
    gens = db_rows(tfprov, "SELECT id, result FROM generations")
    p = tfprov.run("--no-gpu", "plan", mirror.other_sep, env=ENV)
    assert "apply would stop here" in out(p) and "stack 'tf215'" in out(p), out(p)
    p = tfprov.run("--no-gpu", "apply", "-y", mirror.other_sep, env=ENV)
    assert p.returncode == 1, out(p)
    text = out(p)
    assert "/opt/tfprov/cuda/12.3.2 belongs to stack 'tf215'" in text, text
    assert "another `prefix:`" in text
    assert "Downloading" not in text and "download" not in p.stdout.lower(), text
    assert tree_hashes(tfprov.root, exclude=SIDE_FILES) == before
    assert db_rows(tfprov, "SELECT id, result FROM generations") == gens
    assert tfprov.run("--no-gpu", "verify", "tf215", env=ENV).returncode == 0


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

"""An installed tfprov finds its data without the source tree.

`cmake --install` into a temporary prefix, then the binary and its share dir
are copied to another directory (a relocated install: nothing of the prefix
or of the source tree is on the way), and validate/plan of a shipped manifest
work from there. The lookup is relative to the executable
(<bin>/../share/tfprov); no source-tree path is stored in the binary.
"""
import os
import shutil
import subprocess

import pytest

from conftest import REPO


def clean_env():
    return {k: v for k, v in os.environ.items()
            if k not in ("TFPROV_DATADIR", "TFPROV_COMPAT", "TFPROV_BENCH_REFERENCE",
                         "TFPROV_BENCH_SCRIPT")}


@pytest.fixture(scope="module")
def relocated(tmp_path_factory):
    build = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
    base = tmp_path_factory.mktemp("install")
    prefix = base / "prefix"
    p = subprocess.run(["cmake", "--install", build, "--prefix", str(prefix), "--strip"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    moved = base / "elsewhere"
    os.makedirs(moved / "bin")
    shutil.copy2(prefix / "bin" / "tfprov", moved / "bin" / "tfprov")
    shutil.copytree(prefix / "share" / "tfprov", moved / "share" / "tfprov")
    shutil.rmtree(prefix)
    return moved


def run(binary, *args, cwd="/"):
    return subprocess.run([str(binary)] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=120, env=clean_env(), cwd=cwd)


def test_installed_layout_and_no_source_path(relocated):
    share = relocated / "share" / "tfprov"
    for rel in ("data/compat.yaml", "bench/reference.yaml", "bench/bench_conv.py",
                "manifests/stable-2.15.yaml"):
        assert (share / rel).is_file(), rel
    blob = (relocated / "bin" / "tfprov").read_bytes()
    # No data path of the source tree is compiled in. (A sanitizer build keeps
    # the names of its source files for its reports; those are not data paths.)
    for sub in ("data", "manifests", "bench", "bench/bench_conv.py"):
        assert f"{REPO}/{sub}".encode() not in blob, f"the installed binary names {REPO}/{sub}"
    assert f"{REPO}\0".encode() not in blob, "the installed binary names the source tree"


def test_validate_and_plan_shipped_manifest(relocated, tmp_path):
    tfprov = relocated / "bin" / "tfprov"
    manifest = relocated / "share" / "tfprov" / "manifests" / "stable-2.15.yaml"
    p = run(tfprov, "validate", manifest)
    assert p.returncode == 0, p.stdout + p.stderr
    os.makedirs(tmp_path / "root")  # --root must exist
    # No NVIDIA driver here: plan exits 6 as apply would, unless --no-gpu.
    p = run(tfprov, "--root", tmp_path / "root", "--no-gpu", "plan", manifest)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "to add" in p.stdout and "stable-2.15" in p.stdout, p.stdout


def test_lookup_is_relative_to_the_executable(relocated, tmp_path):
    """The copy's knowledge base is the one read: without it validate names the
    path it looked for beside the binary, though the source tree still exists."""
    copy = tmp_path / "copy"
    shutil.copytree(relocated, copy)
    (copy / "share" / "tfprov" / "data" / "compat.yaml").unlink()
    manifest = copy / "share" / "tfprov" / "manifests" / "stable-2.15.yaml"
    p = run(copy / "bin" / "tfprov", "validate", manifest)
    assert p.returncode != 0, p.stdout + p.stderr
    assert str(copy / "share" / "tfprov" / "data" / "compat.yaml") in p.stdout + p.stderr


def test_explicit_datadir_variable_wins(relocated, tmp_path):
    """TFPROV_DATADIR (what a test or a packager may set) overrides the lookup."""
    alt = tmp_path / "alt"
    shutil.copytree(relocated / "share" / "tfprov", alt)
    (alt / "data" / "compat.yaml").write_text("schema: [\n")
    manifest = relocated / "share" / "tfprov" / "manifests" / "stable-2.15.yaml"
    env = clean_env()
    env["TFPROV_DATADIR"] = str(alt)
    p = subprocess.run([str(relocated / "bin" / "tfprov"), "validate", str(manifest)],
                       capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert p.returncode != 0, p.stdout + p.stderr
    assert str(alt / "data" / "compat.yaml") in p.stdout + p.stderr

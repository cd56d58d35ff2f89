"""Native conda explicit-lock installs (no conda binary on this machine).

Scenario: conda packages in both formats are built at test time: a fake
python (a wrapper of the system interpreter whose script carries the prefix
placeholder), a compiled program with the placeholder inside its binary, a
text script, a symlink, and a noarch: python package with an entry point.
An explicit lock with file:// URLs and sha256 anchors is installed into a
prefix; what must hold afterwards is checked by running the env's programs
and reading conda-meta.
"""
import hashlib
import json
import os
import subprocess

import pytest

from lib_conda import (PLACEHOLDER, File, build_package, compile_hello, demo_packages,
                       explicit_lock)
from lib_pyindex import tree_listing

BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(os.getcwd(), "build"))
TOOL = os.path.join(BUILD, "py_tool")

RECORD_FIELDS = {"name", "version", "build", "build_number", "channel", "subdir", "url", "md5",
                 "sha256", "size", "depends", "constrains", "files", "paths_data", "link",
                 "extracted_package_dir", "fn", "requested_spec"}


def install(prefix, pkgs_dir, lock):
    return subprocess.run([TOOL, "conda-install", str(prefix), str(pkgs_dir), str(lock)],
                          capture_output=True, text=True, timeout=120)


def run(path, *args):
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("fmt", ["tar.bz2", "conda"])
def test_env_from_explicit_lock_runs_with_its_real_prefix(tmp_path, fmt):
    pkgs, pyver = demo_packages(str(tmp_path / "channel"), str(tmp_path), fmt=fmt)
    lock = explicit_lock(str(tmp_path / "env.lock"), pkgs)
    prefix = tmp_path / "envs" / "demo"
    r = install(prefix, tmp_path / "pkgs", lock)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["extracted"] == 3 and result["reused"] == 0

    # The compiled program: placeholder patched in the binary, NUL padded.
    out = run(prefix / "bin" / "hello")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"prefix={prefix}", f"data={prefix}/share/hello/data.txt"]
    assert os.path.getsize(prefix / "bin" / "hello") == os.path.getsize(
        tmp_path / "pkgs" / "hello-1.0-h0_0" / "bin" / "hello")
    assert run(prefix / "bin" / "hi").stdout.startswith(f"prefix={prefix}\n")
    # The text script: placeholder replaced; no staging path anywhere.
    assert run(prefix / "bin" / "hello-sh").stdout == f"prefix={prefix}\n"
    assert ".tfprov-stage" not in (prefix / "bin" / "hello-sh").read_text()
    # noarch: python relocated into lib/pythonX.Y/site-packages; entry point works.
    assert (prefix / "lib" / f"python{pyver}" / "site-packages" / "greet" / "__init__.py").exists()
    greet = run(prefix / "bin" / "greet")
    assert greet.returncode == 0, greet.stderr
    assert greet.stdout.strip() == f"greet from {prefix}/bin/greet"
    assert (prefix / "bin" / "greet").read_text().startswith(f"#!{prefix}/bin/python\n")

    # conda-meta: one valid record per package with the fields conda reads.
    for path, sha, md5, size in pkgs:
        fn = os.path.basename(path)
        dist = fn[: -len(".tar.bz2")] if fn.endswith(".tar.bz2") else fn[: -len(".conda")]
        rec = json.loads((prefix / "conda-meta" / f"{dist}.json").read_text())
        assert RECORD_FIELDS <= set(rec), RECORD_FIELDS - set(rec)
        assert rec["sha256"] == sha and rec["md5"] == md5 and rec["size"] == size
        assert rec["fn"] == fn and rec["url"] == f"file://{path}"
        assert rec["paths_data"]["paths_version"] == 1
        for p in rec["paths_data"]["paths"]:
            assert {"_path", "path_type"} <= set(p)
            assert os.path.lexists(prefix / p["_path"])
        assert set(rec["files"]) == {p["_path"] for p in rec["paths_data"]["paths"]}
    hello = json.loads((prefix / "conda-meta" / "hello-1.0-h0_0.json").read_text())
    binrec = [p for p in hello["paths_data"]["paths"] if p["_path"] == "bin/hello"][0]
    assert binrec["file_mode"] == "binary" and binrec["prefix_placeholder"] == PLACEHOLDER
    assert binrec["sha256_in_prefix"] == hashlib.sha256(
        (prefix / "bin" / "hello").read_bytes()).hexdigest()
    history = (prefix / "conda-meta" / "history").read_text()
    assert history.startswith("==> ") and "+" in history and "::hello-1.0-h0_0" in history

    # The file list returned for the state db matches the disk.
    files = {f["path"]: f for f in result["files"]}
    assert files["bin/hello"]["sha256"] == binrec["sha256_in_prefix"]
    assert files["bin/hello"]["mode"] & 0o777 == 0o755
    assert "conda-meta/history" in files
    assert not [p for p in os.listdir(tmp_path / "envs") if p != "demo"]

    # A second install reuses the package cache and replaces the env atomically.
    r2 = install(prefix, tmp_path / "pkgs", lock)
    assert r2.returncode == 0, r2.stderr
    assert json.loads(r2.stdout)["reused"] == 3
    assert (prefix / "conda-meta" / "history").read_text().count("==> ") == 2
    assert not [p for p in os.listdir(tmp_path / "envs") if p != "demo"]


def test_binary_placeholder_too_short_is_refused_and_old_env_kept(tmp_path):
    pkgs, _ = demo_packages(str(tmp_path / "channel"), str(tmp_path))
    prefix = tmp_path / "envs" / ("long-prefix-" + "x" * 40)
    r = install(prefix, tmp_path / "pkgs", explicit_lock(str(tmp_path / "a.lock"), pkgs))
    assert r.returncode == 0, r.stderr
    before = tree_listing(str(prefix))

    short = "/opt/ph"
    bad = build_package(str(tmp_path / "channel"), "shorty", "1.0", "0", {
        "bin/shorty": File(compile_hello(str(tmp_path), short), 0o755, placeholder=short,
                           binary=True)})
    r = install(prefix, tmp_path / "pkgs", explicit_lock(str(tmp_path / "b.lock"), pkgs + [bad]))
    assert r.returncode != 0
    assert "bin/shorty" in r.stderr and "shorter prefix" in r.stderr
    assert tree_listing(str(prefix)) == before
    assert run(prefix / "bin" / "hello").stdout.startswith(f"prefix={prefix}\n")
    assert sorted(os.listdir(tmp_path / "envs")) == [prefix.name]


def test_wrong_hash_is_integrity_error(tmp_path):
    pkgs, _ = demo_packages(str(tmp_path / "channel"), str(tmp_path))
    path, sha, md5, size = pkgs[1]
    pkgs[1] = (path, "0" * 64, md5, size)
    r = install(tmp_path / "env", tmp_path / "pkgs", explicit_lock(str(tmp_path / "l"), pkgs))
    assert r.returncode == 5, r.stderr
    assert "hello-1.0-h0_0" in r.stderr and "sha256 mismatch" in r.stderr
    assert not (tmp_path / "env").exists()


def test_md5_only_lock_line_is_accepted(tmp_path):
    pkgs, _ = demo_packages(str(tmp_path / "channel"), str(tmp_path))
    r = install(tmp_path / "env", tmp_path / "pkgs",
                explicit_lock(str(tmp_path / "l"), pkgs, md5=True))
    assert r.returncode == 0, r.stderr


def test_legacy_has_prefix_package(tmp_path):
    pkgs, _ = demo_packages(str(tmp_path / "channel"), str(tmp_path))
    legacy = build_package(str(tmp_path / "channel"), "legacy", "1.0", "0", {
        "bin/legacy-sh": File(f"#!/bin/sh\necho {PLACEHOLDER}\n", 0o755, placeholder=PLACEHOLDER),
        "etc/legacy.conf": File("static\n")}, legacy=True)
    prefix = tmp_path / "env"
    r = install(prefix, tmp_path / "pkgs", explicit_lock(str(tmp_path / "l"), pkgs + [legacy]))
    assert r.returncode == 0, r.stderr
    assert run(prefix / "bin" / "legacy-sh").stdout == f"{prefix}\n"
    rec = json.loads((prefix / "conda-meta" / "legacy-1.0-0.json").read_text())
    assert sorted(rec["files"]) == ["bin/legacy-sh", "etc/legacy.conf"]


@pytest.mark.parametrize("member,why", [
    ("../evil", "'..' component"),
    ("bin/link", "symlink target leaves the destination"),
])
def test_unsafe_archive_entries_are_refused(tmp_path, member, why):
    extra = {member: File("x") if member == "../evil" else File(symlink="../../../etc/passwd")}
    bad = build_package(str(tmp_path / "channel"), "evil", "1.0", "0",
                        {"share/ok": File("ok")}, extra_members=extra)
    r = install(tmp_path / "env", tmp_path / "pkgs", explicit_lock(str(tmp_path / "l"), [bad]))
    assert r.returncode == 5, r.stderr
    assert why in r.stderr
    assert not (tmp_path / "env").exists() and not (tmp_path / "evil").exists()

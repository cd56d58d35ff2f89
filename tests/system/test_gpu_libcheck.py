"""Verify's loader check: every library TF loads, from the
stack's directories, in a child process.

${TFPROV_BUILD_DIR}/stubs/cuda12 and cuda11 hold STAND-IN libraries with the
real sonames and dependency edges (no GPU exists here, and the tests must not
need NVIDIA's multi-GB toolkits); stubs/broken holds a library whose
constructor crashes. Where the machine has real NVIDIA libraries (CUDA 13 in
/usr/local/cuda, Debian's CUDA 11.8 runtime and cuBLAS), they are checked too.
"""
import os

import pytest

from lib_gpu import DEBIAN_LIB, REAL_CUDA, STUBS, clean_env, copy_dir, have_system_lib, run_tool

CU12 = os.path.join(STUBS, "cuda12")
CU11 = os.path.join(STUBS, "cuda11")


def tf_sonames(cuda, cudnn):
    rc, names = run_tool(["tf-sonames", str(cuda), str(cudnn)], clean_env())
    assert rc == 0
    return names


def libcheck(dirs, sonames, system=False):
    args = ["libcheck"] + (["--system"] if system else []) + list(dirs) + ["--"] + list(sonames)
    return run_tool(args, clean_env(), timeout=300)


def by_name(out):
    return {i["soname"]: i for i in out["items"]}


def test_tf_lists_follow_compat_facts():
    cu12 = tf_sonames(12, 8)
    # The knowledge base's list (data/compat.yaml sonames), the one validate checks
    # the artifacts against; the loader retries, so the order does not matter.
    assert sorted(cu12[:8]) == sorted([
        "libcudart.so.12", "libnvJitLink.so.12", "libcublasLt.so.12", "libcublas.so.12",
        "libcufft.so.11", "libcurand.so.10", "libcusolver.so.11", "libcusparse.so.12"])
    assert "libcudnn.so.8" in cu12 and "libcudnn_cnn_infer.so.8" in cu12
    cu11 = tf_sonames(11, 8)
    assert "libcudart.so.11.0" in cu11 and "libcufft.so.10" in cu11 and "libnvJitLink.so.12" not in cu11
    assert "libcudnn_graph.so.9" in tf_sonames(12, 9)
    rc, _ = run_tool(["tf-sonames", "10", "7"], clean_env())
    assert rc == 64


@pytest.mark.parametrize("cuda,d", [(12, CU12), (11, CU11)])
def test_complete_stack_loads(cuda, d):
    names = tf_sonames(cuda, 8)
    rc, out = libcheck(["/nonexistent/first", d], names)
    assert rc == 0 and out["nfail"] == 0 and out["child"] == ""
    assert out["searched"] == "/nonexistent/first:" + d
    for it in out["items"]:
        assert it["ok"] and it["state"] == "ok" and not it["from_system"]
        assert it["path"] == os.path.join(d, it["soname"])
        assert it["advice"] is None


def test_missing_cudnn_names_file_and_placement_fix(tmp_path):
    d = copy_dir(CU12, str(tmp_path / "lib64"))
    os.unlink(os.path.join(d, "libcudnn.so.8"))
    rc, out = libcheck([d], tf_sonames(12, 8))
    assert rc == 8 and out["nfail"] == 1
    it = by_name(out)["libcudnn.so.8"]
    assert it["state"] == "not-found" and it["path"] == ""
    assert "cudnn.placement" in it["advice"] and "tfprov apply" in it["advice"]
    assert out["searched"] == d
    # Everything else still loads, the sub-libraries included.
    assert all(i["ok"] for n, i in by_name(out).items() if n != "libcudnn.so.8")


@pytest.mark.skipif(have_system_lib("libcublasLt.so.12"), reason="a system libcublasLt.so.12 would satisfy the dependency")
def test_missing_dependency_is_a_load_failure_naming_it(tmp_path):
    d = copy_dir(CU12, str(tmp_path / "lib64"))
    os.unlink(os.path.join(d, "libcublasLt.so.12"))
    rc, out = libcheck([d], ["libcublas.so.12", "libcublasLt.so.12"])
    assert rc == 8
    items = by_name(out)
    assert items["libcublasLt.so.12"]["state"] == "not-found"
    assert items["libcublas.so.12"]["state"] == "load-failed"
    assert items["libcublas.so.12"]["path"] == os.path.join(d, "libcublas.so.12")
    assert "libcublasLt.so.12: cannot open shared object file" in items["libcublas.so.12"]["error"]
    assert "does not load" in items["libcublas.so.12"]["advice"]


def test_dependency_in_another_dir_resolves_whatever_the_order(tmp_path):
    # cuBLAS in one dir, cuBLASLt in another (two LD_LIBRARY_PATH entries):
    # RUNPATH=$ORIGIN cannot find it, the already-loaded soname can.
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    os.link(os.path.join(CU12, "libcublas.so.12"), a / "libcublas.so.12")
    os.link(os.path.join(CU12, "libcublasLt.so.12"), b / "libcublasLt.so.12")
    rc, out = libcheck([str(a), str(b)], ["libcublas.so.12", "libcublasLt.so.12"])
    assert rc == 0, out
    assert by_name(out)["libcublas.so.12"]["path"] == str(a / "libcublas.so.12")


def test_corrupt_file_reports_loader_error(tmp_path):
    d = copy_dir(CU12, str(tmp_path / "lib64"))
    target = os.path.join(d, "libcufft.so.11")
    os.unlink(target)
    with open(target, "wb") as f:
        f.write(b"\x7fELF truncated by a bad download")
    rc, out = libcheck([d], ["libcufft.so.11", "libcudart.so.12"])
    assert rc == 8
    it = by_name(out)["libcufft.so.11"]
    assert it["state"] == "load-failed" and it["path"] == target
    assert "libcufft.so.11" in it["error"]  # dlerror names the file: "... file too short" / "invalid ELF header"
    assert by_name(out)["libcudart.so.12"]["ok"]


def test_crashing_library_kills_only_the_child():
    broken = os.path.join(STUBS, "broken")
    names = tf_sonames(12, 8)
    rc, out = libcheck([broken, CU12], names)
    assert rc == 8 and out["nfail"] == 1
    it = by_name(out)["libcufft.so.11"]
    assert it["state"] == "crashed" and it["path"] == os.path.join(broken, "libcufft.so.11")
    assert it["error"].startswith("loading it: ")
    assert out["child"] != ""
    assert "corrupt" in it["advice"]
    # The check restarted without it: every library after it was still checked.
    assert all(i["ok"] for n, i in by_name(out).items() if n != "libcufft.so.11")


def test_system_fallback_is_reported_as_such(tmp_path):
    rc, out = libcheck([str(tmp_path)], ["libc.so.6", "libdoesnotexist.so.1"], system=True)
    items = by_name(out)
    assert items["libc.so.6"]["ok"] and items["libc.so.6"]["from_system"]
    assert items["libc.so.6"]["path"].endswith("libc.so.6")
    assert items["libdoesnotexist.so.1"]["state"] == "not-found"
    assert "cannot open shared object file" in items["libdoesnotexist.so.1"]["error"]
    # Without --system, the same libc is not part of the stack.
    rc, out = libcheck([str(tmp_path)], ["libc.so.6"])
    assert rc == 8 and by_name(out)["libc.so.6"]["error"] == "not found in any searched directory"


@pytest.mark.skipif(not os.path.exists(os.path.join(REAL_CUDA, "libcudart.so.13")),
                    reason="no real CUDA 13 toolkit in /usr/local/cuda")
def test_real_cuda13_toolkit_with_cudnn9_loads():
    names = tf_sonames(13, 9 if os.path.exists(os.path.join(REAL_CUDA, "libcudnn.so.9")) else 0)
    rc, out = libcheck([REAL_CUDA], names)
    assert rc == 0, [(i["soname"], i["error"]) for i in out["items"] if not i["ok"]]
    for it in out["items"]:
        assert os.path.realpath(it["path"]) == os.path.realpath(os.path.join(REAL_CUDA, it["soname"]))


@pytest.mark.skipif(not os.path.exists(os.path.join(DEBIAN_LIB, "libcudart.so.11.0")),
                    reason="Debian non-free libcudart11.0 not installed (scripts/install-deps.sh)")
def test_real_debian_cuda118_runtime_and_gaps():
    names = tf_sonames(11, 8)
    rc, out = libcheck([DEBIAN_LIB], names)
    items = by_name(out)
    assert items["libcudart.so.11.0"]["ok"]
    for so, it in items.items():
        present = os.path.exists(os.path.join(DEBIAN_LIB, so))
        if not present:
            assert it["state"] == "not-found", so
    if os.path.exists(os.path.join(DEBIAN_LIB, "libcublas.so.11")):
        assert items["libcublas.so.11"]["ok"] and items["libcublasLt.so.11"]["ok"]
    # Debian ships no cuDNN: the check says where to look.
    assert items["libcudnn.so.8"]["state"] == "not-found"
    assert "cudnn.placement" in items["libcudnn.so.8"]["advice"]
    assert rc == 8


def test_the_checking_child_does_not_carry_the_callers_memory():
    """A cold apply's verify ran its check in a fork of a process that had
    decoded gigabytes: the child held a copy of those pages and added the
    libraries' on top (147 MiB for Debian's CUDA 11.8 runtime and cuBLAS).
    The child now execs the binary afresh, so its peak is the larger of the
    two, not their sum. `--ballast` makes the caller hold MiB it has touched."""
    libs = os.path.join(DEBIAN_LIB, "libcublasLt.so.11")
    assert os.path.exists(libs), "install-deps installs Debian's libcublaslt11"
    names = ["libcudart.so.11.0", "libcublasLt.so.11", "libcublas.so.11"]

    def peak(ballast):
        rc, out = run_tool(["libcheck", "--ballast", str(ballast), DEBIAN_LIB, "--"] + names,
                           clean_env(), timeout=300)
        assert rc == 0 and out["nfail"] == 0, out
        return out["child_maxrss_kib"] / 1024

    alone = peak(0)
    assert alone > 40, f"cuBLAS should cost the child tens of MiB, it cost {alone:.1f}"
    held = peak(150)
    # Inherited + loaded would be about 150 + alone; fresh, it is about max(150, alone).
    assert held < 150 + alone / 2, (held, alone)

"""The GPU stack through the real binary: driver precondition, full apply,
idempotence, WSL2, drift repair.

STAND-INS: the CUDA 12.3.2 / cuDNN 8.9.7.29 archives hold stub libraries with
NVIDIA's sonames (make_stack.py), and wherever a driver version or GPU is
needed the NVML answering tfprov's probe is the stand-in
build/stubs/driver/libnvidia-ml.so.1 (TFPROV_STUB_DRIVER / TFPROV_STUB_GPUS).
The "no driver" test uses this machine's real NVML (Debian's libnvidia-ml1,
which answers Driver Not Loaded without a GPU) when it is installed.
"""
import os
import re
import shutil

import pytest

from lib_gpu import have_system_lib
from lib_provision import (SIDE_FILES, Mirror, db_rows, missing_recorded, no_stub_env, out,
                           stub_driver_env, temp_leftovers, tree_hashes)

OLD_DRIVER = "470.57.02"
CUDA = "12.3.2"
CUDA_MIN = "545.23.08"  # CUDA 12.3 GA's Linux minimum (data/compat.yaml)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("mirror")
    with Mirror(d / "www") as m:
        m.manifest = m.stack(d / "demo.yaml", name="demo")
        m.other = m.stack(d / "other.yaml", name="other",
                          prefix="/opt/other")
        m.skip = m.stack(d / "skip.yaml", name="demo", driver_policy="skip")
        yield m


def _assert_exit6_names(p, *needles):
    text = out(p)
    assert p.returncode == 6, text
    for n in needles:
        assert n in text, f"{n!r} not in:\n{text}"


def test_driver_too_old_fresh_root_unchanged(tfprov, mirror):
    """Stand-in NVML reports 470.57.02 for a CUDA 12.3.2 stack (policy require) on
    an empty root: exit 6 naming found version, minimum and why; the root stays
    byte-for-byte what it was (empty: not even a state db)."""
    before = tree_hashes(tfprov.root)
    n0 = len(mirror.srv.requests)
    p = tfprov.run("apply", "-y", mirror.manifest, env=stub_driver_env(OLD_DRIVER))
    _assert_exit6_names(p, OLD_DRIVER, CUDA_MIN, "too old for CUDA " + CUDA)
    assert len(mirror.srv.requests) == n0, "a failed precondition must not download"
    assert tree_hashes(tfprov.root) == before, \
        "exit 6 must leave the root byte-for-byte unchanged (a state db was created)"


def test_driver_too_old_existing_state_unchanged(tfprov, mirror):
    """Stand-in NVML at 470.57.02: with another stack already applied (so a state
    db exists), applying 'demo' stops with exit 6 and every file under the root,
    state.db included, hashes the same before and after. Only the flock file,
    which holds the last holder's pid and time by design, is excluded."""
    tfprov.run("--no-gpu", "apply", "-y", mirror.other, check=0)
    before = tree_hashes(tfprov.root, exclude=("var/lib/tfprov/lock",))
    gens = db_rows(tfprov, "SELECT id, result FROM generations")
    p = tfprov.run("apply", "-y", mirror.manifest, env=stub_driver_env(OLD_DRIVER))
    _assert_exit6_names(p, OLD_DRIVER, CUDA_MIN)
    after = tree_hashes(tfprov.root, exclude=("var/lib/tfprov/lock",))
    assert after == before
    assert db_rows(tfprov, "SELECT id, result FROM generations") == gens
    assert db_rows(tfprov, "SELECT name FROM stacks") == [("other",)]


def test_minor_version_compat_driver_warns_and_proceeds(tfprov, mirror):
    """Stand-in NVML at 535.104.05: below CUDA 12.3's minimum but above the 12.x
    minor-version-compatibility floor, so apply proceeds with a warning that
    says so (not exit 6, not silence)."""
    p = tfprov.run("apply", "-y", mirror.manifest, env=stub_driver_env("535.104.05"))
    assert p.returncode == 0, out(p)
    assert "minor-version" in out(p) and "535.104.05" in out(p)


@pytest.mark.skipif(not have_system_lib("libnvidia-ml.so.1"),
                    reason="needs the real NVML (Debian libnvidia-ml1)")
def test_no_driver_real_nvml(tfprov, mirror):
    """The REAL NVML of this machine (no GPU, no kernel module): nvmlInit_v2 says
    Driver Not Loaded; apply exits 6 naming that, and the root is unchanged."""
    p = tfprov.run("apply", "-y", mirror.manifest, env=no_stub_env())
    _assert_exit6_names(p, "no NVIDIA driver found", "Driver Not Loaded")
    assert "never installs a kernel driver" in out(p)
    assert not os.path.exists(tfprov.path("/opt/tfprov"))


def test_no_gpu_flag_skips_loudly_then_no_changes(tfprov, mirror):
    """No driver at all (real NVML answering Driver Not Loaded, or none): with
    --no-gpu the apply proceeds, says SKIPPED loudly and never claims the driver
    passed; a second apply says "No changes" and exits 0 without downloading."""
    env = no_stub_env()
    p = tfprov.run("--no-gpu", "apply", "-y", mirror.manifest, env=env)
    assert p.returncode == 0, out(p)
    text = out(p)
    assert "SKIPPED" in text and "--no-gpu" in text
    assert not re.search(r"driver: (ok|passed|done)", text), text
    assert "<= driver" in p.stdout
    assert os.path.exists(tfprov.path(f"/opt/tfprov/cuda/{CUDA}/lib64/libcudart.so.12"))
    assert os.path.exists(tfprov.path(f"/opt/tfprov/cuda/{CUDA}/lib/libcudnn.so.8"))
    assert missing_recorded(tfprov) == []
    assert temp_leftovers(tfprov.root) == []
    n0 = len(mirror.srv.requests)
    # SQLite's own -wal/-shm side files are not state; the db itself is compared.
    side = SIDE_FILES
    before = tree_hashes(tfprov.root, exclude=side)
    p2 = tfprov.run("--no-gpu", "apply", "-y", mirror.manifest, env=env)
    assert p2.returncode == 0, out(p2)
    assert "No changes" in p2.stdout
    assert "SKIPPED" in out(p2)
    assert len(mirror.srv.requests) == n0
    assert tree_hashes(tfprov.root, exclude=side) == before
    p3 = tfprov.run("--no-gpu", "plan", "--detailed-exitcode", mirror.manifest, env=env)
    assert p3.returncode == 0, out(p3)


def test_driver_policy_skip_in_manifest(tfprov, mirror):
    """driver.policy: skip (no GPU on this machine, real NVML or none): proceeds,
    and the GPU checks are reported as SKIPPED naming the policy."""
    p = tfprov.run("apply", "-y", mirror.skip, env=no_stub_env())
    assert p.returncode == 0, out(p)
    assert "SKIPPED" in out(p) and "driver.policy: skip" in out(p)


def test_gpu_without_kernels_exit6(tfprov, mirror):
    """Stand-in NVML with a new enough driver and one GPU "Tesla K80" (compute
    capability 3.7), which TF 2.15 has no kernels for: exit 6 naming the GPU and
    its capability; nothing placed."""
    p = tfprov.run("apply", "-y", mirror.manifest,
                   env=stub_driver_env("550.54.14", gpus="Tesla K80:3.7"))
    _assert_exit6_names(p, "Tesla K80", "3.7", "no kernels")
    assert not os.path.exists(tfprov.path("/opt/tfprov"))


def test_supported_gpu_passes(tfprov, mirror):
    """Stand-in NVML: driver 550.54.14 and an RTX 4070 Ti (8.9): the driver
    check passes and says what it read; the stack is applied."""
    p = tfprov.run("apply", "-y", mirror.manifest,
                   env=stub_driver_env("550.54.14", gpus="NVIDIA GeForce RTX 4070 Ti:8.9"))
    assert p.returncode == 0, out(p)
    assert "550.54.14" in out(p) and "SKIPPED" not in out(p)


def _wsl_env(tmp_path, **kw):
    pv = tmp_path / "proc-version"
    pv.write_text("Linux version 5.15.153.1-microsoft-standard-WSL2 (root@1c602f52c2e4) "
                  "(gcc (GCC) 11.2.0) #1 SMP Fri Mar 29 23:14:13 UTC 2024\n")
    env = no_stub_env(**kw)
    env["TFPROV_PROC_VERSION"] = str(pv)
    return env


def test_wsl2_platform_plan_reads_windows_driver(tfprov, mirror, tmp_path):
    """platform: wsl2 on a WSL2 kernel (TFPROV_PROC_VERSION names Microsoft's
    kernel): plan shows the driver as a read on the Windows host, never an
    install."""
    m = tmp_path / "wsl.yaml"
    m.write_text(open(mirror.manifest).read().replace("platform: linux-x86_64",
                                                        "platform: wsl2"))
    p = tfprov.run("plan", str(m), env=_wsl_env(tmp_path))
    assert p.returncode == 6, out(p)  # no driver here: plan fails as apply would
    line = [ln for ln in p.stdout.splitlines() if "driver" in ln][0]
    assert line.strip().startswith("<= driver"), line
    assert "Windows host" in line
    assert not re.search(r"^\s*[+~-].*driver", p.stdout, re.M)


def test_wsl2_kernel_linux_platform_plan_names_windows_host(tfprov, mirror, tmp_path):
    """platform: linux-x86_64 run on a WSL2 kernel: the machine is WSL2, so the
    plan must still show the driver as a read on the Windows host (a Linux
    driver must never be planned there)."""
    p = tfprov.run("plan", mirror.manifest, env=_wsl_env(tmp_path))
    assert p.returncode == 6, out(p)  # no driver here: plan fails as apply would
    line = [ln for ln in p.stdout.splitlines() if "driver" in ln][0]
    assert line.strip().startswith("<= driver"), line
    assert "Windows host" in line, line


def test_deleted_cudnn_verify_then_repair_from_cache(tfprov, mirror):
    """(stand-in libraries) Delete one placed libcudnn: `verify` names it and
    exits 8; `apply` restores it from the cache without any download."""
    tfprov.run("--no-gpu", "apply", "-y", mirror.manifest, env=no_stub_env(), check=0)
    lib = f"/opt/tfprov/cuda/{CUDA}/lib/libcudnn_ops_infer.so.8.9.7"
    assert os.path.isfile(tfprov.path(lib)), os.listdir(os.path.dirname(tfprov.path(lib)))
    os.unlink(tfprov.path(lib))
    v = tfprov.run("--no-gpu", "verify", "demo", env=no_stub_env())
    assert v.returncode == 8, out(v)
    assert "libcudnn_ops_infer.so.8.9.7" in out(v)
    n0 = len(mirror.srv.requests)
    p = tfprov.run("--no-gpu", "apply", "-y", mirror.manifest, env=no_stub_env())
    assert p.returncode == 0, out(p)
    assert len(mirror.srv.requests) == n0, mirror.srv.requests[n0:]
    assert os.path.isfile(tfprov.path(lib))
    assert missing_recorded(tfprov) == []
    v2 = tfprov.run("--no-gpu", "verify", "demo", env=no_stub_env())
    assert v2.returncode == 0, out(v2)

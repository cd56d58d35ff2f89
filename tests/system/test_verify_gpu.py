"""`tfprov verify` on a CUDA stack: files, the libraries TF loads, and the GPU.

What the machine looks like: a --root sandbox holding a CUDA 12.3.2 + cuDNN
8.9.7 stack applied from a loopback mirror (lib_http) whose NVIDIA-layout
archives carry STAND-IN libraries with the real sonames (make_stack.py). The GPU
side is either
  * REAL: this machine as it is, no GPU; Debian's real libnvidia-ml.so.1
    (libnvidia-ml1) answers nvmlInit_v2 = 9 "Driver Not Loaded"; or
  * STAND-IN: build/stubs/driver's NVML reporting driver 545.23.08 and an
    RTX 4070 Ti, so the native probe runs through the stack's stand-in
    libcudart/libcudnn, which compute on the CPU.
Each test says which. What must hold: the exit code contract in verify.c's header.
"""
import os

import pytest

from lib_gpu import has_nvidia_gpu, have_system_lib
from lib_stack import applied_stack, out, real_no_gpu_env, standin_gpu_env

CUDNN_FILE = "/opt/tfprov/cuda/12.3.2/lib/libcudnn.so.8.9.7"

real_machine = pytest.mark.skipif(
    has_nvidia_gpu() or not have_system_lib("libnvidia-ml.so.1"),
    reason="needs the real no-GPU machine with Debian's libnvidia-ml1")


@real_machine
def test_real_no_gpu_required_stack_fails_at_driver_layer(tfprov, tmp_path, mirror):
    """REAL NVML, no GPU, driver.policy: require -> 8; files and libraries still pass."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("verify", "demo", env=real_no_gpu_env(), check=8)
    o = out(p)
    assert "files: all placed files are intact" in o
    assert "libraries: all" in o and "load from" in o
    assert "FAILED at the driver layer: no NVIDIA driver" in o
    assert "Driver Not Loaded (9)" in o
    assert "matches the CPU reference" not in o and "verify: ok" not in o


@real_machine
def test_real_no_gpu_allowed_is_skipped_loudly(tfprov, tmp_path, mirror):
    """REAL NVML, --no-gpu -> 0, with the GPU check reported as SKIPPED on stderr."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("--no-gpu", "verify", "demo", env=real_no_gpu_env(), check=0)
    assert "GPU compute: SKIPPED (--no-gpu): driver: no NVIDIA driver" in p.stderr
    assert "NOT proven to compute on a GPU" in p.stderr
    assert "passed" not in out(p) and "verify: ok" not in out(p)


@real_machine
def test_policy_skip_manifest_is_skipped(tfprov, tmp_path, mirror):
    """REAL NVML, driver.policy: skip in the manifest -> 0 without --no-gpu, SKIPPED."""
    applied_stack(tfprov, tmp_path, mirror, policy="skip")
    p = tfprov.run("verify", env=real_no_gpu_env(), check=0)
    assert "SKIPPED (the manifest's driver.policy: skip)" in p.stderr


def test_standin_gpu_probe_matches_cpu_reference(tfprov, tmp_path, mirror):
    """STAND-IN NVML + the stack's stand-in runtime/cuDNN: the probe's output matches."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("verify", "demo", env=standin_gpu_env(), check=0)
    assert "output matches the CPU reference" in p.stdout
    assert "through cuDNN 8907" in p.stdout and "compute capability 8.9" in p.stdout
    assert "verify: ok" in p.stdout


def test_standin_wrong_output_is_the_compare_layer(tfprov, tmp_path, mirror):
    """STAND-IN cuDNN computing one wrong value -> 8, layer compare."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("verify", env=standin_gpu_env(TFPROV_STUB_CUDNN_CORRUPT="1"), check=8)
    assert "FAILED at the compare layer" in p.stderr
    assert "differs from the CPU reference" in p.stderr


def test_standin_runtime_without_driver_is_the_driver_layer(tfprov, tmp_path, mirror):
    """STAND-IN NVML sees a GPU but the runtime answers 35 (driver too old) -> 8, even with
    --no-gpu: a driver is there, and it does not serve this CUDA."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("verify", env=standin_gpu_env(TFPROV_STUB_CUDA_ERROR="35"), check=8)
    assert "FAILED at the driver layer: driver: cudaGetDeviceCount returned 35" in p.stderr
    assert "insufficient for CUDA runtime version" in p.stderr


def test_standin_nvml_version_mismatch_is_reboot(tfprov, tmp_path, mirror):
    """STAND-IN NVML answering 18 (driver/library version mismatch) -> 7, reboot."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("verify", env=standin_gpu_env(TFPROV_STUB_NVML_INIT="18"), check=7)
    assert "Driver/library version mismatch" in p.stderr
    assert "reboot" in p.stderr


def test_separate_cudnn_prefix_is_searched(tfprov, tmp_path, mirror):
    """STAND-IN GPU; cuDNN placement separate: its own lib dir is on the search path."""
    applied_stack(tfprov, tmp_path, mirror, placement="separate")
    p = tfprov.run("verify", env=standin_gpu_env(), check=0)
    assert "/opt/tfprov/cudnn/8.9.7.29-cuda12.3.2/lib" in p.stdout
    assert "output matches the CPU reference" in p.stdout


def test_deleted_cudnn_is_named_and_apply_restores_it_from_cache(tfprov, tmp_path, mirror):
    """Files only (--no-gpu, REAL no-GPU machine or not): a deleted libcudnn is an X, the
    loader check names libcudnn.so.8 with the placement advice, exit 8; apply restores
    it from the cache: the loopback server sees no new archive request."""
    m = applied_stack(tfprov, tmp_path, mirror)
    os.unlink(tfprov.path(CUDNN_FILE))
    p = tfprov.run("--no-gpu", "verify", "demo", env=real_no_gpu_env(), check=8)
    assert f"X {CUDNN_FILE}" in p.stderr
    assert "library libcudnn.so.8: not-found" in p.stderr
    assert "searched: " + tfprov.path("/opt/tfprov/cuda/12.3.2/lib64") in p.stderr
    assert "cudnn.placement" in p.stderr
    assert "GPU compute: NOT CHECKED" in p.stderr
    before = len(mirror.requests)
    tfprov.run("--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), check=0)
    fetched = [r for r in mirror.requests[before:] if r[0] == "GET"]
    assert fetched == [], f"apply downloaded again: {fetched}"
    assert os.path.isfile(tfprov.path(CUDNN_FILE))
    tfprov.run("--no-gpu", "verify", "--deep", "demo", env=real_no_gpu_env(), check=0)


def test_broken_library_crash_is_contained(tfprov, tmp_path, mirror):
    """A placed libcufft replaced by one whose constructor crashes (STAND-IN from
    build/stubs/broken): verify survives, names it, exits 8."""
    applied_stack(tfprov, tmp_path, mirror)
    from lib_gpu import STUBS
    lib = os.path.realpath(tfprov.path("/opt/tfprov/cuda/12.3.2/lib/libcufft.so.11"))
    os.unlink(lib)
    with open(os.path.join(STUBS, "broken", "libcufft.so.11"), "rb") as src, open(lib, "wb") as dst:
        dst.write(src.read())
    os.chmod(lib, 0o755)
    p = tfprov.run("--no-gpu", "verify", env=real_no_gpu_env(), check=8)
    assert "library libcufft.so.11: crashed" in p.stderr
    assert "U /opt/tfprov/cuda/12.3.2/lib/" + os.path.basename(lib) in p.stderr

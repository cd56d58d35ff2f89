"""A CUDA 11.8 stack whose runtime is NVIDIA's real libcudart, repackaged in
NVIDIA's redist layout, installed and verified by tfprov.

What is real: libcudart.so.11.8.89 from Debian's non-free libcudart11.0 (the
CUDA 11.8 runtime NVIDIA ships), packed into cuda_cudart-linux-x86_64-11.8.89-
archive.tar.xz exactly as NVIDIA names and lays it out, pinned by its sha256,
served on loopback, placed by the cuda step. STAND-INS: the other libraries
(cuBLAS is 670 MB here, too big to repack in a test; cuFFT, cuRAND, cuSOLVER,
cuSPARSE, cuDNN are not in Debian) and the NVML that reports a driver, because
this machine has no GPU. With no kernel driver the real runtime fails the way
it fails on a user's machine whose driver is missing or too old:
cudaGetDeviceCount returns 35, and verify must say so at the right layer.
"""
import hashlib
import os
import subprocess
import sys

import pytest

from lib_gpu import STUBS, has_nvidia_gpu
from lib_http import HttpServer
from lib_stack import MAKE_STACK, out, real_no_gpu_env, standin_gpu_env

REAL = "/usr/lib/x86_64-linux-gnu/libcudart.so.11.0"

pytestmark = pytest.mark.skipif(
    not os.path.exists(REAL) or has_nvidia_gpu(),
    reason="needs Debian's libcudart11.0 (scripts/install-deps.sh) on a machine without a GPU")


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _stubs_with_real_cudart(tmp_path):
    d = tmp_path / "libs11"
    d.mkdir()
    for fn in os.listdir(os.path.join(STUBS, "cuda11")):
        src = os.path.join(STUBS, "cuda11", fn)
        if fn.startswith("libcudart"):
            src = os.path.realpath(REAL)
        os.symlink(src, d / fn)
    return d


def test_real_cuda_11_8_runtime_placed_and_verified(tfprov, tmp_path):
    libs = _stubs_with_real_cudart(tmp_path)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with HttpServer(root=str(mirror)) as srv:
        m = tmp_path / "cuda118.yaml"
        subprocess.run([sys.executable, MAKE_STACK, "--stubs", str(libs), "--cuda", "11.8.0",
                        "--cudnn", "8.6.0.163", "--cudnn-variant", "cuda11",
                        "--tensorflow", "2.12.0", "--python", "3.9", "--name", "real118",
                        "--out", str(mirror), "--url-base", srv.url(""), "--manifest", str(m),
                        "--driver-policy", "require"],
                       check=True, capture_output=True, timeout=120)
        tfprov.run("--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), check=0, timeout=300)

    lib = tfprov.path("/opt/tfprov/cuda/11.8.0/lib")
    placed = os.path.join(lib, "libcudart.so.11.0")
    assert os.path.islink(placed)
    # Byte for byte NVIDIA's runtime, reached through the soname link.
    assert _sha(os.path.realpath(placed)) == _sha(os.path.realpath(REAL))

    # Files and libraries: the real runtime loads from the stack's own lib64.
    p = tfprov.run("--no-gpu", "verify", "real118", env=real_no_gpu_env(), check=0)
    assert "libraries: all" in out(p) and "/opt/tfprov/cuda/11.8.0/lib64" in out(p), out(p)

    # A (stand-in) driver that reports a GPU: the native probe now calls the REAL
    # runtime, which has no kernel driver to talk to and answers 35.
    p = tfprov.run("verify", "real118", env=standin_gpu_env(TFPROV_STUB_CUDA="11080"), check=8)
    assert "cudaGetDeviceCount returned 35" in out(p), out(p)
    assert "insufficient for CUDA runtime version" in out(p), out(p)

"""Helpers for test_verify_gpu.py, test_bench_cmd.py and test_doctor.py.

A stack is built the way scripts/demo.sh builds the demo: make_stack.py
writes NVIDIA-layout archives holding the STAND-IN libraries of
build/stubs/<dir> (real sonames, no GPU code) plus a manifest pinning them,
served from a loopback HttpServer (lib_http) so the tests can count requests.

GPU environments for the binary:
  real_no_gpu_env()   the machine as it is: Debian's real libnvidia-ml.so.1
                      (libnvidia-ml1) answers nvmlInit_v2 = 9 "Driver Not
                      Loaded", and there is no /proc/driver/nvidia.
  standin_gpu_env()   the STAND-IN NVML of build/stubs/driver on
                      LD_LIBRARY_PATH reporting a driver and one GPU; the
                      stack's own stand-in libcudart/libcudnn compute on the CPU.
"""
import os
import subprocess
import sys

from lib_gpu import STUBS, clean_env, has_nvidia_gpu

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAKE_STACK = os.path.join(REPO, "tests", "fixtures", "make_stack.py")

GPU_NAME = "NVIDIA GeForce RTX 4070 Ti"


def real_no_gpu_env(**extra):
    """The real machine: no loader path to stand-ins, no /proc/driver/nvidia override."""
    env = clean_env(**extra)
    env["TFPROV_PROC_DRIVER_NVIDIA"] = "/nonexistent/proc/driver/nvidia"
    return env


def standin_gpu_env(gpus=GPU_NAME + ":8.9", **extra):
    """STAND-IN NVML: driver 545.23.08 supporting CUDA 12.3, the given GPUs."""
    base = dict(LD_LIBRARY_PATH=os.path.join(STUBS, "driver"), TFPROV_STUB_DRIVER="545.23.08",
                TFPROV_STUB_CUDA="12030", TFPROV_STUB_GPUS=gpus)
    base.update(extra)
    return clean_env(**base)


def make_stack(out, server, manifest, name="demo", stubs="cuda12", cuda="12.3.2",
               cudnn="8.9.7.29", extra_yaml="", placement="merge", policy="require",
               python="3.10"):
    """Writes archives under out (served by server.root) and a manifest; returns its path."""
    subprocess.run([sys.executable, MAKE_STACK, "--stubs", os.path.join(STUBS, stubs),
                    "--cuda", cuda, "--cudnn", cudnn, "--out", str(out),
                    "--url-base", server.url(""), "--manifest", str(manifest), "--name", name,
                    "--placement", placement, "--driver-policy", policy, "--python", python,
                    "--extra-yaml", extra_yaml], check=True, capture_output=True, timeout=120)
    return str(manifest)


def no_real_gpu():
    return not has_nvidia_gpu()


def out(p):
    """stdout and stderr of a CompletedProcess, for messages that may go to either."""
    return p.stdout + p.stderr


def applied_stack(tfprov, tmp_path, server, **kw):
    """Builds the mirror under tmp_path/mirror (served by server) and applies it with
    --no-gpu into tfprov's root. Returns the manifest path."""
    m = make_stack(server.root, server, tmp_path / "stack.yaml", **kw)
    tfprov.run("--no-gpu", "apply", "-y", m, env=real_no_gpu_env(), check=0, timeout=300)
    return m

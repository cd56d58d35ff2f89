"""Helpers for the GPU system tests (test_gpu_*.py).

These machines have no NVIDIA GPU. The tests drive gpu_tool, which calls the
engine's gpu_probe / libcheck / convprobe exactly as tfprov does, against:
  * STAND-IN libraries built by tests/fixtures/fixtures.cmake with NVIDIA's
    real sonames (${TFPROV_BUILD_DIR}/stubs/...), standing in for hardware the
    machine lacks, configured through TFPROV_STUB_* variables;
  * the real NVIDIA libraries where the machine has them (Debian non-free
    libnvidia-ml1 / libcudart11.0 / libcublas11, CUDA 13 in /usr/local/cuda),
    which fail the way they fail on a user's machine without a GPU.
"""
import json
import os
import shutil
import subprocess

BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
GPU_TOOL = os.path.join(BUILD, "gpu_tool")
STUBS = os.path.join(BUILD, "stubs")
REAL_CUDA = "/usr/local/cuda/lib64"
DEBIAN_LIB = "/usr/lib/x86_64-linux-gnu"


def clean_env(**extra):
    """The caller's environment without loader paths or stub knobs, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if k != "LD_LIBRARY_PATH" and not k.startswith("TFPROV_STUB_")
           and k not in ("TFPROV_NO_NVML", "TFPROV_PROC_DRIVER_NVIDIA", "TFPROV_PROC_VERSION",
                         "TFPROV_WSL_LIB_DIR", "TFPROV_NVML_TIMEOUT_MS")}
    # Keep the real-machine answers deterministic: no WSL unless a test says so.
    env["TFPROV_WSL_LIB_DIR"] = "/nonexistent/wsl/lib"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_tool(args, env, timeout=120):
    """Runs gpu_tool; returns (exit status, parsed JSON)."""
    p = subprocess.run([GPU_TOOL] + list(args), env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode >= 0, "gpu_tool died of signal %d: %s" % (-p.returncode, p.stderr)
    try:
        out = json.loads(p.stdout)
    except ValueError:
        raise AssertionError("gpu_tool printed no JSON (rc %d): %r %r" % (p.returncode, p.stdout, p.stderr))
    return p.returncode, out


def have_system_lib(soname):
    """True when the loader's cache lists soname (ldconfig -p)."""
    p = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True)
    return any(line.strip().startswith(soname + " ") for line in p.stdout.splitlines())


def has_nvidia_gpu():
    """The kernel driver is loaded (a /dev/nvidiactl node alone proves nothing)."""
    return os.path.exists("/proc/driver/nvidia/version")


def copy_dir(src, dst):
    """Copies a stub directory keeping symlinks as symlinks."""
    shutil.copytree(src, dst, symlinks=True)
    return dst

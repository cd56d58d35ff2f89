"""`tfprov doctor`: the guide's troubleshooting table as checks with fixes.

What the machine looks like: a --root sandbox, optionally holding a CUDA 12.3.2
+ cuDNN 8.9.7 stack applied from a loopback mirror whose archives carry
STAND-IN libraries with the real sonames (make_stack.py). The driver is REAL
(this machine: no GPU, Debian's libnvidia-ml.so.1 answers "Driver Not Loaded")
or STAND-IN (build/stubs/driver's NVML, driver and GPUs set by the test).
PATH is pinned to /usr/bin:/bin so the host's own CUDA (/usr/local/cuda on
the build machines) does not leak into the findings, except where a test
puts another CUDA on a search path on purpose.
"""
import os
import subprocess

import pytest

from lib_gpu import has_nvidia_gpu, have_system_lib
from lib_pyindex import build_wheel
from lib_stack import applied_stack, out, real_no_gpu_env, standin_gpu_env

PATH = "/usr/bin:/bin"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDNN_FILE = "/opt/tfprov/cuda/12.3.2/lib/libcudnn.so.8.9.7"

real_machine = pytest.mark.skipif(
    has_nvidia_gpu() or not have_system_lib("libnvidia-ml.so.1"),
    reason="needs the real no-GPU machine with Debian's libnvidia-ml1")


@real_machine
def test_real_no_driver_is_a_problem_unless_allowed(tfprov, tmp_path, mirror):
    """REAL NVML: no driver is a problem for a stack that requires a GPU, with plan's exit
    code for that cause (6: apply would stop before any change); --no-gpu turns it into a
    note and a healthy stack then has no problem (0). The whole report is on stdout."""
    m = applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("doctor", env=real_no_gpu_env(PATH=PATH), check=6)
    assert "[PROBLEM] no NVIDIA driver: nvmlInit_v2: Driver Not Loaded (9)" in p.stdout
    assert "fix: install the NVIDIA driver" in p.stdout
    assert "doctor: 1 problem" in p.stdout and p.stderr == "", p.stderr
    tfprov.run("plan", m, env=real_no_gpu_env(PATH=PATH), check=6)
    p = tfprov.run("doctor", m, env=real_no_gpu_env(PATH=PATH), check=6)
    p = tfprov.run("--no-gpu", "doctor", env=real_no_gpu_env(PATH=PATH), check=0)
    o = out(p)
    assert "GPU checks are SKIPPED" in o
    assert "[ok] all 15 libraries" in o
    assert "[ok] memory growth is on (TF_FORCE_GPU_ALLOW_GROWTH=true" in o
    assert "ResourceExhaustedError" in o
    assert "doctor: 0 problems" in o


def test_cudnn_not_loadable_names_file_and_path(tfprov, tmp_path, mirror):
    """Files only: a deleted libcudnn is named with the path searched and the fix."""
    applied_stack(tfprov, tmp_path, mirror)
    os.unlink(tfprov.path(CUDNN_FILE))
    p = tfprov.run("--no-gpu", "doctor", "--root", tfprov.root, root=False,
                   env=real_no_gpu_env(PATH=PATH), check=8)
    assert "[PROBLEM] cuDNN is not loadable: libcudnn.so.8 cannot be loaded (not-found)" in p.stdout
    assert "searched " + tfprov.path("/opt/tfprov/cuda/12.3.2/lib64") in p.stdout
    assert "Could not load dynamic library 'libcudnn.so.8'" in p.stdout
    assert "fix: cuDNN is not placed" in p.stdout


def test_standin_version_mismatch_is_reboot_required(tfprov, tmp_path, mirror):
    """STAND-IN NVML answering 18 after an 'upgrade': exit 7 with the reboot fix."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("doctor", env=standin_gpu_env(TFPROV_STUB_NVML_INIT="18", PATH=PATH), check=7)
    assert "[REBOOT REQUIRED] NVIDIA driver/library version mismatch" in p.stdout
    assert "fix: reboot" in p.stdout
    assert "reboot required" in p.stdout


def test_standin_gpus_without_kernels_and_ptx_only(tfprov, tmp_path, mirror):
    """STAND-IN NVML with a B200 (10.0: TF 2.15 has compute_90 PTX only), a K80 (3.7: no
    kernels), an RTX 4070 Ti (8.9: sm_80 SASS) and an H100 (9.0: compute_90 is sm_90 SASS
    too)."""
    applied_stack(tfprov, tmp_path, mirror)
    env = standin_gpu_env(gpus="NVIDIA B200:10.0;Tesla K80:3.7;" +
                          "NVIDIA GeForce RTX 4070 Ti:8.9;NVIDIA H100:9.0", PATH=PATH)
    p = tfprov.run("doctor", env=env, check=8)
    # The rule validate applies to driver.gpus (one finding per GPU: CUDA 12.3 before the
    # B200's first CUDA speaks for its PTX-only kernels too).
    assert ("[warning] GPU 0 (NVIDIA B200), compute capability 10.0: CUDA 12.3.2 predates "
            "compute capability 10.0 (Blackwell) [compat.gpu-newer-than-cuda]") in p.stdout
    assert "CUDA_CACHE_MAXSIZE" in p.stdout
    assert ("[PROBLEM] GPU 1 (Tesla K80), compute capability 3.7: TensorFlow 2.15 has no "
            "kernels for compute capability 3.7 (Kepler)") in p.stdout
    # no stack of the knowledge base serves a K80 and a B200 on driver 545 together
    assert "[note] no shipped stack and no tested TensorFlow build runs cleanly" in p.stdout
    assert "[ok] GPU 2 (NVIDIA GeForce RTX 4070 Ti), compute capability 8.9: native kernels" in p.stdout
    assert "[ok] GPU 3 (NVIDIA H100), compute capability 9.0: native kernels" in p.stdout
    assert "doctor: 1 problem" in p.stdout


def test_rtx3090_driver470_legacy_names_the_stacks_that_run(tfprov):
    """STAND-IN NVML: an RTX 3090 (8.6) on driver 470 and the shipped legacy-1.15 (CUDA
    10.0): the rule validate applies to driver.gpus reports CUDA 10.0 before Ampere, and
    doctor names the shipped stack and the tested builds that run on this driver and GPU
    (stable-2.12's CUDA 11.8 wants driver 520: only minor-version compatibility here).
    The same rule in plan's driver step: a warning, as validate's."""
    m = os.path.join(REPO, "manifests", "legacy-1.15.yaml")
    env = standin_gpu_env(gpus="NVIDIA GeForce RTX 3090:8.6", TFPROV_STUB_DRIVER="470.256.02",
                          TFPROV_STUB_CUDA="11040", PATH=PATH)
    p = tfprov.run("doctor", m, env=env, check=0)
    assert ("[warning] GPU 0 (NVIDIA GeForce RTX 3090), compute capability 8.6: CUDA "
            "10.0.130 predates compute capability 8.6 (Ampere) "
            "[compat.gpu-newer-than-cuda]") in p.stdout, p.stdout
    note = [l for l in p.stdout.splitlines() if "stacks that run on driver" in l]
    assert note == ["  [note] stacks that run on driver 470.256.02 and this GPU here: "
                    "manifests/stable-2.9.yaml (TF 2.9.0, CUDA 11.2.2); or `tfprov init "
                    "--tensorflow 2.11` (CUDA 11.2.2, cuDNN 8.1); `tfprov init --tensorflow "
                    "2.10` (CUDA 11.2.2, cuDNN 8.1); `tfprov init --tensorflow 2.9` (CUDA "
                    "11.2.2, cuDNN 8.1)"], p.stdout
    pl = tfprov.run("plan", m, env=env)
    assert ("GPU 0 (NVIDIA GeForce RTX 3090, compute capability 8.6): CUDA 10.0.130 predates "
            "compute capability 8.6 (Ampere)") in pl.stderr, pl.stderr
    # the same GPU in driver.gpus: validate says it at the GPU's line
    g = tfprov.root + "/g.yaml"
    with open(m) as f, open(g, "w") as o:
        o.write(f.read().replace("driver:\n", 'driver:\n  gpus: ["8.6"]\n', 1))
    v = tfprov.run("validate", g, root=False, check=0)
    assert "predates compute capability 8.6 (Ampere) [compat.gpu-newer-than-cuda]" in v.stderr
    # a driver too old for the stack's CUDA (2.21's 12.9 wheels need 575): plan's exit 6,
    # and the same stacks named
    p = tfprov.run("doctor", os.path.join(REPO, "manifests", "stable-2.21.yaml"), env=env,
                   check=6)
    assert "[PROBLEM] driver 470.256.02 is older than CUDA 12.9.79's minimum" in p.stdout
    assert "here: manifests/stable-2.9.yaml (TF 2.9.0, CUDA 11.2.2); or" in p.stdout, p.stdout
    # a healthy pairing (stable-2.9 on the same machine): nothing to suggest
    p = tfprov.run("doctor", os.path.join(REPO, "manifests", "stable-2.9.yaml"), env=env,
                   check=0)
    assert "stacks that run on driver" not in p.stdout
    assert ("[ok] GPU 0 (NVIDIA GeForce RTX 3090), compute capability 8.6: native kernels "
            "in TensorFlow 2.9") in p.stdout, p.stdout


def test_other_cuda_shadowing_the_stack(tfprov, tmp_path, mirror):
    """A CUDA 11.8 under <root>/usr/local that tfprov did not install, first on
    LD_LIBRARY_PATH, and a shell exporting TF_FORCE_GPU_ALLOW_GROWTH=false: warnings with
    fixes, not problems (--no-gpu: exit 0)."""
    applied_stack(tfprov, tmp_path, mirror)
    other = tfprov.path("/usr/local/cuda-11.8/lib64")
    os.makedirs(other)
    open(os.path.join(other, "libcudart.so.11.0"), "w").close()
    os.makedirs(tfprov.path("/usr/local/cuda-11.8/bin"))
    nvcc = tfprov.path("/usr/local/cuda-11.8/bin/nvcc")
    with open(nvcc, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(nvcc, 0o755)
    stack_lib = tfprov.path("/opt/tfprov/cuda/12.3.2/lib64")
    env = real_no_gpu_env(PATH=os.path.dirname(nvcc) + ":" + PATH,
                          LD_LIBRARY_PATH=other + ":" + stack_lib,
                          TF_FORCE_GPU_ALLOW_GROWTH="false")
    p = tfprov.run("--no-gpu", "doctor", env=env, check=0)
    o = out(p)
    assert "another CUDA install, not made by tfprov: " + tfprov.path("/usr/local/cuda-11.8") in o
    assert f"LD_LIBRARY_PATH entry {other} holds libcudart.so.11.0" in p.stdout
    assert f"PATH entry {os.path.dirname(nvcc)} holds nvcc" in p.stdout
    assert "its profile is not sourced" in p.stdout  # the stack's bin is not on PATH
    assert "your shell sets TF_FORCE_GPU_ALLOW_GROWTH=false" in p.stdout
    # Entries after the stack's own dir do not shadow it.
    env["LD_LIBRARY_PATH"] = stack_lib + ":" + other
    p = tfprov.run("--no-gpu", "doctor", env=env, check=0)
    assert "LD_LIBRARY_PATH entry" not in p.stdout


def test_manifest_argument_not_applied(tfprov, tmp_path):
    """doctor MANIFEST on an empty root: the manifest's own problems (tensorflow-gpu pinned,
    memory growth switched off, native Windows above TF 2.10, a GPU listed in driver.gpus
    without kernels), each with a fix; lint errors are counted, the checks go on."""
    m = tmp_path / "win.yaml"
    m.write_text("""schema: 1
stack:
  name: winbox
  platform: windows-x86_64
versions:
  tensorflow: 2.15.1
  python: "3.10"
driver:
  policy: skip
  gpus: ["3.7"]
env:
  vars:
    TF_FORCE_GPU_ALLOW_GROWTH: "false"
python:
  manager: venv
  name: tf
pip:
  complete: true
  requirements: |
    tensorflow-gpu==2.15.0 --hash=sha256:%s
""" % ("ab" * 32))
    # an invalid manifest: 3, as plan says for it; the checks still go on
    tfprov.run("plan", str(m), env=real_no_gpu_env(PATH=PATH), check=3)
    p = tfprov.run("doctor", str(m), env=real_no_gpu_env(PATH=PATH), check=3)
    o = out(p)
    assert "win.yaml:" in p.stdout  # the lint diagnostics, with positions
    assert "[PROBLEM] native Windows with TensorFlow 2.15.1" in p.stdout
    assert "[PROBLEM] tensorflow-gpu 2.15.0 is pinned in the manifest" in p.stdout
    assert "pip uninstall tensorflow-gpu and pin tensorflow==2.15.1" in p.stdout
    assert "[warning] memory growth is off" in p.stdout
    assert "ResourceExhaustedError" in p.stdout
    assert "compute capability 3.7: TensorFlow 2.15 has no kernels for compute capability 3.7" in p.stdout
    assert "from the manifest" in o


def test_tensorflow_gpu_installed_in_env(tfprov, tmp_path, mirror):
    """A real venv (the stack's python step) where a user pip-installed a package named
    tensorflow-gpu (a wheel built here): doctor lists the env and names it."""
    ver = "3.11"
    extra = (f"python:\n  manager: venv\n  name: tf\n  version: \"{ver}\"\n"
             f"  interpreter: /usr/bin/python{ver}\n")
    applied_stack(tfprov, tmp_path, mirror, python=ver, extra_yaml=extra)
    wheel, _ = build_wheel(str(tmp_path / "wheels"), "tensorflow-gpu", "2.12.0")
    py = tfprov.path("/opt/tfprov/envs/tf/bin/python")
    subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-deps", "-q", wheel],
                   check=True, capture_output=True, timeout=120)
    p = tfprov.run("--no-gpu", "doctor", env=real_no_gpu_env(PATH=PATH), check=8, timeout=180)
    assert "[PROBLEM] tensorflow-gpu 2.12.0 is installed in the stack's env" in p.stdout
    assert "last real build is 2.11.0" in p.stdout

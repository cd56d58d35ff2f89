"""`tfprov bench`: the GPU first, never a CPU number passed off as a GPU one.

What the machine looks like: a --root sandbox with a CUDA 12.3.2 + cuDNN 8.9.7
stack applied from a loopback mirror of NVIDIA-layout archives holding STAND-IN
libraries (make_stack.py). The GPU side is either REAL (this machine: no GPU,
Debian's real libnvidia-ml.so.1 answers "Driver Not Loaded") or STAND-IN
(build/stubs/driver's NVML reports driver 545.23.08 and an RTX 4070 Ti, and the
stack's stand-in libcudart/libcudnn compute the probe convolution on the CPU).
TensorFlow itself is not installable here: the TF benchmark is exercised by
test_bench_script.py; this file checks what bench does around it.
"""
import sqlite3

import pytest

from lib_gpu import has_nvidia_gpu, have_system_lib
from lib_stack import GPU_NAME, applied_stack, out, real_no_gpu_env, standin_gpu_env

real_machine = pytest.mark.skipif(
    has_nvidia_gpu() or not have_system_lib("libnvidia-ml.so.1"),
    reason="needs the real no-GPU machine with Debian's libnvidia-ml1")


def rows(tfprov):
    c = sqlite3.connect(tfprov.state_db)
    try:
        return c.execute("SELECT gpu, precision, ms_per_step, images_per_sec, tf_version, "
                         "cuda_version, cudnn_version, source, raw FROM bench_results").fetchall()
    finally:
        c.close()


@real_machine
def test_real_no_gpu_exit_8_with_the_reason_and_no_number(tfprov, tmp_path, mirror):
    """REAL NVML, no GPU: exit 8, the driver's own words, nothing recorded; --no-gpu does not
    change that (bench exists to measure a GPU)."""
    applied_stack(tfprov, tmp_path, mirror)
    for extra in ([], ["--no-gpu"]):
        p = tfprov.run(*extra, "bench", "demo", env=real_no_gpu_env(), check=8)
        assert "no GPU is present: no NVIDIA driver: nvmlInit_v2: Driver Not Loaded (9)" in p.stderr
        assert "No benchmark was run" in p.stderr
        assert "ms/step" not in out(p)
    assert rows(tfprov) == []


def test_standin_native_probe_recorded_and_history(tfprov, tmp_path, mirror):
    """STAND-IN GPU, stack without a Python env: the native probe's result matches the CPU
    reference, is recorded with source=native, and --history shows it."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("bench", "demo", env=standin_gpu_env(), check=0)
    assert "matches the CPU reference" in p.stdout
    assert "TensorFlow benchmark: not run: the stack has no Python env" in p.stderr
    r = rows(tfprov)
    assert len(r) == 1
    gpu, prec, ms, ips, tf, cuda, cudnn, source, raw = r[0]
    assert (gpu, prec, tf, cuda, cudnn, source) == (GPU_NAME, "fp32", "2.15.1", "12.3.2",
                                                    "8.9.7", "native")
    assert ms > 0 and ips > 0
    assert '"max_abs_err"' in raw
    h = tfprov.run("bench", "--history", env=standin_gpu_env(), check=0)
    assert "native" in h.stdout and GPU_NAME in h.stdout and "demo" in h.stdout
    # A wrong result is no benchmark: exit 8 naming the layer, nothing added to the history.
    p = tfprov.run("bench", env=standin_gpu_env(TFPROV_STUB_CUDNN_CORRUPT="1"), check=8)
    assert "failed at the compare layer" in p.stderr
    assert len(rows(tfprov)) == 1


def test_standin_reboot_required(tfprov, tmp_path, mirror):
    """STAND-IN NVML answering 18 (driver/library mismatch): exit 7."""
    applied_stack(tfprov, tmp_path, mirror)
    p = tfprov.run("bench", env=standin_gpu_env(TFPROV_STUB_NVML_INIT="18"), check=7)
    assert "Reboot" in p.stderr


def test_standin_tf_missing_in_env_is_exit_8(tfprov, tmp_path, mirror):
    """STAND-IN GPU, a real venv without TensorFlow: the native figure is recorded, the TF
    benchmark says why it has no GPU number (bench_conv.py's own reason) and exits 8."""
    ver = "3.11"
    extra = (f"python:\n  manager: venv\n  name: tf\n  version: \"{ver}\"\n"
             f"  interpreter: /usr/bin/python{ver}\n"
             "bench:\n  enabled: true\n  precisions: [fp32, mixed_float16]\n")
    applied_stack(tfprov, tmp_path, mirror, python=ver, extra_yaml=extra)
    p = tfprov.run("bench", "demo", env=standin_gpu_env(), check=8, timeout=180)
    assert "TensorFlow benchmark (fp32): no GPU number: cannot import tensorflow" in p.stderr
    assert "TensorFlow benchmark (mixed_float16): no GPU number" in p.stderr
    assert [x[7] for x in rows(tfprov)] == ["native"]


def test_history_without_results(tfprov):
    p = tfprov.run("bench", "--history", check=0)
    assert "No benchmark results" in p.stdout

"""Native conv probe: one cuDNN Conv2D forward through the
stack's libcudart and libcudnn, timed with CUDA events, checked against a CPU
reference convolution.

No GPU exists here. With the STAND-IN libraries from ${TFPROV_BUILD_DIR}/stubs
(cudart_stub: host memory as "device" memory; cudnn_stub: the convolution
computed on the CPU by a different loop than tfprov's reference) the probe
runs end to end, so these tests check that tfprov drives the legacy cuDNN API
correctly and catches wrong output and failures in each layer. Timings from the
stand-ins are CPU timings, not GPU numbers. Against the real CUDA 13 / cuDNN 9
in /usr/local/cuda and Debian's CUDA 11.8 runtime the probe takes the real
error path a GPU-less machine gives.
"""
import os

import pytest

from lib_gpu import DEBIAN_LIB, REAL_CUDA, STUBS, clean_env, has_nvidia_gpu, run_tool

RT12 = os.path.join(STUBS, "cuda12", "libcudart.so.12")
RT11 = os.path.join(STUBS, "cuda11", "libcudart.so.11.0")
DNN8 = os.path.join(STUBS, "cuda12", "libcudnn.so.8")
DNN9 = os.path.join(STUBS, "cudnn9", "libcudnn.so.9")


def probe(cudart, cudnn, n=2, iters=2, **env):
    return run_tool(["convprobe", cudart, cudnn, "--n", str(n), "--iters", str(iters)],
                    clean_env(**env), timeout=300)


@pytest.mark.parametrize("cudart,cudnn,rtver,dnnver", [
    (RT12, DNN8, 12030, 8907),
    (RT11, os.path.join(STUBS, "cuda11", "libcudnn.so.8"), 11080, 8907),
    (RT12, DNN9, 12030, 91900),
])
def test_stand_in_stack_matches_cpu_reference(cudart, cudnn, rtver, dnnver):
    rc, r = probe(cudart, cudnn, n=2)
    assert rc == 0 and r["ok"], r
    assert r["layer"] == "" and r["error"] == ""
    assert r["runtime_version"] == rtver and r["cudnn_version"] == dnnver
    assert r["device_count"] == 1 and (r["cc_major"], r["cc_minor"]) == (8, 9)
    assert r["shape_in"] == [2, 3, 256, 256] and r["shape_out"] == [2, 32, 254, 254]
    assert 0 <= r["max_abs_err"] <= r["tol"] == 1e-3
    assert r["ms_per_forward"] > 0 and r["images_per_s"] > 0 and r["gflops"] > 0
    assert r["cudnn_create_status"] == 0


def test_wrong_output_is_caught():
    rc, r = probe(RT12, DNN8, TFPROV_STUB_CUDNN_CORRUPT=1)
    assert rc == 8 and not r["ok"]
    assert r["layer"] == "compare"
    assert abs(r["max_abs_err"] - 0.5) < 0.01
    assert "differs from the CPU reference" in r["error"]


@pytest.mark.parametrize("code,text", [
    (35, "CUDA driver version is insufficient for CUDA runtime version"),
    (100, "no CUDA-capable device is detected"),
])
def test_driver_layer_failure(code, text):
    rc, r = probe(RT12, DNN9, TFPROV_STUB_CUDA_ERROR=code, TFPROV_STUB_CUDNN_CREATE=1)
    assert rc == 8 and r["layer"] == "driver" and r["call"] == "cudaGetDeviceCount"
    assert r["status"] == code
    assert r["error"] == "cudaGetDeviceCount: %s (%d)" % (text, code)
    # cuDNN was still asked, with cuDNN 9's status numbering.
    assert r["cudnn_create_status"] == 1001
    assert r["cudnn_create_error"] == "CUDNN_STATUS_NOT_INITIALIZED"


def test_zero_devices_is_a_driver_failure():
    rc, r = probe(RT12, DNN8, TFPROV_STUB_CUDA_DEVICES=0)
    assert rc == 8 and r["layer"] == "driver" and r["device_count"] == 0


@pytest.mark.parametrize("cudnn,status", [(DNN8, 1), (DNN9, 1001)])
def test_cudnn_create_failure_uses_cudnn_own_words(cudnn, status):
    rc, r = probe(RT12, cudnn, TFPROV_STUB_CUDNN_CREATE=1)
    assert rc == 8 and r["layer"] == "cudnn" and r["call"] == "cudnnCreate"
    assert r["status"] == status
    assert r["error"] == "cudnnCreate: CUDNN_STATUS_NOT_INITIALIZED (%d)" % status


def test_runtime_layer_failure():
    rc, r = probe(RT12, DNN8, TFPROV_STUB_CUDA_MALLOC_FAIL=1)
    assert rc == 8 and r["layer"] == "runtime" and r["call"] == "cudaMalloc"
    assert r["error"] == "cudaMalloc: out of memory (2)"


def test_crash_inside_cudnn_is_contained():
    rc, r = probe(RT12, DNN8, TFPROV_STUB_CUDNN_CRASH=1)
    assert rc == 8 and not r["ok"] and r["layer"] == "child"
    assert r["error"].startswith("the probe process ")


def test_missing_libraries_name_their_layer(tmp_path):
    rc, r = probe(str(tmp_path / "libcudart.so.12"), DNN8)
    assert rc == 8 and r["layer"] == "runtime" and r["call"] == "dlopen"
    assert "libcudart.so.12: cannot open shared object file" in r["error"]
    rc, r = probe(RT12, str(tmp_path / "libcudnn.so.8"))
    assert rc == 8 and r["layer"] == "cudnn" and r["call"] == "dlopen"


def test_a_library_that_is_not_cudnn():
    rc, r = probe(RT12, os.path.join(STUBS, "cuda12", "libcublas.so.12"))
    assert rc == 8 and r["layer"] == "cudnn" and r["call"] == "dlsym"
    assert "has no cudnnGetVersion" in r["error"]


def test_usage_errors():
    rc, r = run_tool(["convprobe", RT12, DNN8, "--n", "0"], clean_env())
    assert rc == 64 and r["layer"] == "child" and r["error"] == "invalid convolution shape"


@pytest.mark.skipif(not (os.path.exists(os.path.join(REAL_CUDA, "libcudart.so.13"))
                         and os.path.exists(os.path.join(REAL_CUDA, "libcudnn.so.9"))),
                    reason="no real CUDA 13 + cuDNN 9 in /usr/local/cuda")
def test_real_cuda13_cudnn9():
    rc, r = probe(os.path.join(REAL_CUDA, "libcudart.so.13"), os.path.join(REAL_CUDA, "libcudnn.so.9"),
                  n=8, iters=10)
    assert r["runtime_version"] >= 13000 and r["cudnn_version"] >= 90000
    if has_nvidia_gpu():
        # A real GPU: the real number, checked against the CPU.
        assert rc == 0 and r["ok"], r
        assert r["ms_per_forward"] > 0 and r["max_abs_err"] <= r["tol"]
        print("REAL GPU conv probe: %.3f ms/forward, %.0f images/s, cc %d.%d" %
              (r["ms_per_forward"], r["images_per_s"], r["cc_major"], r["cc_minor"]))
        return
    # NVIDIA's own libraries on a machine without a GPU driver.
    assert rc == 8 and r["layer"] == "driver" and r["call"] == "cudaGetDeviceCount"
    assert r["status"] in (35, 100)
    assert r["driver_version"] == 0
    assert r["cudnn_create_error"] == "CUDNN_STATUS_NOT_INITIALIZED"
    assert r["cudnn_create_status"] == 1001


@pytest.mark.skipif(not os.path.exists(os.path.join(DEBIAN_LIB, "libcudart.so.11.0")),
                    reason="Debian non-free libcudart11.0 not installed (scripts/install-deps.sh)")
def test_real_debian_cuda118_runtime():
    # Real CUDA 11.8 runtime, stand-in cuDNN 8 (Debian ships no cuDNN).
    rc, r = probe(os.path.join(DEBIAN_LIB, "libcudart.so.11.0"), os.path.join(STUBS, "cuda11", "libcudnn.so.8"))
    if has_nvidia_gpu():
        pytest.skip("a GPU is present: the stand-in cuDNN cannot use real device memory")
    assert rc == 8 and r["layer"] == "driver" and r["status"] == 35
    # Unlike CUDA 13's, the 11.8 runtime refuses even cudaRuntimeGetVersion
    # (35) without a driver, so the probe reports the version as unknown.
    assert r["runtime_version"] == 0 and r["cudnn_version"] == 8907
    assert r["error"] == "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version (35)"

"""Driver probe: NVML through dlopen, /proc fallback, WSL2.

The NVIDIA driver is absent on these machines. libnvidia-ml.so.1 from
${TFPROV_BUILD_DIR}/stubs/driver is a STAND-IN for NVML that reports the driver
and GPUs a test sets; /proc/driver/nvidia is replaced by a directory the test
writes. The real NVML (Debian's libnvidia-ml1, driver 535) is used where
installed: without a GPU it answers nvmlInit_v2 = 9 "Driver Not Loaded".
"""
import os
import time

import pytest

from lib_gpu import STUBS, clean_env, has_nvidia_gpu, have_system_lib, run_tool

DRIVER_STUB = os.path.join(STUBS, "driver")
PROC_CLOSED = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
               "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
PROC_OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  "
             "(dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:42:42 UTC 2024\n"
             "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")


def fake_proc(tmp_path, version_text, gpus=()):
    d = tmp_path / "proc-driver-nvidia"
    d.mkdir()
    (d / "version").write_text(version_text)
    for bus, model in gpus:
        g = d / "gpus" / bus
        g.mkdir(parents=True)
        (g / "information").write_text(
            "Model: \t\t %s\nIRQ:   \t\t 170\nGPU UUID: \t GPU-1234\nBus Location: \t %s\n" % (model, bus))
    return str(d)


def test_nvml_stand_in_reports_driver_and_gpus():
    env = clean_env(LD_LIBRARY_PATH=DRIVER_STUB, TFPROV_STUB_DRIVER="545.23.08",
                    TFPROV_STUB_CUDA="12030",
                    TFPROV_STUB_GPUS="NVIDIA GeForce RTX 4070 Ti:8.9;NVIDIA A100-SXM4-80GB:8.0")
    rc, p = run_tool(["probe"], env)
    assert rc == 0
    assert p["found"] and p["source"] == "nvml" and p["error"] == ""
    assert p["driver_version"] == "545.23.08"
    assert p["cuda_driver_version"] == 12030
    assert p["ngpus"] == 2 and p["ngpus_total"] == 2
    assert p["gpus"][0] == {"name": "NVIDIA GeForce RTX 4070 Ti", "cc_major": 8, "cc_minor": 9}
    assert p["gpus"][1] == {"name": "NVIDIA A100-SXM4-80GB", "cc_major": 8, "cc_minor": 0}


def test_nvml_zero_gpus_is_found_with_no_devices():
    rc, p = run_tool(["probe"], clean_env(LD_LIBRARY_PATH=DRIVER_STUB, TFPROV_STUB_DRIVER="470.82.01"))
    assert p["found"] and p["source"] == "nvml" and p["ngpus"] == 0
    assert p["driver_version"] == "470.82.01"


def test_more_gpus_than_the_table_holds_are_counted():
    gpus = ";".join("NVIDIA H100 80GB HBM3:9.0" for _ in range(20))
    rc, p = run_tool(["probe"], clean_env(LD_LIBRARY_PATH=DRIVER_STUB, TFPROV_STUB_GPUS=gpus))
    assert p["ngpus"] == 16 and p["ngpus_total"] == 20


def test_nvml_init_failure_falls_back_to_procfs(tmp_path):
    proc = fake_proc(tmp_path, PROC_CLOSED, [("0000:41:00.0", "NVIDIA GeForce RTX 3090"),
                                             ("0000:01:00.0", "NVIDIA GeForce RTX 4070 Ti")])
    env = clean_env(LD_LIBRARY_PATH=DRIVER_STUB, TFPROV_STUB_NVML_INIT=18,
                    TFPROV_PROC_DRIVER_NVIDIA=proc)
    rc, p = run_tool(["probe"], env)
    assert p["found"] and p["source"] == "procfs"
    assert p["driver_version"] == "535.104.05"
    # NVML's own words stay in the report: a driver/library mismatch needs a reboot.
    assert p["error"].startswith("nvmlInit_v2: Driver/library version mismatch (18)")
    assert p["nvml_status"] == 18
    # Bus-id order; compute capability unknown from procfs.
    assert [g["name"] for g in p["gpus"]] == ["NVIDIA GeForce RTX 4070 Ti", "NVIDIA GeForce RTX 3090"]
    assert all(g["cc_major"] == -1 and g["cc_minor"] == -1 for g in p["gpus"])


def test_open_kernel_module_version_line(tmp_path):
    env = clean_env(TFPROV_NO_NVML=1, TFPROV_PROC_DRIVER_NVIDIA=fake_proc(tmp_path, PROC_OPEN))
    rc, p = run_tool(["probe"], env)
    assert p["found"] and p["source"] == "procfs" and p["driver_version"] == "560.35.03"
    assert p["ngpus"] == 0


def test_no_driver_anywhere_names_each_source(tmp_path):
    missing = str(tmp_path / "no-such-dir")
    rc, p = run_tool(["probe"], clean_env(TFPROV_NO_NVML=1, TFPROV_PROC_DRIVER_NVIDIA=missing))
    assert rc == 0
    assert not p["found"] and p["source"] == "none" and p["driver_version"] == ""
    assert "TFPROV_NO_NVML" in p["error"]
    assert missing + "/version: No such file or directory" in p["error"]


def test_garbage_procfs_is_not_a_driver(tmp_path):
    env = clean_env(TFPROV_NO_NVML=1,
                    TFPROV_PROC_DRIVER_NVIDIA=fake_proc(tmp_path, "NVRM version: unknown\n"))
    rc, p = run_tool(["probe"], env)
    assert not p["found"] and p["source"] == "none"
    assert "no \"NVRM version:\" line with a driver version" in p["error"]


def test_crashing_nvml_does_not_crash_the_probe(tmp_path):
    env = clean_env(LD_LIBRARY_PATH=DRIVER_STUB, TFPROV_STUB_NVML_CRASH=1,
                    TFPROV_PROC_DRIVER_NVIDIA=fake_proc(tmp_path, PROC_CLOSED))
    rc, p = run_tool(["probe"], env)
    assert rc == 0
    assert p["error"].startswith("NVML probe ")  # "killed by signal 11" (or a sanitizer's exit)
    assert p["nvml_status"] == -1
    assert p["found"] and p["source"] == "procfs" and p["driver_version"] == "535.104.05"


def test_hanging_nvml_is_cut_off(tmp_path):
    env = clean_env(LD_LIBRARY_PATH=DRIVER_STUB, TFPROV_STUB_NVML_HANG=30,
                    TFPROV_NVML_TIMEOUT_MS=500, TFPROV_PROC_DRIVER_NVIDIA=str(tmp_path / "none"))
    t0 = time.monotonic()
    rc, p = run_tool(["probe"], env, timeout=20)
    assert time.monotonic() - t0 < 10
    assert p["error"].startswith("NVML probe timed out after 500 ms")
    assert not p["found"]


@pytest.mark.parametrize("text,wsl", [
    ("Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1) (gcc (GCC) 11.2.0)", True),
    ("Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com) (gcc version 5.4.0 (GCC) )", True),
    ("Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0)", False),
])
def test_wsl_detected_from_kernel_version(tmp_path, text, wsl):
    pv = tmp_path / "version"
    pv.write_text(text + "\n")
    env = clean_env(LD_LIBRARY_PATH=DRIVER_STUB, TFPROV_PROC_VERSION=str(pv))
    rc, p = run_tool(["probe"], env)
    assert p["wsl"] is wsl


def test_wsl_detected_from_driver_lib_dir(tmp_path):
    pv = tmp_path / "version"
    pv.write_text("Linux version 6.1.0-18-amd64\n")
    (tmp_path / "wsl-lib").mkdir()
    env = clean_env(LD_LIBRARY_PATH=DRIVER_STUB, TFPROV_PROC_VERSION=str(pv),
                    TFPROV_WSL_LIB_DIR=str(tmp_path / "wsl-lib"))
    rc, p = run_tool(["probe"], env)
    assert p["wsl"] is True


@pytest.mark.skipif(have_system_lib("libnvidia-ml.so.1"),
                    reason="a system NVML is installed; the WSL lib dir is only tried when the loader finds none")
def test_wsl_nvml_found_in_wsl_lib_dir(tmp_path):
    pv = tmp_path / "version"
    pv.write_text("Linux version 5.15.153.1-microsoft-standard-WSL2\n")
    env = clean_env(TFPROV_PROC_VERSION=str(pv), TFPROV_WSL_LIB_DIR=DRIVER_STUB,
                    TFPROV_STUB_DRIVER="546.12", TFPROV_STUB_GPUS="NVIDIA GeForce RTX 4070 Ti:8.9")
    rc, p = run_tool(["probe"], env)
    assert p["wsl"] and p["source"] == "nvml" and p["driver_version"] == "546.12"


@pytest.mark.skipif(not have_system_lib("libnvidia-ml.so.1"),
                    reason="real NVML absent (install-deps.sh installs Debian non-free libnvidia-ml1)")
def test_real_nvml_without_gpu_says_driver_not_loaded():
    rc, p = run_tool(["probe"], clean_env())
    if has_nvidia_gpu():
        assert p["found"] and p["source"] == "nvml" and p["ngpus"] >= 1
        return
    # NVIDIA's own NVML, no kernel driver: the answer users see on a broken install.
    assert not p["found"] and p["source"] == "none"
    assert p["nvml_status"] == 9
    assert p["error"].startswith("nvmlInit_v2: Driver Not Loaded (9)")
    assert "/proc/driver/nvidia/version: No such file or directory" in p["error"]


@pytest.mark.skipif(have_system_lib("libnvidia-ml.so.1"), reason="a system NVML is installed")
def test_no_nvml_library_at_all():
    rc, p = run_tool(["probe"], clean_env(TFPROV_PROC_DRIVER_NVIDIA="/nonexistent"))
    assert not p["found"] and p["nvml_status"] == -1
    assert p["error"].startswith("dlopen libnvidia-ml.so.1: ")

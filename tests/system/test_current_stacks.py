"""The current stack shapes, applied for real: TF 2.20 on NVIDIA redist archives
(CUDA 12.5.1, cuDNN 9.3.0.75) and TF 2.21 with CUDA and cuDNN from
nvidia-*-cu12 pip wheels (tensorflow[and-cuda], no CUDA prefix at all).

What the machine looks like:
  * a --root sandbox, a loopback HTTP mirror (lib_http) serving NVIDIA-layout
    archives built by make_stack.py from the real redistrib_12.5.1.json
    (names, versions, layout; cuDNN 9 with its sub-libraries and the cuda12
    variant name), and a loopback PEP 503 index (lib_pyindex) serving fixture
    wheels: a stand-in `tensorflow` package, and for 2.21 nvidia-*-cu12 wheels
    laid out as NVIDIA's (nvidia/<lib>/lib/<soname>) with manylinux tags;
  * STAND-INS for hardware, said plainly: the libraries in the archives and
    wheels are build/stubs' libraries with the real sonames (no GPU code;
    libcudart/libcudnn compute on the CPU), and the GPU is build/stubs/driver's
    NVML reporting a driver and an RTX 4070 Ti, loaded through the same dlopen
    of libnvidia-ml.so.1 production uses;
  * real: the binary, SQLite, `python -m venv` (Debian's python3), pip.

What must hold: both stacks apply, a second apply says "No changes", `verify`
passes and its library check loads each library from where TensorFlow loads it
(the CUDA prefix for 2.20, site-packages/nvidia/*/lib for 2.21), the 2.21 env
step sets no LD_LIBRARY_PATH, the driver step judges the CUDA the runtime wheel
carries, bench and doctor work on the wheel stack; the lints and the glibc
precondition refuse what they must.
"""
import os
import re
import shutil
import sqlite3
import subprocess
import sys

import pytest

import lib_pyindex
from lib_gpu import STUBS
from lib_stack import MAKE_STACK, out, standin_gpu_env

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYVER = subprocess.run(["/usr/bin/python3", "-c",
                        "import sys;print('%d.%d'%sys.version_info[:2])"],
                       capture_output=True, text=True, check=True).stdout.strip()
ENV = "/opt/tfprov/envs/tf"
# Driver 575.57.08 is CUDA 12.9 Update 1's own minimum (data/compat.yaml).
GPU_ENV = dict(TFPROV_STUB_DRIVER="575.57.08", TFPROV_STUB_CUDA="12090")

# NVIDIA's wheels: distribution, version (the 2.21.0 [and-cuda] closure in
# manifests/data), directory under site-packages/nvidia, the stub libraries.
CUDA_WHEELS = [
    ("nvidia-cuda-runtime-cu12", "12.9.79", "cuda_runtime", "cuda12", ["libcudart.so.12"]),
    ("nvidia-cublas-cu12", "12.9.2.10", "cublas", "cuda12",
     ["libcublas.so.12", "libcublasLt.so.12"]),
    ("nvidia-cufft-cu12", "11.4.1.4", "cufft", "cuda12", ["libcufft.so.11"]),
    ("nvidia-curand-cu12", "10.3.10.19", "curand", "cuda12", ["libcurand.so.10"]),
    ("nvidia-cusolver-cu12", "11.7.5.82", "cusolver", "cuda12", ["libcusolver.so.11"]),
    ("nvidia-cusparse-cu12", "12.5.10.65", "cusparse", "cuda12", ["libcusparse.so.12"]),
    ("nvidia-nvjitlink-cu12", "12.9.86", "nvjitlink", "cuda12", ["libnvJitLink.so.12"]),
    ("nvidia-cudnn-cu12", "9.23.2.1", "cudnn", "cudnn9",
     ["libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9",
      "libcudnn_adv.so.9", "libcudnn_heuristic.so.9", "libcudnn_engines_precompiled.so.9",
      "libcudnn_engines_runtime_compiled.so.9"]),
]
TAG = "py3-none-manylinux_2_27_x86_64"


def pin(name, ver, sha):
    return f"    {name}=={ver} \\\n        --hash=sha256:{sha}\n"


def pip_block(index_url, pins, extra=""):
    return (f"pip:\n  index_url: {index_url}\n  complete: true\n{extra}  requirements: |\n"
            + "".join(pin(*p) for p in pins))


def python_block():
    return f"python:\n  manager: venv\n  name: tf\n  version: \"{PYVER}\"\n"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """The index: stand-in tensorflow 2.20.0/2.21.0 and keras, and the CUDA wheels."""
    d = tmp_path_factory.mktemp("wheels")
    pins = {}
    for name, ver in (("tensorflow", "2.20.0"), ("tensorflow", "2.21.0"), ("keras", "3.10.0")):
        _, sha = lib_pyindex.build_wheel(str(d), name, ver)
        pins[(name, ver)] = (name, ver, sha)
    for name, ver, sub, stubdir, sonames in CUDA_WHEELS:
        files = {"nvidia/__init__.py": "", f"nvidia/{sub}/__init__.py": ""}
        for so in sonames:
            with open(os.path.join(STUBS, stubdir, so), "rb") as f:
                files[f"nvidia/{sub}/lib/{so}"] = f.read()
        _, sha = lib_pyindex.build_wheel(str(d), name, ver, files=files, tag=TAG)
        pins[(name, ver)] = (name, ver, sha)
    idx = lib_pyindex.Index(str(d))
    idx.pins = pins
    yield idx
    idx.close()


def stack_220(tmp_path, mirror, wheels, extra_pins=(), extra_yaml=""):
    """A TF 2.20-shaped manifest: CUDA 12.5.1 and cuDNN 9.3.0.75 (cuda12 variant) archives
    with the CUDA 12 and cuDNN 9 stand-ins, a venv, the stand-in tensorflow wheel."""
    stubs = tmp_path / "stubs-12.5-9"
    stubs.mkdir(exist_ok=True)
    for sub, keep in (("cuda12", lambda f: not f.startswith("libcudnn")),
                      ("cudnn9", lambda f: True)):
        for f in os.listdir(os.path.join(STUBS, sub)):
            if keep(f) and not (stubs / f).exists():
                os.symlink(os.path.join(STUBS, sub, f), stubs / f)
    pins = [wheels.pins[("tensorflow", "2.20.0")], wheels.pins[("keras", "3.10.0")]]
    pins += list(extra_pins)
    extra = (python_block() + pip_block(wheels.url, pins) + "bench:\n  enabled: false\n"
             + extra_yaml)
    m = tmp_path / "cur220.yaml"
    subprocess.run([sys.executable, MAKE_STACK, "--stubs", str(stubs), "--cuda", "12.5.1",
                    "--cudnn", "9.3.0.75", "--cudnn-variant", "cuda12", "--out", str(mirror.dir),
                    "--url-base", mirror.url(""), "--manifest", str(m), "--name", "cur220",
                    "--tensorflow", "2.20.0", "--python", PYVER, "--extra-yaml", extra],
                   check=True, capture_output=True, timeout=300)
    return str(m)


def stack_221(tmp_path, wheels, cuda="12.9", cudnn="9.23.2.1", name="cur221", extra=""):
    """A TF 2.21-shaped manifest: no cuda or cudnn section, CUDA from the nvidia-*-cu12 wheels."""
    pins = [wheels.pins[("tensorflow", "2.21.0")]]
    pins += [wheels.pins[(n, v)] for n, v, *_ in CUDA_WHEELS]
    text = ("schema: 1\nstack:\n  name: " + name + "\n  platform: linux-x86_64\n"
            "prefix: /opt/tfprov\nversions:\n  tensorflow: 2.21.0\n"
            f"  cuda: \"{cuda}\"\n  cudnn: {cudnn}\n  python: \"{PYVER}\"\n"
            "driver:\n  policy: require\n"
            "env:\n  vars:\n    TF_CPP_MIN_LOG_LEVEL: \"1\"\n"
            + python_block() + pip_block(wheels.url, pins, extra)
            + "bench:\n  enabled: false\n")
    m = tmp_path / f"{name}.yaml"
    m.write_text(text)
    return str(m)


def env(**extra):
    e = standin_gpu_env(**GPU_ENV)
    e.update(extra)
    return e


def site_packages(tfprov):
    lib = tfprov.path(f"{ENV}/lib")
    (py,) = [d for d in os.listdir(lib) if d.startswith("python")]
    return os.path.join(lib, py, "site-packages")


# --------------------------------------------------------------------------- TF 2.20


def test_tf220_redist_stack_applies_verifies_and_is_stable(tfprov, tmp_path, mirror, wheels):
    m = stack_220(tmp_path, mirror, wheels)
    p = tfprov.run("validate", m, root=False, check=0)
    assert "error" not in p.stderr, p.stderr
    p = tfprov.run("apply", "-y", m, env=env(), timeout=600, check=0)
    # cuDNN 9's shim and its sub-libraries, merged into the CUDA prefix, NVIDIA's names.
    lib = tfprov.path("/opt/tfprov/cuda/12.5.1/lib")
    for so in ("libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
               "libcudart.so.12"):
        assert os.path.exists(os.path.join(lib, so)), os.listdir(lib)
    assert os.path.realpath(os.path.join(lib, "libcudnn.so.9")).endswith("libcudnn.so.9.3.0")

    p = tfprov.run("apply", "-y", m, env=env(), timeout=300, check=0)
    assert "No changes." in p.stdout, out(p)

    p = tfprov.run("verify", "cur220", env=env(), timeout=300, check=0)
    o = out(p)
    assert "libraries: all" in o and "/opt/tfprov/cuda/12.5.1/lib" in o, o
    assert "verify: ok" in o, o
    profile = open(tfprov.path("/opt/tfprov/stacks/cur220/activate.sh")).read()
    assert "case :${LD_LIBRARY_PATH-}:" in profile and "/cuda/12.5.1/lib64'" in profile


# --------------------------------------------------------------------------- TF 2.21


def test_tf221_wheel_cuda_applies_verifies_and_is_stable(tfprov, tmp_path, wheels):
    m = stack_221(tmp_path, wheels)
    p = tfprov.run("validate", m, root=False, check=0)
    # Validated by the wheels' CUDA; untested 12.9 against 12.5 is a warning only.
    assert "compat.cuda-untested" in p.stderr and ": error:" not in p.stderr, p.stderr
    p = tfprov.run("apply", "-y", m, env=env(), timeout=600, check=0)
    o = out(p)
    # The driver step judged the CUDA the runtime wheel carries.
    assert "must support CUDA 12.9" in o, o
    assert not os.path.exists(tfprov.path("/opt/tfprov/cuda")), "no CUDA prefix for this shape"
    sp = site_packages(tfprov)
    assert os.path.exists(os.path.join(sp, "nvidia/cuda_runtime/lib/libcudart.so.12"))
    assert os.path.exists(os.path.join(sp, "nvidia/cudnn/lib/libcudnn_graph.so.9"))

    # The env step points nothing at a CUDA: TensorFlow finds the wheels itself.
    profile = open(tfprov.path("/opt/tfprov/stacks/cur221/activate.sh")).read()
    assert "LD_LIBRARY_PATH" not in profile and "CUDA_HOME" not in profile, profile

    p = tfprov.run("apply", "-y", m, env=env(), timeout=300, check=0)
    assert "No changes." in p.stdout, out(p)

    p = tfprov.run("verify", "cur221", env=env(), timeout=300, check=0)
    o = out(p)
    assert "verify: ok" in o, o
    libs = re.search(r"libraries: all (\d+) that TensorFlow 2\.21\.0 loads for CUDA 12\.9\.79 / "
                     r"cuDNN 9\.23\.2\.1 load from (\S+)", o)
    assert libs, o
    dirs = libs.group(2).split(":")
    assert all("/site-packages/nvidia/" in d and d.endswith("/lib") for d in dirs), dirs
    for sub in ("cuda_runtime", "cublas", "cudnn", "nvjitlink"):
        assert any(d.endswith(f"/nvidia/{sub}/lib") for d in dirs), (sub, dirs)
    # The GPU probe ran through the wheels' libcudart and libcudnn.
    assert "matches the CPU reference" in o, o


def test_tf221_library_check_names_a_missing_wheel_library(tfprov, tmp_path, wheels):
    """The check really loads from site-packages: remove the wheel's libcudnn_graph and
    verify fails (8), naming the soname and the nvidia dirs it searched."""
    m = stack_221(tmp_path, wheels)
    tfprov.run("apply", "-y", m, env=env(), timeout=600, check=0)
    os.unlink(os.path.join(site_packages(tfprov), "nvidia/cudnn/lib/libcudnn_graph.so.9"))
    p = tfprov.run("verify", "cur221", env=env(), timeout=300, check=8)
    o = out(p)
    assert "library libcudnn_graph.so.9: not-found" in o, o
    assert "site-packages/nvidia/cudnn/lib" in o, o
    assert "no nvidia-*-cu wheel in the env's site-packages/nvidia/*/lib ships it" in o, o
    assert "LD_LIBRARY_PATH" not in o, o
    # What the advice says: destroy and apply again restore it, and verify passes.
    tfprov.run("destroy", "-y", "cur221", env=env(), timeout=300, check=0)
    tfprov.run("apply", "-y", m, env=env(), timeout=600, check=0)
    assert os.path.exists(os.path.join(site_packages(tfprov), "nvidia/cudnn/lib/libcudnn_graph.so.9"))
    tfprov.run("verify", "cur221", env=env(), timeout=300, check=0)


def test_tf221_driver_floor_is_the_wheels_cuda(tfprov, tmp_path, wheels):
    """Driver 520.61.05 is below CUDA 12.x's minor-version floor: refused before any change,
    naming the runtime wheel; 560.35.03 runs (with a warning) through minor-version compat."""
    m = stack_221(tmp_path, wheels)
    p = tfprov.run("apply", "-y", m, env=env(TFPROV_STUB_DRIVER="520.61.05"), timeout=300,
                   check=6)
    o = out(p)
    assert "too old for CUDA 12.9.79 (nvidia-cuda-runtime-cu12 12.9.79)" in o, o
    assert "575.57.08" in o, o
    assert not os.path.exists(tfprov.path(ENV))
    p = tfprov.run("plan", m, env=env(TFPROV_STUB_DRIVER="560.35.03"), timeout=300, check=0)
    assert "older than CUDA 12.9.79 (nvidia-cuda-runtime-cu12 12.9.79)'s minimum 575.57.08" \
        in out(p), out(p)


def test_tf221_bench_and_doctor_use_the_wheels(tfprov, tmp_path, wheels):
    m = stack_221(tmp_path, wheels)
    # Before the apply, doctor MANIFEST knows where the libraries will come from.
    p = tfprov.run("doctor", m, env=env(), timeout=300)
    assert "will come from the env's nvidia-*-cu wheels; none is installed" in out(p), out(p)
    tfprov.run("apply", "-y", m, env=env(), timeout=600, check=0)
    p = tfprov.run("bench", "cur221", env=env(), timeout=300, check=0)
    o = out(p)
    assert "bench cur221: TensorFlow 2.21.0, CUDA 12.9.79, cuDNN 9.23.2.1" in o, o
    # The probe ran through the wheel's cuDNN 9 (the stand-in reports 9.19.0; the machine
    # has no other cuDNN 9): bench found the libraries in site-packages/nvidia.
    assert re.search(r"native probe: Conv2D forward .* through cuDNN 9\.19\.0: matches the "
                     r"CPU reference", o), o
    p = tfprov.run("doctor", env=env(), timeout=300)
    o = out(p)
    assert "come from the env's nvidia-*-cu wheels" in o, o
    assert "second CUDA" not in o, o
    # A system CUDA on LD_LIBRARY_PATH would be loaded before the wheels.
    other = tmp_path / "usr-local-cuda-lib64"
    other.mkdir()
    shutil.copy(os.path.join(STUBS, "cuda12", "libcudart.so.12"), other)
    e = env()
    e["LD_LIBRARY_PATH"] = e["LD_LIBRARY_PATH"] + ":" + str(other)
    p = tfprov.run("doctor", env=e, timeout=300)
    o = out(p)
    assert f"LD_LIBRARY_PATH entry {other} holds libcudart.so.12, a second CUDA" in o, o


# --------------------------------------------------------------------------- lints, bad input


def test_both_cudas_warned(tfprov, tmp_path, mirror, wheels):
    """A redist CUDA and nvidia-*-cu12 wheels in one manifest: compat.cuda-twice at the
    first wheel pin, naming the cuda section's line."""
    m = stack_220(tmp_path, mirror, wheels,
                  extra_pins=[wheels.pins[("nvidia-cublas-cu12", "12.9.2.10")]])
    p = tfprov.run("validate", m, root=False, check=0)
    lines = open(m).read().splitlines()
    ln = next(i for i, l in enumerate(lines, 1) if l.strip().startswith("nvidia-cublas-cu12=="))
    # The section's own position: its first entry, the line after `cuda:`.
    cuda_ln = next(i for i, l in enumerate(lines, 1) if l == "cuda:") + 1
    hit = re.search(rf"{re.escape(m)}:{ln}:\d+: warning: two CUDAs: the cuda section installs "
                    rf"CUDA 12\.5\.1 \(line {cuda_ln}\).*\[compat\.cuda-twice\]", p.stderr)
    assert hit, p.stderr


def test_wheel_cuda_disagreeing_with_versions_is_an_error(tfprov, tmp_path, wheels):
    m = stack_221(tmp_path, wheels, cuda="12.5", cudnn="9.3.0.75")
    p = tfprov.run("validate", m, root=False, check=3)
    assert re.search(r"error: nvidia-cuda-runtime-cu12 is 12\.9\.79, but versions\.cuda says "
                     r"12\.5 .*\[compat\.version-disagrees\]", p.stderr), p.stderr
    assert re.search(r"error: nvidia-cudnn-cu12 is 9\.23\.2\.1, but versions\.cudnn says "
                     r"9\.3\.0\.75 .*\[compat\.version-disagrees\]", p.stderr), p.stderr


def test_h5py_3_with_tf_115_is_flagged(tfprov, tmp_path):
    """The shipped legacy-1.15 carries the lock's h5py 3.2.1 (its lock is incomplete):
    validate warns once, at the h5py pin, naming the TensorFlow pin's line, the fact,
    the cap `tfprov lock` applies (h5py<3) and the source; exit 0 (a warning)."""
    m = os.path.join(REPO, "manifests", "legacy-1.15.yaml")
    p = tfprov.run("validate", m, root=False, check=0)
    lines = open(m).read().splitlines()
    ln = next(i for i, l in enumerate(lines, 1) if l.strip().startswith("h5py==3.2.1"))
    tf_ln = next(i for i, l in enumerate(lines, 1) if l.strip().startswith("tensorflow==1.15.4"))
    hits = re.findall(rf":{ln}:\d+: warning: h5py 3\.2\.1 with tensorflow 1\.15\.4 \(line {tf_ln}\) "
                      r"is known to break: .*\.decode\('utf8'\).*\[compat\.pip-known-bad\]\n"
                      r"  hint: pin h5py<3 \(tfprov lock applies this cap\); "
                      r"source: tensorflow/tensorflow#44467", p.stderr)
    assert len(hits) == 1, p.stderr
    assert p.stderr.count("[compat.pip-known-bad]") == 1, p.stderr


@pytest.mark.parametrize("manifest,host,needs,why", [
    ("stable-2.21.yaml", "2.26", "2.27", "manylinux_2_27_x86_64 of TensorFlow 2.21.0"),
    ("stable-2.20.yaml", "2.27", "2.28", "pip.min_glibc"),
])
def test_glibc_below_the_wheels_floor_blocks_the_plan(tfprov, manifest, host, needs, why):
    """The shipped current stacks on a host whose glibc is too old: the plan shows the pip
    step's blocker and exits 6 (nothing is fetched or changed); at the floor it passes.
    TFPROV_GLIBC_VERSION stands in for the host's glibc (gnu_get_libc_version)."""
    m = os.path.join(REPO, "manifests", manifest)
    p = tfprov.run("--no-gpu", "plan", m, env={"TFPROV_GLIBC_VERSION": host}, check=6)
    o = out(p)
    assert f"glibc {host} is older than {needs}" in o and why in o, o
    assert "apply would stop here, before any change (exit 6)" in o, o
    p = tfprov.run("--no-gpu", "apply", "-y", m, env={"TFPROV_GLIBC_VERSION": host}, check=6)
    assert not os.path.exists(tfprov.path("/opt/tfprov")), os.listdir(tfprov.root)
    p = tfprov.run("--no-gpu", "plan", m, env={"TFPROV_GLIBC_VERSION": needs}, check=0)
    assert "glibc" not in out(p), out(p)


def test_bad_min_glibc_is_a_manifest_error(tfprov, tmp_path, wheels):
    m = stack_221(tmp_path, wheels, extra="  min_glibc: two.27\n")
    p = tfprov.run("validate", m, root=False, check=3)
    ln = next(i for i, l in enumerate(open(m).read().splitlines(), 1) if "min_glibc" in l)
    assert re.search(rf"{re.escape(m)}:{ln}:\d+: error: .*pip\.min_glibc", p.stderr), p.stderr


def test_undeclared_wheel_cuda_is_warned(tfprov, tmp_path):
    """stable-2.21 without versions.cuda: the runtime wheel's CUDA is named at its pin."""
    src = open(os.path.join(REPO, "manifests", "stable-2.21.yaml")).read()
    assert '\n  cuda: "12.9"' in src
    m = tmp_path / "nocuda.yaml"
    m.write_text(src.replace('\n  cuda: "12.9"', "", 1))
    p = tfprov.run("validate", str(m), root=False, check=0)
    ln = next(i for i, l in enumerate(m.read_text().splitlines(), 1)
              if l.strip().startswith("nvidia-cuda-runtime-cu12=="))
    assert re.search(rf":{ln}:\d+: warning: nvidia-cuda-runtime-cu12 12\.9\.79 carries CUDA "
                     r"12\.9, which versions\.cuda does not declare \[compat\.version-undeclared\]",
                     p.stderr), p.stderr

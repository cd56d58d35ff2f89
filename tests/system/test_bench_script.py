"""bench/bench_conv.py and engine/gpu/benchrun.c without TensorFlow or a GPU.

TensorFlow is not installed on these machines. The no-TF path runs the real
script with nothing on PYTHONPATH; the no-GPU path puts a stand-in
`tensorflow` package on PYTHONPATH. The stand-in is NOT TensorFlow: it only
answers tf.config.list_physical_devices('GPU') with an empty list, which is
what real TensorFlow answers on a machine without a usable GPU.
"""
import json
import os
import subprocess
import sys

BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(os.getcwd(), "build"))
TOOL = os.path.join(BUILD, "py_tool")
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SRC, "bench", "bench_conv.py")
PY = "/usr/bin/python3"

STAND_IN = '''"""Stand-in for tensorflow in tfprov's tests: NOT TensorFlow. No GPU here."""
__version__ = "0.0-standin"


class _Config:
    @staticmethod
    def list_physical_devices(kind=None):
        return []


config = _Config()
'''


def run_script(pythonpath, *args):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath, "PYTHONNOUSERSITE": "1"}
    return subprocess.run([PY, SCRIPT, *args], capture_output=True, text=True, env=env,
                          timeout=60)


def standin(tmp_path):
    d = tmp_path / "site"
    (d / "tensorflow").mkdir(parents=True)
    (d / "tensorflow" / "__init__.py").write_text(STAND_IN)
    return str(d)


def test_without_tensorflow_reports_json_and_exit_3(tmp_path):
    r = run_script(str(tmp_path))
    assert r.returncode == 3, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is False and "cannot import tensorflow" in out["reason"]


def test_without_gpu_reports_json_and_exit_3(tmp_path):
    r = run_script(standin(tmp_path), "--precision", "mixed_float16", "--batch-size", "8")
    assert r.returncode == 3, r.stderr
    out = json.loads(r.stdout)
    assert out == {"ok": False, "tf_version": "0.0-standin",
                   "reason": "TensorFlow sees no GPU "
                             "(tf.config.list_physical_devices('GPU') is empty)"}


def test_bad_arguments_are_usage_errors(tmp_path):
    r = run_script(standin(tmp_path), "--steps", "0")
    assert r.returncode == 2


def test_benchrun_parses_no_gpu_result(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": standin(tmp_path)}
    r = subprocess.run([TOOL, "bench", PY, SCRIPT, "--steps", "5"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is False and out["exit_status"] == 3
    assert "no GPU" in out["reason"] and out["tf_version"] == "0.0-standin"


def test_benchrun_parses_a_measurement_among_log_lines(tmp_path):
    """A stand-in script that prints what bench_conv.py prints on a GPU, after
    the kind of banner lines TensorFlow writes to stdout."""
    fake = tmp_path / "fake_bench.py"
    fake.write_text(
        "import json\n"
        "print('2024-01-01 I tensorflow/core/... banner {not json')\n"
        "print(json.dumps({'ok': True, 'gpu': 'Stand-in GPU (not real)', 'precision': 'fp32',"
        " 'batch_size': 64, 'steps': 100, 'ms_per_step': 2.5, 'images_per_sec': 25600.0,"
        " 'tf_version': '2.15.1', 'cuda_version': '12.2', 'cudnn_version': '8'}))\n")
    r = subprocess.run([TOOL, "bench", PY, str(fake)], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is True and out["gpu"] == "Stand-in GPU (not real)"
    assert out["ms_per_step"] == 2.5 and out["images_per_sec"] == 25600.0


def test_reference_data_has_the_guides_unverified_figures():
    text = open(os.path.join(SRC, "bench", "reference.yaml")).read()
    assert "RTX 4070 Ti" in text and "ms_per_step: 2.1" in text and "ms_per_step: 1.3" in text
    assert text.count("verified: false") >= 2 and "source:" in text

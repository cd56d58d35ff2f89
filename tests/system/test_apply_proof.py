"""An apply ends with its proof: `verify` of the stack and, where NVML reports
a GPU and bench.enabled is true, the conv benchmark, recorded in state and
summarised in the apply's last lines; without a GPU both GPU parts say
SKIPPED; a failing proof is exit 8 with the stack applied and recorded; a
no-change apply stays a no-op unless `--bench` asks.

STAND-INS (as test_bench_cmd.py): CUDA 12.3.2 + cuDNN 8.9.7 archives of stub
libraries (make_stack.py); build/stubs/driver's NVML reporting an RTX 4070 Ti
with driver 545.23.08, the stack's stand-in libcudart/libcudnn computing the
probe convolution on the CPU; TensorFlow is not installable here, so the TF
benchmark is a stand-in script (TFPROV_BENCH_SCRIPT) printing what
bench/bench_conv.py prints on a GPU (test_bench_script.py's form).
Real: the binary, a real venv of the system's Python, SQLite,
bench/reference.yaml. Takes about 25 s (one venv) on an idle 2-core machine.
"""
import os
import sqlite3

import pytest

from lib_stack import GPU_NAME, make_stack, out, real_no_gpu_env, standin_gpu_env

VER = "3.11"
FAKE_BENCH = '''import json, sys
p = sys.argv[sys.argv.index("--precision") + 1]
print("I tensorflow/core banner line")
print(json.dumps({"ok": True, "gpu": %r, "precision": p, "batch_size": 64, "steps": 50,
                  "ms_per_step": {"fp32": 2.5, "mixed_float16": 1.4}[p],
                  "images_per_sec": 25600.0, "tf_version": "2.15.1",
                  "cuda_version": "12.3", "cudnn_version": "8"}))
''' % GPU_NAME


def rows(tfprov):
    c = sqlite3.connect(tfprov.state_db)
    try:
        return c.execute("SELECT source, precision, ms_per_step FROM bench_results "
                         "ORDER BY id").fetchall()
    finally:
        c.close()


def _stack(tmp_path, mirror, venv):
    """The stack; with `venv` a real venv for the TF benchmark (seconds), else none."""
    if venv and not os.access("/usr/bin/python" + VER, os.X_OK):
        pytest.skip("needs /usr/bin/python" + VER)
    extra = (f"python:\n  manager: venv\n  name: tf\n  version: \"{VER}\"\n"
             f"  interpreter: /usr/bin/python{VER}\n" if venv else "")
    extra += "bench:\n  enabled: true\n  precisions: [fp32, mixed_float16]\n"
    script = tmp_path / "fake_bench.py"
    script.write_text(FAKE_BENCH)
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml", python=VER, extra_yaml=extra)
    return m, str(script)


@pytest.fixture
def stack(tmp_path, mirror):
    return _stack(tmp_path, mirror, True)


@pytest.fixture
def bare_stack(tmp_path, mirror):
    return _stack(tmp_path, mirror, False)


def _last(p, n):
    return "\n".join(out(p).rstrip("\n").splitlines()[-n:])


def test_apply_on_a_gpu_ends_with_verify_and_the_benchmark(tfprov, stack):
    m, script = stack
    env = standin_gpu_env(TFPROV_BENCH_SCRIPT=script)
    p = tfprov.run("apply", "-y", m, env=env, timeout=300)
    assert p.returncode == 0, out(p)
    assert "GPU compute: Conv2D" in p.stdout, out(p)
    # The summary is the apply's last lines (stdout; the plan's warnings go to stderr).
    tail = "\n".join(p.stdout.rstrip("\n").splitlines()[-5:])
    assert "Stack demo, proof:" in tail, tail
    assert "verify: ok (files, libraries, GPU compute)" in tail, tail
    assert "benchmark: native Conv2D probe" in tail, tail
    assert ("benchmark: fp32 2.500 ms/step, 25600.0 images/s on %s (reference 2.100 ms: "
            "+19%%, within 25%% (unverified))" % GPU_NAME) in tail, tail
    assert "benchmark: mixed_float16 1.400 ms/step" in tail and "reference 1.300 ms" in tail
    assert rows(tfprov) == [("native", "fp32", rows(tfprov)[0][2]), ("tf", "fp32", 2.5),
                            ("tf", "mixed_float16", 1.4)]
    # A second apply changes nothing: no proof, nothing recorded, in well under a second.
    p = tfprov.run("apply", "-y", m, env=env)
    assert p.returncode == 0 and "No changes" in p.stdout, out(p)
    assert "proof" not in out(p) and "GPU compute" not in out(p), out(p)
    assert len(rows(tfprov)) == 3
    # --bench asks for it.
    p = tfprov.run("apply", "-y", "--bench", m, env=env, timeout=300)
    assert p.returncode == 0, out(p)
    assert "No changes" in p.stdout and "Stack demo, proof:" in p.stdout, out(p)
    assert len(rows(tfprov)) == 6
    # Slower than a verified reference by more than the margin: a warning, exit 0
    # (`tfprov bench` alone fails on it).
    ref = os.path.join(os.path.dirname(script), "reference.yaml")
    with open(ref, "w") as f:
        f.write("schema: 1\ndefault_margin_pct: 25\nreferences:\n"
                "  - gpu: \"%s\"\n    precision: fp32\n    ms_per_step: 1.0\n"
                "    verified: true\n    source: a test\n" % GPU_NAME)
    env["TFPROV_BENCH_REFERENCE"] = ref
    p = tfprov.run("apply", "-y", "--bench", m, env=env, timeout=300)
    assert p.returncode == 0, out(p)
    assert ("benchmark: fp32 2.500 ms/step, 25600.0 images/s on %s (reference 1.000 ms: "
            "+150%%, SLOWER than the 25%% margin)" % GPU_NAME) in p.stderr, out(p)
    assert tfprov.run("bench", "demo", env=env, timeout=300).returncode == 8


def test_apply_without_a_gpu_says_skipped(tfprov, bare_stack):
    m, script = bare_stack
    p = tfprov.run("--no-gpu", "apply", "-y", m,
                   env=real_no_gpu_env(TFPROV_BENCH_SCRIPT=script), timeout=300)
    assert p.returncode == 0, out(p)
    err = p.stderr
    assert "verify: files and libraries ok; GPU compute check SKIPPED (no GPU)" in err, err
    assert "benchmark: SKIPPED (no GPU): no number was measured" in err, err
    assert rows(tfprov) == []


def test_a_proof_that_fails_is_exit_8_with_the_stack_applied(tfprov, bare_stack):
    """The stand-in cuDNN computes a wrong convolution: verify's GPU layer fails:
    exit 8; the stack is applied and recorded (a second apply has nothing to do)."""
    m, script = bare_stack
    env = standin_gpu_env(TFPROV_BENCH_SCRIPT=script, TFPROV_STUB_CUDNN_CORRUPT="1")
    p = tfprov.run("apply", "-y", m, env=env, timeout=300)
    assert p.returncode == 8, out(p)
    assert "verify: FAILED" in p.stderr and "is applied and recorded" in p.stderr, out(p)
    assert "benchmark: not run: verify failed" in p.stderr, out(p)
    assert rows(tfprov) == []
    p = tfprov.run("apply", "-y", m, env=env)
    assert p.returncode == 0 and "No changes" in p.stdout, out(p)

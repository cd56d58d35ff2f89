"""scripts/closure-requires.py: the closure files' `requires` notations become
PEP 508 strings for pip.requires, and what it cannot read is left out and said,
never guessed."""
import os
import subprocess

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "closure-requires.py")

ROWS = [
    ("tensorflow", "absl-py>=1.0.0; numpy>=1.23.5,<2.0.0; protobuf>=3.20.3,<5.0.0dev,"
     "!=4.21.0-4.21.2; [and-cuda] nvidia-cublas-cu12>=12.5.3.2,<13.0, "
     "nvidia-cudnn-cu12>=9.3.0.75,<10.0; [gcs] tensorflow-io-gcs-filesystem>=0.23.1 "
     "(py<3.13); python>=3.9 (wheel metadata)"),
    ("h5py", "cached-property [python_version < '3.8']; numpy>=1.14.5 [python_version == '3.7']"),
    ("cryptography", "cffi (CPython only), typing-extensions (py<3.11): edges per the lock"),
    ("keras", "edges per lock: absl-py, numpy"),
    ("scipy", "numpy>=1.19.5,<1.27.0 || >2"),
    ("six", "none"),
]


def run(tmp_path, omit=None):
    tsv = tmp_path / "closure.tsv"
    lines = ["# a comment line", "name\tversion\tfilename\tsha256\turl\tsize\trequires\tsource"]
    lines += ["%s\t1.0\tf.whl\t%s\tu\t1\t%s\ts" % (n, "0" * 64, r) for n, r in ROWS]
    tsv.write_text("\n".join(lines) + "\n")
    argv = ["/usr/bin/python3", SCRIPT, str(tsv)] + (["--omit", omit] if omit else [])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return yaml.safe_load(p.stdout)["requires"], p.stderr


def test_notations_become_pep508(tmp_path):
    req, err = run(tmp_path)
    assert req["tensorflow"] == [
        "absl-py>=1.0.0",
        "numpy>=1.23.5,<2.0.0",
        "protobuf>=3.20.3,<5.0.0dev,!=4.21.0,!=4.21.1,!=4.21.2",
        "nvidia-cublas-cu12>=12.5.3.2,<13.0; extra == 'and-cuda'",
        "nvidia-cudnn-cu12>=9.3.0.75,<10.0; extra == 'and-cuda'",
        "tensorflow-io-gcs-filesystem>=0.23.1; (python_version < '3.13') and extra == 'gcs'",
    ]
    assert req["h5py"] == ["cached-property; python_version < '3.8'",
                           "numpy>=1.14.5; python_version == '3.7'"]
    assert req["keras"] == ["absl-py", "numpy"]
    assert req["six"] == []
    # Prose it cannot read is left out, and said on stderr.
    assert req["cryptography"] == ["cffi; platform_python_implementation == 'CPython'"]
    assert "cryptography: left out: typing-extensions (py<3.11): edges per the lock" in err
    assert req["scipy"] == [] and "scipy: left out: numpy>=1.19.5,<1.27.0 || >2" in err


def test_omit(tmp_path):
    req, _ = run(tmp_path, omit="six,keras")
    assert "six" not in req and "keras" not in req and "h5py" in req

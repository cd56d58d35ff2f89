"""`tfprov validate` on the original setup guide's mistakes.

Each manifest of tests/manifests/guide/ carries one mistake. The real binary
must name it at its line and column with its stable code, and exit 3 when the
diagnostic is an error, 0 when it is a warning only. The clean counterpart
exits 0 with no compat diagnostic, and a broken knowledge base is a tool
error (exit 1), not a verdict on the manifest.
"""
import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDE = "tests/manifests/guide"

# file, severity, line, column, code
CASES = [
    ("cuda-12.0-tf-2.15.yaml", "warning", 12, 9, "compat.cuda-untested"),
    ("windows-native-tf-2.15.yaml", "error", 8, 13, "compat.windows-native-gpu"),
    ("conda-cudatoolkit-12.3.yaml", "error", 42, 7, "compat.conda-package-discontinued"),
    ("conda-lock-cudatoolkit-12.3.yaml", "error", 44, 5, "compat.conda-package-discontinued"),
    ("conda-cudnn-8.9.4.yaml", "error", 41, 7, "compat.conda-no-such-version"),
    ("numpy-1.23-tf-2.15.yaml", "error", 50, 5, "compat.pip-requirement-conflict"),
    ("tensorflow-gpu-2.15.0.yaml", "error", 48, 5, "compat.pip-package-removed"),
    ("tf-1.15-cuda-10.1.yaml", "error", 13, 9, "compat.cuda-mismatch"),
    ("driver-below-cuda-min.yaml", "error", 17, 16, "compat.driver-below-cuda-min"),
    ("driver-minor-compat.yaml", "warning", 17, 16, "compat.driver-minor-compat"),
    ("cudnn-too-old.yaml", "error", 12, 10, "compat.cudnn-too-old"),
    ("python-3.12-tf-2.15.yaml", "error", 13, 11, "compat.python-unsupported"),
    ("gpu-cc-3.7-tf-2.15.yaml", "error", 18, 17, "compat.gpu-no-kernels"),
    ("gpu-cc-8.9-cuda-11.2.yaml", "warning", 18, 10, "compat.gpu-newer-than-cuda"),
    ("gpu-cc-9.0-tf-2.12.yaml", "warning", 18, 10, "compat.gpu-ptx-jit"),
    ("tf-unknown.yaml", "warning", 10, 15, "compat.tf-unknown"),
    ("cuda-11.8-tf-2.15.yaml", "error", 11, 9, "compat.cuda-major-mismatch"),
    ("cudnn-9-tf-2.15.yaml", "error", 12, 10, "compat.cudnn-major-mismatch"),
    ("cuda-12.7-no-such-release.yaml", "error", 11, 9, "compat.cuda-no-such-release"),
    ("pip-tf-mismatch.yaml", "error", 48, 5, "compat.pip-tf-mismatch"),
]

DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning): "
                  r"(?P<msg>.*) \[(?P<code>[a-z0-9.-]+)\]$", re.M)


def tfprov_bin():
    b = os.environ.get("TFPROV_BIN") or os.path.join(REPO, "build", "tfprov")
    if not os.access(b, os.X_OK):
        pytest.fail("tfprov binary not found: set TFPROV_BIN (%s)" % b)
    return b


def validate(path, env=None):
    e = dict(os.environ)
    e["NO_COLOR"] = "1"
    e.pop("TFPROV_COMPAT", None)
    if env:
        e.update(env)
    p = subprocess.run([tfprov_bin(), "validate", path], cwd=REPO, capture_output=True,
                       text=True, timeout=60, env=e)
    return p.returncode, p.stdout + p.stderr


def compat_diags(out):
    return [m for m in DIAG.finditer(out) if m.group("code").startswith("compat.")]


@pytest.mark.parametrize("name,sev,line,col,code", CASES, ids=[c[0] for c in CASES])
def test_guide_mistake(name, sev, line, col, code):
    path = "%s/%s" % (GUIDE, name)
    rc, out = validate(path)
    assert rc == (3 if sev == "error" else 0), out
    found = compat_diags(out)
    assert [m.group("code") for m in found] == [code], out
    m = found[0]
    assert (m.group("file"), int(m.group("line")), int(m.group("col")), m.group("sev")) == \
        (path, line, col, sev), out
    # The hint line follows the diagnostic.
    assert "\n  hint: " in out[m.end():m.end() + 10], out


def test_every_guide_manifest_has_a_case():
    files = sorted(f for f in os.listdir(os.path.join(REPO, GUIDE)) if f.endswith(".yaml"))
    assert files == sorted(c[0] for c in CASES)


def test_clean_manifest():
    rc, out = validate("tests/manifests/compat-clean.yaml")
    assert rc == 0, out
    assert compat_diags(out) == [], out


def test_broken_knowledge_base_is_a_tool_error(tmp_path):
    kb = tmp_path / "compat.yaml"
    kb.write_text("schema: 1\nsourcez: {}\n")
    rc, out = validate("tests/manifests/compat-clean.yaml", env={"TFPROV_COMPAT": str(kb)})
    assert rc == 1, out
    assert "%s:2:1: error: unknown key 'sourcez' [compat.kb-invalid]" % kb in out, out


def test_knowledge_base_override(tmp_path):
    # TFPROV_COMPAT wins: a copy without the Windows cut-off row is still loaded
    # from there, so the source tree's file is not what answered.
    src = open(os.path.join(REPO, "data/compat.yaml")).read()
    kb = tmp_path / "compat.yaml"
    kb.write_text(src.replace('    last: "2.10"\n', '    last: "2.15"\n'))
    path = "%s/windows-native-tf-2.15.yaml" % GUIDE
    rc, out = validate(path, env={"TFPROV_COMPAT": str(kb)})
    assert "compat.windows-native-gpu" not in out, out
    rc, out = validate(path)
    assert rc == 3 and "compat.windows-native-gpu" in out, out

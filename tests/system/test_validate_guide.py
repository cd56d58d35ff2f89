"""`tfprov validate` on the original setup guide's mistakes.

Each manifest of tests/manifests/guide/ carries one mistake (the original
guide's, one a wrong fact used to miss, or one a check was added for). The
real binary must name exactly the expected diagnostics at their line and
column with their stable codes, and exit 3 when one is an error, 0 when they
are warnings only. The correct stacks (compat-clean.yaml, tests/manifests/
clean/) exit 0 with no compat diagnostic, and a broken knowledge base is a
tool error (exit 1), not a verdict on the manifest.
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
    ("conda-cudatoolkit-12.3.yaml", "error", 48, 7, "compat.conda-package-discontinued"),
    ("conda-lock-cudatoolkit-12.3.yaml", "error", 50, 5, "compat.conda-package-discontinued"),
    ("conda-cudnn-8.9.4.yaml", "error", 47, 7, "compat.conda-no-such-version"),
    ("numpy-1.23-tf-2.15.yaml", "error", 56, 5, "compat.pip-requirement-conflict"),
    ("tensorflow-gpu-2.15.0.yaml", "error", 54, 5, "compat.pip-package-removed"),
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
    ("pip-tf-mismatch.yaml", "error", 54, 5, "compat.pip-tf-mismatch"),
    # Facts that were wrong.
    ("gpu-cc-9.0-tf-2.13.yaml", "warning", 19, 10, "compat.gpu-ptx-jit"),
    ("cudnn-8.8-tf-2.15.yaml", "error", 13, 10, "compat.cudnn-too-old"),
    ("driver-cuda-11.0-below-min.yaml", "error", 18, 16, "compat.driver-below-cuda-min"),
    ("driver-wsl2-527.41.yaml", "warning", 19, 16, "compat.driver-minor-compat"),
    # Facts that were missing.
    ("gpu-cc-10.3-cuda-12.2.yaml", "warning", 17, 10, "compat.gpu-newer-than-cuda"),
    ("gpu-cc-11.0-tf-2.15.yaml", "warning", 18, 10, "compat.gpu-ptx-jit"),
    ("gpu-cc-12.1-tf-2.15.yaml", "warning", 17, 10, "compat.gpu-ptx-jit"),
    ("driver-cuda-13.0.1.yaml", "error", 14, 9, "compat.cuda-major-mismatch"),
    ("driver-cuda-13.0.1.yaml", "warning", 19, 16, "compat.driver-minor-compat"),
    ("pip-protobuf-4.21.3-tf-2.12.yaml", "error", 56, 5, "compat.pip-requirement-conflict"),
    ("pip-keras-2-tf-2.16.yaml", "error", 55, 5, "compat.pip-requirement-conflict"),
    ("pip-ml-dtypes-tf-2.15.0.yaml", "error", 55, 5, "compat.pip-requirement-conflict"),
    ("pip-numpy-2-tf-2.18.yaml", "error", 55, 5, "compat.pip-requirement-conflict"),
    # Checks that were missing.
    ("declared-cuda-vs-section.yaml", "error", 19, 12, "compat.version-disagrees"),
    ("declared-cuda-vs-redist.yaml", "error", 20, 10, "compat.version-disagrees"),
    ("declared-cudnn-vs-artifact.yaml", "error", 35, 10, "compat.version-disagrees"),
    ("declared-python-vs-lock.yaml", "error", 47, 5, "compat.version-disagrees"),
    ("declared-python-vs-interpreter.yaml", "error", 43, 16, "compat.version-disagrees"),
    ("declared-tf-vs-pin.yaml", "error", 53, 5, "compat.pip-tf-mismatch"),
    ("declared-cuda-vs-runfile.yaml", "error", 19, 10, "compat.version-disagrees"),
    ("declared-cudnn-vs-redist.yaml", "error", 35, 10, "compat.version-disagrees"),
    ("cudnn-legacy-cuda-10.2-tgz.yaml", "error", 34, 10, "compat.cudnn-cuda-build-mismatch"),
    ("cudnn-cuda11-build-cuda-12.yaml", "error", 36, 10, "compat.cudnn-cuda-build-mismatch"),
    ("cudnn-variant-cuda11-cuda-12.yaml", "error", 39, 14, "compat.cudnn-cuda-build-mismatch"),
    ("conda-cudatoolkit-11.8-cuda-12.yaml", "error", 48, 7, "compat.conda-cuda-major-mismatch"),
    ("conda-cuda-version-12-cuda-11.yaml", "error", 45, 7, "compat.conda-cuda-major-mismatch"),
    ("conda-lock-cudatoolkit-11.8-cuda-12.yaml", "error", 49, 5,
     "compat.conda-cuda-major-mismatch"),
    ("mixed-precision-tf-1.15.yaml", "error", 58, 22, "compat.mixed-precision-unsupported"),
    ("mixed-precision-cc-6.1.yaml", "warning", 60, 22, "compat.mixed-precision-no-speedup"),
    ("gpu-cc-12.5-tf-2.15.yaml", "warning", 18, 10, "compat.gpu-cc-newer"),
    # What the packages' own metadata cannot see (issue 20): the whole lock's
    # recorded requirements, import-package clashes, the known-bad table,
    # values TF rejects in env.vars, versions YAML reads as numbers.
    ("pip-requires-tf-keras-2.15-tf-2.16.yaml", "error", 59, 5,
     "compat.pip-requires-unsatisfied"),
    ("pip-requires-missing.yaml", "error", 55, 5, "compat.pip-requires-missing"),
    ("pip-import-clash-tensorflow-cpu.yaml", "error", 55, 5, "compat.pip-import-clash"),
    ("pip-known-bad-numpy-2-tf-2.11.yaml", "error", 54, 5, "compat.pip-known-bad"),
    ("pip-known-bad-h5py-3-tf-1.15.yaml", "warning", 53, 5, "compat.pip-known-bad"),
    ("env-allow-growth-1.yaml", "error", 42, 32, "compat.env-value-rejected"),
    ("env-legacy-keras-without-tf-keras.yaml", "error", 43, 26, "compat.env-needs-package"),
    ("yaml-number-python-3.10.yaml", "warning", 13, 11, "schema.yaml-number"),
    # Every package that carries CUDA, at NVIDIA's granularity for its generation.
    ("cuda-package-cupy-cuda11x-cuda-12.yaml", "error", 57, 5, "compat.cuda-package-mismatch"),
    ("cuda-archive-nvcc-12.5-cuda-12.2.yaml", "warning", 27, 12,
     "compat.cuda-component-release"),
    ("conda-cudatoolkit-10.1-cuda-10.0.yaml", "error", 48, 5,
     "compat.conda-cuda-release-mismatch"),
    # The libraries TF's CUDA generation loads, against what the stack ships.
    ("cuda-libs-missing-nvjitlink.yaml", "error", 20, 3, "compat.cuda-libs-missing"),
    ("pip-cuda-wheels-missing-nvjitlink.yaml", "error", 29, 3, "compat.cuda-libs-missing"),
    # env.vars over what tfprov derives (issue 33, item 2): the stack's CUDA
    # dropped or another CUDA put before it, in every variable the env step derives.
    ("env-overrides-derived-cuda.yaml", "warning", 46, 16, "compat.env-shadows-stack"),
    ("env-overrides-derived-cuda.yaml", "warning", 47, 22, "compat.env-shadows-stack"),
    ("env-overrides-derived-cuda.yaml", "warning", 48, 16, "compat.env-shadows-stack"),
    ("env-overrides-derived-cuda.yaml", "warning", 49, 11, "compat.env-shadows-stack"),
    ("env-overrides-derived-cuda.yaml", "warning", 50, 20, "compat.env-shadows-stack"),
    ("env-overrides-wheel-cuda.yaml", "warning", 22, 22, "compat.env-shadows-stack"),
    ("env-overrides-wheel-cuda.yaml", "warning", 23, 16, "compat.env-shadows-stack"),
    # The CUDA wheels (issue 33, item 4): TF's [and-cuda] requirements, one CUDA release.
    ("pip-and-cuda-curand-outside-tf-2.19.yaml", "error", 49, 5, "compat.and-cuda-range"),
    ("pip-and-cuda-nccl-outside-tf-2.17.yaml", "error", 55, 5, "compat.and-cuda-range"),
    ("pip-cuda-wheels-mixed-releases-tf-2.20.yaml", "warning", 35, 5,
     "compat.cuda-wheels-mixed"),
    # Declared against known (issue 33, item 3): pip.min_glibc against TF's wheel tag.
    ("pip-min-glibc-below-tf-2.19-wheel.yaml", "error", 31, 14, "compat.min-glibc-below-wheels"),
    # Companion packages (issue 33, item 1): a release line built (abi), importable
    # (import) or tested (tested) for other TF versions; a project that has ended.
    ("companion-text-2.15-tf-2.16.yaml", "error", 59, 5, "compat.companion-window"),
    ("companion-io-0.37-tf-2.17.yaml", "error", 60, 5, "compat.companion-window"),
    ("companion-probability-0.25-tf-2.16.yaml", "error", 58, 5, "compat.companion-window"),
    ("companion-addons-0.22-tf-2.16.yaml", "warning", 59, 5, "compat.companion-window"),
    ("companion-addons-0.22-tf-2.16.yaml", "warning", 59, 5, "compat.companion-ended"),
    ("companion-keras-nlp-ended.yaml", "warning", 58, 5, "compat.companion-ended"),
]
FILES = sorted(set(c[0] for c in CASES))
CLEAN = "tests/manifests/clean"

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
    return [m for m in DIAG.finditer(out)
            if m.group("code").startswith("compat.") or m.group("code") == "schema.yaml-number"]


@pytest.mark.parametrize("name", FILES)
def test_guide_mistake(name):
    path = "%s/%s" % (GUIDE, name)
    want = sorted((path, line, col, sev, code) for f, sev, line, col, code in CASES if f == name)
    rc, out = validate(path)
    assert rc == (3 if any(w[3] == "error" for w in want) else 0), out
    found = compat_diags(out)
    got = sorted((m.group("file"), int(m.group("line")), int(m.group("col")), m.group("sev"),
                  m.group("code")) for m in found)
    assert got == want, out
    for m in found:
        # The hint line follows each diagnostic.
        assert "\n  hint: " in out[m.end():m.end() + 10], out


def test_every_guide_manifest_has_a_case():
    files = sorted(f for f in os.listdir(os.path.join(REPO, GUIDE)) if f.endswith(".yaml"))
    assert files == FILES


def test_clean_manifest():
    rc, out = validate("tests/manifests/compat-clean.yaml")
    assert rc == 0, out
    assert compat_diags(out) == [], out


CLEAN_FILES = sorted(f for f in os.listdir(os.path.join(REPO, CLEAN)) if f.endswith(".yaml"))


@pytest.mark.parametrize("name", CLEAN_FILES)
def test_correct_stack_has_no_compat_diagnostic(name):
    # Among them the stacks wrong facts used to flag: an A100 with TF 2.12 ("PTX
    # JIT"), an H100 with TF 2.15 ("PTX JIT"), cuDNN 8.9.1 with TF 2.15 (an error).
    rc, out = validate("%s/%s" % (CLEAN, name))
    assert rc == 0, out
    assert compat_diags(out) == [], out


def test_cuda_untested_hint_is_not_minor_version_compatibility():
    # Newer CUDA libraries of the same major under a TF build is compatibility within
    # a major; NVIDIA's "minor-version compatibility" is a newer toolkit on an older driver.
    rc, out = validate("manifests/stable-2.15.yaml")
    line = [l for l in out.splitlines() if "[compat.cuda-untested]" in l]
    assert len(line) == 1, out
    hint = out.split(line[0], 1)[1].splitlines()[1]
    assert hint.startswith("  hint: ") and "same major 12" in hint, out
    assert "minor-version" not in hint, out


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


def test_requirement_names_both_packages_and_the_range():
    # The must-show of issue 20: another package requires a TensorFlow range the
    # lock does not meet; the diagnostic sits at that package's line and names
    # both packages, the requirement and the pinned TensorFlow.
    path = "%s/pip-requires-tf-keras-2.15-tf-2.16.yaml" % GUIDE
    rc, out = validate(path)
    assert rc == 3, out
    want = ("%s:59:5: error: tf-keras 2.15.0 requires tensorflow<2.16,>=2.15, but the lock "
            "pins tensorflow 2.16.1 (line 57) [compat.pip-requires-unsatisfied]" % path)
    assert want in out, out


def test_known_bad_names_fact_and_source():
    rc, out = validate("%s/pip-known-bad-numpy-2-tf-2.11.yaml" % GUIDE)
    assert "compiled against NumPy 1.x" in out and "tensorflow/tensorflow#102743" in out, out


def test_markers_are_evaluated_for_the_target_python(tmp_path):
    # Markers are evaluated for the stack's target: on linux the Windows-only
    # tensorflow-intel and the inactive and-cuda extra do not apply.
    src = open(os.path.join(REPO, CLEAN, "legacy-keras-tf-2.16.yaml")).read()
    rc, out = validate("%s/legacy-keras-tf-2.16.yaml" % CLEAN)
    assert rc == 0 and compat_diags(out) == [], out
    m = tmp_path / "py312.yaml"
    # Python 3.12 selects the other numpy line (>=1.26.0): 1.26.4 still meets it.
    m.write_text(src.replace('"3.11"', '"3.12"').replace("python-3.11.9", "python-3.12.5"))
    rc, out = validate(str(m))
    assert rc == 0 and compat_diags(out) == [], out
    bad = tmp_path / "numpy-1.25-py312.yaml"
    bad.write_text(src.replace('"3.11"', '"3.12"').replace("python-3.11.9", "python-3.12.5")
                   .replace("numpy==1.26.4", "numpy==1.25.2"))
    rc, out = validate(str(bad))
    assert rc == 3, out
    codes = [m.group("code") for m in compat_diags(out)]
    assert codes == ["compat.pip-requires-unsatisfied"], out
    assert 'numpy<2.0.0,>=1.26.0; python_version >= "3.12"' in out, out


def derived(tmp_path, clean, name, old, new):
    """A clean stack with one change: the check must see exactly that change."""
    src = open(os.path.join(REPO, CLEAN, clean)).read()
    assert old in src, old
    m = tmp_path / name
    m.write_text(src.replace(old, new, 1))
    rc, out = validate(str(m))
    return m, rc, out, [(int(d.group("line")), d.group("sev"), d.group("code"))
                        for d in compat_diags(out)]


def line_of(path, needle):
    return [i + 1 for i, l in enumerate(open(path).read().splitlines()) if needle in l][0]


def test_unreadable_requirement_is_a_warning_at_its_line(tmp_path):
    m, rc, out, got = derived(tmp_path, "legacy-keras-tf-2.16.yaml", "bad.yaml",
                              "      - 'absl-py'\n", "      - 'absl-py; bogus_var == \"x\"'\n")
    assert rc == 0, out
    assert got == [(line_of(m, "bogus_var"), "warning", "compat.pip-requires-unreadable")], out
    assert "an environment marker variable PEP 508 does not define" in out, out


def test_package_built_for_a_newer_minor_is_a_warning(tmp_path):
    # cupy-cuda115 (CUDA 11.5) on a CUDA 11.2 stack: minor-version compatibility runs
    # the older on the newer only; cupy-cuda110 (the clean file) is the boundary.
    m, rc, out, got = derived(tmp_path, "cuda-packages-cuda-11.2.yaml", "cupy115.yaml",
                              "cupy-cuda110==9.6.0", "cupy-cuda115==9.6.0")
    assert rc == 0, out
    assert got == [(line_of(m, "cupy-cuda115"), "warning", "compat.cuda-package-newer")], out


def test_requirement_met_by_the_conda_lock_or_not(tmp_path):
    # tensorboard's recorded requirement on setuptools is judged against the conda
    # lock's setuptools 81.0.0 (no pip pin): >=41 passes, >=82 does not.
    req = ("  requires:\n    tensorboard:\n      - 'setuptools>=%s'\n"
           "bench:\n")
    m, rc, out, got = derived(tmp_path, "known-bad-boundaries-tf-1.15.yaml", "ok.yaml",
                              "bench:\n", req % "41.0.0")
    assert rc == 0 and got == [], out
    m, rc, out, got = derived(tmp_path, "known-bad-boundaries-tf-1.15.yaml", "bad.yaml",
                              "bench:\n", req % "82")
    assert rc == 3, out
    assert got == [(line_of(m, "tensorboard==1.15.0"), "error",
                    "compat.pip-requires-unsatisfied")], out
    assert "tensorboard 1.15.0 requires setuptools>=82, but the conda lock has setuptools " \
           "81.0.0" in out, out


def test_env_override_names_what_is_shadowed_and_by_what():
    # Issue 33, item 2: the warning names the stack's own value and the one that
    # shadows it, and the hint says how to keep both.
    rc, out = validate("%s/env-overrides-derived-cuda.yaml" % GUIDE)
    assert rc == 0, out
    assert ('LD_LIBRARY_PATH="/usr/local/cuda-11.8/lib64:/opt/tfprov/cuda/12.2.2/lib64" puts '
            "another CUDA (/usr/local/cuda-11.8/lib64) before the stack's "
            "/opt/tfprov/cuda/12.2.2/lib64") in out, out
    assert ("drops the stack's --xla_gpu_cuda_data_dir=/opt/tfprov/cuda/12.2.2" in out), out
    assert ('e.g. "--xla_gpu_cuda_data_dir=/opt/tfprov/cuda/12.2.2 '
            '--xla_gpu_enable_fast_min_max"') in out, out
    assert ("drops the stack's /opt/tfprov/envs/tf/bin, /opt/tfprov/cuda/12.2.2/bin" in out), out
    assert "($NAME is not expanded)" in out, out
    assert 'CUDA_HOME="/usr/local/cuda" replaces the stack\'s /opt/tfprov/cuda/12.2.2' in out, out


def _variant(tmp_path, src, name, *subs):
    """A copy of a shipped manifest with (old, new) text replacements, each required."""
    text = open(os.path.join(REPO, src)).read()
    for old, new in subs:
        assert old in text, (src, old)
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _platform_diags(path):
    rc, out = validate(path)
    return rc, [(int(m.group("line")), int(m.group("col")), m.group("sev"))
                for m in compat_diags(out) if m.group("code") == "compat.artifact-platform"], out


PLATFORM_CASES = [
    # a redist archive of NVIDIA's windows-x86_64 key in a linux-x86_64 stack, at its url
    ("manifests/stable-2.12.yaml", [(
        "cuda_cupti/linux-x86_64/cuda_cupti-linux-x86_64-",
        "cuda_cupti/windows-x86_64/cuda_cupti-windows-x86_64-")], [(69, 12, "error")]),
    # a conda package of the win-64 subdir in a linux stack, at its lock line
    ("manifests/stable-2.15.yaml", [("conda-forge/linux-64/python-3", "conda-forge/win-64/python-3")],
     [(171, 5, "error")]),
    # a Windows runfile and a Windows cuDNN zip in the legacy Linux stack
    ("manifests/legacy-1.15.yaml", [
        ("cuda_10.0.130_410.48_linux", "cuda_10.0.130_411.31_win10.exe"),
        ("cudnn-10.0-linux-x64-v7.6.5.32.tgz", "cudnn-10.0-windows10-x64-v7.6.5.32.zip")],
     [(80, 10, "error"), (87, 10, "error")]),
    # a linux stack declared windows: its linux-64 conda packages and archives are named
    ("manifests/stable-2.9.yaml", [("platform: linux-x86_64", "platform: windows-x86_64")],
     "many"),
    # correct stacks stay clean: WSL2 runs the Linux artifacts
    ("manifests/stable-2.12.yaml", [("platform: linux-x86_64", "platform: wsl2")], []),
    ("manifests/stable-2.20.yaml", [], []),
]


@pytest.mark.parametrize("src,subs,want", PLATFORM_CASES,
                         ids=["redist-key", "conda-subdir", "runfile-tarball", "declared-windows",
                              "wsl2-clean", "clean"])
def test_artifact_platform_against_stack_platform(tmp_path, src, subs, want):
    path = _variant(tmp_path, src, "p.yaml", *subs)
    rc, got, out = _platform_diags(path)
    if want == "many":
        assert rc == 3 and len(got) > 3, out
        assert "is for linux-x86_64, but stack.platform is windows-x86_64" in out
        return
    assert got == want, out
    if want:
        assert rc == 3 and "but stack.platform is linux-x86_64" in out, out


def test_wheel_platform_tag_of_a_direct_reference(tmp_path):
    """A wheel pinned by URL carries its platform tag: win_amd64 in a Linux stack is an
    error at its line; the manylinux and pure-Python ones are not judged wrong."""
    src = "manifests/stable-2.12.yaml"
    text = open(os.path.join(REPO, src)).read()
    anchor = "  requirements: |\n"
    assert anchor in text
    line = text[:text.index(anchor)].count("\n") + 2
    url = "https://files.pythonhosted.org/packages/xx/"
    wheels = ("    six @ %ssix-1.16.0-py2.py3-none-any.whl --hash=sha256:%s\n"
              "    wrapt @ %swrapt-1.14.1-cp39-cp39-win_amd64.whl --hash=sha256:%s\n"
              "    grpcio @ %sgrpcio-1.60.0-cp39-cp39-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
              " --hash=sha256:%s\n") % (url, "a" * 64, url, "b" * 64, url, "c" * 64)
    path = tmp_path / "w.yaml"
    path.write_text(text.replace(anchor, anchor + wheels, 1))
    rc, got, out = _platform_diags(str(path))
    assert got == [(line + 1, 5, "error")], out
    assert "the wheel wrapt-1.14.1-cp39-cp39-win_amd64.whl is for windows-x86_64" in out


def test_shipped_manifests_have_no_platform_diagnostic():
    for f in sorted(os.listdir(os.path.join(REPO, "manifests"))):
        if f.endswith(".yaml"):
            rc, got, out = _platform_diags("manifests/" + f)
            assert got == [], out


WHEEL_URL = "https://files.pythonhosted.org/packages/xx/"


@pytest.mark.parametrize("wheel,want", [
    # built for another CPython than versions.python (3.9): at the requirement's line
    ("wrapt @ %swrapt-1.14.1-cp310-cp310-manylinux_2_17_x86_64.whl",
     "the wheel wrapt-1.14.1-cp310-cp310-manylinux_2_17_x86_64.whl is for CPython 3.10, "
     "but versions.python says 3.9"),
    # an abi3 wheel is a floor: cp311-abi3 needs 3.11 or later
    ("cryptography @ %scryptography-42.0.5-cp311-abi3-manylinux_2_28_x86_64.whl",
     "is for CPython 3.11 and later, but versions.python says 3.9"),
    # TensorFlow's own wheel of another release than versions.tensorflow
    ("tensorflow @ %stensorflow-2.11.0-cp39-cp39-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
     "the wheel tensorflow-2.11.0-cp39-cp39-manylinux_2_17_x86_64.manylinux2014_x86_64.whl is "
     "2.11.0, but versions.tensorflow says 2.12.0"),
    # correct ones stay clean: the stack's CPython, an abi3 floor below it, pure Python
    ("wrapt @ %swrapt-1.14.1-cp39-cp39-manylinux_2_17_x86_64.whl", None),
    ("cryptography @ %scryptography-42.0.5-cp37-abi3-manylinux_2_28_x86_64.whl", None),
    ("six @ %ssix-1.16.0-py2.py3-none-any.whl", None),
], ids=["cp310-in-3.9", "abi3-floor-above", "tf-wheel-release", "cp39-clean", "abi3-clean",
        "pure-clean"])
def test_wheel_name_against_declared_versions(tmp_path, wheel, want):
    text = open(os.path.join(REPO, "manifests/stable-2.12.yaml")).read()
    anchor = "  requirements: |\n"
    line = text[:text.index(anchor)].count("\n") + 2
    req = "    " + (wheel % WHEEL_URL) + " --hash=sha256:" + "d" * 64 + "\n"
    path = tmp_path / "w.yaml"
    path.write_text(text.replace(anchor, anchor + req, 1))
    rc, out = validate(str(path))
    got = [(int(m.group("line")), int(m.group("col")), m.group("sev"))
           for m in compat_diags(out) if m.group("code") == "compat.version-disagrees"]
    if want is None:
        assert got == [], out
        return
    assert got == [(line, 5, "error")] and rc == 3, out
    assert want in out, out
def test_companion_names_the_release_line_for_the_stacks_tf_and_its_source():
    rc, out = validate("%s/companion-text-2.15-tf-2.16.yaml" % GUIDE)
    assert rc == 3, out
    want = ("%s/companion-text-2.15-tf-2.16.yaml:59:5: error: tensorflow-text 2.15.0 is built "
            "for TensorFlow >=2.15.0,<2.16, but the stack's TensorFlow is 2.16.1 (line 57) "
            "[compat.companion-window]" % GUIDE)
    assert want in out, out
    hint = out.split(want, 1)[1].splitlines()[1]
    assert hint.startswith("  hint: take tensorflow-text==2.16.*, the release line for "
                           "TensorFlow 2.16.1"), out
    assert "https://github.com/tensorflow/text/blob/0f59980efb0f1c8af44ded04147b30a1d1cc0a6b/" \
        "oss_scripts/pip_package/setup.py" in hint, out
    # No release line made for the TF: said so, with the newest line's window.
    rc, out = validate("%s/companion-io-0.37-tf-2.17.yaml" % GUIDE)
    assert "no tensorflow-io release line is made for TensorFlow 2.17.0 (the newest, 0.37, " \
        "is for TensorFlow >=2.16,<2.17)" in out, out


def test_companion_ended_names_its_end_and_what_replaced_it():
    rc, out = validate("%s/companion-addons-0.22-tf-2.16.yaml" % GUIDE)
    assert rc == 0, out
    assert "tensorflow-addons 0.22.0 has ended (2024-05)" in out, out
    assert "hint: replaced by Keras and TF core" in out, out
    assert "tensorflow/addons#2807" in out, out
    rc, out = validate("%s/companion-keras-nlp-ended.yaml" % GUIDE)
    assert "keras-nlp 0.15.1 has ended (2024-09)" in out and "keras-hub" in out, out


def test_lock_check_reports_a_companion_outside_its_window():
    p = subprocess.run([tfprov_bin(), "lock", "--check",
                        "%s/companion-probability-0.25-tf-2.16.yaml" % GUIDE],
                       cwd=REPO, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, NO_COLOR="1"))
    out = p.stdout + p.stderr
    assert p.returncode == 3, out
    assert ("%s/companion-probability-0.25-tf-2.16.yaml:58:5: error: tensorflow-probability "
            "0.25.0 imports only with TensorFlow >=2.18, but the stack's TensorFlow is 2.16.1 "
            "(line 56) [compat.companion-window]" % GUIDE) in out, out
    assert "take tensorflow-probability==0.24.*" in out, out
    p = subprocess.run([tfprov_bin(), "lock", "--check", "%s/companions-tf-2.16.yaml" % CLEAN],
                       cwd=REPO, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, NO_COLOR="1"))
    assert p.returncode == 0, p.stdout + p.stderr

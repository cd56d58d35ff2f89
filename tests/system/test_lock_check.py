"""`tfprov lock --check MANIFEST...` (CI, pre-commit) and the shipped
.pre-commit-hooks.yaml.

Reads only: no network, no state. Each problem is one FILE:LINE:COL diagnostic
with a code; exit 3 when any manifest has one, 0 when all are completely locked.
The manifests here are check fixtures: nothing is downloaded, so their hashes are
sha256 digests of labels, never fetched.
"""
import hashlib
import os
import re
import shlex
import subprocess

import pytest

try:
    import yaml
except ImportError:  # pragma: no cover
    yaml = None

from lib_provision import out

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STABLE = [os.path.join(REPO, "manifests", f"stable-{v}.yaml") for v in ("2.15", "2.12", "2.9")]


def h(label):
    return hashlib.sha256(label.encode()).hexdigest()


def pin(name, ver):
    return f"    {name}=={ver} --hash=sha256:{h(name + ver)}\n"


def manifest(path, pins="", complete="true", tf="2.15.1", python_yaml=None, extra=""):
    py = python_yaml or "python:\n  manager: venv\n  name: t\n"
    text = ("schema: 1\nstack:\n  name: t\n  platform: linux-x86_64\n"
            f"versions:\n  tensorflow: {tf}\n  python: \"3.10\"\n"
            "driver:\n  policy: skip\n" + extra + py)
    if pins:
        text += f"pip:\n  complete: {complete}\n  requirements: |\n" + pins
    path.write_text(text)
    return str(path)


def line_of(path, needle):
    return next(i for i, l in enumerate(open(path).read().splitlines(), 1) if needle in l)


def diags(p):
    """[(line, code)] of the error diagnostics printed."""
    return [(int(m.group(1)), m.group(2)) for m in
            re.finditer(r":(\d+):\d+: error: .*\[([a-z.-]+)\]", p.stderr)]


def test_shipped_stacks_pass(tfprov):
    """The three shipped stacks are completely locked: one run, exit 0, no diagnostic."""
    p = tfprov.run("lock", "--check", *STABLE, root=False)
    assert p.returncode == 0, out(p)
    for m in STABLE:
        assert re.search(re.escape(m) + r": locked \(\d+ pip pins, complete\)", p.stdout), out(p)
    assert "error" not in p.stderr
    # validate's warnings (NCCL under `missing:`, ...) are not repeated when nothing fails.
    assert "warning" not in p.stderr, p.stderr


def test_incomplete_pip_lock(tfprov, tmp_path):
    m = manifest(tmp_path / "a.yaml", pin("tensorflow", "2.15.1"), complete="false")
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 3, out(p)
    assert diags(p) == [(line_of(m, "complete: false"), "lock.incomplete")], out(p)
    assert f"tfprov lock {m}" in p.stderr


def test_version_mismatch_and_duplicate(tfprov, tmp_path):
    """tensorflow pinned at another version than versions.tensorflow (validate's
    knowledge-base check, in the same list), and a package pinned twice: one
    diagnostic each, at the requirement's line."""
    pins = pin("tensorflow", "2.15.0") + pin("six", "1.17.0") + pin("six", "1.16.0")
    m = manifest(tmp_path / "b.yaml", pins)
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 3, out(p)
    assert sorted(diags(p)) == [(line_of(m, "tensorflow==2.15.0"), "compat.pip-tf-mismatch"),
                                (line_of(m, "six==1.16.0"), "lock.duplicate")], out(p)
    assert "declares TensorFlow 2.15.1" in p.stderr


def test_complete_lock_without_tensorflow(tfprov, tmp_path):
    m = manifest(tmp_path / "c.yaml", pin("six", "1.17.0"))
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 3, out(p)
    # Positioned at the pip mapping (its first key).
    assert diags(p) == [(line_of(m, "complete: true"), "lock.version-mismatch")], out(p)


def test_setuptools_cap_from_knowledge_base(tfprov, tmp_path):
    """setuptools 82 with TensorBoard 2.15.2 breaks the knowledge base's cap (the
    diagnostic says why and where the fact comes from); 81 passes; so does 82 with
    TF 2.21.0, which has no TensorBoard; 82 with TensorBoard 2.20.0 (TF 2.20.0),
    which still imports pkg_resources, is refused."""
    base = pin("tensorflow", "2.15.1")
    bad = manifest(tmp_path / "d.yaml", base + pin("tensorboard", "2.15.2") +
                   pin("setuptools", "82.0.0"))
    p = tfprov.run("lock", "--check", bad, root=False)
    assert p.returncode == 3, out(p)
    # The cap is a row of the knowledge base's known-bad table: validate's diagnostic.
    assert diags(p) == [(line_of(bad, "setuptools==82.0.0"), "compat.pip-known-bad")], out(p)
    assert "pkg_resources" in p.stderr and "pypa/setuptools" in p.stderr
    ok = manifest(tmp_path / "e.yaml", base + pin("tensorboard", "2.15.2") +
                  pin("setuptools", "81.0.0"))
    newer = manifest(tmp_path / "f.yaml", pin("tensorflow", "2.21.0") +
                     pin("setuptools", "82.0.1"), tf="2.21.0")
    p = tfprov.run("lock", "--check", ok, newer, root=False)
    assert p.returncode == 0, out(p)
    tb220 = manifest(tmp_path / "g.yaml", pin("tensorflow", "2.20.0") +
                     pin("tensorboard", "2.20.0") + pin("setuptools", "82.0.1"), tf="2.20.0")
    p = tfprov.run("lock", "--check", tb220, root=False)
    assert p.returncode == 3, out(p)
    assert diags(p) == [(line_of(tb220, "setuptools==82.0.1"), "compat.pip-known-bad")], out(p)


def test_cap_sees_conda_setuptools(tfprov, tmp_path):
    """setuptools from the conda lock counts too (stable-2.15 takes it from there)."""
    lock = ("python:\n  manager: conda\n  name: t\n  lock: |\n    @EXPLICIT\n"
            f"    https://x.invalid/linux-64/python-3.10.13-h0_0.conda#sha256:{h('py')}\n"
            f"    https://x.invalid/noarch/setuptools-82.0.1-pyh0_0.conda#sha256:{h('st')}\n")
    m = manifest(tmp_path / "g.yaml", pin("tensorflow", "2.15.1") + pin("tensorboard", "2.15.2"),
                 python_yaml=lock)
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 3, out(p)
    assert diags(p) == [(line_of(m, "setuptools-82.0.1"), "compat.pip-known-bad")], out(p)


def test_conda_python_mismatch(tfprov, tmp_path):
    lock = ("python:\n  manager: conda\n  name: t\n  lock: |\n    @EXPLICIT\n"
            f"    https://x.invalid/linux-64/python-3.9.19-h0_0.conda#sha256:{h('py39')}\n")
    m = manifest(tmp_path / "h.yaml", pin("tensorflow", "2.15.1"), python_yaml=lock)
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 3, out(p)
    assert diags(p) == [(line_of(m, "python-3.9.19"), "compat.version-disagrees")], out(p)
    assert "python package is 3.9.19, but versions.python says 3.10" in p.stderr


def test_redist_reference_unresolved(tfprov, tmp_path):
    """A cuda.redist reference is resolved at apply: not a complete lock yet."""
    extra = ("cuda:\n  version: 12.3.2\n  redist:\n"
             "    url: https://x.invalid/redistrib_12.3.2.json\n"
             f"    sha256: {h('json')}\n    size: 100\n    components: [cuda_cudart, libcublas, "
             "libcufft, libcurand, libcusolver, libcusparse, libnvjitlink]\n")
    m = manifest(tmp_path / "i.yaml", pin("tensorflow", "2.15.1"), extra=extra)
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 3, out(p)
    # Positioned at the redist mapping (its first key).
    assert diags(p) == [(line_of(m, "redistrib_12.3.2.json"), "lock.unresolved")], out(p)
    assert "https://x.invalid/redistrib_12.3.2.json" in p.stderr


def test_many_manifests_one_bad_one_invalid(tfprov, tmp_path):
    """Every manifest is checked: the good one is reported locked, the incomplete one
    and the invalid one fail, and the run exits 3."""
    good = manifest(tmp_path / "ok.yaml", pin("tensorflow", "2.15.1"))
    inc = manifest(tmp_path / "inc.yaml", pin("tensorflow", "2.15.1"), complete="false")
    broken = tmp_path / "broken.yaml"
    broken.write_text("schema: 1\nstack: [\n")
    p = tfprov.run("lock", "--check", inc, str(broken), good, root=False)
    assert p.returncode == 3, out(p)
    assert f"{good}: locked (1 pip pin, complete)" in p.stdout, out(p)
    assert f"{inc}: not completely locked: 1 problem" in p.stderr
    assert f"{broken}:" in p.stderr


# ------------------------------------------------------------------ pre-commit hooks


def hooks():
    assert yaml is not None, "python3-yaml is needed"
    with open(os.path.join(REPO, ".pre-commit-hooks.yaml")) as f:
        return {h["id"]: h for h in yaml.safe_load(f)}


def test_readme_precommit_rev_is_this_release():
    """The README's example `rev:` is the tag of this version (v + CMake's VERSION)."""
    cmake = open(os.path.join(REPO, "CMakeLists.txt")).read()
    version = re.search(r"project\(tfprov VERSION ([0-9.]+)", cmake).group(1)
    readme = open(os.path.join(REPO, "README.md")).read()
    revs = re.findall(r"^\s+rev: (\S+)", readme, re.M)
    assert revs == ["v" + version], revs


@pytest.mark.parametrize("hook", ["tfprov-validate", "tfprov-lock-check"])
def test_precommit_hook_runs_as_pre_commit_would(hook, tfprov, tmp_path):
    """Each hook's entry, run the way pre-commit runs it (entry + the matching changed
    files), passes on the shipped stacks and fails on a broken manifest; its `files`
    pattern selects manifests and its `exclude` skips the knowledge base."""
    hk = hooks()[hook]
    assert hk["language"] == "system"
    files, exclude = re.compile(hk["files"]), re.compile(hk["exclude"])
    assert all(files.search(m) and not exclude.search(m) for m in STABLE)
    assert exclude.search("data/compat.yaml") and exclude.search(".pre-commit-hooks.yaml")
    # Only manifests: CI files and other YAML of a repository are not passed to it.
    for other in (".gitlab-ci.yml", "ci/.gitlab-ci.yml", "docker-compose.yaml",
                  ".github/workflows/ci.yml", "manifests/data/closure.yaml"):
        assert not files.search(other) or exclude.search(other), other
    assert files.search("stacks/manifests/team.yml")
    argv = shlex.split(hk["entry"])
    assert argv[0] == "tfprov"
    cmd = [tfprov.bin] + argv[1:]
    p = subprocess.run(cmd + STABLE, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, out(p)
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 1\nstack:\n  name: x\n  platform: linux-x86_64\nbogus: 1\n")
    p = subprocess.run(cmd + [str(bad)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, out(p)
    assert f"{bad}:5:1:" in p.stderr, out(p)


def test_redist_components_lacking_a_library(tfprov, tmp_path):
    """The components must ship every library TF's CUDA generation loads: one
    diagnostic at the cuda section names each missing component and its sonames."""
    extra = ("cuda:\n  version: 12.3.2\n  redist:\n"
             "    url: https://x.invalid/redistrib_12.3.2.json\n"
             f"    sha256: {h('json')}\n    size: 100\n    components: [cuda_cudart, libcublas]\n")
    m = manifest(tmp_path / "j.yaml", pin("tensorflow", "2.15.1"), extra=extra)
    p = tfprov.run("lock", "--check", m, root=False)
    assert p.returncode == 3, out(p)
    assert (line_of(m, "version: 12.3.2"), "compat.cuda-libs-missing") in diags(p), out(p)
    assert "libnvjitlink (libnvJitLink.so.12)" in p.stderr and "libcufft (libcufft.so.11)" \
        in p.stderr, out(p)

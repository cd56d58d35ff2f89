"""Smaller trust-boundary fixes, each through the real binary.

STAND-INS: the CUDA 12.3.2 archives hold stub libraries with NVIDIA's sonames
(make_stack.py); no GPU here, so applies run with --no-gpu. Real: the binary,
HTTP on loopback, SQLite, file permissions (a second user via setpriv when
the tests run as root).

- A .tar.xz cut in half but pinned by its own hash (so the download verifies)
  is an integrity failure: exit 5, not 1; nothing placed.
- stack.name must be one safe path component: ".", "..", ".x" are refused at
  validate with file:line:col.
- The manifest a stack is "from" changes only when a run commits: after A is
  applied and a run of B fails, status still says "from A".
- status only reads: it works when the state directory is not writable.
"""
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from lib_provision import Mirror, no_stub_env, out

ENV = no_stub_env()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV_ONLY = os.path.join(REPO, "tests", "manifests", "env-only.yaml")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    with Mirror(d / "www") as m:
        m.manifest = m.stack(d / "demo.yaml", name="demo")
        m.text = open(m.manifest).read()
        yield m


def test_truncated_xz_pinned_by_own_hash_is_exit5(tfprov, mirror, tmp_path):
    mm = re.search(r"- name: cuda_cudart\n\s+url: (\S+)\n\s+sha256: (\S+)\n\s+size: (\d+)",
                   mirror.text)
    url, sha, size = mm.group(1), mm.group(2), int(mm.group(3))
    rel = url[len(mirror.url):].lstrip("/")
    data = open(os.path.join(mirror.dir, rel), "rb").read()
    cut = data[: len(data) // 2]
    with open(os.path.join(mirror.dir, rel + ".cut.tar.xz"), "wb") as f:
        f.write(cut)
    text = mirror.text.replace(url, url + ".cut.tar.xz").replace(
        sha, hashlib.sha256(cut).hexdigest()).replace("size: %d\n" % size,
                                                      "size: %d\n" % len(cut), 1)
    man = tmp_path / "m.yaml"
    man.write_text(text)
    p = tfprov.run("--no-gpu", "apply", "-y", str(man), env=ENV, timeout=300)
    assert p.returncode == 5, out(p)
    assert "cuda_cudart" in out(p), out(p)
    assert not os.path.exists(tfprov.path("/opt/tfprov/cuda/12.3.2"))


@pytest.mark.parametrize("name", [".", "..", ".hidden", "a/b"])
def test_stack_name_must_be_one_safe_component(tfprov, tmp_path, name):
    text = open(ENV_ONLY).read().replace("name: demo-env", 'name: "%s"' % name)
    man = tmp_path / "m.yaml"
    man.write_text(text)
    line = text.splitlines().index('  name: "%s"' % name) + 1
    p = tfprov.run("validate", str(man))
    assert p.returncode == 3, out(p)
    assert f"{man}:{line}:9: error:" in p.stderr and "[schema.name]" in p.stderr, p.stderr


def test_status_keeps_manifest_of_last_committed_run(tfprov, tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text(open(ENV_ONLY).read())
    tfprov.run("apply", "-y", str(a), check=0)
    # B: the same stack, with a CUDA artifact nobody serves: its run fails.
    b = tmp_path / "b.yaml"
    b.write_text(open(ENV_ONLY).read() + """cuda:
  version: 12.3.2
  artifacts:
    - name: cuda_cudart
      url: http://127.0.0.1:1/cuda_cudart.tar.xz
      sha256: %s
      size: 10
      strip: 1
""" % ("0" * 64) + "".join(
        # The other components TF's CUDA 12 libraries come from (compat.cuda-libs-missing).
        "    - {name: %s, url: http://127.0.0.1:1/%s.tar.xz, sha256: %s, size: 10, strip: 1}\n"
        % (c, c, d * 64) for c, d in [("libcublas", "1"), ("libcufft", "2"), ("libcurand", "3"),
                                       ("libcusolver", "4"), ("libcusparse", "5"),
                                       ("libnvjitlink", "6")]))
    p = tfprov.run("--no-gpu", "apply", "-y", str(b), env=dict(ENV, TFPROV_FETCH_RETRIES="0"))
    assert p.returncode not in (0, 3), out(p)
    p = tfprov.run("status", check=0)
    assert f"from {a}" in p.stdout and str(b) not in p.stdout, p.stdout


@pytest.fixture
def shared_root():
    """A root other users can traverse (pytest's tmp is 0700 to its owner)."""
    d = tempfile.mkdtemp(prefix="tfprov-ro-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_status_on_read_only_state_dir(tfprov, shared_root):
    root = os.path.join(shared_root, "root")
    man = os.path.join(shared_root, "m.yaml")
    shutil.copy(ENV_ONLY, man)
    os.chmod(man, 0o644)
    argv = [tfprov.bin, "--root", root]
    subprocess.run(argv + ["apply", "-y", man], check=True, capture_output=True, timeout=120)
    state = os.path.join(root, "var/lib/tfprov")
    before = sorted(os.listdir(state))
    if os.geteuid() == 0:
        # root writes anywhere: run status as another user, who cannot write here.
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + argv
    else:
        os.chmod(state, 0o555)
    try:
        p = subprocess.run(argv + ["status"], capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(state, 0o755)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "stack demo-env: generation 1 of 1" in p.stdout and f"from {man}" in p.stdout, p.stdout
    assert "env      ok, 2 paths" in p.stdout, p.stdout  # activate.sh, deactivate.sh
    assert sorted(os.listdir(state)) == before

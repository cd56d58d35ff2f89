"""Bad manifests through the real binary: `tfprov validate` exits 3 and names the
problem as FILE:LINE:COL: error: ... [code], fast and with bounded memory.

What the machine looks like: a manifest file written into the test's tmp dir.
What is run: `tfprov validate FILE` (no state, no network).
What must hold: exit 3, the diagnostic at the exact position, no hang, no crash,
and (for the huge and hostile inputs) a bounded wall time and peak RSS.
"""
import os
import subprocess
import time

import pytest

HDR = ("schema: 1\n"
       "stack:\n"
       "  name: t\n"
       "  platform: linux-x86_64\n"
       "versions:\n"
       "  tensorflow: 2.15.1\n")
SHA = "0123456789abcdef" * 4

CUDA_ART = (HDR + "cuda:\n  version: 12.3.2\n  artifacts:\n    - name: cudart\n"
            "      url: https://example.invalid/cudart.tar.xz\n")

BOMB = ("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
        + "".join(f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n"
                  for p, n in zip("abcdefgh", "bcdefghi")))

# (id, bytes, code, line, col); line 0 means "no position": "FILE: error:".
CASES = [
    ("unknown-key", HDR + "prefx: /opt/x\n", "schema.unknown-key", 7, 1),
    ("wrong-type", "schema: 1\nstack: hello\nversions:\n  tensorflow: 2.15.1\n",
     "schema.type", 2, 8),
    ("quoted-int", HDR.replace("schema: 1", 'schema: "1"'), "schema.type", 1, 9),
    ("duplicate-key", HDR + "env:\n  vars:\n    A: one\n    A: two\n",
     "yaml.duplicate-key", 10, 5),
    ("schema-2", HDR.replace("schema: 1", "schema: 2"), "schema.range", 1, 9),
    ("strip-99", CUDA_ART + f"      sha256: {SHA}\n      size: 10\n      strip: 99\n",
     "schema.range", 14, 14),
    ("batch-size-0", HDR + "bench:\n  batch_size: 0\n", "schema.range", 8, 15),
    ("sha-missing", CUDA_ART + "      size: 10\n", "artifact.no-sha256", 10, 7),
    ("sha-short", CUDA_ART + f"      sha256: {SHA[:-1]}\n      size: 10\n",
     "artifact.bad-sha256", 12, 15),
    ("sha-upper", CUDA_ART + f"      sha256: {SHA.upper()}\n      size: 10\n",
     "artifact.bad-sha256", 12, 15),
    ("alias-bomb", BOMB, "yaml.too-large", None, None),
    ("self-alias", HDR + "a: &x [*x]\n", "yaml.too-deep", 7, None),
    ("non-utf8", (HDR + 'env:\n  vars:\n    A: "caf\xe9"\n').encode("latin-1"),
     "file.encoding", 9, 12),
    ("surrogate", HDR.encode() + b'env:\n  vars:\n    A: "x\xed\xa0\x80"\n',
     "file.encoding", 9, 10),
    ("nul", b"schema: 1\nstack:\n  na\0me: t\n", "file.binary", 3, 5),
    ("empty", b"", "file.empty", 0, 0),
    ("comment-only", "# only\n# comments\n", "file.empty", 0, 0),
    ("two-docs", HDR + "---\nschema: 1\n", "yaml.multiple-documents", 8, 1),
    ("tabs", "schema: 1\nstack:\n\tname: t\n", "yaml.syntax", 3, 1),
    ("conda-no-hash", HDR + "python:\n  manager: conda\n  lock: |\n    @EXPLICIT\n"
     "    https://x.invalid/linux-64/zlib-1.3.1-h4ab18f5_1.conda\n", "conda.no-hash", 11, 5),
    ("conda-bad-hash", HDR + "python:\n  manager: conda\n  lock: |\n    @EXPLICIT\n"
     f"    https://x.invalid/linux-64/zlib-1.3.1-h4ab18f5_1.conda#sha256:{SHA}\n"
     "    https://x.invalid/linux-64/xz-5.2.6-h166bdaf_0.conda#sha256:xyz\n",
     "conda.bad-hash", 12, 5),
    ("pip-no-hash", HDR + "python:\n  manager: venv\npip:\n  requirements: |\n"
     "    six==1.16.0\n", "pip.no-hash", 11, 5),
    ("pip-unpinned", HDR + "python:\n  manager: venv\npip:\n  requirements: |\n"
     f"    numpy>=1.23 --hash=sha256:{SHA}\n", "pip.unpinned", 11, 5),
    ("pip-url-no-hash", HDR + "python:\n  manager: venv\npip:\n  requirements: |\n"
     "    tinypkg @ https://x.invalid/tinypkg-0.1-py3-none-any.whl\n", "pip.no-hash", 11, 5),
    ("env-bad-name", HDR + "env:\n  vars:\n    1BAD: x\n", "env.name", 9, 5),
]


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p)


def run_measured(argv, timeout):
    """Runs argv; returns (rc, stdout, stderr, seconds, peak RSS in KiB).
    A run past `timeout` is killed (SIGKILL) and reported as rc None."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out.decode(errors="replace"), err.decode(errors="replace"), \
            time.monotonic() - t0, 0
    dt = time.monotonic() - t0
    # The child is reaped by communicate(); RUSAGE_CHILDREN holds the max of all
    # children so far, which bounds this one's peak from above.
    import resource
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), dt, rss


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_validate_reports_position(tfprov, tmp_path, case):
    name, data, code, line, col = case
    path = write(tmp_path, name + ".yaml", data)
    t0 = time.monotonic()
    p = tfprov.run("validate", path, root=False, timeout=30)
    dt = time.monotonic() - t0
    assert p.returncode == 3, p.stderr
    assert f"[{code}]" in p.stderr, p.stderr
    if line == 0:
        assert f"{path}: error: " in p.stderr, p.stderr
    elif line is None:
        assert f"{path}:" in p.stderr and ": error: " in p.stderr
    elif col is None:
        assert f"{path}:{line}:" in p.stderr, p.stderr
    else:
        assert f"{path}:{line}:{col}: error: " in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "Segmentation" not in p.stderr
    assert dt < 5, f"validate took {dt:.1f} s"


def test_did_you_mean_hint(tfprov, tmp_path):
    path = write(tmp_path, "m.yaml", HDR + "prefx: /opt/x\n")
    p = tfprov.run("validate", path, root=False, check=3)
    assert f"{path}:7:1: error: unknown key 'prefx' in the manifest [schema.unknown-key]\n" \
           "  hint: did you mean 'prefix'?\n" in p.stderr, p.stderr


def test_tab_hint_says_tabs(tfprov, tmp_path):
    """The engine has a hint for tab indentation; the common case must reach it."""
    path = write(tmp_path, "m.yaml", "schema: 1\nstack:\n\tname: t\n")
    p = tfprov.run("validate", path, root=False, check=3)
    assert "hint: indent with spaces, not tabs" in p.stderr, p.stderr


def test_missing_size_is_only_a_warning(tfprov, tmp_path):
    path = write(tmp_path, "m.yaml", CUDA_ART + f"      sha256: {SHA}\n")
    p = tfprov.run("validate", path, root=False)
    # Compat lints may add warnings; the missing size must be a warning, not an error.
    assert f"{path}:10:7: warning: " in p.stderr and "[artifact.no-size]" in p.stderr, p.stderr
    assert "[artifact.no-size]" not in "".join(
        ln for ln in p.stderr.splitlines(True) if ": error: " in ln)


def test_file_does_not_exist(tfprov, tmp_path):
    path = str(tmp_path / "nope.yaml")
    p = tfprov.run("validate", path, root=False, check=3)
    assert f"{path}: error: cannot read manifest: No such file or directory" in p.stderr


def test_directory_and_device_are_refused(tfprov, tmp_path):
    p = tfprov.run("validate", str(tmp_path), root=False, timeout=10, check=3)
    assert "not a regular file" in p.stderr
    p = tfprov.run("validate", "/dev/zero", root=False, timeout=10, check=3)
    assert "not a regular file" in p.stderr


def test_100mb_file_fails_fast_with_bounded_memory(tfprov, tmp_path):
    path = tmp_path / "huge.yaml"
    line = b"# " + b"x" * 1021 + b"\n"
    with open(path, "wb") as f:
        f.write(HDR.encode())
        for _ in range(100 * 1024):
            f.write(line)
    assert os.path.getsize(path) > 100 * 1024 * 1024
    rc, out, err, dt, rss = run_measured([tfprov.bin, "validate", str(path)], timeout=20)
    assert rc == 3, err
    assert "[file.too-large]" in err and f"{path}: error: " in err, err
    assert dt < 2.0, f"took {dt:.2f} s"
    # The file is never read whole: RSS stays at the binary's own baseline,
    # which AddressSanitizer's shadow memory raises by a fixed amount.
    limit = 64 * 1024 + (128 * 1024 if _sanitized(tfprov.bin) else 0)
    assert rss < limit, f"peak RSS {rss} KiB"


def _sanitized(binary):
    cache = os.path.join(os.path.dirname(binary), "CMakeCache.txt")
    try:
        with open(cache) as f:
            return "TFPROV_SANITIZE:BOOL=ON" in f.read()
    except OSError:
        return False


def test_many_keys_not_quadratic(tfprov, tmp_path):
    """99,000 env vars (1.4 MB, within the size and node bounds): must finish in
    seconds, not minutes. The duplicate-key check in yamltree.c compares every
    pair of keys."""
    text = HDR + "env:\n  vars:\n" + "".join(f'    K{i}: "1"\n' for i in range(99000))
    path = write(tmp_path, "keys.yaml", text)
    rc, out, err, dt, rss = run_measured([tfprov.bin, "validate", path], timeout=20)
    assert rc is not None, "validate of a 1.4 MB manifest ran past 20 s (killed)"
    assert dt < 5.0, f"took {dt:.1f} s"


def test_deep_flow_nesting_is_bounded(tfprov, tmp_path):
    """1,000,000 nested '[' (2 MB): refused by the depth bound quickly."""
    n = 1000000
    path = write(tmp_path, "deep.yaml", "a: " + "[" * n + "]" * n + "\n")
    rc, out, err, dt, rss = run_measured([tfprov.bin, "validate", path], timeout=20)
    assert rc is not None, "validate of a 2 MB nested document ran past 20 s (killed)"
    assert rc == 3 and "[yaml.too-deep]" in err, err
    assert rss < 256 * 1024, f"peak RSS {rss} KiB"


def test_alias_bomb_fast_and_small(tfprov, tmp_path):
    path = write(tmp_path, "bomb.yaml", BOMB)
    rc, out, err, dt, rss = run_measured([tfprov.bin, "validate", path], timeout=20)
    assert rc == 3 and "[yaml.too-large]" in err, err
    assert dt < 2.0
    assert rss < 256 * 1024, f"peak RSS {rss} KiB"


def test_sigterm_stops_a_slow_validate(tfprov, tmp_path):
    """SIGTERM must end a read-only command promptly: validate changes nothing,
    so there is no atomic unit to finish. (main.c installs a handler that only
    sets a flag, so a long parse ignores SIGTERM and `timeout(1)` cannot stop it.)"""
    text = HDR + "env:\n  vars:\n" + "".join(f'    K{i}: "1"\n' for i in range(99000))
    path = write(tmp_path, "keys.yaml", text)
    p = subprocess.Popen([tfprov.bin, "validate", path], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    if p.poll() is not None:
        pytest.skip("validate finished before the signal: nothing slow left to interrupt")
    p.terminate()
    try:
        rc = p.wait(timeout=3)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail("validate ignored SIGTERM for 3 s")
    assert rc in (130, 143, -15), rc

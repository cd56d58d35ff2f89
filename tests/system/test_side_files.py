"""Side files (pip.requirements_file, python.lock_file) stay beside the manifest,
and diagnostics never echo a foreign file.

Real: the binary's `validate`, files and symlinks in tmp. No stand-ins.

What the machine looks like: a manifest in tmp/proj/ and a "secret" file in
tmp/ (outside proj/) standing for /etc/shadow, whose lines look like
requirements pip would reject. What must hold: an absolute side file, one
reached with '..', and one reached through a symlink that leaves proj/ are
refused at validate (exit 3, file:line:col of the key) and the secret's bytes
appear nowhere in the output; a side file inside proj/ (also through a
symlink that stays inside) is read, and its bad lines are quoted as short,
sanitized excerpts only.
"""
import os

import pytest

BASE = """schema: 1
stack:
  name: demo-env
  platform: linux-x86_64
prefix: /opt/tfprov
versions:
  tensorflow: 2.15.1
  python: "3.10"
driver:
  policy: skip
"""
PIP = BASE + """python:
  manager: venv
  version: "3.10"
pip:
  index_url: https://pypi.org/simple
  requirements_file: {ref}
"""
CONDA = BASE + """python:
  manager: conda
  version: "3.10"
  lock_file: {ref}
"""
SECRET_LINES = ["root:$6$Zm9vYmFy$secrethashsecrethash:19000:0:99999:7:::",
                "daemon:*:19000:0:99999:7:::"]


@pytest.fixture
def proj(tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "shadow").write_text("\n".join(SECRET_LINES) + "\n")
    return tmp_path / "proj"


def _validate(tfprov, proj, template, ref):
    m = proj / "m.yaml"
    m.write_text(template.format(ref=ref))
    return tfprov.run("validate", str(m)), m


def _leaks(p):
    text = p.stdout + p.stderr
    return [frag for line in SECRET_LINES for frag in (line[:12], "secrethash", "daemon:*")
            if frag in text]


@pytest.mark.parametrize("template", [PIP, CONDA], ids=["requirements_file", "lock_file"])
@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink", "symlinked-dir"])
def test_escaping_side_file_refused_unread(tfprov, proj, template, how):
    secret = proj.parent / "shadow"
    if how == "absolute":
        ref = str(secret)
    elif how == "dotdot":
        ref = "sub/../../shadow"
        (proj / "sub").mkdir()
    elif how == "symlink":
        os.symlink(str(secret), proj / "reqs.txt")
        ref = "reqs.txt"
    else:
        os.symlink("..", proj / "up")
        ref = "up/shadow"
    p, m = _validate(tfprov, proj, template, ref)
    assert p.returncode == 3, p.stdout + p.stderr
    key = "requirements_file" if template is PIP else "lock_file"
    line = template.format(ref=ref).splitlines().index(
        [x for x in template.format(ref=ref).splitlines() if key in x][0]) + 1
    assert f"{m}:{line}:" in p.stderr, p.stderr
    assert "[schema.side-file]" in p.stderr and "beside the manifest" in p.stderr, p.stderr
    assert _leaks(p) == [], p.stderr


def test_side_file_inside_tree_is_read_and_quoted_short(tfprov, proj):
    """A requirements file in a subdirectory, reached through a symlink that
    stays inside: read (its errors point into it), and each quoted line is cut
    to a short excerpt with control characters replaced."""
    (proj / "locks").mkdir()
    long_line = "tensorflow>=2.15  " + "x" * 200 + "\x1b[31mred"
    (proj / "locks" / "real.txt").write_text(long_line + "\n")
    os.symlink("locks/real.txt", proj / "reqs.txt")
    p, m = _validate(tfprov, proj, PIP, "reqs.txt")
    assert p.returncode == 3, p.stderr
    assert "real.txt:1:" in p.stderr or "reqs.txt:1:" in p.stderr, p.stderr
    assert "[pip.unpinned]" in p.stderr, p.stderr
    assert "x" * 60 not in p.stderr and "\x1b" not in p.stderr, p.stderr
    assert "tensorflow>=2.15" in p.stderr and "..." in p.stderr, p.stderr


def test_good_side_file_validates(tfprov, proj):
    (proj / "reqs.txt").write_text(
        "tensorflow==2.15.1 \\\n    --hash=sha256:" + "5" * 64 + "\n")
    p, m = _validate(tfprov, proj, PIP, "reqs.txt")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "valid" in p.stdout, p.stdout

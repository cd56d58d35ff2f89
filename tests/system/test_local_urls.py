"""Local URLs are opt-in, and what the cache keeps is the owner's alone.

STAND-INS: the CUDA 12.3.2 / cuDNN 8.9.7.29 archives hold stub libraries with
NVIDIA's sonames (make_stack.py); no GPU here, so applies run with --no-gpu.
Real: the binary, HTTP on loopback, SQLite, file modes.

What the machine looks like: a fresh root; a "secret" file owned by this user
with mode 0600 stands for /etc/shadow. The manifest (a pull request, say)
points the cuDNN artifact at file://<secret> with some sha256.
What must hold: without --allow-local-urls the file is never read (exit 1,
naming the flag, nothing copied anywhere); with it the mismatch is exit 5 and
the quarantined copy keeps no group/other bits; the cache directories are
0700; a --mirror DIR still serves artifacts without the flag.
"""
import os
import re
import stat

import pytest

from lib_provision import Mirror, no_stub_env, out

ENV = no_stub_env()
SECRET = b"root:$6$salt$notarealhash:19000:0:99999:7:::\n"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("local")
    with Mirror(d / "www") as m:
        m.manifest = m.stack(d / "demo.yaml", name="demo")
        m.text = open(m.manifest).read()
        yield m


def _secret(tmp_path):
    s = tmp_path / "shadow"
    s.write_bytes(SECRET)
    os.chmod(s, 0o600)
    return s


def _local_manifest(mirror, tmp_path, url):
    m = re.search(r"cudnn:\n  placement: merge\n  artifact:\n    url: (\S+)\n", mirror.text)
    p = tmp_path / "m.yaml"
    p.write_text(mirror.text.replace(m.group(1), url))
    return str(p)


def _files(d):
    return [os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs]


def _copies_of_secret(root):
    found = []
    for f in _files(root):
        try:
            with open(f, "rb") as fh:
                if fh.read() == SECRET:
                    found.append(f)
        except OSError:
            pass
    return found


def test_file_url_refused_without_flag(tfprov, mirror, tmp_path):
    secret = _secret(tmp_path)
    man = _local_manifest(mirror, tmp_path, "file://" + str(secret))
    p = tfprov.run("--no-gpu", "apply", "-y", man, env=ENV, timeout=300)
    assert p.returncode == 1, out(p)
    assert "--allow-local-urls" in out(p), out(p)
    assert _copies_of_secret(tfprov.root) == []
    assert [f for f in _files(tfprov.path("/opt")) if "cudnn" in f] == []


def test_file_url_with_flag_quarantines_owner_only(tfprov, mirror, tmp_path):
    secret = _secret(tmp_path)
    man = _local_manifest(mirror, tmp_path, "file://" + str(secret))
    p = tfprov.run("--allow-local-urls", "--no-gpu", "apply", "-y", man, env=ENV, timeout=300)
    assert p.returncode == 5, out(p)
    copies = _copies_of_secret(tfprov.root)
    assert copies and all("/quarantine/" in c for c in copies), copies
    for c in copies:
        assert stat.S_IMODE(os.stat(c).st_mode) & 0o077 == 0, oct(os.stat(c).st_mode)
    cache = tfprov.path("/var/cache/tfprov")
    for d in (cache, cache + "/sha256", cache + "/partial", cache + "/quarantine"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, (d, oct(os.stat(d).st_mode))
    for f in _files(cache + "/partial"):
        assert stat.S_IMODE(os.stat(f).st_mode) & 0o077 == 0, f


def test_old_cache_dirs_are_tightened(tfprov, mirror):
    """A cache an older tfprov made 0755 is made 0700 on the next fetch."""
    cache = tfprov.path("/var/cache/tfprov")
    for sub in ("", "/sha256", "/partial", "/quarantine"):
        os.makedirs(cache + sub, exist_ok=True)
        os.chmod(cache + sub, 0o755)
    p = tfprov.run("--no-gpu", "apply", "-y", mirror.manifest, env=ENV, timeout=300)
    assert p.returncode == 0, out(p)
    for sub in ("", "/sha256", "/partial", "/quarantine"):
        assert stat.S_IMODE(os.stat(cache + sub).st_mode) == 0o700, sub


def test_symlinked_cache_subdir_refused(tfprov, mirror, tmp_path):
    """A cache whose partial/ is a symlink (to anywhere) is refused, not followed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache = tfprov.path("/var/cache/tfprov")
    os.makedirs(cache)
    os.symlink(str(elsewhere), cache + "/partial")
    p = tfprov.run("--no-gpu", "apply", "-y", mirror.manifest, env=ENV, timeout=300)
    assert p.returncode != 0, out(p)
    assert "partial" in out(p) and "not a directory" in out(p), out(p)
    assert os.listdir(elsewhere) == []


def test_mirror_dir_needs_no_flag(tfprov, mirror, tmp_path):
    """--mirror DIR (a directory mirror) stays allowed: origins dead, the dir serves."""
    d = tmp_path / "dirmirror"
    p = tfprov.run("mirror", "build", str(d), mirror.manifest, env=ENV, timeout=300)
    assert p.returncode == 0, out(p)
    man = tmp_path / "dead.yaml"
    man.write_text(mirror.text.replace(mirror.url.rstrip("/"), "http://127.0.0.1:1"))
    p = tfprov.run("--mirror", str(d), "--no-gpu", "apply", "-y", str(man), env=ENV,
                   timeout=300)
    assert p.returncode == 0, out(p)
    assert os.path.isfile(tfprov.path("/opt/tfprov/cuda/12.3.2/lib64/libcudart.so.12"))

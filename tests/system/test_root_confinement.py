"""--root confinement through the real binary: symlinks planted inside the root
are followed as a chroot would follow them, never out of the root.

STAND-INS: the CUDA 12.3.2 / cuDNN 8.9.7.29 archives hold stub libraries with
NVIDIA's sonames (make_stack.py); no GPU here, so applies run with --no-gpu.
Real: the binary, HTTP on loopback, SQLite, the symlinks and the file system.

What the machine looks like: a fresh root R in which a test plants a symlink
(at R/opt, R/opt/tfprov, the staging parent R/opt/tfprov/cuda, R/etc/profile.d,
the cache dir or the state dir) pointing at an absolute host directory X
outside R. What must hold: the apply succeeds, X stays empty, and everything
lands at R/X, which is what "/X" means inside the root.
"""
import os

import pytest

from lib_provision import Mirror, no_stub_env, out

ENV = no_stub_env()
LIB = "cuda/12.3.2/lib64/libcudart.so.12"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("confine")
    with Mirror(d / "www") as m:
        m.manifest = m.stack(d / "demo.yaml", name="demo")
        yield m


def _apply(tfprov, manifest, env=ENV, **kw):
    return tfprov.run("--no-gpu", "apply", "-y", manifest, env=env, timeout=300, **kw)


def _files_under(d):
    return sorted(os.path.relpath(os.path.join(dp, n), d)
                  for dp, dns, fns in os.walk(d) for n in dns + fns)


# (where the link is planted, where the prefix files then live relative to X)
PLANTS = [
    ("opt", "tfprov/" + LIB),
    ("opt/tfprov", LIB),
    ("opt/tfprov/cuda", "12.3.2/lib64/libcudart.so.12"),  # the staging dir's parent
    ("etc/profile.d", "tfprov.sh"),  # the login script
    ("var/cache/tfprov", "sha256"),
    ("var/lib/tfprov", "state.db"),
]


@pytest.mark.parametrize("walk", ["openat2", "walk"])
@pytest.mark.parametrize("plant,inside", PLANTS, ids=[p for p, _ in PLANTS])
def test_planted_link_stays_in_root(tfprov, mirror, tmp_path, plant, inside, walk):
    """walk: the kernel's RESOLVE_IN_ROOT, or the by-hand fallback (TFPROV_INROOT_WALK=1)."""
    env = dict(ENV, TFPROV_INROOT_WALK="1" if walk == "walk" else "0")
    outside = tmp_path / "outside"
    outside.mkdir()
    link = tfprov.path(plant)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(str(outside), link)
    p = _apply(tfprov, mirror.manifest, env=env)
    assert p.returncode == 0, out(p)
    assert _files_under(outside) == [], "written outside the root"
    # Inside the root the link means R/<outside>, as in a chroot.
    assert os.path.exists(tfprov.path(str(outside) + "/" + inside)), _files_under(tfprov.root)
    # The state agrees with the disk: a second plan has nothing to do.
    assert tfprov.run("--no-gpu", "plan", "--detailed-exitcode", mirror.manifest,
                      env=env).returncode == 0
    assert _files_under(outside) == []


def test_dotdot_link_cannot_climb_out(tfprov, mirror, tmp_path):
    """A relative link with more '..' than the root is deep stops at the root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    depth = len(os.path.realpath(tfprov.root).strip("/").split("/"))
    os.makedirs(tfprov.path("opt"))
    os.symlink("../" * (depth + 3) + str(outside).lstrip("/"), tfprov.path("opt/tfprov"))
    p = _apply(tfprov, mirror.manifest)
    assert p.returncode == 0, out(p)
    assert _files_under(outside) == []
    assert os.path.exists(tfprov.path(str(outside) + "/" + LIB))


def test_legitimately_symlinked_dirs_work(tfprov, mirror):
    """An image whose /opt is a link to /data/opt (absolute, meant inside the
    root) and whose /etc/profile.d is a relative link: apply places through
    them, status and destroy find what was placed."""
    os.makedirs(tfprov.path("data/opt"))
    os.symlink("/data/opt", tfprov.path("opt"))
    os.makedirs(tfprov.path("etc/profile-real"))
    os.symlink("profile-real", tfprov.path("etc/profile.d"))
    p = _apply(tfprov, mirror.manifest)
    assert p.returncode == 0, out(p)
    assert os.path.isfile(tfprov.path("data/opt/tfprov/" + LIB))
    assert os.path.isfile(tfprov.path("etc/profile-real/tfprov.sh"))
    assert os.path.islink(tfprov.path("opt")), "the image's own link is left alone"
    assert tfprov.run("--no-gpu", "plan", "--detailed-exitcode", mirror.manifest,
                      env=ENV).returncode == 0
    p = tfprov.run("destroy", "-y", "demo", env=ENV)
    assert p.returncode == 0, out(p)
    assert not os.path.exists(tfprov.path("data/opt/tfprov/" + LIB))
    assert not os.path.exists(tfprov.path("etc/profile-real/tfprov.sh"))
    assert os.path.islink(tfprov.path("opt")) and os.path.islink(tfprov.path("etc/profile.d"))

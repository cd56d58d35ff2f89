"""The Debian package's whole life in a clean Debian 12 root, checked against
what its documentation says (packaging/README.Debian).

What the machine looks like: a bookworm root made by debootstrap (minbase,
Debian's archive; scripts/make-bookworm-root.sh), its apt cache holding the
packages tfprov depends on (downloaded, not installed), cached as one tarball
in TFPROV_TEST_CACHE_DIR (default ~/.cache/tfprov-tests; one file, replaced
when the package's dependencies change). Each test unpacks it afresh and runs
every command in it through chroot, in a mount namespace of its own (proc and
/dev mounted there, gone with it).
What is run: `apt-get install ./tfprov_*.deb` (the package this build tree
makes with cpack), the installed tfprov applying a CUDA-layout stack from
file:// URLs (STAND-IN libraries with the real sonames, no GPU) and an
env-only stack, `tfprov destroy --all -y`, `tfprov gc -y`, `apt-get purge
tfprov`.
What must hold: the login script goes with destroy; the cache is emptied by
gc; after purge, what tfprov leaves (every path that is neither in the
pristine root nor a file of an installed package, nor apt's and dpkg's own
records) is exactly the list README.Debian gives; a purge without destroy
removes the login script tfprov generated (not a user's own) and the cache,
and keeps the state and the stacks, as README.Debian says.
"""
import fcntl
import os
import re
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
MAKE_STACK = os.path.join(REPO, "tests", "fixtures", "make_stack.py")
MAKE_ROOT = os.path.join(REPO, "scripts", "make-bookworm-root.sh")
README_DEBIAN = os.path.join(REPO, "packaging", "README.Debian")
CACHE_DIR = os.environ.get("TFPROV_TEST_CACHE_DIR",
                           os.path.join(os.path.expanduser("~"), ".cache", "tfprov-tests"))

def sanitized_build():
    """The ASan/UBSan pass skips this test: a package of a sanitized binary would
    need libasan in the clean root, which is not what is shipped."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            return "TFPROV_SANITIZE:BOOL=ON" in f.read()
    except OSError:
        return False


pytestmark = [pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("debootstrap", "zstd", "unshare",
                                                            "cpack", "dpkg-deb")),
    reason="needs root, debootstrap, zstd, unshare, cpack (scripts/install-deps.sh)"),
    pytest.mark.skipif(sanitized_build(), reason="normal pass only (see sanitized_build)")]

# What apt and dpkg keep about themselves, and byte-compiled Python: not tfprov's.
BOOKKEEPING = ("/var/lib/dpkg/", "/var/lib/apt/", "/var/cache/apt/", "/var/log/",
               "/var/cache/debconf/", "/etc/ld.so.cache", "/tmp/", "/proc/", "/dev/",
               "/run/", "/var/cache/ldconfig/", "/etc/resolv.conf")


def sh(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    out = tmp_path_factory.mktemp("deb")
    p = sh(["cpack", "-G", "DEB", "-B", str(out)], cwd=BUILD, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    debs = [f for f in os.listdir(out) if re.match(r"tfprov_[0-9.]+_amd64\.deb$", f)]
    assert len(debs) == 1, os.listdir(out)
    return os.path.join(out, debs[0])


@pytest.fixture(scope="module")
def root_tarball(deb):
    """The cached clean root; made (minutes, Debian's archive) when missing or when the
    package's dependencies changed since it was made."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    tarball = os.path.join(CACHE_DIR, "bookworm-lifecycle.tar.zst")
    key = tarball + ".depends"
    deps = sh(["dpkg-deb", "-f", deb, "Depends", "Recommends"]).stdout
    # Exclusive while it is (re)made: test_image_podman.py reads it under a shared lock.
    with open(tarball + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if not (os.path.exists(tarball) and os.path.exists(key) and open(key).read() == deps):
            p = sh([MAKE_ROOT, tarball, deb], timeout=1800)
            if p.returncode != 0:
                pytest.skip("no bookworm root: debootstrap from Debian's archive failed: %s"
                            % (p.stderr[-500:]))
            with open(key, "w") as f:
                f.write(deps)
    return tarball


class Root:
    def __init__(self, path):
        self.path = str(path)

    def host(self, p):
        return os.path.join(self.path, p.lstrip("/"))

    def run(self, *argv, check=True, timeout=600):
        p = sh(["unshare", "-m", "--propagation", "private", "sh", "-c",
                'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && '
                'exec chroot "$0" "$@"', self.path,
                "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive",
                "LC_ALL=C.UTF-8", "HOME=/root"] + list(argv), timeout=timeout)
        if check:
            assert p.returncode == 0, (argv, p.stdout[-3000:], p.stderr[-3000:])
        return p

    def paths(self):
        out = set()
        for dp, dns, fns in os.walk(self.path):
            rel = "/" + os.path.relpath(dp, self.path)
            if rel in ("/proc", "/dev", "/sys"):
                dns[:] = []
                continue
            for n in dns + fns:
                out.add(os.path.normpath(os.path.join(rel, n)))
        return out

    def packaged(self):
        """Every path a package installed in the root owns (dpkg's .list files)."""
        owned = set()
        info = self.host("/var/lib/dpkg/info")
        for f in os.listdir(info):
            if f.endswith(".list"):
                with open(os.path.join(info, f)) as fh:
                    owned.update(l.rstrip("\n") for l in fh if l.strip())
        return owned


def unpack(path, tarball):
    r = Root(path)
    os.makedirs(r.path)
    p = subprocess.run(["tar", "--zstd", "-xf", tarball, "-C", r.path,
                        "--numeric-owner"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    r.pristine = r.paths()
    shutil.copy("/etc/resolv.conf", r.host("/etc/resolv.conf"))  # only if apt's cache is stale
    return r


def unowned_new(r):
    """Paths that are new since the pristine root and owned by no installed package."""
    owned = r.packaged()
    return {p for p in r.paths() - r.pristine
            if p not in owned and "/__pycache__" not in p
            and not any(p == b.rstrip("/") or p.startswith(b) for b in BOOKKEEPING)}


@pytest.fixture(scope="module")
def control(tmp_path_factory, root_tarball, deb):
    """What tfprov's dependencies alone leave that no package owns (files their
    maintainer scripts write: /etc/ssl/certs/*, /etc/python3 ...): the same root
    with the package's Depends and Recommends installed, without tfprov."""
    r = unpack(tmp_path_factory.mktemp("control") / "root", root_tarball)
    fields = sh(["dpkg-deb", "-f", deb, "Depends", "Recommends"]).stdout
    names = re.findall(r"(?:^|[:,|]\s*)([a-z0-9][a-z0-9.+-]+)", fields.replace("\n", ","))
    names = [n for n in names if n not in ("Depends", "Recommends")]
    r.run("apt-get", "install", "-y", "-q", *names, timeout=900)
    return unowned_new(r)


@pytest.fixture
def root(tmp_path, root_tarball, deb):
    r = unpack(tmp_path / "root", root_tarball)
    shutil.copy(deb, r.host("/tmp/"))
    r.deb = "/tmp/" + os.path.basename(deb)
    return r


def provision(r, tmp_path):
    """A CUDA-layout stack from file:// URLs inside the root, and an
    env-only stack; both applied by the installed tfprov."""
    mirror = r.host("/srv/mirror")
    os.makedirs(mirror)
    p = sh(["/usr/bin/python3", MAKE_STACK, "--stubs", os.path.join(BUILD, "stubs", "cuda12"),
            "--cuda", "12.3.2", "--cudnn", "8.9.7.29", "--out", mirror,
            "--url-base", "file:///srv/mirror/", "--manifest", r.host("/srv/demo.yaml"),
            "--name", "demo", "--driver-policy", "skip"], timeout=300)
    assert p.returncode == 0, p.stderr
    with open(r.host("/srv/e.yaml"), "w") as f:
        f.write("schema: 1\nstack:\n  name: e\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
                "versions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\ndriver:\n  policy: skip\n"
                "env:\n  vars:\n    X: \"1\"\n")
    r.run("tfprov", "--no-gpu", "--allow-local-urls", "apply", "-y", "/srv/demo.yaml")
    r.run("tfprov", "apply", "-y", "/srv/e.yaml")
    shutil.rmtree(mirror)
    os.unlink(r.host("/srv/demo.yaml"))
    os.unlink(r.host("/srv/e.yaml"))


def documented_leftovers():
    """The paths README.Debian says are left after destroy --all, gc and purge:
    (always, only when an administrator created them)."""
    text = open(README_DEBIAN).read()
    block = text.split("what is left is exactly:\n\n", 1)[1].split("\n\n", 1)[0]
    always, optional = set(), set()
    for line in block.splitlines():
        m = re.match(r"\s+(/\S+?)/?\s+(.*)$", line)
        if m:
            (optional if "only if" in m.group(2) else always).add(m.group(1))
    assert always, block
    return always, optional


def leftovers(r, control):
    """What tfprov leaves: new, unowned paths beyond what its dependencies leave."""
    new = unowned_new(r) - control
    # top-level leftovers: a leftover whose parent is not one
    return sorted(p for p in new if os.path.dirname(p) not in new), sorted(new)


def test_install_destroy_gc_purge_leaves_what_readme_debian_says(root, tmp_path, control):
    r = root
    r.run("apt-get", "install", "-y", "-q", r.deb, timeout=900)
    assert r.run("tfprov", "--version").stdout.startswith("tfprov ")
    assert os.path.exists(r.host("/usr/share/tfprov/manifests/stable-2.15.yaml"))
    assert os.path.exists(r.host("/usr/share/doc/tfprov/README.Debian"))
    assert os.path.exists(r.host("/usr/share/bash-completion/completions/tfprov"))
    provision(r, tmp_path)
    assert "tfprov.sh" in os.listdir(r.host("/etc/profile.d"))
    assert os.path.exists(r.host("/opt/tfprov/stacks/e/activate.sh"))
    assert len(os.listdir(r.host("/var/cache/tfprov/sha256"))) >= 2
    assert os.path.exists(r.host("/opt/tfprov/cuda/12.3.2"))

    p = r.run("tfprov", "destroy", "--all", "-y")
    assert "Destroyed stack demo." in p.stdout and "Destroyed stack e." in p.stdout, p.stdout
    assert not [f for f in os.listdir(r.host("/etc/profile.d")) if f.startswith("tfprov")]
    assert not os.path.exists(r.host("/opt/tfprov/cuda/12.3.2"))
    r.run("tfprov", "gc", "-y")
    assert os.listdir(r.host("/var/cache/tfprov/sha256")) == []
    r.run("apt-get", "purge", "-y", "-q", "tfprov")
    assert not os.path.exists(r.host("/usr/bin/tfprov"))

    top, every = leftovers(r, control)
    always, optional = documented_leftovers()
    assert set(top) - optional == always, (top, every, always, optional)
    assert not os.path.exists(r.host("/var/cache/tfprov"))
    # what is left is the state and nothing else, as documented
    assert sorted(os.listdir(r.host("/var/lib/tfprov"))) == ["lock", "state.db"], every


def test_purge_without_destroy_removes_generated_profile_scripts_and_cache(root, tmp_path):
    """README.Debian: purge removes the login script tfprov generated (and an older
    tfprov's per-stack scripts) and the cache;
    keeps the state, the stacks and what it did not write."""
    r = root
    r.run("apt-get", "install", "-y", "-q", r.deb, timeout=900)
    provision(r, tmp_path)
    mine = r.host("/etc/profile.d/tfprov-mine.sh")
    with open(mine, "w") as f:
        f.write("# my own, not generated\nexport MINE=1\n")
    legacy = r.host("/etc/profile.d/tfprov-old.sh")
    with open(legacy, "w") as f:
        f.write("# Environment of the tfprov stack 'old'. Generated by tfprov; do not edit:\n")
    r.run("apt-get", "remove", "-y", "-q", "tfprov")
    # remove: the stacks keep their environment
    assert os.path.exists(r.host("/etc/profile.d/tfprov.sh"))
    assert os.path.exists(r.host("/var/cache/tfprov/sha256"))
    r.run("apt-get", "purge", "-y", "-q", "tfprov")
    assert not os.path.exists(r.host("/etc/profile.d/tfprov.sh"))
    assert not os.path.exists(legacy)
    assert open(mine).read() == "# my own, not generated\nexport MINE=1\n"
    assert not os.path.exists(r.host("/var/cache/tfprov"))
    assert os.path.exists(r.host("/var/lib/tfprov/state.db"))
    assert os.path.exists(r.host("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))
    # Installed again, tfprov still knows the stacks (intact: their scripts live
    # in /opt/tfprov) and the default; choosing it writes the login script again.
    r.run("apt-get", "install", "-y", "-q", r.deb, timeout=900)
    p = r.run("tfprov", "status", check=False)
    assert p.returncode == 0 and "Default stack (login shells): " in p.stdout, (p.stdout,
                                                                                 p.stderr)
    default = r.run("tfprov", "default").stdout.strip()
    r.run("tfprov", "default", default)
    assert os.path.exists(r.host("/etc/profile.d/tfprov.sh"))
    r.run("tfprov", "destroy", "--all", "-y")

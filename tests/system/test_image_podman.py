"""`tfprov image build` on a real Debian bookworm base, run by podman: the
fixture stack (stub CUDA + cuDNN archives, a venv, a wheel) as an image,
`podman load` of its docker-archive, and `podman run --network=none` of
`tfprov verify`, `tfprov status` and a Python import of the fixture wheel
inside the container.

The base: the bookworm root test_deb_lifecycle.py caches (debootstrap
--variant=minbase, scripts/make-bookworm-root.sh, with tfprov's package
dependencies in its apt cache; made here the same way, under the same flock,
when that test has not made it yet), with python3, python3-venv and the libraries
tfprov links installed from that apt cache (no network), written as a one-layer
OCI layout and cached beside it (TFPROV_TEST_CACHE_DIR/bookworm-image-base,
keyed by the root tarball's size and mtime; flock against a concurrent ctest
-j2 test). tfprov inside the container is this build's binary, bind-mounted
read-only: the base has the Debian 12 libraries it links.

podman runs as root with runc and cgroupfs, a containers.conf with
`default_ulimits = []` (crun: "cgroups in hybrid mode not supported"; podman's
default ulimits: "setrlimit ... Operation not permitted"), and a private
storage root (--root/--runroot) in a /tmp/tfprov-podman-* directory, removed
afterwards:
nothing goes into the machine's podman store.

Cost: about 1 minute with the base cached (image build, podman load of ~150
MB, two container runs); making the base once adds about 1 minute when the
bookworm root is cached, plus test_deb_lifecycle's root (minutes, Debian's
archive) when that is not.
"""
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

import lib_pyindex
from lib_provision import Mirror, no_stub_env, out

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
MAKE_ROOT = os.path.join(REPO, "scripts", "make-bookworm-root.sh")
CACHE_DIR = os.environ.get("TFPROV_TEST_CACHE_DIR",
                           os.path.join(os.path.expanduser("~"), ".cache", "tfprov-tests"))
ROOT_TARBALL = os.path.join(CACHE_DIR, "bookworm-lifecycle.tar.zst")
BASE_DIR = os.path.join(CACHE_DIR, "bookworm-image-base")
# What the base gets from the root's apt cache: the interpreter the venv links
# to, and the libraries tfprov links (the package's Depends).
BASE_PKGS = ["python3", "python3-venv", "libyaml-0-2", "libssl3", "libsqlite3-0",
             "libjansson4", "libdeflate0", "libcurl4", "libarchive13", "libzip4"]
ENV = no_stub_env()


def sanitized_build():
    """A sanitized binary would need libasan in the base: the normal pass only."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            return "TFPROV_SANITIZE:BOOL=ON" in f.read()
    except OSError:
        return False


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or not all(shutil.which(t) for t in (
        "podman", "runc", "zstd", "unshare", "tar", "debootstrap", "cpack", "dpkg-deb")),
        reason="needs root, podman, runc, zstd, unshare, debootstrap, cpack "
               "(scripts/install-deps.sh)"),
    pytest.mark.skipif(sanitized_build(), reason="normal pass only (see sanitized_build)")]


def sh(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def _blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + d, "size": len(data)}


def make_base(dest):
    """The cached bookworm root, its BASE_PKGS installed from its own apt cache,
    apt's cache and lists dropped, as a one-layer OCI layout at dest."""
    work = dest + ".work"
    shutil.rmtree(work, ignore_errors=True)
    root = os.path.join(work, "root")
    os.makedirs(root)
    try:
        p = sh(["sh", "-c", 'zstd -dc "$0" | tar -C "$1" --numeric-owner -xf -',
                ROOT_TARBALL, root], timeout=600)
        assert p.returncode == 0, p.stderr
        p = sh(["unshare", "-m", "--propagation", "private", "sh", "-c",
                'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"', root,
                "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
                "--no-download", "--no-install-recommends", *BASE_PKGS], timeout=900)
        if p.returncode != 0:
            pytest.skip("the cached bookworm root cannot install %s from its apt cache "
                        "(made before they were tfprov's Depends?): %s"
                        % (" ".join(BASE_PKGS), p.stdout[-300:] + p.stderr[-300:]))
        for d in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for n in os.listdir(os.path.join(root, d)):
                q = os.path.join(root, d, n)
                if os.path.isfile(q):
                    os.unlink(q)
        layout = os.path.join(work, "layout")
        os.makedirs(os.path.join(layout, "blobs", "sha256"))
        tar = os.path.join(work, "layer.tar")
        p = sh(["tar", "-C", root, "--sort=name", "--numeric-owner", "--owner=0",
                "--group=0", "--mtime=@1", "--xattrs", "--exclude=./proc/*",
                "--exclude=./sys/*", "--exclude=./dev/*", "-cf", tar, "."], timeout=600)
        assert p.returncode == 0, p.stderr
        h = hashlib.sha256()
        with open(tar, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        layer = {"digest": "sha256:" + h.hexdigest(), "size": os.path.getsize(tar)}
        os.rename(tar, os.path.join(layout, "blobs", "sha256", h.hexdigest()))
        cfg = {"architecture": "amd64", "os": "linux",
               "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                                  "/sbin:/bin"], "Cmd": ["/bin/bash"]},
               "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
               "history": [{"created_by": "debootstrap --variant=minbase bookworm, apt-get "
                                          "install " + " ".join(BASE_PKGS)}]}
        c = _blob(layout, json.dumps(cfg, sort_keys=True).encode())
        man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
               "config": dict(c, mediaType="application/vnd.oci.image.config.v1+json"),
               "layers": [dict(layer, mediaType="application/vnd.oci.image.layer.v1.tar")]}
        m = _blob(layout, json.dumps(man, sort_keys=True).encode())
        with open(os.path.join(layout, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "manifests": [
                dict(m, mediaType="application/vnd.oci.image.manifest.v1+json")]}, f)
        with open(os.path.join(layout, "oci-layout"), "w") as f:
            f.write('{"imageLayoutVersion": "1.0.0"}')
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(layout, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def make_root_tarball(tmp):
    """The bookworm root as test_deb_lifecycle.py makes it (the same file and key:
    its apt cache holding the package's dependencies), when neither test has yet."""
    p = sh(["cpack", "-G", "DEB", "-B", tmp], cwd=BUILD, timeout=300)
    debs = [f for f in os.listdir(tmp) if re.match(r"tfprov_[0-9.]+_amd64\.deb$", f)]
    if p.returncode != 0 or len(debs) != 1:
        pytest.skip("no bookworm root, and no package to make one with: " + p.stderr[-300:])
    deb = os.path.join(tmp, debs[0])
    p = sh([MAKE_ROOT, ROOT_TARBALL, deb], timeout=1800)
    if p.returncode != 0:
        pytest.skip("no bookworm root: debootstrap from Debian's archive failed: %s"
                    % p.stderr[-500:])
    with open(ROOT_TARBALL + ".depends", "w") as f:
        f.write(sh(["dpkg-deb", "-f", deb, "Depends", "Recommends"]).stdout)


@pytest.fixture(scope="module")
def bookworm_base(tmp_path_factory):
    os.makedirs(CACHE_DIR, exist_ok=True)
    with open(os.path.join(CACHE_DIR, "bookworm-image-base.lock"), "w") as lk, \
            open(ROOT_TARBALL + ".lock", "w") as rlk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        # test_deb_lifecycle.py (re)makes the root under the same lock.
        fcntl.flock(rlk, fcntl.LOCK_EX)
        if not os.path.exists(ROOT_TARBALL):
            make_root_tarball(str(tmp_path_factory.mktemp("deb")))
        st = os.stat(ROOT_TARBALL)
        key = "%d %d %s\n" % (st.st_size, st.st_mtime_ns, " ".join(BASE_PKGS))
        keyfile = BASE_DIR + ".key"
        if not (os.path.isdir(BASE_DIR) and os.path.exists(keyfile)
                and open(keyfile).read() == key):
            make_base(BASE_DIR)
            with open(keyfile, "w") as f:
                f.write(key)
    return BASE_DIR


class Podman:
    """podman as root with runc, cgroupfs, no default ulimits and a private store."""

    def __init__(self, d):
        self.d = str(d)
        os.makedirs(self.d, exist_ok=True)
        self.conf = os.path.join(self.d, "containers.conf")
        with open(self.conf, "w") as f:
            f.write("[containers]\ndefault_ulimits = []\n")
        self.argv = ["podman", "--root", os.path.join(self.d, "storage"), "--runroot",
                     os.path.join(self.d, "run"), "--runtime", "runc",
                     "--cgroup-manager=cgroupfs", "--events-backend=file"]

    def __call__(self, *args, timeout=300):
        return sh(self.argv + list(args), timeout=timeout,
                  env={**os.environ, "CONTAINERS_CONF": self.conf})

    def cleanup(self):
        self("rm", "-a", "-f", timeout=120)
        self("rmi", "-a", "-f", timeout=120)
        sh(["umount", "-R", os.path.join(self.d, "storage", "overlay")])
        shutil.rmtree(self.d, ignore_errors=True)


@pytest.fixture
def podman():
    # Not under tmp_path: podman refuses a runroot longer than 50 characters.
    pm = Podman(tempfile.mkdtemp(prefix="tfprov-podman-", dir="/tmp"))
    try:
        yield pm
    finally:
        pm.cleanup()


def test_image_runs_in_podman(tfprov, bookworm_base, podman, tmp_path):
    """The fixture stack on the bookworm base: the base's glibc (its real
    libc.so.6) passes the wheels' floor; podman loads the docker-archive;
    in the container (no network) `tfprov verify` passes and the venv's
    python imports the fixture wheel's module."""
    wheels = tmp_path / "wheels"
    _, sha = lib_pyindex.build_wheel(str(wheels), "tfprov-alpha", "1.0.0")
    idx = lib_pyindex.Index(str(wheels))
    venv = ("python:\n  manager: venv\n  name: tf\n  version: \"3.11\"\n"
            "  interpreter: /usr/bin/python3\n"
            f"pip:\n  index_url: {idx.url}\n  complete: true\n  requirements: |\n"
            f"    tfprov-alpha==1.0.0 \\\n        --hash=sha256:{sha}\n")
    try:
        with Mirror(tmp_path / "www") as m:
            man = m.stack(tmp_path / "stack.yaml", name="pod", python="3.11", extra_yaml=venv)
            img = str(tmp_path / "img.tar")
            p = tfprov.run("--cache-dir", str(tmp_path / "cache"), "-v", "image", "build", man,
                           "--base", bookworm_base, "-o", img, "--tag", "tfprov-test/pod:1",
                           root=False, env=ENV, timeout=600)
            assert p.returncode == 0, out(p)
            # The same image as an OCI layout (a cache hit now): skopeo reads it and
            # oci-image-tool validates it, on the real base as on test_image.py's stand-in.
            lay = str(tmp_path / "layout")
            p2 = tfprov.run("--cache-dir", str(tmp_path / "cache"), "image", "build", man,
                            "--base", bookworm_base, "-o", lay, "--tag", "tfprov-test/pod:1",
                            root=False, env=ENV, timeout=600)
            assert p2.returncode == 0, out(p2)
    finally:
        idx.close()
    with open(os.path.join(lay, "index.json")) as f:
        mdesc = json.load(f)["manifests"][0]
    with open(os.path.join(lay, "blobs", "sha256", mdesc["digest"].split(":")[1])) as f:
        layers = [l["digest"] for l in json.load(f)["layers"]]
    for tool in (["skopeo", "inspect", "oci:" + lay],
                 ["skopeo", "inspect", "docker-archive:" + img],
                 ["oci-image-tool", "validate", "--type", "image", lay]):
        r = subprocess.run(tool, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, " ".join(tool) + ": " + r.stdout + r.stderr
        if tool[0] == "skopeo":
            assert json.loads(r.stdout)["Layers"] == layers, (tool, r.stdout)
    assert re.search(r"glibc 2\.36 \(/usr/lib/x86_64-linux-gnu/libc\.so\.6\)", out(p)), out(p)

    info = podman("info", "--format", "json", timeout=120)
    if info.returncode != 0:
        pytest.skip("podman cannot run here: " + (info.stderr or info.stdout)[-500:])
    ld = podman("load", "-i", img, timeout=600)
    assert ld.returncode == 0, ld.stdout + ld.stderr
    assert "tfprov-test/pod:1" in ld.stdout + ld.stderr, ld.stdout + ld.stderr

    def run(*argv):
        # This build's binary, and its knowledge base where TFPROV_DATADIR says.
        return podman("run", "--rm", "--network=none",
                      "-v", os.path.realpath(tfprov.bin) + ":/usr/local/bin/tfprov:ro",
                      "-v", os.path.join(REPO, "data") + ":/usr/share/tfprov/data:ro",
                      "-e", "TFPROV_DATADIR=/usr/share/tfprov",
                      "localhost/tfprov-test/pod:1", *argv, timeout=300)

    v = run("tfprov", "--no-gpu", "verify", "--deep", "pod")
    # 125: podman's own error (the container never started), not tfprov's.
    if v.returncode == 125 and re.search(r"cgroup|OCI runtime|setrlimit|runc", v.stderr, re.I):
        pytest.skip("podman cannot start a container here: " + v.stderr[-500:])
    assert v.returncode == 0, v.stdout + v.stderr
    st = run("tfprov", "status")
    assert st.returncode == 0 and "pod" in st.stdout, st.stdout + st.stderr
    imp = run("python", "-c", "import tfprov_alpha, sys; print(tfprov_alpha.__file__, sys.prefix)")
    assert imp.returncode == 0, imp.stdout + imp.stderr
    assert imp.stdout.split() == [
        "/opt/tfprov/envs/tf/lib/python3.11/site-packages/tfprov_alpha/__init__.py",
        "/opt/tfprov/envs/tf"], imp.stdout
    # No network inside: only the loopback interface.
    net = run("python", "-c", "import socket; print(sorted(n for _, n in socket.if_nameindex()))")
    assert net.returncode == 0 and net.stdout.strip() == "['lo']", net.stdout + net.stderr

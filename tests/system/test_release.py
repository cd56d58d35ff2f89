"""The portable release (scripts/build-release.sh) on the oldest and the newest Debian.

What the machine looks like: the real scripts/build-release.sh builds the
tarball from this working tree (in its cached Debian 11 build root). Two
minimal Debian roots made by the real debootstrap (--variant=minbase, no
package added): Debian 11 "bullseye" (glibc 2.31, the oldest the archive
still serves) and Debian 13 "trixie". The release binary runs inside each
through chroot, with /proc mounted as on a real system; the loopback mirror
runs on this host (a chroot shares the network namespace). Nothing of the
host's libraries is visible in there, so what runs is what a user of that
distribution gets.

STAND-INS, said plainly: the mirror's archives hold stub libraries with
NVIDIA's sonames (tests/fixtures/make_stack.py, build/stubs), and the NVML
that answers the driver probe is the stand-in build/stubs/driver
libnvidia-ml.so.1, found by the same dlopen("libnvidia-ml.so.1") through
LD_LIBRARY_PATH that finds NVIDIA's on a GPU machine.

The roots are cached in $TFPROV_RELEASE_CACHE (default
/var/cache/tfprov-release) between runs; the tests write only below a
directory of their own inside each root and remove it afterwards.
Needs root (debootstrap, chroot, mount) and Debian's mirror.
"""
import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from lib_http import HttpServer, make_tls  # noqa: E402
from lib_provision import STUBS, make_stack  # noqa: E402

CACHE = os.environ.get("TFPROV_RELEASE_CACHE", "/var/cache/tfprov-release")
MIRROR = os.environ.get("TFPROV_RELEASE_MIRROR", "http://deb.debian.org/debian")
# The glibc the release is built against (Debian 11) and the libraries of
# glibc itself, the only ones the binary may need from the host.
GLIBC_MAX = (2, 31)
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
              "ld-linux-x86-64.so.2"}
# Where each root gets the test CA: Debian's path in one, RHEL's in the other,
# so the binary's own CA lookup (engine/artifact/private/cabundle.h) is exercised on both.
CA_PATHS = {"bullseye": "/etc/ssl/certs/ca-certificates.crt",
            "trixie": "/etc/pki/tls/certs/ca-bundle.crt"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root (debootstrap, chroot, mount)")


# The Debian source package each library of the listing is built from, and its
# Debian release (scripts/build-release.sh, LINKED).
LIBRARIES = {"openssl": "openssl", "libssl": "openssl", "libcurl": "curl",
             "libarchive": "libarchive", "libzip": "libzip", "sqlite": "sqlite3",
             "libyaml": "libyaml", "jansson": "jansson", "libdeflate": "libdeflate",
             "zlib": "zlib", "liblzma": "xz-utils", "zstd": "libzstd", "bzip2": "bzip2",
             "lz4": "lz4"}
SOURCES = {pkg: 12 for pkg in LIBRARIES.values()}
SOURCES["openssl"] = 13


def _version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(tfprov VERSION ([0-9.]+)", f.read()).group(1)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """Runs scripts/build-release.sh; returns (dist dir, tarball, unpacked top dir)."""
    dist = tmp_path_factory.mktemp("dist")
    t0 = time.monotonic()
    p = subprocess.run([os.path.join(REPO, "scripts", "build-release.sh"), str(dist)],
                       capture_output=True, text=True, timeout=3000)
    assert p.returncode == 0, p.stdout + p.stderr
    print(f"\nbuild-release.sh: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    tarballs = glob.glob(os.path.join(dist, "tfprov-*-linux-x86_64.tar.gz"))
    assert [os.path.basename(t) for t in tarballs] == [
        f"tfprov-{_version()}-linux-x86_64.tar.gz"], tarballs
    unpacked = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(tarballs[0]) as t:
        t.extractall(unpacked)
    top = os.path.join(unpacked, f"tfprov-{_version()}-linux-x86_64")
    return str(dist), tarballs[0], top


def _needs(binary):
    """Problems that keep `binary` from running on glibc 2.31 without extra libraries."""
    problems = []
    dyn = subprocess.run(["readelf", "-d", "-W", binary], capture_output=True, text=True,
                         check=True).stdout
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn):
        if lib not in GLIBC_LIBS:
            problems.append(f"NEEDED {lib}")
    for tag in ("RPATH", "RUNPATH"):
        if f"({tag})" in dyn:
            problems.append(tag)
    ver = subprocess.run(["readelf", "-V", "-W", binary], capture_output=True, text=True,
                         check=True).stdout
    for v in sorted(set(re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", ver))):
        if tuple(int(x) for x in v.split(".")[:2]) > GLIBC_MAX:
            problems.append(f"GLIBC_{v}")
    return problems


def _tree(d):
    return sorted(os.path.relpath(os.path.join(dp, f), d) for dp, _, fs in os.walk(d) for f in fs)


def test_tarball_has_binary_data_licences_and_checksums(release):
    dist, tarball, top = release
    p = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.path.basename(tarball) + ": OK" in p.stdout
    with open(tarball, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(dist, "SHA256SUMS")) as f:
        assert f"{digest}  {os.path.basename(tarball)}\n" in f.read()
    with tarfile.open(tarball) as t:
        members = t.getmembers()
    assert all(m.uid == 0 and m.gid == 0 for m in members)
    assert all(m.name.startswith(os.path.basename(top) + "/") or m.name == os.path.basename(top)
               for m in members)
    # Everything engine/base/datadir.c looks up, where it looks (<exe>/../share/tfprov).
    share = os.path.join(top, "share", "tfprov")
    for rel in ("data/compat.yaml", "bench/reference.yaml", "bench/bench_conv.py"):
        assert os.path.isfile(os.path.join(share, rel)), rel
    # The shipped manifests and their reference data, file for file.
    shipped = _tree(os.path.join(REPO, "manifests"))
    assert "stable-2.15.yaml" in shipped and any(f.startswith("data/") for f in shipped)
    assert _tree(os.path.join(share, "manifests")) == shipped
    assert os.access(os.path.join(top, "bin", "tfprov"), os.X_OK)
    third = os.path.join(top, "share", "doc", "tfprov", "third-party")
    with open(os.path.join(third, "BUILT-WITH")) as f:
        built_with = f.read()
    # Every library linked in is built from a Debian source package: its
    # debian/copyright is shipped and BUILT-WITH names its version and release.
    for pkg, release in SOURCES.items():
        assert os.path.isfile(os.path.join(third, pkg, "copyright")), pkg
        # (A newer version the suite's index lists but the mirror did not serve is named.)
        assert re.search(rf"^{re.escape(pkg)} \S+ \(Debian {release} \w+ source, built static "
                         r"here(?:; [^()]*)?\)$", built_with, re.M), (pkg, built_with)
    assert os.path.isfile(os.path.join(third, "libc6", "copyright"))


def test_binary_needs_only_glibc_2_31(release, build_dir):
    _, _, top = release
    assert _needs(os.path.join(top, "bin", "tfprov")) == []
    # The check can fail: the ordinary build (Debian 12, shared libraries) does.
    # (libcurl is not NEEDED there: engine/base/lazylibs.c dlopen()s it.)
    host = _needs(os.path.join(build_dir, "tfprov"))
    assert "NEEDED libsqlite3.so.0" in host and any(p.startswith("GLIBC_2.3") for p in host), \
        host


def test_version_lists_linked_libraries_of_supported_lines(release):
    """The portable binary links every library in, each built from a Debian source
    package: --version --verbose names it with the version it reports at run time
    and that source, and scripts/check-eol.py judges every one, OpenSSL by its
    upstream line (data/support-lines.tsv) and each by its Debian release's
    security support (none from bullseye, whose LTS ended on 2026-08-31)."""
    _, _, top = release
    binary = os.path.join(top, "bin", "tfprov")
    out = subprocess.run([binary, "--version", "--verbose"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    print(out, file=sys.stderr)
    found = re.findall(r"^  (\S+)\s+(\S+)\s+(.*)$", out, re.M)
    rows = {m[0]: (m[1], m[2]) for m in found}
    assert sorted(m[0] for m in found) == sorted(LIBRARIES), out  # each once, no other
    for lib, pkg in LIBRARIES.items():
        version, how = rows[lib]
        m = re.search(rf", built from Debian (\d+) source {re.escape(pkg)} (?:\d+:)?(\S+)-[^-\s]+$",
                      how)
        assert m and int(m.group(1)) == SOURCES[pkg], (lib, out)
        # The version the library reports is its source's upstream version: the
        # library linked in is the one built from that source ("1.2.13.dfsg" for
        # zlib's 1:1.2.13.dfsg-1, "1.5.4+dfsg2" for libzstd's).
        assert m.group(2) == version or m.group(2).startswith((version + ".", version + "+")), \
            (lib, version, m.group(2), out)
    for lib in ("libcurl", "libarchive", "libzip"):
        assert rows[lib][1].startswith("linked in,"), out
    # The compression libraries answer their own version calls, and libarchive was
    # configured with each of them.
    for lib, call in (("zlib", "zlibVersion"), ("liblzma", "lzma_version_string"),
                      ("bzip2", "BZ2_bzlibVersion"), ("lz4", "LZ4_versionString"),
                      ("zstd", "ZSTD_versionString")):
        assert rows[lib][1].startswith("linked in (for libarchive") and f"; {call}())" in \
            rows[lib][1], (lib, out)
    p = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "check-eol.py"),
                        "--binary", binary], capture_output=True, text=True, timeout=60)
    print(p.stdout, file=sys.stderr)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not judged" not in p.stdout, p.stdout  # every library has a verdict
    for lib in LIBRARIES:
        assert re.search(rf"^ok    {lib} \S+: built from Debian {SOURCES[LIBRARIES[lib]]} "
                         "source, security support until", p.stdout, re.M), (lib, p.stdout)
    assert rows["openssl"][0].startswith("3.5."), out  # the LTS build-release.sh builds
    assert rows["libssl"][0] == rows["openssl"][0], out  # libcurl's TLS is that one


class Root:
    """A cached minimal Debian root and a per-test directory inside it."""

    def __init__(self, suite, path, top):
        self.suite = suite
        self.path = path
        self.work = "/tfprov-test-" + uuid.uuid4().hex[:12]
        self.bin = f"/opt/{os.path.basename(top)}/bin/tfprov"
        self.added = []  # host paths this test put into the root, removed after

    def put(self, path, src):
        """Copies host file src to path in the root, noting what it creates."""
        top = path
        while not os.path.exists(self.host(os.path.dirname(top))):
            top = os.path.dirname(top)
        self.added.append(self.host(top))
        os.makedirs(os.path.dirname(self.host(path)), exist_ok=True)
        shutil.copy(src, self.host(path))

    def host(self, p):
        return os.path.join(self.path, p.lstrip("/"))

    def run(self, *args, env=None, timeout=300, check=None):
        e = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C",
             "TMPDIR": self.work + "/tmp"}
        e.update(env or {})
        argv = ["chroot", self.path, "/usr/bin/env", "-i"] + [f"{k}={v}" for k, v in e.items()]
        argv += [str(a) for a in args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if check is not None:
            assert p.returncode == check, (f"[{self.suite}] {args} exited {p.returncode}, "
                                           f"wanted {check}\nstdout:\n{p.stdout}\n"
                                           f"stderr:\n{p.stderr}")
        return p

    def tfprov(self, *args, **kw):
        return self.run(self.bin, *args, **kw)


def _debootstrap(suite):
    """The cached pristine root of `suite`, made once (flock: parallel runs wait)."""
    key = hashlib.sha256(f"{suite} minbase {MIRROR} v1".encode()).hexdigest()[:16]
    path = os.path.join(CACHE, f"test-{suite}-{key}")
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, f".lock-test-{suite}"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(path, ".tfprov-ready")):
            shutil.rmtree(path + ".tmp", ignore_errors=True)
            t0 = time.monotonic()
            p = subprocess.run(["nice", "-n", "10", "debootstrap", "--variant=minbase", suite,
                                path + ".tmp", MIRROR], capture_output=True, text=True,
                               timeout=1800)
            assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
            os.rename(path + ".tmp", path)
            open(os.path.join(path, ".tfprov-ready"), "w").close()
            print(f"\ndebootstrap {suite}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return path


def _clean_leftovers(r):
    """Removes what a killed run left in a cached root: its /proc mount, work
    directory, unpacked release and test CA (minbase roots have none of these)."""
    with open("/proc/mounts") as f:
        if any(line.split()[1] == r.host("/proc") for line in f):
            subprocess.run(["umount", r.host("/proc")], check=True)
    stale = glob.glob(r.host("/tfprov-test-*")) + glob.glob(r.host("/opt/tfprov-*"))
    stale += [r.host(p) for p in ("/etc/ssl/certs", "/etc/pki")]
    for a in stale:
        if os.path.isdir(a):
            shutil.rmtree(a)
    with open(r.host("/etc/os-release")) as f:
        assert f"VERSION_CODENAME={r.suite}" in f.read()


@pytest.fixture(scope="module", params=["bullseye", "trixie"])
def root(request, release):
    """The release unpacked into /opt of a minimal root, /proc mounted; removed after."""
    _, tarball, top = release
    path = _debootstrap(request.param)
    lock = open(os.path.join(CACHE, f".lock-test-{request.param}"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # one user of this root at a time
    r = Root(request.param, path, top)
    _clean_leftovers(r)  # of a run killed while it held the root
    added = [r.host("/opt/" + os.path.basename(top)), r.host(r.work)]
    subprocess.run(["mount", "-t", "proc", "proc", r.host("/proc")], check=True)
    try:
        os.makedirs(r.host(r.work + "/tmp"))
        with tarfile.open(tarball) as t:
            t.extractall(r.host("/opt"))
        yield r
    finally:
        subprocess.run(["umount", r.host("/proc")], check=True)
        for a in added + r.added:
            if os.path.isdir(a) and not os.path.islink(a):
                shutil.rmtree(a)
            elif os.path.lexists(a):
                os.unlink(a)
        lock.close()


def test_root_is_the_distribution_it_claims(root):
    with open(root.host("/etc/os-release")) as f:
        assert f"VERSION_CODENAME={root.suite}" in f.read()
    p = root.run("/usr/bin/ldd", "--version", check=0)
    libc = re.search(r"(\d+)\.(\d+)", p.stdout.splitlines()[0]).groups()
    if root.suite == "bullseye":
        assert tuple(map(int, libc)) == GLIBC_MAX, p.stdout
    # Debian 11's minimal root has none of the libraries tfprov links in (in
    # Debian 13's, apt pulls in libsqlite3; the loader test shows it unused).
    for lib in ("libcurl.so.4", "libyaml-0.so.2", "libarchive.so.13", "libjansson.so.4",
                "libsqlite3.so.0"):
        if root.suite == "bullseye":
            assert not glob.glob(root.host(f"/usr/lib/x86_64-linux-gnu/{lib}*")), lib


def test_loader_resolves_everything_in_root(root):
    p = root.run("/lib64/ld-linux-x86-64.so.2", "--list", root.bin, check=0)
    assert "not found" not in p.stdout, p.stdout
    libs = {os.path.basename(x) for x in re.findall(r"^\s*(\S+\.so\.\d+)", p.stdout, re.M)}
    assert libs and libs <= GLIBC_LIBS | {"linux-vdso.so.1"}, p.stdout


def test_version_validate_plan(root):
    p = root.tfprov("--version", check=0)
    assert re.match(rf"tfprov {re.escape(_version())} \(commit [0-9a-f]{{12}}(-dirty)?\)",
                    p.stdout), p.stdout
    shipped = f"/opt/tfprov-{_version()}-linux-x86_64/share/tfprov/manifests/stable-2.15.yaml"
    root.tfprov("validate", shipped, check=0)
    # A broken manifest through the statically linked libyaml: file:line:column
    # and a hint, exit 3 as on the Debian 12 build.
    with open(root.host(root.work + "/broken.yaml"), "w") as f:
        f.write("schema: 1\nstack:\n  name: [unclosed\n")
    p = root.tfprov("validate", root.work + "/broken.yaml")
    assert p.returncode == 3, p.stderr
    assert f"{root.work}/broken.yaml:4:1: error:" in p.stderr and "hint:" in p.stderr, p.stderr
    # plan of a shipped manifest: every step; the driver check (no GPU in the
    # root: dlopen of libnvidia-ml.so.1 fails) stops it as apply would, exit 6.
    os.makedirs(root.host(root.work + "/plan-root"))
    p = root.tfprov("--root", root.work + "/plan-root", "plan", shipped, timeout=120)
    assert p.returncode == 6, p.stdout + p.stderr
    for step in ("<= driver", "+ cuda", "+ cudnn", "+ env", "+ pip"):
        assert step in p.stdout, p.stdout
    assert os.listdir(root.host(root.work + "/plan-root")) == []


def test_plan_with_standin_nvml(root, tmp_path):
    """dlopen of NVML from the release binary: the stand-in driver 545.23.08."""
    drv = root.work + "/standin-driver"
    shutil.copytree(os.path.join(STUBS, "driver"), root.host(drv), symlinks=True)
    os.makedirs(root.host(root.work + "/nvml-root"))
    shipped = f"/opt/tfprov-{_version()}-linux-x86_64/share/tfprov/manifests/stable-2.15.yaml"
    p = root.tfprov("--root", root.work + "/nvml-root", "plan", shipped, timeout=120,
                    env={"LD_LIBRARY_PATH": drv, "TFPROV_STUB_DRIVER": "545.23.08",
                         "TFPROV_STUB_CUDA": "12030",
                         "TFPROV_STUB_GPUS": "NVIDIA GeForce RTX 4070 Ti:8.9"})
    # Driver 545 supports the stack's CUDA 12.3: nothing stops the plan.
    assert p.returncode == 0, p.stdout + p.stderr
    assert "545.23.08" in p.stdout and "apply would stop here" not in p.stdout, p.stdout


def test_env_only_apply_into_root(root):
    shutil.copy(os.path.join(REPO, "tests", "manifests", "env-only.yaml"),
                root.host(root.work + "/env-only.yaml"))
    target = root.work + "/env-root"
    os.makedirs(root.host(target))
    root.tfprov("--root", target, "apply", "-y", root.work + "/env-only.yaml", check=0)
    profiles = glob.glob(root.host(target + "/opt/tfprov/stacks/*/activate.sh"))
    assert profiles, os.listdir(root.host(target))
    with open(profiles[0]) as f:
        assert "TF_CPP_MIN_LOG_LEVEL" in f.read()
    assert os.path.isfile(root.host(target + "/etc/profile.d/tfprov.sh"))
    assert os.path.isfile(root.host(target + "/var/lib/tfprov/state.db"))
    p = root.tfprov("--root", target, "status", check=0)
    assert "demo-env" in p.stdout, p.stdout
    p = root.tfprov("--root", target, "apply", "-y", root.work + "/env-only.yaml", check=0)
    p = root.tfprov("--root", target, "plan", "--detailed-exitcode",
                    root.work + "/env-only.yaml")
    assert p.returncode == 0, p.stdout + p.stderr


def test_https_mirror_apply_finds_the_roots_ca_bundle(root, tmp_path):
    """A small CUDA/cuDNN stack from a loopback HTTPS mirror, no --ca-bundle:
    the binary finds the CA at the distribution's path (Debian's in bullseye,
    RHEL's in trixie) and fails with a TLS error while it is absent."""
    tls = make_tls(str(tmp_path / "tls"))
    mirror = tmp_path / "mirror"
    with HttpServer(root=str(mirror), tls=tls) as srv:
        base = f"https://127.0.0.1:{srv.port}"
        m = make_stack(mirror, base, tmp_path / "stack.yaml", name="portable",
                       driver_policy="skip")
        shutil.copy(m, root.host(root.work + "/stack.yaml"))
        target = root.work + "/stack-root"
        os.makedirs(root.host(target))
        env = {"TFPROV_WSL_LIB_DIR": "/nonexistent", "TFPROV_PROC_VERSION": "/nonexistent"}
        # No CA in the root yet: the download fails on the certificate, nothing placed.
        p = root.tfprov("--root", target, "--no-gpu", "apply", "-y", root.work + "/stack.yaml",
                        env=env)
        assert p.returncode != 0, p.stdout + p.stderr
        assert re.search(r"certificate|SSL|TLS", p.stdout + p.stderr, re.I), p.stdout + p.stderr
        assert not glob.glob(root.host(target + "/opt/tfprov/**/libcudart.so.12"),
                             recursive=True)
        root.put(CA_PATHS[root.suite], tls["ca"])
        if root.suite == "trixie":
            # An OpenSSL 3 system configuration (tests/fixtures/openssl3.cnf):
            # the linked-in OpenSSL 1.1.1 reads it (OPENSSL_CONF; by default
            # /usr/lib/ssl/openssl.cnf) and must not fail on its "providers".
            root.put(root.work + "/openssl.cnf", os.path.join(HERE, "..", "fixtures",
                                                              "openssl3.cnf"))
            env["OPENSSL_CONF"] = root.work + "/openssl.cnf"
        t0 = time.monotonic()
        root.tfprov("--root", target, "--no-gpu", "apply", "-y", root.work + "/stack.yaml",
                    env=env, check=0)
        print(f"\n[{root.suite}] apply of the small stack: {time.monotonic() - t0:.1f} s",
              file=sys.stderr)
        gets = [r for r in srv.requests if r[0] == "GET" and r[1].endswith(".tar.xz")]
        assert gets, srv.requests
    libs = glob.glob(root.host(target + "/opt/tfprov/**/libcudart.so.12*"), recursive=True)
    assert libs, "libcudart.so.12 not placed"
    p = root.tfprov("--root", target, "status", check=0)
    assert "portable" in p.stdout, p.stdout


def _rpm_query(rpm, fmt):
    return subprocess.run(["rpm", "-qp", "--nosignature", "--qf", fmt, rpm],
                          capture_output=True, text=True, check=True).stdout


def test_rpm_file_list_and_requires(release):
    """The .rpm holds exactly the tarball's files under /usr (man page gzipped),
    owns no system directory, and requires only glibc, python3 and
    ca-certificates."""
    dist, _, top = release
    rpms = glob.glob(os.path.join(dist, "tfprov-*.rpm"))
    assert [os.path.basename(r) for r in rpms] == [f"tfprov-{_version()}-1.x86_64.rpm"], rpms
    rpm = rpms[0]
    assert _rpm_query(rpm, "%{NAME} %{VERSION} %{ARCH} %{LICENSE}") == \
        f"tfprov {_version()} x86_64 MIT"
    entries = [line.split(" ", 1) for line in
               _rpm_query(rpm, "[%{FILEMODES:perms} %{FILENAMES}\n]").splitlines()]
    files = {name for mode, name in entries if not mode.startswith("d")}
    dirs = {name for mode, name in entries if mode.startswith("d")}
    want = set()
    for dp, _, fns in os.walk(top):
        for fn in fns:
            rel = os.path.relpath(os.path.join(dp, fn), top)
            want.add("/usr/" + (rel + ".gz" if rel.startswith("share/man/") else rel))
    assert files == want, (sorted(files - want), sorted(want - files))
    assert "/usr/bin/tfprov" in files and "/usr/share/tfprov/data/compat.yaml" in files
    mode = dict((n, m) for m, n in entries)["/usr/bin/tfprov"]
    assert mode == "-rwxr-xr-x", mode
    assert dirs and all(d.startswith(("/usr/share/tfprov", "/usr/share/doc/tfprov"))
                        for d in dirs), sorted(dirs)
    requires = _rpm_query(rpm, "[%{REQUIRES}\n]").splitlines()
    assert "python3" in requires and "ca-certificates" in requires, requires
    for r in requires:
        if r in ("python3", "ca-certificates") or r.startswith(("rpmlib(", "rtld(")):
            continue
        m = re.fullmatch(r"(lib[a-z]+\.so\.\d+|ld-linux-x86-64\.so\.2)(\((GLIBC_([0-9.]+))?\))?"
                         r"\(64bit\)", r)
        assert m and m.group(1) in GLIBC_LIBS, f"unexpected Requires: {r}"
        if m.group(4):
            assert tuple(int(x) for x in m.group(4).split(".")[:2]) <= GLIBC_MAX, r

"""`tfprov image build` / `image inspect` through the real binary: a fixture
stack (CUDA + cuDNN archives, a venv, a wheel) written as an OCI image on a
tiny base this test makes itself, then checked from the outside.

STAND-INS, said plainly: the CUDA/cuDNN archives hold stub libraries with
NVIDIA's sonames (tests/fixtures/make_stack.py); the wheel is built here
(lib_pyindex); the base is a one-layer OCI layout written by this test (an
os-release, the directories a rootfs has, a stand-in python3 and a stand-in
libc.so.6 carrying glibc's version string), not a Debian bookworm rootfs:
test_image_podman.py builds on a real bookworm base and runs the image in
podman. Here its layers are unpacked in order into a directory and `tfprov
--root DIR verify` / `status` run against it, which read the same state and
files the container would. skopeo and oci-image-tool validate the layout
when they are installed (scripts/install-deps.sh).
"""
import fcntl
import hashlib
import io
import json
import os
import select
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import pytest

import lib_cyclonedx
import lib_pyindex
from lib_provision import Mirror, no_stub_env, out

PYVER = "%d.%d" % sys.version_info[:2] if sys.executable == "/usr/bin/python3" else \
    subprocess.run(["/usr/bin/python3", "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                   capture_output=True, text=True, check=True).stdout.strip()
ENV = no_stub_env()


def _blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + d, "size": len(data)}


def libc_stand_in(version):
    """The bytes of a stand-in libc.so.6: the version string glibc's own
    carries ("GNU C Library (Debian GLIBC 2.36-9+deb12u4) stable release
    version 2.36.", what `/lib/x86_64-linux-gnu/libc.so.6` prints on Debian 12)."""
    return (b"\x7fELF stand-in\0GNU C Library (Debian GLIBC %s-1) stable release version %s.\n"
            % (version.encode(), version.encode()))


def make_base(layout, arch="amd64", python=True, glibc="2.36", files=(), layer_bytes=None):
    """A one-layer OCI image layout: a tiny rootfs with an os-release,
    (python) a stand-in /usr/bin/python3 -> python3.X, the interpreter the
    fixture venv links to, and (glibc) a stand-in libc.so.6 of that version
    behind the merged-/usr symlink /lib -> usr/lib (their contents are never
    run here); files: more (name, bytes) entries, (name, str) a symlink;
    layer_bytes: the layer's bytes instead of that rootfs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d in ("etc", "usr", "usr/bin", "usr/lib", "usr/lib/x86_64-linux-gnu", "tmp", "var"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1
            t.addfile(ti)
        ti = tarfile.TarInfo("lib")
        ti.type, ti.linkname, ti.mtime = tarfile.SYMTYPE, "usr/lib", 1
        t.addfile(ti)
        more = list(files)
        if glibc:
            more.append(("usr/lib/x86_64-linux-gnu/libc.so.6", libc_stand_in(glibc)))
        for name, data in more:
            ti = tarfile.TarInfo(name)
            ti.mode, ti.mtime = 0o755, 1
            if isinstance(data, str):  # a symlink to data
                ti.type, ti.linkname = tarfile.SYMTYPE, data
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
        if python:
            ti = tarfile.TarInfo(f"usr/bin/python{PYVER}")
            ti.size, ti.mode, ti.mtime = 0, 0o755, 1
            t.addfile(ti, io.BytesIO(b""))
            ti = tarfile.TarInfo("usr/bin/python3")
            ti.type, ti.linkname, ti.mtime = tarfile.SYMTYPE, f"python{PYVER}", 1
            t.addfile(ti)
        data = b'PRETTY_NAME="tfprov test base"\nID=debian\nVERSION_ID="12"\n'
        ti = tarfile.TarInfo("etc/os-release")
        ti.size, ti.mode, ti.mtime = len(data), 0o644, 1
        t.addfile(ti, io.BytesIO(data))
    layer = _blob(layout, buf.getvalue() if layer_bytes is None else layer_bytes)
    cfg = {"architecture": arch, "os": "linux",
           "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
           "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
           "history": [{"created_by": "test base"}]}
    c = _blob(layout, json.dumps(cfg).encode())
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": dict(c, mediaType="application/vnd.oci.image.config.v1+json"),
           "layers": [dict(layer, mediaType="application/vnd.oci.image.layer.v1.tar")]}
    m = _blob(layout, json.dumps(man).encode())
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [
            dict(m, mediaType="application/vnd.oci.image.manifest.v1+json")]}, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion": "1.0.0"}')
    return str(layout)


def read_image(layout):
    """(manifest, config) of the single image of an OCI layout."""
    with open(os.path.join(layout, "index.json")) as f:
        idx = json.load(f)
    d = idx["manifests"][0]["digest"].split(":")[1]
    with open(os.path.join(layout, "blobs", "sha256", d)) as f:
        man = json.load(f)
    c = man["config"]["digest"].split(":")[1]
    with open(os.path.join(layout, "blobs", "sha256", c)) as f:
        cfg = json.load(f)
    return idx["manifests"][0]["digest"], man, cfg


def unpack_layers(layout, dest):
    """The image's rootfs: every layer extracted in order (no whiteouts in these)."""
    _, man, _ = read_image(layout)
    for l in man["layers"]:
        with tarfile.open(os.path.join(layout, "blobs", "sha256", l["digest"].split(":")[1])) as t:
            for m in t.getmembers():
                assert m.uid == 0 and m.gid == 0 and m.uname == "" and m.gname == ""
                p = os.path.join(dest, m.name)
                if m.isdir() and os.path.isdir(p):
                    continue
                t.extract(m, dest, set_attrs=True, numeric_owner=True,
                          filter="fully_trusted" if hasattr(tarfile, "data_filter") else None) \
                    if hasattr(tarfile, "data_filter") else t.extract(m, dest, numeric_owner=True)
    return dest


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("img")
    wheels = d / "wheels"
    path, sha = lib_pyindex.build_wheel(str(wheels), "tfprov-alpha", "1.0.0")
    idx = lib_pyindex.Index(str(wheels))
    venv = (f"python:\n  manager: venv\n  name: tf\n  version: \"{PYVER}\"\n"
            "  interpreter: /usr/bin/python3\n"
            f"pip:\n  index_url: {idx.url}\n  complete: true\n  requirements: |\n"
            f"    tfprov-alpha==1.0.0 \\\n        --hash=sha256:{sha}\n")
    with Mirror(d / "www") as m:
        m.full = m.stack(d / "full.yaml", name="full", python=PYVER, extra_yaml=venv)
        # The same CUDA 12.3.2, another cuDNN: the CUDA layer must be the same bytes.
        m.other = m.stack(d / "other.yaml", name="other", cudnn="8.9.6.50",
                          cudnn_variant="cuda12")
        m.base = make_base(d / "base")
        m.dir = d
        yield m
    idx.close()


def build(tfprov, manifest, base, dest, *extra, rc=0, umask=0o022):
    old = os.umask(umask)
    try:
        p = tfprov.run("--cache-dir", str(tfprov.root) + "-cache", "image", "build", manifest,
                       "--base", base, "-o", dest, *extra, root=False, env=ENV, timeout=300)
    finally:
        os.umask(old)
    assert p.returncode == rc, out(p)
    return p


def leftovers(directory):
    return [n for n in os.listdir(directory) if ".tfprov-" in n]


def test_build_layers_state_and_reproducible(tfprov, world, tmp_path):
    """One image of the full stack: one layer per step above the base, the
    config's env and NVIDIA variables, labels; the unpacked image passes
    `tfprov verify` and `status`; a second build (other umask, other OUT,
    cache warm) has the same manifest digest; a stack with the same CUDA
    has the same CUDA layer; the docker archive holds the same blobs."""
    a = str(tmp_path / "a")
    build(tfprov, world.full, world.base, a)
    digest, man, cfg = read_image(a)
    steps = [h["created_by"] for h in cfg["history"]]
    assert steps == ["test base", "cuda", "cudnn", "python-env", "pip", "config"], steps
    assert len(man["layers"]) == 6 and cfg["rootfs"]["diff_ids"] == [
        l["digest"] for l in man["layers"]]
    envs = dict(e.split("=", 1) for e in cfg["config"]["Env"])
    assert envs["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert envs["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert envs["NVIDIA_REQUIRE_CUDA"].startswith("cuda>=12.3 driver>=545")
    assert envs["TF_CPP_MIN_LOG_LEVEL"] == "1" and envs["TFPROV_STACK"] == "full"
    assert "/opt/tfprov/envs/tf/bin" in envs["PATH"].split(":")
    assert cfg["config"]["Cmd"] == ["/bin/sh"] and cfg["created"] == "1970-01-01T00:00:01Z"
    with open(world.full, "rb") as f:
        msha = hashlib.sha256(f.read()).hexdigest()
    assert cfg["config"]["Labels"]["dev.tfprov.manifest.sha256"] == msha
    assert man["annotations"]["org.opencontainers.image.title"] == "full"
    assert leftovers(tmp_path) == []

    # The image's rootfs, as a container would see it: tfprov's state in it passes.
    root = unpack_layers(a, str(tmp_path / "rootfs"))
    assert not any(n.startswith("libcuda.so") for _, _, fs in os.walk(root) for n in fs)
    cfgtext = open(os.path.join(root, "opt/tfprov/envs/tf/pyvenv.cfg")).read()
    assert str(tmp_path) not in cfgtext and "/opt/tfprov/envs/tf" in cfgtext
    pip = open(os.path.join(root, "opt/tfprov/envs/tf/bin/pip"), "rb").read()
    assert pip.startswith(b"#!/opt/tfprov/envs/tf/bin/python")
    st = os.stat(os.path.join(root, "opt/tfprov/cuda/12.3.2/lib64/libcudart.so.12"))
    assert int(st.st_mtime) == 1
    v = tfprov.run("--root", root, "--no-gpu", "verify", "--deep", "full", root=False, env=ENV)
    assert v.returncode == 0, out(v)
    s = tfprov.run("--root", root, "status", root=False, env=ENV)
    assert s.returncode == 0 and "drift" not in out(s).lower().replace("no drift", ""), out(s)
    # Its bill of materials: valid CycloneDX, the bytes `tfprov sbom` gives inside it.
    bom = open(os.path.join(root, "opt/tfprov/stacks/full/sbom.cdx.json")).read()
    assert lib_cyclonedx.errors(json.loads(bom)) == []
    sb = tfprov.run("--root", root, "sbom", "full", root=False,
                    env={**ENV, "SOURCE_DATE_EPOCH": "1"})
    assert sb.returncode == 0 and sb.stdout == bom, out(sb)

    # Twice: same digest, whatever the umask, the OUT path and the download cache
    # (--no-cache: this build applies too; the image cache's tests are below).
    b = str(tmp_path / "b")
    build(tfprov, world.full, world.base, b, "--no-cache", umask=0o077)
    assert read_image(b)[0] == digest
    # The same CUDA in another stack: the same CUDA layer.
    o = str(tmp_path / "o")
    build(tfprov, world.other, world.base, o)
    _, oman, ocfg = read_image(o)
    assert [h["created_by"] for h in ocfg["history"]][1] == "cuda"
    assert oman["layers"][1]["digest"] == man["layers"][1]["digest"]
    assert oman["layers"][2]["digest"] != man["layers"][2]["digest"]
    i = tfprov.run("--json", "image", "inspect", a, o, root=False, env=ENV)
    assert i.returncode == 0, out(i)
    data = [json.loads(l) for l in i.stdout.splitlines() if '"image_inspect"' in l]
    layers = data[0]["data"]["layers"] if "data" in data[0] else data[0]["layers"]
    assert [l["step"] for l in layers] == steps
    assert [l["shared"] for l in layers] == [True, True, False, False, False, False]

    # A docker archive of the other image: the same blobs as its layout.
    t = str(tmp_path / "a.tar")
    build(tfprov, world.other, world.base, t, "--tag", "tfprov/full:1")
    with tarfile.open(t) as tar:
        names = tar.getnames()
        dm = json.load(tar.extractfile("manifest.json"))
    assert dm[0]["RepoTags"] == ["tfprov/full:1"]
    assert [l.split("/")[-1] for l in dm[0]["Layers"]] == [
        l["digest"].split(":")[1] for l in oman["layers"]]
    assert "index.json" in names and "oci-layout" in names
    if shutil.which("skopeo"):
        r = subprocess.run(["skopeo", "inspect", "docker-archive:" + t], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["Layers"] == [l["digest"] for l in oman["layers"]]
    for tool in (["skopeo", "inspect", "oci:" + a], ["oci-image-tool", "validate", "--type",
                                                       "image", a]):
        if shutil.which(tool[0]):
            r = subprocess.run(tool, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stdout + r.stderr
            if tool[0] == "skopeo":
                assert len(json.loads(r.stdout)["Layers"]) == 6
    # The archive is itself a base.
    build(tfprov, world.other, "docker-archive:" + t, str(tmp_path / "on-archive"))


def test_the_digest_does_not_depend_on_where_out_is(tfprov, world, tmp_path):
    """OUT 100 characters deeper: the private root's venv scripts get the
    /bin/sh trampoline the native installer writes for a shebang over 127
    bytes; relocated to the in-image path they get the short shebang again,
    so the image is the same."""
    a = str(tmp_path / "a")
    deep = str(tmp_path / ("d" * 100))
    build(tfprov, world.full, world.base, a)
    build(tfprov, world.full, world.base, deep)
    assert read_image(deep)[0] == read_image(a)[0]
    pip = os.path.join(unpack_layers(deep, str(tmp_path / "rootfs")), "opt/tfprov/envs/tf/bin/pip")
    assert open(pip, "rb").read().startswith(b"#!/opt/tfprov/envs/tf/bin/python")


def test_the_digest_does_not_depend_on_the_filesystem_or_the_clock(tfprov, world, tmp_path):
    """OUT (and the private root beside it) on tmpfs, whose directories list
    their entries newest first, against OUT on this ext4, which lists them in
    hash order; the second build also in another time zone, a day ahead of
    UTC, after the clock has moved on. No SOURCE_DATE_EPOCH: the fixed default
    time. Entries sorted and stamped with one time make the same image."""
    a = str(tmp_path / "a")
    build(tfprov, world.full, world.base, a, "--no-cache")
    shm = tempfile.mkdtemp(prefix="tfprov-image-", dir="/dev/shm")
    try:
        b = os.path.join(shm, "b")
        p = tfprov.run("--cache-dir", str(tfprov.root) + "-cache", "image", "build", world.full,
                       "--base", world.base, "-o", b, "--no-cache", root=False,
                       env={**ENV, "TZ": "Pacific/Kiritimati"}, timeout=300)
        assert p.returncode == 0, out(p)
        assert read_image(b)[0] == read_image(a)[0]
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_bad_inputs_leave_no_out(tfprov, world, tmp_path):
    """Each refusal: its exit code and message, and no OUT (nor temp) beside it."""
    dest = str(tmp_path / "img")
    p = build(tfprov, world.other, str(tmp_path / "nope"), dest, rc=1)
    assert "nope" in out(p) and "No such file" in out(p)
    notimg = tmp_path / "notimg"
    notimg.mkdir()
    p = build(tfprov, world.other, str(notimg), dest, rc=1)
    assert "not an OCI image layout" in out(p)
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 64)
    p = build(tfprov, world.other, str(tmp_path / "junk.tar"), dest, rc=1)
    assert "is not an image" in out(p)
    p = build(tfprov, world.other, "docker://debian:bookworm", dest, rc=64)
    assert "registries are not supported yet" in out(p)
    # The venv links to /usr/bin/python3: a base without it is refused (exit 6).
    p = build(tfprov, world.full, make_base(tmp_path / "nopy", python=False), dest, rc=6)
    assert "runs /usr/bin/python3, which the base" in out(p), out(p)
    # The base's glibc against the wheels' floor (TF 2.15's manylinux2014: 2.17), read
    # from its layers before anything is fetched: older, none, or only dpkg's word.
    p = build(tfprov, world.full, make_base(tmp_path / "old", glibc="2.12"), dest, rc=6)
    assert ("has glibc 2.12 (/usr/lib/x86_64-linux-gnu/libc.so.6), older than 2.17, which "
            "the pip lock's wheels need (manylinux_2_17") in out(p), out(p)
    p = build(tfprov, world.full, make_base(tmp_path / "musl", glibc=None), dest, rc=6)
    assert "has no glibc" in out(p) and "need glibc >= 2.17" in out(p), out(p)
    status = (b"Package: libc-bin\nVersion: 2.36-9\n\nPackage: libc6\nStatus: install ok "
              b"installed\nVersion: 2.11.3-4\n\n")
    p = build(tfprov, world.full, make_base(tmp_path / "dpkg", glibc=None, files=[
        ("var/lib/dpkg/status", status)]), dest, rc=6)
    assert "has glibc 2.11.3 (the libc6 package in /var/lib/dpkg/status)" in out(p), out(p)
    # An older glibc's libc.so.6 -> libc-2.X.so, without the version string in it.
    p = build(tfprov, world.full, make_base(tmp_path / "oldlink", glibc=None, files=[
        ("lib64", "usr/lib64"), ("usr/lib64/libc-2.12.so", b"\x7fELF"),
        ("usr/lib64/libc.so.6", "libc-2.12.so")]), dest, rc=6)
    assert "has glibc 2.12 (/usr/lib64/libc-2.12.so)" in out(p), out(p)
    # A base whose layer is not a tar: its glibc cannot be read (exit 1, which layer).
    bad = make_base(tmp_path / "badlayer", layer_bytes=b"\0not a tar" * 100)
    _, bman, _ = read_image(bad)
    p = build(tfprov, world.full, bad, dest, rc=1)
    assert "base %s: layer %s: Unrecognized archive format" % (
        bad, bman["layers"][0]["digest"]) in out(p), out(p)
    # A base blob whose bytes are not those its digest names: integrity, exit 5.
    bad = make_base(tmp_path / "corrupt")
    _, bman, _ = read_image(bad)
    blob = os.path.join(bad, "blobs", "sha256", bman["layers"][0]["digest"].split(":")[1])
    with open(blob, "r+b") as f:
        f.seek(600)
        f.write(b"X")
    p = build(tfprov, world.full, bad, dest, rc=5)
    assert blob + ": its bytes hash to sha256:" in out(p) and "image is corrupt" in out(p), out(p)
    # pip.min_glibc above TF's floor: the higher one counts.
    hi = tmp_path / "min-glibc.yaml"
    hi.write_text(open(world.full).read().replace("pip:\n", "pip:\n  min_glibc: \"2.99\"\n", 1))
    p = build(tfprov, str(hi), world.base, dest, rc=6)
    assert "has glibc 2.36" in out(p) and "(pip.min_glibc)" in out(p), out(p)
    arm = make_base(tmp_path / "arm", arch="arm64")
    p = build(tfprov, world.other, arm, dest, rc=6)
    assert "linux/arm64" in out(p).replace("is linux/arm64", "linux/arm64")
    # An incomplete lock: refused as apply refuses it (exit 3).
    text = open(world.full).read().replace("complete: true", "complete: false")
    inc = tmp_path / "incomplete.yaml"
    inc.write_text(text)
    ap = tfprov.run("--no-gpu", "apply", "-y", str(inc), env=ENV)
    p = build(tfprov, str(inc), world.base, dest, rc=ap.returncode)
    assert ap.returncode == 3, out(ap)  # apply: manifest invalid (README, exit codes)
    # Unsigned under --require-signature: apply's exit code (5).
    ap = tfprov.run("--require-signature", "--no-gpu", "apply", "-y", world.other, env=ENV)
    p = build(tfprov, world.other, world.base, dest, "--require-signature",
              rc=ap.returncode)
    assert ap.returncode == 5, out(ap)
    assert leftovers(tmp_path) == [] and not os.path.exists(dest)


def test_driver_library_refused(tfprov, world, tmp_path):
    """A CUDA archive that would place libcuda.so.1 (NVIDIA's cuda_compat
    package carries one) is refused with exit 6, and no OUT is left."""
    d = tmp_path / "www"
    d.mkdir()
    name = "cuda_compat-linux-x86_64-12.3.101-archive"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        for n, data in ((f"{name}/compat/libcuda.so.1", b"\x7fELF stand-in"),):
            ti = tarfile.TarInfo(n)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    (d / f"{name}.tar.xz").write_bytes(buf.getvalue())
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    with Mirror(d) as m:
        entry = (f"    - name: cuda_compat\n      url: {m.url}/{name}.tar.xz\n"
                 f"      sha256: {sha}\n      size: {len(buf.getvalue())}\n      strip: 1\n")
        text = open(world.other).read().replace("  artifacts:\n", "  artifacts:\n" + entry, 1)
        man = tmp_path / "drv.yaml"
        man.write_text(text)
        dest = str(tmp_path / "img")
        p = build(tfprov, str(man), world.base, dest, rc=6)
    assert "/opt/tfprov/cuda/12.3.2/compat/libcuda.so.1" in out(p), out(p)
    assert "driver library" in out(p)
    assert leftovers(tmp_path) == [] and not os.path.exists(dest)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root only)")
def test_full_disk_leaves_nothing(tfprov, world, tmp_path):
    """OUT on a 16 MiB filesystem that the stack (a ~25 MiB venv, then its
    layers) does not fit on: exit 1 naming the full disk, and the
    filesystem is empty afterwards (no OUT, no temporary directory)."""
    small = tmp_path / "small"
    small.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(small)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: " + r.stderr)
    try:
        p = build(tfprov, world.full, world.base, str(small / "img"), rc=1)
        assert "space" in out(p).lower(), out(p)
        assert os.listdir(small) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


# The image cache (cli/image_cache.c): a build whose inputs are an earlier one's
# takes that build's layers, each hashed against its digest, instead of applying.

def jbuild(tfprov, manifest, base, dest, *extra, rc=0, env=None):
    """build() with --json: (process, its events)."""
    p = tfprov.run("--json", "--cache-dir", str(tfprov.root) + "-cache", "image", "build",
                   manifest, "--base", base, "-o", dest, *extra, root=False,
                   env={**ENV, **(env or {})}, timeout=300)
    assert p.returncode == rc, out(p)
    return p, [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def cache_of(evs):
    """The image event's "cache": hit, miss or off."""
    ims = [e["data"] for e in evs if e.get("type") == "image"]
    assert len(ims) == 1, evs
    return ims[0]["cache"]


def applied(evs):
    return [e for e in evs if e.get("type") == "apply_start"]


def files_of(tree):
    """{relative path: bytes} of every file under tree."""
    got = {}
    for dp, _, fns in os.walk(tree):
        for f in fns:
            p = os.path.join(dp, f)
            with open(p, "rb") as fh:
                got[os.path.relpath(p, tree)] = fh.read()
    return got


def cache_dir(tfprov, *parts):
    return os.path.join(str(tfprov.root) + "-cache", "images", *parts)


def entries(tfprov):
    d = cache_dir(tfprov, "keys")
    return sorted(n for n in os.listdir(d) if n.endswith(".json")) if os.path.isdir(d) else []


def test_warm_build_takes_the_layers_from_the_cache(tfprov, world, tmp_path):
    """A cold build applies and stores its layers (one entry); the same build
    again applies nothing, says its layers came from the cache and writes the
    same bytes: the layout file for file, a docker archive byte for byte as
    one built with --no-cache (which applies again and leaves the cache)."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    p, evs = jbuild(tfprov, world.full, world.base, a)
    assert cache_of(evs) == "miss" and applied(evs), out(p)
    assert len(entries(tfprov)) == 1
    entry = json.load(open(cache_dir(tfprov, "keys", entries(tfprov)[0])))
    _, man, _ = read_image(a)
    assert [l["digest"] for l in entry["layers"]] == [l["digest"] for l in man["layers"][1:]]
    assert [l["step"] for l in entry["layers"]] == ["cuda", "cudnn", "python-env", "pip",
                                                    "config"]
    assert entry["interpreters"] == [{"venv": "opt/tfprov/envs/tf", "python": "/usr/bin/python3"}]

    p, evs = jbuild(tfprov, world.full, world.base, b)
    assert cache_of(evs) == "hit" and applied(evs) == [], out(p)
    assert "from the image cache" in out(p)
    assert read_image(b)[0] == read_image(a)[0]
    assert files_of(b) == files_of(a)
    # The text output says so too.
    v = build(tfprov, world.full, world.base, str(tmp_path / "v"))
    assert "the stack's layers from the image cache" in out(v), out(v)
    assert "cuda" in out(v) and "from the cache" in out(v), out(v)

    # A docker archive from the cache: the same bytes as one built without it.
    t1, t2 = str(tmp_path / "hit.tar"), str(tmp_path / "off.tar")
    p, evs = jbuild(tfprov, world.full, world.base, t1, "--tag", "tf:1")
    assert cache_of(evs) == "hit" and applied(evs) == [], out(p)
    p, evs = jbuild(tfprov, world.full, world.base, t2, "--tag", "tf:1", "--no-cache")
    assert cache_of(evs) == "off" and applied(evs), out(p)
    assert open(t1, "rb").read() == open(t2, "rb").read()
    assert len(entries(tfprov)) == 1 and leftovers(tmp_path) == []


def test_a_tampered_cache_blob_is_built_again(tfprov, world, tmp_path):
    """A cached layer with one byte flipped is found while it is copied: a
    warning, the build applies instead, and the image has the digest of the
    cold build; the bad bytes go to quarantine/, the blob is stored again
    and the next build hits. A blob missing from the cache is a miss too.
    The cold build's own output is not touched (copies, not links). (The
    stack without Python: its builds are the cheapest.)"""
    a = str(tmp_path / "a")
    _, evs = jbuild(tfprov, world.other, world.base, a)
    digest, man, _ = read_image(a)
    layers = json.load(open(cache_dir(tfprov, "keys", entries(tfprov)[0])))["layers"]
    assert [l["step"] for l in layers] == ["cuda", "cudnn", "config"]
    cuda = layers[0]
    hexd = cuda["digest"].split(":")[1]
    blob = cache_dir(tfprov, "sha256", hexd)
    with open(blob, "r+b") as f:
        f.seek(cuda["size"] // 2)
        c = f.read(1)
        f.seek(cuda["size"] // 2)
        f.write(bytes([c[0] ^ 0xFF]))
    b = str(tmp_path / "b")
    p, evs = jbuild(tfprov, world.other, world.base, b)
    assert cache_of(evs) == "miss" and applied(evs), out(p)
    assert "image cache: the cuda layer " + cuda["digest"] in out(p), out(p)
    assert "building the layers again" in out(p)
    assert read_image(b)[0] == digest and files_of(b) == files_of(a)
    with open(os.path.join(a, "blobs", "sha256", hexd), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == hexd
    with open(blob, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == hexd  # stored again
    quar = os.path.join(str(tfprov.root) + "-cache", "quarantine")
    assert [n for n in os.listdir(quar) if n.startswith(hexd)], os.listdir(quar)
    p, evs = jbuild(tfprov, world.other, world.base, str(tmp_path / "c"))
    assert cache_of(evs) == "hit", out(p)

    os.unlink(cache_dir(tfprov, "sha256", layers[1]["digest"].split(":")[1]))
    p, evs = jbuild(tfprov, world.other, world.base, str(tmp_path / "d"))
    assert cache_of(evs) == "miss" and "missing from the cache" in out(p), out(p)
    assert read_image(str(tmp_path / "d"))[0] == digest
    assert leftovers(tmp_path) == []


def test_a_changed_input_misses(tfprov, world, tmp_path):
    """The manifest's bytes (same path), the base, SOURCE_DATE_EPOCH: each
    another key, so a build that changes one applies; the same inputs
    again hit. (The stack without Python: its builds are the cheapest.)"""
    man = tmp_path / "m.yaml"
    man.write_text(open(world.other).read())
    n = iter(range(100))

    def again(manifest=str(man), base=world.base, env=None):
        _, evs = jbuild(tfprov, manifest, base, str(tmp_path / ("o%d" % next(n))), env=env)
        return cache_of(evs)
    assert again() == "miss"
    assert again() == "hit"
    man.write_text(man.read_text() + "# edited\n")
    assert again() == "miss" and len(entries(tfprov)) == 2
    assert again() == "hit"
    other = make_base(tmp_path / "base2", files=[("etc/hostname", b"other\n")])
    assert again(base=other) == "miss"
    assert again(base=other) == "hit"
    assert again(env={"SOURCE_DATE_EPOCH": "2"}) == "miss"
    assert again() == "hit" and len(entries(tfprov)) == 4


def test_a_hit_refuses_what_a_build_refuses(tfprov, world, tmp_path):
    """With the cache warm for the manifest and base, what the build's own
    checks refuse is refused with the same exit code and no OUT: the build
    host's glibc below the wheels' floor (the pip step's precondition, run
    on a hit as plan_apply runs it), an unsigned manifest under
    --require-signature."""
    jbuild(tfprov, world.full, world.base, str(tmp_path / "warm"))
    dest = str(tmp_path / "img")
    old = {"TFPROV_GLIBC_VERSION": "2.12"}
    ref, _ = jbuild(tfprov, world.full, world.base, dest, "--no-cache", rc=6, env=old)
    p, _ = jbuild(tfprov, world.full, world.base, dest, rc=6, env=old)
    assert "this machine's glibc 2.12 is older than 2.17" in out(p), out(p)
    assert "this machine's glibc 2.12 is older than 2.17" in out(ref), out(ref)
    p, _ = jbuild(tfprov, world.full, world.base, dest, "--require-signature", rc=5)
    assert not os.path.exists(dest) and leftovers(tmp_path) == []
    p, evs = jbuild(tfprov, world.full, world.base, dest)
    assert cache_of(evs) == "hit"


# gc and the image cache (cli/image_gc.c): an entry goes when no build used it
# (stored it or hit it: its file's mtime) in --image-days days, a layer with
# the last entry that names it; gc and builds exclude each other on images/lock.

DAY = 86400


def gc(tfprov, *extra, rc=0):
    p = tfprov.run("--cache-dir", str(tfprov.root) + "-cache", "gc", *extra, env=ENV,
                   timeout=120)
    assert p.returncode == rc, out(p)
    return p


def entries_by_manifest(tfprov):
    """{manifest file name: (entry file name, [layer hex, ...])}."""
    got = {}
    for n in entries(tfprov):
        with open(cache_dir(tfprov, "keys", n)) as f:
            e = json.load(f)
        man = [l.split(" ")[1] for l in e["inputs"].splitlines() if l.startswith("manifest ")]
        got[os.path.basename(man[0])] = (n, [l["digest"].split(":")[1] for l in e["layers"]])
    return got


def human(b):
    """gc's human_size."""
    if b < 1024:
        return "%d byte%s" % (b, "" if b == 1 else "s")
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20)):
        if b < scale << 10:
            return "%.1f %s" % (b / scale, unit)
    return "%.1f GiB" % (b / (1 << 30))


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_gc_removes_the_image_entry_no_build_used(tfprov, world, tmp_path):
    """The full and the other stack's entries share the CUDA layer; both made
    40 days old, then a warm build of full hits and so uses its entry again.
    gc without -y (no terminal) lists other's entry and the layers only it
    names, with their bytes, and removes nothing (exit 1); gc -y removes
    them and keeps full's entry, its layers and the shared one. Then full
    still hits; other misses, builds the digest of its cold build, and hits."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    jbuild(tfprov, world.full, world.base, a)
    jbuild(tfprov, world.other, world.base, b)
    ents = entries_by_manifest(tfprov)
    full_key, full_layers = ents["full.yaml"]
    other_key, other_layers = ents["other.yaml"]
    shared = set(full_layers) & set(other_layers)
    only_other = [h for h in other_layers if h not in shared]
    assert len(shared) == 1 and only_other, (full_layers, other_layers)
    old = time.time() - 40 * DAY
    for k in (full_key, other_key):
        os.utime(cache_dir(tfprov, "keys", k), (old, old))
    p, evs = jbuild(tfprov, world.full, world.base, str(tmp_path / "a2"))
    assert cache_of(evs) == "hit", out(p)
    assert os.stat(cache_dir(tfprov, "keys", full_key)).st_mtime > time.time() - DAY
    blobs = sorted(os.listdir(cache_dir(tfprov, "sha256")))

    p = gc(tfprov, rc=1)
    assert sorted(os.listdir(cache_dir(tfprov, "sha256"))) == blobs, out(p)
    assert entries(tfprov) == sorted([full_key, other_key]), out(p)
    assert ("  - image cache entry of %s, last used 40 days ago"
            % os.path.realpath(world.other)) in p.stdout, out(p)
    for h in only_other:
        assert "  - image layer sha256:%s... of the " % h[:12] in p.stdout, out(p)
    for h in full_layers:
        assert h[:12] not in p.stdout, out(p)
    size = os.path.getsize(cache_dir(tfprov, "keys", other_key)) + sum(
        os.path.getsize(cache_dir(tfprov, "sha256", h)) for h in only_other)
    assert ("gc: 1 image cache entry no build used in 30 days, %d image layers no other "
            "entry names, 0 temporary files: %s in " % (len(only_other), human(size))
            ) in p.stdout, out(p)

    p = gc(tfprov, "-y")
    assert "Removed " in p.stdout, out(p)
    assert entries(tfprov) == [full_key], out(p)
    left = os.listdir(cache_dir(tfprov, "sha256"))
    for h in full_layers:
        assert h in left and sha256_of(cache_dir(tfprov, "sha256", h)) == h, out(p)
    assert not [h for h in only_other if h in left], out(p)

    p, evs = jbuild(tfprov, world.full, world.base, str(tmp_path / "a3"))
    assert cache_of(evs) == "hit" and applied(evs) == [], out(p)
    assert read_image(str(tmp_path / "a3"))[0] == read_image(a)[0]
    p, evs = jbuild(tfprov, world.other, world.base, str(tmp_path / "b2"))
    assert cache_of(evs) == "miss" and applied(evs), out(p)
    assert read_image(str(tmp_path / "b2"))[0] == read_image(b)[0]
    p, evs = jbuild(tfprov, world.other, world.base, str(tmp_path / "b3"))
    assert cache_of(evs) == "hit", out(p)
    assert leftovers(tmp_path) == []


def read_until(proc, text, timeout=60):
    """What proc writes on stdout until text appears, it ends, or timeout."""
    got, end = b"", time.time() + timeout
    while text.encode() not in got and time.time() < end:
        r, _, _ = select.select([proc.stdout], [], [], 0.2)
        if r:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            got += chunk
    return got.decode(errors="replace")


def background(tfprov, *args, root=True):
    argv = [tfprov.bin] + (["--root", tfprov.root] if root else [])
    return subprocess.Popen(argv + ["--json", "--cache-dir", str(tfprov.root) + "-cache"] +
                            list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, **ENV}, cwd=REPO_ROOT)


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gc_and_a_build_wait_for_each_other(tfprov, world, tmp_path):
    """images/lock, held by the test as a build holds it (shared): gc waits,
    says so and removes nothing until it is let go; then --image-days 0
    removes every entry and layer, and the temporary file of a store killed
    two hours ago (a fresh one stays: a store may be writing it). Held as gc
    holds it (exclusive): a build that would hit waits, and hits once it is
    let go."""
    jbuild(tfprov, world.other, world.base, str(tmp_path / "a"))
    stale = cache_dir(tfprov, "sha256", ".tfprov-blob-killed")
    fresh = cache_dir(tfprov, "sha256", ".tfprov-blob-live")
    for f in (stale, fresh):
        with open(f, "wb") as fh:
            fh.write(b"half a layer")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fd = os.open(cache_dir(tfprov, "lock"), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        g = background(tfprov, "gc", "-y", "--image-days", "0")
        said = read_until(g, "gc: waiting for an image build")
        assert "gc: waiting for an image build to finish with the image cache" in said, said
        time.sleep(0.5)
        assert g.poll() is None and len(entries(tfprov)) == 1, said
        fcntl.flock(fd, fcntl.LOCK_UN)
        said += g.communicate(timeout=60)[0].decode()
        assert g.returncode == 0, said
        assert entries(tfprov) == [], said
        assert os.listdir(cache_dir(tfprov, "sha256")) == [".tfprov-blob-live"], said

        jbuild(tfprov, world.other, world.base, str(tmp_path / "b"))
        fcntl.flock(fd, fcntl.LOCK_EX)
        dest = str(tmp_path / "c")
        bld = background(tfprov, "image", "build", world.other, "--base", world.base, "-o", dest,
                         root=False)
        said = read_until(bld, "waiting for `tfprov gc`")
        assert "image cache: waiting for `tfprov gc` to finish with it" in said, said
        time.sleep(0.5)
        assert bld.poll() is None and not os.path.exists(dest), said
        fcntl.flock(fd, fcntl.LOCK_UN)
        said += bld.communicate(timeout=300)[0].decode()
        assert bld.returncode == 0, said
        evs = [json.loads(l) for l in said.splitlines() if l.startswith("{")]
        assert cache_of(evs) == "hit", said
    finally:
        os.close(fd)

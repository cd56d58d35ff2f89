"""The runfile era: a CUDA toolkit from an NVIDIA .run installer and a legacy
cuDNN .tgz with its cuda/ top directory, merged into lib64 as the guide does.

STAND-IN, said plainly: NVIDIA's real runfiles are gigabytes and unreachable
here, so the test serves a small shell-archive stand-in that accepts the same
arguments tfprov passes (--silent --toolkit --toolkitpath=DIR --tmpdir=DIR
--no-opengl-libs --no-man-page --override) and installs a toolkit-shaped tree
(bin/nvcc, lib64/libcudart.so.10.0 ...). The cuDNN archive has the real legacy
layout (cuda/include/cudnn.h, cuda/lib64/libcudnn.so.7...). Everything else is
real: loopback HTTP, sha256 pinning, the child process started with an argv,
the state db.
"""
import hashlib
import io
import os
import sqlite3
import tarfile

import lib_http

RUNFILE = r"""#!/bin/sh
# Stand-in for cuda_10.0.130_410.48_linux.run (test fixture): toolkit-only mode.
set -eu
dest=""
toolkit=0
for a in "$@"; do
  case "$a" in
    --toolkitpath=*) dest="${a#--toolkitpath=}" ;;
    --toolkit) toolkit=1 ;;
    --silent|--override|--no-opengl-libs|--no-man-page|--tmpdir=*) ;;
    *) echo "unexpected argument: $a" >&2; exit 2 ;;
  esac
done
[ "$toolkit" = 1 ] || { echo "driver install refused by the stand-in" >&2; exit 3; }
[ -n "$dest" ] || { echo "no --toolkitpath" >&2; exit 2; }
mkdir -p "$dest/bin" "$dest/lib64" "$dest/include"
printf '#!/bin/sh\necho "nvcc stand-in: Cuda compilation tools, release 10.0, V10.0.130"\n' > "$dest/bin/nvcc"
chmod 755 "$dest/bin/nvcc"
printf 'stand-in cudart 10.0\n' > "$dest/lib64/libcudart.so.10.0.130"
ln -s libcudart.so.10.0.130 "$dest/lib64/libcudart.so.10.0"
ln -s libcudart.so.10.0 "$dest/lib64/libcudart.so"
printf '/* cuda.h stand-in */\n' > "$dest/include/cuda.h"
"""


def _tgz(members):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w:gz") as tar:
        for name, data, kind in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1600000000
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(ti)
            elif kind == "link":
                ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, data, 0o777
                tar.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o644
                tar.addfile(ti, io.BytesIO(data))
    return bio.getvalue()


def _manifest(tmp_path, url, run, tgz):
    def pin(data):
        return hashlib.sha256(data).hexdigest(), len(data)
    rsha, rsize = pin(run)
    csha, csize = pin(tgz)
    text = f"""schema: 1
stack:
  name: legacy
  platform: linux-x86_64
versions:
  tensorflow: 1.15.5
  cuda: 10.0.130
  cudnn: 7.6.5.32
  python: "3.7"
driver:
  policy: skip
cuda:
  runfile:
    url: {url}/cuda_10.0.130_410.48_linux.run
    sha256: {rsha}
    size: {rsize}
cudnn:
  placement: merge
  artifact:
    url: {url}/cudnn-10.0-linux-x64-v7.6.5.32.tgz
    sha256: {csha}
    size: {csize}
    strip: 1
"""
    p = tmp_path / "legacy.yaml"
    p.write_text(text)
    return p


def _serve(tmp_path):
    d = tmp_path / "mirror"
    d.mkdir()
    run = RUNFILE.encode()
    tgz = _tgz([
        ("cuda", None, "dir"), ("cuda/include", None, "dir"),
        ("cuda/include/cudnn.h", b"#define CUDNN_MAJOR 7\n#define CUDNN_MINOR 6\n", "file"),
        ("cuda/lib64", None, "dir"),
        ("cuda/lib64/libcudnn.so.7.6.5", b"stand-in cudnn 7.6.5\n", "file"),
        ("cuda/lib64/libcudnn.so.7", "libcudnn.so.7.6.5", "link"),
        ("cuda/lib64/libcudnn.so", "libcudnn.so.7", "link"),
        ("cuda/NVIDIA_SLA_cuDNN_Support.txt", b"license stand-in\n", "file"),
    ])
    (d / "cuda_10.0.130_410.48_linux.run").write_bytes(run)
    (d / "cudnn-10.0-linux-x64-v7.6.5.32.tgz").write_bytes(tgz)
    return d, run, tgz


def test_runfile_toolkit_and_legacy_cudnn_merge(tfprov, tmp_path):
    d, run, tgz = _serve(tmp_path)
    with lib_http.HttpServer(root=str(d)) as srv:
        m = _manifest(tmp_path, srv.url(""), run, tgz)
        r = tfprov.run("apply", "-y", m)
        # The runfile and archive hold text stand-ins, not libraries: the proof
        # the apply ends with (verify's dlopen) fails, so exit 8 with the stack
        # applied and recorded; what is checked here is the placement.
        assert r.returncode == 8, r.stdout + r.stderr
        assert "is applied and recorded, but it is not proven" in r.stdout + r.stderr
        assert "libcudart.so.10.0: load-failed" in r.stderr, r.stderr
        assert "runfile" in r.stdout
        cuda = tfprov.path("/opt/tfprov/cuda/10.0.130")
        # The runfile's tree, recorded file by file.
        assert os.path.islink(os.path.join(cuda, "lib64/libcudart.so.10.0"))
        assert os.access(os.path.join(cuda, "bin/nvcc"), os.X_OK)
        # cuDNN merged into the toolkit's lib64 and include, symlinks kept as symlinks;
        # its license file is not copied into the toolkit.
        assert os.readlink(os.path.join(cuda, "lib64/libcudnn.so.7")) == "libcudnn.so.7.6.5"
        assert open(os.path.join(cuda, "include/cudnn.h")).read().startswith("#define CUDNN_MAJOR 7")
        assert not os.path.exists(os.path.join(cuda, "NVIDIA_SLA_cuDNN_Support.txt"))
        db = sqlite3.connect(tfprov.state_db)
        paths = {p for (p,) in db.execute(
            "SELECT f.path FROM files f JOIN resources r ON r.id = f.resource_id "
            "WHERE r.addr = 'cuda'")}
        assert "/opt/tfprov/cuda/10.0.130/lib64/libcudart.so.10.0.130" in paths
        assert "/opt/tfprov/cuda/10.0.130/bin/nvcc" in paths
        cudnn = {p for (p,) in db.execute(
            "SELECT f.path FROM files f JOIN resources r ON r.id = f.resource_id "
            "WHERE r.addr = 'cudnn' AND f.type <> 'd'")}
        assert cudnn == {"/opt/tfprov/cuda/10.0.130/include/cudnn.h",
                         "/opt/tfprov/cuda/10.0.130/lib64/libcudnn.so",
                         "/opt/tfprov/cuda/10.0.130/lib64/libcudnn.so.7",
                         "/opt/tfprov/cuda/10.0.130/lib64/libcudnn.so.7.6.5"}
        # The directories it merged into are recorded for cuDNN too (with the
        # toolkit's step), so that whichever goes last removes them.
        dirs = {p for (p,) in db.execute(
            "SELECT f.path FROM files f JOIN resources r ON r.id = f.resource_id "
            "WHERE r.addr = 'cudnn' AND f.type = 'd'")}
        assert dirs == {"/opt/tfprov/cuda/10.0.130", "/opt/tfprov/cuda/10.0.130/include",
                        "/opt/tfprov/cuda/10.0.130/lib64"}, dirs
        db.close()
        again = tfprov.run("apply", "-y", m)
        assert again.returncode == 0 and "No changes" in again.stdout
        # destroy removes exactly what was placed: cuDNN first, then the toolkit tree.
        gone = tfprov.run("destroy", "-y", "legacy")
        assert gone.returncode == 0, gone.stderr
        assert not os.path.exists(cuda)


def test_runfile_that_fails_places_nothing(tfprov, tmp_path):
    """A runfile that exits non-zero: the step fails naming its status and output,
    and neither the prefix nor any record is left."""
    d, run, tgz = _serve(tmp_path)
    bad = RUNFILE.replace('[ "$toolkit" = 1 ]', 'echo "disk full (stand-in)" >&2; exit 7; [ 1 ]')
    (d / "cuda_10.0.130_410.48_linux.run").write_text(bad)
    with lib_http.HttpServer(root=str(d)) as srv:
        m = _manifest(tmp_path, srv.url(""), bad.encode(), tgz)
        r = tfprov.run("apply", "-y", m)
        assert r.returncode == 1, r.stdout + r.stderr
        out = r.stdout + r.stderr
        assert "exited with status 7" in out and "disk full" in out
        assert not os.path.exists(tfprov.path("/opt/tfprov/cuda/10.0.130"))
        leftovers = [n for n in os.listdir(tfprov.path("/opt/tfprov/cuda"))
                     if n.startswith(".tfprov-")] if os.path.isdir(
                         tfprov.path("/opt/tfprov/cuda")) else []
        assert leftovers == []
        db = sqlite3.connect(tfprov.state_db)
        assert db.execute("SELECT count(*) FROM files").fetchone()[0] == 0
        db.close()

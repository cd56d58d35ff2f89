"""Real-format conda packages built at test time (CEP 34/35 layouts).

A package is described as a dict of files; this module writes info/index.json,
info/paths.json (or the legacy info/files + info/has_prefix), optional
info/link.json, and packs it as .tar.bz2 (tarfile) or .conda (a stored zip
of info-*.tar.zst and pkg-*.tar.zst, compressed with the zstd CLI since
Python's stdlib has no zstd).
"""
import hashlib
import io
import json
import os
import subprocess
import tarfile
import zipfile

# conda-build pads the build prefix to 255 characters with "_placehold".
PLACEHOLDER = ("/opt/conda/conda-bld/hello_1700000000000/_h_env_" + "placehold_" * 30)[:255]

HELLO_C = r"""
#include <stdio.h>
static const char prefix[] = "@P@";
static const char data[] = "@P@/share/hello/data.txt";
int main(void)
{
	printf("prefix=%s\n", prefix);
	printf("data=%s\n", data);
	return 0;
}
"""


class File:
    def __init__(self, data=b"", mode=0o644, placeholder=None, binary=False, symlink=None):
        self.data = data.encode() if isinstance(data, str) else data
        self.mode = mode
        self.placeholder = placeholder
        self.binary = binary
        self.symlink = symlink


def compile_hello(workdir, placeholder=PLACEHOLDER):
    src = os.path.join(workdir, "hello.c")
    exe = os.path.join(workdir, "hello-%d" % len(placeholder))
    with open(src, "w") as f:
        f.write(HELLO_C.replace("@P@", placeholder))
    subprocess.run(["gcc", "-O0", "-o", exe, src], check=True)
    with open(exe, "rb") as f:
        data = f.read()
    assert placeholder.encode() in data
    return data


def _tar_bytes(members, compress=None):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w" if compress is None else "w:" + compress,
                      format=tarfile.PAX_FORMAT) as t:
        for name in sorted(members):
            f = members[name]
            ti = tarfile.TarInfo(name)
            ti.mtime = 1700000000
            if f.symlink is not None:
                ti.type = tarfile.SYMTYPE
                ti.linkname = f.symlink
                ti.mode = 0o777
                t.addfile(ti)
            else:
                ti.size = len(f.data)
                ti.mode = f.mode
                t.addfile(ti, io.BytesIO(f.data))
    return buf.getvalue()


def build_package(outdir, name, version, build, files, fmt="tar.bz2", depends=(),
                  noarch=None, entry_points=None, legacy=False, subdir=None, extra_members=None,
                  license="MIT"):
    """Writes the package; returns (path, sha256, md5, size). license None: index.json has none."""
    subdir = subdir or ("noarch" if noarch else "linux-64")
    index = {"name": name, "version": version, "build": build, "build_number": 0,
             "depends": list(depends), "constrains": [], "subdir": subdir,
             "timestamp": 1700000000000}
    if license is not None:
        index["license"] = license
    if noarch:
        index["noarch"] = noarch
    info = {"info/index.json": File(json.dumps(index, indent=2))}
    if legacy:
        info["info/files"] = File("".join(p + "\n" for p in sorted(files)))
        hp = ""
        for p, f in sorted(files.items()):
            if f.placeholder:
                hp += f"{f.placeholder} {'binary' if f.binary else 'text'} {p}\n"
        info["info/has_prefix"] = File(hp)
    else:
        paths = []
        for p, f in sorted(files.items()):
            e = {"_path": p, "path_type": "softlink" if f.symlink else "hardlink"}
            if not f.symlink:
                e["sha256"] = hashlib.sha256(f.data).hexdigest()
                e["size_in_bytes"] = len(f.data)
            if f.placeholder:
                e["prefix_placeholder"] = f.placeholder
                e["file_mode"] = "binary" if f.binary else "text"
            paths.append(e)
        info["info/paths.json"] = File(json.dumps({"paths": paths, "paths_version": 1}))
    if entry_points:
        info["info/link.json"] = File(json.dumps(
            {"noarch": {"type": "python", "entry_points": list(entry_points)},
             "package_metadata_version": 1}))
    pkg = dict(files)
    if extra_members:
        pkg.update(extra_members)
    dist = f"{name}-{version}-{build}"
    os.makedirs(outdir, exist_ok=True)
    if fmt == "tar.bz2":
        path = os.path.join(outdir, dist + ".tar.bz2")
        with open(path, "wb") as f:
            f.write(_tar_bytes({**info, **pkg}, "bz2"))
    else:
        path = os.path.join(outdir, dist + ".conda")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            z.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
            for kind, members in (("pkg", pkg), ("info", info)):
                raw = _tar_bytes(members)
                zst = subprocess.run(["zstd", "-q", "-c", "-"], input=raw,
                                     capture_output=True, check=True).stdout
                z.writestr(f"{kind}-{dist}.tar.zst", zst)
    with open(path, "rb") as f:
        data = f.read()
    return path, hashlib.sha256(data).hexdigest(), hashlib.md5(data).hexdigest(), len(data)


def explicit_lock(path, packages, md5=False):
    """packages: [(file, sha256, md5, size)] in install order."""
    lines = ["# platform: linux-64", "@EXPLICIT"]
    for p, sha, m, _ in packages:
        lines.append(f"file://{p}#" + (m if md5 else f"sha256:{sha}"))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def demo_packages(outdir, workdir, fmt="tar.bz2", python_exe="/usr/bin/python3"):
    """The demo env: a fake python (wraps the system one), a compiled program with
    the placeholder in its binary plus a text script, and a noarch python package
    with an entry point. Returns the packages in install order."""
    import sys
    pyver = subprocess.run([python_exe, "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    py_wrapper = (
        "#!/bin/sh\n"
        f"# stand-in for a conda python: runs {python_exe} on this env's site-packages\n"
        f'PYTHONPATH="{PLACEHOLDER}/lib/python{pyver}/site-packages" '
        f'exec {python_exe} "$@"\n')
    out = []
    out.append(build_package(outdir, "python", pyver + ".0", "0_fake", {
        f"bin/python{pyver}": File(py_wrapper, 0o755, placeholder=PLACEHOLDER),
        "bin/python": File(symlink=f"python{pyver}"),
        f"lib/python{pyver}/site-packages/.keep": File(""),
    }, fmt=fmt))
    out.append(build_package(outdir, "hello", "1.0", "h0_0", {
        "bin/hello": File(compile_hello(workdir), 0o755, placeholder=PLACEHOLDER, binary=True),
        "bin/hello-sh": File(f"#!/bin/sh\necho \"prefix={PLACEHOLDER}\"\n", 0o755,
                             placeholder=PLACEHOLDER),
        "bin/hi": File(symlink="hello"),
        "share/hello/data.txt": File("data\n"),
    }, fmt=fmt, depends=["python"]))
    out.append(build_package(outdir, "greet", "0.1", "pyh0_0", {
        "site-packages/greet/__init__.py": File(
            "import sys\n\ndef main():\n    print('greet from ' + sys.argv[0])\n    return 0\n"),
    }, fmt=fmt, noarch="python", entry_points=["greet = greet:main"], depends=["python"]))
    return out, pyver

"""Helpers for test_gpu_stack, test_two_stacks, test_python_env,
test_plan_shipped and test_artifact_safety (the system tests of the stack).

STAND-INS, said plainly: these machines have no NVIDIA GPU and cannot reach
NVIDIA. The CUDA/cuDNN archives are built by tests/fixtures/make_stack.py in
NVIDIA's exact names and layout, holding stub libraries (build/stubs/*) with
the real sonames; the NVML answering the driver probe is the stand-in
build/stubs/driver/libnvidia-ml.so.1, configured with TFPROV_STUB_*.
Everything else is real: the tfprov binary, HTTP on loopback, SQLite, venv, pip.
"""
import hashlib
import os
import sqlite3
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from lib_http import HttpServer  # noqa: E402

BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
STUBS = os.path.join(BUILD, "stubs")
MAKE_STACK = os.path.join(REPO, "tests", "fixtures", "make_stack.py")
SIDE_FILES = ("var/lib/tfprov/lock", "var/lib/tfprov/state.db-wal",
              "var/lib/tfprov/state.db-shm")


def stub_driver_env(driver="550.54.14", gpus=None, cuda=None, **extra):
    """Environment for a tfprov process that finds the STAND-IN NVML first."""
    env = {"LD_LIBRARY_PATH": os.path.join(STUBS, "driver"),
           "TFPROV_STUB_DRIVER": driver,
           "TFPROV_WSL_LIB_DIR": "/nonexistent/wsl/lib",
           "TFPROV_PROC_VERSION": "/nonexistent/proc/version"}
    if gpus is not None:
        env["TFPROV_STUB_GPUS"] = gpus
    if cuda is not None:
        env["TFPROV_STUB_CUDA"] = str(cuda)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def no_stub_env(**extra):
    """The machine's own answer: no stand-in on the loader path (real NVML if any)."""
    env = {"LD_LIBRARY_PATH": "", "TFPROV_WSL_LIB_DIR": "/nonexistent/wsl/lib",
           "TFPROV_PROC_VERSION": "/nonexistent/proc/version"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def make_stack(out, url_base, manifest, stubs="cuda12", cuda="12.3.2", cudnn="8.9.7.29",
               **kw):
    """Runs make_stack.py; kw maps to its --options (underscores become dashes)."""
    argv = [sys.executable, MAKE_STACK, "--stubs", os.path.join(STUBS, stubs), "--cuda", cuda,
            "--cudnn", cudnn, "--out", str(out), "--url-base", url_base,
            "--manifest", str(manifest)]
    for k, v in kw.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)
    return str(manifest)


class Mirror:
    """A loopback HTTP server serving a directory (the NVIDIA-style mirror)."""

    def __init__(self, directory):
        self.dir = str(directory)
        os.makedirs(self.dir, exist_ok=True)
        self.srv = HttpServer(root=self.dir)

    def __enter__(self):
        self.srv.start()
        return self

    def __exit__(self, *exc):
        self.srv.stop()

    @property
    def url(self):
        return self.srv.url("")

    def stack(self, manifest, **kw):
        return make_stack(self.dir, self.url, manifest, **kw)


def tree_hashes(root, exclude=()):
    """{relative path: (kind, sha256 | link target | '', mode)} of every entry under root."""
    out = {}
    root = str(root)
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            if rel in exclude:
                continue
            st = os.lstat(p)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p), 0)
            elif os.path.isdir(p):
                out[rel] = ("dir", "", st.st_mode & 0o7777)
            else:
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                out[rel] = ("file", h.hexdigest(), st.st_mode & 0o7777)
    return out


def db_rows(tfprov, sql, args=()):
    """Rows of a read-only query on the sandbox's state db ([] when none exists)."""
    if not os.path.exists(tfprov.state_db):
        return []
    con = sqlite3.connect("file:%s?mode=ro" % tfprov.state_db, uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def recorded_files(tfprov, stack=None):
    """[(path, type, sha256, size, addr, stack)] of the files the state records."""
    sql = ("SELECT f.path, f.type, f.sha256, f.size, r.addr, s.name FROM files f "
           "JOIN resources r ON r.id = f.resource_id JOIN stacks s ON s.id = r.stack_id")
    args = ()
    if stack:
        sql += " WHERE s.name = ?"
        args = (stack,)
    return db_rows(tfprov, sql + " ORDER BY f.path", args)


def missing_recorded(tfprov, stack=None):
    """Recorded paths that do not exist under the root."""
    return [r[0] for r in recorded_files(tfprov, stack)
            if not os.path.lexists(tfprov.path(r[0]))]


def temp_leftovers(root):
    """Paths under root whose name marks a tfprov temp/stage/backup entry."""
    bad = []
    for dp, dns, fns in os.walk(str(root)):
        for n in dns + fns:
            if ".tfprov-" in n:
                bad.append(os.path.relpath(os.path.join(dp, n), str(root)))
    return bad


def out(p):
    return (p.stdout or "") + (p.stderr or "")


DLPROBE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
/* Prints where the loader found each library named on the command line. */
int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		Dl_info info;
		void *sym = h ? dlsym(h, "cudnnGetVersion") : NULL;
		if (h == NULL) {
			printf("%s -\n", argv[i]);
			continue;
		}
		if (sym == NULL)
			sym = dlsym(h, "cudaRuntimeGetVersion");
		if (sym != NULL && dladdr(sym, &info) && info.dli_fname) {
			char *real = realpath(info.dli_fname, NULL);
			printf("%s %s\n", argv[i], real ? real : info.dli_fname);
			free(real);
		} else {
			printf("%s ?\n", argv[i]);
		}
	}
	return 0;
}
"""


def dlprobe(d):
    """Builds DLPROBE in directory d: `dlprobe LIB...` prints, for each library, the
    real path the loader found it at (dladdr of one of its symbols), or '-'."""
    probe, src = os.path.join(str(d), "dlprobe"), os.path.join(str(d), "dlprobe.c")
    with open(src, "w") as f:
        f.write(DLPROBE)
    # Stubs built by a sanitizer build (CI's second pass) need the probe to carry
    # the same runtime, loaded first.
    stub = os.path.join(STUBS, "cuda12", "libcudnn.so.8")
    ldd = subprocess.run(["ldd", stub], capture_output=True, text=True).stdout
    san = ["-fsanitize=address,undefined"] if "libasan" in ldd else []
    subprocess.run(["gcc", *san, "-o", probe, src, "-ldl"], check=True)
    return probe

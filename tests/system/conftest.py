"""Shared fixtures for the system tests: the real tfprov binary in a --root sandbox.

Tests run under Debian's /usr/bin/python3 with pytest; ctest sets TFPROV_BIN and
TFPROV_BUILD_DIR. Every test gets its own root directory; nothing outside it is
touched.
"""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _bin():
    b = os.environ.get("TFPROV_BIN")
    if not b:
        b = os.path.join(REPO, "build", "tfprov")
    return b


class Tfprov:
    """Runs the binary against one sandbox root."""

    def __init__(self, root):
        self.root = str(root)
        self.bin = _bin()

    def run(self, *args, root=True, timeout=120, env=None, input=None, check=None):
        argv = [self.bin]
        if root:
            argv += ["--root", self.root]
        argv += [str(a) for a in args]
        e = dict(os.environ)
        e.pop("NO_COLOR", None)
        if env:
            e.update(env)
        # stdin is never the caller's terminal: a test that wants to answer a
        # question passes input (or drives a pseudo-terminal itself).
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e,
                           input=input, cwd=REPO,
                           stdin=subprocess.DEVNULL if input is None else None)
        if check is not None:
            assert p.returncode == check, (
                f"{argv} exited {p.returncode}, wanted {check}\nstdout:\n{p.stdout}\n"
                f"stderr:\n{p.stderr}")
        return p

    def path(self, p):
        return os.path.join(self.root, p.lstrip("/"))

    @property
    def state_db(self):
        return self.path("/var/lib/tfprov/state.db")


@pytest.fixture
def tfprov(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    return Tfprov(root)


@pytest.fixture
def repo():
    return REPO


@pytest.fixture
def build_dir():
    return os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))


@pytest.fixture
def mirror(tmp_path):
    """A loopback HTTP server (lib_http.HttpServer, 127.0.0.1 only) serving the
    directory srv.dir, empty at the start: the mirror most tests fill and
    apply from."""
    from lib_http import HttpServer
    d = tmp_path / "mirror"
    d.mkdir()
    with HttpServer(root=str(d)) as srv:
        srv.dir = d
        yield srv

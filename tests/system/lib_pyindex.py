"""A PEP 503 simple index on loopback, serving wheels the tests build by hand.

Wheels are written as zip files with METADATA, WHEEL and RECORD (no
setuptools, no network). The server counts requests per path so tests can
show which index pip really used.
"""
import base64
import hashlib
import html
import http.server
import os
import re
import threading
import time
import zipfile


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_hash(data):
    d = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(d).rstrip(b"=").decode()


def build_wheel(outdir, name, version, files=None, requires=(), entry_points=None,
                tag="py3-none-any", metadata=()):
    """Writes NAME-VERSION-TAG.whl; returns (path, sha256 hex).

    files maps archive paths to str/bytes; a module NAME/__init__.py with
    __version__ is added when files is None. metadata: more METADATA header
    lines ("License: MIT").
    """
    dist = re.sub(r"[-.]+", "_", name)
    if files is None:
        files = {f"{dist}/__init__.py": f"__version__ = {version!r}\n"}
    di = f"{dist}-{version}.dist-info"
    meta = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    meta += list(metadata)
    content = dict(files)
    content[f"{di}/METADATA"] = "\n".join(meta) + "\n"
    content[f"{di}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: tfprov-tests\n"
                              f"Root-Is-Purelib: true\nTag: {tag}\n")
    if entry_points:
        content[f"{di}/entry_points.txt"] = "[console_scripts]\n" + "".join(
            f"{k} = {v}\n" for k, v in entry_points.items())
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, f"{dist}-{version}-{tag}.whl")
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, data in content.items():
            b = data.encode() if isinstance(data, str) else data
            z.writestr(p, b)
            record.append(f"{p},{_record_hash(b)},{len(b)}")
        record.append(f"{di}/RECORD,,")
        z.writestr(f"{di}/RECORD", "\n".join(record) + "\n")
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    return path, sha


def build_sdist(outdir, name, version, requires=()):
    """Writes NAME-VERSION.tar.gz, a setuptools sdist (setup.py, PKG-INFO, one module
    NAME/__init__.py with __version__); returns (path, sha256 hex). NAME must not
    contain '-' (the Index splits file names on it)."""
    import io
    import tarfile
    top = f"{name}-{version}"
    files = {
        "setup.py": ("from setuptools import setup\n"
                     f"setup(name={name!r}, version={version!r}, packages=[{name!r}],\n"
                     f"      install_requires={list(requires)!r})\n"),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}/__init__.py": f"__version__ = {version!r}\n",
    }
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, f"{top}.tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for p, data in files.items():
            b = data.encode()
            ti = tarfile.TarInfo(f"{top}/{p}")
            ti.size, ti.mode, ti.mtime = len(b), 0o644, 1700000000
            t.addfile(ti, io.BytesIO(b))
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    return path, sha


class Index:
    """Serves every wheel in `wheel_dir` at http://127.0.0.1:PORT/simple/."""

    def __init__(self, wheel_dir, page_delay=0.0, moved=False):
        """page_delay: seconds each project page takes to answer (a far
        index); max_pages_at_once then says how many were asked at once."""
        self.wheel_dir = wheel_dir
        self.requests = []
        self.page_delay = page_delay
        # moved: each project page /simple/NAME/ answers 302 to the same page at
        # http://localhost:PORT/moved/simple/NAME/ (another host name, one hop)
        self.moved = moved
        self.pages_at_once = self.max_pages_at_once = 0
        lock = threading.Lock()
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                index.requests.append(self.path)
                parts = [p for p in self.path.split("?")[0].split("/") if p]
                if parts[:1] == ["moved"]:
                    parts = parts[1:]
                elif index.moved and len(parts) == 2 and parts[0] == "simple":
                    self.send_response(302)
                    self.send_header("Location", "http://localhost:%d/moved%s" % (
                        index.server.server_address[1], self.path))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if len(parts) == 1 and parts[0] == "simple":
                    names = sorted({normalize(f.split("-")[0]) for f in index._wheels()})
                    body = "".join(f'<a href="{n}/">{n}</a>\n' for n in names)
                    return self._send(200, f"<html><body>{body}</body></html>")
                if len(parts) == 2 and parts[0] == "simple" and index.page_delay:
                    with lock:
                        index.pages_at_once += 1
                        index.max_pages_at_once = max(index.max_pages_at_once,
                                                      index.pages_at_once)
                    time.sleep(index.page_delay)
                    with lock:
                        index.pages_at_once -= 1
                if len(parts) == 2 and parts[0] == "simple":
                    want = normalize(parts[1])
                    links = []
                    for f in index._wheels():
                        if normalize(f.split("-")[0]) == want:
                            with open(os.path.join(index.wheel_dir, f), "rb") as fh:
                                sha = hashlib.sha256(fh.read()).hexdigest()
                            links.append(f'<a href="/files/{html.escape(f)}#sha256={sha}">'
                                         f'{html.escape(f)}</a>')
                    if not links:
                        return self._send(404, "not found")
                    return self._send(200, "<html><body>" + "\n".join(links) +
                                      "</body></html>")
                if len(parts) == 2 and parts[0] == "files":
                    p = os.path.join(index.wheel_dir, os.path.basename(parts[1]))
                    if os.path.exists(p):
                        with open(p, "rb") as fh:
                            return self._send(200, fh.read(), "application/octet-stream")
                return self._send(404, "not found")

            def _send(self, code, body, ctype="text/html"):
                b = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _wheels(self):
        """Wheels and sdists (NAME-VERSION.tar.gz, NAME without '-')."""
        return sorted(f for f in os.listdir(self.wheel_dir) if f.endswith((".whl", ".tar.gz")))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def tree_listing(root):
    """{relative path: (kind, sha256 or link target)} of a tree, for before/after checks."""
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            if "__pycache__" in rel.split(os.sep):
                continue
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir", "")
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out

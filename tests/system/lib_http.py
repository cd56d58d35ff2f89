#!/usr/bin/python3
"""Loopback HTTP/HTTPS test server with scripted faults per path (stdlib only).

Import it (context manager) or run it as a CLI for the README demo / benchmarks:

    /usr/bin/python3 tests/system/lib_http.py --dir D --port-file F [--rate BPS] [--tls-dir T]

In tests:

    with HttpServer() as srv:
        srv.add("/a.tar.xz", data)                 # bytes, or add_file(path, host_path)
        srv.script("/a.tar.xz", ["500", "ok"])     # one fault per request, then normal
        srv.fault("/b", "wrong")                   # the same fault on every request
        url = srv.url("/a.tar.xz")
        srv.requests                               # [(method, path, range_header), ...]

Faults: an HTTP status ("404", "500", "503", "429"), "ok", "truncate" (full
Content-Length, half the body, then close), "short" (a Content-Length of half
and half the body: looks complete), "stall:S" (half, then silence for S s),
"wrong" (same length, one byte flipped), "extra" (more bytes than the file),
"norange" (ignore Range: 200 with the whole file), "drip:BPS" (slow body),
"reset" (half, then a TCP reset). Rates: srv.rate[path] = BPS throttles a path.

Bound to 127.0.0.1:0 only. HTTPS: make_tls(dir) creates a CA and a server
certificate for 127.0.0.1/localhost with the openssl CLI; HttpServer(tls=...)
serves with it, and the client must be given ca.pem.
"""

import argparse
import http.server
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

CHUNK = 256 * 1024


def make_tls(directory):
    """Creates ca.pem/ca.key and server.pem/server.key (SAN 127.0.0.1, localhost).

    Returns a dict with the paths. Also makes an untrusted second CA
    (other-ca.pem) for negative tests."""
    os.makedirs(directory, exist_ok=True)
    p = lambda n: os.path.join(directory, n)  # noqa: E731

    def run(*args):
        subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", p(ca + ".key"), "-out", p(ca + ".pem"), "-days", "2",
            "-subj", "/CN=tfprov test " + ca)
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", p("server.key"), "-out", p("server.csr"), "-subj", "/CN=127.0.0.1")
    with open(p("ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                "extendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"),
        "-CAcreateserial", "-out", p("server.pem"), "-days", "2", "-extfile", p("ext.cnf"))
    return {"ca": p("ca.pem"), "cert": p("server.pem"), "key": p("server.key"),
            "other_ca": p("other-ca.pem")}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tfprov-test/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def _serve(self, head):
        srv = self.server.owner
        path = self.path.split("?", 1)[0]
        rng = self.headers.get("Range")
        fault = srv._next_fault(path)
        srv._log(self.command, path, rng, fault)
        if path in srv.redirects:
            code, location = srv.redirects[path]
            self.send_response(code)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        src = srv._lookup(path)
        if src is None and path.endswith("/"):
            # A directory URL serves its index.html (a static PEP 503 index).
            src = srv._lookup(path + "index.html")
        if fault.isdigit():
            return self._status(int(fault))
        if src is None:
            return self._status(404)
        size, reader = src
        start = 0
        if rng and fault != "norange" and rng.startswith("bytes=") and rng.endswith("-"):
            try:
                start = int(rng[6:-1])
            except ValueError:
                start = 0
            if start >= size and size > 0:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        length = size - start
        body_len = length
        if fault == "short":
            length = body_len = length // 2
        elif fault == "extra":
            length = body_len = length + 4096
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
        self.send_header("Content-Length", str(length))
        self.send_header("Content-Type", "text/html" if path.endswith("/")
                         or path.endswith(".html") else "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if head:
            return
        if fault in ("truncate", "reset") or fault.startswith("stall"):
            body_len = length // 2
        rate = srv.rate.get(path, srv.default_rate)
        host = getattr(reader, "path", None)
        if fault in ("ok", "norange") and not rate and host and not srv.tls:
            # The fast path (benchmarks): the kernel copies, as nginx would.
            try:
                self.wfile.flush()
                with open(host, "rb") as f:
                    self.connection.sendfile(f, start, body_len)
            except (BrokenPipeError, ConnectionResetError, OSError):
                self.close_connection = True
            return
        if fault.startswith("drip:"):
            rate = int(fault.split(":", 1)[1])
        sent = 0
        pos = start
        t0 = time.monotonic()
        try:
            while sent < body_len:
                n = min(CHUNK, body_len - sent)
                if rate:
                    n = min(n, max(1, rate // 20))
                if pos < size:
                    chunk = reader(pos, min(n, size - pos))
                else:
                    chunk = b"\0" * n  # "extra": bytes beyond the file
                if fault == "wrong" and pos <= size // 2 < pos + len(chunk):
                    b = bytearray(chunk)
                    b[size // 2 - pos] ^= 0xFF
                    chunk = bytes(b)
                self.wfile.write(chunk)
                sent += len(chunk)
                pos += len(chunk)
                if rate:
                    ahead = sent / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
            self.wfile.flush()
            if fault.startswith("stall"):
                secs = float(fault.split(":", 1)[1]) if ":" in fault else 30.0
                time.sleep(secs)
                self.close_connection = True
            elif fault == "truncate":
                self.close_connection = True
            elif fault == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True

    def _status(self, code):
        body = ("status %d\n" % code).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class HttpServer:
    """A loopback server; use as a context manager."""

    def __init__(self, root=None, tls=None, rate=0):
        self.root = root
        self.tls = tls
        self.files = {}
        self.scripts = {}
        self.faults = {}
        self.rate = {}
        self.redirects = {}
        self.default_rate = rate
        self.requests = []
        self._lock = threading.Lock()
        self.httpd = None
        self.thread = None

    # --- content and faults
    def add(self, path, data):
        self.files[path] = bytes(data)
        return self.url(path)

    def add_file(self, path, host_path):
        self.files[path] = ("file", host_path)
        return self.url(path)

    def redirect(self, path, location, code=302):
        """GET path answers CODE with Location: location."""
        self.redirects[path] = (code, location)

    def script(self, path, faults):
        with self._lock:
            self.scripts[path] = list(faults)

    def fault(self, path, fault):
        with self._lock:
            self.faults[path] = fault

    def count(self, path, method="GET"):
        with self._lock:
            return sum(1 for r in self.requests if r[1] == path and r[0] == method)

    def _next_fault(self, path):
        with self._lock:
            s = self.scripts.get(path)
            if s:
                return s.pop(0)
            return self.faults.get(path, "ok")

    def _log(self, method, path, rng, fault):
        with self._lock:
            self.requests.append((method, path, rng, fault))

    def _lookup(self, path):
        src = self.files.get(path)
        if isinstance(src, bytes):
            return len(src), lambda off, n, b=src: b[off:off + n]
        host = None
        if isinstance(src, tuple):
            host = src[1]
        elif self.root is not None:
            rel = os.path.normpath(path.lstrip("/"))
            if rel.startswith("..") or os.path.isabs(rel):
                return None
            host = os.path.join(self.root, rel)
        if host is None or not os.path.isfile(host):
            return None
        size = os.path.getsize(host)

        def reader(off, n, h=host):
            with open(h, "rb") as f:
                f.seek(off)
                return f.read(n)
        return size, _FileReader(host) if size > 0 else reader

    # --- lifecycle
    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def scheme(self):
        return "https" if self.tls else "http"

    def url(self, path=""):
        host = "localhost" if self.tls else "127.0.0.1"
        return "%s://%s:%d%s" % (self.scheme, host, self.port, path) if self.httpd else path

    def start(self):
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.owner = self
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls["cert"], self.tls["key"])
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class _FileReader:
    """Reads a served file with one open descriptor per request thread."""

    def __init__(self, path):
        self.path = path
        self.local = threading.local()

    def __call__(self, off, n):
        f = getattr(self.local, "f", None)
        if f is None:
            f = self.local.f = open(self.path, "rb")
        f.seek(off)
        return f.read(n)


def dead_url(path="/x"):
    """A URL where nothing listens (pkg's trick: port 1 on loopback)."""
    return "http://127.0.0.1:1" + path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="directory to serve")
    ap.add_argument("--port-file", required=True, help="write the chosen port here")
    ap.add_argument("--rate", type=int, default=0, help="bytes/s per request (0: unlimited)")
    ap.add_argument("--tls-dir", help="serve HTTPS with a CA made in this directory")
    a = ap.parse_args(argv)
    tls = make_tls(a.tls_dir) if a.tls_dir else None
    srv = HttpServer(root=os.path.abspath(a.dir), tls=tls, rate=a.rate).start()
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.port)
    os.rename(tmp, a.port_file)
    try:
        srv.thread.join()
    except KeyboardInterrupt:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

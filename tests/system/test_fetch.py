"""System tests of the downloader against the loopback server with faults."""

import os
import time

import pytest

import lib_http
from lib_pipeline import fetch, sha

DATA = os.urandom(300 * 1024 + 17)


@pytest.fixture
def srv():
    with lib_http.HttpServer() as s:
        s.add("/a/art.tar.xz", DATA)
        yield s


def cache_files(cache, sub):
    d = os.path.join(cache, sub)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_download_verifies_then_cache_hit_makes_no_request(srv, tmp_path):
    c = str(tmp_path / "c")
    r = fetch(c, (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 0, r
    final = os.path.join(c, "sha256", sha(DATA))
    assert open(final, "rb").read() == DATA
    assert os.stat(final).st_mode & 0o777 == 0o444
    assert "cached=0" in r.out
    r = fetch(c, (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 0 and "cached=1" in r.out, r
    assert srv.count("/a/art.tar.xz") == 1
    assert cache_files(c, "partial") == []


def test_404_fails_with_url(srv, tmp_path):
    r = fetch(str(tmp_path), (srv.url("/missing"), DATA, len(DATA)))
    assert r.rc == 1, r
    assert "404" in r.err and "/missing" in r.err


def test_500_then_success_retries(srv, tmp_path):
    srv.script("/a/art.tar.xz", ["500", "503", "ok"])
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 0, r
    assert srv.count("/a/art.tar.xz") == 3


def test_truncated_body_resumes_with_range(srv, tmp_path):
    srv.script("/a/art.tar.xz", ["truncate", "ok"])
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 0, r
    reqs = [q for q in srv.requests if q[1] == "/a/art.tar.xz"]
    assert len(reqs) == 2
    assert reqs[1][2] == "bytes=%d-" % (len(DATA) // 2), reqs


def test_range_ignored_restarts_and_hash_is_right(srv, tmp_path):
    srv.script("/a/art.tar.xz", ["truncate", "norange"])
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 0, r
    assert open(os.path.join(str(tmp_path), "sha256", sha(DATA)), "rb").read() == DATA
    assert srv.requests[-1][2] is not None  # it asked for a range and got 200


def test_resume_from_existing_part_file(srv, tmp_path):
    c = tmp_path / "c"
    (c / "partial").mkdir(parents=True)
    (c / "partial" / (sha(DATA) + ".part")).write_bytes(DATA[:1000])
    r = fetch(str(c), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 0, r
    assert srv.requests[0][2] == "bytes=1000-"


def test_part_file_against_a_server_that_never_honours_range(srv, tmp_path):
    """A killed run's .part, and a server that answers every Range with 200
    and the whole file (Python's http.server does): the download starts over
    from byte 0 and verifies. (curl's own resume gave up on that 200 as an
    error, each retry resumed again, and the host was given up on.)"""
    c = tmp_path / "c"
    (c / "partial").mkdir(parents=True)
    (c / "partial" / (sha(DATA) + ".part")).write_bytes(DATA[:1000])
    srv.fault("/a/art.tar.xz", "norange")
    r = fetch(str(c), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 0, r
    assert open(c / "sha256" / sha(DATA), "rb").read() == DATA
    assert [q[2] for q in srv.requests] == ["bytes=1000-"], srv.requests


def test_corrupt_part_file_is_caught_by_hash(srv, tmp_path):
    c = tmp_path / "c"
    (c / "partial").mkdir(parents=True)
    (c / "partial" / (sha(DATA) + ".part")).write_bytes(b"\0" * 1000)
    r = fetch(str(c), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 5, r
    assert not (c / "sha256" / sha(DATA)).exists()
    assert len(cache_files(str(c), "quarantine")) == 1


def test_stall_is_detected_and_retried(srv, tmp_path):
    srv.script("/a/art.tar.xz", ["stall:20", "ok"])
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)),
              env={"TFPROV_FETCH_STALL_S": "1"})
    assert r.rc == 0, r
    assert r.secs < 10, r


def test_connection_reset_is_retried(srv, tmp_path):
    srv.script("/a/art.tar.xz", ["reset", "reset", "ok"])
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 0, r


def test_slow_drip_completes(srv, tmp_path):
    small = os.urandom(40000)
    srv.add("/drip", small)
    srv.fault("/drip", "drip:40000")
    r = fetch(str(tmp_path), (srv.url("/drip"), small, len(small)))
    assert r.rc == 0, r
    assert 0.5 < r.secs < 10


def test_wrong_bytes_quarantined_exit_5(srv, tmp_path):
    srv.fault("/a/art.tar.xz", "wrong")
    c = str(tmp_path)
    r = fetch(c, (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 5, r
    bad = bytearray(DATA)
    bad[len(DATA) // 2] ^= 0xFF
    assert sha(DATA) in r.err and sha(bytes(bad)) in r.err
    assert srv.url("/a/art.tar.xz") in r.err
    assert "sha256 mismatch" in r.err and "size mismatch" not in r.err
    q = cache_files(c, "quarantine")
    assert len(q) == 1 and q[0].startswith(sha(DATA))
    assert open(os.path.join(c, "quarantine", q[0]), "rb").read() == bytes(bad)
    assert cache_files(c, "sha256") == []
    assert srv.count("/a/art.tar.xz") == 1  # never retried elsewhere


def test_short_body_is_a_size_mismatch(srv, tmp_path):
    srv.fault("/a/art.tar.xz", "short")
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 5, r
    assert "size mismatch" in r.err and "truncated" in r.err
    assert "expected %d bytes, got %d" % (len(DATA), len(DATA) // 2) in r.err


def test_too_many_bytes_is_a_size_mismatch(srv, tmp_path):
    srv.fault("/a/art.tar.xz", "extra")
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)))
    assert r.rc == 5, r
    assert "size mismatch" in r.err and "more" in r.err


def test_url_mirror_is_tried_before_origin(srv, tmp_path):
    with lib_http.HttpServer() as mirror:
        mirror.add("/m/art.tar.xz", DATA)
        r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)),
                  extra=["--mirror", mirror.url("/m/")])
        assert r.rc == 0, r
        assert mirror.count("/m/art.tar.xz") == 1
        assert srv.count("/a/art.tar.xz") == 0


def test_tampering_mirror_names_the_mirror(srv, tmp_path):
    with lib_http.HttpServer() as mirror:
        mirror.add("/art.tar.xz", DATA[:-1] + b"X")
        r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)),
                  extra=["--mirror", mirror.url("")])
        assert r.rc == 5, r
        assert "mirror " + mirror.url("") in r.err


def test_dead_mirror_is_skipped_for_the_rest_of_the_run(srv, tmp_path):
    other = os.urandom(5000)
    srv.add("/a/other.bin", other)
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)),
              (srv.url("/a/other.bin"), other, len(other)),
              extra=["--mirror", lib_http.dead_url(""), "--jobs", "1"])
    assert r.rc == 0, r
    assert r.err.count("skipping this host") == 1, r
    assert r.secs < 10


def test_dir_mirror_and_offline(srv, tmp_path):
    m = tmp_path / "mirror"
    (m / "sha256").mkdir(parents=True)
    (m / "sha256" / sha(DATA)).write_bytes(DATA)
    other = os.urandom(777)
    (m / "other.bin").write_bytes(other)
    r = fetch(str(tmp_path / "c"), (srv.url("/a/art.tar.xz"), DATA, len(DATA)),
              (srv.url("/x/other.bin"), other, len(other)),
              extra=["--mirror", str(m), "--offline"])
    assert r.rc == 0, r
    assert srv.requests == []


def test_offline_fails_naming_what_is_missing(srv, tmp_path):
    r = fetch(str(tmp_path), (srv.url("/a/art.tar.xz"), DATA, len(DATA)), extra=["--offline"])
    assert r.rc == 1, r
    assert "art.tar.xz" in r.err and sha(DATA) in r.err and "offline" in r.err
    assert srv.requests == []


def test_file_url_and_plain_path_sources(tmp_path):
    f = tmp_path / "local.bin"
    f.write_bytes(DATA)
    r = fetch(str(tmp_path / "c1"), ("file://" + str(f), DATA, len(DATA)))
    assert r.rc == 0, r
    r = fetch(str(tmp_path / "c2"), (str(f), DATA, -1))
    assert r.rc == 0, r


def test_https_with_test_ca_and_untrusted_refused(tmp_path):
    tls = lib_http.make_tls(str(tmp_path / "tls"))
    with lib_http.HttpServer(tls=tls) as s:
        s.add("/t.bin", DATA)
        r = fetch(str(tmp_path / "c1"), (s.url("/t.bin"), DATA, len(DATA)),
                  extra=["--ca-bundle", tls["ca"]])
        assert r.rc == 0, r
        r = fetch(str(tmp_path / "c2"), (s.url("/t.bin"), DATA, len(DATA)),
                  extra=["--ca-bundle", tls["other_ca"]])
        assert r.rc == 1, r
        assert "certificate" in r.err.lower() or "SSL" in r.err
        assert not os.path.exists(tmp_path / "c2" / "sha256" / sha(DATA))


def test_parallel_rate_limited_takes_about_the_slowest(tmp_path):
    blobs = [os.urandom(400 * 1024) for _ in range(4)]
    with lib_http.HttpServer() as s:
        items = []
        for i, b in enumerate(blobs):
            s.add("/p%d" % i, b)
            s.rate["/p%d" % i] = 400 * 1024  # 1 s each
            items.append((s.url("/p%d" % i), b, len(b)))
        r = fetch(str(tmp_path), *items, extra=["--jobs", "4"])
    assert r.rc == 0, r
    assert r.secs < 2.5, r  # sequential would be 4 s


def test_largest_first_with_one_job(tmp_path):
    small, big = os.urandom(1000), os.urandom(200000)
    with lib_http.HttpServer() as s:
        s.add("/small", small)
        s.add("/big", big)
        r = fetch(str(tmp_path), (s.url("/small"), small, len(small)),
                  (s.url("/big"), big, len(big)), extra=["--jobs", "1"])
        assert r.rc == 0, r
        assert [q[1] for q in s.requests] == ["/big", "/small"]


def test_bad_sha_argument_is_refused(tmp_path):
    r = fetch(str(tmp_path), ("/nonexistent", "ABC", 3))
    assert r.rc == 3, r


def test_interrupted_run_keeps_part_and_next_run_resumes(srv, tmp_path):
    import signal
    import subprocess
    from lib_pipeline import tool_path
    big = os.urandom(2 * 1024 * 1024)
    srv.add("/big", big)
    srv.rate["/big"] = 1024 * 1024
    c = str(tmp_path / "c")
    p = subprocess.Popen([tool_path(), "fetch", srv.url("/big"), sha(big), str(len(big)),
                          "--cache", c])
    part = os.path.join(c, "partial", sha(big) + ".part")
    # Killed once part of the body is on disk (not after a delay: under load the
    # download may not have started yet); the server's 1 MiB/s keeps it partial.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None and not (
            os.path.exists(part) and os.path.getsize(part) > 0):
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    assert os.path.exists(part) and 0 < os.path.getsize(part) < len(big)
    assert cache_files(c, "sha256") == []
    del srv.rate["/big"]
    r = fetch(c, (srv.url("/big"), big, len(big)))
    assert r.rc == 0, r
    assert srv.requests[-1][2] is not None and srv.requests[-1][2].startswith("bytes=")

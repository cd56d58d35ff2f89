"""What a build carries (issue 35, item 1): `tfprov --version --verbose` lists
every library linked in or dlopen()ed with the version the library reports at
run time, and scripts/check-eol.py fails a listing that holds a library of a
release line without support (data/support-lines.tsv). The check is tested on
fake listings (a planted OpenSSL 1.1.1 fails, a 3.5 LTS passes, an unknown line
fails, an empty listing is a usage error) and on this build's own listing.
About 1 s.
"""
import os
import re
import sqlite3
import ssl
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(REPO, "scripts", "check-eol.py")

FAKE = """tfprov 0.9.0 (commit 0123456789ab)
libraries (name, version reported at run time, how):
  openssl     {ssl:<10} libcrypto, linked in (OpenSSL {ssl} 1 Jan 2026)
  libcurl     8.14.1     linked in
  libssl      {ssl:<10} libcurl's TLS (OpenSSL/{ssl})
  zlib        1.3.1      through libcurl
  libarchive  3.7.4      linked in
  sqlite      3.46.1     linked in
"""


def check(listing, *args):
    return subprocess.run(["/usr/bin/python3", CHECK, *args, "-"], input=listing,
                          capture_output=True, text=True, timeout=60)


def test_check_fails_a_planted_openssl_111():
    p = check(FAKE.format(ssl="1.1.1w"), "--date", "2026-12-03")
    assert p.returncode == 1, p.stdout + p.stderr
    for name in ("openssl", "libssl"):
        assert f"FAIL  {name} 1.1.1w: line 1.1.1 has had no support since 2023-09-11" \
            in p.stdout, p.stdout
    assert "not judged  libcurl 8.14.1" in p.stdout
    assert "check-eol: 6 libraries, 2 of a line without support on 2026-12-03" in p.stdout


def test_check_passes_openssl_35_lts():
    p = check(FAKE.format(ssl="3.5.4"), "--date", "2026-12-03")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok    openssl 3.5.4: line 3.5 supported until 2030-04-08" in p.stdout, p.stdout
    # The same line on the day after its end fails.
    p = check(FAKE.format(ssl="3.5.4"), "--date", "2030-04-09")
    assert p.returncode == 1 and "line 3.5 has had no support since 2030-04-08" in p.stdout


def test_check_fails_a_line_the_table_does_not_know_and_an_empty_listing():
    p = check(FAKE.format(ssl="3.9.0"), "--date", "2026-12-03")
    assert p.returncode == 1 and "FAIL  openssl 3.9.0: a line" in p.stdout, p.stdout
    # "3.0" must not be taken for the line of "3.05" (a component boundary).
    p = check(FAKE.format(ssl="3.05"), "--date", "2026-01-01")
    assert p.returncode == 1 and "FAIL  openssl 3.05: a line" in p.stdout, p.stdout
    p = check("tfprov 0.9.0 (commit 0123456789ab)\n")
    assert p.returncode == 2 and "names no library" in p.stderr, p.stderr


def test_version_verbose_lists_every_library_at_its_run_time_version(tfprov):
    plain = tfprov.run("--version", root=False, check=0).stdout
    assert plain.count("\n") == 1 and plain.startswith("tfprov "), plain
    # -v before or after --version.
    for args in (("--version", "--verbose"), ("-v", "--version")):
        out = tfprov.run(*args, root=False, check=0).stdout
        rows = dict(re.findall(r"^  (\S+)\s+(\S+)\s+", out, re.M))
        for lib in ("openssl", "libssl", "libcurl", "libarchive", "libzip", "sqlite",
                    "libyaml", "jansson", "libdeflate", "zlib", "liblzma", "zstd"):
            assert lib in rows and re.match(r"\d", rows[lib]), (lib, out)
    # The versions are the libraries' own, the ones this Python loads too (Debian's).
    assert rows["sqlite"] == sqlite3.sqlite_version, out
    assert f"OpenSSL {rows['openssl']} " in ssl.OPENSSL_VERSION + " ", (ssl.OPENSSL_VERSION, out)
    assert rows["libssl"] == rows["openssl"], out  # libcurl's TLS is the same OpenSSL
    # The Debian build dlopen()s these three when first used (engine/base/lazylibs.c).
    for lib, so in (("libcurl", "libcurl.so.4"), ("libarchive", "libarchive.so.13"),
                    ("libzip", "libzip.so.4")):
        assert re.search(rf"^  {lib}\s+\S+\s+dlopen\(\)ed {re.escape(so)}$", out, re.M), out


def test_check_judges_this_builds_listing(tfprov):
    """The check reads the real listing: OpenSSL is judged (the rest has no lines)."""
    p = subprocess.run(["/usr/bin/python3", CHECK, "--binary", tfprov.bin, "--date",
                        "2026-01-01"], capture_output=True, text=True, timeout=60)
    ver = re.search(r"^(?:ok|FAIL)\s+openssl (\S+):", p.stdout, re.M)
    assert ver, p.stdout + p.stderr
    if ver.group(1).startswith(("3.0.", "3.5.")):
        assert p.returncode == 0, p.stdout  # both lines were supported on 2026-01-01
    else:
        pytest.skip(f"OpenSSL {ver.group(1)} here: its support is not asserted")

"""What a build carries (issue 35, item 1): `tfprov --version --verbose` lists
every library linked in or dlopen()ed with the version the library reports at
run time, and scripts/check-eol.py fails a listing that holds a library of a
release line without support (data/support-lines.tsv), or of a Debian release
whose security support has ended when the listing names the Debian source it was
built from (the portable binary's does). The check is tested on fake listings (a
planted OpenSSL 1.1.1 fails, a 3.5 LTS passes, an unknown line fails, an empty
listing is a usage error; a zlib built from bullseye's source fails, the same
from bookworm's passes until bookworm's LTS ends, a Debian release the table
does not know fails) and on this build's own listing. About 2 s.
"""
import os
import re
import sqlite3
import ssl
import subprocess
import zlib

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(REPO, "scripts", "check-eol.py")


def debian_release():
    """This machine's Debian release ("12"), or None: the build the suite tests was
    made here, and CMake names that release in its listing (TFPROV_SYSTEM_DEBIAN)."""
    try:
        kv = dict(ln.rstrip("\n").split("=", 1) for ln in open("/etc/os-release") if "=" in ln)
    except OSError:
        return None
    ver = kv.get("VERSION_ID", "").strip('"')
    return ver if kv.get("ID", "").strip('"') == "debian" and ver.isdigit() else None


DEBIAN = debian_release()
PKG = re.escape(f", a Debian {DEBIAN} package") if DEBIAN else ""

FAKE = """tfprov 0.9.0 (commit 0123456789ab)
libraries (name, version reported at run time, how):
  openssl     {ssl:<10} libcrypto, linked in (OpenSSL {ssl} 1 Jan 2026)
  libcurl     8.14.1     linked in
  libssl      {ssl:<10} libcurl's TLS (OpenSSL/{ssl})
  zlib        1.3.1      through libcurl
  libarchive  3.7.4      linked in
  sqlite      3.46.1     linked in
"""

# As the portable binary lists its libraries (cli/version.c, TFPROV_RELEASE_SOURCES).
RELEASE = """tfprov 0.9.0 (commit 0123456789ab)
libraries (name, version reported at run time, how):
  openssl     3.5.4      libcrypto, linked in (OpenSSL 3.5.4 30 Sep 2025), built from \
Debian 13 source openssl 3.5.4-1~deb13u1
  libcurl     7.88.1     linked in, built from Debian 12 source curl 7.88.1-10+deb12u15
  libssl      3.5.4      libcurl's TLS (OpenSSL/3.5.4), built from Debian 13 source \
openssl 3.5.4-1~deb13u1
  libarchive  3.6.2      linked in, built from Debian 12 source libarchive 3.6.2-1+deb12u5
  zlib        {zlib:<10} linked in (for libarchive, libcurl, libzip; zlibVersion()), built \
from Debian {deb} source zlib {src}
"""
BULLSEYE_ZLIB = dict(zlib="1.2.11", deb=11, src="1:1.2.11.dfsg-2+deb11u2")
BOOKWORM_ZLIB = dict(zlib="1.2.13", deb=12, src="1:1.2.13.dfsg-1")


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


def test_check_fails_a_library_built_from_bullseyes_source():
    """bullseye's LTS ended on 2026-08-31: a zlib built from its source fails the
    check although zlib has no support lines of its own; the day before it passed."""
    p = check(RELEASE.format(**BULLSEYE_ZLIB), "--date", "2026-12-07")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL  zlib 1.2.11: built from Debian 11 source, which has had no security " \
        "support since 2026-08-31 (https://wiki.debian.org/LTS" in p.stdout, p.stdout
    assert "check-eol: 5 libraries, 1 of a line without support on 2026-12-07" in p.stdout
    # OpenSSL is judged both ways: its upstream line and its Debian release.
    assert "ok    openssl 3.5.4: line 3.5 supported until 2030-04-08" in p.stdout, p.stdout
    assert "ok    openssl 3.5.4: built from Debian 13 source, security support until " \
        "2030-06-30" in p.stdout, p.stdout
    assert "not judged" not in p.stdout, p.stdout
    p = check(RELEASE.format(**BULLSEYE_ZLIB), "--date", "2026-08-31")  # its last day
    assert p.returncode == 0, p.stdout


def test_check_passes_bookworms_sources_until_bookworms_lts_ends():
    """The real table: Debian 12's sources are supported (LTS) until 2028-06-30."""
    p = check(RELEASE.format(**BOOKWORM_ZLIB), "--date", "2026-12-07")
    assert p.returncode == 0, p.stdout + p.stderr
    for lib, ver in (("libcurl", "7.88.1"), ("libarchive", "3.6.2"), ("zlib", "1.2.13")):
        assert f"ok    {lib} {ver}: built from Debian 12 source, security support until " \
            "2028-06-30" in p.stdout, p.stdout
    assert "check-eol: 5 libraries, 0 of a line without support on 2026-12-07" in p.stdout
    p = check(RELEASE.format(**BOOKWORM_ZLIB), "--date", "2028-07-01")
    assert p.returncode == 1, p.stdout
    assert "check-eol: 5 libraries, 3 of a line without support on 2028-07-01" in p.stdout
    assert "FAIL  zlib 1.2.13: built from Debian 12 source, which has had no security " \
        "support since 2028-06-30" in p.stdout, p.stdout


def test_check_fails_a_debian_release_the_table_does_not_know():
    p = check(RELEASE.format(zlib="1.3.1", deb=14, src="1:1.3.1-1"), "--date", "2026-12-07")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL  zlib 1.3.1: built from Debian 14 source, a release" in p.stdout, p.stdout


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
        assert re.search(rf"^  {lib}\s+\S+\s+dlopen\(\)ed {re.escape(so)}{PKG}$", out, re.M), out
    # libarchive's compression libraries: each asked itself, in the copy libarchive
    # loaded (not the header libarchive was built with); zlib is the one Python loads.
    for lib, so, call in (("zlib", "libz.so.1", "zlibVersion"),
                          ("liblzma", "liblzma.so.5", "lzma_version_string"),
                          ("bzip2", "libbz2.so.1.0", "BZ2_bzlibVersion"),
                          ("lz4", "liblz4.so.1", "LZ4_versionString"),
                          ("zstd", "libzstd.so.1", "ZSTD_versionString")):
        assert re.search(rf"^  {lib}\s+\d\S*\s+loaded with libarchive \({re.escape(so)}, "
                         rf"{call}\(\)\){PKG}$", out, re.M), (lib, out)
    assert rows["zlib"] == zlib.ZLIB_RUNTIME_VERSION, out
    assert "built from" not in out  # only the portable binary knows its sources
    # Built on Debian, every library is the system's, that release's package.
    if DEBIAN:
        lines = [ln for ln in out.splitlines() if ln.startswith("  ")]
        assert lines and all(ln.endswith(f", a Debian {DEBIAN} package") for ln in lines), out


def test_check_judges_this_builds_listing(tfprov):
    """The check reads the real listing. Built on Debian, every library is judged by
    that release's security support, today: OpenSSL 3.0's upstream line ended on
    2026-09-07, but Debian 12 patches its package to 2028-06-30."""
    p = subprocess.run(["/usr/bin/python3", CHECK, "--binary", tfprov.bin],
                       capture_output=True, text=True, timeout=60)
    if not DEBIAN:
        pytest.skip("not built on Debian: the listing names no release to judge by")
    assert p.returncode == 0, p.stdout + p.stderr
    judged = re.findall(rf"^ok\s+(\S+) \S+: a Debian {DEBIAN} package, security support until ",
                        p.stdout, re.M)
    assert "openssl" in judged and "sqlite" in judged and "not judged" not in p.stdout, p.stdout


def test_a_debian_package_is_judged_by_its_release_not_its_upstream_line():
    """A system OpenSSL 3.0 of Debian 12 passes after its upstream line's end; the same
    version built from source fails; a Debian 11 package fails since its LTS ended."""
    def listing(how):
        return f"tfprov 0.9.0\nlibraries (name, version reported at run time, how):\n" \
               f"  openssl     3.0.19     libcrypto, linked in{how}\n"
    day = "2026-12-07"
    ok = check(listing(", a Debian 12 package"), "--date", day)
    assert ok.returncode == 0, ok.stdout
    assert "ok    openssl 3.0.19: a Debian 12 package, security support until 2028-06-30" \
        in ok.stdout, ok.stdout
    plain = check(listing(""), "--date", day)
    assert plain.returncode == 1 and "FAIL  openssl 3.0.19: line 3.0 has had no support " \
        "since 2026-09-07" in plain.stdout, plain.stdout
    old = check(listing(", a Debian 11 package"), "--date", day)
    assert old.returncode == 1 and "FAIL  openssl 3.0.19: a Debian 11 package, which has " \
        "had no security support since 2026-08-31" in old.stdout, old.stdout

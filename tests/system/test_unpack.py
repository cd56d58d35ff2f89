"""System tests of the safe unpacker: formats, strip, refusals, bounded memory."""

import hashlib
import os
import resource
import subprocess

import pytest

import lib_archives as la
from lib_pipeline import run, tree

FILES = [
    ("pkg-1.0/", "d"),
    ("pkg-1.0/lib/", "d"),
    ("pkg-1.0/lib/libfoo.so.1.2", "f", os.urandom(70000) * 3, 0o755),
    ("pkg-1.0/lib/libfoo.so.1", "l", None, 0o777, "libfoo.so.1.2"),
    ("pkg-1.0/lib/libfoo.so", "l", None, 0o777, "libfoo.so.1"),
    ("pkg-1.0/include/foo.h", "f", b"#define FOO 1\n", 0o644),
    ("pkg-1.0/bin/tool", "f", b"#!/bin/sh\n", 0o4755),
    ("pkg-1.0/empty", "f", b"", 0o600),
]


def check_tree(dest, strip):
    t = tree(dest)
    pre = "" if strip else "pkg-1.0/"
    assert t[pre + "lib/libfoo.so.1.2"] == ("f", FILES[2][2])
    assert t[pre + "lib/libfoo.so"] == ("l", "libfoo.so.1")
    assert t[pre + "include/foo.h"] == ("f", b"#define FOO 1\n")
    assert t[pre + "empty"] == ("f", b"")
    st = os.stat(os.path.join(dest, pre + "bin/tool"))
    assert st.st_mode & 0o7777 == 0o755  # set-uid dropped
    assert os.stat(os.path.join(dest, pre + "lib/libfoo.so.1.2")).st_mtime == 1700000000


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst"])
def test_formats_with_strip(tmp_path, suffix):
    a = la.make_tar(str(tmp_path / ("a" + suffix)), FILES)
    r = run("unpack", a, tmp_path / "out", "--strip", "1", "--list")
    assert r.rc == 0, r
    check_tree(str(tmp_path / "out"), 1)
    lines = {ln.split()[4]: ln.split() for ln in r.out.splitlines()}
    data = FILES[2][2]
    assert lines["lib/libfoo.so.1.2"][3] == hashlib.sha256(data).hexdigest()
    assert lines["lib/libfoo.so.1.2"][2] == str(len(data))
    assert lines["bin/tool"][1] == "0755"


def test_no_strip_keeps_top_dir(tmp_path):
    a = la.make_tar(str(tmp_path / "a.tar.xz"), FILES)
    r = run("unpack", a, tmp_path / "out")
    assert r.rc == 0, r
    check_tree(str(tmp_path / "out"), 0)


def test_zip(tmp_path):
    entries = [("pkg/", "d"), ("pkg/a.txt", "f", b"hello", 0o644),
               ("pkg/run", "f", b"#!", 0o4755), ("pkg/l", "l", None, 0o777, "a.txt")]
    a = la.make_zip(str(tmp_path / "a.zip"), entries)
    r = run("unpack", a, tmp_path / "out", "--strip", "1")
    assert r.rc == 0, r
    t = tree(str(tmp_path / "out"))
    assert t["a.txt"] == ("f", b"hello") and t["l"] == ("l", "a.txt")
    assert os.stat(tmp_path / "out" / "run").st_mode & 0o7777 == 0o755


def test_zip_symlink_escape_refused(tmp_path):
    a = la.make_zip(str(tmp_path / "a.zip"), [("pkg/l", "l", None, 0o777, "../../etc")])
    r = run("unpack", a, tmp_path / "out")
    assert r.rc == 5, r
    assert not (tmp_path / "out").exists()


def test_conda_package(tmp_path):
    a = la.make_conda(str(tmp_path / "foo-1.0-h0_0.conda"),
                      [("lib/libfoo.so", "f", b"ELF", 0o755), ("lib/x", "l", None, 0o777, "libfoo.so")],
                      [("info/index.json", "f", b'{"name":"foo"}')], str(tmp_path))
    r = run("unpack", a, tmp_path / "out")
    assert r.rc == 0, r
    t = tree(str(tmp_path / "out"))
    assert t["lib/libfoo.so"] == ("f", b"ELF")
    assert t["info/index.json"] == ("f", b'{"name":"foo"}')
    assert "metadata.json" not in t


@pytest.mark.parametrize("case", la.MALICIOUS, ids=[m[0] for m in la.MALICIOUS])
def test_malicious_archive_refused_nothing_placed(tmp_path, case):
    name, entries, word = case
    # A decoy tree around dest: nothing outside dest may change.
    (tmp_path / "stage").mkdir()
    a = la.make_tar(str(tmp_path / (name + ".tar.gz")), [("top/", "d")] + entries,
                    fmt=la.tarfile.GNU_FORMAT)
    before = sorted(os.listdir(tmp_path))
    r = run("unpack", a, tmp_path / "stage" / "dest", "--strip", "1")
    assert r.rc == 5, r
    assert "unsafe" in r.err and word.lower() in r.err.lower(), r
    assert not (tmp_path / "stage" / "dest").exists()
    assert os.listdir(tmp_path / "stage") == []
    assert sorted(os.listdir(tmp_path)) == before
    assert not os.path.exists("/tmp/tfprov-evil-abs")


def test_dest_must_not_exist(tmp_path):
    a = la.make_tar(str(tmp_path / "a.tar"), FILES)
    (tmp_path / "out").mkdir()
    r = run("unpack", a, tmp_path / "out")
    assert r.rc == 1 and "exists" in r.err, r


def test_truncated_archive_fails_and_cleans_up(tmp_path):
    a = la.make_tar(str(tmp_path / "a.tar.xz"), FILES)
    data = open(a, "rb").read()
    open(a, "wb").write(data[: len(data) // 2])
    r = run("unpack", a, tmp_path / "out")
    assert r.rc == 5, r  # bytes that do not decode: an integrity failure
    assert not (tmp_path / "out").exists()


def test_later_duplicate_entry_wins(tmp_path):
    a = la.make_tar(str(tmp_path / "a.tar"), [("t/f", "f", b"one"), ("t/f", "f", b"two")])
    r = run("unpack", a, tmp_path / "out", "--strip", "1")
    assert r.rc == 0, r
    assert (tmp_path / "out" / "f").read_bytes() == b"two"


def test_hardlink_inside_is_kept(tmp_path):
    a = la.make_tar(str(tmp_path / "a.tar"), [("t/f", "f", b"data"), ("t/sub/h", "h", None, 0o644, "t/f")])
    r = run("unpack", a, tmp_path / "out", "--strip", "1", "--list")
    assert r.rc == 0, r
    assert os.stat(tmp_path / "out" / "f").st_ino == os.stat(tmp_path / "out" / "sub" / "h").st_ino


def test_memory_is_bounded_for_a_big_archive(tmp_path):
    """200 MiB of file data through gzip: peak RSS of the unpacker stays small.
    Zeros expand past the bomb bound (100x), so the size is declared, as a
    manifest's unpacked_size would."""
    big = tmp_path / "big.tar.gz"
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "zeros", "wb") as f:
        f.truncate(200 << 20)
    subprocess.run(["tar", "-C", str(src), "-czf", str(big), "zeros"], check=True)
    r = run("unpack", big, tmp_path / "out", "--unpacked", 200 << 20, timeout=110)
    assert r.rc == 0, r
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert os.path.getsize(tmp_path / "out" / "zeros") == 200 << 20
    assert peak_kib < 64 * 1024, peak_kib

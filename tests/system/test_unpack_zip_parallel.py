"""unpack_zip_parallel: a zip (a wheel) decoded by several threads at once.

Through pipeline_tool (`unpack --zip-parts N`, the engine's function as the
wheel installer calls it). What must hold, for 1 and for several decoders:
the tree and the per-file sha256 are exactly what the one-thread libarchive
path produces (small entries go through libdeflate, entries over 4 MiB and
stored ones through zlib); every refusal of the unpacker still holds, with
nothing left behind (dest removed); damaged data (a CRC that does not match,
a deflate stream cut short, a truncated archive) is exit 5; names are read as pip's zipfile reads them (UTF-8 when
flagged, else CP437); a name held twice is refused.
"""
import os
import random
import warnings
import zipfile

import pytest

from lib_pipeline import run, tree

STAMP = (2024, 2, 3, 4, 5, 6)


def zip_of(path, entries, method=zipfile.ZIP_DEFLATED):
    """entries: (name, kind f|d|l|c|p, data, mode[, link target]); returns path."""
    kinds = {"f": 0o100000, "d": 0o40000, "l": 0o120000, "c": 0o20000, "p": 0o10000}
    with zipfile.ZipFile(path, "w", method) as z:
        for e in entries:
            name, kind = e[0], e[1]
            data = e[2] if len(e) > 2 and e[2] is not None else b""
            mode = e[3] if len(e) > 3 and e[3] is not None else 0o644
            if kind == "l":
                data = e[4].encode()
            zi = zipfile.ZipInfo(name.rstrip("/") + "/" if kind == "d" else name,
                                 date_time=STAMP)
            zi.create_system = 3
            zi.external_attr = (kinds[kind] | mode) << 16
            zi.compress_type = method
            z.writestr(zi, data)
    return path


def listing(r):
    return sorted(r.out.splitlines())


def corpus(tmp_path):
    rng = random.Random(7)
    entries = [("pkg/", "d"), ("pkg/sub/", "d", None, 0o750)]
    for i in range(300):
        n = rng.choice([0, 10, 900, 20000, 70000])
        body = bytes(rng.getrandbits(8) for _ in range(n // 8)) + b"abc" * (n // 3)
        entries.append((f"pkg/m{i % 7}/f{i}.py", "f", body, 0o755 if i % 11 == 0 else 0o644))
    big = (b"".join(rng.getrandbits(32).to_bytes(4, "little") for _ in range(300000)) +
           b"\0" * (5 << 20))  # 6.1 MiB: past the libdeflate limit, streamed by zlib
    entries += [("pkg/lib/libbig.so", "f", big, 0o755),
                ("pkg/run", "f", b"#!/bin/sh\n", 0o4755),
                ("pkg/sub/l", "l", None, 0o777, "../run")]
    return entries


@pytest.mark.parametrize("parts", [1, 4])
def test_tree_equals_the_libarchive_path(tmp_path, parts):
    a = zip_of(str(tmp_path / "a.whl"), corpus(tmp_path))
    ref = run("unpack", a, tmp_path / "ref", "--list")
    assert ref.rc == 0, ref
    r = run("unpack", a, tmp_path / "out", "--list", "--zip-parts", parts)
    assert r.rc == 0, r
    assert listing(r) == listing(ref)
    assert tree(str(tmp_path / "out")) == tree(str(tmp_path / "ref"))
    assert os.stat(tmp_path / "out" / "pkg" / "run").st_mode & 0o7777 == 0o755  # set-uid dropped
    assert os.stat(tmp_path / "out" / "pkg" / "sub").st_mode & 0o7777 == 0o750
    assert len(listing(r)) == 305


def test_stored_entries(tmp_path):
    a = zip_of(str(tmp_path / "s.whl"), corpus(tmp_path)[:60], method=zipfile.ZIP_STORED)
    ref = run("unpack", a, tmp_path / "ref", "--list")
    r = run("unpack", a, tmp_path / "out", "--list", "--zip-parts", 3)
    assert r.rc == 0 and ref.rc == 0, (r, ref)
    assert listing(r) == listing(ref)


MALICIOUS_ZIP = [
    ("absolute", [("top/ok", "f", b"x"), ("/tmp/tfprov-evil-abs-zip", "f", b"x")], "absolute"),
    ("dotdot", [("top/../../evil", "f", b"x")], ".."),
    ("control_char", [("top/bad\x1bname", "f", b"x")], "control"),
    ("chardev", [("top/null", "c", None, 0o666)], "device"),
    ("fifo", [("top/fifo", "p", None, 0o644)], "FIFO"),
    ("symlink_abs", [("top/l", "l", None, 0o777, "/etc/passwd")], "symlink"),
    ("symlink_up", [("top/l", "l", None, 0o777, "../../../etc")], "symlink"),
    ("symlink_chain", [("top/a/", "d"), ("top/a/l1", "l", None, 0o777, "."),
                       ("top/a/l2", "l", None, 0o777, "l1/../../..")], "symlink"),
    ("write_through_symlink", [("top/d/", "d"), ("top/lnk", "l", None, 0o777, "d"),
                               ("top/lnk/f", "f", b"x")], "symlink"),
]


@pytest.mark.parametrize("case", MALICIOUS_ZIP, ids=[m[0] for m in MALICIOUS_ZIP])
def test_malicious_zip_refused_nothing_placed(tmp_path, case):
    name, entries, word = case
    (tmp_path / "stage").mkdir()
    # Filler entries so that the bad one lands in some share among several.
    filler = [(f"top/fill{i}", "f", b"y" * (i * 100)) for i in range(12)]
    a = zip_of(str(tmp_path / (name + ".zip")), filler + entries)
    before = sorted(os.listdir(tmp_path))
    r = run("unpack", a, tmp_path / "stage" / "dest", "--zip-parts", 3)
    assert r.rc == 5, r
    assert "unsafe" in r.err and word.lower() in r.err.lower(), r
    assert os.listdir(tmp_path / "stage") == []
    assert sorted(os.listdir(tmp_path)) == before
    assert not os.path.exists("/tmp/tfprov-evil-abs-zip")


def test_name_held_twice_is_refused(tmp_path):
    """Two entries of one name would be two decoders racing for one path (the
    libarchive path lets the later win): refused when the archive is opened."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
        a = zip_of(str(tmp_path / "twice.zip"), [("top/f", "f", b"one"), ("top/f", "f", b"two")])
    r = run("unpack", a, tmp_path / "out", "--zip-parts", 2)
    assert r.rc == 5, r
    assert "already exists" in r.err, r
    assert not (tmp_path / "out").exists()


def _flip_in_data(path, member):
    """Flips one byte in the middle of member's stored (compressed) data."""
    with zipfile.ZipFile(path) as z:
        zi = z.getinfo(member)
    data = bytearray(open(path, "rb").read())
    off = zi.header_offset + 30 + len(zi.filename.encode()) + len(zi.extra)
    data[off + zi.compress_size // 2] ^= 0x55
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("member", ["pkg/m3/f10.py", "pkg/lib/libbig.so"],
                         ids=["libdeflate-entry", "zlib-entry"])
def test_damaged_entry_is_exit_5_and_cleans_up(tmp_path, member):
    a = zip_of(str(tmp_path / "a.whl"), corpus(tmp_path))
    _flip_in_data(a, member)
    r = run("unpack", a, tmp_path / "out", "--zip-parts", 2)
    assert r.rc == 5, r
    assert "CRC" in r.err or "deflate" in r.err or "Zlib" in r.err or "zlib" in r.err, r.err
    assert not (tmp_path / "out").exists()


def test_truncated_zip_is_exit_5(tmp_path):
    a = zip_of(str(tmp_path / "a.whl"), corpus(tmp_path)[:50])
    data = open(a, "rb").read()
    open(a, "wb").write(data[: len(data) // 2])
    r = run("unpack", a, tmp_path / "out", "--zip-parts", 2)
    assert r.rc == 5, r
    assert "cannot open archive" in r.err, r
    assert not (tmp_path / "out").exists()


def test_names_read_as_zipfile_reads_them(tmp_path):
    a = str(tmp_path / "n.whl")
    with zipfile.ZipFile(a, "w") as z:
        z.writestr("pkg/donn\u00e9es.txt", b"utf8")  # zipfile sets the UTF-8 flag
        zi = zipfile.ZipInfo("pkg/x")
        z.writestr(zi, b"cp437")
    # An unflagged name with a high byte: rename the second entry in place.
    raw = bytearray(open(a, "rb").read())
    i = raw.find(b"pkg/x")
    while i >= 0:
        raw[i + 4] = 0x82  # CP437 e-acute
        i = raw.find(b"pkg/x", i + 1)
    open(a, "wb").write(bytes(raw))
    with zipfile.ZipFile(a) as z:
        names = sorted(z.namelist())
    r = run("unpack", a, tmp_path / "out", "--list", "--zip-parts", 2)
    assert r.rc == 0, r
    got = sorted(os.path.relpath(os.path.join(dp, f), tmp_path / "out")
                 for dp, _, fs in os.walk(tmp_path / "out") for f in fs)
    assert got == names == ["pkg/donn\u00e9es.txt", "pkg/\u00e9"], (got, names)

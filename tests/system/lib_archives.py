"""Builds archives for the unpack tests with tarfile/zipfile: good ones in every
format, and one malicious archive per refusal rule."""

import io
import os
import subprocess
import tarfile
import zipfile


def _add(tf, name, kind="f", data=b"", mode=0o644, link=None, devmajor=0):
    ti = tarfile.TarInfo(name)
    ti.mode = mode
    ti.mtime = 1700000000
    if kind == "f":
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
        return
    ti.type = {"d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE,
               "c": tarfile.CHRTYPE, "b": tarfile.BLKTYPE, "p": tarfile.FIFOTYPE}[kind]
    if link is not None:
        ti.linkname = link
    ti.devmajor = devmajor
    tf.addfile(ti)


def make_tar(path, entries, fmt=tarfile.PAX_FORMAT):
    """entries: list of (name, kind, data/None, mode, link). Written uncompressed,
    or compressed by the suffix (.gz/.bz2/.xz via tarfile, .zst via zstd(1))."""
    raw = path[:-4] if path.endswith(".zst") else path
    mode = "w"
    for suf, m in ((".gz", "w:gz"), (".tgz", "w:gz"), (".bz2", "w:bz2"), (".xz", "w:xz")):
        if raw.endswith(suf):
            mode = m
    with tarfile.open(raw, mode, format=fmt) as tf:
        for e in entries:
            name, kind = e[0], e[1]
            data = e[2] if len(e) > 2 and e[2] is not None else b""
            m = e[3] if len(e) > 3 and e[3] is not None else (0o755 if kind == "d" else 0o644)
            link = e[4] if len(e) > 4 else None
            _add(tf, name, kind, data, m, link)
    if path.endswith(".zst"):
        subprocess.run(["zstd", "-q", "-f", "--rm", raw, "-o", path], check=True)
    return path


def make_zip(path, entries):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for e in entries:
            name, kind = e[0], e[1]
            data = e[2] if len(e) > 2 and e[2] is not None else b""
            mode = e[3] if len(e) > 3 and e[3] is not None else 0o644
            if kind == "d":
                zi = zipfile.ZipInfo(name.rstrip("/") + "/")
                zi.external_attr = (0o40000 | 0o755) << 16
                z.writestr(zi, b"")
            elif kind == "l":
                zi = zipfile.ZipInfo(name)
                zi.create_system = 3
                zi.external_attr = (0o120000 | 0o777) << 16
                z.writestr(zi, e[4])
            else:
                zi = zipfile.ZipInfo(name)
                zi.create_system = 3
                zi.external_attr = (0o100000 | mode) << 16
                z.writestr(zi, data)
    return path


def make_conda(path, pkg_entries, info_entries, tmp):
    """A .conda: a zip (stored) of metadata.json, pkg-*.tar.zst and info-*.tar.zst."""
    base = os.path.basename(path)[:-6]
    pkg = make_tar(os.path.join(tmp, "pkg-%s.tar.zst" % base), pkg_entries)
    info = make_tar(os.path.join(tmp, "info-%s.tar.zst" % base), info_entries)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("metadata.json", '{"conda_pkg_format_version": 2}')
        z.write(pkg, os.path.basename(pkg))
        z.write(info, os.path.basename(info))
    return path


# One archive per refusal rule: (id, entries, what the message must mention).
MALICIOUS = [
    ("absolute", [("top/ok", "f", b"x"), ("/tmp/tfprov-evil-abs", "f", b"x")], "absolute"),
    ("dotdot", [("top/../../evil", "f", b"x")], ".."),
    ("dotdot_deep", [("top/a/../../../evil", "f", b"x")], ".."),
    ("control_char", [("top/bad\x1bname", "f", b"x")], "control"),
    ("newline", [("top/bad\nname", "f", b"x")], "control"),
    ("chardev", [("top/null", "c", None, 0o666)], "device"),
    ("blockdev", [("top/sda", "b", None, 0o666)], "device"),
    ("fifo", [("top/fifo", "p", None, 0o644)], "FIFO"),
    ("symlink_abs", [("top/l", "l", None, 0o777, "/etc/passwd")], "symlink"),
    ("symlink_up", [("top/l", "l", None, 0o777, "../../../etc")], "symlink"),
    ("symlink_chain", [("top/a/", "d"), ("top/a/l1", "l", None, 0o777, "."),
                       ("top/a/l2", "l", None, 0o777, "l1/../..")], "symlink"),
    ("hardlink_up", [("top/h", "h", None, 0o644, "../../etc/passwd")], ".."),
    ("hardlink_abs", [("top/h", "h", None, 0o644, "/etc/passwd")], "absolute"),
    ("write_through_symlink", [("top/d/", "d"), ("top/lnk", "l", None, 0o777, "d"),
                               ("top/lnk/f", "f", b"x")], "symlink"),
    ("symlink_then_file_over_dir_escape", [("top/lnk", "l", None, 0o777, "."),
                                           ("top/lnk/lnk/x", "f", b"x")], "symlink"),
]

#!/usr/bin/python3
"""Measures how far real archives expand: file data / archive size.

The bound tfprov's unpacker enforces when nothing declares an archive's
unpacked size is a ratio to its compressed size (UNPACK_BOMB_RATIO in
engine/artifact/artifact.h). This prints, for every archive named on the
command line (.deb: its data.tar.*; .whl/.zip; .tar.*; .conda), the bytes of
regular-file data it unpacks to, its size, and the ratio, then the largest
ratio seen. ARCHITECTURE.md quotes its output.

    scripts/unpack-ratios.py /var/cache/apt/archives/*.deb /usr/share/python-wheels/*.whl
"""
import io
import os
import sys
import tarfile
import zipfile


def tar_data(fileobj):
    total = 0
    with tarfile.open(fileobj=fileobj, mode="r|*") as t:
        for m in t:
            if m.isfile():
                total += m.size
    return total


def deb_data(path):
    """(compressed size of data.tar.*, its file data); .deb is an ar archive."""
    with open(path, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise ValueError("not an ar archive")
        while True:
            hdr = f.read(60)
            if len(hdr) < 60:
                raise ValueError("no data.tar member")
            name = hdr[:16].decode().strip().rstrip("/")
            size = int(hdr[48:58].decode().strip())
            if name.startswith("data.tar"):
                blob = f.read(size)
                if name.endswith(".zst"):
                    import zstandard  # noqa: only when a .zst member exists

                    blob = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob)).read()
                    return size, tar_data(io.BytesIO(blob))
                return size, tar_data(io.BytesIO(blob))
            f.seek(size + (size & 1), os.SEEK_CUR)


def measure(path):
    if path.endswith(".deb"):
        return deb_data(path)
    size = os.path.getsize(path)
    if path.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as z:
            return size, sum(i.file_size for i in z.infolist() if not i.is_dir())
    if path.endswith(".conda"):
        total = 0
        with zipfile.ZipFile(path) as z:
            for i in z.infolist():
                if i.filename.endswith(".tar.zst"):
                    import zstandard

                    raw = zstandard.ZstdDecompressor().stream_reader(z.open(i)).read()
                    total += tar_data(io.BytesIO(raw))
        return size, total
    with open(path, "rb") as f:
        return size, tar_data(f)


def main():
    worst = (0.0, None)
    n = 0
    for p in sys.argv[1:]:
        try:
            size, data = measure(p)
        except Exception as e:  # a format this script does not read: named, skipped
            print(f"skip\t{p}\t{e}", file=sys.stderr)
            continue
        if size <= 0:
            continue
        n += 1
        r = data / size
        print(f"{r:8.2f}\t{size}\t{data}\t{os.path.basename(p)}")
        if r > worst[0]:
            worst = (r, p)
    print(f"archives {n}; largest ratio {worst[0]:.2f} ({worst[1]})")


if __name__ == "__main__":
    main()

#!/bin/sh
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a
# bounded time from a seed corpus made of the test manifests, small archives
# of every format, and keys and signatures made by minisign. Part of
# scripts/test.sh; TFPROV_FUZZ_SECONDS (default 60) per target.
set -eu
cd "$(dirname "$0")/../.."
SECS=${TFPROV_FUZZ_SECONDS:-60}
B=build-fuzz
CC=clang cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Debug -DTFPROV_FUZZ=ON -DTFPROV_TESTS=OFF >/dev/null
cmake --build "$B" -j"$(nproc)" --target fuzz_manifest fuzz_unpack fuzz_minisign fuzz_wheelfmt
S=$(mktemp -d /tmp/tfprov-fuzz-seeds.XXXXXX)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/manifest" "$S/unpack" "$S/minisign" "$S/wheelfmt"
# fuzz_wheelfmt: wheel file names and RECORD rows, one a line.
printf '%s\n' 'tensorflow-2.20.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl' \
	'Tf_Keras-2.20.1-1-py3-none-any.whl' \
	'numpy/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0' \
	'"data/a,b ""c"".txt",,' '../../../bin/tb,,' >"$S/wheelfmt/seed"
(cd "$S/minisign" && minisign -G -W -p k.pub -s k.key >/dev/null && printf 'seed\n' >m &&
	minisign -S -s k.key -m m -x ed.sig && minisign -S -l -s k.key -m m -x legacy.sig && rm m)
cp manifests/*.yaml tests/manifests/*.yaml tests/manifests/guide/*.yaml "$S/manifest/"
/usr/bin/python3 - "$S/unpack" tests/fuzz/regressions <<'PY'
# fuzz_unpack reads a selector byte first: 0 = artifact path, 1 = conda path, 2 = wheel path.
import glob, io, os, shutil, subprocess, sys, tarfile, zipfile
out, regressions = sys.argv[1], sys.argv[2]
def save(name, data, sel=b"\0"):
    open(f"{out}/{name}", "wb").write(sel + data)
for f in glob.glob(f"{regressions}/unpack-*"):
    save(os.path.basename(f), open(f, "rb").read())
def tar(mode, name):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode=mode) as t:
        for n, data in (("top/lib/libx.so.1", b"x" * 100), ("top/include/x.h", b"#define X\n")):
            ti = tarfile.TarInfo(n); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("top/lib/libx.so"); ti.type = tarfile.SYMTYPE; ti.linkname = "libx.so.1"
        t.addfile(ti)
    return bio.getvalue()
for mode, name in (("w", "a.tar"), ("w:gz", "a.tgz"), ("w:bz2", "a.tbz"), ("w:xz", "a.txz")):
    save(name, tar(mode, name))
save("a.tbz.conda-path", tar("w:bz2", "p.tar.bz2"), b"\1")
bio = io.BytesIO()
with zipfile.ZipFile(bio, "w") as z:
    z.writestr("top/a.txt", "hello\n")
save("a.zip", bio.getvalue())
# The wheel path (selector 2): entries for libdeflate, one over 4 MiB for zlib, a stored one.
bio = io.BytesIO()
with zipfile.ZipFile(bio, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("pkg/__init__.py", "X = 1\n" * 50)
    z.writestr("pkg/sub/", "")
    z.writestr("pkg/big.so", b"\0" * (4 << 20) + b"tail")
    z.writestr(zipfile.ZipInfo("pkg/stored.txt"), "stored\n", zipfile.ZIP_STORED)
    z.writestr("pkg-1.0.dist-info/RECORD", "pkg/__init__.py,,\n")
save("a.whl", bio.getvalue(), b"\2")
# A .conda: a zip holding pkg-*.tar.zst and info-*.tar.zst (zstd if present, else a plain tar).
inner = tar("w", "inner.tar")
if shutil.which("zstd"):
    inner = subprocess.run(["zstd", "-q", "-c"], input=inner, stdout=subprocess.PIPE, check=True).stdout
bio = io.BytesIO()
with zipfile.ZipFile(bio, "w") as z:
    z.writestr("metadata.json", '{"conda_pkg_format_version": 2}')
    z.writestr("pkg-x-1.0-0.tar.zst", inner)
    z.writestr("info-x-1.0-0.tar.zst", inner)
save("a.conda", bio.getvalue(), b"\1")
PY
# Two targets at a time (this 2-core machine's CI minutes; each fuzzer is one
# process). A finding (crash, leak, timeout) fails the run: each fuzzer's own
# exit status is kept, and its report is shown whole.
fuzz() {
	"$B/fuzz_$1" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=1024 \
		-print_final_stats=1 -artifact_prefix="$B/" "$S/$1" >"$S/$1.log" 2>&1
	echo $? >"$S/$1.rc"
}
for pair in "manifest unpack" "minisign wheelfmt"; do
	for t in $pair; do
		echo "fuzz_$t: ${SECS}s"
		fuzz "$t" &
	done
	wait
	for t in $pair; do
		if [ "$(cat "$S/$t.rc")" != 0 ]; then
			grep -v '^#[0-9]' "$S/$t.log" | tail -60
			echo "fuzz_$t: FAILED (the input is in $B/; add it to tests/fuzz/regressions/)"
			exit 1
		fi
		tail -12 "$S/$t.log"
	done
done

#!/bin/sh
# README command 1: install what is missing, build, and run the main job:
# a real apply of a shipped-style manifest into a sandbox root against a
# local mirror, ending in the verify and benchmark steps.
#
# No GPU and no NVIDIA/PyPI access exist on the build machines: the mirror
# serves NVIDIA-layout archives holding stand-in libraries with the real
# sonames, and small wheels built here. Everything else is the real thing:
# HTTP on loopback, sha256 verification, libarchive, SQLite, venv and pip.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null

W=${TFPROV_DEMO_DIR:-/tmp/tfprov-demo}
rm -rf "$W"
mkdir -p "$W/mirror" "$W/root"
/usr/bin/python3 tests/system/lib_http.py --dir "$W/mirror" --port-file "$W/port" \
	>"$W/http.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$W/port" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(cat "$W/port")"
/usr/bin/python3 tests/fixtures/make_demo.py --out "$W/mirror" --url-base "$URL" \
	--stubs build/stubs/cuda12 --manifest "$W/demo.yaml" >/dev/null

T="./build/tfprov --root $W/root"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
step "tfprov validate manifests/stable-2.15.yaml"
./build/tfprov validate manifests/stable-2.15.yaml
step "tfprov plan manifests/stable-2.15.yaml   (what a real machine would get; no network used)"
mkdir -p "$W/plan-only"
# Exit 6 on a machine without a GPU: plan fails as apply would (the driver precondition).
set +e
./build/tfprov --root "$W/plan-only" plan manifests/stable-2.15.yaml
rc=$?
set -e
[ "$rc" -eq 0 ] || [ "$rc" -eq 6 ] || exit "$rc"
echo "(plan exit $rc; 6 = apply would stop at the driver precondition before any change)"
echo
echo "NOTE: this machine has no NVIDIA GPU. GPU checks are SKIPPED (--no-gpu), and the"
echo "      CUDA/cuDNN libraries in the demo mirror are stand-ins with the real sonames."
step "tfprov plan $W/demo.yaml"
$T --no-gpu plan "$W/demo.yaml"
step "tfprov apply $W/demo.yaml"
$T --no-gpu apply -y "$W/demo.yaml"
step "tfprov apply $W/demo.yaml   (again: must change nothing)"
$T --no-gpu apply -y "$W/demo.yaml"
step "tfprov status"
$T status
step "tfprov --no-gpu verify demo   (files and libraries; the GPU check is SKIPPED, loudly)"
$T --no-gpu verify demo
step "tfprov bench demo   (no GPU: must say so and exit 8)"
set +e
$T bench demo
rc=$?
set -e
echo "tfprov bench exited $rc"
[ "$rc" -eq 8 ]
echo
echo "Demo complete: sandbox root $W/root, state $W/root/var/lib/tfprov/state.db"
